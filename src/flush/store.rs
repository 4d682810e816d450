//! The cold store: where segments go (object_store; `file://` today, `s3://`, `gs://`,
//! `az://` by URL once built with those backends), with create-if-absent publishing
//! verified by size and sha256.

use std::sync::Arc;

use bytes::Bytes;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use sha2::{Digest, Sha256};

/// Why the cold store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("invalid cold_store URL: {0}")]
    Url(String),
    #[error("cold_store scheme {0}:// is not supported by this build yet (file:// is)")]
    Unsupported(String),
    #[error("cannot create the cold store directory {path}: {source}")]
    Directory {
        path: String,
        source: std::io::Error,
    },
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
    #[error(
        "object {key} exists with different content (size {found_size}, sha256 {found_sha256})"
    )]
    Conflict {
        key: String,
        found_size: usize,
        found_sha256: String,
    },
    #[error("object {key} reads back {found} bytes, {expected} were written")]
    Verify {
        key: String,
        expected: usize,
        found: u64,
    },
}

/// What a published object is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub size: usize,
    /// Lower-case hex.
    pub sha256: String,
    pub etag: Option<String>,
}

/// A cold store rooted at the configured URL.
#[derive(Debug, Clone)]
pub struct ColdStore {
    store: Arc<dyn ObjectStore>,
}

impl ColdStore {
    /// Opens the store `url` names; a relative `file://` path is taken from the current
    /// directory and created if missing.
    ///
    /// # Errors
    /// A malformed URL, an unsupported scheme, or a directory that cannot be created.
    pub fn open(url: &str) -> Result<Self, StoreError> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(StoreError::Url(format!(
                "{url:?} has no scheme (e.g. file://./coldwire-data)"
            )));
        };
        match scheme {
            "file" => {
                let dir = std::path::Path::new(rest);
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
                let fs = LocalFileSystem::new_with_prefix(&dir)?;
                Ok(Self {
                    store: Arc::new(fs),
                })
            }
            other => Err(StoreError::Unsupported(other.to_owned())),
        }
    }

    /// A store over any object_store implementation (tests use the in-memory one).
    pub fn from_store(store: Arc<dyn ObjectStore>) -> Self {
        Self { store }
    }

    /// Writes `bytes` at `key` only if nothing is there. If an object is there already
    /// with the same content (a retry of our own write), that counts as published.
    ///
    /// # Errors
    /// Store failures, or a different object at `key`.
    pub async fn publish(&self, key: &str, bytes: Bytes) -> Result<Published, StoreError> {
        let path = Path::from(key);
        let sha256 = hex(&Sha256::digest(&bytes));
        let size = bytes.len();
        let options = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        let etag = match self
            .store
            .put_opts(&path, PutPayload::from(bytes), options)
            .await
        {
            Ok(result) => result.e_tag,
            Err(object_store::Error::AlreadyExists { .. }) => {
                let existing = self.store.get(&path).await?.bytes().await?;
                let found_sha256 = hex(&Sha256::digest(&existing));
                if existing.len() != size || found_sha256 != sha256 {
                    return Err(StoreError::Conflict {
                        key: key.to_owned(),
                        found_size: existing.len(),
                        found_sha256,
                    });
                }
                None
            }
            Err(e) => return Err(e.into()),
        };
        let meta = self.store.head(&path).await?;
        if meta.size != size as u64 {
            return Err(StoreError::Verify {
                key: key.to_owned(),
                expected: size,
                found: meta.size,
            });
        }
        Ok(Published {
            size,
            sha256,
            etag: etag.or(meta.e_tag),
        })
    }

    /// The whole object at `key`.
    ///
    /// # Errors
    /// Store failures, including a missing object.
    pub async fn get(&self, key: &str) -> Result<Bytes, StoreError> {
        Ok(self.store.get(&Path::from(key)).await?.bytes().await?)
    }

    /// Removes `key`; a missing object is not an error.
    ///
    /// # Errors
    /// Store failures.
    pub async fn delete(&self, key: &str) -> Result<(), StoreError> {
        match self.store.delete(&Path::from(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Keys under `prefix`.
    ///
    /// # Errors
    /// Store failures.
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        use futures_util::TryStreamExt;
        let prefix = Path::from(prefix);
        let metas: Vec<_> = self.store.list(Some(&prefix)).try_collect().await?;
        Ok(metas.into_iter().map(|m| m.location.to_string()).collect())
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn publish_is_create_if_absent_and_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let store = ColdStore::open(&format!("file://{}", dir.path().display())).unwrap();
        let p = store
            .publish(
                "t/000/segment-000001-abcd.parquet",
                Bytes::from_static(b"hello"),
            )
            .await
            .unwrap();
        assert_eq!(p.size, 5);
        assert_eq!(
            p.sha256,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        // The same bytes again (a retry): fine. Different bytes: refused, original kept.
        assert_eq!(
            store
                .publish(
                    "t/000/segment-000001-abcd.parquet",
                    Bytes::from_static(b"hello")
                )
                .await
                .unwrap()
                .sha256,
            p.sha256
        );
        let e = store
            .publish(
                "t/000/segment-000001-abcd.parquet",
                Bytes::from_static(b"world"),
            )
            .await
            .unwrap_err();
        assert!(matches!(e, StoreError::Conflict { .. }), "{e}");
        assert_eq!(
            store
                .get("t/000/segment-000001-abcd.parquet")
                .await
                .unwrap(),
            Bytes::from_static(b"hello")
        );
        assert_eq!(
            store.list("t").await.unwrap(),
            vec!["t/000/segment-000001-abcd.parquet".to_owned()]
        );
        store
            .delete("t/000/segment-000001-abcd.parquet")
            .await
            .unwrap();
        store
            .delete("t/000/segment-000001-abcd.parquet")
            .await
            .unwrap();
        assert!(store.list("t").await.unwrap().is_empty());
    }

    #[test]
    fn unsupported_and_malformed_urls_are_named() {
        assert!(
            matches!(ColdStore::open("s3://bucket/prefix"), Err(StoreError::Unsupported(s)) if s == "s3")
        );
        assert!(matches!(ColdStore::open("./data"), Err(StoreError::Url(_))));
    }
}
