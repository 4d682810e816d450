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
//! uuid key, GROUP BY plain columns, and aggregates from [`AggregateKind`] over plain
//! columns (no ORDER BY inside; a FILTER is applied to the partial: by Postgres in the
//! hot and row branches, by the cold engine when exact), outside them only group columns, constants,
//! parameters and a few scalar functions. An aggregate over DISTINCT values of a column
//! (`count(DISTINCT x)`) stays as written: the partial rows are then grouped by `x` as
//! well, so they carry each group's set of values; with several such columns, by each
//! in a grouping set of its own ([`AggregateRewrite::distinct_sets`]). A GROUP BY of `date_trunc('<unit>', c)`
//! (c a timestamp or timestamptz column) groups the partial rows by it and names the
//! result `c`; the outer query's `date_trunc('<unit>', c)` then truncates again, which
//! changes nothing. Everything else takes the row path.

mod conditions;
mod derived;
mod join;
mod split;
#[cfg(test)]
mod tests;

use pg_query::protobuf::{node::Node as N, SelectStmt, SetOperation};

use super::predicates::ColumnPredicate;
use super::quote::quote_ident;
use super::rewrite::{dollar_quoted, TieredTable};
use crate::values::trunc::TruncUnit;
use crate::values::{ColdType, ScalarType, TextKind};
use split::{figure_name, Split};

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

/// One partial: what, over which column (a position in the table's columns), under
/// which FILTER (an index in [`AggregateRewrite::filters`]), and its type as the derived
/// table declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partial {
    pub kind: PartialKind,
    pub column: Option<usize>,
    pub filter: Option<usize>,
    pub sql_type: String,
}

/// The condition of an aggregate's `FILTER (WHERE …)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregateFilter {
    /// Its text, as the hot and row branches apply it.
    pub text: String,
    /// Its conjuncts on the table's columns, `$n` unresolved.
    pub predicates: Vec<ColumnPredicate>,
    /// When every conjunct is one predicate the cold engine evaluates exactly: how many
    /// (a Bind whose values leave fewer is computed by Postgres, from rows).
    pub exact: Option<usize>,
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

/// A column the partial rows are grouped by: its position in the table's columns, and
/// the unit when the client groups by `date_trunc(unit, column)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupColumn {
    pub column: usize,
    pub trunc: Option<TruncUnit>,
}

impl GroupColumn {
    pub fn plain(column: usize) -> Self {
        GroupColumn {
            column,
            trunc: None,
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
    /// The columns the partial rows are grouped by: the GROUP BY items, then the columns
    /// of DISTINCT aggregates.
    pub group: Vec<GroupColumn>,
    /// When not 0, the last `distinct_sets` columns of `group` (DISTINCT columns, 2 or
    /// more) are grouping sets: the partial rows of set `j` are grouped by the GROUP BY
    /// items and the `j`-th of them, NULL in the others, and only those of the first set
    /// carry the partials (NULL in the others, which every combination ignores). Every
    /// DISTINCT aggregate ignores NULLs, so each still sees its column's set of values.
    pub distinct_sets: usize,
    /// A timestamptz column is truncated (`date_trunc`), which cold-side matches
    /// Postgres only in a session whose TimeZone is UTC.
    pub needs_utc: bool,
    pub partials: Vec<Partial>,
    /// The FILTER conditions the partials refer to.
    pub filters: Vec<AggregateFilter>,
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
    /// Per column: Postgres orders its values as their bytes (text under the C
    /// collation), so that `<` and `>` on it are exact cold-side.
    pub byte_ordered: &'a [bool],
}

/// The aggregate rewrite of `parsed` (the text's parse tree), with coldwire's parameters
/// numbered after `client_params`; `None` when the statement does not qualify.
pub fn rewrite_aggregate<'a>(
    parsed: &pg_query::ParseResult,
    client_params: usize,
    resolve: impl Fn(Option<&str>, &str) -> Option<AggregateTable<'a>>,
) -> Option<AggregateRewrite> {
    let select = single_select(parsed)?;
    let source = Source::of(select, resolve)?;
    let joined = match source.joined {
        true => Some(join::plan(select, &source.alias, &source.table.columns)?),
        false => None,
    };
    if let Some(j) = &joined {
        let key = source.column(source.key)?;
        // Nothing carried: the branches would aggregate without GROUP BY and give a row
        // (of count 0) even for no rows, which the joins would then match. The key
        // carried: the client may group by it and read columns that depend on it, which
        // Postgres allows of a table with that primary key, not of the derived table;
        // and partial rows grouped by the key are the rows anyway.
        if j.carried.is_empty() || j.carried.contains(&key) {
            return None;
        }
    }
    let group = match &joined {
        None => source.group_columns(select)?,
        // Joined: the partial rows are grouped by every column read outside aggregates.
        Some(j) => j
            .carried
            .iter()
            .map(|&c| match source.types[c].1 {
                Some(ColdType::Scalar(s)) if conditions::groupable(s) => {
                    Some(GroupColumn::plain(c))
                }
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?,
    };
    let Outer {
        select: outer,
        partials,
        distinct,
        distinct_keeps_nulls,
        filters,
    } = source.split(select, &group)?;
    let filters = filters
        .into_iter()
        .map(|(node, predicates, exact)| {
            Some(AggregateFilter {
                text: derived::deparse_expr(parsed, &node)?,
                predicates,
                exact,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    // The partial rows are grouped by the client's groups and the DISTINCT aggregates'
    // columns.
    let mut group = group;
    let mut appended = 0;
    for d in distinct {
        match group.iter().find(|g| g.column == d) {
            Some(g) if g.trunc.is_none() => {}
            // The derived table's column holds the truncated values.
            Some(_) => return None,
            None => {
                group.push(GroupColumn::plain(d));
                appended += 1;
            }
        }
    }
    // Several DISTINCT columns: each one's values in partial rows of their own (grouping
    // sets), not every combination of them, which is nearly a row per row.
    let distinct_sets = if appended >= 2 && !distinct_keeps_nulls {
        appended
    } else {
        0
    };
    let needs_utc = group.iter().any(|g| {
        g.trunc.is_some()
            && matches!(
                source.types[g.column].1,
                Some(ColdType::Scalar(ScalarType::Timestamptz))
            )
    });

    // WHERE: exact when every conjunct is one predicate the cold engine evaluates as
    // Postgres does.
    let where_clause = match &joined {
        None => select.where_clause.as_deref(),
        Some(j) => j.pushed.as_ref(),
    };
    let (exact_where, where_predicates, where_text) = match where_clause {
        None => (true, 0, String::new()),
        Some(w) => {
            let exact = conditions::exact_conjuncts(w, &source.alias, &source.columns());
            let text = format!(" AND ({})", derived::deparse_expr(parsed, w)?);
            (exact.is_some(), exact.unwrap_or(0), text)
        }
    };

    let param = client_params + 1;
    let derived = derived::derived_table(
        &source,
        &group,
        distinct_sets,
        &partials,
        &filters,
        &where_text,
        param,
    )?;
    let kept = joined.map(|j| (source.location, j.kept));
    let sql = derived::around(parsed, outer, &source.alias, &derived, kept)?;
    Some(AggregateRewrite {
        sql,
        table_id: source.table.table_id,
        location: source.location,
        name: source.alias,
        group,
        distinct_sets,
        needs_utc,
        partials,
        filters,
        exact_where,
        where_predicates,
        key_kind: source.key_kind,
        param,
    })
}

/// The statement's one SELECT, when it is of a form the rewrite keeps its meaning for (no
/// subquery, WITH, set operation, DISTINCT, INTO, window, locking or VALUES).
fn single_select(parsed: &pg_query::ParseResult) -> Option<&SelectStmt> {
    let [raw] = parsed.protobuf.stmts.as_slice() else {
        return None;
    };
    if conditions::has_sublink(parsed) {
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
    Some(select)
}

/// The outer query with its aggregates replaced, and what the derived table must give it.
struct Outer {
    select: SelectStmt,
    partials: Vec<Partial>,
    /// Columns of DISTINCT aggregates.
    distinct: Vec<usize>,
    /// A DISTINCT aggregate counts NULL as a value.
    distinct_keeps_nulls: bool,
    filters: Vec<split::Filter>,
}

/// The one tiered table the SELECT reads, as the rewrite needs it.
struct Source<'a> {
    /// The table reference's location in the text.
    location: i32,
    table: &'a TieredTable,
    types: &'a [(String, Option<ColdType>)],
    byte_ordered: &'a [bool],
    key: &'a str,
    key_kind: KeyKind,
    /// The name the query refers to the table by.
    alias: String,
    /// The table's name as the client wrote it, for the guard's refusal message (`NULL`
    /// when schema-qualified).
    written: String,
    /// Joined with plain tables (`join`).
    joined: bool,
}

impl<'a> Source<'a> {
    /// The FROM item: exactly one tiered table, guarded, whose key is a single column of
    /// a type whose text and order coldwire and Postgres agree on.
    fn of(
        select: &SelectStmt,
        resolve: impl Fn(Option<&str>, &str) -> Option<AggregateTable<'a>>,
    ) -> Option<Self> {
        // One tiered table, alone or in inner joins with plain tables (`join`).
        let leaves = join::from_leaves(&select.from_clause)?;
        let mut tiered = None;
        for range in &leaves {
            let schema = (!range.schemaname.is_empty()).then_some(range.schemaname.as_str());
            if let Some(found) = resolve(schema, &range.relname) {
                if tiered.is_some() {
                    return None;
                }
                tiered = Some((*range, found));
            }
        }
        let (range, found) = tiered?;
        if !range.inh || !range.catalogname.is_empty() {
            return None;
        }
        let schema = (!range.schemaname.is_empty()).then_some(range.schemaname.as_str());
        let table = found.table;
        if !table.guarded || table.columns.len() != found.types.len() {
            return None;
        }
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
        let alias = match &range.alias {
            Some(a) if !a.colnames.is_empty() => return None,
            Some(a) => a.aliasname.clone(),
            None => table.name.clone(),
        };
        let written = if schema.is_some() {
            "NULL".to_owned()
        } else {
            // As a quoted identifier, so that `to_regclass` reads back the name as parsed.
            dollar_quoted(&quote_ident(&range.relname))
        };
        Some(Source {
            location: range.location,
            table,
            types: found.types,
            byte_ordered: found.byte_ordered,
            key,
            key_kind,
            alias,
            written,
            joined: leaves.len() > 1,
        })
    }

    /// The table's columns as the exactness test reads them.
    fn columns(&self) -> conditions::Columns<'a> {
        conditions::Columns {
            table: self.table,
            types: self.types,
            byte_ordered: self.byte_ordered,
        }
    }

    fn column(&self, name: &str) -> Option<usize> {
        self.table.columns.iter().position(|c| c == name)
    }

    /// GROUP BY: plain columns of the table, by name, output-column name or ordinal, of
    /// types that group by their bytes, or `date_trunc` of a timestamp or timestamptz
    /// column; one item per column (the derived table holds it once).
    fn group_columns(&self, select: &SelectStmt) -> Option<Vec<GroupColumn>> {
        let mut group: Vec<GroupColumn> = Vec::new();
        for g in &select.group_clause {
            let item = conditions::group_column(g, select, &self.alias, &|name| self.column(name))?;
            let Some(ColdType::Scalar(scalar)) = self.types[item.column].1 else {
                return None;
            };
            let fits = match item.trunc {
                None => conditions::groupable(scalar),
                Some(_) => matches!(scalar, ScalarType::Timestamp | ScalarType::Timestamptz),
            };
            if !fits {
                return None;
            }
            match group.iter().find(|g| g.column == item.column) {
                Some(g) if *g == item => {}
                Some(_) => return None,
                None => group.push(item),
            }
        }
        Some(group)
    }

    /// The outer query, its aggregates (target list, HAVING, ORDER BY) replaced by their
    /// combinations, and the partials they need.
    fn split(&self, select: &SelectStmt, group: &[GroupColumn]) -> Option<Outer> {
        let mut outer = select.clone();
        let mut split = Split {
            alias: &self.alias,
            table: self.table,
            types: self.types,
            byte_ordered: self.byte_ordered,
            group,
            partials: Vec::new(),
            aggregates: 0,
            distinct: Vec::new(),
            distinct_keeps_nulls: false,
            filters: Vec::new(),
            filter: None,
            joined: self.joined,
        };
        for target in &mut outer.target_list {
            let Some(N::ResTarget(t)) = target.node.as_mut() else {
                return None;
            };
            if t.name.is_empty() {
                t.name = figure_name(t.val.as_deref()?);
            }
            split.visit(t.val.as_deref_mut()?)?;
        }
        if let Some(having) = outer.having_clause.as_deref_mut() {
            split.visit(having)?;
        }
        // ORDER BY a bare name of an output column (`ORDER BY day`) sorts by that
        // target, already split; Postgres resolves such a name to the output column
        // before any input column.
        let outputs: Vec<String> = outer
            .target_list
            .iter()
            .filter_map(|t| match t.node.as_ref()? {
                N::ResTarget(r) => Some(r.name.clone()),
                _ => None,
            })
            .collect();
        for sort in &mut outer.sort_clause {
            let Some(N::SortBy(s)) = sort.node.as_mut() else {
                return None;
            };
            let node = s.node.as_deref_mut()?;
            if let Some(N::ColumnRef(c)) = node.node.as_ref() {
                if let [field] = c.fields.as_slice() {
                    if matches!(field.node.as_ref(), Some(N::String(name)) if outputs.contains(&name.sval))
                    {
                        continue;
                    }
                }
            }
            split.visit(node)?;
        }
        for limit in [outer.limit_count.as_deref(), outer.limit_offset.as_deref()]
            .into_iter()
            .flatten()
        {
            if !conditions::constant_only(limit) {
                return None;
            }
        }
        // Joined, grouping by the columns read collapses rows: only an aggregate or a
        // GROUP BY of the client's may.
        let grouped = match self.joined {
            true => !select.group_clause.is_empty(),
            false => !group.is_empty(),
        };
        if split.aggregates == 0 && !grouped {
            return None;
        }
        Some(Outer {
            select: outer,
            partials: split.partials,
            distinct: split.distinct,
            distinct_keeps_nulls: split.distinct_keeps_nulls,
            filters: split.filters,
        })
    }
}
