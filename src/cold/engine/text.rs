//! The engine's answers as the text Postgres's input functions read back.

use arrow::array::{Array, AsArray};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Decimal256Type, Float64Type, Int16Type, Int32Type,
    Int64Type, TimeUnit, TimestampMicrosecondType,
};

use crate::cold::scan::ScanError;
use crate::values::temporal::civil_from_days;

/// A value of an engine result as the text Postgres reads back (JSON null for NULL).
pub(super) fn json_text(array: &dyn Array, row: usize) -> Result<serde_json::Value, ScanError> {
    use serde_json::Value;
    if array.is_null(row) {
        return Ok(Value::Null);
    }
    let text = match array.data_type() {
        DataType::Int16 => array.as_primitive::<Int16Type>().value(row).to_string(),
        DataType::Int32 => array.as_primitive::<Int32Type>().value(row).to_string(),
        DataType::Int64 => array.as_primitive::<Int64Type>().value(row).to_string(),
        DataType::Decimal128(..) => array.as_primitive::<Decimal128Type>().value_as_string(row),
        DataType::Decimal256(..) => array.as_primitive::<Decimal256Type>().value_as_string(row),
        DataType::Float64 => {
            let v = array.as_primitive::<Float64Type>().value(row);
            if v.is_nan() {
                "NaN".to_owned()
            } else if v.is_infinite() {
                if v > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
            } else {
                format!("{v:?}")
            }
        }
        DataType::Boolean => array.as_boolean().value(row).to_string(),
        DataType::Utf8 => array.as_string::<i32>().value(row).to_owned(),
        DataType::LargeUtf8 => array.as_string::<i64>().value(row).to_owned(),
        DataType::Utf8View => array.as_string_view().value(row).to_owned(),
        DataType::Date32 => {
            let days = array.as_primitive::<Date32Type>().value(row);
            match days {
                i32::MIN => "-infinity".to_owned(),
                i32::MAX => "infinity".to_owned(),
                d => date_text(i64::from(d), ""),
            }
        }
        DataType::Timestamp(TimeUnit::Microsecond, tz) => {
            let micros = array.as_primitive::<TimestampMicrosecondType>().value(row);
            match micros {
                i64::MIN => "-infinity".to_owned(),
                i64::MAX => "infinity".to_owned(),
                m => {
                    let day = m.div_euclid(86_400_000_000);
                    let rest = m.rem_euclid(86_400_000_000);
                    let time = format!(
                        " {:02}:{:02}:{:02}.{:06}{}",
                        rest / 3_600_000_000,
                        rest / 60_000_000 % 60,
                        rest / 1_000_000 % 60,
                        rest % 1_000_000,
                        if tz.is_some() { "+00" } else { "" }
                    );
                    date_text(day, &time)
                }
            }
        }
        other => {
            return Err(ScanError::Engine(format!(
                "a cold partial of type {other} has no text form"
            )))
        }
    };
    Ok(Value::String(text))
}

/// `YYYY-MM-DD` of `days` since 1970-01-01 (proleptic Gregorian), then `time`, then ` BC`
/// for years before 1.
fn date_text(days: i64, time: &str) -> String {
    let (year, month, day) = civil_from_days(days);
    if year <= 0 {
        format!("{:04}-{month:02}-{day:02}{time} BC", 1 - year)
    } else {
        format!("{year:04}-{month:02}-{day:02}{time}")
    }
}

#[cfg(test)]
mod tests {
    use super::date_text;

    #[test]
    fn dates_read_back_as_postgres_writes_them() {
        assert_eq!(date_text(0, ""), "1970-01-01");
        assert_eq!(
            date_text(19_723, " 12:00:00.000000"),
            "2024-01-01 12:00:00.000000"
        );
        assert_eq!(date_text(-719_528, ""), "0001-01-01 BC");
        assert_eq!(date_text(11_016, ""), "2000-02-29");
    }
}
