//! The relay of an established session: both directions forwarded as raw frames, with
//! only the few message types the session tracks looked at (see `wire::frame`).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{Mutex as AsyncMutex, Notify};

use super::answer::{answer_admin, wait_until_answered};
use super::protocol::{self, ClientAction, ClientSide, ServerAction, UPSTREAM_INSPECTED};
use super::reads::{KnownHot, Plan, TxnView};
use super::retry::{retry, MAX_READ_RETRIES};
use super::rewritten::{self, QueryRead, Stop};
use super::shared::Shared;
use super::state::{CopyOut, OwnPrefix, Phase, Retry, RewrittenGroup, SessionState};
use super::upstream::Io;
use super::{SessionContext, SessionError};
use crate::catalog::registry::REGISTRY_TTL;
use crate::metrics::BYTES_RELAYED_TOTAL;
use crate::wire::cancel::CancelRegistration;
use crate::wire::extended::Bind;
use crate::wire::messages as msg;
use crate::wire::startup::CancelKey;
use crate::wire::{FrameScanner, WireError};

/// Bytes asked of the socket per read.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Frames from Postgres are trusted up to Postgres's own message limit (1 GB); only the
/// inspected ones, all small, are ever held whole.
const UPSTREAM_MAX_MESSAGE_BYTES: usize = 1 << 30;
/// Client frames the session tracks: Parse, Close and Describe (statement names and the
/// descriptions they ask for), Bind and Execute (statements coldwire prepared; the shape
/// of a group, and where coldwire's own messages are answered in it), Flush, Sync, Query
/// and FunctionCall (answered by ReadyForQuery), Terminate.
const CLIENT_INSPECTED: &[u8] = &[
    msg::PARSE,
    msg::CLOSE,
    msg::DESCRIBE,
    msg::BIND,
    msg::EXECUTE,
    msg::FLUSH,
    msg::SYNC,
    msg::QUERY,
    msg::FUNCTION_CALL,
    msg::TERMINATE,
    // The end of a COPY FROM STDIN, after which Postgres answers Syncs again.
    msg::COPY_DONE,
    msg::COPY_FAIL,
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
        tier: Mutex::new((u64::MAX, None)),
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

/// The client direction: what it forwards, what it plans first, what it answers itself.
pub(super) struct ClientDirection<'s, 'a> {
    tx: &'s mut WriteHalf<Box<dyn Io>>,
    dir: &'s mut Direction,
    pub(super) shared: &'s Shared<'a>,
    pub(super) retries: &'s mut tokio::sync::mpsc::UnboundedReceiver<(RewrittenGroup, u8)>,
    bytes: metrics::Counter,
}

async fn client_to_upstream(
    rx: &mut ReadHalf<Box<dyn Io>>,
    tx: &mut WriteHalf<Box<dyn Io>>,
    dir: &mut Direction,
    mut input: BytesMut,
    shared: &Shared<'_>,
    retries: &mut tokio::sync::mpsc::UnboundedReceiver<(RewrittenGroup, u8)>,
) -> Result<End, SessionError> {
    let mut out = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut side = ClientSide::default();
    // Whether anything went upstream since the client's last Sync: streamed frames set
    // the scanner's flag, inspected ones `side.sent_since_sync`.
    let streamed = dir.scanner.streamed_flag();
    let mut c = ClientDirection {
        tx,
        dir,
        shared,
        retries,
        bytes: metrics::counter!(BYTES_RELAYED_TOTAL, "direction" => "client_to_upstream"),
    };
    let checks_tiers = shared.locked().checks_tiers;
    // Until when the session's database is known to have no tiered tables.
    let mut untiered_until = None;
    // coldwire's Close and Parse that replace a statement the client's next Bind binds
    // (`rewritten::replan`), sent just ahead of that Bind's frames.
    let mut replacing = None;
    loop {
        let mut terminated = false;
        // `out` ends with the Sync of a group that may be retried.
        let mut ends_retryable = false;
        let mut reads = shared.reads();
        if checks_tiers
            && reads.is_none()
            && side.at_boundary(&streamed)
            && matches!(input.first(), Some(&t) if t != msg::TERMINATE)
            && c.check_tiers(&mut untiered_until).await?
        {
            reads = shared.reads();
        }
        let stop = c
            .dir
            .scanner
            .drain_until(&mut input, &mut out, |tag, frame, out| {
                let mut state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
                // A retry goes upstream ahead of everything the client sent after the
                // group that failed, and is recorded ahead of it: nothing is recorded
                // while one is pending (recording a frame rules a retry out, below).
                if state.retry_pending {
                    return Ok(Some(Stop::RetryFirst(BytesMut::from(frame))));
                }
                match side.on_client_frame(&mut state, reads.as_deref(), tag, frame, &streamed)? {
                    ClientAction::Pass { ends_retryable: e } => {
                        ends_retryable = e;
                        terminated |= tag == msg::TERMINATE;
                        out.extend_from_slice(frame);
                        Ok::<_, SessionError>(None)
                    }
                    ClientAction::Drop => Ok(None),
                    ClientAction::Stop(stop) => Ok(Some(stop)),
                }
            })?;
        // A frame the client sent after the group (the one stopped at) rules its retry
        // out: it is recorded already, and would otherwise go upstream first.
        c.send(&mut out, ends_retryable && stop.is_none()).await?;
        match stop {
            Some(Stop::Admin(answer)) => {
                answer_admin(answer, &mut side.admin, shared).await?;
                continue;
            }
            Some(Stop::RetryFirst(mut frame)) => {
                frame.unsplit(input.split());
                input = frame;
                if shared.locked().retry_pending {
                    if let Some((retry, attempt)) = c.retries.recv().await {
                        c.run_retry(retry, attempt).await?;
                    }
                }
                continue;
            }
            Some(Stop::Read(query)) => {
                let boundary = side.at_boundary(&streamed);
                side.sent_since_sync = false;
                side.executed_since_sync = false;
                streamed.store(false, Ordering::Relaxed);
                side.group.reset();
                // Nothing sent after it yet: it may lock its tables under coldwire's
                // savepoint, and be run again.
                let alone = input.is_empty();
                c.run_read(query, 0, 0, boundary, alone).await?;
                continue;
            }
            Some(Stop::Prepare(frame)) => {
                let boundary = side.at_boundary(&streamed);
                let parse = match rewritten::prepare(&frame, shared).await? {
                    Some(rewrite) => {
                        if let (rewritten::ParseRewrite::Read(read), _) = &rewrite {
                            c.transaction_generations(&read.table_ids(), boundary)
                                .await?;
                        }
                        rewritten::parse_to_send(&frame, rewrite, shared)?
                    }
                    // Not plannable now: it fails, and Postgres skips it.
                    None => {
                        let error = crate::error::cold_tier_unreadable();
                        let (frames, own) = rewritten::refusal_ahead(&error);
                        c.own_ahead(&mut side, &mut out, frames, own);
                        rewritten::parse_refused(&frame, shared)?
                    }
                };
                side.forwarded(&mut shared.locked(), msg::PARSE, &frame, true, &streamed)?;
                side.sent_since_sync = true;
                // Written with the frames that follow it in the client's read (its Bind,
                // Execute and Sync): one write, so Postgres wakes once for the group.
                out.unsplit(parse);
                continue;
            }
            Some(Stop::Replan(mut frame)) => {
                if let Some((frames, own)) = rewritten::replan(&frame, shared).await? {
                    let rewritten = Bind::statement_of(&frame)
                        .is_ok_and(|name| shared.locked().rewritten_statement(name).is_some());
                    if rewritten {
                        // Sent with the Bind's own frames, once the Bind is planned: from
                        // where the group stands now (its transaction's generations
                        // learnt first, if it begins the group).
                        replacing = Some((frames, own));
                    } else {
                        c.own_ahead(&mut side, &mut out, frames, own);
                    }
                }
                // The Bind again, now of the statement as planned.
                frame.unsplit(input.split());
                input = frame;
                continue;
            }
            Some(Stop::Bind(frame)) => {
                let boundary = side.at_boundary(&streamed);
                let rewritten::Bound {
                    tables,
                    write,
                    portal,
                } = rewritten::bound(&frame, shared);
                let (known, quiet) = c.known_hot(&tables, boundary);
                // A write's rehydration takes its table's lock under coldwire's savepoint,
                // in the group's own round trip: only where the rest of the group is in,
                // and can be sent again after a rollback.
                let lock_here = write
                    && quiet
                    && protocol::ends_simply(&input, &portal)
                    && c.lock_in_group(&tables);
                let at = c
                    .transaction_generations(&tables, boundary && !lock_here)
                    .await?;
                let txn = TxnView {
                    at: &at,
                    fresh: false,
                    known: &known,
                    quiet,
                    after_others: side.executed_since_sync || streamed.load(Ordering::Relaxed),
                    lock_here,
                };
                let mut bound = rewritten::bind(&frame, txn, shared).await?;
                if bound.lock_first {
                    let at = c.transaction_generations(&tables, boundary).await?;
                    let txn = TxnView {
                        at: &at,
                        lock_here: false,
                        ..txn
                    };
                    bound = rewritten::bind(&frame, txn, shared).await?;
                }
                super::reads::after_plan().await;
                if let Some((frames, own)) = replacing.take() {
                    c.own_ahead(&mut side, &mut out, frames, own);
                }
                {
                    let mut state = shared.locked();
                    // Taken only when coldwire puts messages of its own in the group: they
                    // are answered after every completion of the client's before them.
                    let mut before = if bound.own.is_empty() {
                        0
                    } else {
                        side.group.take_completions()
                    };
                    for mut own in bound.own.drain(..) {
                        own.before = std::mem::take(&mut before);
                        state.own_messages_sent(own);
                    }
                    // A Bind that reads or writes no tiered table (a call behind
                    // coldwire's check) is not run again.
                    let retried = !tables.is_empty();
                    side.forwarded(&mut state, msg::BIND, &frame, retried, &streamed)?;
                    // Sent by the other direction where a message starts (rows of an
                    // earlier statement may be on their way to the client).
                    if let Some(notice) = bound.notice.take() {
                        state.explain_notice = Some(notice);
                    }
                }
                side.sent_since_sync = true;
                // As for a Parse: sent with what follows it (the Execute and Sync).
                out.unsplit(bound.frames);
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
            Some((retry, attempt)) = c.retries.recv() => c.run_retry(retry, attempt).await?,
        }
    }
}

impl ClientDirection<'_, '_> {
    /// Puts coldwire's own `frames` (answered as `own`) in the group being sent, after
    /// everything the client sent before them.
    fn own_ahead(
        &self,
        side: &mut ClientSide,
        out: &mut BytesMut,
        frames: BytesMut,
        mut own: OwnPrefix,
    ) {
        own.before = side.group.take_completions();
        self.shared.locked().own_messages_sent(own);
        side.sent_since_sync = true;
        out.unsplit(frames);
    }

    /// Writes `out` upstream. A retry the upstream direction decided on goes first, so
    /// that it runs exactly where the failed attempt ran; `ends_retryable` says whether
    /// `out` ends with the Sync of a group that may itself be retried.
    async fn send(&mut self, out: &mut BytesMut, ends_retryable: bool) -> Result<(), SessionError> {
        if out.is_empty() {
            return Ok(());
        }
        loop {
            {
                let mut state = self
                    .shared
                    .state
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if !state.retry_pending {
                    state.quiet_since_sync = ends_retryable;
                    break;
                }
            }
            match self.retries.recv().await {
                Some((retry, attempt)) => self.run_retry(retry, attempt).await?,
                None => break,
            }
        }
        self.bytes.increment(out.len() as u64);
        self.dir
            .write(self.tx, out)
            .await
            .map_err(SessionError::UpstreamIo)
    }

    /// Plans a simple Query over tiered tables and sends what the plan says: the Query
    /// unchanged, coldwire's rewritten statement in its place, or coldwire's error.
    /// `boundary`: nothing of an extended-protocol group went upstream before it;
    /// `skip_row_descriptions`: the client has that many from failed attempts.
    pub(super) async fn run_read(
        &mut self,
        query: BytesMut,
        attempt: u8,
        skip_row_descriptions: u32,
        boundary: bool,
        alone: bool,
    ) -> Result<(), SessionError> {
        let mut copy = None;
        // Planned with `TxnView::lock_here`: coldwire's part runs under its savepoint.
        let mut locked_here = false;
        // A call behind coldwire's check is not run again: its function's own errors
        // would repeat.
        let mut checked_call = false;
        let plan = match rewritten::prepare_query(&query, self.shared).await {
            Ok(None) => Plan::PassThrough,
            Ok(Some(read)) => {
                checked_call = match &read {
                    QueryRead::HotOnlyCall(_) => true,
                    QueryRead::Multi(parts) => parts
                        .iter()
                        .any(|p| matches!(p, super::reads::Part::HotOnlyCall(..))),
                    _ => false,
                };
                // A Query sent before the answers to earlier ones arrived (tokio-postgres
                // sends the next as soon as it has seen an error): planned once they are
                // in, when the transaction status it runs in is known, so that it can be
                // retried.
                if attempt == 0 {
                    wait_until_answered(self.shared).await;
                }
                // A single write, sent again whole if its own part fails under the
                // savepoint.
                locked_here = attempt == 0
                    && boundary
                    && alone
                    && matches!(read, QueryRead::Write(_))
                    && self.lock_in_group(&read.table_ids());
                let at = self
                    .transaction_generations(&read.table_ids(), boundary && !locked_here)
                    .await?;
                if let QueryRead::Copy(_, options) = &read {
                    copy = Some(CopyOut {
                        options: options.clone(),
                        encoder: None,
                    });
                }
                if let (QueryRead::Select(p), 0) = (&read, attempt) {
                    if let Some(notice) = rewritten::explain_notice(p, None, self.shared).await {
                        self.shared.locked().explain_notice = Some(notice);
                    }
                }
                let (known, quiet) = if attempt == 0 {
                    self.known_hot(&read.table_ids(), boundary)
                } else {
                    (KnownHot::new(), false)
                };
                let txn = TxnView {
                    at: &at,
                    fresh: attempt > 0,
                    known: &known,
                    quiet,
                    // Frames of an extended group went before the Query without a Sync.
                    after_others: attempt == 0 && !boundary,
                    lock_here: locked_here,
                };
                match rewritten::plan_query(&read, &query, txn, self.shared).await {
                    Plan::LockFirst => {
                        locked_here = false;
                        let at = self
                            .transaction_generations(&read.table_ids(), boundary)
                            .await?;
                        let txn = TxnView {
                            at: &at,
                            lock_here: false,
                            ..txn
                        };
                        rewritten::plan_query(&read, &query, txn, self.shared).await
                    }
                    plan => plan,
                }
            }
            // The catalog cannot be read: a Query that names no table of the registry last
            // read runs as written.
            Err(error)
                if error.code == "58030"
                    && rewritten::runs_unplanned(
                        query.get(5..).unwrap_or_default(),
                        self.shared,
                    ) =>
            {
                Plan::PassThrough
            }
            Err(error) => Plan::Fail(error),
        };
        let mut out = match plan {
            Plan::PassThrough => {
                self.shared
                    .state
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .query_sent(rewritten::query_text(&query));
                query
            }
            Plan::Run(frames, own) => {
                {
                    let mut state = self
                        .shared
                        .state
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    // Retried transparently only outside a transaction block, where the
                    // failed attempt left nothing behind, or where what it left is
                    // coldwire's savepoint to roll back to, and while nothing else is
                    // outstanding.
                    let in_block = locked_here && state.phase == Phase::InTransaction;
                    let retryable = !checked_call
                        && (state.phase == Phase::Idle || in_block)
                        && state.outstanding_syncs() == 0
                        && attempt < MAX_READ_RETRIES;
                    state.forget_unnamed();
                    // Its SQL PREPAREs are followed, as a relayed Query's are.
                    if let Some(sql) = rewritten::query_text(&query) {
                        state.sql_prepares_sent(sql.as_bytes());
                    }
                    state.quiet_since_sync = true;
                    state.rewritten_group_sent(RewrittenGroup {
                        retry: retryable.then(|| Retry::Query(query.clone())),
                        attempt,
                        drop_parse_complete: true,
                        drop_bind_complete: true,
                        bind_completed: false,
                        skip_row_descriptions,
                        client_row_descriptions: skip_row_descriptions,
                        drop_no_data: true,
                        retrying: false,
                        copy,
                        own: own.into(),
                        in_block,
                        rollback_to: false,
                    });
                }
                super::reads::after_plan().await;
                frames
            }
            // Never: planned again above without `lock_here`, which does not answer this.
            Plan::LockFirst => {
                let error = msg::ErrorFields {
                    severity: msg::Severity::Error,
                    code: "XX000".into(),
                    message: "coldwire: the write could not be planned".into(),
                    detail: None,
                    hint: None,
                };
                return self.fail(error).await;
            }
            Plan::Fail(error) => return self.fail(error).await,
        };
        self.write_now(&mut out).await
    }

    /// Answers a simple Query with coldwire's `error` once everything before it is. In a
    /// transaction block Postgres raises it in the Query's place, so that the block fails
    /// as after any error (a COMMIT then rolls it back), and a block that failed already
    /// answers as it does to any statement.
    async fn fail(&mut self, error: msg::ErrorFields) -> Result<(), SessionError> {
        let (_, status) = wait_until_answered(self.shared).await;
        if status != b'I' {
            let sql = crate::sql::rewrite::raise_sql(
                &error.code,
                &error.message,
                error.detail.as_deref(),
                error.hint.as_deref(),
            );
            let mut out = BytesMut::new();
            crate::wire::extended::encode_query(&mut out, &sql);
            self.shared.locked().query_sent(None);
            return self.write_now(&mut out).await;
        }
        let mut out = error.encode();
        out.extend_from_slice(&msg::encode_ready_for_query(status));
        let mut client = self.shared.client_tx.lock().await;
        client.write_all(&out).await.map_err(SessionError::ClientIo)
    }

    /// The generations of `tables` the client's transaction block sees, for planning its
    /// reads (DESIGN §6.4): known once per transaction, learnt by running
    /// `coldwire.read_lock` as coldwire's own group where a group may start (`boundary`,
    /// nothing outstanding) inside a transaction block. Empty outside one: reads are then
    /// planned for the current generation and guarded.
    pub(super) async fn transaction_generations(
        &mut self,
        tables: &[i64],
        boundary: bool,
    ) -> Result<HashMap<i64, i64>, SessionError> {
        let (mut known, missing) = {
            let state = self
                .shared
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let known: HashMap<i64, i64> = tables
                .iter()
                .filter_map(|t| state.txn_generations.get(t).map(|g| (*t, *g)))
                .collect();
            let missing: Vec<i64> = tables
                .iter()
                .copied()
                .filter(|t| !known.contains_key(t))
                .collect();
            let ask = boundary
                && !missing.is_empty()
                && state.phase == Phase::InTransaction
                && state.outstanding_syncs() == 0;
            (known, if ask { missing } else { Vec::new() })
        };
        if missing.is_empty() {
            return Ok(known);
        }
        let (reply, result) = tokio::sync::oneshot::channel();
        // Parsed each time, never prepared: an error of a group of coldwire's own aborts
        // the client's block without telling it, and a prepared statement can be freed
        // unseen (a DEALLOCATE ALL inside a function).
        self.shared.locked().own_group_sent(reply);
        self.write_now(&mut super::reads::read_lock_frames(&missing))
            .await?;
        match result.await {
            Ok(Ok(rows)) => {
                let found = super::reads::read_lock_rows(&rows);
                self.shared
                    .state
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .txn_generations
                    .extend(found.iter().map(|(k, v)| (*k, *v)));
                known.extend(found);
            }
            Ok(Err(error)) => {
                tracing::warn!(code = %error.code, message = %error.message, "coldwire.read_lock failed in the client's transaction");
                let mut state = self.shared.locked();
                if state.phase == Phase::FailedTransaction {
                    state.own_failure = Some(error);
                }
            }
            Err(_) => {}
        }
        Ok(known)
    }

    /// Whether a write of `tables` (one), sent inside a transaction block with everything
    /// before it answered, is the block's first statement on its table: its rehydration
    /// then takes the table's lock and checks its generation under a savepoint of
    /// coldwire's ([`TxnView::lock_here`]), in the client's round trip, instead of
    /// `coldwire.read_lock` in a round trip of its own. The caller checks that the
    /// write's group can be sent again if that check fails.
    fn lock_in_group(&self, tables: &[i64]) -> bool {
        let state = self.shared.locked();
        let [table] = tables else {
            return false;
        };
        state.phase == Phase::InTransaction
            && state.quiet()
            && !state.txn_generations.contains_key(table)
    }

    /// For planning a statement sent at a `boundary` (nothing of its group went upstream
    /// before it): the rows of `tables` the client's transaction block brought back, and
    /// whether every message sent before it is answered — none of the first unless the
    /// second ([`SessionState::known_hot`](super::state::SessionState::known_hot),
    /// [`SessionState::quiet`](super::state::SessionState::quiet)).
    fn known_hot(&self, tables: &[i64], boundary: bool) -> (KnownHot, bool) {
        if !boundary {
            return (KnownHot::new(), false);
        }
        let state = self.shared.locked();
        (state.known_hot(tables), state.quiet())
    }

    /// A session on a database coldwire does not serve is relayed, and would read a
    /// tiered table's hot rows only: that of a proxy without a service connection, or one
    /// whose catalog records another cold store, or beyond `max_databases`. Before such a
    /// session's first statement, and again before its next once a check of the database
    /// by any session is older than [`REGISTRY_TTL`] (the first flush of a newly tiered
    /// table waits until then), coldwire asks Postgres which tables of the database are
    /// tiered, between the client's groups. If any is, a proxy with a service connection
    /// starts serving the database (as it would within a second when it is listed); if
    /// it cannot, or without a service connection, or when Postgres cannot tell, the
    /// session ends with an error. Returns whether coldwire serves the database now.
    ///
    /// # Errors
    /// [`SessionError::TiersNotServed`], or the upstream connection failed.
    async fn check_tiers(&mut self, until: &mut Option<Instant>) -> Result<bool, SessionError> {
        let now = Instant::now();
        if until.is_some_and(|u| now < u) {
            return Ok(false);
        }
        let database = &self.shared.database;
        if let Some(at) = self.shared.ctx.untiered_since(database) {
            if now < at + REGISTRY_TTL {
                *until = Some(at + REGISTRY_TTL);
                return Ok(false);
            }
        }
        let (reply, result) = tokio::sync::oneshot::channel();
        {
            let mut state = self.shared.locked();
            // Between groups outside a transaction block, where coldwire's own group ends
            // nothing of the client's and changes nothing it will do: inside one, its
            // query would take the block's first snapshot, after which SET TRANSACTION
            // fails (checked once the block ends).
            if state.phase != Phase::Idle || state.outstanding_syncs() != 0 {
                return Ok(false);
            }
            state.own_group_sent(reply);
        }
        self.write_now(&mut super::reads::tiered_tables_frames())
            .await?;
        let service = self.shared.ctx.databases.is_some();
        let refused = |tables, reason| SessionError::TiersNotServed {
            database: database.clone(),
            tables,
            reason,
            service,
        };
        let tables = match result.await {
            Ok(Ok(rows)) => match rows.into_iter().next().and_then(|r| r.into_iter().next()) {
                Some(Some(names)) => String::from_utf8_lossy(&names).into_owned(),
                _ => {
                    self.shared.ctx.found_untiered(database, now);
                    *until = Some(now + REGISTRY_TTL);
                    return Ok(false);
                }
            },
            Ok(Err(error)) => {
                tracing::warn!(%database, code = %error.code, message = %error.message, "session refused: cannot check its database for tiered tables");
                return Err(refused(None, error.message));
            }
            // The upstream direction ended: it reports why.
            Err(_) => return Ok(false),
        };
        let reason = match &self.shared.ctx.databases {
            None => "it has no service_url",
            Some(databases) => {
                // Tried at most once per TTL per database: opening takes a service
                // connection.
                let tried = self
                    .shared
                    .ctx
                    .unservable_since(database)
                    .is_some_and(|at| now < at + REGISTRY_TTL);
                if !tried {
                    match databases.open(database).await {
                        Ok(_) => return Ok(true),
                        Err(e) => {
                            tracing::warn!(%database, error = %e, "coldwire cannot serve the tiered tables of a database");
                            self.shared.ctx.found_unservable(database, now);
                        }
                    }
                }
                "it does not serve that database"
            }
        };
        tracing::warn!(%database, tiered = %tables, reason, "session refused: coldwire cannot serve its database's tiered tables");
        Err(refused(Some(tables), reason.to_owned()))
    }

    /// Writes coldwire's own frames upstream at once (the caller has done the bookkeeping).
    pub(super) async fn write_now(&mut self, out: &mut BytesMut) -> Result<(), SessionError> {
        self.bytes.increment(out.len() as u64);
        self.dir
            .write(self.tx, out)
            .await
            .map_err(SessionError::UpstreamIo)
    }
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
        let own = state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .needs_whole_frames();
        dir.scanner.set_inspect_all(own);
        let mut ready = false;
        dir.scanner
            .drain(&mut input, &mut out, |tag, frame, out| {
                ready |= tag == msg::READY_FOR_QUERY;
                let action = {
                    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
                    if tag == msg::BIND_COMPLETE || tag == msg::READY_FOR_QUERY {
                        if let Some(notice) = state.explain_notice.take() {
                            if tag == msg::BIND_COMPLETE {
                                out.extend_from_slice(&notice);
                            }
                        }
                    }
                    protocol::on_server_frame(&mut state, tag, frame, &streamed)?
                };
                match action {
                    ServerAction::Pass => out.extend_from_slice(frame),
                    ServerAction::Drop => {}
                    ServerAction::Replace(bytes) => out.extend_from_slice(&bytes),
                    ServerAction::Answered(own) => own.finish(),
                    ServerAction::CancelKey { pid, secret } => {
                        let issued = ctx
                            .cancel_keys
                            .register(secret.len(), CancelKey { pid, secret });
                        out.extend_from_slice(&msg::encode_backend_key_data(
                            issued.key().pid,
                            &issued.key().secret,
                        ));
                        *registration = Some(issued);
                    }
                    ServerAction::Retry { group, attempt } => retry(group, attempt, shared),
                }
                Ok::<(), WireError>(())
            })
            .map_err(SessionError::UpstreamProtocol)?;
        if ready {
            // DDL the catalog follows has run (or failed): statements after this
            // ReadyForQuery read the registry again, which brings the catalog up to date.
            let changed = std::mem::take(
                &mut state
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .catalog_changed,
            );
            if let (true, Some(reads)) = (changed, shared.reads()) {
                reads.invalidate_after_ddl();
            }
        }
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

async fn read_more<R: AsyncRead + Unpin>(
    rx: &mut R,
    input: &mut BytesMut,
) -> std::io::Result<usize> {
    input.reserve(READ_CHUNK_BYTES);
    rx.read_buf(input).await
}
