//! Named failpoints for crash tests: `COLDWIRE_FAILPOINT=<name>` makes the process exit
//! abruptly (like SIGKILL: no cleanup) when the flush reaches that point.

/// Exits the process at once if the failpoint `name` is armed.
pub fn hit(name: &str) {
    if std::env::var("COLDWIRE_FAILPOINT").is_ok_and(|armed| armed == name) {
        tracing::error!(failpoint = name, "failpoint reached: exiting");
        std::process::abort();
    }
}
