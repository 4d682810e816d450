-- coldwire catalog, version 4: reads that keep working across flushes and inside
-- transactions (DESIGN §6.4). Per-table objects (capture functions, overrides tables) are
-- brought up to date by catalog::migrate after this file (CaptureSpec::upgrade).

-- The guard takes the plan of a read as one jsonb parameter, so a prepared statement keeps
-- working across flushes: plan = {"planned": G} says the cold rows were read from the
-- segments active at generation G, with the overrides of G; the statement's snapshot must
-- see exactly generation G, or it fails with 40001 and coldwire plans again (outside a
-- transaction block) or the client retries.
--
-- plan = {"refusal": {"code": C, "message": M, "hint": H}} raises that error instead: how
-- coldwire fails a read it cannot plan at Bind, in protocol order, and only if the
-- statement reaches the table at all.
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
            USING ERRCODE = '40001', HINT = 'Retry the statement.',
                  DETAIL = pg_catalog.format('planned for generation %s, the snapshot sees %s', plan ->> 'planned', found_generation);
    END IF;
    RETURN true;
END
$coldwire$;
GRANT EXECUTE ON FUNCTION coldwire.guard(bigint, jsonb, text) TO PUBLIC;

-- Called by coldwire in a client's transaction block before its first read of these
-- tables: the generation each one has in the transaction's snapshot, so the read is
-- planned for exactly that generation (an older one, under REPEATABLE READ, after a flush
-- finalized since the snapshot). Under READ COMMITTED every statement takes a new
-- snapshot, so the tables' locks are taken shared first (finalize takes them exclusively):
-- no flush of these tables finalizes until the transaction ends, and every later statement
-- of it sees the generation returned here. The class is catalog::locks::TABLE_LOCK_CLASS.
CREATE OR REPLACE FUNCTION coldwire.read_lock(table_ids bigint[])
RETURNS TABLE (table_id bigint, generation bigint) LANGUAGE plpgsql VOLATILE AS $coldwire$
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
        PERFORM pg_catalog.pg_advisory_xact_lock_shared({{table_lock_class}}, id::integer)
        FROM pg_catalog.unnest(table_ids) AS id ORDER BY id;
    END IF;
    RETURN QUERY SELECT t.id, t.generation FROM coldwire.tables t WHERE t.id = ANY (table_ids);
END
$coldwire$;
GRANT EXECUTE ON FUNCTION coldwire.read_lock(bigint[]) TO PUBLIC;
