//! What both directions of a session's relay share: its state, context and user, the
//! client's write half, the ReadyForQuery signal, and the channel that hands a group to
//! run again from the upstream direction to the client direction.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::WriteHalf;
use tokio::sync::{Mutex as AsyncMutex, Notify};

use super::databases::Tier;
use super::reads::ReadPath;
use super::state::{RewrittenGroup, SessionState};
use super::upstream::Io;
use super::SessionContext;

/// The parts of a session both relay directions use.
pub struct Shared<'a> {
    pub state: &'a Mutex<SessionState>,
    pub ctx: &'a SessionContext,
    /// Who the client authenticated as, for admin calls.
    pub user: String,
    pub database: String,
    /// The tier of the session's database as last looked up, with the version of the
    /// proxy's databases it was looked up at ([`Shared::reads`]).
    pub(super) tier: Mutex<(u64, Option<Arc<Tier>>)>,
    /// Written by the upstream direction, and by the client direction when coldwire
    /// answers a message itself (only when nothing else is owed to the client).
    pub(super) client_tx: AsyncMutex<WriteHalf<Box<dyn Io>>>,
    /// Signalled at every ReadyForQuery.
    pub(super) ready: Notify,
    /// Groups to run again after a guard failure the client was not shown (with the
    /// retry's number), from the upstream direction to the client direction.
    pub(super) retries: tokio::sync::mpsc::UnboundedSender<(RewrittenGroup, u8)>,
}

impl Shared<'_> {
    /// The session's state, locked (never across an await).
    pub fn locked(&self) -> std::sync::MutexGuard<'_, SessionState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The read path that plans this session's statements: that of the session's
    /// database when coldwire serves it (DESIGN §3), else none, and the session is
    /// relayed untouched. Looked up again whenever coldwire starts serving a database.
    pub fn reads(&self) -> Option<Arc<ReadPath>> {
        let databases = self.ctx.databases.as_ref()?;
        let version = databases.version();
        let mut tier = self.tier.lock().unwrap_or_else(PoisonError::into_inner);
        if tier.0 != version {
            *tier = (version, databases.get(&self.database));
        }
        tier.1.as_ref().map(|t| Arc::clone(&t.reads))
    }
}
