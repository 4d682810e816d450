//! Arrow values of a cold column back to Postgres's binary format, one value at a time:
//! what binary COPY FROM and binary bind parameters take.

use arrow::array::{
    Array, BinaryArray, BooleanArray, Date32Array, Decimal128Array, FixedSizeBinaryArray,
    Float32Array, Float64Array, Int16Array, Int32Array, Int64Array, ListArray, StringArray,
    StructArray, Time64MicrosecondArray, TimestampMicrosecondArray,
};
use arrow::datatypes::DataType;
use bytes::{BufMut, BytesMut};

use super::error::{ColdError, ValueError};
use super::numeric::{self, Special};
use super::temporal;
use super::types::{ColdColumn, ColdType, NumericRepr, ScalarType};

/// Typed access to one column's array, checked once against its cold type.
pub(crate) enum ColumnView<'a> {
    /// A column the statement does not read (an Arrow `Null` array): every value NULL.
    Absent,
    Scalar(ScalarView<'a>),
    List {
        array: &'a ListArray,
        elements: ScalarView<'a>,
    },
}

/// Typed access to an array of one scalar type.
pub(crate) struct ScalarView<'a> {
    ty: ScalarType,
    values: ValuesView<'a>,
}

enum ValuesView<'a> {
    Int2(&'a Int16Array),
    Int4(&'a Int32Array),
    Int8(&'a Int64Array),
    Float4(&'a Float32Array),
    Float8(&'a Float64Array),
    Decimal {
        array: &'a StructArray,
        value: &'a Decimal128Array,
        special: &'a StringArray,
        scale: i8,
    },
    Utf8(&'a StringArray),
    Bool(&'a BooleanArray),
    Bytea(&'a BinaryArray),
    Date(&'a Date32Array),
    Time(&'a Time64MicrosecondArray),
    Timestamp(&'a TimestampMicrosecondArray),
    Interval {
        array: &'a StructArray,
        months: &'a Int32Array,
        days: &'a Int32Array,
        micros: &'a Int64Array,
    },
    Uuid(&'a FixedSizeBinaryArray),
}

fn downcast<'a, T: 'static>(array: &'a dyn Array, what: &str) -> Result<&'a T, ColdError> {
    array
        .as_any()
        .downcast_ref::<T>()
        .ok_or_else(|| ColdError::Schema(format!("{what}: unexpected array {}", array.data_type())))
}

fn child<'a, T: 'static>(
    array: &'a StructArray,
    index: usize,
    what: &str,
) -> Result<&'a T, ColdError> {
    if array.num_columns() <= index {
        return Err(ColdError::Schema(format!(
            "{what}: struct with {} children",
            array.num_columns()
        )));
    }
    downcast::<T>(array.column(index).as_ref(), what)
}

impl<'a> ColumnView<'a> {
    /// Checks that `array` holds column `column` and keeps typed references to it.
    ///
    /// # Errors
    /// [`ColdError::Schema`] when the array's type is not the column's cold type.
    pub(crate) fn new(column: &ColdColumn, array: &'a dyn Array) -> Result<Self, ColdError> {
        if array.data_type() == &DataType::Null {
            return Ok(ColumnView::Absent);
        }
        let expected = column.ty.data_type();
        // names and metadata of nested fields may differ after a Parquet round trip
        if !array.data_type().equals_datatype(&expected) {
            return Err(ColdError::Schema(format!(
                "column \"{}\" ({}) holds {}, expected {expected}",
                column.name,
                column.ty,
                array.data_type()
            )));
        }
        Ok(match column.ty {
            ColdType::Scalar(s) => ColumnView::Scalar(ScalarView::new(s, array, &column.name)?),
            ColdType::Array(s) => {
                let list = downcast::<ListArray>(array, &column.name)?;
                ColumnView::List {
                    array: list,
                    elements: ScalarView::new(s, list.values().as_ref(), &column.name)?,
                }
            }
        })
    }

    /// Writes value `row` in binary, or returns `false` for NULL (nothing written).
    ///
    /// # Errors
    /// A value that no Postgres value maps to (corrupt cold data).
    pub(crate) fn write(&self, row: usize, out: &mut BytesMut) -> Result<bool, ValueError> {
        match self {
            ColumnView::Absent => Ok(false),
            ColumnView::Scalar(v) => v.write(row, out),
            ColumnView::List { array, elements } => {
                if array.is_null(row) {
                    return Ok(false);
                }
                write_array(elements, array.value_offsets(), row, out)?;
                Ok(true)
            }
        }
    }
}

/// Postgres's array_send for a one-dimensional array with lower bound 1 (ndim 0 when
/// empty). The has-null flag is derived from the elements, as array_recv does.
fn write_array(
    elements: &ScalarView<'_>,
    offsets: &[i32],
    row: usize,
    out: &mut BytesMut,
) -> Result<(), ValueError> {
    let bad = || ValueError::malformed("array", "list offsets out of range");
    let start = offsets
        .get(row)
        .copied()
        .and_then(|o| usize::try_from(o).ok())
        .ok_or_else(bad)?;
    let end = offsets
        .get(row + 1)
        .copied()
        .and_then(|o| usize::try_from(o).ok())
        .ok_or_else(bad)?;
    let count = end.checked_sub(start).ok_or_else(bad)?;
    let has_null = (start..end).any(|i| elements.is_null(i));
    out.put_i32(if count == 0 { 0 } else { 1 });
    out.put_i32(i32::from(has_null));
    out.put_u32(elements.ty.type_oid());
    if count > 0 {
        out.put_i32(i32::try_from(count).map_err(|_| bad())?);
        out.put_i32(1);
    }
    for i in start..end {
        write_field(out, |out| elements.write(i, out))?;
    }
    Ok(())
}

/// Writes a length-prefixed field (-1 for NULL) around what `value` writes.
pub(crate) fn write_field<E>(
    out: &mut BytesMut,
    value: impl FnOnce(&mut BytesMut) -> Result<bool, E>,
) -> Result<(), E>
where
    E: From<ValueError>,
{
    let at = out.len();
    out.put_i32(-1);
    if value(out)? {
        let len = i32::try_from(out.len() - at - 4).map_err(|_| {
            ValueError::unrepresentable("value", "longer than 2 GiB in binary format")
        })?;
        out[at..at + 4].copy_from_slice(&len.to_be_bytes());
    }
    Ok(())
}

impl<'a> ScalarView<'a> {
    fn new(ty: ScalarType, array: &'a dyn Array, what: &str) -> Result<Self, ColdError> {
        let values = match ty {
            ScalarType::Int2 => ValuesView::Int2(downcast(array, what)?),
            ScalarType::Int4 => ValuesView::Int4(downcast(array, what)?),
            ScalarType::Int8 => ValuesView::Int8(downcast(array, what)?),
            ScalarType::Float4 => ValuesView::Float4(downcast(array, what)?),
            ScalarType::Float8 => ValuesView::Float8(downcast(array, what)?),
            ScalarType::Numeric(NumericRepr::Decimal { scale, .. }) => {
                let s = downcast::<StructArray>(array, what)?;
                ValuesView::Decimal {
                    array: s,
                    value: child(s, 0, what)?,
                    special: child(s, 1, what)?,
                    scale,
                }
            }
            ScalarType::Numeric(NumericRepr::Text)
            | ScalarType::Text(_)
            | ScalarType::Json
            | ScalarType::Jsonb => ValuesView::Utf8(downcast(array, what)?),
            ScalarType::Bool => ValuesView::Bool(downcast(array, what)?),
            ScalarType::Bytea => ValuesView::Bytea(downcast(array, what)?),
            ScalarType::Date => ValuesView::Date(downcast(array, what)?),
            ScalarType::Time => ValuesView::Time(downcast(array, what)?),
            ScalarType::Timestamp | ScalarType::Timestamptz => {
                ValuesView::Timestamp(downcast(array, what)?)
            }
            ScalarType::Interval => {
                let s = downcast::<StructArray>(array, what)?;
                ValuesView::Interval {
                    array: s,
                    months: child(s, 0, what)?,
                    days: child(s, 1, what)?,
                    micros: child(s, 2, what)?,
                }
            }
            ScalarType::Uuid => ValuesView::Uuid(downcast(array, what)?),
        };
        Ok(Self { ty, values })
    }

    fn is_null(&self, row: usize) -> bool {
        let array: &dyn Array = match &self.values {
            ValuesView::Int2(a) => *a,
            ValuesView::Int4(a) => *a,
            ValuesView::Int8(a) => *a,
            ValuesView::Float4(a) => *a,
            ValuesView::Float8(a) => *a,
            ValuesView::Decimal { array, .. } | ValuesView::Interval { array, .. } => *array,
            ValuesView::Utf8(a) => *a,
            ValuesView::Bool(a) => *a,
            ValuesView::Bytea(a) => *a,
            ValuesView::Date(a) => *a,
            ValuesView::Time(a) => *a,
            ValuesView::Timestamp(a) => *a,
            ValuesView::Uuid(a) => *a,
        };
        array.is_null(row)
    }

    /// Writes value `row` in binary, or returns `false` for NULL.
    fn write(&self, row: usize, out: &mut BytesMut) -> Result<bool, ValueError> {
        if self.is_null(row) {
            return Ok(false);
        }
        let name = self.ty.name();
        match &self.values {
            ValuesView::Int2(a) => out.put_i16(a.value(row)),
            ValuesView::Int4(a) => out.put_i32(a.value(row)),
            ValuesView::Int8(a) => out.put_i64(a.value(row)),
            ValuesView::Float4(a) => out.put_u32(a.value(row).to_bits()),
            ValuesView::Float8(a) => out.put_u64(a.value(row).to_bits()),
            ValuesView::Decimal {
                value,
                special,
                scale,
                ..
            } => {
                if special.is_valid(row) {
                    let text = special.value(row);
                    let s = Special::parse(text).ok_or_else(|| {
                        ValueError::malformed(name, format!("unknown special value {text:?}"))
                    })?;
                    numeric::write_special(s, out);
                } else if value.is_valid(row) {
                    numeric::write_decimal(value.value(row), *scale, out)?;
                } else {
                    return Err(ValueError::malformed(name, "neither a value nor a special"));
                }
            }
            ValuesView::Utf8(a) => {
                let text = a.value(row);
                match self.ty {
                    ScalarType::Numeric(_) => numeric::write_text_as_binary(text, out)?,
                    ScalarType::Jsonb => {
                        out.put_u8(1);
                        out.put_slice(text.as_bytes());
                    }
                    _ => out.put_slice(text.as_bytes()),
                }
            }
            ValuesView::Bool(a) => out.put_u8(u8::from(a.value(row))),
            ValuesView::Bytea(a) => out.put_slice(a.value(row)),
            ValuesView::Date(a) => out.put_i32(temporal::date_from_arrow(a.value(row))?),
            ValuesView::Time(a) => out.put_i64(temporal::check_time(a.value(row))?),
            ValuesView::Timestamp(a) => {
                out.put_i64(temporal::timestamp_from_arrow(name, a.value(row))?)
            }
            ValuesView::Interval {
                months,
                days,
                micros,
                ..
            } => {
                out.put_i64(micros.value(row));
                out.put_i32(days.value(row));
                out.put_i32(months.value(row));
            }
            ValuesView::Uuid(a) => {
                let v = a.value(row);
                if v.len() != 16 {
                    return Err(ValueError::malformed(name, format!("{} bytes", v.len())));
                }
                out.put_slice(v);
            }
        }
        Ok(true)
    }
}

/// Encodes the values of one column of a cold batch to Postgres's binary format, as bind
/// parameters take them; the array's type is checked once, at construction.
pub struct ColumnEncoder<'a> {
    column: &'a ColdColumn,
    len: usize,
    view: ColumnView<'a>,
}

impl<'a> ColumnEncoder<'a> {
    /// An encoder for `array`, which must hold column `column`.
    ///
    /// # Errors
    /// [`ColdError::Schema`] when the array is not of the column's cold type.
    pub fn new(column: &'a ColdColumn, array: &'a dyn Array) -> Result<Self, ColdError> {
        Ok(Self {
            column,
            len: array.len(),
            view: ColumnView::new(column, array)?,
        })
    }

    /// Number of values in the column.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the column holds no values.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends value `row` to `out`; returns the bytes written, or `None` for NULL (nothing
    /// written).
    ///
    /// # Errors
    /// [`ColdError::Schema`] for a row past the end, [`ColdError::Value`] when the value
    /// maps to no Postgres value (corrupt cold data).
    pub fn encode(&self, row: usize, out: &mut BytesMut) -> Result<Option<usize>, ColdError> {
        if row >= self.len {
            return Err(ColdError::Schema(format!(
                "row {row} of a column of {} values",
                self.len
            )));
        }
        let at = out.len();
        let written = self
            .view
            .write(row, out)
            .map_err(|source| ColdError::Value {
                column: self.column.name.clone(),
                row: row as u64,
                source,
            })?;
        Ok(written.then(|| out.len() - at))
    }
}

/// Appends value `row` of `array` (column `column` of a cold batch) to `out` in binary
/// format; see [`ColumnEncoder`], which checks the array once for many values.
///
/// # Errors
/// As [`ColumnEncoder::new`] and [`ColumnEncoder::encode`].
pub fn encode_value(
    column: &ColdColumn,
    array: &dyn Array,
    row: usize,
    out: &mut BytesMut,
) -> Result<Option<usize>, ColdError> {
    ColumnEncoder::new(column, array)?.encode(row, out)
}
