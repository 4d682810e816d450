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

/// Op codes of mirror rows.
pub mod op {
    /// The key's row is in the heap.
    pub const LIVE: i16 = 1;
    /// The key was deleted.
    pub const DELETED: i16 = 3;
    /// The row was brought back from cold to the heap (DESIGN §7).
    pub const REHYDRATED: i16 = 4;
}

/// Names of the capture triggers, one per event (transition tables allow one event each).
pub const TRIGGERS: [&str; 4] = [
    "coldwire_capture_insert",
    "coldwire_capture_update",
    "coldwire_capture_delete",
    "coldwire_capture_truncate",
];

/// `"name"`, with embedded quotes doubled: safe for any identifier.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `l."a" = r."a" AND l."b" = r."b"` over the key columns `pk`: the join condition
/// between two relations holding the same key.
pub fn pk_equal<'a>(pk: impl IntoIterator<Item = &'a str>, left: &str, right: &str) -> String {
    pk.into_iter()
        .map(|n| format!("{left}.{q} = {right}.{q}", q = quote_ident(n)))
        .collect::<Vec<_>>()
        .join(" AND ")
}

impl CaptureSpec {
    /// `"schema"."table"`.
    pub fn qualified_table(&self) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.table))
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

    /// `coldwire.capture_<id>`.
    pub fn capture_function(&self) -> String {
        format!("coldwire.capture_{}", self.id)
    }

    fn pk_list(&self, prefix: &str) -> String {
        self.pk
            .iter()
            .map(|(n, _)| format!("{prefix}{}", quote_ident(n)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn pk_match(&self, left: &str, right: &str) -> String {
        pk_equal(self.pk.iter().map(|(n, _)| n.as_str()), left, right)
    }

    /// Statements that create the mirror, the capture function and the triggers; run in
    /// one transaction by the service connection.
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
            format!("CREATE INDEX m_{}_seq ON {mirror} (seq)", self.id),
            format!("REVOKE ALL ON {mirror} FROM PUBLIC"),
            // Reads of the table probe the mirror (DESIGN §6.2): any role may SELECT it,
            // and sees its rows only if it may SELECT the table itself. The policy runs as
            // the querying role; the owner (capture, flush) is not subject to it.
            format!("GRANT SELECT ON {mirror} TO PUBLIC"),
            format!("ALTER TABLE {mirror} ENABLE ROW LEVEL SECURITY"),
            format!(
                "CREATE POLICY table_readers ON {mirror} FOR SELECT TO PUBLIC \
                 USING (has_table_privilege((SELECT t.relid FROM coldwire.tables t WHERE t.id = {id}), 'SELECT'))",
                id = self.id
            ),
            format!(
                "CREATE TABLE {} ({}, seq bigint NOT NULL, PRIMARY KEY ({}))",
                self.overrides(),
                columns.join(", "),
                self.pk_list("")
            ),
            format!("REVOKE ALL ON {} FROM PUBLIC", self.overrides()),
            self.capture_function_sql(),
            format!("REVOKE ALL ON FUNCTION {function}() FROM PUBLIC"),
        ];
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
            // ENABLE ALWAYS: logical-replication apply is captured too.
            sql.push(format!("ALTER TABLE {table} ENABLE ALWAYS TRIGGER {name}"));
        }
        sql
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
            .map(|t| format!("DROP TRIGGER IF EXISTS {t} ON {table}"))
            .collect();
        sql.push(format!(
            "DROP FUNCTION IF EXISTS {}()",
            self.capture_function()
        ));
        sql.push(format!("DROP TABLE IF EXISTS {}", self.mirror()));
        sql.push(format!("DROP TABLE IF EXISTS {}", self.overrides()));
        sql
    }

    /// The plpgsql capture function: one mirror upsert per statement, with the op taken
    /// from a probe of the heap after the statement (right for writable CTEs, key updates
    /// and ON CONFLICT, whose INSERT and UPDATE triggers both fire).
    fn capture_function_sql(&self) -> String {
        let upsert = |keys: &str| {
            format!(
                "INSERT INTO {mirror} AS m ({pk}, seq, op) \
                 SELECT {k_pk}, nextval('coldwire.change_seq'), \
                        CASE WHEN EXISTS (SELECT 1 FROM ONLY {table} h WHERE {probe}) THEN {live} ELSE {deleted} END \
                 FROM ({keys}) k \
                 ON CONFLICT ({pk}) DO UPDATE SET seq = EXCLUDED.seq, op = EXCLUDED.op, xid = pg_current_xact_id();",
                mirror = self.mirror(),
                pk = self.pk_list(""),
                k_pk = self.pk_list("k."),
                table = self.qualified_table(),
                probe = self.pk_match("h", "k"),
                live = op::LIVE,
                deleted = op::DELETED,
            )
        };
        let pk = self.pk_list("");
        format!(
            "CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER \
             SET search_path = pg_catalog, pg_temp AS $coldwire$\n\
             BEGIN\n\
             IF EXISTS (SELECT 1 FROM coldwire.maintenance WHERE xid = pg_current_xact_id()) THEN RETURN NULL; END IF;\n\
             IF TG_OP = 'INSERT' THEN\n{insert}\n\
             ELSIF TG_OP = 'UPDATE' THEN\n{update}\n\
             ELSIF TG_OP = 'DELETE' THEN\n{delete}\n\
             ELSE\n\
             DELETE FROM {mirror};\n\
             DELETE FROM {overrides};\n\
             UPDATE coldwire.segments SET status = 'retired', retired_xid = pg_current_xact_id() \
             WHERE table_id = {id} AND status IN ('pending', 'active');\n\
             UPDATE coldwire.tables SET generation = generation + 1 WHERE id = {id};\n\
             END IF;\n\
             RETURN NULL;\n\
             END\n$coldwire$",
            function = self.capture_function(),
            insert = upsert(&format!("SELECT DISTINCT {pk} FROM coldwire_new")),
            update = upsert(&format!("SELECT {pk} FROM coldwire_new UNION SELECT {pk} FROM coldwire_old")),
            delete = upsert(&format!("SELECT DISTINCT {pk} FROM coldwire_old")),
            mirror = self.mirror(),
            overrides = self.overrides(),
            id = self.id,
        )
    }
}

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
        assert_eq!(sql.matches("ENABLE ALWAYS TRIGGER").count(), 4);
        assert!(sql.contains("SECURITY DEFINER SET search_path = pg_catalog, pg_temp"));
        assert!(sql.contains(r#"h."tenant" = k."tenant" AND h."id" = k."id""#));
    }
}
