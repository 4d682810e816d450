//! The statement's text: the derived table of partial rows from three branches, and the
//! outer query deparsed around it.

use pg_query::protobuf::{self, node::Node as N, Node, ResTarget, SelectStmt, SetOperation};

use super::{AggregateFilter, GroupColumn, Partial, PartialKind, Source};
use crate::sql::quote::quote_ident;

/// The name the derived table stands under while the outer query is deparsed.
const PLACEHOLDER: &str = "coldwire_partials_7f3a9c";

pub(super) fn deparse_select(parsed: &pg_query::ParseResult, select: SelectStmt) -> Option<String> {
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
pub(super) fn deparse_expr(parsed: &pg_query::ParseResult, node: &Node) -> Option<String> {
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

/// The derived table that stands for the table: hot rows aggregated, the cold rows of
/// `$param` aggregated, and the cold partials of `$param + 1`, all behind the guard that
/// checks the plan of `$param + 2`.
pub(super) fn derived_table(
    source: &Source,
    group: &[GroupColumn],
    distinct_sets: usize,
    partials: &[Partial],
    filters: &[AggregateFilter],
    where_text: &str,
    param: usize,
) -> Option<String> {
    let table = source.table;
    let (rows, json) = (param, param + 1);
    let q_alias = quote_ident(&source.alias);
    let qualified = crate::sql::quote::qualified_ident(&table.schema, &table.name);
    let group_cols: Vec<String> = group
        .iter()
        .map(|g| quote_ident(&table.columns[g.column]))
        .collect();
    let group_refs: Vec<String> = group
        .iter()
        .zip(&group_cols)
        .map(|(g, c)| match g.trunc {
            None => format!("{q_alias}.{c}"),
            Some(unit) => format!("date_trunc('{}', {q_alias}.{c})", unit.name()),
        })
        .collect();
    let mut select_list: Vec<String> = group_refs
        .iter()
        .zip(&group_cols)
        .map(|(r, c)| format!("{r} AS {c}"))
        .collect();
    // Grouping sets: the partials in the rows of the first set only.
    let base = group.len() - distinct_sets;
    let first_set = (distinct_sets > 0).then(|| group_refs[base].clone());
    for (i, p) in partials.iter().enumerate() {
        let arg = p
            .column
            .map(|c| format!("{q_alias}.{}", quote_ident(&table.columns[c])));
        let (function, arg) = match (p.kind, arg) {
            (PartialKind::CountStar, _) => ("count", "*".to_owned()),
            (PartialKind::Count, Some(a)) => ("count", a),
            (PartialKind::SumInt | PartialKind::SumFloat | PartialKind::SumNumeric, Some(a)) => {
                ("sum", a)
            }
            (PartialKind::Min, Some(a)) => ("min", a),
            (PartialKind::Max, Some(a)) => ("max", a),
            (PartialKind::BoolAnd, Some(a)) => ("bool_and", a),
            (PartialKind::BoolOr, Some(a)) => ("bool_or", a),
            _ => return None,
        };
        let filter = match p.filter {
            None => String::new(),
            Some(f) => format!(" FILTER (WHERE {})", filters.get(f)?.text),
        };
        let mut expr = format!("{function}({arg}){filter}");
        if p.kind == PartialKind::SumNumeric {
            expr = format!("({expr})::numeric");
        }
        if let Some(first) = &first_set {
            expr = format!("CASE WHEN GROUPING({first}) = 0 THEN {expr} END");
        }
        select_list.push(format!("{expr} AS _cw_p{i}"));
    }
    let select_list = select_list.join(", ");
    let group_by = if group.is_empty() {
        String::new()
    } else if distinct_sets > 0 {
        let sets: Vec<String> = group_refs[base..]
            .iter()
            .map(|d| {
                let set: Vec<&str> = group_refs[..base]
                    .iter()
                    .chain([d])
                    .map(String::as_str)
                    .collect();
                format!("({})", set.join(", "))
            })
            .collect();
        format!(" GROUP BY GROUPING SETS ({})", sets.join(", "))
    } else {
        format!(" GROUP BY {}", group_refs.join(", "))
    };
    let mut definitions: Vec<String> = group
        .iter()
        .zip(&group_cols)
        .map(|(g, c)| format!("{c} {}", source.types[g.column].0))
        .collect();
    definitions.extend(
        partials
            .iter()
            .enumerate()
            .map(|(i, p)| format!("_cw_p{i} {}", p.sql_type)),
    );
    let guard = guard(source, param + 2);
    let ok = "(SELECT ok FROM _cw_guard)";
    let q_key = quote_ident(source.key);
    Some(format!(
        "({guard}SELECT {select_list} FROM ONLY {qualified} AS {q_alias} WHERE {ok}{where_text}{group_by} \
         UNION ALL SELECT {select_list} FROM unnest(${rows}::{qualified}[]) AS {q_alias} WHERE {ok} \
         AND NOT EXISTS (SELECT 1 FROM coldwire.m_{id} _cw_m WHERE _cw_m.{q_key} = {q_alias}.{q_key}) \
         AND NOT EXISTS (SELECT 1 FROM ONLY {qualified} _cw_h WHERE _cw_h.{q_key} = {q_alias}.{q_key}){where_text}{group_by} \
         UNION ALL SELECT * FROM jsonb_to_recordset(${json}::jsonb) AS _cw_c({definitions}) WHERE {ok})",
        id = table.table_id,
        definitions = definitions.join(", "),
    ))
}

/// Replaces the RangeVar at `location` within a FROM item of joins by `with`.
fn replace_range(node: &mut Node, location: i32, with: &Node, replaced: &mut usize) {
    match node.node.as_mut() {
        Some(N::RangeVar(r)) if r.location == location => {
            *node = with.clone();
            *replaced += 1;
        }
        Some(N::JoinExpr(j)) => {
            for side in [j.larg.as_deref_mut(), j.rarg.as_deref_mut()]
                .into_iter()
                .flatten()
            {
                replace_range(side, location, with, replaced);
            }
        }
        _ => {}
    }
}

/// The guard, as a materialized CTE: the plan of `$plan` when it is a refusal, has no
/// mirror keys, or its mirror keys inside the cold key range are those the mirror holds
/// in the statement's snapshot; otherwise a plan that fails as stale.
fn guard(source: &Source, plan: usize) -> String {
    let p = format!("${plan}::jsonb");
    let m_key = format!("_cw_m.{}", quote_ident(source.key));
    let (cast, order) = (source.key_kind.sql_type(), source.key_kind.order());
    let mirror_check = format!(
        "(SELECT coalesce(array_agg({m_key}::text ORDER BY {m_key}{order}), '{{}}') FROM coldwire.m_{id} _cw_m \
         WHERE ({p} -> 'mirror' ->> 'lo' IS NULL OR {m_key} >= ({p} -> 'mirror' ->> 'lo')::{cast}) \
         AND ({p} -> 'mirror' ->> 'hi' IS NULL OR {m_key} <= ({p} -> 'mirror' ->> 'hi')::{cast})) \
         = ARRAY(SELECT _cw_e FROM jsonb_array_elements_text({p} -> 'mirror' -> 'keys') WITH ORDINALITY AS _cw_x(_cw_e, _cw_n) ORDER BY _cw_n)",
        id = source.table.table_id,
    );
    format!(
        "WITH _cw_guard AS MATERIALIZED (SELECT coldwire.guard({id}, CASE WHEN {p} ? 'refusal' OR NOT {p} ? 'mirror' OR {mirror_check} \
         THEN {p} ELSE jsonb_build_object('planned', -1) END, {written}) AS ok) ",
        id = source.table.table_id,
        written = source.written,
    )
}

/// The outer query's text with `derived` in place of its FROM item, named `alias`; or,
/// for a join (`joined`: the table reference's location, and the WHERE left to the outer
/// query), in place of that reference within the joins.
pub(super) fn around(
    parsed: &pg_query::ParseResult,
    mut outer: SelectStmt,
    alias: &str,
    derived: &str,
    joined: Option<(i32, Option<Node>)>,
) -> Option<String> {
    let placeholder = Node {
        node: Some(N::RangeVar(protobuf::RangeVar {
            relname: PLACEHOLDER.to_owned(),
            inh: true,
            relpersistence: "p".to_owned(),
            alias: Some(protobuf::Alias {
                aliasname: alias.to_owned(),
                colnames: Vec::new(),
            }),
            ..Default::default()
        })),
    };
    match joined {
        None => {
            outer.from_clause = vec![placeholder];
            outer.where_clause = None;
        }
        Some((location, kept)) => {
            let mut replaced = 0;
            for item in &mut outer.from_clause {
                replace_range(item, location, &placeholder, &mut replaced);
            }
            if replaced != 1 {
                return None;
            }
            outer.where_clause = kept.map(Box::new);
        }
    }
    let text = deparse_select(parsed, outer)?;
    let (before, after) = text.split_once(PLACEHOLDER)?;
    if after.contains(PLACEHOLDER) {
        return None;
    }
    Some(format!("{before}{derived}{after}"))
}
