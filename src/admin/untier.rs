//! `coldwire.untier_table(t)` (DESIGN §8): every live cold row goes back into the heap, the
//! capture triggers, mirror and overrides go, and the table is plain again; then its
//! objects are deleted from the cold store and its catalog rows with them.
//!
//! One transaction does the moving, registered in `coldwire.maintenance` (capture skips
//! its inserts) and holding the table's lock exclusively (no finalize can commit, and it
//! waits for transactions whose reads or writes hold it shared): the cold rows are streamed
//! segment by segment (memory: one batch), each batch inserted where the key is neither in
//! the heap nor in the mirror (a key there has its authoritative state in the heap), then
//! the capture objects are dropped, the segments retired and the generation bumped, so any
//! read planned against the old cold tier fails its guard instead of doubling rows.

use serde_json::{json, Value};
use tokio_postgres::Client;

use super::executor::AdminRequest;
use super::shared::{check_may_manage, pg_error, service_error, table_arg};
use super::AdminError;
use crate::catalog::capture::CaptureSpec;
use crate::catalog::locks::TABLE_LOCK_CLASS;
use crate::catalog::{inspect, reconcile};
use crate::cold::scan::{ColdTable, LiveRows, ScanError};
use crate::sql::quote::pk_equal;
use crate::store::ColdStore;
use crate::values::record::encode_record_array;
use crate::values::ColdColumn;

/// How long untier waits for the table's lock (transactions reading or writing the table
/// through coldwire hold it shared until they end).
const UNTIER_LOCK_TIMEOUT: &str = "30s";

/// Runs `untier_table` for `request`.
///
/// # Errors
/// Permission, a table that is not tiered, catalog or store failures (nothing is changed
/// then: the transaction rolls back).
pub async fn untier_table(
    client: &mut Client,
    service: &tokio_postgres::Config,
    request: &AdminRequest,
    store: &ColdStore,
) -> Result<Value, AdminError> {
    let table = table_arg(request)?;
    let facts = inspect::table_facts(client, table)
        .await
        .map_err(service_error)?;
    check_may_manage(client, &request.user, &facts).await?;
    let Some(id) = facts.tiered_id else {
        return Err(AdminError::NotTiered {
            table: facts.display_name(),
        });
    };
    let spec = CaptureSpec {
        id,
        schema: facts.schema.clone(),
        table: facts.name.clone(),
        pk: facts
            .pk_columns()
            .iter()
            .map(|c| (c.name.clone(), c.type_name.clone()))
            .collect(),
    };
    let row_type: u32 = client
        .query_one("SELECT reltype FROM pg_class WHERE oid = $1", &[&facts.oid])
        .await
        .map_err(pg_error)?
        .get(0);
    let prefix: String = client
        .query_one(
            "SELECT storage_prefix FROM coldwire.tables WHERE id = $1",
            &[&id],
        )
        .await
        .map_err(pg_error)?
        .get(0);

    let tx = client.transaction().await.map_err(pg_error)?;
    tx.batch_execute(&format!(
        "SET LOCAL lock_timeout = '{UNTIER_LOCK_TIMEOUT}'; \
         INSERT INTO coldwire.maintenance (xid) VALUES (pg_current_xact_id());"
    ))
    .await
    .map_err(pg_error)?;
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, $2)",
        &[&TABLE_LOCK_CLASS, &(id as i32)],
    )
    .await
    .map_err(pg_error)?;
    let generation: i64 = tx
        .query_one(
            "UPDATE coldwire.tables SET state = 'untiering', generation = generation + 1 \
             WHERE id = $1 AND state = 'active' RETURNING generation",
            &[&id],
        )
        .await
        .map_err(pg_error)?
        .get(0);
    // A rule or row trigger the table gained since it was tiered would rewrite, or drop,
    // the rows brought back below, which are then gone from the cold tier: checked with
    // the table locked, so none can be added before this transaction ends.
    tx.batch_execute(&format!(
        "LOCK TABLE ONLY {} IN ROW EXCLUSIVE MODE",
        spec.qualified_table()
    ))
    .await
    .map_err(pg_error)?;
    let rewriters: Vec<String> = tx
        .query(
            &format!(
                "SELECT r FROM unnest({}) r WHERE r LIKE 'rule %' OR r LIKE 'row trigger %'",
                inspect::unservable_sql("$1::pg_catalog.oid")
            ),
            &[&facts.oid],
        )
        .await
        .map_err(pg_error)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if !rewriters.is_empty() {
        return Err(AdminError::Postgres {
            code: "0A000".into(),
            message: format!(
                "{} cannot be untiered: {}",
                facts.display_name(),
                rewriters.join("; ")
            ),
            detail: None,
            hint: Some(
                "Drop it first; untier_table brings the cold rows back with an INSERT.".into(),
            ),
        });
    }
    // The cold state just before this transaction, read on a connection of its own: no
    // finalize can commit while the lock is held, so it is the state being replaced.
    let mut reader = crate::catalog::connect(service)
        .await
        .map_err(service_error)?;
    let cold = ColdTable::load(&mut reader, id, None)
        .await
        .map_err(|e| scan_error(e.into()))?;
    drop(reader);
    if cold.generation + 1 != generation {
        return Err(AdminError::Postgres {
            code: "40001".into(),
            message: format!(
                "the cold tier of {} changed as untier_table started",
                facts.display_name()
            ),
            detail: None,
            hint: Some("Call coldwire.untier_table again.".into()),
        });
    }
    let columns: Vec<ColdColumn> = cold
        .columns
        .iter()
        .map(|c| ColdColumn::new(c.name.clone(), c.ty))
        .collect();
    let pk: Vec<&str> = spec.pk.iter().map(|(n, _)| n.as_str()).collect();
    let insert = format!(
        "INSERT INTO {table} OVERRIDING SYSTEM VALUE SELECT c.* FROM unnest($1::{table}[]) AS c \
         WHERE NOT EXISTS (SELECT 1 FROM {mirror} m WHERE {m_c}) \
           AND NOT EXISTS (SELECT 1 FROM ONLY {table} h WHERE {h_c})",
        table = spec.qualified_table(),
        mirror = spec.mirror(),
        m_c = pk_equal(pk.iter().copied(), "m", "c"),
        h_c = pk_equal(pk.iter().copied(), "h", "c"),
    );
    let statement = tx.prepare(&insert).await.map_err(pg_error)?;
    let mut rehydrated: u64 = 0;
    let mut live = LiveRows::new(store, &cold);
    while let Some(batch) = live.next().await.map_err(scan_error)? {
        let mut array = bytes::BytesMut::new();
        encode_record_array(&columns, row_type, &batch, &mut array)
            .map_err(|e| scan_error(ScanError::Cold(e)))?;
        rehydrated += tx
            .execute(&statement, &[&RawArray(array)])
            .await
            .map_err(pg_error)?;
    }
    for sql in spec.uninstall() {
        tx.batch_execute(&sql).await.map_err(pg_error)?;
    }
    reconcile::retire_cold_tier(&tx, id, generation, "the table was untiered")
        .await
        .map_err(pg_error)?;
    tx.batch_execute(
        "DELETE FROM coldwire.maintenance WHERE xid = pg_current_xact_id(); NOTIFY coldwire_catalog;",
    )
    .await
    .map_err(pg_error)?;
    tx.commit().await.map_err(pg_error)?;
    tracing::info!(table = %facts.display_name(), id, rehydrated, "table untiered");

    // The table is plain now; what is left is coldwire's: its objects, then its rows.
    let mut result = json!({
        "table": facts.display_name(),
        "rows_rehydrated": rehydrated,
        "segments": cold.segments.len(),
    });
    match reconcile::forget(client, store, id, &prefix)
        .await
        .map_err(pg_error)?
    {
        Ok(objects) => result["objects_deleted"] = objects.into(),
        Err(e) => {
            // The rows stay (state 'dropped'): the flush executor deletes the objects
            // later (`reconcile::collect_dropped`).
            tracing::warn!(table = %facts.display_name(), error = %e, "untiered, but its cold objects could not be deleted yet");
            result["objects_left"] = format!("under {prefix}/: {e}").into();
        }
    }
    Ok(result)
}

fn scan_error(e: ScanError) -> AdminError {
    match e {
        ScanError::Postgres(pg) => pg_error(pg),
        other => {
            tracing::warn!(error = %other, "untier_table could not read the cold tier");
            AdminError::Postgres {
                code: "58030".into(),
                message: "coldwire could not read the cold tier".into(),
                detail: None,
                hint: Some("The proxy's log has the cause; nothing was changed.".into()),
            }
        }
    }
}

/// A parameter already in Postgres's binary format (the row-type array), for any type.
#[derive(Debug)]
pub struct RawArray(pub bytes::BytesMut);

impl tokio_postgres::types::ToSql for RawArray {
    fn to_sql(
        &self,
        _: &tokio_postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(&self.0);
        Ok(tokio_postgres::types::IsNull::No)
    }

    fn accepts(_: &tokio_postgres::types::Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}
