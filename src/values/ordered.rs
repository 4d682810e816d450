//! The order-preserving byte encoding of cold values (DESIGN §3, "memcomparable"): for two
//! values `a` and `b` of one column type, `a < b` in Postgres's order exactly when
//! `encode(a) < encode(b)` compared bytewise. `coldwire.segment_stats` and the pk bounds of
//! `coldwire.segments` hold values in this encoding, so the cold planner compares its own
//! constants (encoded the same way) with them without knowing the column's type.
//!
//! | type | encoding |
//! |---|---|
//! | int2, int4, int8, date (days), time, timestamp, timestamptz (µs) | the value widened to i64, big-endian, sign bit flipped (8 bytes); ±infinity are `i64`'s or `i32`'s extremes, so they sort at the ends |
//! | float4, float8 | the value widened to f64, -0 taken as +0, IEEE bits with the sign bit flipped (negatives: all bits flipped) (8 bytes); NaN has no encoding and is counted apart (`nan_count`) |
//! | numeric(p, s) | the unscaled i128 at the column's scale, big-endian, sign bit flipped (16 bytes); segment stats count NaN and ±Infinity apart (`nan_count`), predicates place them past every finite value ([`numeric_special`]) |
//! | bool | one byte, 0 or 1 |
//! | text, varchar, bytea, uuid | the bytes themselves: byte order, which is text's order under the C collation only |
//!
//! Types without a meaningful byte order (bpchar, whose comparison ignores trailing blanks;
//! unconstrained numeric, stored as text; interval; json; jsonb; arrays) get no stats.
//!
//! A key of several columns (a composite primary key) is the concatenation of its
//! components; variable-length components are escaped (0x00 → 0x00 0xFF) and terminated by
//! 0x00 0x01, so no component is a prefix of another and the order stays column by column.

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, Time64MicrosecondType, TimeUnit, TimestampMicrosecondType,
};

use super::numeric::Special;
use super::types::{NumericRepr, ScalarType, TextKind};

/// Whether stats of a column of type `scalar` are meaningful in this encoding.
pub fn has_order(scalar: ScalarType) -> bool {
    match scalar {
        ScalarType::Int2
        | ScalarType::Int4
        | ScalarType::Int8
        | ScalarType::Float4
        | ScalarType::Float8
        | ScalarType::Bool
        | ScalarType::Bytea
        | ScalarType::Date
        | ScalarType::Time
        | ScalarType::Timestamp
        | ScalarType::Timestamptz
        | ScalarType::Uuid
        | ScalarType::Numeric(NumericRepr::Decimal { .. }) => true,
        ScalarType::Text(kind) => kind != TextKind::Bpchar,
        ScalarType::Numeric(NumericRepr::Text)
        | ScalarType::Interval
        | ScalarType::Json
        | ScalarType::Jsonb => false,
    }
}

/// An integer-like value (int2/4/8, date, time, timestamp, timestamptz).
pub fn int(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

/// The integer whose encoding [`int`] gave `bytes`.
pub fn int_from(bytes: &[u8]) -> Option<i64> {
    let bytes: [u8; 8] = bytes.try_into().ok()?;
    Some((u64::from_be_bytes(bytes) ^ (1 << 63)) as i64)
}

/// A float4 or float8; `None` for NaN, which sorts above every number in Postgres and is
/// counted apart.
pub fn float(v: f64) -> Option<[u8; 8]> {
    if v.is_nan() {
        return None;
    }
    // -0 = +0 in Postgres: one encoding for both.
    let v = if v == 0.0 { 0.0 } else { v };
    let bits = v.to_bits();
    let ordered = if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    };
    Some(ordered.to_be_bytes())
}

/// An unscaled numeric(p, s) value.
pub fn decimal(v: i128) -> [u8; 16] {
    ((v as u128) ^ (1 << 127)).to_be_bytes()
}

/// A numeric special where numeric's order puts it (-Infinity below every finite value,
/// Infinity above them, NaN above all and equal to itself): unscaled values past every
/// Decimal128(38) value. Predicates and the cells they judge use these; segment stats
/// keep the specials apart (`nan_count`), and the planner places them when it loads the
/// stats (`segment::prune::ColumnStats::place_specials`).
pub fn numeric_special(s: Special) -> [u8; 16] {
    decimal(match s {
        Special::NegInf => i128::MIN,
        Special::PosInf => i128::MAX - 1,
        Special::NaN => i128::MAX,
    })
}

/// A bool.
pub fn boolean(v: bool) -> [u8; 1] {
    [u8::from(v)]
}

/// One variable-length component of a composite key, escaped and terminated.
pub fn push_bytes_component(out: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0x00, 0x01]);
}

/// The big-endian two's-complement bytes of a decimal (Parquet's FIXED_LEN_BYTE_ARRAY or
/// BYTE_ARRAY decimal) as an i128; `None` when longer than 16 bytes.
pub fn i128_from_be(bytes: &[u8]) -> Option<i128> {
    if bytes.is_empty() || bytes.len() > 16 {
        return None;
    }
    let fill = if bytes[0] & 0x80 != 0 { 0xFF } else { 0x00 };
    let mut buf = [fill; 16];
    buf[16 - bytes.len()..].copy_from_slice(bytes);
    Some(i128::from_be_bytes(buf))
}

/// Appends the composite-key encoding of `array[row]` (one key column) to `out`; false for
/// a NULL or a type keys cannot have.
pub fn push_key_component(out: &mut Vec<u8>, array: &dyn Array, row: usize) -> bool {
    if array.is_null(row) {
        return false;
    }
    match array.data_type() {
        DataType::Utf8 => push_bytes_component(out, array.as_string::<i32>().value(row).as_bytes()),
        DataType::Binary => push_bytes_component(out, array.as_binary::<i32>().value(row)),
        // A numeric key's specials have no key encoding (as before predicates placed them).
        DataType::Struct(fields)
            if matches!(fields[0].data_type(), DataType::Decimal128(..))
                && array.as_struct().column(1).is_valid(row) =>
        {
            return false
        }
        _ => match cell(array, row) {
            Cell::Value(bytes) => out.extend_from_slice(&bytes),
            Cell::Null | Cell::Unordered | Cell::Unknown => return false,
        },
    }
    true
}

/// One stored value as a predicate sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell<'a> {
    Null,
    /// A value outside the order: float NaN.
    Unordered,
    /// A value of a type without a byte order: no predicate can judge it.
    Unknown,
    /// The value's order-preserving encoding.
    Value(Encoded<'a>),
}

/// An order-preserving encoding without an allocation: fixed-width ones (at most 16
/// bytes) inline, text and bytes borrowed from their array.
#[derive(Debug, Clone, Copy)]
pub enum Encoded<'a> {
    Inline([u8; 16], u8),
    Borrowed(&'a [u8]),
}

impl std::ops::Deref for Encoded<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Encoded::Inline(bytes, len) => &bytes[..usize::from(*len)],
            Encoded::Borrowed(bytes) => bytes,
        }
    }
}

impl PartialEq for Encoded<'_> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Encoded<'_> {}

impl Encoded<'_> {
    fn inline(bytes: &[u8]) -> Self {
        let mut out = [0u8; 16];
        out[..bytes.len()].copy_from_slice(bytes);
        Encoded::Inline(out, bytes.len() as u8)
    }
}

/// The encoding of `array[row]` as stored cold (the Arrow type of the column decides).
pub fn cell(array: &dyn Array, row: usize) -> Cell<'_> {
    if array.is_null(row) {
        return Cell::Null;
    }
    let value = |b: &[u8]| Cell::Value(Encoded::inline(b));
    match array.data_type() {
        DataType::Int16 => value(&int(array.as_primitive::<Int16Type>().value(row).into())),
        DataType::Int32 => value(&int(array.as_primitive::<Int32Type>().value(row).into())),
        DataType::Int64 => value(&int(array.as_primitive::<Int64Type>().value(row))),
        DataType::Date32 => value(&int(array.as_primitive::<Date32Type>().value(row).into())),
        DataType::Time64(TimeUnit::Microsecond) => value(&int(array
            .as_primitive::<Time64MicrosecondType>()
            .value(row))),
        DataType::Timestamp(TimeUnit::Microsecond, _) => value(&int(array
            .as_primitive::<TimestampMicrosecondType>()
            .value(row))),
        DataType::Float32 => float(array.as_primitive::<Float32Type>().value(row).into())
            .map_or(Cell::Unordered, |b| value(&b)),
        DataType::Float64 => float(array.as_primitive::<Float64Type>().value(row))
            .map_or(Cell::Unordered, |b| value(&b)),
        DataType::Boolean => value(&boolean(array.as_boolean().value(row))),
        DataType::Utf8 => Cell::Value(Encoded::Borrowed(
            array.as_string::<i32>().value(row).as_bytes(),
        )),
        DataType::Binary => Cell::Value(Encoded::Borrowed(array.as_binary::<i32>().value(row))),
        DataType::FixedSizeBinary(_) => {
            Cell::Value(Encoded::Borrowed(array.as_fixed_size_binary().value(row)))
        }
        DataType::Struct(fields)
            if fields.len() == 2 && matches!(fields[0].data_type(), DataType::Decimal128(..)) =>
        {
            // numeric(p, s): {value, special}; a set `special` is NaN or an infinity.
            let parts = array.as_struct();
            if parts.column(1).is_valid(row) {
                Special::parse(parts.column(1).as_string::<i32>().value(row))
                    .map_or(Cell::Unknown, |s| value(&numeric_special(s)))
            } else {
                value(&decimal(
                    parts.column(0).as_primitive::<Decimal128Type>().value(row),
                ))
            }
        }
        _ => Cell::Unknown,
    }
}

/// The composite-key encoding of row `row` of `batch` over the key columns at `positions`
/// (each component as [`push_key_component`] writes it); `None` when a component is NULL.
pub fn encode_key(batch: &RecordBatch, positions: &[usize], row: usize) -> Option<Vec<u8>> {
    let mut key = Vec::new();
    positions
        .iter()
        .all(|&p| push_key_component(&mut key, batch.column(p).as_ref(), row))
        .then_some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted_by_encoding<T: Copy, E: Ord>(values: &[T], enc: impl Fn(T) -> E) -> bool {
        values.windows(2).all(|w| enc(w[0]) < enc(w[1]))
    }

    #[test]
    fn integers_keep_their_order_across_zero_and_extremes() {
        let v = [
            i64::MIN,
            i32::MIN as i64,
            -2,
            -1,
            0,
            1,
            2,
            i32::MAX as i64,
            i64::MAX,
        ];
        assert!(sorted_by_encoding(&v, int));
    }

    #[test]
    fn floats_keep_their_order_and_zeroes_are_one_value() {
        let v = [
            f64::NEG_INFINITY,
            f64::MIN,
            -1.5,
            -f64::MIN_POSITIVE,
            0.0,
            f64::MIN_POSITIVE,
            1.5,
            f64::MAX,
            f64::INFINITY,
        ];
        assert!(sorted_by_encoding(&v, |x| float(x).unwrap()));
        assert_eq!(float(-0.0), float(0.0));
        assert_eq!(float(f64::NAN), None);
        assert_eq!(
            float(f32::MIN as f64).map(|b| b < float(-1.0).unwrap()),
            Some(true)
        );
    }

    #[test]
    fn decimals_keep_their_order() {
        let v = [
            i128::MIN,
            -10i128.pow(37),
            -1,
            0,
            1,
            10i128.pow(37),
            i128::MAX,
        ];
        assert!(sorted_by_encoding(&v, decimal));
        assert_eq!(i128_from_be(&[0xFF, 0xFE]), Some(-2));
        assert_eq!(i128_from_be(&[0x01, 0x00]), Some(256));
        assert_eq!(i128_from_be(&[0; 17]), None);
    }

    #[test]
    fn composite_keys_order_column_by_column() {
        let key = |a: &[u8], b: i64| {
            let mut out = Vec::new();
            push_bytes_component(&mut out, a);
            out.extend_from_slice(&int(b));
            out
        };
        // A shorter first component sorts first whatever follows it, also around 0x00.
        let keys = [
            key(b"a", i64::MAX),
            key(b"a\0", i64::MIN),
            key(b"a\0\0", 0),
            key(b"a\x01", 0),
            key(b"ab", -1),
            key(b"ab", 0),
        ];
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
    }

    #[test]
    fn only_types_with_a_byte_order_get_stats() {
        assert!(has_order(ScalarType::Text(TextKind::Varchar)));
        assert!(!has_order(ScalarType::Text(TextKind::Bpchar)));
        assert!(!has_order(ScalarType::Numeric(NumericRepr::Text)));
        assert!(has_order(ScalarType::Numeric(NumericRepr::Decimal {
            precision: 10,
            scale: 2
        })));
        assert!(!has_order(ScalarType::Jsonb));
    }
}
