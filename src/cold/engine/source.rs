//! The engine's input: the live cold rows of some row groups, read, restricted and
//! extended with computed columns, one DataFusion partition each.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, BooleanArray, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{Int16Type, Int64Type, SchemaRef, TimestampMicrosecondType};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures_util::TryStreamExt;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::ParquetRecordBatchStream;
use parquet::arrow::{ParquetRecordBatchStreamBuilder, ProjectionMask};

use super::layout::Layout;
use super::PartialStats;
use crate::cold::scan::{columns_held, row_holds, ColdTable, ScanError};
use crate::segment::file::{footer, SegmentFile};
use crate::segment::prune::Predicate;
use crate::store::ColdStore;
use crate::values::ordered::{self, Cell};

/// Rows per decoded batch.
const BATCH_ROWS: usize = 8192;

/// One row group of one segment: what a partition reads at a time.
#[derive(Debug, Clone, Copy)]
pub(super) struct Unit {
    pub(super) segment: usize,
    pub(super) row_group: usize,
}

/// The live cold rows of some row groups of a table, restricted: one DataFusion
/// partition.
#[derive(Debug, Clone)]
pub(super) struct LiveSource {
    pub(super) store: ColdStore,
    pub(super) table: Arc<ColdTable>,
    pub(super) units: Arc<Vec<Unit>>,
    pub(super) predicates: Arc<Vec<Predicate>>,
    pub(super) excluded: Arc<HashSet<Vec<u8>>>,
    pub(super) layout: Arc<Layout>,
    pub(super) stats: Arc<std::sync::Mutex<PartialStats>>,
}

impl PartitionStream for LiveSource {
    fn schema(&self) -> &SchemaRef {
        &self.layout.schema
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
        Box::pin(RecordBatchStreamAdapter::new(
            self.layout.schema.clone(),
            stream,
        ))
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
                    .layout
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
        let read = s.layout.needed.iter().filter(|&&c| c < held).count();
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(s.layout.needed.len());
        let mut from_file = 0;
        for &c in s.layout.needed.iter() {
            if c < held {
                arrays.push(batch.column(from_file).clone());
                from_file += 1;
            } else {
                let data_type = s.layout.schema.field(arrays.len()).data_type();
                arrays.push(table.missing_column(c, data_type, rows)?);
            }
        }
        for t in s.layout.truncs.iter() {
            let from = arrays[t.from].as_primitive::<TimestampMicrosecondType>();
            let truncated = from
                .unary::<_, TimestampMicrosecondType>(|v| t.unit.apply(v))
                .with_timezone_opt(from.timezone());
            arrays.push(Arc::new(truncated));
        }
        for m in s.layout.masked.iter() {
            // Exact FILTER conjuncts: a value no predicate can judge fails, as above.
            let column_of = |a: i16| Some(&arrays[s.layout.column_at(a)?]);
            let outside: BooleanArray = (0..rows)
                .map(|row| {
                    Some(
                        !m.checks
                            .iter()
                            .all(|p| row_holds(p, &column_of, row, false)),
                    )
                })
                .collect();
            let arg: ArrayRef = match m.from {
                Some(from) => arrays[from].clone(),
                None => Arc::new(arrow::array::Int64Array::from_value(1, rows)),
            };
            arrays.push(arrow::compute::nullif(&arg, &outside)?);
        }
        for n in s.layout.numerics.iter() {
            let (values, specials) = split_numeric(arrays[n.from].as_ref(), n.precision, n.scale)?;
            arrays.push(values);
            arrays.push(specials);
        }
        let columns = RecordBatch::try_new(s.layout.schema.clone(), arrays)?;
        let seqs = batch.column(read).as_primitive::<Int64Type>();
        let ops = batch.column(read + 1).as_primitive::<Int16Type>();
        let pk: Vec<usize> = table
            .pk_positions
            .iter()
            .filter_map(|p| s.layout.needed.iter().position(|c| c == p))
            .collect();
        let key_column = columns.column(pk[0]);
        let mask: BooleanArray = (0..rows)
            .map(|row| {
                if ops.value(row) == crate::segment::op::DELETED {
                    return Some(false);
                }
                if !s.excluded.is_empty()
                    && matches!(ordered::cell(key_column.as_ref(), row), Cell::Value(k) if s.excluded.contains(&*k))
                {
                    return Some(false);
                }
                let newest = table.newest_at(&columns, &pk, row, seqs.value(row));
                Some(
                    newest
                        // Conjuncts are exact here: a value no predicate can judge
                        // (never, for the types `sql::aggregate` admits) fails.
                        && s.predicates.iter().all(|p| {
                            row_holds(
                                p,
                                &|a| Some(columns.column(s.layout.column_at(a)?)),
                                row,
                                false,
                            )
                        }),
                )
            })
            .collect();
        Ok(filter_record_batch(&columns, &mask)?)
    }
}

/// A numeric(p, s) column ({value, special}) as its finite values and its specials' codes
/// ([`super::layout::special_code`]), each NULL where the other is set or the value is NULL.
fn split_numeric(
    array: &dyn arrow::array::Array,
    precision: u8,
    scale: i8,
) -> Result<(ArrayRef, ArrayRef), ScanError> {
    use arrow::array::{Array, Decimal128Array, Int8Array};
    use arrow::datatypes::Decimal128Type;
    let parts = array.as_struct();
    let value = parts.column(0).as_primitive::<Decimal128Type>();
    let special = parts.column(1).as_string::<i32>();
    let values: Decimal128Array = (0..array.len())
        .map(|r| {
            (array.is_valid(r) && special.is_null(r) && value.is_valid(r)).then(|| value.value(r))
        })
        .collect::<Decimal128Array>()
        .with_precision_and_scale(precision, scale)?;
    let codes: Int8Array = (0..array.len())
        .map(|r| {
            (array.is_valid(r) && special.is_valid(r))
                .then(|| crate::values::numeric::Special::parse(special.value(r)))
                .flatten()
                .map(super::layout::special_code)
        })
        .collect();
    Ok((Arc::new(values), Arc::new(codes)))
}
