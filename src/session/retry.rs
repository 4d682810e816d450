//! Reads run again, unseen, after their guard failed because the cold tier changed as
//! they started (DESIGN §6.4): the upstream direction holds the failure back and hands
//! the group over; the client direction plans and sends it again where it ran.

use std::collections::HashMap;
use std::sync::PoisonError;

use super::reads::{KnownHot, TxnView};
use super::relay::ClientDirection;
use super::rewritten;
use super::shared::Shared;
use super::state::{Phase, Retry, RewrittenGroup};
use super::SessionError;
use crate::wire::extended as ext;
use crate::wire::messages as msg;

/// Retries of one statement after guard failures before the failure reaches the client.
pub(super) const MAX_READ_RETRIES: u8 = 10;

impl ClientDirection<'_, '_> {
    /// Sends the retry of a group whose guard failed unseen. In autocommit the retry runs
    /// holding its tables' locks shared (as reads in transaction blocks do), taken before
    /// it is planned and given back after it, so flushes cannot finalize under it again:
    /// however long it takes to plan, it is not refused with 40001 a second time.
    ///
    /// Nothing the client sent after the failed group is recorded when it runs (a retry
    /// is decided only while nothing is, and goes ahead of any frame read after that:
    /// `Stop::RetryFirst`), so coldwire's lock groups are recorded in the order they are
    /// written.
    pub(super) async fn run_retry(
        &mut self,
        group: RewrittenGroup,
        attempt: u8,
    ) -> Result<(), SessionError> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retry_pending = false;
        if group.rollback_to {
            let query = matches!(group.retry, Some(Retry::Query(_)));
            tracing::info!(
                query,
                "rolling back to coldwire's savepoint in the client's transaction block"
            );
            self.roll_back_own_part().await?;
        }
        let held = self.hold_tables(group.retry.as_ref()).await?;
        let sent = self.send_retry(group, attempt).await;
        if !held.is_empty() {
            let (reply, _) = tokio::sync::oneshot::channel();
            self.shared.locked().own_group_sent(reply);
            self.write_now(&mut super::reads::table_lock_frames(&held, false))
                .await?;
        }
        sent
    }

    /// Undoes coldwire's own part of a group that failed under its savepoint inside a
    /// transaction block, as its own group: the block is then as it was before the group.
    async fn roll_back_own_part(&mut self) -> Result<(), SessionError> {
        let (reply, result) = tokio::sync::oneshot::channel();
        self.shared.locked().own_group_sent(reply);
        self.write_now(&mut super::reads::rollback_frames()).await?;
        if let Ok(Err(error)) = result.await {
            // The retry then fails as the block does, and the client learns why there.
            tracing::warn!(code = %error.code, message = %error.message, "rolling back to coldwire's savepoint failed");
            let mut state = self.shared.locked();
            if state.phase == Phase::FailedTransaction {
                state.own_failure = Some(error);
            }
        }
        Ok(())
    }

    /// Takes the session-level shared locks of the tables `retry` reads or writes, when
    /// the session is in autocommit with nothing outstanding; the tables held (none when
    /// the lock could not be taken: the retry then runs as any other).
    async fn hold_tables(&mut self, retry: Option<&Retry>) -> Result<Vec<i64>, SessionError> {
        {
            let state = self.shared.locked();
            // A write retried to bring back keys that may be cold may need another round
            // (DESIGN §7), which the release sent behind it would rule out: it holds nothing.
            if state.phase != Phase::Idle
                || state.outstanding_syncs() != 0
                || !state.write_candidates.is_empty()
            {
                return Ok(Vec::new());
            }
        }
        let mut tables = match retry {
            Some(Retry::Query(query)) => match rewritten::prepare_query(query, self.shared).await {
                Ok(Some(read)) => read.table_ids(),
                _ => Vec::new(),
            },
            Some(Retry::Bind { bind, .. }) => rewritten::bound(bind, self.shared).tables,
            None => Vec::new(),
        };
        tables.sort_unstable();
        tables.dedup();
        if tables.is_empty() {
            return Ok(tables);
        }
        let (reply, result) = tokio::sync::oneshot::channel();
        self.shared.locked().own_group_sent(reply);
        self.write_now(&mut super::reads::table_lock_frames(&tables, true))
            .await?;
        match result.await {
            Ok(Ok(_)) => Ok(tables),
            Ok(Err(error)) => {
                tracing::warn!(code = %error.code, message = %error.message, "holding the tables of a retried read failed");
                Ok(Vec::new())
            }
            Err(_) => Ok(Vec::new()),
        }
    }

    /// Plans and sends a group again.
    async fn send_retry(&mut self, group: RewrittenGroup, attempt: u8) -> Result<(), SessionError> {
        match group.retry {
            Some(Retry::Query(query)) => {
                // Inside a block it asks for the tables' locks first (`boundary`).
                self.run_read(
                    query,
                    attempt,
                    group.client_row_descriptions,
                    group.in_block,
                    false,
                )
                .await
            }
            Some(Retry::Bind {
                bind,
                describe,
                execute,
            }) => {
                // Inside a block (after the rollback to coldwire's savepoint), the tables
                // are locked and their generations learnt first, as for any statement
                // there: the retry cannot fail the same way, and is not run again.
                let at = if group.in_block {
                    let tables = rewritten::bound(&bind, self.shared).tables;
                    self.transaction_generations(&tables, true).await?
                } else {
                    HashMap::new()
                };
                let bound = rewritten::bind(
                    &bind,
                    TxnView {
                        at: &at,
                        fresh: true,
                        known: &KnownHot::new(),
                        quiet: false,
                        // A group is retried only while none of its statements completed.
                        after_others: false,
                        lock_here: false,
                    },
                    self.shared,
                )
                .await?;
                let own = bound.own.into_iter().collect();
                let bind_seen = group.drop_bind_complete || group.bind_completed;
                let mut out = bound.frames;
                // The Describe after the Bind was answered with it, or skipped with it
                // (a failure of coldwire's part before the Bind): then sent again.
                if let (Some(describe), false) = (&describe, bind_seen) {
                    out.extend_from_slice(describe);
                }
                out.extend_from_slice(&execute);
                out.extend_from_slice(&ext::empty(msg::SYNC));
                let retry =
                    (attempt < MAX_READ_RETRIES && !group.in_block).then_some(Retry::Bind {
                        bind,
                        describe,
                        execute,
                    });
                {
                    let mut state = self
                        .shared
                        .state
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    state.quiet_since_sync = true;
                    state.retry_group_sent(RewrittenGroup {
                        retry,
                        attempt,
                        drop_bind_complete: bind_seen,
                        own,
                        in_block: group.in_block,
                        ..RewrittenGroup::default()
                    });
                }
                self.write_now(&mut out).await
            }
            None => Ok(()),
        }
    }
}

/// Hands a group whose failure was held back to the client direction, to run again.
pub(super) fn retry(group: RewrittenGroup, attempt: u8, shared: &Shared<'_>) {
    metrics::counter!(crate::metrics::READ_RETRIES_TOTAL).increment(1);
    tracing::info!(attempt, "cold segment set changed: running the read again");
    if shared.retries.send((group, attempt)).is_err() {
        let mut state = shared.locked();
        state.retry_pending = false;
        state.write_candidates.clear();
    }
}
