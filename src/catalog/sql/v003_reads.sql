-- coldwire catalog, version 3: merged reads (DESIGN §6). Per-table objects of tables tiered
-- by older builds (the overrides table, the mirror's read access) are brought up to date by
-- catalog::migrate after this file (CaptureSpec::upgrade).

-- The guard of a rewritten read (DESIGN §6.4), called once per table reference in the
-- statement's snapshot: the cold rows the proxy bound belong to generation `expected`; if
-- this snapshot sees another one (a flush or TRUNCATE committed in between), the statement
-- fails with 40001 and is retried. `written` is the table name as the client wrote it when
-- unqualified: it must resolve, under the session's search_path, to the tiered table the
-- proxy planned for (a temporary table or another schema may shadow it). No SET
-- search_path, so that to_regclass sees the caller's; every name inside is qualified.
CREATE OR REPLACE FUNCTION coldwire.guard(table_id bigint, expected bigint, written text)
RETURNS boolean LANGUAGE plpgsql STABLE PARALLEL SAFE AS $coldwire$
DECLARE
    found_generation bigint;
    found_relid oid;
BEGIN
    SELECT t.generation, t.relid INTO found_generation, found_relid
    FROM coldwire.tables t WHERE t.id = table_id;
    IF written IS NOT NULL
       AND pg_catalog.to_regclass(written) IS DISTINCT FROM found_relid::pg_catalog.regclass THEN
        RAISE EXCEPTION 'coldwire: % does not name the tiered table % in this session', written, found_relid::pg_catalog.regclass
            USING ERRCODE = '0A000',
                  HINT = 'search_path or a temporary table makes the name resolve elsewhere; schema-qualify the table name.';
    END IF;
    IF found_generation IS DISTINCT FROM expected THEN
        RAISE EXCEPTION 'coldwire: the cold tier of % changed as the statement started', found_relid::pg_catalog.regclass
            USING ERRCODE = '40001', HINT = 'Retry the statement.';
    END IF;
    RETURN true;
END
$coldwire$;
GRANT EXECUTE ON FUNCTION coldwire.guard(bigint, bigint, text) TO PUBLIC;
