//! What carries out an admin call once the session has recognized and typed it. The
//! session hands over an [`AdminRequest`]; tiering implements [`AdminExecutor`].

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

use super::args::Resolved;
use super::{AdminError, AdminFunction, Policy};

/// A recognized, typed admin call and who made it.
#[derive(Debug, Clone, PartialEq)]
pub struct AdminRequest {
    pub function: AdminFunction,
    /// One per declared parameter.
    pub args: Vec<Resolved>,
    /// The session's user (from the startup packet, authenticated by Postgres).
    pub user: String,
    pub database: String,
}

/// The boxed future an executor returns.
pub type AdminFuture<'a> = Pin<Box<dyn Future<Output = Result<Value, AdminError>> + Send + 'a>>;

/// Carries out admin calls; the result is the jsonb the call returns.
pub trait AdminExecutor: Send + Sync {
    /// Runs `request`.
    fn execute(&self, request: AdminRequest) -> AdminFuture<'_>;
}

/// The executor of a proxy without a service connection: arguments are still checked, so a
/// bad policy is reported as such, then the call is refused (55000) with a hint.
pub struct Disabled;

impl AdminExecutor for Disabled {
    fn execute(&self, request: AdminRequest) -> AdminFuture<'_> {
        Box::pin(async move {
            for arg in &request.args {
                if let Resolved::Json(policy) = arg {
                    Policy::check_keys(policy)?;
                }
            }
            Err(AdminError::Disabled)
        })
    }
}
