//! What every session shares: settings, the upstream address, TLS, cancel keys, shutdown.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::admin::AdminExecutor;
use crate::config::{Config, Upstream};
use crate::wire::cancel::CancelRegistry;
use crate::wire::startup::CancelKey;

/// The upstream backend a coldwire-issued cancel key stands for.
pub type UpstreamCancel = CancelKey;

/// Shared by all sessions of one proxy.
pub struct SessionContext {
    pub config: Config,
    pub upstream: Upstream,
    /// Replaced when a SIGHUP reloads the certificate and key.
    pub tls: std::sync::RwLock<Option<TlsAcceptor>>,
    pub cancel_keys: Arc<CancelRegistry<UpstreamCancel>>,
    /// Fired when the shutdown grace period is over: sessions close at once.
    pub force_close: CancellationToken,
    /// Carries out admin calls (`admin::Disabled` without a service connection).
    pub admin: Arc<dyn AdminExecutor>,
    /// The databases whose tables coldwire tiers, each with its read path; `None`
    /// without a service connection.
    pub databases: Option<Arc<super::databases::Databases>>,
    /// Databases coldwire does not serve, each with when a session last found it without
    /// tiered tables (`relay::ClientDirection::check_tiers`).
    pub untiered_at: Mutex<HashMap<String, Instant>>,
    /// Databases with tiered tables coldwire found it could not serve, each with when.
    pub unservable_at: Mutex<HashMap<String, Instant>>,
}

impl SessionContext {
    /// When a session last found `database` without tiered tables.
    pub fn untiered_since(&self, database: &str) -> Option<Instant> {
        last(&self.untiered_at, database)
    }

    /// A session found `database` without tiered tables by a check sent at `at`.
    pub fn found_untiered(&self, database: &str, at: Instant) {
        note(&self.untiered_at, database, at);
    }

    /// When coldwire last found it could not serve the tiered tables of `database`.
    pub fn unservable_since(&self, database: &str) -> Option<Instant> {
        last(&self.unservable_at, database)
    }

    /// coldwire found at `at` that it cannot serve the tiered tables of `database`.
    pub fn found_unservable(&self, database: &str, at: Instant) {
        note(&self.unservable_at, database, at);
    }

    /// The TLS acceptor new sessions use now (`None`: TLS refused).
    pub fn tls(&self) -> Option<TlsAcceptor> {
        self.tls
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// When `database` was last noted in `times`.
fn last(times: &Mutex<HashMap<String, Instant>>, database: &str) -> Option<Instant> {
    times
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(database)
        .copied()
}

/// Notes `database` in `times` at `at`, unless it was noted later.
fn note(times: &Mutex<HashMap<String, Instant>>, database: &str, at: Instant) {
    let mut times = times.lock().unwrap_or_else(PoisonError::into_inner);
    let last = times.entry(database.to_owned()).or_insert(at);
    *last = (*last).max(at);
}
