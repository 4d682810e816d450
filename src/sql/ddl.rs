//! DDL on tiered tables (DESIGN §7), looked at before it runs. Segments, the mirror and the
//! capture function are built for the table's columns and key as they were tiered, so a
//! change to those would leave cold rows unreadable or capture broken: such statements are
//! refused (0A000) with a hint. What coldwire carries over is let through, and the catalog
//! follows it once it commits (`catalog::reconcile`): `DROP TABLE` (the table is untiered
//! and its objects deleted) and renames of the table or moves to another schema (it stays
//! tiered). Those run only outside a transaction block and alone in their Query, because
//! until they commit coldwire's catalog connection still sees the table as it was, so a
//! later statement of the same transaction could be planned against the old table. The
//! rest (TRUNCATE, storage parameters, statistics targets, owner, clustering) pass
//! unchanged.

use pg_query::protobuf::{AlterTableType, ObjectType};
use pg_query::NodeEnum;

/// `ALTER TABLE` subcommands that change nothing coldwire depends on.
const HARMLESS_ALTERS: [AlterTableType; 8] = [
    AlterTableType::AtSetRelOptions,
    AlterTableType::AtResetRelOptions,
    AlterTableType::AtSetStatistics,
    AlterTableType::AtSetStorage,
    AlterTableType::AtSetCompression,
    AlterTableType::AtChangeOwner,
    AlterTableType::AtClusterOn,
    AlterTableType::AtDropCluster,
];

/// What a statement does to tiered tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ddl {
    /// Nothing coldwire needs to know about.
    Unaffected,
    /// A change coldwire cannot carry to the cold tier (e.g. "ALTER TABLE … DROP COLUMN on
    /// tiered table events").
    Refused(String),
    /// A change the catalog follows after it commits (e.g. "renaming tiered table events"),
    /// allowed outside a transaction block as the only statement of its Query (`alone`:
    /// it is).
    FollowedAfterCommit { what: String, alone: bool },
}

/// What `parsed` does to tiered tables; `tiered(schema, name)` says whether a name (as
/// written) is a tiered table. A refusal anywhere in the string wins.
pub fn inspect(parsed: &pg_query::ParseResult, tiered: impl Fn(Option<&str>, &str) -> bool) -> Ddl {
    let is_tiered = |rv: &Option<pg_query::protobuf::RangeVar>| {
        rv.as_ref().is_some_and(|rv| {
            let schema = (!rv.schemaname.is_empty()).then_some(rv.schemaname.as_str());
            tiered(schema, &rv.relname)
        })
    };
    let name = |rv: &Option<pg_query::protobuf::RangeVar>| {
        rv.as_ref().map(|r| r.relname.clone()).unwrap_or_default()
    };
    let mut followed = None;
    for raw in &parsed.protobuf.stmts {
        let Some(node) = raw.stmt.as_ref().and_then(|s| s.node.as_ref()) else {
            continue;
        };
        match node {
            NodeEnum::AlterTableStmt(s) if is_tiered(&s.relation) => {
                for cmd in &s.cmds {
                    let Some(NodeEnum::AlterTableCmd(cmd)) = cmd.node.as_ref() else {
                        continue;
                    };
                    let kind =
                        AlterTableType::try_from(cmd.subtype).unwrap_or(AlterTableType::Undefined);
                    if !HARMLESS_ALTERS.contains(&kind) {
                        return Ddl::Refused(format!(
                            "ALTER TABLE … {} on tiered table {}",
                            alter_name(kind),
                            name(&s.relation)
                        ));
                    }
                }
            }
            NodeEnum::RenameStmt(s) if is_tiered(&s.relation) => {
                if s.rename_type != ObjectType::ObjectTable as i32 {
                    return Ddl::Refused(format!(
                        "renaming columns or constraints of tiered table {}",
                        name(&s.relation)
                    ));
                }
                followed.get_or_insert(format!("renaming tiered table {}", name(&s.relation)));
            }
            NodeEnum::AlterObjectSchemaStmt(s) if is_tiered(&s.relation) => {
                followed.get_or_insert(format!(
                    "moving tiered table {} to another schema",
                    name(&s.relation)
                ));
            }
            NodeEnum::DropStmt(s) if s.remove_type == ObjectType::ObjectTable as i32 => {
                for object in &s.objects {
                    let Some(NodeEnum::List(list)) = object.node.as_ref() else {
                        continue;
                    };
                    let parts: Vec<&str> = list
                        .items
                        .iter()
                        .filter_map(|n| match n.node.as_ref() {
                            Some(NodeEnum::String(s)) => Some(s.sval.as_str()),
                            _ => None,
                        })
                        .collect();
                    let (schema, table) = match parts.as_slice() {
                        [table] => (None, *table),
                        [.., schema, table] => (Some(*schema), *table),
                        [] => continue,
                    };
                    if tiered(schema, table) {
                        followed.get_or_insert(format!("DROP TABLE of tiered table {table}"));
                    }
                }
            }
            _ => {}
        }
    }
    match followed {
        Some(what) => Ddl::FollowedAfterCommit {
            what,
            alone: parsed.protobuf.stmts.len() == 1,
        },
        None => Ddl::Unaffected,
    }
}

/// The hint for a change coldwire follows, sent inside a transaction block.
pub const OUTSIDE_BLOCK_HINT: &str =
    "Run the statement on its own, outside a transaction block: coldwire updates its catalog when it commits.";

/// The hint that goes with a refusal.
pub const HINT: &str = "Call coldwire.untier_table on the table first (its cold rows return to the heap), change it, then tier it again.";

fn alter_name(kind: AlterTableType) -> &'static str {
    match kind {
        AlterTableType::AtAddColumn => "ADD COLUMN",
        AlterTableType::AtDropColumn => "DROP COLUMN",
        AlterTableType::AtAlterColumnType => "ALTER COLUMN … TYPE",
        AlterTableType::AtColumnDefault => "ALTER COLUMN … DEFAULT",
        AlterTableType::AtSetNotNull | AlterTableType::AtDropNotNull => "ALTER COLUMN … NOT NULL",
        AlterTableType::AtAddConstraint => "ADD CONSTRAINT",
        AlterTableType::AtDropConstraint => "DROP CONSTRAINT",
        AlterTableType::AtEnableRowSecurity | AlterTableType::AtForceRowSecurity => {
            "ENABLE ROW LEVEL SECURITY"
        }
        AlterTableType::AtDisableTrig
        | AlterTableType::AtDisableTrigAll
        | AlterTableType::AtDisableTrigUser => "DISABLE TRIGGER",
        _ => "this change",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(sql: &str) -> Ddl {
        let parsed = pg_query::parse(sql, 0).unwrap();
        inspect(&parsed, |schema, name| {
            name == "events" && schema.is_none_or(|s| s == "public")
        })
    }

    #[test]
    fn changes_to_columns_are_refused() {
        for sql in [
            "ALTER TABLE events ADD COLUMN x int",
            "ALTER TABLE public.events DROP COLUMN n",
            "ALTER TABLE events ALTER COLUMN n TYPE bigint",
            "ALTER TABLE events SET (fillfactor = 90), ADD CONSTRAINT c CHECK (n > 0)",
            "ALTER TABLE events DISABLE TRIGGER ALL",
            "ALTER TABLE events RENAME COLUMN n TO m",
            "ALTER TABLE events RENAME CONSTRAINT events_pkey TO k",
            "DROP TABLE other; ALTER TABLE events DROP COLUMN n",
        ] {
            assert!(matches!(check(sql), Ddl::Refused(_)), "{sql}");
        }
        assert_eq!(
            check("ALTER TABLE events ADD COLUMN x int"),
            Ddl::Refused("ALTER TABLE … ADD COLUMN on tiered table events".into())
        );
    }

    #[test]
    fn renames_moves_and_drops_are_followed_when_alone() {
        for (sql, alone) in [
            ("ALTER TABLE events RENAME TO e2", true),
            ("ALTER TABLE IF EXISTS public.events RENAME TO e2", true),
            ("ALTER TABLE events SET SCHEMA other", true),
            ("DROP TABLE events", true),
            ("DROP TABLE IF EXISTS other, public.events CASCADE", true),
            ("SELECT 1; DROP TABLE events", false),
            ("BEGIN; ALTER TABLE events RENAME TO e2; COMMIT", false),
        ] {
            match check(sql) {
                Ddl::FollowedAfterCommit { alone: found, .. } => assert_eq!(found, alone, "{sql}"),
                other => panic!("{sql}: {other:?}"),
            }
        }
    }

    #[test]
    fn harmless_changes_and_other_tables_pass() {
        for sql in [
            "ALTER TABLE events SET (fillfactor = 90)",
            "ALTER TABLE events ALTER COLUMN kind SET STATISTICS 200",
            "ALTER TABLE events OWNER TO someone",
            "ALTER TABLE other ADD COLUMN x int",
            "ALTER TABLE other.events ADD COLUMN x int",
            "ALTER TABLE other.events RENAME TO x",
            "DROP TABLE other",
            "DROP VIEW events_view",
            "TRUNCATE events",
            "CREATE INDEX ON events (kind)",
        ] {
            assert_eq!(check(sql), Ddl::Unaffected, "{sql}");
        }
    }
}
