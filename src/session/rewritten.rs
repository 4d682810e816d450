//! Client messages that read tiered tables (DESIGN §6.2): which ones coldwire must plan,
//! what it sends upstream in their place, and the shape of extended-protocol groups,
//! which decides whether a guard failure in one can be retried unseen (DESIGN §6.4).
//!
//! - A simple Query is planned whole and runs as the unnamed statement
//!   ([`plan_query`]); its ParseComplete and BindComplete are coldwire's.
//! - A Parse is rewritten ([`prepare`]) under the client's statement name; its
//!   ParameterDescription is trimmed to the client's parameters (`SessionState`).
//! - A Bind of a rewritten statement gets its cold parameters appended ([`bind`]); when
//!   they cannot be planned, parameters that make the guard raise the error instead, so
//!   it reaches the client in protocol order.

use std::sync::{Arc, PoisonError};

use bytes::BytesMut;

use super::admin::Answer;
use super::reads::{
    own_frames, own_frames_as, refusal_unless_hot_only_sql, OwnCall, OwnForm, Part, Plan,
    PreparedRead, PreparedWrite, ReadPath, TxnView, OWN_COMPLETIONS, RELEASE_SQL, SAVEPOINT_SQL,
};
use super::shared::Shared;
use super::sql_prepared::{may_use_sql_prepared, sql_prepared, SqlPrepared};
use super::state::{
    hot_statement_name, HotForm, OwnPrefix, Phase, Planned, Prepared, RewrittenStatement,
    SessionState,
};
use super::SessionError;
use crate::error::fields;
use crate::sql::classify::{contains_ignore_ascii_case, kinds, Kind};
use crate::sql::copy_to::{copy_to, CopyOptions};
use crate::sql::params::{BoundParams, Settings};
use crate::wire::extended::{self as ext, Bind, Parse};
use crate::wire::messages as msg;
use crate::wire::messages::{ErrorFields, Severity};
use crate::wire::WireError;

/// Where the client direction stops draining to do something asynchronous.
#[derive(Debug)]
pub enum Stop {
    /// Answer an admin call.
    Admin(Answer),
    /// Plan a simple Query that may read a tiered table (this frame).
    Read(BytesMut),
    /// Rewrite a Parse whose statement may read a tiered table.
    Prepare(BytesMut),
    /// Give a Bind of a rewritten statement its cold parameters.
    Bind(BytesMut),
    /// Plan again the statement of a Bind: one relayed as the client wrote it that may
    /// name a tiered table now, or one rewritten before the registry changed
    /// ([`replan`]); then take the Bind again.
    Replan(BytesMut),
    /// A retry was decided on before this frame (not yet recorded) was seen: run it
    /// first, then take the frame again.
    RetryFirst(BytesMut),
}

/// The stop a client frame on its way upstream needs, if it reads tiered tables.
///
/// # Errors
/// A malformed Parse or Bind.
pub fn read_stop(
    tag: u8,
    frame: &[u8],
    reads: &ReadPath,
    state: &mut SessionState,
) -> Result<Option<Stop>, WireError> {
    Ok(match tag {
        msg::QUERY => {
            let stop = match query_text(frame) {
                Some(sql) => may_plan(sql, reads, state),
                // Not UTF-8 (another client_encoding): refused if it may name a tiered
                // table, since coldwire cannot plan it.
                None => reads.may_name_tiered_bytes(frame.get(5..).unwrap_or_default()),
            };
            stop.then(|| Stop::Read(BytesMut::from(frame)))
        }
        msg::PARSE => {
            let stop = match Parse::decode(frame) {
                Ok(parse) => may_plan(parse.query, reads, state),
                Err(e) => match Parse::decode_raw(frame) {
                    Ok((_, query)) => reads.may_name_tiered_bytes(query),
                    Err(_) => return Err(e),
                },
            };
            stop.then(|| Stop::Prepare(BytesMut::from(frame)))
        }
        msg::BIND => {
            let replanned = std::mem::take(&mut state.bind_replanned);
            if !state.has_rewritten_statements() && !state.has_passed_statements() {
                return Ok(None);
            }
            let name = match Bind::statement_of(frame) {
                Ok(name) => name,
                Err(e) if state.has_rewritten_statements() => return Err(e),
                // Postgres says what is wrong with it.
                Err(_) => return Ok(None),
            };
            // While the catalog could not be read lately, statements keep their plans
            // rather than every Bind waiting on it.
            if state.rewritten_statement(name).is_some() {
                let again = !replanned
                    && state.rewritten_to_plan(name, || reads.names_version())
                    && !reads.catalog_failing();
                Some(if again {
                    Stop::Replan(BytesMut::from(frame))
                } else {
                    Stop::Bind(BytesMut::from(frame))
                })
            } else if !replanned
                && state.passed_to_plan(
                    name,
                    || reads.names_version(),
                    |q| reads.may_name_tiered_bytes(q),
                )
                && (!reads.catalog_failing() || passed_unplannable(name, reads, state))
            {
                // While the catalog cannot be read, one that may name a table tiered since
                // it was checked is refused (`replan`).
                Some(Stop::Replan(BytesMut::from(frame)))
            } else {
                None
            }
        }
        _ => None,
    })
}

/// Whether coldwire may have to plan `sql`: it may name a tiered table, or use a write
/// the session prepared with SQL-level PREPARE.
fn may_plan(sql: &str, reads: &ReadPath, state: &SessionState) -> bool {
    reads.may_name_tiered(sql) || may_use_sql_prepared(sql, state, || reads.names_version())
}

/// The SQL text of a Query frame.
pub fn query_text(frame: &[u8]) -> Option<&str> {
    let body = frame.get(5..)?;
    let end = body.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&body[..end]).ok()
}

/// The session's settings the read and write paths depend on (client_encoding,
/// TimeZone), from what the server reported.
fn session_settings(state: &SessionState) -> Settings {
    Settings::of(|name| state.parameters.get(name).cloned())
}

/// For an `EXPLAIN` of a read: a NoticeResponse telling, per tiered table reference, the
/// path the statement takes (as `coldwire.explain` does), sent to the client just before
/// the BindComplete of the statement (`SessionState::explain_notice`), so ahead of the
/// plan Postgres gives and at a message boundary.
pub async fn explain_notice(
    read: &PreparedRead,
    params: Option<&BoundParams<'_>>,
    shared: &Shared<'_>,
) -> Option<BytesMut> {
    let explained = read.explained.as_deref()?;
    let settings = session_settings(&shared.state.lock().unwrap_or_else(PoisonError::into_inner));
    let unbound = BoundParams {
        settings,
        ..BoundParams::none()
    };
    let (declared, params) = match params {
        Some(params) => (read.client_params, params),
        None => (0, &unbound),
    };
    let message = match read_path(shared)
        .explain_bound(explained, declared, params)
        .await
    {
        // The rewritten text is what Postgres's plan shows; the notice tells the rest.
        Ok(text) => {
            let references = text
                .find("Reference ")
                .map_or(text.as_str(), |at| &text[at..]);
            format!("coldwire: {}", references.trim_end())
        }
        Err(e) => format!(
            "coldwire: the cold side could not be planned: {}",
            e.client_error().message
        ),
    };
    Some(
        ErrorFields {
            severity: Severity::Notice,
            code: "00000".into(),
            message,
            detail: None,
            hint: None,
        }
        .encode(),
    )
}

pub(super) fn read_path(shared: &Shared<'_>) -> Arc<ReadPath> {
    shared
        .reads()
        .expect("read stops exist only with a read path")
}

/// A simple Query that reads tiered tables.
pub enum QueryRead {
    /// A read, rewritten.
    Select(Arc<PreparedRead>),
    /// `COPY … TO STDOUT`: the rewrite of its query and the COPY's options.
    Copy(Arc<PreparedRead>, CopyOptions),
    /// Several statements, some of them reads of tiered tables.
    Multi(Vec<Part>),
    /// A write to a tiered table (or a locking read of one).
    Write(Arc<PreparedWrite>),
    /// A call of a function that reads tiered tables server-side: run as it is behind
    /// coldwire's own check, which fails with these fields unless the session reads or
    /// writes hot rows only on purpose ([`refusal_unless_hot_only_sql`]).
    HotOnlyCall(ErrorFields),
}

impl QueryRead {
    /// The tiered tables it reads.
    pub fn table_ids(&self) -> Vec<i64> {
        match self {
            QueryRead::Select(p) | QueryRead::Copy(p, _) => p.table_ids(),
            QueryRead::Write(w) => vec![w.table_id],
            QueryRead::HotOnlyCall(_) => Vec::new(),
            QueryRead::Multi(parts) => {
                let mut ids: Vec<i64> = parts
                    .iter()
                    .flat_map(|p| match p {
                        Part::Read(r) => r.table_ids(),
                        Part::Write(w, _) => vec![w.table_id],
                        Part::Plain(_) | Part::HotOnlyCall(..) => Vec::new(),
                    })
                    .collect();
                ids.sort_unstable();
                ids.dedup();
                ids
            }
        }
    }
}

/// The rewrite of a simple Query, when it reads tiered tables.
///
/// # Errors
/// What the client is told: the catalog could not be read; a COPY of a tiered table with
/// options Postgres would refuse, or into a server-side file or program (which would see
/// only the hot rows).
pub async fn prepare_query(
    query: &[u8],
    shared: &Shared<'_>,
) -> Result<Option<QueryRead>, ErrorFields> {
    match query_text(query) {
        Some(sql) => prepare_sql(sql, 0, shared).await,
        // Only text that names a tiered table is refused (the names read afresh).
        None => match read_path(shared)
            .names_tiered_now_bytes(query.get(5..).unwrap_or_default())
            .await
        {
            Ok(false) => Ok(None),
            Ok(true) => Err(not_utf8()),
            Err(e) => Err(e.client_error()),
        },
    }
}

/// The refusal of a statement that may name a tiered table but is not UTF-8: coldwire
/// cannot parse it, so cannot plan it.
fn not_utf8() -> ErrorFields {
    ErrorFields {
        severity: Severity::Error,
        code: "0A000".into(),
        message: "coldwire plans statements that name tiered tables only in UTF-8 text, and this one is not".into(),
        detail: None,
        hint: Some("SET client_encoding = 'UTF8' (cold rows are served to UTF-8 sessions only).".into()),
    }
}

/// [`prepare_query`] of statement text `sql` with `declared_params` parameter types.
async fn prepare_sql(
    sql: &str,
    declared_params: usize,
    shared: &Shared<'_>,
) -> Result<Option<QueryRead>, ErrorFields> {
    let reads = read_path(shared);
    let failed = |e: super::reads::PlanError| e.client_error();
    if sql.contains('\\') {
        refuse_unless_strings_conform(sql, &reads, shared).await?;
    }
    let in_block = {
        let state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.phase != Phase::Idle || state.outstanding_syncs() > 0
    };
    if reads.check_ddl(sql, in_block).await.map_err(failed)? {
        shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .catalog_changed = true;
    }
    // A COPY anywhere in the string is looked at first: its sub-protocol is Postgres's
    // own, so coldwire serves a COPY of a tiered table only as a Query of its own.
    let copying = if contains_ignore_ascii_case(sql, "copy") {
        pg_query::parse(sql, 0)
            .ok()
            .filter(|parsed| kinds(parsed).contains(&Kind::Copy))
    } else {
        None
    };
    if let Some(parsed) = &copying {
        if let Some(refusal) = reads.copy_refusal(sql, parsed).await.map_err(failed)? {
            return Err(refusal);
        }
        if parsed.protobuf.stmts.len() == 1 {
            return prepare_copy(sql, parsed, &reads).await;
        }
        // Of several statements, none may be a COPY of a tiered table: Postgres would
        // write its hot rows only.
        for statement in pg_query::split_with_parser(sql).unwrap_or_default() {
            let Ok(one) = pg_query::parse(statement, 0) else {
                continue;
            };
            if reads.copies_tiered(statement, &one).await.map_err(failed)? {
                return Err(fields(
                    "0A000",
                    "coldwire: a COPY of a tiered table in a Query string of several statements is not supported".into(),
                    Some("Send the COPY as a Query of its own.".into()),
                ));
            }
        }
    }
    match sql_prepared(sql, shared).await.map_err(failed)? {
        SqlPrepared::Execute(write) => return Ok(Some(QueryRead::Write(write))),
        // Relayed as it is: its EXECUTEs are planned.
        SqlPrepared::PrepareWrite => return Ok(None),
        SqlPrepared::HotOnlyCall(e) => return Ok(Some(QueryRead::HotOnlyCall(e))),
        SqlPrepared::Other => {}
    }
    match reads.prepare(sql, declared_params).await {
        Ok(Some(read)) => return Ok(Some(QueryRead::Select(read))),
        Ok(None) => {}
        Err(super::reads::PlanError::HotOnlyCall(e)) => return Ok(Some(QueryRead::HotOnlyCall(e))),
        Err(e) => return Err(failed(e)),
    }
    if let Some(write) = reads
        .prepare_write(sql, declared_params)
        .await
        .map_err(failed)?
    {
        return Ok(Some(QueryRead::Write(write)));
    }
    let Some(parts) = reads.prepare_multi(sql).await.map_err(failed)? else {
        return Ok(None);
    };
    // COPY runs its own sub-protocol; beside a statement on a tiered table it would be
    // served in the extended protocol, where coldwire does not serve COPY.
    if copying.is_some() {
        return Err(fields(
            "0A000",
            "coldwire: a COPY in the same Query string as a statement on a tiered table is not supported".into(),
            Some("Send the COPY as a Query of its own.".into()),
        ));
    }
    Ok(Some(QueryRead::Multi(parts)))
}

/// Refuses `sql`, which holds a backslash, when it names a tiered table and Postgres may
/// read it with `standard_conforming_strings` off: Postgres then reads a backslash in a
/// string as an escape, coldwire's parser as itself, so the two could disagree on where a
/// string ends and on what is SQL. The setting is the one Postgres reported once every
/// earlier request is answered (a `SET` may be in flight ahead of `sql`), or may change
/// within `sql` itself.
async fn refuse_unless_strings_conform(
    sql: &str,
    reads: &ReadPath,
    shared: &Shared<'_>,
) -> Result<(), ErrorFields> {
    if !reads
        .names_tiered_now(sql)
        .await
        .map_err(|e| e.client_error())?
    {
        return Ok(());
    }
    let changed_here = contains_ignore_ascii_case(sql, "standard_conforming_strings");
    if !changed_here {
        super::answer::wait_until_answered(shared).await;
    }
    let off = shared
        .state
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .parameters
        .get("standard_conforming_strings")
        .is_some_and(|v| v.eq_ignore_ascii_case("off"));
    if off || changed_here {
        return Err(fields(
            "0A000",
            "coldwire plans statements that name tiered tables only with standard_conforming_strings on when they hold a backslash".into(),
            Some("SET standard_conforming_strings = on (Postgres's default), in a statement of its own.".into()),
        ));
    }
    Ok(())
}

/// [`prepare_sql`] of a single COPY statement `sql`, parsed as `parsed`: a COPY TO of a
/// tiered table is served (or refused when it cannot be); any other is relayed.
async fn prepare_copy(
    sql: &str,
    parsed: &pg_query::ParseResult,
    reads: &ReadPath,
) -> Result<Option<QueryRead>, ErrorFields> {
    let failed = |e: super::reads::PlanError| e.client_error();
    let copy = copy_to(sql, parsed);
    let read = match &copy {
        Some(copy) => reads.prepare(&copy.select_sql(), 0).await.map_err(failed)?,
        None => None,
    };
    let (Some(copy), Some(read)) = (copy, read) else {
        // Only a COPY of a tiered table is coldwire's to serve; one it cannot (a query
        // that locks or writes its rows) would write the hot rows only.
        if reads.copies_tiered(sql, parsed).await.map_err(failed)? {
            return Err(fields(
                "0A000",
                "coldwire: this COPY of a tiered table is not supported (its query locks or writes the table's rows)".into(),
                Some("COPY a plain SELECT of the table, as a Query of its own.".into()),
            ));
        }
        return Ok(None);
    };
    if copy.to_server {
        return Err(fields(
            "0A000",
            "coldwire: COPY of a tiered table into a server-side file or program would miss its cold rows".into(),
            Some("Use COPY … TO STDOUT (psql's \\copy), which coldwire serves with every row.".into()),
        ));
    }
    let options = copy.options.map_err(|e| fields(e.code, e.message, None))?;
    Ok(Some(QueryRead::Copy(read, options)))
}

/// The plan for the simple Query `query`, already prepared; `txn` as for
/// [`ReadPath::cold_params`].
pub async fn plan_query(
    read: &QueryRead,
    query: &[u8],
    txn: TxnView<'_>,
    shared: &Shared<'_>,
) -> Plan {
    let (settings, candidates) = {
        let state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
        (session_settings(&state), state.write_candidates.clone())
    };
    let reads = read_path(shared);
    match read {
        QueryRead::Select(p) => reads.plan(p, txn, settings, false).await,
        QueryRead::Copy(p, o) => {
            let binary = o.format == crate::sql::copy_to::CopyFormat::Binary;
            reads.plan(p, txn, settings, binary).await
        }
        QueryRead::Multi(parts) => reads.plan_multi(parts, txn, settings, &candidates).await,
        QueryRead::HotOnlyCall(e) => {
            // Under the one name coldwire closes each time: a refusal leaves nothing
            // prepared behind.
            let (mut out, own) = refusal_part(&refusal_unless_hot_only_sql(e));
            ext::execute_unnamed(&mut out, query_text(query).unwrap_or_default(), &[], false);
            out.extend_from_slice(&ext::empty(msg::SYNC));
            Plan::Run(out, vec![own])
        }
        QueryRead::Write(write) => {
            let params = BoundParams {
                settings,
                ..BoundParams::none()
            };
            let planned = reads
                .rehydration(write, &params, txn, &candidates, false)
                .await;
            let text = query_text(query).unwrap_or_default();
            if txn.lock_here {
                return match planned {
                    Ok(Some(call)) if call.locks.is_some() => {
                        let mut out = BytesMut::new();
                        let own = under_savepoint(call, txn.quiet, &mut out, shared);
                        ext::execute_unnamed(&mut out, text, &[], false);
                        out.extend_from_slice(&ext::empty(msg::SYNC));
                        Plan::Run(out, own)
                    }
                    _ => Plan::LockFirst,
                };
            }
            match planned {
                Ok(call) => {
                    let (mut out, own) = match call.map(|call| own_call(call, txn.quiet, shared)) {
                        Some((frames, own)) => (frames, Some(own)),
                        None => (BytesMut::new(), None),
                    };
                    ext::execute_unnamed(&mut out, text, &[], false);
                    out.extend_from_slice(&ext::empty(msg::SYNC));
                    Plan::Run(out, own.into_iter().collect())
                }
                Err(e) => Plan::Fail(e.client_error()),
            }
        }
    }
}

/// The frames of coldwire's own `call` at the front of the client's group and the part
/// of the group they are, the statement prepared once per session and bound after
/// ([`SessionState::own_form`]).
fn own_call(call: OwnCall, quiet: bool, shared: &Shared<'_>) -> (BytesMut, OwnPrefix) {
    let mut state = shared.locked();
    let form = state.own_form(&call.sql, quiet);
    let parses = match form {
        OwnForm::Parse(n) => Some((call.sql.clone(), n)),
        OwnForm::Bind(_) | OwnForm::Once => None,
    };
    let (frames, left) = own_frames_as(&form, &call.sql, &call.params);
    (
        frames,
        OwnPrefix {
            before: 0,
            left,
            brought_back: call.brought_back,
            parses,
            ..OwnPrefix::default()
        },
    )
}

/// The frames of a rehydration `call` that takes its table's lock, inside a transaction
/// block whose snapshot coldwire has not asked for that table: under coldwire's
/// savepoint, so that a failed guard (a flush finalized since coldwire planned) can be
/// undone and the group run again instead of aborting the client's block. Appended to
/// `out`; the parts they are, in order: the savepoint, the rehydration, the release
/// (which, answered, says the block holds the lock and sees the generation checked).
fn under_savepoint(
    call: OwnCall,
    quiet: bool,
    out: &mut BytesMut,
    shared: &Shared<'_>,
) -> Vec<OwnPrefix> {
    let locks = call.locks;
    let statement = |sql: &str| OwnCall {
        sql: sql.to_owned(),
        params: Vec::new(),
        brought_back: None,
        locks: None,
    };
    let mut parts = Vec::with_capacity(3);
    for (i, call) in [statement(SAVEPOINT_SQL), call, statement(RELEASE_SQL)]
        .into_iter()
        .enumerate()
    {
        // An error of the SAVEPOINT itself would leave no savepoint to roll back to: it
        // is parsed each time, so that it cannot meet a statement freed unseen.
        let (frames, mut own) = own_call(call, quiet && i > 0, shared);
        out.unsplit(frames);
        own.in_savepoint = i > 0;
        if i == 2 {
            own.locks = locks.into_iter().collect();
        }
        parts.push(own);
    }
    parts
}

/// What becomes of a Parse.
pub enum ParseRewrite {
    /// Relayed unchanged.
    Unchanged,
    /// A read of tiered tables, rewritten.
    Read(Arc<PreparedRead>),
    /// A write to a tiered table: relayed unchanged, its cold rows rehydrated at Bind.
    Write(Arc<PreparedWrite>),
    /// A statement coldwire cannot serve in the extended protocol (`COPY … TO` of a
    /// tiered table, which would see the hot rows only): it fails with this error when
    /// executed.
    Refused(ErrorFields),
    /// A call of a function that reads tiered tables server-side: relayed, each Bind
    /// behind coldwire's check ([`QueryRead::HotOnlyCall`]).
    HotOnlyCall(ErrorFields),
}

/// The rewrite of a Parse's statement, with the registry version it was planned
/// against. When the catalog or the cold tier cannot be read, a statement that names no
/// table of the registry last read is relayed as written (checked again at its next Bind
/// once the catalog can be read), and for one that may, `None`: the Parse is to fail
/// ([`refusal_ahead`] of [`crate::error::cold_tier_unreadable`]), since Postgres would see
/// the hot rows only.
///
/// # Errors
/// A malformed Parse.
pub async fn prepare(
    frame: &[u8],
    shared: &Shared<'_>,
) -> Result<Option<(ParseRewrite, u64)>, SessionError> {
    if let Some(planned) = planned_now(frame, shared).await? {
        return Ok(Some(planned));
    }
    let (_, query) = Parse::decode_raw(frame)?;
    Ok(runs_unplanned(query, shared).then_some((ParseRewrite::Unchanged, 0)))
}

/// Whether statement text `sql`, which could not be planned for want of the catalog or
/// the cold tier, runs as written: it names no table of the registry last read, and
/// executes no statement the session prepared with SQL-level PREPARE (which may).
pub fn runs_unplanned(sql: &[u8], shared: &Shared<'_>) -> bool {
    !read_path(shared).may_name_known_tiered_bytes(sql)
        && !match std::str::from_utf8(sql) {
            Ok(sql) => may_use_sql_prepared(sql, &shared.locked(), || None),
            Err(_) => crate::sql::classify::bytes_contain_ignore_ascii_case(sql, "execute"),
        }
}

/// Whether the client's statement `name`, relayed as written, cannot run while the
/// catalog cannot be read: its text may name a table of the registry last read, and it
/// was not checked against that registry (the table was tiered since).
fn passed_unplannable(name: &str, reads: &ReadPath, state: &SessionState) -> bool {
    state.passed_may_name(name, reads.known_names_version(), |q| {
        reads.may_name_known_tiered_bytes(q)
    })
}

/// The client's Parse `frame`, which coldwire's refusal ahead of it fails: sent so that
/// Postgres skips it (and what follows until Sync), with no record of a statement.
///
/// # Errors
/// A malformed Parse.
pub fn parse_refused(frame: &[u8], shared: &Shared<'_>) -> Result<BytesMut, SessionError> {
    let (name, _) = Parse::decode_raw(frame)?;
    shared.locked().parse_sent(name);
    Ok(BytesMut::from(frame))
}

/// [`prepare_planned`] with the registry version it planned against, read first (names
/// that change meanwhile are met at the statement's next Bind); `None` when the catalog
/// or the cold tier could not be read.
///
/// # Errors
/// A malformed Parse.
async fn planned_now(
    frame: &[u8],
    shared: &Shared<'_>,
) -> Result<Option<(ParseRewrite, u64)>, SessionError> {
    let reads = read_path(shared);
    let Ok(names_at) = reads.names_version_now().await else {
        reads.catalog_failed();
        return Ok(None);
    };
    let planned = prepare_planned(frame, shared).await?;
    if planned.is_none() {
        reads.catalog_failed();
    }
    Ok(planned.map(|rewrite| (rewrite, names_at)))
}

/// [`prepare`], `None` when the catalog or the cold tier could not be read (logged).
///
/// # Errors
/// A malformed Parse.
async fn prepare_planned(
    frame: &[u8],
    shared: &Shared<'_>,
) -> Result<Option<ParseRewrite>, SessionError> {
    let parse = match Parse::decode(frame) {
        Ok(parse) => parse,
        Err(e) => {
            let (_, query) = Parse::decode_raw(frame).map_err(|_| e)?;
            return Ok(
                match read_path(shared).names_tiered_now_bytes(query).await {
                    Ok(false) => Some(ParseRewrite::Unchanged),
                    Ok(true) => Some(ParseRewrite::Refused(not_utf8())),
                    Err(_) => None,
                },
            );
        }
    };
    Ok(Some(
        match prepare_sql(parse.query, parse.param_types.len(), shared).await {
            Ok(None) => ParseRewrite::Unchanged,
            Ok(Some(QueryRead::Select(read))) => ParseRewrite::Read(read),
            Ok(Some(QueryRead::Write(write))) => ParseRewrite::Write(write),
            Ok(Some(QueryRead::HotOnlyCall(e))) => ParseRewrite::HotOnlyCall(e),
            // A Parse holds one statement (Postgres refuses more).
            Ok(Some(QueryRead::Multi(_))) => ParseRewrite::Unchanged,
            Ok(Some(QueryRead::Copy(..))) => ParseRewrite::Refused(ErrorFields {
                severity: Severity::Error,
                code: "0A000".into(),
                message: "coldwire serves COPY … TO STDOUT of tiered tables in the simple query protocol only".into(),
                detail: None,
                hint: Some("Send the COPY as a simple Query (psql's \\copy, PQexec), or SELECT the rows.".into()),
            }),
            Err(e) if e.code == "58030" => {
                tracing::warn!(message = %e.message, "could not prepare a read of a tiered table");
                return Ok(None);
            }
            Err(e) => ParseRewrite::Refused(e),
        },
    ))
}

/// The Parse to send for the client's `frame` given its rewrite (planned against
/// registry version `names_at`, 0 if none), recorded under the client's statement name.
///
/// # Errors
/// A malformed Parse.
pub fn parse_to_send(
    frame: &[u8],
    (rewrite, names_at): (ParseRewrite, u64),
    shared: &Shared<'_>,
) -> Result<BytesMut, SessionError> {
    // The query itself need not be UTF-8 for a Parse relayed as it is or refused.
    let (name, _) = Parse::decode_raw(frame)?;
    let mut state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
    state.parse_sent(name);
    let mut out = BytesMut::new();
    match rewrite {
        ParseRewrite::Unchanged => {
            state.statement_parsed(name, None, Some((frame, names_at)));
            // Its SQL PREPAREs are followed, as a relayed Parse's are.
            if let Ok((_, query)) = Parse::decode_raw(frame) {
                state.sql_prepares_sent(query);
            }
            out.extend_from_slice(frame);
        }
        // The name holds a statement that fails: nothing under it can run what coldwire
        // refused (an SQL-level EXECUTE of it included).
        ParseRewrite::Refused(error) => {
            state.statement_parsed(name, None, None);
            let sql = crate::sql::rewrite::refusal_sql(
                &error.code,
                &error.message,
                error.hint.as_deref(),
            );
            // The parameter types the client declared, when it declared every one: the
            // statement then takes the parameters the client binds (Postgres accepts
            // declared parameters the text does not use), so the client's Bind reaches
            // the Execute that raises coldwire's error, rather than a count mismatch.
            let declared = Parse::decode(frame)
                .ok()
                .map(|p| p.param_types)
                .filter(|types| types.iter().all(|&t| t != 0))
                .unwrap_or_default();
            ext::encode_parse(&mut out, name, &sql, &declared);
        }
        // Relayed, so that Postgres describes it as the client wrote it (parameter types
        // it infers included); each Bind runs behind coldwire's check, and so does an
        // SQL-level EXECUTE of it (`sql_prepared`).
        ParseRewrite::HotOnlyCall(error) => {
            state.statement_parsed(
                name,
                Some(RewrittenStatement::new(
                    Prepared::HotOnlyCall(error),
                    Vec::new(),
                    bytes::Bytes::copy_from_slice(frame),
                    names_at,
                )),
                None,
            );
            out.extend_from_slice(frame);
        }
        ParseRewrite::Read(read) => {
            let parse = Parse::decode(frame)?;
            ext::encode_parse(&mut out, parse.statement, &read.sql, &parse.param_types);
            state.statement_parsed(
                parse.statement,
                Some(RewrittenStatement::new(
                    Prepared::Read(read),
                    parse.param_types,
                    bytes::Bytes::copy_from_slice(frame),
                    names_at,
                )),
                None,
            );
        }
        ParseRewrite::Write(write) => {
            let parse = Parse::decode(frame)?;
            out.extend_from_slice(frame);
            state.statement_parsed(
                parse.statement,
                Some(RewrittenStatement::new(
                    Prepared::Write(write),
                    parse.param_types,
                    bytes::Bytes::copy_from_slice(frame),
                    names_at,
                )),
                None,
            );
        }
    }
    Ok(out)
}

/// Plans again the statement that the client's Bind `frame` binds, as if the client
/// parsed it now: a statement relayed as written when it named no tiered table that may
/// name one now (a table was tiered, or a view over one created, while the client kept
/// it prepared), or one coldwire rewrote whose table is no longer tiered. When what
/// Postgres holds under the name must change (a read rewritten, or no longer; coldwire's
/// refusal), returns the messages that replace it (a Close and a Parse, with the types
/// the client declared or Postgres inferred) and their own part, which the client must
/// not see; `None` when only coldwire's record of the statement changes. The caller
/// sends the Bind after them.
///
/// # Errors
/// A malformed Parse or Bind.
pub async fn replan(
    frame: &[u8],
    shared: &Shared<'_>,
) -> Result<Option<(BytesMut, OwnPrefix)>, SessionError> {
    let name = Bind::statement_of(frame)?;
    let Some(origin) = shared.locked().statement_origin(name) else {
        return Ok(None);
    };
    tracing::debug!(statement = name, "planning a prepared statement again");
    let reads = read_path(shared);
    // Within a second of a failure to read the catalog, not tried again.
    let planned = if reads.catalog_failing() {
        None
    } else {
        planned_now(&origin.parse, shared).await?
    };
    let mut state = shared.locked();
    // The catalog or the cold tier could not be read: the Bind runs as coldwire last
    // planned it (a rewritten one then fails, loudly, planning its cold rows), unless it
    // was relayed as written and may name a table of the registry last read (tiered
    // since it was checked): Postgres would read the hot rows only, so the Bind fails.
    let Some((rewrite, names_at)) = planned else {
        state.bind_replanned = true;
        return Ok(passed_unplannable(name, &reads, &state)
            .then(|| refusal_ahead(&crate::error::cold_tier_unreadable())));
    };
    // Only the client direction parses and closes: a DEALLOCATE answered meanwhile may
    // have freed it.
    if !state.still_holds(name, origin.id) {
        return Ok(None);
    }
    let types = origin.param_types;
    let statement = |prepared, param_types| {
        RewrittenStatement::new(prepared, param_types, origin.parse.clone(), names_at)
    };
    // What is to be planned, and the text Postgres is to hold (`None`: the client's).
    let (now, held) = match rewrite {
        ParseRewrite::Unchanged if origin.kind.is_none() && origin.held.is_none() => {
            state.passed_checked(name, names_at);
            state.bind_replanned = true;
            return Ok(None);
        }
        ParseRewrite::Unchanged => (
            Planned::Passed {
                parse: origin.parse.clone(),
                names_at,
                inferred: types.clone(),
            },
            None,
        ),
        ParseRewrite::Write(write) => (
            Planned::Rewritten(statement(Prepared::Write(write), types.clone())),
            None,
        ),
        ParseRewrite::HotOnlyCall(error) => (
            Planned::Rewritten(statement(Prepared::HotOnlyCall(error), Vec::new())),
            None,
        ),
        ParseRewrite::Read(read) => {
            let sql = read.sql.clone();
            (
                Planned::Rewritten(statement(Prepared::Read(read), types.clone())),
                Some(sql),
            )
        }
        ParseRewrite::Refused(error) => (
            Planned::Refused,
            Some(crate::sql::rewrite::refusal_sql(
                &error.code,
                &error.message,
                error.hint.as_deref(),
            )),
        ),
    };
    let changes = held != origin.held;
    let refused = matches!(now, Planned::Refused);
    // The same text under the name, and the same kind of plan: its record is renewed.
    let same_kind = match &now {
        Planned::Rewritten(r) => origin.kind == Some(std::mem::discriminant(&r.prepared)),
        _ => false,
    };
    let now = match now {
        Planned::Rewritten(r) if !changes && same_kind => {
            state.rewritten_checked(name, names_at, r.prepared);
            return Ok(None);
        }
        now => now,
    };
    let replanned = state.statement_replanned(name, now);
    if !changes {
        return Ok(None);
    }
    let mut out = BytesMut::new();
    ext::encode_close(&mut out, b'S', name);
    match held {
        // As for a Parse refused (`parse_to_send`), the types only when the client
        // declared or Postgres inferred every one: the client's Bind then reaches the
        // Execute that raises coldwire's error.
        Some(sql) if refused && types.contains(&0) => {
            ext::encode_parse(&mut out, name, &sql, &[]);
        }
        Some(sql) => ext::encode_parse(&mut out, name, &sql, &types),
        None => out.extend_from_slice(&origin.parse),
    }
    Ok(Some((
        out,
        OwnPrefix {
            left: 2,
            replanned,
            ..OwnPrefix::default()
        },
    )))
}

/// What the client's Bind `frame` binds, looked up once: the tables of the rewritten
/// statement it binds (none for a statement coldwire did not rewrite, or a malformed
/// Bind), whether that statement is a write, and the portal.
pub struct Bound {
    pub tables: Vec<i64>,
    pub write: bool,
    pub portal: String,
}

/// [`Bound`] for the client's Bind `frame`.
pub fn bound(frame: &[u8], shared: &Shared<'_>) -> Bound {
    let Ok(bind) = Bind::decode(frame) else {
        return Bound {
            tables: Vec::new(),
            write: false,
            portal: String::new(),
        };
    };
    let state = shared.locked();
    let (tables, write) = match state
        .rewritten_statement(bind.statement)
        .map(|s| &s.prepared)
    {
        Some(Prepared::Read(read)) => (read.table_ids(), false),
        Some(Prepared::Write(write)) => (vec![write.table_id], true),
        Some(Prepared::HotOnlyCall(_)) | None => (Vec::new(), false),
    };
    Bound {
        tables,
        write,
        portal: bind.portal.to_owned(),
    }
}

/// The frames of a Bind (`frame`) that fails with `error` (`unless_hot_only`: unless the
/// session reads or writes hot rows only on purpose): coldwire's own statement that
/// raises it, then the client's Bind, which the server skips (with what follows it) until
/// Sync, as after any error.
fn refused_frames(error: &ErrorFields, unless_hot_only: bool, frame: &[u8]) -> BoundFrames {
    let (mut frames, own) = if unless_hot_only {
        refusal_part(&refusal_unless_hot_only_sql(error))
    } else {
        refusal_ahead(error)
    };
    frames.extend_from_slice(frame);
    BoundFrames {
        notice: None,
        frames,
        own: vec![own],
        lock_first: false,
    }
}

/// coldwire's own statement that raises `error`, and its part: sent just ahead of a
/// client's message, it fails that message in protocol order (Postgres skips the
/// client's messages after it until Sync, as after any error).
pub fn refusal_ahead(error: &ErrorFields) -> (BytesMut, OwnPrefix) {
    refusal_part(&crate::sql::rewrite::refusal_sql(
        &error.code,
        &error.message,
        error.hint.as_deref(),
    ))
}

/// coldwire's own statement `sql`, which raises a refusal, and its part.
fn refusal_part(sql: &str) -> (BytesMut, OwnPrefix) {
    (
        own_frames(sql, &[]),
        OwnPrefix {
            before: 0,
            left: OWN_COMPLETIONS,
            refusal: true,
            ..OwnPrefix::default()
        },
    )
}

/// What to send for a client's Bind of a statement coldwire prepared.
pub struct BoundFrames {
    pub frames: BytesMut,
    /// A notice for the client ([`explain_notice`]), sent ahead of the next BindComplete
    /// (`SessionState::explain_notice`).
    pub notice: Option<BytesMut>,
    /// coldwire's own messages at the front of `frames` (a write's rehydration; hot
    /// forms closed and parsed), which the client must not see: their completions and
    /// the hot forms they parse and close (`before` of the first is the caller's to set).
    pub own: Vec<OwnPrefix>,
    /// Nothing was planned: the write's table is to be locked first (planned with
    /// [`TxnView::lock_here`], it needed no rehydration, which would have taken it).
    pub lock_first: bool,
}

/// The frames to send for the client's Bind `frame` of a statement coldwire prepared: for
/// a read, the Bind with coldwire's parameters after the client's; for a write, coldwire's
/// rehydration of the cold rows it may touch, then the Bind as it is. `txn` as for
/// [`ReadPath::cold_params`].
///
/// # Errors
/// A malformed Bind.
pub async fn bind(
    frame: &[u8],
    txn: TxnView<'_>,
    shared: &Shared<'_>,
) -> Result<BoundFrames, SessionError> {
    let unchanged = || BoundFrames {
        notice: None,
        frames: BytesMut::from(frame),
        own: Vec::new(),
        lock_first: false,
    };
    let bind = Bind::decode(frame)?;
    let (statement, settings, candidates) = {
        let state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
        (
            state.rewritten_statement(bind.statement).cloned(),
            session_settings(&state),
            state.write_candidates.clone(),
        )
    };
    let Some(statement) = statement else {
        return Ok(unchanged());
    };
    let client_params = match &statement.prepared {
        Prepared::Read(read) => read.client_params,
        Prepared::Write(write) => write.client_params,
        // Fails in protocol order, at coldwire's own Execute ahead of the client's Bind,
        // whatever it binds; the server then skips the client's messages until Sync.
        Prepared::HotOnlyCall(error) => return Ok(refused_frames(error, true, frame)),
    };
    if bind.params.len() != client_params {
        // Postgres refuses the Bind for its parameter count; let it say so.
        return Ok(unchanged());
    }
    let params = BoundParams {
        values: bind.params.clone(),
        binary: (0..bind.params.len()).map(|i| bind.is_binary(i)).collect(),
        declared: statement.param_types.clone(),
        settings,
    };
    let reads = read_path(shared);
    match &statement.prepared {
        Prepared::HotOnlyCall(_) => unreachable!("a checked call is answered above"),
        Prepared::Read(read) => {
            let cold = match reads.cold_params(read, &params, txn).await {
                Ok(cold) => cold,
                Err(e) => ReadPath::refusal_params(read, &e.client_error()),
            };
            // A named statement that binds no cold row runs its hot form (the unnamed
            // statement is parsed again too often for a second form to pay), once the
            // session is sure what its name holds (`SessionState::may_use_hot_form`).
            let hot = read.hot_form(&cold);
            let mut out = BytesMut::new();
            let mut own = 0;
            let mut hot_parse = None;
            let hot_closes;
            {
                let mut state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
                let hot = hot.filter(|_| state.may_use_hot_form(bind.statement));
                hot_closes = state.take_hot_to_close();
                for id in &hot_closes {
                    ext::encode_close(&mut out, b'S', &hot_statement_name(*id));
                    own += 1;
                }
                let form = hot.and_then(|hot| match state.hot_form(statement.id) {
                    Some(HotForm::Ready) => Some(hot),
                    // Its Parse is not answered yet: this Bind takes the full form.
                    Some(HotForm::Sent) => None,
                    None => {
                        let name = hot_statement_name(statement.id);
                        ext::encode_parse(&mut out, &name, hot.0, &statement.param_types);
                        state.hot_form_sent(statement.id);
                        hot_parse = Some(statement.id);
                        own += 1;
                        Some(hot)
                    }
                });
                match form {
                    Some((_, values)) => {
                        let name = hot_statement_name(statement.id);
                        Bind {
                            statement: &name,
                            ..bind.clone()
                        }
                        .encode_with_extra(&values, &mut out);
                    }
                    None => bind.encode_with_extra(&read.full_form(cold).1, &mut out),
                }
            }
            Ok(BoundFrames {
                notice: explain_notice(read, Some(&params), shared).await,
                frames: out,
                own: (own > 0)
                    .then_some(OwnPrefix {
                        before: 0,
                        left: own,
                        hot: hot_parse,
                        closes: hot_closes,
                        ..OwnPrefix::default()
                    })
                    .into_iter()
                    .collect(),
                lock_first: false,
            })
        }
        Prepared::Write(write) => {
            let planned = reads
                .rehydration(write, &params, txn, &candidates, false)
                .await;
            if txn.lock_here {
                return Ok(match planned {
                    Ok(Some(call)) if call.locks.is_some() => {
                        let mut out = BytesMut::new();
                        let own = under_savepoint(call, txn.quiet, &mut out, shared);
                        out.extend_from_slice(frame);
                        BoundFrames {
                            notice: None,
                            frames: out,
                            own,
                            lock_first: false,
                        }
                    }
                    _ => BoundFrames {
                        lock_first: true,
                        ..unchanged()
                    },
                });
            }
            let (mut out, own) = match planned {
                Ok(None) => return Ok(unchanged()),
                Ok(Some(call)) => own_call(call, txn.quiet, shared),
                // Fails in protocol order, at coldwire's own Execute; the server then
                // skips the client's messages until Sync, as after its own error.
                Err(e) => return Ok(refused_frames(&e.client_error(), false, frame)),
            };
            out.extend_from_slice(frame);
            Ok(BoundFrames {
                notice: None,
                frames: out,
                own: vec![own],
                lock_first: false,
            })
        }
    }
}
