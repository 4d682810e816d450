//! How many mirror rows a flush takes (DESIGN §5): the excess over `hot_row_limit`, in whole
//! `min_flush_rows` chunks, a remainder of at least half a chunk counting as one more.

use crate::catalog::Policy;

/// How many of the `pending` mirror rows (oldest first) to flush now; 0 when none is due.
pub fn rows_to_flush(pending: i64, policy: &Policy, drain: bool) -> i64 {
    if drain {
        return pending.max(0);
    }
    let excess = pending - policy.hot_row_limit;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(limit: i64, chunk: i64) -> Policy {
        Policy {
            hot_row_limit: limit,
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
