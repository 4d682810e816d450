//! The errors raised by the catalog's SQL that coldwire acts on, and how it recognises
//! them: by SQLSTATE and the name each carries in the error's constraint field (catalog
//! v8), never by message text. The SQL takes the names from these constants (the
//! migrations through [`super::migrate`]'s placeholders, the capture functions through
//! [`super::capture`]).

use crate::wire::messages::error_field;

/// Constraint name of the 40001 raised by `coldwire.guard` and `coldwire.rehydrate` when
/// the cold tier changed as a statement started.
pub const COLD_TIER_CHANGED: &str = "coldwire_cold_tier_changed";
/// Constraint name of the 55000 raised by a capture function for written keys that may
/// exist cold; its DETAIL is `{"table": id, "keys": [{column: value, …}, …]}`.
pub const KEYS_MAY_BE_COLD: &str = "coldwire_keys_may_be_cold";

/// A condition coldwire may handle by running the statement again unseen.
#[derive(Debug, Clone, PartialEq)]
pub enum Retry {
    /// The cold tier changed as the statement started: plan it again.
    ColdTierChanged,
    /// Keys of table `table` the statement wrote may exist cold: bring them back first.
    KeysMayBeCold {
        table: i64,
        keys: Vec<serde_json::Value>,
    },
}

/// What an ErrorResponse frame from Postgres says about retrying: `Some` only for the
/// conditions above, with their SQLSTATE and name (and, for keys, a well-formed DETAIL).
pub fn retry(frame: &[u8]) -> Option<Retry> {
    let code = error_field(frame, b'C')?;
    match (code, error_field(frame, b'n')?) {
        ("40001", COLD_TIER_CHANGED) => Some(Retry::ColdTierChanged),
        ("55000", KEYS_MAY_BE_COLD) => {
            let detail: serde_json::Value = serde_json::from_str(error_field(frame, b'D')?).ok()?;
            Some(Retry::KeysMayBeCold {
                table: detail.get("table")?.as_i64()?,
                keys: detail.get("keys")?.as_array()?.clone(),
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ErrorResponse frame with the given fields.
    fn frame(fields: &[(u8, &str)]) -> Vec<u8> {
        let mut body = Vec::new();
        for (tag, value) in fields {
            body.push(*tag);
            body.extend_from_slice(value.as_bytes());
            body.push(0);
        }
        body.push(0);
        let mut out = vec![b'E'];
        out.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }

    #[test]
    fn conditions_are_known_by_code_and_name_not_text() {
        let changed = frame(&[
            (b'S', "ERROR"),
            (b'C', "40001"),
            (b'M', "anything"),
            (b'n', COLD_TIER_CHANGED),
        ]);
        assert_eq!(retry(&changed), Some(Retry::ColdTierChanged));
        // A client's own serialization failure, even with coldwire's words, is not retried.
        let theirs = frame(&[
            (b'C', "40001"),
            (
                b'M',
                "coldwire: the cold tier of t changed as the statement started",
            ),
        ]);
        assert_eq!(retry(&theirs), None);
        let other_name = frame(&[(b'C', "40001"), (b'n', KEYS_MAY_BE_COLD)]);
        assert_eq!(retry(&other_name), None);
    }

    #[test]
    fn keys_come_from_the_detail() {
        let keys = frame(&[
            (b'C', "55000"),
            (b'D', r#"{"table": 7, "keys": [{"id": 5}]}"#),
            (b'n', KEYS_MAY_BE_COLD),
        ]);
        assert_eq!(
            retry(&keys),
            Some(Retry::KeysMayBeCold {
                table: 7,
                keys: vec![serde_json::json!({"id": 5})]
            })
        );
        let bad = frame(&[
            (b'C', "55000"),
            (b'D', "not json"),
            (b'n', KEYS_MAY_BE_COLD),
        ]);
        assert_eq!(retry(&bad), None);
        assert_eq!(retry(b"Z\0\0\0\x05I"), None);
    }
}
