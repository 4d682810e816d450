//! Reads that return millions of cold rows, at default settings: every row a plain table
//! would return, no more, and the proxy's memory stays bounded (its peak RSS is read from
//! /proc).

mod common;

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::SystemTime;

use futures_util::{pin_mut, TryStreamExt};
use tokio_postgres::Client;

use common::{admin_call, cluster, connect_direct, create_db, simple_rows, Proxy};

const ROWS: i64 = 2_000_000;

/// Row count and an order-free digest of the rows of `sql`, streamed in binary.
async fn digest(c: &Client, sql: &str) -> (u64, u64) {
    let rows = c
        .query_raw(sql, std::iter::empty::<&str>())
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    pin_mut!(rows);
    let (mut count, mut sum) = (0u64, 0u64);
    while let Some(row) = rows.try_next().await.unwrap() {
        let mut h = DefaultHasher::new();
        row.get::<_, i64>(0).hash(&mut h);
        row.get::<_, SystemTime>(1).hash(&mut h);
        row.get::<_, Option<i32>>(2).hash(&mut h);
        row.get::<_, Option<&str>>(3).hash(&mut h);
        count += 1;
        sum = sum.wrapping_add(h.finish());
    }
    (count, sum)
}

fn peak_rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib / 1024
}

#[tokio::test]
async fn scans_of_two_million_cold_rows_answer_at_default_settings_in_bounded_memory() {
    let db = create_db("largescan");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(&format!(
            "CREATE TABLE t(id bigint PRIMARY KEY, at timestamptz NOT NULL, v int4, note text);
             INSERT INTO t SELECT g, '2026-01-01'::timestamptz + g * interval '1 second',
                                  CASE WHEN g % 101 = 0 THEN NULL ELSE g % 1000 END, 'n' || (g % 5000)
             FROM generate_series(1, {ROWS}) g;
             CREATE TABLE control AS SELECT * FROM t;"
        ))
        .await
        .unwrap();
    let proxy = Proxy::start(&["--service-url", &cluster().url(&db), "--cold-store", &store]).await;
    let c = proxy.connect(&db).await;
    admin_call(&c, r#"SELECT coldwire.tier_table('t', '{"hot_row_limit": 10000, "min_flush_rows": 10000, "auto_flush": false}')"#)
        .await
        .unwrap();
    admin_call(&c, "SELECT coldwire.flush_table('t', wait => true)")
        .await
        .unwrap();
    // The flush vacuumed the mirror it pruned (reads scan its cold key range).
    let vacuumed: bool = direct
        .query_one(
            "SELECT bool_and(last_vacuum IS NOT NULL) FROM pg_stat_user_tables WHERE schemaname = 'coldwire' AND relname LIKE 'm\\_%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(vacuumed, "the mirror was not vacuumed after the flush");
    // Some cold rows changed and deleted after the flush: their hot versions win.
    for (tiered, sql) in [
        (
            true,
            "UPDATE t SET note = 'changed' WHERE id BETWEEN 1000 AND 1999",
        ),
        (true, "DELETE FROM t WHERE id BETWEEN 5000 AND 5999"),
        (
            false,
            "UPDATE control SET note = 'changed' WHERE id BETWEEN 1000 AND 1999",
        ),
        (false, "DELETE FROM control WHERE id BETWEEN 5000 AND 5999"),
    ] {
        if tiered {
            c.batch_execute(sql).await.unwrap();
        } else {
            direct.batch_execute(sql).await.unwrap();
        }
    }
    let hot: i64 = direct
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert!(hot < 20_000, "{hot} rows still hot");

    for sql in [
        "SELECT id, at, v, note FROM {t}",
        "SELECT * FROM {t} WHERE at >= '2026-01-05'",
        "SELECT id, at, v, note FROM {t} WHERE v = 7 OR note = 'changed'",
    ] {
        let got = digest(&c, &sql.replace("{t}", "t")).await;
        let want = digest(&direct, &sql.replace("{t}", "control")).await;
        assert_eq!(got, want, "{sql}");
        assert!(got.0 > 1_000, "{sql}: {} rows", got.0);
    }
    // The simple protocol, and a statement that reads every cold row without returning
    // them.
    let summary =
        "SELECT count(*), count(DISTINCT note), sum(length(note)) FROM {t} WHERE note LIKE 'n1%'";
    assert_eq!(
        simple_rows(&c, &summary.replace("{t}", "t")).await.unwrap(),
        simple_rows(&direct, &summary.replace("{t}", "control"))
            .await
            .unwrap()
    );
    let pid = proxy.pid().unwrap();
    let peak = peak_rss_mib(pid);
    assert!(peak <= 768, "proxy peak RSS {peak} MiB");
    eprintln!("proxy peak RSS: {peak} MiB");
}
