//! The session's protocol decisions, sans-IO: for every frame the relay reads, what becomes
//! of it. [`ClientSide::on_client_frame`] decides for client frames (relay, drop, or stop
//! to plan or answer something first) and [`on_server_frame`] for server frames (relay,
//! drop, replace, hand coldwire's own statement its answer, or run a group again). Both
//! keep [`SessionState`] current on the way; the relay (`relay.rs`) only reads, writes and
//! carries out the actions. The state of each outstanding group is the `Group` of
//! `state.rs`: the client's, a rewritten read's or write's, or coldwire's own.

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::BytesMut;

use super::admin::{AdminSession, Disposition};
use super::reads::ReadPath;
use super::rewritten::{query_text, read_stop, Stop};
use super::state::{CopyOut, OwnGroup, OwnPrefix, Phase, Retry, RewrittenGroup, SessionState};
use super::SessionError;
use crate::catalog::conditions;
use crate::wire::extended::{self as ext, Bind};
use crate::wire::messages as msg;
use crate::wire::WireError;

/// Server frames the session tracks or rewrites; the others pass without a look unless
/// coldwire needs every frame (its own statement is being answered).
pub const UPSTREAM_INSPECTED: &[u8] = &[
    msg::AUTHENTICATION,
    msg::BACKEND_KEY_DATA,
    msg::PARAMETER_STATUS,
    msg::READY_FOR_QUERY,
    msg::PARSE_COMPLETE,
    msg::BIND_COMPLETE,
    msg::CLOSE_COMPLETE,
    msg::PARAMETER_DESCRIPTION,
    msg::ROW_DESCRIPTION,
    msg::NO_DATA,
    msg::ERROR_RESPONSE,
    // Completions, counted when they answer a group before its Sync (after a Flush).
    msg::COMMAND_COMPLETE,
    msg::EMPTY_QUERY_RESPONSE,
    msg::PORTAL_SUSPENDED,
    // Postgres ignores the client's Syncs from here to the client's CopyDone or CopyFail.
    msg::COPY_IN_RESPONSE,
];

/// SQLSTATE `26000` (invalid_sql_statement_name): a prepared statement that does not
/// exist, as coldwire's own are after a DEALLOCATE it could not see.
const UNDEFINED_STATEMENT: &str = "26000";

/// Whether an error of coldwire's own prepared statement says the statement itself is
/// gone or unusable (it does not exist, its cached plan cannot be used, a name it uses
/// no longer resolves), rather than its run failing: it is then prepared again.
fn statement_broken(code: &str) -> bool {
    code == UNDEFINED_STATEMENT || code == "0A000" || code.starts_with("42")
}

/// What the relay does with a server frame.
#[derive(Debug)]
pub enum ServerAction {
    /// Relay it to the client unchanged.
    Pass,
    /// Relay nothing: it answers something coldwire sent itself.
    Drop,
    /// Relay these bytes instead.
    Replace(BytesMut),
    /// Relay nothing, and hand coldwire's own statement, now answered, its result.
    Answered(OwnGroup),
    /// The server's cancel key: relay one coldwire issues in its place (DESIGN §9).
    CancelKey { pid: i32, secret: bytes::Bytes },
    /// Relay nothing: the answered group failed in a way coldwire retries unseen, and is
    /// to be sent again as retry number `attempt`.
    Retry { group: RewrittenGroup, attempt: u8 },
}

/// What the relay does with a client frame.
#[derive(Debug)]
pub enum ClientAction {
    /// Relay it upstream unchanged. `ends_retryable`: it is the Sync of a group that may
    /// be retried.
    Pass { ends_retryable: bool },
    /// Relay nothing (the rest of a group after an admin call failed).
    Drop,
    /// Stop relaying and do this first; the frame is part of it.
    Stop(Stop),
}

/// The client direction's protocol state besides [`SessionState`]: admin calls in
/// extended groups, the shape of the group being sent, and whether anything went
/// upstream since the last Sync.
#[derive(Default)]
pub struct ClientSide {
    pub admin: AdminSession,
    pub group: GroupShape,
    /// A frame other than Sync, Query or FunctionCall went upstream since the last one of
    /// those (frames streamed past the scanner set its flag instead).
    pub sent_since_sync: bool,
    /// An Execute went upstream since the last Sync (Query or FunctionCall): a statement
    /// of the group's implicit transaction ran, or will, before what comes next.
    pub executed_since_sync: bool,
    /// The registry version whose names the Parse being relayed was found not to name
    /// (0: none), recorded with it (`SessionState::statement_parsed`).
    names_at: u64,
}

impl ClientSide {
    /// Decides what becomes of a client frame. `streamed`: the scanner's flag, set when a
    /// frame went upstream without being inspected; `reads`: the session's read path, if
    /// coldwire serves its database.
    ///
    /// # Errors
    /// A malformed frame.
    pub fn on_client_frame(
        &mut self,
        state: &mut SessionState,
        reads: Option<&ReadPath>,
        tag: u8,
        frame: &[u8],
        streamed: &AtomicBool,
    ) -> Result<ClientAction, SessionError> {
        let dirty = self.sent_since_sync || streamed.load(Ordering::Relaxed);
        // The client sent something after the last group written: that group may not be
        // retried unseen (its retry would have to go ahead of this frame, which is
        // recorded now). `ClientDirection::send` sets it again as it writes.
        state.quiet_since_sync = false;
        match self.admin.on_frame(tag, frame, dirty)? {
            Disposition::Forward => {}
            Disposition::Drop => return Ok(ClientAction::Drop),
            Disposition::Answer(answer) => return Ok(ClientAction::Stop(Stop::Admin(answer))),
        }
        if tag == msg::PARSE {
            // Before the check: names that change meanwhile are met at its Bind.
            self.names_at = reads.and_then(ReadPath::names_version).unwrap_or(0);
        }
        if let Some(reads) = reads {
            if let Some(stop) = read_stop(tag, frame, reads, state)? {
                return Ok(ClientAction::Stop(stop));
            }
        }
        let ends_retryable = self.forwarded(state, tag, frame, false, streamed)?;
        self.sent_since_sync = !matches!(tag, msg::SYNC | msg::QUERY | msg::FUNCTION_CALL);
        self.executed_since_sync = match tag {
            msg::EXECUTE => true,
            msg::SYNC | msg::QUERY | msg::FUNCTION_CALL => false,
            _ => self.executed_since_sync,
        };
        Ok(ClientAction::Pass { ends_retryable })
    }

    /// Whether nothing of an extended-protocol group went upstream since the last Sync.
    pub fn at_boundary(&self, streamed: &AtomicBool) -> bool {
        !self.sent_since_sync && !streamed.load(Ordering::Relaxed)
    }

    /// Bookkeeping for a client frame going upstream as it is (or, with `tracked`, whose
    /// rewrite the caller already recorded): statement names, sync points, the shape of
    /// the extended group. Whether the frame is the Sync of a group that may be retried.
    ///
    /// # Errors
    /// A malformed Parse, Close or Describe.
    pub fn forwarded(
        &mut self,
        state: &mut SessionState,
        tag: u8,
        frame: &[u8],
        tracked: bool,
        streamed: &AtomicBool,
    ) -> Result<bool, WireError> {
        let mut retryable = false;
        match tag {
            msg::SYNC => {
                let retry = self.group.finish(streamed.swap(false, Ordering::Relaxed));
                retryable = retry.is_some();
                match retry {
                    Some(retry) => {
                        let in_block = state.phase == Phase::InTransaction;
                        state.rewritten_group_sent(RewrittenGroup {
                            retry: Some(retry),
                            in_block,
                            ..RewrittenGroup::default()
                        });
                    }
                    None => state.sync_sent(),
                }
            }
            msg::QUERY | msg::FUNCTION_CALL => {
                self.group.reset();
                streamed.store(false, Ordering::Relaxed);
                if tag == msg::QUERY {
                    state.query_sent(query_text(frame));
                } else {
                    state.sync_sent();
                }
            }
            _ => {
                match tag {
                    msg::EXECUTE => state.execute_sent(),
                    msg::COPY_DONE | msg::COPY_FAIL => state.copy_in_ended(),
                    _ => {}
                }
                self.group
                    .on_frame(tag, frame, tracked && tag == msg::BIND, state);
                if !tracked {
                    track_client_frame(tag, frame, state, self.names_at)?;
                }
            }
        }
        Ok(retryable)
    }
}

/// [`ClientSide::forwarded`]'s bookkeeping of a frame relayed as it is; `names_at` as
/// [`ClientSide`]'s.
fn track_client_frame(
    tag: u8,
    frame: &[u8],
    state: &mut SessionState,
    names_at: u64,
) -> Result<(), WireError> {
    match tag {
        msg::PARSE => {
            let (name, query) = ext::Parse::decode_raw(frame)?;
            state.parse_sent(name);
            state.statement_parsed(name, None, Some((frame, names_at)));
            // An SQL PREPARE runs at the Execute; remembered now, as a superset.
            state.sql_prepares_sent(query);
        }
        msg::CLOSE => match ext::target(frame, msg::CLOSE)? {
            ext::Target::Statement(name) => state.close_sent(Some(name)),
            ext::Target::Portal(_) => state.close_sent(None),
        },
        msg::DESCRIBE => {
            if let ext::Target::Statement(name) = ext::target(frame, msg::DESCRIBE)? {
                state.describe_statement_sent(name);
            }
        }
        msg::SYNC | msg::FUNCTION_CALL => state.sync_sent(),
        msg::QUERY => state.query_sent(query_text(frame)),
        _ => {}
    }
    Ok(())
}

/// Whether a CommandComplete's tag is `DEALLOCATE`, `DEALLOCATE ALL` or `DISCARD ALL`.
fn frees_statements(tag: &[u8]) -> bool {
    tag.starts_with(b"DEALLOCATE") || tag.starts_with(b"DISCARD ALL")
}

/// Decides what becomes of a server frame. `streamed`: the flag saying a frame of the
/// current group reached the client (set here for frames relayed without a look, and by
/// the scanner for frames streamed past it); a group that streamed anything cannot be
/// retried unseen.
///
/// # Errors
/// A malformed frame of a type coldwire reads.
pub fn on_server_frame(
    state: &mut SessionState,
    tag: u8,
    frame: &[u8],
    streamed: &AtomicBool,
) -> Result<ServerAction, WireError> {
    if let Some(action) = own_response(state, tag, frame)? {
        return Ok(action);
    }
    if tag == msg::BACKEND_KEY_DATA {
        let (pid, secret) =
            msg::backend_key_data(frame).ok_or(WireError::Malformed("BackendKeyData"))?;
        return Ok(ServerAction::CancelKey { pid, secret });
    }
    if let Some(action) = held_back(state, tag, frame, streamed)? {
        return Ok(action);
    }
    if !UPSTREAM_INSPECTED.contains(&tag) {
        // Looked at only while coldwire needed every frame.
        streamed.store(true, Ordering::Relaxed);
        return Ok(ServerAction::Pass);
    }
    if let Some(rewritten) = msg::sasl_without_channel_binding(frame) {
        return Ok(ServerAction::Replace(rewritten));
    }
    if tag == msg::ERROR_RESPONSE && state.own_failure.is_some() {
        let code = msg::ErrorFields::decode(frame)?.code;
        if let Some(cause) = state.block_failure(&code) {
            return Ok(ServerAction::Replace(cause.encode()));
        }
    }
    track_server_frame(state, tag, frame)?;
    if completes(tag) {
        state.completion_passed();
    }
    Ok(ServerAction::Pass)
}

/// What becomes of the server frame when it answers coldwire's own group: its rows and
/// error are collected, notices dropped, and at its ReadyForQuery the result goes to
/// whoever sent the group. ParameterStatus and notifications still reach the client.
/// `None` when the frame is not coldwire's.
fn own_response(
    state: &mut SessionState,
    tag: u8,
    frame: &[u8],
) -> Result<Option<ServerAction>, WireError> {
    let Some(own) = state.answering_own() else {
        return Ok(None);
    };
    match tag {
        msg::PARAMETER_STATUS | msg::NOTIFICATION_RESPONSE => Ok(None),
        msg::DATA_ROW => {
            own.rows.push(msg::data_row_values(frame)?);
            Ok(Some(ServerAction::Drop))
        }
        msg::ERROR_RESPONSE => {
            own.error = Some(msg::ErrorFields::decode(frame)?);
            Ok(Some(ServerAction::Drop))
        }
        msg::READY_FOR_QUERY => {
            let status =
                msg::ready_for_query_status(frame).ok_or(WireError::Malformed("ReadyForQuery"))?;
            Ok(Some(match state.own_group_answered(status) {
                Some(own) => ServerAction::Answered(own),
                None => ServerAction::Drop,
            }))
        }
        _ => Ok(Some(ServerAction::Drop)),
    }
}

/// What coldwire does with a server frame that answers a rewritten group, instead of
/// relaying it. Held back are the ParseComplete and BindComplete answering coldwire's
/// own Parse and Bind; the RowDescription of a retry (the client has it from the first
/// attempt); a ParameterDescription of a rewritten statement, trimmed to the client's
/// parameters; and a guard failure (DESIGN §6.4) that can still be retried — nothing of
/// the statement has reached the client but its descriptions, the group is the only one
/// outstanding and nothing followed it — together with its ReadyForQuery, which then
/// hands the group back to the client direction to plan and send again. `None`: the
/// frame is handled as any other.
fn held_back(
    state: &mut SessionState,
    tag: u8,
    frame: &[u8],
    streamed: &AtomicBool,
) -> Result<Option<ServerAction>, WireError> {
    if tag == msg::PARAMETER_DESCRIPTION {
        let trimmed = state.parameter_description_received(|| ext::parameter_types(frame))?;
        return Ok(trimmed.map(|types| {
            let mut out = BytesMut::new();
            ext::parameter_description(&mut out, &types);
            ServerAction::Replace(out)
        }));
    }
    let retry_possible = state.outstanding_syncs() == 1 && state.quiet_since_sync;
    let Some(group) = state.answering_rewritten() else {
        if tag == msg::READY_FOR_QUERY {
            streamed.store(false, Ordering::Relaxed);
        }
        return Ok(None);
    };
    let dropped = Some(ServerAction::Drop);
    if let Some(own) = group.own.front_mut() {
        match own_prefix_step(tag, own) {
            OwnStep::Drop => {
                // The rehydration's answer: how many rows it inserted.
                if let (msg::DATA_ROW, Some(rows)) = (tag, &mut own.brought_back) {
                    rows.answered(&msg::data_row_values(frame)?);
                }
                let parsed = own.parses.take_if(|_| tag == msg::PARSE_COMPLETE);
                if let Some(parses) = parsed {
                    state.own_parse_answered(parses, true);
                }
                return Ok(dropped);
            }
            OwnStep::DropLast => {
                let own = group.own.pop_front().unwrap_or_default();
                state.txn_generations.extend(own.locks.iter().copied());
                if let Some(id) = own.hot {
                    state.hot_form_answered(id, true);
                }
                if let Some(rows) = own.brought_back {
                    state.rows_brought_back(rows);
                }
                if let Some(parses) = own.parses {
                    state.own_parse_answered(parses, false);
                }
                return Ok(dropped);
            }
            // After an error Postgres skips the rest of the group, own parts included.
            OwnStep::Done => {
                // coldwire's own prepared statement was freed where coldwire could not see
                // it (a DEALLOCATE inside a function): prepared again, and the group run
                // again where it can be, as after a guard failure.
                let own_error = if tag == msg::ERROR_RESPONSE && own.before == 0 {
                    Some(msg::ErrorFields::decode(frame)?.code)
                } else {
                    None
                };
                let own_gone = own_error.as_deref() == Some(UNDEFINED_STATEMENT);
                // Inside a block, only a failure under coldwire's savepoint can be undone.
                let in_savepoint = own.in_savepoint;
                let refusal = own.refusal;
                // The guard of coldwire's part (the rehydration's) found another
                // generation.
                let guard_failed = in_savepoint && own_error.as_deref() == Some("40001");
                let skipped: Vec<OwnPrefix> = group.own.drain(..).collect();
                // The first answers from the error on: its Close of a replaced statement
                // ran if it is the one answer it got (in an aborted block the Parse fails).
                let closed = own_error.is_some() && skipped.first().is_some_and(|o| o.left == 1);
                for (i, own) in skipped.into_iter().enumerate() {
                    if let Some(id) = own.hot {
                        state.hot_form_answered(id, false);
                    }
                    if let Some(parses) = own.parses {
                        state.own_parse_answered(parses, false);
                    }
                    state.hot_closes_skipped(own.closes);
                    if let Some(replanned) = own.replanned {
                        state.replan_skipped(replanned, closed && i == 0);
                    }
                }
                if own_error.as_deref().is_some_and(statement_broken) && !refusal {
                    state.forget_own_prepared();
                }
                if own_gone || guard_failed {
                    let group = state
                        .answering_rewritten()
                        .expect("the group answered above");
                    if group.retry.is_some()
                        && (!group.in_block || in_savepoint)
                        && retry_possible
                        && !streamed.load(Ordering::Relaxed)
                    {
                        group.retrying = true;
                        group.rollback_to = group.in_block;
                        state.retry_pending = true;
                        return Ok(dropped);
                    }
                }
                return held_back(state, tag, frame, streamed);
            }
            OwnStep::Pass => {}
        }
    }
    if let Some(copy) = &mut group.copy {
        let seen = group.skip_row_descriptions > 0;
        if let Some(out) = copy_out(tag, frame, copy, seen, streamed)? {
            if tag == msg::ROW_DESCRIPTION {
                if seen {
                    group.skip_row_descriptions -= 1;
                } else {
                    group.client_row_descriptions += 1;
                }
            }
            return Ok(Some(if out.is_empty() {
                ServerAction::Drop
            } else {
                ServerAction::Replace(out)
            }));
        }
    }
    match tag {
        msg::PARSE_COMPLETE if group.drop_parse_complete => Ok(dropped),
        msg::BIND_COMPLETE if group.drop_bind_complete => Ok(dropped),
        msg::BIND_COMPLETE => {
            group.bind_completed = true;
            Ok(None)
        }
        msg::ROW_DESCRIPTION if group.skip_row_descriptions > 0 => {
            group.skip_row_descriptions -= 1;
            Ok(dropped)
        }
        msg::ROW_DESCRIPTION => {
            group.client_row_descriptions += 1;
            Ok(None)
        }
        msg::NO_DATA if group.drop_no_data => Ok(dropped),
        // A statement of the group completed where the client sees it (one before the
        // read, in a Query string or a pipeline: an UPDATE, a COMMIT): running the group
        // again would run it twice, and tell the client twice.
        msg::COMMAND_COMPLETE => {
            streamed.store(true, Ordering::Relaxed);
            Ok(None)
        }
        msg::ERROR_RESPONSE
            if group.retry.is_some()
                && !group.in_block
                && retry_possible
                && !streamed.load(Ordering::Relaxed) =>
        {
            match conditions::retry(frame) {
                Some(conditions::Retry::ColdTierChanged) => {}
                Some(conditions::Retry::KeysMayBeCold { table, keys }) => {
                    state
                        .write_candidates
                        .entry(table)
                        .or_default()
                        .extend(keys);
                }
                None => return Ok(None),
            }
            let group = state
                .answering_rewritten()
                .expect("the group answered above");
            group.retrying = true;
            state.retry_pending = true;
            Ok(dropped)
        }
        msg::READY_FOR_QUERY => {
            streamed.store(false, Ordering::Relaxed);
            if !group.retrying {
                state.write_candidates.clear();
                return Ok(None);
            }
            let group = state.take_answered_group().unwrap_or_default();
            state.ready_for_query(
                msg::ready_for_query_status(frame).ok_or(WireError::Malformed("ReadyForQuery"))?,
            );
            let attempt = group.attempt + 1;
            Ok(Some(ServerAction::Retry { group, attempt }))
        }
        _ => Ok(None),
    }
}

/// What becomes of a frame while coldwire's own messages in a group are being answered.
enum OwnStep {
    /// The client's: handled as usual.
    Pass,
    /// coldwire's: dropped.
    Drop,
    /// coldwire's last completion: dropped, and the part is over.
    DropLast,
    /// The end of coldwire's part (its last completion, dropped too, or an error, which
    /// the client gets as its own statement's and after which Postgres skips the rest of
    /// the group): handled as usual from here.
    Done,
}

/// Whether `tag` completes a message: ParseComplete, BindComplete, CloseComplete, the
/// RowDescription or NoData that ends a Describe, CommandComplete, EmptyQueryResponse,
/// PortalSuspended.
fn completes(tag: u8) -> bool {
    matches!(
        tag,
        msg::PARSE_COMPLETE
            | msg::BIND_COMPLETE
            | msg::CLOSE_COMPLETE
            | msg::ROW_DESCRIPTION
            | msg::NO_DATA
            | msg::COMMAND_COMPLETE
            | msg::EMPTY_QUERY_RESPONSE
            | msg::PORTAL_SUSPENDED
    )
}

fn own_prefix_step(tag: u8, own: &mut OwnPrefix) -> OwnStep {
    match tag {
        // Errors end the part (the server skips until Sync); asynchronous messages and
        // ReadyForQuery are everybody's.
        msg::ERROR_RESPONSE | msg::READY_FOR_QUERY => OwnStep::Done,
        msg::PARAMETER_STATUS | msg::NOTIFICATION_RESPONSE => OwnStep::Pass,
        _ if own.before > 0 => {
            if completes(tag) {
                own.before -= 1;
            }
            OwnStep::Pass
        }
        _ => {
            if completes(tag) {
                own.left = own.left.saturating_sub(1);
                if own.left == 0 {
                    return OwnStep::DropLast;
                }
            }
            OwnStep::Drop
        }
    }
}

/// A response to the query of a `COPY … TO STDOUT` coldwire serves, re-encoded: its
/// RowDescription becomes CopyOutResponse (and the header), each DataRow a CopyData, its
/// CommandComplete the trailer, CopyDone and `COPY n`. `None` for what passes unchanged
/// (errors, notices, ReadyForQuery). `seen` means the client already has the
/// CopyOutResponse (from the attempt a guard failure stopped).
fn copy_out(
    tag: u8,
    frame: &[u8],
    copy: &mut CopyOut,
    seen: bool,
    streamed: &AtomicBool,
) -> Result<Option<BytesMut>, WireError> {
    let mut out = BytesMut::new();
    match (tag, &mut copy.encoder) {
        (msg::ROW_DESCRIPTION, _) => {
            let names = ext::row_description_names(frame)?;
            match crate::sql::copy_to::CopyEncoder::new(&copy.options, &names) {
                Ok(encoder) => {
                    if !seen {
                        encoder.start(&names, &mut out);
                    }
                    copy.encoder = Some(encoder);
                }
                Err(e) => {
                    out = msg::ErrorFields {
                        severity: msg::Severity::Error,
                        code: e.code.to_owned(),
                        message: e.message,
                        detail: None,
                        hint: None,
                    }
                    .encode();
                }
            }
            Ok(Some(out))
        }
        (msg::DATA_ROW, Some(encoder)) => {
            streamed.store(true, Ordering::Relaxed);
            encoder.row(&msg::data_row_values(frame)?, &mut out);
            Ok(Some(out))
        }
        (msg::COMMAND_COMPLETE, Some(encoder)) => {
            encoder.finish(&mut out);
            copy.encoder = None;
            Ok(Some(out))
        }
        // After a refused FORCE_QUOTE: nothing of the query reaches the client.
        (msg::DATA_ROW | msg::COMMAND_COMPLETE, None) => Ok(Some(out)),
        _ => Ok(None),
    }
}

/// What the session learns from a server frame relayed as it is.
fn track_server_frame(state: &mut SessionState, tag: u8, frame: &[u8]) -> Result<(), WireError> {
    if matches!(tag, msg::ERROR_RESPONSE | msg::READY_FOR_QUERY) {
        state.copy_in_ended();
    }
    match tag {
        msg::READY_FOR_QUERY => state.ready_for_query(
            msg::ready_for_query_status(frame).ok_or(WireError::Malformed("ReadyForQuery"))?,
        ),
        msg::PARAMETER_STATUS => {
            let (name, value) =
                msg::parameter_status(frame).ok_or(WireError::Malformed("ParameterStatus"))?;
            state.parameter_status(name, value);
        }
        msg::PARSE_COMPLETE => state.parse_completed(),
        msg::CLOSE_COMPLETE => state.close_completed(),
        msg::COPY_IN_RESPONSE => state.copy_in_started(),
        msg::COMMAND_COMPLETE => {
            let tag = frame.get(5..).unwrap_or_default();
            if frees_statements(tag) {
                state.deallocated(
                    tag.starts_with(b"DEALLOCATE ALL") || tag.starts_with(b"DISCARD ALL"),
                );
            }
            state.command_completed(tag);
        }
        _ => {}
    }
    Ok(())
}

/// Whether the client frames in `input` (what it sent after a Bind of `portal`) are a
/// Describe of that portal at most, its Execute and a Sync, and nothing after: the whole
/// of the group, of a shape that can be run again (`GroupShape`), is in, and nothing the
/// client sent after it rules that out yet.
pub fn ends_simply(input: &[u8], portal: &str) -> bool {
    let mut rest = input;
    let mut next = || -> Option<(u8, &[u8])> {
        let len = u32::from_be_bytes(rest.get(1..5)?.try_into().ok()?) as usize;
        let frame = rest.get(..len.checked_add(1)?)?;
        rest = &rest[frame.len()..];
        Some((frame[0], frame))
    };
    let mut frame = next();
    if let Some((msg::DESCRIBE, describe)) = frame {
        if !matches!(ext::target(describe, msg::DESCRIBE), Ok(ext::Target::Portal(p)) if p == portal)
        {
            return false;
        }
        frame = next();
    }
    let executes = matches!(frame, Some((msg::EXECUTE, e)) if ext::execute_portal(e).is_ok_and(|p| p == portal));
    // Nothing after the Sync yet: a frame the client sends after it rules the retry out.
    executes && matches!(next(), Some((msg::SYNC, _))) && next().is_none()
}

/// The shape of the extended-protocol group the client is sending, as far as retrying a
/// guard failure goes: retried unseen only when the group started with nothing
/// outstanding outside a transaction block and holds nothing but Parses, Describes, one
/// Bind of a rewritten statement and one Execute of its portal — so running that Bind and
/// Execute again repeats exactly what failed and nothing else.
#[derive(Debug, Default)]
pub struct GroupShape {
    messages: usize,
    /// Messages so far that Postgres answers with one completion each (Parse, Bind,
    /// Describe, Execute, Close).
    completions: u32,
    started_quiet: bool,
    bind: Option<(BytesMut, String)>,
    /// A Describe of the Bind's portal between it and its Execute.
    describe: Option<BytesMut>,
    execute: Option<BytesMut>,
    other: bool,
}

impl GroupShape {
    /// A client frame went upstream in this group; `rewritten_bind` is the client's own
    /// Bind frame when coldwire rewrote it.
    pub fn on_frame(&mut self, tag: u8, frame: &[u8], rewritten_bind: bool, state: &SessionState) {
        if self.messages == 0 {
            // Inside a block, only coldwire's own part under its savepoint is run again
            // (`RewrittenGroup::in_block`).
            self.started_quiet = state.outstanding_syncs() == 0
                && matches!(state.phase, Phase::Idle | Phase::InTransaction);
        }
        self.messages += 1;
        if matches!(
            tag,
            msg::PARSE | msg::BIND | msg::DESCRIBE | msg::EXECUTE | msg::CLOSE
        ) {
            self.completions += 1;
        }
        match tag {
            msg::PARSE if self.bind.is_none() => {}
            msg::DESCRIBE if self.bind.is_none() => {}
            // Skipped with the Bind when coldwire's part before it fails: sent again.
            msg::DESCRIBE if self.describe.is_none() && self.execute.is_none() => {
                let ours = self.bind.as_ref().is_some_and(|(_, portal)| {
                    matches!(ext::target(frame, msg::DESCRIBE), Ok(ext::Target::Portal(p)) if p == portal)
                });
                // Other Describes pass as they always did (answered before any failure
                // that can be retried, or skipped with it and not sent again).
                if ours {
                    self.describe = Some(BytesMut::from(frame));
                }
            }
            msg::DESCRIBE => {}
            msg::BIND if rewritten_bind && self.bind.is_none() => match Bind::decode(frame) {
                Ok(b) => self.bind = Some((BytesMut::from(frame), b.portal.to_owned())),
                Err(_) => self.other = true,
            },
            msg::EXECUTE if self.execute.is_none() => {
                let ours = self.bind.as_ref().is_some_and(|(_, portal)| {
                    ext::execute_portal(frame).is_ok_and(|p| p == portal.as_str())
                });
                if ours {
                    self.execute = Some(BytesMut::from(frame));
                } else {
                    self.other = true;
                }
            }
            _ => self.other = true,
        }
    }

    /// The group ends with a Sync; `streamed` says whether frames coldwire did not look
    /// at went upstream in it. What to send again if its guard fails, if anything.
    pub fn finish(&mut self, streamed: bool) -> Option<Retry> {
        let shape = std::mem::take(self);
        match (shape.bind, shape.execute) {
            (Some((bind, _)), Some(execute))
                if shape.started_quiet && !shape.other && !streamed =>
            {
                Some(Retry::Bind {
                    bind,
                    describe: shape.describe,
                    execute,
                })
            }
            _ => None,
        }
    }

    /// Completions Postgres owes for the group's messages since coldwire last put its
    /// own into it: where coldwire's own messages, sent now, are answered.
    pub fn take_completions(&mut self) -> u32 {
        std::mem::take(&mut self.completions)
    }

    /// A simple Query or FunctionCall ends whatever group was under way.
    pub fn reset(&mut self) {
        *self = GroupShape::default();
    }
}

#[cfg(test)]
#[path = "protocol_tests.rs"]
mod tests;
