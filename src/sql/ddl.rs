//! DDL on tiered tables (DESIGN §7) that coldwire cannot carry to the cold tier yet, found
//! before it runs: segments, the mirror and the capture function are built for the table's
//! columns, name and key as they were tiered, so a change to them would leave cold rows
//! unreadable or capture broken. Such statements are refused (0A000) with a hint; the rest
//! (TRUNCATE, storage parameters, statistics targets, owner, clustering) pass unchanged.

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

/// What `parsed` does to a tiered table that coldwire refuses (e.g. "ALTER TABLE … ADD
/// COLUMN on events"), if anything; `tiered(schema, name)` says whether a name (as
/// written) is a tiered table.
pub fn refused(
    parsed: &pg_query::ParseResult,
    tiered: impl Fn(Option<&str>, &str) -> bool,
) -> Option<String> {
    let is_tiered = |rv: &Option<pg_query::protobuf::RangeVar>| {
        rv.as_ref().is_some_and(|rv| {
            let schema = (!rv.schemaname.is_empty()).then_some(rv.schemaname.as_str());
            tiered(schema, &rv.relname)
        })
    };
    let name = |rv: &Option<pg_query::protobuf::RangeVar>| {
        rv.as_ref().map(|r| r.relname.clone()).unwrap_or_default()
    };
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
                        return Some(format!(
                            "ALTER TABLE … {} on tiered table {}",
                            alter_name(kind),
                            name(&s.relation)
                        ));
                    }
                }
            }
            NodeEnum::RenameStmt(s) if is_tiered(&s.relation) => {
                return Some(format!(
                    "renaming tiered table {} or its parts",
                    name(&s.relation)
                ));
            }
            NodeEnum::AlterObjectSchemaStmt(s) if is_tiered(&s.relation) => {
                return Some(format!(
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
                        return Some(format!("DROP TABLE of tiered table {table}"));
                    }
                }
            }
            _ => {}
        }
    }
    None
}

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

    fn check(sql: &str) -> Option<String> {
        let parsed = pg_query::parse(sql, 0).unwrap();
        refused(&parsed, |schema, name| {
            name == "events" && schema.is_none_or(|s| s == "public")
        })
    }

    #[test]
    fn changes_to_columns_names_and_existence_are_refused() {
        for sql in [
            "ALTER TABLE events ADD COLUMN x int",
            "ALTER TABLE public.events DROP COLUMN n",
            "ALTER TABLE events ALTER COLUMN n TYPE bigint",
            "ALTER TABLE events SET (fillfactor = 90), ADD CONSTRAINT c CHECK (n > 0)",
            "ALTER TABLE events DISABLE TRIGGER ALL",
            "ALTER TABLE events RENAME TO e2",
            "ALTER TABLE events RENAME COLUMN n TO m",
            "ALTER TABLE events SET SCHEMA other",
            "DROP TABLE events",
            "DROP TABLE IF EXISTS other, public.events CASCADE",
            "SELECT 1; DROP TABLE events",
        ] {
            assert!(check(sql).is_some(), "{sql}");
        }
        assert_eq!(
            check("ALTER TABLE events ADD COLUMN x int").unwrap(),
            "ALTER TABLE … ADD COLUMN on tiered table events"
        );
    }

    #[test]
    fn harmless_changes_and_other_tables_pass() {
        for sql in [
            "ALTER TABLE events SET (fillfactor = 90)",
            "ALTER TABLE events ALTER COLUMN kind SET STATISTICS 200",
            "ALTER TABLE events OWNER TO someone",
            "ALTER TABLE other ADD COLUMN x int",
            "ALTER TABLE other.events ADD COLUMN x int",
            "DROP TABLE other",
            "DROP VIEW events_view",
            "TRUNCATE events",
            "CREATE INDEX ON events (kind)",
        ] {
            assert_eq!(check(sql), None, "{sql}");
        }
    }
}
