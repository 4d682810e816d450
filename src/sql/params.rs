//! A Bind's parameter values as constants for cold pruning (DESIGN §6.3). A value is used
//! only where its type is certain: the type the client declared in Parse or, where it
//! declared none, the type Postgres inferred, once a ParameterDescription of the
//! statement has shown it (the session keeps it with the statement); failing both, the
//! column's own type where a binary value's width tells it apart (Postgres infers an
//! untyped `$n` compared with a column as that column's type, unless an earlier use typed
//! it). Anything else yields no constant, so the planner simply prunes less (invariant 7).

use crate::values::{NumericRepr, ScalarType, TextKind};

/// A constant as written in the statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Constant {
    Int(i64),
    Text(String),
    /// `$n`: the client's parameter number n (1-based), known at Bind.
    Param(u32),
    /// `x + k` or `x - k` of an integer constant or parameter `x` (`k` negated for minus);
    /// `k` 0 for `$n::int4` and the like, whose value counts only when it is an integer.
    Sum(Box<Constant>, i64),
    /// A literal cast to a date or timestamp type (`DATE '2024-01-01'`).
    Typed(ScalarType, String),
    /// A numeric literal that is not an integer (`10.5`, `1e3`), as written.
    Decimal(String),
    /// A binary float8 parameter (its bits).
    Float(u64),
    /// `true`, `false`, or what a bare boolean column is compared with.
    Bool(bool),
}

impl std::fmt::Display for Constant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Constant::Int(v) => write!(f, "{v}"),
            Constant::Bool(b) => write!(f, "{b}"),
            Constant::Text(t) => write!(f, "'{}'", t.replace('\'', "''")),
            Constant::Param(n) => write!(f, "${n}"),
            // An integer cast of a parameter (read only where its value is an integer).
            Constant::Sum(x, 0) => write!(f, "{x}"),
            Constant::Sum(x, k) if *k < 0 => write!(f, "{x} - {}", k.unsigned_abs()),
            Constant::Sum(x, k) => write!(f, "{x} + {k}"),
            Constant::Decimal(t) => write!(f, "{t}"),
            Constant::Float(bits) => write!(f, "{:?}::float8", f64::from_bits(*bits)),
            Constant::Typed(ty, t) => {
                let name = match ty {
                    ScalarType::Date => "date",
                    ScalarType::Timestamp => "timestamp",
                    _ => "timestamptz",
                };
                write!(f, "'{}'::{name}", t.replace('\'', "''"))
            }
        }
    }
}

/// Type OIDs a parameter may be declared with.
pub(crate) mod oid {
    pub const BOOL: u32 = 16;
    pub const INT8: u32 = 20;
    pub const INT2: u32 = 21;
    pub const INT4: u32 = 23;
    pub const TEXT: u32 = 25;
    pub const UNKNOWN: u32 = 705;
    pub const VARCHAR: u32 = 1043;
    pub const UUID: u32 = 2950;
    pub const FLOAT8: u32 = 701;
    pub const DATE: u32 = 1082;
    pub const TIMESTAMP: u32 = 1114;
    pub const TIMESTAMPTZ: u32 = 1184;
    pub const NUMERIC: u32 = 1700;
}

/// The client's parameter values of one Bind.
/// What the read and write paths need to know of a session's settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settings {
    /// client_encoding is UTF8 (or SQL_ASCII): cold text can be sent unconverted.
    pub utf8: bool,
    /// TimeZone is UTC (under any of its names).
    pub utc: bool,
}

impl Settings {
    /// The settings of a session whose server reported `parameter` values.
    pub fn of(parameter: impl Fn(&str) -> Option<String>) -> Self {
        let utf8 = parameter("client_encoding")
            .is_none_or(|e| e.eq_ignore_ascii_case("UTF8") || e.eq_ignore_ascii_case("SQL_ASCII"));
        let utc = parameter("TimeZone").is_some_and(|z| {
            let z = z.strip_prefix("Etc/").unwrap_or(&z).to_ascii_uppercase();
            [
                "UTC",
                "UCT",
                "GMT",
                "GMT0",
                "GMT+0",
                "GMT-0",
                "UNIVERSAL",
                "ZULU",
                "GREENWICH",
            ]
            .contains(&z.as_str())
        });
        Self { utf8, utc }
    }
}

#[derive(Debug, Clone, Default)]
pub struct BoundParams<'a> {
    /// Per parameter, in order: the value (None: NULL).
    pub values: Vec<Option<&'a [u8]>>,
    /// Per parameter: binary format.
    pub binary: Vec<bool>,
    /// Per parameter: the type declared in Parse (0 or missing: inferred by the server).
    pub declared: Vec<u32>,
    /// The session's settings: text values are usable only when it sends UTF-8 (or
    /// SQL_ASCII), the encoding cold values are stored in; timestamptz literals without
    /// an offset mean UTC when its TimeZone is UTC.
    pub settings: Settings,
}

impl BoundParams<'_> {
    /// No parameters (a simple Query).
    pub fn none() -> Self {
        Self::default()
    }

    /// Parameter `number` (1-based) as a constant comparable with a column of type
    /// `column`, when its value and type are known.
    pub fn constant(&self, number: u32, column: ScalarType) -> Option<Constant> {
        let i = usize::try_from(number).ok()?.checked_sub(1)?;
        let value = (*self.values.get(i)?)?;
        let declared = self.declared.get(i).copied().unwrap_or(0);
        let int_column = matches!(
            column,
            ScalarType::Int2 | ScalarType::Int4 | ScalarType::Int8
        );
        let text_column = matches!(column, ScalarType::Text(TextKind::Text | TextKind::Varchar));
        // numeric(p, s): compared as numeric with numeric and integer values (an integer is
        // cast to numeric), as float8 with a float8 one (not ours to read).
        let numeric_column = matches!(column, ScalarType::Numeric(NumericRepr::Decimal { .. }));
        // A date or timestamp parameter of the column's own type: µs or days since 1970.
        let temporal = match (column, declared) {
            (ScalarType::Date, oid::DATE) => Some(oid::DATE),
            (ScalarType::Timestamp, oid::TIMESTAMP) => Some(oid::TIMESTAMP),
            (ScalarType::Timestamptz, oid::TIMESTAMPTZ) => Some(oid::TIMESTAMPTZ),
            _ => None,
        };
        if !self.binary.get(i).copied().unwrap_or(false) {
            // Text format: Postgres parses it as the parameter's type; an integer's text
            // is the same integer in every numeric type, and text compared with a text
            // column is that text.
            let text = std::str::from_utf8(value).ok()?;
            let usable = match declared {
                // Untyped, where no description showed the type: Postgres infers the
                // column's type unless another use typed the parameter first, which for
                // integer, text and other columns yields the same comparison, but for a
                // numeric one could make it a float8 comparison (`f8 = $1 AND n = $1`).
                0 | oid::UNKNOWN => !numeric_column,
                oid::INT2 | oid::INT4 | oid::INT8 => int_column || numeric_column,
                oid::NUMERIC => numeric_column,
                oid::TEXT | oid::VARCHAR => text_column,
                oid::UUID => column == ScalarType::Uuid,
                oid::FLOAT8 => column == ScalarType::Float8,
                oid::BOOL => column == ScalarType::Bool,
                _ => temporal.is_some(),
            };
            return (usable && (self.settings.utf8 || text.is_ascii()))
                .then(|| Constant::Text(text.to_owned()));
        }
        if let Some(ty) = temporal {
            return match (ty, value.len()) {
                (oid::DATE, 4) => crate::values::temporal::date_to_arrow(i32::from_be_bytes(
                    value.try_into().ok()?,
                ))
                .ok()
                .map(|d| Constant::Int(d.into())),
                (oid::TIMESTAMP | oid::TIMESTAMPTZ, 8) => {
                    crate::values::temporal::timestamp_to_arrow(
                        "timestamp",
                        i64::from_be_bytes(value.try_into().ok()?),
                    )
                    .ok()
                    .map(Constant::Int)
                }
                _ => None,
            };
        }
        let ty = match declared {
            0 => match column {
                ScalarType::Int2 => oid::INT2,
                ScalarType::Int4 => oid::INT4,
                ScalarType::Int8 => oid::INT8,
                ScalarType::Text(TextKind::Text) => oid::TEXT,
                ScalarType::Text(TextKind::Varchar) => oid::VARCHAR,
                ScalarType::Uuid => oid::UUID,
                ScalarType::Bool => oid::BOOL,
                // Not float8: eight bytes could as well be an int8 that Postgres inferred
                // from a cast or another use of the parameter (integers and text are
                // told apart by their width and their columns).
                _ => return None,
            },
            other => other,
        };
        match (ty, value.len()) {
            (oid::BOOL, 1) if column == ScalarType::Bool && value[0] <= 1 => {
                Some(Constant::Bool(value[0] == 1))
            }
            (oid::NUMERIC, _) if numeric_column => {
                crate::values::numeric::binary_text(value).map(Constant::Text)
            }
            (oid::INT2, 2) if int_column || numeric_column => Some(Constant::Int(
                i16::from_be_bytes(value.try_into().ok()?).into(),
            )),
            (oid::INT4, 4) if int_column || numeric_column => Some(Constant::Int(
                i32::from_be_bytes(value.try_into().ok()?).into(),
            )),
            (oid::INT8, 8) if int_column || numeric_column => {
                Some(Constant::Int(i64::from_be_bytes(value.try_into().ok()?)))
            }
            (oid::TEXT | oid::VARCHAR, _) if text_column => {
                let text = std::str::from_utf8(value).ok()?;
                (self.settings.utf8 || text.is_ascii()).then(|| Constant::Text(text.to_owned()))
            }
            (oid::FLOAT8, 8) if column == ScalarType::Float8 => {
                Some(Constant::Float(u64::from_be_bytes(value.try_into().ok()?)))
            }
            (oid::UUID, 16) if column == ScalarType::Uuid => Some(Constant::Text(
                uuid::Uuid::from_slice(value).ok()?.hyphenated().to_string(),
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UTF8: Settings = Settings {
        utf8: true,
        utc: false,
    };

    fn one<'a>(value: &'a [u8], binary: bool, declared: u32) -> BoundParams<'a> {
        BoundParams {
            values: vec![Some(value)],
            binary: vec![binary],
            declared: vec![declared],
            settings: UTF8,
        }
    }

    #[test]
    fn binary_integers_need_a_known_width() {
        let eight = 42i64.to_be_bytes();
        assert_eq!(
            one(&eight, true, 0).constant(1, ScalarType::Int8),
            Some(Constant::Int(42))
        );
        // An untyped parameter compared with an int4 column is int4: eight bytes are not.
        assert_eq!(one(&eight, true, 0).constant(1, ScalarType::Int4), None);
        let four = (-7i32).to_be_bytes();
        assert_eq!(
            one(&four, true, oid::INT4).constant(1, ScalarType::Int8),
            Some(Constant::Int(-7))
        );
        // Declared numeric (1700): its binary form is not an integer's.
        assert_eq!(one(&eight, true, 1700).constant(1, ScalarType::Int8), None);
    }

    #[test]
    fn numeric_columns_read_numeric_and_integer_values() {
        let column = ScalarType::Numeric(crate::values::NumericRepr::Decimal {
            precision: 10,
            scale: 2,
        });
        // 12.5 in numeric's binary form: two groups (12, 5000), weight 0, dscale 1.
        let twelve_and_a_half = [0, 2, 0, 0, 0, 0, 0, 1, 0, 12, 0x13, 0x88];
        assert_eq!(
            one(&twelve_and_a_half, true, oid::NUMERIC).constant(1, column),
            Some(Constant::Text("12.5".into()))
        );
        assert_eq!(
            one(&7i64.to_be_bytes(), true, oid::INT8).constant(1, column),
            Some(Constant::Int(7))
        );
        assert_eq!(
            one(b"1.005", false, oid::NUMERIC).constant(1, column),
            Some(Constant::Text("1.005".into()))
        );
        // A float8 makes the comparison a float8 one; an untyped binary value could be
        // anything (eight bytes of an int8 read as a numeric header are a zero), and an
        // untyped text one may have been typed float8 by another use.
        assert_eq!(one(b"1.5", false, oid::FLOAT8).constant(1, column), None);
        assert_eq!(one(b"1.5", false, 0).constant(1, column), None);
        assert_eq!(one(&7i64.to_be_bytes(), true, 0).constant(1, column), None);
    }

    #[test]
    fn text_values_follow_the_declared_type_and_encoding() {
        assert_eq!(
            one(b"17", false, 0).constant(1, ScalarType::Int8),
            Some(Constant::Text("17".into()))
        );
        assert_eq!(one(b"17", false, 701).constant(1, ScalarType::Int8), None);
        assert_eq!(
            one("é".as_bytes(), true, 0).constant(1, ScalarType::Text(TextKind::Text)),
            Some(Constant::Text("é".into()))
        );
        let latin = BoundParams {
            settings: Settings::default(),
            ..one("é".as_bytes(), false, 0)
        };
        assert_eq!(latin.constant(1, ScalarType::Text(TextKind::Text)), None);
        let u = uuid::Uuid::from_u128(5);
        assert_eq!(
            one(u.as_bytes(), true, 0).constant(1, ScalarType::Uuid),
            Some(Constant::Text(u.hyphenated().to_string()))
        );
    }

    #[test]
    fn temporal_values_need_the_column_type_and_move_to_arrow_units() {
        let day = 0i32.to_be_bytes(); // 2000-01-01 in Postgres's binary date
        assert_eq!(
            one(&day, true, oid::DATE).constant(1, ScalarType::Date),
            Some(Constant::Int(10_957))
        );
        assert_eq!(
            one(&day, true, oid::DATE).constant(1, ScalarType::Timestamp),
            None
        );
        let micros = 1_000_000i64.to_be_bytes();
        assert_eq!(
            one(&micros, true, oid::TIMESTAMPTZ).constant(1, ScalarType::Timestamptz),
            Some(Constant::Int(946_684_801_000_000))
        );
        assert_eq!(
            one(b"2024-01-01", false, oid::DATE).constant(1, ScalarType::Date),
            Some(Constant::Text("2024-01-01".into()))
        );
    }

    #[test]
    fn settings_follow_the_reported_parameters() {
        let of = |tz: &str| Settings::of(|n| (n == "TimeZone").then(|| tz.to_owned()));
        assert!(of("UTC").utc && of("Etc/UTC").utc && of("GMT").utc);
        assert!(!of("Europe/Berlin").utc && !of("UTC+1").utc);
        assert!(of("UTC").utf8);
        assert!(!Settings::of(|n| (n == "client_encoding").then(|| "LATIN1".to_owned())).utf8);
    }

    #[test]
    fn nulls_and_missing_parameters_give_nothing() {
        let p = BoundParams {
            values: vec![None],
            binary: vec![false],
            declared: vec![],
            settings: UTF8,
        };
        assert_eq!(p.constant(1, ScalarType::Int8), None);
        assert_eq!(p.constant(2, ScalarType::Int8), None);
        assert_eq!(p.constant(0, ScalarType::Int8), None);
    }
}
