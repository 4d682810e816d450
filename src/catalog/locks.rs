//! coldwire's advisory locks. The catalog's SQL takes the classes from these constants too
//! (the migrations through [`super::migrate`]'s placeholders), so Rust and plpgsql lock
//! the same thing.

/// Key of the transaction-level advisory lock that serializes migrations within one
/// database: the ASCII bytes of `coldwire` read as a big-endian i64. Other coldwire locks
/// must not use the single-bigint form with this value.
pub const MIGRATION_LOCK_KEY: i64 = i64::from_be_bytes(*b"coldwire");

/// Advisory-lock class (first int4 key; the second is the table's id) of a tiered table:
/// writers and reads in transaction blocks hold it shared, finalize and untier exclusive
/// (DESIGN §7).
pub const TABLE_LOCK_CLASS: i32 = 0x6377_0001;

/// Advisory-lock class (first int4 key) held by the executor running a table's job, so
/// two executors never work on one table at once, even after a reclaim.
pub const FLUSH_LOCK_CLASS: i32 = 0x6377_0002;
