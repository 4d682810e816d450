//! The end of a flush (DESIGN §5 steps 6 and 7): finalize activates the job's segments,
//! records overrides and moves the table's generation in one transaction under the
//! table's exclusive lock; then the flushed pairs are pruned from the mirror and the heap
//! in chunks, each under that lock too.

use arrow::array::RecordBatch;
use futures_util::TryStreamExt;
use tokio_postgres::Client;

use super::table::{FlushError, Tiered};
use super::write::copy_batches_in;
use crate::catalog::jobs::Job;
use crate::catalog::locks::TABLE_LOCK_CLASS;
use crate::segment::SEQ_COLUMN;
use crate::sql::quote::column_list;
use crate::sql::quote::quote_ident;
use crate::store::ColdStore;
use crate::values::ColdColumn;
use crate::values::ColdType;
use crate::values::ScalarType;

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

/// The finalize transaction: activate this attempt's segments, record overrides and
/// widen the bounds (DESIGN §5 step 6), retried with backoff while its locks cannot be
/// had (a rolled-back try changed nothing); then [`prune_flushed`] removes exactly the
/// flushed (pk, seq) pairs from the mirror and their rows from the heap, in chunks.
pub(super) async fn finalize(
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
/// Each chunk's transaction also records the job's heartbeat.
pub(super) async fn prune_flushed(
    client: &mut Client,
    job: &Job,
    table: &Tiered,
    rows: i64,
    segments: i32,
) -> Result<(), FlushError> {
    prune_pairs(client, job, table, rows).await?;
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

/// The prune of [`prune_flushed`], by `job` (its heartbeat, at `rows`), without
/// completing it.
pub(super) async fn prune_pairs(
    client: &mut Client,
    job: &Job,
    table: &Tiered,
    rows: i64,
) -> Result<(), FlushError> {
    let pairs: i64 = client
        .query_one(
            "SELECT coalesce(max(n), 0)::bigint FROM pg_temp.cw_pairs",
            &[],
        )
        .await?
        .get(0);
    let started = std::time::Instant::now();
    let mut statements = PruneStatements::prepare(client, table).await?;
    let (mut from, mut chunks, mut by_range) = (0i64, 0u32, 0u32);
    while from < pairs {
        let to = from + PRUNE_CHUNK_ROWS;
        // Found before the chunk's transaction: writers wait for the prune alone.
        let range = statements.dense_range(client, from, to).await?;
        chunks += 1;
        by_range += u32::from(range.is_some());
        let mut tries = LockRetries::default();
        loop {
            match prune_chunk(client, job, table, &mut statements, (from, to), range, rows).await {
                Err(e) if tries.again(&e, "pruning").await => {}
                done => break done?,
            }
        }
        from = to;
        crate::failpoint::hit("after_prune_chunk").await;
    }
    tracing::info!(
        table = %table.qualified,
        pairs,
        chunks,
        by_range,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "pruned the flushed pairs from the mirror and their rows from the heap"
    );
    // Every read plans and guards with an index range scan of the mirror over the cold
    // key range: right after a large prune that scan would visit every dead entry until
    // autovacuum comes by.
    if pairs >= VACUUM_MIRROR_AFTER_PAIRS {
        let vacuum = format!("VACUUM (ANALYZE) coldwire.m_{}", table.id);
        if let Err(e) = client.batch_execute(&vacuum).await {
            tracing::warn!(table = %table.qualified, error = %crate::catalog::postgres_text(&e), "could not vacuum the mirror after the flush; autovacuum will");
        }
    }
    // coldwire.status counts hot and mirror rows from Postgres's running live counts,
    // which a backend reports at most once a second: report the prune's deletes now, so
    // they show by the time the job reads completed (Postgres 15 and later).
    client
        .batch_execute(
            "DO $$ BEGIN IF current_setting('server_version_num')::int >= 150000 THEN \
             PERFORM pg_stat_force_next_flush(); END IF; END $$",
        )
        .await?;
    Ok(())
}

/// Pruned pairs past which the flush vacuums the mirror when it is done.
const VACUUM_MIRROR_AFTER_PAIRS: i64 = 10_000;

/// A chunk is pruned by a range of its key (one integer column) when the range holds at
/// most this many keys per pair of the chunk.
const DENSE_KEYS_PER_PAIR: i64 = 4;

/// The statements the prune runs for every chunk, prepared once (each saves a round
/// trip a chunk); the DELETE is prepared for the table's name as it is when a chunk runs.
struct PruneStatements {
    /// The lowest and highest key of a chunk's pairs, and their count, when the key is
    /// one integer column.
    bounds: Option<tokio_postgres::Statement>,
    /// The DELETE by table name and kind of chunk (by range or not).
    deletes: Vec<(String, bool, tokio_postgres::Statement)>,
}

impl PruneStatements {
    async fn prepare(client: &Client, table: &Tiered) -> Result<Self, FlushError> {
        let bounds = if table.key_is_one_integer() {
            Some(
                client
                    .prepare(&format!(
                        "SELECT min({first})::int8, max({first})::int8, count(*) FROM pg_temp.cw_pairs WHERE n > $1 AND n <= $2",
                        first = quote_ident(&table.pk[0]),
                    ))
                    .await?,
            )
        } else {
            None
        };
        Ok(Self {
            bounds,
            deletes: Vec::new(),
        })
    }

    /// The lowest and highest key of the pairs numbered in `(from, to]`, when the key is
    /// one integer column (a range of a composite key's first column may hold any number
    /// of rows) and the range between them is dense with the chunk's keys (at most
    /// [`DENSE_KEYS_PER_PAIR`] keys per pair): the chunk of a table whose keys grow with
    /// its inserts, as its oldest rows go cold.
    async fn dense_range(
        &self,
        client: &Client,
        from: i64,
        to: i64,
    ) -> Result<Option<(i64, i64)>, FlushError> {
        let Some(bounds) = &self.bounds else {
            return Ok(None);
        };
        let row = client.query_one(bounds, &[&from, &to]).await?;
        let (Some(low), Some(high), pairs) = (
            row.get::<_, Option<i64>>(0),
            row.get::<_, Option<i64>>(1),
            row.get::<_, i64>(2),
        ) else {
            return Ok(None);
        };
        let keys = i128::from(high) - i128::from(low) + 1;
        Ok((keys <= i128::from(pairs) * i128::from(DENSE_KEYS_PER_PAIR)).then_some((low, high)))
    }

    /// The DELETE of a chunk's pairs from the mirror and their rows from the heap `name`:
    /// `$1`, `$2` number the pairs; by range, `$3` and `$4` bound the key.
    async fn delete(
        &mut self,
        tx: &tokio_postgres::Transaction<'_>,
        table: &Tiered,
        name: &str,
        by_range: bool,
    ) -> Result<tokio_postgres::Statement, FlushError> {
        if let Some((_, _, s)) = self
            .deletes
            .iter()
            .find(|(n, r, _)| n == name && *r == by_range)
        {
            return Ok(s.clone());
        }
        let (in_range_m, in_range_h) = if by_range {
            let first = quote_ident(&table.pk[0]);
            (
                format!(" AND m.{first} BETWEEN $3::int8 AND $4::int8"),
                format!(" AND h.{first} BETWEEN $3::int8 AND $4::int8"),
            )
        } else {
            (String::new(), String::new())
        };
        let statement = tx
            .prepare(&format!(
                "WITH gone AS (DELETE FROM coldwire.m_{id} m USING pg_temp.cw_pairs p \
                               WHERE p.n > $1 AND p.n <= $2 AND {m_p} AND m.seq = p.seq{in_range_m} RETURNING {returning}) \
                 DELETE FROM ONLY {name} h USING gone WHERE {h_gone}{in_range_h}",
                id = table.id,
                m_p = table.pk_equal("m", "p"),
                returning = table.pk_list("m."),
                h_gone = table.pk_equal("h", "gone"),
            ))
            .await?;
        self.deletes
            .push((name.to_owned(), by_range, statement.clone()));
        Ok(statement)
    }
}

/// One transaction of [`prune_flushed`]: the pairs numbered in `(from, to]`, whose first
/// key column lies in `range` when [`PruneStatements::dense_range`] found one. `rows` is
/// the job's row count, for its heartbeat.
async fn prune_chunk(
    client: &mut Client,
    job: &Job,
    table: &Tiered,
    statements: &mut PruneStatements,
    (from, to): (i64, i64),
    range: Option<(i64, i64)>,
    rows: i64,
) -> Result<(), FlushError> {
    let joins = if range.is_some() {
        // A dense chunk: one index range scan of the mirror and one of the heap, each
        // joined to the chunk's pairs by hashing them (about half the time of two probes
        // a pair on a 50-column table: bench/README).
        "SET LOCAL enable_nestloop = off"
    } else {
        // Each pair is found by key, in the mirror and then in the heap: index nested
        // loops. With the join's rows misestimated (a mirror not yet analyzed, key and
        // seq taken as independent) the planner may hash the chunk's pairs and scan the
        // whole mirror for each chunk instead, which makes the prune quadratic in the
        // mirror's size (49 against 19 ms a chunk at 390,000 mirror rows).
        "SET LOCAL enable_hashjoin = off"
    };
    // The heap delete's capture trigger keeps the chunk's rows as its transition table:
    // in memory, not in a temporary file (a 50-column table's 5,000 rows take 3 MB).
    // With the lock and the check, in the same round trip: the job's heartbeat and the
    // table's name now.
    let (tx, then) = locked_transaction(
        client,
        job,
        table,
        &[
            "SET LOCAL work_mem = '64MB'",
            joins,
            "SET LOCAL enable_mergejoin = off",
        ],
        &[
            &format!(
                "UPDATE coldwire.jobs SET heartbeat_at = now(), rows_done = {rows} \
                 WHERE id = {} AND attempt = {} AND state = 'running'",
                job.id, job.attempt
            ),
            &name_by_relid(table.id),
        ],
    )
    .await?;
    // The table by its current name: a rename after the activation must not leave the
    // flushed rows in the heap (the prune does not depend on the columns).
    let name = current_name(&tx, table, &then[1]).await?;
    let delete = statements
        .delete(&tx, table, &name, range.is_some())
        .await?;
    match range {
        Some((low, high)) => tx.execute(&delete, &[&from, &to, &low, &high]).await?,
        None => tx.execute(&delete, &[&from, &to]).await?,
    };
    tx.batch_execute("DELETE FROM coldwire.maintenance WHERE xid = pg_current_xact_id()")
        .await?;
    tx.commit().await?;
    Ok(())
}

/// The rows each statement of a simple query returned, in order.
fn statement_rows(
    messages: Vec<tokio_postgres::SimpleQueryMessage>,
) -> Vec<Vec<tokio_postgres::SimpleQueryRow>> {
    let mut out = vec![Vec::new()];
    for m in messages {
        match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => {
                if let Some(rows) = out.last_mut() {
                    rows.push(r);
                }
            }
            tokio_postgres::SimpleQueryMessage::CommandComplete(_) => out.push(Vec::new()),
            _ => {}
        }
    }
    out.pop();
    out
}

/// The query of table `id`'s name now (schema-qualified, quoted), by its relid.
fn name_by_relid(id: i64) -> String {
    format!(
        "SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) \
         FROM coldwire.tables t JOIN pg_catalog.pg_class c ON c.oid = t.relid \
         JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE t.id = {id}"
    )
}

/// The table's name now (schema-qualified, quoted), locked ROW EXCLUSIVE: `named` is
/// what [`name_by_relid`] returned before the lock; the table is locked by that name and
/// looked up again in the same round trip, so no rename can slip in between.
async fn current_name(
    tx: &tokio_postgres::Transaction<'_>,
    table: &Tiered,
    named: &[tokio_postgres::SimpleQueryRow],
) -> Result<String, FlushError> {
    let name_of = |rows: &[tokio_postgres::SimpleQueryRow]| {
        rows.first()
            .and_then(|r| r.get(0))
            .map(str::to_owned)
            .ok_or_else(|| FlushError::Table(table.id, "the table is gone".into()))
    };
    let mut name = name_of(named)?;
    loop {
        let locked = statement_rows(
            tx.simple_query(&format!(
                "LOCK TABLE ONLY {name} IN ROW EXCLUSIVE MODE; {}; {}",
                name_by_relid(table.id),
                super::table::unservable_query(table.id)
            ))
            .await?,
        );
        let again = name_of(locked.get(1).map_or(&[], Vec::as_slice))?;
        if again == name {
            let reasons: Vec<&str> = locked
                .get(2)
                .map_or(&[][..], Vec::as_slice)
                .iter()
                .filter_map(|r| r.get(0))
                .collect();
            super::table::unservable(table.id, &reasons)?;
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
    super::table::check_not_subscribed(tx, table.id).await?;
    super::table::check_servable(tx, table.id).await?;
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
pub(super) async fn pairs_from_segments(
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
/// attempt's job row, with the finalize's lock timeout and `settings` (`SET LOCAL`
/// statements); then `then`'s statements run, whose rows are returned, one list a
/// statement. All in one round trip.
///
/// # Errors
/// The job was reclaimed ([`FlushError::Fenced`]); the lock timed out.
async fn locked_transaction<'c>(
    client: &'c mut Client,
    job: &Job,
    table: &Tiered,
    settings: &[&str],
    then: &[&str],
) -> Result<
    (
        tokio_postgres::Transaction<'c>,
        Vec<Vec<tokio_postgres::SimpleQueryRow>>,
    ),
    FlushError,
> {
    let tx = client.transaction().await?;
    // Each statement sees what committed before it, whatever the server's default: the
    // checks made once the table is locked (its name, what it gained) must see DDL that
    // committed while the lock was awaited.
    let mut statements = vec![
        "SET TRANSACTION ISOLATION LEVEL READ COMMITTED".to_owned(),
        format!("SET LOCAL lock_timeout = '{FINALIZE_LOCK_TIMEOUT}'"),
    ];
    statements.extend(settings.iter().map(|s| (*s).to_owned()));
    statements.push("INSERT INTO coldwire.maintenance (xid) VALUES (pg_current_xact_id())".into());
    statements.push(format!(
        "SELECT pg_advisory_xact_lock({TABLE_LOCK_CLASS}, {})",
        table.id as i32
    ));
    statements.push(format!(
        "SELECT 1 FROM coldwire.jobs WHERE id = {} AND attempt = {} AND state = 'running' FOR UPDATE",
        job.id, job.attempt
    ));
    let checked = statements.len() - 1;
    statements.extend(then.iter().map(|s| (*s).to_owned()));
    let mut rows = statement_rows(tx.simple_query(&statements.join("; ")).await?);
    if rows.len() != statements.len() {
        return Err(FlushError::Table(
            table.id,
            "Postgres answered the flush's statements with fewer results than statements".into(),
        ));
    }
    if rows[checked].is_empty() {
        return Err(FlushError::Fenced(job.id, job.attempt));
    }
    Ok((tx, rows.split_off(checked + 1)))
}

async fn finalize_once(
    client: &mut Client,
    job: &Job,
    table: &Tiered,
    overrides: bool,
) -> Result<(), FlushError> {
    let (tx, _) = locked_transaction(client, job, table, &[], &[]).await?;
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

/// Completes a job that found nothing to flush.
pub(super) async fn finalize_empty(client: &Client, job: &Job) -> Result<(), FlushError> {
    client
        .execute(
            "UPDATE coldwire.jobs SET state = 'completed', finished_at = now(), rows_total = 0 \
             WHERE id = $1 AND attempt = $2 AND state = 'running'",
            &[&job.id, &job.attempt],
        )
        .await?;
    Ok(())
}
