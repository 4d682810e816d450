//! Prometheus metrics: the fixed names (documented in docs/metrics.md), the recorder, and
//! the HTTP endpoint that serves `/metrics`.

mod endpoint;

pub use endpoint::serve;

/// Gauge: client connections open now.
pub const CLIENT_CONNECTIONS: &str = "coldwire_client_connections";
/// Counter: client sessions accepted since start.
pub const SESSIONS_TOTAL: &str = "coldwire_sessions_total";
/// Counter: bytes relayed, label `direction` = `client_to_upstream` | `upstream_to_client`.
pub const BYTES_RELAYED_TOTAL: &str = "coldwire_bytes_relayed_total";
/// Counter: sessions ended by an error, label `kind` (see `SessionError::kind`).
pub const ERRORS_TOTAL: &str = "coldwire_errors_total";
/// Counter: CancelRequests received, label `outcome` = `forwarded` | `unknown_key` | `failed`.
pub const CANCEL_REQUESTS_TOTAL: &str = "coldwire_cancel_requests_total";

/// Counter: rows moved to the cold tier by completed flushes.
pub const FLUSH_ROWS_TOTAL: &str = "coldwire_flush_rows_total";
/// Counter: flush jobs run by this process, label `outcome` = `completed` | `failed` | `fenced`.
pub const FLUSH_JOBS_TOTAL: &str = "coldwire_flush_jobs_total";
/// Counter: admin calls answered, label `function`, `outcome` = `ok` | `error`.
pub const ADMIN_CALLS_TOTAL: &str = "coldwire_admin_calls_total";
/// Statements coldwire rewrote or prepared for, by route (`read`, `write`).
pub const ROUTES_TOTAL: &str = "coldwire_routes_total";
/// Reads planned again after the guard saw the cold tier change.
pub const READ_RETRIES_TOTAL: &str = "coldwire_read_retries_total";
/// Cold rows bound into rewritten reads.
pub const COLD_ROWS_INJECTED_TOTAL: &str = "coldwire_cold_rows_injected_total";
/// Cold lookups not made: every key asked for was brought back by the transaction.
pub const COLD_LOOKUPS_SKIPPED_TOTAL: &str = "coldwire_cold_lookups_skipped_total";
/// Cold rows the cold engine read to compute aggregate partials.
pub const COLD_ROWS_SCANNED_TOTAL: &str = "coldwire_cold_rows_scanned_total";
/// Bytes read from the cold store by reads.
pub const COLD_BYTES_READ_TOTAL: &str = "coldwire_cold_bytes_read_total";
/// Segments skipped by reads thanks to their stats.
pub const COLD_SEGMENTS_PRUNED_TOTAL: &str = "coldwire_cold_segments_pruned_total";
/// Cold rows brought back into the heap before writes that may touch them.
pub const ROWS_REHYDRATED_TOTAL: &str = "coldwire_rows_rehydrated_total";
/// Narrow cold reads looked up in the decoded-page cache, by outcome (hit, miss).
pub const COLD_CACHE_LOOKUPS_TOTAL: &str = "coldwire_cold_cache_lookups_total";
/// Bytes of decoded cold rows the cache holds.
pub const COLD_CACHE_BYTES: &str = "coldwire_cold_cache_bytes";

/// Installs the process-wide Prometheus recorder and describes every metric.
///
/// # Errors
/// A recorder was already installed.
pub fn install(
) -> Result<metrics_exporter_prometheus::PrometheusHandle, metrics_exporter_prometheus::BuildError>
{
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
    metrics::describe_gauge!(CLIENT_CONNECTIONS, "Client connections open now");
    metrics::describe_counter!(SESSIONS_TOTAL, "Client sessions accepted since start");
    metrics::describe_counter!(
        BYTES_RELAYED_TOTAL,
        "Bytes relayed between clients and Postgres"
    );
    metrics::describe_counter!(ERRORS_TOTAL, "Sessions ended by an error, by kind");
    metrics::describe_counter!(CANCEL_REQUESTS_TOTAL, "CancelRequests received, by outcome");
    metrics::describe_counter!(
        FLUSH_ROWS_TOTAL,
        "Rows moved to the cold tier by completed flushes"
    );
    metrics::describe_counter!(
        FLUSH_JOBS_TOTAL,
        "Flush jobs run by this process, by outcome"
    );
    metrics::describe_counter!(
        ADMIN_CALLS_TOTAL,
        "Admin calls answered, by function and outcome"
    );
    metrics::describe_counter!(
        ROUTES_TOTAL,
        "Statements coldwire rewrote or prepared for, by route"
    );
    metrics::describe_counter!(
        READ_RETRIES_TOTAL,
        "Reads planned again after the guard saw the cold tier change"
    );
    metrics::describe_counter!(
        COLD_ROWS_INJECTED_TOTAL,
        "Cold rows bound into rewritten reads"
    );
    metrics::describe_counter!(
        COLD_LOOKUPS_SKIPPED_TOTAL,
        "Cold lookups not made because the transaction brought every key asked for back into the heap itself"
    );
    metrics::describe_counter!(
        COLD_ROWS_SCANNED_TOTAL,
        "Cold rows the cold engine read to compute aggregate partials"
    );
    metrics::describe_counter!(
        COLD_BYTES_READ_TOTAL,
        "Bytes read from the cold store by reads"
    );
    metrics::describe_counter!(
        COLD_SEGMENTS_PRUNED_TOTAL,
        "Segments skipped by reads thanks to their stats"
    );
    metrics::describe_counter!(
        ROWS_REHYDRATED_TOTAL,
        "Cold rows brought back into the heap before writes that may touch them"
    );
    metrics::describe_counter!(
        COLD_CACHE_LOOKUPS_TOTAL,
        "Narrow cold reads looked up in the decoded-page cache, by outcome"
    );
    metrics::describe_gauge!(
        COLD_CACHE_BYTES,
        "Bytes of decoded cold rows the cache holds"
    );
    Ok(handle)
}
