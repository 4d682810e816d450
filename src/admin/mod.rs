//! Admin SQL (`coldwire.tier_table`, `set_policy`, `flush_table`) answered by the proxy:
//! recognizing the calls and validating their arguments.

pub mod call;
pub mod policy;

pub use call::{mentions_coldwire, recognize, AdminCall, AdminFunction, ArgValue};
pub use policy::Policy;

/// An admin call coldwire refuses, before any work is done.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("coldwire admin functions must be called on their own: SELECT coldwire.f(arguments) [AS name]")]
    Misuse,
    #[error("arguments of coldwire.{function} must be literals or parameters")]
    ComputedArgument { function: &'static str },
    #[error("coldwire.{function} has no parameter named \"{name}\"")]
    UnknownParameter { function: &'static str, name: String },
    #[error("coldwire.{function} takes at most {max} arguments")]
    TooManyArguments { function: &'static str, max: usize },
    #[error("coldwire.{function}: argument \"{name}\" given twice")]
    DuplicateArgument { function: &'static str, name: &'static str },
    #[error("coldwire.{function}: positional argument after a named one")]
    PositionalAfterNamed { function: &'static str },
    #[error("coldwire.{function}: argument \"{name}\" is required")]
    MissingArgument { function: &'static str, name: &'static str },
    #[error("invalid policy: {0}")]
    Policy(#[from] policy::PolicyError),
}
