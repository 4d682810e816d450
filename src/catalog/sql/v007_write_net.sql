-- coldwire catalog, version 7: no write misses cold rows unseen (DESIGN §7.1).
--
-- The capture function of every tiered table (made again by the capture upgrade that runs
-- with this step) accepts an UPDATE or DELETE, MERGE and upserts included, only when
-- coldwire planned that very statement: coldwire marks it in the transaction just before
-- it runs (below), with the md5 of its text, and the capture function checks that the
-- statement running is a top-level one (not inside a function, procedure, DO block or
-- trigger) whose text carries that mark. Anything else fails with SQLSTATE CW001 instead
-- of missing the table's cold rows: writes inside Postgres, writes through views and
-- rules, and writes on connections that do not go through coldwire.
-- `SET coldwire.hot_only_writes = on` lets a session write hot rows only, on purpose.

-- Marks a statement as planned by coldwire in the current transaction. The mark is the
-- md5 of the statement's text as the server reads it: `digest` when coldwire computed it
-- (the session sends UTF-8, the server's encoding, or ASCII), else the md5 of
-- `statement`. It goes into the transaction-local setting coldwire.planned: `append`
-- keeps the marks already there (statements of one Query string whose rows coldwire
-- brought back ahead of all of them), otherwise the mark replaces them.
CREATE OR REPLACE FUNCTION coldwire.plan_write(digest text, statement text, append boolean)
RETURNS void LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $coldwire$
    SELECT pg_catalog.set_config('coldwire.planned',
        CASE WHEN append THEN COALESCE(pg_catalog.current_setting('coldwire.planned', true) || ' ', '') ELSE '' END
            || COALESCE(digest, pg_catalog.md5(statement)),
        true)
$coldwire$;
REVOKE ALL ON FUNCTION coldwire.plan_write(text, text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION coldwire.plan_write(text, text, boolean) TO PUBLIC;

-- coldwire.rehydrate (catalog v5) that also marks the statement planned, as plan_write.
CREATE OR REPLACE FUNCTION coldwire.rehydrate(table_id bigint, planned bigint, cold anyarray, absent jsonb,
                                              digest text, statement text, append boolean)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $coldwire$
BEGIN
    PERFORM coldwire.plan_write(digest, statement, append);
    RETURN coldwire.rehydrate(table_id, planned, cold, absent);
END
$coldwire$;
REVOKE ALL ON FUNCTION coldwire.rehydrate(bigint, bigint, anyarray, jsonb, text, text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION coldwire.rehydrate(bigint, bigint, anyarray, jsonb, text, text, boolean) TO PUBLIC;
