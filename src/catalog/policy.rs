//! A tiered table's flush policy: defaults, validation of the jsonb a user passes to
//! `tier_table` or `set_policy`, and its jsonb form in the catalog.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::segment::SegmentCompression;

/// Smallest `check_interval`: the scheduler must not spin.
const MIN_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// The row limit of a policy that names none.
pub const DEFAULT_HOT_ROW_LIMIT: i64 = 100_000;

macro_rules! policy_keys {
    () => {
        "hot_row_limit, tier_after, age_column, min_flush_rows, max_rows_per_file, compression, auto_flush, check_interval"
    };
}

/// The policy keys.
pub const POLICY_KEYS: &str = policy_keys!();
/// The hint of a policy error.
pub const POLICY_HINT: &str = concat!("policy keys: ", policy_keys!());

/// When and how much to flush (DESIGN §5, §8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Rows the heap may hold before a flush is due; `None`: no row limit. Default 100000,
    /// and none for a policy given an age rule without a row limit.
    pub hot_row_limit: Option<i64>,
    /// The age rule: rows whose `age_column` is older than `tier_after` (an interval as
    /// Postgres prints it) are due at the next flush. Both or neither.
    pub tier_after: Option<String>,
    /// A date, timestamp or timestamptz column of the table.
    pub age_column: Option<String>,
    /// Rows flushed per chunk. Default 10000.
    pub min_flush_rows: i64,
    /// Rows per Parquet segment. Default 1000000.
    pub max_rows_per_file: i64,
    /// How the pages of new segments are compressed. Default lz4.
    pub compression: SegmentCompression,
    /// Whether the scheduler flushes on its own. Default true.
    pub auto_flush: bool,
    /// How often the scheduler looks at the table. Default 10 s.
    pub check_interval: Duration,
}

/// The policy tables tiered from now on start from (`policy_defaults`), set at start and
/// on SIGHUP.
static NEW_TABLE_DEFAULTS: std::sync::RwLock<Option<Policy>> = std::sync::RwLock::new(None);

/// Sets the policy tables tiered from now on start from (`None`: the built-in defaults).
pub fn set_defaults_for_new_tables(policy: Option<Policy>) {
    *NEW_TABLE_DEFAULTS
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = policy;
}

impl Policy {
    /// The policy a table tiered now starts from, before `tier_table`'s own keys.
    pub fn for_new_table() -> Policy {
        NEW_TABLE_DEFAULTS
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .unwrap_or_default()
    }
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            hot_row_limit: Some(DEFAULT_HOT_ROW_LIMIT),
            tier_after: None,
            age_column: None,
            min_flush_rows: 10_000,
            max_rows_per_file: 1_000_000,
            compression: SegmentCompression::Lz4,
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
    #[error("unknown policy key \"{0}\" (known: {POLICY_KEYS})")]
    UnknownKey(String),
    #[error("policy key \"{key}\": {reason}")]
    BadValue { key: String, reason: String },
}

impl Policy {
    /// This policy with the keys of `changes` (a JSON object) applied.
    ///
    /// Giving a policy that has no age rule and the default row limit an age rule, without
    /// naming `hot_row_limit` in the same change, drops the default limit: "keep 90 days
    /// hot" means that alone. Naming `hot_row_limit` keeps both rules.
    ///
    /// # Errors
    /// Not an object, an unknown key, a value of the wrong type or range, an age rule
    /// missing half, or no rule at all.
    pub fn merged(&self, changes: &Value) -> Result<Policy, PolicyError> {
        let p = self.applied(changes)?;
        p.check_rules()?;
        Ok(p)
    }

    /// Checks the keys and values of `changes` (a JSON object) alone, as any policy's
    /// change; whether the policy they make has its rules whole is [`Policy::merged`]'s
    /// to say.
    ///
    /// # Errors
    /// Not an object, an unknown key, or a value of the wrong type or range.
    pub fn check_keys(changes: &Value) -> Result<(), PolicyError> {
        Policy::default().applied(changes).map(drop)
    }

    fn applied(&self, changes: &Value) -> Result<Policy, PolicyError> {
        let Value::Object(map) = changes else {
            return Err(PolicyError::NotAnObject(json_kind(changes).into()));
        };
        let mut p = self.clone();
        let gains_age_rule = self.tier_after.is_none()
            && map.get("tier_after").is_some_and(|v| !v.is_null())
            && !map.contains_key("hot_row_limit")
            && self.hot_row_limit == Some(DEFAULT_HOT_ROW_LIMIT);
        if gains_age_rule {
            p.hot_row_limit = None;
        }
        for (key, value) in map {
            let bad = |reason: &str| PolicyError::BadValue {
                key: key.clone(),
                reason: reason.into(),
            };
            match key.as_str() {
                "hot_row_limit" => {
                    p.hot_row_limit = if value.is_null() {
                        None
                    } else {
                        Some(whole(value, 0).ok_or_else(|| {
                            bad("must be a whole number ≥ 0, or null for no row limit")
                        })?)
                    }
                }
                "tier_after" => {
                    p.tier_after = text_or_null(value).ok_or_else(|| {
                        bad("must be an interval such as '90 days', or null for no age rule")
                    })?
                }
                "age_column" => {
                    p.age_column = text_or_null(value).ok_or_else(|| {
                        bad("must name a date, timestamp or timestamptz column, or be null")
                    })?
                }
                "min_flush_rows" => {
                    p.min_flush_rows =
                        whole(value, 1).ok_or_else(|| bad("must be a whole number ≥ 1"))?
                }
                "max_rows_per_file" => {
                    p.max_rows_per_file =
                        whole(value, 1).ok_or_else(|| bad("must be a whole number ≥ 1"))?
                }
                "compression" => {
                    p.compression = value
                        .as_str()
                        .and_then(SegmentCompression::from_name)
                        .ok_or_else(|| bad("must be \"lz4\" or \"zstd\""))?
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

    /// Both halves of an age rule or neither, and at least one rule.
    fn check_rules(&self) -> Result<(), PolicyError> {
        let p = self;
        let rule_error = |key: &str, reason: &str| PolicyError::BadValue {
            key: key.into(),
            reason: reason.into(),
        };
        match (&p.tier_after, &p.age_column) {
            (Some(_), None) => {
                return Err(rule_error(
                    "age_column",
                    "tier_after needs an age_column: the date, timestamp or timestamptz column rows are aged by",
                ))
            }
            (None, Some(_)) => {
                return Err(rule_error(
                    "tier_after",
                    "age_column needs a tier_after interval, such as '90 days'",
                ))
            }
            _ => {}
        }
        if p.hot_row_limit.is_none() && p.tier_after.is_none() {
            return Err(rule_error(
                "hot_row_limit",
                "a policy needs a row limit or an age rule (tier_after with age_column); use auto_flush false to flush only on request",
            ));
        }
        Ok(())
    }

    /// The policy in words, as the admin calls' `policy` column shows it, e.g. "rows
    /// older than 90 days by at, or beyond 100000 rows; checked every 10s".
    pub fn in_words(&self) -> String {
        let mut rules = Vec::new();
        if let Some((column, interval)) = self.age_rule() {
            rules.push(format!("rows older than {interval} by {column}"));
        }
        if let Some(limit) = self.hot_row_limit {
            rules.push(format!("beyond {limit} rows"));
        }
        let when = if self.auto_flush {
            format!("checked every {}", format_interval(self.check_interval))
        } else {
            "on request only".to_owned()
        };
        format!("flush {}; {when}", rules.join(", or "))
    }

    /// The age rule: (column, interval text).
    pub fn age_rule(&self) -> Option<(&str, &str)> {
        Some((self.age_column.as_deref()?, self.tier_after.as_deref()?))
    }

    /// The jsonb stored in the catalog and returned by the admin calls.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("hot_row_limit".into(), self.hot_row_limit.into());
        m.insert("tier_after".into(), self.tier_after.clone().into());
        m.insert("age_column".into(), self.age_column.clone().into());
        m.insert("min_flush_rows".into(), self.min_flush_rows.into());
        m.insert("max_rows_per_file".into(), self.max_rows_per_file.into());
        m.insert("compression".into(), self.compression.name().into());
        m.insert("auto_flush".into(), self.auto_flush.into());
        m.insert(
            "check_interval".into(),
            format_interval(self.check_interval).into(),
        );
        Value::Object(m)
    }
}

/// `Some(None)` for null, `Some(Some(text))` for a non-blank string, `None` otherwise.
fn text_or_null(v: &Value) -> Option<Option<String>> {
    match v {
        Value::Null => Some(None),
        Value::String(s) if !s.trim().is_empty() => Some(Some(s.clone())),
        _ => None,
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
        assert_eq!(p.hot_row_limit, Some(5));
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
            compression: SegmentCompression::Zstd,
            ..Policy::default()
        };
        assert_eq!(p.to_json()["compression"], "zstd");
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
            matches!(err(json!({"compression": "gzip"})), PolicyError::BadValue { key, .. } if key == "compression")
        );
        assert!(
            matches!(err(json!({"check_interval": "soon"})), PolicyError::BadValue { key, .. } if key == "check_interval")
        );
        assert!(
            matches!(err(json!({"check_interval": "10ms"})), PolicyError::BadValue { key, .. } if key == "check_interval")
        );
        assert!(matches!(err(json!([1])), PolicyError::NotAnObject(_)));
    }

    #[test]
    fn an_age_rule_needs_both_halves_and_replaces_the_default_limit() {
        let err = |base: &Policy, v: Value| base.merged(&v).unwrap_err();
        let key = |e: PolicyError| match e {
            PolicyError::BadValue { key, .. } => key,
            other => panic!("{other:?}"),
        };
        let base = Policy::default();
        assert_eq!(
            key(err(&base, json!({"tier_after": "90 days"}))),
            "age_column"
        );
        assert_eq!(key(err(&base, json!({"age_column": "at"}))), "tier_after");
        assert_eq!(
            key(err(&base, json!({"tier_after": 90, "age_column": "at"}))),
            "tier_after"
        );
        assert_eq!(
            key(err(
                &base,
                json!({"tier_after": "90 days", "age_column": " "})
            )),
            "age_column"
        );
        assert_eq!(
            key(err(&base, json!({"hot_row_limit": null}))),
            "hot_row_limit"
        );

        // Alone: the default row limit goes.
        let aged = base
            .merged(&json!({"tier_after": "90 days", "age_column": "at"}))
            .unwrap();
        assert_eq!(aged.hot_row_limit, None);
        assert_eq!(aged.age_rule(), Some(("at", "90 days")));
        // Together with a row limit named in the same change.
        let both = base
            .merged(&json!({"tier_after": "90 days", "age_column": "at", "hot_row_limit": 100000}))
            .unwrap();
        assert_eq!(both.hot_row_limit, Some(100_000));
        // A row limit someone chose stays.
        let chosen = base.merged(&json!({"hot_row_limit": 5})).unwrap();
        assert_eq!(
            chosen
                .merged(&json!({"tier_after": "1 day", "age_column": "at"}))
                .unwrap()
                .hot_row_limit,
            Some(5)
        );
        // Dropping the age rule of an age-only policy leaves no rule: refused.
        assert_eq!(
            key(err(&aged, json!({"tier_after": null, "age_column": null}))),
            "hot_row_limit"
        );
        let back = aged
            .merged(&json!({"tier_after": null, "age_column": null, "hot_row_limit": 10}))
            .unwrap();
        assert_eq!((back.hot_row_limit, back.age_rule()), (Some(10), None));
        // The stored form reads back to the same policy.
        assert_eq!(Policy::default().merged(&aged.to_json()).unwrap(), aged);
        assert_eq!(Policy::default().merged(&both.to_json()).unwrap(), both);
    }
}
