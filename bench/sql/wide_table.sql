-- bench/sql/wide_table.sql: a realistic, wide (50-column) events table for the insert and
-- flush benchmarks. Fill it with bench/sql/wide_insert.sql.
--
--   psql -v name=events -f bench/sql/wide_table.sql
--
-- Variable: name, the table name (quoted as an identifier, so it may not be
-- schema-qualified; the table goes to the first schema of search_path).
--
-- The table is tierable by coldwire (DESIGN §3): a bigint primary key and no other unique
-- constraint, no foreign keys, no row triggers, and only types coldwire stores cold
-- (int2/4/8, float8, text, bool, timestamptz, jsonb). Columns: id, 25 text, 10 integer,
-- 7 double precision, 4 boolean, 2 timestamptz, 1 jsonb.

\set ON_ERROR_STOP on

CREATE TABLE :"name" (
    id                  bigint PRIMARY KEY,
    tenant_id           integer NOT NULL,
    event_type          text NOT NULL,          -- page_view, click, add_to_cart, ...
    event_source        text NOT NULL,          -- web, ios, android, api, server
    session_id          text NOT NULL,          -- 24 hex characters, ~25 events per session
    user_ref            text,                   -- usr_<n>, NULL when not logged in
    anonymous_id        text NOT NULL,          -- uuid-shaped text
    sequence_no         bigint NOT NULL,        -- position in the session
    occurred_at         timestamptz NOT NULL,
    received_at         timestamptz NOT NULL,
    country_code        text,                   -- ISO 3166 alpha-2
    city                text,
    locale              text,                   -- en-US, de-DE, ...
    timezone            text,                   -- IANA zone name
    latitude            double precision,
    longitude           double precision,
    ip_address          text,
    ua_browser          text,
    ua_browser_version  text,
    ua_os               text,
    ua_os_version       text,
    ua_device           text,                   -- desktop, mobile, tablet
    screen_width        integer,
    screen_height       integer,
    viewport_width      integer,
    viewport_height     integer,
    app_version         text,
    page_url            text,
    page_path           text,
    referrer_url        text,                   -- NULL for a quarter of the rows
    utm_source          text,                   -- utm_*: set for a third of the rows
    utm_medium          text,
    utm_campaign        text,
    experiment_variant  text,                   -- control, a, b
    request_id          text NOT NULL,          -- 16 hex characters
    http_method         text,
    status_code         smallint,
    duration_ms         integer,
    bytes_sent          bigint,
    load_time_s         double precision,
    scroll_depth        double precision,       -- 0 .. 1
    item_count          smallint,
    revenue             double precision,       -- purchases only
    discount            double precision,       -- purchases only
    score               double precision,       -- 0 .. 1
    is_bot              boolean NOT NULL,
    is_logged_in        boolean NOT NULL,
    is_first_visit      boolean NOT NULL,
    consent_given       boolean NOT NULL,
    properties          jsonb                   -- a small object: plan, cart_size, dark_mode, ...
);
