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
                    tracing::warn!(error = %e, "cannot record the cold store in the catalog");
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
            tls,
            cancel_keys: Arc::new(CancelRegistry::default()),
            force_close: CancellationToken::new(),
            admin,
            databases,
        });
        Ok(Self {
            ctx,
            listener,
            metrics,
        })
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

/// Migrates the catalog through the service connection and returns its settings, or logs
/// that tiering is off.
async fn prepare_catalog(config: &Config) -> Result<Option<tokio_postgres::Config>, ServerError> {
    let Some(service) = config.service()? else {
        tracing::info!("service_url is not set: tiering is disabled, coldwire only relays");
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
