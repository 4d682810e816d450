//! The relay of an established session: both directions forwarded as raw frames, with
//! only the few message types the session tracks looked at (see `wire::frame`).

use std::sync::atomic::Ordering;
use std::sync::{Mutex, PoisonError};

use bytes::{BufMut, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{Mutex as AsyncMutex, Notify};

use super::admin::{AdminSession, Answer, Disposition};
use super::reads::Plan;
use super::state::RewrittenGroup;
use super::state::{Phase, SessionState};
use super::upstream::Io;
use super::{SessionContext, SessionError};
use crate::admin::call::oid;
use crate::admin::{AdminError, AdminRequest};
use crate::metrics::BYTES_RELAYED_TOTAL;
use crate::wire::cancel::CancelRegistration;
use crate::wire::extended as ext;
use crate::wire::messages as msg;
use crate::wire::startup::CancelKey;
use crate::wire::{FrameScanner, WireError};

/// Bytes asked of the socket per read.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Frames from Postgres are trusted up to Postgres's own message limit (1 GB); only the
/// inspected ones, all small, are ever held whole.
const UPSTREAM_MAX_MESSAGE_BYTES: usize = 1 << 30;
/// Client frames the session tracks: Parse and Close (statement names), Sync, Query and
/// FunctionCall (answered by ReadyForQuery), Terminate.
const CLIENT_INSPECTED: &[u8] = &[
    msg::PARSE,
    msg::CLOSE,
    msg::SYNC,
    msg::QUERY,
    msg::FUNCTION_CALL,
    msg::TERMINATE,
];
/// Server frames the session tracks or rewrites.
const UPSTREAM_INSPECTED: &[u8] = &[
    msg::AUTHENTICATION,
    msg::BACKEND_KEY_DATA,
    msg::PARAMETER_STATUS,
    msg::READY_FOR_QUERY,
    msg::PARSE_COMPLETE,
    msg::BIND_COMPLETE,
    msg::CLOSE_COMPLETE,
    msg::ROW_DESCRIPTION,
    msg::ERROR_RESPONSE,
];
/// Terminate, sent upstream when a client vanishes without one.
const TERMINATE_FRAME: [u8; 5] = [msg::TERMINATE, 0, 0, 0, 4];

/// How a relay ended, when it ended without error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The client sent Terminate.
    ClientTerminated,
    /// The client closed its socket without Terminate.
    ClientClosed,
    /// Postgres closed the connection (after a FATAL, for instance).
    UpstreamClosed,
    /// The shutdown grace period ran out.
    ForcedClose,
}

/// One direction's framing position and whether its last write completed, which together
/// say whether a message of coldwire's own can be inserted there.
struct Direction {
    scanner: FrameScanner,
    write_pending: bool,
}

impl Direction {
    fn new(scanner: FrameScanner) -> Self {
        Self {
            scanner,
            write_pending: false,
        }
    }

    fn at_boundary(&self) -> bool {
        self.scanner.at_boundary() && !self.write_pending
    }

    async fn write<W: AsyncWrite + Unpin>(
        &mut self,
        w: &mut W,
        out: &mut BytesMut,
    ) -> std::io::Result<()> {
        self.write_pending = true;
        w.write_all(out).await?;
        self.write_pending = false;
        out.clear();
        Ok(())
    }
}

/// The parts of a session both relay directions use.
pub struct Shared<'a> {
    pub state: &'a Mutex<SessionState>,
    pub ctx: &'a SessionContext,
    /// Who the client authenticated as, for admin calls.
    pub user: String,
    pub database: String,
    /// Written by the upstream direction, and by the client direction when coldwire
    /// answers a message itself (only when nothing else is owed to the client).
    client_tx: AsyncMutex<WriteHalf<Box<dyn Io>>>,
    /// Signalled at every ReadyForQuery.
    ready: Notify,
    /// Client Queries to plan and run again after a guard failure the client was not shown
    /// (the Query frame and the retry's number), from the upstream direction to the client
    /// direction.
    retries: tokio::sync::mpsc::UnboundedSender<(BytesMut, u8)>,
}

/// Retries of one Query after guard failures before the failure reaches the client.
const MAX_READ_RETRIES: u8 = 10;

/// Relays a session until either side ends it. On the way out, tells the client why (if
/// its stream is at a message boundary) and Postgres that we are leaving.
///
/// # Errors
/// A protocol violation by either side or an I/O failure; the client has been told
/// where that was possible.
pub async fn relay(
    client: Box<dyn Io>,
    upstream: Box<dyn Io>,
    leftover: BytesMut,
    state: &Mutex<SessionState>,
    ctx: &SessionContext,
    (user, database): (String, String),
) -> Result<End, SessionError> {
    let (mut client_rx, client_tx) = tokio::io::split(client);
    let (mut upstream_rx, mut upstream_tx) = tokio::io::split(upstream);
    let (retries, mut retry_rx) = tokio::sync::mpsc::unbounded_channel();
    let shared = Shared {
        state,
        ctx,
        user,
        database,
        client_tx: AsyncMutex::new(client_tx),
        ready: Notify::new(),
        retries,
    };
    let mut c2s = Direction::new(FrameScanner::new(
        ctx.config.max_message_bytes,
        CLIENT_INSPECTED,
    ));
    let mut s2c = Direction::new(FrameScanner::new(
        UPSTREAM_MAX_MESSAGE_BYTES,
        UPSTREAM_INSPECTED,
    ));
    let mut registration = None;

    let result = tokio::select! {
        r = client_to_upstream(&mut client_rx, &mut upstream_tx, &mut c2s, leftover, &shared, &mut retry_rx) => r,
        r = upstream_to_client(&mut upstream_rx, &mut s2c, &shared, &mut registration) => r,
        _ = ctx.force_close.cancelled() => Ok(End::ForcedClose),
    };
    let mut client_tx = shared.client_tx.lock().await;

    if !matches!(result, Ok(End::ClientTerminated | End::UpstreamClosed)) && c2s.at_boundary() {
        let _ = upstream_tx.write_all(&TERMINATE_FRAME).await;
    }
    let farewell = match &result {
        Ok(End::ForcedClose) => Some(crate::error::shutdown_notice()),
        Err(e) => crate::error::client_error(e),
        Ok(_) => None,
    };
    if let Some(fields) = farewell {
        if s2c.at_boundary() {
            let _ = client_tx.write_all(&fields.encode()).await;
        }
    }
    let _ = client_tx.shutdown().await;
    drop(registration);
    result
}

async fn client_to_upstream(
    rx: &mut ReadHalf<Box<dyn Io>>,
    tx: &mut WriteHalf<Box<dyn Io>>,
    dir: &mut Direction,
    mut input: BytesMut,
    shared: &Shared<'_>,
    retries: &mut tokio::sync::mpsc::UnboundedReceiver<(BytesMut, u8)>,
) -> Result<End, SessionError> {
    let bytes = metrics::counter!(BYTES_RELAYED_TOTAL, "direction" => "client_to_upstream");
    let mut out = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut admin = AdminSession::default();
    // Whether anything went upstream since the client's last Sync: streamed frames set
    // the scanner's flag, inspected ones `sent_since_sync`.
    let streamed = dir.scanner.streamed_flag();
    let mut sent_since_sync = false;
    loop {
        let mut terminated = false;
        let stop = dir
            .scanner
            .drain_until(&mut input, &mut out, |tag, frame, out| {
                let dirty = sent_since_sync || streamed.load(Ordering::Relaxed);
                match admin.on_frame(tag, frame, dirty)? {
                    Disposition::Forward if tag == msg::QUERY && may_read_tiered(shared, frame) => {
                        Ok(Some(Stop::Read(BytesMut::from(frame))))
                    }
                    Disposition::Forward => {
                        track_client_frame(tag, frame, shared.state)?;
                        if matches!(tag, msg::SYNC | msg::QUERY | msg::FUNCTION_CALL) {
                            sent_since_sync = false;
                            streamed.store(false, Ordering::Relaxed);
                        } else {
                            sent_since_sync = true;
                        }
                        terminated |= tag == msg::TERMINATE;
                        out.extend_from_slice(frame);
                        Ok::<_, SessionError>(None)
                    }
                    Disposition::Drop => Ok(None),
                    Disposition::Answer(answer) => Ok(Some(Stop::Admin(answer))),
                }
            })?;
        let inspect_extended = admin.needs_extended_inspection();
        for tag in [msg::BIND, msg::DESCRIBE, msg::EXECUTE] {
            dir.scanner.set_inspected(tag, inspect_extended);
        }
        if !out.is_empty() {
            bytes.increment(out.len() as u64);
            dir.write(tx, &mut out)
                .await
                .map_err(SessionError::UpstreamIo)?;
        }
        match stop {
            Some(Stop::Admin(answer)) => {
                answer_admin(answer, &mut admin, shared).await?;
                continue;
            }
            Some(Stop::Read(query)) => {
                sent_since_sync = false;
                streamed.store(false, Ordering::Relaxed);
                run_read(query, 0, tx, dir, shared).await?;
                continue;
            }
            None => {}
        }
        if terminated {
            return Ok(End::ClientTerminated);
        }
        tokio::select! {
            read = read_more(rx, &mut input) => {
                if read.map_err(SessionError::ClientIo)? == 0 {
                    return Ok(End::ClientClosed);
                }
            }
            Some((query, attempt)) = retries.recv() => run_read(query, attempt, tx, dir, shared).await?,
        }
    }
}

/// Where the client direction stops draining to do something asynchronous.
enum Stop {
    /// Answer an admin call.
    Admin(Answer),
    /// Plan a simple Query that may read a tiered table (this frame).
    Read(BytesMut),
}

/// Whether a Query frame may read a tiered table (the cheap name test).
fn may_read_tiered(shared: &Shared<'_>, frame: &[u8]) -> bool {
    let Some(reads) = &shared.ctx.reads else {
        return false;
    };
    query_text(frame).is_some_and(|sql| reads.may_name_tiered(sql))
}

/// The SQL text of a Query frame.
fn query_text(frame: &[u8]) -> Option<&str> {
    let body = frame.get(5..)?;
    let end = body.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&body[..end]).ok()
}

/// Plans a simple Query over tiered tables and sends what the plan says: the Query
/// unchanged, coldwire's rewritten statement in its place, or coldwire's error.
async fn run_read(
    query: BytesMut,
    attempt: u8,
    tx: &mut WriteHalf<Box<dyn Io>>,
    dir: &mut Direction,
    shared: &Shared<'_>,
) -> Result<(), SessionError> {
    let reads = shared
        .ctx
        .reads
        .as_ref()
        .expect("checked by may_read_tiered");
    let plan = match query_text(&query) {
        Some(sql) => reads.plan(sql).await,
        None => Plan::PassThrough,
    };
    let mut out = match plan {
        Plan::PassThrough => {
            track_client_frame(msg::QUERY, &query, shared.state)?;
            query
        }
        Plan::Run(frames) => {
            {
                let mut state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
                // Retried transparently only outside a transaction block, where the failed
                // attempt left nothing behind, and while nothing else is outstanding.
                let retryable = state.phase == Phase::Idle
                    && state.outstanding_syncs() == 0
                    && attempt < MAX_READ_RETRIES;
                state.rewritten_query_sent(RewrittenGroup {
                    retry_with: retryable.then(|| query.clone()),
                    attempt,
                    drop_row_description: attempt > 0,
                    retrying: false,
                });
            }
            super::reads::after_plan().await;
            frames
        }
        Plan::Fail(error) => {
            let (_, status) = wait_until_answered(shared).await;
            let mut out = error.encode();
            out.extend_from_slice(&msg::encode_ready_for_query(status));
            let mut client = shared.client_tx.lock().await;
            return client.write_all(&out).await.map_err(SessionError::ClientIo);
        }
    };
    metrics::counter!(BYTES_RELAYED_TOTAL, "direction" => "client_to_upstream")
        .increment(out.len() as u64);
    dir.write(tx, &mut out)
        .await
        .map_err(SessionError::UpstreamIo)
}

/// Waits until Postgres has answered every request the client sent so far; the phase and
/// ReadyForQuery status then.
async fn wait_until_answered(shared: &Shared<'_>) -> (Phase, u8) {
    loop {
        let notified = shared.ready.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        {
            let state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.outstanding_syncs() == 0 {
                return (state.phase, state.status_byte());
            }
        }
        notified.await;
    }
}

/// Sends coldwire's own answer to a client message, once every earlier request has been
/// answered by Postgres so the answer lands in protocol order.
async fn answer_admin(
    answer: Answer,
    admin: &mut AdminSession,
    shared: &Shared<'_>,
) -> Result<(), SessionError> {
    let (phase, status) = wait_until_answered(shared).await;
    let simple = matches!(
        answer,
        Answer::Fail { simple: true, .. } | Answer::Run { simple: true, .. }
    );
    let function_name = match &answer {
        Answer::Run { call, .. } => Some(call.function.name()),
        _ => None,
    };
    let mut out = BytesMut::new();
    let result = if phase == Phase::FailedTransaction {
        Err(AdminError::InFailedTransaction)
    } else {
        match answer {
            Answer::Bytes(bytes) => {
                out = bytes;
                Ok(())
            }
            Answer::Fail { error, .. } => Err(error),
            Answer::Run {
                call,
                args,
                binary,
                simple,
            } => {
                let request = AdminRequest {
                    function: call.function,
                    args,
                    user: shared.user.clone(),
                    database: shared.database.clone(),
                };
                let outcome = shared.ctx.admin.execute(request).await;
                if let Some(reads) = &shared.ctx.reads {
                    // A table may have become tiered: plan reads from a fresh catalog.
                    reads.invalidate().await;
                }
                outcome.map(|json| {
                    if simple {
                        ext::row_description(&mut out, &call.column, oid::JSONB, false);
                    }
                    let text = json.to_string();
                    if binary {
                        let mut value = BytesMut::with_capacity(text.len() + 1);
                        value.put_u8(1); // jsonb binary format version
                        value.put_slice(text.as_bytes());
                        ext::data_row(&mut out, &value);
                    } else {
                        ext::data_row(&mut out, text.as_bytes());
                    }
                    ext::command_complete(&mut out, "SELECT 1");
                })
            }
        }
    };
    let function = function_name.unwrap_or("unknown");
    metrics::counter!(crate::metrics::ADMIN_CALLS_TOTAL, "function" => function, "outcome" => if result.is_ok() { "ok" } else { "error" })
        .increment(1);
    if let Err(error) = result {
        tracing::info!(%error, function, "admin call refused");
        out.extend_from_slice(&crate::error::admin_error(&error).encode());
        if !simple {
            admin.failed();
        }
    }
    if simple {
        out.extend_from_slice(&msg::encode_ready_for_query(status));
    }
    let mut tx = shared.client_tx.lock().await;
    tx.write_all(&out).await.map_err(SessionError::ClientIo)
}

async fn upstream_to_client(
    rx: &mut ReadHalf<Box<dyn Io>>,
    dir: &mut Direction,
    shared: &Shared<'_>,
    registration: &mut Option<CancelRegistration<CancelKey>>,
) -> Result<End, SessionError> {
    let (state, ctx) = (shared.state, shared.ctx);
    let bytes = metrics::counter!(BYTES_RELAYED_TOTAL, "direction" => "upstream_to_client");
    let mut input = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut out = BytesMut::with_capacity(READ_CHUNK_BYTES);
    // Whether any frame was streamed to the client since the last ReadyForQuery.
    let streamed = dir.scanner.streamed_flag();
    loop {
        if read_more(rx, &mut input)
            .await
            .map_err(SessionError::UpstreamIo)?
            == 0
        {
            return Ok(End::UpstreamClosed);
        }
        let mut ready = false;
        dir.scanner
            .drain(&mut input, &mut out, |tag, frame, out| {
                ready |= tag == msg::READY_FOR_QUERY;
                if tag == msg::BACKEND_KEY_DATA {
                    let (pid, secret) = msg::backend_key_data(frame)
                        .ok_or(WireError::Malformed("BackendKeyData"))?;
                    let issued = ctx
                        .cancel_keys
                        .register(secret.len(), CancelKey { pid, secret });
                    out.extend_from_slice(&msg::encode_backend_key_data(
                        issued.key().pid,
                        &issued.key().secret,
                    ));
                    *registration = Some(issued);
                } else if held_back(tag, frame, shared, &streamed)? {
                    // coldwire's own business: see `held_back`.
                } else if let Some(rewritten) = msg::sasl_without_channel_binding(frame) {
                    out.extend_from_slice(&rewritten);
                } else {
                    track_upstream_frame(tag, frame, state)?;
                    out.extend_from_slice(frame);
                }
                Ok::<(), WireError>(())
            })
            .map_err(SessionError::UpstreamProtocol)?;
        if !out.is_empty() {
            bytes.increment(out.len() as u64);
            let mut tx = shared.client_tx.lock().await;
            dir.write(&mut *tx, &mut out)
                .await
                .map_err(SessionError::ClientIo)?;
        }
        if ready {
            shared.ready.notify_waiters();
        }
    }
}

/// Whether the upstream frame `tag` answers a statement coldwire runs in place of a
/// simple Query and must not reach the client: its ParseComplete and BindComplete; the
/// RowDescription of a retry (the client has it from the first attempt); and a guard
/// failure (DESIGN §6.4) that can still be retried — nothing of the statement has reached
/// the client but its RowDescription, no other request is outstanding, the Query ran
/// outside a transaction block — together with its ReadyForQuery, which then hands the
/// Query back to the client direction to plan and run again.
fn held_back(
    tag: u8,
    frame: &[u8],
    shared: &Shared<'_>,
    streamed: &std::sync::atomic::AtomicBool,
) -> Result<bool, WireError> {
    let mut state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
    let alone = state.outstanding_syncs() == 1;
    let Some(group) = state.answering_rewritten() else {
        if tag == msg::READY_FOR_QUERY {
            streamed.store(false, Ordering::Relaxed);
        }
        return Ok(false);
    };
    match tag {
        msg::PARSE_COMPLETE | msg::BIND_COMPLETE => Ok(true),
        msg::ROW_DESCRIPTION => Ok(group.drop_row_description),
        msg::ERROR_RESPONSE
            if group.retry_with.is_some()
                && alone
                && !streamed.load(Ordering::Relaxed)
                && is_guard_failure(frame) =>
        {
            group.retrying = true;
            Ok(true)
        }
        msg::READY_FOR_QUERY => {
            streamed.store(false, Ordering::Relaxed);
            if !group.retrying {
                return Ok(false);
            }
            let group = state.take_answered_group().unwrap_or_default();
            state.ready_for_query(
                msg::ready_for_query_status(frame).ok_or(WireError::Malformed("ReadyForQuery"))?,
            );
            if let Some(query) = group.retry_with {
                metrics::counter!(crate::metrics::READ_RETRIES_TOTAL).increment(1);
                tracing::info!(
                    attempt = group.attempt + 1,
                    "cold segment set changed: running the read again"
                );
                let _ = shared.retries.send((query, group.attempt + 1));
            }
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Whether an ErrorResponse is `coldwire.guard` reporting that the cold tier changed.
fn is_guard_failure(frame: &[u8]) -> bool {
    msg::ErrorFields::decode(frame)
        .is_ok_and(|e| e.code == "40001" && e.message.starts_with("coldwire: the cold tier"))
}

async fn read_more<R: AsyncRead + Unpin>(
    rx: &mut R,
    input: &mut BytesMut,
) -> std::io::Result<usize> {
    input.reserve(READ_CHUNK_BYTES);
    rx.read_buf(input).await
}

fn track_client_frame(tag: u8, frame: &[u8], state: &Mutex<SessionState>) -> Result<(), WireError> {
    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
    match tag {
        msg::PARSE => state.parse_sent(ext::Parse::decode(frame)?.statement),
        msg::CLOSE => match ext::target(frame, msg::CLOSE)? {
            ext::Target::Statement(name) => state.close_sent(Some(name)),
            ext::Target::Portal(_) => state.close_sent(None),
        },
        msg::SYNC | msg::QUERY | msg::FUNCTION_CALL => state.sync_sent(),
        _ => {}
    }
    Ok(())
}

fn track_upstream_frame(
    tag: u8,
    frame: &[u8],
    state: &Mutex<SessionState>,
) -> Result<(), WireError> {
    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
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
        _ => {}
    }
    Ok(())
}
