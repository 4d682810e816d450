//! What `tier_table` must know about a table before tiering it, read from the system
//! catalogs, and the rules that refuse a table (DESIGN §3), each offender named.

use tokio_postgres::Client;

use super::CatalogError;
use crate::values::ColdType;

/// A table as an admin call names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableRef {
    /// Text, resolved like a `regclass` literal (search_path, quoting).
    Name(String),
    /// A `regclass` sent in binary: the OID.
    Oid(u32),
}

/// One column of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnFacts {
    pub attnum: i16,
    pub name: String,
    pub type_oid: u32,
    pub typmod: i32,
    /// `format_type(atttypid, atttypmod)`.
    pub type_name: String,
    /// The column's collation compares by bytes (or the type has none).
    pub deterministic: bool,
    pub generated: bool,
    pub identity: bool,
}

/// The facts about a table that decide whether and how it can be tiered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableFacts {
    pub oid: u32,
    pub schema: String,
    pub name: String,
    pub relkind: String,
    pub owner: u32,
    pub row_security: bool,
    pub is_partition: bool,
    pub has_children: bool,
    pub inherits: bool,
    pub columns: Vec<ColumnFacts>,
    /// Primary-key attnums in key order, if there is a primary key.
    pub pk: Option<Vec<i16>>,
    /// The primary key is DEFERRABLE (checked at commit rather than per row).
    pub pk_deferrable: bool,
    /// Foreign keys of other tables that reference this one: `constraint on table`.
    pub inbound_fks: Vec<String>,
    /// Unique indexes other than the primary key, and exclusion constraints.
    pub other_unique: Vec<String>,
    /// Row-level triggers that are not coldwire's.
    pub row_triggers: Vec<String>,
    /// Subscriptions that replicate into the table (its rows in `pg_subscription_rel`).
    pub subscriptions: Vec<String>,
    /// Rewrite rules on the table (`CREATE RULE`), quoted.
    pub rules: Vec<String>,
    /// coldwire's id, if the table is tiered already.
    pub tiered_id: Option<i64>,
}

/// Primary-key types whose equality is byte equality (so a key found in cold data is the
/// key Postgres would match): integers, text and varchar under a deterministic collation,
/// uuid, bytea, date, time, timestamp, timestamptz, bool.
const BYTE_EQUAL_KEY_TYPES: [u32; 13] = [
    21, 23, 20, 25, 1043, 2950, 17, 1082, 1083, 1114, 1184, 16, 19,
];

/// What a tiered table may have gained since it was tiered (through a `DO` block, a
/// function or a direct connection, where coldwire sees no DDL) that coldwire cannot
/// serve, as a `text[]` expression of reasons for the table whose oid is `rel`: row-level
/// security (cold rows would pass its policies), a foreign key referencing it (the
/// flush's delete would fire its actions), a unique index or exclusion constraint other
/// than the key (not enforced against cold rows), a row trigger or a rule (they would
/// fire on, or rewrite, the rows a write brings back and the flush deletes). Empty when
/// none. (`rel` may name an outer query's column: no alias inside is `c`.)
pub fn unservable_sql(rel: &str) -> String {
    format!(
        "ARRAY(SELECT 'row-level security is enabled, whose policies coldwire cannot carry to cold rows' \
                FROM pg_catalog.pg_class WHERE oid = {rel} AND relrowsecurity \
         UNION ALL SELECT pg_catalog.format('foreign key %I on %s references it (the flush''s delete would fire its actions)', \
                conname, conrelid::regclass) FROM pg_catalog.pg_constraint WHERE contype = 'f' AND confrelid = {rel} \
         UNION ALL SELECT pg_catalog.format('unique index %I cannot be enforced across hot and cold rows', ix.relname) \
                FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class ix ON ix.oid = i.indexrelid \
                WHERE i.indrelid = {rel} AND i.indisunique AND NOT i.indisprimary \
         UNION ALL SELECT pg_catalog.format('exclusion constraint %I cannot be enforced across hot and cold rows', conname) \
                FROM pg_catalog.pg_constraint WHERE conrelid = {rel} AND contype = 'x' \
         UNION ALL SELECT pg_catalog.format('row trigger %I would fire when cold rows are brought back or flushed', tgname) \
                FROM pg_catalog.pg_trigger WHERE tgrelid = {rel} AND NOT tgisinternal AND (tgtype & 1) = 1 \
                AND NOT (tgname = '{keys}' AND EXISTS (SELECT 1 FROM pg_catalog.pg_proc p \
                         WHERE p.oid = tgfoid AND p.pronamespace = 'coldwire'::pg_catalog.regnamespace \
                           AND p.proname LIKE 'capture\\_%')) \
         UNION ALL SELECT pg_catalog.format('rule %I would rewrite the rows coldwire brings back or flushes', rulename) \
                FROM pg_catalog.pg_rewrite WHERE ev_class = {rel} AND rulename <> '_RETURN' \
         ORDER BY 1)",
        keys = super::capture::KEYS_TRIGGER,
    )
}

/// The names of the subscriptions replicating into relation `$1`, one per row, sorted.
/// Logical-replication apply fires row triggers only, never the statement triggers that
/// capture writes, so its writes never reach the mirror (every column read here is
/// granted to PUBLIC).
const SUBSCRIPTIONS: &str = "SELECT format('%I', s.subname) FROM pg_catalog.pg_subscription_rel r \
     JOIN pg_catalog.pg_subscription s ON s.oid = r.srsubid WHERE r.srrelid = $1 ORDER BY 1";

/// Reads the facts about `table`, resolved like a regclass literal under the service
/// connection's search_path (schema-qualify names to be independent of it).
///
/// # Errors
/// [`CatalogError::UndefinedTable`] when nothing is found; Postgres errors otherwise.
pub async fn table_facts(client: &Client, table: &TableRef) -> Result<TableFacts, CatalogError> {
    const RELATION: &str =
        "SELECT c.oid, n.nspname::text, c.relname::text, c.relkind::text, c.relowner, \
        c.relrowsecurity, c.relispartition, c.relhassubclass, \
        EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = c.oid) \
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = ";
    let row = match table {
        TableRef::Name(name) => {
            client
                .query_opt(&format!("{RELATION} to_regclass($1)"), &[name])
                .await?
        }
        TableRef::Oid(oid) => {
            client
                .query_opt(&format!("{RELATION} $1::oid"), &[oid])
                .await?
        }
    };
    let Some(row) = row else {
        let shown = match table {
            TableRef::Name(name) => name.clone(),
            TableRef::Oid(oid) => format!("with OID {oid}"),
        };
        return Err(CatalogError::UndefinedTable(shown));
    };
    let oid: u32 = row.get(0);
    let columns = client
        .query(
            "SELECT a.attnum, a.attname::text, a.atttypid, a.atttypmod, format_type(a.atttypid, a.atttypmod), \
                    COALESCE(co.collisdeterministic, true), a.attgenerated <> '', a.attidentity <> '' \
             FROM pg_attribute a LEFT JOIN pg_collation co ON co.oid = a.attcollation \
             WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            &[&oid],
        )
        .await?
        .into_iter()
        .map(|r| ColumnFacts {
            attnum: r.get(0),
            name: r.get(1),
            type_oid: r.get(2),
            typmod: r.get(3),
            type_name: r.get(4),
            deterministic: r.get(5),
            generated: r.get(6),
            identity: r.get(7),
        })
        .collect();
    let pk_row = client
        .query_opt(
            "SELECT i.indkey::int2[], NOT i.indimmediate FROM pg_index i WHERE i.indrelid = $1 AND i.indisprimary",
            &[&oid],
        )
        .await?;
    let pk = pk_row.as_ref().map(|r| r.get::<_, Vec<i16>>(0));
    let pk_deferrable = pk_row.as_ref().is_some_and(|r| r.get::<_, bool>(1));
    let strings = |rows: Vec<tokio_postgres::Row>| {
        rows.into_iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>()
    };
    let inbound_fks = strings(
        client
            .query(
                "SELECT format('%I on %s', conname, conrelid::regclass) FROM pg_constraint \
                 WHERE contype = 'f' AND confrelid = $1 ORDER BY 1",
                &[&oid],
            )
            .await?,
    );
    let other_unique = strings(
        client
            .query(
                "SELECT format('%I', c.relname) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
                 WHERE i.indrelid = $1 AND i.indisunique AND NOT i.indisprimary \
                 UNION SELECT format('%I', conname) FROM pg_constraint WHERE conrelid = $1 AND contype = 'x' \
                 ORDER BY 1",
                &[&oid],
            )
            .await?,
    );
    let row_triggers = strings(
        client
            .query(
                "SELECT format('%I', tgname) FROM pg_trigger WHERE tgrelid = $1 AND NOT tgisinternal \
                 AND (tgtype & 1) = 1 \
                 AND NOT (tgname = $2 AND EXISTS (SELECT 1 FROM pg_proc p WHERE p.oid = tgfoid \
                          AND p.pronamespace = 'coldwire'::regnamespace AND p.proname LIKE 'capture\\_%')) \
                 ORDER BY 1",
                &[&oid, &super::capture::KEYS_TRIGGER],
            )
            .await?,
    );
    let subscriptions = strings(client.query(SUBSCRIPTIONS, &[&oid]).await?);
    let rules = strings(
        client
            .query(
                "SELECT format('%I', rulename) FROM pg_rewrite WHERE ev_class = $1 AND rulename <> '_RETURN' ORDER BY 1",
                &[&oid],
            )
            .await?,
    );
    let tiered_id = client
        .query_opt("SELECT id FROM coldwire.tables WHERE relid = $1", &[&oid])
        .await?
        .map(|r| r.get::<_, i64>(0));
    Ok(TableFacts {
        oid,
        schema: row.get(1),
        name: row.get(2),
        relkind: row.get(3),
        owner: row.get(4),
        row_security: row.get(5),
        is_partition: row.get(6),
        has_children: row.get(7),
        inherits: row.get(8),
        columns,
        pk,
        pk_deferrable,
        inbound_fks,
        other_unique,
        row_triggers,
        subscriptions,
        rules,
        tiered_id,
    })
}

impl TableFacts {
    /// The OID of the owning role.
    pub fn oid_owner(&self) -> u32 {
        self.owner
    }

    /// `schema.table`, quoted where needed, for messages.
    pub fn display_name(&self) -> String {
        format!(
            "{}.{}",
            crate::sql::quote::display_ident(&self.schema),
            crate::sql::quote::display_ident(&self.name)
        )
    }

    /// The primary-key columns, in key order.
    pub fn pk_columns(&self) -> Vec<&ColumnFacts> {
        self.pk
            .iter()
            .flatten()
            .filter_map(|attnum| self.columns.iter().find(|c| c.attnum == *attnum))
            .collect()
    }

    /// Every reason the table cannot be tiered, each naming its offender; empty if none.
    pub fn refusals(&self) -> Vec<String> {
        let mut reasons = Vec::new();
        if self.schema == "coldwire" {
            reasons.push("it is one of coldwire's own catalog tables".to_owned());
        }
        match self.relkind.as_str() {
            "r" => {}
            "p" => reasons.push("it is a partitioned table (not supported yet)".to_owned()),
            other => reasons.push(format!("it is not an ordinary table (relkind {other})")),
        }
        if self.is_partition {
            reasons.push("it is a partition (not supported yet)".to_owned());
        }
        if self.has_children || self.inherits {
            reasons.push("it takes part in table inheritance (not supported yet)".to_owned());
        }
        if self.row_security {
            reasons.push(
                "row-level security is enabled: coldwire cannot carry its policies to cold rows"
                    .to_owned(),
            );
        }
        if self.pk.is_none() {
            reasons.push("it has no primary key".to_owned());
        }
        if self.pk_deferrable {
            // Capture relies on keys being unique within each statement, and the write path
            // on duplicates of cold keys failing at the statement (DESIGN §4, §7).
            reasons.push(
                "its primary key is DEFERRABLE: coldwire needs it checked per statement".to_owned(),
            );
        }
        for c in self.pk_columns() {
            if super::capture::KEY_TABLE_COLUMNS.contains(&c.name.as_str()) {
                reasons.push(format!(
                    "primary-key column {} has the name of a column coldwire keeps beside the key ({}); rename the key column to tier the table",
                    crate::sql::quote::display_ident(&c.name),
                    super::capture::KEY_TABLE_COLUMNS.join(", ")
                ));
            }
            if !BYTE_EQUAL_KEY_TYPES.contains(&c.type_oid) {
                reasons.push(format!(
                    "primary-key column {} has type {}, whose equality is not byte equality",
                    crate::sql::quote::display_ident(&c.name),
                    c.type_name
                ));
            } else if !c.deterministic {
                reasons.push(format!(
                    "primary-key column {} has a nondeterministic collation",
                    crate::sql::quote::display_ident(&c.name)
                ));
            }
        }
        for c in &self.columns {
            if let Err(e) = ColdType::for_column(c.type_oid, c.typmod) {
                reasons.push(format!(
                    "column {} has type {}, which coldwire cannot store cold ({})",
                    crate::sql::quote::display_ident(&c.name),
                    c.type_name,
                    e.reason
                ));
            }
        }
        for fk in &self.inbound_fks {
            reasons.push(format!(
                "foreign key {fk} references it (flushing would fire its actions)"
            ));
        }
        for u in &self.other_unique {
            reasons.push(format!(
                "unique or exclusion constraint {u} cannot be enforced across hot and cold rows"
            ));
        }
        for t in &self.row_triggers {
            reasons.push(format!(
                "row trigger {t} would fire when cold rows are rehydrated"
            ));
        }
        for r in &self.rules {
            reasons.push(format!(
                "rule {r} would rewrite the rows coldwire brings back or flushes"
            ));
        }
        for s in &self.subscriptions {
            reasons.push(format!(
                "subscription {s} replicates into it, and logical-replication apply passes coldwire's statement-level capture unseen"
            ));
        }
        reasons
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(attnum: i16, name: &str, type_oid: u32, type_name: &str) -> ColumnFacts {
        ColumnFacts {
            attnum,
            name: name.into(),
            type_oid,
            typmod: -1,
            type_name: type_name.into(),
            deterministic: true,
            generated: false,
            identity: false,
        }
    }

    fn plain() -> TableFacts {
        TableFacts {
            oid: 1,
            schema: "public".into(),
            name: "events".into(),
            relkind: "r".into(),
            owner: 10,
            row_security: false,
            is_partition: false,
            has_children: false,
            inherits: false,
            columns: vec![
                column(1, "id", 20, "bigint"),
                column(2, "body", 3802, "jsonb"),
            ],
            pk: Some(vec![1]),
            pk_deferrable: false,
            inbound_fks: vec![],
            other_unique: vec![],
            row_triggers: vec![],
            subscriptions: vec![],
            rules: vec![],
            tiered_id: None,
        }
    }

    #[test]
    fn a_plain_table_is_accepted() {
        assert!(plain().refusals().is_empty());
        assert_eq!(plain().display_name(), "public.events");
    }

    #[test]
    fn every_offender_is_named() {
        let mut t = plain();
        t.pk = Some(vec![3]);
        t.columns.push(column(3, "Amount", 1700, "numeric"));
        t.columns.push(column(4, "Where", 600, "point"));
        t.row_security = true;
        t.inbound_fks.push("orders_event_fk on orders".into());
        t.other_unique.push("events_body_key".into());
        t.row_triggers.push("audit".into());
        t.subscriptions.push("from_primary".into());
        t.rules.push("no_inserts".into());
        t.pk_deferrable = true;
        t.schema = "coldwire".into();
        t.columns.push(column(5, "seq", 20, "bigint"));
        t.pk = Some(vec![3, 5]);
        let reasons = t.refusals().join("\n");
        for needle in [
            "\"Amount\" has type numeric, whose equality is not byte equality",
            "column \"Where\" has type point",
            "row-level security",
            "orders_event_fk on orders",
            "events_body_key",
            "row trigger audit",
            "subscription from_primary replicates into it",
            "rule no_inserts would rewrite",
            "primary key is DEFERRABLE",
            "coldwire's own catalog tables",
            "primary-key column seq has the name of a column coldwire keeps",
        ] {
            assert!(reasons.contains(needle), "missing {needle:?} in\n{reasons}");
        }
        let mut t = plain();
        t.pk = None;
        t.relkind = "p".into();
        let reasons = t.refusals().join("\n");
        assert!(reasons.contains("no primary key") && reasons.contains("partitioned"));
        let mut t = plain();
        t.columns[0].deterministic = false;
        t.columns[0].type_oid = 25;
        assert!(t.refusals()[0].contains("nondeterministic collation"));
    }
}
