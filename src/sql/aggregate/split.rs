//! The aggregates of the outer query turned into combinations of partials, and the
//! names targets keep.

use pg_query::protobuf::{self, node::Node as N, FuncCall, Node};

use super::conditions::{exact_conjuncts, group_expression, non_null_constant};
use super::{AggregateKind, GroupColumn, Partial, PartialKind};
use crate::sql::predicates::{column_of, conjuncts_of, ColumnPredicate};
use crate::sql::rewrite::TieredTable;
use crate::values::{ColdType, NumericRepr, ScalarType};

/// Aggregates coldwire cannot split: seeing one keeps the statement on the row path.
pub(super) const OTHER_AGGREGATES: &[&str] = &[
    "array_agg",
    "string_agg",
    "json_agg",
    "jsonb_agg",
    "json_object_agg",
    "jsonb_object_agg",
    "xmlagg",
    "stddev",
    "stddev_samp",
    "stddev_pop",
    "variance",
    "var_samp",
    "var_pop",
    "corr",
    "covar_pop",
    "covar_samp",
    "percentile_cont",
    "percentile_disc",
    "mode",
    "bit_and",
    "bit_or",
    "bit_xor",
    "range_agg",
    "range_intersect_agg",
    "regr_avgx",
    "regr_avgy",
    "regr_count",
    "regr_intercept",
    "regr_r2",
    "regr_slope",
    "regr_sxx",
    "regr_sxy",
    "regr_syy",
    "any_value",
    "grouping",
];

/// Aggregates coldwire answers over DISTINCT values only (see
/// [`Split::distinct_aggregate`]).
pub(super) const DISTINCT_ONLY: &[&str] = &["array_agg", "string_agg"];

/// Scalar functions allowed around aggregates and group columns in the outer query.
const SCALAR_FUNCTIONS: &[&str] = &[
    "round", "trunc", "abs", "ceil", "ceiling", "floor", "sqrt", "to_char", "sign", "upper",
    "lower", "length", "div", "mod",
];

/// The aggregates of the outer query, turned into combinations of partials.
pub(super) struct Split<'a> {
    pub(super) alias: &'a str,
    pub(super) table: &'a TieredTable,
    pub(super) types: &'a [(String, Option<ColdType>)],
    /// Per column: ordered as bytes (text under the C collation).
    pub(super) byte_ordered: &'a [bool],
    pub(super) group: &'a [GroupColumn],
    pub(super) partials: Vec<Partial>,
    pub(super) aggregates: usize,
    /// Columns of DISTINCT aggregates, which the partial rows are grouped by as well.
    pub(super) distinct: Vec<usize>,
    /// Whether a DISTINCT aggregate counts NULL as a value (`array_agg`): the partial
    /// rows cannot then carry each column's values in rows of their own, NULL elsewhere.
    pub(super) distinct_keeps_nulls: bool,
    /// The FILTER conditions met, one per aggregate that has one.
    pub(super) filters: Vec<Filter>,
    /// The FILTER of the aggregate being split, as an index in `filters`.
    pub(super) filter: Option<usize>,
    /// The table is joined with plain tables, whose columns the outer query may read.
    pub(super) joined: bool,
}

/// A FILTER condition: its node, its conjuncts, and how many predicates it gives when
/// the cold engine evaluates it exactly.
pub(super) type Filter = (Node, Vec<ColumnPredicate>, Option<usize>);

impl Split<'_> {
    /// Replaces the aggregates in `node`; `None` when something does not qualify.
    pub(super) fn visit(&mut self, node: &mut Node) -> Option<()> {
        if let Some(N::ColumnRef(_)) = node.node {
            let Some(name) = column_of(node, self.alias, !self.joined) else {
                // Joined: another table's column (`join::plan` checked that a bare name
                // is not one of this table's).
                return self.joined.then_some(());
            };
            let position = self.table.columns.iter().position(|n| *n == name)?;
            return self
                .group
                .contains(&GroupColumn::plain(position))
                .then_some(());
        }
        // A GROUP BY expression (`date_trunc('day', at)`): the derived table's column holds
        // it already, and truncating again changes nothing.
        if let Some(N::FuncCall(_)) = node.node {
            let column = |name: &str| self.table.columns.iter().position(|n| n == name);
            if let Some(g) = group_expression(node, self.alias, &column) {
                // Joined, the partial rows carry the column itself.
                let carried = self.joined && self.group.contains(&GroupColumn::plain(g.column));
                return (carried || self.group.contains(&g)).then_some(());
            }
        }
        match node.node.as_mut()? {
            N::FuncCall(f) => {
                let name = function_name(f)?;
                if f.agg_distinct && f.over.is_none() {
                    self.distinct_aggregate(&name, f)?;
                    self.aggregates += 1;
                    return Some(());
                }
                if let Some(kind) = AggregateKind::named(&name) {
                    if f.over.is_some() {
                        return None;
                    }
                    let combined = self.aggregate(kind, f)?;
                    *node = combined;
                    self.aggregates += 1;
                    return Some(());
                }
                if OTHER_AGGREGATES.contains(&name.as_str())
                    || !SCALAR_FUNCTIONS.contains(&name.as_str())
                    || f.funcname.len() > 1
                    || f.agg_star
                    || f.agg_distinct
                    || f.over.is_some()
                    || f.agg_filter.is_some()
                    || !f.agg_order.is_empty()
                {
                    return None;
                }
                for a in &mut f.args {
                    self.visit(a)?;
                }
                Some(())
            }
            N::AConst(_) | N::ParamRef(_) => Some(()),
            N::TypeCast(c) => self.visit(c.arg.as_deref_mut()?),
            N::AExpr(e) => {
                if let Some(l) = e.lexpr.as_deref_mut() {
                    self.visit(l)?;
                }
                if let Some(r) = e.rexpr.as_deref_mut() {
                    self.visit(r)?;
                }
                Some(())
            }
            N::List(l) => l.items.iter_mut().try_for_each(|i| self.visit(i)),
            N::BoolExpr(b) => b.args.iter_mut().try_for_each(|i| self.visit(i)),
            N::NullTest(t) => self.visit(t.arg.as_deref_mut()?),
            N::CoalesceExpr(c) => c.args.iter_mut().try_for_each(|i| self.visit(i)),
            N::MinMaxExpr(m) => m.args.iter_mut().try_for_each(|i| self.visit(i)),
            N::CaseExpr(c) => {
                if let Some(a) = c.arg.as_deref_mut() {
                    self.visit(a)?;
                }
                for w in &mut c.args {
                    let Some(N::CaseWhen(w)) = w.node.as_mut() else {
                        return None;
                    };
                    self.visit(w.expr.as_deref_mut()?)?;
                    self.visit(w.result.as_deref_mut()?)?;
                }
                if let Some(d) = c.defresult.as_deref_mut() {
                    self.visit(d)?;
                }
                Some(())
            }
            _ => None,
        }
    }

    /// The combination of partials that stands for aggregate `f`.
    fn aggregate(&mut self, kind: AggregateKind, f: &FuncCall) -> Option<Node> {
        if f.agg_distinct || !f.agg_order.is_empty() || f.agg_within_group || f.func_variadic {
            return None;
        }
        self.filter = match f.agg_filter.as_deref() {
            None => None,
            Some(condition) => {
                // The statement's walk for subqueries does not reach into FILTER: only
                // plain conditions on the row qualify.
                if !plain_condition(condition) {
                    return None;
                }
                let predicates = conjuncts_of(condition, self.alias, true);
                let exact = exact_conjuncts(
                    condition,
                    self.alias,
                    &super::conditions::Columns {
                        table: self.table,
                        types: self.types,
                        byte_ordered: self.byte_ordered,
                    },
                );
                self.filters.push((condition.clone(), predicates, exact));
                Some(self.filters.len() - 1)
            }
        };
        let combined = self.combine(kind, f);
        self.filter = None;
        combined
    }

    /// As [`Split::aggregate`], under the FILTER set there.
    fn combine(&mut self, kind: AggregateKind, f: &FuncCall) -> Option<Node> {
        if f.agg_star {
            return (kind == AggregateKind::Count)
                .then(|| self.partial(PartialKind::CountStar, None, "int8"))
                .map(|p| combination(&format!("coalesce(sum({p}), 0)::int8")))?;
        }
        let [arg] = f.args.as_slice() else {
            return None;
        };
        // count(1), count('x'): every row.
        if kind == AggregateKind::Count && non_null_constant(arg) {
            let p = self.partial(PartialKind::CountStar, None, "int8");
            return combination(&format!("coalesce(sum({p}), 0)::int8"));
        }
        let name = column_of(arg, self.alias, true)?;
        let position = self.table.columns.iter().position(|n| *n == name)?;
        let (sql_type, cold) = &self.types[position];
        let ColdType::Scalar(scalar) = (*cold)? else {
            return if kind == AggregateKind::Count {
                let p = self.partial(PartialKind::Count, Some(position), "int8");
                combination(&format!("coalesce(sum({p}), 0)::int8"))
            } else {
                None
            };
        };
        let int = matches!(scalar, ScalarType::Int2 | ScalarType::Int4);
        let int8 = scalar == ScalarType::Int8;
        let float8 = scalar == ScalarType::Float8;
        // numeric(p, s): the cold engine sums exactly and orders specials as numeric does.
        let decimal = matches!(scalar, ScalarType::Numeric(NumericRepr::Decimal { .. }));
        // Text under the C collation: Postgres's min and max compare bytes, as the cold
        // engine's do.
        let ordered = int
            || int8
            || decimal
            || matches!(
                scalar,
                ScalarType::Date | ScalarType::Timestamp | ScalarType::Timestamptz
            )
            || (self.byte_ordered.get(position) == Some(&true)
                && crate::sql::predicates::text_ordered(scalar));
        let text = match kind {
            AggregateKind::Count => {
                let p = self.partial(PartialKind::Count, Some(position), "int8");
                format!("coalesce(sum({p}), 0)::int8")
            }
            AggregateKind::Sum if int => {
                format!(
                    "sum({})::int8",
                    self.partial(PartialKind::SumInt, Some(position), "int8")
                )
            }
            AggregateKind::Sum if int8 || decimal => {
                format!(
                    "sum({})",
                    self.partial(PartialKind::SumNumeric, Some(position), "numeric")
                )
            }
            AggregateKind::Sum if float8 => {
                format!(
                    "sum({})",
                    self.partial(PartialKind::SumFloat, Some(position), "float8")
                )
            }
            // numeric's avg is sum / count, as `numeric_avg` divides them.
            AggregateKind::Avg if int || int8 || decimal => {
                let s = self.partial(PartialKind::SumNumeric, Some(position), "numeric");
                let c = self.partial(PartialKind::Count, Some(position), "int8");
                format!("sum({s}) / sum({c})")
            }
            AggregateKind::Avg if float8 => {
                let s = self.partial(PartialKind::SumFloat, Some(position), "float8");
                let c = self.partial(PartialKind::Count, Some(position), "int8");
                format!("sum({s}) / sum({c})::float8")
            }
            AggregateKind::Min if ordered => {
                format!(
                    "min({})",
                    self.partial(PartialKind::Min, Some(position), sql_type)
                )
            }
            AggregateKind::Max if ordered => {
                format!(
                    "max({})",
                    self.partial(PartialKind::Max, Some(position), sql_type)
                )
            }
            AggregateKind::BoolAnd if scalar == ScalarType::Bool => {
                format!(
                    "bool_and({})",
                    self.partial(PartialKind::BoolAnd, Some(position), "boolean")
                )
            }
            AggregateKind::BoolOr if scalar == ScalarType::Bool => {
                format!(
                    "bool_or({})",
                    self.partial(PartialKind::BoolOr, Some(position), "boolean")
                )
            }
            _ => return None,
        };
        combination(&text)
    }

    /// An aggregate over the DISTINCT values of one column (`count(DISTINCT x)`,
    /// `sum(DISTINCT x)`, `array_agg(DISTINCT x ORDER BY x)`, …) depends only on the set
    /// of values per group, so it stays as written and the partial rows carry the set:
    /// they are grouped by its column too (a column of a type that groups by its bytes;
    /// Postgres makes the values distinct again under its own equality).
    fn distinct_aggregate(&mut self, name: &str, f: &FuncCall) -> Option<()> {
        let known = AggregateKind::named(name).is_some() || DISTINCT_ONLY.contains(&name);
        if !known || f.agg_filter.is_some() || f.agg_within_group || f.func_variadic {
            return None;
        }
        let (arg, rest) = f.args.split_first()?;
        // string_agg's delimiter: a constant.
        if !rest.iter().all(super::conditions::constant_only)
            || (name != "string_agg" && !rest.is_empty())
        {
            return None;
        }
        let column = column_of(arg, self.alias, true)?;
        let position = self.table.columns.iter().position(|n| *n == column)?;
        if !matches!(self.types[position].1, Some(ColdType::Scalar(s)) if super::conditions::groupable(s))
        {
            return None;
        }
        // ORDER BY inside: only the argument itself (Postgres requires it with DISTINCT).
        for sort in &f.agg_order {
            let Some(N::SortBy(s)) = sort.node.as_ref() else {
                return None;
            };
            if column_of(s.node.as_deref()?, self.alias, true)? != column {
                return None;
            }
        }
        if !self.distinct.contains(&position) {
            self.distinct.push(position);
        }
        self.distinct_keeps_nulls |= name == "array_agg";
        Some(())
    }

    /// The name of the partial `kind` of `column`, added unless the same one exists.
    fn partial(&mut self, kind: PartialKind, column: Option<usize>, sql_type: &str) -> String {
        let index = match self
            .partials
            .iter()
            .position(|p| p.kind == kind && p.column == column && p.filter == self.filter)
        {
            Some(i) => i,
            None => {
                self.partials.push(Partial {
                    kind,
                    column,
                    filter: self.filter,
                    sql_type: sql_type.to_owned(),
                });
                self.partials.len() - 1
            }
        };
        format!("_cw_p{index}")
    }
}

/// Whether `node` is built of columns, constants, parameters, operators, casts, AND, OR,
/// NOT and NULL tests only: no subquery (which could read the tiered table unmerged), no
/// function.
fn plain_condition(node: &Node) -> bool {
    let all = |nodes: &[Node]| nodes.iter().all(plain_condition);
    match node.node.as_ref() {
        Some(N::ColumnRef(_) | N::AConst(_) | N::ParamRef(_)) => true,
        Some(N::AExpr(e)) => {
            e.lexpr.as_deref().is_none_or(plain_condition)
                && e.rexpr.as_deref().is_none_or(plain_condition)
        }
        Some(N::BoolExpr(b)) => all(&b.args),
        Some(N::NullTest(t)) => t.arg.as_deref().is_some_and(plain_condition),
        Some(N::TypeCast(c)) => c.arg.as_deref().is_some_and(plain_condition),
        Some(N::List(l)) => all(&l.items),
        _ => false,
    }
}

/// The expression node of `text`.
fn combination(text: &str) -> Option<Node> {
    let parsed = pg_query::parse(&format!("SELECT {text}"), 0).ok()?;
    let stmt = parsed.protobuf.stmts.into_iter().next()?.stmt?;
    let N::SelectStmt(select) = stmt.node? else {
        return None;
    };
    let target = select.target_list.into_iter().next()?;
    let N::ResTarget(t) = target.node? else {
        return None;
    };
    t.val.map(|v| *v)
}

/// The lower-case name of a function call (the last part of a qualified name).
pub(super) fn function_name(f: &FuncCall) -> Option<String> {
    match f.funcname.last()?.node.as_ref()? {
        N::String(s) => {
            // `pg_catalog.count` is count; another schema's count is not.
            if f.funcname.len() == 2 {
                match f.funcname[0].node.as_ref()? {
                    N::String(schema) if schema.sval == "pg_catalog" => {}
                    _ => return None,
                }
            }
            Some(s.sval.clone())
        }
        _ => None,
    }
}

/// The column name Postgres gives a target without `AS` (FigureColname), so that the
/// rewritten target keeps it.
pub(super) fn figure_name(node: &Node) -> String {
    fn figure(node: &Node) -> Option<String> {
        match node.node.as_ref()? {
            N::ColumnRef(c) => match c.fields.last()?.node.as_ref()? {
                N::String(s) => Some(s.sval.clone()),
                _ => None,
            },
            N::FuncCall(f) => match f.funcname.last()?.node.as_ref()? {
                N::String(s) => Some(s.sval.clone()),
                _ => None,
            },
            N::TypeCast(c) => c.arg.as_deref().and_then(figure).or_else(|| {
                match c.type_name.as_ref()?.names.last()?.node.as_ref()? {
                    N::String(s) => Some(s.sval.clone()),
                    _ => None,
                }
            }),
            N::CoalesceExpr(_) => Some("coalesce".into()),
            N::CaseExpr(_) => Some("case".into()),
            N::MinMaxExpr(m) => Some(
                if m.op == protobuf::MinMaxOp::IsGreatest as i32 {
                    "greatest"
                } else {
                    "least"
                }
                .into(),
            ),
            N::BoolExpr(_) | N::AExpr(_) | N::AConst(_) | N::ParamRef(_) | N::NullTest(_) => None,
            _ => None,
        }
    }
    figure(node).unwrap_or_else(|| "?column?".to_owned())
}
