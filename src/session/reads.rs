//! Merged reads inside a session (DESIGN §6): a simple Query that reads a tiered table is
//! rewritten (`sql::rewrite`), its cold rows found per reference (`sql::predicates`,
//! `cold::scan`), and sent upstream as Parse/Bind/Describe/Execute/Sync with the cold rows
//! as binary parameters; the relay drops the ParseComplete and BindComplete that answer
//! it, so the client sees what a simple Query returns.
//!
//! The catalog (which tables are tiered, their segments, stats and overrides) is read
//! through one service connection shared by all sessions and cached: the list of tiered
//! tables for a second, a table's cold state until its generation moves. The guard in the
//! rewritten statement (DESIGN §6.4) turns a stale cache into 40001, never into a wrong
//! answer.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::sync::Mutex as AsyncMutex;
use tokio_postgres::Client;

use crate::catalog::postgres_text;
use crate::cold::record::encode_record_array;
use crate::cold::scan::{scan, ColdTable, ScanError};
use crate::cold::ColdColumn;
use crate::flush::store::ColdStore;
use crate::sql::predicates::{extract, to_prune};
use crate::sql::rewrite::{rewrite_parsed, TieredTable};
use crate::wire::extended as ext;
use crate::wire::messages::{ErrorFields, Severity};

/// How long the list of tiered tables is trusted before it is read again. A proxy that
/// has not seen a table as tiered relays its reads unchanged, so the first flush of a
/// table waits until every proxy's list is newer than the table
/// (`flush::run::FIRST_FINALIZE_DELAY`, a multiple of this).
pub const REGISTRY_TTL: Duration = Duration::from_secs(1);

/// A tiered table as the session sees it.
#[derive(Debug, Clone)]
struct Tiered {
    table: TieredTable,
    row_type: u32,
}

#[derive(Default)]
struct Cache {
    client: Option<Client>,
    loaded: Option<Instant>,
    tables: Vec<Tiered>,
    cold: HashMap<i64, Arc<ColdTable>>,
}

/// What to do with a simple Query.
#[derive(Debug)]
pub enum Plan {
    /// Relay it unchanged.
    PassThrough,
    /// Send these frames upstream instead (their ParseComplete and BindComplete are
    /// coldwire's to drop).
    Run(BytesMut),
    /// Answer the client with this error (and ReadyForQuery).
    Fail(ErrorFields),
}

/// The read path shared by a server's sessions.
pub struct ReadPath {
    service: tokio_postgres::Config,
    store: ColdStore,
    max_cold_rows: usize,
    /// Lower-case names of tiered tables and when they were read, for the cheap test of
    /// every Query; `None` until first read.
    names: RwLock<Option<(Instant, Arc<Vec<String>>)>>,
    cache: AsyncMutex<Cache>,
}

impl ReadPath {
    pub fn new(service: tokio_postgres::Config, store: ColdStore, max_cold_rows: usize) -> Self {
        Self {
            service,
            store,
            max_cold_rows,
            names: RwLock::new(None),
            cache: AsyncMutex::new(Cache::default()),
        }
    }

    /// Whether `sql` may name a tiered table (a substring test over the cached names, so a
    /// superset). While the names are unknown or stale every statement may, so that the
    /// planner reads them again.
    pub fn may_name_tiered(&self, sql: &str) -> bool {
        let Some((loaded, names)) = self
            .names
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        else {
            return true;
        };
        if loaded.elapsed() >= REGISTRY_TTL {
            return true;
        }
        if names.is_empty() {
            return false;
        }
        let lower = sql.to_lowercase();
        names.iter().any(|n| lower.contains(n.as_str()))
    }

    /// Forgets the list of tiered tables, so the next Query reads it again.
    pub async fn invalidate(&self) {
        *self.names.write().unwrap_or_else(PoisonError::into_inner) = None;
        self.cache.lock().await.loaded = None;
    }

    /// The plan for one simple Query whose text is `sql`.
    pub async fn plan(&self, sql: &str) -> Plan {
        match self.try_plan(sql).await {
            Ok(plan) => plan,
            Err(PlanError::Scan(ScanError::TooManyRows { table, cap })) => Plan::Fail(error(
                "54000",
                format!("coldwire: the query would read more than {cap} cold rows of {table}"),
                Some("Add a condition on the primary key, or raise max_cold_rows in coldwire's configuration.".into()),
            )),
            Err(e) => {
                tracing::warn!(error = %e, "cold read failed");
                Plan::Fail(error("58030", format!("coldwire could not read the cold tier: {e}"), None))
            }
        }
    }

    async fn try_plan(&self, sql: &str) -> Result<Plan, PlanError> {
        if !self.may_name_tiered(sql) {
            return Ok(Plan::PassThrough);
        }
        let mut cache = self.cache.lock().await;
        self.refresh(&mut cache).await?;
        if !self.may_name_tiered(sql) {
            return Ok(Plan::PassThrough);
        }
        // One statement only: a string of several keeps the simple protocol's own
        // transaction rules, which the extended protocol cannot reproduce.
        let parsed = match pg_query::parse(sql, 0) {
            Ok(parsed) if parsed.protobuf.stmts.len() == 1 => parsed,
            _ => return Ok(Plan::PassThrough),
        };
        let tables = cache.tables.clone();
        let unique = |schema: Option<&str>, name: &str| {
            let mut candidates = tables
                .iter()
                .filter(|t| t.table.name == name && schema.is_none_or(|s| t.table.schema == s));
            match (candidates.next(), candidates.next()) {
                (Some(only), None) => Some(only.clone()),
                _ => None,
            }
        };
        // Which tables the statement reads, then their cold state as of now, then the
        // rewrite guarded by exactly the generations the cold rows belong to.
        let Ok(Some(first)) = rewrite_parsed(sql, &parsed, 0, |s, n| unique(s, n).map(|t| t.table))
        else {
            return Ok(Plan::PassThrough);
        };
        let mut ids: Vec<i64> = first.references.iter().map(|r| r.table_id).collect();
        ids.sort_unstable();
        ids.dedup();
        let mut cold_tables: HashMap<i64, Arc<ColdTable>> = HashMap::new();
        for id in ids {
            cold_tables.insert(id, self.cold_table(&mut cache, id).await?);
        }
        let resolve = |schema: Option<&str>, name: &str| {
            let t = unique(schema, name)?;
            let generation = cold_tables.get(&t.table.table_id).map(|c| c.generation);
            Some(TieredTable {
                guard_generation: generation,
                ..t.table
            })
        };
        let Ok(Some(rewritten)) = rewrite_parsed(sql, &parsed, 0, resolve) else {
            return Ok(Plan::PassThrough);
        };
        // Object-store reads happen without the cache lock: other sessions plan meanwhile.
        drop(cache);
        let mut params: Vec<BytesMut> = Vec::new();
        for reference in &rewritten.references {
            let tiered = tables
                .iter()
                .find(|t| t.table.table_id == reference.table_id)
                .ok_or(PlanError::Catalog("table vanished".into()))?;
            let cold = cold_tables
                .get(&reference.table_id)
                .ok_or(PlanError::Catalog("table vanished".into()))?
                .clone();
            let predicates = to_prune(
                &extract(&parsed, reference.location, &reference.name),
                &cold.columns,
            );
            let found = scan(&self.store, &cold, &predicates, self.max_cold_rows).await?;
            tracing::debug!(
                table = %cold.name,
                rows = found.rows.num_rows(),
                segments_pruned = found.stats.segments_pruned,
                row_groups_pruned = found.stats.row_groups_pruned,
                bytes = found.stats.bytes_read,
                "cold rows injected"
            );
            metrics::counter!(crate::metrics::COLD_ROWS_INJECTED_TOTAL)
                .increment(found.rows.num_rows() as u64);
            metrics::counter!(crate::metrics::COLD_BYTES_READ_TOTAL)
                .increment(found.stats.bytes_read);
            metrics::counter!(crate::metrics::COLD_SEGMENTS_PRUNED_TOTAL)
                .increment(found.stats.segments_pruned as u64);
            let columns: Vec<ColdColumn> = cold
                .columns
                .iter()
                .map(|c| ColdColumn::new(c.name.clone(), c.ty))
                .collect();
            let mut array = BytesMut::new();
            encode_record_array(&columns, tiered.row_type, &found.rows, &mut array)
                .map_err(|e| PlanError::Catalog(e.to_string()))?;
            params.push(array);
        }
        let mut out = BytesMut::new();
        let values: Vec<Option<&[u8]>> = params.iter().map(|p| Some(&p[..])).collect();
        ext::run_unnamed(&mut out, &rewritten.sql, &values);
        metrics::counter!(crate::metrics::ROUTES_TOTAL, "route" => "read").increment(1);
        Ok(Plan::Run(out))
    }

    async fn client<'a>(&self, cache: &'a mut Cache) -> Result<&'a mut Client, PlanError> {
        if cache.client.as_ref().is_none_or(Client::is_closed) {
            cache.client = Some(
                crate::catalog::connect(&self.service)
                    .await
                    .map_err(|e| PlanError::Catalog(e.to_string()))?,
            );
        }
        Ok(cache.client.as_mut().expect("connected above"))
    }

    /// Re-reads the list of tiered tables when it is older than [`REGISTRY_TTL`].
    async fn refresh(&self, cache: &mut Cache) -> Result<(), PlanError> {
        if cache.loaded.is_some_and(|at| at.elapsed() < REGISTRY_TTL) {
            return Ok(());
        }
        let client = self.client(cache).await?;
        let rows = client
            .query(
                "SELECT t.id, c.reltype, n.nspname, c.relname, t.columns, t.pk_attnums \
                 FROM coldwire.tables t JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE t.state = 'active'",
                &[],
            )
            .await?;
        let mut tables = Vec::new();
        for row in rows {
            let columns: serde_json::Value = row.get(4);
            let pk_attnums: Vec<i16> = row.get(5);
            let list = columns.as_array().cloned().unwrap_or_default();
            let name_of = |attnum: i16| {
                list.iter()
                    .find(|c| c["attnum"].as_i64() == Some(attnum.into()))
                    .and_then(|c| c["name"].as_str())
                    .map(str::to_owned)
            };
            tables.push(Tiered {
                table: TieredTable {
                    table_id: row.get(0),
                    schema: row.get(2),
                    name: row.get(3),
                    columns: list
                        .iter()
                        .filter_map(|c| c["name"].as_str().map(str::to_owned))
                        .collect(),
                    pk: pk_attnums.iter().filter_map(|a| name_of(*a)).collect(),
                    guard_generation: None,
                },
                row_type: row.get(1),
            });
        }
        let names: Vec<String> = tables.iter().map(|t| t.table.name.to_lowercase()).collect();
        *self.names.write().unwrap_or_else(PoisonError::into_inner) =
            Some((Instant::now(), Arc::new(names)));
        cache.tables = tables;
        cache.loaded = Some(Instant::now());
        Ok(())
    }

    /// The table's cold state at its current generation (one catalog round trip to learn
    /// it; segments, stats and overrides are read again only when it moved).
    async fn cold_table(&self, cache: &mut Cache, id: i64) -> Result<Arc<ColdTable>, PlanError> {
        let client = self.client(cache).await?;
        let generation: Option<i64> = client
            .query_opt(
                "SELECT generation FROM coldwire.tables WHERE id = $1 AND state = 'active'",
                &[&id],
            )
            .await?
            .map(|r| r.get(0));
        if let Some(found) = cache
            .cold
            .get(&id)
            .filter(|c| Some(c.generation) == generation)
        {
            return Ok(found.clone());
        }
        let client = self.client(cache).await?;
        let loaded = Arc::new(ColdTable::load(client, id).await?);
        cache.cold.insert(id, loaded.clone());
        Ok(loaded)
    }
}

/// The `after_read_plan` failpoint (tests widen the window between planning a read and
/// running it, so that flushes finalize in between and the guard fires).
pub async fn after_plan() {
    crate::flush::failpoint::hit("after_read_plan").await;
}

#[derive(Debug, thiserror::Error)]
enum PlanError {
    #[error("{0}")]
    Catalog(String),
    #[error("{}", postgres_text(.0))]
    Postgres(#[from] tokio_postgres::Error),
    #[error(transparent)]
    Scan(#[from] ScanError),
}

fn error(code: &str, message: String, hint: Option<String>) -> ErrorFields {
    ErrorFields {
        severity: Severity::Error,
        code: code.to_owned(),
        message,
        detail: None,
        hint,
    }
}
