//! The one place where coldwire's own errors become what a client sees: a SQLSTATE, a
//! message without internal addresses or credentials, and a hint. Errors from Postgres are
//! relayed untouched and never pass through here. [`SessionError`], why a session ended
//! early, is defined here too, beside its mapping.

use tokio_postgres::error::SqlState;

use crate::admin::AdminError;
use crate::cold::scan::ScanError;
use crate::values::{ColdError, ValueError};
use crate::wire::messages::{ErrorFields, Severity};
use crate::wire::WireError;

/// Why a session ended early.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("protocol violation by the client: {0}")]
    Protocol(#[from] WireError),
    #[error("protocol violation by the upstream server: {0}")]
    UpstreamProtocol(WireError),
    #[error("client closed the connection during startup")]
    ClientGone,
    #[error("client sent no startup packet within {secs} s")]
    StartupTimeout { secs: u64 },
    #[error("TLS handshake failed: {0}")]
    Tls(std::io::Error),
    #[error("client did not negotiate TLS and require_tls is set")]
    TlsRequired,
    #[error("cannot connect to upstream {addr}: {source}")]
    UpstreamConnect {
        addr: String,
        source: std::io::Error,
    },
    #[error("connecting to upstream {addr} timed out after {ms} ms")]
    UpstreamTimeout { addr: String, ms: u64 },
    #[error("client connection failed: {0}")]
    ClientIo(std::io::Error),
    #[error("upstream connection failed: {0}")]
    UpstreamIo(std::io::Error),
    /// The session's database has tiered tables (`tables`: their names) this proxy
    /// cannot read the cold rows of (`reason`), or it could not be checked for them
    /// (`tables` none, `reason`: Postgres's error).
    #[error("database \"{database}\" may have tiered tables ({}) this proxy cannot serve: {reason}", tables.as_deref().unwrap_or("not checked"))]
    TiersNotServed {
        database: String,
        tables: Option<String>,
        reason: String,
        /// Whether the proxy has a service connection (the hint differs).
        service: bool,
    },
}

impl From<std::io::Error> for SessionError {
    /// Plain I/O errors arise on the client socket (the upstream paths map theirs).
    fn from(e: std::io::Error) -> Self {
        SessionError::ClientIo(e)
    }
}

impl SessionError {
    /// The `kind` label of `coldwire_errors_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            SessionError::Protocol(_) => "client_protocol",
            SessionError::UpstreamProtocol(_) => "upstream_protocol",
            SessionError::ClientGone | SessionError::ClientIo(_) => "client_io",
            SessionError::StartupTimeout { .. } => "startup_timeout",
            SessionError::Tls(_) => "tls_handshake",
            SessionError::TlsRequired => "tls_required",
            SessionError::UpstreamConnect { .. } | SessionError::UpstreamTimeout { .. } => {
                "upstream_unreachable"
            }
            SessionError::UpstreamIo(_) => "upstream_io",
            SessionError::TiersNotServed { .. } => "tiers_not_served",
        }
    }
}

/// Why a read or write of a tiered table could not be planned.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("{0}")]
    Catalog(String),
    #[error("{}", crate::catalog::postgres_text(.0))]
    Postgres(#[from] tokio_postgres::Error),
    #[error(transparent)]
    Scan(#[from] ScanError),
    #[error("cold rows can only be sent to sessions whose client_encoding is UTF8")]
    Encoding,
    #[error("{}", .0.message)]
    Refused(ErrorFields),
    /// A call of a function that reads tiered tables server-side: refused with these
    /// fields unless the session declared that it reads or writes hot rows only
    /// (`coldwire.hot_only_reads`, `coldwire.hot_only_writes`), which Postgres knows and
    /// coldwire does not.
    #[error("{}", .0.message)]
    HotOnlyCall(ErrorFields),
}

impl From<crate::catalog::segments::ColdStateError> for PlanError {
    fn from(e: crate::catalog::segments::ColdStateError) -> Self {
        PlanError::Scan(e.into())
    }
}

impl PlanError {
    /// What the client is told (without store locations or catalog details).
    pub fn client_error(&self) -> ErrorFields {
        match self {
            PlanError::Scan(ScanError::TooManyRows { table, cap }) => fields(
                "54000",
                format!("coldwire: the query would read more than {cap} cold rows of {table}"),
                Some("Add a condition on the primary key, or raise max_cold_rows in coldwire's configuration.".into()),
            ),
            PlanError::Scan(ScanError::TooMuchMemory { table, cap }) => fields(
                "54000",
                format!(
                    "coldwire: the cold rows of {table} this query needs take more than {} MiB in coldwire",
                    cap >> 20
                ),
                Some("Narrow the query with conditions coldwire evaluates on cold rows (the primary key, integers, dates, timestamps, text equality), aggregate in the query, or raise max_cold_memory_mb in coldwire's configuration.".into()),
            ),
            PlanError::Scan(ScanError::ArrayTooLarge { table, bytes }) => fields(
                "54000",
                format!(
                    "coldwire: the cold rows of {table} this query needs take {bytes} bytes as one array, more than Postgres accepts as one value (1 GB)"
                ),
                Some("Narrow the query with conditions coldwire evaluates on cold rows, or aggregate in the query.".into()),
            ),
            PlanError::Scan(ScanError::TooManyGroups { table, cap }) => fields(
                "54000",
                format!("coldwire: the query would aggregate more than {cap} groups of cold rows of {table}"),
                Some("Group by fewer distinct values, or narrow the query with conditions on the table's columns.".into()),
            ),
            PlanError::Refused(fields) | PlanError::HotOnlyCall(fields) => fields.clone(),
            PlanError::Encoding => fields(
                "0A000",
                "coldwire: cold rows of tiered tables are served only to sessions with client_encoding UTF8".into(),
                Some("SET client_encoding = 'UTF8', or convert on the client.".into()),
            ),
            e => {
                tracing::warn!(error = %e, "cold read failed");
                cold_tier_unreadable()
            }
        }
    }
}

/// What the client is told when the catalog or the cold tier could not be read to plan
/// or serve its statement.
pub fn cold_tier_unreadable() -> ErrorFields {
    fields(
        "58030",
        "coldwire could not read the cold tier".into(),
        Some("The proxy's log has the cause.".into()),
    )
}

/// An ERROR with `code`, `message` and `hint`: how the read and write paths refuse what
/// they cannot serve.
pub fn fields(code: &str, message: String, hint: Option<String>) -> ErrorFields {
    ErrorFields {
        severity: Severity::Error,
        code: code.to_owned(),
        message,
        detail: None,
        hint,
    }
}

/// The FATAL ErrorResponse for a session error, or `None` when the client's connection can
/// no longer carry one (it is gone, or its TLS handshake failed).
pub fn client_error(e: &SessionError) -> Option<ErrorFields> {
    let (code, message, hint) = match e {
        SessionError::Protocol(WireError::UnsupportedProtocol { .. }) => {
            (SqlState::FEATURE_NOT_SUPPORTED, e.to_string(), None)
        }
        SessionError::Protocol(inner) => (
            SqlState::PROTOCOL_VIOLATION,
            format!("protocol violation: {inner}"),
            None,
        ),
        SessionError::UpstreamProtocol(_) => (
            SqlState::PROTOCOL_VIOLATION,
            "the database server sent a message coldwire cannot relay".to_owned(),
            Some("the coldwire log has the details"),
        ),
        SessionError::TlsRequired => (
            SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
            "coldwire accepts only TLS connections (require_tls is set)".to_owned(),
            Some("connect with sslmode=require or stricter"),
        ),
        SessionError::UpstreamConnect { .. } => (
            SqlState::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION,
            "coldwire cannot connect to the database server".to_owned(),
            Some(
                "check that Postgres is running and that coldwire's upstream setting points at it",
            ),
        ),
        SessionError::UpstreamTimeout { ms, .. } => (
            SqlState::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION,
            format!("coldwire timed out after {ms} ms connecting to the database server"),
            Some(
                "check that Postgres is reachable from coldwire; connect_timeout_ms sets the limit",
            ),
        ),
        SessionError::UpstreamIo(_) => (
            SqlState::CONNECTION_FAILURE,
            "coldwire lost its connection to the database server".to_owned(),
            None,
        ),
        SessionError::TiersNotServed {
            database,
            tables,
            reason,
            service,
        } => (
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            if tables.is_some() {
                format!("database \"{database}\" has tiered tables, and this coldwire proxy cannot read their cold rows: {reason}")
            } else {
                format!("coldwire could not check database \"{database}\" for tiered tables, whose cold rows it could not read: {reason}")
            },
            Some(if *service {
                "the coldwire log says more; a direct connection to Postgres reads the hot rows only"
            } else {
                "start coldwire with --service-url (COLDWIRE_SERVICE_URL, or service_url in its configuration file); a direct connection to Postgres reads the hot rows only"
            }),
        ),
        SessionError::ClientGone
        | SessionError::ClientIo(_)
        | SessionError::Tls(_)
        | SessionError::StartupTimeout { .. } => return None,
    };
    let detail = match e {
        SessionError::TiersNotServed {
            tables: Some(tables),
            ..
        } => Some(format!("Tiered: {tables}.")),
        _ => None,
    };
    Some(ErrorFields {
        severity: Severity::Fatal,
        code: code.code().to_owned(),
        message,
        detail,
        hint: hint.map(str::to_owned),
    })
}

/// The ErrorResponse for an admin call coldwire refuses or could not carry out.
pub fn admin_error(e: &AdminError) -> ErrorFields {
    let mut detail = None;
    let (code, hint) = match e {
        AdminError::Misuse | AdminError::ComputedArgument { .. } => (
            SqlState::FEATURE_NOT_SUPPORTED,
            Some("send the call as its own statement, e.g. SELECT coldwire.tier_table('events')"),
        ),
        AdminError::UnknownParameter { .. }
        | AdminError::TooManyArguments { .. }
        | AdminError::MissingArgument { .. }
        | AdminError::WrongType { .. } => (SqlState::UNDEFINED_FUNCTION, None),
        AdminError::DuplicateArgument { .. } | AdminError::PositionalAfterNamed { .. } => (SqlState::SYNTAX_ERROR, None),
        AdminError::Policy(_) => (
            SqlState::INVALID_PARAMETER_VALUE,
            Some(crate::catalog::policy::POLICY_HINT),
        ),
        AdminError::InvalidText { .. } => (SqlState::INVALID_TEXT_REPRESENTATION, None),
        AdminError::BadBinary { .. } => (SqlState::INVALID_BINARY_REPRESENTATION, None),
        AdminError::NullArgument { .. } => (SqlState::NULL_VALUE_NOT_ALLOWED, None),
        AdminError::MissingParameter { .. } => (SqlState::UNDEFINED_PARAMETER, None),
        AdminError::Disabled => (
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            Some("start coldwire with --service-url (or COLDWIRE_SERVICE_URL) to enable tiering"),
        ),
        AdminError::InFailedTransaction => (SqlState::IN_FAILED_SQL_TRANSACTION, None),
        AdminError::UndefinedTable(_) => (SqlState::UNDEFINED_TABLE, None),
        AdminError::NotOwner { .. } => (SqlState::INSUFFICIENT_PRIVILEGE, None),
        AdminError::AlreadyTiered { .. } => {
            (SqlState::DUPLICATE_OBJECT, Some("use coldwire.set_policy to change the policy of a tiered table"))
        }
        AdminError::NotTiered { .. } => {
            (SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE, Some("tier it first with coldwire.tier_table"))
        }
        AdminError::Refused { reasons, .. } => {
            detail = Some(reasons.join("\n"));
            (SqlState::FEATURE_NOT_SUPPORTED, Some("docs/architecture.md lists what tiering supports"))
        }
        AdminError::OtherDatabase { .. } => (
            SqlState::FEATURE_NOT_SUPPORTED,
            Some("this is a coldwire bug: admin calls go to the executor of the session's own database"),
        ),
        AdminError::NotImplemented(_) => (SqlState::FEATURE_NOT_SUPPORTED, None),
        AdminError::Postgres { code, message, detail, hint } => {
            return ErrorFields {
                severity: Severity::Error,
                code: code.clone(),
                message: message.clone(),
                detail: detail.clone(),
                hint: hint.clone(),
            }
        }
        AdminError::DatabaseUnreachable { .. } => (
            SqlState::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION,
            Some("grant that role CONNECT on the database and let it in through pg_hba.conf; the coldwire log has Postgres's answer"),
        ),
        AdminError::CatalogRefused { .. } => (
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            Some("the service role needs CREATE on the database to make schema coldwire there"),
        ),
        AdminError::TooManyDatabases { .. } => (
            SqlState::PROGRAM_LIMIT_EXCEEDED,
            Some("raise max_databases in coldwire's configuration, or untier the tables of a database you no longer tier"),
        ),
        AdminError::NoTieredTables { .. } => {
            (SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE, Some("tier a table first with coldwire.tier_table"))
        }
        AdminError::ServiceUnavailable => {
            (SqlState::CONNECTION_FAILURE, Some("the coldwire log says why; check service_url and Postgres"))
        }
    };
    ErrorFields {
        severity: Severity::Error,
        code: code.code().to_owned(),
        message: e.to_string(),
        detail,
        hint: hint.map(str::to_owned),
    }
}

/// The ErrorResponse for a cold-value error (a flush that cannot store a value, a cold
/// segment that does not decode).
pub fn cold_error(e: &ColdError) -> ErrorFields {
    let (code, hint) = match e {
        ColdError::Unsupported(_) => (SqlState::FEATURE_NOT_SUPPORTED, None),
        ColdError::Value { source: ValueError::Unrepresentable { .. }, .. } => (
            SqlState::FEATURE_NOT_SUPPORTED,
            Some("coldwire refuses values it could not give back exactly; change or delete the value to flush the row"),
        ),
        ColdError::Value { source: ValueError::Malformed { .. }, .. } | ColdError::Stream(_) | ColdError::Truncated(_) => {
            (SqlState::INVALID_BINARY_REPRESENTATION, None)
        }
        ColdError::Schema(_) => (SqlState::DATA_CORRUPTED, None),
        ColdError::Arrow(_) | ColdError::Failed => (SqlState::INTERNAL_ERROR, None),
    };
    ErrorFields {
        severity: Severity::Error,
        code: code.code().to_owned(),
        message: e.to_string(),
        detail: None,
        hint: hint.map(str::to_owned),
    }
}

/// What a session is told when the shutdown grace period ends.
pub fn shutdown_notice() -> ErrorFields {
    ErrorFields {
        severity: Severity::Fatal,
        code: SqlState::ADMIN_SHUTDOWN.code().to_owned(),
        message: "terminating connection because coldwire is shutting down".to_owned(),
        detail: None,
        hint: Some(
            "reconnect: another coldwire instance, or this one after restart, will serve you"
                .to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_messages_hide_upstream_addresses() {
        let e = SessionError::UpstreamConnect {
            addr: "10.1.2.3:5432".into(),
            source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        };
        let f = client_error(&e).unwrap();
        assert_eq!(f.code, "08001");
        assert!(!f.message.contains("10.1.2.3"));
    }

    #[test]
    fn cold_refusals_map_to_0a000_and_corruption_to_22p03() {
        let refused = ColdError::Value {
            column: "ts".into(),
            row: 3,
            source: ValueError::Unrepresentable {
                ty: "timestamp",
                detail: "far".into(),
            },
        };
        let f = cold_error(&refused);
        assert_eq!(f.code, "0A000");
        assert!(f.message.contains("\"ts\"") && f.hint.is_some());
        assert_eq!(cold_error(&ColdError::Truncated("a tuple")).code, "22P03");
    }

    #[test]
    fn protocol_errors_map_to_08p01_and_0a000() {
        let f = client_error(&SessionError::Protocol(WireError::BadStartupLength(3))).unwrap();
        assert_eq!((f.code.as_str(), f.severity), ("08P01", Severity::Fatal));
        let f = client_error(&SessionError::Protocol(WireError::UnsupportedProtocol {
            major: 2,
            minor: 0,
        }))
        .unwrap();
        assert_eq!(f.code, "0A000");
        assert!(client_error(&SessionError::ClientGone).is_none());
    }
}
