//! One flush job, start to finish (DESIGN §5): select the oldest mirror rows, stream them
//! joined to their heap rows out of Postgres by binary COPY into Arrow, write and publish
//! Parquet segments, record them pending, then finalize in one transaction.

use tokio_postgres::Client;

use super::finalize::{finalize, finalize_empty, pairs_from_segments, prune_flushed, prune_pairs};
use super::select::rows_to_flush;
use super::table::{load, FlushError, Tiered};
use super::write::{write_segments, Written};
use crate::catalog::jobs::Job;
use crate::store::ColdStore;

/// What a finished flush did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushOutcome {
    pub rows: i64,
    pub segments: i32,
}

/// Runs `job` on `client` (whose session holds the job's table lock), publishing to `store`.
/// `side` is a second service connection for what must commit while `client` streams the
/// rows inside its snapshot transaction: heartbeats with progress, and pending segments.
/// (A query on `client` itself would queue behind the COPY stream.)
///
/// # Errors
/// Postgres, encoding, Parquet or store failures; `FlushError::Fenced` when the job was
/// reclaimed meanwhile. Nothing this attempt did is visible until the finalize commits.
pub async fn run(
    client: &mut Client,
    side: &Client,
    store: &ColdStore,
    job: &Job,
) -> Result<FlushOutcome, FlushError> {
    let table = load(client, job.table_id).await?;
    clean_stale_attempts(client, store, job, &table).await?;
    if let Some(outcome) = resume_prune(client, store, job, &table).await? {
        return Ok(outcome);
    }
    finish_failed_prunes(client, store, job, &table).await?;
    table.check_age_column()?;
    super::table::check_not_subscribed(client, table.id).await?;
    super::table::check_servable(client, table.id).await?;
    // 1. The selection, recorded in the job so a retry selects the same rows.
    let Some((selection, total)) = cutoff(client, job, &table).await? else {
        finalize_empty(client, job).await?;
        return Ok(FlushOutcome {
            rows: 0,
            segments: 0,
        });
    };
    // 2.–4. The rows taken, written to segments and published.
    let started = std::time::Instant::now();
    let Written {
        segments,
        overrides,
    } = write_segments(client, side, store, job, &table, selection).await?;
    tracing::info!(
        table = %table.qualified,
        rows = total,
        segments,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "flushed rows written to segments"
    );

    // 5. The manifest as it will be once this job's segments are active.
    let generation: i64 = side
        .query_one(
            "SELECT generation FROM coldwire.tables WHERE id = $1",
            &[&table.id],
        )
        .await?
        .get(0);
    super::manifest::export(
        side,
        store,
        table.id,
        Some((job.id, job.attempt)),
        generation + 1,
    )
    .await?;
    crate::failpoint::hit("after_manifest").await;

    finalize(client, job, &table, total, segments, overrides).await?;
    Ok(FlushOutcome {
        rows: total,
        segments,
    })
}

/// Removes what earlier attempts left: pending segments and their objects (of this job's
/// crashed attempts, and of the table's failed jobs, which are never retried), and objects
/// under the table's prefix that no segment names (an attempt that died between publishing
/// and recording); the manifest is left to the export. Safe because only the holder of the
/// table's flush lock, which we are, writes segments of the table.
async fn clean_stale_attempts(
    client: &Client,
    store: &ColdStore,
    job: &Job,
    table: &Tiered,
) -> Result<(), FlushError> {
    let stale = client
        .query(
            "SELECT segment_id, path FROM coldwire.segments WHERE table_id = $1 AND status = 'pending' \
             AND NOT (job_id = $2 AND attempt = $3)",
            &[&table.id, &job.id, &job.attempt],
        )
        .await?;
    for row in stale {
        let id: uuid::Uuid = row.get(0);
        store.delete(row.get::<_, &str>(1)).await?;
        client
            .execute(
                "DELETE FROM coldwire.segments WHERE segment_id = $1",
                &[&id],
            )
            .await?;
    }
    let known: std::collections::HashSet<String> = client
        .query(
            "SELECT path FROM coldwire.segments WHERE table_id = $1",
            &[&table.id],
        )
        .await?
        .into_iter()
        .map(|r| r.get(0))
        .collect();
    for key in store.list(&table.prefix).await? {
        if !known.contains(&key) && !super::manifest::is_manifest_key(&table.prefix, &key) {
            tracing::info!(key, "collecting an orphan object of an earlier attempt");
            store.delete(&key).await?;
        }
    }
    Ok(())
}

/// Finishes an earlier attempt that finalized its segments and crashed while pruning the
/// heap: the pairs it flushed are in those segments. `None` when there is none.
async fn resume_prune(
    client: &mut Client,
    store: &ColdStore,
    job: &Job,
    table: &Tiered,
) -> Result<Option<FlushOutcome>, FlushError> {
    let activated: Vec<String> = client
        .query(
            "SELECT path FROM coldwire.segments WHERE job_id = $1 AND status = 'active' ORDER BY path",
            &[&job.id],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if !activated.is_empty() {
        tracing::info!(
            segments = activated.len(),
            "resuming the heap prune of an activated flush"
        );
        pairs_from_segments(client, store, table, &activated).await?;
        let total = job.rows_total.unwrap_or_default();
        let segments = i32::try_from(activated.len()).unwrap_or(i32::MAX);
        prune_flushed(client, job, table, total, segments).await?;
        return Ok(Some(FlushOutcome {
            rows: total,
            segments,
        }));
    }
    Ok(None)
}

/// Finishes the prune of the table's failed flush jobs whose segments are active: their
/// finalize committed, then their prune could not take its locks (55P03 after its
/// retries, behind long transactions). Their pairs are in those segments and still in
/// the mirror, which hides the cold copies; a flush that took the same rows again would
/// write them into a second segment, and once both were pruned every read would return
/// both copies. Done before this job selects anything; a failed job whose prune is
/// finished is marked completed.
async fn finish_failed_prunes(
    client: &mut Client,
    store: &ColdStore,
    job: &Job,
    table: &Tiered,
) -> Result<(), FlushError> {
    let failed = client
        .query(
            "SELECT s.job_id, array_agg(s.path ORDER BY s.path) \
             FROM coldwire.segments s JOIN coldwire.jobs j ON j.id = s.job_id \
             WHERE s.table_id = $1 AND s.status = 'active' AND j.state = 'failed' \
             GROUP BY s.job_id ORDER BY s.job_id",
            &[&table.id],
        )
        .await?;
    for row in failed {
        let (failed_job, paths): (i64, Vec<String>) = (row.get(0), row.get(1));
        tracing::info!(
            table = %table.qualified,
            failed_job,
            segments = paths.len(),
            "finishing the heap prune of a failed flush before flushing again"
        );
        pairs_from_segments(client, store, table, &paths).await?;
        prune_pairs(client, job, table, 0).await?;
        client
            .execute(
                "UPDATE coldwire.jobs SET state = 'completed', rows_done = coalesce(rows_total, rows_done), \
                 error = coalesce(error, '') || format(' (its prune was finished by flush job %s)', $2::bigint) \
                 WHERE id = $1 AND state = 'failed'",
                &[&failed_job, &job.id],
            )
            .await?;
    }
    Ok(())
}

/// Which mirror rows a flush takes, recorded in the job so a retry takes the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Selection {
    /// The pairs with `seq` up to this cutoff (a row limit alone).
    UpToSeq(i64),
    /// The first `n` pairs in age order ([`super::select::age_order`]): keys deleted from
    /// the heap, then rows by their age column (NULL last), then by seq.
    Oldest(i64),
}

/// The job's selection and row count: recorded in the job by an earlier attempt, else
/// chosen by the policy now and recorded, so a retry selects the same rows. `None` when
/// there is nothing to flush. A job by age records its row count only (`target_seq` NULL).
async fn cutoff(
    client: &Client,
    job: &Job,
    table: &Tiered,
) -> Result<Option<(Selection, i64)>, FlushError> {
    match (job.target_seq, job.rows_total) {
        (Some(cutoff), Some(total)) => return Ok(Some((Selection::UpToSeq(cutoff), total))),
        (None, Some(total)) => return Ok(Some((Selection::Oldest(total), total))),
        _ => {}
    }
    let pending: i64 = client
        .query_one(
            &format!("SELECT count(*) FROM coldwire.m_{}", table.id),
            &[],
        )
        .await?
        .get(0);
    let by_limit = rows_to_flush(pending, &table.policy, job.drain);
    let (selection, n) = match table.policy.age_rule() {
        Some((column, interval)) => {
            let aged = if job.drain {
                0
            } else {
                client
                    .query_one(
                        &format!(
                            "SELECT count(*) FROM coldwire.m_{id} m LEFT JOIN ONLY {heap} h ON {on} WHERE {due}",
                            id = table.id,
                            heap = table.qualified,
                            on = table.pk_equal("h", "m"),
                            due = super::select::aged_or_deleted("h", &table.pk[0], column),
                        ),
                        &[&interval],
                    )
                    .await?
                    .get(0)
            };
            let n = by_limit.max(aged);
            (Selection::Oldest(n), n)
        }
        None if by_limit > 0 => {
            let cutoff: i64 = client
                .query_one(
                    &format!(
                        "SELECT seq FROM coldwire.m_{} ORDER BY seq OFFSET $1 LIMIT 1",
                        table.id
                    ),
                    &[&(by_limit - 1)],
                )
                .await?
                .get(0);
            (Selection::UpToSeq(cutoff), by_limit)
        }
        None => return Ok(None),
    };
    if n == 0 {
        return Ok(None);
    }
    let target_seq = match selection {
        Selection::UpToSeq(cutoff) => Some(cutoff),
        Selection::Oldest(_) => None,
    };
    let updated = client
        .execute(
            "UPDATE coldwire.jobs SET target_seq = $3, rows_total = $4 WHERE id = $1 AND attempt = $2 AND state = 'running'",
            &[&job.id, &job.attempt, &target_seq, &n],
        )
        .await?;
    if updated != 1 {
        return Err(FlushError::Fenced(job.id, job.attempt));
    }
    Ok(Some((selection, n)))
}
