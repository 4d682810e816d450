//! Cold record batches back to a `COPY … FROM STDIN (FORMAT binary)` stream, sans-IO:
//! header, one tuple per row, trailer.

use arrow::record_batch::RecordBatch;
use bytes::{BufMut, BytesMut};

use super::copy_decode::COPY_SIGNATURE;
use super::encode_value::{write_field, ColumnView};
use super::error::ColdError;
use super::types::ColdColumn;

/// Appends the 19-byte header: signature, no flags, no header extension (what Postgres
/// itself writes).
pub fn encode_header(out: &mut BytesMut) {
    out.put_slice(COPY_SIGNATURE);
    out.put_u32(0);
    out.put_u32(0);
}

/// Appends the trailer, a field count of -1.
pub fn encode_trailer(out: &mut BytesMut) {
    out.put_i16(-1);
}

/// Appends one tuple per row of `batch`, whose columns are `columns` in order.
///
/// # Errors
/// [`ColdError::Schema`] when the batch's columns are not those of `columns`;
/// [`ColdError::Value`] for a value that maps to no Postgres value. `out` may then hold a
/// partial tuple and must be discarded.
pub fn encode_batch(
    columns: &[ColdColumn],
    batch: &RecordBatch,
    out: &mut BytesMut,
) -> Result<(), ColdError> {
    if batch.num_columns() != columns.len() {
        return Err(ColdError::Schema(format!(
            "{} columns, expected {}",
            batch.num_columns(),
            columns.len()
        )));
    }
    let field_count = i16::try_from(columns.len()).map_err(|_| {
        ColdError::Schema(format!("{} columns do not fit a COPY tuple", columns.len()))
    })?;
    let views = columns
        .iter()
        .zip(batch.columns())
        .map(|(c, a)| ColumnView::new(c, a.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    for row in 0..batch.num_rows() {
        out.put_i16(field_count);
        for (column, view) in columns.iter().zip(&views) {
            write_field(out, |out| view.write(row, out)).map_err(|source| ColdError::Value {
                column: column.name.clone(),
                row: row as u64,
                source,
            })?;
        }
    }
    Ok(())
}
