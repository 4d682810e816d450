//! Brings the catalog in step with DDL that ran on tiered tables (DESIGN §7), through
//! coldwire or on a direct connection. Tiered tables are tracked by relid, and the table
//! that carries a table's capture triggers is the one coldwire's rows belong to:
//!
//! - **Dropped** (the relid is gone and no table carries the triggers, which went with
//!   it): the table is untiered in one transaction (state `dropped`, generation bumped so
//!   every cached plan fails its guard, segments retired, jobs failed, capture function,
//!   mirror, overrides and bounds dropped), and [`collect_dropped`] later deletes its
//!   objects from the cold store and then its catalog rows.
//! - **Restored** (the relid is gone but another table carries the triggers, as after a
//!   dump and restore, where oids change): the row follows that table.
//! - **Renamed or moved to another schema**: the names are recorded and the capture
//!   function is made again for the new name (until then it names the table by oid:
//!   `CaptureSpec::on_table`).
//! - **Columns added**: each is recorded with what rows written before it read (the
//!   `attmissingval` Postgres keeps for them, or NULL), and the generation is bumped so
//!   every cached cold state is read again with the new column. Segments keep the columns
//!   they were written with; reads give them the new ones (`ColdTable::widen`).
//!
//! Each change is made in its own transaction that locks the table's catalog row and looks
//! again, so proxies reconciling at once change each table once. Run by the read path
//! when it reads the list of tiered tables after one of its sessions ran such DDL (so DDL
//! through coldwire is followed before the client's next statement), and by the flush
//! executor every [`RECONCILE_INTERVAL`] (DDL on other connections).

use std::time::Duration;

use tokio_postgres::{Client, GenericClient};

use super::capture::{drop_capture_objects, CaptureSpec};
use crate::segment::writer::SegmentColumn;
use crate::store::{ColdStore, StoreError};

/// The payload of the `coldwire_catalog` notification that DDL was followed: proxies read
/// their list of tiered tables again.
pub const DDL_PAYLOAD: &str = "ddl";

/// How often the flush executor reconciles (DDL on direct connections).
pub const RECONCILE_INTERVAL: Duration = Duration::from_secs(1);

/// Active tiered tables whose relid is gone or whose name changed (`$1`: only this id, or
/// every table when NULL), with their current names and the table carrying their capture
/// triggers.
const CHANGED: &str = "SELECT t.id, c.oid IS NOT NULL, n.nspname::text, c.relname::text, \
        (SELECT tg.tgrelid FROM pg_catalog.pg_trigger tg \
          WHERE tg.tgfoid = pg_catalog.to_regprocedure(pg_catalog.format('coldwire.%I()', 'capture_' || t.id))::oid \
          LIMIT 1) \
     FROM coldwire.tables t \
     LEFT JOIN pg_catalog.pg_class c ON c.oid = t.relid \
     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
     WHERE t.state = 'active' AND ($1::bigint IS NULL OR t.id = $1) \
       AND (c.oid IS NULL OR n.nspname <> t.schema_name OR c.relname <> t.table_name)";

/// Columns of active tiered tables (`$1`: only this id, or every table when NULL) that
/// the catalog does not record, in attnum order: attnum, name, type (format_type), type
/// oid, typmod, the text of the value existing rows read (`attmissingval`, whose text is
/// an array of the one value's text), and whether the column has a default.
const ADDED: &str = "SELECT t.id, a.attnum, a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod),         a.atttypid, a.atttypmod,         CASE WHEN a.atthasmissing THEN (a.attmissingval::text::text[])[1] END,         EXISTS (SELECT 1 FROM pg_catalog.pg_attrdef d WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum)      FROM coldwire.tables t      JOIN pg_catalog.pg_attribute a ON a.attrelid = t.relid AND a.attnum > 0 AND NOT a.attisdropped      WHERE t.state = 'active' AND ($1::bigint IS NULL OR t.id = $1)        AND NOT t.columns @> pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object('attnum', a.attnum))      ORDER BY t.id, a.attnum";

/// Puts back what signed rehydrations (catalog v13) rely on, where something undid it: a
/// secret, if its row was deleted (rehydrations are refused meanwhile), and no unsigned
/// rehydrate function in schema `coldwire` (a proxy of an older build that is still
/// running makes one again when it follows a rename; dropped here within one
/// [`RECONCILE_INTERVAL`]).
///
/// # Errors
/// Catalog failures.
pub async fn repair_signing(client: &Client) -> Result<(), tokio_postgres::Error> {
    let made = client
        .execute(
            "INSERT INTO coldwire.secret (key) SELECT pg_catalog.sha256(pg_catalog.convert_to(\
             pg_catalog.gen_random_uuid()::text || pg_catalog.gen_random_uuid()::text \
             || pg_catalog.gen_random_uuid()::text, 'UTF8')) \
             WHERE NOT EXISTS (SELECT 1 FROM coldwire.secret) ON CONFLICT DO NOTHING",
            &[],
        )
        .await?;
    if made > 0 {
        tracing::warn!("coldwire.secret was empty: a new secret was made");
    }
    let unsigned = client
        .query(
            "SELECT p.oid::pg_catalog.regprocedure::text FROM pg_catalog.pg_proc p \
             WHERE p.pronamespace = 'coldwire'::pg_catalog.regnamespace \
               AND p.proname ~ '^rehydrate(_[0-9]+)?$' \
               AND NOT (p.pronargs = 8 AND p.proargtypes[7] = 'pg_catalog.bytea'::pg_catalog.regtype)",
            &[],
        )
        .await?;
    for row in unsigned {
        let function: String = row.get(0);
        tracing::warn!(%function, "dropping an unsigned rehydrate function (made by an older coldwire build?)");
        client
            .batch_execute(&format!("DROP FUNCTION IF EXISTS {function}"))
            .await?;
    }
    Ok(())
}

/// What [`reconcile`] changed, by table id.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reconciled {
    pub dropped: Vec<i64>,
    pub restored: Vec<i64>,
    pub renamed: Vec<i64>,
    pub columns_added: Vec<i64>,
}

impl Reconciled {
    pub fn is_empty(&self) -> bool {
        self.dropped.is_empty()
            && self.restored.is_empty()
            && self.renamed.is_empty()
            && self.columns_added.is_empty()
    }
}

/// Follows every drop, restore and rename of a tiered table since the last call.
///
/// # Errors
/// Catalog failures (what was changed before stays changed).
pub async fn reconcile(client: &mut Client) -> Result<Reconciled, tokio_postgres::Error> {
    repair_signing(client).await?;
    let mut done = Reconciled::default();
    let found = client.query(CHANGED, &[&None::<i64>]).await?;
    for row in found {
        let id: i64 = row.get(0);
        let tx = client.transaction().await?;
        let again = match lock_active(&tx, id).await? {
            true => tx.query_opt(CHANGED, &[&Some(id)]).await?,
            false => None,
        };
        let Some(again) = again else {
            continue;
        };
        let exists: bool = again.get(1);
        let carrier: Option<u32> = again.get(4);
        match (exists, carrier) {
            (false, None) => {
                untier_dropped(&tx, id).await?;
                done.dropped.push(id);
            }
            (false, Some(relid)) => {
                tx.execute(
                    "UPDATE coldwire.tables SET relid = $2 WHERE id = $1",
                    &[&id, &relid],
                )
                .await?;
                follow_name(&tx, id).await?;
                done.restored.push(id);
            }
            (true, _) => {
                follow_name(&tx, id).await?;
                done.renamed.push(id);
            }
        }
        notify_ddl(&tx).await?;
        tx.commit().await?;
    }
    let added: Vec<i64> = client
        .query(ADDED, &[&None::<i64>])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    for id in added.into_iter().collect::<std::collections::BTreeSet<_>>() {
        let tx = client.transaction().await?;
        if !lock_active(&tx, id).await? {
            continue;
        }
        let mut entries = Vec::new();
        for row in tx.query(ADDED, &[&Some(id)]).await? {
            let (attnum, name, ty): (i16, String, String) = (row.get(1), row.get(2), row.get(3));
            let (type_oid, typmod): (u32, i32) = (row.get(4), row.get(5));
            let missing: Option<String> = row.get(6);
            let has_default: bool = row.get(7);
            if let Err(e) = crate::values::ColdType::for_column(type_oid, typmod) {
                tracing::error!(table_id = id, column = %name, error = %e, "a column added to a tiered table has a type coldwire cannot store cold: its reads and flushes fail until the column is dropped");
                entries.clear();
                break;
            }
            if missing.is_none() && has_default {
                tracing::warn!(table_id = id, column = %name, "column added with a default Postgres did not keep for existing rows (a volatile default, or the table was rewritten since): its cold rows read NULL");
            }
            let mut entry = SegmentColumn::catalog_entry(attnum, &name, &ty, type_oid, typmod);
            entry["missing"] = missing.into();
            entries.push(entry);
        }
        if entries.is_empty() {
            continue;
        }
        tx.execute(
            "UPDATE coldwire.tables SET columns = columns || $2, generation = generation + 1 WHERE id = $1",
            &[&id, &serde_json::Value::Array(entries)],
        )
        .await?;
        notify_ddl(&tx).await?;
        tx.commit().await?;
        done.columns_added.push(id);
    }
    if !done.is_empty() {
        tracing::info!(dropped = ?done.dropped, restored = ?done.restored, renamed = ?done.renamed, columns_added = ?done.columns_added, "catalog follows DDL on tiered tables");
    }
    Ok(done)
}

/// Untiers table `id`, whose table is gone: its objects are left for [`collect_dropped`].
async fn untier_dropped(
    tx: &tokio_postgres::Transaction<'_>,
    id: i64,
) -> Result<(), tokio_postgres::Error> {
    let generation: i64 = tx
        .query_one(
            "UPDATE coldwire.tables SET generation = generation + 1 WHERE id = $1 RETURNING generation",
            &[&id],
        )
        .await?
        .get(0);
    retire_cold_tier(tx, id, generation, "the table was dropped").await?;
    for sql in drop_capture_objects(id) {
        tx.batch_execute(&sql).await?;
    }
    Ok(())
}

/// Retires every segment of table `id` at `generation` (its new one), fails its queued and
/// running jobs with `why`, and marks it `dropped`: its objects and rows are
/// [`collect_dropped`]'s (or the caller's) to delete once this commits.
///
/// # Errors
/// Catalog failures.
pub async fn retire_cold_tier(
    tx: &tokio_postgres::Transaction<'_>,
    id: i64,
    generation: i64,
    why: &str,
) -> Result<(), tokio_postgres::Error> {
    tx.execute(
        "UPDATE coldwire.segments SET status = 'retired', retired_generation = $2, retired_xid = pg_current_xact_id() \
         WHERE table_id = $1 AND status IN ('pending', 'active')",
        &[&id, &generation],
    )
    .await?;
    tx.execute(
        "UPDATE coldwire.jobs SET state = 'failed', error = $2, finished_at = now() \
         WHERE table_id = $1 AND state IN ('pending', 'running')",
        &[&id, &why],
    )
    .await?;
    tx.execute(
        "UPDATE coldwire.tables SET state = 'dropped' WHERE id = $1",
        &[&id],
    )
    .await?;
    Ok(())
}

/// Locks table `id`'s catalog row if the table is still active (another proxy may have
/// followed the change first).
async fn lock_active(
    tx: &tokio_postgres::Transaction<'_>,
    id: i64,
) -> Result<bool, tokio_postgres::Error> {
    Ok(tx
        .query_opt(
            "SELECT 1 FROM coldwire.tables WHERE id = $1 AND state = 'active' FOR UPDATE",
            &[&id],
        )
        .await?
        .is_some())
}

/// Tells every proxy, once `tx` commits, to read its list of tiered tables again.
async fn notify_ddl(tx: &tokio_postgres::Transaction<'_>) -> Result<(), tokio_postgres::Error> {
    tx.execute(
        "SELECT pg_catalog.pg_notify('coldwire_catalog', $1)",
        &[&DDL_PAYLOAD],
    )
    .await?;
    Ok(())
}

/// Records table `id`'s current names and makes its capture function for them.
async fn follow_name(
    tx: &tokio_postgres::Transaction<'_>,
    id: i64,
) -> Result<(), tokio_postgres::Error> {
    tx.execute(
        "UPDATE coldwire.tables t SET schema_name = n.nspname, table_name = c.relname \
         FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
         WHERE t.id = $1 AND c.oid = t.relid",
        &[&id],
    )
    .await?;
    if let Some(spec) = capture_spec(tx, Some(id)).await?.pop() {
        tx.batch_execute(&spec.replace_function()).await?;
    }
    Ok(())
}

/// The capture spec of every tiered table whose table and mirror exist (or of table `id`),
/// naming the table as it is called now.
///
/// # Errors
/// Catalog failures.
pub async fn capture_spec(
    client: &impl GenericClient,
    id: Option<i64>,
) -> Result<Vec<CaptureSpec>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT t.id, n.nspname::text, c.relname::text, \
                    array_agg(a.attname::text ORDER BY k.ord), \
                    array_agg(format_type(a.atttypid, a.atttypmod) ORDER BY k.ord) \
             FROM coldwire.tables t \
             JOIN pg_catalog.pg_class c ON c.oid = t.relid \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             CROSS JOIN LATERAL unnest(t.pk_attnums) WITH ORDINALITY AS k (attnum, ord) \
             JOIN pg_catalog.pg_attribute a ON a.attrelid = t.relid AND a.attnum = k.attnum \
             WHERE to_regclass(format('coldwire.%I', 'm_' || t.id)) IS NOT NULL \
               AND ($1::bigint IS NULL OR t.id = $1) \
             GROUP BY t.id, n.nspname, c.relname \
             ORDER BY t.id",
            &[&id],
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let names: Vec<String> = row.get(3);
            let types: Vec<String> = row.get(4);
            CaptureSpec {
                id: row.get(0),
                schema: row.get(1),
                table: row.get(2),
                pk: names.into_iter().zip(types).collect(),
            }
        })
        .collect())
}

/// Deletes the cold objects of every untiered table (state `dropped`) and then its
/// catalog rows; a table whose objects cannot all be deleted keeps its rows for the next
/// call. How many tables were collected.
///
/// # Errors
/// Catalog failures.
pub async fn collect_dropped(
    client: &Client,
    store: &ColdStore,
) -> Result<usize, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT id, storage_prefix FROM coldwire.tables WHERE state = 'dropped' ORDER BY id",
            &[],
        )
        .await?;
    let mut collected = 0;
    for row in rows {
        let (id, prefix): (i64, String) = (row.get(0), row.get(1));
        match forget(client, store, id, &prefix).await? {
            Ok(objects) => {
                tracing::info!(
                    table_id = id,
                    objects,
                    "cold objects of an untiered table deleted"
                );
                collected += 1;
            }
            Err(e) => {
                tracing::warn!(table_id = id, error = %e, "cold objects of an untiered table could not be deleted; trying again later");
            }
        }
    }
    Ok(collected)
}

/// Deletes every object under `prefix` (table `id`'s) and, when that worked, the table's
/// catalog rows; how many objects there were.
///
/// # Errors
/// Catalog failures; the store's failure is the inner error (the rows stay then).
pub async fn forget(
    client: &Client,
    store: &ColdStore,
    id: i64,
    prefix: &str,
) -> Result<Result<usize, StoreError>, tokio_postgres::Error> {
    let objects = async {
        let keys = store.list(&format!("{prefix}/")).await?;
        for key in &keys {
            store.delete(key).await?;
        }
        Ok::<_, StoreError>(keys.len())
    }
    .await;
    if objects.is_ok() {
        client
            .batch_execute(&format!(
                "BEGIN; \
                 DELETE FROM coldwire.segment_stats WHERE segment_id IN (SELECT segment_id FROM coldwire.segments WHERE table_id = {id}); \
                 DELETE FROM coldwire.segments WHERE table_id = {id}; \
                 DELETE FROM coldwire.tables WHERE id = {id} AND state = 'dropped'; \
                 COMMIT;"
            ))
            .await?;
    }
    Ok(objects)
}
