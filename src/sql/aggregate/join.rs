//! Aggregates over inner joins of the tiered table with plain tables (`SELECT tn.region,
//! count(*), sum(e.ms) FROM events e JOIN tenants tn ON tn.id = e.tenant_id GROUP BY 1`).
//!
//! The tiered table's rows are replaced by partial rows grouped by every column of it the
//! query reads outside its aggregates (join conditions, the rest of the WHERE, GROUP BY,
//! the select list): the joins then see each combination of those values once, with the
//! partials of its rows, and the combined aggregates (`sum(_cw_p0)` for `count(*)`, …)
//! add the partials up over the join's output, so a partial row that matches twice counts
//! twice, as its rows would. The WHERE conjuncts on the tiered table alone are evaluated
//! inside the derived table (by the cold engine when exact); the others stay outside.
//!
//! What qualifies, on top of the single-table rules: inner joins (or a FROM list) of plain
//! tables, without USING, NATURAL or a join alias; the tiered table's columns always
//! qualified (`e.tenant_id`), since a bare name could be either table's; aggregates over
//! the tiered table's columns only (`sum(tn.x)` would count each partial row once, not
//! once per row).

use pg_query::protobuf::{node::Node as N, BoolExprType, JoinType, Node, RangeVar, SelectStmt};
use serde_json::Value;

use super::split::{DISTINCT_ONLY, OTHER_AGGREGATES};
use super::AggregateKind;
use crate::sql::columns::column_ref_fields as fields;

/// The leaves of a FROM list of inner joins, in order; `None` for anything else.
pub(super) fn from_leaves(items: &[Node]) -> Option<Vec<&RangeVar>> {
    let mut out = Vec::new();
    for item in items {
        leaves(item, &mut out)?;
    }
    Some(out)
}

fn leaves<'n>(node: &'n Node, out: &mut Vec<&'n RangeVar>) -> Option<()> {
    match node.node.as_ref()? {
        N::RangeVar(r) => {
            out.push(r);
            Some(())
        }
        N::JoinExpr(j) => {
            if j.jointype != JoinType::JoinInner as i32
                || j.is_natural
                || !j.using_clause.is_empty()
                || j.alias.is_some()
                || j.join_using_alias.is_some()
            {
                return None;
            }
            leaves(j.larg.as_deref()?, out)?;
            leaves(j.rarg.as_deref()?, out)
        }
        _ => None,
    }
}

/// What the join needs from the statement.
pub(super) struct Joined {
    /// The tiered table's columns read outside aggregates, by position: the partial rows
    /// are grouped by them.
    pub(super) carried: Vec<usize>,
    /// The WHERE conjuncts on the tiered table alone, AND-ed: evaluated inside the
    /// derived table.
    pub(super) pushed: Option<Node>,
    /// The rest of the WHERE, left to the outer query.
    pub(super) kept: Option<Node>,
}

/// The join plan of `select`, whose tiered table is `alias` with `columns`; `None` when
/// the statement does not qualify.
pub(super) fn plan(select: &SelectStmt, alias: &str, columns: &[String]) -> Option<Joined> {
    let tree = serde_json::to_value(select).ok()?;
    if !references_qualify(&tree, alias, columns, false) {
        return None;
    }
    let conjuncts: Vec<Node> = match select.where_clause.as_deref() {
        None => Vec::new(),
        Some(w) => match w.node.as_ref()? {
            N::BoolExpr(b) if b.boolop == BoolExprType::AndExpr as i32 => b.args.clone(),
            _ => vec![w.clone()],
        },
    };
    let (pushed, kept): (Vec<Node>, Vec<Node>) = conjuncts.into_iter().partition(|c| {
        serde_json::to_value(c).is_ok_and(|v| !v.is_null() && only_on(&v, alias) && has_column(&v))
    });
    let mut carried = Vec::new();
    let outside = [
        serde_json::to_value(&select.target_list).ok()?,
        serde_json::to_value(&select.having_clause).ok()?,
        serde_json::to_value(&select.sort_clause).ok()?,
        serde_json::to_value(&select.group_clause).ok()?,
        serde_json::to_value(&select.from_clause).ok()?,
        serde_json::to_value(&kept).ok()?,
    ];
    for part in &outside {
        carry(part, alias, columns, &mut carried);
    }
    carried.sort_unstable();
    carried.dedup();
    Some(Joined {
        carried,
        pushed: and(pushed),
        kept: and(kept),
    })
}

/// The conjuncts AND-ed (`None` for none).
fn and(mut conjuncts: Vec<Node>) -> Option<Node> {
    match conjuncts.len() {
        0 => None,
        1 => conjuncts.pop(),
        _ => Some(Node {
            node: Some(N::BoolExpr(Box::new(pg_query::protobuf::BoolExpr {
                boolop: BoolExprType::AndExpr as i32,
                args: conjuncts,
                ..Default::default()
            }))),
        }),
    }
}

/// The name of a `FuncCall` object when it is an aggregate.
fn aggregate_name(call: &Value) -> Option<String> {
    let name = call
        .get("funcname")?
        .as_array()?
        .last()?
        .get("node")?
        .get("String")?
        .get("sval")?
        .as_str()?
        .to_owned();
    let star = call.get("agg_star").and_then(Value::as_bool) == Some(true);
    (star
        || AggregateKind::named(&name).is_some()
        || OTHER_AGGREGATES.contains(&name.as_str())
        || DISTINCT_ONLY.contains(&name.as_str()))
    .then_some(name)
}

/// Whether every column reference in `value` is one the rewrite can place: a column of
/// the tiered table qualified by `alias`, or a bare or qualified name of another table
/// (a bare name must not be one of the tiered table's columns, a whole row or `*` of it
/// is not allowed), and inside an aggregate only the tiered table's columns.
fn references_qualify(value: &Value, alias: &str, columns: &[String], in_aggregate: bool) -> bool {
    match value {
        Value::Object(map) => map.iter().all(|(key, inner)| match key.as_str() {
            "ColumnRef" => match fields(inner).as_slice() {
                [Some(q), Some(c)] if q == &alias => columns.iter().any(|n| n == c),
                _ if in_aggregate => false,
                [Some(c)] => *c != alias && !columns.iter().any(|n| n == c),
                [Some(q), Some(_)] => *q != alias,
                // `*`, `t.*`, `schema.t.c`: maybe the tiered table's whole row.
                _ => false,
            },
            "AStar" => false,
            "FuncCall" => {
                let inside = in_aggregate || aggregate_name(inner).is_some();
                references_qualify(inner, alias, columns, inside)
            }
            _ => references_qualify(inner, alias, columns, in_aggregate),
        }),
        Value::Array(items) => items
            .iter()
            .all(|v| references_qualify(v, alias, columns, in_aggregate)),
        _ => true,
    }
}

/// Whether every column reference in `value` is qualified by `alias`.
fn only_on(value: &Value, alias: &str) -> bool {
    match value {
        Value::Object(map) => map.iter().all(|(key, inner)| match key.as_str() {
            "ColumnRef" => matches!(fields(inner).as_slice(), [Some(q), Some(_)] if q == &alias),
            "SubLink" => false,
            _ => only_on(inner, alias),
        }),
        Value::Array(items) => items.iter().all(|v| only_on(v, alias)),
        _ => true,
    }
}

fn has_column(value: &Value) -> bool {
    match value {
        Value::Object(map) => map
            .iter()
            .any(|(key, inner)| key == "ColumnRef" || has_column(inner)),
        Value::Array(items) => items.iter().any(has_column),
        _ => false,
    }
}

/// Adds to `carried` the tiered table's columns `value` reads outside aggregates.
fn carry(value: &Value, alias: &str, columns: &[String], carried: &mut Vec<usize>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                match key.as_str() {
                    "ColumnRef" => {
                        if let [Some(q), Some(c)] = fields(inner).as_slice() {
                            if q == &alias {
                                if let Some(p) = columns.iter().position(|n| n == c) {
                                    carried.push(p);
                                }
                            }
                        }
                    }
                    "FuncCall" if aggregate_name(inner).is_some() => {}
                    _ => carry(inner, alias, columns, carried),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| carry(v, alias, columns, carried)),
        _ => {}
    }
}
