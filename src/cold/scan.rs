//! The cold side of a read (DESIGN §6.3): from a table's catalog state and a conjunction
//! of simple predicates, the newest cold version of every key that may satisfy them.
//!
//! Segments are pruned by their recorded stats, row groups by the per-row-group stats,
//! equality lookups on pk columns by the row groups' bloom filters; the surviving row
//! groups are read by ranged GETs. Rows are filtered by the predicates where their
//! encoding allows it (a superset otherwise: Postgres re-applies the whole query), and
//! to the live version of each key: a row is kept unless it is a tombstone or
//! `coldwire.overrides_<id>` (which names the newest cold seq of every key with more than
//! one cold version) names a newer one. Only the columns the statement reads are decoded.
//! Memory: the rows kept plus one decoded batch.
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int16Array, Int64Array, NullArray, RecordBatch,
};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, Field, Int16Type, Int64Type, Schema, SchemaRef};
use futures_util::{pin_mut, TryStreamExt};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::{ParquetRecordBatchStreamBuilder, ProjectionMask};
use parquet::file::metadata::ParquetMetaData;

use super::lookup::{bloom_filtered, key_filter, page_selection};
use crate::catalog::segments::ColdStateError;
pub use crate::catalog::segments::ColdTable;
use crate::segment::file::{footer, SegmentFile, SegmentReadError};
use crate::segment::memo::Memo;
use crate::segment::page_cache;
use crate::segment::prune::{extend_keys, Predicate};
use crate::store::ColdStore;
use crate::values::ordered::{self, Cell};
use crate::values::{arrow_schema, ColdColumn, ColdType, ScalarType};

/// Rows per decoded batch while scanning.
const SCAN_BATCH_ROWS: usize = 8192;

/// Why a cold scan failed.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error("{}", crate::catalog::postgres_text(.0))]
    Postgres(#[from] tokio_postgres::Error),
    #[error(transparent)]
    Segment(#[from] SegmentReadError),
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    #[error(transparent)]
    Cold(#[from] crate::values::ColdError),
    #[error("table {0} is not an active tiered table")]
    NotTiered(i64),
    #[error("cold engine: {0}")]
    Engine(String),
    #[error("the query would aggregate more than {cap} groups of cold rows of table {table}")]
    TooManyGroups { table: String, cap: usize },
    #[error("the query would read more than {cap} cold rows of table {table}")]
    TooManyRows { table: String, cap: usize },
    #[error("the cold rows of table {table} the query needs take more than {cap} bytes")]
    TooMuchMemory { table: String, cap: usize },
    #[error("the cold rows of table {table} take {bytes} bytes as one array")]
    ArrayTooLarge { table: String, bytes: usize },
}

/// What one scan may bring back: keys, and bytes of decoded rows held (Arrow buffers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanLimits {
    pub rows: usize,
    pub bytes: usize,
}

impl ScanLimits {
    /// The limits of `max_cold_rows` and `max_cold_memory_mb` (MiB), 0 meaning none.
    pub fn configured(rows: usize, memory_mb: usize) -> Self {
        let unbounded = |n: usize| if n == 0 { usize::MAX } else { n };
        ScanLimits {
            rows: unbounded(rows),
            bytes: unbounded(memory_mb.saturating_mul(1 << 20)),
        }
    }

    /// At most `rows` keys, whatever their size.
    pub fn rows(rows: usize) -> Self {
        ScanLimits {
            rows,
            bytes: usize::MAX,
        }
    }
}

impl ColdTable {
    /// The Arrow schema of a segment file holding the first `held` of the table's columns
    /// (files written before later columns were added hold fewer), then seq and op.
    pub fn file_schema(&self, held: usize) -> SchemaRef {
        if held == self.columns.len() {
            return self
                .full_schema
                .get_or_init(|| self.make_file_schema(held))
                .clone();
        }
        self.make_file_schema(held)
    }

    fn make_file_schema(&self, held: usize) -> SchemaRef {
        let mut columns: Vec<ColdColumn> = self.columns[..held]
            .iter()
            .map(|c| ColdColumn::new(c.name.clone(), c.ty))
            .collect();
        columns.push(ColdColumn::new(
            crate::segment::SEQ_COLUMN,
            ColdType::Scalar(ScalarType::Int8),
        ));
        columns.push(ColdColumn::new(
            crate::segment::OP_COLUMN,
            ColdType::Scalar(ScalarType::Int2),
        ));
        Arc::new(arrow_schema(&columns))
    }

    /// `batch`, read from a file holding the first `held` columns, with every column: the
    /// ones the file lacks read what [`ColdTable::missing`] says.
    ///
    /// # Errors
    /// Arrow failures.
    pub fn widen(&self, batch: RecordBatch, held: usize) -> Result<RecordBatch, ScanError> {
        let width = self.columns.len();
        if held == width {
            return Ok(batch);
        }
        let full = self.file_schema(width);
        let rows = batch.num_rows();
        let mut arrays: Vec<ArrayRef> = batch.columns()[..held].to_vec();
        for c in held..width {
            arrays.push(self.missing_column(c, full.field(c).data_type(), rows)?);
        }
        arrays.extend(batch.columns()[held..].iter().cloned());
        Ok(RecordBatch::try_new(full, arrays)?)
    }
}

impl ColdTable {
    /// Column `c` (of type `data_type`) for `rows` rows of a segment written before the
    /// column was added: what [`ColdTable::missing`] says such rows read.
    ///
    /// # Errors
    /// Arrow failures.
    pub fn missing_column(
        &self,
        c: usize,
        data_type: &DataType,
        rows: usize,
    ) -> Result<ArrayRef, ScanError> {
        Ok(match &self.missing[c] {
            Some(one) => arrow::compute::take(
                one.as_ref(),
                &arrow::array::UInt32Array::from(vec![0u32; rows]),
                None,
            )?,
            None => arrow::array::new_null_array(data_type, rows),
        })
    }

    /// Whether the cold version of `key` written at `seq` is the newest cold version of
    /// that key (no override names a newer one).
    pub fn not_superseded(&self, key: &[u8], seq: i64) -> bool {
        self.overrides.get(key).is_none_or(|newer| *newer <= seq)
    }

    /// [`ColdTable::not_superseded`] for row `row` of `rows`, whose key columns are at
    /// `pk`; without overrides, no key is encoded.
    pub fn newest_at(&self, rows: &RecordBatch, pk: &[usize], row: usize, seq: i64) -> bool {
        self.overrides.is_empty()
            || ordered::encode_key(rows, pk, row).is_some_and(|key| self.not_superseded(&key, seq))
    }
}

/// Whether row `row` satisfies `p`, reading the column of each attnum from `column_of`;
/// `unknown` stands for what no predicate can judge (a type without a byte order, a
/// column not at hand).
pub fn row_holds<'a>(
    p: &Predicate,
    column_of: &impl Fn(i16) -> Option<&'a ArrayRef>,
    row: usize,
    unknown: bool,
) -> bool {
    p.holds(
        &|leaf| cell_matches(leaf, column_of(leaf.attnum()?)?.as_ref(), row),
        unknown,
    )
}

/// Whether the value at `row` of `array` satisfies `p`; `None` for a type without a byte
/// order (no predicate can judge it).
pub fn cell_matches(p: &Predicate, array: &dyn Array, row: usize) -> Option<bool> {
    // A NULL test needs no order: it holds or not for a value of any type.
    if matches!(p, Predicate::IsNull(_) | Predicate::IsNotNull(_)) {
        return Some(p.matches(if array.is_null(row) { None } else { Some(None) }));
    }
    match ordered::cell(array, row) {
        Cell::Null => Some(p.matches(None)),
        Cell::Unordered => Some(p.matches(Some(None))),
        Cell::Value(v) => Some(p.matches(Some(Some(&v)))),
        Cell::Unknown => None,
    }
}

impl From<ColdStateError> for ScanError {
    fn from(e: ColdStateError) -> Self {
        match e {
            ColdStateError::Postgres(e) => ScanError::Postgres(e),
            ColdStateError::Cold(e) => ScanError::Cold(e),
            ColdStateError::NotTiered(id) => ScanError::NotTiered(id),
        }
    }
}

/// How many of `table`'s columns segment file `metadata` holds.
pub fn columns_held(metadata: &ParquetMetaData, table: &ColdTable) -> usize {
    crate::segment::file_columns(metadata).min(table.columns.len())
}

impl ColdTable {
    /// The position of column `attnum` among the table's columns.
    pub fn position(&self, attnum: i16) -> Option<usize> {
        self.columns.iter().position(|c| c.attnum == attnum)
    }

    /// The composite-key encoding of row `row` of `rows` (the table's columns); empty for
    /// a NULL key component (never: keys are NOT NULL).
    pub fn key_of(&self, rows: &RecordBatch, row: usize) -> Vec<u8> {
        ordered::encode_key(rows, &self.pk_positions, row).unwrap_or_default()
    }

    /// Whether every key column is an integer, whose composite-key encoding is the
    /// encoding a predicate compares it by ([`ColdTable::asked_keys`]).
    pub fn integer_key(&self) -> bool {
        !self.pk_positions.is_empty()
            && self.pk_positions.iter().all(|&p| {
                matches!(
                    self.columns.get(p).map(|c| c.ty),
                    Some(ColdType::Scalar(
                        ScalarType::Int2 | ScalarType::Int4 | ScalarType::Int8
                    ))
                )
            })
    }

    /// The keys `predicates` pin every key column of to (by `=` or a short `IN`), in the
    /// encoding of [`ColdTable::key_of`]: every cold row the scan of `predicates` keeps
    /// has one of them. `None` when a key column is not pinned, the key is not all
    /// integers, or there are more than [`ASKED_KEYS`].
    pub fn asked_keys(&self, predicates: &[Predicate]) -> Option<Vec<Vec<u8>>> {
        if !self.integer_key() {
            return None;
        }
        let mut keys = vec![Vec::new()];
        for &p in &self.pk_positions {
            let attnum = self.columns[p].attnum;
            let values = predicates
                .iter()
                .filter_map(asked_values)
                .find_map(|(a, values)| (a == attnum).then_some(values))?;
            keys = extend_keys(&keys, values, ASKED_KEYS, |k, v| k.extend_from_slice(v))?;
        }
        Some(keys)
    }
}

/// Most keys [`ColdTable::asked_keys`] lists.
pub const ASKED_KEYS: usize = 64;

/// What a scan read and skipped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanStats {
    pub segments: usize,
    pub segments_pruned: usize,
    pub row_groups: usize,
    pub row_groups_pruned: usize,
    pub bytes_read: u64,
    pub rows_scanned: usize,
}

/// The newest matching cold version of each key, with the table's columns (those the scan
/// did not decode typed `Null`), in batches; and the counters.
#[derive(Debug, Clone)]
pub struct ScanOutput {
    pub batches: Vec<RecordBatch>,
    pub schema: SchemaRef,
    pub stats: ScanStats,
}

impl ScanOutput {
    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }

    /// Every row as one batch.
    ///
    /// # Errors
    /// Arrow failures.
    pub fn rows(&self) -> Result<RecordBatch, ScanError> {
        Ok(arrow::compute::concat_batches(&self.schema, &self.batches)?)
    }
}

/// Scans `table`'s cold tier for rows that may satisfy every predicate, returning at most
/// `limits.rows` keys held in at most `limits.bytes` of decoded batches.
///
/// # Errors
/// Store or decoding failures; [`ScanError::TooManyRows`] or
/// [`ScanError::TooMuchMemory`] past a limit.
pub async fn scan(
    store: &ColdStore,
    table: &ColdTable,
    predicates: &[Predicate],
    read: Option<&[bool]>,
    limits: ScanLimits,
) -> Result<ScanOutput, ScanError> {
    let table_width = table.columns.len();
    // The columns the predicates check (a value without a byte order passes), by attnum.
    let checked: Vec<(i16, usize)> = predicates
        .iter()
        .flat_map(Predicate::attnums)
        .filter_map(|a| Some((a, table.position(a)?)))
        .collect();
    let positions: Vec<usize> = checked.iter().map(|&(_, c)| c).collect();
    let projection = Projection::new(table, read, &positions);
    let schema = projection.schema.clone();

    let mut stats = ScanStats::default();
    let mut found = Versions {
        table,
        predicates,
        checked,
        limits,
        bytes: 0,
        rows_scanned: 0,
        rows: 0,
        kept: Vec::new(),
        seqs: table.pinned.then(Vec::new),
    };
    for segment in &table.segments {
        stats.segments += 1;
        if !segment.may_match(predicates) {
            stats.segments_pruned += 1;
            continue;
        }
        let metadata = footer(store, &segment.path).await?;
        let row_group_rows: Vec<i64> = metadata.row_groups().iter().map(|g| g.num_rows()).collect();
        stats.row_groups += row_group_rows.len();
        let mut groups = segment.row_groups_to_read(predicates, &row_group_rows);
        let file = SegmentFile::new(store.clone(), segment.path.clone(), metadata.clone());
        let bytes_read = file.bytes_read.clone();
        let held = columns_held(&metadata, table);
        let reader_metadata = reader_metadata(table, &segment.path, &metadata, held)?;
        let mut builder = ParquetRecordBatchStreamBuilder::new_with_metadata(file, reader_metadata);
        groups = bloom_filtered(&mut builder, &segment.path, table, predicates, groups).await?;
        stats.row_groups_pruned += row_group_rows.len() - groups.len();
        if groups.is_empty() {
            continue;
        }
        let selection = page_selection(&metadata, table, predicates, &groups);
        let rows: i64 = groups.iter().map(|&g| row_group_rows[g]).sum();
        let key = page_cache::key(
            &segment.path,
            &groups,
            usize::try_from(rows).unwrap_or(usize::MAX),
            selection.as_ref(),
        );
        if let Some(batches) = key.as_ref().and_then(page_cache::get) {
            for batch in batches.iter() {
                found.take(projection.assemble(batch.clone(), held, true, table)?)?;
            }
            continue;
        }
        // The page cache keeps every column, for whichever statement reads them next; a
        // read it does not keep decodes only the rows whose key the lookup asks for.
        let key = key.filter(page_cache::admit);
        let whole = key.is_some();
        let mut builder = builder
            .with_row_groups(groups)
            .with_batch_size(SCAN_BATCH_ROWS);
        if let Some(selection) = selection {
            builder = builder.with_row_selection(selection);
        }
        if let (false, Some(filter)) = (whole, key_filter(&metadata, table, predicates)) {
            builder = builder.with_row_filter(filter);
        }
        if let (false, Some(roots)) = (whole, projection.roots(held)) {
            let mask = ProjectionMask::roots(metadata.file_metadata().schema_descr(), roots);
            builder = builder.with_projection(mask);
        }
        let stream = builder.build()?;
        pin_mut!(stream);
        let mut decoded = Vec::new();
        while let Some(batch) = stream.try_next().await? {
            if whole {
                decoded.push(batch.clone());
            }
            found.take(projection.assemble(batch, held, whole, table)?)?;
        }
        if let Some(key) = key {
            page_cache::insert(key, decoded);
        }
        stats.bytes_read += bytes_read.load(Ordering::Relaxed);
    }
    stats.rows_scanned = found.rows_scanned;
    let schema = Arc::new(Schema::new(schema.fields()[..table_width].to_vec()));
    let batches = match found.seqs {
        Some(seqs) => newest_only(table, found.kept, &seqs)?,
        None => found.kept,
    };
    Ok(ScanOutput {
        batches,
        schema,
        stats,
    })
}

/// Footers with the Arrow schema they are read as, by segment path and the number of the
/// table's columns the file holds: making one converts the whole schema, a tenth of a
/// cold lookup's time on a 50-column table whose pages were in the page cache. Segments
/// are immutable, their paths never reused, and a tiered table's columns keep their names
/// and types. At most 4,096 entries.
static READERS: Memo<(String, usize), ArrowReaderMetadata> = Memo::new(4096);

/// The reader metadata of segment `path` (footer `metadata`, holding the first `held` of
/// `table`'s columns), from [`READERS`] or made and kept there.
fn reader_metadata(
    table: &ColdTable,
    path: &str,
    metadata: &Arc<ParquetMetaData>,
    held: usize,
) -> Result<ArrowReaderMetadata, ScanError> {
    let key = (path.to_owned(), held);
    if let Some(found) = READERS.get(&key) {
        return Ok(found);
    }
    let made = ArrowReaderMetadata::try_new(
        metadata.clone(),
        ArrowReaderOptions::new().with_schema(table.file_schema(held)),
    )?;
    READERS.insert(key, made.clone());
    Ok(made)
}

/// The columns a scan decodes: those a statement reads (with the key and the columns of
/// the checked predicates), or every one. The others are `Null` arrays, bound as NULL.
struct Projection {
    /// Per table column, whether it is decoded; `None`: every one.
    read: Option<Vec<bool>>,
    /// The table's columns (unread ones typed `Null`), then seq and op.
    schema: SchemaRef,
    /// The schema of every column, seq and op.
    full: SchemaRef,
}

impl Projection {
    fn new(table: &ColdTable, read: Option<&[bool]>, checked: &[usize]) -> Self {
        let width = table.columns.len();
        let full = table.file_schema(width);
        let read = read.map(|r| {
            let mut read: Vec<bool> = (0..width).map(|c| r.get(c) == Some(&true)).collect();
            for &c in table.pk_positions.iter().chain(checked) {
                read[c] = true;
            }
            read
        });
        let read = read.filter(|r| r.contains(&false));
        let schema = match &read {
            None => full.clone(),
            Some(read) => Arc::new(Schema::new(
                full.fields()
                    .iter()
                    .enumerate()
                    .map(|(c, f)| match read.get(c) {
                        Some(false) => Arc::new(Field::new(f.name(), DataType::Null, true)),
                        _ => f.clone(),
                    })
                    .collect::<Vec<_>>(),
            )),
        };
        Projection { read, schema, full }
    }

    /// The root columns to decode from a file holding `held` columns; `None`: every one.
    fn roots(&self, held: usize) -> Option<Vec<usize>> {
        let read = self.read.as_ref()?;
        Some(
            (0..held)
                .filter(|&c| read[c])
                .chain([held, held + 1])
                .collect(),
        )
    }

    /// `batch`, from a file holding `held` columns and decoded whole (`whole`) or as
    /// [`Projection::roots`] says, as the scan's schema: unread columns `Null`, columns the
    /// file lacks as [`ColdTable::missing`] says.
    fn assemble(
        &self,
        batch: RecordBatch,
        held: usize,
        whole: bool,
        table: &ColdTable,
    ) -> Result<RecordBatch, ScanError> {
        let Some(read) = &self.read else {
            return table.widen(batch, held);
        };
        let rows = batch.num_rows();
        let mut decoded = batch.columns().iter();
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(read.len() + 2);
        for (c, &wanted) in read.iter().enumerate() {
            let stored = c < held && (whole || wanted);
            let column = if stored {
                decoded.next().cloned()
            } else {
                None
            };
            arrays.push(match (wanted, column) {
                (false, _) => Arc::new(NullArray::new(rows)),
                (true, Some(column)) => column,
                (true, None) => table.missing_column(c, self.full.field(c).data_type(), rows)?,
            });
        }
        // seq and op follow the file's own columns.
        let file_width = batch.num_columns();
        arrays.extend(batch.columns()[file_width - 2..].iter().cloned());
        Ok(RecordBatch::try_new(self.schema.clone(), arrays)?)
    }
}

/// `kept` (whose rows have the seqs and ops `versions`) reduced to the newest version of
/// each key, unless that is a tombstone: for a pinned generation, whose overrides may be
/// gone (a TRUNCATE deletes them all, while a transaction whose snapshot predates it
/// still reads the segments it retired).
fn newest_only(
    table: &ColdTable,
    kept: Vec<RecordBatch>,
    versions: &[(Int64Array, Int16Array)],
) -> Result<Vec<RecordBatch>, ScanError> {
    let keys: Vec<Vec<Vec<u8>>> = kept
        .iter()
        .map(|batch| {
            (0..batch.num_rows())
                .map(|row| table.key_of(batch, row))
                .collect()
        })
        .collect();
    let mut newest: HashMap<&[u8], i64> = HashMap::new();
    for (keys, (seqs, _)) in keys.iter().zip(versions) {
        for (row, key) in keys.iter().enumerate() {
            let seen = newest.entry(key).or_insert(i64::MIN);
            *seen = (*seen).max(seqs.value(row));
        }
    }
    kept.iter()
        .zip(&keys)
        .zip(versions)
        .map(|((batch, keys), (seqs, ops))| {
            let mask: BooleanArray = keys
                .iter()
                .enumerate()
                .map(|(row, key)| {
                    Some(
                        ops.value(row) != crate::segment::op::DELETED
                            && newest.get(key.as_slice()) == Some(&seqs.value(row)),
                    )
                })
                .collect();
            Ok(filter_record_batch(batch, &mask)?)
        })
        .collect()
}

/// The rows a scan has found: every row that may match and is the live cold version of
/// its key.
struct Versions<'a> {
    table: &'a ColdTable,
    /// Predicates checked row by row.
    predicates: &'a [Predicate],
    /// The position of each column they read, by attnum.
    checked: Vec<(i16, usize)>,
    limits: ScanLimits,
    /// Bytes of the batches kept.
    bytes: usize,
    rows: usize,
    rows_scanned: usize,
    /// The rows kept, with the table's columns only.
    kept: Vec<RecordBatch>,
    /// For a pinned generation ([`ColdTable::pinned`]): the seq and op of every row kept
    /// (tombstones are kept then, and dropped by [`newest_only`]).
    seqs: Option<Vec<(Int64Array, Int16Array)>>,
}

impl Versions<'_> {
    /// The position of column `attnum`, read by a predicate.
    fn position(&self, attnum: i16) -> Option<usize> {
        self.checked
            .iter()
            .find(|&&(a, _)| a == attnum)
            .map(|&(_, c)| c)
    }

    /// The rows of `batch` that pass every `=` and `IN` predicate on an integer column,
    /// found with Arrow's comparison kernels (`None`: no such predicate). A lookup by key
    /// decodes a page of 1,024 rows (or takes it from the page cache) for the one it
    /// wants: the row-by-row check of [`Versions::take`], which encodes every value it
    /// compares, then looks only at the rows that can pass (that check was a sixth of
    /// coldwire's CPU in a TPC-B run and a quarter for cold single-row UPDATEs).
    fn narrowing(&self, batch: &RecordBatch) -> Result<Option<BooleanArray>, ScanError> {
        let mut mask: Option<BooleanArray> = None;
        for p in self.predicates {
            let Some((attnum, values)) = asked_values(p) else {
                continue;
            };
            let Some(column) = self.position(attnum).map(|c| batch.column(c)) else {
                continue;
            };
            let Some(matches) = integer_matches(column.as_ref(), values)? else {
                continue;
            };
            mask = Some(match mask {
                Some(mask) => arrow::compute::and(&mask, &matches)?,
                None => matches,
            });
        }
        Ok(mask)
    }

    /// Takes the rows of `batch` (every column, then seq and op) that satisfy the
    /// checkable predicates and are live: not a tombstone, and their key's newest cold
    /// version (overrides name the newest of every key with more than one, so no other
    /// version needs to be seen).
    fn take(&mut self, batch: RecordBatch) -> Result<(), ScanError> {
        self.rows_scanned += batch.num_rows();
        let narrowed = self.narrowing(&batch)?;
        let width = self.table.columns.len();
        let seqs = batch.column(width).as_primitive::<Int64Type>();
        let ops = batch.column(width + 1).as_primitive::<Int16Type>();
        let pk = &self.table.pk_positions;
        let mask: BooleanArray = (0..batch.num_rows())
            .map(|row| {
                Some(
                    narrowed
                        .as_ref()
                        .is_none_or(|m| m.is_valid(row) && m.value(row))
                        && (ops.value(row) != crate::segment::op::DELETED || self.seqs.is_some())
                        && self.predicates.iter().all(|p| {
                            row_holds(p, &|a| Some(batch.column(self.position(a)?)), row, true)
                        })
                        && self.table.newest_at(&batch, pk, row, seqs.value(row)),
                )
            })
            .collect();
        // Nothing kept (a lookup whose key a page's bloom filter or stats let through but
        // that is not there): no column to filter.
        if mask.true_count() == 0 {
            return Ok(());
        }
        let columns: Vec<usize> = (0..width).collect();
        if let Some(kept_seqs) = &mut self.seqs {
            let seqs = arrow::compute::filter(seqs, &mask)?;
            let ops = arrow::compute::filter(ops, &mask)?;
            kept_seqs.push((
                seqs.as_primitive::<Int64Type>().clone(),
                ops.as_primitive::<Int16Type>().clone(),
            ));
        }
        let batch = filter_record_batch(&batch.project(&columns)?, &mask)?;
        if batch.num_rows() == 0 {
            if let Some(kept_seqs) = &mut self.seqs {
                kept_seqs.pop();
            }
            return Ok(());
        }
        self.rows += batch.num_rows();
        if self.rows > self.limits.rows {
            return Err(ScanError::TooManyRows {
                table: self.table.name.clone(),
                cap: self.limits.rows,
            });
        }
        // Batches the reader decoded may share buffers; the filtered ones own theirs.
        self.bytes = self.bytes.saturating_add(batch.get_array_memory_size());
        if self.bytes > self.limits.bytes {
            return Err(ScanError::TooMuchMemory {
                table: self.table.name.clone(),
                cap: self.limits.bytes,
            });
        }
        self.kept.push(batch);
        Ok(())
    }
}

/// At most this many `IN` values narrow a batch with comparison kernels (one pass each).
const NARROWING_IN_VALUES: usize = 16;

/// The values `p` asks column `attnum` to equal, when it is `=` or an `IN` of at most
/// [`NARROWING_IN_VALUES`] values: what comparison kernels check before the row-by-row
/// check.
pub(super) fn asked_values(p: &Predicate) -> Option<(i16, &[Vec<u8>])> {
    match p {
        Predicate::Eq(a, v) => Some((*a, std::slice::from_ref(v))),
        Predicate::In(a, vs) if vs.len() <= NARROWING_IN_VALUES => Some((*a, vs.as_slice())),
        _ => None,
    }
}

/// Which rows of integer column `column` equal one of `values` (in the order-preserving
/// encoding; a NULL cell is NULL, which filters out); `None` when the column is not an
/// integer or a value is not one of its type (the row-by-row check then judges).
pub(super) fn integer_matches(
    column: &dyn Array,
    values: &[Vec<u8>],
) -> Result<Option<BooleanArray>, ScanError> {
    use arrow::array::{Int32Array, Scalar};
    use arrow::compute::kernels::cmp::eq;
    let mut out: Option<BooleanArray> = None;
    for value in values {
        let Some(x) = ordered::int_from(value) else {
            return Ok(None);
        };
        let matched = match column.data_type() {
            DataType::Int64 => eq(&column, &Scalar::new(Int64Array::from(vec![x])))?,
            DataType::Int32 => match i32::try_from(x) {
                Ok(x) => eq(&column, &Scalar::new(Int32Array::from(vec![x])))?,
                Err(_) => return Ok(None),
            },
            DataType::Int16 => match i16::try_from(x) {
                Ok(x) => eq(&column, &Scalar::new(Int16Array::from(vec![x])))?,
                Err(_) => return Ok(None),
            },
            _ => return Ok(None),
        };
        out = Some(match out {
            Some(out) => arrow::compute::or(&out, &matched)?,
            None => matched,
        });
    }
    Ok(out)
}

/// Every live cold row of a table, one batch (of the table's columns) at a time: each row
/// that is the newest cold version of its key (no override names a newer one) and not a
/// tombstone. Memory: one decoded batch.
pub struct LiveRows<'a> {
    store: &'a ColdStore,
    table: &'a ColdTable,
    width: usize,
    /// How many of the table's columns the current segment holds.
    held: usize,
    next_segment: usize,
    current: Option<parquet::arrow::async_reader::ParquetRecordBatchStream<SegmentFile>>,
}

impl<'a> LiveRows<'a> {
    pub fn new(store: &'a ColdStore, table: &'a ColdTable) -> Self {
        Self {
            store,
            table,
            width: table.columns.len(),
            held: table.columns.len(),
            next_segment: 0,
            current: None,
        }
    }

    /// The next non-empty batch of live rows; `None` after the last segment.
    ///
    /// # Errors
    /// Store or decoding failures.
    pub async fn next(&mut self) -> Result<Option<RecordBatch>, ScanError> {
        loop {
            let Some(stream) = &mut self.current else {
                let Some(segment) = self.table.segments.get(self.next_segment) else {
                    return Ok(None);
                };
                self.next_segment += 1;
                let metadata = footer(self.store, &segment.path).await?;
                let file =
                    SegmentFile::new(self.store.clone(), segment.path.clone(), metadata.clone());
                self.held = columns_held(&metadata, self.table);
                let reader_metadata = ArrowReaderMetadata::try_new(
                    metadata,
                    ArrowReaderOptions::new().with_schema(self.table.file_schema(self.held)),
                )?;
                self.current = Some(
                    ParquetRecordBatchStreamBuilder::new_with_metadata(file, reader_metadata)
                        .with_batch_size(SCAN_BATCH_ROWS)
                        .build()?,
                );
                continue;
            };
            let Some(batch) = stream.try_next().await? else {
                self.current = None;
                continue;
            };
            let batch = self.table.widen(batch, self.held)?;
            let (width, table) = (self.width, self.table);
            let seqs = batch.column(width).as_primitive::<Int64Type>();
            let ops = batch.column(width + 1).as_primitive::<Int16Type>();
            let mask: BooleanArray = (0..batch.num_rows())
                .map(|row| {
                    let newest = table.newest_at(&batch, &table.pk_positions, row, seqs.value(row));
                    Some(newest && ops.value(row) != crate::segment::op::DELETED)
                })
                .collect();
            let live =
                filter_record_batch(&batch, &mask)?.project(&(0..width).collect::<Vec<_>>())?;
            if live.num_rows() > 0 {
                return Ok(Some(live));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int32Array;

    fn table(columns: &[(&str, ColdType)], pk: Vec<usize>) -> ColdTable {
        ColdTable {
            id: 1,
            name: "public.t".into(),
            generation: 1,
            columns: columns
                .iter()
                .enumerate()
                .map(|(i, (name, ty))| crate::segment::writer::SegmentColumn {
                    name: (*name).into(),
                    attnum: i16::try_from(i).unwrap() + 1,
                    ty: *ty,
                    byte_ordered: false,
                    nondeterministic: false,
                })
                .collect(),
            pk_positions: pk,
            segments: Vec::new(),
            overrides: HashMap::new(),
            missing: vec![None; columns.len()],
            pinned: false,
            full_schema: std::sync::OnceLock::new(),
        }
    }

    #[test]
    fn asked_keys_are_encoded_as_the_rows_keys() {
        let int = |s| ColdType::Scalar(s);
        let t = table(
            &[
                ("a", int(ScalarType::Int4)),
                ("b", int(ScalarType::Int8)),
                ("c", int(ScalarType::Text(crate::values::TextKind::Text))),
            ],
            vec![0, 1],
        );
        let rows = RecordBatch::try_from_iter([
            ("a", Arc::new(Int32Array::from(vec![3, 4])) as ArrayRef),
            (
                "b",
                Arc::new(arrow::array::Int64Array::from(vec![-9, 10])) as ArrayRef,
            ),
            (
                "c",
                Arc::new(arrow::array::StringArray::from(vec!["x", "y"])) as ArrayRef,
            ),
        ])
        .unwrap();
        let enc = |x: i64| ordered::int(x).to_vec();
        let asked = t
            .asked_keys(&[
                Predicate::In(1, vec![enc(3), enc(4)]),
                Predicate::Eq(2, enc(-9)),
            ])
            .unwrap();
        assert_eq!(asked, vec![t.key_of(&rows, 0), [enc(4), enc(-9)].concat()]);
        // A key column not pinned, or a text key: none.
        assert_eq!(t.asked_keys(&[Predicate::Eq(1, enc(3))]), None);
        let text = table(
            &[("c", int(ScalarType::Text(crate::values::TextKind::Text)))],
            vec![0],
        );
        assert!(!text.integer_key());
        assert_eq!(text.asked_keys(&[Predicate::Eq(1, b"x".to_vec())]), None);
    }

    #[test]
    fn integer_columns_are_narrowed_to_the_values_asked_for() {
        let column = Int32Array::from(vec![Some(1), Some(2), None, Some(2), Some(7)]);
        let enc = |x: i64| ordered::int(x).to_vec();
        let rows = |m: Option<BooleanArray>| {
            m.map(|m| {
                (0..m.len())
                    .filter(|&i| m.is_valid(i) && m.value(i))
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(
            rows(integer_matches(&column, &[enc(2)]).unwrap()),
            Some(vec![1, 3])
        );
        assert_eq!(
            rows(integer_matches(&column, &[enc(7), enc(1)]).unwrap()),
            Some(vec![0, 4])
        );
        assert_eq!(
            rows(integer_matches(&column, &[enc(5)]).unwrap()),
            Some(vec![])
        );
        // Not an int4: judged row by row instead.
        assert_eq!(
            rows(integer_matches(&column, &[enc(1 << 40)]).unwrap()),
            None
        );
        assert_eq!(
            rows(integer_matches(&column, &[b"text".to_vec()]).unwrap()),
            None
        );
        let text = arrow::array::StringArray::from(vec!["a"]);
        assert_eq!(rows(integer_matches(&text, &[enc(1)]).unwrap()), None);
    }
}
