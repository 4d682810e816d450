-- coldwire catalog, version 1. Applied by catalog::migrate through the service connection,
-- in one transaction that holds the migration advisory lock, with
-- search_path = pg_catalog, pg_temp: every coldwire name below is schema-qualified.
-- Schema coldwire and coldwire.meta exist already (migrate creates them before reading the
-- version). Plain tables, sequences, views and plpgsql only; nothing needs superuser.

-- Only the catalog's owner creates objects here: a role that could add or replace a
-- function in this schema could run code as whoever calls it.
REVOKE CREATE ON SCHEMA coldwire FROM PUBLIC;
GRANT USAGE ON SCHEMA coldwire TO PUBLIC;

-- One row per tiered table. Keyed by a coldwire id (the relid changes on dump/restore) and
-- tracked by relid, so renames on direct connections are seen: schema_name/table_name are
-- the names when last seen by coldwire; readers join pg_class by relid for the current ones.
CREATE TABLE coldwire.tables (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    relid          oid NOT NULL UNIQUE,
    schema_name    text NOT NULL,
    table_name     text NOT NULL,
    pk_attnums     smallint[] NOT NULL CHECK (cardinality(pk_attnums) > 0),
    -- By attnum: name, type oid, typmod, cold encoding.
    columns        jsonb NOT NULL,
    policy         jsonb NOT NULL DEFAULT '{}',
    generation     bigint NOT NULL DEFAULT 0,
    -- Objects of different tables never share a prefix, even after renames.
    storage_prefix text NOT NULL UNIQUE,
    -- tiering: capture installed, mirror being seeded; dropped: the table is gone, its
    -- objects are still to be collected.
    state          text NOT NULL DEFAULT 'tiering'
                   CHECK (state IN ('tiering', 'active', 'untiering', 'dropped')),
    tiered_at      timestamptz NOT NULL DEFAULT now()
);

-- Mirror rows of every tiered table draw their seq from one sequence: nextval never
-- blocks, and seqs stay comparable across a table's history.
CREATE SEQUENCE coldwire.change_seq AS bigint;

-- The catalog is the authority on which objects exist: a table's row cannot be deleted
-- while segments still name it (no ON DELETE CASCADE), so no object is forgotten.
CREATE TABLE coldwire.segments (
    segment_id           uuid PRIMARY KEY,
    table_id             bigint NOT NULL REFERENCES coldwire.tables (id),
    -- Object key under the table's storage_prefix.
    path                 text NOT NULL,
    status               text NOT NULL CHECK (status IN ('pending', 'active', 'retired')),
    row_count            bigint NOT NULL CHECK (row_count >= 0),
    byte_size            bigint NOT NULL CHECK (byte_size >= 0),
    min_seq              bigint,
    max_seq              bigint,
    -- pk bounds in the order-preserving (memcomparable) encoding of segment_stats.
    min_pk               bytea,
    max_pk               bytea,
    sha256               text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    etag                 text,
    schema_version       integer NOT NULL,
    -- The job and attempt (fencing token) that wrote it. No foreign key: job history may
    -- be pruned while the segment lives on.
    job_id               bigint NOT NULL,
    attempt              integer NOT NULL,
    activated_generation bigint,
    retired_generation   bigint,
    retired_xid          xid8,
    created_at           timestamptz NOT NULL DEFAULT now(),
    UNIQUE (table_id, path)
);
CREATE INDEX segments_table_status ON coldwire.segments (table_id, status);
CREATE INDEX segments_job ON coldwire.segments (job_id, attempt);

-- Per (segment, column) statistics from the Parquet footer, in an order-preserving
-- (memcomparable) byte encoding; rg_* arrays hold one entry per row group. They hold
-- column values, so like pg_statistic they are readable by the owner only.
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
    rg_nan_count  bigint[],
    PRIMARY KEY (segment_id, attnum)
);

CREATE TABLE coldwire.jobs (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    table_id     bigint NOT NULL REFERENCES coldwire.tables (id) ON DELETE CASCADE,
    kind         text NOT NULL CHECK (kind IN ('flush', 'compact', 'gc', 'untier')),
    state        text NOT NULL DEFAULT 'pending'
                 CHECK (state IN ('pending', 'running', 'completed', 'failed')),
    -- Fencing token: incremented on every claim, carried by segments and the finalize.
    attempt      integer NOT NULL DEFAULT 0,
    drain        boolean NOT NULL DEFAULT false,
    -- The selection cutoff, recorded so that a retry selects the same rows.
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
CREATE INDEX jobs_queue ON coldwire.jobs (state, created_at) WHERE state IN ('pending', 'running');
CREATE INDEX jobs_table ON coldwire.jobs (table_id, finished_at);

-- Owner-only: transactions doing coldwire's own maintenance (the flush's prune), whose
-- writes capture must skip.
CREATE TABLE coldwire.maintenance (
    xid        xid8 PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON coldwire.maintenance FROM PUBLIC;

-- Any role may read the catalog's metadata (as it may read pg_class). Segments (pk bounds)
-- and jobs (error texts) are shown only for tables the reader may SELECT; the owner, and
-- so the proxy's service connection and the views below, see every row.
GRANT SELECT ON coldwire.tables, coldwire.segments, coldwire.jobs TO PUBLIC;
REVOKE ALL ON coldwire.segment_stats FROM PUBLIC;
ALTER TABLE coldwire.segments ENABLE ROW LEVEL SECURITY;
CREATE POLICY readable_table ON coldwire.segments FOR SELECT TO PUBLIC
    USING (EXISTS (SELECT 1 FROM coldwire.tables t
                   WHERE t.id = table_id AND has_table_privilege(t.relid, 'SELECT')));
ALTER TABLE coldwire.jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY readable_table ON coldwire.jobs FOR SELECT TO PUBLIC
    USING (EXISTS (SELECT 1 FROM coldwire.tables t
                   WHERE t.id = table_id AND has_table_privilege(t.relid, 'SELECT')));

-- Row estimate of a relation without reading it: pg_class.reltuples once VACUUM or
-- ANALYZE has set it, else the statistics system's live-tuple count (n_live_tup of
-- pg_stat_user_tables). Takes no lock. NULL for a relation that does not exist.
CREATE FUNCTION coldwire.estimated_rows(rel regclass) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN c.reltuples >= 0 THEN c.reltuples::bigint
                ELSE pg_stat_get_live_tuples(c.oid) END
    FROM pg_class c
    WHERE c.oid = rel
$$;

-- Whether the current role may tier, untier, flush or set the policy of t (DESIGN §8):
-- the table's owner (or a member of the owning role) or a member of coldwire_admin. The
-- role may not exist (the service role could not create it): then only owners may.
CREATE FUNCTION coldwire.can_manage(t regclass) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce((SELECT pg_has_role(c.relowner, 'USAGE') FROM pg_class c WHERE c.oid = t), false)
        OR EXISTS (SELECT 1 FROM pg_roles r
                   WHERE r.rolname = 'coldwire_admin' AND pg_has_role(r.oid, 'MEMBER'))
$$;

-- Per tiered table, without scanning any table: names follow renames (by relid; the
-- stored names when the table is gone), hot and mirror rows are estimates
-- (coldwire.estimated_rows), cold rows and bytes sum the active segments (cold rows count
-- stored versions, tombstones and superseded versions included), last_flush is the end of
-- the newest completed flush, queued_jobs counts pending and running jobs of any kind.
CREATE VIEW coldwire.status AS
SELECT t.id AS table_id,
       coalesce(n.nspname, t.schema_name) AS schema_name,
       coalesce(c.relname, t.table_name) AS table_name,
       t.state,
       coldwire.estimated_rows(c.oid) AS hot_rows,
       coldwire.estimated_rows(m.oid) AS mirror_rows,
       coalesce(seg.cold_rows, 0) AS cold_rows,
       coalesce(seg.cold_bytes, 0) AS cold_bytes,
       seg.segments,
       t.generation,
       job.last_flush,
       job.queued_jobs
FROM coldwire.tables t
LEFT JOIN pg_class c ON c.oid = t.relid
LEFT JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_class m ON m.relname = ('m_' || t.id)::name AND m.relnamespace = 'coldwire'::regnamespace
CROSS JOIN LATERAL (
    SELECT sum(s.row_count)::bigint AS cold_rows,
           sum(s.byte_size)::bigint AS cold_bytes,
           count(*) AS segments
    FROM coldwire.segments s
    WHERE s.table_id = t.id AND s.status = 'active'
) seg
CROSS JOIN LATERAL (
    SELECT max(j.finished_at) FILTER (WHERE j.kind = 'flush' AND j.state = 'completed') AS last_flush,
           count(*) FILTER (WHERE j.state IN ('pending', 'running')) AS queued_jobs
    FROM coldwire.jobs j
    WHERE j.table_id = t.id
) job;
GRANT SELECT ON coldwire.status TO PUBLIC;

-- Admin functions exist in Postgres only as stubs: calling one on a direct connection
-- fails clearly. coldwire intercepts the same calls made through it (DESIGN §8).
CREATE FUNCTION coldwire.call_through_coldwire(fn text) RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'coldwire.% must be called through the coldwire proxy', fn
        USING ERRCODE = 'feature_not_supported',
              HINT = 'Connect to coldwire instead of directly to Postgres and call it again.';
END
$$;

CREATE FUNCTION coldwire.tier_table(t regclass, policy jsonb DEFAULT NULL) RETURNS jsonb
LANGUAGE sql AS $$ SELECT coldwire.call_through_coldwire('tier_table') $$;
CREATE FUNCTION coldwire.untier_table(t regclass) RETURNS jsonb
LANGUAGE sql AS $$ SELECT coldwire.call_through_coldwire('untier_table') $$;
CREATE FUNCTION coldwire.set_policy(t regclass, policy jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT coldwire.call_through_coldwire('set_policy') $$;
CREATE FUNCTION coldwire.flush_table(t regclass, wait boolean DEFAULT false, drain boolean DEFAULT false)
RETURNS jsonb
LANGUAGE sql AS $$ SELECT coldwire.call_through_coldwire('flush_table') $$;
CREATE FUNCTION coldwire.compact_table(t regclass, wait boolean DEFAULT false) RETURNS jsonb
LANGUAGE sql AS $$ SELECT coldwire.call_through_coldwire('compact_table') $$;
CREATE FUNCTION coldwire.explain(sql text) RETURNS text
LANGUAGE sql AS $$ SELECT coldwire.call_through_coldwire('explain')::text $$;
