//! A session from accepted socket to close.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tracing::Instrument;

use super::handshake::{self, Opening};
use super::relay::{self, End};
use super::state::SessionState;
use super::upstream::{self, Io};
use super::{SessionContext, SessionError};
use crate::metrics::{CLIENT_CONNECTIONS, ERRORS_TOTAL, SESSIONS_TOTAL};

/// Like Postgres's `authentication_timeout`: a client must send its startup packet (and
/// finish any TLS handshake) within this time.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs one client connection to its end; never panics on client input, logs how it ended.
pub async fn run(socket: TcpStream, peer: SocketAddr, session_id: u64, ctx: Arc<SessionContext>) {
    let span = tracing::info_span!("session", session_id, %peer);
    async move {
        metrics::counter!(SESSIONS_TOTAL).increment(1);
        let open = metrics::gauge!(CLIENT_CONNECTIONS);
        open.increment(1.0);
        let started = Instant::now();
        let _ = socket.set_nodelay(true);
        match serve(Box::new(socket), &ctx).await {
            Ok(Some(end)) => tracing::info!(
                ?end,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "session ended"
            ),
            Ok(None) => {}
            Err(e) => {
                metrics::counter!(ERRORS_TOTAL, "kind" => e.kind()).increment(1);
                match e {
                    SessionError::ClientGone | SessionError::ClientIo(_) => {
                        tracing::debug!(error = %e, "session ended")
                    }
                    _ => tracing::warn!(error = %e, "session ended with an error"),
                }
            }
        }
        open.decrement(1.0);
    }
    .instrument(span)
    .await;
}

/// The session proper. `Ok(None)` for a connection that only carried a CancelRequest.
async fn serve(client: Box<dyn Io>, ctx: &SessionContext) -> Result<Option<End>, SessionError> {
    let opening = match tokio::time::timeout(STARTUP_TIMEOUT, handshake::open(client, ctx)).await {
        Ok(opening) => opening,
        Err(_) => {
            return Err(SessionError::StartupTimeout {
                secs: STARTUP_TIMEOUT.as_secs(),
            })
        }
    };
    let (mut client, mut startup, leftover, tls) = match opening {
        Ok(Opening::Startup {
            client,
            startup,
            leftover,
            tls,
        }) => (client, startup, leftover, tls),
        Ok(Opening::Cancel) => return Ok(None),
        Err(e) => return Err(e),
    };
    tracing::info!(
        user = startup.param("user").unwrap_or(""),
        database = startup.param("database").unwrap_or(""),
        application_name = startup.param("application_name").unwrap_or(""),
        tls,
        "session started"
    );
    if startup.param("database").is_none() {
        if let Some(db) = &ctx.upstream.default_database {
            startup.set_param("database", db);
        }
    }
    let mut upstream =
        match upstream::connect(&ctx.upstream.addr, ctx.config.connect_timeout()).await {
            Ok(upstream) => upstream,
            Err(e) => {
                if let Some(fields) = crate::error::client_error(&e) {
                    let _ = client.write_all(&fields.encode()).await;
                }
                return Err(e);
            }
        };
    upstream
        .write_all(&startup.encode())
        .await
        .map_err(SessionError::UpstreamIo)?;
    let mut state = SessionState::new(&startup.params);
    // A replication connection (physical, or logical: `database`) cannot run the check,
    // which uses the extended protocol; `replication=false` is an ordinary session.
    state.checks_tiers = startup.param("replication").is_none_or(|v| {
        matches!(
            v.to_ascii_lowercase().as_str(),
            "false" | "off" | "no" | "0"
        )
    });
    let state = Mutex::new(state);
    let user = startup.param("user").unwrap_or_default().to_owned();
    let database = startup
        .param("database")
        .map_or_else(|| user.clone(), str::to_owned);
    relay::relay(client, upstream, leftover, &state, ctx, (user, database))
        .await
        .map(Some)
}
