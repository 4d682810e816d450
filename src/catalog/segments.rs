//! A tiered table's cold state at one generation, as the catalog records it: its columns
//! and key, the segments active then with their statistics, the keys with more than one
//! cold version (`coldwire.overrides_<id>`), and what rows of older segments read for
//! columns added since. Read in one snapshot; cold reads take it as a value.

use std::collections::HashMap;

use arrow::array::{ArrayRef, AsArray};
use arrow::datatypes::Int64Type;
use futures_util::{pin_mut, TryStreamExt};
use tokio_postgres::Client;

use crate::segment::prune::{ColumnStats, SegmentMeta};
use crate::segment::writer::SegmentColumn;
use crate::values::ordered;
use crate::values::{ColdColumn, ColdError, ColdType, CopyDecoder, NumericRepr, ScalarType};

/// Rows per decoded batch while reading overrides.
const OVERRIDE_BATCH_ROWS: usize = 8192;

/// Why a table's cold state could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ColdStateError {
    #[error("{}", super::postgres_text(.0))]
    Postgres(#[from] tokio_postgres::Error),
    #[error(transparent)]
    Cold(#[from] ColdError),
    #[error("table {0} is not an active tiered table")]
    NotTiered(i64),
}

/// A tiered table's cold state at one generation: what a scan needs from the catalog.
#[derive(Debug, Clone)]
pub struct ColdTable {
    pub id: i64,
    /// `schema.table` as last seen by coldwire, for messages.
    pub name: String,
    pub generation: i64,
    pub columns: Vec<SegmentColumn>,
    /// Positions in `columns` of the pk, in key order.
    pub pk_positions: Vec<usize>,
    pub segments: Vec<SegmentMeta>,
    /// Keys (composite-key encoding) with more than one cold version: the newest cold seq.
    pub overrides: HashMap<Vec<u8>, i64>,
    /// Per column, what rows of segments written before the column was added read: the
    /// default Postgres gave existing rows (a one-row array), or NULL (`None`).
    pub missing: Vec<Option<ArrayRef>>,
    /// Loaded for a given generation (a transaction's), which may be past: a TRUNCATE
    /// since then deleted the overrides, so a scan keeps the newest seq per key itself.
    pub pinned: bool,
    /// The Arrow schema of a segment holding every column (`ColdTable::file_schema`),
    /// made once: every scan starts from it.
    pub full_schema: std::sync::OnceLock<arrow::datatypes::SchemaRef>,
}

impl ColdTable {
    /// Reads the table's segments, their stats and its overrides as of generation `at`
    /// (`None`: the current one), in one snapshot. A past generation's segments are those
    /// activated by then and not yet retired then; its overrides those recorded by then.
    ///
    /// # Errors
    /// Catalog failures; [`ColdStateError::NotTiered`], also for a generation the table has not
    /// reached.
    pub async fn load(
        client: &mut Client,
        table_id: i64,
        at: Option<i64>,
    ) -> Result<Self, ColdStateError> {
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await?;
        let row = tx
            .query_opt(
                "SELECT schema_name || '.' || table_name, generation, columns, pk_attnums FROM coldwire.tables \
                 WHERE id = $1 AND state = 'active'",
                &[&table_id],
            )
            .await?
            .ok_or(ColdStateError::NotTiered(table_id))?;
        let latest: i64 = row.get(1);
        let generation = at.unwrap_or(latest);
        if generation > latest {
            return Err(ColdStateError::NotTiered(table_id));
        }
        let columns = SegmentColumn::from_catalog(&row.get::<_, serde_json::Value>(2))
            .map_err(|e| ColdStateError::Cold(ColdError::Schema(e.to_string())))?;
        let pk_attnums: Vec<i16> = row.get(3);
        let pk_positions: Vec<usize> = pk_attnums
            .iter()
            .filter_map(|a| columns.iter().position(|c| c.attnum == *a))
            .collect();

        let mut segments: Vec<SegmentMeta> = Vec::new();
        for s in tx
            .query(
                &format!("SELECT segment_id, path, row_count FROM coldwire.segments g WHERE {AS_OF} ORDER BY path"),
                &[&table_id, &generation],
            )
            .await?
        {
            segments.push(SegmentMeta { segment_id: s.get(0), path: s.get(1), rows: s.get(2), columns: Vec::new() });
        }
        for s in tx
            .query(
                &format!("SELECT s.segment_id, s.attnum, s.min_value, s.max_value, s.null_count, s.nan_count, \
                        s.rg_min, s.rg_max, s.rg_null_count, s.rg_nan_count \
                 FROM coldwire.segment_stats s JOIN coldwire.segments g USING (segment_id) \
                 WHERE {AS_OF}"),
                &[&table_id, &generation],
            )
            .await?
        {
            let id: uuid::Uuid = s.get(0);
            if let Some(segment) = segments.iter_mut().find(|g| g.segment_id == id) {
                let mut stats = ColumnStats {
                    attnum: s.get(1),
                    min: s.get(2),
                    max: s.get(3),
                    null_count: s.get::<_, Option<i64>>(4).unwrap_or(0),
                    nan_count: s.get::<_, Option<i64>>(5).unwrap_or(0),
                    rg_min: s.get::<_, Option<Vec<Option<Vec<u8>>>>>(6).unwrap_or_default(),
                    rg_max: s.get::<_, Option<Vec<Option<Vec<u8>>>>>(7).unwrap_or_default(),
                    rg_null_count: s.get::<_, Option<Vec<i64>>>(8).unwrap_or_default(),
                    rg_nan_count: s.get::<_, Option<Vec<i64>>>(9).unwrap_or_default(),
                };
                let numeric = columns.iter().any(|c| {
                    c.attnum == stats.attnum
                        && matches!(c.ty, ColdType::Scalar(ScalarType::Numeric(NumericRepr::Decimal { .. })))
                });
                if numeric {
                    stats.place_specials();
                }
                segment.columns.push(stats);
            }
        }

        let mut columns = columns;
        for (_, attnum, how) in compared_columns(&tx, Some(table_id)).await? {
            if let Some(c) = columns.iter_mut().find(|c| c.attnum == attnum) {
                c.byte_ordered = how == Compared::AsBytes;
                c.nondeterministic = how == Compared::Nondeterministically;
            }
        }
        let overrides = load_overrides(&tx, table_id, generation, &columns, &pk_positions).await?;
        let missing = load_missing(&tx, &row.get::<_, serde_json::Value>(2), &columns).await?;
        tx.commit().await?;
        Ok(Self {
            id: table_id,
            name: row.get(0),
            generation,
            columns,
            pk_positions,
            segments,
            overrides,
            missing,
            pinned: at.is_some(),
            full_schema: std::sync::OnceLock::new(),
        })
    }
}

/// How Postgres compares the values of a column of a tiered table, where cold-side
/// evaluation must know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compared {
    /// As their bytes, also in order: text and varchar under the C or POSIX collation
    /// (libc), named or as the database's default (a libc default whose LC_COLLATE is C
    /// or POSIX).
    AsBytes,
    /// Under a nondeterministic collation: values of other bytes may be equal
    /// (`'Name5' = 'name5'` case-insensitively), so no comparison on it is made cold-side.
    Nondeterministically,
}

/// The columns of tiered tables (of `table_id`, or all) that Postgres compares otherwise
/// than their type's other columns ([`Compared`]): (table id, attnum, how).
///
/// # Errors
/// The catalog could not be read.
pub async fn compared_columns(
    client: &impl tokio_postgres::GenericClient,
    table_id: Option<i64>,
) -> Result<Vec<(i64, i16, Compared)>, tokio_postgres::Error> {
    // datlocprovider (Postgres 15): an ICU default collation orders otherwise whatever
    // datcollate says; before 15 every default was libc.
    let rows = client
        .query(
            "SELECT t.id, a.attnum, NOT c.collisdeterministic FROM coldwire.tables t \
             JOIN pg_catalog.pg_attribute a ON a.attrelid = t.relid AND a.attnum > 0 AND NOT a.attisdropped \
             JOIN pg_catalog.pg_collation c ON c.oid = a.attcollation \
             CROSS JOIN (SELECT d.datcollate::text AS collate, \
                                coalesce(pg_catalog.to_jsonb(d) ->> 'datlocprovider', 'c') AS provider \
                         FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database()) db \
             WHERE t.state = 'active' AND ($1::bigint IS NULL OR t.id = $1) \
               AND (NOT c.collisdeterministic \
                    OR (a.atttypid IN ('pg_catalog.text'::pg_catalog.regtype, 'pg_catalog.varchar'::pg_catalog.regtype) \
                        AND ((c.collname IN ('C', 'POSIX') AND c.collprovider = 'c') \
                             OR (c.collname = 'default' AND c.collnamespace = 'pg_catalog'::pg_catalog.regnamespace \
                                 AND db.provider = 'c' AND db.collate IN ('C', 'POSIX')))))",
            &[&table_id],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            let how = if r.get::<_, bool>(2) {
                Compared::Nondeterministically
            } else {
                Compared::AsBytes
            };
            (r.get(0), r.get(1), how)
        })
        .collect())
}

/// Per column of `columns`, the value rows written before it was added read: the
/// catalog's `missing` text (Postgres's `attmissingval`), converted by Postgres to the
/// column's type and read back in binary.
async fn load_missing(
    tx: &tokio_postgres::Transaction<'_>,
    catalog: &serde_json::Value,
    columns: &[SegmentColumn],
) -> Result<Vec<Option<ArrayRef>>, ColdStateError> {
    let mut out = Vec::with_capacity(columns.len());
    for (column, entry) in columns.iter().zip(catalog.as_array().into_iter().flatten()) {
        let (Some(text), Some(ty)) = (entry["missing"].as_str(), entry["type"].as_str()) else {
            out.push(None);
            continue;
        };
        let mut decoder =
            CopyDecoder::new(vec![ColdColumn::new(column.name.clone(), column.ty)], 1)?;
        let literal = crate::sql::quote::sql_literal(text);
        // `ty` is format_type's output, recorded by coldwire from pg_attribute.
        let stream = tx
            .copy_out(&format!(
                "COPY (SELECT {literal}::{ty}) TO STDOUT (FORMAT binary)"
            ))
            .await?;
        pin_mut!(stream);
        while let Some(chunk) = stream.try_next().await? {
            decoder.decode(&chunk)?;
        }
        decoder.finish()?;
        out.push(decoder.next_batch().map(|b| b.column(0).clone()));
    }
    out.resize(columns.len(), None);
    Ok(out)
}

/// Segments `g` of table `$1` that were active at generation `$2`.
const AS_OF: &str = "g.table_id = $1 AND g.activated_generation <= $2 \
     AND (g.status = 'active' OR (g.status = 'retired' AND g.retired_generation > $2))";

/// `coldwire.overrides_<id>` as of `generation`, as a map from encoded key to seq, read by
/// binary COPY.
async fn load_overrides(
    tx: &tokio_postgres::Transaction<'_>,
    table_id: i64,
    generation: i64,
    columns: &[SegmentColumn],
    pk_positions: &[usize],
) -> Result<HashMap<Vec<u8>, i64>, ColdStateError> {
    let mut cold_columns: Vec<ColdColumn> = pk_positions
        .iter()
        .map(|&p| ColdColumn::new(columns[p].name.clone(), columns[p].ty))
        .collect();
    let pk_list = crate::sql::quote::column_list(cold_columns.iter().map(|c| c.name.as_str()), "");
    cold_columns.push(ColdColumn::new("seq", ColdType::Scalar(ScalarType::Int8)));
    let mut decoder = CopyDecoder::new(cold_columns, OVERRIDE_BATCH_ROWS)?;
    // The generation is an integer of the catalog's, not client data.
    let stream = tx.copy_out(&format!("COPY (SELECT {pk_list}, max(seq) FROM coldwire.overrides_{table_id} WHERE generation <= {generation} GROUP BY {pk_list}) TO STDOUT (FORMAT binary)")).await?;
    pin_mut!(stream);
    let mut out = HashMap::new();
    let mut collect = |decoder: &mut CopyDecoder| {
        while let Some(batch) = decoder.next_batch() {
            let seq_position = batch.num_columns() - 1;
            let seqs = batch
                .column(seq_position)
                .as_primitive::<Int64Type>()
                .clone();
            let positions: Vec<usize> = (0..seq_position).collect();
            for row in 0..batch.num_rows() {
                if let Some(key) = ordered::encode_key(&batch, &positions, row) {
                    out.insert(key, seqs.value(row));
                }
            }
        }
    };
    while let Some(chunk) = stream.try_next().await? {
        decoder.decode(&chunk)?;
        collect(&mut decoder);
    }
    decoder.finish()?;
    collect(&mut decoder);
    Ok(out)
}
