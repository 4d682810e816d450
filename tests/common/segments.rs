//! Reads segments the way an outside Parquet reader would, to check what the flush wrote.

use arrow::array::{Array, Int16Array, Int64Array, RecordBatch};
use arrow::util::display::array_value_to_string;
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// Every record batch of the Parquet file `bytes`.
pub fn batches(bytes: &Bytes) -> Vec<RecordBatch> {
    ParquetRecordBatchReaderBuilder::try_new(bytes.clone())
        .expect("a Parquet footer")
        .build()
        .expect("a reader")
        .map(|b| b.expect("a record batch"))
        .collect()
}

/// (id, _cw_op) of every row of a segment of a table whose pk is a bigint `id`.
pub fn id_ops(bytes: &Bytes) -> Vec<(i64, i16)> {
    let mut out = Vec::new();
    for batch in batches(bytes) {
        let ids = column::<Int64Array>(&batch, "id");
        let ops = column::<Int16Array>(&batch, "_cw_op");
        out.extend((0..ids.len()).map(|i| (ids.value(i), ops.value(i))));
    }
    out
}

/// The values of column `name` of every row, as Arrow displays them (NULL as `None`).
pub fn texts(bytes: &Bytes, name: &str) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for batch in batches(bytes) {
        let col = batch
            .column_by_name(name)
            .unwrap_or_else(|| panic!("column {name}"));
        out.extend((0..col.len()).map(|i| {
            (!col.is_null(i)).then(|| array_value_to_string(col, i).expect("displayable"))
        }));
    }
    out
}

/// Lower-case hex sha256 of `bytes`, as `coldwire.segments.sha256` records it.
pub fn sha256_hex(bytes: &[u8]) -> String {
    coldwire::flush::store::hex(&<sha2::Sha256 as sha2::Digest>::digest(bytes))
}

fn column<T: Clone + 'static>(batch: &RecordBatch, name: &str) -> T {
    batch
        .column_by_name(name)
        .unwrap_or_else(|| panic!("column {name}"))
        .as_any()
        .downcast_ref::<T>()
        .unwrap_or_else(|| panic!("column {name} has type {}", std::any::type_name::<T>()))
        .clone()
}
