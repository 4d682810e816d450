//! Cold partials (DESIGN §6.5): the partial aggregates of a table's live cold rows,
//! computed by Apache DataFusion over a stream of those rows.
//!
//! The stream is coldwire's own table provider over the segment list of the generation
//! being read (no listing of the store): segments and row groups are pruned by the
//! catalog's statistics, only the referenced columns (and the key, seq and op) are
//! decoded, the WHERE conjuncts are evaluated exactly ([`crate::sql::aggregate`] admits
//! only conjuncts whose comparison matches Postgres's), and the newest-version rules are
//! applied as each batch passes: tombstones dropped, versions an override supersedes
//! dropped, and keys whose authoritative version is hot (`excluded`) dropped. DataFusion
//! then groups and aggregates; its output, a few rows, goes to Postgres as jsonb.
//! Memory: one decoded batch plus DataFusion's group table.

mod layout;
mod source;
mod text;

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::DataType;
use datafusion::catalog::streaming::StreamingTable;
use datafusion::functions_aggregate::expr_fn::{bool_and, bool_or, count, max, min, sum};
use datafusion::logical_expr::{cast, ident, lit, Expr};
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::prelude::SessionContext;

use super::scan::{ColdTable, ScanError};
use crate::segment::file::footer;
use crate::segment::prune::Predicate;
use crate::sql::aggregate::{GroupColumn, Partial, PartialKind};
use crate::store::ColdStore;
use layout::Layout;
use source::{LiveSource, Unit};

/// What to compute: the partials, per group, each under its FILTER's predicates
/// (`filters`, indexed by [`Partial::filter`]).
#[derive(Debug, Clone, Copy)]
pub struct Aggregation<'a> {
    pub group: &'a [GroupColumn],
    pub partials: &'a [Partial],
    pub filters: &'a [Vec<Predicate>],
}

/// What a partials query read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartialStats {
    pub segments: usize,
    pub segments_pruned: usize,
    pub row_groups_pruned: usize,
    pub rows_scanned: u64,
    pub rows_aggregated: u64,
    /// Row groups whose counts came from their statistics alone, undecoded.
    pub row_groups_counted: usize,
    /// Bytes read from the store (footers excluded).
    pub bytes_read: u64,
}

impl PartialStats {
    /// Adds what another pass over the same table read (its segment and row-group
    /// counts are those of the table again, so the largest is kept).
    pub fn add(&mut self, other: &PartialStats) {
        self.segments = self.segments.max(other.segments);
        self.segments_pruned = self.segments_pruned.max(other.segments_pruned);
        self.row_groups_pruned = self.row_groups_pruned.max(other.row_groups_pruned);
        self.rows_scanned += other.rows_scanned;
        self.rows_aggregated += other.rows_aggregated;
        self.row_groups_counted += other.row_groups_counted;
        self.bytes_read += other.bytes_read;
    }
}

/// The cold partials of `table` for the groups and partials of `aggregation`, over the
/// live cold rows that satisfy every predicate (all exact) and whose single-column key
/// (its order-preserving encoding) is not in `excluded`: one jsonb object per group,
/// keyed by the group columns' names and `_cw_p<i>`, every value as the text Postgres's
/// input function reads back.
///
/// At most `max_groups` partial rows are produced (a GROUP BY of the key would give one
/// per cold row).
///
/// # Errors
/// Store, decoding and engine failures; [`ScanError::TooManyGroups`] past `max_groups`.
pub async fn cold_partials(
    store: &ColdStore,
    table: Arc<ColdTable>,
    predicates: Arc<Vec<Predicate>>,
    excluded: Arc<HashSet<Vec<u8>>>,
    aggregation: Aggregation<'_>,
    max_groups: usize,
) -> Result<(Vec<serde_json::Value>, PartialStats), ScanError> {
    let layout = Arc::new(Layout::new(&table, &predicates, aggregation));
    let mut stats = PartialStats::default();
    let mut units = row_groups(store, &table, &predicates, &mut stats).await?;
    let before = units.len();
    let counted = count_from_stats(
        store,
        &table,
        &predicates,
        &excluded,
        aggregation,
        &mut units,
    )
    .await?;
    stats.row_groups_counted = before - units.len();
    // The row groups spread over as many partitions as the engine runs at once.
    let ctx = SessionContext::new();
    let partitions = ctx
        .state()
        .config()
        .target_partitions()
        .clamp(1, units.len().max(1));
    let stats = Arc::new(std::sync::Mutex::new(stats));
    let sources: Vec<Arc<dyn PartitionStream>> = (0..partitions)
        .map(|p| {
            Arc::new(LiveSource {
                store: store.clone(),
                table: table.clone(),
                units: Arc::new(units.iter().skip(p).step_by(partitions).copied().collect()),
                predicates: predicates.clone(),
                excluded: excluded.clone(),
                layout: layout.clone(),
                stats: stats.clone(),
            }) as Arc<dyn PartitionStream>
        })
        .collect();
    let provider =
        StreamingTable::try_new(layout.schema.clone(), sources).map_err(|e| engine_error(&e))?;
    let (group_exprs, aggregates) = expressions(&table, &layout, aggregation);
    let batches = ctx
        .read_table(Arc::new(provider))
        .map_err(|e| engine_error(&e))?
        .aggregate(group_exprs, aggregates)
        .map_err(|e| engine_error(&e))?
        .collect()
        .await
        .map_err(|e| engine_error(&e))?;
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    if rows > max_groups {
        return Err(ScanError::TooManyGroups {
            table: table.name.clone(),
            cap: max_groups,
        });
    }
    let mut out = Vec::with_capacity(rows);
    for batch in &batches {
        let column = |name: &str| {
            batch
                .column_by_name(name)
                .ok_or_else(|| ScanError::Engine(format!("the engine's answer lacks {name}")))
        };
        let code = |name: &str, row: usize| -> Result<Option<i8>, ScanError> {
            let codes = column(name)?;
            Ok(codes.is_valid(row).then(|| {
                arrow::array::AsArray::as_primitive::<arrow::datatypes::Int8Type>(codes).value(row)
            }))
        };
        for row in 0..batch.num_rows() {
            let mut object = serde_json::Map::new();
            for (c, g) in aggregation.group.iter().enumerate() {
                let value = text::json_text(batch.column(c).as_ref(), row)?;
                object.insert(table.columns[g.column].name.clone(), value);
            }
            for (i, p) in aggregation.partials.iter().enumerate() {
                let name = format!("_cw_p{i}");
                let mut value = text::json_text(column(&name)?.as_ref(), row)?;
                if layout.numerics.iter().any(|n| n.partial == i) {
                    let (lo, hi) = (
                        code(&format!("_cw_l{i}"), row)?,
                        code(&format!("_cw_h{i}"), row)?,
                    );
                    value = compose_numeric(p.kind, value, lo, hi);
                }
                // Counts of the row groups counted from their stats alone (no group).
                if let Some(Some(more)) = counted.get(i) {
                    let decoded: u64 = value.as_str().and_then(|v| v.parse().ok()).unwrap_or(0);
                    value = serde_json::Value::String((decoded + more).to_string());
                }
                object.insert(name, value);
            }
            out.push(serde_json::Value::Object(object));
        }
    }
    let stats = *stats
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Ok((out, stats))
}

/// The row groups to read, pruned by the catalog's and the footers' statistics.
async fn row_groups(
    store: &ColdStore,
    table: &ColdTable,
    predicates: &[Predicate],
    stats: &mut PartialStats,
) -> Result<Vec<Unit>, ScanError> {
    let mut units = Vec::new();
    for (index, segment) in table.segments.iter().enumerate() {
        stats.segments += 1;
        if !segment.may_match(predicates) {
            stats.segments_pruned += 1;
            continue;
        }
        let metadata = footer(store, &segment.path).await?;
        let row_group_rows: Vec<i64> = metadata.row_groups().iter().map(|g| g.num_rows()).collect();
        let groups = segment.row_groups_to_read(predicates, &row_group_rows);
        stats.row_groups_pruned += row_group_rows.len() - groups.len();
        units.extend(groups.into_iter().map(|g| Unit {
            segment: index,
            row_group: g,
        }));
    }
    Ok(units)
}

/// For an aggregation of counts alone (`count(*)`, `count(x)`, no group, FILTER or
/// condition): takes out of `units` the row groups whose rows are all live, and returns
/// per partial how many of their rows it counts, from statistics alone (`None`: not a
/// count of that kind, nothing taken). A row group is all live when it holds no
/// tombstone (its op column's footer statistics) and no key of `excluded` (hot keys) or
/// of the overrides (keys with another cold version) falls inside its key range (the
/// catalog's statistics of the key column); `count(x)` is its rows less x's NULLs.
async fn count_from_stats(
    store: &ColdStore,
    table: &ColdTable,
    predicates: &[Predicate],
    excluded: &HashSet<Vec<u8>>,
    aggregation: Aggregation<'_>,
    units: &mut Vec<Unit>,
) -> Result<Vec<Option<u64>>, ScanError> {
    let counts = aggregation.group.is_empty()
        && predicates.is_empty()
        && !aggregation.partials.is_empty()
        && aggregation.partials.iter().all(|p| {
            p.filter.is_none() && matches!(p.kind, PartialKind::CountStar | PartialKind::Count)
        });
    let [key] = table.pk_positions.as_slice() else {
        return Ok(Vec::new());
    };
    // The overrides hold composite-key encodings, which are the plain encoding the key
    // range is in only for fixed-width keys (text ones are escaped and terminated).
    let fixed_width = matches!(
        table.columns[*key].ty,
        crate::values::ColdType::Scalar(
            crate::values::ScalarType::Int2
                | crate::values::ScalarType::Int4
                | crate::values::ScalarType::Int8
                | crate::values::ScalarType::Uuid
        )
    );
    if !counts || !fixed_width {
        return Ok(Vec::new());
    }
    let key_attnum = table.columns[*key].attnum;
    let mut others: Vec<&[u8]> = excluded
        .iter()
        .chain(table.overrides.keys())
        .map(Vec::as_slice)
        .collect();
    others.sort_unstable();
    let mut counted = vec![0u64; aggregation.partials.len()];
    let mut kept = Vec::with_capacity(units.len());
    for unit in units.drain(..) {
        let segment = &table.segments[unit.segment];
        let g = unit.row_group;
        let metadata = footer(store, &segment.path).await?;
        let stats_of = |attnum: i16| segment.columns.iter().find(|c| c.attnum == attnum);
        let groups = metadata.num_row_groups();
        let range = stats_of(key_attnum)
            .filter(|c| c.rg_min.len() == groups && c.rg_max.len() == groups)
            .and_then(|c| Some((c.rg_min[g].as_deref()?, c.rg_max[g].as_deref()?)));
        let no_tombstone = metadata
            .row_group(g)
            .columns()
            .iter()
            .find(|c| c.column_path().parts() == [crate::segment::OP_COLUMN.to_owned()])
            .and_then(|c| c.statistics())
            .and_then(|s| match s {
                parquet::file::statistics::Statistics::Int32(s) => {
                    Some((*s.min_opt()?, *s.max_opt()?))
                }
                _ => None,
            })
            .is_some_and(|(min, max)| {
                let deleted = i32::from(crate::segment::op::DELETED);
                deleted < min || deleted > max
            });
        let untouched = range.is_some_and(|(lo, hi)| {
            let first = others.partition_point(|k| *k < lo);
            others.get(first).is_none_or(|k| *k > hi)
        });
        let rows = u64::try_from(metadata.row_group(g).num_rows()).unwrap_or(0);
        let nulls: Option<Vec<u64>> = aggregation
            .partials
            .iter()
            .map(|p| match (p.kind, p.column) {
                (PartialKind::Count, Some(c)) => {
                    let column = stats_of(table.columns[c].attnum)?;
                    u64::try_from(*column.rg_null_count.get(g)?).ok()
                }
                _ => Some(0),
            })
            .collect();
        match nulls {
            Some(nulls) if no_tombstone && untouched => {
                for (total, nulls) in counted.iter_mut().zip(nulls) {
                    *total += rows.saturating_sub(nulls);
                }
            }
            _ => kept.push(unit),
        }
    }
    *units = kept;
    Ok(counted.into_iter().map(Some).collect())
}

/// DataFusion's group expressions and aggregates for `aggregation`, over the stream's
/// columns (see [`Layout`]).
fn expressions(
    table: &ColdTable,
    layout: &Layout,
    aggregation: Aggregation<'_>,
) -> (Vec<Expr>, Vec<Expr>) {
    let group_exprs = aggregation
        .group
        .iter()
        .enumerate()
        .map(|(i, g)| match g.trunc {
            None => ident(table.columns[g.column].name.clone()),
            Some(_) => ident(format!("_cw_g{i}")),
        })
        .collect();
    let aggregates = aggregation
        .partials
        .iter()
        .enumerate()
        .flat_map(|(i, p)| {
            let arg = || match p.filter {
                Some(_) => ident(format!("_cw_a{i}")),
                None => ident(table.columns[p.column.unwrap_or_default()].name.clone()),
            };
            if let Some(n) = layout.numerics.iter().find(|n| n.partial == i) {
                let value = ident(format!("_cw_v{i}"));
                return vec![
                    match p.kind {
                        PartialKind::Min => min(value),
                        PartialKind::Max => max(value),
                        // Wide enough that no number of numeric(38) values overflows it.
                        _ => sum(cast(value, DataType::Decimal256(76, n.scale))),
                    }
                    .alias(format!("_cw_p{i}")),
                    min(ident(format!("_cw_s{i}"))).alias(format!("_cw_l{i}")),
                    max(ident(format!("_cw_s{i}"))).alias(format!("_cw_h{i}")),
                ];
            }
            let e = match p.kind {
                PartialKind::CountStar if p.filter.is_some() => count(arg()),
                PartialKind::CountStar => count(lit(1i64)),
                PartialKind::Count => count(arg()),
                PartialKind::SumInt => sum(cast(arg(), DataType::Int64)),
                PartialKind::SumNumeric => sum(cast(arg(), DataType::Decimal128(38, 0))),
                PartialKind::SumFloat => sum(arg()),
                PartialKind::Min => min(arg()),
                PartialKind::Max => max(arg()),
                PartialKind::BoolAnd => bool_and(arg()),
                PartialKind::BoolOr => bool_or(arg()),
            };
            vec![e.alias(format!("_cw_p{i}"))]
        })
        .collect();
    (group_exprs, aggregates)
}

/// A numeric(p, s) partial from the aggregate of its finite values (`value`, JSON text or
/// null) and the least and greatest code of its specials (`lo`, `hi`, see
/// [`layout::special_code`]), as Postgres's numeric aggregates give it: a sum is NaN with
/// a NaN or both infinities, else the infinity present, else the finite sum; min and max
/// order -Infinity below every finite value, then Infinity, then NaN.
fn compose_numeric(
    kind: PartialKind,
    value: serde_json::Value,
    lo: Option<i8>,
    hi: Option<i8>,
) -> serde_json::Value {
    let special = |s: crate::values::numeric::Special| serde_json::Value::from(s.as_str());
    use crate::values::numeric::Special::{NaN, NegInf, PosInf};
    match kind {
        PartialKind::Min => match lo {
            Some(1) => special(NegInf),
            _ if !value.is_null() => value,
            Some(2) => special(PosInf),
            Some(_) => special(NaN),
            None => value,
        },
        PartialKind::Max => match hi {
            Some(3) => special(NaN),
            Some(2) => special(PosInf),
            _ if !value.is_null() => value,
            Some(_) => special(NegInf),
            None => value,
        },
        _ => match (lo, hi) {
            (_, Some(3)) | (Some(1), Some(2)) => special(NaN),
            (Some(1), _) => special(NegInf),
            (Some(_), _) => special(PosInf),
            (None, _) => value,
        },
    }
}

fn engine_error(e: &datafusion::error::DataFusionError) -> ScanError {
    ScanError::Engine(e.to_string())
}
