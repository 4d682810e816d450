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
