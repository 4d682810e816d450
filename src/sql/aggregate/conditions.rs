//! What qualifies: GROUP BY items resolved to columns (or `date_trunc` of one), constants, subqueries, and the
//! WHERE conjuncts the cold engine evaluates exactly.

use pg_query::protobuf::{node::Node as N, Node, SelectStmt};

use super::split::function_name;
use super::GroupColumn;
use crate::sql::predicates::{column_of, complete_conjuncts_of, ColumnPredicate};
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

/// The number of predicates `where_clause` gives when all of it is conditions the cold
/// engine evaluates exactly: comparisons, `IN`, `BETWEEN`, `IS [NOT] NULL`, boolean
/// columns and tests, joined by AND, OR and NOT, where each comparison is exact for its
/// column's type (integers, float8, dates and timestamps: every comparison; text,
/// varchar, uuid and bool: equality and inequality; any column: NULL tests).
pub(super) fn exact_conjuncts(
    where_clause: &Node,
    alias: &str,
    columns: &Columns<'_>,
) -> Option<usize> {
    let (found, complete) = complete_conjuncts_of(where_clause, alias, true);
    (complete && found.iter().all(|p| exact(p, columns))).then_some(found.len())
}

/// A table's columns as [`exact_conjuncts`] needs them.
pub(super) struct Columns<'a> {
    pub(super) table: &'a TieredTable,
    pub(super) types: &'a [(String, Option<ColdType>)],
    /// Per column: Postgres orders its values as their bytes (text under the C collation).
    pub(super) byte_ordered: &'a [bool],
}

/// Whether the cold engine evaluates `p` exactly as Postgres would.
fn exact(p: &ColumnPredicate, columns: &Columns<'_>) -> bool {
    use crate::sql::predicates::Comparison as C;
    if let C::Any(any) = &p.comparison {
        return any.iter().flatten().all(|p| exact(p, columns));
    }
    let Some(position) = columns.table.columns.iter().position(|c| *c == p.column) else {
        return false;
    };
    let Some(ColdType::Scalar(scalar)) = columns.types[position].1 else {
        return false;
    };
    // Dates and timestamps compare as integers once their constants are read (strict
    // ISO literals or Bind values of the column's type, see `values::literal`); a
    // constant that cannot be read leaves a predicate out, and the Bind then takes the
    // row path.
    // Text in order only under the C collation, where Postgres compares bytes too.
    let ranged = crate::sql::predicates::ranged(scalar)
        || (columns.byte_ordered.get(position) == Some(&true)
            && crate::sql::predicates::text_ordered(scalar));
    let equality = matches!(
        scalar,
        ScalarType::Text(TextKind::Text | TextKind::Varchar) | ScalarType::Uuid | ScalarType::Bool
    );
    match p.comparison {
        C::IsNull | C::IsNotNull => true,
        C::Eq(_) | C::NotEq(_) | C::In(_) => ranged || equality,
        C::Below(..) | C::Above(..) => ranged,
        C::Any(_) => false,
    }
}
