//! What qualifies: GROUP BY items resolved to columns (or `date_trunc` of one), constants, subqueries, and the
//! WHERE conjuncts the cold engine evaluates exactly.

use pg_query::protobuf::{node::Node as N, AExprKind, BoolExprType, Node, SelectStmt};

use super::split::function_name;
use super::GroupColumn;
use crate::sql::predicates::{column_of, conjuncts_of, operator, ColumnPredicate};
use crate::sql::rewrite::TieredTable;
use crate::values::trunc::TruncUnit;
use crate::values::{ColdType, ScalarType, TextKind};

/// Whether `scalar` values group as Postgres groups them when their bytes are equal (a
/// finer grouping is fine: Postgres combines the partial rows of one group again).
pub(super) fn groupable(scalar: ScalarType) -> bool {
    matches!(
        scalar,
        ScalarType::Int2
            | ScalarType::Int4
            | ScalarType::Int8
            | ScalarType::Bool
            | ScalarType::Date
            | ScalarType::Timestamp
            | ScalarType::Timestamptz
            | ScalarType::Text(TextKind::Text | TextKind::Varchar)
    )
}

/// The table column a GROUP BY item names, resolved as Postgres resolves it: an integer
/// is a target's position, a name is an input column first and a target's name second;
/// the target must then be a plain column or `date_trunc` of one.
pub(super) fn group_column(
    item: &Node,
    select: &SelectStmt,
    alias: &str,
    column: &impl Fn(&str) -> Option<usize>,
) -> Option<GroupColumn> {
    let target_column = |target: &Node| match target.node.as_ref()? {
        N::ResTarget(t) => group_expression(t.val.as_deref()?, alias, column),
        _ => None,
    };
    match item.node.as_ref()? {
        N::AConst(c) => match c.val.as_ref()? {
            pg_query::protobuf::a_const::Val::Ival(i) => {
                let n = usize::try_from(i.ival).ok()?.checked_sub(1)?;
                target_column(select.target_list.get(n)?)
            }
            _ => None,
        },
        N::ColumnRef(c) => {
            let name = column_of(item, alias, true)?;
            if let Some(position) = column(&name) {
                return Some(GroupColumn::plain(position));
            }
            if c.fields.len() != 1 {
                return None;
            }
            let named: Vec<&Node> = select
                .target_list
                .iter()
                .filter(|t| matches!(t.node.as_ref(), Some(N::ResTarget(r)) if r.name == name))
                .collect();
            match named.as_slice() {
                [only] => target_column(only),
                _ => None,
            }
        }
        _ => group_expression(item, alias, column),
    }
}

/// A plain column of the table, or `date_trunc('<unit>', column)` with a unit
/// [`TruncUnit`] knows (the column's type is checked by the caller).
pub(super) fn group_expression(
    node: &Node,
    alias: &str,
    column: &impl Fn(&str) -> Option<usize>,
) -> Option<GroupColumn> {
    match node.node.as_ref()? {
        N::ColumnRef(_) => column(&column_of(node, alias, true)?).map(GroupColumn::plain),
        N::FuncCall(f) => {
            if function_name(f)? != "date_trunc"
                || f.agg_star
                || f.agg_distinct
                || f.over.is_some()
                || f.agg_filter.is_some()
                || !f.agg_order.is_empty()
                || f.func_variadic
            {
                return None;
            }
            let [unit, arg] = f.args.as_slice() else {
                return None;
            };
            let Some(N::AConst(c)) = unit.node.as_ref() else {
                return None;
            };
            let Some(pg_query::protobuf::a_const::Val::Sval(text)) = c.val.as_ref() else {
                return None;
            };
            let position = column(&column_of(arg, alias, true)?)?;
            Some(GroupColumn {
                column: position,
                trunc: Some(TruncUnit::named(&text.sval)?),
            })
        }
        _ => None,
    }
}

pub(super) fn non_null_constant(node: &Node) -> bool {
    matches!(node.node.as_ref(), Some(N::AConst(c)) if !c.isnull && c.val.is_some())
}

/// Whether `node` (a LIMIT or OFFSET) holds only constants and parameters.
pub(super) fn constant_only(node: &Node) -> bool {
    match node.node.as_ref() {
        Some(N::AConst(_) | N::ParamRef(_)) => true,
        Some(N::TypeCast(c)) => c.arg.as_deref().is_some_and(constant_only),
        _ => false,
    }
}

/// Whether the statement holds a subquery (whose columns could refer to the table).
pub(super) fn has_sublink(parsed: &pg_query::ParseResult) -> bool {
    parsed
        .protobuf
        .nodes()
        .iter()
        .any(|(n, ..)| matches!(n, pg_query::NodeRef::SubLink(_)))
}

/// The number of predicates `where_clause` gives when every one of its top-level
/// conjuncts is one comparison the cold engine evaluates exactly (integers, dates and
/// timestamps: every comparison; text, varchar and uuid: equality, IN; any column:
/// IS [NOT] NULL).
pub(super) fn exact_conjuncts(
    where_clause: &Node,
    alias: &str,
    table: &TieredTable,
    types: &[(String, Option<ColdType>)],
) -> Option<usize> {
    let mut conjuncts = Vec::new();
    flatten_and(where_clause, &mut conjuncts);
    let mut count = 0;
    for conjunct in conjuncts {
        let shape_ok = match conjunct.node.as_ref()? {
            N::NullTest(_) => true,
            N::AExpr(e) => {
                let kind = AExprKind::try_from(e.kind).unwrap_or(AExprKind::Undefined);
                match kind {
                    AExprKind::AexprOp => {
                        matches!(operator(&e.name), Some("=" | "<" | "<=" | ">" | ">="))
                    }
                    AExprKind::AexprIn => operator(&e.name) == Some("="),
                    AExprKind::AexprBetween => true,
                    _ => false,
                }
            }
            _ => false,
        };
        if !shape_ok {
            return None;
        }
        let found: Vec<ColumnPredicate> = conjuncts_of(conjunct, alias, true);
        let expected = match conjunct.node.as_ref()? {
            N::AExpr(e) if e.kind == AExprKind::AexprBetween as i32 => 2,
            _ => 1,
        };
        if found.len() != expected {
            return None;
        }
        for p in &found {
            let position = table.columns.iter().position(|c| *c == p.column)?;
            let ColdType::Scalar(scalar) = types[position].1? else {
                return None;
            };
            // Dates and timestamps compare as integers once their constants are read
            // (strict ISO literals or Bind values of the column's type, see
            // `values::literal`); a constant that cannot be read leaves a predicate
            // out, and the Bind then takes the row path.
            let ranged = crate::sql::predicates::ranged(scalar);
            let equality = matches!(
                scalar,
                ScalarType::Text(TextKind::Text | TextKind::Varchar) | ScalarType::Uuid
            );
            use crate::sql::predicates::Comparison as C;
            let ok = match p.comparison {
                C::IsNull | C::IsNotNull => true,
                C::Eq(_) | C::In(_) => ranged || equality,
                C::Below(..) | C::Above(..) => ranged,
            };
            if !ok {
                return None;
            }
        }
        count += found.len();
    }
    Some(count)
}

pub(super) fn flatten_and<'n>(node: &'n Node, out: &mut Vec<&'n Node>) {
    match node.node.as_ref() {
        Some(N::BoolExpr(b)) if b.boolop == BoolExprType::AndExpr as i32 => {
            for a in &b.args {
                flatten_and(a, out);
            }
        }
        _ => out.push(node),
    }
}
