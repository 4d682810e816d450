//! Connections to the upstream Postgres: the relay's socket and one-shot cancel requests.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use super::SessionError;
use crate::config::UpstreamAddr;
use crate::wire::startup::CancelKey;

/// A byte stream coldwire relays over: TCP, Unix socket or TLS.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Opens a connection to the upstream server within `timeout`.
///
/// # Errors
/// Refused, unreachable or timed out, with the address for the log.
pub async fn connect(addr: &UpstreamAddr, timeout: Duration) -> Result<Box<dyn Io>, SessionError> {
    let attempt = async {
        match addr {
            UpstreamAddr::Tcp { host, port } => {
                let stream = TcpStream::connect((host.as_str(), *port)).await?;
                stream.set_nodelay(true)?;
                Ok::<Box<dyn Io>, std::io::Error>(Box::new(stream))
            }
            UpstreamAddr::Unix(path) => {
                let stream: Box<dyn Io> = Box::new(UnixStream::connect(path).await?);
                Ok(stream)
            }
        }
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(source)) => Err(SessionError::UpstreamConnect {
            addr: addr.to_string(),
            source,
        }),
        Err(_) => Err(SessionError::UpstreamTimeout {
            addr: addr.to_string(),
            ms: timeout.as_millis() as u64,
        }),
    }
}

/// Sends a CancelRequest for `key` to the upstream server. "The server will process this
/// request and then close the connection", so we wait for the close (bounded by `timeout`).
///
/// # Errors
/// The connection or the write failed.
pub async fn cancel(
    addr: &UpstreamAddr,
    key: &CancelKey,
    timeout: Duration,
) -> Result<(), SessionError> {
    let mut stream = connect(addr, timeout).await?;
    stream.write_all(&key.encode_cancel_request()).await?;
    stream.flush().await?;
    let mut sink = [0u8; 64];
    let _ = tokio::time::timeout(timeout, stream.read(&mut sink)).await;
    Ok(())
}
