-- coldwire catalog, version 1. Applied by the proxy at start through its service
-- connection, inside one transaction that holds the migration advisory lock.
-- Plain tables, sequences, views and plpgsql only; nothing needs superuser.

CREATE SCHEMA IF NOT EXISTS coldwire;
REVOKE CREATE ON SCHEMA coldwire FROM PUBLIC;
GRANT USAGE ON SCHEMA coldwire TO PUBLIC;

CREATE TABLE coldwire.meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

-- One row per tiered table. Keyed by a coldwire id; tracked by OID so renames on direct
-- connections are seen (schema_name/table_name are refreshed from pg_class when read).
CREATE TABLE coldwire.tables (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    relid          oid NOT NULL UNIQUE,
    schema_name    text NOT NULL,
    table_name     text NOT NULL,
    pk_attnums     smallint[] NOT NULL,
    columns        jsonb NOT NULL,
    policy         jsonb NOT NULL,
    generation     bigint NOT NULL DEFAULT 0,
    storage_prefix text NOT NULL,
    state          text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'untiering')),
    tiered_at      timestamptz NOT NULL DEFAULT now()
);

-- Mirror rows of every tiered table draw their seq from one sequence: nextval never
-- blocks, and seqs stay comparable across a table's history.
CREATE SEQUENCE coldwire.change_seq AS bigint;

CREATE TABLE coldwire.segments (
    segment_id           uuid PRIMARY KEY,
    table_id             bigint NOT NULL REFERENCES coldwire.tables (id) ON DELETE CASCADE,
    path                 text NOT NULL,
    status               text NOT NULL CHECK (status IN ('pending', 'active', 'retired')),
    row_count            bigint NOT NULL,
    byte_size            bigint NOT NULL,
    min_seq              bigint,
    max_seq              bigint,
    min_pk               bytea,
    max_pk               bytea,
    sha256               text NOT NULL,
    etag                 text,
    schema_version       integer NOT NULL,
    job_id               bigint NOT NULL,
    attempt              integer NOT NULL,
    activated_generation bigint,
    retired_generation   bigint,
    retired_xid          xid8,
    created_at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX segments_table_status ON coldwire.segments (table_id, status);

-- Per (segment, column) statistics from the Parquet footer, in an order-preserving
-- (memcomparable) byte encoding; rg_* arrays hold one entry per row group.
CREATE TABLE coldwire.segment_stats (
    segment_id    uuid NOT NULL REFERENCES coldwire.segments (segment_id) ON DELETE CASCADE,
    attnum        smallint NOT NULL,
    min_value     bytea,
    max_value     bytea,
    null_count    bigint,
    nan_count     bigint,
    rg_min        bytea[],
    rg_max        bytea[],
    rg_null_count bigint[],
    PRIMARY KEY (segment_id, attnum)
);

CREATE TABLE coldwire.jobs (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    table_id     bigint NOT NULL REFERENCES coldwire.tables (id) ON DELETE CASCADE,
    kind         text NOT NULL CHECK (kind IN ('flush', 'compact', 'gc', 'untier')),
    state        text NOT NULL DEFAULT 'pending'
                 CHECK (state IN ('pending', 'running', 'completed', 'failed')),
    attempt      integer NOT NULL DEFAULT 0,
    drain        boolean NOT NULL DEFAULT false,
    target_seq   bigint,
    rows_total   bigint,
    rows_done    bigint NOT NULL DEFAULT 0,
    segments     integer NOT NULL DEFAULT 0,
    error        text,
    claimed_by   text,
    heartbeat_at timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    started_at   timestamptz,
    finished_at  timestamptz
);
-- At most one active flush job per table.
CREATE UNIQUE INDEX jobs_one_active_flush ON coldwire.jobs (table_id)
    WHERE kind = 'flush' AND state IN ('pending', 'running');
CREATE INDEX jobs_pending ON coldwire.jobs (state, created_at) WHERE state IN ('pending', 'running');

-- Owner-only: transactions doing coldwire's own maintenance (the flush's prune), whose
-- writes capture must skip.
CREATE TABLE coldwire.maintenance (
    xid        xid8 PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON coldwire.maintenance FROM PUBLIC;

GRANT SELECT ON coldwire.tables, coldwire.segments, coldwire.segment_stats, coldwire.jobs TO PUBLIC;

-- Admin functions exist in Postgres only as stubs: calling them on a direct connection
-- fails clearly. coldwire intercepts the same calls made through it.
CREATE FUNCTION coldwire.call_through_coldwire(fn text) RETURNS jsonb
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'coldwire.% must be called through the coldwire proxy', fn
        USING ERRCODE = '0A000',
              HINT = 'connect to coldwire instead of directly to Postgres and call it again';
END
$$;

CREATE FUNCTION coldwire.tier_table(t regclass, policy jsonb DEFAULT NULL) RETURNS jsonb
LANGUAGE sql AS $$ SELECT coldwire.call_through_coldwire('tier_table') $$;
CREATE FUNCTION coldwire.set_policy(t regclass, policy jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT coldwire.call_through_coldwire('set_policy') $$;
CREATE FUNCTION coldwire.flush_table(t regclass, wait boolean DEFAULT false, drain boolean DEFAULT false) RETURNS jsonb
LANGUAGE sql AS $$ SELECT coldwire.call_through_coldwire('flush_table') $$;
