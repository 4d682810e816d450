//! The cold tier on a real S3-compatible server (moto, started by the harness): segments
//! land under the URL's prefix with the size and sha256 the catalog records, a flush
//! against a stopped server fails its job and keeps the rows hot, and a store that is
//! unreachable or missing stops coldwire at start with the reason.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::moto::{s3, S3Server, BUCKET};
use common::segments;
use common::{cluster, connect_direct, create_db, Proxy};
use futures_util::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde_json::Value;
use tokio_postgres::Client;

async fn admin(c: &Client, sql: &str) -> Value {
    common::admin_call(c, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
}

/// A proxy for `db` whose cold store is `s3://BUCKET/{prefix}` on `server`, configured
/// through `COLDWIRE_S3_*` variables.
async fn proxy_on(server: &S3Server, db: &str, prefix: &str, extra_env: &[(&str, &str)]) -> Proxy {
    let store_url = format!("s3://{BUCKET}/{prefix}");
    let env = server.proxy_env();
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    env.extend_from_slice(extra_env);
    Proxy::start_env(
        &[
            "--service-url",
            &cluster().url(db),
            "--cold-store",
            &store_url,
        ],
        &env,
    )
    .await
}

/// Every key in the bucket, as an outside S3 client lists it.
async fn bucket_keys(bucket: &dyn ObjectStore) -> BTreeSet<String> {
    let metas: Vec<_> = bucket
        .list(None)
        .try_collect()
        .await
        .expect("list the bucket");
    metas.into_iter().map(|m| m.location.to_string()).collect()
}

/// Checks every segment of `job` against the object at `{prefix}/{path}` in the bucket
/// (size, sha256, etag, row count) and returns (id, op, kind) of its rows.
async fn segment_rows(
    direct: &Client,
    bucket: &dyn ObjectStore,
    prefix: &str,
    job: i64,
) -> Vec<(i64, i16, Option<String>)> {
    let mut out = Vec::new();
    let recorded = direct
        .query("SELECT path, byte_size, sha256, etag, row_count FROM coldwire.segments WHERE job_id = $1 AND status = 'active'", &[&job])
        .await
        .unwrap();
    assert!(!recorded.is_empty(), "job {job} recorded segments");
    for row in recorded {
        let path: String = row.get(0);
        let key = Path::from(format!("{prefix}/{path}"));
        let meta = bucket
            .head(&key)
            .await
            .unwrap_or_else(|e| panic!("{key}: {e}"));
        assert_eq!(meta.size, row.get::<_, i64>(1) as u64, "byte_size of {key}");
        assert_eq!(meta.e_tag, row.get::<_, Option<String>>(3), "etag of {key}");
        let bytes: Bytes = bucket.get(&key).await.unwrap().bytes().await.unwrap();
        assert_eq!(
            segments::sha256_hex(&bytes),
            row.get::<_, String>(2),
            "sha256 of {key}"
        );
        let id_ops = segments::id_ops(&bytes);
        assert_eq!(
            id_ops.len() as i64,
            row.get::<_, i64>(4),
            "row_count of {key}"
        );
        let kinds = segments::texts(&bytes, "kind");
        out.extend(
            id_ops
                .into_iter()
                .zip(kinds)
                .map(|((id, op), kind)| (id, op, kind)),
        );
    }
    out
}

/// A key of a table's manifest (`{table prefix}/manifest.json` or a shard under
/// `{table prefix}/manifest/`), as opposed to a segment.
fn is_manifest(key: &str) -> bool {
    key.ends_with("/manifest.json") || key.contains("/manifest/")
}

async fn rows(c: &Client, sql: &str) -> BTreeMap<i64, Option<String>> {
    c.query(sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// A table flushed once to moto, and what the tests look at.
struct Flushed {
    prefix: String,
    direct: Client,
    _proxy: Proxy,
    /// A session through the proxy.
    c: Client,
    /// `events`' (id, kind) before tiering.
    before: BTreeMap<i64, Option<String>>,
    /// The flush job (completed).
    job: Value,
    /// (id, op, kind) of the rows of the job's segments, each segment checked against
    /// its object ([`segment_rows`]).
    cold: Vec<(i64, i16, Option<String>)>,
}

/// A database `name` whose `events(id bigint PRIMARY KEY, kind text, …)` `setup` creates
/// and fills; a proxy on `server` tiers it with `policy` and flushes it once.
async fn tier_and_flush(server: &S3Server, name: &str, setup: &str, policy: &str) -> Flushed {
    let db = create_db(name);
    let prefix = format!("tiers/{db}");
    let direct = connect_direct(&db).await;
    direct.batch_execute(setup).await.unwrap();
    let before = rows(&direct, "SELECT id, kind FROM events").await;
    let proxy = proxy_on(server, &db, &prefix, &[]).await;
    assert!(
        proxy.log_contains("cold store reachable").await,
        "{}",
        proxy.log()
    );
    let c = proxy.connect(&db).await;
    admin(
        &c,
        &format!("SELECT coldwire.tier_table('events', '{policy}')"),
    )
    .await;
    let job = admin(&c, "SELECT coldwire.flush_table('events', wait => true)").await;
    assert_eq!(job["state"], "completed", "{job}");
    let cold = segment_rows(
        &direct,
        server.bucket().as_ref(),
        &prefix,
        job["job_id"].as_i64().unwrap(),
    )
    .await;
    Flushed {
        prefix,
        direct,
        _proxy: proxy,
        c,
        before,
        job,
        cold,
    }
}

impl Flushed {
    /// Every row of `before` is hot or cold (`cold_rows` of them), once, with its values,
    /// and reads through coldwire see them all.
    async fn assert_every_row_hot_or_cold(&self, cold_rows: usize) {
        assert!(self.cold.iter().all(|(_, op, _)| *op == 1));
        let hot = rows(&self.direct, "SELECT id, kind FROM events").await;
        let cold: BTreeMap<i64, Option<String>> = self
            .cold
            .iter()
            .map(|(id, _, kind)| (*id, kind.clone()))
            .collect();
        assert_eq!(cold.len(), cold_rows, "no key twice");
        assert!(cold.keys().all(|k| !hot.contains_key(k)));
        let mut union = cold;
        union.extend(hot);
        assert_eq!(
            union, self.before,
            "every row is hot or cold, with its values"
        );
        let through = rows(&self.c, "SELECT id, kind FROM events").await;
        assert_eq!(through, self.before, "through coldwire");
    }

    /// The keys under the prefix: (manifests, segments).
    async fn objects(&self, bucket: &dyn ObjectStore) -> (BTreeSet<String>, BTreeSet<String>) {
        bucket_keys(bucket)
            .await
            .into_iter()
            .filter(|k| k.starts_with(&format!("{}/", self.prefix)))
            .partition(|k| is_manifest(k))
    }
}

#[tokio::test]
async fn a_flush_writes_segments_under_the_s3_prefix_exactly_as_recorded() {
    let server = s3();
    let bucket = server.bucket();
    let flushed = tier_and_flush(
        server,
        "s3flush",
        "CREATE TABLE events(id bigint PRIMARY KEY, kind text, at timestamptz);
         INSERT INTO events SELECT g, CASE WHEN g % 10 = 0 THEN NULL ELSE 'k' || g % 7 END,
                                   '2026-01-01'::timestamptz + g * interval '1 min'
         FROM generate_series(1, 1000) g;",
        r#"{"hot_row_limit": 100, "min_flush_rows": 100, "max_rows_per_file": 300, "auto_flush": false}"#,
    )
    .await;
    let job = &flushed.job;
    assert_eq!(
        (job["rows_done"].as_i64(), job["segments"].as_i64()),
        (Some(900), Some(3)),
        "{job}"
    );

    // The objects are exactly the recorded segments plus the table's manifest, all under
    // the prefix: nothing staged or orphaned is left, nothing is written outside it.
    let paths: BTreeSet<String> = flushed
        .direct
        .query("SELECT path FROM coldwire.segments", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| format!("{}/{}", flushed.prefix, r.get::<_, String>(0)))
        .collect();
    assert_eq!(paths.len(), 3);
    let everything = bucket_keys(bucket.as_ref()).await;
    assert!(
        everything
            .iter()
            .all(|k| k.starts_with(&format!("{}/", flushed.prefix))),
        "a key outside the prefix: {everything:?}"
    );
    let (manifest, data) = flushed.objects(bucket.as_ref()).await;
    assert_eq!(data, paths);
    assert!(
        manifest.iter().any(|k| k.ends_with("/manifest.json")),
        "{manifest:?}"
    );
    assert!(data.iter().chain(&manifest).all(|k| !k.contains(".tmp/")));

    // The Parquet rows are exactly the rows that left the heap.
    flushed.assert_every_row_hot_or_cold(900).await;
}

/// A segment larger than one upload part goes up as a multipart upload while it is
/// encoded: the object is whole, recorded with its size, sha256 and etag, and nothing
/// else is left in the bucket.
#[tokio::test]
async fn a_segment_larger_than_an_upload_part_goes_up_in_parts() {
    let server = s3();
    let bucket = server.bucket();
    // 256 hex digits a row, none repeated: about 15 MiB of Parquet for 60,000 rows.
    let flushed = tier_and_flush(
        server,
        "s3parts",
        "CREATE TABLE events(id bigint PRIMARY KEY, kind text);
         INSERT INTO events SELECT g, (SELECT string_agg(md5(g || '.' || i), '') FROM generate_series(1, 8) i)
         FROM generate_series(1, 60000) g;",
        r#"{"hot_row_limit": 1000, "min_flush_rows": 1000, "max_rows_per_file": 100000, "auto_flush": false}"#,
    )
    .await;
    let job = &flushed.job;
    assert_eq!(
        (job["rows_done"].as_i64(), job["segments"].as_i64()),
        (Some(59_000), Some(1)),
        "{job}"
    );
    let size: i64 = flushed
        .direct
        .query_one("SELECT byte_size FROM coldwire.segments", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        size > coldwire::store::UPLOAD_PART_BYTES as i64,
        "the segment ({size} bytes) takes more than one part"
    );
    flushed.assert_every_row_hot_or_cold(59_000).await;
    let (_, data) = flushed.objects(bucket.as_ref()).await;
    assert_eq!(data.len(), 1, "{data:?}");
}

#[tokio::test]
async fn a_flush_against_a_stopped_store_fails_its_job_and_keeps_the_rows_hot() {
    let mut server = tokio::task::spawn_blocking(S3Server::start).await.unwrap();
    let port = server.port;
    let db = create_db("s3down");
    let prefix = format!("tiers/{db}");
    let direct = connect_direct(&db).await;
    direct
        .batch_execute("CREATE TABLE events(id bigint PRIMARY KEY, kind text); INSERT INTO events SELECT g, 'k' || g FROM generate_series(1, 500) g;")
        .await
        .unwrap();
    // Retries of a failing request stop after a second, so the failure shows quickly.
    let proxy = proxy_on(
        &server,
        &db,
        &prefix,
        &[("COLDWIRE_COLD_STORE_RETRY_TIMEOUT_MS", "1000")],
    )
    .await;
    let c = proxy.connect(&db).await;
    let tiered =
        admin(&c, r#"SELECT coldwire.tier_table('events', '{"hot_row_limit": 0, "min_flush_rows": 1, "max_rows_per_file": 200, "auto_flush": false}')"#)
            .await;
    let table_id = tiered["id"].as_i64().unwrap();

    server.stop();
    let before = rows(&direct, "SELECT id, kind FROM events").await;
    let started = Instant::now();
    let job = admin(&c, "SELECT coldwire.flush_table('events', wait => true)").await;
    assert_eq!(job["state"], "failed", "{job}");
    let error = job["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("object store") && error.contains("Connection refused"),
        "the job names the cause: {error}"
    );
    assert!(!error.contains(common::moto::SECRET_ACCESS_KEY), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the failure took {:?}",
        started.elapsed()
    );
    // Nothing was lost or half-done: every row still hot, every key still in the mirror,
    // no segment recorded.
    assert_eq!(rows(&direct, "SELECT id, kind FROM events").await, before);
    let mirror: i64 = direct
        .query_one(&format!("SELECT count(*) FROM coldwire.m_{table_id}"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(mirror, 500);
    let segments_recorded: i64 = direct
        .query_one("SELECT count(*) FROM coldwire.segments", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(segments_recorded, 0);
    // Reads through the proxy still see every row.
    let through: i64 = c
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(through, 500);

    // The server is back (moto keeps objects in memory, so it comes back empty, with the
    // bucket recreated): the same proxy's next flush succeeds.
    let server = tokio::task::spawn_blocking(move || S3Server::start_on(port))
        .await
        .unwrap();
    let job = admin(&c, "SELECT coldwire.flush_table('events', wait => true)").await;
    assert_eq!(job["state"], "completed", "{job}");
    assert_eq!(
        (job["rows_done"].as_i64(), job["segments"].as_i64()),
        (Some(500), Some(3)),
        "{job}"
    );
    let bucket = server.bucket();
    let cold = segment_rows(
        &direct,
        bucket.as_ref(),
        &prefix,
        job["job_id"].as_i64().unwrap(),
    )
    .await;
    let cold: BTreeMap<i64, Option<String>> =
        cold.into_iter().map(|(id, _, kind)| (id, kind)).collect();
    assert_eq!(
        cold, before,
        "the retried flush wrote exactly the rows that stayed hot"
    );
    assert!(rows(&direct, "SELECT id, kind FROM events")
        .await
        .is_empty());
    let data: Vec<String> = bucket_keys(bucket.as_ref())
        .await
        .into_iter()
        .filter(|k| !is_manifest(k))
        .collect();
    assert_eq!(data.len(), 3, "only the three segments: {data:?}");
}

#[test]
fn start_up_names_an_unreachable_missing_or_unsupported_store() {
    let server = s3();
    let db = create_db("s3start");
    let service = cluster().url(&db);
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let run = |store: &str, endpoint: &str| {
        let started = Instant::now();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_coldwire"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--service-url",
                &service,
                "--cold-store",
                store,
            ])
            .envs(server.proxy_env())
            .env("COLDWIRE_S3_ENDPOINT", endpoint)
            .output()
            .unwrap();
        assert!(
            !out.status.success(),
            "{store} on {endpoint}: coldwire started"
        );
        (
            String::from_utf8_lossy(&out.stderr).into_owned(),
            started.elapsed(),
        )
    };

    let (err, took) = run(
        &format!("s3://{BUCKET}/p"),
        &format!("http://127.0.0.1:{closed_port}"),
    );
    assert!(
        err.contains("cannot be listed") && err.contains("Connection refused"),
        "{err}"
    );
    assert!(
        took < Duration::from_secs(15),
        "start-up gave up after {took:?}"
    );
    assert!(!err.contains(common::moto::SECRET_ACCESS_KEY), "{err}");

    let (err, _) = run("s3://no-such-bucket/p", &server.endpoint());
    assert!(err.contains("NoSuchBucket"), "{err}");

    let (err, _) = run("ftp://host/p", &server.endpoint());
    assert!(err.contains("ftp:// is not supported"), "{err}");
}
