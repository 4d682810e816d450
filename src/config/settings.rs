//! The proxy's configuration: a TOML file, then `COLDWIRE_*` environment variables and
//! command-line flags on top (flags win).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::upstream::Upstream;
use super::ConfigError;
use crate::store::StoreOptions;

/// Every setting of `coldwire serve`. Field docs name the default; see
/// `config/coldwire.example.toml` for a commented file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address clients connect to. Default `127.0.0.1:6432`.
    pub listen: String,
    /// The Postgres server sessions are relayed to, as a `postgres://host:port/dbname` URL
    /// (a host starting with `/`, or `?host=/dir`, is a Unix-socket directory). Only host,
    /// port and the default database are used: each session authenticates as its client.
    /// Default `postgres://127.0.0.1:5432/postgres`.
    pub upstream: String,
    /// DSN for coldwire's own work (catalog, flush), a `postgres://` URL or libpq key=value
    /// string. At start coldwire creates or upgrades its catalog through it and refuses to
    /// start if it cannot. Default: none (tiering disabled; coldwire only relays).
    pub service_url: Option<String>,
    /// Where cold segments go: `file://DIR`, `s3://bucket/prefix`, `gs://bucket/prefix`,
    /// `az://container/prefix` or `abfss://container@account.dfs.core.windows.net/prefix`.
    /// Keys are rooted under the URL's path. Credentials and other provider settings come
    /// from the provider's environment variables (`AWS_*`, `GOOGLE_*`, `AZURE_*`) and, for
    /// S3, the `s3_*` settings, which win. Default `file://./coldwire-data`.
    pub cold_store: String,
    /// Endpoint of an S3-compatible service (MinIO, Ceph, R2, …), e.g.
    /// `http://127.0.0.1:9000`. Default: none (`AWS_ENDPOINT`, else AWS itself).
    pub s3_endpoint: Option<String>,
    /// S3 region. Default: none (`AWS_REGION`/`AWS_DEFAULT_REGION`, else `us-east-1`).
    pub s3_region: Option<String>,
    /// Permit an `http://` endpoint. Default: none (`AWS_ALLOW_HTTP`, else `false`).
    pub s3_allow_http: Option<bool>,
    /// Virtual-hosted-style requests (`bucket.host/key`) instead of path-style
    /// (`host/bucket/key`). Default: none (`AWS_VIRTUAL_HOSTED_STYLE_REQUEST`, else
    /// path-style).
    pub s3_virtual_hosted_style: Option<bool>,
    /// S3 access key id. Default: none (`AWS_ACCESS_KEY_ID`, else the instance's role).
    pub s3_access_key_id: Option<String>,
    /// S3 secret access key; from the file or `COLDWIRE_S3_SECRET_ACCESS_KEY`, never a
    /// flag. Default: none (`AWS_SECRET_ACCESS_KEY`).
    pub s3_secret_access_key: Option<Secret>,
    /// How long a failing object-store request is retried (with backoff) before the flush
    /// that made it fails, in milliseconds. Default 30000.
    pub cold_store_retry_timeout_ms: u64,
    /// Address of the Prometheus `/metrics` endpoint. Default: none (disabled).
    pub metrics_listen: Option<String>,
    /// PEM certificate chain for client TLS. Default: none (TLS refused with `N`).
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for `tls_cert`. Default: none.
    pub tls_key: Option<PathBuf>,
    /// Refuse clients that do not negotiate TLS (SQLSTATE 28000). Default `false`.
    pub require_tls: bool,
    /// Largest message a client may send, in bytes; larger frames get 08P01 and the
    /// connection is closed. Default 134217728 (128 MiB).
    pub max_message_bytes: usize,
    /// How long to wait for the upstream TCP connect (and the service connection's, unless
    /// `service_url` sets `connect_timeout`; and the object store's connect and its listing
    /// at start), in milliseconds. Default 5000.
    pub connect_timeout_ms: u64,
    /// After SIGTERM, how long open sessions may run before they are closed, in seconds.
    /// Default 30.
    pub shutdown_grace_secs: u64,
    /// Threads that run sessions; 0 means one per CPU core. Default 0. On a machine of
    /// few cores shared with Postgres, 1 may relay faster (see bench/README.md).
    pub worker_threads: usize,
    /// Most cold rows one reference in a read may bring back; a read that would exceed it
    /// fails with 54000 naming the table. Default 0: no bound on rows, only on memory
    /// (`max_cold_memory_mb`).
    pub max_cold_rows: usize,
    /// Most memory the cold rows of one table reference in a read may take in coldwire
    /// (decoded, in MiB) before they are bound to the statement; a read that would exceed
    /// it fails with 54000 naming the table and the setting. 0: no bound. Default 256.
    /// Aggregates answered from cold partials are bound by neither.
    pub max_cold_memory_mb: usize,
    /// Most cold rows one write (UPDATE, DELETE, upsert, locking read) may bring back into
    /// the heap before it runs; a write whose conditions bound no fewer fails with 54000
    /// naming the table. Default 100000.
    pub max_rehydrate_rows: usize,
    /// Most databases coldwire tiers tables in, that of `service_url` included. Each holds
    /// up to four service connections (catalog reads, LISTEN, the flush executor and the
    /// flush it runs); `tier_table` in one more database fails with 54000. Default 16.
    pub max_databases: usize,
    /// MiB of decoded cold rows kept in memory (`cold::page_cache`): the pages narrow reads
    /// such as pk lookups decoded, evicted oldest first. 0 turns the cache off. Default 256.
    pub cold_cache_mb: usize,
    /// What is logged, as `RUST_LOG` directives (e.g. `coldwire=debug`). Default: none
    /// (`RUST_LOG`, else `coldwire=info`). Reloaded on SIGHUP.
    pub log: Option<String>,
    /// Policy keys that tables tiered from now on get unless `tier_table` names them, as
    /// JSON (e.g. `{"hot_row_limit": 500000}`). Default: none (the built-in defaults).
    /// Reloaded on SIGHUP; tables already tiered keep their policies.
    pub policy_defaults: Option<String>,
}

/// A setting that must not show in logs or `Debug` output.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Default for `max_message_bytes`.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 128 * 1024 * 1024;

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:6432".into(),
            upstream: "postgres://127.0.0.1:5432/postgres".into(),
            service_url: None,
            cold_store: "file://./coldwire-data".into(),
            s3_endpoint: None,
            s3_region: None,
            s3_allow_http: None,
            s3_virtual_hosted_style: None,
            s3_access_key_id: None,
            s3_secret_access_key: None,
            cold_store_retry_timeout_ms: 30_000,
            metrics_listen: None,
            tls_cert: None,
            tls_key: None,
            require_tls: false,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            connect_timeout_ms: 5000,
            shutdown_grace_secs: 30,
            worker_threads: 0,
            max_cold_rows: 0,
            max_cold_memory_mb: 256,
            max_rehydrate_rows: 100_000,
            max_databases: 16,
            cold_cache_mb: 256,
            log: None,
            policy_defaults: None,
        }
    }
}

impl Config {
    /// Reads a TOML file; unknown keys are errors.
    ///
    /// # Errors
    /// An unreadable file, invalid TOML, or an unknown key.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.display().to_string(),
            source,
        })
    }

    /// Checks what can be checked before anything starts.
    ///
    /// # Errors
    /// The first invalid setting, named.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.upstream()?;
        self.service()?;
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(ConfigError::Invalid {
                field: "tls_cert/tls_key",
                reason: "set both or neither".into(),
            });
        }
        if self.require_tls && self.tls_cert.is_none() {
            return Err(ConfigError::Invalid {
                field: "require_tls",
                reason: "needs tls_cert and tls_key".into(),
            });
        }
        if !(1024..=(1 << 30)).contains(&self.max_message_bytes) {
            return Err(ConfigError::Invalid {
                field: "max_message_bytes",
                reason: "must be between 1024 and 1073741824".into(),
            });
        }
        if self.connect_timeout_ms == 0 {
            return Err(ConfigError::Invalid {
                field: "connect_timeout_ms",
                reason: "must be positive".into(),
            });
        }
        if self.cold_store_retry_timeout_ms == 0 {
            return Err(ConfigError::Invalid {
                field: "cold_store_retry_timeout_ms",
                reason: "must be positive".into(),
            });
        }
        if let Some(log) = &self.log {
            tracing_subscriber::EnvFilter::try_new(log).map_err(|e| ConfigError::Invalid {
                field: "log",
                reason: format!("{e} (RUST_LOG directives such as coldwire=debug)"),
            })?;
        }
        Ok(())
    }

    /// The settings that differ in `new` and that a SIGHUP does not reload (they need a
    /// restart).
    pub fn needing_restart(&self, new: &Config) -> Vec<&'static str> {
        let mut changed = Vec::new();
        macro_rules! compare {
            ($($field:ident),*) => {
                $(if self.$field != new.$field {
                    changed.push(stringify!($field));
                })*
            };
        }
        compare!(
            listen,
            upstream,
            service_url,
            cold_store,
            s3_endpoint,
            s3_region,
            s3_allow_http,
            s3_virtual_hosted_style,
            s3_access_key_id,
            s3_secret_access_key,
            cold_store_retry_timeout_ms,
            metrics_listen,
            require_tls,
            max_message_bytes,
            connect_timeout_ms,
            shutdown_grace_secs,
            worker_threads,
            max_cold_rows,
            max_cold_memory_mb,
            max_rehydrate_rows,
            max_databases,
            cold_cache_mb
        );
        changed
    }

    /// The cold store settings besides its URL.
    pub fn cold_store_options(&self) -> StoreOptions {
        StoreOptions {
            s3_endpoint: self.s3_endpoint.clone(),
            s3_region: self.s3_region.clone(),
            s3_allow_http: self.s3_allow_http,
            s3_virtual_hosted_style: self.s3_virtual_hosted_style,
            s3_access_key_id: self.s3_access_key_id.clone(),
            s3_secret_access_key: self.s3_secret_access_key.as_ref().map(|s| s.0.clone()),
            connect_timeout: Some(self.connect_timeout()),
            retry_timeout: Some(Duration::from_millis(self.cold_store_retry_timeout_ms)),
        }
    }

    /// The parsed upstream address.
    ///
    /// # Errors
    /// An upstream URL that is not a usable `postgres://` URL.
    pub fn upstream(&self) -> Result<Upstream, ConfigError> {
        Upstream::parse(&self.upstream)
    }

    /// The parsed `service_url` with coldwire's connect timeout and application name unless
    /// it sets its own; `None` when unset.
    ///
    /// # Errors
    /// A value that is not a connection string. The message does not repeat the value, which
    /// may hold a password.
    pub fn service(&self) -> Result<Option<tokio_postgres::Config>, ConfigError> {
        let Some(url) = &self.service_url else {
            return Ok(None);
        };
        let mut service: tokio_postgres::Config = url.parse().map_err(|_| ConfigError::Invalid {
            field: "service_url",
            reason: "not a postgres://user:password@host:port/dbname URL or key=value connection string".into(),
        })?;
        if service.get_connect_timeout().is_none() {
            service.connect_timeout(self.connect_timeout());
        }
        if service.get_application_name().is_none() {
            service.application_name("coldwire");
        }
        Ok(Some(service))
    }

    /// `connect_timeout_ms` as a duration.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms)
    }

    /// `shutdown_grace_secs` as a duration.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_values_override_defaults_and_unknown_keys_fail() {
        let c: Config = toml::from_str("listen = '0.0.0.0:7000'\nrequire_tls = false").unwrap();
        assert_eq!(c.listen, "0.0.0.0:7000");
        assert_eq!(c.upstream, Config::default().upstream);
        let err = toml::from_str::<Config>("lisen = 'x'")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field"), "{err}");
    }

    #[test]
    fn every_setting_is_reloaded_or_named_as_needing_a_restart() {
        // Every field, none from Default: a new setting fails to compile here until it is
        // sorted into one of the two groups.
        let changed = Config {
            listen: "x".into(),
            upstream: "x".into(),
            service_url: Some("x".into()),
            cold_store: "x".into(),
            s3_endpoint: Some("x".into()),
            s3_region: Some("x".into()),
            s3_allow_http: Some(true),
            s3_virtual_hosted_style: Some(true),
            s3_access_key_id: Some("x".into()),
            s3_secret_access_key: Some(Secret("x".into())),
            cold_store_retry_timeout_ms: 1,
            metrics_listen: Some("x".into()),
            tls_cert: Some("x".into()),
            tls_key: Some("x".into()),
            require_tls: true,
            max_message_bytes: 1,
            connect_timeout_ms: 1,
            shutdown_grace_secs: 1,
            worker_threads: 1,
            max_cold_rows: 1,
            max_cold_memory_mb: 1,
            max_rehydrate_rows: 1,
            max_databases: 1,
            cold_cache_mb: 1,
            log: Some("x".into()),
            policy_defaults: Some("x".into()),
        };
        let restart = Config::default().needing_restart(&changed);
        assert_eq!(restart.len(), 22, "{restart:?}");
        for reloaded in ["tls_cert", "tls_key", "log", "policy_defaults"] {
            assert!(!restart.contains(&reloaded));
        }
    }

    #[test]
    fn example_file_documents_the_defaults() {
        let example: Config =
            toml::from_str(include_str!("../../config/coldwire.example.toml")).unwrap();
        assert_eq!(example, Config::default());
    }

    #[test]
    fn validation_names_the_field() {
        let c = Config {
            require_tls: true,
            ..Config::default()
        };
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Invalid {
                field: "require_tls",
                ..
            })
        ));
        let c = Config {
            tls_cert: Some("a".into()),
            ..Config::default()
        };
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Invalid {
                field: "tls_cert/tls_key",
                ..
            })
        ));
        let c = Config {
            service_url: Some("postgres://u:s3cret@h:notaport/d".into()),
            ..Config::default()
        };
        let err = c.validate().unwrap_err();
        assert!(matches!(
            err,
            ConfigError::Invalid {
                field: "service_url",
                ..
            }
        ));
        assert!(!err.to_string().contains("s3cret"), "{err}");
        let c = Config {
            max_message_bytes: 10,
            ..Config::default()
        };
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Invalid {
                field: "max_message_bytes",
                ..
            })
        ));
        assert!(Config::default().validate().is_ok());
        let c = Config {
            cold_store_retry_timeout_ms: 0,
            ..Config::default()
        };
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Invalid {
                field: "cold_store_retry_timeout_ms",
                ..
            })
        ));
    }

    #[test]
    fn s3_settings_reach_the_store_options_and_the_secret_stays_out_of_debug() {
        let c: Config = toml::from_str(
            "cold_store = 's3://b/p'\ns3_endpoint = 'http://127.0.0.1:9000'\ns3_allow_http = true\n\
             s3_access_key_id = 'AKID'\ns3_secret_access_key = 'hunter2'\ncold_store_retry_timeout_ms = 1500",
        )
        .unwrap();
        let o = c.cold_store_options();
        assert_eq!(o.s3_endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(
            (o.s3_allow_http, o.s3_virtual_hosted_style),
            (Some(true), None)
        );
        assert_eq!(o.s3_secret_access_key.as_deref(), Some("hunter2"));
        assert_eq!(o.retry_timeout, Some(Duration::from_millis(1500)));
        assert_eq!(o.connect_timeout, Some(c.connect_timeout()));
        assert!(!format!("{c:?}").contains("hunter2"));
        assert!(!format!("{o:?}").contains("hunter2"));
    }

    #[test]
    fn service_connection_gets_coldwire_defaults_unless_the_url_sets_them() {
        assert!(Config::default().service().unwrap().is_none());
        let c = Config {
            service_url: Some("postgres://svc@h/app".into()),
            connect_timeout_ms: 1234,
            ..Config::default()
        };
        let s = c.service().unwrap().unwrap();
        assert_eq!(s.get_connect_timeout(), Some(&Duration::from_millis(1234)));
        assert_eq!(s.get_application_name(), Some("coldwire"));
        let c = Config {
            service_url: Some(
                "postgres://svc@h/app?connect_timeout=2&application_name=mine".into(),
            ),
            ..Config::default()
        };
        let s = c.service().unwrap().unwrap();
        assert_eq!(s.get_connect_timeout(), Some(&Duration::from_secs(2)));
        assert_eq!(s.get_application_name(), Some("mine"));
    }
}
