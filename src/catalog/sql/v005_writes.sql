-- coldwire catalog, version 5: writes that reach cold rows (DESIGN §7).

-- Brings cold rows back into the heap of tiered table `table_id` in the caller's
-- transaction, before a statement that may touch them runs (coldwire sends it as its own
-- statement just before the client's): `cold` holds them as an array of the table's row
-- type, read by coldwire from the segments of generation `planned`.
--
-- 1. The table's lock is taken shared (finalize takes it exclusively) and the generation
--    checked, so no flush can move rows between this and the end of the transaction; a
--    finalize that slipped in since coldwire planned fails the statement with 40001 (coldwire
--    retries it unseen where it can).
-- 2. Each key is claimed in the mirror first (op 4, rehydrated; ON CONFLICT DO NOTHING):
--    a key already there is live or deleted in the heap and must not come back.
-- 3. The heap rows of the claimed keys are inserted (capture then records them live).
-- 4. `absent` (a jsonb array of key objects, or NULL) names keys the statement may
--    create that coldwire found in no segment of generation `planned`: each is claimed
--    as deleted (op 3; ON CONFLICT DO NOTHING) where it lies within the bounds of the
--    cold keys (`coldwire.bounds_<id>`, below), so the capture check lets the statement
--    write it (outside them the check passes it anyway).
--
-- SECURITY DEFINER, so any role may claim mirror rows; it must be a role whose session
-- user could insert into the table (directly or by SET ROLE), since the rows come from the
-- caller: rehydration lets nobody write what they could not write anyway.
CREATE OR REPLACE FUNCTION coldwire.rehydrate(table_id bigint, planned bigint, cold anyarray, absent jsonb)
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
REVOKE ALL ON FUNCTION coldwire.rehydrate(bigint, bigint, anyarray, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION coldwire.rehydrate(bigint, bigint, anyarray, jsonb) TO PUBLIC;

-- coldwire.bounds_<id> (created with a table's capture objects; catalog v5 adds it to
-- tables tiered before) holds at most one row: the lowest and highest value of the first
-- primary-key column any segment of the table was written with (a superset: bounds
-- only grow until TRUNCATE empties them), or NULLs while they are unknown (a table with
-- segments from before v5). The capture function checks every key a statement creates
-- that is not in the mirror against it: inside them the key may exist cold, and the
-- statement fails with 55000 naming such keys (coldwire then brings them back and runs
-- the statement again, unseen, where it can).
