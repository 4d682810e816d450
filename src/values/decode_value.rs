//! One Arrow builder per cold column, fed with values in Postgres's binary format (the
//! fields of a binary COPY tuple).

use std::sync::Arc;

use arrow::array::NullBufferBuilder;
use arrow::array::{
    ArrayRef, BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder,
    FixedSizeBinaryBuilder, Float32Builder, Float64Builder, Int16Builder, Int32Builder,
    Int64Builder, ListArray, StringBuilder, StructArray, Time64MicrosecondBuilder,
    TimestampMicrosecondBuilder,
};
use arrow::buffer::{OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, Field};
use arrow::error::ArrowError;

use super::error::ValueError;
use super::numeric::{self, Parsed};
use super::temporal;
use super::types::{ColdType, NumericRepr, ScalarType};

/// Builds the Arrow array of one cold column.
pub(crate) enum ColumnBuilder {
    Scalar(ScalarBuilder),
    List(ListBuilder),
}

/// Builds a column of one scalar type.
pub(crate) struct ScalarBuilder {
    ty: ScalarType,
    values: Values,
    /// Reused for rendering numerics as text.
    scratch: String,
}

enum Values {
    Int2(Int16Builder),
    Int4(Int32Builder),
    Int8(Int64Builder),
    Float4(Float32Builder),
    Float8(Float64Builder),
    /// numeric(p, s): the decimal, the special's text, and the struct's validity.
    Decimal {
        value: Decimal128Builder,
        special: StringBuilder,
        nulls: NullBufferBuilder,
        precision: u8,
        scale: i8,
    },
    /// text, varchar, bpchar, json, jsonb, unconstrained numeric.
    Utf8(StringBuilder),
    Bool(BooleanBuilder),
    Bytea(BinaryBuilder),
    Date(Date32Builder),
    Time(Time64MicrosecondBuilder),
    Timestamp(TimestampMicrosecondBuilder),
    Interval {
        months: Int32Builder,
        days: Int32Builder,
        micros: Int64Builder,
        nulls: NullBufferBuilder,
    },
    Uuid(FixedSizeBinaryBuilder),
}

/// Builds a one-dimensional array column as an Arrow List.
pub(crate) struct ListBuilder {
    elements: ScalarBuilder,
    offsets: Vec<i32>,
    nulls: NullBufferBuilder,
    item: Arc<Field>,
}

impl ColumnBuilder {
    /// An empty builder for a column of `ty`.
    ///
    /// # Errors
    /// An Arrow error for an impossible decimal precision (types.rs never produces one).
    pub(crate) fn new(ty: &ColdType, capacity: usize) -> Result<Self, ArrowError> {
        Ok(match ty {
            ColdType::Scalar(s) => ColumnBuilder::Scalar(ScalarBuilder::new(*s, capacity)?),
            ColdType::Array(s) => {
                let DataType::List(item) = ty.data_type() else {
                    return Err(ArrowError::SchemaError(
                        "array column without a list type".into(),
                    ));
                };
                let mut offsets = Vec::with_capacity(capacity + 1);
                offsets.push(0);
                ColumnBuilder::List(ListBuilder {
                    elements: ScalarBuilder::new(*s, capacity)?,
                    offsets,
                    nulls: NullBufferBuilder::new(capacity),
                    item,
                })
            }
        })
    }

    /// Appends one field: `None` for NULL, else the value's binary bytes.
    ///
    /// # Errors
    /// Malformed bytes, or a value that could not come back exactly. The builder is then in
    /// an unspecified state and must be dropped.
    pub(crate) fn append(&mut self, field: Option<&[u8]>) -> Result<(), ValueError> {
        match self {
            ColumnBuilder::Scalar(b) => b.append(field),
            ColumnBuilder::List(b) => b.append(field),
        }
    }

    /// The array of the values appended since the last call.
    ///
    /// # Errors
    /// An Arrow error if the parts do not assemble (a bug, not a data problem).
    pub(crate) fn finish(&mut self) -> Result<ArrayRef, ArrowError> {
        match self {
            ColumnBuilder::Scalar(b) => b.finish(),
            ColumnBuilder::List(b) => b.finish(),
        }
    }
}

/// Reads exactly N bytes of a fixed-width value.
fn fixed<const N: usize>(ty: &'static str, bytes: &[u8]) -> Result<[u8; N], ValueError> {
    bytes
        .try_into()
        .map_err(|_| ValueError::malformed(ty, format!("{} bytes, expected {N}", bytes.len())))
}

fn utf8<'a>(ty: &'static str, bytes: &'a [u8]) -> Result<&'a str, ValueError> {
    std::str::from_utf8(bytes).map_err(|e| ValueError::malformed(ty, format!("invalid UTF-8: {e}")))
}

impl ScalarBuilder {
    fn new(ty: ScalarType, capacity: usize) -> Result<Self, ArrowError> {
        let values = match ty {
            ScalarType::Int2 => Values::Int2(Int16Builder::with_capacity(capacity)),
            ScalarType::Int4 => Values::Int4(Int32Builder::with_capacity(capacity)),
            ScalarType::Int8 => Values::Int8(Int64Builder::with_capacity(capacity)),
            ScalarType::Float4 => Values::Float4(Float32Builder::with_capacity(capacity)),
            ScalarType::Float8 => Values::Float8(Float64Builder::with_capacity(capacity)),
            ScalarType::Numeric(NumericRepr::Decimal { precision, scale }) => Values::Decimal {
                value: Decimal128Builder::with_capacity(capacity)
                    .with_precision_and_scale(precision, scale)?,
                special: StringBuilder::new(),
                nulls: NullBufferBuilder::new(capacity),
                precision,
                scale,
            },
            ScalarType::Numeric(NumericRepr::Text)
            | ScalarType::Text(_)
            | ScalarType::Json
            | ScalarType::Jsonb => {
                Values::Utf8(StringBuilder::with_capacity(capacity, capacity * 16))
            }
            ScalarType::Bool => Values::Bool(BooleanBuilder::with_capacity(capacity)),
            ScalarType::Bytea => {
                Values::Bytea(BinaryBuilder::with_capacity(capacity, capacity * 16))
            }
            ScalarType::Date => Values::Date(Date32Builder::with_capacity(capacity)),
            ScalarType::Time => Values::Time(Time64MicrosecondBuilder::with_capacity(capacity)),
            ScalarType::Timestamp => {
                Values::Timestamp(TimestampMicrosecondBuilder::with_capacity(capacity))
            }
            ScalarType::Timestamptz => Values::Timestamp(
                TimestampMicrosecondBuilder::with_capacity(capacity).with_timezone("UTC"),
            ),
            ScalarType::Interval => Values::Interval {
                months: Int32Builder::with_capacity(capacity),
                days: Int32Builder::with_capacity(capacity),
                micros: Int64Builder::with_capacity(capacity),
                nulls: NullBufferBuilder::new(capacity),
            },
            ScalarType::Uuid => Values::Uuid(FixedSizeBinaryBuilder::with_capacity(capacity, 16)),
        };
        Ok(Self {
            ty,
            values,
            scratch: String::new(),
        })
    }

    fn append(&mut self, field: Option<&[u8]>) -> Result<(), ValueError> {
        match field {
            None => {
                self.append_null();
                Ok(())
            }
            Some(bytes) => self.append_value(bytes),
        }
    }

    fn append_null(&mut self) {
        match &mut self.values {
            Values::Int2(b) => b.append_null(),
            Values::Int4(b) => b.append_null(),
            Values::Int8(b) => b.append_null(),
            Values::Float4(b) => b.append_null(),
            Values::Float8(b) => b.append_null(),
            Values::Decimal {
                value,
                special,
                nulls,
                ..
            } => {
                value.append_null();
                special.append_null();
                nulls.append_null();
            }
            Values::Utf8(b) => b.append_null(),
            Values::Bool(b) => b.append_null(),
            Values::Bytea(b) => b.append_null(),
            Values::Date(b) => b.append_null(),
            Values::Time(b) => b.append_null(),
            Values::Timestamp(b) => b.append_null(),
            Values::Interval {
                months,
                days,
                micros,
                nulls,
            } => {
                // children are non-nullable: a masked zero under the struct's null
                months.append_value(0);
                days.append_value(0);
                micros.append_value(0);
                nulls.append_null();
            }
            Values::Uuid(b) => b.append_null(),
        }
    }

    fn append_value(&mut self, bytes: &[u8]) -> Result<(), ValueError> {
        let name = self.ty.name();
        match &mut self.values {
            Values::Int2(b) => b.append_value(i16::from_be_bytes(fixed(name, bytes)?)),
            Values::Int4(b) => b.append_value(i32::from_be_bytes(fixed(name, bytes)?)),
            Values::Int8(b) => b.append_value(i64::from_be_bytes(fixed(name, bytes)?)),
            Values::Float4(b) => {
                b.append_value(f32::from_bits(u32::from_be_bytes(fixed(name, bytes)?)))
            }
            Values::Float8(b) => {
                b.append_value(f64::from_bits(u64::from_be_bytes(fixed(name, bytes)?)))
            }
            Values::Decimal {
                value,
                special,
                nulls,
                precision,
                scale,
            } => {
                match numeric::parse(bytes)? {
                    Parsed::Finite(n) => {
                        value.append_value(n.to_decimal(*precision, *scale)?);
                        special.append_null();
                    }
                    Parsed::Special(s) => {
                        value.append_null();
                        special.append_value(s.as_str());
                    }
                }
                nulls.append_non_null();
            }
            Values::Utf8(b) => match self.ty {
                ScalarType::Numeric(_) => {
                    self.scratch.clear();
                    match numeric::parse(bytes)? {
                        Parsed::Finite(n) => n.write_text(&mut self.scratch),
                        Parsed::Special(s) => self.scratch.push_str(s.as_str()),
                    }
                    b.append_value(&self.scratch);
                }
                ScalarType::Jsonb => match bytes.split_first() {
                    Some((1, text)) => b.append_value(utf8(name, text)?),
                    Some((v, _)) => {
                        return Err(ValueError::malformed(
                            name,
                            format!("unsupported jsonb version {v}"),
                        ))
                    }
                    None => return Err(ValueError::malformed(name, "empty value")),
                },
                _ => b.append_value(utf8(name, bytes)?),
            },
            Values::Bool(b) => match bytes {
                [0] => b.append_value(false),
                [1] => b.append_value(true),
                _ => return Err(ValueError::malformed(name, "expected one byte 0 or 1")),
            },
            Values::Bytea(b) => b.append_value(bytes),
            Values::Date(b) => b.append_value(temporal::date_to_arrow(i32::from_be_bytes(fixed(
                name, bytes,
            )?))?),
            Values::Time(b) => b.append_value(temporal::check_time(i64::from_be_bytes(fixed(
                name, bytes,
            )?))?),
            Values::Timestamp(b) => b.append_value(temporal::timestamp_to_arrow(
                name,
                i64::from_be_bytes(fixed(name, bytes)?),
            )?),
            Values::Interval {
                months,
                days,
                micros,
                nulls,
            } => {
                let v: [u8; 16] = fixed(name, bytes)?;
                let (time, rest) = v.split_at(8);
                let (day, month) = rest.split_at(4);
                micros.append_value(i64::from_be_bytes(fixed(name, time)?));
                days.append_value(i32::from_be_bytes(fixed(name, day)?));
                months.append_value(i32::from_be_bytes(fixed(name, month)?));
                nulls.append_non_null();
            }
            Values::Uuid(b) => {
                let v: [u8; 16] = fixed(name, bytes)?;
                b.append_value(v)
                    .map_err(|e| ValueError::malformed(name, e.to_string()))?;
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<ArrayRef, ArrowError> {
        Ok(match &mut self.values {
            Values::Int2(b) => Arc::new(b.finish()),
            Values::Int4(b) => Arc::new(b.finish()),
            Values::Int8(b) => Arc::new(b.finish()),
            Values::Float4(b) => Arc::new(b.finish()),
            Values::Float8(b) => Arc::new(b.finish()),
            Values::Decimal {
                value,
                special,
                nulls,
                ..
            } => {
                let DataType::Struct(fields) = self.ty.data_type() else {
                    return Err(ArrowError::SchemaError(
                        "numeric without a struct type".into(),
                    ));
                };
                Arc::new(StructArray::try_new(
                    fields,
                    vec![Arc::new(value.finish()), Arc::new(special.finish())],
                    nulls.finish(),
                )?)
            }
            Values::Utf8(b) => Arc::new(b.finish()),
            Values::Bool(b) => Arc::new(b.finish()),
            Values::Bytea(b) => Arc::new(b.finish()),
            Values::Date(b) => Arc::new(b.finish()),
            Values::Time(b) => Arc::new(b.finish()),
            Values::Timestamp(b) => Arc::new(b.finish()),
            Values::Interval {
                months,
                days,
                micros,
                nulls,
            } => {
                let DataType::Struct(fields) = self.ty.data_type() else {
                    return Err(ArrowError::SchemaError(
                        "interval without a struct type".into(),
                    ));
                };
                let children: Vec<ArrayRef> = vec![
                    Arc::new(months.finish()),
                    Arc::new(days.finish()),
                    Arc::new(micros.finish()),
                ];
                Arc::new(StructArray::try_new(fields, children, nulls.finish())?)
            }
            Values::Uuid(b) => Arc::new(b.finish()),
        })
    }
}

/// Reads big-endian integers off the front of an array value.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.bytes.len() < n {
            return None;
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Some(head)
    }

    fn i32(&mut self) -> Option<i32> {
        self.take(4)
            .and_then(|b| b.try_into().ok())
            .map(i32::from_be_bytes)
    }
}

impl ListBuilder {
    /// Postgres's array_send: ndim, has-null flag, element type OID, (length, lower bound)
    /// per dimension, then each element as a length (-1 for NULL) and its bytes.
    fn append(&mut self, field: Option<&[u8]>) -> Result<(), ValueError> {
        let Some(bytes) = field else {
            self.nulls.append_null();
            let last = self.offsets.last().copied().unwrap_or(0);
            self.offsets.push(last);
            return Ok(());
        };
        let ty = "array";
        let truncated = || ValueError::malformed(ty, "value ends early");
        let mut r = Reader { bytes };
        let ndim = r.i32().ok_or_else(truncated)?;
        let flags = r.i32().ok_or_else(truncated)?;
        let elem_oid = r.i32().ok_or_else(truncated)? as u32;
        if flags != 0 && flags != 1 {
            return Err(ValueError::malformed(ty, format!("invalid flags {flags}")));
        }
        let expected_oid = self.elements.ty.type_oid();
        if elem_oid != expected_oid {
            return Err(ValueError::malformed(
                ty,
                format!("element type OID {elem_oid}, expected {expected_oid}"),
            ));
        }
        let count = match ndim {
            0 => 0,
            1 => {
                let len = r.i32().ok_or_else(truncated)?;
                let lower = r.i32().ok_or_else(truncated)?;
                if len <= 0 {
                    // Postgres sends an empty array with ndim 0
                    return Err(ValueError::malformed(
                        ty,
                        format!("dimension of length {len}"),
                    ));
                }
                if lower != 1 {
                    return Err(ValueError::unrepresentable(
                        ty,
                        format!("lower bound {lower} (only arrays starting at index 1 are stored; Arrow lists have no lower bound)"),
                    ));
                }
                len as usize
            }
            n if n > 1 => {
                return Err(ValueError::unrepresentable(
                    ty,
                    format!("{n}-dimensional array (only one-dimensional arrays are stored)"),
                ));
            }
            n => {
                return Err(ValueError::malformed(
                    ty,
                    format!("invalid number of dimensions {n}"),
                ))
            }
        };
        for i in 0..count {
            let len = r.i32().ok_or_else(truncated)?;
            let element = match len {
                -1 => None,
                n if n >= 0 => Some(r.take(n as usize).ok_or_else(|| {
                    ValueError::malformed(
                        ty,
                        format!(
                            "element {} declares {n} bytes, more than the value holds",
                            i + 1
                        ),
                    )
                })?),
                n => {
                    return Err(ValueError::malformed(
                        ty,
                        format!("element {} has length {n}", i + 1),
                    ))
                }
            };
            self.elements
                .append(element)
                .map_err(|e| in_element(e, i + 1))?;
        }
        if !r.bytes.is_empty() {
            return Err(ValueError::malformed(
                ty,
                format!("{} bytes after the last element", r.bytes.len()),
            ));
        }
        let last = self.offsets.last().copied().unwrap_or(0);
        let next = i32::try_from(count)
            .ok()
            .and_then(|c| last.checked_add(c))
            .ok_or_else(|| {
                ValueError::unrepresentable(ty, "more than 2^31 elements in one batch")
            })?;
        self.offsets.push(next);
        self.nulls.append_non_null();
        Ok(())
    }

    fn finish(&mut self) -> Result<ArrayRef, ArrowError> {
        let offsets = std::mem::replace(&mut self.offsets, vec![0]);
        let values = self.elements.finish()?;
        let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
        Ok(Arc::new(ListArray::try_new(
            Arc::clone(&self.item),
            offsets,
            values,
            self.nulls.finish(),
        )?))
    }
}

/// Names the array element an error is about.
fn in_element(e: ValueError, index: usize) -> ValueError {
    match e {
        ValueError::Malformed { ty, detail } => ValueError::Malformed {
            ty,
            detail: format!("array element {index}: {detail}"),
        },
        ValueError::Unrepresentable { ty, detail } => ValueError::Unrepresentable {
            ty,
            detail: format!("array element {index}: {detail}"),
        },
    }
}
