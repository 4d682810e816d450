//! Which flushed keys may already have a cold version (DESIGN §5 step 6): those get an
//! entry in `coldwire.overrides_<id>` so readers know a newer cold version exists. The
//! mirror's op cannot tell (a rehydrated, updated or re-inserted key looks like any other),
//! so the flush probes the table's active segments: first by their pk bounds, then by the
//! pk bloom filters of the row groups. A false positive only adds an override that names
//! the key's newest version anyway; a key the probe rules out has no older cold version.
//!
//! All object-store reads happen here, while the rows stream, never inside the finalize.

use std::ops::Range;

use arrow::array::{Array, AsArray, RecordBatch};
use parquet::bloom_filter::Sbbf;
use tokio_postgres::Client;

use super::table::FlushError;
use crate::store::ColdStore;

/// An active segment the flushed keys may collide with.
struct Candidate {
    path: String,
    /// Bounds of its keys; `None`: unbounded on that side.
    min_pk: Option<Vec<u8>>,
    max_pk: Option<Vec<u8>>,
    /// Per row group, per pk column (key order): the bloom filter, loaded on first use.
    blooms: Option<Vec<Vec<Option<Sbbf>>>>,
}

/// The probe over one table's active segments.
pub struct ColdKeyProbe {
    candidates: Vec<Candidate>,
    pk_names: Vec<String>,
    key: Vec<u8>,
}

impl ColdKeyProbe {
    /// The table's active segments with their pk bounds (segments without bounds count as
    /// covering every key).
    ///
    /// # Errors
    /// Catalog failures.
    pub async fn load(
        client: &Client,
        table_id: i64,
        pk_names: Vec<String>,
    ) -> Result<Self, FlushError> {
        let rows = client
            .query(
                "SELECT path, min_pk, max_pk FROM coldwire.segments WHERE table_id = $1 AND status = 'active'",
                &[&table_id],
            )
            .await?;
        let candidates = rows
            .iter()
            .map(|r| Candidate {
                path: r.get(0),
                min_pk: r.get(1),
                max_pk: r.get(2),
                blooms: None,
            })
            .collect();
        Ok(Self {
            candidates,
            pk_names,
            key: Vec::new(),
        })
    }

    /// Whether there is anything to probe at all.
    pub fn is_empty(&self) -> bool {
        self.candidates.is_empty()
    }

    /// Rows of `batch` whose key may already be cold. `pk_positions` are the batch columns
    /// of the pk, in key order.
    ///
    /// # Errors
    /// Store or Parquet failures reading footers and bloom filters.
    pub async fn maybe_cold(
        &mut self,
        store: &ColdStore,
        batch: &RecordBatch,
        pk_positions: &[usize],
    ) -> Result<Vec<u32>, FlushError> {
        let mut out = Vec::new();
        if self.candidates.is_empty() {
            return Ok(out);
        }
        for row in 0..batch.num_rows() {
            self.key.clear();
            let key = &mut self.key;
            if !pk_positions.iter().all(|&p| {
                crate::values::ordered::push_key_component(key, batch.column(p).as_ref(), row)
            }) {
                continue;
            }
            for i in 0..self.candidates.len() {
                let c = &self.candidates[i];
                if c.min_pk.as_ref().is_some_and(|m| self.key < *m)
                    || c.max_pk.as_ref().is_some_and(|m| self.key > *m)
                {
                    continue;
                }
                if self.candidates[i].blooms.is_none() {
                    let blooms =
                        load_blooms(store, &self.candidates[i].path, &self.pk_names).await?;
                    self.candidates[i].blooms = Some(blooms);
                }
                let groups = self.candidates[i].blooms.as_deref().unwrap_or_default();
                let hit = groups.iter().any(|columns| {
                    columns
                        .iter()
                        .zip(pk_positions)
                        .all(|(bloom, &p)| match bloom {
                            Some(bloom) => bloom_may_contain(bloom, batch.column(p).as_ref(), row),
                            None => true,
                        })
                });
                if hit {
                    out.push(row as u32);
                    break;
                }
            }
        }
        Ok(out)
    }
}

/// The pk bloom filters of every row group of the segment at `path`, read by ranges.
async fn load_blooms(
    store: &ColdStore,
    path: &str,
    pk_names: &[String],
) -> Result<Vec<Vec<Option<Sbbf>>>, FlushError> {
    let metadata = crate::segment::file::footer(store, path).await?;
    let mut groups = Vec::new();
    for rg in metadata.row_groups() {
        let mut columns = Vec::new();
        for name in pk_names {
            let chunk = rg
                .columns()
                .iter()
                .find(|c| c.column_path().parts() == std::slice::from_ref(name));
            let range = chunk.and_then(|c| {
                let offset = u64::try_from(c.bloom_filter_offset()?).ok()?;
                let length = u64::try_from(c.bloom_filter_length()?).ok()?;
                Some::<Range<u64>>(offset..offset + length)
            });
            columns.push(match range {
                Some(range) => Some(Sbbf::from_bytes(&store.get_range(path, range).await?)?),
                None => None,
            });
        }
        groups.push(columns);
    }
    Ok(groups)
}

/// Whether `bloom` may hold `array[row]`, hashed as the Parquet writer hashed it (the
/// physical value: INT32 for int2/int4/date, INT64 for int8/time/timestamps, the bytes of
/// strings and binaries).
fn bloom_may_contain(bloom: &Sbbf, array: &dyn Array, row: usize) -> bool {
    use arrow::datatypes::{
        DataType, Date32Type, Int16Type, Int32Type, Int64Type, Time64MicrosecondType, TimeUnit,
        TimestampMicrosecondType,
    };
    match array.data_type() {
        DataType::Int16 => bloom.check(&i32::from(array.as_primitive::<Int16Type>().value(row))),
        DataType::Int32 => bloom.check(&array.as_primitive::<Int32Type>().value(row)),
        DataType::Int64 => bloom.check(&array.as_primitive::<Int64Type>().value(row)),
        DataType::Date32 => bloom.check(&array.as_primitive::<Date32Type>().value(row)),
        DataType::Time64(TimeUnit::Microsecond) => {
            bloom.check(&array.as_primitive::<Time64MicrosecondType>().value(row))
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            bloom.check(&array.as_primitive::<TimestampMicrosecondType>().value(row))
        }
        DataType::Boolean => bloom.check(&array.as_boolean().value(row)),
        DataType::Utf8 => bloom.check(array.as_string::<i32>().value(row)),
        DataType::Binary => bloom.check(array.as_binary::<i32>().value(row)),
        DataType::FixedSizeBinary(_) => bloom.check(array.as_fixed_size_binary().value(row)),
        // A type without a known hashing: assume it may be there.
        _ => true,
    }
}
