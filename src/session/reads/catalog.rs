//! The read path's view of the catalog, shared by every session of a proxy: which tables
//! are tiered (re-read at most every [`REGISTRY_TTL`]) and each one's cold state (segments,
//! stats, overrides) at its current generation.
//!
//! Generations are kept fresh by `LISTEN coldwire_catalog` (every finalize and TRUNCATE
//! notifies): while the listener is connected and nothing was notified since a table's
//! state was last confirmed, a read plans from memory without a catalog round trip. A
//! notification still in flight when a read is planned is caught by the guard in the
//! statement (DESIGN §6.4), which makes coldwire plan again with `fresh` set.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::sync::Mutex as AsyncMutex;
use tokio_postgres::{AsyncMessage, NoTls};

use crate::catalog::pool::{CatalogPool, Pooled};
use crate::catalog::registry::{self, ReadingFunction, Registry, CATALOG_CHANNEL, REGISTRY_TTL};
use crate::cold::scan::ColdTable;

use crate::error::PlanError;
use crate::sql::aggregate::KeyKind;

/// Pause before the catalog listener connects again after losing its connection.
const LISTEN_RETRY_DELAY: Duration = Duration::from_secs(1);
/// Cold states of past generations kept for REPEATABLE READ transactions; the cache starts
/// over when full.
const PAST_STATES: usize = 32;

/// The mirror's keys that may also be cold, as text, and the range they were read in.
#[derive(Debug, Clone)]
pub struct HotKeys {
    pub lo: Option<String>,
    pub hi: Option<String>,
    pub keys: Vec<String>,
}

/// The shared catalog cache.
pub struct CatalogCache {
    service: tokio_postgres::Config,
    /// The registry, when it was read and the DDL epoch then (`None` until first read).
    registry: RwLock<Option<(Instant, u64, Arc<Registry>)>>,
    /// The registry last read, whatever its age, kept across [`CatalogCache::invalidate`]:
    /// while the catalog cannot be read, what names no table of it runs as written.
    last_read: RwLock<Option<Arc<Registry>>>,
    /// Per table: its cold state and the notification epoch it was last confirmed in.
    cold: RwLock<HashMap<i64, (Arc<ColdTable>, u64)>>,
    /// Cold states of past generations, by table and generation.
    past: RwLock<HashMap<(i64, i64), Arc<ColdTable>>>,
    /// Bumped by every catalog notification (and every listener reconnect).
    epoch: Arc<AtomicU64>,
    /// Bumped by every notification that DDL on a tiered table was followed
    /// (`catalog::reconcile::DDL_PAYLOAD`): the registry is read again.
    ddl_epoch: Arc<AtomicU64>,
    /// DDL a session of this proxy sent has run: the next registry read follows it first
    /// (`catalog::reconcile`) instead of waiting for the flush executor's sweep.
    follow_ddl: AtomicBool,
    /// Whether the listener is connected, so that an unmoved epoch means "unchanged".
    listening: Arc<AtomicBool>,
    listener_started: AtomicBool,
    /// Service connections for catalog reads.
    pool: CatalogPool,
    /// Held while the registry is read, so one session reads it and the others wait.
    refreshing: AsyncMutex<()>,
    /// The last registry version handed out: versions only go up, also across
    /// [`CatalogCache::invalidate`], since caches of every session key on them.
    last_version: AtomicU64,
    /// The last search for functions and views that read tiered tables, with the key of
    /// the catalog it was made from (`registry::Listed::callers_key`).
    callers: RwLock<Option<(String, Arc<[ReadingFunction]>)>>,
}

impl CatalogCache {
    pub fn new(service: tokio_postgres::Config) -> Self {
        Self {
            pool: CatalogPool::new(service.clone()),
            service,
            registry: RwLock::new(None),
            last_read: RwLock::new(None),
            last_version: AtomicU64::new(0),
            callers: RwLock::new(None),
            cold: RwLock::new(HashMap::new()),
            past: RwLock::new(HashMap::new()),
            epoch: Arc::new(AtomicU64::new(0)),
            ddl_epoch: Arc::new(AtomicU64::new(0)),
            follow_ddl: AtomicBool::new(false),
            listening: Arc::new(AtomicBool::new(false)),
            listener_started: AtomicBool::new(false),
            refreshing: AsyncMutex::new(()),
        }
    }

    /// The registry as last read, if it is younger than [`REGISTRY_TTL`] and no DDL was
    /// followed since.
    pub fn current_registry(&self) -> Option<Arc<Registry>> {
        let ddl = self.ddl_epoch.load(Ordering::Acquire);
        self.registry
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .filter(|(at, seen, _)| at.elapsed() < REGISTRY_TTL && *seen == ddl)
            .map(|(_, _, r)| r.clone())
    }

    /// The registry last read, however old (`None` before the first read).
    pub fn last_read_registry(&self) -> Option<Arc<Registry>> {
        self.last_read
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Forgets the registry, so the next statement reads it again.
    pub fn invalidate(&self) {
        *self
            .registry
            .write()
            .unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Forgets the registry after DDL that coldwire follows ran in a session: the next
    /// read brings the catalog in step with it first.
    pub fn invalidate_after_ddl(&self) {
        self.follow_ddl.store(true, Ordering::Release);
        self.invalidate();
    }

    /// The registry, read again when older than [`REGISTRY_TTL`].
    ///
    /// # Errors
    /// The catalog could not be read.
    pub async fn registry(&self) -> Result<Arc<Registry>, PlanError> {
        self.start_listener();
        if let Some(r) = self.current_registry() {
            return Ok(r);
        }
        let _refreshing = self.refreshing.lock().await;
        if let Some(r) = self.current_registry() {
            return Ok(r);
        }
        let ddl = self.ddl_epoch.load(Ordering::Acquire);
        let client = &mut *self.connected().await?;
        // DDL a session of this proxy ran, followed before the list is read (DDL
        // elsewhere is followed by the flush executors, which notify).
        if self.follow_ddl.swap(false, Ordering::AcqRel) {
            if let Err(e) = crate::catalog::reconcile::reconcile(client).await {
                tracing::warn!(error = %crate::catalog::postgres_text(&e), "following DDL on tiered tables failed");
            }
        }
        // Kept across `invalidate`: DDL through the proxy need not search again when
        // the catalog probe says nothing it depends on moved.
        let callers = self
            .callers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let registry::Listed {
            tables,
            views,
            functions,
            callers_key,
        } = registry::read(
            client,
            callers
                .as_ref()
                .map(|(key, functions)| (key.as_str(), functions)),
        )
        .await?;
        *self.callers.write().unwrap_or_else(PoisonError::into_inner) =
            Some((callers_key, Arc::clone(&functions)));
        let secret = registry::secret(client).await?;
        let mut slot = self
            .registry
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let previous = slot.as_ref().map(|(_, _, r)| r.clone());
        let same = previous.as_ref().is_some_and(|p| {
            p.secret == secret
                && p.views == views
                && p.functions == functions
                && p.tables.len() == tables.len()
                && p.tables.iter().zip(&tables).all(|(a, b)| {
                    a.table == b.table && a.row_type == b.row_type && a.unservable == b.unservable
                })
        });
        let registry = match previous {
            Some(p) if same => p,
            _ => Arc::new(Registry {
                names: tables
                    .iter()
                    .map(|t| t.table.name.as_str())
                    .chain(views.iter().map(|v| v.name.as_str()))
                    .chain(functions.iter().map(|f| f.name.as_str()))
                    .flat_map(registry::written_forms)
                    .collect(),
                ambiguous: registry::ambiguous_names(&tables, &views),
                tables,
                views,
                functions,
                version: self.last_version.fetch_add(1, Ordering::AcqRel) + 1,
                secret,
            }),
        };
        *slot = Some((Instant::now(), ddl, registry.clone()));
        *self
            .last_read
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(registry.clone());
        Ok(registry)
    }

    /// The table's cold state at its current generation. From memory while the listener
    /// vouches that nothing changed since it was last confirmed (unless `fresh`); else
    /// one catalog round trip to learn the generation, and a reload when it moved.
    ///
    /// # Errors
    /// The catalog could not be read, or the table is no longer tiered.
    pub async fn cold_table(&self, id: i64, fresh: bool) -> Result<Arc<ColdTable>, PlanError> {
        let epoch = self.epoch.load(Ordering::Acquire);
        let cached = self
            .cold
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .cloned();
        if let Some((table, confirmed)) = &cached {
            if !fresh && *confirmed == epoch && self.listening.load(Ordering::Acquire) {
                return Ok(table.clone());
            }
        }
        let client = &mut *self.connected().await?;
        let generation: Option<i64> = client
            .query_opt(
                "SELECT generation FROM coldwire.tables WHERE id = $1 AND state = 'active'",
                &[&id],
            )
            .await?
            .map(|r| r.get(0));
        let table = match cached {
            Some((table, _)) if Some(table.generation) == generation => table,
            _ => Arc::new(ColdTable::load(client, id, None).await?),
        };
        self.cold
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, (table.clone(), epoch));
        Ok(table)
    }

    /// The table's cold state as of `generation` (a transaction's snapshot sees it): the
    /// current state when that is the one, else the past one, loaded once.
    ///
    /// # Errors
    /// As [`CatalogCache::cold_table`].
    pub async fn cold_table_at(
        &self,
        id: i64,
        generation: i64,
    ) -> Result<Arc<ColdTable>, PlanError> {
        let current = self
            .cold
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .map(|(t, _)| t.clone());
        if let Some(t) = current.filter(|t| t.generation == generation) {
            return Ok(t);
        }
        if let Some(t) = self
            .past
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(id, generation))
        {
            return Ok(t.clone());
        }
        let client = &mut *self.connected().await?;
        let table = Arc::new(ColdTable::load(client, id, Some(generation)).await?);
        let mut past = self.past.write().unwrap_or_else(PoisonError::into_inner);
        if past.len() >= PAST_STATES {
            past.clear();
        }
        past.insert((id, generation), table.clone());
        Ok(table)
    }

    /// The keys of `table_id`'s mirror that may also be cold: those inside the range of
    /// first-key values segments hold (`bounds_<id>`, `None` for an unknown end), as
    /// text, in the key's order (`kind`); `None` when no segment was ever written.
    ///
    /// # Errors
    /// The catalog could not be read.
    pub async fn hot_keys_in_cold_range(
        &self,
        table_id: i64,
        key: &str,
        kind: KeyKind,
    ) -> Result<Option<HotKeys>, PlanError> {
        let client = &mut *self.connected().await?;
        let bounds = client
            .query_opt(
                &format!("SELECT lo::text, hi::text FROM coldwire.bounds_{table_id}"),
                &[],
            )
            .await?;
        let Some(bounds) = bounds else {
            return Ok(None);
        };
        let (lo, hi): (Option<String>, Option<String>) = (bounds.get(0), bounds.get(1));
        let (key, cast, order) = (
            crate::sql::quote::quote_ident(key),
            kind.sql_type(),
            kind.order(),
        );
        let keys = client
            .query(
                &format!(
                    // `m.` everywhere: a bare name in ORDER BY would be the text output.
                    "SELECT m.{key}::text FROM coldwire.m_{table_id} m \
                     WHERE ($1::text IS NULL OR m.{key} >= $1::{cast}) \
                     AND ($2::text IS NULL OR m.{key} <= $2::{cast}) ORDER BY m.{key}{order}"
                ),
                &[&lo, &hi],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        Ok(Some(HotKeys { lo, hi, keys }))
    }

    async fn connected(&self) -> Result<Pooled, PlanError> {
        self.pool.get().await.map_err(PlanError::Catalog)
    }

    /// The oid of type `name` (as written in SQL), if it exists.
    ///
    /// # Errors
    /// The catalog could not be read.
    pub async fn type_oid(&self, name: &str) -> Result<Option<u32>, PlanError> {
        let client = &mut *self.connected().await?;
        let row = client
            .query_one("SELECT pg_catalog.to_regtype($1)::oid", &[&name])
            .await;
        // A name Postgres cannot even parse is Postgres's to refuse too.
        Ok(row.ok().and_then(|r| r.get(0)))
    }

    /// Starts the catalog listener once; it reconnects on its own for the life of the
    /// process.
    fn start_listener(&self) {
        if self.listener_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let (service, epoch, ddl_epoch, listening) = (
            self.service.clone(),
            self.epoch.clone(),
            self.ddl_epoch.clone(),
            self.listening.clone(),
        );
        tokio::spawn(async move {
            loop {
                if let Err(e) = listen(&service, &epoch, &ddl_epoch, &listening).await {
                    tracing::debug!(error = %e, "catalog listener disconnected");
                }
                listening.store(false, Ordering::Release);
                epoch.fetch_add(1, Ordering::AcqRel);
                tokio::time::sleep(LISTEN_RETRY_DELAY).await;
            }
        });
    }
}

/// Listens on [`CATALOG_CHANNEL`] until the connection ends, bumping `epoch` for every
/// notification, and `ddl_epoch` too for those saying DDL was followed.
async fn listen(
    service: &tokio_postgres::Config,
    epoch: &AtomicU64,
    ddl_epoch: &AtomicU64,
    listening: &AtomicBool,
) -> Result<(), tokio_postgres::Error> {
    let mut config = service.clone();
    config.application_name("coldwire listener");
    let (client, mut connection) = config.connect(NoTls).await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    if tx
                        .send(n.payload() == crate::catalog::reconcile::DDL_PAYLOAD)
                        .is_err()
                    {
                        break;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "catalog listener connection failed");
                    break;
                }
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN {CATALOG_CHANNEL}"))
        .await?;
    // Anything may have changed while nobody listened.
    epoch.fetch_add(1, Ordering::AcqRel);
    ddl_epoch.fetch_add(1, Ordering::AcqRel);
    listening.store(true, Ordering::Release);
    while let Some(ddl) = rx.recv().await {
        if ddl {
            ddl_epoch.fetch_add(1, Ordering::AcqRel);
        }
        epoch.fetch_add(1, Ordering::AcqRel);
    }
    driver.abort();
    drop(client);
    Ok(())
}
