//! Steps 2 to 4 of a flush (DESIGN §5): the exact (pk, seq) pairs taken and their rows, in
//! one snapshot, streamed out of Postgres by binary COPY into Arrow, written to segments
//! of at most `max_rows_per_file` rows, each published to the store and recorded pending.

use arrow::array::{RecordBatch, UInt32Array};
use arrow::compute::take;
use bytes::BytesMut;
use futures_util::{pin_mut, SinkExt, TryStreamExt};
use tokio_postgres::Client;

use super::probe::ColdKeyProbe;
use super::run::Selection;
use super::select::age_order;
use super::table::{FlushError, Tiered};
use crate::catalog::jobs::{self, Job};
use crate::segment::writer::{SegmentColumn, SegmentFacts, SegmentWriter};
use crate::segment::{writer_properties, OP_COLUMN, SEQ_COLUMN};
use crate::sql::quote::quote_ident;
use crate::store::{ColdStore, Upload, UPLOAD_PART_BYTES};
use crate::values::{
    arrow_schema, encode_batch, encode_header, encode_trailer, ColdColumn, ColdType, CopyDecoder,
    ScalarType,
};

/// Rows decoded per Arrow batch. A batch of wide rows is tens of MiB: with 65,536 rows
/// the flush of bench/flush peaked at 302 MiB RSS, with 16,384 at 225 MiB, and flushed
/// no slower.
const BATCH_ROWS: usize = 16_384;
/// Segments per folder of the table's prefix.
const SEGMENTS_PER_FOLDER: i64 = 100;

/// What the segments of a flush hold.
pub(super) struct Written {
    pub segments: i32,
    /// Some keys taken may already have a cold version: they get an override at finalize.
    pub overrides: bool,
}

/// Writes and publishes the segments of the rows `selection` takes, and leaves the keys that
/// may have a cold version already in `pg_temp.cw_maybe_cold` for finalize.
pub(super) async fn write_segments(
    client: &mut Client,
    side: &Client,
    store: &ColdStore,
    job: &Job,
    table: &Tiered,
    selection: Selection,
) -> Result<Written, FlushError> {
    let copy = take_pairs(client, table, selection).await?;
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
    let props = writer_properties(&table.pk, &schema, table.policy.compression)?;
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
    let mut segment_number: i64 = client
        .query_one(
            "SELECT count(*) FROM coldwire.segments WHERE table_id = $1",
            &[&table.id],
        )
        .await?
        .get(0);
    let new_segment = |number: i64| -> Result<OpenSegment, FlushError> {
        let (segment_id, key) = segment_key(table, number);
        Ok(OpenSegment {
            segment_id,
            writer: SegmentWriter::new(
                schema.clone(),
                props.clone(),
                segment_columns.clone(),
                pk_positions.clone(),
                seq_position,
            )?,
            upload: store.upload(&key),
            key,
        })
    };
    let mut segments = 0i32;
    let mut rows_done = 0i64;
    let mut current: Option<OpenSegment> = None;

    let streamed = async {
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
                    let open = match &mut current {
                        Some(open) => open,
                        None => current.insert(new_segment(segment_number + 1)?),
                    };
                    let take = batch.num_rows().min(max_rows - open.writer.rows());
                    open.writer.write(&batch.slice(0, take))?;
                    batch = batch.slice(take, batch.num_rows() - take);
                    // Closed row groups go up while the next ones are encoded.
                    if open.writer.produced() >= UPLOAD_PART_BYTES {
                        let produced = open.writer.take_produced();
                        open.upload.write(produced).await?;
                    }
                    if open.writer.rows() >= max_rows {
                        rows_done += open.writer.rows() as i64;
                        segment_number += 1;
                        publish(side, job, table, &mut current).await?;
                        segments += 1;
                        jobs::heartbeat(side, job, rows_done).await?;
                    }
                }
            }
            if chunk.is_none() {
                break;
            }
        }
        if current.as_ref().is_some_and(|open| open.writer.rows() > 0) {
            segment_number += 1;
            publish(side, job, table, &mut current).await?;
            segments += 1;
        }
        Ok::<_, FlushError>(())
    }
    .await;
    if let Err(e) = streamed {
        if let Some(open) = current.take() {
            open.upload.abort().await;
        }
        return Err(e);
    }
    let overrides = !maybe_cold.is_empty();
    if overrides {
        load_maybe_cold(client, table, &pk_cold_columns, &maybe_cold).await?;
    }
    client.batch_execute("COMMIT").await?;
    Ok(Written {
        segments,
        overrides,
    })
}

/// Step 2: opens the flush's snapshot transaction on `client`, takes the exact (pk, seq)
/// pairs `selection` names into `pg_temp.cw_pairs`, and returns the COPY that streams their
/// rows (deleted keys as tombstones where older cold versions may exist), in key order.
async fn take_pairs(
    client: &Client,
    table: &Tiered,
    selection: Selection,
) -> Result<String, FlushError> {
    let has_cold: bool = client
        .query_one("SELECT EXISTS (SELECT 1 FROM coldwire.segments WHERE table_id = $1 AND status = 'active')", &[&table.id])
        .await?
        .get(0);
    let pk_list = table.pk_list("");
    let pairs = match selection {
        Selection::UpToSeq(cutoff) => {
            format!(
                "SELECT {pk_list}, seq FROM coldwire.m_{id} WHERE seq <= {cutoff}",
                id = table.id
            )
        }
        Selection::Oldest(n) => {
            let order = match table.policy.age_rule() {
                Some((column, _)) => age_order("m", "h", &table.pk[0], column),
                None => "m.seq".into(),
            };
            format!(
                "SELECT {m_pk}, m.seq FROM coldwire.m_{id} m LEFT JOIN ONLY {heap} h ON {on} ORDER BY {order} LIMIT {n}",
                m_pk = table.pk_list("m."),
                id = table.id,
                heap = table.qualified,
                on = table.pk_equal("h", "m"),
            )
        }
    };
    client
        .batch_execute(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ; \
             DROP TABLE IF EXISTS pg_temp.cw_pairs; \
             CREATE TEMP TABLE cw_pairs AS SELECT {pk_list}, seq, row_number() OVER () AS n FROM ({pairs}) s; \
             CREATE INDEX ON pg_temp.cw_pairs (n);"
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
    Ok(format!(
        "COPY (SELECT {cols}, p.seq, (CASE WHEN h.{first_pk} IS NULL THEN {deleted} ELSE {live} END)::int2 \
         FROM pg_temp.cw_pairs p LEFT JOIN ONLY {table} h ON {on} {tombstones} ORDER BY {p_pk}) TO STDOUT (FORMAT binary)",
        cols = select_columns.join(", "),
        table = table.qualified,
        on = table.pk_equal("h", "p"),
        p_pk = table.pk_list("p."),
        deleted = crate::segment::op::DELETED,
        live = crate::segment::op::LIVE,
    ))
}

/// A segment being written and uploaded.
struct OpenSegment {
    writer: SegmentWriter,
    upload: Upload,
    segment_id: uuid::Uuid,
    key: String,
}

/// A new segment id, and the key of the table's segment `number` with that id (whose
/// first 8 hex digits make the key unique).
fn segment_key(table: &Tiered, number: i64) -> (uuid::Uuid, String) {
    let segment_id = uuid::Uuid::new_v4();
    let key = format!(
        "{}/{:03}/segment-{:06}-{}.parquet",
        table.prefix,
        number / SEGMENTS_PER_FOLDER,
        number,
        &segment_id.simple().to_string()[..8]
    );
    (segment_id, key)
}

/// Closes the open segment (`current`), completes its upload (create-if-absent), and
/// records it pending with its stats. The segment stays in `current` until its upload
/// completes, so the caller aborts the upload of any failure before that.
async fn publish(
    client: &Client,
    job: &Job,
    table: &Tiered,
    current: &mut Option<OpenSegment>,
) -> Result<(), FlushError> {
    let Some(open) = current.as_mut() else {
        return Ok(());
    };
    let started = std::time::Instant::now();
    let (bytes, facts) = open.writer.finish()?;
    let encoded = started.elapsed();
    open.upload.write(bytes).await?;
    let Some(OpenSegment {
        upload,
        segment_id,
        key,
        ..
    }) = current.take()
    else {
        return Ok(());
    };
    // A failure here aborts the upload itself.
    let published = upload.finish().await?;
    tracing::info!(
        key,
        rows = facts.rows,
        bytes = published.size,
        finish_ms = encoded.as_millis() as u64,
        store_ms = (started.elapsed() - encoded).as_millis() as u64,
        "segment published"
    );
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
pub(super) async fn copy_batches_in(
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
