//! One Parquet segment being written, and the facts recorded about it in the catalog: row
//! count, seq range, pk bounds and per-column statistics (DESIGN §3, `coldwire.segment_stats`).
//!
//! Where the statistics come from: min/max from the Parquet footer the writer just
//! produced (per row group, so byte-array bounds are the writer's truncated, still
//! conservative ones); null, NaN and numeric-special counts from the Arrow arrays as they
//! are written, attributed to row groups by row offset (the writer cuts row groups every
//! `row_group_rows` rows) and checked against the footer's row-group row counts. Values
//! are in the order-preserving encoding of [`crate::values::ordered`].

use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{Float32Type, Float64Type, Int64Type, SchemaRef};
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::properties::WriterProperties;
use parquet::file::statistics::Statistics;

pub use crate::segment::prune::ColumnStats;
use crate::values::ordered;
use crate::values::types::NUMERIC_VALUE;
use crate::values::{ColdType, NumericRepr, ScalarType};

/// A table column as the segment writer sees it.
#[derive(Debug, Clone)]
pub struct SegmentColumn {
    pub name: String,
    pub attnum: i16,
    pub ty: ColdType,
    /// Whether Postgres orders the column's values as their bytes (text or varchar under
    /// the C collation), so that `<` and `>` on it may be evaluated on cold rows. Known
    /// when a table is loaded for reads (`catalog::segments`), false otherwise.
    pub byte_ordered: bool,
    /// Whether its collation is nondeterministic (values of other bytes may be equal), so
    /// that no comparison on it may be evaluated on cold rows. Known as `byte_ordered` is.
    pub nondeterministic: bool,
}

impl SegmentColumn {
    /// The `coldwire.tables.columns` entry of a column, as [`SegmentColumn::from_catalog`]
    /// reads it (`type` is `format_type`'s text).
    pub fn catalog_entry(
        attnum: i16,
        name: &str,
        type_name: &str,
        type_oid: u32,
        typmod: i32,
    ) -> serde_json::Value {
        serde_json::json!({
            "attnum": attnum, "name": name, "type": type_name, "type_oid": type_oid, "typmod": typmod,
        })
    }

    /// The columns recorded in `coldwire.tables.columns` (by attnum: name, type oid, typmod).
    ///
    /// # Errors
    /// A column type that cannot be stored cold (the catalog was written by a build that
    /// knew more types, or edited by hand).
    pub fn from_catalog(
        columns: &serde_json::Value,
    ) -> Result<Vec<Self>, crate::values::UnsupportedType> {
        let mut out = Vec::new();
        for c in columns.as_array().into_iter().flatten() {
            let ty = ColdType::for_column(
                c["type_oid"].as_u64().unwrap_or_default() as u32,
                c["typmod"].as_i64().unwrap_or(-1) as i32,
            )?;
            out.push(SegmentColumn {
                name: c["name"].as_str().unwrap_or_default().to_owned(),
                attnum: c["attnum"].as_i64().unwrap_or_default() as i16,
                ty,
                byte_ordered: false,
                nondeterministic: false,
            });
        }
        Ok(out)
    }
}

/// What the catalog records about a finished segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentFacts {
    pub rows: i64,
    pub min_seq: i64,
    pub max_seq: i64,
    /// Smallest and largest primary key in the order-preserving key encoding.
    pub min_pk: Option<Vec<u8>>,
    pub max_pk: Option<Vec<u8>>,
    pub stats: Vec<ColumnStats>,
}

/// Per row group counts of one column, grown as rows are written.
#[derive(Debug, Default, Clone)]
struct Counts {
    nulls: Vec<i64>,
    nans: Vec<i64>,
}

/// A segment being written: the Parquet bytes not yet taken (see [`SegmentWriter::take_produced`])
/// plus running facts.
pub struct SegmentWriter {
    writer: ArrowWriter<Vec<u8>>,
    columns: Arc<[SegmentColumn]>,
    /// Schema positions of the pk columns, in key order.
    pk_positions: Arc<[usize]>,
    seq_position: usize,
    row_group_rows: usize,
    rows: usize,
    min_seq: i64,
    max_seq: i64,
    min_pk: Option<Vec<u8>>,
    max_pk: Option<Vec<u8>>,
    counts: Vec<Counts>,
    key: Vec<u8>,
}

impl SegmentWriter {
    /// A writer for batches of `schema`, whose first `columns.len()` fields are the table's
    /// columns (in order) and whose field `seq_position` holds the seqs.
    ///
    /// # Errors
    /// Parquet writer setup failures.
    pub fn new(
        schema: SchemaRef,
        props: WriterProperties,
        columns: Arc<[SegmentColumn]>,
        pk_positions: Arc<[usize]>,
        seq_position: usize,
    ) -> Result<Self, parquet::errors::ParquetError> {
        let row_group_rows = props.max_row_group_row_count().unwrap_or(usize::MAX).max(1);
        let counts = vec![Counts::default(); columns.len()];
        Ok(Self {
            writer: ArrowWriter::try_new(Vec::new(), schema, Some(props))?,
            columns,
            pk_positions,
            seq_position,
            row_group_rows,
            rows: 0,
            min_seq: i64::MAX,
            max_seq: i64::MIN,
            min_pk: None,
            max_pk: None,
            counts,
            key: Vec::new(),
        })
    }

    /// Rows written so far.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Bytes of the file produced and not yet taken: whole row groups, as the writer
    /// closes them.
    pub fn produced(&self) -> usize {
        self.writer.inner().len()
    }

    /// Takes the bytes [`SegmentWriter::produced`] counts; the file is what the takes and
    /// [`SegmentWriter::finish`] return, in order.
    pub fn take_produced(&mut self) -> Bytes {
        Bytes::from(std::mem::take(self.writer.inner_mut()))
    }

    /// Writes `batch` and folds it into the running facts.
    ///
    /// # Errors
    /// Parquet encoding failures.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), parquet::errors::ParquetError> {
        self.observe(batch);
        self.writer.write(batch)?;
        self.rows += batch.num_rows();
        Ok(())
    }

    fn observe(&mut self, batch: &RecordBatch) {
        if let Some(seqs) = batch
            .column(self.seq_position)
            .as_primitive_opt::<Int64Type>()
        {
            for v in seqs.iter().flatten() {
                self.min_seq = self.min_seq.min(v);
                self.max_seq = self.max_seq.max(v);
            }
        }
        for row in 0..batch.num_rows() {
            self.key.clear();
            let complete = self.pk_positions.iter().all(|&p| {
                ordered::push_key_component(&mut self.key, batch.column(p).as_ref(), row)
            });
            if !complete {
                continue;
            }
            if self.min_pk.as_ref().is_none_or(|m| self.key < *m) {
                self.min_pk = Some(self.key.clone());
            }
            if self.max_pk.as_ref().is_none_or(|m| self.key > *m) {
                self.max_pk = Some(self.key.clone());
            }
        }
        // Split the batch at row-group boundaries and count per row group.
        let mut offset = 0;
        while offset < batch.num_rows() {
            let group = (self.rows + offset) / self.row_group_rows;
            let room = self.row_group_rows - (self.rows + offset) % self.row_group_rows;
            let len = room.min(batch.num_rows() - offset);
            for (i, column) in self.columns.iter().enumerate() {
                let array = batch.column(i).slice(offset, len);
                let counts = &mut self.counts[i];
                if counts.nulls.len() <= group {
                    counts.nulls.resize(group + 1, 0);
                    counts.nans.resize(group + 1, 0);
                }
                counts.nulls[group] += array.null_count() as i64;
                counts.nans[group] += unordered_values(column.ty, array.as_ref());
            }
            offset += len;
        }
    }

    /// Closes the file: its bytes (those not taken yet) and its facts. Nothing is written
    /// after.
    ///
    /// # Errors
    /// Parquet failures, or a footer whose row groups do not match the rows written.
    pub fn finish(&mut self) -> Result<(Bytes, SegmentFacts), parquet::errors::ParquetError> {
        let metadata = self.writer.finish()?;
        let bytes = Bytes::from(std::mem::take(self.writer.inner_mut()));
        let expected_groups = self.rows.div_ceil(self.row_group_rows);
        let groups = metadata.row_groups();
        let layout_matches = groups.len() == expected_groups
            && groups.iter().enumerate().all(|(g, rg)| {
                rg.num_rows() as usize
                    == self.row_group_rows.min(self.rows - g * self.row_group_rows)
            });
        if !layout_matches {
            return Err(parquet::errors::ParquetError::General(format!(
                "segment footer has {} row groups, {expected_groups} of {} rows expected",
                groups.len(),
                self.row_group_rows
            )));
        }
        let stats = self
            .columns
            .iter()
            .zip(&mut self.counts)
            .map(|(column, counts)| {
                counts.nulls.resize(expected_groups, 0);
                counts.nans.resize(expected_groups, 0);
                column_stats(&metadata, column, counts)
            })
            .collect();
        let facts = SegmentFacts {
            rows: self.rows as i64,
            min_seq: self.min_seq,
            max_seq: self.max_seq,
            min_pk: self.min_pk.take(),
            max_pk: self.max_pk.take(),
            stats,
        };
        Ok((bytes, facts))
    }
}

/// Non-NULL values of `array` that have no place in the min/max order: float NaN, and
/// numeric NaN/±Infinity (the rows whose `special` field is set).
fn unordered_values(ty: ColdType, array: &dyn Array) -> i64 {
    let ColdType::Scalar(scalar) = ty else {
        return 0;
    };
    let count = |nan: &mut dyn Iterator<Item = bool>| nan.filter(|&n| n).count() as i64;
    match scalar {
        ScalarType::Float4 => count(
            &mut array
                .as_primitive::<Float32Type>()
                .iter()
                .map(|v| v.is_some_and(f32::is_nan)),
        ),
        ScalarType::Float8 => count(
            &mut array
                .as_primitive::<Float64Type>()
                .iter()
                .map(|v| v.is_some_and(f64::is_nan)),
        ),
        ScalarType::Numeric(NumericRepr::Decimal { .. }) => {
            let structs = array.as_struct();
            let special = structs.column(1);
            (0..structs.len())
                .filter(|&r| structs.is_valid(r) && special.is_valid(r))
                .count() as i64
        }
        _ => 0,
    }
}

/// Folds the footer's per-row-group bounds of `column` and the counted nulls/NaNs.
fn column_stats(
    metadata: &ParquetMetaData,
    column: &SegmentColumn,
    counts: &Counts,
) -> ColumnStats {
    let ordered_scalar = match column.ty {
        ColdType::Scalar(s) if ordered::has_order(s) => Some(s),
        _ => None,
    };
    let leaf_path: Vec<String> = match ordered_scalar {
        Some(ScalarType::Numeric(_)) => vec![column.name.clone(), NUMERIC_VALUE.to_owned()],
        _ => vec![column.name.clone()],
    };
    let mut rg_min = Vec::new();
    let mut rg_max = Vec::new();
    for rg in metadata.row_groups() {
        let bounds = ordered_scalar
            .and_then(|s| {
                let chunk = rg
                    .columns()
                    .iter()
                    .find(|c| c.column_path().parts() == leaf_path.as_slice())?;
                encoded_bounds(s, chunk.statistics()?)
            })
            .unwrap_or((None, None));
        rg_min.push(bounds.0);
        rg_max.push(bounds.1);
    }
    // A row group with values but no bound leaves the segment without one.
    let groups_rows: Vec<i64> = metadata
        .row_groups()
        .iter()
        .map(|rg| rg.num_rows())
        .collect();
    let has_values = |g: usize| groups_rows[g] > counts.nulls[g] + counts.nans[g];
    let fold = |bounds: &[Option<Vec<u8>>], pick_max: bool| -> Option<Vec<u8>> {
        let mut out: Option<Vec<u8>> = None;
        for (g, b) in bounds.iter().enumerate() {
            match b {
                Some(v)
                    if out
                        .as_ref()
                        .is_none_or(|o| if pick_max { v > o } else { v < o }) =>
                {
                    out = Some(v.clone())
                }
                Some(_) => {}
                None if has_values(g) => return None,
                None => {}
            }
        }
        out
    };
    ColumnStats {
        attnum: column.attnum,
        min: fold(&rg_min, false),
        max: fold(&rg_max, true),
        null_count: counts.nulls.iter().sum(),
        nan_count: counts.nans.iter().sum(),
        rg_min,
        rg_max,
        rg_null_count: counts.nulls.clone(),
        rg_nan_count: counts.nans.clone(),
    }
}

/// A (min, max) pair of encoded bounds, each absent when unknown.
type Bounds = (Option<Vec<u8>>, Option<Vec<u8>>);

/// A footer min/max pair in the order-preserving encoding of `scalar`.
fn encoded_bounds(scalar: ScalarType, stats: &Statistics) -> Option<Bounds> {
    fn both<T>(
        min: Option<&T>,
        max: Option<&T>,
        f: impl Fn(&T) -> Option<Vec<u8>>,
    ) -> Option<Bounds> {
        Some((min.and_then(&f), max.and_then(&f)))
    }
    let decimal = matches!(scalar, ScalarType::Numeric(_));
    match stats {
        Statistics::Boolean(s) => both(s.min_opt(), s.max_opt(), |v| {
            Some(ordered::boolean(*v).to_vec())
        }),
        Statistics::Int32(s) if decimal => both(s.min_opt(), s.max_opt(), |v| {
            Some(ordered::decimal(i128::from(*v)).to_vec())
        }),
        Statistics::Int64(s) if decimal => both(s.min_opt(), s.max_opt(), |v| {
            Some(ordered::decimal(i128::from(*v)).to_vec())
        }),
        Statistics::Int32(s) => both(s.min_opt(), s.max_opt(), |v| {
            Some(ordered::int(i64::from(*v)).to_vec())
        }),
        Statistics::Int64(s) => both(s.min_opt(), s.max_opt(), |v| {
            Some(ordered::int(*v).to_vec())
        }),
        Statistics::Float(s) => both(s.min_opt(), s.max_opt(), |v| {
            ordered::float(f64::from(*v)).map(|b| b.to_vec())
        }),
        Statistics::Double(s) => both(s.min_opt(), s.max_opt(), |v| {
            ordered::float(*v).map(|b| b.to_vec())
        }),
        Statistics::FixedLenByteArray(s) if decimal => both(s.min_opt(), s.max_opt(), |v| {
            ordered::i128_from_be(v.data()).map(|d| ordered::decimal(d).to_vec())
        }),
        Statistics::ByteArray(s) if decimal => both(s.min_opt(), s.max_opt(), |v| {
            ordered::i128_from_be(v.data()).map(|d| ordered::decimal(d).to_vec())
        }),
        Statistics::ByteArray(s) => both(s.min_opt(), s.max_opt(), |v| Some(v.data().to_vec())),
        Statistics::FixedLenByteArray(s) => {
            both(s.min_opt(), s.max_opt(), |v| Some(v.data().to_vec()))
        }
        Statistics::Int96(_) => None,
    }
}
