//! Writes to tiered tables (DESIGN §7): which tiered table a statement writes or locks,
//! and which of its cold rows the statement may touch, as a union of scans (each a
//! conjunction the cold planner prunes by). coldwire brings those rows back into the heap
//! before the statement runs, unchanged, so Postgres itself applies it to every row it
//! could touch: row counts, RETURNING, unique violations and ON CONFLICT behave natively.
//!
//! What bounds the rows:
//! - UPDATE, DELETE, SELECT … FOR UPDATE/SHARE: the conjuncts of the WHERE clause on the
//!   target; an UPDATE that sets the key to constants also touches those keys (a unique
//!   violation must be raised against a cold row too).
//! - INSERT … VALUES (with or without ON CONFLICT): the inserted keys.
//! - MERGE: the conjuncts of its ON condition on the target.
//! - INSERT … SELECT (or keys left to their defaults), a key set to an expression: no
//!   row up front. Keys such a statement creates are checked by the capture function
//!   against the bounds of the cold keys (`coldwire.bounds_<id>`); one that may be cold
//!   fails the statement with the keys named, and coldwire brings them back and runs it
//!   again.
//! - A write in a CTE, or a statement that also reads the target elsewhere: every cold
//!   row, within the `max_rehydrate_rows` cap.
//!
//! Keys the statement may create that the scans pin down exactly (`Write::inserted`) are
//! claimed as absent when no segment holds them, so the capture check passes them.

use pg_query::protobuf::{node::Node as N, BoolExprType, Node};

use super::classify::{executed, prepared_body};
use super::predicates::{conjuncts_of, constant, extract, ColumnPredicate, Comparison};
use super::rewrite::TieredTable;
use super::tree::walk;

/// The cold rows a write may touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Touched {
    /// The union of these scans (each a conjunction; an empty one means every row).
    Scans(Vec<Vec<ColumnPredicate>>),
    /// Every row.
    All,
}

/// A statement that writes or locks a tiered table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub table: TieredTable,
    pub touched: Touched,
    /// Scans over the keys the statement may create (INSERT … VALUES, an UPDATE that sets
    /// the key to constants, MERGE's ON condition): those that pin every key column to
    /// values are claimed absent when no segment holds them.
    pub inserted: Vec<Vec<ColumnPredicate>>,
    /// It fires the table's UPDATE or DELETE triggers ([`super::tree::Walk::fires_update_or_delete`]).
    pub fires_update_or_delete: bool,
}

/// Why a write cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    #[error("a statement that {} {target} and reads another tiered table, {other}, is not supported yet", if *.locking { "locks rows of" } else { "writes" })]
    ReadsAnotherTiered {
        target: String,
        other: String,
        /// A locking read (`SELECT … FOR UPDATE`), not a write.
        locking: bool,
    },
    #[error("a statement that writes more than one tiered table is not supported yet")]
    SeveralTargets,
}

/// The write `parsed` makes to a tiered table `resolve` knows, if any.
///
/// # Errors
/// Writes coldwire cannot serve yet ([`WriteError`]).
pub fn classify(
    parsed: &pg_query::ParseResult,
    resolve: impl Fn(Option<&str>, &str) -> Option<TieredTable>,
) -> Result<Option<Write>, WriteError> {
    let walked = walk(parsed);
    let tiered: Vec<_> = walked
        .relations
        .iter()
        .filter(|r| !r.cte)
        .filter_map(|r| resolve(r.schema.as_deref(), &r.name).map(|t| (r, t)))
        .collect();
    let targets: Vec<_> = tiered.iter().filter(|(r, _)| r.written).collect();
    let [stmt] = parsed.protobuf.stmts.as_slice() else {
        return Ok(None);
    };
    // The statement that runs: the one an EXPLAIN ANALYZE explains, or a SQL-level
    // PREPARE defines (planned at each EXECUTE).
    let top = stmt.stmt.as_ref().and_then(|s| s.node.as_ref()).map(|n| {
        let n = executed(n);
        let n = crate::sql::classify::declared_query(n).unwrap_or(n);
        prepared_body(n).map_or(n, executed)
    });
    let (target, locking) = match (targets.as_slice(), top) {
        ([], Some(N::SelectStmt(_))) if walked.locking && !tiered.is_empty() => {
            // A locking read: the first tiered table it reads is the one whose rows it
            // brings back and locks; it runs as written, so it may read no other.
            (tiered[0].clone(), true)
        }
        ([], _) => return Ok(None),
        ([one], _) => ((*one).clone(), false),
        ([first, rest @ ..], _) => {
            // Several writes of one table (writable CTEs): every row it may touch.
            if rest.iter().any(|(_, t)| t.table_id != first.1.table_id) {
                return Err(WriteError::SeveralTargets);
            }
            return Ok(Some(Write {
                table: first.1.clone(),
                touched: Touched::All,
                inserted: Vec::new(),
                fires_update_or_delete: walked.fires_update_or_delete,
            }));
        }
    };
    let (relation, table) = target;
    // It runs as written once the rows it may touch are back in the heap: a read of
    // another tiered table would see that table's hot rows only.
    if let Some((_, other)) = tiered
        .iter()
        .find(|(r, t)| r.read && t.table_id != table.table_id)
    {
        return Err(WriteError::ReadsAnotherTiered {
            target: table.name.clone(),
            other: other.name.clone(),
            locking,
        });
    }
    // Another reference to the table itself reads rows the target's conditions do not
    // bound (a self-join, a subquery): every row comes back first.
    let reads_itself = tiered
        .iter()
        .any(|(r, t)| t.table_id == table.table_id && r.read && r.location != relation.location);
    let name = relation
        .alias
        .clone()
        .unwrap_or_else(|| relation.name.clone());
    let mut inserted = Vec::new();
    let touched = if reads_itself {
        Touched::All
    } else {
        let at = |r: Option<&pg_query::protobuf::RangeVar>| {
            r.map(|r| r.location) == Some(relation.location)
        };
        match write_statement(parsed, relation.location).or(top) {
            Some(N::UpdateStmt(u)) if at(u.relation.as_ref()) => {
                let mut scans =
                    where_scans(u.where_clause.as_deref(), &name, u.from_clause.is_empty());
                // A key set to an expression: the capture check catches a cold one.
                if let Some(keys) = key_assignments(&u.target_list, &table.pk) {
                    inserted.extend(keys.iter().cloned());
                    scans.extend(keys);
                }
                Touched::Scans(scans)
            }
            Some(N::DeleteStmt(d)) if at(d.relation.as_ref()) => Touched::Scans(where_scans(
                d.where_clause.as_deref(),
                &name,
                d.using_clause.is_empty(),
            )),
            Some(N::InsertStmt(i)) if at(i.relation.as_ref()) => {
                // Without VALUES keys: nothing up front, the capture check catches a
                // cold one.
                match inserted_keys(i, &table) {
                    Some(scan) => {
                        inserted.push(scan.clone());
                        Touched::Scans(vec![scan])
                    }
                    None => Touched::Scans(Vec::new()),
                }
            }
            Some(N::MergeStmt(m)) if at(m.relation.as_ref()) => {
                let scan = where_conjuncts(m.join_condition.as_deref(), &name, false);
                inserted.push(scan.clone());
                Touched::Scans(vec![scan])
            }
            Some(N::SelectStmt(_)) if locking => {
                Touched::Scans(vec![extract(parsed, relation.location, &name)])
            }
            // Another shape: every row.
            _ => Touched::All,
        }
    };
    Ok(Some(Write {
        table,
        touched,
        inserted,
        fires_update_or_delete: walked.fires_update_or_delete,
    }))
}

/// The INSERT, UPDATE, DELETE or MERGE whose target is the relation at `location`,
/// wherever it is (top level or a CTE).
fn write_statement(parsed: &pg_query::ParseResult, location: i32) -> Option<&N> {
    parsed
        .protobuf
        .stmts
        .iter()
        .find_map(|s| find_write(s.stmt.as_ref()?.node.as_ref()?, location))
}

fn find_write(node: &N, location: i32) -> Option<&N> {
    let target = |r: &Option<pg_query::protobuf::RangeVar>| {
        r.as_ref().is_some_and(|r| r.location == location)
    };
    let with = match node {
        N::InsertStmt(i) if target(&i.relation) => return Some(node),
        N::UpdateStmt(u) if target(&u.relation) => return Some(node),
        N::DeleteStmt(d) if target(&d.relation) => return Some(node),
        N::MergeStmt(m) if target(&m.relation) => return Some(node),
        N::InsertStmt(i) => i.with_clause.as_ref(),
        N::UpdateStmt(u) => u.with_clause.as_ref(),
        N::DeleteStmt(d) => d.with_clause.as_ref(),
        N::MergeStmt(m) => m.with_clause.as_ref(),
        N::SelectStmt(s) => s.with_clause.as_ref(),
        N::ExplainStmt(e) => return find_write(e.query.as_ref()?.node.as_ref()?, location),
        N::PrepareStmt(p) => return find_write(p.query.as_ref()?.node.as_ref()?, location),
        _ => None,
    }?;
    with.ctes.iter().find_map(|c| match c.node.as_ref()? {
        N::CommonTableExpr(cte) => find_write(cte.ctequery.as_ref()?.node.as_ref()?, location),
        _ => None,
    })
}

fn where_conjuncts(
    condition: Option<&Node>,
    name: &str,
    only_relation: bool,
) -> Vec<ColumnPredicate> {
    condition
        .map(|c| conjuncts_of(c, name, only_relation))
        .unwrap_or_default()
}

/// The scans a WHERE clause bounds: one per arm of a top-level OR (recursively), each
/// the conjuncts of its arm; one for any other condition.
fn where_scans(
    condition: Option<&Node>,
    name: &str,
    only_relation: bool,
) -> Vec<Vec<ColumnPredicate>> {
    match condition.and_then(|c| c.node.as_ref()) {
        Some(N::BoolExpr(b)) if b.boolop == BoolExprType::OrExpr as i32 => b
            .args
            .iter()
            .flat_map(|arm| where_scans(Some(arm), name, only_relation))
            .collect(),
        _ => vec![where_conjuncts(condition, name, only_relation)],
    }
}

/// For an UPDATE's SET list: the key values it assigns, as extra scans (none when it
/// leaves the key alone); `None` when it sets a key column to something not constant.
/// (For a composite key, one scan per assigned column: a superset.)
fn key_assignments(targets: &[Node], pk: &[String]) -> Option<Vec<Vec<ColumnPredicate>>> {
    let mut scans = Vec::new();
    for t in targets {
        let Some(N::ResTarget(r)) = t.node.as_ref() else {
            continue;
        };
        if !pk.contains(&r.name) {
            continue;
        }
        let value = constant(r.val.as_deref()?)?;
        scans.push(vec![ColumnPredicate {
            column: r.name.clone(),
            comparison: Comparison::Eq(value),
        }]);
    }
    Some(scans)
}

/// For an INSERT … VALUES: one conjunction with an IN list of the inserted values per key
/// column (a superset for a composite key); `None` for any other source or a key value
/// that is not a constant.
fn inserted_keys(
    insert: &pg_query::protobuf::InsertStmt,
    table: &TieredTable,
) -> Option<Vec<ColumnPredicate>> {
    let Some(N::SelectStmt(select)) = insert.select_stmt.as_deref()?.node.as_ref() else {
        return None;
    };
    if select.values_lists.is_empty() {
        return None;
    }
    let columns: Vec<String> = if insert.cols.is_empty() {
        table.columns.clone()
    } else {
        insert
            .cols
            .iter()
            .filter_map(|c| match c.node.as_ref() {
                Some(N::ResTarget(r)) => Some(r.name.clone()),
                _ => None,
            })
            .collect()
    };
    let mut scan = Vec::new();
    for key in &table.pk {
        // A key column left to its default (a sequence): nothing of it can be cold-known.
        let position = columns.iter().position(|c| c == key)?;
        let mut values = Vec::new();
        for row in &select.values_lists {
            let Some(N::List(list)) = row.node.as_ref() else {
                return None;
            };
            values.push(constant(list.items.get(position)?)?);
        }
        scan.push(ColumnPredicate {
            column: key.clone(),
            comparison: Comparison::In(values),
        });
    }
    Some(scan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::params::Constant;

    fn events() -> TieredTable {
        TieredTable {
            table_id: 7,
            schema: "public".into(),
            name: "events".into(),
            columns: vec!["id".into(), "kind".into()],
            pk: vec!["id".into()],
            guarded: true,
            types: Vec::new(),
        }
    }

    fn touched(sql: &str) -> Option<Touched> {
        let parsed = pg_query::parse(sql, 0).unwrap();
        let other = |s: Option<&str>, n: &str| {
            (n == "other" && s.is_none()).then(|| TieredTable {
                table_id: 8,
                name: "other".into(),
                ..events()
            })
        };
        classify(&parsed, |s, n| {
            (n == "events" && s.is_none_or(|s| s == "public"))
                .then(events)
                .or_else(|| other(s, n))
        })
        .unwrap()
        .map(|w| w.touched)
    }

    fn eq(column: &str, c: Constant) -> ColumnPredicate {
        ColumnPredicate {
            column: column.into(),
            comparison: Comparison::Eq(c),
        }
    }

    #[test]
    fn where_clauses_bound_updates_deletes_and_locking_reads() {
        assert_eq!(
            touched("UPDATE events SET kind = 'x' WHERE id = $1"),
            Some(Touched::Scans(vec![vec![eq("id", Constant::Param(1))]]))
        );
        assert_eq!(
            touched("DELETE FROM events e WHERE e.id = 5"),
            Some(Touched::Scans(vec![vec![eq("id", Constant::Int(5))]]))
        );
        assert_eq!(
            touched("DELETE FROM events WHERE id = 5 OR (id = 7 OR kind = 'x')"),
            Some(Touched::Scans(vec![
                vec![eq("id", Constant::Int(5))],
                vec![eq("id", Constant::Int(7))],
                vec![eq("kind", Constant::Text("x".into()))],
            ])),
            "one scan per arm of an OR"
        );
        assert_eq!(
            touched("SELECT * FROM events WHERE id = 3 FOR UPDATE"),
            Some(Touched::Scans(vec![vec![eq("id", Constant::Int(3))]]))
        );
        // A locking read that reads the table again reads every row; one that reads
        // another tiered table is refused, as a write that does.
        assert_eq!(
            touched("SELECT * FROM events a JOIN events b ON b.id = a.id + 1 WHERE a.id = 3 FOR UPDATE OF a"),
            Some(Touched::All)
        );
        let parsed = pg_query::parse(
            "SELECT e.id FROM events e WHERE e.id < 6 AND EXISTS (SELECT 1 FROM other o WHERE o.id = e.id) FOR UPDATE",
            0,
        )
        .unwrap();
        let two = |_: Option<&str>, n: &str| match n {
            "events" => Some(events()),
            "other" => Some(TieredTable {
                table_id: 8,
                name: "other".into(),
                ..events()
            }),
            _ => None,
        };
        assert_eq!(
            classify(&parsed, two).unwrap_err().to_string(),
            "a statement that locks rows of events and reads another tiered table, other, is not supported yet"
        );
        assert_eq!(
            touched("UPDATE events SET id = 9 WHERE id = 3"),
            Some(Touched::Scans(vec![
                vec![eq("id", Constant::Int(3))],
                vec![eq("id", Constant::Int(9))]
            ]))
        );
        assert_eq!(
            touched("UPDATE events SET id = id + 1 WHERE id = 3"),
            Some(Touched::Scans(vec![vec![eq("id", Constant::Int(3))]])),
            "the new keys are checked by capture"
        );
        assert_eq!(touched("SELECT * FROM events"), None);
        assert_eq!(touched("INSERT INTO plain SELECT * FROM events"), None);
    }

    #[test]
    fn inserts_are_bounded_by_their_keys() {
        let ins = |values: Vec<Constant>| {
            Some(Touched::Scans(vec![vec![ColumnPredicate {
                column: "id".into(),
                comparison: Comparison::In(values),
            }]]))
        };
        assert_eq!(
            touched("INSERT INTO events VALUES (1, 'a'), ($1, 'b') ON CONFLICT (id) DO UPDATE SET kind = excluded.kind"),
            ins(vec![Constant::Int(1), Constant::Param(1)])
        );
        assert_eq!(
            touched("INSERT INTO events (kind, id) VALUES ('a', 4)"),
            ins(vec![Constant::Int(4)])
        );
        assert_eq!(
            touched("INSERT INTO events (kind) VALUES ('a')"),
            Some(Touched::Scans(vec![]))
        );
        assert_eq!(
            touched("INSERT INTO events SELECT * FROM plain"),
            Some(Touched::Scans(vec![])),
            "no row up front: capture checks the keys"
        );
        let parsed = pg_query::parse("INSERT INTO events VALUES (1, 'a')", 0).unwrap();
        let w = classify(&parsed, |_, n| (n == "events").then(events))
            .unwrap()
            .unwrap();
        assert_eq!(
            w.inserted,
            vec![vec![ColumnPredicate {
                column: "id".into(),
                comparison: Comparison::In(vec![Constant::Int(1)]),
            }]]
        );
    }

    #[test]
    fn reading_itself_or_other_tiered_tables_is_told_apart() {
        assert_eq!(
            touched("DELETE FROM events WHERE id IN (SELECT id FROM events WHERE kind = 'x')"),
            Some(Touched::All)
        );
        let parsed = pg_query::parse(
            "UPDATE events SET kind = o.kind FROM other o WHERE o.id = events.id",
            0,
        )
        .unwrap();
        let other = |_: Option<&str>, n: &str| (n == "events" || n == "other").then(events);
        // Two names for one table here, so "other" counts as the same table.
        assert!(classify(&parsed, other).unwrap().is_some());
        assert_eq!(
            touched("WITH gone AS (DELETE FROM events WHERE id = 7 RETURNING *) INSERT INTO events SELECT id, 'back' FROM gone"),
            Some(Touched::All)
        );
        assert_eq!(
            touched("MERGE INTO events t USING plain s ON t.id = s.id WHEN MATCHED THEN DELETE"),
            Some(Touched::Scans(vec![vec![]]))
        );
        let merge = pg_query::parse("MERGE INTO events t USING plain s ON t.id = s.id AND t.id < 10 WHEN MATCHED THEN DELETE", 0).unwrap();
        let w = classify(&merge, |_, n| (n == "events").then(events))
            .unwrap()
            .unwrap();
        assert_eq!(
            w.touched,
            Touched::Scans(vec![vec![ColumnPredicate {
                column: "id".into(),
                comparison: Comparison::Below(Constant::Int(10), false)
            }]])
        );
    }
}
