//! Which Postgres column types can go cold, and the Arrow type (so the Parquet logical type)
//! each one is stored as.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields, Schema, TimeUnit};

/// Arrow's canonical extension-type keys; parquet 59 writes `arrow.uuid` as the Parquet UUID
/// logical type and `arrow.json` as JSON (feature `arrow_canonical_extension_types`).
const EXTENSION_NAME_KEY: &str = "ARROW:extension:name";
const EXTENSION_METADATA_KEY: &str = "ARROW:extension:metadata";

/// Largest precision an Arrow `Decimal128` holds.
pub const DECIMAL128_MAX_PRECISION: u8 = 38;

/// Postgres's VARHDRSZ, the offset numeric and varchar typmods carry.
const VARHDRSZ: i32 = 4;

/// How one Postgres column is stored cold: a scalar type, or a one-dimensional array of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColdType {
    /// A scalar column.
    Scalar(ScalarType),
    /// A one-dimensional array with lower bound 1 (others are refused when decoded).
    Array(ScalarType),
}

/// The supported scalar types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScalarType {
    /// int2 → Int16.
    Int2,
    /// int4 → Int32.
    Int4,
    /// int8 → Int64.
    Int8,
    /// float4 → Float32 (bit pattern kept: NaN payloads, -0.0).
    Float4,
    /// float8 → Float64 (bit pattern kept).
    Float8,
    /// numeric, see [`NumericRepr`].
    Numeric(NumericRepr),
    /// text, varchar and bpchar → Utf8, exactly the bytes Postgres sends (bpchar padding kept).
    Text(TextKind),
    /// bool → Boolean.
    Bool,
    /// bytea → Binary.
    Bytea,
    /// date → Date32 (days since 1970); ±infinity as `i32::MIN`/`i32::MAX`.
    Date,
    /// time → Time64(µs); `24:00:00` is kept as 86 400 000 000.
    Time,
    /// timestamp → Timestamp(µs, None); ±infinity as `i64::MIN`/`i64::MAX`.
    Timestamp,
    /// timestamptz → Timestamp(µs, "UTC"); ±infinity as `i64::MIN`/`i64::MAX`.
    Timestamptz,
    /// interval → Struct{months: Int32, days: Int32, micros: Int64}.
    Interval,
    /// uuid → FixedSizeBinary(16), Parquet logical type UUID.
    Uuid,
    /// json → Utf8 (the text exactly as stored), Parquet logical type JSON.
    Json,
    /// jsonb → Utf8 (its canonical text, without the version byte), Parquet logical type JSON.
    Jsonb,
}

/// The three character types share one representation; the kind gives the type OID back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextKind {
    Text,
    Varchar,
    Bpchar,
}

/// How a numeric column is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumericRepr {
    /// numeric(p, s) with 0 ≤ s ≤ p ≤ 38: Struct{value: Decimal128(p, s), special: Utf8}.
    /// `special` is NULL for finite values and `NaN`, `Infinity` or `-Infinity` otherwise
    /// (then `value` is NULL); Postgres allows these in a constrained numeric too.
    Decimal { precision: u8, scale: i8 },
    /// numeric without declared precision, or one Decimal128 cannot hold: Utf8, Postgres's
    /// own text of the value (display scale, NaN and ±Infinity included).
    Text,
}

/// A column coldwire cannot store cold, with the type named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("column type {name} (OID {type_oid}) cannot be stored cold: {reason}")]
pub struct UnsupportedType {
    pub type_oid: u32,
    /// The built-in type's name, `format_type`'s text when the caller supplied it, else "?".
    pub name: String,
    pub reason: &'static str,
}

impl UnsupportedType {
    /// The same refusal with the type's name as Postgres prints it (`format_type`).
    pub fn with_type_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }
}

/// Built-in scalar types: (type OID, array type OID, scalar).
const BUILTINS: [(u32, u32, ScalarType); 19] = [
    (16, 1000, ScalarType::Bool),
    (17, 1001, ScalarType::Bytea),
    (20, 1016, ScalarType::Int8),
    (21, 1005, ScalarType::Int2),
    (23, 1007, ScalarType::Int4),
    (25, 1009, ScalarType::Text(TextKind::Text)),
    (114, 199, ScalarType::Json),
    (700, 1021, ScalarType::Float4),
    (701, 1022, ScalarType::Float8),
    (1042, 1014, ScalarType::Text(TextKind::Bpchar)),
    (1043, 1015, ScalarType::Text(TextKind::Varchar)),
    (1082, 1182, ScalarType::Date),
    (1083, 1183, ScalarType::Time),
    (1114, 1115, ScalarType::Timestamp),
    (1184, 1185, ScalarType::Timestamptz),
    (1186, 1187, ScalarType::Interval),
    // numeric's repr depends on the typmod; the placeholder is replaced in `for_column`.
    (1700, 1231, ScalarType::Numeric(NumericRepr::Text)),
    (2950, 2951, ScalarType::Uuid),
    (3802, 3807, ScalarType::Jsonb),
];

/// Names of common built-in types coldwire refuses, so the refusal names them.
const UNSUPPORTED_NAMES: [(u32, &str); 34] = [
    (18, "\"char\""),
    (19, "name"),
    (26, "oid"),
    (142, "xml"),
    (600, "point"),
    (601, "lseg"),
    (602, "path"),
    (603, "box"),
    (604, "polygon"),
    (628, "line"),
    (650, "cidr"),
    (718, "circle"),
    (774, "macaddr8"),
    (790, "money"),
    (829, "macaddr"),
    (869, "inet"),
    (1266, "time with time zone"),
    (1560, "bit"),
    (1562, "bit varying"),
    (2249, "record"),
    (3614, "tsvector"),
    (3615, "tsquery"),
    (3904, "int4range"),
    (3906, "numrange"),
    (3908, "tsrange"),
    (3910, "tstzrange"),
    (3912, "daterange"),
    (3926, "int8range"),
    (4072, "jsonpath"),
    (4451, "int4multirange"),
    (5038, "pg_snapshot"),
    (5069, "xid8"),
    (28, "xid"),
    (1790, "refcursor"),
];

impl ColdType {
    /// Whether a column of this type can be a policy's `age_column` (date, timestamp,
    /// timestamptz).
    pub fn can_age(&self) -> bool {
        matches!(
            self,
            ColdType::Scalar(ScalarType::Date | ScalarType::Timestamp | ScalarType::Timestamptz)
        )
    }

    /// The cold representation of a column of type `type_oid` with `typmod` (pg_attribute's
    /// `atttypid`, `atttypmod`; for arrays the typmod is the element's).
    ///
    /// # Errors
    /// [`UnsupportedType`] naming the type when it is not one coldwire can store exactly.
    pub fn for_column(type_oid: u32, typmod: i32) -> Result<ColdType, UnsupportedType> {
        for (scalar_oid, array_oid, scalar) in BUILTINS {
            let scalar = match scalar {
                ScalarType::Numeric(_) => ScalarType::Numeric(NumericRepr::for_typmod(typmod)),
                other => other,
            };
            if type_oid == scalar_oid {
                return Ok(ColdType::Scalar(scalar));
            }
            if type_oid == array_oid {
                return Ok(ColdType::Array(scalar));
            }
        }
        let builtin = UNSUPPORTED_NAMES.iter().find(|(oid, _)| *oid == type_oid);
        // OIDs below FirstNormalObjectId (16384) are built in; others are user types.
        let reason = if type_oid >= 16384 {
            "user-defined types (composites, domains, enums, ranges of them) are not supported"
        } else {
            "not one of the supported types (integers, floats, numeric, text, varchar, char, bool, bytea, date, time, timestamp, timestamptz, interval, uuid, json, jsonb and 1-D arrays of them)"
        };
        Err(UnsupportedType {
            type_oid,
            name: builtin.map_or_else(|| "?".to_owned(), |(_, n)| (*n).to_owned()),
            reason,
        })
    }

    /// The scalar type, or the element type of an array.
    pub fn scalar(&self) -> ScalarType {
        match *self {
            ColdType::Scalar(s) | ColdType::Array(s) => s,
        }
    }

    /// The Postgres type OID of the column (the array type for arrays).
    pub fn type_oid(&self) -> u32 {
        match self {
            ColdType::Scalar(s) => s.type_oid(),
            ColdType::Array(s) => s.array_oid(),
        }
    }

    /// The Arrow type the column's values are stored as.
    pub fn data_type(&self) -> DataType {
        match self {
            ColdType::Scalar(s) => s.data_type(),
            ColdType::Array(s) => DataType::List(Arc::new(s.field(Field::LIST_FIELD_DEFAULT_NAME))),
        }
    }

    /// The nullable Arrow field for a column named `name`, with the extension metadata that
    /// makes the Parquet writer use the UUID and JSON logical types.
    pub fn field(&self, name: &str) -> Field {
        match self {
            ColdType::Scalar(s) => s.field(name),
            ColdType::Array(_) => Field::new(name, self.data_type(), true),
        }
    }
}

impl ScalarType {
    /// The Postgres type OID.
    pub fn type_oid(&self) -> u32 {
        self.oids().0
    }

    /// The OID of the Postgres array type over this type.
    pub fn array_oid(&self) -> u32 {
        self.oids().1
    }

    fn oids(&self) -> (u32, u32) {
        let same = |a: &ScalarType, b: &ScalarType| match (a, b) {
            (ScalarType::Numeric(_), ScalarType::Numeric(_)) => true,
            _ => a == b,
        };
        BUILTINS
            .iter()
            .find(|(_, _, s)| same(s, self))
            .map_or((0, 0), |(oid, array_oid, _)| (*oid, *array_oid))
    }

    /// The Postgres name, for error messages.
    pub fn name(&self) -> &'static str {
        match self {
            ScalarType::Int2 => "smallint",
            ScalarType::Int4 => "integer",
            ScalarType::Int8 => "bigint",
            ScalarType::Float4 => "real",
            ScalarType::Float8 => "double precision",
            ScalarType::Numeric(_) => "numeric",
            ScalarType::Text(TextKind::Text) => "text",
            ScalarType::Text(TextKind::Varchar) => "character varying",
            ScalarType::Text(TextKind::Bpchar) => "character",
            ScalarType::Bool => "boolean",
            ScalarType::Bytea => "bytea",
            ScalarType::Date => "date",
            ScalarType::Time => "time without time zone",
            ScalarType::Timestamp => "timestamp without time zone",
            ScalarType::Timestamptz => "timestamp with time zone",
            ScalarType::Interval => "interval",
            ScalarType::Uuid => "uuid",
            ScalarType::Json => "json",
            ScalarType::Jsonb => "jsonb",
        }
    }

    /// The Arrow type of one value.
    pub fn data_type(&self) -> DataType {
        match self {
            ScalarType::Int2 => DataType::Int16,
            ScalarType::Int4 => DataType::Int32,
            ScalarType::Int8 => DataType::Int64,
            ScalarType::Float4 => DataType::Float32,
            ScalarType::Float8 => DataType::Float64,
            ScalarType::Numeric(NumericRepr::Decimal { .. }) => {
                DataType::Struct(numeric_fields(self))
            }
            ScalarType::Numeric(NumericRepr::Text)
            | ScalarType::Text(_)
            | ScalarType::Json
            | ScalarType::Jsonb => DataType::Utf8,
            ScalarType::Bool => DataType::Boolean,
            ScalarType::Bytea => DataType::Binary,
            ScalarType::Date => DataType::Date32,
            ScalarType::Time => DataType::Time64(TimeUnit::Microsecond),
            ScalarType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
            ScalarType::Timestamptz => {
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
            }
            ScalarType::Interval => DataType::Struct(interval_fields()),
            ScalarType::Uuid => DataType::FixedSizeBinary(16),
        }
    }

    /// A nullable field of this type, with extension metadata where one applies.
    pub fn field(&self, name: &str) -> Field {
        let field = Field::new(name, self.data_type(), true);
        match self {
            ScalarType::Uuid => field.with_metadata(HashMap::from([(
                EXTENSION_NAME_KEY.to_owned(),
                "arrow.uuid".to_owned(),
            )])),
            ScalarType::Json | ScalarType::Jsonb => field.with_metadata(HashMap::from([
                (EXTENSION_NAME_KEY.to_owned(), "arrow.json".to_owned()),
                (EXTENSION_METADATA_KEY.to_owned(), String::new()),
            ])),
            _ => field,
        }
    }
}

impl NumericRepr {
    /// The representation for a numeric typmod (-1: no declared precision).
    pub fn for_typmod(typmod: i32) -> NumericRepr {
        if typmod < VARHDRSZ {
            return NumericRepr::Text;
        }
        let t = typmod - VARHDRSZ;
        let precision = (t >> 16) & 0xffff;
        // Postgres 15+ stores the scale as an 11-bit signed field (negative scales allowed).
        let scale = ((t & 0x7ff) ^ 1024) - 1024;
        match (u8::try_from(precision), i8::try_from(scale)) {
            (Ok(p), Ok(s))
                if (1..=DECIMAL128_MAX_PRECISION).contains(&p)
                    && s >= 0
                    && i32::from(s) <= i32::from(p) =>
            {
                NumericRepr::Decimal {
                    precision: p,
                    scale: s,
                }
            }
            _ => NumericRepr::Text,
        }
    }
}

/// Child names of the numeric(p, s) struct.
pub const NUMERIC_VALUE: &str = "value";
pub const NUMERIC_SPECIAL: &str = "special";

fn numeric_fields(s: &ScalarType) -> Fields {
    let (precision, scale) = match s {
        ScalarType::Numeric(NumericRepr::Decimal { precision, scale }) => (*precision, *scale),
        _ => (DECIMAL128_MAX_PRECISION, 0),
    };
    Fields::from(vec![
        Field::new(NUMERIC_VALUE, DataType::Decimal128(precision, scale), true),
        Field::new(NUMERIC_SPECIAL, DataType::Utf8, true),
    ])
}

/// Children of the interval struct, in Postgres's field order reversed to read naturally.
fn interval_fields() -> Fields {
    Fields::from(vec![
        Field::new("months", DataType::Int32, false),
        Field::new("days", DataType::Int32, false),
        Field::new("micros", DataType::Int64, false),
    ])
}

/// A named column of a cold schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColdColumn {
    pub name: String,
    pub ty: ColdType,
}

impl ColdColumn {
    pub fn new(name: impl Into<String>, ty: ColdType) -> Self {
        Self {
            name: name.into(),
            ty,
        }
    }
}

/// The Arrow schema of record batches holding `columns`, in order.
pub fn arrow_schema(columns: &[ColdColumn]) -> Schema {
    Schema::new(
        columns
            .iter()
            .map(|c| c.ty.field(&c.name))
            .collect::<Vec<_>>(),
    )
}

impl fmt::Display for ColdType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ColdType::Scalar(s) => f.write_str(s.name()),
            ColdType::Array(s) => write!(f, "{}[]", s.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric_typmod(p: i32, s: i32) -> i32 {
        ((p << 16) | (s & 0x7ff)) + VARHDRSZ
    }

    #[test]
    fn maps_every_supported_oid_and_its_array() {
        for (oid, array_oid, scalar) in BUILTINS {
            let t = ColdType::for_column(oid, -1).unwrap();
            assert_eq!(t.scalar().type_oid(), oid);
            assert!(matches!(t, ColdType::Scalar(_)));
            let a = ColdType::for_column(array_oid, -1).unwrap();
            assert_eq!(a, ColdType::Array(t.scalar()));
            assert_eq!(a.type_oid(), array_oid);
            assert!(matches!(a.data_type(), DataType::List(_)));
            if !matches!(scalar, ScalarType::Numeric(_)) {
                assert_eq!(t.scalar(), scalar);
            }
        }
    }

    #[test]
    fn numeric_typmods() {
        assert_eq!(NumericRepr::for_typmod(-1), NumericRepr::Text);
        assert_eq!(
            NumericRepr::for_typmod(numeric_typmod(38, 10)),
            NumericRepr::Decimal {
                precision: 38,
                scale: 10
            }
        );
        assert_eq!(
            NumericRepr::for_typmod(numeric_typmod(5, 0)),
            NumericRepr::Decimal {
                precision: 5,
                scale: 0
            }
        );
        assert_eq!(
            NumericRepr::for_typmod(numeric_typmod(39, 2)),
            NumericRepr::Text
        );
        // Postgres 15: negative scale and scale above precision go to text
        assert_eq!(
            NumericRepr::for_typmod(numeric_typmod(5, -2)),
            NumericRepr::Text
        );
        assert_eq!(
            NumericRepr::for_typmod(numeric_typmod(3, 5)),
            NumericRepr::Text
        );
        let t = ColdType::for_column(1231, numeric_typmod(10, 2)).unwrap();
        assert_eq!(
            t,
            ColdType::Array(ScalarType::Numeric(NumericRepr::Decimal {
                precision: 10,
                scale: 2
            }))
        );
    }

    #[test]
    fn refusals_name_the_type() {
        let e = ColdType::for_column(600, -1).unwrap_err();
        assert!(e.to_string().contains("point (OID 600)"), "{e}");
        let e = ColdType::for_column(790, -1).unwrap_err();
        assert!(e.to_string().contains("money"), "{e}");
        let e = ColdType::for_column(16390, -1)
            .unwrap_err()
            .with_type_name("public.pair");
        assert!(
            e.to_string().contains("public.pair (OID 16390)")
                && e.to_string().contains("user-defined"),
            "{e}"
        );
    }

    #[test]
    fn fields_carry_extension_types() {
        let f = ColdType::Scalar(ScalarType::Uuid).field("u");
        assert_eq!(
            f.metadata().get(EXTENSION_NAME_KEY).map(String::as_str),
            Some("arrow.uuid")
        );
        let f = ColdType::Array(ScalarType::Jsonb).field("j");
        let DataType::List(item) = f.data_type() else {
            panic!("list")
        };
        assert_eq!(
            item.metadata().get(EXTENSION_NAME_KEY).map(String::as_str),
            Some("arrow.json")
        );
    }
}
