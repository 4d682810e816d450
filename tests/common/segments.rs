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
    coldwire::store::hex(&<sha2::Sha256 as sha2::Digest>::digest(bytes))
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

/// One stored version of a key in an active segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColdRow {
    /// The segment's object key.
    pub segment: String,
    /// The table's bigint pk `id`.
    pub id: i64,
    /// `_cw_seq`: the mirror seq of the version.
    pub seq: i64,
    /// `_cw_op`: 1 live, 3 tombstone.
    pub op: i16,
    /// Every other column Arrow can display, by name, as it displays it (NULL as `None`).
    pub values: std::collections::BTreeMap<String, Option<String>>,
}

/// Every row of every active segment in the database, read from the `file://` store at
/// `store`, in path and row order; asserts each file's sha256 and row count against the
/// catalog.
pub async fn active_rows(direct: &tokio_postgres::Client, store: &std::path::Path) -> Vec<ColdRow> {
    let mut out = Vec::new();
    let segments = direct
        .query(
            "SELECT path, sha256, row_count FROM coldwire.segments WHERE status = 'active' ORDER BY path",
            &[],
        )
        .await
        .expect("read coldwire.segments");
    for row in segments {
        let path: String = row.get(0);
        let bytes = Bytes::from(
            std::fs::read(store.join(&path)).unwrap_or_else(|e| panic!("read {path}: {e}")),
        );
        assert_eq!(
            sha256_hex(&bytes),
            row.get::<_, String>(1),
            "sha256 of {path}"
        );
        let mut n = 0;
        for batch in batches(&bytes) {
            let ids = column::<Int64Array>(&batch, "id");
            let seqs = column::<Int64Array>(&batch, "_cw_seq");
            let ops = column::<Int16Array>(&batch, "_cw_op");
            for i in 0..batch.num_rows() {
                let mut values = std::collections::BTreeMap::new();
                for (field, col) in batch.schema().fields().iter().zip(batch.columns()) {
                    if matches!(field.name().as_str(), "id" | "_cw_seq" | "_cw_op") {
                        continue;
                    }
                    // Columns Arrow cannot display (e.g. the numeric struct) are left out.
                    if col.is_null(i) {
                        values.insert(field.name().clone(), None);
                    } else if let Ok(text) = array_value_to_string(col, i) {
                        values.insert(field.name().clone(), Some(text));
                    }
                }
                out.push(ColdRow {
                    segment: path.clone(),
                    id: ids.value(i),
                    seq: seqs.value(i),
                    op: ops.value(i),
                    values,
                });
            }
            n += batch.num_rows() as i64;
        }
        assert_eq!(n, row.get::<_, i64>(2), "row_count of {path}");
    }
    out
}

/// The segment files under `dir` (a `file://` store's folder), sorted by path, with their
/// footers.
pub fn footers(
    dir: &std::path::Path,
) -> Vec<(std::path::PathBuf, parquet::file::metadata::ParquetMetaData)> {
    let mut paths: Vec<_> = store_files(dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let bytes = Bytes::from(std::fs::read(&path).expect("read a segment"));
            let reader = parquet::file::serialized_reader::SerializedFileReader::new(bytes)
                .expect("a segment's footer");
            let metadata = parquet::file::reader::FileReader::metadata(&reader).clone();
            (path, metadata)
        })
        .collect()
}

/// Every file under `dir`, recursively.
pub fn store_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)
        .expect("read the store directory")
        .flatten()
    {
        let p = entry.path();
        if p.is_dir() {
            out.extend(store_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}
