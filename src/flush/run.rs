//! One flush job, start to finish (DESIGN §5): select the oldest mirror rows, stream them
//! joined to their heap rows out of Postgres by binary COPY into Arrow, write and publish
//! Parquet segments, record them pending, then finalize in one transaction.

use bytes::Bytes;
use futures_util::{pin_mut, TryStreamExt};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::SortingColumn;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use tokio_postgres::Client;

use super::jobs::{self, Job};
use super::select::rows_to_flush;
use super::store::ColdStore;
use crate::admin::Policy;
use crate::catalog::capture::{pk_equal, quote_ident};
use crate::cold::{arrow_schema, ColdColumn, ColdType, CopyDecoder};

/// Rows decoded per Arrow batch.
const BATCH_ROWS: usize = 65_536;
/// Rows per Parquet row group (at most; a segment may be smaller).
const ROW_GROUP_ROWS: usize = 131_072;
/// Segments per folder of the table's prefix.
const SEGMENTS_PER_FOLDER: i64 = 100;
/// Advisory-lock class of a tiered table: writers hold it shared, finalize exclusive (§7).
pub const TABLE_LOCK_CLASS: i32 = 0x6377_0001;
/// Finalize waits this long for writers to let go before giving up (the job is retried).
const FINALIZE_LOCK_TIMEOUT: &str = "2s";
/// The cold columns coldwire adds to each segment.
pub const SEQ_COLUMN: &str = "_cw_seq";
pub const OP_COLUMN: &str = "_cw_op";

/// Why a flush failed (the job is marked failed, or left to be reclaimed).
#[derive(Debug, thiserror::Error)]
pub enum FlushError {
    #[error("{}", crate::catalog::postgres_text(.0))]
    Postgres(#[from] tokio_postgres::Error),
    #[error(transparent)]
    Cold(#[from] crate::cold::ColdError),
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error(transparent)]
    Store(#[from] super::store::StoreError),
    #[error("table {0} cannot be flushed: {1}")]
    Table(i64, String),
    #[error("job {0} was reclaimed by another executor (attempt {1} is stale)")]
    Fenced(i64, i32),
}

/// A tiered table as the flush needs it.
struct Tiered {
    id: i64,
    qualified: String,
    prefix: String,
    policy: Policy,
    /// All columns by attnum, with whether each is a pk column.
    columns: Vec<(String, ColdType, bool)>,
    pk: Vec<String>,
}

/// What a finished flush did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushOutcome {
    pub rows: i64,
    pub segments: i32,
}

/// Runs `job` on `client` (whose session holds the job's table lock), publishing to `store`.
///
/// # Errors
/// Postgres, encoding, Parquet or store failures; [`FlushError::Fenced`] when the job was
/// reclaimed meanwhile. Nothing this attempt did is visible until the finalize commits.
pub async fn run(
    client: &mut Client,
    store: &ColdStore,
    job: &Job,
) -> Result<FlushOutcome, FlushError> {
    let table = load(client, job.table_id).await?;
    clean_stale_attempts(client, store, job, &table).await?;

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
    let pk_list = table
        .pk
        .iter()
        .map(|c| quote_ident(c))
        .collect::<Vec<_>>()
        .join(", ");
    client
        .batch_execute(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ; \
             DROP TABLE IF EXISTS pg_temp.cw_pairs; \
             CREATE TEMP TABLE cw_pairs AS SELECT {pk_list}, seq FROM coldwire.m_{id} WHERE seq <= {cutoff};",
            id = table.id
        ))
        .await?;
    let select_columns: Vec<String> = table
        .columns
        .iter()
        .map(|(name, _, is_pk)| format!("{}.{}", if *is_pk { "p" } else { "h" }, quote_ident(name)))
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
        p_pk = table.pk.iter().map(|c| format!("p.{}", quote_ident(c))).collect::<Vec<_>>().join(", "),
    );
    let mut cold_columns: Vec<ColdColumn> = table
        .columns
        .iter()
        .map(|(name, ty, _)| ColdColumn::new(name.clone(), *ty))
        .collect();
    cold_columns.push(ColdColumn::new(
        SEQ_COLUMN,
        ColdType::for_column(20, -1).map_err(|e| FlushError::Table(table.id, e.to_string()))?,
    ));
    cold_columns.push(ColdColumn::new(
        OP_COLUMN,
        ColdType::for_column(21, -1).map_err(|e| FlushError::Table(table.id, e.to_string()))?,
    ));
    let schema = std::sync::Arc::new(arrow_schema(&cold_columns));
    let mut decoder = CopyDecoder::new(cold_columns, BATCH_ROWS)?;
    let props = writer_properties(&table, &schema)?;
    let max_rows = usize::try_from(table.policy.max_rows_per_file)
        .unwrap_or(usize::MAX)
        .max(1);

    let mut segment_number: i64 = client
        .query_one(
            "SELECT count(*) FROM coldwire.segments WHERE table_id = $1",
            &[&table.id],
        )
        .await?
        .get(0);
    let mut segments = 0i32;
    let mut rows_done = 0i64;
    let mut current: Option<(ArrowWriter<Vec<u8>>, usize, i64, i64)> = None;

    let stream = client.copy_out(copy.as_str()).await?;
    pin_mut!(stream);
    loop {
        let chunk = stream.try_next().await?;
        match &chunk {
            Some(bytes) => decoder.decode(bytes)?,
            None => decoder.finish()?,
        }
        while let Some(mut batch) = decoder.next_batch() {
            while batch.num_rows() > 0 {
                let (writer, rows, _, _) = match &mut current {
                    Some(c) => c,
                    None => current.insert((
                        ArrowWriter::try_new(Vec::new(), schema.clone(), Some(props.clone()))?,
                        0,
                        i64::MAX,
                        i64::MIN,
                    )),
                };
                let take = batch.num_rows().min(max_rows - *rows);
                let part = batch.slice(0, take);
                writer.write(&part)?;
                *rows += take;
                let (min, max) = seq_range(&part);
                if let Some(c) = current.as_mut() {
                    c.2 = c.2.min(min);
                    c.3 = c.3.max(max);
                }
                batch = batch.slice(take, batch.num_rows() - take);
                if current.as_ref().is_some_and(|c| c.1 >= max_rows) {
                    let done = current.take().expect("checked above");
                    segment_number += 1;
                    rows_done += done.1 as i64;
                    publish(client, store, job, &table, done, segment_number).await?;
                    segments += 1;
                    jobs::heartbeat(client, job, rows_done).await?;
                }
            }
        }
        if chunk.is_none() {
            break;
        }
    }
    if let Some(done) = current.take() {
        if done.1 > 0 {
            segment_number += 1;
            publish(client, store, job, &table, done, segment_number).await?;
            segments += 1;
        }
    }
    client.batch_execute("COMMIT").await?;

    finalize(client, job, &table, total, segments).await?;
    Ok(FlushOutcome {
        rows: total,
        segments,
    })
}

impl Tiered {
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
    let mut columns = Vec::new();
    let columns_json: serde_json::Value = row.get(3);
    for c in columns_json.as_array().into_iter().flatten() {
        let name = c["name"].as_str().unwrap_or_default().to_owned();
        let attnum = c["attnum"].as_i64().unwrap_or_default() as i16;
        let ty = ColdType::for_column(
            c["type_oid"].as_u64().unwrap_or_default() as u32,
            c["typmod"].as_i64().unwrap_or(-1) as i32,
        )
        .map_err(|e| FlushError::Table(table_id, e.to_string()))?;
        columns.push((name, ty, pk_attnums.contains(&attnum), attnum));
    }
    let pk = pk_attnums
        .iter()
        .filter_map(|a| columns.iter().find(|c| c.3 == *a).map(|c| c.0.clone()))
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
        columns: columns.into_iter().map(|(n, t, p, _)| (n, t, p)).collect(),
        pk,
    })
}

/// zstd, page-level statistics (so a page index), bloom filters on the pk columns, rows
/// sorted by pk and declared so.
fn writer_properties(
    table: &Tiered,
    schema: &arrow::datatypes::Schema,
) -> Result<WriterProperties, FlushError> {
    let mut builder = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3)?))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS));
    let mut sorting = Vec::new();
    for pk in &table.pk {
        if let Ok(index) = schema.index_of(pk) {
            sorting.push(SortingColumn {
                column_idx: index as i32,
                descending: false,
                nulls_first: false,
            });
        }
        builder = builder.set_column_bloom_filter_enabled(ColumnPath::from(pk.as_str()), true);
    }
    Ok(builder.set_sorting_columns(Some(sorting)).build())
}

fn seq_range(batch: &arrow::array::RecordBatch) -> (i64, i64) {
    use arrow::array::Array;
    let Some(col) = batch.column_by_name(SEQ_COLUMN) else {
        return (i64::MAX, i64::MIN);
    };
    let Some(seqs) = col.as_any().downcast_ref::<arrow::array::Int64Array>() else {
        return (i64::MAX, i64::MIN);
    };
    let mut range = (i64::MAX, i64::MIN);
    for v in seqs.iter().flatten() {
        range = (range.0.min(v), range.1.max(v));
    }
    range
}

/// Closes a segment, publishes it create-if-absent, and records it pending.
async fn publish(
    client: &Client,
    store: &ColdStore,
    job: &Job,
    table: &Tiered,
    (writer, rows, min_seq, max_seq): (ArrowWriter<Vec<u8>>, usize, i64, i64),
    number: i64,
) -> Result<(), FlushError> {
    let bytes = Bytes::from(writer.into_inner()?);
    let segment_id = uuid::Uuid::new_v4();
    let key = format!(
        "{}/{:03}/segment-{:06}-{}.parquet",
        table.prefix,
        number / SEGMENTS_PER_FOLDER,
        number,
        &segment_id.simple().to_string()[..8]
    );
    let published = store.publish(&key, bytes).await?;
    super::failpoint::hit("after_publish");
    client
        .execute(
            "INSERT INTO coldwire.segments (segment_id, table_id, path, status, row_count, byte_size, min_seq, max_seq, \
                                            sha256, etag, schema_version, job_id, attempt) \
             VALUES ($1, $2, $3, 'pending', $4, $5, $6, $7, $8, $9, 1, $10, $11)",
            &[
                &segment_id,
                &table.id,
                &key,
                &(rows as i64),
                &(published.size as i64),
                &min_seq,
                &max_seq,
                &published.sha256,
                &published.etag,
                &job.id,
                &job.attempt,
            ],
        )
        .await?;
    super::failpoint::hit("after_pending_insert");
    Ok(())
}

/// Removes what earlier attempts of this job left: pending segments and their objects,
/// and objects under the table's prefix that no segment names (an attempt that died
/// between publishing and recording). Safe because only the holder of the table's flush
/// lock, which we are, writes under that prefix.
async fn clean_stale_attempts(
    client: &Client,
    store: &ColdStore,
    job: &Job,
    table: &Tiered,
) -> Result<(), FlushError> {
    let stale = client
        .query(
            "SELECT segment_id, path FROM coldwire.segments WHERE job_id = $1 AND attempt < $2 AND status = 'pending'",
            &[&job.id, &job.attempt],
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
        if !known.contains(&key) {
            tracing::info!(key, "collecting an orphan object of an earlier attempt");
            store.delete(&key).await?;
        }
    }
    Ok(())
}

/// The finalize transaction: activate this attempt's segments and prune exactly the
/// flushed (pk, seq) pairs from the mirror and their rows from the heap.
async fn finalize(
    client: &mut Client,
    job: &Job,
    table: &Tiered,
    rows: i64,
    segments: i32,
) -> Result<(), FlushError> {
    let returning = table
        .pk
        .iter()
        .map(|c| format!("m.{}", quote_ident(c)))
        .collect::<Vec<_>>()
        .join(", ");
    super::failpoint::hit("before_finalize");
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
    tx.batch_execute(&format!(
        "WITH gone AS (DELETE FROM coldwire.m_{id} m USING pg_temp.cw_pairs p WHERE {m_p} AND m.seq = p.seq RETURNING {returning}) \
         DELETE FROM ONLY {table} h USING gone WHERE {h_gone}",
        id = table.id,
        m_p = table.pk_equal("m", "p"),
        table = table.qualified,
        h_gone = table.pk_equal("h", "gone"),
    ))
    .await?;
    tx.execute(
        "UPDATE coldwire.jobs SET state = 'completed', finished_at = now(), rows_done = $3, segments = $4, heartbeat_at = now() \
         WHERE id = $1 AND attempt = $2",
        &[&job.id, &job.attempt, &rows, &segments],
    )
    .await?;
    tx.batch_execute("DELETE FROM coldwire.maintenance WHERE xid = pg_current_xact_id(); NOTIFY coldwire_catalog;").await?;
    super::failpoint::hit("before_finalize_commit");
    tx.commit().await?;
    client
        .batch_execute("DROP TABLE IF EXISTS pg_temp.cw_pairs")
        .await?;
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
