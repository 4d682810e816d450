//! The coldwire catalog in Postgres (DESIGN §3): the `coldwire` schema, its versioned
//! migrations, and the service connection they run on.

pub mod capture;
pub mod conditions;
mod error;
pub mod inspect;
pub mod jobs;
pub mod locks;
mod migrate;
pub mod policy;
pub mod pool;
pub mod reconcile;
pub mod registry;
pub mod segments;
mod service;

pub(crate) use error::postgres_text;
pub use error::CatalogError;
pub use migrate::{
    latest_version, migrate, AdminRole, Migration, MigrationReport, ADMIN_ROLE, MIGRATIONS,
    MIGRATION_LOCK_KEY,
};
pub use policy::Policy;
pub use service::{connect, describe, service_database};

/// Key of `coldwire.meta` in a database served beside the default one: the folder of the
/// cold store its tables' folders go in (its name). `tier_table` reads it in its own
/// transaction, so every proxy and command puts a database's new tables in one place.
pub const COLD_FOLDER_KEY: &str = "cold_folder";
