//! A tiered table as the flush needs it, read from the catalog, and why a flush fails.

use tokio_postgres::Client;

use crate::catalog::Policy;
use crate::segment::writer::SegmentColumn;
use crate::sql::quote::{column_list, pk_equal};

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
pub(super) struct Tiered {
    pub id: i64,
    pub qualified: String,
    pub prefix: String,
    pub policy: Policy,
    /// All columns by attnum.
    pub columns: Vec<SegmentColumn>,
    pub pk: Vec<String>,
}

impl Tiered {
    /// Checks that the policy's age column, if it has one, is still a column the rows
    /// can be ordered by age with: what selecting rows needs (a prune that resumes does
    /// not, so it runs before this check).
    pub(super) fn check_age_column(&self) -> Result<(), FlushError> {
        let Some((age_column, _)) = self.policy.age_rule() else {
            return Ok(());
        };
        if self
            .columns
            .iter()
            .any(|c| c.name == age_column && c.ty.can_age())
        {
            return Ok(());
        }
        Err(FlushError::Table(
            self.id,
            format!("its age_column \"{age_column}\" is no longer a date, timestamp or timestamptz column of the table (renamed or dropped?); name it again with coldwire.set_policy"),
        ))
    }

    /// The key columns, quoted, each after `prefix`.
    pub(super) fn pk_list(&self, prefix: &str) -> String {
        column_list(self.pk.iter().map(String::as_str), prefix)
    }

    /// Whether the key is one smallint, integer or bigint column (so a range of it holds
    /// at most as many rows as keys).
    pub(super) fn key_is_one_integer(&self) -> bool {
        use crate::values::{ColdType, ScalarType};
        self.pk.len() == 1
            && self.columns.iter().any(|c| {
                c.name == self.pk[0]
                    && matches!(
                        c.ty,
                        ColdType::Scalar(ScalarType::Int2 | ScalarType::Int4 | ScalarType::Int8)
                    )
            })
    }

    /// The join condition on the primary key between relations aliased `left` and `right`.
    pub(super) fn pk_equal(&self, left: &str, right: &str) -> String {
        pk_equal(self.pk.iter().map(String::as_str), left, right)
    }
}

/// Refuses to flush table `id` when logical replication writes into it (a subscription
/// added after it was tiered: tier_table refuses such a table). Apply fires no statement
/// trigger, so a subscription's writes pass the capture and may miss cold rows. The flush
/// checks before it selects rows (a prune being resumed finishes first, as with the age
/// column) and again in the finalize, for a subscription added meanwhile.
pub(super) async fn check_not_subscribed(
    client: &impl tokio_postgres::GenericClient,
    id: i64,
) -> Result<(), FlushError> {
    let names: Option<String> = client
        .query_one(
            "SELECT string_agg(format('%I', s.subname), ', ' ORDER BY s.subname) \
             FROM pg_catalog.pg_subscription_rel r JOIN pg_catalog.pg_subscription s ON s.oid = r.srsubid \
             WHERE r.srrelid = (SELECT t.relid FROM coldwire.tables t WHERE t.id = $1)",
            &[&id],
        )
        .await?
        .get(0);
    match names {
        None => Ok(()),
        Some(names) => Err(FlushError::Table(
            id,
            format!("logical replication writes into it (subscription {names}), and its apply passes coldwire's statement-level capture unseen, so replicated writes may already have missed its cold rows; take the table out of the subscription, untier it (coldwire.untier_table) and sync it again"),
        )),
    }
}

/// The query of what table `id` gained since it was tiered that coldwire cannot serve
/// ([`crate::catalog::inspect::unservable_sql`]), a reason a row.
pub(super) fn unservable_query(id: i64) -> String {
    format!(
        "SELECT r FROM unnest({}) r",
        crate::catalog::inspect::unservable_sql(&format!(
            "(SELECT relid FROM coldwire.tables WHERE id = {id})"
        ))
    )
}

/// A flush stops before it deletes anything from a table that gained what coldwire
/// cannot serve: a rule or a row trigger would fire on (or rewrite) the prune's delete,
/// a referencing foreign key would run its actions (`ON DELETE CASCADE` deleting the
/// other table's rows). Checked with the table locked, so nothing can be added until
/// the transaction ends.
pub(super) fn unservable(id: i64, reasons: &[&str]) -> Result<(), FlushError> {
    if reasons.is_empty() {
        return Ok(());
    }
    Err(FlushError::Table(
        id,
        format!(
            "it gained what coldwire cannot serve: {}; the flush stops until that is dropped",
            reasons.join("; ")
        ),
    ))
}

/// [`unservable`] of table `id` as the catalog has it now.
pub(super) async fn check_servable(
    client: &impl tokio_postgres::GenericClient,
    id: i64,
) -> Result<(), FlushError> {
    let reasons: Vec<String> = client
        .query(&unservable_query(id), &[])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    unservable(id, &reasons.iter().map(String::as_str).collect::<Vec<_>>())
}

/// Reads the table's catalog row and current name.
pub(super) async fn load(client: &Client, table_id: i64) -> Result<Tiered, FlushError> {
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
