//! Configuration: the settings struct, the upstream address, and the command-line layer.

mod cli;
mod settings;
mod upstream;

pub use cli::ServeArgs;
pub use settings::{Config, DEFAULT_MAX_MESSAGE_BYTES};
pub use upstream::{Upstream, UpstreamAddr};

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {source}")]
    Parse {
        path: String,
        source: toml::de::Error,
    },
    #[error("invalid setting {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}
