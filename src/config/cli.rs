//! Flags of `coldwire serve`; each also reads `COLDWIRE_<NAME>` from the environment and
//! overrides the config file.

use std::path::PathBuf;

use clap::Args;

use super::{Config, ConfigError};

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
    /// Upstream connect timeout in milliseconds [default: 5000].
    #[arg(long, env = "COLDWIRE_CONNECT_TIMEOUT_MS")]
    pub connect_timeout_ms: Option<u64>,
    /// Seconds sessions may run on after SIGTERM [default: 30].
    #[arg(long, env = "COLDWIRE_SHUTDOWN_GRACE_SECS")]
    pub shutdown_grace_secs: Option<u64>,
    /// Threads that run sessions, 0 = one per core [default: 0].
    #[arg(long, env = "COLDWIRE_WORKER_THREADS")]
    pub worker_threads: Option<usize>,
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
        c.service_url = a.service_url.or(c.service_url);
        c.metrics_listen = a.metrics_listen.or(c.metrics_listen);
        c.tls_cert = a.tls_cert.or(c.tls_cert);
        c.tls_key = a.tls_key.or(c.tls_key);
        c.validate()?;
        Ok(c)
    }
}
