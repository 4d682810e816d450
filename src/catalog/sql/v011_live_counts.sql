-- coldwire catalog, version 11: coldwire.status's hot rows follow writes.
--
-- hot_rows and mirror_rows came from pg_class.reltuples once VACUUM or ANALYZE had set
-- it, so right after a flush deleted most of a table's hot rows coldwire.status still
-- showed the count of the last VACUUM (165,000 where the flush left 100,000). Postgres's
-- running count of live rows (n_live_tup) follows every insert and delete within seconds
-- (a backend reports its counts when it goes idle, at most every second or ten), and
-- VACUUM and ANALYZE reset it to what they found: it is used whenever the table has any
-- statistics activity, reltuples otherwise (a statistics reset, a table never written).
-- The flush's policy check reads the same count.
CREATE OR REPLACE FUNCTION coldwire.estimated_rows(rel regclass) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
             WHEN pg_stat_get_tuples_inserted(c.oid) + pg_stat_get_tuples_deleted(c.oid)
                  + pg_stat_get_vacuum_count(c.oid) + pg_stat_get_autovacuum_count(c.oid)
                  + pg_stat_get_analyze_count(c.oid) + pg_stat_get_autoanalyze_count(c.oid) > 0
               THEN pg_stat_get_live_tuples(c.oid)
             WHEN c.reltuples >= 0 THEN c.reltuples::bigint
             ELSE 0
           END
    FROM pg_class c
    WHERE c.oid = rel
$$;
