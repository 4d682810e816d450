//! The proxy process: binding the listeners, accepting clients, graceful shutdown.

mod listener;

pub use listener::{Server, ServerError};
