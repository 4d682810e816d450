//! The cold store: where segments go (object_store by URL, see [`backend`]), with
//! create-if-absent publishing verified by size and sha256.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use sha2::{Digest, Sha256};

pub mod backend;

pub use backend::StoreOptions;

/// Why the cold store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("invalid cold_store URL: {0}")]
    Url(String),
    #[error(
        "cold_store scheme {0}:// is not supported (file://, s3://, gs://, az:// and abfss:// are)"
    )]
    Unsupported(String),
    #[error("cannot create the cold store directory {path}: {source}")]
    Directory {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot set up the cold store {url}: {source}")]
    Build {
        url: String,
        source: object_store::Error,
    },
    #[error("the cold store {url} cannot be listed: {}", with_cause(.source))]
    Unreachable {
        url: String,
        source: object_store::Error,
    },
    #[error("the cold store {url} did not answer a listing within {ms} ms")]
    ProbeTimeout { url: String, ms: u128 },
    #[error("object store: {}", with_cause(.0))]
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
    /// The URL without query or credentials, for logs.
    location: String,
}

impl ColdStore {
    /// Opens the store `url` names with `options`, rooted under the URL's path. Does no
    /// I/O beyond creating a missing `file://` directory; see [`ColdStore::open_checked`].
    ///
    /// # Errors
    /// A malformed URL, an unsupported scheme, settings that do not fit the scheme, a
    /// provider builder that lacks what it needs, a directory that cannot be created.
    pub fn open(url: &str, options: &StoreOptions) -> Result<Self, StoreError> {
        let (store, location) = backend::build(url, options, None)?;
        Ok(Self { store, location })
    }

    /// [`ColdStore::open`], then one listing of the store's root without retries, bounded
    /// by `timeout`, so that a store that is unreachable, missing or refuses our
    /// credentials is reported at start rather than at the first flush.
    ///
    /// # Errors
    /// As [`ColdStore::open`], plus [`StoreError::Unreachable`] and
    /// [`StoreError::ProbeTimeout`].
    pub async fn open_checked(
        url: &str,
        options: &StoreOptions,
        timeout: Duration,
    ) -> Result<Self, StoreError> {
        let opened = Self::open(url, options)?;
        let (probe, location) = backend::build(url, options, Some(0))?;
        match tokio::time::timeout(timeout, probe.list_with_delimiter(None)).await {
            Ok(Ok(_)) => Ok(opened),
            Ok(Err(source)) => Err(StoreError::Unreachable {
                url: location,
                source,
            }),
            Err(_) => Err(StoreError::ProbeTimeout {
                url: location,
                ms: timeout.as_millis(),
            }),
        }
    }

    /// Where the store is, for logs: the URL without query or credentials.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// A store over any object_store implementation (tests use the in-memory one).
    pub fn from_store(store: Arc<dyn ObjectStore>) -> Self {
        let location = store.to_string();
        Self { store, location }
    }

    /// Writes `bytes` at `key` only if nothing is there. If an object is there already
    /// with the same content (a retry of our own write), that counts as published.
    ///
    /// # Errors
    /// Store failures, or a different object at `key`.
    pub async fn publish(&self, key: &str, bytes: Bytes) -> Result<Published, StoreError> {
        let sha256 = hex(&Sha256::digest(&bytes));
        self.publish_whole(key, PutPayload::from(bytes), sha256)
            .await
    }

    /// An object to be published at `key` as its bytes come ([`Upload`]).
    pub fn upload(&self, key: &str) -> Upload {
        Upload {
            store: self.clone(),
            key: key.to_owned(),
            sha256: Sha256::new(),
            size: 0,
            held: std::collections::VecDeque::new(),
            held_bytes: 0,
            parts: None,
        }
    }

    /// [`ColdStore::publish`] of `payload` (its pieces in order) whose sha256 is known.
    async fn publish_whole(
        &self,
        key: &str,
        payload: PutPayload,
        sha256: String,
    ) -> Result<Published, StoreError> {
        let path = Path::from(key);
        let size = payload.content_length();
        let options = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        let etag = match self.store.put_opts(&path, payload, options).await {
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

    /// Writes `bytes` at `key`, replacing what is there (for the manifest root, the one
    /// object coldwire rewrites in place).
    ///
    /// # Errors
    /// Store failures.
    pub async fn put(&self, key: &str, bytes: Bytes) -> Result<(), StoreError> {
        self.store
            .put(&Path::from(key), PutPayload::from(bytes))
            .await?;
        Ok(())
    }

    /// The whole object at `key`.
    ///
    /// # Errors
    /// Store failures, including a missing object.
    pub async fn get(&self, key: &str) -> Result<Bytes, StoreError> {
        Ok(self.store.get(&Path::from(key)).await?.bytes().await?)
    }

    /// The size of the object at `key`.
    ///
    /// # Errors
    /// Store failures, including a missing object.
    pub async fn size(&self, key: &str) -> Result<u64, StoreError> {
        Ok(self.store.head(&Path::from(key)).await?.size)
    }

    /// Bytes `range` of the object at `key`.
    ///
    /// # Errors
    /// Store failures, including a missing object or a range past its end.
    pub async fn get_range(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
    ) -> Result<Bytes, StoreError> {
        Ok(self.store.get_range(&Path::from(key), range).await?)
    }

    /// Bytes `ranges` of the object at `key`, fetched together (the store coalesces
    /// ranges that lie close to each other into one request).
    ///
    /// # Errors
    /// As [`ColdStore::get_range`].
    pub async fn get_ranges(
        &self,
        key: &str,
        ranges: &[std::ops::Range<u64>],
    ) -> Result<Vec<Bytes>, StoreError> {
        Ok(self.store.get_ranges(&Path::from(key), ranges).await?)
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

/// Bytes a segment is uploaded in once it is larger than that (every part of an S3
/// multipart upload but the last must be at least 5 MiB).
pub const UPLOAD_PART_BYTES: usize = 8 * 1024 * 1024;
/// Parts of one object in flight at once.
const UPLOAD_PARTS_IN_FLIGHT: usize = 2;

/// An object published as its bytes are produced, so that a large segment's upload
/// overlaps its encoding instead of following it, and memory holds a few parts of it
/// rather than the whole file. An object of at most one part is published whole, as
/// [`ColdStore::publish`] does (create-if-absent). A larger one goes up as a multipart
/// upload, which makes it visible only when complete: its key must be free when the
/// upload starts (object_store's multipart uploads cannot be conditional; segment keys
/// carry a random part and only the holder of the table's flush lock writes under its
/// prefix, so nobody else can take the key meanwhile). Its size is verified afterwards.
/// Every failure of a multipart upload aborts it (its parts are deleted).
pub struct Upload {
    store: ColdStore,
    key: String,
    sha256: Sha256,
    size: usize,
    /// Bytes not yet sent: all of them while they fit in one part, then less than a part.
    held: std::collections::VecDeque<Bytes>,
    held_bytes: usize,
    parts: Option<Parts>,
}

/// A multipart upload under way.
struct Parts {
    upload: Box<dyn object_store::MultipartUpload>,
    in_flight: tokio::task::JoinSet<object_store::Result<()>>,
}

impl Parts {
    /// Waits until fewer than `room` parts are in flight (none, for 0); the first failed
    /// part's error.
    async fn wait(&mut self, room: usize) -> object_store::Result<()> {
        while !self.in_flight.is_empty() && self.in_flight.len() >= room {
            match self.in_flight.join_next().await {
                Some(Ok(done)) => done?,
                Some(Err(e)) => {
                    return Err(object_store::Error::Generic {
                        store: "coldwire",
                        source: Box::new(e),
                    })
                }
                None => break,
            }
        }
        Ok(())
    }

    /// Sends `part` once there is room for it.
    async fn send(&mut self, part: PutPayload) -> object_store::Result<()> {
        self.wait(UPLOAD_PARTS_IN_FLIGHT).await?;
        self.in_flight.spawn(self.upload.put_part(part));
        Ok(())
    }

    /// Deletes what was uploaded; a failure is logged (the parts then wait for the
    /// store's own expiry of unfinished uploads).
    async fn abort(mut self, key: &str) {
        self.in_flight.shutdown().await;
        if let Err(e) = self.upload.abort().await {
            tracing::warn!(key, error = %with_cause(&e), "could not abort the upload of an unfinished segment");
        }
    }
}

impl Upload {
    /// Adds the object's next bytes; once they make more than one part, whole parts go up
    /// in the background, at most [`UPLOAD_PARTS_IN_FLIGHT`] at once (this waits for room).
    ///
    /// # Errors
    /// Store failures, or an object already at the key.
    pub async fn write(&mut self, bytes: Bytes) -> Result<(), StoreError> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.sha256.update(&bytes);
        self.size += bytes.len();
        self.held_bytes += bytes.len();
        self.held.push_back(bytes);
        if self.parts.is_none() {
            if self.held_bytes <= UPLOAD_PART_BYTES {
                return Ok(());
            }
            let path = Path::from(self.key.as_str());
            match self.store.store.head(&path).await {
                Err(object_store::Error::NotFound { .. }) => {}
                Ok(meta) => {
                    return Err(StoreError::Conflict {
                        key: self.key.clone(),
                        found_size: usize::try_from(meta.size).unwrap_or(usize::MAX),
                        found_sha256: "not read".into(),
                    })
                }
                Err(e) => return Err(e.into()),
            }
            self.parts = Some(Parts {
                upload: self.store.store.put_multipart(&path).await?,
                in_flight: tokio::task::JoinSet::new(),
            });
        }
        while self.held_bytes >= UPLOAD_PART_BYTES {
            let part = self.take_held(UPLOAD_PART_BYTES);
            if let Some(parts) = &mut self.parts {
                parts.send(part).await?;
            }
        }
        Ok(())
    }

    /// The first `n` held bytes (all of them if fewer), as one payload.
    fn take_held(&mut self, n: usize) -> PutPayload {
        let mut part = Vec::new();
        let mut want = n.min(self.held_bytes);
        self.held_bytes -= want;
        while want > 0 {
            let Some(mut front) = self.held.pop_front() else {
                break;
            };
            if front.len() > want {
                self.held.push_front(front.split_off(want));
            }
            want -= front.len();
            part.push(front);
        }
        part.into_iter().collect()
    }

    /// Completes the object and verifies its size.
    ///
    /// # Errors
    /// Store failures, or an object already at the key.
    pub async fn finish(mut self) -> Result<Published, StoreError> {
        let sha256 = hex(&std::mem::take(&mut self.sha256).finalize());
        let rest = self.take_held(self.held_bytes);
        let Some(mut parts) = self.parts.take() else {
            return self.store.publish_whole(&self.key, rest, sha256).await;
        };
        let completed = async {
            if rest.content_length() > 0 {
                parts.send(rest).await?;
            }
            parts.wait(0).await?;
            parts.upload.complete().await
        }
        .await;
        let done = match completed {
            Ok(done) => done,
            Err(e) => {
                parts.abort(&self.key).await;
                return Err(e.into());
            }
        };
        let meta = self
            .store
            .store
            .head(&Path::from(self.key.as_str()))
            .await?;
        if meta.size != self.size as u64 {
            return Err(StoreError::Verify {
                key: self.key,
                expected: self.size,
                found: meta.size,
            });
        }
        Ok(Published {
            size: self.size,
            sha256,
            etag: done.e_tag.or(meta.e_tag),
        })
    }

    /// Gives the object up: a multipart upload under way is aborted (its parts deleted).
    pub async fn abort(mut self) {
        if let Some(parts) = self.parts.take() {
            parts.abort(&self.key).await;
        }
    }
}

/// `e`'s text, followed by its innermost cause when the text leaves that out: for a
/// request that never reached the server, object_store says "error sending request"
/// and only the cause says "Connection refused".
fn with_cause(e: &object_store::Error) -> String {
    let text = e.to_string();
    let mut inner: &dyn std::error::Error = e;
    while let Some(next) = inner.source() {
        inner = next;
    }
    let cause = inner.to_string();
    if text.contains(&cause) {
        text
    } else {
        format!("{text} ({cause})")
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` bytes that do not repeat in any way a store could shortcut.
    fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(6_364_136_223_846_793_005) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    fn files_in(dir: &std::path::Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(d).unwrap() {
                let e = e.unwrap();
                if e.file_type().unwrap().is_dir() {
                    stack.push(e.path());
                } else {
                    out.push(e.path().strip_prefix(dir).unwrap().display().to_string());
                }
            }
        }
        out.sort();
        out
    }

    #[tokio::test]
    async fn an_upload_goes_up_whole_or_in_parts_and_is_the_bytes_written() {
        let dir = tempfile::tempdir().unwrap();
        let store = ColdStore::open(
            &format!("file://{}", dir.path().display()),
            &StoreOptions::default(),
        )
        .unwrap();
        for (key, total) in [("t/small", 1000), ("t/large", 3 * UPLOAD_PART_BYTES + 123)] {
            let bytes = noise(total, total as u64);
            let mut upload = store.upload(key);
            // Written in pieces that straddle the part size.
            for piece in bytes.chunks(UPLOAD_PART_BYTES / 3 + 7) {
                upload.write(Bytes::copy_from_slice(piece)).await.unwrap();
            }
            let published = upload.finish().await.unwrap();
            assert_eq!(published.size, total, "{key}");
            assert_eq!(published.sha256, hex(&Sha256::digest(&bytes)), "{key}");
            assert_eq!(store.get(key).await.unwrap(), Bytes::from(bytes), "{key}");
        }
        // Nothing staged is left beside them.
        assert_eq!(files_in(dir.path()), vec!["t/large", "t/small"]);
    }

    #[tokio::test]
    async fn an_upload_in_parts_never_replaces_an_object_and_leaves_nothing_when_aborted() {
        let dir = tempfile::tempdir().unwrap();
        let store = ColdStore::open(
            &format!("file://{}", dir.path().display()),
            &StoreOptions::default(),
        )
        .unwrap();
        store
            .publish("t/taken", Bytes::from_static(b"first"))
            .await
            .unwrap();
        let mut upload = store.upload("t/taken");
        let e = upload
            .write(Bytes::from(noise(UPLOAD_PART_BYTES + 1, 1)))
            .await
            .unwrap_err();
        assert!(matches!(e, StoreError::Conflict { .. }), "{e}");
        upload.abort().await;
        assert_eq!(
            store.get("t/taken").await.unwrap(),
            Bytes::from_static(b"first")
        );

        let mut upload = store.upload("t/dropped");
        upload
            .write(Bytes::from(noise(2 * UPLOAD_PART_BYTES + 5, 2)))
            .await
            .unwrap();
        upload.abort().await;
        assert_eq!(files_in(dir.path()), vec!["t/taken"]);
    }

    #[tokio::test]
    async fn publish_is_create_if_absent_and_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let store = ColdStore::open(
            &format!("file://{}", dir.path().display()),
            &StoreOptions::default(),
        )
        .unwrap();
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
    fn cloud_urls_build_without_io_and_bad_ones_are_named() {
        let none = StoreOptions::default();
        // No request is made: building only parses the URL and settings.
        for url in [
            "gs://bucket/some/prefix",
            "abfss://container@account.dfs.core.windows.net/some/prefix",
        ] {
            let store = ColdStore::open(url, &none).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert!(
                store.location().ends_with("/some/prefix"),
                "{}",
                store.location()
            );
        }
        let s3 = StoreOptions {
            s3_endpoint: Some("http://127.0.0.1:9".into()),
            s3_region: Some("eu-west-1".into()),
            s3_allow_http: Some(true),
            s3_access_key_id: Some("id".into()),
            s3_secret_access_key: Some("secret".into()),
            ..StoreOptions::default()
        };
        assert_eq!(
            ColdStore::open("s3://bucket/a/b", &s3).unwrap().location(),
            "s3://bucket/a/b"
        );

        let err = |url: &str, options: &StoreOptions| ColdStore::open(url, options).unwrap_err();
        assert!(matches!(err("ftp://host/x", &none), StoreError::Unsupported(s) if s == "ftp"));
        assert!(
            matches!(err("https://example.com/x", &none), StoreError::Unsupported(s) if s == "https")
        );
        assert!(matches!(err("./data", &none), StoreError::Url(_)));
        let e = err("s3:///prefix", &none);
        assert!(
            matches!(&e, StoreError::Url(m) if m.contains("no bucket")),
            "{e}"
        );
        let e = err("s3://key:secret@bucket/prefix", &none);
        assert!(
            matches!(&e, StoreError::Url(_)) && !e.to_string().contains("secret"),
            "{e}"
        );
        let e = err("gs://bucket/prefix", &s3);
        assert!(
            e.to_string().contains("s3_endpoint") && e.to_string().contains("gs://"),
            "{e}"
        );
        // An az:// URL without an account (and none in the environment) is refused by name.
        if std::env::var_os("AZURE_STORAGE_ACCOUNT_NAME").is_none() {
            let e = err("az://container/prefix", &none);
            assert!(
                matches!(&e, StoreError::Build { .. })
                    && e.to_string().to_lowercase().contains("account"),
                "{e}"
            );
        }
    }

    #[tokio::test]
    async fn keys_are_rooted_under_the_url_prefix() {
        let inner: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let store = ColdStore::from_store(super::backend::rooted(
            inner.clone(),
            &Path::from("some/prefix"),
        ));
        store
            .publish("t/000/s.parquet", Bytes::from_static(b"x"))
            .await
            .unwrap();
        assert_eq!(
            store.list("t").await.unwrap(),
            vec!["t/000/s.parquet".to_owned()]
        );
        assert_eq!(
            inner
                .get(&Path::from("some/prefix/t/000/s.parquet"))
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap(),
            "x"
        );
    }

    #[tokio::test]
    async fn the_start_up_probe_names_an_unreachable_store() {
        // A port nothing listens on: refused at once, reported without retries.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let options = StoreOptions {
            s3_endpoint: Some(format!("http://127.0.0.1:{port}")),
            s3_allow_http: Some(true),
            s3_access_key_id: Some("id".into()),
            s3_secret_access_key: Some("secret".into()),
            s3_region: Some("us-east-1".into()),
            ..StoreOptions::default()
        };
        let started = std::time::Instant::now();
        let e = ColdStore::open_checked("s3://bucket/p", &options, Duration::from_secs(20))
            .await
            .unwrap_err();
        assert!(matches!(e, StoreError::Unreachable { .. }), "{e}");
        // Retries would run until the 20 s limit; a loaded machine (the whole suite on
        // two cores) has taken 12 s for the one attempt.
        assert!(
            started.elapsed() < Duration::from_secs(17),
            "the probe does not retry: {:?}",
            started.elapsed()
        );
        assert!(e.to_string().contains("s3://bucket/p"), "{e}");
        assert!(
            e.to_string().contains("Connection refused"),
            "the cause is named: {e}"
        );
    }
}
