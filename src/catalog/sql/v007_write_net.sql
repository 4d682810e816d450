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

-- coldwire.rehydrate (catalog v5) that first marks the statement planned, as plan_write
-- does: one function call per write (the body is v5's, not a call of it, which cost a
-- nested SECURITY DEFINER call per write in bench/writes).
CREATE OR REPLACE FUNCTION coldwire.rehydrate(table_id bigint, planned bigint, cold anyarray, absent jsonb,
                                              digest text, statement text, append boolean)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $coldwire$
DECLARE
    t record;
    pk text;
    c_pk text;
    m_c text;
    first_column name;
    found_generation bigint;
    n bigint;
BEGIN
    PERFORM pg_catalog.set_config('coldwire.planned',
        CASE WHEN append THEN COALESCE(pg_catalog.current_setting('coldwire.planned', true) || ' ', '') ELSE '' END
            || COALESCE(digest, pg_catalog.md5(statement)),
        true);
    SELECT x.relid, x.pk_attnums INTO t FROM coldwire.tables x WHERE x.id = table_id AND x.state = 'active';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'coldwire: table % is not tiered', table_id USING ERRCODE = '55000';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                   WHERE pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER')
                     AND pg_catalog.has_table_privilege(r.oid, t.relid, 'INSERT')) THEN
        RAISE EXCEPTION 'permission denied to bring cold rows of % back into the heap', t.relid::pg_catalog.regclass
            USING ERRCODE = '42501', HINT = 'Writing rows of a tiered table that are cold needs INSERT privilege on it.';
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock_shared({{table_lock_class}}, table_id::integer);
    SELECT x.generation INTO found_generation FROM coldwire.tables x WHERE x.id = table_id;
    IF found_generation IS DISTINCT FROM planned THEN
        RAISE EXCEPTION 'coldwire: the cold tier of % changed as the statement started', t.relid::pg_catalog.regclass
            USING ERRCODE = '40001', HINT = 'Retry the statement.',
                  DETAIL = pg_catalog.format('planned for generation %s, the table is at %s', planned, found_generation);
    END IF;
    n := 0;
    IF (cold IS NULL OR pg_catalog.cardinality(cold) = 0)
       AND (absent IS NULL OR pg_catalog.jsonb_array_length(absent) = 0) THEN
        RETURN 0;
    END IF;
    SELECT pg_catalog.string_agg(pg_catalog.format('%I', a.attname), ', ' ORDER BY k.ord),
           pg_catalog.string_agg(pg_catalog.format('c.%I', a.attname), ', ' ORDER BY k.ord),
           pg_catalog.string_agg(pg_catalog.format('m.%1$I = c.%1$I', a.attname), ' AND ' ORDER BY k.ord),
           (pg_catalog.array_agg(a.attname ORDER BY k.ord))[1]
      INTO pk, c_pk, m_c, first_column
      FROM pg_catalog.unnest(t.pk_attnums) WITH ORDINALITY AS k(attnum, ord)
      JOIN pg_catalog.pg_attribute a ON a.attrelid = t.relid AND a.attnum = k.attnum;
    IF cold IS NOT NULL AND pg_catalog.cardinality(cold) > 0 THEN
    EXECUTE pg_catalog.format(
        'WITH claimed AS (INSERT INTO coldwire.m_%s AS m (%s, seq, op, xid) '
        'SELECT %s, pg_catalog.nextval(''coldwire.change_seq''), 4, pg_catalog.pg_current_xact_id() '
        'FROM pg_catalog.unnest($1) AS c ON CONFLICT DO NOTHING RETURNING %s) '
        'INSERT INTO %s OVERRIDING SYSTEM VALUE SELECT c.* FROM pg_catalog.unnest($1) AS c '
        'WHERE EXISTS (SELECT 1 FROM claimed m WHERE %s)',
        table_id, pk, c_pk, pk, t.relid::pg_catalog.regclass, m_c) USING cold;
    GET DIAGNOSTICS n = ROW_COUNT;
    END IF;
    IF absent IS NOT NULL AND pg_catalog.jsonb_array_length(absent) > 0 THEN
        EXECUTE pg_catalog.format(
            'INSERT INTO coldwire.m_%s (%s, seq, op, xid) '
            'SELECT %s, pg_catalog.nextval(''coldwire.change_seq''), 3, pg_catalog.pg_current_xact_id() '
            'FROM pg_catalog.jsonb_populate_recordset(NULL::coldwire.m_%s, $1) AS c, coldwire.bounds_%s b '
            'WHERE b.lo IS NULL OR c.%I BETWEEN b.lo AND b.hi ON CONFLICT DO NOTHING',
            table_id, pk, c_pk, table_id, table_id, first_column) USING absent;
    END IF;
    RETURN n;
END
$coldwire$;
REVOKE ALL ON FUNCTION coldwire.rehydrate(bigint, bigint, anyarray, jsonb, text, text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION coldwire.rehydrate(bigint, bigint, anyarray, jsonb, text, text, boolean) TO PUBLIC;
