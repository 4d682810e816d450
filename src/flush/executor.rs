//! The background worker of every proxy with a service connection: schedules flushes
//! for tables over their policy, claims jobs from the shared queue and runs them.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::run;
use super::select::{aged_rows_worth_a_flush, rows_to_flush};
use super::table::FlushError;
use crate::catalog::jobs;
use crate::catalog::reconcile::{self, RECONCILE_INTERVAL};
use crate::catalog::Policy;
use crate::sql::quote::quote_ident;
use crate::store::ColdStore;

/// How often an idle executor looks for work.
const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// Pause after losing the service connection.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// Runs until `shutdown` fires.
pub async fn run(service: tokio_postgres::Config, store: ColdStore, shutdown: CancellationToken) {
    let worker = format!("{}:{}", hostname(), std::process::id());
    let mut last_check: HashMap<i64, Instant> = HashMap::new();
    let mut last_reconcile: Option<Instant> = None;
    while !shutdown.is_cancelled() {
        let mut client = match crate::catalog::connect(&service).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "flush executor cannot reach the service database");
                tokio::select! { _ = shutdown.cancelled() => return, _ = tokio::time::sleep(RECONNECT_DELAY) => continue }
            }
        };
        loop {
            if last_reconcile.is_none_or(|at| at.elapsed() >= RECONCILE_INTERVAL) {
                last_reconcile = Some(Instant::now());
                if let Err(e) = follow_ddl(&mut client, &store).await {
                    tracing::warn!(error = %crate::catalog::postgres_text(&e), "following DDL on tiered tables failed");
                    break;
                }
            }
            if let Err(e) = schedule(&client, &mut last_check).await {
                tracing::warn!(error = %crate::catalog::postgres_text(&e), "flush scheduling failed");
                break;
            }
            match jobs::claim(&mut client, &worker).await {
                Ok(Some(job)) => {
                    execute_claimed(&mut client, &service, &store, &job).await;
                    if client.is_closed() {
                        break;
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %crate::catalog::postgres_text(&e), "claiming a flush job failed");
                    break;
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(POLL_INTERVAL) => {}
            }
        }
        tokio::time::sleep(RECONNECT_DELAY).await;
    }
}

/// Follows DDL on tiered tables (`catalog::reconcile`), then deletes the cold objects of
/// untiered tables.
async fn follow_ddl(client: &mut Client, store: &ColdStore) -> Result<(), tokio_postgres::Error> {
    reconcile::reconcile(client).await?;
    reconcile::collect_dropped(client, store).await?;
    Ok(())
}

/// Runs `job`, claimed on `client` (by [`jobs::claim_job`]), to its end, and gives back
/// the table's flush lock: what an executor does with a job it claimed.
pub async fn execute_claimed(
    client: &mut Client,
    service: &tokio_postgres::Config,
    store: &ColdStore,
    job: &jobs::Job,
) {
    let span = tracing::info_span!(
        "flush",
        job_id = job.id,
        table_id = job.table_id,
        attempt = job.attempt
    );
    execute(client, service, store, job).instrument(span).await;
}

async fn execute(
    client: &mut Client,
    service: &tokio_postgres::Config,
    store: &ColdStore,
    job: &jobs::Job,
) {
    let started = Instant::now();
    let database = crate::catalog::service_database(service);
    let outcome = |o: &'static str| {
        metrics::counter!(crate::metrics::FLUSH_JOBS_TOTAL, "outcome" => o, "database" => database.clone())
            .increment(1)
    };
    let result = match crate::catalog::connect(service).await {
        Ok(side) => run::run(client, &side, store, job).await,
        Err(e) => Err(FlushError::Side(e.to_string())),
    };
    match result {
        Ok(done) => {
            outcome("completed");
            metrics::counter!(crate::metrics::FLUSH_ROWS_TOTAL, "database" => database.clone())
                .increment(done.rows.max(0) as u64);
            tracing::info!(
                rows = done.rows,
                segments = done.segments,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "flush completed"
            );
        }
        Err(FlushError::Fenced(..)) => {
            outcome("fenced");
            tracing::warn!("flush abandoned: the job was reclaimed by another executor");
        }
        Err(e) => {
            outcome("failed");
            tracing::error!(error = %e, "flush failed");
            let _ = client.batch_execute("ROLLBACK").await;
            if let Err(e) = jobs::fail(client, job, &e.to_string()).await {
                tracing::warn!(error = %crate::catalog::postgres_text(&e), "cannot mark the job failed");
            }
        }
    }
    let _ = jobs::release(client, job).await;
}

/// Enqueues a flush for every active table with `auto_flush` whose mirror is over its
/// hot_row_limit or whose heap holds enough rows due by age, looking at each table at most
/// once per `check_interval`. The mirror size comes from statistics estimates; the exact
/// count is taken only when one looks due. Rows due by age are counted in the heap up to
/// the number worth a flush (an index on the age column makes that cheap).
async fn schedule(
    client: &Client,
    last_check: &mut HashMap<i64, Instant>,
) -> Result<(), tokio_postgres::Error> {
    let tables = client
        .query(
            "SELECT t.id, t.policy, coalesce(s.n_live_tup, 0), format('%I.%I', n.nspname, c.relname) FROM coldwire.tables t \
             JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace \
             LEFT JOIN pg_stat_user_tables s ON s.schemaname = 'coldwire' AND s.relname = 'm_' || t.id \
             WHERE t.state = 'active' \
               AND NOT EXISTS (SELECT 1 FROM coldwire.jobs j WHERE j.table_id = t.id AND j.state IN ('pending', 'running'))",
            &[],
        )
        .await?;
    for row in tables {
        let id: i64 = row.get(0);
        let Ok(policy) = Policy::default().merged(&row.get::<_, serde_json::Value>(1)) else {
            continue;
        };
        if !policy.auto_flush
            || last_check
                .get(&id)
                .is_some_and(|t| t.elapsed() < policy.check_interval)
        {
            continue;
        }
        last_check.insert(id, Instant::now());
        let estimate: i64 = row.get(2);
        let heap: String = row.get(3);
        let reason = match flush_due(client, id, &policy, estimate, &heap).await {
            Ok(reason) => reason,
            Err(e) => {
                // One table's trouble (say, an age column renamed away) must not stop the
                // others' flushes; it is looked at again after its check_interval.
                tracing::warn!(table_id = id, error = %crate::catalog::postgres_text(&e), "cannot tell whether a flush is due");
                None
            }
        };
        if let Some(reason) = reason {
            let job = jobs::enqueue_flush(client, id, false).await?;
            tracing::info!(table_id = id, job_id = job.id, reason, "auto flush queued");
        }
    }
    Ok(())
}

/// Why a flush of table `id` is due now, or `None`.
async fn flush_due(
    client: &Client,
    id: i64,
    policy: &Policy,
    estimate: i64,
    heap: &str,
) -> Result<Option<String>, tokio_postgres::Error> {
    if policy.hot_row_limit.is_some_and(|limit| estimate > limit) {
        let exact: i64 = client
            .query_one(&format!("SELECT count(*) FROM coldwire.m_{id}"), &[])
            .await?
            .get(0);
        if rows_to_flush(exact, policy, false) > 0 {
            return Ok(Some(format!("{exact} mirror rows")));
        }
    }
    if let Some((column, interval)) = policy.age_rule() {
        let worth = aged_rows_worth_a_flush(policy);
        let aged: i64 = client
            .query_one(
                &format!(
                    "SELECT count(*) FROM (SELECT FROM ONLY {heap} WHERE {age} < now() - $1::text::interval LIMIT $2) s",
                    age = quote_ident(column)
                ),
                &[&interval, &worth],
            )
            .await?
            .get(0);
        if aged >= worth {
            return Ok(Some(format!("at least {aged} rows older than {interval}")));
        }
    }
    Ok(None)
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "coldwire".into())
}
