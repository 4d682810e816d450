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

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Field, Float64Type, Int16Type, Int32Type, Int64Type,
    Schema, SchemaRef, TimeUnit, TimestampMicrosecondType,
};
use datafusion::catalog::streaming::StreamingTable;
use datafusion::execution::TaskContext;
use datafusion::functions_aggregate::expr_fn::{bool_and, bool_or, count, max, min, sum};
use datafusion::logical_expr::{cast, ident, lit, Expr};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::physical_plan::SendableRecordBatchStream;
use datafusion::prelude::SessionContext;
use futures_util::TryStreamExt;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::ParquetRecordBatchStream;
use parquet::arrow::{ParquetRecordBatchStreamBuilder, ProjectionMask};

use super::scan::{cell_matches, columns_held, ColdTable, ScanError};
use crate::segment::file::{footer, SegmentFile};
use crate::segment::prune::Predicate;
use crate::sql::aggregate::{GroupColumn, Partial, PartialKind};
use crate::store::ColdStore;
use crate::values::ordered::{self, Cell};
use crate::values::trunc::TruncUnit;

/// Rows per decoded batch.
const BATCH_ROWS: usize = 8192;

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
    /// Bytes read from the store (footers excluded).
    pub bytes_read: u64,
}

/// The cold partials of `table` for `group` and `partials`, over the live cold rows that
/// satisfy every predicate (all exact) and whose single-column key (its order-preserving
/// encoding) is not in `excluded`:
/// one jsonb object per group, keyed by the group columns' names and `_cw_p<i>`, every
/// value as the text Postgres's input function reads back.
///
/// At most `max_groups` partial rows are produced (a GROUP BY of the key would give one
/// per cold row).
///
/// # Errors
/// Store, decoding and engine failures; [`ScanError::TooManyGroups`] past `max_groups`.
pub async fn cold_partials(
    store: &ColdStore,
    table: Arc<ColdTable>,
    predicates: Vec<Predicate>,
    excluded: HashSet<Vec<u8>>,
    aggregation: Aggregation<'_>,
    max_groups: usize,
) -> Result<(Vec<serde_json::Value>, PartialStats), ScanError> {
    let Aggregation {
        group,
        partials,
        filters,
    } = aggregation;
    let mut needed: Vec<usize> = group
        .iter()
        .map(|g| g.column)
        .chain(partials.iter().filter_map(|p| p.column))
        .chain(table.pk_positions.iter().copied())
        .chain(
            predicates
                .iter()
                .chain(filters.iter().flatten())
                .filter_map(|p| table.columns.iter().position(|c| c.attnum == p.attnum())),
        )
        .collect();
    needed.sort_unstable();
    needed.dedup();
    let full = table.file_schema(table.columns.len());
    // The needed columns, then one per truncated group column (`_cw_g<i>`).
    let truncs: Vec<Trunc> = group
        .iter()
        .enumerate()
        .filter_map(|(i, g)| {
            Some(Trunc {
                group: i,
                from: needed.iter().position(|&c| c == g.column)?,
                unit: g.trunc?,
            })
        })
        .collect();
    // Then one per partial under a FILTER (`_cw_a<i>`): its argument, NULL where the
    // condition does not hold (every aggregate split into partials ignores NULLs).
    let masked: Vec<Masked> = partials
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let checks = filters.get(p.filter?)?;
            Some(Masked {
                partial: i,
                from: p.column.and_then(|c| needed.iter().position(|&n| n == c)),
                checks: checks
                    .iter()
                    .filter_map(|check| {
                        let column = table
                            .columns
                            .iter()
                            .position(|c| c.attnum == check.attnum())?;
                        Some((needed.iter().position(|&n| n == column)?, check.clone()))
                    })
                    .collect(),
            })
        })
        .collect();
    let schema: SchemaRef = Arc::new(Schema::new(
        needed
            .iter()
            .map(|&c| full.field(c).as_ref().clone())
            .chain(truncs.iter().map(|t| {
                Field::new(
                    format!("_cw_g{}", t.group),
                    full.field(needed[t.from]).data_type().clone(),
                    true,
                )
            }))
            .chain(masked.iter().map(|m| {
                let data_type = match m.from {
                    Some(from) => full.field(needed[from]).data_type().clone(),
                    None => DataType::Int64,
                };
                Field::new(format!("_cw_a{}", m.partial), data_type, true)
            }))
            .collect::<Vec<Field>>(),
    ));
    // The row groups to read, pruned by the catalog's and the footers' statistics, spread
    // over as many partitions as the engine runs at once.
    let mut stats = PartialStats::default();
    let mut units: Vec<Unit> = Vec::new();
    for (index, segment) in table.segments.iter().enumerate() {
        stats.segments += 1;
        if !segment.may_match(&predicates) {
            stats.segments_pruned += 1;
            continue;
        }
        let metadata = footer(store, &segment.path).await?;
        let row_group_rows: Vec<i64> = metadata.row_groups().iter().map(|g| g.num_rows()).collect();
        let groups = segment.row_groups_to_read(&predicates, &row_group_rows);
        stats.row_groups_pruned += row_group_rows.len() - groups.len();
        units.extend(groups.into_iter().map(|g| Unit {
            segment: index,
            row_group: g,
        }));
    }
    let ctx = SessionContext::new();
    let partitions = ctx
        .state()
        .config()
        .target_partitions()
        .clamp(1, units.len().max(1));
    let stats = Arc::new(std::sync::Mutex::new(stats));
    let (predicates, excluded, needed, truncs, masked) = (
        Arc::new(predicates),
        Arc::new(excluded),
        Arc::new(needed),
        Arc::new(truncs),
        Arc::new(masked),
    );
    let sources: Vec<Arc<dyn PartitionStream>> = (0..partitions)
        .map(|p| {
            Arc::new(LiveSource {
                store: store.clone(),
                table: table.clone(),
                units: Arc::new(units.iter().skip(p).step_by(partitions).copied().collect()),
                predicates: predicates.clone(),
                excluded: excluded.clone(),
                needed: needed.clone(),
                truncs: truncs.clone(),
                masked: masked.clone(),
                schema: schema.clone(),
                stats: stats.clone(),
            }) as Arc<dyn PartitionStream>
        })
        .collect();
    let provider = StreamingTable::try_new(schema, sources).map_err(|e| engine_error(&e))?;
    let frame = ctx
        .read_table(Arc::new(provider))
        .map_err(|e| engine_error(&e))?;
    let group_exprs: Vec<Expr> = group
        .iter()
        .enumerate()
        .map(|(i, g)| match g.trunc {
            None => ident(table.columns[g.column].name.clone()),
            Some(_) => ident(format!("_cw_g{i}")),
        })
        .collect();
    let aggregates: Vec<Expr> = partials
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let arg = || match p.filter {
                Some(_) => ident(format!("_cw_a{i}")),
                None => ident(table.columns[p.column.unwrap_or_default()].name.clone()),
            };
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
            e.alias(format!("_cw_p{i}"))
        })
        .collect();
    let batches = frame
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
    let names: Vec<String> = group
        .iter()
        .map(|g| table.columns[g.column].name.clone())
        .chain((0..partials.len()).map(|i| format!("_cw_p{i}")))
        .collect();
    let mut out = Vec::with_capacity(rows);
    for batch in &batches {
        for row in 0..batch.num_rows() {
            let mut object = serde_json::Map::new();
            for (c, name) in names.iter().enumerate() {
                object.insert(name.clone(), json_text(batch.column(c).as_ref(), row)?);
            }
            out.push(serde_json::Value::Object(object));
        }
    }
    let stats = *stats
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Ok((out, stats))
}

fn engine_error(e: &datafusion::error::DataFusionError) -> ScanError {
    ScanError::Engine(e.to_string())
}

/// A group column computed from a read one: `date_trunc(unit, needed[from])`, the
/// engine's column `_cw_g<group>`.
#[derive(Debug, Clone, Copy)]
struct Trunc {
    group: usize,
    from: usize,
    unit: TruncUnit,
}

/// The argument of a partial under a FILTER, computed from the read columns: column
/// `needed[from]` (or 1, for `count(*)`) where every check holds, else NULL.
#[derive(Debug, Clone)]
struct Masked {
    partial: usize,
    from: Option<usize>,
    /// The FILTER's predicates, with the position in the needed columns of theirs.
    checks: Vec<(usize, Predicate)>,
}

/// One row group of one segment: what a partition reads at a time.
#[derive(Debug, Clone, Copy)]
struct Unit {
    segment: usize,
    row_group: usize,
}

/// The live cold rows of some row groups of a table, restricted: one DataFusion
/// partition.
#[derive(Debug, Clone)]
struct LiveSource {
    store: ColdStore,
    table: Arc<ColdTable>,
    units: Arc<Vec<Unit>>,
    predicates: Arc<Vec<Predicate>>,
    excluded: Arc<HashSet<Vec<u8>>>,
    /// Positions in the table's columns of the columns read, ascending.
    needed: Arc<Vec<usize>>,
    /// Columns computed after them: truncated group columns, then masked arguments.
    truncs: Arc<Vec<Trunc>>,
    masked: Arc<Vec<Masked>>,
    schema: SchemaRef,
    stats: Arc<std::sync::Mutex<PartialStats>>,
}

impl PartitionStream for LiveSource {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let state = LiveState {
            source: self.clone(),
            next_unit: 0,
            current: None,
        };
        let stream = futures_util::stream::try_unfold(state, |mut state| async move {
            match state.next().await {
                Ok(Some(batch)) => Ok(Some((batch, state))),
                Ok(None) => Ok(None),
                Err(e) => Err(datafusion::error::DataFusionError::External(Box::new(e))),
            }
        });
        Box::pin(RecordBatchStreamAdapter::new(self.schema.clone(), stream))
    }
}

struct LiveState {
    source: LiveSource,
    next_unit: usize,
    /// The row group being read, how many of the table's columns its segment holds, and
    /// the bytes read for it.
    current: Option<(ParquetRecordBatchStream<SegmentFile>, usize, Arc<AtomicU64>)>,
}

impl LiveState {
    async fn next(&mut self) -> Result<Option<RecordBatch>, ScanError> {
        let s = &self.source;
        let table = &s.table;
        loop {
            let Some((stream, held, bytes)) = &mut self.current else {
                let Some(unit) = s.units.get(self.next_unit).copied() else {
                    return Ok(None);
                };
                self.next_unit += 1;
                let segment = &table.segments[unit.segment];
                let metadata = footer(&s.store, &segment.path).await?;
                let held = columns_held(&metadata, table);
                let file =
                    SegmentFile::new(s.store.clone(), segment.path.clone(), metadata.clone());
                let bytes = file.bytes_read.clone();
                let reader_metadata = ArrowReaderMetadata::try_new(
                    metadata.clone(),
                    ArrowReaderOptions::new().with_schema(table.file_schema(held)),
                )?;
                let roots: Vec<usize> = s
                    .needed
                    .iter()
                    .copied()
                    .filter(|&c| c < held)
                    .chain([held, held + 1])
                    .collect();
                let mask = ProjectionMask::roots(metadata.file_metadata().schema_descr(), roots);
                let stream =
                    ParquetRecordBatchStreamBuilder::new_with_metadata(file, reader_metadata)
                        .with_projection(mask)
                        .with_row_groups(vec![unit.row_group])
                        .with_batch_size(BATCH_ROWS)
                        .build()?;
                self.current = Some((stream, held, bytes));
                continue;
            };
            let held = *held;
            let Some(batch) = stream.try_next().await? else {
                let read = bytes.load(Ordering::Relaxed);
                s.stats
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .bytes_read += read;
                self.current = None;
                continue;
            };
            let live = self.live(&batch, held)?;
            {
                let mut stats = s
                    .stats
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                stats.rows_scanned += batch.num_rows() as u64;
                stats.rows_aggregated += live.num_rows() as u64;
            }
            if live.num_rows() > 0 {
                return Ok(Some(live));
            }
        }
    }

    /// The rows of `batch` (read from a file holding `held` columns, projected to the
    /// needed ones, seq and op) that are live, not excluded, and satisfy the predicates.
    fn live(&self, batch: &RecordBatch, held: usize) -> Result<RecordBatch, ScanError> {
        let s = &self.source;
        let table = &s.table;
        let rows = batch.num_rows();
        let read = s.needed.iter().filter(|&&c| c < held).count();
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(s.needed.len());
        let mut from_file = 0;
        for &c in s.needed.iter() {
            if c < held {
                arrays.push(batch.column(from_file).clone());
                from_file += 1;
            } else {
                let data_type = s.schema.field(arrays.len()).data_type();
                arrays.push(table.missing_column(c, data_type, rows)?);
            }
        }
        for t in s.truncs.iter() {
            let from = arrays[t.from].as_primitive::<TimestampMicrosecondType>();
            let truncated = from
                .unary::<_, TimestampMicrosecondType>(|v| t.unit.apply(v))
                .with_timezone_opt(from.timezone());
            arrays.push(Arc::new(truncated));
        }
        for m in s.masked.iter() {
            // Exact FILTER conjuncts: a value no predicate can judge fails, as above.
            let outside: BooleanArray =
                (0..rows)
                    .map(|row| {
                        Some(!m.checks.iter().all(|(c, p)| {
                            cell_matches(p, arrays[*c].as_ref(), row).unwrap_or(false)
                        }))
                    })
                    .collect();
            let arg: ArrayRef = match m.from {
                Some(from) => arrays[from].clone(),
                None => Arc::new(arrow::array::Int64Array::from_value(1, rows)),
            };
            arrays.push(arrow::compute::nullif(&arg, &outside)?);
        }
        let columns = RecordBatch::try_new(s.schema.clone(), arrays)?;
        let seqs = batch.column(read).as_primitive::<Int64Type>();
        let ops = batch.column(read + 1).as_primitive::<Int16Type>();
        let pk: Vec<usize> = table
            .pk_positions
            .iter()
            .filter_map(|p| s.needed.iter().position(|c| c == p))
            .collect();
        let key_column = columns.column(pk[0]);
        let checks: Vec<(usize, &Predicate)> = s
            .predicates
            .iter()
            .filter_map(|p| {
                let position = table.columns.iter().position(|c| c.attnum == p.attnum())?;
                Some((s.needed.iter().position(|&c| c == position)?, p))
            })
            .collect();
        let mask: BooleanArray = (0..rows)
            .map(|row| {
                if ops.value(row) == crate::segment::op::DELETED {
                    return Some(false);
                }
                if !s.excluded.is_empty()
                    && matches!(ordered::cell(key_column.as_ref(), row), Cell::Value(k) if s.excluded.contains(&k))
                {
                    return Some(false);
                }
                let newest = table.newest_at(&columns, &pk, row, seqs.value(row));
                Some(
                    newest
                        // Conjuncts are exact here: a value no predicate can judge
                        // (never, for the types `sql::aggregate` admits) fails.
                        && checks.iter().all(|(c, p)| {
                            cell_matches(p, columns.column(*c).as_ref(), row).unwrap_or(false)
                        }),
                )
            })
            .collect();
        Ok(filter_record_batch(&columns, &mask)?)
    }
}

/// A value of an engine result as the text Postgres reads back (JSON null for NULL).
fn json_text(array: &dyn Array, row: usize) -> Result<serde_json::Value, ScanError> {
    use serde_json::Value;
    if array.is_null(row) {
        return Ok(Value::Null);
    }
    let text = match array.data_type() {
        DataType::Int16 => array.as_primitive::<Int16Type>().value(row).to_string(),
        DataType::Int32 => array.as_primitive::<Int32Type>().value(row).to_string(),
        DataType::Int64 => array.as_primitive::<Int64Type>().value(row).to_string(),
        DataType::Decimal128(..) => array.as_primitive::<Decimal128Type>().value_as_string(row),
        DataType::Float64 => {
            let v = array.as_primitive::<Float64Type>().value(row);
            if v.is_nan() {
                "NaN".to_owned()
            } else if v.is_infinite() {
                if v > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
            } else {
                format!("{v:?}")
            }
        }
        DataType::Boolean => array.as_boolean().value(row).to_string(),
        DataType::Utf8 => array.as_string::<i32>().value(row).to_owned(),
        DataType::LargeUtf8 => array.as_string::<i64>().value(row).to_owned(),
        DataType::Utf8View => array.as_string_view().value(row).to_owned(),
        DataType::Date32 => {
            let days = array.as_primitive::<Date32Type>().value(row);
            match days {
                i32::MIN => "-infinity".to_owned(),
                i32::MAX => "infinity".to_owned(),
                d => date_text(i64::from(d), ""),
            }
        }
        DataType::Timestamp(TimeUnit::Microsecond, tz) => {
            let micros = array.as_primitive::<TimestampMicrosecondType>().value(row);
            match micros {
                i64::MIN => "-infinity".to_owned(),
                i64::MAX => "infinity".to_owned(),
                m => {
                    let day = m.div_euclid(86_400_000_000);
                    let rest = m.rem_euclid(86_400_000_000);
                    let time = format!(
                        " {:02}:{:02}:{:02}.{:06}{}",
                        rest / 3_600_000_000,
                        rest / 60_000_000 % 60,
                        rest / 1_000_000 % 60,
                        rest % 1_000_000,
                        if tz.is_some() { "+00" } else { "" }
                    );
                    date_text(day, &time)
                }
            }
        }
        other => {
            return Err(ScanError::Engine(format!(
                "a cold partial of type {other} has no text form"
            )))
        }
    };
    Ok(Value::String(text))
}

/// `YYYY-MM-DD` of `days` since 1970-01-01 (proleptic Gregorian), then `time`, then ` BC`
/// for years before 1.
fn date_text(days: i64, time: &str) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    if year <= 0 {
        format!("{:04}-{month:02}-{day:02}{time} BC", 1 - year)
    } else {
        format!("{year:04}-{month:02}-{day:02}{time}")
    }
}

#[cfg(test)]
mod tests {
    use super::date_text;

    #[test]
    fn dates_read_back_as_postgres_writes_them() {
        assert_eq!(date_text(0, ""), "1970-01-01");
        assert_eq!(
            date_text(19_723, " 12:00:00.000000"),
            "2024-01-01 12:00:00.000000"
        );
        assert_eq!(date_text(-719_528, ""), "0001-01-01 BC");
        assert_eq!(date_text(11_016, ""), "2000-02-29");
    }
}
