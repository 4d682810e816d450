//! Builds the object_store client a `cold_store` URL names (`file://`, `s3://`, `gs://`,
//! `az://`/`abfss://`), rooted under the URL's path, with coldwire's S3 settings and
//! timeouts on top of the provider's own environment variables.

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{BackoffConfig, ClientConfigKey, ObjectStore, ObjectStoreScheme, RetryConfig};

use super::StoreError;

/// Retries of one failing request before its error surfaces (within `retry_timeout`).
const MAX_RETRIES: usize = 10;

/// What the coldwire configuration says about the cold store besides its URL. Unset
/// values leave the provider's environment variables (`AWS_*`, `GOOGLE_*`, `AZURE_*`) and
/// object_store's defaults in charge.
#[derive(Clone, Default, PartialEq)]
pub struct StoreOptions {
    /// S3 endpoint of an S3-compatible service, e.g. `http://127.0.0.1:9000`.
    pub s3_endpoint: Option<String>,
    pub s3_region: Option<String>,
    /// Permit `http://` endpoints.
    pub s3_allow_http: Option<bool>,
    /// `bucket.host/key` requests instead of path-style `host/bucket/key`.
    pub s3_virtual_hosted_style: Option<bool>,
    pub s3_access_key_id: Option<String>,
    pub s3_secret_access_key: Option<String>,
    /// TCP connect timeout of the HTTP client; `None` keeps object_store's (5 s).
    pub connect_timeout: Option<Duration>,
    /// How long a failing request is retried before its error surfaces; `None` keeps
    /// object_store's (3 min).
    pub retry_timeout: Option<Duration>,
}

impl std::fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreOptions")
            .field("s3_endpoint", &self.s3_endpoint)
            .field("s3_region", &self.s3_region)
            .field("s3_allow_http", &self.s3_allow_http)
            .field("s3_virtual_hosted_style", &self.s3_virtual_hosted_style)
            .field("s3_access_key_id", &self.s3_access_key_id)
            .field(
                "s3_secret_access_key",
                &self.s3_secret_access_key.as_ref().map(|_| "<redacted>"),
            )
            .field("connect_timeout", &self.connect_timeout)
            .field("retry_timeout", &self.retry_timeout)
            .finish()
    }
}

impl StoreOptions {
    /// The names of the `s3_*` settings that are set, to refuse them for other schemes.
    fn s3_settings(&self) -> Vec<&'static str> {
        let set = [
            ("s3_endpoint", self.s3_endpoint.is_some()),
            ("s3_region", self.s3_region.is_some()),
            ("s3_allow_http", self.s3_allow_http.is_some()),
            (
                "s3_virtual_hosted_style",
                self.s3_virtual_hosted_style.is_some(),
            ),
            ("s3_access_key_id", self.s3_access_key_id.is_some()),
            ("s3_secret_access_key", self.s3_secret_access_key.is_some()),
        ];
        set.into_iter()
            .filter(|(_, on)| *on)
            .map(|(name, _)| name)
            .collect()
    }

    fn retry(&self, max_retries: usize) -> Option<RetryConfig> {
        let retry_timeout = self.retry_timeout?;
        Some(RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries,
            retry_timeout,
        })
    }
}

/// The object store `url` names, rooted under its path, and a description for logs and
/// errors (the URL without query or credentials). `max_retries` of 0 makes a client that
/// reports the first failure (the start-up probe).
///
/// # Errors
/// A malformed URL, an unsupported scheme, an `s3_*` setting with another scheme, a
/// builder that lacks what it needs (bucket, account), a directory that cannot be created.
pub fn build(
    url: &str,
    options: &StoreOptions,
    max_retries: Option<usize>,
) -> Result<(Arc<dyn ObjectStore>, String), StoreError> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(StoreError::Url(format!(
            "{url:?} has no scheme (e.g. file://./coldwire-data or s3://bucket/prefix)"
        )));
    };
    if scheme == "file" {
        refuse_s3_settings(scheme, options)?;
        return Ok((local(rest)?, url.to_owned()));
    }
    let parsed = url::Url::parse(url).map_err(|e| StoreError::Url(format!("{url:?}: {e}")))?;
    // abfss://filesystem@account… names the filesystem where other URLs put a user.
    let user_is_container = matches!(scheme, "abfs" | "abfss");
    if parsed.password().is_some() || (!parsed.username().is_empty() && !user_is_container) {
        return Err(StoreError::Url(
            "the cold_store URL must not carry credentials; use the s3_* settings or the provider's environment variables".into(),
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(StoreError::Url(format!(
            "{url:?} names no bucket or container (e.g. {scheme}://bucket/prefix)"
        )));
    }
    let (kind, prefix) = ObjectStoreScheme::parse(&parsed)
        .map_err(|_| StoreError::Unsupported(scheme.to_owned()))?;
    let mut shown = parsed.clone();
    shown.set_query(None);
    shown.set_fragment(None);
    let described = shown.to_string();
    let built = |e: object_store::Error| StoreError::Build {
        url: described.clone(),
        source: e,
    };
    let retries = max_retries.unwrap_or(MAX_RETRIES);
    let connect_timeout = options
        .connect_timeout
        .map(|t| format!("{}ms", t.as_millis()));
    let store: Arc<dyn ObjectStore> = match (kind, scheme) {
        (ObjectStoreScheme::AmazonS3, "s3" | "s3a") => {
            let mut b = AmazonS3Builder::from_env().with_url(url);
            let settings = [
                (AmazonS3ConfigKey::Endpoint, options.s3_endpoint.clone()),
                (AmazonS3ConfigKey::Region, options.s3_region.clone()),
                (
                    AmazonS3ConfigKey::Client(ClientConfigKey::AllowHttp),
                    options.s3_allow_http.map(|v| v.to_string()),
                ),
                (
                    AmazonS3ConfigKey::VirtualHostedStyleRequest,
                    options.s3_virtual_hosted_style.map(|v| v.to_string()),
                ),
                (
                    AmazonS3ConfigKey::AccessKeyId,
                    options.s3_access_key_id.clone(),
                ),
                (
                    AmazonS3ConfigKey::SecretAccessKey,
                    options.s3_secret_access_key.clone(),
                ),
                (
                    AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
                    connect_timeout,
                ),
            ];
            for (key, value) in settings {
                if let Some(value) = value {
                    b = b.with_config(key, value);
                }
            }
            if let Some(retry) = options.retry(retries) {
                b = b.with_retry(retry);
            }
            Arc::new(b.build().map_err(built)?)
        }
        (ObjectStoreScheme::GoogleCloudStorage, _) => {
            refuse_s3_settings(scheme, options)?;
            let mut b = GoogleCloudStorageBuilder::from_env().with_url(url);
            if let Some(t) = connect_timeout {
                b = b.with_config(
                    object_store::gcp::GoogleConfigKey::Client(ClientConfigKey::ConnectTimeout),
                    t,
                );
            }
            if let Some(retry) = options.retry(retries) {
                b = b.with_retry(retry);
            }
            Arc::new(b.build().map_err(built)?)
        }
        (ObjectStoreScheme::MicrosoftAzure, "az" | "azure" | "abfs" | "abfss" | "adl") => {
            refuse_s3_settings(scheme, options)?;
            let mut b = MicrosoftAzureBuilder::from_env().with_url(url);
            if let Some(t) = connect_timeout {
                b = b.with_config(
                    object_store::azure::AzureConfigKey::Client(ClientConfigKey::ConnectTimeout),
                    t,
                );
            }
            if let Some(retry) = options.retry(retries) {
                b = b.with_retry(retry);
            }
            Arc::new(b.build().map_err(built)?)
        }
        _ => return Err(StoreError::Unsupported(scheme.to_owned())),
    };
    Ok((rooted(store, &prefix), described))
}

/// `store` with every key under `prefix` (the whole store when it is empty).
pub fn rooted(store: Arc<dyn ObjectStore>, prefix: &Path) -> Arc<dyn ObjectStore> {
    if prefix.as_ref().is_empty() {
        store
    } else {
        Arc::new(PrefixStore::new(store, prefix.clone()))
    }
}

/// A local directory; a relative path is taken from the current directory, and the
/// directory is created if missing.
fn local(path: &str) -> Result<Arc<dyn ObjectStore>, StoreError> {
    let dir = std::path::Path::new(path);
    let dir = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| StoreError::Url(e.to_string()))?
            .join(dir)
    };
    std::fs::create_dir_all(&dir).map_err(|source| StoreError::Directory {
        path: dir.display().to_string(),
        source,
    })?;
    let fs = LocalFileSystem::new_with_prefix(&dir).map_err(|source| StoreError::Build {
        url: format!("file://{}", dir.display()),
        source,
    })?;
    Ok(Arc::new(fs))
}

fn refuse_s3_settings(scheme: &str, options: &StoreOptions) -> Result<(), StoreError> {
    match options.s3_settings().as_slice() {
        [] => Ok(()),
        set => Err(StoreError::Url(format!(
            "{} set, but cold_store is a {scheme}:// URL; the s3_* settings apply to s3:// only",
            set.join(", ")
        ))),
    }
}
