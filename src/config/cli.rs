//! Flags of `coldwire serve`; each also reads `COLDWIRE_<NAME>` from the environment and
//! overrides the config file.

use std::path::PathBuf;

use clap::Args;

use super::{Config, ConfigError, Secret};

/// The environment variable that sets `s3_secret_access_key` (there is no flag).
pub const SECRET_KEY_ENV: &str = "COLDWIRE_S3_SECRET_ACCESS_KEY";

/// Flags and environment variables for `coldwire serve`.
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// TOML config file (see config/coldwire.example.toml).
    #[arg(long, env = "COLDWIRE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address to accept clients on [default: 127.0.0.1:6432].
    #[arg(long, env = "COLDWIRE_LISTEN")]
    pub listen: Option<String>,
    /// Upstream Postgres, postgres://host:port/dbname [default: postgres://127.0.0.1:5432/postgres].
    #[arg(long, env = "COLDWIRE_UPSTREAM")]
    pub upstream: Option<String>,
    /// DSN for coldwire's own work; prefer the environment variable when it holds a password.
    #[arg(long, env = "COLDWIRE_SERVICE_URL", hide_env_values = true)]
    pub service_url: Option<String>,
    /// Object store URL for cold segments [default: file://./coldwire-data].
    #[arg(long, env = "COLDWIRE_COLD_STORE")]
    pub cold_store: Option<String>,
    /// Endpoint of an S3-compatible service, e.g. http://127.0.0.1:9000 [default: AWS_ENDPOINT or AWS].
    #[arg(long, env = "COLDWIRE_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
    /// S3 region [default: AWS_REGION or us-east-1].
    #[arg(long, env = "COLDWIRE_S3_REGION")]
    pub s3_region: Option<String>,
    /// Permit an http:// S3 endpoint [default: AWS_ALLOW_HTTP or false].
    #[arg(long, env = "COLDWIRE_S3_ALLOW_HTTP", num_args = 0..=1, default_missing_value = "true")]
    pub s3_allow_http: Option<bool>,
    /// Virtual-hosted-style S3 requests instead of path-style [default: path-style].
    #[arg(long, env = "COLDWIRE_S3_VIRTUAL_HOSTED_STYLE", num_args = 0..=1, default_missing_value = "true")]
    pub s3_virtual_hosted_style: Option<bool>,
    /// S3 access key id [default: AWS_ACCESS_KEY_ID]. The secret key has no flag: set
    /// COLDWIRE_S3_SECRET_ACCESS_KEY (or AWS_SECRET_ACCESS_KEY, or the config file).
    #[arg(long, env = "COLDWIRE_S3_ACCESS_KEY_ID")]
    pub s3_access_key_id: Option<String>,
    /// Milliseconds a failing object-store request is retried before the flush fails [default: 30000].
    #[arg(long, env = "COLDWIRE_COLD_STORE_RETRY_TIMEOUT_MS")]
    pub cold_store_retry_timeout_ms: Option<u64>,
    /// Address of the Prometheus /metrics endpoint [default: disabled].
    #[arg(long, env = "COLDWIRE_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,
    /// PEM certificate chain for client TLS.
    #[arg(long, env = "COLDWIRE_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(long, env = "COLDWIRE_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Refuse clients that do not use TLS.
    #[arg(long, env = "COLDWIRE_REQUIRE_TLS", num_args = 0..=1, default_missing_value = "true")]
    pub require_tls: Option<bool>,
    /// Largest client message in bytes [default: 134217728].
    #[arg(long, env = "COLDWIRE_MAX_MESSAGE_BYTES")]
    pub max_message_bytes: Option<usize>,
    /// Most cold rows one table reference of a read may bring back; 0: no bound [default: 0].
    #[arg(long, env = "COLDWIRE_MAX_COLD_ROWS")]
    pub max_cold_rows: Option<usize>,
    /// Most MiB the cold rows of one table reference of a read may take; 0: no bound [default: 256].
    #[arg(long, env = "COLDWIRE_MAX_COLD_MEMORY_MB")]
    pub max_cold_memory_mb: Option<usize>,
    /// Most cold rows one write may bring back into the heap [default: 100000].
    #[arg(long, env = "COLDWIRE_MAX_REHYDRATE_ROWS")]
    pub max_rehydrate_rows: Option<usize>,
    /// Most databases coldwire tiers tables in [default: 16].
    #[arg(long, env = "COLDWIRE_MAX_DATABASES")]
    pub max_databases: Option<usize>,
    /// MiB of decoded cold rows kept in memory for lookups; 0 turns the cache off [default: 256].
    #[arg(long, env = "COLDWIRE_COLD_CACHE_MB")]
    pub cold_cache_mb: Option<usize>,
    /// Upstream connect timeout in milliseconds [default: 5000].
    #[arg(long, env = "COLDWIRE_CONNECT_TIMEOUT_MS")]
    pub connect_timeout_ms: Option<u64>,
    /// Seconds sessions may run on after SIGTERM [default: 30].
    #[arg(long, env = "COLDWIRE_SHUTDOWN_GRACE_SECS")]
    pub shutdown_grace_secs: Option<u64>,
    /// Threads that run sessions, 0 = one per core [default: 0].
    #[arg(long, env = "COLDWIRE_WORKER_THREADS")]
    pub worker_threads: Option<usize>,
    /// What is logged, as RUST_LOG directives, e.g. coldwire=debug [default: RUST_LOG or coldwire=info].
    #[arg(long, env = "COLDWIRE_LOG")]
    pub log: Option<String>,
    /// Policy keys for tables tiered from now on, as JSON, e.g. '{"hot_row_limit": 500000}'.
    #[arg(long, env = "COLDWIRE_POLICY_DEFAULTS")]
    pub policy_defaults: Option<String>,
}

impl ServeArgs {
    /// The config file (or defaults) with every given flag or variable applied, validated.
    ///
    /// # Errors
    /// An unreadable or invalid file, or an invalid resulting setting.
    pub fn resolve(&self) -> Result<Config, ConfigError> {
        let mut c = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        let a = self.clone();
        if let Some(v) = a.listen {
            c.listen = v;
        }
        if let Some(v) = a.upstream {
            c.upstream = v;
        }
        if let Some(v) = a.cold_store {
            c.cold_store = v;
        }
        if let Some(v) = a.max_message_bytes {
            c.max_message_bytes = v;
        }
        if let Some(v) = a.max_rehydrate_rows {
            c.max_rehydrate_rows = v;
        }
        if let Some(v) = a.max_databases {
            c.max_databases = v;
        }
        if let Some(v) = a.max_cold_rows {
            c.max_cold_rows = v;
        }
        if let Some(v) = a.max_cold_memory_mb {
            c.max_cold_memory_mb = v;
        }
        if let Some(v) = a.cold_cache_mb {
            c.cold_cache_mb = v;
        }
        if let Some(v) = a.connect_timeout_ms {
            c.connect_timeout_ms = v;
        }
        if let Some(v) = a.shutdown_grace_secs {
            c.shutdown_grace_secs = v;
        }
        if let Some(v) = a.worker_threads {
            c.worker_threads = v;
        }
        if let Some(v) = a.require_tls {
            c.require_tls = v;
        }
        if let Some(v) = a.cold_store_retry_timeout_ms {
            c.cold_store_retry_timeout_ms = v;
        }
        c.service_url = a.service_url.or(c.service_url);
        c.s3_endpoint = a.s3_endpoint.or(c.s3_endpoint);
        c.s3_region = a.s3_region.or(c.s3_region);
        c.s3_allow_http = a.s3_allow_http.or(c.s3_allow_http);
        c.s3_virtual_hosted_style = a.s3_virtual_hosted_style.or(c.s3_virtual_hosted_style);
        c.s3_access_key_id = a.s3_access_key_id.or(c.s3_access_key_id);
        // A secret never comes from a flag, which `ps` would show.
        if let Some(v) = std::env::var_os(SECRET_KEY_ENV) {
            let v = v.into_string().map_err(|_| ConfigError::Invalid {
                field: "s3_secret_access_key",
                reason: format!("{SECRET_KEY_ENV} is not UTF-8"),
            })?;
            c.s3_secret_access_key = Some(Secret(v));
        }
        c.metrics_listen = a.metrics_listen.or(c.metrics_listen);
        c.tls_cert = a.tls_cert.or(c.tls_cert);
        c.tls_key = a.tls_key.or(c.tls_key);
        c.log = a.log.or(c.log);
        c.policy_defaults = a.policy_defaults.or(c.policy_defaults);
        c.validate()?;
        Ok(c)
    }
}
