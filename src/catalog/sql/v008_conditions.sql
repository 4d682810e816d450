-- coldwire catalog, version 8: the errors coldwire acts on carry a name of their own.
--
-- coldwire runs a statement again when the cold tier changed as it started (40001 from
-- coldwire.guard or coldwire.rehydrate) or when it wrote keys that may exist cold (55000
-- from a capture function, made again by the capture upgrade that runs with this step).
-- Those errors now name their condition in the error's constraint field
-- (catalog::conditions in the source), so coldwire recognises them by that name and never
-- by their message text. Both bodies are those of versions 4 and 7 with that field added.

CREATE OR REPLACE FUNCTION coldwire.guard(table_id bigint, plan jsonb, written text)
RETURNS boolean LANGUAGE plpgsql STABLE PARALLEL SAFE AS $coldwire$
DECLARE
    found_generation bigint;
    found_relid oid;
    refusal jsonb := plan -> 'refusal';
BEGIN
    IF refusal IS NOT NULL THEN
        IF refusal ? 'hint' THEN
            RAISE EXCEPTION USING ERRCODE = refusal ->> 'code', MESSAGE = refusal ->> 'message',
                HINT = refusal ->> 'hint';
        END IF;
        RAISE EXCEPTION USING ERRCODE = refusal ->> 'code', MESSAGE = refusal ->> 'message';
    END IF;
    SELECT t.generation, t.relid INTO found_generation, found_relid
    FROM coldwire.tables t WHERE t.id = table_id;
    IF written IS NOT NULL
       AND pg_catalog.to_regclass(written) IS DISTINCT FROM found_relid::pg_catalog.regclass THEN
        RAISE EXCEPTION 'coldwire: % does not name the tiered table % in this session', written, found_relid::pg_catalog.regclass
            USING ERRCODE = '0A000',
                  HINT = 'search_path or a temporary table makes the name resolve elsewhere; schema-qualify the table name.';
    END IF;
    IF found_generation IS DISTINCT FROM (plan ->> 'planned')::bigint THEN
        RAISE EXCEPTION 'coldwire: the cold tier of % changed as the statement started', found_relid::pg_catalog.regclass
            USING ERRCODE = '40001', CONSTRAINT = '{{cold_tier_changed}}', HINT = 'Retry the statement.',
                  DETAIL = pg_catalog.format('planned for generation %s, the snapshot sees %s', plan ->> 'planned', found_generation);
    END IF;
    RETURN true;
END
$coldwire$;

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
            USING ERRCODE = '40001', CONSTRAINT = '{{cold_tier_changed}}', HINT = 'Retry the statement.',
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
