//! Answers coldwire gives the client itself: admin calls (`coldwire.tier_table(…)`, …),
//! sent only once every earlier request has been answered by Postgres, so they land in
//! protocol order.

use std::sync::PoisonError;

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;

use super::admin::{AdminSession, Answer};
use super::shared::Shared;
use super::state::Phase;
use super::SessionError;
use crate::admin::args::Resolved;
use crate::admin::{AdminError, AdminFunction, AdminRequest};
use crate::wire::extended as ext;
use crate::wire::messages as msg;
use serde_json::Value;

/// Waits until Postgres has answered every request the client sent so far; the phase and
/// ReadyForQuery status then.
pub async fn wait_until_answered(shared: &Shared<'_>) -> (Phase, u8) {
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
pub async fn answer_admin(
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
                formats,
                simple,
            } => {
                let request = AdminRequest {
                    function: call.function,
                    args,
                    user: shared.user.clone(),
                    database: shared.database.clone(),
                };
                let reads = shared.reads();
                let outcome = match (&request.function, &request.args[..], &reads) {
                    // Planned like the read it explains, by the session's read path.
                    (AdminFunction::Explain, [Resolved::Text(sql)], Some(reads)) => {
                        let settings = crate::sql::params::Settings::of(|name| {
                            shared.locked().parameters.get(name).cloned()
                        });
                        reads
                            .explain(sql, settings)
                            .await
                            .map(Value::String)
                            .map_err(|e| {
                                let e = e.client_error();
                                AdminError::Postgres {
                                    code: e.code,
                                    message: e.message,
                                    detail: e.detail,
                                    hint: e.hint,
                                }
                            })
                    }
                    (AdminFunction::Explain, _, None) => Err(AdminError::Disabled),
                    _ => shared.ctx.admin.execute(request).await,
                };
                // The call may have made this database one coldwire serves.
                if let Some(reads) = shared.reads() {
                    // A table may have become tiered or plain: plan reads from a fresh
                    // catalog.
                    reads.invalidate();
                }
                outcome.map(|result| {
                    if simple {
                        crate::admin::answer::row_description(&mut out, &call, &[]);
                    }
                    crate::admin::answer::data_row(&mut out, &call, &result, &formats);
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
