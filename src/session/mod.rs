//! One client session: the opening handshake, the upstream connection, the relay, and the
//! protocol state learnt on the way.

pub mod admin;
mod answer;
mod context;
pub mod databases;
mod handshake;
mod protocol;
pub mod reads;
mod relay;
mod retry;
mod rewritten;
mod run;
mod shared;
mod sql_prepared;
mod state;
pub mod upstream;

pub use context::{SessionContext, UpstreamCancel};
pub use relay::End;
pub use run::run;
pub use state::{Phase, SessionState};

pub use crate::error::SessionError;
