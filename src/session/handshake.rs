//! The opening of a client connection, before anything is relayed: SSLRequest and
//! GSSENCRequest negotiation, CancelRequest, and the StartupMessage.

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::upstream::{self, Io};
use super::{SessionContext, SessionError};
use crate::wire::startup::{decode_initial, CancelKey, InitialPacket, StartupMessage};
use crate::wire::WireError;

/// How a connection opened.
pub enum Opening {
    /// A StartupMessage: relay the session.
    Startup {
        client: Box<dyn Io>,
        startup: StartupMessage,
        /// Bytes the client sent after the startup packet.
        leftover: BytesMut,
        tls: bool,
    },
    /// A CancelRequest, already handled; the connection is done.
    Cancel,
}

/// Reads initial packets until a StartupMessage or CancelRequest arrives. On failure the
/// client is sent an ErrorResponse, if its connection can still carry one.
///
/// # Errors
/// Malformed packets, a failed TLS handshake, plaintext when TLS is required, or I/O.
pub async fn open(client: Box<dyn Io>, ctx: &SessionContext) -> Result<Opening, SessionError> {
    let mut slot = Some(client);
    let result = negotiate(&mut slot, ctx).await;
    if let (Err(e), Some(client)) = (&result, slot.as_mut()) {
        if let Some(fields) = crate::error::client_error(e) {
            let _ = client.write_all(&fields.encode()).await;
            let _ = client.shutdown().await;
        }
    }
    result
}

/// The handshake proper; `slot` holds the client stream until it is handed on (or lost in
/// a failed TLS handshake).
async fn negotiate(
    slot: &mut Option<Box<dyn Io>>,
    ctx: &SessionContext,
) -> Result<Opening, SessionError> {
    let mut buf = BytesMut::with_capacity(512);
    let mut tls = false;
    loop {
        let client = slot.as_mut().ok_or(SessionError::ClientGone)?;
        let (packet, used) = loop {
            if let Some(decoded) = decode_initial(&buf)? {
                break decoded;
            }
            if client.read_buf(&mut buf).await? == 0 {
                return Err(SessionError::ClientGone);
            }
        };
        let _ = buf.split_to(used);
        match packet {
            InitialPacket::SslRequest => {
                if tls {
                    return Err(WireError::Malformed("second SSLRequest").into());
                }
                let Some(acceptor) = ctx.tls() else {
                    client.write_all(b"N").await?;
                    continue;
                };
                // Bytes sent before the TLS handshake would be trusted as if they came
                // through it (CVE-2021-23214): the client must wait for our answer.
                if !buf.is_empty() {
                    return Err(WireError::Malformed(
                        "data after SSLRequest before the TLS handshake",
                    )
                    .into());
                }
                client.write_all(b"S").await?;
                client.flush().await?;
                let plain = slot.take().ok_or(SessionError::ClientGone)?;
                let stream = acceptor.accept(plain).await.map_err(SessionError::Tls)?;
                *slot = Some(Box::new(stream));
                tls = true;
            }
            InitialPacket::GssEncRequest => {
                if !buf.is_empty() {
                    return Err(WireError::Malformed("data after GSSENCRequest").into());
                }
                client.write_all(b"N").await?;
            }
            InitialPacket::Cancel(key) => {
                forward_cancel(&key, ctx).await;
                return Ok(Opening::Cancel);
            }
            InitialPacket::Startup(startup) => {
                if ctx.config.require_tls && !tls {
                    return Err(SessionError::TlsRequired);
                }
                let client = slot.take().ok_or(SessionError::ClientGone)?;
                return Ok(Opening::Startup {
                    client,
                    startup,
                    leftover: buf,
                    tls,
                });
            }
        }
    }
}

/// Maps a coldwire-issued cancel key to its upstream backend and cancels there. Like
/// Postgres, says nothing to the client either way.
async fn forward_cancel(key: &CancelKey, ctx: &SessionContext) {
    let outcome = match ctx.cancel_keys.lookup(key) {
        None => {
            tracing::info!(pid = key.pid, "cancel request with an unknown key ignored");
            "unknown_key"
        }
        Some(upstream_key) => {
            match upstream::cancel(
                &ctx.upstream.addr,
                &upstream_key,
                ctx.config.connect_timeout(),
            )
            .await
            {
                Ok(()) => {
                    tracing::info!(pid = key.pid, "cancel request forwarded upstream");
                    "forwarded"
                }
                Err(e) => {
                    tracing::warn!(pid = key.pid, error = %e, "cancel request could not be forwarded");
                    "failed"
                }
            }
        }
    };
    metrics::counter!(crate::metrics::CANCEL_REQUESTS_TOTAL, "outcome" => outcome).increment(1);
}
