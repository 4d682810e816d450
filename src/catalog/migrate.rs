//! Creates and upgrades the catalog: ordered migrations applied in one transaction under
//! an advisory lock, so proxies starting together migrate once.

use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, IsolationLevel, Transaction};

use super::error::CatalogError;

pub use super::locks::MIGRATION_LOCK_KEY;

/// The role whose members may manage any tiered table (DESIGN §8).
pub const ADMIN_ROLE: &str = "coldwire_admin";

/// One step of the catalog's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// The catalog version after this step; versions count up from 1 without gaps.
    pub version: i32,
    /// A short name for logs.
    pub name: &'static str,
    /// The statements, run as one batch inside the migration transaction.
    pub sql: &'static str,
    /// After `sql`, re-create the capture function of every tiered table and drop what the
    /// current [`CaptureSpec::install`](super::capture::CaptureSpec::install) no longer creates ([`CaptureSpec::upgrade`](super::capture::CaptureSpec::upgrade)).
    pub upgrade_capture: bool,
}

/// Every migration this binary knows, oldest first.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "catalog",
        sql: include_str!("sql/v001_catalog.sql"),
        upgrade_capture: false,
    },
    Migration {
        version: 2,
        name: "capture",
        sql: include_str!("sql/v002_capture.sql"),
        upgrade_capture: true,
    },
    Migration {
        version: 3,
        name: "reads",
        sql: include_str!("sql/v003_reads.sql"),
        upgrade_capture: true,
    },
    Migration {
        version: 4,
        name: "guard",
        sql: include_str!("sql/v004_guard.sql"),
        upgrade_capture: true,
    },
    Migration {
        version: 5,
        name: "writes",
        sql: include_str!("sql/v005_writes.sql"),
        upgrade_capture: true,
    },
    Migration {
        version: 6,
        name: "renames",
        sql: include_str!("sql/v006_renames.sql"),
        upgrade_capture: true,
    },
    Migration {
        version: 7,
        name: "write_net",
        sql: include_str!("sql/v007_write_net.sql"),
        upgrade_capture: true,
    },
    Migration {
        version: 8,
        name: "conditions",
        sql: include_str!("sql/v008_conditions.sql"),
        upgrade_capture: true,
    },
    Migration {
        version: 9,
        name: "mirror_vacuum",
        sql: include_str!("sql/v009_mirror_vacuum.sql"),
        upgrade_capture: true,
    },
    Migration {
        version: 10,
        name: "rehydrate",
        sql: include_str!("sql/v010_rehydrate.sql"),
        upgrade_capture: true,
    },
    Migration {
        version: 11,
        name: "live_counts",
        sql: include_str!("sql/v011_live_counts.sql"),
        upgrade_capture: false,
    },
    Migration {
        version: 12,
        name: "capture_work",
        sql: include_str!("sql/v012_rehydrate_capture.sql"),
        upgrade_capture: true,
    },
    Migration {
        version: 13,
        name: "signed_rehydration",
        sql: include_str!("sql/v013_signed_rehydration.sql"),
        upgrade_capture: true,
    },
    Migration {
        version: 14,
        name: "capture_names",
        sql: include_str!("sql/v014_capture_names.sql"),
        upgrade_capture: true,
    },
    Migration {
        version: 15,
        name: "capture_literals",
        sql: include_str!("sql/v015_capture_literals.sql"),
        upgrade_capture: true,
    },
];

/// The placeholders of the migrations' SQL and what they stand for: constants the Rust
/// side uses too, written into the SQL as it runs.
fn placeholders() -> [(&'static str, String); 2] {
    [
        (
            "{{table_lock_class}}",
            super::locks::TABLE_LOCK_CLASS.to_string(),
        ),
        (
            "{{cold_tier_changed}}",
            super::conditions::COLD_TIER_CHANGED.to_owned(),
        ),
    ]
}

impl Migration {
    /// The statements with their placeholders filled in.
    pub fn text(&self) -> String {
        placeholders()
            .iter()
            .fold(self.sql.to_owned(), |sql, (mark, value)| {
                sql.replace(mark, value)
            })
    }
}

/// The catalog version this binary creates.
pub fn latest_version() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// What [`migrate`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// The version found (0: no catalog yet).
    pub from_version: i32,
    /// The version now recorded in `coldwire.meta`.
    pub to_version: i32,
    /// The migrations applied, in order; empty when the catalog was current.
    pub applied: Vec<Migration>,
    /// What became of role [`ADMIN_ROLE`].
    pub admin_role: AdminRole,
}

/// The state of role [`ADMIN_ROLE`] after a migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminRole {
    /// It existed already (roles belong to the cluster, not the database).
    Existed,
    /// This migration created it.
    Created,
    /// It does not exist and the service role may not create it: only table owners can
    /// manage tiering until a DBA creates it.
    Missing,
}

/// The table that holds the version, created before the version can be read.
const CREATE_META: &str =
    "CREATE TABLE IF NOT EXISTS coldwire.meta (key text PRIMARY KEY, value text NOT NULL)";

/// Brings the catalog of the connected database to [`latest_version`], in one transaction.
///
/// Takes [`MIGRATION_LOCK_KEY`], so a second proxy starting at the same time waits, then
/// sees the version and applies nothing. Needs only CREATE on the database (its owner has
/// it), or none at all once schema `coldwire` exists and belongs to the service role (a DBA
/// may create it so); creates role [`ADMIN_ROLE`] when the service role may, and otherwise logs a
/// warning and reports [`AdminRole::Missing`].
///
/// # Errors
/// A database that is not UTF8, a catalog newer than this binary, a schema `coldwire`
/// owned by a foreign role, or any Postgres error; nothing is changed then.
pub async fn migrate(client: &mut Client) -> Result<MigrationReport, CatalogError> {
    // Read committed, whatever the role's default: each statement after the lock must see
    // what a proxy that held the lock before us committed.
    let mut tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::ReadCommitted)
        .start()
        .await?;
    // Only built-in names resolve unqualified; IF NOT EXISTS notices are noise.
    tx.batch_execute(
        "SET LOCAL search_path = pg_catalog, pg_temp; SET LOCAL client_min_messages = warning",
    )
    .await?;
    tx.execute(
        "SELECT pg_catalog.pg_advisory_xact_lock($1)",
        &[&MIGRATION_LOCK_KEY],
    )
    .await?;
    check_encoding(&tx).await?;
    // CREATE SCHEMA checks CREATE on the database even with IF NOT EXISTS.
    if !schema_exists(&tx).await? {
        tx.batch_execute("CREATE SCHEMA coldwire").await?;
    }
    tx.batch_execute(CREATE_META).await?;

    let from_version = recorded_version(&tx).await?;
    let known = latest_version();
    if from_version > known {
        return Err(CatalogError::TooNew {
            found: from_version,
            known,
        });
    }
    let mut applied = Vec::new();
    for m in MIGRATIONS.iter().filter(|m| m.version > from_version) {
        let step = async {
            tx.batch_execute(&m.text()).await?;
            if m.upgrade_capture {
                upgrade_capture(&tx).await?;
            }
            Ok(())
        };
        step.await.map_err(|source| CatalogError::Migration {
            version: m.version,
            name: m.name,
            source,
        })?;
        applied.push(*m);
    }
    if !applied.is_empty() {
        tx.execute(
            "INSERT INTO coldwire.meta (key, value) VALUES ('schema_version', $1) \
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            &[&known.to_string()],
        )
        .await?;
    }
    // Roles belong to the cluster: a restored database or a newly granted CREATEROLE can
    // need the role even when the catalog is current, so this runs every time.
    let admin_role = ensure_admin_role(&mut tx).await?;
    tx.commit().await?;
    Ok(MigrationReport {
        from_version,
        to_version: known,
        applied,
        admin_role,
    })
}

/// Brings the capture objects of every tiered table (whose table and mirror still exist)
/// to what this binary installs, naming the table as it is now called.
async fn upgrade_capture(tx: &Transaction<'_>) -> Result<(), tokio_postgres::Error> {
    for spec in super::reconcile::capture_spec(tx, None).await? {
        for statement in spec.upgrade() {
            tx.batch_execute(&statement).await?;
        }
        tracing::info!(table_id = spec.id, table = %spec.qualified_table(), "capture upgraded");
    }
    Ok(())
}

async fn check_encoding(tx: &Transaction<'_>) -> Result<(), CatalogError> {
    let row = tx
        .query_one("SELECT pg_catalog.current_setting('server_encoding')", &[])
        .await?;
    let found: String = row.try_get(0)?;
    if found != "UTF8" {
        return Err(CatalogError::Encoding { found });
    }
    Ok(())
}

/// Whether schema `coldwire` exists. One created by another role would let that role drop
/// or replace the catalog's objects, so it must belong to a role whose privileges the
/// service role has.
async fn schema_exists(tx: &Transaction<'_>) -> Result<bool, CatalogError> {
    let row = tx
        .query_opt(
            "SELECT nspowner::regrole::text, pg_has_role(nspowner, 'USAGE') \
             FROM pg_namespace WHERE nspname = 'coldwire'",
            &[],
        )
        .await?;
    match row {
        Some(row) if !row.try_get::<_, bool>(1)? => Err(CatalogError::ForeignSchema {
            owner: row.try_get(0)?,
        }),
        Some(_) => Ok(true),
        None => Ok(false),
    }
}

async fn recorded_version(tx: &Transaction<'_>) -> Result<i32, CatalogError> {
    let row = tx
        .query_opt(
            "SELECT value FROM coldwire.meta WHERE key = 'schema_version'",
            &[],
        )
        .await?;
    let Some(row) = row else { return Ok(0) };
    let text: String = row.try_get(0)?;
    match text.trim().parse::<i32>() {
        Ok(v) if v >= 0 => Ok(v),
        _ => Err(CatalogError::BadVersion(text)),
    }
}

async fn ensure_admin_role(tx: &mut Transaction<'_>) -> Result<AdminRole, CatalogError> {
    let row = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1), \
                    (SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user)",
            &[&ADMIN_ROLE],
        )
        .await?;
    if row.try_get::<_, bool>(0)? {
        return Ok(AdminRole::Existed);
    }
    if row.try_get::<_, Option<bool>>(1)? != Some(true) {
        warn_missing_role();
        return Ok(AdminRole::Missing);
    }
    // Under a savepoint: a proxy migrating another database of the cluster may create the
    // role at the same moment (roles are not covered by the per-database advisory lock).
    let savepoint = tx.transaction().await?;
    match savepoint
        .batch_execute(&format!("CREATE ROLE {ADMIN_ROLE} NOLOGIN"))
        .await
    {
        Ok(()) => {
            savepoint.commit().await?;
            Ok(AdminRole::Created)
        }
        Err(e) if matches!(e.code(), Some(c) if *c == SqlState::DUPLICATE_OBJECT || *c == SqlState::UNIQUE_VIOLATION) =>
        {
            savepoint.rollback().await?;
            Ok(AdminRole::Existed)
        }
        // Managed services can refuse CREATE ROLE even with CREATEROLE.
        Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {
            savepoint.rollback().await?;
            warn_missing_role();
            Ok(AdminRole::Missing)
        }
        Err(e) => Err(e.into()),
    }
}

fn warn_missing_role() {
    tracing::warn!(
        role = ADMIN_ROLE,
        "role {ADMIN_ROLE} does not exist and the service role may not create it (it needs CREATEROLE): \
         only table owners can manage tiering until a DBA runs CREATE ROLE {ADMIN_ROLE} NOLOGIN"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_count_up_from_one_without_gaps() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i32 + 1, "migration {}", m.name);
        }
        assert_eq!(latest_version(), MIGRATIONS.len() as i32);
    }

    #[test]
    fn migrations_stay_within_what_an_ordinary_owner_may_do() {
        for m in MIGRATIONS {
            let sql = m.sql.to_ascii_uppercase();
            for forbidden in [
                "CREATE EXTENSION",
                "ALTER SYSTEM",
                "CREATE EVENT TRIGGER",
                "LANGUAGE C",
                "CREATE TABLE COLDWIRE.META",
            ] {
                assert!(
                    !sql.contains(forbidden),
                    "migration {} contains {forbidden}",
                    m.name
                );
            }
        }
    }

    #[test]
    fn every_placeholder_is_filled_and_the_lock_class_kept_its_value() {
        for m in MIGRATIONS {
            assert!(
                !m.text().contains("{{"),
                "migration {} has an unknown placeholder",
                m.name
            );
        }
        // Migrations applied before the placeholders existed hold the number itself.
        assert_eq!(super::super::locks::TABLE_LOCK_CLASS, 1_668_743_169);
        assert!(MIGRATIONS[3]
            .text()
            .contains("pg_advisory_xact_lock_shared(1668743169, id::integer)"));
    }

    #[test]
    fn the_lock_key_spells_coldwire() {
        assert_eq!(MIGRATION_LOCK_KEY, 0x636f_6c64_7769_7265);
        assert_eq!(&MIGRATION_LOCK_KEY.to_be_bytes(), b"coldwire");
    }
}
