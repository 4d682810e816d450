//! The DDL that makes a table tiered (DESIGN §4): its mirror, the capture function and the
//! statement-level triggers that keep the mirror current. Built from catalog identifiers
//! only (always quoted), never from data.

/// A tiered table as the DDL needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureSpec {
    /// coldwire's id of the table.
    pub id: i64,
    pub schema: String,
    pub table: String,
    /// Primary-key columns in key order: name and SQL type (`format_type` output).
    pub pk: Vec<(String, String)>,
}

pub use crate::segment::op;
use crate::sql::quote::{column_list, pk_equal, quote_ident, sql_literal};

/// Names of the capture triggers, one per event (transition tables allow one event each).
pub const TRIGGERS: [&str; 4] = [
    "coldwire_capture_insert",
    "coldwire_capture_update",
    "coldwire_capture_delete",
    "coldwire_capture_truncate",
];

/// The row-level trigger that checks the keys an UPDATE moved against the cold tier
/// ([`CaptureSpec::keys_trigger`]): an UPDATE whose rows all keep their keys writes only
/// keys already in the mirror, so the statement-level capture no longer checks every
/// UPDATE (a query of about 11 µs on each).
pub const KEYS_TRIGGER: &str = "coldwire_capture_keys";

impl CaptureSpec {
    /// `"schema"."table"`.
    pub fn qualified_table(&self) -> String {
        crate::sql::quote::qualified_ident(&self.schema, &self.table)
    }

    /// `coldwire.m_<id>`.
    pub fn mirror(&self) -> String {
        format!("coldwire.m_{}", self.id)
    }

    /// `coldwire.overrides_<id>`: keys with more than one cold version, with the newest
    /// cold seq (DESIGN §3).
    pub fn overrides(&self) -> String {
        format!("coldwire.overrides_{}", self.id)
    }

    /// `coldwire.bounds_<id>`: the range of the first key column that segments were
    /// written with (catalog v5).
    pub fn bounds(&self) -> String {
        format!("coldwire.bounds_{}", self.id)
    }

    /// `coldwire.capture_<id>`.
    pub fn capture_function(&self) -> String {
        format!("coldwire.capture_{}", self.id)
    }

    fn pk_list(&self, prefix: &str) -> String {
        column_list(self.pk.iter().map(|(n, _)| n.as_str()), prefix)
    }

    fn pk_match(&self, left: &str, right: &str) -> String {
        pk_equal(self.pk.iter().map(|(n, _)| n.as_str()), left, right)
    }

    /// Statements that create the mirror, the capture function and the triggers; run in
    /// one transaction by the service connection.
    ///
    /// The mirror has no index on `seq`: the flush finds its cutoff by sorting the mirror
    /// (once per flush), which is cheaper than maintaining an index on every captured
    /// write, and with only the key indexed, a key written again is a HOT update.
    pub fn install(&self) -> Vec<String> {
        let mirror = self.mirror();
        let function = self.capture_function();
        let table = self.qualified_table();
        let columns: Vec<String> = self
            .pk
            .iter()
            .map(|(n, t)| format!("{} {t} NOT NULL", quote_ident(n)))
            .collect();
        let mut sql = vec![
            format!(
                "CREATE TABLE {mirror} ({}, seq bigint NOT NULL, op smallint NOT NULL, \
                 xid xid8 NOT NULL DEFAULT pg_current_xact_id(), PRIMARY KEY ({}))",
                columns.join(", "),
                self.pk_list("")
            ),
            format!("REVOKE ALL ON {mirror} FROM PUBLIC"),
        ];
        sql.extend(self.read_and_override_objects());
        sql.extend(self.bounds_objects());
        sql.extend([
            self.capture_function_sql(),
            format!("REVOKE ALL ON FUNCTION {function}() FROM PUBLIC"),
        ]);
        sql.extend(self.rehydrate_function_sql());
        let events = [
            ("INSERT", "REFERENCING NEW TABLE AS coldwire_new"),
            (
                "UPDATE",
                "REFERENCING OLD TABLE AS coldwire_old NEW TABLE AS coldwire_new",
            ),
            ("DELETE", "REFERENCING OLD TABLE AS coldwire_old"),
            ("TRUNCATE", ""),
        ];
        for (name, (event, referencing)) in TRIGGERS.iter().zip(events) {
            sql.push(format!(
                "CREATE TRIGGER {name} AFTER {event} ON {table} {referencing} FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
            ));
            // ENABLE ALWAYS: the triggers fire whatever session_replication_role says.
            // (Logical-replication apply fires row triggers only, never these: tier_table
            // and the flush refuse a table in logical replication; catalog/inspect.rs.)
            sql.push(format!("ALTER TABLE {table} ENABLE ALWAYS TRIGGER {name}"));
        }
        sql.push(self.keys_trigger());
        sql
    }

    /// [`KEYS_TRIGGER`], created if the table has none: after every UPDATE of a row whose
    /// key changed, however it changed (its SET list, an ON CONFLICT or MERGE action, a
    /// BEFORE trigger), the capture function at row level, which checks that row's new key
    /// against the cold tier and, if it may be cold, raises the check's error for every
    /// key of the statement that may be (from the trigger's transition table, so that
    /// coldwire brings them all back at once). Rows that keep their keys fail its WHEN and
    /// queue nothing. Nothing a client can set decides whether the check runs. Created
    /// only where missing: an upgrade then takes no lock on a table that has it (a change
    /// of its definition would have to drop it first).
    fn keys_trigger(&self) -> String {
        let table = self.qualified_table();
        let moved: Vec<String> = self
            .pk
            .iter()
            .map(|(n, _)| {
                let n = quote_ident(n);
                format!("OLD.{n} IS DISTINCT FROM NEW.{n}")
            })
            .collect();
        quoted_body(format!(
            "DO \0 BEGIN \
             IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger \
                            WHERE tgrelid = {literal}::pg_catalog.regclass AND tgname = '{KEYS_TRIGGER}') THEN \
             CREATE TRIGGER {KEYS_TRIGGER} AFTER UPDATE ON {table} REFERENCING NEW TABLE AS coldwire_new \
             FOR EACH ROW WHEN ({moved}) EXECUTE FUNCTION {function}(); \
             ALTER TABLE {table} ENABLE ALWAYS TRIGGER {KEYS_TRIGGER}; \
             END IF; END \0",
            literal = sql_literal(&table),
            moved = moved.join(" OR "),
            function = self.capture_function(),
        ))
    }

    /// The statement that records every row the table holds as live, leaving keys the
    /// triggers already recorded alone (run after the triggers are in place).
    pub fn seed(&self) -> String {
        format!(
            "INSERT INTO {mirror} ({pk}, seq, op) SELECT {pk}, nextval('coldwire.change_seq'), {live} FROM ONLY {table} \
             ON CONFLICT DO NOTHING",
            mirror = self.mirror(),
            pk = self.pk_list(""),
            live = op::LIVE,
            table = self.qualified_table(),
        )
    }

    /// Statements that remove what [`CaptureSpec::install`] created.
    pub fn uninstall(&self) -> Vec<String> {
        let table = self.qualified_table();
        let mut sql: Vec<String> = TRIGGERS
            .iter()
            .chain(std::iter::once(&KEYS_TRIGGER))
            .map(|t| format!("DROP TRIGGER IF EXISTS {t} ON {table}"))
            .collect();
        sql.extend(drop_capture_objects(self.id));
        sql
    }

    /// The capture and rehydrate functions made again for the table's current name (after
    /// a rename): one batch.
    pub fn replace_function(&self) -> String {
        format!(
            "{};\n{}",
            self.replace_capture_function(),
            self.rehydrate_function_sql().join(";\n")
        )
    }

    fn replace_capture_function(&self) -> String {
        self.capture_function_sql()
            .replacen("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
    }

    /// The rehydration's statement (`cold`: its rows, an array of the table's row type):
    /// claims each cold row's key in the mirror (op rehydrated; a key already there, hot,
    /// deleted or claimed by another transaction, is left alone) and inserts the rows it
    /// claimed into `table`. Written on one line: the capture function recognises its own
    /// insert by this text ([`CaptureSpec::rehydrate_context`]).
    fn claim_and_insert(&self, table: &str, cold: &str) -> String {
        format!(
            "WITH claimed AS (INSERT INTO {mirror} AS m ({pk}, seq, op, xid) \
             SELECT {c_pk}, pg_catalog.nextval('coldwire.change_seq'), {rehydrated}, pg_catalog.pg_current_xact_id() \
             FROM pg_catalog.unnest({cold}) AS c ON CONFLICT DO NOTHING RETURNING {pk}) \
             INSERT INTO {table} OVERRIDING SYSTEM VALUE SELECT c.* FROM pg_catalog.unnest({cold}) AS c \
             WHERE EXISTS (SELECT 1 FROM claimed m WHERE {matched})",
            mirror = self.mirror(),
            pk = self.pk_list(""),
            c_pk = self.pk_list("c."),
            rehydrated = op::REHYDRATED,
            matched = self.pk_match("m", "c"),
        )
    }

    /// The condition, in the capture function, that its INSERT trigger fired for the heap
    /// insert of the table's own rehydration and nothing else: the error context (`ctx`,
    /// from `GET DIAGNOSTICS … PG_CONTEXT`) is exactly the capture function, that
    /// statement's text, and `coldwire.rehydrate_<id>`. The capture then has nothing to
    /// do: every key inserted was just claimed in the mirror by the same statement, by
    /// this transaction, so none may exist cold, and the mirror already records it
    /// (DESIGN §7). It cannot be forged: the statement writes the mirror, which only its
    /// owner may, a function of that name in schema `coldwire` is coldwire's, and a text
    /// of the caller's making (a query run through SPI) adds lines of its own.
    fn rehydrate_context(&self) -> String {
        let statement = format!(
            "SQL statement \"{}\"",
            self.claim_and_insert(&self.qualified_table(), "cold")
        );
        format!(
            "strpos(ctx, E'\\n') > 0 \
             AND pg_catalog.split_part(ctx, E'\\n', 2) = {statement} \
             AND pg_catalog.starts_with(pg_catalog.split_part(ctx, E'\\n', 3), {caller}) \
             AND pg_catalog.split_part(ctx, E'\\n', 4) = ''",
            statement = sql_literal(&statement),
            caller = sql_literal(&format!("PL/pgSQL function {}(", self.rehydrate_function())),
        )
    }

    /// `coldwire.rehydrate_<id>` (catalog v10).
    pub fn rehydrate_function(&self) -> String {
        format!("coldwire.rehydrate_{}", self.id)
    }

    /// The table's own `coldwire.rehydrate` (catalog v10), with the arguments and checks
    /// of the shared one (`sql/v008_conditions.sql`): the privilege check, the table's
    /// lock taken shared, the generation compared with the planned one, the cold rows
    /// claimed in the mirror and inserted into the heap, and the absent keys claimed. Its
    /// statements name the mirror and the heap as written, so plpgsql plans them once per
    /// session instead of building and planning them on every call (the shared function
    /// reads the key columns from the catalog and runs EXECUTE); when the table's name has
    /// changed since the function was made (on a connection coldwire does not follow,
    /// until `catalog::reconcile` makes it again), the heap insert runs through EXECUTE,
    /// naming the table by its oid. The cold rows stay `anyarray`, so the function holds
    /// no dependency on the table's row type (`DROP TABLE` stays possible).
    pub fn rehydrate_function_sql(&self) -> Vec<String> {
        self.rehydrate_function_text()
            .into_iter()
            .map(quoted_body)
            .collect()
    }

    /// [`CaptureSpec::rehydrate_function_sql`] with its body between NULs ([`quoted_body`]).
    fn rehydrate_function_text(&self) -> Vec<String> {
        let function = self.rehydrate_function();
        let mirror = self.mirror();
        let pk = self.pk_list("");
        let c_pk = self.pk_list("c.");
        let first = quote_ident(&self.pk[0].0);
        // format()'s text: the table by oid, any % of the key's names doubled.
        let dynamic = sql_literal(
            &self
                .claim_and_insert(TABLE_MARK, "$1")
                .replace('%', "%%")
                .replace(TABLE_MARK, "%1$s"),
        );
        let signature = format!("{function}({REHYDRATE_ARGS})");
        // `#variable_conflict use_column`: the claim names the key columns unqualified
        // (`RETURNING "k"`), and a key column may share a name with an argument or a
        // variable (`k`, `n`, `table_id`); the column must win. The function's other
        // statements have no column of those names in scope.
        vec![
            format!(
                "CREATE OR REPLACE FUNCTION {function}(table_id bigint, planned bigint, cold anyarray, absent text, \
                 digest text, statement text, append boolean, mac bytea) \
                 RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS \0\n\
                 #variable_conflict use_column\n\
                 DECLARE rel oid; k bytea; found_generation bigint; n bigint := 0;\n\
                 BEGIN\n\
                 SELECT x.relid INTO rel FROM coldwire.tables x WHERE x.id = {id} AND x.state = 'active';\n\
                 IF NOT FOUND THEN\n\
                 RAISE EXCEPTION 'coldwire: table % is not tiered', {id} USING ERRCODE = '55000';\n\
                 END IF;\n\
                 IF pg_catalog.cardinality(cold) > 0 OR absent IS DISTINCT FROM '[]' THEN\n\
                 SELECT s.key INTO k FROM coldwire.secret s;\n\
                 IF mac IS NULL OR k IS NULL OR mac IS DISTINCT FROM {signed} THEN\n\
                 RAISE EXCEPTION 'permission denied to bring rows of coldwire table {id} back into the heap: they were not sent by coldwire' \
                     USING ERRCODE = '42501', HINT = 'coldwire brings cold rows back itself, for the writes sent through it.';\n\
                 END IF;\n\
                 END IF;\n\
                 PERFORM pg_catalog.set_config('{planned}', \
                     CASE WHEN append THEN COALESCE(pg_catalog.current_setting('{planned}', true) || ' ', '') ELSE '' END \
                     || COALESCE(digest, pg_catalog.md5(statement)), true);\n\
                 IF NOT pg_catalog.has_table_privilege(session_user, rel, 'INSERT') \
                    AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r \
                                    WHERE pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER') \
                                      AND pg_catalog.has_table_privilege(r.oid, rel, 'INSERT')) THEN\n\
                 RAISE EXCEPTION 'permission denied to bring cold rows of % back into the heap', rel::pg_catalog.regclass \
                     USING ERRCODE = '42501', HINT = 'Writing rows of a tiered table that are cold needs INSERT privilege on it.';\n\
                 END IF;\n\
                 PERFORM pg_catalog.pg_advisory_xact_lock_shared({lock_class}, {id});\n\
                 SELECT x.generation INTO found_generation FROM coldwire.tables x WHERE x.id = {id};\n\
                 IF found_generation IS DISTINCT FROM planned THEN\n\
                 RAISE EXCEPTION 'coldwire: the cold tier of % changed as the statement started', rel::pg_catalog.regclass \
                     USING ERRCODE = '40001', CONSTRAINT = '{changed}', HINT = 'Retry the statement.', \
                     DETAIL = pg_catalog.format('planned for generation %s, the table is at %s', planned, found_generation);\n\
                 END IF;\n\
                 IF cold IS NOT NULL AND pg_catalog.cardinality(cold) > 0 THEN\n\
                 IF rel = pg_catalog.to_regclass({qualified}) THEN\n\
                 {fixed};\n\
                 ELSE\n\
                 EXECUTE pg_catalog.format({dynamic}, rel::pg_catalog.regclass) USING cold;\n\
                 END IF;\n\
                 GET DIAGNOSTICS n = ROW_COUNT;\n\
                 END IF;\n\
                 IF absent IS NOT NULL AND pg_catalog.jsonb_array_length(absent::pg_catalog.jsonb) > 0 THEN\n\
                 INSERT INTO {mirror} ({pk}, seq, op, xid) \
                 SELECT {c_pk}, pg_catalog.nextval('coldwire.change_seq'), {deleted}, pg_catalog.pg_current_xact_id() \
                 FROM pg_catalog.jsonb_populate_recordset(NULL::{mirror}, absent::pg_catalog.jsonb) AS c, {bounds} b \
                 WHERE b.lo IS NULL OR c.{first} BETWEEN b.lo AND b.hi ON CONFLICT DO NOTHING;\n\
                 END IF;\n\
                 RETURN n;\n\
                 END\n\0",
                planned = PLANNED_SETTING,
                id = self.id,
                signed = rehydration_mac_sql(self.id),
                lock_class = super::locks::TABLE_LOCK_CLASS,
                changed = super::conditions::COLD_TIER_CHANGED,
                qualified = sql_literal(&self.qualified_table()),
                fixed = self.claim_and_insert(&self.qualified_table(), "cold"),
                deleted = op::DELETED,
                bounds = self.bounds(),
            ),
            format!("REVOKE ALL ON FUNCTION {signature} FROM PUBLIC"),
            format!("GRANT EXECUTE ON FUNCTION {signature} TO PUBLIC"),
        ]
    }

    /// Statements that bring the capture objects of a table tiered by an older build to
    /// what [`CaptureSpec::install`] creates now (catalog migration v2): the current capture
    /// function (same name, owner and grants) and no index on the mirror's `seq`.
    pub fn upgrade(&self) -> Vec<String> {
        let mut sql = vec![
            self.replace_capture_function(),
            format!("DROP INDEX IF EXISTS coldwire.m_{}_seq", self.id),
            format!("DROP POLICY IF EXISTS table_readers ON {}", self.mirror()),
        ];
        sql.extend(self.read_and_override_objects());
        sql.extend(self.bounds_objects());
        // Catalog v13 gave the function a signature (a MAC of what it is sent): the
        // unsigned one must not stay callable beside it.
        sql.push(format!(
            "DROP FUNCTION IF EXISTS {}({UNSIGNED_REHYDRATE_ARGS})",
            self.rehydrate_function()
        ));
        sql.extend(self.rehydrate_function_sql());
        sql.push(self.keys_trigger());
        // Bounds unknown (NULLs) where segments exist from before them.
        sql.push(format!(
            "INSERT INTO {bounds} (lo, hi) SELECT NULL, NULL WHERE NOT EXISTS (SELECT 1 FROM {bounds}) \
             AND EXISTS (SELECT 1 FROM coldwire.segments WHERE table_id = {id} AND status IN ('pending', 'active'))",
            bounds = self.bounds(),
            id = self.id
        ));
        sql
    }

    /// `bounds_<id>` (idempotent), owner-only: at most one row, `lo` and `hi` of the first
    /// key column over every segment written since the table was tiered or truncated
    /// (NULLs: unknown, every key may be cold).
    fn bounds_objects(&self) -> Vec<String> {
        let (_, ty) = &self.pk[0];
        vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {} (lo {ty}, hi {ty}, one boolean PRIMARY KEY DEFAULT true CHECK (one))",
                self.bounds()
            ),
            format!("REVOKE ALL ON {} FROM PUBLIC", self.bounds()),
        ]
    }

    /// The mirror's read access and the overrides table (both idempotent): reads of the
    /// table probe the mirror (DESIGN §6.2), so any role may SELECT it and sees its rows
    /// only if it may SELECT the table itself (the policy runs as the querying role; the
    /// owner, i.e. capture and flush, is not subject to it); `overrides_<id>` is owner-only.
    fn read_and_override_objects(&self) -> Vec<String> {
        self.read_and_override_text()
            .into_iter()
            .map(quoted_body)
            .collect()
    }

    /// [`CaptureSpec::read_and_override_objects`], a body between NULs ([`quoted_body`]).
    fn read_and_override_text(&self) -> Vec<String> {
        let mirror = self.mirror();
        let columns: Vec<String> = self
            .pk
            .iter()
            .map(|(n, t)| format!("{} {t} NOT NULL", quote_ident(n)))
            .collect();
        vec![
            format!("GRANT SELECT ON {mirror} TO PUBLIC"),
            format!("ALTER TABLE {mirror} ENABLE ROW LEVEL SECURITY"),
            // Reads check the mirror's keys with index-only scans: autovacuum marks its
            // pages all-visible after a thousand or so writes, not a fifth of the mirror.
            format!(
                "ALTER TABLE {mirror} SET (autovacuum_vacuum_scale_factor = 0.01, \
                 autovacuum_vacuum_insert_scale_factor = 0.01, autovacuum_vacuum_insert_threshold = 1000)"
            ),
            format!(
                "CREATE POLICY table_readers ON {mirror} FOR SELECT TO PUBLIC \
                 USING (has_table_privilege((SELECT t.relid FROM coldwire.tables t WHERE t.id = {id}), 'SELECT'))",
                id = self.id
            ),
            // One row per key and generation that flushed a newer version of it, so the
            // overrides as of any generation can be read (catalog v4; older tables get
            // the column with generation 0).
            format!(
                "CREATE TABLE IF NOT EXISTS {} ({}, seq bigint NOT NULL, generation bigint NOT NULL DEFAULT 0, PRIMARY KEY ({}, generation))",
                self.overrides(),
                columns.join(", "),
                self.pk_list("")
            ),
            format!(
                "DO \0 BEGIN \
                 IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '{o}'::regclass AND attname = 'generation') THEN \
                 ALTER TABLE {o} ADD COLUMN generation bigint NOT NULL DEFAULT 0; \
                 ALTER TABLE {o} DROP CONSTRAINT overrides_{id}_pkey; \
                 ALTER TABLE {o} ADD PRIMARY KEY ({pk}, generation); \
                 END IF; END \0",
                o = self.overrides(),
                id = self.id,
                pk = self.pk_list("")
            ),
            format!("REVOKE ALL ON {} FROM PUBLIC", self.overrides()),
        ]
    }

    /// The plpgsql capture function: one mirror upsert per statement. The op is the state of
    /// the key in the heap after the statement (right for writable CTEs, key updates and ON
    /// CONFLICT, whose INSERT and UPDATE triggers both fire):
    ///
    /// - UPDATE and DELETE probe the heap for every key.
    /// - INSERT records its keys live without probing. A key this statement inserted can be
    ///   gone only if a later command deleted it (or moved its key), and every such change
    ///   is captured by an UPDATE or DELETE capture, which probes: if that capture has run
    ///   already, it left the key deleted (op 3) by this transaction, and only then does the
    ///   INSERT capture probe; if it has not, it runs later and overwrites this row. Keys in
    ///   an INSERT's transition table are unique (the primary key is checked per row;
    ///   deferrable keys are refused by `tier_table`), so no DISTINCT.
    ///
    /// `pg_current_xact_id()` is read once per call; the maintenance check is one index
    /// probe per statement.
    fn capture_function_sql(&self) -> String {
        quoted_body(self.capture_function_text())
    }

    /// [`CaptureSpec::capture_function_sql`] with its body between NULs ([`quoted_body`]).
    fn capture_function_text(&self) -> String {
        let mirror = self.mirror();
        let pk = self.pk_list("");
        let k_pk = self.pk_list("k.");
        let (live, deleted) = (op::LIVE, op::DELETED);
        let probed = |keys: &str| {
            self.on_table(&format!(
                "INSERT INTO {mirror} AS m ({pk}, seq, op, xid) \
                 SELECT {k_pk}, nextval('coldwire.change_seq'), \
                        CASE WHEN EXISTS (SELECT 1 FROM ONLY {TABLE_MARK} h WHERE {probe}) THEN {live} ELSE {deleted} END, {CUR_MARK} \
                 FROM ({keys}) k \
                 ON CONFLICT ({pk}) DO UPDATE SET seq = EXCLUDED.seq, op = EXCLUDED.op, xid = {CUR_MARK}",
                probe = self.pk_match("h", "k"),
            ))
        };
        let insert = self.on_table(&format!(
            "INSERT INTO {mirror} AS m ({pk}, seq, op, xid) \
             SELECT {k_pk}, nextval('coldwire.change_seq'), {live}, {CUR_MARK} FROM coldwire_new k \
             ON CONFLICT ({pk}) DO UPDATE SET seq = EXCLUDED.seq, xid = {CUR_MARK}, \
                 op = CASE WHEN m.op = {deleted} AND m.xid = {CUR_MARK} \
                                AND NOT EXISTS (SELECT 1 FROM ONLY {TABLE_MARK} h WHERE {probe}) \
                           THEN {deleted} ELSE {live} END",
            probe = self.pk_match("h", "EXCLUDED"),
        ));
        let check = self.may_be_cold_check();
        let net = unplanned_write_check();
        format!(
            "CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER \
             SET search_path = pg_catalog, pg_temp AS \0\n\
             #variable_conflict use_column\n\
             <<{CAPTURE_BLOCK}>>\n\
             DECLARE cur xid8 := pg_current_xact_id(); flagged jsonb; flagged_n bigint; ctx text;\n\
             BEGIN\n\
             IF TG_LEVEL = 'ROW' THEN\n\
             IF EXISTS (SELECT 1 FROM {bounds} b WHERE b.lo IS NULL OR NEW.{first} BETWEEN b.lo AND b.hi) \
                AND NOT EXISTS (SELECT 1 FROM {mirror} m WHERE {new_probe}) THEN\n{check}\nEND IF;\n\
             RETURN NULL;\n\
             END IF;\n\
             IF TG_OP = 'INSERT' THEN\n\
             GET DIAGNOSTICS ctx = PG_CONTEXT;\n\
             IF {rehydrated} THEN RETURN NULL; END IF;\n\
             END IF;\n\
             IF EXISTS (SELECT 1 FROM coldwire.maintenance WHERE xid = {CUR}) THEN RETURN NULL; END IF;\n\
             IF TG_OP = 'INSERT' THEN\n{check}\n{insert}\n\
             ELSIF TG_OP = 'UPDATE' THEN\n{net}\n{update}\n\
             ELSIF TG_OP = 'DELETE' THEN\n{net}\n{delete}\n\
             ELSE\n\
             DELETE FROM {mirror};\n\
             DELETE FROM {overrides};\n\
             DELETE FROM {bounds};\n\
             UPDATE coldwire.tables SET generation = generation + 1 WHERE id = {id};\n\
             UPDATE coldwire.segments SET status = 'retired', retired_xid = {CUR}, \
                 retired_generation = (SELECT generation FROM coldwire.tables WHERE id = {id}) \
             WHERE table_id = {id} AND status IN ('pending', 'active');\n\
             PERFORM pg_notify('coldwire_catalog', '{id}');\n\
             END IF;\n\
             RETURN NULL;\n\
             END\n\0",
            function = self.capture_function(),
            rehydrated = self.rehydrate_context(),
            first = quote_ident(&self.pk[0].0),
            new_probe = self.pk_match("m", "NEW"),
            update = probed(&format!("SELECT {pk} FROM coldwire_new UNION SELECT {pk} FROM coldwire_old")),
            delete = probed(&format!("SELECT DISTINCT {pk} FROM coldwire_old")),
            overrides = self.overrides(),
            bounds = self.bounds(),
            id = self.id,
        )
    }

    /// Statement `sql` of the capture function, naming the table as [`TABLE_MARK`] and the
    /// transaction id as [`CUR_MARK`]: planned once and cached while the table has the name
    /// the function was made with, and otherwise (renamed on a connection coldwire does not
    /// see, until `catalog::reconcile` makes the function again) run through EXECUTE,
    /// naming the table by its oid. Never by the old name, which may name another table.
    fn on_table(&self, sql: &str) -> String {
        let fixed = sql
            .replace(TABLE_MARK, &self.qualified_table())
            .replace(CUR_MARK, CUR);
        let dynamic = sql
            .replace('%', "%%")
            .replace(TABLE_MARK, "%1$s")
            .replace(CUR_MARK, "$1");
        format!(
            "IF TG_TABLE_SCHEMA = {schema} AND TG_TABLE_NAME = {table} THEN\n{fixed};\n\
             ELSE\nEXECUTE format({dynamic}, TG_RELID::regclass) USING cur;\nEND IF;",
            schema = sql_literal(&self.schema),
            table = sql_literal(&self.table),
            dynamic = sql_literal(&dynamic),
        )
    }

    /// The part of the capture function that refuses keys a statement creates which may
    /// exist cold (DESIGN §7): keys of `coldwire_new` not in the mirror (so neither in the
    /// heap nor known absent from cold) whose first column lies within the bounds. The
    /// error names them (at most [`MAY_BE_COLD_LIMIT`]) in its DETAIL, as jsonb
    /// `{"table": id, "keys": [{"id": 5}, …]}`, for coldwire to bring back and run the
    /// statement again.
    fn may_be_cold_check(&self) -> String {
        let bounds = self.bounds();
        let first = quote_ident(&self.pk[0].0);
        let object: Vec<String> = self
            .pk
            .iter()
            .map(|(n, _)| format!("{}, k.{}", sql_literal(n), quote_ident(n)))
            .collect();
        // The name as it is now (the function may be older than a rename).
        let name = "TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME";
        format!(
            "IF EXISTS (SELECT 1 FROM {bounds}) THEN \
             SELECT count(*), jsonb_agg(f.key) INTO flagged_n, flagged FROM (\
             SELECT jsonb_build_object({object}) AS key FROM coldwire_new k, {bounds} b \
             WHERE (b.lo IS NULL OR k.{first} BETWEEN b.lo AND b.hi) \
             AND NOT EXISTS (SELECT 1 FROM {mirror} m WHERE {probe}) LIMIT {over}) f; \
             IF flagged_n > {limit} THEN \
             RAISE EXCEPTION 'coldwire: more than {limit} keys written to % may exist in the cold tier', {name} \
             USING ERRCODE = '54000', HINT = 'Write the rows in smaller statements.'; \
             ELSIF flagged_n > 0 THEN \
             RAISE EXCEPTION '{prefix} % may exist in the cold tier', {name} \
             USING ERRCODE = '55000', CONSTRAINT = '{may_be_cold}', DETAIL = jsonb_build_object('table', {id}, 'keys', flagged)::text, \
             HINT = 'coldwire brings such keys back and runs the statement again when it runs in autocommit through coldwire. In a transaction block, name the keys in INSERT … VALUES, or write them outside the block.'; \
             END IF; END IF;",
            object = object.join(", "),
            mirror = self.mirror(),
            probe = self.pk_match("m", "k"),
            limit = MAY_BE_COLD_LIMIT,
            over = MAY_BE_COLD_LIMIT + 1,
            prefix = MAY_BE_COLD_MESSAGE,
            may_be_cold = super::conditions::KEYS_MAY_BE_COLD,
            id = self.id,
        )
    }
}

/// The SQLSTATE of an UPDATE or DELETE of a tiered table that coldwire did not plan
/// (DESIGN §7.1): class `CW` is coldwire's own.
pub const UNPLANNED_WRITE: &str = "CW001";

/// The setting that lets a session write the hot rows of tiered tables only, on purpose
/// (maintenance on a direct connection, writes inside functions).
pub const HOT_ONLY_SETTING: &str = "coldwire.hot_only_writes";

/// The values of a boolean setting that mean on, as SQL's list (lower-cased text).
pub const HOT_ONLY_ON: &str = "('on', 'true', 'yes', '1')";

/// The transaction-local setting that holds the marks of the statements coldwire planned
/// (`coldwire.plan_write`, catalog v7).
pub const PLANNED_SETTING: &str = "coldwire.planned";

/// The argument types of `coldwire.rehydrate_<id>` (catalog v13): the table, the
/// generation planned for, the cold rows, the absent keys (a jsonb array, as text), the
/// statement's mark (digest, text, append), and the MAC of what it brings back.
pub const REHYDRATE_ARGS: &str = "bigint, bigint, anyarray, text, text, text, boolean, bytea";
/// Its argument types before catalog v13, without the MAC.
const UNSIGNED_REHYDRATE_ARGS: &str = "bigint, bigint, anyarray, jsonb, text, text, boolean";

/// The MAC `coldwire.rehydrate_<id>` requires, as SQL over its arguments: SHA-256 of the
/// database's secret (`coldwire.secret`, which only the catalog's owner reads; read into
/// `k` first, so the check is a simple expression) followed by the digest of the table,
/// the generation, the rows and the absent keys, as [`rehydration_mac`] computes it. A
/// call that brings nothing back (no rows, absent keys exactly `[]`: a write whose keys
/// are all hot) is not checked: it only marks the statement planned and takes the lock,
/// which any role may do (`coldwire.plan_write`, `coldwire.read_lock`). The rows arrive decoded, so the digest covers
/// Postgres's own binary form of them (`array_send`), which is the form coldwire sent
/// (DESIGN §3: a rehydration brings back only what coldwire read from the cold tier).
fn rehydration_mac_sql(id: i64) -> String {
    format!(
        "pg_catalog.sha256(k || pg_catalog.sha256(\
         pg_catalog.int8send({id}::bigint) || pg_catalog.int8send(planned) \
         || pg_catalog.sha256(COALESCE(pg_catalog.array_send(cold), ''::bytea)) \
         || pg_catalog.sha256(pg_catalog.convert_to(COALESCE(absent, ''), 'UTF8'))))"
    )
}

/// The MAC of a rehydration of table `id` planned for generation `planned`, bringing back
/// `cold` (the binary array coldwire sends) and claiming `absent` (the text it sends), under
/// the database's `secret`: what [`rehydration_mac_sql`] computes in Postgres.
pub fn rehydration_mac(
    secret: &[u8],
    id: i64,
    planned: i64,
    cold: &[u8],
    absent: &[u8],
) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut message = Sha256::new();
    message.update(id.to_be_bytes());
    message.update(planned.to_be_bytes());
    message.update(Sha256::digest(cold));
    message.update(Sha256::digest(absent));
    let mut mac = Sha256::new();
    mac.update(secret);
    mac.update(message.finalize());
    mac.finalize().into()
}

/// The part of the capture function that refuses an UPDATE or DELETE (a MERGE's or an
/// upsert's included) coldwire did not plan (DESIGN §7.1): one that runs inside
/// Postgres (the trigger's context has more than its own line: a function, procedure, DO
/// block or another trigger), or a top-level statement whose text coldwire did not mark
/// in this transaction (a view, a rule, a direct connection). Nothing is checked when the
/// session opted into hot-only writes.
fn unplanned_write_check() -> String {
    let hint = "Send the statement itself through coldwire, which brings back the cold rows it may touch first: \
                writes inside functions, procedures, DO blocks, triggers, rules and views, and writes on connections \
                that bypass coldwire, cannot be planned. To write hot rows only, on purpose: SET coldwire.hot_only_writes = on.";
    let name = "TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME";
    format!(
        "IF lower(COALESCE(current_setting({hot_only}, true), '')) NOT IN {HOT_ONLY_ON} THEN \
         GET DIAGNOSTICS ctx = PG_CONTEXT; \
         IF strpos(ctx, E'\\n') > 0 THEN \
         RAISE EXCEPTION 'coldwire: % of tiered table % inside a function, procedure, DO block or trigger could miss its cold rows', TG_OP, {name} \
         USING ERRCODE = '{UNPLANNED_WRITE}', HINT = {hint}; \
         ELSIF strpos(COALESCE(current_setting({planned}, true), ''), md5(current_query())) = 0 THEN \
         RAISE EXCEPTION 'coldwire: % of tiered table % was not planned by coldwire and could miss its cold rows', TG_OP, {name} \
         USING ERRCODE = '{UNPLANNED_WRITE}', HINT = {hint}; \
         END IF; END IF;",
        hot_only = sql_literal(HOT_ONLY_SETTING),
        planned = sql_literal(PLANNED_SETTING),
        hint = sql_literal(hint),
    )
}

/// `sql`, a statement whose body coldwire wrote between two NULs (or any other, left as
/// it is), with the body dollar-quoted by a tag that does not occur in it. The body holds
/// the names of the table and its columns, and a quoted name may hold any fixed tag
/// itself (`"k$coldwire$"`), which would end the body there and run the rest as SQL, as
/// the service role; no name holds a NUL.
fn quoted_body(sql: String) -> String {
    const TAG: &str = "\0";
    match (sql.find(TAG), sql.rfind(TAG)) {
        (Some(open), Some(close)) if open < close => format!(
            "{}{}{}",
            &sql[..open],
            crate::sql::rewrite::dollar_quoted(&sql[open + TAG.len()..close]),
            &sql[close + TAG.len()..]
        ),
        _ => sql,
    }
}

/// Statements that drop what table `id` has in schema `coldwire` besides its triggers
/// (which go with the table): capture function, mirror, overrides and bounds.
pub fn drop_capture_objects(id: i64) -> Vec<String> {
    vec![
        format!("DROP FUNCTION IF EXISTS coldwire.capture_{id}()"),
        format!("DROP FUNCTION IF EXISTS coldwire.rehydrate_{id}({REHYDRATE_ARGS})"),
        format!("DROP FUNCTION IF EXISTS coldwire.rehydrate_{id}({UNSIGNED_REHYDRATE_ARGS})"),
        format!("DROP TABLE IF EXISTS coldwire.m_{id}"),
        format!("DROP TABLE IF EXISTS coldwire.overrides_{id}"),
        format!("DROP TABLE IF EXISTS coldwire.bounds_{id}"),
    ]
}

/// Where [`CaptureSpec::on_table`] puts the table's name.
const TABLE_MARK: &str = "\0table\0";
/// Where [`CaptureSpec::on_table`] puts the transaction id.
const CUR_MARK: &str = "\0cur\0";
/// The label of the capture function's block, which qualifies its variables where the
/// table's columns are in scope. The transition tables carry every column of the table
/// and the mirror its key, so a column named `cur` would make a bare `cur` ambiguous
/// (42702) and fail every capture; and `ON CONFLICT (cur)` names a column, which the
/// function's `#variable_conflict use_column` lets win over the variable.
const CAPTURE_BLOCK: &str = "coldwire_capture";
/// The capture function's transaction id, qualified by [`CAPTURE_BLOCK`].
const CUR: &str = "coldwire_capture.cur";

/// The statement a flush's finalize runs (under the table's exclusive lock) to widen the
/// bounds of table `id` (`coldwire.bounds_<id>`) by the keys of `pairs` (a relation with
/// the first key column `first`) it moves cold. Unknown bounds stay unknown.
pub fn widen_bounds(id: i64, first: &str, pairs: &str) -> String {
    let first = quote_ident(first);
    format!(
        "INSERT INTO coldwire.bounds_{id} AS b (lo, hi) \
         SELECT (SELECT {first} FROM {pairs} ORDER BY 1 LIMIT 1), (SELECT {first} FROM {pairs} ORDER BY 1 DESC LIMIT 1) \
         WHERE EXISTS (SELECT 1 FROM {pairs}) \
         ON CONFLICT (one) DO UPDATE SET lo = CASE WHEN b.lo IS NULL THEN NULL ELSE least(b.lo, EXCLUDED.lo) END, \
             hi = CASE WHEN b.hi IS NULL THEN NULL ELSE greatest(b.hi, EXCLUDED.hi) END"
    )
}

/// The columns the mirror and the overrides table keep beside a tiered table's key
/// columns: a key column of the same name cannot be tiered (`catalog::inspect`).
pub const KEY_TABLE_COLUMNS: &[&str] = &["seq", "op", "xid", "generation"];

/// The most keys the capture check names in one error (more: 54000).
pub const MAY_BE_COLD_LIMIT: usize = 10_000;

/// How the capture check's error message starts.
pub const MAY_BE_COLD_MESSAGE: &str = "coldwire: keys written to";

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> CaptureSpec {
        CaptureSpec {
            id: 7,
            schema: "app".into(),
            table: "Odd \"name\"".into(),
            pk: vec![
                ("tenant".into(), "integer".into()),
                ("id".into(), "bigint".into()),
            ],
        }
    }

    #[test]
    fn identifiers_are_quoted_everywhere() {
        let s = spec();
        assert_eq!(s.qualified_table(), r#""app"."Odd ""name""""#);
        for stmt in s
            .install()
            .iter()
            .chain(s.uninstall().iter())
            .chain(std::iter::once(&s.seed()))
        {
            assert!(
                !stmt.contains("Odd \"name\" "),
                "unquoted table name in {stmt}"
            );
        }
        assert!(s.install()[0].contains(r#""tenant" integer NOT NULL, "id" bigint NOT NULL"#));
        assert!(s.install()[0].contains(r#"PRIMARY KEY ("tenant", "id")"#));
    }

    #[test]
    fn every_event_has_a_statement_trigger_enabled_always() {
        let sql = spec().install().join("\n");
        for event in [
            "AFTER INSERT",
            "AFTER UPDATE",
            "AFTER DELETE",
            "AFTER TRUNCATE",
        ] {
            assert!(sql.contains(event), "{event}");
        }
        assert_eq!(sql.matches("FOR EACH STATEMENT").count(), 4);
        // And the row trigger that checks moved keys, for rows whose key changed only.
        assert_eq!(sql.matches("FOR EACH ROW").count(), 1);
        assert!(sql.contains(
            r#"AFTER UPDATE ON "app"."Odd ""name""" REFERENCING NEW TABLE AS coldwire_new FOR EACH ROW WHEN (OLD."tenant" IS DISTINCT FROM NEW."tenant" OR OLD."id" IS DISTINCT FROM NEW."id")"#
        ));
        assert_eq!(sql.matches("ENABLE ALWAYS TRIGGER").count(), 5);
        assert!(sql.contains("SECURITY DEFINER SET search_path = pg_catalog, pg_temp"));
        assert!(sql.contains(r#"h."tenant" = k."tenant" AND h."id" = k."id""#));
    }

    #[test]
    fn the_mirror_has_no_seq_index_and_upgrade_drops_an_old_one() {
        let s = spec();
        assert!(
            !s.install().iter().any(|stmt| stmt.contains("INDEX")),
            "only the primary key is indexed"
        );
        let upgrade = s.upgrade();
        assert!(upgrade[0].starts_with("CREATE OR REPLACE FUNCTION coldwire.capture_7()"));
        assert_eq!(
            upgrade[0].replacen("CREATE OR REPLACE", "CREATE", 1),
            s.capture_function_sql()
        );
        assert_eq!(upgrade[1], "DROP INDEX IF EXISTS coldwire.m_7_seq");
    }

    #[test]
    fn inserts_and_updates_check_new_keys_against_the_cold_bounds() {
        let sql = spec().capture_function_sql();
        let branches: Vec<&str> = sql.split("ELSIF TG_OP").collect();
        let check = "FROM coldwire_new k, coldwire.bounds_7 b";
        // The row level (the keys trigger: rows whose key an UPDATE moved) and INSERT
        // check; a statement's UPDATE and DELETE create no key the row level did not see.
        let (row, statement) = branches[0].split_once("IF TG_OP = 'INSERT'").unwrap();
        assert!(
            row.contains("IF TG_LEVEL = 'ROW'") && row.contains(check),
            "row level"
        );
        assert!(row.contains(r#"NEW."tenant" BETWEEN b.lo AND b.hi"#));
        assert!(row.contains(r#"m."tenant" = NEW."tenant" AND m."id" = NEW."id""#));
        assert!(statement.contains(check), "INSERT");
        assert!(branches[1].starts_with(" = 'UPDATE'") && !branches[1].contains(check));
        assert!(!branches[2].contains(check), "DELETE creates no key");
        assert!(
            sql.contains(r#"k."tenant" BETWEEN b.lo AND b.hi"#),
            "first key column"
        );
        assert!(sql.contains(r#"jsonb_build_object(E'tenant', k."tenant", E'id', k."id")"#));
        assert!(
            sql.contains("DELETE FROM coldwire.bounds_7;"),
            "TRUNCATE empties them"
        );
        let widen = widen_bounds(7, "tenant", "pg_temp.cw_pairs");
        assert!(widen.contains(r#"SELECT "tenant" FROM pg_temp.cw_pairs ORDER BY 1 DESC LIMIT 1"#));
        assert!(spec()
            .uninstall()
            .iter()
            .any(|s| s == "DROP TABLE IF EXISTS coldwire.bounds_7"));
    }

    #[test]
    fn after_a_rename_the_table_is_named_by_oid_never_by_its_old_name() {
        let mut s = spec();
        s.table = "100%".into();
        let sql = s.on_table(&format!(
            "DELETE FROM {TABLE_MARK} WHERE x = {CUR_MARK} AND y LIKE 'a%'"
        ));
        assert!(
            sql.starts_with("IF TG_TABLE_SCHEMA = E'app' AND TG_TABLE_NAME = E'100%' THEN"),
            "{sql}"
        );
        assert!(
            sql.contains(
                r#"DELETE FROM "app"."100%" WHERE x = coldwire_capture.cur AND y LIKE 'a%';"#
            ),
            "{sql}"
        );
        assert!(
            sql.contains("EXECUTE format(E'DELETE FROM %1$s WHERE x = $1 AND y LIKE ''a%%''', TG_RELID::regclass) USING cur;"),
            "{sql}"
        );
    }

    #[test]
    fn rehydrate_names_the_table_as_made_or_by_oid_after_a_rename() {
        let mut s = spec();
        s.pk[0].0 = "ten%ant".into();
        let sql = s.rehydrate_function_sql().join("\n");
        assert!(
            sql.contains(r#"IF rel = pg_catalog.to_regclass(E'"app"."Odd ""name"""') THEN"#),
            "{sql}"
        );
        assert!(
            sql.contains(r#"INSERT INTO "app"."Odd ""name""" OVERRIDING SYSTEM VALUE SELECT c.* FROM pg_catalog.unnest(cold)"#),
            "{sql}"
        );
        // The EXECUTE's text: the table by oid, the key's % doubled, the rows as $1.
        assert!(
            sql.contains(r#"EXECUTE pg_catalog.format(E'WITH claimed AS (INSERT INTO coldwire.m_7 AS m ("ten%%ant", "id""#),
            "{sql}"
        );
        assert!(
            sql.contains("INSERT INTO %1$s OVERRIDING SYSTEM VALUE SELECT c.* FROM pg_catalog.unnest($1) AS c"),
            "{sql}"
        );
        assert!(
            sql.contains("', rel::pg_catalog.regclass) USING cold;"),
            "{sql}"
        );
        assert!(s
            .uninstall()
            .iter()
            .any(|d| d.contains("DROP FUNCTION IF EXISTS coldwire.rehydrate_7(")));
        assert!(s
            .replace_function()
            .contains("CREATE OR REPLACE FUNCTION coldwire.rehydrate_7("));
    }

    #[test]
    fn insert_capture_probes_only_keys_this_transaction_recorded_deleted() {
        let sql = spec().capture_function_sql();
        let insert = sql.split("ELSIF TG_OP").next().unwrap();
        assert!(!insert.contains("DISTINCT"));
        // Once as planned for the table's name, once through EXECUTE for after a rename.
        assert_eq!(insert.matches("EXISTS (SELECT 1 FROM ONLY").count(), 2);
        assert!(insert.contains(r#"WHEN m.op = 3 AND m.xid = coldwire_capture.cur AND NOT EXISTS"#));
        assert!(insert
            .contains(r#"WHEN m.op = 3 AND m.xid = $1 AND NOT EXISTS (SELECT 1 FROM ONLY %1$s h"#));
        assert!(insert.contains(r#"h."tenant" = EXCLUDED."tenant" AND h."id" = EXCLUDED."id""#));
        // Once per call; the rehydration's statement, which the function recognises by its
        // text, has its own.
        assert_eq!(
            sql.matches("pg_current_xact_id()").count()
                - sql.matches("pg_catalog.pg_current_xact_id()").count(),
            1,
            "read once per call"
        );
    }
}
