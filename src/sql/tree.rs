//! Every relation a statement names, found by a walk of the whole parse tree.
//!
//! `pg_query`'s own walk (`ParseResult::nodes`) does not descend into every clause: a
//! table named in a subquery under LIMIT, OFFSET, an aggregate's FILTER, a window's ORDER
//! BY, VALUES or TABLESAMPLE is not reported, and a read coldwire does not rewrite sees
//! hot rows only. So the tree is also serialized (its protobuf types derive `Serialize`)
//! and walked generically for relation nodes; `nodes` supplies the context of what it
//! finds (DML and DDL targets are typed fields the generic walk does not see as nodes),
//! and what only the generic walk finds sits in a subquery: a read.

use std::collections::HashSet;

use pg_query::{Context, NodeRef};
use serde_json::Value;

/// A relation as written in the statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    pub schema: Option<String>,
    pub name: String,
    /// Byte offset of the reference in the statement text.
    pub location: i32,
    pub alias: Option<String>,
    /// Read (FROM, JOIN, USING, subqueries anywhere); false for what a statement writes
    /// (the target of INSERT, UPDATE, DELETE, MERGE) or defines (DDL).
    pub read: bool,
    /// The target of an INSERT, UPDATE, DELETE or MERGE.
    pub written: bool,
    /// An unqualified name of a CTE in scope where it is written: it reads that CTE, not
    /// a table ([`cte_references`]). A statement's target never is one.
    pub cte: bool,
}

/// What the walk found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Walk {
    pub relations: Vec<Relation>,
    /// Some query block has FOR UPDATE/SHARE.
    pub locking: bool,
    /// Locations of the relations read under `TABLESAMPLE`.
    pub sampled: Vec<i32>,
    /// The statement fires UPDATE or DELETE triggers: it holds an UPDATE, DELETE or
    /// MERGE, or an INSERT … ON CONFLICT DO UPDATE (also under EXPLAIN or PREPARE).
    pub fires_update_or_delete: bool,
    /// Every function or procedure the statement calls by name, anywhere in it: `CALL`'s
    /// too.
    pub functions: Vec<FunctionCall>,
    /// Column references qualified by a schema (`public.accts.id`, as ORMs write them).
    pub schema_qualified_columns: Vec<QualifiedColumn>,
    /// Every name a range may go by anywhere in the statement, once per occurrence:
    /// relations' names (aliased or not), aliases, CTE names.
    pub range_names: Vec<String>,
}

/// A column reference qualified by a schema: `schema.table.column` (or `.*`), or with a
/// database name first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QualifiedColumn {
    pub location: i32,
    pub schema: String,
    pub table: String,
    /// The names before the table's (1, or 2 with a database name).
    pub prefix: usize,
}

/// A call of a function or procedure by name, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionCall {
    /// The schema, when qualified.
    pub schema: Option<String>,
    pub name: String,
    /// The arguments it passes (`count(*)` passes none).
    pub args: usize,
}

/// Walks the whole of `parsed`.
pub fn walk(parsed: &pg_query::ParseResult) -> Walk {
    let mut out = Walk::default();
    let tree = serde_json::to_value(&parsed.protobuf).unwrap_or(Value::Null);
    let mut written = HashSet::new();
    out.fires_update_or_delete = write_targets(&tree, &mut written);
    // What `nodes` finds, with its context: statement targets (typed fields, which the
    // generic walk below does not see as nodes) and most reads.
    for (node, _, context, _) in parsed.protobuf.nodes() {
        if let NodeRef::RangeVar(rv) = node {
            let target = written.contains(&rv.location);
            out.relations.push(Relation {
                read: !target && context == Context::Select,
                written: target,
                ..relation(rv, false)
            });
        }
    }
    let known: HashSet<i32> = out.relations.iter().map(|r| r.location).collect();
    // Every relation node anywhere: those `nodes` missed are in subqueries, so reads, or
    // the targets of a statement it does not descend into (SQL-level PREPARE).
    visit(&tree, &known, &written, &mut out);
    out.relations.sort_by_key(|r| r.location);
    out.relations.dedup_by_key(|r| r.location);
    let mut ctes = HashSet::new();
    cte_references(&tree, &mut Vec::new(), &mut ctes);
    for r in &mut out.relations {
        r.cte = !r.written && r.schema.is_none() && ctes.contains(&r.location);
    }
    out
}

/// Adds to `out` the locations of the relation nodes under `value` whose unqualified name
/// is that of a CTE in scope there, `visible` holding the names in scope around it. As
/// Postgres scopes them: a CTE is visible to the rest of the statement whose WITH defines
/// it (subqueries included), and, in a WITH that is not RECURSIVE, to the CTEs after it
/// but not to its own query or those before it; in a RECURSIVE one, to all of them. So in
/// `WITH events AS (SELECT * FROM events WHERE …) SELECT … FROM events` the first
/// `events` is the table, and in `(WITH events AS (…) SELECT …) UNION SELECT … FROM
/// events` the last one is.
fn cte_references(value: &Value, visible: &mut Vec<String>, out: &mut HashSet<i32>) {
    match value {
        Value::Object(map) => {
            if let Some(with) = map.get("with_clause").filter(|w| !w.is_null()) {
                let ctes: Vec<(&str, Option<&Value>)> = with
                    .get("ctes")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|n| {
                        let cte = n.get("node")?.get("CommonTableExpr")?;
                        Some((cte.get("ctename")?.as_str()?, cte.get("ctequery")))
                    })
                    .collect();
                let recursive = with.get("recursive").and_then(Value::as_bool) == Some(true);
                let around = visible.len();
                if recursive {
                    visible.extend(ctes.iter().map(|(name, _)| (*name).to_owned()));
                }
                for (name, query) in ctes {
                    if let Some(query) = query {
                        cte_references(query, visible, out);
                    }
                    if !recursive {
                        visible.push(name.to_owned());
                    }
                }
                for (key, inner) in map {
                    if key != "with_clause" {
                        cte_references(inner, visible, out);
                    }
                }
                visible.truncate(around);
                return;
            }
            for (key, inner) in map {
                if key == "RangeVar" {
                    let unqualified = inner
                        .get("schemaname")
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty);
                    let name = inner.get("relname").and_then(Value::as_str);
                    if unqualified && name.is_some_and(|n| visible.iter().any(|v| v == n)) {
                        if let Some(location) = inner
                            .get("location")
                            .and_then(Value::as_i64)
                            .and_then(|l| i32::try_from(l).ok())
                        {
                            out.insert(location);
                        }
                    }
                }
                cte_references(inner, visible, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| cte_references(v, visible, out)),
        _ => {}
    }
}

/// Locations of the `relation` of every INSERT, UPDATE, DELETE and MERGE in the tree;
/// returns whether any of them fires UPDATE or DELETE triggers ([`Walk::fires_update_or_delete`]).
fn write_targets(value: &Value, out: &mut HashSet<i32>) -> bool {
    let mut fires = false;
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                fires |= matches!(key.as_str(), "UpdateStmt" | "DeleteStmt" | "MergeStmt")
                    || (key == "on_conflict_clause"
                        && inner.get("action").and_then(Value::as_i64)
                            == Some(pg_query::protobuf::OnConflictAction::OnconflictUpdate as i64));
                if matches!(
                    key.as_str(),
                    "InsertStmt" | "UpdateStmt" | "DeleteStmt" | "MergeStmt"
                ) {
                    if let Some(location) = inner
                        .get("relation")
                        .and_then(|r| r.get("location"))
                        .and_then(Value::as_i64)
                        .and_then(|l| i32::try_from(l).ok())
                    {
                        out.insert(location);
                    }
                }
                fires |= write_targets(inner, out);
            }
        }
        Value::Array(items) => {
            for v in items {
                fires |= write_targets(v, out);
            }
        }
        _ => {}
    }
    fires
}

fn relation(rv: &pg_query::protobuf::RangeVar, read: bool) -> Relation {
    Relation {
        schema: (!rv.schemaname.is_empty()).then(|| rv.schemaname.clone()),
        name: rv.relname.clone(),
        location: rv.location,
        alias: rv.alias.as_ref().map(|a| a.aliasname.clone()),
        read,
        written: false,
        cte: false,
    }
}

fn visit(value: &Value, known: &HashSet<i32>, written: &HashSet<i32>, out: &mut Walk) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                match key.as_str() {
                    "RangeVar" => {
                        // An aliased one goes by its alias (counted as an alias).
                        if inner.get("alias").is_none_or(Value::is_null) {
                            out.range_names.extend(
                                inner
                                    .get("relname")
                                    .and_then(Value::as_str)
                                    .map(str::to_owned),
                            );
                        }
                        if let Some(mut r) =
                            range_var(inner).filter(|r| !known.contains(&r.location))
                        {
                            if written.contains(&r.location) {
                                r.read = false;
                                r.written = true;
                            }
                            out.relations.push(r);
                        }
                    }
                    // A statement target the typed walk did not reach: its relation is
                    // a typed field, not a node.
                    "InsertStmt" | "UpdateStmt" | "DeleteStmt" | "MergeStmt" => {
                        if let Some(mut r) = inner
                            .get("relation")
                            .and_then(range_var)
                            .filter(|r| !known.contains(&r.location))
                        {
                            r.read = false;
                            r.written = true;
                            out.relations.push(r);
                        }
                    }
                    "FuncCall" => out.functions.extend(function_name(inner)),
                    "ColumnRef" => out.schema_qualified_columns.extend(qualified_column(inner)),
                    "alias" | "Alias" => out.range_names.extend(
                        inner
                            .get("aliasname")
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                    ),
                    "CommonTableExpr" => out.range_names.extend(
                        inner
                            .get("ctename")
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                    ),
                    // CALL's call is a typed field, not a node.
                    "CallStmt" => {
                        out.functions
                            .extend(inner.get("funccall").and_then(function_name));
                    }
                    "RangeTableSample" => {
                        out.sampled.extend(
                            inner
                                .get("relation")
                                .and_then(|r| r.get("node"))
                                .and_then(|n| n.get("RangeVar"))
                                .and_then(range_var)
                                .map(|r| r.location),
                        );
                    }
                    "SelectStmt" => {
                        out.locking |= inner
                            .get("locking_clause")
                            .and_then(Value::as_array)
                            .is_some_and(|l| !l.is_empty());
                    }
                    _ => {}
                }
                visit(inner, known, written, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| visit(v, known, written, out)),
        _ => {}
    }
}

/// A `ColumnRef` of three or four names: qualified by a schema.
fn qualified_column(column: &Value) -> Option<QualifiedColumn> {
    let fields = column.get("fields")?.as_array()?;
    if !(3..=4).contains(&fields.len()) {
        return None;
    }
    let name = |i: usize| -> Option<String> {
        Some(
            fields
                .get(i)?
                .get("node")?
                .get("String")?
                .get("sval")?
                .as_str()?
                .to_owned(),
        )
    };
    let prefix = fields.len() - 2;
    Some(QualifiedColumn {
        location: i32::try_from(column.get("location")?.as_i64()?).ok()?,
        schema: name(prefix - 1)?,
        table: name(prefix)?,
        prefix,
    })
}

/// The name of a `FuncCall` (its `funcname`: the schema when qualified, then the name).
fn function_name(call: &Value) -> Option<FunctionCall> {
    // `WITHIN GROUP` calls an ordered-set aggregate, never a function of SQL or PL/pgSQL.
    if call.get("agg_within_group").and_then(Value::as_bool) == Some(true) {
        return None;
    }
    let parts: Vec<&str> = call
        .get("funcname")?
        .as_array()?
        .iter()
        .filter_map(|n| n.get("node")?.get("String")?.get("sval")?.as_str())
        .collect();
    let args = call
        .get("args")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let (schema, name) = match parts.as_slice() {
        [name] => (None, *name),
        [.., schema, name] => (Some((*schema).to_owned()), *name),
        [] => return None,
    };
    Some(FunctionCall {
        schema,
        name: name.to_owned(),
        args,
    })
}

fn range_var(v: &Value) -> Option<Relation> {
    let text = |key: &str| v.get(key).and_then(Value::as_str).unwrap_or_default();
    let location = i32::try_from(v.get("location")?.as_i64()?).ok()?;
    let schema = text("schemaname");
    Some(Relation {
        schema: (!schema.is_empty()).then(|| schema.to_owned()),
        name: text("relname").to_owned(),
        location,
        alias: v
            .get("alias")
            .and_then(|a| a.get("aliasname"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        read: true,
        written: false,
        cte: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads_of_events(sql: &str) -> usize {
        let parsed = pg_query::parse(sql, 0).unwrap();
        walk(&parsed)
            .relations
            .iter()
            .filter(|r| r.name == "events" && r.read)
            .count()
    }

    #[test]
    fn functions_called_anywhere_are_found() {
        let called = |sql: &str| {
            let mut found: Vec<String> = walk(&pg_query::parse(sql, 0).unwrap())
                .functions
                .into_iter()
                .map(|f| match f.schema {
                    Some(s) => format!("{s}.{}/{}", f.name, f.args),
                    None => format!("{}/{}", f.name, f.args),
                })
                .collect();
            found.sort();
            found.dedup();
            found
        };
        assert_eq!(
            called(
                "SELECT a.f(1), g() FROM h() WHERE x IN (SELECT \"Odd\"(y) FROM t) \
                 LIMIT pg_catalog.abs(-1)"
            ),
            ["Odd/1", "a.f/1", "g/0", "h/0", "pg_catalog.abs/1"]
        );
        assert_eq!(called("CALL s.p(1, q())"), ["q/0", "s.p/2"]);
        assert_eq!(called("EXPLAIN ANALYZE SELECT f()"), ["f/0"]);
        assert_eq!(
            called("SELECT count(*), count(x), f(a => 1, b => 2), v(VARIADIC ARRAY[1])"),
            ["count/0", "count/1", "f/2", "v/1"]
        );
        assert_eq!(
            called("SELECT mode() WITHIN GROUP (ORDER BY k), g(k) FROM t"),
            ["g/1"]
        );
        assert_eq!(called("PREPARE x AS SELECT f($1)"), ["f/1"]);
        assert_eq!(
            called("INSERT INTO t SELECT * FROM f() ON CONFLICT DO NOTHING"),
            ["f/0"]
        );
        assert_eq!(called("SELECT count(*) FROM t"), ["count/0"]);
    }

    #[test]
    fn tables_in_every_clause_are_found() {
        for (sql, n) in [
            ("SELECT 1 LIMIT (SELECT count(*) FROM events)", 1),
            ("SELECT 1 OFFSET (SELECT count(*) FROM events)", 1),
            (
                "SELECT sum(a) FILTER (WHERE a IN (SELECT id FROM events)) FROM x",
                1,
            ),
            (
                "SELECT row_number() OVER (ORDER BY (SELECT 1 FROM events LIMIT 1)) FROM x",
                1,
            ),
            (
                "VALUES ((SELECT 1 FROM events)), ((SELECT 2 FROM events))",
                2,
            ),
            (
                "SELECT * FROM x TABLESAMPLE BERNOULLI ((SELECT 1 FROM events LIMIT 1))",
                1,
            ),
            ("SELECT * FROM events e JOIN events f USING (id)", 2),
            ("INSERT INTO x SELECT * FROM events", 1),
        ] {
            assert_eq!(reads_of_events(sql), n, "{sql}");
        }
    }

    #[test]
    fn targets_of_prepared_and_explained_writes_are_written() {
        for sql in [
            "PREPARE p AS DELETE FROM events WHERE id = $1",
            "EXPLAIN ANALYZE UPDATE events SET a = 1",
            "PREPARE q(int) AS WITH d AS (DELETE FROM events WHERE id = $1 RETURNING *) SELECT * FROM d",
        ] {
            let parsed = pg_query::parse(sql, 0).unwrap();
            let w = walk(&parsed);
            let events: Vec<_> = w.relations.iter().filter(|r| r.name == "events").collect();
            assert_eq!(events.len(), 1, "{sql} {w:?}");
            assert!(!events[0].read && events[0].written, "{sql}");
        }
    }

    #[test]
    fn written_relations_ctes_and_locking_are_told_apart() {
        let parsed = pg_query::parse("DELETE FROM events WHERE id = 1", 0).unwrap();
        let w = walk(&parsed);
        assert_eq!(w.relations.len(), 1);
        assert!(!w.relations[0].read && w.relations[0].written);
        let parsed =
            pg_query::parse("UPDATE x SET v = e.v FROM events e WHERE e.id = x.id", 0).unwrap();
        let w = walk(&parsed);
        assert!(w
            .relations
            .iter()
            .any(|r| r.name == "x" && r.written && !r.read));
        assert!(w
            .relations
            .iter()
            .any(|r| r.name == "events" && r.read && !r.written));
        let parsed = pg_query::parse("CREATE INDEX ON events (id)", 0).unwrap();
        assert!(!walk(&parsed).relations[0].read);
        let parsed = pg_query::parse(
            "SELECT * FROM x LIMIT (WITH events AS (SELECT 1) SELECT count(*) FROM events FOR SHARE)",
            0,
        )
        .unwrap();
        let w = walk(&parsed);
        assert!(w.relations.iter().all(|r| r.cte == (r.name == "events")));
        assert!(w.locking);
        let parsed = pg_query::parse("SELECT * FROM public.events AS e", 0).unwrap();
        assert_eq!(
            walk(&parsed).relations,
            vec![Relation {
                schema: Some("public".into()),
                name: "events".into(),
                location: 14,
                alias: Some("e".into()),
                read: true,
                written: false,
                cte: false,
            }]
        );
    }

    #[test]
    fn a_cte_is_read_only_where_postgres_sees_it() {
        // Per statement, whether each reference of `events`, in order, reads the CTE.
        for (sql, ctes) in [
            (
                "WITH events AS (SELECT * FROM events WHERE k = 1) SELECT count(*) FROM events",
                vec![false, true],
            ),
            (
                "WITH x AS (SELECT 1), events AS (SELECT * FROM events) SELECT * FROM events",
                vec![false, true],
            ),
            (
                "WITH a AS (SELECT count(*) FROM events), events AS (SELECT 1) SELECT * FROM a, events",
                vec![false, true],
            ),
            (
                "(WITH events AS (SELECT 1) SELECT * FROM events) UNION ALL SELECT * FROM events",
                vec![true, false],
            ),
            (
                "SELECT (WITH events AS (SELECT 1) SELECT count(*) FROM events), (SELECT count(*) FROM events)",
                vec![true, false],
            ),
            (
                "WITH RECURSIVE events AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM events WHERE n < 3) SELECT * FROM events",
                vec![true, true],
            ),
            (
                "WITH events AS (SELECT 1) SELECT * FROM public.events, (SELECT * FROM events) s",
                vec![false, true],
            ),
            (
                "WITH events AS (UPDATE events SET k = 1 RETURNING *) SELECT * FROM events",
                vec![false, true],
            ),
            (
                "WITH events AS (SELECT 1) INSERT INTO events SELECT * FROM events",
                vec![false, true],
            ),
            (
                "WITH events AS (SELECT 1) SELECT * FROM x WHERE EXISTS (WITH y AS (SELECT 1) SELECT FROM events)",
                vec![true],
            ),
        ] {
            let parsed = pg_query::parse(sql, 0).unwrap();
            let found: Vec<bool> = walk(&parsed)
                .relations
                .iter()
                .filter(|r| r.name == "events")
                .map(|r| r.cte)
                .collect();
            assert_eq!(found, ctes, "{sql}");
        }
    }

    #[test]
    fn writes_that_fire_update_or_delete_triggers_are_told_apart() {
        for (sql, fires) in [
            ("UPDATE t SET a = 1", true),
            ("/* x */ DELETE FROM t", true),
            (
                "INSERT INTO t SELECT * FROM s ON CONFLICT (id) DO UPDATE SET a = 1",
                true,
            ),
            (
                "INSERT INTO t SELECT * FROM s ON CONFLICT DO NOTHING",
                false,
            ),
            ("INSERT INTO t SELECT * FROM s", false),
            (
                "WITH x AS (DELETE FROM t RETURNING *) INSERT INTO u SELECT * FROM x",
                true,
            ),
            (
                "MERGE INTO t USING s ON t.id = s.id WHEN NOT MATCHED THEN INSERT VALUES (s.id)",
                true,
            ),
            ("EXPLAIN ANALYZE UPDATE t SET a = 1", true),
            ("PREPARE p AS DELETE FROM t WHERE id = $1", true),
        ] {
            let parsed = pg_query::parse(sql, 0).unwrap();
            assert_eq!(walk(&parsed).fires_update_or_delete, fires, "{sql}");
        }
    }
}
