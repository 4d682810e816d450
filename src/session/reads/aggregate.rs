//! Aggregates answered from cold partials (`sql::aggregate`, DESIGN §6.5): the plan a
//! rewritten aggregate keeps, and at each Bind the partials the cold engine computes,
//! leaving out the mirror's keys that may be cold.

use std::collections::HashSet;
use std::sync::Arc;

use bytes::BytesMut;

use super::catalog::HotKeys;
use super::path::{empty_array, jsonb, PlannedReference, PreparedRead, ReadPath};
use crate::catalog::registry::Registry;
use crate::cold::engine::{cold_partials, Aggregation, PartialStats};
use crate::cold::scan::ColdTable;
use crate::error::PlanError;
use crate::segment::prune::Predicate;
use crate::sql::aggregate::{
    rewrite_aggregate, AggregateFilter, AggregateTable, GroupColumn, KeyKind, Partial,
};
use crate::sql::params::BoundParams;
use crate::sql::predicates::extract;
use crate::sql::predicates::to_prune;

/// An aggregate whose key conditions leave at most this many keys reads its cold rows
/// (a few pages through the page cache) rather than computing partials.
pub(super) const NARROW_KEYS: u128 = 10_000;

/// Most partial rows an aggregate's cold side may produce (one per group): a bound on
/// the proxy's memory (each is a jsonb object in the Bind), e.g. for a GROUP BY of the
/// key of a table of millions of cold rows; past it, 54000 names it.
const MAX_PARTIAL_ROWS: usize = 1_000_000;

/// The cold side of an aggregate reference for one execution.
pub(super) struct ColdPartials {
    /// One jsonb object per group.
    pub(super) rows: Vec<serde_json::Value>,
    pub(super) stats: PartialStats,
    /// The mirror's keys left out, and the range they were read in.
    hot: Option<HotKeys>,
}

/// The order-preserving encoding of a key read as text (as `values::ordered` encodes the
/// column's cells), to compare with cold keys.
fn key_bytes(text: &str, kind: KeyKind) -> Option<Vec<u8>> {
    match kind {
        KeyKind::Int => text
            .parse::<i64>()
            .ok()
            .map(|v| crate::values::ordered::int(v).to_vec()),
        KeyKind::Text => Some(text.as_bytes().to_vec()),
        KeyKind::Uuid => uuid::Uuid::parse_str(text)
            .ok()
            .map(|u| u.as_bytes().to_vec()),
    }
}

/// What an aggregate statement needs at each Bind.
#[derive(Debug)]
pub(super) struct AggregatePlan {
    pub(super) group: Vec<GroupColumn>,
    /// The last columns of `group` that are grouping sets of their own
    /// (`sql::aggregate::AggregateRewrite::distinct_sets`).
    distinct_sets: usize,
    pub(super) partials: Vec<Partial>,
    /// A timestamptz column is truncated: partials only in UTC sessions.
    needs_utc: bool,
    /// The FILTER conditions of its partials.
    filters: Vec<AggregateFilter>,
    exact_where: bool,
    where_predicates: usize,
    /// The key column's name and type.
    key: String,
    key_kind: KeyKind,
}

impl AggregatePlan {
    /// The FILTER conditions of the partials with one Bind's values, when the cold
    /// engine computes the partials exactly as Postgres would for it: `predicates` (the
    /// WHERE's conjuncts with its values) and every FILTER's are all exact, and a
    /// truncated timestamptz is cut at UTC midnights (hours, …) as the session's
    /// TimeZone would. `None`: Postgres aggregates the cold rows.
    pub(super) fn cold_filters(
        &self,
        predicates: &[Predicate],
        cold: &ColdTable,
        params: &BoundParams<'_>,
    ) -> Option<Vec<Vec<Predicate>>> {
        if !self.exact_where
            || predicates.len() != self.where_predicates
            || (self.needs_utc && !params.settings.utc)
        {
            return None;
        }
        self.filters
            .iter()
            .map(|f| {
                let exact = f.exact?;
                let resolved = to_prune(&f.predicates, &cold.columns, params);
                (resolved.len() == exact).then_some(resolved)
            })
            .collect()
    }
}

impl ReadPath {
    /// The parameters of an aggregate reference answered by cold partials: no cold rows,
    /// the partials, and a plan that names the hot keys the partials left out.
    pub(super) async fn partial_params(
        &self,
        r: &PlannedReference,
        plan: &AggregatePlan,
        cold: Arc<ColdTable>,
        predicates: Vec<Predicate>,
        filters: Vec<Vec<Predicate>>,
    ) -> Result<[BytesMut; 3], PlanError> {
        let generation = cold.generation;
        let name = cold.name.clone();
        let found = self.partials(r, plan, cold, predicates, filters).await?;
        let stats = found.stats;
        tracing::debug!(
            table = %name,
            groups = found.rows.len(),
            rows_scanned = stats.rows_scanned,
            rows_aggregated = stats.rows_aggregated,
            segments_pruned = stats.segments_pruned,
            row_groups_pruned = stats.row_groups_pruned,
            hot_keys = found.hot.as_ref().map_or(0, |h| h.keys.len()),
            "cold partials injected"
        );
        metrics::counter!(crate::metrics::ROUTES_TOTAL, "route" => "aggregate_pushdown")
            .increment(1);
        metrics::counter!(crate::metrics::COLD_ROWS_SCANNED_TOTAL).increment(stats.rows_scanned);
        metrics::counter!(crate::metrics::COLD_SEGMENTS_PRUNED_TOTAL)
            .increment(stats.segments_pruned as u64);
        metrics::counter!(crate::metrics::COLD_BYTES_READ_TOTAL).increment(stats.bytes_read);
        Ok([
            empty_array(r.row_type),
            jsonb(&serde_json::Value::Array(found.rows)),
            jsonb(&match &found.hot {
                // No segment was ever written: nothing cold to leave out.
                None => serde_json::json!({ "planned": generation }),
                Some(h) => serde_json::json!({
                    "planned": generation,
                    "mirror": { "lo": h.lo, "hi": h.hi, "keys": h.keys },
                }),
            }),
        ])
    }

    /// The cold partials of an aggregate reference: the mirror's keys that may be cold
    /// (left out of the partials, and checked by the statement), then the engine's
    /// answer. `coldwire.explain` shows what this computes.
    pub(super) async fn partials(
        &self,
        r: &PlannedReference,
        plan: &AggregatePlan,
        cold: Arc<ColdTable>,
        predicates: Vec<Predicate>,
        filters: Vec<Vec<Predicate>>,
    ) -> Result<ColdPartials, PlanError> {
        let hot = self
            .catalog
            .hot_keys_in_cold_range(r.table_id, &plan.key, plan.key_kind)
            .await?;
        let excluded: Arc<HashSet<Vec<u8>>> = Arc::new(
            hot.iter()
                .flat_map(|h| &h.keys)
                .filter_map(|k| key_bytes(k, plan.key_kind))
                .collect(),
        );
        let predicates = Arc::new(predicates);
        // One pass, or with grouping sets one per DISTINCT column (each decoding only its
        // columns), the partials in the first set's rows only.
        let passes: Vec<(Vec<GroupColumn>, &[Partial])> = match plan.distinct_sets {
            0 => vec![(plan.group.clone(), &plan.partials[..])],
            sets => {
                let base = plan.group.len() - sets;
                plan.group[base..]
                    .iter()
                    .enumerate()
                    .map(|(j, distinct)| {
                        let mut group = plan.group[..base].to_vec();
                        group.push(*distinct);
                        (group, if j == 0 { &plan.partials[..] } else { &[][..] })
                    })
                    .collect()
            }
        };
        let mut rows = Vec::new();
        let mut stats = PartialStats::default();
        for (group, partials) in passes {
            let (set, pass) = cold_partials(
                &self.store,
                cold.clone(),
                predicates.clone(),
                excluded.clone(),
                Aggregation {
                    group: &group,
                    partials,
                    filters: &filters,
                },
                MAX_PARTIAL_ROWS - rows.len(),
            )
            .await?;
            rows.extend(set);
            stats.add(&pass);
        }
        Ok(ColdPartials { rows, stats, hot })
    }
}

/// The aggregate rewrite (`sql::aggregate`) of a statement that aggregates one tiered
/// table, when it qualifies.
pub(super) fn rewrite_aggregate_read(
    parsed: &pg_query::ParseResult,
    client_params: usize,
    registry: &Registry,
) -> Option<PreparedRead> {
    let rewritten = rewrite_aggregate(parsed, client_params, |schema, name| {
        registry.unique(schema, name).map(|t| AggregateTable {
            table: &t.table,
            types: &t.aggregate_types,
            byte_ordered: &t.byte_ordered,
        })
    })?;
    let tiered = registry.by_id(rewritten.table_id)?;
    Some(PreparedRead {
        sql: rewritten.sql,
        explained: None,
        hot_sql: None,
        client_params,
        references: vec![PlannedReference {
            table_id: rewritten.table_id,
            predicates: extract(parsed, rewritten.location, &rewritten.name),
            row_type: tiered.row_type,
            binding: crate::sql::rewrite::ColdBinding::Rows,
            read_names: crate::sql::columns::read_names(
                parsed,
                &[&rewritten.name, &tiered.table.name],
                &tiered.table.columns,
            ),
            aggregate: Some(AggregatePlan {
                group: rewritten.group,
                distinct_sets: rewritten.distinct_sets,
                needs_utc: rewritten.needs_utc,
                filters: rewritten.filters,
                partials: rewritten.partials,
                exact_where: rewritten.exact_where,
                where_predicates: rewritten.where_predicates,
                key: tiered.table.pk.first()?.clone(),
                key_kind: rewritten.key_kind,
            }),
        }],
    })
}
