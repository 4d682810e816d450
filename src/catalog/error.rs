//! Why the catalog could not be read, created or upgraded.

use std::error::Error as _;

/// An error of the catalog layer.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The service connection could not be opened.
    #[error("cannot connect to the service database: {}", postgres_text(.0))]
    Connect(#[source] tokio_postgres::Error),
    /// A catalog statement failed.
    #[error("{}", postgres_text(.0))]
    Postgres(#[from] tokio_postgres::Error),
    /// A migration's SQL failed; the transaction was rolled back, nothing changed.
    #[error("catalog migration {version} ({name}) failed: {}", postgres_text(.source))]
    Migration {
        version: i32,
        name: &'static str,
        source: tokio_postgres::Error,
    },
    /// The database is not UTF8 (DESIGN §3: cold values are stored as UTF-8).
    #[error(
        "the database encoding is {found}, but coldwire needs UTF8; \
         create the database with ENCODING 'UTF8' (and a template such as template0)"
    )]
    Encoding { found: String },
    /// The catalog was written by a newer coldwire.
    #[error(
        "the coldwire catalog in this database is version {found}, newer than this coldwire \
         knows (up to {known}); run a coldwire release that knows version {found}"
    )]
    TooNew { found: i32, known: i32 },
    /// `coldwire.meta` holds something that is not a version number.
    #[error("coldwire.meta holds schema_version {0:?}, which is not a catalog version")]
    BadVersion(String),
    /// Schema `coldwire` exists and belongs to a role whose privileges the service role lacks.
    #[error(
        "schema coldwire already exists and belongs to role {owner}, which the service role cannot \
         act as; drop or re-own the schema, or connect service_url as {owner}"
    )]
    ForeignSchema { owner: String },
    /// The database's tiered tables live in another cold store than this proxy's.
    #[error(
        "the tiered tables of database \"{database}\" are in another cold store ({store}); \
         a proxy serves only the databases whose tables are in its own cold_store"
    )]
    OtherStore { database: String, store: String },
    /// The database's tables are at the cold store's root: it is the database of some
    /// proxy's `service_url`, and cannot be served beside another one.
    #[error(
        "database \"{database}\" has {tables} tables' segments at the cold store's root, as the \
         database of a proxy's service_url has; it is served only through a service_url that \
         names it"
    )]
    TablesAtRoot { database: String, tables: i64 },
    /// Serving one more database would exceed `max_databases`.
    #[error("coldwire already serves max_databases ({max}) databases, so not \"{database}\"")]
    TooManyDatabases { database: String, max: usize },
    /// A table named in an admin call does not exist.
    #[error("relation \"{0}\" does not exist")]
    UndefinedTable(String),
}

/// A tokio-postgres error with what it wraps: its own Display says only "db error" or
/// "error connecting to server".
pub(crate) fn postgres_text(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut text = format!("{} {}: {}", db.severity(), db.code().code(), db.message());
        if let Some(detail) = db.detail() {
            text.push_str(&format!(" (detail: {detail})"));
        }
        if let Some(hint) = db.hint() {
            text.push_str(&format!(" (hint: {hint})"));
        }
        return text;
    }
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}
