//! One flush job, start to finish (DESIGN §5): select the oldest mirror rows, stream them
//! joined to their heap rows out of Postgres by binary COPY into Arrow, write and publish
//! Parquet segments, record them pending, then finalize in one transaction.

use futures_util::{pin_mut, TryStreamExt};
use tokio_postgres::Client;

use super::probe::ColdKeyProbe;
use super::select::rows_to_flush;
use crate::catalog::jobs::{self, Job};
use crate::catalog::Policy;
use crate::segment::writer::{SegmentColumn, SegmentFacts, SegmentWriter};
use crate::segment::{writer_properties, OP_COLUMN, SEQ_COLUMN};
use crate::sql::quote::{column_list, pk_equal, quote_ident};
use crate::store::ColdStore;
use crate::values::{
    arrow_schema, encode_batch, encode_header, encode_trailer, ColdColumn, ColdType, CopyDecoder,
    ScalarType,
};
use arrow::array::{RecordBatch, UInt32Array};
use arrow::compute::take;
use bytes::BytesMut;
use futures_util::SinkExt;

/// Rows decoded per Arrow batch. A batch of wide rows is tens of MiB: with 65,536 rows
/// the flush of bench/flush peaked at 302 MiB RSS, with 16,384 at 225 MiB, and flushed
/// no slower.
const BATCH_ROWS: usize = 16_384;
/// Segments per folder of the table's prefix.
const SEGMENTS_PER_FOLDER: i64 = 100;
use crate::catalog::locks::TABLE_LOCK_CLASS;
/// The first rows of a table go cold no sooner than this after it was tiered: proxies that
/// have not yet seen the table as tiered relay its reads unchanged (hot rows only), and
/// each re-reads its list of tiered tables at least every
/// [`crate::catalog::registry::REGISTRY_TTL`].
pub const FIRST_FINALIZE_DELAY: std::time::Duration = std::time::Duration::from_secs(3);
/// Finalize waits this long for writers to let go before giving up (the job is retried).
const FINALIZE_LOCK_TIMEOUT: &str = "2s";
/// Finalize transactions tried before the job fails when its locks cannot be had (lock
/// timeout, or chosen as a deadlock victim by writers locking heap then mirror rows).
const FINALIZE_TRIES: u32 = 5;
/// Flushed pairs pruned from the mirror and the heap per transaction (each under the
/// table's exclusive lock, so writers wait for one such transaction at most).
const PRUNE_CHUNK_ROWS: i64 = 5_000;
/// Pause before the first finalize retry; doubles each time.
const FINALIZE_RETRY_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);

/// Why a flush failed (the job is marked failed, or left to be reclaimed).
#[derive(Debug, thiserror::Error)]
pub enum FlushError {
    #[error("{}", crate::catalog::postgres_text(.0))]
    Postgres(#[from] tokio_postgres::Error),
    #[error(transparent)]
    Cold(#[from] crate::values::ColdError),
    #[error(transparent)]
    SegmentRead(#[from] crate::segment::file::SegmentReadError),
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("manifest export: {0}")]
    Manifest(#[from] super::manifest::ManifestError),
    #[error("table {0} cannot be flushed: {1}")]
    Table(i64, String),
    #[error("cannot open a second service connection for the flush: {0}")]
    Side(String),
    #[error("job {0} was reclaimed by another executor (attempt {1} is stale)")]
    Fenced(i64, i32),
}

/// A tiered table as the flush needs it.
struct Tiered {
    id: i64,
    qualified: String,
    prefix: String,
    policy: Policy,
    /// All columns by attnum.
    columns: Vec<SegmentColumn>,
    pk: Vec<String>,
}

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
/// Postgres, encoding, Parquet or store failures; [`FlushError::Fenced`] when the job was
/// reclaimed meanwhile. Nothing this attempt did is visible until the finalize commits.
pub async fn run(
    client: &mut Client,
    side: &Client,
    store: &ColdStore,
    job: &Job,
) -> Result<FlushOutcome, FlushError> {
    let table = load(client, job.table_id).await?;
    clean_stale_attempts(client, store, job, &table).await?;

    // An earlier attempt finalized its segments and crashed while pruning the heap: the
    // pairs it flushed are in those segments; finish pruning them.
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
        pairs_from_segments(client, store, &table, &activated).await?;
        let total = job.rows_total.unwrap_or_default();
        let segments = i32::try_from(activated.len()).unwrap_or(i32::MAX);
        prune_flushed(client, job, &table, total, segments).await?;
        return Ok(FlushOutcome {
            rows: total,
            segments,
        });
    }

    // 1. The cutoff, recorded in the job so a retry selects the same rows.
    let (cutoff, total) = match (job.target_seq, job.rows_total) {
        (Some(cutoff), Some(total)) => (cutoff, total),
        _ => {
            let pending: i64 = client
                .query_one(
                    &format!("SELECT count(*) FROM coldwire.m_{}", table.id),
                    &[],
                )
                .await?
                .get(0);
            let n = rows_to_flush(pending, &table.policy, job.drain);
            if n == 0 {
                finalize_empty(client, job).await?;
                return Ok(FlushOutcome {
                    rows: 0,
                    segments: 0,
                });
            }
            let cutoff: i64 = client
                .query_one(
                    &format!(
                        "SELECT seq FROM coldwire.m_{} ORDER BY seq OFFSET $1 LIMIT 1",
                        table.id
                    ),
                    &[&(n - 1)],
                )
                .await?
                .get(0);
            let updated = client
                .execute(
                    "UPDATE coldwire.jobs SET target_seq = $3, rows_total = $4 WHERE id = $1 AND attempt = $2 AND state = 'running'",
                    &[&job.id, &job.attempt, &cutoff, &n],
                )
                .await?;
            if updated != 1 {
                return Err(FlushError::Fenced(job.id, job.attempt));
            }
            (cutoff, n)
        }
    };

    // 2. The exact (pk, seq) pairs taken, and their rows, in one snapshot.
    let has_cold: bool = client
        .query_one("SELECT EXISTS (SELECT 1 FROM coldwire.segments WHERE table_id = $1 AND status = 'active')", &[&table.id])
        .await?
        .get(0);
    let pk_list = table.pk_list("");
    client
        .batch_execute(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ; \
             DROP TABLE IF EXISTS pg_temp.cw_pairs; \
             CREATE TEMP TABLE cw_pairs AS SELECT {pk_list}, seq, row_number() OVER () AS n FROM coldwire.m_{id} WHERE seq <= {cutoff}; \
             CREATE INDEX ON pg_temp.cw_pairs (n);",
            id = table.id
        ))
        .await?;
    let select_columns: Vec<String> = table
        .columns
        .iter()
        .map(|c| {
            format!(
                "{}.{}",
                if table.pk.contains(&c.name) { "p" } else { "h" },
                quote_ident(&c.name)
            )
        })
        .collect();
    let first_pk = quote_ident(&table.pk[0]);
    // Deleted keys become tombstones only where older cold versions may exist.
    let tombstones = if has_cold {
        ""
    } else {
        "WHERE h.ctid IS NOT NULL"
    };
    let copy = format!(
        "COPY (SELECT {cols}, p.seq, (CASE WHEN h.{first_pk} IS NULL THEN 3 ELSE 1 END)::int2 \
         FROM pg_temp.cw_pairs p LEFT JOIN ONLY {table} h ON {on} {tombstones} ORDER BY {p_pk}) TO STDOUT (FORMAT binary)",
        cols = select_columns.join(", "),
        table = table.qualified,
        on = table.pk_equal("h", "p"),
        p_pk = table.pk_list("p."),
    );
    let mut cold_columns: Vec<ColdColumn> = table
        .columns
        .iter()
        .map(|c| ColdColumn::new(c.name.clone(), c.ty))
        .collect();
    let seq_position = cold_columns.len();
    cold_columns.push(ColdColumn::new(
        SEQ_COLUMN,
        ColdType::Scalar(ScalarType::Int8),
    ));
    cold_columns.push(ColdColumn::new(
        OP_COLUMN,
        ColdType::Scalar(ScalarType::Int2),
    ));
    let schema = std::sync::Arc::new(arrow_schema(&cold_columns));
    let mut decoder = CopyDecoder::new(cold_columns, BATCH_ROWS)?;
    let props = writer_properties(&table.pk, &schema)?;
    let max_rows = usize::try_from(table.policy.max_rows_per_file)
        .unwrap_or(usize::MAX)
        .max(1);
    let segment_columns: std::sync::Arc<[SegmentColumn]> = table.columns.clone().into();
    let pk_positions: std::sync::Arc<[usize]> = table
        .pk
        .iter()
        .filter_map(|pk| table.columns.iter().position(|c| &c.name == pk))
        .collect::<Vec<_>>()
        .into();
    // Keys that may already have a cold version get an override at finalize (§5 step 6).
    let mut probe = ColdKeyProbe::load(side, table.id, table.pk.clone()).await?;
    let pk_cold_columns: Vec<ColdColumn> = pk_positions
        .iter()
        .map(|&p| ColdColumn::new(table.columns[p].name.clone(), table.columns[p].ty))
        .collect();
    let pk_schema = std::sync::Arc::new(arrow_schema(&pk_cold_columns));
    let mut maybe_cold: Vec<RecordBatch> = Vec::new();
    let new_segment = || {
        SegmentWriter::new(
            schema.clone(),
            props.clone(),
            segment_columns.clone(),
            pk_positions.clone(),
            seq_position,
        )
    };

    let mut segment_number: i64 = client
        .query_one(
            "SELECT count(*) FROM coldwire.segments WHERE table_id = $1",
            &[&table.id],
        )
        .await?
        .get(0);
    let mut segments = 0i32;
    let mut rows_done = 0i64;
    let mut current: Option<SegmentWriter> = None;

    let stream = client.copy_out(copy.as_str()).await?;
    pin_mut!(stream);
    loop {
        let chunk = stream.try_next().await?;
        match &chunk {
            Some(bytes) => decoder.decode(bytes)?,
            None => decoder.finish()?,
        }
        while let Some(mut batch) = decoder.next_batch() {
            let rows = probe.maybe_cold(store, &batch, &pk_positions).await?;
            if !rows.is_empty() {
                let rows = UInt32Array::from(rows);
                let keys = pk_positions
                    .iter()
                    .map(|&p| take(batch.column(p), &rows, None))
                    .collect::<Result<Vec<_>, _>>()?;
                maybe_cold.push(RecordBatch::try_new(pk_schema.clone(), keys)?);
            }
            while batch.num_rows() > 0 {
                let writer = match &mut current {
                    Some(w) => w,
                    None => current.insert(new_segment()?),
                };
                let take = batch.num_rows().min(max_rows - writer.rows());
                writer.write(&batch.slice(0, take))?;
                batch = batch.slice(take, batch.num_rows() - take);
                if writer.rows() >= max_rows {
                    let done = current.take().expect("written above");
                    segment_number += 1;
                    rows_done += done.rows() as i64;
                    publish(side, store, job, &table, done, segment_number).await?;
                    segments += 1;
                    jobs::heartbeat(side, job, rows_done).await?;
                }
            }
        }
        if chunk.is_none() {
            break;
        }
    }
    if let Some(done) = current.take() {
        if done.rows() > 0 {
            segment_number += 1;
            publish(side, store, job, &table, done, segment_number).await?;
            segments += 1;
        }
    }
    let overrides = !maybe_cold.is_empty();
    if overrides {
        load_maybe_cold(client, &table, &pk_cold_columns, &maybe_cold).await?;
    }
    client.batch_execute("COMMIT").await?;

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

impl Tiered {
    /// The key columns, quoted, each after `prefix`.
    fn pk_list(&self, prefix: &str) -> String {
        column_list(self.pk.iter().map(String::as_str), prefix)
    }

    /// The join condition on the primary key between relations aliased `left` and `right`.
    fn pk_equal(&self, left: &str, right: &str) -> String {
        pk_equal(self.pk.iter().map(String::as_str), left, right)
    }
}

/// Reads the table's catalog row and current name.
async fn load(client: &Client, table_id: i64) -> Result<Tiered, FlushError> {
    let row = client
        .query_opt(
            "SELECT format('%I.%I', n.nspname, c.relname), t.storage_prefix, t.policy, t.columns, t.pk_attnums \
             FROM coldwire.tables t JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE t.id = $1 AND t.state = 'active'",
            &[&table_id],
        )
        .await?
        .ok_or_else(|| FlushError::Table(table_id, "it is not an active tiered table".into()))?;
    let policy = Policy::default()
        .merged(&row.get::<_, serde_json::Value>(2))
        .map_err(|e| FlushError::Table(table_id, e.to_string()))?;
    let pk_attnums: Vec<i16> = row.get(4);
    let columns = SegmentColumn::from_catalog(&row.get::<_, serde_json::Value>(3))
        .map_err(|e| FlushError::Table(table_id, e.to_string()))?;
    let pk = pk_attnums
        .iter()
        .filter_map(|a| {
            columns
                .iter()
                .find(|c| c.attnum == *a)
                .map(|c| c.name.clone())
        })
        .collect::<Vec<_>>();
    if pk.is_empty() {
        return Err(FlushError::Table(
            table_id,
            "no primary key recorded".into(),
        ));
    }
    Ok(Tiered {
        id: table_id,
        qualified: row.get(0),
        prefix: row.get(1),
        policy,
        columns,
        pk,
    })
}

/// Closes a segment, publishes it create-if-absent, and records it pending with its stats.
async fn publish(
    client: &Client,
    store: &ColdStore,
    job: &Job,
    table: &Tiered,
    writer: SegmentWriter,
    number: i64,
) -> Result<(), FlushError> {
    let (bytes, facts) = writer.finish()?;
    let segment_id = uuid::Uuid::new_v4();
    let key = format!(
        "{}/{:03}/segment-{:06}-{}.parquet",
        table.prefix,
        number / SEGMENTS_PER_FOLDER,
        number,
        &segment_id.simple().to_string()[..8]
    );
    let published = store.publish(&key, bytes).await?;
    crate::failpoint::hit("after_publish").await;
    record_pending(client, job, table, segment_id, &key, &published, &facts).await?;
    crate::failpoint::hit("after_pending_insert").await;
    Ok(())
}

/// The segment's catalog rows: `pending`, with its footer-derived stats, in one transaction
/// (a segment row never exists without its stats).
async fn record_pending(
    client: &Client,
    job: &Job,
    table: &Tiered,
    segment_id: uuid::Uuid,
    key: &str,
    published: &crate::store::Published,
    facts: &SegmentFacts,
) -> Result<(), FlushError> {
    client.batch_execute("BEGIN").await?;
    client
        .execute(
            "INSERT INTO coldwire.segments (segment_id, table_id, path, status, row_count, byte_size, min_seq, max_seq, \
                                            min_pk, max_pk, sha256, etag, schema_version, job_id, attempt) \
             VALUES ($1, $2, $3, 'pending', $4, $5, $6, $7, $8, $9, $10, $11, 1, $12, $13)",
            &[
                &segment_id,
                &table.id,
                &key,
                &facts.rows,
                &(published.size as i64),
                &facts.min_seq,
                &facts.max_seq,
                &facts.min_pk,
                &facts.max_pk,
                &published.sha256,
                &published.etag,
                &job.id,
                &job.attempt,
            ],
        )
        .await?;
    let insert = client
        .prepare(
            "INSERT INTO coldwire.segment_stats (segment_id, attnum, min_value, max_value, null_count, nan_count, \
                                                 rg_min, rg_max, rg_null_count, rg_nan_count) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .await?;
    for s in &facts.stats {
        client
            .execute(
                &insert,
                &[
                    &segment_id,
                    &s.attnum,
                    &s.min,
                    &s.max,
                    &s.null_count,
                    &s.nan_count,
                    &s.rg_min,
                    &s.rg_max,
                    &s.rg_null_count,
                    &s.rg_nan_count,
                ],
            )
            .await?;
    }
    client.batch_execute("COMMIT").await?;
    Ok(())
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

/// The finalize transaction: activate this attempt's segments, record overrides and
/// widen the bounds (DESIGN §5 step 6), retried with backoff while its locks cannot be
/// had (a rolled-back try changed nothing); then [`prune_flushed`] removes exactly the
/// flushed (pk, seq) pairs from the mirror and their rows from the heap, in chunks.
async fn finalize(
    client: &mut Client,
    job: &Job,
    table: &Tiered,
    rows: i64,
    segments: i32,
    overrides: bool,
) -> Result<(), FlushError> {
    crate::failpoint::hit("before_finalize").await;
    let wait_ms: f64 = client
        .query_one(
            "SELECT greatest(0, extract(epoch FROM t.tiered_at + make_interval(secs => $2) - clock_timestamp()) * 1000)::float8 \
             FROM coldwire.tables t WHERE t.id = $1",
            &[&table.id, &FIRST_FINALIZE_DELAY.as_secs_f64()],
        )
        .await?
        .get(0);
    if wait_ms > 0.0 {
        tracing::info!(
            wait_ms = wait_ms as u64,
            "first flush of a newly tiered table: waiting until every proxy knows it is tiered"
        );
        tokio::time::sleep(std::time::Duration::from_millis(wait_ms as u64)).await;
    }
    // The lowest and highest first key column of the pairs, found before the lock is
    // taken (the bounds widen by them).
    client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS pg_temp.cw_pair_bounds; \
             CREATE TEMP TABLE cw_pair_bounds AS \
             (SELECT {first} FROM pg_temp.cw_pairs ORDER BY 1 LIMIT 1) \
             UNION ALL (SELECT {first} FROM pg_temp.cw_pairs ORDER BY 1 DESC LIMIT 1)",
            first = quote_ident(&table.pk[0])
        ))
        .await?;
    let mut tries = LockRetries::default();
    loop {
        match finalize_once(client, job, table, overrides).await {
            Err(e) if tries.again(&e, "finalize").await => {}
            done => break done?,
        }
    }
    crate::failpoint::hit("after_activation").await;
    prune_flushed(client, job, table, rows, segments).await
}

/// Prunes the flushed pairs (`pg_temp.cw_pairs`, numbered by `n`) from the mirror and
/// their rows from the heap, [`PRUNE_CHUNK_ROWS`] pairs per transaction, each under the
/// table's exclusive lock, then completes the job. The segments are active already; a
/// key still in the mirror reads its hot version meanwhile, so every read and write sees
/// each row once whichever chunks have committed, and writers wait for one chunk at most,
/// not for the whole flush. A pair whose key was written since (a newer seq) stays.
async fn prune_flushed(
    client: &mut Client,
    job: &Job,
    table: &Tiered,
    rows: i64,
    segments: i32,
) -> Result<(), FlushError> {
    let pairs: i64 = client
        .query_one(
            "SELECT coalesce(max(n), 0)::bigint FROM pg_temp.cw_pairs",
            &[],
        )
        .await?
        .get(0);
    let mut from = 0i64;
    while from < pairs {
        let to = from + PRUNE_CHUNK_ROWS;
        let mut tries = LockRetries::default();
        loop {
            match prune_chunk(client, job, table, from, to).await {
                Err(e) if tries.again(&e, "pruning").await => {}
                done => break done?,
            }
        }
        from = to;
        crate::failpoint::hit("after_prune_chunk").await;
        if !jobs::heartbeat(client, job, rows).await? {
            return Err(FlushError::Fenced(job.id, job.attempt));
        }
    }
    let done = client
        .execute(
            "UPDATE coldwire.jobs SET state = 'completed', finished_at = now(), rows_done = $3, segments = $4, heartbeat_at = now() \
             WHERE id = $1 AND attempt = $2 AND state = 'running'",
            &[&job.id, &job.attempt, &rows, &segments],
        )
        .await?;
    if done != 1 {
        return Err(FlushError::Fenced(job.id, job.attempt));
    }
    client
        .batch_execute(
            "DROP TABLE IF EXISTS pg_temp.cw_pairs; DROP TABLE IF EXISTS pg_temp.cw_maybe_cold; \
             DROP TABLE IF EXISTS pg_temp.cw_pair_bounds",
        )
        .await?;
    Ok(())
}

/// One transaction of [`prune_flushed`]: pairs numbered in `(from, to]`.
async fn prune_chunk(
    client: &mut Client,
    job: &Job,
    table: &Tiered,
    from: i64,
    to: i64,
) -> Result<(), FlushError> {
    let returning = table.pk_list("m.");
    let tx = locked_transaction(client, job, table).await?;
    // The table by its current name: a rename after the activation must not leave the
    // flushed rows in the heap (the prune does not depend on the columns).
    let name = current_name(&tx, table).await?;
    tx.execute(
        &format!(
            "WITH gone AS (DELETE FROM coldwire.m_{id} m USING pg_temp.cw_pairs p \
                           WHERE p.n > $1 AND p.n <= $2 AND {m_p} AND m.seq = p.seq RETURNING {returning}) \
             DELETE FROM ONLY {table} h USING gone WHERE {h_gone}",
            id = table.id,
            m_p = table.pk_equal("m", "p"),
            table = name,
            h_gone = table.pk_equal("h", "gone"),
        ),
        &[&from, &to],
    )
    .await?;
    tx.batch_execute("DELETE FROM coldwire.maintenance WHERE xid = pg_current_xact_id()")
        .await?;
    tx.commit().await?;
    Ok(())
}

/// The table's name now (schema-qualified, quoted), locked ROW EXCLUSIVE: looked up by
/// relid, locked, and looked up again, so no rename can slip in between.
async fn current_name(
    tx: &tokio_postgres::Transaction<'_>,
    table: &Tiered,
) -> Result<String, FlushError> {
    const BY_RELID: &str = "SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) \
         FROM coldwire.tables t JOIN pg_catalog.pg_class c ON c.oid = t.relid \
         JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE t.id = $1";
    let gone = || FlushError::Table(table.id, "the table is gone".into());
    let mut name: String = tx
        .query_opt(BY_RELID, &[&table.id])
        .await?
        .ok_or_else(gone)?
        .get(0);
    loop {
        tx.batch_execute(&format!("LOCK TABLE ONLY {name} IN ROW EXCLUSIVE MODE"))
            .await?;
        let again: String = tx
            .query_opt(BY_RELID, &[&table.id])
            .await?
            .ok_or_else(gone)?
            .get(0);
        if again == name {
            return Ok(name);
        }
        // Renamed before the lock was granted: lock it by the new name.
        name = again;
    }
}

/// Locks the table by the name the flush read it under and checks that the name still
/// resolves to the table's relid, and that it has the columns the segments were written
/// with (no rename or ALTER can commit while the lock is held, and the catalog is read
/// afresh once it is).
async fn check_table(
    tx: &tokio_postgres::Transaction<'_>,
    table: &Tiered,
) -> Result<(), FlushError> {
    tx.batch_execute(&format!(
        "LOCK TABLE ONLY {} IN ROW EXCLUSIVE MODE",
        table.qualified
    ))
    .await?;
    let same: bool = tx
        .query_one(
            "SELECT pg_catalog.to_regclass($2)::oid = t.relid \
                    AND (SELECT count(*) FROM pg_catalog.pg_attribute a \
                         WHERE a.attrelid = t.relid AND a.attnum > 0 AND NOT a.attisdropped) = $3 \
             FROM coldwire.tables t WHERE t.id = $1",
            &[&table.id, &table.qualified, &(table.columns.len() as i64)],
        )
        .await?
        .get(0);
    if !same {
        return Err(FlushError::Table(
            table.id,
            "it was renamed or its columns changed while the flush ran; the next flush reads it as it is now".into(),
        ));
    }
    Ok(())
}

/// Loads into `pg_temp.cw_pairs` (numbered by `n`) the (pk, seq) pairs of `paths`, an
/// earlier attempt's activated segments.
async fn pairs_from_segments(
    client: &Client,
    store: &ColdStore,
    table: &Tiered,
    paths: &[String],
) -> Result<(), FlushError> {
    use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
    use parquet::arrow::{ParquetRecordBatchStreamBuilder, ProjectionMask};
    let pk = table.pk_list("");
    client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS pg_temp.cw_pairs_in; DROP TABLE IF EXISTS pg_temp.cw_pairs; \
             CREATE TEMP TABLE cw_pairs_in AS SELECT {pk}, seq FROM coldwire.m_{id} WITH NO DATA;",
            id = table.id
        ))
        .await?;
    for path in paths {
        let metadata = crate::segment::file::footer(store, path).await?;
        let held = crate::segment::file_columns(&metadata);
        // Columns come out in file order: the pk columns by position, then seq.
        let mut roots: Vec<usize> = table
            .pk
            .iter()
            .filter_map(|k| table.columns.iter().position(|c| &c.name == k))
            .collect();
        roots.sort_unstable();
        let mut columns: Vec<ColdColumn> = roots
            .iter()
            .map(|&i| ColdColumn::new(table.columns[i].name.clone(), table.columns[i].ty))
            .collect();
        columns.push(ColdColumn::new(
            SEQ_COLUMN,
            ColdType::Scalar(ScalarType::Int8),
        ));
        roots.push(held);
        let names = column_list(
            columns.iter().map(|c| {
                if c.name == SEQ_COLUMN {
                    "seq"
                } else {
                    c.name.as_str()
                }
            }),
            "",
        );
        let file =
            crate::segment::file::SegmentFile::new(store.clone(), path.clone(), metadata.clone());
        let reader = ArrowReaderMetadata::try_new(metadata.clone(), ArrowReaderOptions::new())?;
        let mask = ProjectionMask::roots(metadata.file_metadata().schema_descr(), roots);
        let stream = ParquetRecordBatchStreamBuilder::new_with_metadata(file, reader)
            .with_projection(mask)
            .build()?;
        let batches: Vec<RecordBatch> = stream.try_collect().await?;
        copy_batches_in(
            client,
            &format!("pg_temp.cw_pairs_in ({names})"),
            &columns,
            &batches,
        )
        .await?;
    }
    client
        .batch_execute(
            "CREATE TEMP TABLE cw_pairs AS SELECT *, row_number() OVER () AS n FROM pg_temp.cw_pairs_in; \
             CREATE INDEX ON pg_temp.cw_pairs (n); DROP TABLE pg_temp.cw_pairs_in;",
        )
        .await?;
    Ok(())
}

/// Lock timeout or deadlock victim: worth another try once the writers are through.
fn is_lock_conflict(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    e.code().is_some_and(|c| {
        *c == SqlState::LOCK_NOT_AVAILABLE || *c == SqlState::T_R_DEADLOCK_DETECTED
    })
}

/// The tries of a transaction that takes the table's exclusive lock: up to
/// [`FINALIZE_TRIES`], with a backoff from [`FINALIZE_RETRY_BACKOFF`] that doubles.
struct LockRetries {
    tried: u32,
    backoff: std::time::Duration,
}

impl Default for LockRetries {
    fn default() -> Self {
        Self {
            tried: 0,
            backoff: FINALIZE_RETRY_BACKOFF,
        }
    }
}

impl LockRetries {
    /// Whether the try that failed with `e` is worth another (its locks could not be
    /// had, and tries are left); if so, after the backoff.
    async fn again(&mut self, e: &FlushError, what: &str) -> bool {
        self.tried += 1;
        let FlushError::Postgres(pg) = e else {
            return false;
        };
        if self.tried >= FINALIZE_TRIES || !is_lock_conflict(pg) {
            return false;
        }
        tracing::info!(
            tried = self.tried,
            error = %crate::catalog::postgres_text(pg),
            "{what} could not take its locks: retrying"
        );
        tokio::time::sleep(self.backoff).await;
        self.backoff *= 2;
        true
    }
}

/// A transaction registered in `coldwire.maintenance` (capture skips its changes) that
/// holds the table's exclusive lock (writers through coldwire hold it shared) and this
/// attempt's job row, with the finalize's lock timeout.
///
/// # Errors
/// The job was reclaimed ([`FlushError::Fenced`]); the lock timed out.
async fn locked_transaction<'c>(
    client: &'c mut Client,
    job: &Job,
    table: &Tiered,
) -> Result<tokio_postgres::Transaction<'c>, FlushError> {
    let tx = client.transaction().await?;
    tx.batch_execute(&format!(
        "SET LOCAL lock_timeout = '{FINALIZE_LOCK_TIMEOUT}'; \
         INSERT INTO coldwire.maintenance (xid) VALUES (pg_current_xact_id());"
    ))
    .await?;
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, $2)",
        &[&TABLE_LOCK_CLASS, &(table.id as i32)],
    )
    .await?;
    let ours = tx
        .query_opt(
            "SELECT 1 FROM coldwire.jobs WHERE id = $1 AND attempt = $2 AND state = 'running' FOR UPDATE",
            &[&job.id, &job.attempt],
        )
        .await?;
    if ours.is_none() {
        return Err(FlushError::Fenced(job.id, job.attempt));
    }
    Ok(tx)
}

async fn finalize_once(
    client: &mut Client,
    job: &Job,
    table: &Tiered,
    overrides: bool,
) -> Result<(), FlushError> {
    let tx = locked_transaction(client, job, table).await?;
    check_table(&tx, table).await?;
    let generation: i64 = tx
        .query_one("UPDATE coldwire.tables SET generation = generation + 1 WHERE id = $1 RETURNING generation", &[&table.id])
        .await?
        .get(0);
    tx.execute(
        "UPDATE coldwire.segments SET status = 'active', activated_generation = $3 \
         WHERE job_id = $1 AND attempt = $2 AND status = 'pending'",
        &[&job.id, &job.attempt, &generation],
    )
    .await?;
    if overrides {
        // Every flushed key that may have an older cold version: its newest cold seq is now
        // the one just flushed.
        let pk = table.pk_list("");
        tx.batch_execute(&format!(
            "INSERT INTO coldwire.overrides_{id} AS o ({pk}, seq, generation) \
             SELECT {p_pk}, p.seq, {generation} FROM pg_temp.cw_pairs p JOIN pg_temp.cw_maybe_cold c ON {p_c} \
             ON CONFLICT ({pk}, generation) DO UPDATE SET seq = greatest(o.seq, EXCLUDED.seq)",
            id = table.id,
            p_pk = table.pk_list("p."),
            p_c = table.pk_equal("p", "c"),
        ))
        .await?;
    }
    tx.batch_execute(&crate::catalog::capture::widen_bounds(
        table.id,
        &table.pk[0],
        "pg_temp.cw_pair_bounds",
    ))
    .await?;
    tx.batch_execute("DELETE FROM coldwire.maintenance WHERE xid = pg_current_xact_id(); NOTIFY coldwire_catalog;").await?;
    crate::failpoint::hit("before_finalize_commit").await;
    tx.commit().await?;
    Ok(())
}

/// Loads the keys the probe flagged into `pg_temp.cw_maybe_cold` by binary COPY (values
/// only as data, never as SQL text).
async fn load_maybe_cold(
    client: &Client,
    table: &Tiered,
    columns: &[ColdColumn],
    batches: &[RecordBatch],
) -> Result<(), FlushError> {
    let pk = table.pk_list("");
    client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS pg_temp.cw_maybe_cold; \
             CREATE TEMP TABLE cw_maybe_cold AS SELECT {pk} FROM coldwire.m_{id} WITH NO DATA;",
            id = table.id
        ))
        .await?;
    copy_batches_in(
        client,
        &format!("pg_temp.cw_maybe_cold ({pk})"),
        columns,
        batches,
    )
    .await
}

/// Copies `batches` of `columns` into `target` (a table and its column list) by binary
/// COPY, so values travel only as data, never as SQL text.
async fn copy_batches_in(
    client: &Client,
    target: &str,
    columns: &[ColdColumn],
    batches: &[RecordBatch],
) -> Result<(), FlushError> {
    let mut buf = BytesMut::new();
    encode_header(&mut buf);
    for batch in batches {
        encode_batch(columns, batch, &mut buf)?;
    }
    encode_trailer(&mut buf);
    let sink = client
        .copy_in(&format!("COPY {target} FROM STDIN (FORMAT binary)"))
        .await?;
    pin_mut!(sink);
    sink.send(buf.freeze()).await?;
    sink.finish().await?;
    Ok(())
}

/// Completes a job that found nothing to flush.
async fn finalize_empty(client: &Client, job: &Job) -> Result<(), FlushError> {
    client
        .execute(
            "UPDATE coldwire.jobs SET state = 'completed', finished_at = now(), rows_total = 0 \
             WHERE id = $1 AND attempt = $2 AND state = 'running'",
            &[&job.id, &job.attempt],
        )
        .await?;
    Ok(())
}
