//! Accepts client connections and runs a session task for each; on shutdown stops
//! accepting, lets sessions finish for the grace period, then closes them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::catalog::{self, CatalogError};
use crate::cold::scan::ScanLimits;
use crate::config::{Config, ConfigError};
use crate::session::databases::Databases;
use crate::session::{self, SessionContext};
use crate::store::{ColdStore, StoreError};
use crate::wire::cancel::CancelRegistry;
use crate::wire::tls::{self, TlsError};

/// Pause after a failed accept (EMFILE and the like) so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// After the grace period, how long closed sessions get to wind down.
const FORCE_CLOSE_WAIT: Duration = Duration::from_secs(5);

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("cold_store: {0}")]
    ColdStore(#[from] StoreError),
    #[error("cannot install the metrics recorder: {0}")]
    Metrics(String),
    /// `target` is the service connection without its password ([`catalog::describe`]).
    #[error("cannot prepare the coldwire catalog through service_url ({target}): {source}")]
    Catalog {
        target: String,
        source: CatalogError,
    },
}

/// A proxy whose listeners are bound; [`Server::run`] serves until shutdown.
pub struct Server {
    ctx: Arc<SessionContext>,
    listener: TcpListener,
    metrics: Option<(TcpListener, metrics_exporter_prometheus::PrometheusHandle)>,
}

impl Server {
    /// Validates `config`, loads TLS material, creates or upgrades the catalog and checks
    /// that the cold store answers a listing (within `connect_timeout_ms`) when
    /// `service_url` is set, and binds the client and metrics listeners.
    ///
    /// # Errors
    /// Invalid settings, unreadable TLS files, a catalog that cannot be migrated (service
    /// database unreachable, not UTF8, newer than this binary), a cold store that is
    /// misconfigured, unreachable or refuses the listing, an address already in use.
    pub async fn bind(config: Config) -> Result<Self, ServerError> {
        config.validate()?;
        let upstream = config.upstream()?;
        let tls = match (&config.tls_cert, &config.tls_key) {
            (Some(cert), Some(key)) => Some(tls::acceptor(cert, key)?),
            _ => None,
        };
        crate::catalog::policy::set_defaults_for_new_tables(policy_defaults(&config)?);
        let service = prepare_catalog(&config).await?;
        let flush = match &service {
            Some(service) => {
                let store = ColdStore::open_checked(
                    &config.cold_store,
                    &config.cold_store_options(),
                    config.connect_timeout(),
                )
                .await?;
                tracing::info!(cold_store = store.location(), "cold store reachable");
                Some((service.clone(), store))
            }
            None => None,
        };
        crate::segment::page_cache::set_budget(config.cold_cache_mb.saturating_mul(1 << 20));
        let databases = match &flush {
            Some((service, store)) => {
                let databases = Arc::new(Databases::new(
                    service.clone(),
                    store.clone(),
                    ScanLimits::configured(config.max_cold_rows, config.max_cold_memory_mb),
                    config.max_rehydrate_rows,
                    config.max_databases,
                ));
                if let Err(e) = databases.claim_default_store().await {
                    tracing::warn!(error = %e, "the catalog of service_url's database");
                }
                // Databases tiered before a restart (or through another proxy).
                match databases.discover().await {
                    Ok(found) if !found.is_empty() => {
                        tracing::info!(databases = ?found, "serving tiered tables of other databases too");
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot look for other databases with tiered tables");
                    }
                }
                Some(databases)
            }
            None => None,
        };
        let admin: Arc<dyn crate::admin::AdminExecutor> = match &databases {
            Some(databases) => Arc::clone(databases) as Arc<dyn crate::admin::AdminExecutor>,
            None => Arc::new(crate::admin::Disabled),
        };
        let listener = bind(&config.listen).await?;
        let metrics = match &config.metrics_listen {
            Some(addr) => {
                let handle =
                    crate::metrics::install().map_err(|e| ServerError::Metrics(e.to_string()))?;
                Some((bind(addr).await?, handle))
            }
            None => None,
        };
        let ctx = Arc::new(SessionContext {
            config,
            upstream,
            tls: std::sync::RwLock::new(tls),
            cancel_keys: Arc::new(CancelRegistry::default()),
            force_close: CancellationToken::new(),
            admin,
            databases,
            untiered_at: std::sync::Mutex::default(),
            unservable_at: std::sync::Mutex::default(),
        });
        Ok(Self {
            ctx,
            listener,
            metrics,
        })
    }

    /// What a SIGHUP uses to apply a reloaded configuration to this server.
    pub fn reloader(&self) -> Reloader {
        Reloader {
            ctx: Arc::clone(&self.ctx),
        }
    }

    /// The address clients connect to (useful with port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// The address of the metrics endpoint, if enabled.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|(l, _)| l.local_addr().ok())
    }

    /// Serves clients until `shutdown` fires, then drains sessions as configured.
    pub async fn run(self, shutdown: CancellationToken) {
        let Server {
            ctx,
            listener,
            metrics,
        } = self;
        if let Some(databases) = &ctx.databases {
            databases.start(shutdown.clone());
        }
        if let Some((metrics_listener, handle)) = metrics {
            tokio::spawn(crate::metrics::serve(
                metrics_listener,
                handle,
                shutdown.clone(),
            ));
        }
        let sessions = TaskTracker::new();
        let mut next_session_id: u64 = 1;
        loop {
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => break,
                accepted = listener.accept() => accepted,
            };
            match accepted {
                Ok((socket, peer)) => {
                    sessions.spawn(session::run(
                        socket,
                        peer,
                        next_session_id,
                        Arc::clone(&ctx),
                    ));
                    next_session_id += 1;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            }
        }
        drop(listener);
        sessions.close();
        let grace = ctx.config.shutdown_grace();
        tracing::info!(
            open_sessions = sessions.len(),
            grace_secs = grace.as_secs(),
            "shutting down: no longer accepting"
        );
        if tokio::time::timeout(grace, sessions.wait()).await.is_err() {
            tracing::warn!(
                open_sessions = sessions.len(),
                "grace period over: closing the remaining sessions"
            );
            ctx.force_close.cancel();
            let _ = tokio::time::timeout(FORCE_CLOSE_WAIT, sessions.wait()).await;
        }
        tracing::info!("shutdown complete");
    }
}

/// Applies what can change without a restart to a running server.
pub struct Reloader {
    ctx: Arc<SessionContext>,
}

impl Reloader {
    /// Applies `new`'s TLS certificate and key (read again from their files, so a renewed
    /// certificate at the same path is picked up) and `policy_defaults`, and says what
    /// changed. The log filter is the caller's (it owns the subscriber). Settings that
    /// need a restart are named in a warning and otherwise ignored.
    ///
    /// # Errors
    /// Unreadable TLS files or bad policy defaults: nothing is applied.
    pub fn reload(&self, new: &Config) -> Result<Vec<String>, ServerError> {
        let tls = match (&new.tls_cert, &new.tls_key) {
            (Some(cert), Some(key)) => Some(tls::acceptor(cert, key)?),
            _ => None,
        };
        // require_tls changes at a restart only; until then it needs a certificate.
        if self.ctx.config.require_tls && tls.is_none() {
            return Err(ServerError::Config(ConfigError::Invalid {
                field: "tls_cert",
                reason: "the running proxy requires TLS (require_tls changes at a restart \
                         only), so TLS cannot be turned off by a reload"
                    .into(),
            }));
        }
        let defaults = policy_defaults(new)?;
        let mut changed = Vec::new();
        match (&new.tls_cert, self.ctx.tls().is_some()) {
            (Some(cert), _) => changed.push(format!(
                "TLS certificate and key read from {}",
                cert.display()
            )),
            (None, true) => changed.push("TLS turned off".to_owned()),
            (None, false) => {}
        }
        *self
            .ctx
            .tls
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = tls;
        if crate::catalog::Policy::for_new_table() != defaults.clone().unwrap_or_default() {
            changed.push(format!(
                "policy defaults for new tables: {}",
                defaults.clone().unwrap_or_default().in_words()
            ));
        }
        crate::catalog::policy::set_defaults_for_new_tables(defaults);
        let waiting = self.ctx.config.needing_restart(new);
        if !waiting.is_empty() {
            tracing::warn!(settings = %waiting.join(", "), "changed settings take effect at the next restart");
        }
        Ok(changed)
    }
}

/// `policy_defaults` read as a policy over the built-in defaults.
pub fn policy_defaults(config: &Config) -> Result<Option<crate::catalog::Policy>, ConfigError> {
    let Some(text) = &config.policy_defaults else {
        return Ok(None);
    };
    let invalid = |reason: String| ConfigError::Invalid {
        field: "policy_defaults",
        reason,
    };
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|e| invalid(format!("not JSON: {e}")))?;
    crate::catalog::Policy::default()
        .merged(&json)
        .map(Some)
        .map_err(|e| invalid(e.to_string()))
}

/// Migrates the catalog through the service connection and returns its settings, or logs
/// that tiering is off.
async fn prepare_catalog(config: &Config) -> Result<Option<tokio_postgres::Config>, ServerError> {
    let Some(service) = config.service()? else {
        tracing::info!("service_url is not set: tiering is disabled, coldwire only relays (sessions on databases with tiered tables are refused)");
        return Ok(None);
    };
    let target = catalog::describe(&service);
    let failed = |source| ServerError::Catalog {
        target: target.clone(),
        source,
    };
    let mut client = catalog::connect(&service).await.map_err(failed)?;
    let report = catalog::migrate(&mut client).await.map_err(failed)?;
    if report.applied.is_empty() {
        tracing::info!(service = %target, version = report.to_version, admin_role = ?report.admin_role, "catalog is current");
    } else {
        let applied: Vec<String> = report
            .applied
            .iter()
            .map(|m| format!("{} ({})", m.version, m.name))
            .collect();
        tracing::info!(
            service = %target,
            from_version = report.from_version,
            to_version = report.to_version,
            applied = %applied.join(", "),
            admin_role = ?report.admin_role,
            "catalog migrated"
        );
    }
    Ok(Some(service))
}

async fn bind(addr: &str) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind {
            addr: addr.to_owned(),
            source,
        })
}
