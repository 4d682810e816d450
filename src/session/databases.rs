//! The databases of the server whose tables coldwire tiers (DESIGN §3): per database, its
//! catalog, read path, admin executor and flush executor. The database of `service_url`
//! is always served; another is served once a `tier_table` there migrates a catalog into
//! it, and by every proxy sharing the cold store, which finds it in the list the default
//! database's catalog keeps (at start and every second).
//! A session is planned by the read path of its own database only; a database without one
//! is relayed untouched.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use tokio_util::sync::CancellationToken;

use super::reads::ReadPath;
use crate::admin::executor::{AdminExecutor, AdminFuture, AdminRequest};
use crate::admin::{AdminError, AdminFunction, Tiering};
use crate::catalog::{self, CatalogError};
use crate::cold::scan::ScanLimits;
use crate::store::ColdStore;

/// How often a proxy looks for databases other proxies started serving.
const WATCH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Keys of `coldwire.meta` in the default database that list the other databases served
/// (`database:NAME`, the cold store as value).
const DATABASE_KEY: &str = "database:";

use catalog::COLD_FOLDER_KEY as FOLDER_KEY;

/// One database coldwire serves.
pub struct Tier {
    pub database: String,
    pub reads: Arc<ReadPath>,
    admin: Tiering,
}

/// Every database coldwire serves, found at start or opened by `tier_table`.
pub struct Databases {
    /// `service_url`: host, port, user and password for every database; its database is
    /// the default one.
    service: tokio_postgres::Config,
    default_database: String,
    store: ColdStore,
    cold_limits: ScanLimits,
    max_rehydrate_rows: usize,
    max_databases: usize,
    tiers: RwLock<HashMap<String, Arc<Tier>>>,
    /// Bumped whenever a database is added, so sessions look theirs up again.
    version: AtomicU64,
    /// Set by [`Databases::start`]: flush executors run until it fires.
    shutdown: OnceLock<CancellationToken>,
    /// One database opened at a time.
    opening: tokio::sync::Mutex<()>,
}

impl Databases {
    /// The databases reached through `service` (whose own database's catalog the caller
    /// has migrated), with cold tier `store`.
    pub fn new(
        service: tokio_postgres::Config,
        store: ColdStore,
        cold_limits: ScanLimits,
        max_rehydrate_rows: usize,
        max_databases: usize,
    ) -> Self {
        let default_database = catalog::service_database(&service);
        let databases = Self {
            service,
            default_database: default_database.clone(),
            store,
            cold_limits,
            max_rehydrate_rows,
            max_databases,
            tiers: RwLock::new(HashMap::new()),
            version: AtomicU64::new(0),
            shutdown: OnceLock::new(),
            opening: tokio::sync::Mutex::new(()),
        };
        databases.insert(databases.tier(&default_database));
        databases
    }

    /// The service connection's settings for `database`.
    pub fn service_for(&self, database: &str) -> tokio_postgres::Config {
        let mut config = self.service.clone();
        config.dbname(database);
        config
    }

    /// The tier of `database` (its new tables' folders go where its catalog's
    /// `cold_folder` says: see `tier_table`).
    fn tier(&self, database: &str) -> Arc<Tier> {
        let service = self.service_for(database);
        let admin = Tiering::new(service.clone(), self.store.clone());
        Arc::new(Tier {
            database: database.to_owned(),
            reads: Arc::new(ReadPath::new(
                service,
                self.store.clone(),
                self.cold_limits,
                self.max_rehydrate_rows,
            )),
            admin,
        })
    }

    fn insert(&self, tier: Arc<Tier>) {
        self.tiers
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(tier.database.clone(), tier);
        self.version.fetch_add(1, Ordering::Release);
    }

    /// The tier of `database`, if coldwire serves it.
    pub fn get(&self, database: &str) -> Option<Arc<Tier>> {
        self.tiers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(database)
            .cloned()
    }

    /// Changes whenever a database is added.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The databases served now, by name.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .tiers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    }

    /// Starts the flush executors of the databases served now, and of every database
    /// opened later, and the watch for databases other proxies open, until `shutdown`
    /// fires.
    pub fn start(self: &Arc<Self>, shutdown: CancellationToken) {
        if self.shutdown.set(shutdown.clone()).is_err() {
            return;
        }
        for name in self.names() {
            self.spawn_executor(&name);
        }
        tokio::spawn(Arc::clone(self).watch(shutdown));
    }

    /// Every [`WATCH_INTERVAL`], serves the databases that proxies sharing this cold
    /// store have listed in the default database's catalog since.
    async fn watch(self: Arc<Self>, shutdown: CancellationToken) {
        let mut client = None;
        let mut warned = HashSet::new();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(WATCH_INTERVAL) => {}
            }
            if client
                .as_ref()
                .is_none_or(tokio_postgres::Client::is_closed)
            {
                client = catalog::connect(&self.service).await.ok();
            }
            let Some(c) = &client else { continue };
            if self.discover_with(c, &mut warned).await.is_err() {
                client = None;
            }
        }
    }

    fn spawn_executor(&self, database: &str) {
        let Some(shutdown) = self.shutdown.get() else {
            return;
        };
        let span = tracing::info_span!("tier", database = %database);
        tokio::spawn(tracing::Instrument::instrument(
            crate::flush::executor::run(
                self.service_for(database),
                self.store.clone(),
                shutdown.clone(),
            ),
            span,
        ));
    }

    /// Serves `database` from now on: creates or upgrades its catalog, then its read path
    /// and flush executor. Idempotent.
    ///
    /// # Errors
    /// The database cannot be reached with the service credentials, or its catalog
    /// cannot be created or upgraded.
    pub async fn open(&self, database: &str) -> Result<Arc<Tier>, CatalogError> {
        let _one = self.opening.lock().await;
        if let Some(tier) = self.get(database) {
            return Ok(tier);
        }
        if self
            .tiers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
            >= self.max_databases
        {
            return Err(CatalogError::TooManyDatabases {
                database: database.to_owned(),
                max: self.max_databases,
            });
        }
        let mut client = catalog::connect(&self.service_for(database)).await?;
        // Another store's catalog is left as it is (not migrated by this proxy). No
        // catalog yet (the query fails): the first `tier_table` makes one below.
        if let Ok(Some(store)) = recorded(&client, STORE_KEY).await {
            if store != self.store.location() {
                return Err(CatalogError::OtherStore {
                    database: database.to_owned(),
                    store,
                });
            }
        }
        let report = catalog::migrate(&mut client).await?;
        let store = claim_store(&client, self.store.location()).await?;
        if store != self.store.location() {
            return Err(CatalogError::OtherStore {
                database: database.to_owned(),
                store,
            });
        }
        // Its tables' folders go in a folder named after it: recorded in its own catalog,
        // where `tier_table` reads it, so a proxy or command whose service_url names it
        // directly keeps them there. A database with tables at the store's root is some
        // proxy's default database: served beside another, its new tables would go
        // elsewhere than its old ones. Checked and recorded under a lock that
        // `tier_table`'s waits for (and the other way round).
        let tx = client.transaction().await?;
        tx.batch_execute("LOCK TABLE coldwire.tables IN SHARE MODE")
            .await?;
        if recorded(&tx, FOLDER_KEY).await?.is_none() {
            // (A schema named `NAME/…` would pass as in the folder; its prefix is
            // distinct from the folder's tables' all the same.)
            let at_root: i64 = tx
                .query_one(
                    "SELECT count(*) FROM coldwire.tables \
                     WHERE left(storage_prefix, length($1) + 1) <> $1 || '/'",
                    &[&database],
                )
                .await?
                .get(0);
            if at_root > 0 {
                return Err(CatalogError::TablesAtRoot {
                    database: database.to_owned(),
                    tables: at_root,
                });
            }
            claim(&tx, FOLDER_KEY, database).await?;
        }
        tx.commit().await?;
        // Listed in the default database, where every proxy sharing the store looks.
        let listed = async {
            catalog::connect(&self.service)
                .await?
                .execute(
                    "INSERT INTO coldwire.meta (key, value) VALUES ($1, $2) \
                     ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                    &[&format!("{DATABASE_KEY}{database}"), &self.store.location()],
                )
                .await?;
            Ok::<(), CatalogError>(())
        };
        if let Err(e) = listed.await {
            tracing::warn!(database, error = %e, "cannot list the database in the default database's catalog");
        }
        tracing::info!(
            database,
            from_version = report.from_version,
            to_version = report.to_version,
            "serving tiered tables of another database"
        );
        let tier = self.tier(database);
        self.insert(Arc::clone(&tier));
        self.spawn_executor(database);
        Ok(tier)
    }

    /// Serves the databases listed in the default database's catalog with this proxy's
    /// cold store (by this proxy before a restart, or by another proxy), and returns
    /// those it started serving. A database it cannot serve is logged once per name in
    /// `warned`.
    ///
    /// # Errors
    /// The default database's catalog cannot be read.
    pub async fn discover_with(
        &self,
        client: &tokio_postgres::Client,
        warned: &mut HashSet<String>,
    ) -> Result<Vec<String>, CatalogError> {
        let rows = client
            .query(
                "SELECT substr(key, $1) FROM coldwire.meta WHERE key LIKE $2 AND value = $3 ORDER BY key",
                &[
                    &(DATABASE_KEY.len() as i32 + 1),
                    &format!("{DATABASE_KEY}%"),
                    &self.store.location(),
                ],
            )
            .await?;
        let mut found = Vec::new();
        for row in rows {
            let name: String = row.get(0);
            if self.get(&name).is_some() {
                continue;
            }
            match self.open(&name).await {
                Ok(_) => found.push(name),
                Err(e) => {
                    if warned.insert(name.clone()) {
                        tracing::warn!(database = %name, error = %e, "cannot serve the tiered tables of a database");
                    }
                }
            }
        }
        Ok(found)
    }

    /// [`Databases::discover_with`] on a connection of its own, at start.
    ///
    /// # Errors
    /// The default database cannot be reached or its catalog read.
    pub async fn discover(&self) -> Result<Vec<String>, CatalogError> {
        let client = catalog::connect(&self.service).await?;
        self.discover_with(&client, &mut HashSet::new()).await
    }

    /// Records this proxy's cold store in the default database's catalog, where no
    /// store is recorded yet (catalogs from before it was recorded), and checks that the
    /// catalog records this store. (Where the default database is served beside another
    /// one by some proxy, its catalog records `cold_folder`, and `tier_table` puts its
    /// new tables in that folder too.)
    ///
    /// # Errors
    /// The default database cannot be reached; its catalog records another cold store
    /// ([`CatalogError::OtherStore`]).
    pub async fn claim_default_store(&self) -> Result<(), CatalogError> {
        let client = catalog::connect(&self.service).await?;
        let store = claim_store(&client, self.store.location()).await?;
        if store != self.store.location() {
            return Err(CatalogError::OtherStore {
                database: self.default_database.clone(),
                store,
            });
        }
        if let Some(folder) = recorded(&client, FOLDER_KEY).await? {
            tracing::info!(
                database = %self.default_database,
                folder = %folder,
                "service_url's database is also served beside another one: its new tables go in its folder of the cold store"
            );
        }
        Ok(())
    }

    /// The service role's name, for messages.
    fn role(&self) -> String {
        self.service
            .get_user()
            .unwrap_or("(default user)")
            .to_owned()
    }
}

/// The cold store recorded in the connected database's catalog (`coldwire.meta`, key
/// `cold_store`), recording `ours` where none is.
async fn claim_store(client: &tokio_postgres::Client, ours: &str) -> Result<String, CatalogError> {
    claim(client, STORE_KEY, ours).await
}

/// The key of `coldwire.meta` that records the cold store of the database's tables.
const STORE_KEY: &str = "cold_store";

/// The value of `key` in the connected database's `coldwire.meta`, recording `value`
/// where none is.
async fn claim(
    client: &impl tokio_postgres::GenericClient,
    key: &str,
    value: &str,
) -> Result<String, CatalogError> {
    client
        .execute(
            "INSERT INTO coldwire.meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
            &[&key, &value],
        )
        .await?;
    Ok(recorded(client, key).await?.unwrap_or_default())
}

/// The value of `key` in the connected database's `coldwire.meta`.
async fn recorded(
    client: &impl tokio_postgres::GenericClient,
    key: &str,
) -> Result<Option<String>, CatalogError> {
    Ok(client
        .query_opt("SELECT value FROM coldwire.meta WHERE key = $1", &[&key])
        .await?
        .map(|row| row.get(0)))
}

impl AdminExecutor for Databases {
    fn execute(&self, request: AdminRequest) -> AdminFuture<'_> {
        Box::pin(async move {
            let tier = match self.get(&request.database) {
                Some(tier) => tier,
                // The first table tiered in a database migrates a catalog into it.
                None if request.function == AdminFunction::TierTable => {
                    match self.open(&request.database).await {
                        Ok(tier) => tier,
                        Err(CatalogError::TooManyDatabases { max, .. }) => {
                            return Err(AdminError::TooManyDatabases {
                                database: request.database.clone(),
                                max,
                            })
                        }
                        Err(CatalogError::Connect(e)) => {
                            tracing::warn!(database = %request.database, error = %catalog::postgres_text(&e), "cannot connect to a database to tier its table");
                            return Err(AdminError::DatabaseUnreachable {
                                database: request.database.clone(),
                                role: self.role(),
                            });
                        }
                        Err(e) => {
                            return Err(AdminError::CatalogRefused {
                                database: request.database.clone(),
                                reason: e.to_string(),
                            })
                        }
                    }
                }
                // Nothing is tiered in a database without a catalog.
                None => {
                    return Err(AdminError::NoTieredTables {
                        database: request.database.clone(),
                    })
                }
            };
            tier.admin.execute(request).await
        })
    }
}
