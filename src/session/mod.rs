//! One client session: the opening handshake, the upstream connection, the relay, and the
//! protocol state learnt on the way.

pub mod admin;
mod answer;
mod context;
pub mod databases;
mod handshake;
pub mod reads;
mod relay;
mod rewritten;
mod run;
mod state;
pub mod upstream;

pub use context::{SessionContext, UpstreamCancel};
pub use relay::End;
pub use run::run;
pub use state::{Phase, SessionState};

use crate::wire::WireError;

/// Why a session ended early.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("protocol violation by the client: {0}")]
    Protocol(#[from] WireError),
    #[error("protocol violation by the upstream server: {0}")]
    UpstreamProtocol(WireError),
    #[error("client closed the connection during startup")]
    ClientGone,
    #[error("client sent no startup packet within {secs} s")]
    StartupTimeout { secs: u64 },
    #[error("TLS handshake failed: {0}")]
    Tls(std::io::Error),
    #[error("client did not negotiate TLS and require_tls is set")]
    TlsRequired,
    #[error("cannot connect to upstream {addr}: {source}")]
    UpstreamConnect {
        addr: String,
        source: std::io::Error,
    },
    #[error("connecting to upstream {addr} timed out after {ms} ms")]
    UpstreamTimeout { addr: String, ms: u64 },
    #[error("client connection failed: {0}")]
    ClientIo(std::io::Error),
    #[error("upstream connection failed: {0}")]
    UpstreamIo(std::io::Error),
}

impl From<std::io::Error> for SessionError {
    /// Plain I/O errors arise on the client socket (the upstream paths map theirs).
    fn from(e: std::io::Error) -> Self {
        SessionError::ClientIo(e)
    }
}

impl SessionError {
    /// The `kind` label of `coldwire_errors_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            SessionError::Protocol(_) => "client_protocol",
            SessionError::UpstreamProtocol(_) => "upstream_protocol",
            SessionError::ClientGone | SessionError::ClientIo(_) => "client_io",
            SessionError::StartupTimeout { .. } => "startup_timeout",
            SessionError::Tls(_) => "tls_handshake",
            SessionError::TlsRequired => "tls_required",
            SessionError::UpstreamConnect { .. } | SessionError::UpstreamTimeout { .. } => {
                "upstream_unreachable"
            }
            SessionError::UpstreamIo(_) => "upstream_io",
        }
    }
}
