//! DDL on tiered tables (DESIGN §7), looked at before it runs. Segments, the mirror and the
//! capture function are built for the table's columns and key as they were tiered, so a
//! change to those would leave cold rows unreadable or capture broken: such statements are
//! refused (0A000) with a hint. What coldwire carries over is let through, and the catalog
//! follows it once it commits (`catalog::reconcile`): `DROP TABLE` (the table is untiered
//! and its objects deleted), renames of the table or moves to another schema (it stays
//! tiered), and `ADD COLUMN` whose default Postgres computes once for the existing rows
//! (a constant, or a stable expression like `now()`; segments written before read that
//! value, kept in `attmissingval`), with no constraint Postgres would check only against
//! the hot rows, and no NOT NULL without such a default. Those run only outside a transaction block and alone in their Query, because
//! until they commit coldwire's catalog connection still sees the table as it was, so a
//! later statement of the same transaction could be planned against the old table. The
//! rest (TRUNCATE, storage parameters, statistics targets, owner, clustering) pass
//! unchanged.

use pg_query::protobuf::{AlterTableType, ConstrType, ObjectType};
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
    /// `types`: the types of added columns (as written), which must be ones coldwire can
    /// store cold.
    FollowedAfterCommit {
        what: String,
        alone: bool,
        types: Vec<String>,
    },
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
    let mut types = Vec::new();
    // A foreign key of another table that references a tiered one: the flush's delete
    // would run its actions (`tier_table` refuses a table so referenced).
    let references = |c: &NodeEnum| match c {
        NodeEnum::Constraint(k) if k.contype == ConstrType::ConstrForeign as i32 => {
            is_tiered(&k.pktable).then(|| name(&k.pktable))
        }
        _ => None,
    };
    for raw in &parsed.protobuf.stmts {
        let Some(node) = raw.stmt.as_ref().and_then(|s| s.node.as_ref()) else {
            continue;
        };
        let constraints: Vec<&NodeEnum> = match node {
            NodeEnum::CreateStmt(s) => s
                .table_elts
                .iter()
                .filter_map(|e| e.node.as_ref())
                .flat_map(|e| match e {
                    NodeEnum::ColumnDef(d) => d
                        .constraints
                        .iter()
                        .filter_map(|c| c.node.as_ref())
                        .collect(),
                    other => vec![other],
                })
                .collect(),
            NodeEnum::AlterTableStmt(s) => s
                .cmds
                .iter()
                .filter_map(|c| match c.node.as_ref() {
                    Some(NodeEnum::AlterTableCmd(cmd)) => cmd.def.as_ref()?.node.as_ref(),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        if let Some(table) = constraints.into_iter().find_map(references) {
            return Ddl::Refused(format!(
                "a foreign key referencing tiered table {table} (the flush's delete would run its actions)"
            ));
        }
        // What `tier_table` refuses on a table, also refused once it is tiered: it would
        // fire on (or rewrite) the rows coldwire brings back and flushes, or go
        // unenforced against cold rows.
        let gained = match node {
            NodeEnum::IndexStmt(s) if s.unique && is_tiered(&s.relation) => Some(format!(
                "a unique index on tiered table {}",
                name(&s.relation)
            )),
            NodeEnum::CreateTrigStmt(s) if s.row && is_tiered(&s.relation) => Some(format!(
                "a row trigger on tiered table {}",
                name(&s.relation)
            )),
            NodeEnum::RuleStmt(s) if is_tiered(&s.relation) => {
                Some(format!("a rule on tiered table {}", name(&s.relation)))
            }
            _ => None,
        };
        if let Some(gained) = gained {
            return Ddl::Refused(gained);
        }
        match node {
            NodeEnum::AlterTableStmt(s) if is_tiered(&s.relation) => {
                for cmd in &s.cmds {
                    let Some(NodeEnum::AlterTableCmd(cmd)) = cmd.node.as_ref() else {
                        continue;
                    };
                    let kind =
                        AlterTableType::try_from(cmd.subtype).unwrap_or(AlterTableType::Undefined);
                    if kind == AlterTableType::AtAddColumn {
                        let Some(NodeEnum::ColumnDef(def)) =
                            cmd.def.as_ref().and_then(|d| d.node.as_ref())
                        else {
                            continue;
                        };
                        match added_column(def) {
                            Ok(ty) => types.push(ty),
                            Err(why) => {
                                return Ddl::Refused(format!(
                                    "ADD COLUMN {} {why} on tiered table {}",
                                    def.colname,
                                    name(&s.relation)
                                ))
                            }
                        }
                        followed.get_or_insert(format!(
                            "adding columns to tiered table {}",
                            name(&s.relation)
                        ));
                    } else if !HARMLESS_ALTERS.contains(&kind) {
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
            types,
        },
        None => Ddl::Unaffected,
    }
}

/// The type of added column `def` as written (e.g. `"pg_catalog"."int4"[]`), or why
/// coldwire cannot carry the column to the cold tier.
fn added_column(def: &pg_query::protobuf::ColumnDef) -> Result<String, &'static str> {
    use pg_query::protobuf::ConstrType;
    let mut default = None;
    let mut not_null = false;
    for c in &def.constraints {
        let Some(NodeEnum::Constraint(c)) = c.node.as_ref() else {
            continue;
        };
        match ConstrType::try_from(c.contype).unwrap_or(ConstrType::Undefined) {
            ConstrType::ConstrNull => {}
            ConstrType::ConstrNotnull => not_null = true,
            ConstrType::ConstrDefault => default = c.raw_expr.as_deref(),
            ConstrType::ConstrIdentity | ConstrType::ConstrGenerated => {
                return Err("with values computed per row (identity or generated)")
            }
            _ => return Err("with a constraint (checked against the hot rows only)"),
        }
    }
    if let Some(expr) = default {
        if !computed_once(expr) {
            return Err("with a default that may differ per row");
        }
    }
    if not_null && default.is_none_or(is_null_constant) {
        return Err("NOT NULL without a default");
    }
    let ty = def.type_name.as_ref().ok_or("without a type")?;
    if ty.pct_type || ty.setof {
        return Err("with a %TYPE or SETOF type");
    }
    let names: Vec<String> = ty
        .names
        .iter()
        .filter_map(|n| match n.node.as_ref() {
            Some(NodeEnum::String(s)) => Some(crate::sql::quote::quote_ident(&s.sval)),
            _ => None,
        })
        .collect();
    let serial = [
        "serial",
        "serial2",
        "serial4",
        "serial8",
        "smallserial",
        "bigserial",
    ];
    if let [Some(NodeEnum::String(only))] = ty
        .names
        .iter()
        .map(|n| n.node.as_ref())
        .collect::<Vec<_>>()
        .as_slice()
    {
        if serial.contains(&only.sval.as_str()) {
            return Err("with values computed per row (serial)");
        }
    }
    let array = if ty.array_bounds.is_empty() { "" } else { "[]" };
    Ok(format!("{}{array}", names.join(".")))
}

/// Whether Postgres computes default `expr` once for every existing row: constants, casts
/// and operators of them, arrays of them, and the SQL value functions and `now()` (stable:
/// evaluated once by ALTER TABLE, kept in `attmissingval`).
fn computed_once(expr: &pg_query::protobuf::Node) -> bool {
    let once = |n: &Option<Box<pg_query::protobuf::Node>>| n.as_deref().is_none_or(computed_once);
    match expr.node.as_ref() {
        Some(NodeEnum::AConst(_) | NodeEnum::SqlvalueFunction(_)) => true,
        Some(NodeEnum::TypeCast(c)) => once(&c.arg),
        Some(NodeEnum::AExpr(e)) => once(&e.lexpr) && once(&e.rexpr),
        Some(NodeEnum::AArrayExpr(a)) => a.elements.iter().all(computed_once),
        Some(NodeEnum::FuncCall(f)) => {
            f.args.is_empty()
                && matches!(f.funcname.last().and_then(|n| n.node.as_ref()),
                    Some(NodeEnum::String(s)) if s.sval == "now")
        }
        _ => false,
    }
}

fn is_null_constant(expr: &pg_query::protobuf::Node) -> bool {
    match expr.node.as_ref() {
        Some(NodeEnum::AConst(c)) => c.isnull,
        Some(NodeEnum::TypeCast(c)) => c.arg.as_deref().is_some_and(is_null_constant),
        _ => false,
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
            "ALTER TABLE events ADD COLUMN x int DEFAULT random()",
            "ALTER TABLE events ADD COLUMN x timestamptz DEFAULT clock_timestamp()",
            "ALTER TABLE events ADD COLUMN x int NOT NULL",
            "ALTER TABLE events ADD COLUMN x int NOT NULL DEFAULT NULL",
            "ALTER TABLE events ADD COLUMN x int CHECK (x > 0)",
            "ALTER TABLE events ADD COLUMN x int UNIQUE",
            "ALTER TABLE events ADD COLUMN x int REFERENCES other",
            "ALTER TABLE events ADD COLUMN x bigint GENERATED ALWAYS AS IDENTITY",
            "ALTER TABLE events ADD COLUMN x int GENERATED ALWAYS AS (n * 2) STORED",
            "ALTER TABLE events ADD COLUMN x serial",
            "ALTER TABLE events ADD COLUMN x int DEFAULT 1, DROP COLUMN n",
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
            check("ALTER TABLE events ADD COLUMN x int DEFAULT random()"),
            Ddl::Refused(
                "ADD COLUMN x with a default that may differ per row on tiered table events".into()
            )
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
                Ddl::FollowedAfterCommit {
                    alone: found,
                    types,
                    ..
                } => {
                    assert_eq!(found, alone, "{sql}");
                    assert!(types.is_empty(), "{sql}");
                }
                other => panic!("{sql}: {other:?}"),
            }
        }
    }

    #[test]
    fn columns_whose_existing_rows_read_one_value_may_be_added() {
        for (sql, want) in [
            ("ALTER TABLE events ADD COLUMN x int", vec![r#""pg_catalog"."int4""#]),
            (
                "ALTER TABLE events ADD COLUMN IF NOT EXISTS x text[] DEFAULT '{a}', ADD y numeric(10, 2) NOT NULL DEFAULT -1.5",
                vec![r#""text"[]"#, r#""pg_catalog"."numeric""#],
            ),
            (
                "ALTER TABLE events ADD COLUMN x timestamptz DEFAULT now(), ADD z date DEFAULT CURRENT_DATE, SET (fillfactor = 90)",
                vec![r#""timestamptz""#, r#""date""#],
            ),
            ("ALTER TABLE events ADD COLUMN x jsonb DEFAULT '{}'::jsonb NULL", vec![r#""jsonb""#]),
        ] {
            match check(sql) {
                Ddl::FollowedAfterCommit { alone: true, types, .. } => {
                    assert_eq!(types, want, "{sql}")
                }
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
            "CREATE TRIGGER s AFTER INSERT ON events FOR EACH STATEMENT EXECUTE FUNCTION f()",
            "CREATE UNIQUE INDEX ON other (kind)",
            "CREATE TABLE ch(id int REFERENCES other)",
            "CREATE POLICY p ON events USING (true)",
        ] {
            assert_eq!(check(sql), Ddl::Unaffected, "{sql}");
        }
    }

    #[test]
    fn what_tiering_refuses_is_refused_once_tiered() {
        for (sql, what) in [
            (
                "CREATE UNIQUE INDEX u ON events (kind)",
                "a unique index on tiered table events",
            ),
            (
                "CREATE TRIGGER t BEFORE INSERT ON public.events FOR EACH ROW EXECUTE FUNCTION f()",
                "a row trigger on tiered table events",
            ),
            (
                "CREATE RULE r AS ON INSERT TO events DO INSTEAD NOTHING",
                "a rule on tiered table events",
            ),
            (
                "CREATE TABLE ch(id int PRIMARY KEY, e bigint REFERENCES events ON DELETE CASCADE)",
                "a foreign key referencing tiered table events",
            ),
            (
                "CREATE TABLE ch(id int, e bigint, FOREIGN KEY (e) REFERENCES public.events (id))",
                "a foreign key referencing tiered table events",
            ),
            (
                "ALTER TABLE ch ADD CONSTRAINT k FOREIGN KEY (e) REFERENCES events",
                "a foreign key referencing tiered table events",
            ),
        ] {
            match check(sql) {
                Ddl::Refused(got) => assert!(got.starts_with(what), "{sql}: {got}"),
                other => panic!("{sql}: {other:?}"),
            }
        }
    }
}
