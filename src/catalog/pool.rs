//! A small pool of service connections for the catalog reads of sessions (the registry,
//! cold states, type lookups), so that sessions planning at once do not queue behind one
//! connection. Connections are opened on demand, at most [`POOL_SIZE`] per database, and
//! a closed one is replaced at its next use.

use deadpool_postgres::{
    Hook, HookError, Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime,
};
use tokio_postgres::NoTls;

/// Catalog connections kept at most, per database coldwire serves.
pub const POOL_SIZE: usize = 4;

/// Service connections for catalog reads.
pub struct CatalogPool {
    pool: Pool,
}

/// A pooled connection: derefs to a `tokio_postgres::Client`, and goes back to the pool
/// when dropped.
pub type Pooled = Object;

impl CatalogPool {
    /// A pool of connections made with `service`. Every name in coldwire's queries is
    /// qualified; each connection sets `search_path` to `pg_catalog, pg_temp`, so view
    /// definitions read through it come out schema-qualified too.
    pub fn new(service: tokio_postgres::Config) -> Self {
        let manager = Manager::from_config(
            service,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .post_create(Hook::async_fn(|client, _| {
                Box::pin(async move {
                    client
                        .batch_execute("SET search_path = pg_catalog, pg_temp")
                        .await
                        .map_err(HookError::Backend)
                })
            }))
            .build()
            .expect("a pool with a runtime and no timeouts builds");
        Self { pool }
    }

    /// A connection, opened if none is idle; waits while all are in use.
    ///
    /// # Errors
    /// No connection could be opened, described as Postgres describes it.
    pub async fn get(&self) -> Result<Pooled, String> {
        self.pool.get().await.map_err(|e| match e {
            PoolError::Backend(e) => super::postgres_text(&e),
            PoolError::PostCreateHook(HookError::Backend(e)) => super::postgres_text(&e),
            other => other.to_string(),
        })
    }
}
