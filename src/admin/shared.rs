//! What the admin calls share: the table argument, the permission check (DESIGN §8), and
//! how errors of the service connection become admin errors.

use tokio_postgres::Client;

use super::args::{Resolved, TableRef};
use super::executor::AdminRequest;
use super::AdminError;
use crate::catalog::inspect::TableFacts;
use crate::catalog::CatalogError;

/// The table an admin call names (its first argument).
pub(super) fn table_arg(request: &AdminRequest) -> Result<&TableRef, AdminError> {
    match request.args.first() {
        Some(Resolved::Table(t)) => Ok(t),
        _ => Err(AdminError::NullArgument {
            function: request.function.name(),
            name: "t",
        }),
    }
}

/// DESIGN §8: the table's owner (or a member of the owning role) or a member of
/// `coldwire_admin`; the session's authenticated user is the one checked.
pub(super) async fn check_may_manage(
    client: &Client,
    user: &str,
    facts: &TableFacts,
) -> Result<(), AdminError> {
    let allowed: bool = client
        .query_one(
            "SELECT pg_has_role($1::text::name, $2::oid, 'USAGE') \
                 OR EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = 'coldwire_admin' \
                            AND pg_has_role($1::text::name, r.oid, 'MEMBER'))",
            &[&user, &facts.oid_owner()],
        )
        .await
        .map_err(pg_error)?
        .get(0);
    if allowed {
        Ok(())
    } else {
        Err(AdminError::NotOwner {
            table: facts.display_name(),
        })
    }
}

/// A Postgres error of the service connection, code and text kept (they describe the
/// user's table or the catalog, not coldwire's internals).
pub(super) fn pg_error(e: tokio_postgres::Error) -> AdminError {
    match e.as_db_error() {
        Some(db) => AdminError::Postgres {
            code: db.code().code().to_owned(),
            message: db.message().to_owned(),
            detail: db.detail().map(str::to_owned),
            hint: db.hint().map(str::to_owned),
        },
        None => AdminError::ServiceUnavailable,
    }
}

pub(super) fn service_error(e: CatalogError) -> AdminError {
    match e {
        CatalogError::UndefinedTable(name) => AdminError::UndefinedTable(name),
        CatalogError::Postgres(pg) => pg_error(pg),
        other => {
            tracing::warn!(error = %other, "service connection failed during an admin call");
            AdminError::ServiceUnavailable
        }
    }
}
