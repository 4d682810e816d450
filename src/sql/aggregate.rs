//! Aggregate pushdown (DESIGN §6.5), as a pure function of the parse tree: a query that
//! aggregates one tiered table is rewritten so that Postgres aggregates partials, not
//! rows. The table becomes a derived table of partial rows from three branches:
//!
//! ```sql
//! (WITH _cw_guard AS MATERIALIZED (SELECT coldwire.guard(<id>, <plan, or stale>, <name>) AS ok)
//!  SELECT <group cols>, <partials> FROM ONLY s.t AS a WHERE (SELECT ok FROM _cw_guard) AND (<where>) GROUP BY <group cols>
//!  UNION ALL
//!  SELECT <group cols>, <partials> FROM unnest($r::s.t[]) AS a
//!   WHERE (SELECT ok FROM _cw_guard) AND NOT EXISTS (<mirror has the key>) AND NOT EXISTS (<heap has the key>)
//!     AND (<where>) GROUP BY <group cols>
//!  UNION ALL
//!  SELECT * FROM jsonb_to_recordset($j::jsonb) AS _cw_c(<group cols>, <partials>)
//!  WHERE (SELECT ok FROM _cw_guard)) AS a
//! ```
//!
//! and every aggregate of the client's target list, HAVING and ORDER BY becomes the
//! aggregate that combines its partials (`count(*)` → `coalesce(sum(_cw_p0), 0)::int8`,
//! `avg(x)` → `sum(_cw_p1) / sum(_cw_p2)`, …), so result types, NULL and empty-input
//! rules, HAVING, ORDER BY and collation stay Postgres's. At each execution coldwire fills
//! exactly one of the two cold branches: the partials that the cold engine computed
//! (when every WHERE conjunct can be evaluated exactly on cold rows, §6.5), or, as any
//! other read does, the cold rows that may match (Postgres applies the WHERE and
//! aggregates them).
//!
//! Cold partials exclude the keys whose authoritative version is hot: the keys of the
//! mirror inside the range of keys that segments hold (`bounds_<id>`), read when the
//! partials are planned. The guard's plan then carries that set, and the statement
//! checks it against the mirror in its own snapshot: when they differ (a cold row was
//! written in between), the plan is stale and the guard raises the retryable condition.
//!
//! What qualifies: one SELECT (no WITH, set operation, DISTINCT, window, locking or
//! subquery), FROM exactly one tiered table with a single-column integer, text or
//! uuid key, GROUP BY plain columns, and aggregates from [`AggregateKind`] over plain columns (no DISTINCT,
//! FILTER or ORDER BY inside), outside them only group columns, constants, parameters and
//! a few scalar functions. Everything else takes the row path.

use pg_query::protobuf::{
    self, node::Node as N, AExprKind, BoolExprType, FuncCall, Node, ResTarget, SelectStmt,
    SetOperation,
};

use super::predicates::{column_of, conjuncts_of, operator, ColumnPredicate};
use super::quote::quote_ident;
use super::rewrite::{dollar_quoted, TieredTable};
use crate::values::{ColdType, ScalarType, TextKind};

/// What a partial computes on cold rows (and hot ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartialKind {
    /// `count(*)`: int8.
    CountStar,
    /// `count(x)`: int8.
    Count,
    /// `sum(x)` of an int2 or int4 column: int8.
    SumInt,
    /// `sum(x)` of an int8 column, or of any integer for `avg`: numeric.
    SumNumeric,
    /// `sum(x)` of a float8 column: float8.
    SumFloat,
    Min,
    Max,
    BoolAnd,
    BoolOr,
}

/// One partial: what, over which column (a position in the table's columns), and its
/// type as the derived table declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partial {
    pub kind: PartialKind,
    pub column: Option<usize>,
    pub sql_type: String,
}

/// The client's aggregate functions coldwire splits into partials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggregateKind {
    Count,
    Sum,
    Avg,
    Min,
    Max,
    BoolAnd,
    BoolOr,
}

impl AggregateKind {
    fn named(name: &str) -> Option<Self> {
        Some(match name {
            "count" => Self::Count,
            "sum" => Self::Sum,
            "avg" => Self::Avg,
            "min" => Self::Min,
            "max" => Self::Max,
            "bool_and" | "every" => Self::BoolAnd,
            "bool_or" => Self::BoolOr,
            _ => return None,
        })
    }
}

/// Aggregates coldwire cannot split: seeing one keeps the statement on the row path.
const OTHER_AGGREGATES: &[&str] = &[
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

/// Scalar functions allowed around aggregates and group columns in the outer query.
const SCALAR_FUNCTIONS: &[&str] = &[
    "round", "trunc", "abs", "ceil", "ceiling", "floor", "sqrt", "to_char", "sign", "upper",
    "lower", "length", "div", "mod",
];

/// The type of a table's single key column, as the mirror's keys are read and compared:
/// sent as text, listed in one order (text in byte order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Int,
    Text,
    Uuid,
}

impl KeyKind {
    /// The type a key's text is cast back to.
    pub fn sql_type(self) -> &'static str {
        match self {
            KeyKind::Int => "int8",
            KeyKind::Text => "text",
            KeyKind::Uuid => "uuid",
        }
    }

    /// What makes an ORDER BY of the key one order that the plan and the statement
    /// both follow (byte order for text). The range itself is compared as `bounds_<id>`
    /// was computed: in the column's own collation.
    pub fn order(self) -> &'static str {
        match self {
            KeyKind::Text => " COLLATE \"C\"",
            KeyKind::Int | KeyKind::Uuid => "",
        }
    }
}

/// A rewritten aggregate statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregateRewrite {
    pub sql: String,
    pub table_id: i64,
    /// The table reference's location and qualifier, for [`super::predicates::extract`].
    pub location: i32,
    pub name: String,
    /// Positions in the table's columns of the GROUP BY columns.
    pub group: Vec<usize>,
    pub partials: Vec<Partial>,
    /// Whether the statement's WHERE is a conjunction the cold engine may evaluate
    /// exactly (each conjunct one predicate of [`super::predicates`] on a column whose
    /// comparison it computes as Postgres does); the Bind values decide the rest.
    pub exact_where: bool,
    /// The number of predicates the WHERE gives when it is exact.
    pub where_predicates: usize,
    /// The key column's type.
    pub key_kind: KeyKind,
    /// `$param`: the cold rows (row path); `$param + 1`: the cold partials (jsonb);
    /// `$param + 2`: the guard's plan (jsonb).
    pub param: usize,
}

/// The table as the rewrite needs it: names, keys, and per column its type as
/// `format_type` writes it and how it is stored cold.
pub struct AggregateTable<'a> {
    pub table: &'a TieredTable,
    pub types: &'a [(String, Option<ColdType>)],
}

/// The aggregate rewrite of `parsed` (the text's parse tree), with coldwire's parameters
/// numbered after `client_params`; `None` when the statement does not qualify.
pub fn rewrite_aggregate<'a>(
    parsed: &pg_query::ParseResult,
    client_params: usize,
    resolve: impl Fn(Option<&str>, &str) -> Option<AggregateTable<'a>>,
) -> Option<AggregateRewrite> {
    let [raw] = parsed.protobuf.stmts.as_slice() else {
        return None;
    };
    if has_sublink(parsed) {
        return None;
    }
    let Some(N::SelectStmt(select)) = raw.stmt.as_ref()?.node.as_ref() else {
        return None;
    };
    let select: &SelectStmt = select;
    if select.with_clause.is_some()
        || select.op != SetOperation::SetopNone as i32
        || !select.distinct_clause.is_empty()
        || select.into_clause.is_some()
        || !select.window_clause.is_empty()
        || !select.locking_clause.is_empty()
        || !select.values_lists.is_empty()
        || select.group_distinct
    {
        return None;
    }
    let [from] = select.from_clause.as_slice() else {
        return None;
    };
    let Some(N::RangeVar(rv)) = from.node.as_ref() else {
        return None;
    };
    if !rv.inh || !rv.catalogname.is_empty() {
        return None;
    }
    let schema = (!rv.schemaname.is_empty()).then_some(rv.schemaname.as_str());
    let found = resolve(schema, &rv.relname)?;
    let table = found.table;
    if !table.guarded || table.columns.len() != found.types.len() {
        return None;
    }
    // A single-column key of a type whose text and order coldwire and Postgres agree on.
    let [key] = table.pk.as_slice() else {
        return None;
    };
    let key_position = table.columns.iter().position(|c| c == key)?;
    let key_kind = match found.types[key_position].1 {
        Some(ColdType::Scalar(ScalarType::Int2 | ScalarType::Int4 | ScalarType::Int8)) => {
            KeyKind::Int
        }
        Some(ColdType::Scalar(ScalarType::Text(TextKind::Text | TextKind::Varchar))) => {
            KeyKind::Text
        }
        Some(ColdType::Scalar(ScalarType::Uuid)) => KeyKind::Uuid,
        _ => return None,
    };
    let alias = match &rv.alias {
        Some(a) if !a.colnames.is_empty() => return None,
        Some(a) => a.aliasname.clone(),
        None => table.name.clone(),
    };
    let column = |name: &str| table.columns.iter().position(|c| c == name);

    // GROUP BY: plain columns of the table, by name, output-column name or ordinal.
    let mut group = Vec::new();
    for g in &select.group_clause {
        let position = group_column(g, select, &alias, &column)?;
        if matches!(found.types[position].1, Some(ColdType::Scalar(s)) if groupable(s)) {
            if !group.contains(&position) {
                group.push(position);
            }
        } else {
            return None;
        }
    }

    // The outer query: aggregates replaced by their combinations.
    let mut outer = select.clone();
    let mut split = Split {
        alias: &alias,
        table,
        types: found.types,
        group: &group,
        partials: Vec::new(),
        aggregates: 0,
    };
    for target in &mut outer.target_list {
        let Some(N::ResTarget(t)) = target.node.as_mut() else {
            return None;
        };
        if t.name.is_empty() {
            let name = figure_name(t.val.as_deref()?);
            t.name = name;
        }
        split.visit(t.val.as_deref_mut()?)?;
    }
    if let Some(having) = outer.having_clause.as_deref_mut() {
        split.visit(having)?;
    }
    for sort in &mut outer.sort_clause {
        let Some(N::SortBy(s)) = sort.node.as_mut() else {
            return None;
        };
        split.visit(s.node.as_deref_mut()?)?;
    }
    for limit in [outer.limit_count.as_deref(), outer.limit_offset.as_deref()]
        .into_iter()
        .flatten()
    {
        if !constant_only(limit) {
            return None;
        }
    }
    if split.aggregates == 0 && group.is_empty() {
        return None;
    }
    let partials = split.partials;

    // WHERE: exact when every conjunct is one predicate the cold engine evaluates as
    // Postgres does.
    let (exact_where, where_predicates) = match select.where_clause.as_deref() {
        None => (true, 0),
        Some(w) => {
            exact_conjuncts(w, &alias, table, found.types).map_or((false, 0), |count| (true, count))
        }
    };
    let where_text = match select.where_clause.as_deref() {
        None => String::new(),
        Some(w) => format!(" AND ({})", deparse_expr(parsed, w)?),
    };

    // The derived table.
    let param = client_params + 1;
    let (rows, json, plan) = (param, param + 1, param + 2);
    let q_alias = quote_ident(&alias);
    let qualified = format!(
        "{}.{}",
        quote_ident(&table.schema),
        quote_ident(&table.name)
    );
    let group_cols: Vec<String> = group
        .iter()
        .map(|&g| quote_ident(&table.columns[g]))
        .collect();
    let group_refs: Vec<String> = group_cols
        .iter()
        .map(|c| format!("{q_alias}.{c}"))
        .collect();
    let mut select_list: Vec<String> = group_refs
        .iter()
        .zip(&group_cols)
        .map(|(r, c)| format!("{r} AS {c}"))
        .collect();
    for (i, p) in partials.iter().enumerate() {
        let arg = p
            .column
            .map(|c| format!("{q_alias}.{}", quote_ident(&table.columns[c])));
        let expr = match (p.kind, arg) {
            (PartialKind::CountStar, _) => "count(*)".to_owned(),
            (PartialKind::Count, Some(a)) => format!("count({a})"),
            (PartialKind::SumInt | PartialKind::SumFloat, Some(a)) => format!("sum({a})"),
            (PartialKind::SumNumeric, Some(a)) => format!("sum({a})::numeric"),
            (PartialKind::Min, Some(a)) => format!("min({a})"),
            (PartialKind::Max, Some(a)) => format!("max({a})"),
            (PartialKind::BoolAnd, Some(a)) => format!("bool_and({a})"),
            (PartialKind::BoolOr, Some(a)) => format!("bool_or({a})"),
            _ => return None,
        };
        select_list.push(format!("{expr} AS _cw_p{i}"));
    }
    let select_list = select_list.join(", ");
    let group_by = if group.is_empty() {
        String::new()
    } else {
        format!(" GROUP BY {}", group_refs.join(", "))
    };
    let mut definitions: Vec<String> = group
        .iter()
        .zip(&group_cols)
        .map(|(&g, c)| format!("{c} {}", found.types[g].0))
        .collect();
    definitions.extend(
        partials
            .iter()
            .enumerate()
            .map(|(i, p)| format!("_cw_p{i} {}", p.sql_type)),
    );
    let written = if schema.is_some() {
        "NULL".to_owned()
    } else {
        dollar_quoted(&rv.relname)
    };
    let p = format!("${plan}::jsonb");
    let m_key = format!("_cw_m.{}", quote_ident(key));
    let (cast, order) = (key_kind.sql_type(), key_kind.order());
    let mirror_check = format!(
        "(SELECT coalesce(array_agg({m_key}::text ORDER BY {m_key}{order}), '{{}}') FROM coldwire.m_{id} _cw_m \
         WHERE ({p} -> 'mirror' ->> 'lo' IS NULL OR {m_key} >= ({p} -> 'mirror' ->> 'lo')::{cast}) \
         AND ({p} -> 'mirror' ->> 'hi' IS NULL OR {m_key} <= ({p} -> 'mirror' ->> 'hi')::{cast})) \
         = ARRAY(SELECT _cw_e FROM jsonb_array_elements_text({p} -> 'mirror' -> 'keys') WITH ORDINALITY AS _cw_x(_cw_e, _cw_n) ORDER BY _cw_n)",
        id = table.table_id,
    );
    let guard = format!(
        "WITH _cw_guard AS MATERIALIZED (SELECT coldwire.guard({id}, CASE WHEN {p} ? 'refusal' OR NOT {p} ? 'mirror' OR {mirror_check} \
         THEN {p} ELSE jsonb_build_object('planned', -1) END, {written}) AS ok) ",
        id = table.table_id,
    );
    let ok = "(SELECT ok FROM _cw_guard)";
    let q_key = quote_ident(key);
    let derived = format!(
        "({guard}SELECT {select_list} FROM ONLY {qualified} AS {q_alias} WHERE {ok}{where_text}{group_by} \
         UNION ALL SELECT {select_list} FROM unnest(${rows}::{qualified}[]) AS {q_alias} WHERE {ok} \
         AND NOT EXISTS (SELECT 1 FROM coldwire.m_{id} _cw_m WHERE _cw_m.{q_key} = {q_alias}.{q_key}) \
         AND NOT EXISTS (SELECT 1 FROM ONLY {qualified} _cw_h WHERE _cw_h.{q_key} = {q_alias}.{q_key}){where_text}{group_by} \
         UNION ALL SELECT * FROM jsonb_to_recordset(${json}::jsonb) AS _cw_c({definitions}) WHERE {ok})",
        id = table.table_id,
        definitions = definitions.join(", "),
    );

    outer.from_clause = vec![Node {
        node: Some(N::RangeVar(protobuf::RangeVar {
            relname: PLACEHOLDER.to_owned(),
            inh: true,
            relpersistence: "p".to_owned(),
            alias: Some(protobuf::Alias {
                aliasname: alias.clone(),
                colnames: Vec::new(),
            }),
            ..Default::default()
        })),
    }];
    outer.where_clause = None;
    let text = deparse_select(parsed, outer)?;
    let (before, after) = text.split_once(PLACEHOLDER)?;
    if after.contains(PLACEHOLDER) {
        return None;
    }
    Some(AggregateRewrite {
        sql: format!("{before}{derived}{after}"),
        table_id: table.table_id,
        location: rv.location,
        name: alias,
        group,
        partials,
        exact_where,
        where_predicates,
        key_kind,
        param,
    })
}

/// The name the derived table stands under while the outer query is deparsed.
const PLACEHOLDER: &str = "coldwire_partials_7f3a9c";

/// Whether `scalar` values group as Postgres groups them when their bytes are equal (a
/// finer grouping is fine: Postgres combines the partial rows of one group again).
fn groupable(scalar: ScalarType) -> bool {
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

/// The aggregates of the outer query, turned into combinations of partials.
struct Split<'a> {
    alias: &'a str,
    table: &'a TieredTable,
    types: &'a [(String, Option<ColdType>)],
    group: &'a [usize],
    partials: Vec<Partial>,
    aggregates: usize,
}

impl Split<'_> {
    /// Replaces the aggregates in `node`; `None` when something does not qualify.
    fn visit(&mut self, node: &mut Node) -> Option<()> {
        if let Some(N::ColumnRef(_)) = node.node {
            let name = column_of(node, self.alias, true)?;
            let position = self.table.columns.iter().position(|n| *n == name)?;
            return self.group.contains(&position).then_some(());
        }
        match node.node.as_mut()? {
            N::FuncCall(f) => {
                let name = function_name(f)?;
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
        if f.agg_distinct
            || f.agg_filter.is_some()
            || !f.agg_order.is_empty()
            || f.agg_within_group
            || f.func_variadic
        {
            return None;
        }
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
        let ordered = int
            || int8
            || matches!(
                scalar,
                ScalarType::Date | ScalarType::Timestamp | ScalarType::Timestamptz
            );
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
            AggregateKind::Sum if int8 => {
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
            AggregateKind::Avg if int || int8 => {
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

    /// The name of the partial `kind` of `column`, added unless the same one exists.
    fn partial(&mut self, kind: PartialKind, column: Option<usize>, sql_type: &str) -> String {
        let index = match self
            .partials
            .iter()
            .position(|p| p.kind == kind && p.column == column)
        {
            Some(i) => i,
            None => {
                self.partials.push(Partial {
                    kind,
                    column,
                    sql_type: sql_type.to_owned(),
                });
                self.partials.len() - 1
            }
        };
        format!("_cw_p{index}")
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
fn function_name(f: &FuncCall) -> Option<String> {
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

/// The table column a GROUP BY item names, resolved as Postgres resolves it: an integer
/// is a target's position, a name is an input column first and a target's name second;
/// the target must then be a plain column.
fn group_column(
    item: &Node,
    select: &SelectStmt,
    alias: &str,
    column: &impl Fn(&str) -> Option<usize>,
) -> Option<usize> {
    let target_column = |target: &Node| match target.node.as_ref()? {
        N::ResTarget(t) => column(&column_of(t.val.as_deref()?, alias, true)?),
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
                return Some(position);
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
        _ => None,
    }
}

fn non_null_constant(node: &Node) -> bool {
    matches!(node.node.as_ref(), Some(N::AConst(c)) if !c.isnull && c.val.is_some())
}

/// Whether `node` (a LIMIT or OFFSET) holds only constants and parameters.
fn constant_only(node: &Node) -> bool {
    match node.node.as_ref() {
        Some(N::AConst(_) | N::ParamRef(_)) => true,
        Some(N::TypeCast(c)) => c.arg.as_deref().is_some_and(constant_only),
        _ => false,
    }
}

/// Whether the statement holds a subquery (whose columns could refer to the table).
fn has_sublink(parsed: &pg_query::ParseResult) -> bool {
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
fn exact_conjuncts(
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
            let ranged = super::predicates::ranged(scalar);
            let equality = matches!(
                scalar,
                ScalarType::Text(TextKind::Text | TextKind::Varchar) | ScalarType::Uuid
            );
            use super::predicates::Comparison as C;
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

fn flatten_and<'n>(node: &'n Node, out: &mut Vec<&'n Node>) {
    match node.node.as_ref() {
        Some(N::BoolExpr(b)) if b.boolop == BoolExprType::AndExpr as i32 => {
            for a in &b.args {
                flatten_and(a, out);
            }
        }
        _ => out.push(node),
    }
}

/// The column name Postgres gives a target without `AS` (FigureColname), so that the
/// rewritten target keeps it.
fn figure_name(node: &Node) -> String {
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

fn deparse_select(parsed: &pg_query::ParseResult, select: SelectStmt) -> Option<String> {
    let result = protobuf::ParseResult {
        version: parsed.protobuf.version,
        stmts: vec![protobuf::RawStmt {
            stmt: Some(Box::new(Node {
                node: Some(N::SelectStmt(Box::new(select))),
            })),
            stmt_location: 0,
            stmt_len: 0,
        }],
    };
    pg_query::deparse(&result, pg_query::DeparseOptions::default()).ok()
}

/// An expression's text, as the deparser writes it.
fn deparse_expr(parsed: &pg_query::ParseResult, node: &Node) -> Option<String> {
    let select = SelectStmt {
        target_list: vec![Node {
            node: Some(N::ResTarget(Box::new(ResTarget {
                val: Some(Box::new(node.clone())),
                ..Default::default()
            }))),
        }],
        limit_option: protobuf::LimitOption::Default as i32,
        op: SetOperation::SetopNone as i32,
        ..Default::default()
    };
    deparse_select(parsed, select)?
        .strip_prefix("SELECT ")
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events() -> (TieredTable, Vec<(String, Option<ColdType>)>) {
        let table = TieredTable {
            table_id: 7,
            schema: "public".into(),
            name: "events".into(),
            columns: vec![
                "id".into(),
                "tenant".into(),
                "amount".into(),
                "note".into(),
                "ok".into(),
            ],
            pk: vec!["id".into()],
            guarded: true,
        };
        let types = vec![
            ("bigint".into(), Some(ColdType::Scalar(ScalarType::Int8))),
            ("integer".into(), Some(ColdType::Scalar(ScalarType::Int4))),
            (
                "double precision".into(),
                Some(ColdType::Scalar(ScalarType::Float8)),
            ),
            (
                "text".into(),
                Some(ColdType::Scalar(ScalarType::Text(TextKind::Text))),
            ),
            ("boolean".into(), Some(ColdType::Scalar(ScalarType::Bool))),
        ];
        (table, types)
    }

    fn plan(sql: &str) -> Option<AggregateRewrite> {
        let (table, types) = events();
        let parsed = pg_query::parse(sql, 0).unwrap();
        rewrite_aggregate(&parsed, 0, |_, name| {
            (name == "events").then_some(AggregateTable {
                table: &table,
                types: &types,
            })
        })
    }

    #[test]
    fn splits_the_common_aggregates() {
        let r = plan("SELECT tenant, count(*), sum(amount), avg(id) FROM events WHERE id > 5 GROUP BY tenant HAVING count(*) > 1 ORDER BY 2 DESC LIMIT 3").unwrap();
        let kinds: Vec<PartialKind> = r.partials.iter().map(|p| p.kind).collect();
        assert_eq!(
            kinds,
            [
                PartialKind::CountStar,
                PartialKind::SumFloat,
                PartialKind::SumNumeric,
                PartialKind::Count
            ]
        );
        assert_eq!(r.group, [1]);
        assert!(r.exact_where);
        assert_eq!(r.where_predicates, 1);
        assert!(
            r.sql.contains("COALESCE(sum(_cw_p0), 0)::int8 AS count"),
            "{}",
            r.sql
        );
        assert!(
            r.sql.contains("HAVING COALESCE(sum(_cw_p0), 0)::int8 > 1"),
            "{}",
            r.sql
        );
        assert!(
            r.sql.contains("sum(_cw_p2) / sum(_cw_p3) AS avg"),
            "{}",
            r.sql
        );
        assert!(pg_query::parse(&r.sql, 0).is_ok(), "{}", r.sql);
    }

    #[test]
    fn group_by_ordinals_and_output_names_resolve_to_columns() {
        for sql in [
            "SELECT tenant, count(*) FROM events GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 3",
            "SELECT tenant AS t, count(*) FROM events GROUP BY t",
            "SELECT events.tenant, sum(amount) FROM events GROUP BY events.tenant",
        ] {
            let r = plan(sql).unwrap_or_else(|| panic!("{sql}"));
            assert_eq!(r.group, [1], "{sql}");
        }
    }

    #[test]
    fn leaves_what_it_cannot_split() {
        for sql in [
            "SELECT count(DISTINCT tenant) FROM events",
            "SELECT string_agg(note, ',') FROM events",
            "SELECT min(note) FROM events",
            "SELECT id, count(*) FROM events GROUP BY tenant",
            "SELECT tenant + 1, count(*) FROM events GROUP BY 1",
            "SELECT count(*) FROM events GROUP BY 2",
            "SELECT count(*) FROM events e JOIN other o ON o.id = e.id",
            "SELECT count(*) FROM events WHERE id IN (SELECT 1)",
            "SELECT count(*) OVER () FROM events",
            "SELECT count(*) FILTER (WHERE ok) FROM events",
            "SELECT * FROM events",
            "SELECT my_agg(tenant) FROM events GROUP BY tenant",
        ] {
            assert!(plan(sql).is_none(), "{sql}");
        }
    }

    #[test]
    fn a_where_the_cold_side_cannot_compute_is_not_exact() {
        let r = plan("SELECT count(*) FROM events WHERE note LIKE 'a%'").unwrap();
        assert!(!r.exact_where);
        let r =
            plan("SELECT count(*) FROM events WHERE note = 'a' AND id BETWEEN 1 AND 9").unwrap();
        assert!(r.exact_where);
        assert_eq!(r.where_predicates, 3);
        let r = plan("SELECT count(*) FROM events WHERE amount > 1").unwrap();
        assert!(!r.exact_where);
    }
}
