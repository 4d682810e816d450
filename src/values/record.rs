//! Cold rows as binary parameters (DESIGN §6.2), no value ever spliced into SQL text:
//! either one array of the table's row type, in Postgres's binary array and record
//! formats, so `unnest($k::s.t[])` gives the rows back with every typmod and array column
//! intact ([`encode_record_batches`]), or one array per column read
//! ([`encode_column_arrays`]), which `unnest` gives back in step.
//!
//! Array (array_recv): ndim, has-null flag, element type OID, then per dimension its size
//! and lower bound, then each element as a length-prefixed value. Record (record_recv): the
//! column count, then per column its type OID and a length-prefixed value (-1 for NULL).

use arrow::array::RecordBatch;
use bytes::{BufMut, BytesMut};

use super::{ColdColumn, ColdError, ColumnEncoder};

/// Appends to `out` the binary form of an array of the row type `row_type_oid` holding
/// every row of `rows`, whose columns are `columns` (all the table's columns, in attnum
/// order).
///
/// # Errors
/// [`ColdError::Schema`] when the batch does not hold `columns`; [`ColdError::Value`] for
/// a value that maps to no Postgres value.
pub fn encode_record_array(
    columns: &[ColdColumn],
    row_type_oid: u32,
    rows: &RecordBatch,
    out: &mut BytesMut,
) -> Result<(), ColdError> {
    encode_record_batches(columns, row_type_oid, vec![rows.clone()], out)
}

/// [`encode_record_array`] of the rows of several batches, each dropped once encoded.
///
/// # Errors
/// As [`encode_record_array`].
pub fn encode_record_batches(
    columns: &[ColdColumn],
    row_type_oid: u32,
    batches: Vec<RecordBatch>,
    out: &mut BytesMut,
) -> Result<(), ColdError> {
    if let Some(rows) = batches.iter().find(|b| b.num_columns() != columns.len()) {
        return Err(ColdError::Schema(format!(
            "{} columns, expected {}",
            rows.num_columns(),
            columns.len()
        )));
    }
    let total: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let count = i32::try_from(total)
        .map_err(|_| ColdError::Schema(format!("{total} rows do not fit one array")))?;
    let width =
        i32::try_from(columns.len()).map_err(|_| ColdError::Schema("too many columns".into()))?;
    // Roughly what the rows take encoded: one allocation for most arrays.
    let estimate: usize = batches
        .iter()
        .map(|b| b.get_array_memory_size() + b.num_rows() * (8 + 8 * columns.len()))
        .sum();
    out.reserve(estimate + 20);
    let empty = count == 0;
    out.put_i32(if empty { 0 } else { 1 });
    out.put_i32(0); // no NULL elements
    out.put_u32(row_type_oid);
    if !empty {
        out.put_i32(count);
        out.put_i32(1);
    }
    for rows in batches {
        encode_rows(columns, width, &rows, out)?;
    }
    Ok(())
}

/// The elements of the array for the rows of `rows`.
fn encode_rows(
    columns: &[ColdColumn],
    width: i32,
    rows: &RecordBatch,
    out: &mut BytesMut,
) -> Result<(), ColdError> {
    let encoders = columns
        .iter()
        .zip(rows.columns())
        .map(|(c, a)| ColumnEncoder::new(c, a.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    for row in 0..rows.num_rows() {
        let element = out.len();
        out.put_i32(0); // element length, filled in below
        out.put_i32(width);
        for (column, encoder) in columns.iter().zip(&encoders) {
            out.put_u32(column.ty.type_oid());
            let length = out.len();
            out.put_i32(-1);
            if let Some(written) = encoder.encode(row, out)? {
                let written = i32::try_from(written).map_err(|_| {
                    ColdError::Schema(format!("a value of {} over 2 GB", column.name))
                })?;
                out[length..length + 4].copy_from_slice(&written.to_be_bytes());
            }
        }
        let size = i32::try_from(out.len() - element - 4)
            .map_err(|_| ColdError::Schema("a row over 2 GB".into()))?;
        out[element..element + 4].copy_from_slice(&size.to_be_bytes());
    }
    Ok(())
}

/// One binary array per column of `bound` (positions in `columns`, all the table's
/// columns in attnum order) holding that column's values of every row of `batches`, each
/// batch dropped once encoded; the arrays' element types are the columns' own.
///
/// # Errors
/// As [`encode_record_array`], and [`ColdError::Schema`] for a position past the columns.
pub fn encode_column_arrays(
    columns: &[ColdColumn],
    bound: &[usize],
    batches: Vec<RecordBatch>,
) -> Result<Vec<BytesMut>, ColdError> {
    if let Some(rows) = batches.iter().find(|b| b.num_columns() != columns.len()) {
        return Err(ColdError::Schema(format!(
            "{} columns, expected {}",
            rows.num_columns(),
            columns.len()
        )));
    }
    if let Some(c) = bound.iter().find(|&&c| c >= columns.len()) {
        return Err(ColdError::Schema(format!(
            "column {c} of a table of {}",
            columns.len()
        )));
    }
    let total: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let count = i32::try_from(total)
        .map_err(|_| ColdError::Schema(format!("{total} rows do not fit one array")))?;
    let mut out: Vec<BytesMut> = bound
        .iter()
        .map(|&c| {
            // Roughly what the values take encoded: one allocation for most arrays.
            let values: usize = batches
                .iter()
                .map(|b| b.column(c).get_array_memory_size())
                .sum();
            let mut array = BytesMut::with_capacity(values + 4 * total + 20);
            array.put_i32(i32::from(count > 0)); // dimensions
            array.put_i32(0); // NULL elements: Postgres finds them itself
            array.put_u32(columns[c].ty.type_oid());
            if count > 0 {
                array.put_i32(count);
                array.put_i32(1);
            }
            array
        })
        .collect();
    for rows in batches {
        for (&c, array) in bound.iter().zip(out.iter_mut()) {
            let encoder = ColumnEncoder::new(&columns[c], rows.column(c).as_ref())?;
            for row in 0..rows.num_rows() {
                let length = array.len();
                array.put_i32(-1);
                if let Some(written) = encoder.encode(row, array)? {
                    let written = i32::try_from(written).map_err(|_| {
                        ColdError::Schema(format!("a value of {} over 2 GB", columns[c].name))
                    })?;
                    array[length..length + 4].copy_from_slice(&written.to_be_bytes());
                }
            }
        }
    }
    Ok(out)
}
