//! The proxy process: binding the listeners, accepting clients, graceful shutdown.

mod listener;

pub use listener::{policy_defaults, Reloader, Server, ServerError};

/// The runtime the proxy runs on: multi-threaded with `threads` workers (0: one per core),
/// or single-threaded for `threads == 1` (`--worker-threads`).
///
/// # Errors
/// The runtime could not be built (no threads, no I/O driver).
pub fn runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    if threads == 1 {
        return tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if threads > 1 {
        builder.worker_threads(threads);
    }
    builder.enable_all().build()
}
