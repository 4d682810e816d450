//! The flush end to end through a real proxy, Postgres and local cold store: rows leave
//! the heap for Parquet segments exactly once, the mirror keeps exactly the unflushed keys,
//! and a proxy killed mid-flush leaves a job the next proxy finishes.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use arrow::array::{Array, Int16Array, Int64Array};
use bytes::Bytes;
use common::{cluster, connect_direct, create_db, Proxy};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::Value;
use tokio_postgres::Client;

async fn admin(c: &Client, sql: &str) -> Value {
    common::admin_call(c, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
}

async fn proxy_for(db: &str, store: &Path, env: &[(&str, &str)]) -> Proxy {
    let store_url = format!("file://{}", store.display());
    Proxy::start_env(
        &[
            "--service-url",
            &cluster().url(db),
            "--cold-store",
            &store_url,
        ],
        env,
    )
    .await
}

/// (id, op) of every row of every active segment, read from the Parquet files.
async fn cold_rows(direct: &Client, store: &Path) -> Vec<(i64, i16)> {
    let mut out = Vec::new();
    for row in direct
        .query(
            "SELECT path, sha256, row_count FROM coldwire.segments WHERE status = 'active'",
            &[],
        )
        .await
        .unwrap()
    {
        let path: String = row.get(0);
        let bytes = Bytes::from(std::fs::read(store.join(&path)).unwrap());
        let sha = coldwire::flush::store::hex(&<sha2::Sha256 as sha2::Digest>::digest(&bytes));
        assert_eq!(sha, row.get::<_, String>(1), "sha256 of {path}");
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .unwrap()
            .build()
            .unwrap();
        let mut n = 0;
        for batch in reader {
            let batch = batch.unwrap();
            let ids = batch
                .column_by_name("id")
                .unwrap()
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .clone();
            let ops = batch
                .column_by_name("_cw_op")
                .unwrap()
                .as_any()
                .downcast_ref::<Int16Array>()
                .unwrap()
                .clone();
            for i in 0..ids.len() {
                out.push((ids.value(i), ops.value(i)));
            }
            n += batch.num_rows() as i64;
        }
        assert_eq!(n, row.get::<_, i64>(2), "row_count of {path}");
    }
    out
}

async fn ids(c: &Client, sql: &str) -> BTreeSet<i64> {
    c.query(sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test]
async fn flush_moves_the_oldest_rows_to_parquet_exactly_once() {
    let db = create_db("flush");
    let store = tempfile::tempdir().unwrap();
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(
            "CREATE TABLE events(id bigint PRIMARY KEY, kind text, amount numeric(12,2), at timestamptz, tags text[]);
             INSERT INTO events SELECT g, 'k' || g % 7, g * 1.5, '2026-01-01'::timestamptz + g * interval '1 min', ARRAY['a', g::text]
             FROM generate_series(1, 1000) g;",
        )
        .await
        .unwrap();
    let proxy = proxy_for(&db, store.path(), &[]).await;
    let c = proxy.connect(&db).await;
    let tiered = admin(
        &c,
        r#"SELECT coldwire.tier_table('events', '{"hot_row_limit": 100, "min_flush_rows": 100, "max_rows_per_file": 300, "auto_flush": false}')"#,
    )
    .await;
    let id = tiered["id"].as_i64().unwrap();
    // Writes after tiering make these keys the newest.
    c.batch_execute("UPDATE events SET kind = 'recent' WHERE id > 950")
        .await
        .unwrap();

    let job = admin(&c, "SELECT coldwire.flush_table('events', wait => true)").await;
    assert_eq!(job["state"], "completed", "{job}");
    assert_eq!(job["rows_done"], 900);
    assert_eq!(job["segments"], 3);

    let hot = ids(&direct, "SELECT id FROM events").await;
    assert_eq!(hot.len(), 100);
    assert!(
        (951..=1000).all(|k| hot.contains(&k)),
        "the newest keys stay hot"
    );
    let mirror = ids(&direct, &format!("SELECT id FROM coldwire.m_{id}")).await;
    assert_eq!(mirror, hot, "the mirror holds exactly the unflushed keys");
    let cold = cold_rows(&direct, store.path()).await;
    assert_eq!(cold.len(), 900);
    assert!(cold.iter().all(|(_, op)| *op == 1));
    let cold_ids: BTreeSet<i64> = cold.iter().map(|(k, _)| *k).collect();
    assert_eq!(cold_ids.len(), 900, "no key twice");
    assert!(cold_ids.is_disjoint(&hot));
    assert_eq!(cold_ids.union(&hot).count(), 1000, "nothing lost");
    // Segments cover disjoint pk ranges in pk order, and no object is unaccounted for.
    let files: Vec<_> = walk(store.path());
    assert_eq!(files.len(), 3, "{files:?}");
    let generation: i64 = direct
        .query_one(
            "SELECT generation FROM coldwire.tables WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(generation, 1);

    // Delete some hot keys, then drain: tombstones for them (cold versions may exist),
    // everything else flushed, heap and mirror empty.
    c.batch_execute("DELETE FROM events WHERE id BETWEEN 991 AND 1000")
        .await
        .unwrap();
    let job = admin(
        &c,
        "SELECT coldwire.flush_table('events', wait => true, drain => true)",
    )
    .await;
    assert_eq!(job["state"], "completed", "{job}");
    assert_eq!(job["rows_done"], 100);
    assert!(ids(&direct, "SELECT id FROM events").await.is_empty());
    assert!(ids(&direct, &format!("SELECT id FROM coldwire.m_{id}"))
        .await
        .is_empty());
    let cold = cold_rows(&direct, store.path()).await;
    let tombstones: BTreeSet<i64> = cold
        .iter()
        .filter(|(_, op)| *op == 3)
        .map(|(k, _)| *k)
        .collect();
    assert_eq!(tombstones, (991..=1000).collect());
    let live: BTreeSet<i64> = cold
        .iter()
        .filter(|(_, op)| *op == 1)
        .map(|(k, _)| *k)
        .collect();
    assert_eq!(live, (1..=990).collect());
}

#[tokio::test]
async fn auto_flush_keeps_the_heap_at_its_policy() {
    let db = create_db("autoflush");
    let store = tempfile::tempdir().unwrap();
    let direct = connect_direct(&db).await;
    direct
        .batch_execute("CREATE TABLE t(id bigint PRIMARY KEY, v text)")
        .await
        .unwrap();
    let proxy = proxy_for(&db, store.path(), &[]).await;
    let c = proxy.connect(&db).await;
    admin(&c, r#"SELECT coldwire.tier_table('t', '{"hot_row_limit": 200, "min_flush_rows": 100, "check_interval": "200ms"}')"#).await;
    for batch in 0..10 {
        c.execute(
            "INSERT INTO t SELECT g, 'v' FROM generate_series($1::bigint, $1::bigint + 99) g",
            &[&(batch * 100 + 1i64)],
        )
        .await
        .unwrap();
    }
    let mut hot = i64::MAX;
    for _ in 0..150 {
        hot = direct
            .query_one("SELECT count(*) FROM t", &[])
            .await
            .unwrap()
            .get(0);
        if hot <= 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        hot <= 200,
        "auto flush did not bring the heap to its limit: {hot} rows"
    );
    let cold = cold_rows(&direct, store.path()).await;
    assert_eq!(
        cold.len() as i64 + hot,
        1000,
        "every row in the heap or in exactly one segment"
    );
    assert!(proxy.log_contains("auto flush queued").await);
}

#[tokio::test]
async fn a_proxy_killed_mid_flush_leaves_a_job_the_next_one_finishes() {
    for failpoint in [
        "after_publish",
        "after_pending_insert",
        "before_finalize_commit",
    ] {
        let db = create_db("crash");
        let store = tempfile::tempdir().unwrap();
        let direct = connect_direct(&db).await;
        direct
            .batch_execute("CREATE TABLE t(id bigint PRIMARY KEY, v text); INSERT INTO t SELECT g, repeat('x', 20) FROM generate_series(1, 500) g;")
            .await
            .unwrap();
        let mut doomed = proxy_for(&db, store.path(), &[("COLDWIRE_FAILPOINT", failpoint)]).await;
        let c = doomed.connect(&db).await;
        admin(&c, r#"SELECT coldwire.tier_table('t', '{"hot_row_limit": 0, "min_flush_rows": 1, "max_rows_per_file": 200, "auto_flush": false}')"#).await;
        assert!(
            c.simple_query("SELECT coldwire.flush_table('t', wait => true)")
                .await
                .is_err(),
            "{failpoint}: the proxy dies"
        );
        doomed
            .wait(Duration::from_secs(10))
            .await
            .expect("the proxy exited");

        // Nothing of the crashed attempt is visible: the heap still has every row.
        let hot: i64 = direct
            .query_one("SELECT count(*) FROM t", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(hot, 500, "{failpoint}");

        // A new proxy's executor reclaims the job at once and finishes it.
        let proxy = proxy_for(&db, store.path(), &[]).await;
        let mut state = String::new();
        for _ in 0..100 {
            state = direct
                .query_one("SELECT state FROM coldwire.jobs ORDER BY id LIMIT 1", &[])
                .await
                .unwrap()
                .get(0);
            if state == "completed" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(state, "completed", "{failpoint}: {}", proxy.log());
        let attempt: i32 = direct
            .query_one("SELECT attempt FROM coldwire.jobs", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(attempt, 2, "{failpoint}");
        let hot: i64 = direct
            .query_one("SELECT count(*) FROM t", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(hot, 0, "{failpoint}");
        let cold = cold_rows(&direct, store.path()).await;
        let keys: BTreeSet<i64> = cold.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            (cold.len(), keys.len()),
            (500, 500),
            "{failpoint}: every row in exactly one active segment"
        );
        let pending: i64 = direct
            .query_one(
                "SELECT count(*) FROM coldwire.segments WHERE status <> 'active'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(pending, 0, "{failpoint}");
        let active: i64 = direct
            .query_one("SELECT count(*) FROM coldwire.segments", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            walk(store.path()).len() as i64,
            active,
            "{failpoint}: no orphan object left"
        );
        let maintenance: i64 = direct
            .query_one("SELECT count(*) FROM coldwire.maintenance", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(maintenance, 0);
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
