//! Admin SQL (`coldwire.tier_table`, `set_policy`, `flush_table`) answered by the proxy:
//! recognizing the calls, typing their arguments, and the executor interface.

pub mod answer;
pub mod args;
pub mod call;
pub mod executor;
mod shared;
pub mod tiering;
pub mod untier;

pub use crate::catalog::policy::{self, Policy};
pub use call::{mentions_coldwire, recognize, AdminCall, AdminFunction, ArgValue};
pub use executor::{AdminExecutor, AdminRequest, Disabled};
pub use tiering::Tiering;

/// An admin call coldwire refuses, or could not carry out.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AdminError {
    #[error("coldwire admin functions must be called on their own: SELECT coldwire.f(arguments) [AS name], or SELECT * FROM coldwire.f(arguments)")]
    Misuse,
    #[error("arguments of coldwire.{function} must be literals or parameters")]
    ComputedArgument { function: &'static str },
    #[error("coldwire.{function} has no parameter named \"{name}\"")]
    UnknownParameter {
        function: &'static str,
        name: String,
    },
    #[error("coldwire.{function} takes at most {max} arguments")]
    TooManyArguments { function: &'static str, max: usize },
    #[error("coldwire.{function}: argument \"{name}\" given twice")]
    DuplicateArgument {
        function: &'static str,
        name: &'static str,
    },
    #[error("coldwire.{function}: positional argument after a named one")]
    PositionalAfterNamed { function: &'static str },
    #[error("coldwire.{function}: argument \"{name}\" is required")]
    MissingArgument {
        function: &'static str,
        name: &'static str,
    },
    #[error("invalid policy: {0}")]
    Policy(#[from] policy::PolicyError),
    #[error("invalid input syntax for type {type_name}: \"{value}\"")]
    InvalidText {
        type_name: &'static str,
        value: String,
    },
    #[error("incorrect binary data format for a {type_name} parameter")]
    BadBinary { type_name: &'static str },
    #[error("coldwire.{function}: argument \"{name}\" must be of type {expected}")]
    WrongType {
        function: &'static str,
        name: &'static str,
        expected: &'static str,
    },
    #[error("coldwire.{function}: argument \"{name}\" must not be null")]
    NullArgument {
        function: &'static str,
        name: &'static str,
    },
    #[error("there is no parameter ${number}")]
    MissingParameter { number: usize },
    #[error("coldwire tiering is not enabled on this proxy (no service_url)")]
    Disabled,
    #[error("current transaction is aborted, commands ignored until end of transaction block")]
    InFailedTransaction,
    #[error("relation \"{0}\" does not exist")]
    UndefinedTable(String),
    #[error("must be the owner of table {table} or a member of coldwire_admin")]
    NotOwner { table: String },
    #[error("table {table} is already tiered")]
    AlreadyTiered { table: String },
    #[error("table {table} is not tiered")]
    NotTiered { table: String },
    #[error("table {table} cannot be tiered: {}", reasons.join("; "))]
    Refused { table: String, reasons: Vec<String> },
    #[error("tiering on this proxy is configured for database \"{configured}\" (service_url), not \"{session}\"")]
    OtherDatabase { configured: String, session: String },
    #[error("{0} is not implemented yet")]
    NotImplemented(&'static str),
    #[error("{message}")]
    Postgres {
        code: String,
        message: String,
        detail: Option<String>,
        hint: Option<String>,
    },
    #[error("coldwire's service connection to Postgres failed")]
    ServiceUnavailable,
    #[error("coldwire cannot connect to database \"{database}\" as role \"{role}\" (the user of service_url)")]
    DatabaseUnreachable { database: String, role: String },
    #[error("coldwire cannot prepare its catalog in database \"{database}\": {reason}")]
    CatalogRefused { database: String, reason: String },
    #[error("coldwire tiers tables in at most max_databases ({max}) databases, so not in \"{database}\"")]
    TooManyDatabases { database: String, max: usize },
    #[error("no table of database \"{database}\" is tiered")]
    NoTieredTables { database: String },
}
