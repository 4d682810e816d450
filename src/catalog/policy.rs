//! A tiered table's flush policy: defaults, validation of the jsonb a user passes to
//! `tier_table` or `set_policy`, and its jsonb form in the catalog.

use std::time::Duration;

use serde_json::{Map, Value};

/// Smallest `check_interval`: the scheduler must not spin.
const MIN_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// When and how much to flush (DESIGN §5, §8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Rows the heap may hold before a flush is due. Default 100000.
    pub hot_row_limit: i64,
    /// Rows flushed per chunk. Default 10000.
    pub min_flush_rows: i64,
    /// Rows per Parquet segment. Default 1000000.
    pub max_rows_per_file: i64,
    /// Whether the scheduler flushes on its own. Default true.
    pub auto_flush: bool,
    /// How often the scheduler looks at the table. Default 10 s.
    pub check_interval: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            hot_row_limit: 100_000,
            min_flush_rows: 10_000,
            max_rows_per_file: 1_000_000,
            auto_flush: true,
            check_interval: Duration::from_secs(10),
        }
    }
}

/// A policy key or value that cannot be used (SQLSTATE 22023, the key named).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("policy must be a JSON object, not {0}")]
    NotAnObject(String),
    #[error("unknown policy key \"{0}\" (known: hot_row_limit, min_flush_rows, max_rows_per_file, auto_flush, check_interval)")]
    UnknownKey(String),
    #[error("policy key \"{key}\": {reason}")]
    BadValue { key: String, reason: String },
}

impl Policy {
    /// This policy with the keys of `changes` (a JSON object) applied.
    ///
    /// # Errors
    /// Not an object, an unknown key, or a value of the wrong type or range.
    pub fn merged(&self, changes: &Value) -> Result<Policy, PolicyError> {
        let Value::Object(map) = changes else {
            return Err(PolicyError::NotAnObject(json_kind(changes).into()));
        };
        let mut p = self.clone();
        for (key, value) in map {
            let bad = |reason: &str| PolicyError::BadValue {
                key: key.clone(),
                reason: reason.into(),
            };
            match key.as_str() {
                "hot_row_limit" => {
                    p.hot_row_limit =
                        whole(value, 0).ok_or_else(|| bad("must be a whole number ≥ 0"))?
                }
                "min_flush_rows" => {
                    p.min_flush_rows =
                        whole(value, 1).ok_or_else(|| bad("must be a whole number ≥ 1"))?
                }
                "max_rows_per_file" => {
                    p.max_rows_per_file =
                        whole(value, 1).ok_or_else(|| bad("must be a whole number ≥ 1"))?
                }
                "auto_flush" => {
                    p.auto_flush = value
                        .as_bool()
                        .ok_or_else(|| bad("must be true or false"))?
                }
                "check_interval" => {
                    let interval = match value {
                        Value::String(s) => parse_interval(s),
                        Value::Number(n) => n.as_f64().filter(|s| s.is_finite() && *s >= 0.0).map(Duration::from_secs_f64),
                        _ => None,
                    }
                    .ok_or_else(|| bad("must be an interval such as '10s', '500ms', '5min', or a number of seconds"))?;
                    if interval < MIN_CHECK_INTERVAL {
                        return Err(bad("must be at least 100ms"));
                    }
                    p.check_interval = interval;
                }
                _ => return Err(PolicyError::UnknownKey(key.clone())),
            }
        }
        Ok(p)
    }

    /// The jsonb stored in the catalog and returned by the admin calls.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("hot_row_limit".into(), self.hot_row_limit.into());
        m.insert("min_flush_rows".into(), self.min_flush_rows.into());
        m.insert("max_rows_per_file".into(), self.max_rows_per_file.into());
        m.insert("auto_flush".into(), self.auto_flush.into());
        m.insert(
            "check_interval".into(),
            format_interval(self.check_interval).into(),
        );
        Value::Object(m)
    }
}

fn whole(v: &Value, min: i64) -> Option<i64> {
    v.as_i64().filter(|n| *n >= min)
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `500ms`, `10s`, `10 seconds`, `5min`, `2h`, or a bare number of seconds.
fn parse_interval(text: &str) -> Option<Duration> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: f64 = number.parse().ok().filter(|n: &f64| n.is_finite())?;
    let seconds = match unit.trim() {
        "" | "s" | "sec" | "secs" | "second" | "seconds" => n,
        "ms" | "msec" | "millisecond" | "milliseconds" => n / 1000.0,
        "m" | "min" | "mins" | "minute" | "minutes" => n * 60.0,
        "h" | "hour" | "hours" => n * 3600.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(seconds))
}

fn format_interval(d: Duration) -> String {
    if d.subsec_millis() != 0 || d.as_secs() == 0 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}s", d.as_secs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merges_known_keys_over_defaults() {
        let p = Policy::default()
            .merged(&json!({"hot_row_limit": 5, "min_flush_rows": 2, "check_interval": "250ms", "auto_flush": false}))
            .unwrap();
        assert_eq!(p.hot_row_limit, 5);
        assert_eq!(p.min_flush_rows, 2);
        assert_eq!(p.max_rows_per_file, 1_000_000);
        assert!(!p.auto_flush);
        assert_eq!(p.check_interval, Duration::from_millis(250));
        assert_eq!(
            Policy::default()
                .merged(&json!({"check_interval": 2}))
                .unwrap()
                .check_interval,
            Duration::from_secs(2)
        );
        assert_eq!(
            Policy::default()
                .merged(&json!({"check_interval": "5min"}))
                .unwrap()
                .check_interval,
            Duration::from_secs(300)
        );
    }

    #[test]
    fn round_trips_through_json() {
        let p = Policy {
            check_interval: Duration::from_millis(1500),
            ..Policy::default()
        };
        assert_eq!(Policy::default().merged(&p.to_json()).unwrap(), p);
        assert_eq!(
            Policy::default()
                .merged(&Policy::default().to_json())
                .unwrap(),
            Policy::default()
        );
    }

    #[test]
    fn names_the_offending_key() {
        let err = |v: Value| Policy::default().merged(&v).unwrap_err();
        assert_eq!(
            err(json!({"hot_rows": 1})),
            PolicyError::UnknownKey("hot_rows".into())
        );
        assert!(
            matches!(err(json!({"hot_row_limit": -1})), PolicyError::BadValue { key, .. } if key == "hot_row_limit")
        );
        assert!(
            matches!(err(json!({"min_flush_rows": 0})), PolicyError::BadValue { key, .. } if key == "min_flush_rows")
        );
        assert!(
            matches!(err(json!({"max_rows_per_file": "big"})), PolicyError::BadValue { key, .. } if key == "max_rows_per_file")
        );
        assert!(
            matches!(err(json!({"auto_flush": 1})), PolicyError::BadValue { key, .. } if key == "auto_flush")
        );
        assert!(
            matches!(err(json!({"check_interval": "soon"})), PolicyError::BadValue { key, .. } if key == "check_interval")
        );
        assert!(
            matches!(err(json!({"check_interval": "10ms"})), PolicyError::BadValue { key, .. } if key == "check_interval")
        );
        assert!(matches!(err(json!([1])), PolicyError::NotAnObject(_)));
    }
}
