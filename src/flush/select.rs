//! How many mirror rows a flush takes (DESIGN §5): the excess over `hot_row_limit`, in whole
//! `min_flush_rows` chunks, a remainder of at least half a chunk counting as one more.

use crate::catalog::Policy;
use crate::sql::quote::quote_ident;

/// How many of the `pending` mirror rows (oldest first) the row limit makes due now; 0
/// when none is, or the policy has no row limit.
pub fn rows_to_flush(pending: i64, policy: &Policy, drain: bool) -> i64 {
    if drain {
        return pending.max(0);
    }
    let Some(limit) = policy.hot_row_limit else {
        return 0;
    };
    let excess = pending - limit;
    if excess <= 0 {
        return 0;
    }
    let chunk = policy.min_flush_rows.max(1);
    let mut chunks = excess / chunk;
    let remainder = excess % chunk;
    if remainder > 0 && remainder * 2 >= chunk {
        chunks += 1;
    }
    (chunks * chunk).min(pending)
}

/// How many rows due by age an automatic flush waits for: half a `min_flush_rows` chunk,
/// as the row limit's remainder rule (an explicit flush takes every row due).
pub fn aged_rows_worth_a_flush(policy: &Policy) -> i64 {
    ((policy.min_flush_rows.max(1) + 1) / 2).max(1)
}

/// The condition that a mirror row joined to its heap row `heap` (LEFT JOIN) is due by
/// age: its key was deleted, or its `column` is older than the interval bound as `$1`
/// (text). A NULL age is never due.
pub(super) fn aged_or_deleted(heap: &str, first_pk: &str, column: &str) -> String {
    format!(
        "({heap}.{pk} IS NULL OR {heap}.{age} < now() - $1::text::interval)",
        pk = quote_ident(first_pk),
        age = quote_ident(column)
    )
}

/// The age order of mirror rows `mirror` joined to their heap rows `heap`: deleted keys
/// first, then by age (NULL last), then by seq. Every row due by age comes before every
/// row that is not, so the first n rows hold all that are due when n counts them.
pub(super) fn age_order(mirror: &str, heap: &str, first_pk: &str, column: &str) -> String {
    format!(
        "{heap}.{pk} IS NOT NULL, {heap}.{age} NULLS LAST, {mirror}.seq",
        pk = quote_ident(first_pk),
        age = quote_ident(column)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(limit: i64, chunk: i64) -> Policy {
        Policy {
            hot_row_limit: Some(limit),
            min_flush_rows: chunk,
            ..Policy::default()
        }
    }

    #[test]
    fn whole_chunks_of_the_excess() {
        let cases = [
            // (pending, limit, chunk, expected)
            (100, 100, 10, 0),
            (50, 100, 10, 0),
            (110, 100, 10, 10),
            (104, 100, 10, 0),  // remainder 4 < half a chunk
            (105, 100, 10, 10), // remainder 5 = half a chunk counts
            (129, 100, 10, 30),
            (1_000_000, 100_000, 10_000, 900_000),
            (7, 0, 10, 7), // a chunk larger than what is pending: all of it
            (3, 0, 10, 0), // less than half a chunk: wait
        ];
        for (pending, limit, chunk, expected) in cases {
            assert_eq!(
                rows_to_flush(pending, &policy(limit, chunk), false),
                expected,
                "{pending} {limit} {chunk}"
            );
        }
    }

    #[test]
    fn drain_takes_everything() {
        assert_eq!(rows_to_flush(42, &policy(100, 10), true), 42);
        assert_eq!(rows_to_flush(0, &policy(0, 1), true), 0);
    }
}
