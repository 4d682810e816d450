//! The admin executor of a proxy with a service connection: `tier_table` and `set_policy`
//! against the catalog (DESIGN §3, §4, §8). `flush_table` is refused until the flush exists.

use serde_json::{json, Value};
use tokio_postgres::Client;

use super::args::Resolved;
use super::executor::{AdminExecutor, AdminFuture, AdminRequest};
use super::shared::{check_may_manage, pg_error, service_error, table_arg};
use super::{policy, AdminError, AdminFunction, Policy};
use crate::catalog::capture::CaptureSpec;
use crate::catalog::inspect::{self};
use crate::catalog::{self};
use crate::segment::writer::SegmentColumn;
use crate::store::ColdStore;

/// How long `tier_table` waits for the table lock its triggers need (writers and readers
/// of the table queue behind a waiting lock, so do not wait long).
const TRIGGER_LOCK_TIMEOUT: &str = "5s";

/// Carries out admin calls through the service connection.
pub struct Tiering {
    service: tokio_postgres::Config,
    store: ColdStore,
    /// The database the service connection (and so the catalog) is in.
    database: String,
}

impl Tiering {
    /// An executor for the catalog reached through `service`, whose cold tier is `store`.
    pub fn new(service: tokio_postgres::Config, store: ColdStore) -> Self {
        let database = catalog::service_database(&service);
        Self {
            service,
            store,
            database,
        }
    }
}

impl AdminExecutor for Tiering {
    fn execute(&self, request: AdminRequest) -> AdminFuture<'_> {
        Box::pin(async move {
            if request.database != self.database {
                return Err(AdminError::OtherDatabase {
                    configured: self.database.clone(),
                    session: request.database.clone(),
                });
            }
            let mut client = catalog::connect(&self.service)
                .await
                .map_err(service_error)?;
            match request.function {
                AdminFunction::TierTable => tier_table(&mut client, &request).await,
                AdminFunction::SetPolicy => set_policy(&mut client, &request).await,
                AdminFunction::FlushTable => flush_table(&mut client, &request).await,
                AdminFunction::UntierTable => {
                    super::untier::untier_table(&mut client, &self.service, &request, &self.store)
                        .await
                }
                AdminFunction::CompactTable => Err(AdminError::NotImplemented(
                    "coldwire.compact_table (merging a table's small segments)",
                )),
                // Planned by the session's read path, never sent here.
                AdminFunction::Explain => Err(AdminError::NotImplemented("coldwire.explain here")),
            }
        })
    }
}

async fn tier_table(client: &mut Client, request: &AdminRequest) -> Result<Value, AdminError> {
    let table = table_arg(request)?;
    let changes = match request.args.get(1) {
        Some(Resolved::Json(v)) => v.clone(),
        _ => json!({}),
    };
    let policy = Policy::for_new_table().merged(&changes)?;
    let facts = inspect::table_facts(client, table)
        .await
        .map_err(service_error)?;
    check_may_manage(client, &request.user, &facts).await?;
    if facts.tiered_id.is_some() {
        return Err(AdminError::AlreadyTiered {
            table: facts.display_name(),
        });
    }
    let reasons = facts.refusals();
    if !reasons.is_empty() {
        return Err(AdminError::Refused {
            table: facts.display_name(),
            reasons,
        });
    }
    let policy = checked_age_rule(client, &facts, policy).await?;
    let columns: Vec<Value> = facts
        .columns
        .iter()
        .map(|c| {
            SegmentColumn::catalog_entry(c.attnum, &c.name, &c.type_name, c.type_oid, c.typmod)
        })
        .collect();
    let pk_names: Vec<&str> = facts.pk_columns().iter().map(|c| c.name.as_str()).collect();

    // 1. Catalog row, mirror, capture function and triggers: one short transaction (the
    //    triggers lock out writers until it commits).
    let tx = client.transaction().await.map_err(pg_error)?;
    tx.batch_execute(&format!(
        "SET LOCAL lock_timeout = '{TRIGGER_LOCK_TIMEOUT}'"
    ))
    .await
    .map_err(pg_error)?;
    // The table's folder goes in the database's own folder where one is recorded (a
    // database served beside the default one), else at the store's root. Read under a
    // lock that `Databases::open`'s SHARE lock waits for, and that waits for it: a folder
    // recorded meanwhile is seen, and no table at the root slips in after its check.
    tx.batch_execute("LOCK TABLE coldwire.tables IN ROW EXCLUSIVE MODE")
        .await
        .map_err(pg_error)?;
    let folder: Option<String> = tx
        .query_opt(
            "SELECT value FROM coldwire.meta WHERE key = $1",
            &[&catalog::COLD_FOLDER_KEY],
        )
        .await
        .map_err(pg_error)?
        .map(|row| row.get(0));
    let prefix = match folder {
        Some(folder) => format!("{folder}/{}.{}", facts.schema, facts.name),
        None => format!("{}.{}", facts.schema, facts.name),
    };
    let id: i64 = tx
        .query_one(
            "INSERT INTO coldwire.tables (relid, schema_name, table_name, pk_attnums, columns, policy, storage_prefix) \
             VALUES ($1, $2, $3, $4, $5, $6, \
                     CASE WHEN EXISTS (SELECT 1 FROM coldwire.tables WHERE storage_prefix = $7) \
                          THEN $7 || '-' || $8 ELSE $7 END) \
             RETURNING id",
            &[
                &facts.oid,
                &facts.schema,
                &facts.name,
                &facts.pk,
                &Value::Array(columns.clone()),
                &policy.to_json(),
                &prefix,
                &facts.oid.to_string(),
            ],
        )
        .await
        .map_err(pg_error)?
        .get(0);
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
    for statement in spec.install() {
        tx.batch_execute(&statement).await.map_err(pg_error)?;
    }
    tx.commit().await.map_err(pg_error)?;

    // 2. Seed the mirror with the rows already there. Rows written from now on are the
    //    triggers' to record; ON CONFLICT DO NOTHING leaves their newer entries alone.
    let seeded = async {
        let tx = client.transaction().await?;
        let rows = tx.execute(&spec.seed(), &[]).await?;
        tx.execute(
            // The first flush waits a while after `tiered_at` for every proxy to see the
            // table (flush::finalize): counted from when it becomes visible as tiered,
            // not from the start of the first transaction, which may have waited for
            // locks, nor from before the seeding.
            "UPDATE coldwire.tables SET state = 'active', tiered_at = pg_catalog.clock_timestamp() WHERE id = $1",
            &[&id],
        )
        .await?;
        tx.batch_execute("NOTIFY coldwire_catalog").await?;
        tx.commit().await?;
        Ok::<u64, tokio_postgres::Error>(rows)
    }
    .await;
    let mirror_rows = match seeded {
        Ok(rows) => rows,
        Err(e) => {
            // Leave the table as it was: no triggers, no mirror, no catalog row.
            let mut undo = spec.uninstall().join("; ");
            undo.push_str(&format!("; DELETE FROM coldwire.tables WHERE id = {id}"));
            if let Err(cleanup) = client.batch_execute(&undo).await {
                tracing::error!(table = %facts.display_name(), error = %cleanup, "tier_table could not undo itself");
            }
            return Err(pg_error(e));
        }
    };
    tracing::info!(table = %facts.display_name(), id, mirror_rows, "table tiered");
    Ok(json!({
        "table": facts.display_name(),
        "id": id,
        "primary_key": pk_names,
        "policy": policy.to_json(),
        "mirror_rows": mirror_rows,
    }))
}

async fn set_policy(client: &mut Client, request: &AdminRequest) -> Result<Value, AdminError> {
    let table = table_arg(request)?;
    let Some(Resolved::Json(changes)) = request.args.get(1) else {
        return Err(AdminError::NullArgument {
            function: "set_policy",
            name: "policy",
        });
    };
    // Check the keys before looking anything up.
    Policy::check_keys(changes)?;
    let facts = inspect::table_facts(client, table)
        .await
        .map_err(service_error)?;
    check_may_manage(client, &request.user, &facts).await?;
    let Some(id) = facts.tiered_id else {
        return Err(AdminError::NotTiered {
            table: facts.display_name(),
        });
    };
    let tx = client.transaction().await.map_err(pg_error)?;
    let current: Value = tx
        .query_one(
            "SELECT policy FROM coldwire.tables WHERE id = $1 FOR UPDATE",
            &[&id],
        )
        .await
        .map_err(pg_error)?
        .get(0);
    let policy = Policy::default().merged(&current)?.merged(changes)?;
    let policy = checked_age_rule(&tx, &facts, policy).await?;
    tx.execute(
        "UPDATE coldwire.tables SET policy = $2 WHERE id = $1",
        &[&id, &policy.to_json()],
    )
    .await
    .map_err(pg_error)?;
    tx.batch_execute("NOTIFY coldwire_catalog")
        .await
        .map_err(pg_error)?;
    tx.commit().await.map_err(pg_error)?;
    Ok(json!({"table": facts.display_name(), "policy": policy.to_json()}))
}

/// `policy` with its age rule checked against the table and Postgres (22023 naming the
/// key): `age_column` a date, timestamp or timestamptz column, `tier_after` a positive
/// interval, stored as Postgres prints it.
async fn checked_age_rule(
    client: &impl tokio_postgres::GenericClient,
    facts: &inspect::TableFacts,
    mut policy: Policy,
) -> Result<Policy, AdminError> {
    let Some((column, interval)) = policy.age_rule() else {
        return Ok(policy);
    };
    let bad = |key: &str, reason: String| {
        AdminError::Policy(policy::PolicyError::BadValue {
            key: key.into(),
            reason,
        })
    };
    let Some(c) = facts.columns.iter().find(|c| c.name == column) else {
        return Err(bad(
            "age_column",
            format!("{} has no column \"{column}\"", facts.display_name()),
        ));
    };
    if !AGE_COLUMN_TYPES.contains(&c.type_oid) {
        return Err(bad(
            "age_column",
            format!(
                "column \"{column}\" is {}; an age column is a date, timestamp or timestamptz",
                c.type_name
            ),
        ));
    }
    let normalized = client
        .query_one(
            "SELECT CASE WHEN $1::text::interval > interval '0' THEN ($1::text::interval)::text END",
            &[&interval],
        )
        .await
        .map_err(|e| {
            // Postgres refusing the text (class 22, data exception) is a bad value; a lost
            // connection or the like is the service's failure.
            let refused = e
                .as_db_error()
                .is_some_and(|db| db.code().code().starts_with("22"));
            if !refused {
                return pg_error(e);
            }
            bad(
                "tier_after",
                format!(
                    "{} (an interval such as '90 days' or '12 hours')",
                    crate::catalog::postgres_text(&e)
                ),
            )
        })?
        .get::<_, Option<String>>(0)
        .ok_or_else(|| bad("tier_after", format!("{interval} is not a positive interval")))?;
    policy.tier_after = Some(normalized);
    Ok(policy)
}

/// Type OIDs an age column may have: date, timestamp, timestamptz.
const AGE_COLUMN_TYPES: [u32; 3] = [1082, 1114, 1184];

/// Enqueues a flush (or finds the active one); with `wait => true`, waits for it to end.
async fn flush_table(client: &mut Client, request: &AdminRequest) -> Result<Value, AdminError> {
    let table = table_arg(request)?;
    let flag = |i: usize| matches!(request.args.get(i), Some(Resolved::Bool(true)));
    let (wait, drain) = (flag(1), flag(2));
    let facts = inspect::table_facts(client, table)
        .await
        .map_err(service_error)?;
    check_may_manage(client, &request.user, &facts).await?;
    let Some(id) = facts.tiered_id else {
        return Err(AdminError::NotTiered {
            table: facts.display_name(),
        });
    };
    let mut job = crate::catalog::jobs::enqueue_flush(client, id, drain)
        .await
        .map_err(pg_error)?;
    while wait && matches!(job.state.as_str(), "pending" | "running") {
        tokio::time::sleep(FLUSH_POLL).await;
        job = crate::catalog::jobs::get(client, job.id)
            .await
            .map_err(pg_error)?;
    }
    let mut result = job.to_json();
    result["table"] = Value::String(facts.display_name());
    Ok(result)
}

/// How often `flush_table(wait => true)` looks at its job.
const FLUSH_POLL: std::time::Duration = std::time::Duration::from_millis(100);
