//! The durable job queue (`coldwire.jobs`, DESIGN §5): enqueue, claim with
//! `FOR UPDATE SKIP LOCKED` plus a per-table advisory lock, heartbeat, fencing by attempt,
//! reclaim of jobs whose heartbeat expired.

use tokio_postgres::{Client, Row};

use super::locks::FLUSH_LOCK_CLASS;

/// A job as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub id: i64,
    pub table_id: i64,
    pub kind: String,
    pub state: String,
    /// Fencing token: every claim increments it; work of an older attempt is void.
    pub attempt: i32,
    pub drain: bool,
    pub target_seq: Option<i64>,
    pub rows_total: Option<i64>,
    pub rows_done: i64,
    pub segments: i32,
    pub error: Option<String>,
}

const COLUMNS: &str =
    "id, table_id, kind, state, attempt, drain, target_seq, rows_total, rows_done, segments, error";

impl Job {
    fn from_row(r: &Row) -> Job {
        Job {
            id: r.get(0),
            table_id: r.get(1),
            kind: r.get(2),
            state: r.get(3),
            attempt: r.get(4),
            drain: r.get(5),
            target_seq: r.get(6),
            rows_total: r.get(7),
            rows_done: r.get(8),
            segments: r.get(9),
            error: r.get(10),
        }
    }

    /// The job as the admin calls and `coldwire.jobs` show it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "job_id": self.id,
            "table_id": self.table_id,
            "kind": self.kind,
            "state": self.state,
            "attempt": self.attempt,
            "drain": self.drain,
            "rows_total": self.rows_total,
            "rows_done": self.rows_done,
            "segments": self.segments,
            "error": self.error,
        })
    }
}

/// Enqueues a flush of `table_id`, or returns the table's active flush job (at most one
/// is active per table). `drain` on a new job flushes every mirror row.
///
/// # Errors
/// Postgres errors.
pub async fn enqueue_flush(
    client: &Client,
    table_id: i64,
    drain: bool,
) -> Result<Job, tokio_postgres::Error> {
    loop {
        let inserted = client
            .query_opt(
                &format!(
                    "INSERT INTO coldwire.jobs (table_id, kind, drain) VALUES ($1, 'flush', $2) \
                     ON CONFLICT (table_id) WHERE kind = 'flush' AND state IN ('pending', 'running') DO NOTHING \
                     RETURNING {COLUMNS}"
                ),
                &[&table_id, &drain],
            )
            .await?;
        if let Some(row) = inserted {
            client.batch_execute("NOTIFY coldwire_jobs").await?;
            return Ok(Job::from_row(&row));
        }
        let active = client
            .query_opt(
                &format!(
                    "SELECT {COLUMNS} FROM coldwire.jobs \
                     WHERE table_id = $1 AND kind = 'flush' AND state IN ('pending', 'running')"
                ),
                &[&table_id],
            )
            .await?;
        // The active job may have finished between the two statements: try again.
        if let Some(row) = active {
            return Ok(Job::from_row(&row));
        }
    }
}

/// The job with `id`.
///
/// # Errors
/// Postgres errors, or no such job.
pub async fn get(client: &Client, id: i64) -> Result<Job, tokio_postgres::Error> {
    let row = client
        .query_one(
            &format!("SELECT {COLUMNS} FROM coldwire.jobs WHERE id = $1"),
            &[&id],
        )
        .await?;
    Ok(Job::from_row(&row))
}

/// Claims the oldest claimable job: a pending one, else a running one whose executor is
/// gone. Liveness is the table's flush lock: an executor holds it (session level) for as
/// long as it runs the job, and Postgres releases it when that executor's connection ends,
/// so a crashed executor's job is reclaimed at once, and a slow but live one never is.
/// The claim increments `attempt` (fencing the old one out) and takes the lock on this
/// connection ([`release`] gives it back). `None` when there is nothing to do.
///
/// # Errors
/// Postgres errors.
pub async fn claim(
    client: &mut Client,
    worker: &str,
) -> Result<Option<Job>, tokio_postgres::Error> {
    claim_where(client, worker, None).await
}

/// [`claim`] of job `id` only (the command line runs the flush it queued).
///
/// # Errors
/// Postgres errors.
pub async fn claim_job(
    client: &mut Client,
    worker: &str,
    id: i64,
) -> Result<Option<Job>, tokio_postgres::Error> {
    claim_where(client, worker, Some(id)).await
}

async fn claim_where(
    client: &mut Client,
    worker: &str,
    only: Option<i64>,
) -> Result<Option<Job>, tokio_postgres::Error> {
    let tx = client.transaction().await?;
    let claimed = tx
        .query_opt(
            &format!(
                "WITH next AS ( \
                   SELECT id FROM coldwire.jobs \
                   WHERE state IN ('pending', 'running') AND ($2::int8 IS NULL OR id = $2) \
                     AND (state = 'pending' OR NOT EXISTS ( \
                           SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted \
                             AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                             AND l.classid = {class}::oid AND l.objid = table_id::oid AND l.objsubid = 2)) \
                   ORDER BY state = 'running', created_at, id FOR UPDATE SKIP LOCKED LIMIT 1) \
                 UPDATE coldwire.jobs j SET state = 'running', attempt = j.attempt + 1, claimed_by = $1, \
                        heartbeat_at = now(), started_at = coalesce(j.started_at, now()) \
                 FROM next WHERE j.id = next.id RETURNING {}",
                COLUMNS.split(", ").map(|c| format!("j.{c}")).collect::<Vec<_>>().join(", "),
                class = FLUSH_LOCK_CLASS,
            ),
            &[&worker, &only],
        )
        .await?;
    let Some(row) = claimed else { return Ok(None) };
    let job = Job::from_row(&row);
    let locked: bool = tx
        .query_one(
            "SELECT pg_try_advisory_lock($1, $2)",
            &[&FLUSH_LOCK_CLASS, &(job.table_id as i32)],
        )
        .await?
        .get(0);
    if !locked {
        tx.rollback().await?;
        return Ok(None);
    }
    tx.commit().await?;
    Ok(Some(job))
}

/// Records progress and proves the job is still this attempt's; `false` means another
/// executor reclaimed it and this attempt must stop.
///
/// # Errors
/// Postgres errors.
pub async fn heartbeat(
    client: &Client,
    job: &Job,
    rows_done: i64,
) -> Result<bool, tokio_postgres::Error> {
    let n = client
        .execute(
            "UPDATE coldwire.jobs SET heartbeat_at = now(), rows_done = $3 \
             WHERE id = $1 AND attempt = $2 AND state = 'running'",
            &[&job.id, &job.attempt, &rows_done],
        )
        .await?;
    Ok(n == 1)
}

/// Marks this attempt of the job failed with `error` (a no-op if it was reclaimed).
///
/// # Errors
/// Postgres errors.
pub async fn fail(client: &Client, job: &Job, error: &str) -> Result<(), tokio_postgres::Error> {
    client
        .execute(
            "UPDATE coldwire.jobs SET state = 'failed', error = $3, finished_at = now() \
             WHERE id = $1 AND attempt = $2 AND state = 'running'",
            &[&job.id, &job.attempt, &error],
        )
        .await?;
    Ok(())
}

/// Gives back the table's flush lock taken by [`claim`].
///
/// # Errors
/// Postgres errors.
pub async fn release(client: &Client, job: &Job) -> Result<(), tokio_postgres::Error> {
    client
        .execute(
            "SELECT pg_advisory_unlock($1, $2)",
            &[&FLUSH_LOCK_CLASS, &(job.table_id as i32)],
        )
        .await?;
    Ok(())
}
