//! coldwire's own statements inside a client's session: the frames that run one without
//! touching the client's statements or portals, and what the read lock answers.

use std::collections::HashMap;

use bytes::{BufMut, BytesMut};

use crate::catalog::locks::TABLE_LOCK_CLASS;
use crate::wire::extended as ext;
use crate::wire::messages as msg;

/// coldwire's own statement run just before a client's statement that writes a tiered
/// table: its text and binary parameters (None: NULL).
#[derive(Debug)]
pub struct OwnCall {
    pub sql: String,
    pub params: Vec<Option<BytesMut>>,
    /// For a rehydration: the rows it brings back.
    pub brought_back: Option<BroughtBack>,
    /// For a rehydration: the table whose lock it takes shared, and the generation it
    /// checks the table is at once it holds it (its guard).
    pub locks: Option<(i64, i64)>,
}

/// The rows of one tiered table a rehydration brings back into the heap, by key (in
/// [`ColdTable::key_of`](crate::cold::scan::ColdTable::key_of)'s encoding).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BroughtBack {
    pub table: i64,
    pub keys: Vec<Vec<u8>>,
    /// The rehydration answered that it inserted every one of them itself: their
    /// mirror rows are its transaction's own (none was claimed by another transaction
    /// first).
    pub confirmed: bool,
}

impl BroughtBack {
    /// Reads the rehydration's answer, one DataRow holding the rows it inserted (int8,
    /// binary).
    pub fn answered(&mut self, values: &[Option<Vec<u8>>]) {
        let inserted = match values {
            [Some(v)] => <[u8; 8]>::try_from(v.as_slice())
                .ok()
                .map(i64::from_be_bytes),
            _ => None,
        };
        self.confirmed = inserted.is_some_and(|n| usize::try_from(n) == Ok(self.keys.len()));
    }
}

impl OwnCall {
    /// Its frames ([`own_frames`]).
    pub fn frames(&self) -> BytesMut {
        own_frames(&self.sql, &self.params)
    }
}

/// Completions that answer [`own_frames`]: two CloseCompletes, ParseComplete,
/// BindComplete, CommandComplete, two CloseCompletes.
pub const OWN_COMPLETIONS: u32 = 7;

/// coldwire's own statement `sql` with `params` (binary), run inside the client's group
/// without touching its unnamed statement or portal: Close of portal and statement (a
/// leftover of an earlier failure; closing a name that does not exist is no error), Parse,
/// Bind, Execute of named statement and portal `coldwire_own`, Close of both (a named
/// portal would otherwise live until the transaction ends).
pub fn own_frames(sql: &str, params: &[Option<BytesMut>]) -> BytesMut {
    let values: Vec<Option<&[u8]>> = params.iter().map(|p| p.as_deref()).collect();
    let mut out = BytesMut::new();
    ext::encode_close(&mut out, b'P', OWN_STATEMENT);
    ext::encode_close(&mut out, b'S', OWN_STATEMENT);
    ext::encode_parse(&mut out, OWN_STATEMENT, sql, &[]);
    ext::encode_bind(&mut out, OWN_STATEMENT, OWN_STATEMENT, &values, true);
    ext::encode_execute(&mut out, OWN_STATEMENT);
    ext::encode_close(&mut out, b'P', OWN_STATEMENT);
    ext::encode_close(&mut out, b'S', OWN_STATEMENT);
    out
}

/// The statement and portal name of coldwire's own statements in a session.
pub const OWN_STATEMENT: &str = "coldwire_own";

/// The name of coldwire's savepoint (below), one literal for the statements built on it.
macro_rules! savepoint_name {
    () => {
        "coldwire_internal_lock_savepoint"
    };
}

/// The savepoint coldwire's own part of a client's group runs under inside a transaction
/// block when it takes a table's lock itself (a rehydration whose guard may fail): rolled
/// back to, and the group run again, when it does.
pub const SAVEPOINT_SQL: &str = concat!("SAVEPOINT ", savepoint_name!());
/// Ends that savepoint once coldwire's part succeeded (its locks stay with the block).
pub const RELEASE_SQL: &str = concat!("RELEASE SAVEPOINT ", savepoint_name!());

/// coldwire's own group, with its own Sync, that undoes its part of a group whose guard
/// failed under [`SAVEPOINT_SQL`] and ends the savepoint: the block is as before the group.
pub fn rollback_frames() -> BytesMut {
    let mut out = own_frames(concat!("ROLLBACK TO SAVEPOINT ", savepoint_name!()), &[]);
    out.extend_from_slice(&own_frames(RELEASE_SQL, &[]));
    out.extend_from_slice(&ext::empty(msg::SYNC));
    out
}

/// How coldwire's own statement runs: prepared once per session under a name of its own
/// and bound at every run after (a rehydration's statement costs Postgres about 50 µs to
/// parse and plan, more than its inserts), or parsed and closed again each time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnForm {
    /// Postgres has it prepared as number `n` ([`own_statement_name`]): bound only.
    Bind(u64),
    /// Prepared now as number `n`, then bound.
    Parse(u64),
    /// Parsed as [`OWN_STATEMENT`] and closed after ([`own_frames`]).
    Once,
}

/// The upstream name of coldwire's own prepared statement number `id` (never reused in a
/// session, so a statement parsed again never meets an old one of the same name).
pub fn own_statement_name(id: u64) -> String {
    format!("coldwire_own_{id}")
}

/// [`own_frames`] for `form`, and how many completions answer them. A prepared statement
/// is bound to portal [`OWN_STATEMENT`], closed first (a leftover of an earlier failure)
/// and after.
pub fn own_frames_as(form: &OwnForm, sql: &str, params: &[Option<BytesMut>]) -> (BytesMut, u32) {
    let name = match form {
        OwnForm::Once => return (own_frames(sql, params), OWN_COMPLETIONS),
        OwnForm::Bind(n) | OwnForm::Parse(n) => own_statement_name(*n),
    };
    let values: Vec<Option<&[u8]>> = params.iter().map(|p| p.as_deref()).collect();
    let mut out = BytesMut::new();
    let mut completions = 4;
    ext::encode_close(&mut out, b'P', OWN_STATEMENT);
    if matches!(form, OwnForm::Parse(_)) {
        ext::encode_parse(&mut out, &name, sql, &[]);
        completions += 1;
    }
    ext::encode_bind(&mut out, OWN_STATEMENT, &name, &values, true);
    ext::encode_execute(&mut out, OWN_STATEMENT);
    ext::encode_close(&mut out, b'P', OWN_STATEMENT);
    (out, completions)
}

/// coldwire's own group that asks `coldwire.read_lock` for `tables` (DESIGN §6.4), as
/// [`own_frames`] (it never touches the client's unnamed statement or portal), with its
/// own Sync (sent only inside a transaction block, where a Sync ends nothing).
pub fn read_lock_frames(tables: &[i64]) -> BytesMut {
    let ids = int_array(tables, true);
    let mut out = own_frames(
        "SELECT table_id, generation FROM coldwire.read_lock($1)",
        &[Some(ids)],
    );
    out.extend_from_slice(&ext::empty(msg::SYNC));
    out
}

/// coldwire's own group that asks which tables of the session's database carry
/// coldwire's capture triggers (its tiered tables), as one text of their names, NULL if
/// none, from catalogs every role may read, with its own Sync (sent between the client's
/// groups).
pub fn tiered_tables_frames() -> BytesMut {
    let sql = format!(
        "SELECT pg_catalog.string_agg(t.tgrelid::pg_catalog.regclass::pg_catalog.text, ', ' \
         ORDER BY t.tgrelid::pg_catalog.regclass::pg_catalog.text) \
         FROM pg_catalog.pg_trigger t \
         JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid \
         JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace \
         WHERE n.nspname = 'coldwire' AND t.tgname = '{}'",
        crate::catalog::capture::TRIGGERS[3]
    );
    let mut out = own_frames(&sql, &[]);
    out.extend_from_slice(&ext::empty(msg::SYNC));
    out
}

/// The (table, generation) pairs of `coldwire.read_lock`'s binary rows.
pub fn read_lock_rows(rows: &[Vec<Option<Vec<u8>>>]) -> HashMap<i64, i64> {
    let int8 = |v: &Option<Vec<u8>>| {
        v.as_deref()
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(i64::from_be_bytes)
    };
    rows.iter()
        .filter_map(|r| Some((int8(r.first()?)?, int8(r.get(1)?)?)))
        .collect()
}

/// coldwire's own group that takes (`hold`) or gives back the session-level shared lock
/// of each of `tables` (ids in ascending order, the order every coldwire lock of several
/// tables is taken in): while a session holds it, no flush of the table finalizes, so the
/// generation a read was planned for stays current until the lock is given back. Built
/// as [`own_frames`], with its own Sync.
pub fn table_lock_frames(tables: &[i64], hold: bool) -> BytesMut {
    let function = if hold {
        "pg_advisory_lock_shared"
    } else {
        "pg_advisory_unlock_shared"
    };
    // The second key of the lock is the id as int4, as in finalize and the catalog's SQL.
    let ids = int_array(tables, false);
    let class = BytesMut::from(&TABLE_LOCK_CLASS.to_be_bytes()[..]);
    let mut out = own_frames(
        &format!(
            "SELECT pg_catalog.{function}($1::int4, t) FROM pg_catalog.unnest($2::int4[]) AS t"
        ),
        &[Some(class), Some(ids)],
    );
    out.extend_from_slice(&ext::empty(msg::SYNC));
    out
}

/// `values` as a one-dimensional array in binary format: of int8 (`wide`) or of int4
/// (each value truncated to 32 bits).
fn int_array(values: &[i64], wide: bool) -> BytesMut {
    let mut out = BytesMut::new();
    out.put_i32(1); // one dimension
    out.put_i32(0); // no NULLs
    out.put_u32(if wide { 20 } else { 23 }); // int8 or int4
    out.put_i32(values.len() as i32);
    out.put_i32(1);
    for v in values {
        if wide {
            out.put_i32(8);
            out.put_i64(*v);
        } else {
            out.put_i32(4);
            out.put_i32(*v as i32);
        }
    }
    out
}

/// coldwire's own statement that fails with `error` unless the session reads or writes
/// hot rows only on purpose: `coldwire.hot_only_reads` or `coldwire.hot_only_writes` is
/// on (a session setting, `SET LOCAL`, a role's or database's default), which Postgres
/// knows and coldwire does not. Otherwise it returns true.
pub fn refusal_unless_hot_only_sql(error: &crate::wire::messages::ErrorFields) -> String {
    let on = |setting: &str| {
        format!(
            "lower(coalesce(pg_catalog.current_setting('{setting}', true), '')) IN {}",
            crate::catalog::capture::HOT_ONLY_ON
        )
    };
    let refusal =
        crate::sql::rewrite::refusal_expression(&error.code, &error.message, error.hint.as_deref());
    format!(
        "SELECT CASE WHEN {} OR {} THEN true ELSE {} END",
        on(crate::catalog::registry::HOT_ONLY_READS_SETTING),
        on(crate::catalog::capture::HOT_ONLY_SETTING),
        refusal,
    )
}
