//! The flush end to end through a real proxy, Postgres and local cold store: rows leave
//! the heap for Parquet segments exactly once, the mirror keeps exactly the unflushed keys,
//! and a proxy killed mid-flush leaves a job the next proxy finishes.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::segments::store_files;
use common::{connect_direct, create_db, Proxy};
use serde_json::Value;
use tokio_postgres::Client;

async fn admin(c: &Client, sql: &str) -> Value {
    common::admin_call(c, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
}

/// (id, op) of every row of every active segment, read from the Parquet files.
async fn cold_rows(direct: &Client, store: &Path) -> Vec<(i64, i16)> {
    common::segments::active_rows(direct, store)
        .await
        .into_iter()
        .map(|r| (r.id, r.op))
        .collect()
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
    let proxy = Proxy::tiering(&db, store.path(), &[]).await;
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
    let files = segment_files(store.path());
    assert_eq!(files.len(), 3, "{files:?}");
    assert_manifest_lists_the_active_segments(&direct, store.path(), id).await;
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
    assert_manifest_lists_the_active_segments(&direct, store.path(), id).await;
}

/// The manifest's root names content-addressed shards that exist with their sha256, and
/// together they list exactly the active segments, with their checksums.
async fn assert_manifest_lists_the_active_segments(direct: &Client, store: &Path, table_id: i64) {
    let prefix: String = direct
        .query_one(
            "SELECT storage_prefix FROM coldwire.tables WHERE id = $1",
            &[&table_id],
        )
        .await
        .unwrap()
        .get(0);
    let root: Value =
        serde_json::from_slice(&std::fs::read(store.join(&prefix).join("manifest.json")).unwrap())
            .unwrap();
    assert_eq!(root["format"], "coldwire-manifest");
    let generation: i64 = direct
        .query_one(
            "SELECT generation FROM coldwire.tables WHERE id = $1",
            &[&table_id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(root["generation"], generation);
    let mut listed = BTreeSet::new();
    for shard in root["shards"].as_array().unwrap() {
        let bytes = std::fs::read(store.join(shard["key"].as_str().unwrap())).unwrap();
        let sha = coldwire::store::hex(&<sha2::Sha256 as sha2::Digest>::digest(&bytes));
        assert_eq!(shard["sha256"], sha.as_str());
        assert!(
            shard["key"].as_str().unwrap().contains(&sha[..16]),
            "content-addressed: {shard}"
        );
        let body: Value = serde_json::from_slice(&bytes).unwrap();
        for segment in body["segments"].as_array().unwrap() {
            listed.insert((
                segment["path"].as_str().unwrap().to_owned(),
                segment["sha256"].as_str().unwrap().to_owned(),
            ));
        }
    }
    let active: BTreeSet<(String, String)> = direct
        .query(
            "SELECT path, sha256 FROM coldwire.segments WHERE table_id = $1 AND status = 'active'",
            &[&table_id],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(listed, active);
    let shards_on_disk = store_files(&store.join(&prefix).join("manifest")).len();
    assert_eq!(
        shards_on_disk,
        root["shards"].as_array().unwrap().len(),
        "no stale shard left"
    );
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
    let proxy = Proxy::tiering(&db, store.path(), &[]).await;
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
        // Segments active, heap not yet pruned: the next attempt prunes the pairs it
        // reads back from those segments.
        "after_activation",
    ] {
        let db = create_db("crash");
        let store = tempfile::tempdir().unwrap();
        let direct = connect_direct(&db).await;
        direct
            .batch_execute("CREATE TABLE t(id bigint PRIMARY KEY, v text); INSERT INTO t SELECT g, repeat('x', 20) FROM generate_series(1, 500) g;")
            .await
            .unwrap();
        let mut doomed =
            Proxy::tiering(&db, store.path(), &[("COLDWIRE_FAILPOINT", failpoint)]).await;
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
        let proxy = Proxy::tiering(&db, store.path(), &[]).await;
        let state = common::first_job_completed(&direct).await;
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
            segment_files(store.path()).len() as i64,
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

#[tokio::test]
async fn a_key_flushed_again_gets_an_override_naming_its_newest_cold_version() {
    let db = create_db("overrides");
    let store = tempfile::tempdir().unwrap();
    let direct = connect_direct(&db).await;
    direct
        .batch_execute("CREATE TABLE t(id bigint PRIMARY KEY, v text); INSERT INTO t SELECT g, 'old' FROM generate_series(1, 999, 2) g;")
        .await
        .unwrap();
    let proxy = Proxy::tiering(&db, store.path(), &[]).await;
    let c = proxy.connect(&db).await;
    let id = admin(
        &c,
        r#"SELECT coldwire.tier_table('t', '{"auto_flush": false}')"#,
    )
    .await["id"]
        .as_i64()
        .unwrap();
    admin(
        &c,
        "SELECT coldwire.flush_table('t', wait => true, drain => true)",
    )
    .await;
    let overrides = format!("SELECT id, seq FROM coldwire.overrides_{id} ORDER BY id");
    assert!(
        direct.query(&overrides, &[]).await.unwrap().is_empty(),
        "first versions need no override"
    );

    // New versions of cold keys 1, 3, .., 19 (brought back into the heap), keys between
    // them that were never cold, and keys beyond every segment's range.
    for sql in [
        "UPDATE t SET v = 'new' WHERE id <= 20",
        "INSERT INTO t SELECT g, 'new' FROM generate_series(2, 20, 2) g",
        "INSERT INTO t SELECT g, 'new' FROM generate_series(2001, 2100) g",
    ] {
        c.batch_execute(sql).await.unwrap();
    }
    let newest: std::collections::BTreeMap<i64, i64> = direct
        .query(&format!("SELECT id, seq FROM coldwire.m_{id}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    admin(
        &c,
        "SELECT coldwire.flush_table('t', wait => true, drain => true)",
    )
    .await;

    let rows: Vec<(i64, i64)> = direct
        .query(&overrides, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let keys: BTreeSet<i64> = rows.iter().map(|(k, _)| *k).collect();
    let twice: BTreeSet<i64> = (1..20).step_by(2).collect();
    assert!(
        twice.is_subset(&keys),
        "every key with two cold versions: {keys:?}"
    );
    assert!(
        keys.iter().all(|k| *k <= 20),
        "keys outside every segment's pk range are never probed as cold: {keys:?}"
    );
    assert!(
        keys.len() <= twice.len() + 3,
        "bloom false positives stay rare: {keys:?}"
    );
    for (key, seq) in rows {
        assert_eq!(
            Some(&seq),
            newest.get(&key),
            "override of {key} names the version just flushed"
        );
    }
    let cold = cold_rows(&direct, store.path()).await;
    assert_eq!(
        cold.len(),
        500 + 120,
        "both versions of the re-inserted keys are cold"
    );
}

/// The key encoding of a bigint in segment bounds and stats (order-preserving).
fn ordered_int(v: i64) -> Vec<u8> {
    ((v as u64) ^ (1 << 63)).to_be_bytes().to_vec()
}

#[tokio::test]
async fn segments_record_pk_bounds_and_footer_stats_per_row_group() {
    let db = create_db("stats");
    let store = tempfile::tempdir().unwrap();
    let direct = connect_direct(&db).await;
    // 200k rows: more than one decoded batch per segment, segments of 150k rows (two row
    // groups: 131072 + 18928) and 50k rows.
    direct
        .batch_execute(
            "CREATE TABLE m(id bigint PRIMARY KEY, f float8, n numeric(10,2), t text, b bool, j jsonb, c char(3));
             INSERT INTO m SELECT g,
                 CASE WHEN g % 1000 = 0 THEN 'NaN' ELSE g * 0.5 END,
                 CASE WHEN g % 5000 = 0 THEN 'NaN' ELSE g / 100.0 END,
                 CASE WHEN g % 7 = 0 THEN NULL ELSE 'v' || lpad(g::text, 7, '0') END,
                 g % 2 = 0, jsonb_build_object('g', g), 'abc'
             FROM generate_series(1, 200000) g;",
        )
        .await
        .unwrap();
    let proxy = Proxy::tiering(&db, store.path(), &[]).await;
    let c = proxy.connect(&db).await;
    let tiered = admin(
        &c,
        r#"SELECT coldwire.tier_table('m', '{"max_rows_per_file": 150000, "auto_flush": false}')"#,
    )
    .await;
    let id = tiered["id"].as_i64().unwrap();
    let job = admin(
        &c,
        "SELECT coldwire.flush_table('m', wait => true, drain => true)",
    )
    .await;
    assert_eq!(job["state"], "completed", "{job}");
    assert_eq!(job["segments"], 2, "{job}");
    let progress: i64 = direct
        .query_one("SELECT rows_done FROM coldwire.jobs", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(progress, 200_000);

    let segments = direct
        .query("SELECT segment_id, row_count, min_pk, max_pk, min_seq, max_seq FROM coldwire.segments WHERE table_id = $1 ORDER BY min_pk", &[&id])
        .await
        .unwrap();
    let ranges: Vec<(i64, i64)> = vec![(1, 150_000), (150_001, 200_000)];
    for (row, (lo, hi)) in segments.iter().zip(&ranges) {
        assert_eq!(row.get::<_, i64>(1), hi - lo + 1);
        assert_eq!(row.get::<_, Vec<u8>>(2), ordered_int(*lo), "min_pk");
        assert_eq!(row.get::<_, Vec<u8>>(3), ordered_int(*hi), "max_pk");
        assert!(row.get::<_, i64>(4) <= row.get::<_, i64>(5));
    }
    let stats = |segment: uuid::Uuid, column: &'static str| {
        let direct = &direct;
        async move {
            direct
                .query_one(
                    "SELECT s.min_value, s.max_value, s.null_count, s.nan_count, s.rg_min, s.rg_max, s.rg_null_count, s.rg_nan_count \
                     FROM coldwire.segment_stats s JOIN pg_attribute a ON a.attnum = s.attnum AND a.attrelid = 'm'::regclass \
                     WHERE s.segment_id = $1 AND a.attname = $2",
                    &[&segment, &column],
                )
                .await
                .unwrap()
        }
    };
    let first: uuid::Uuid = segments[0].get(0);
    let second: uuid::Uuid = segments[1].get(0);
    let per_column: i64 = direct
        .query_one(
            "SELECT count(*) FROM coldwire.segment_stats WHERE segment_id = $1",
            &[&first],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(per_column, 7, "one stats row per column");

    // The pk: exact bounds per row group.
    let s = stats(first, "id").await;
    assert_eq!(
        s.get::<_, Vec<Option<Vec<u8>>>>(4),
        vec![Some(ordered_int(1)), Some(ordered_int(131_073))]
    );
    assert_eq!(
        s.get::<_, Vec<Option<Vec<u8>>>>(5),
        vec![Some(ordered_int(131_072)), Some(ordered_int(150_000))]
    );
    assert_eq!((s.get::<_, i64>(2), s.get::<_, i64>(3)), (0, 0));

    // Floats: NaN counted apart from the bounds, per row group.
    let s = stats(first, "f").await;
    assert_eq!(
        s.get::<_, Vec<i64>>(7),
        vec![131, 19],
        "NaN in 1..=131072 and 131073..=150000"
    );
    let float = |v: f64| (v.to_bits() | (1 << 63)).to_be_bytes().to_vec();
    assert_eq!(s.get::<_, Option<Vec<u8>>>(0), Some(float(0.5)));
    assert_eq!(
        s.get::<_, Option<Vec<u8>>>(1),
        Some(float(149_999.0 * 0.5)),
        "the max skips the NaN at 150000"
    );

    // numeric(10,2): NaN counted apart; bounds are unscaled decimals.
    let s = stats(second, "n").await;
    assert_eq!(
        s.get::<_, i64>(3),
        10,
        "NaN at every 5000th key of 150001..=200000"
    );
    let decimal = |v: i128| ((v as u128) ^ (1 << 127)).to_be_bytes().to_vec();
    assert_eq!(s.get::<_, Option<Vec<u8>>>(0), Some(decimal(150_001)));
    assert_eq!(s.get::<_, Option<Vec<u8>>>(1), Some(decimal(199_999)));

    // Text: NULLs counted; bounds in byte order.
    let s = stats(second, "t").await;
    assert_eq!(
        s.get::<_, i64>(2),
        (150_001..=200_000).filter(|g| g % 7 == 0).count() as i64
    );
    assert_eq!(s.get::<_, Option<Vec<u8>>>(0), Some(b"v0150001".to_vec()));
    assert_eq!(s.get::<_, Option<Vec<u8>>>(1), Some(b"v0200000".to_vec()));
    let s = stats(second, "b").await;
    assert_eq!(
        (
            s.get::<_, Option<Vec<u8>>>(0),
            s.get::<_, Option<Vec<u8>>>(1)
        ),
        (Some(vec![0]), Some(vec![1]))
    );

    // Types without a byte order: counts only.
    for column in ["j", "c"] {
        let s = stats(second, column).await;
        assert_eq!(
            (
                s.get::<_, Option<Vec<u8>>>(0),
                s.get::<_, Option<Vec<u8>>>(1)
            ),
            (None, None),
            "{column}"
        );
        assert_eq!(s.get::<_, i64>(2), 0, "{column}");
    }
    assert_eq!(cold_rows(&direct, store.path()).await.len(), 200_000);
}

/// The Parquet segment objects under `dir`.
fn segment_files(dir: &Path) -> Vec<std::path::PathBuf> {
    store_files(dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect()
}

/// A flush whose finalize committed and whose prune then could not take its locks (a
/// long transaction holding the table) fails, its segment active and its pairs still in
/// the mirror. The next flush finishes that prune before it selects anything: taking
/// those rows again would write them into a second segment, and every read after both
/// prunes would return each twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_whose_prune_failed_is_finished_before_the_next_flush_selects() {
    let db = create_db("failedprune");
    let store = tempfile::tempdir().unwrap();
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(
            "CREATE TABLE d(id bigint PRIMARY KEY, v int NOT NULL);
             INSERT INTO d SELECT g, 1 FROM generate_series(1, 1000) g;",
        )
        .await
        .unwrap();
    let proxy = Proxy::tiering(
        &db,
        store.path(),
        &[("COLDWIRE_FAILPOINT", "after_activation:sleep=2500")],
    )
    .await;
    let c = proxy.connect(&db).await;
    admin(
        &c,
        r#"SELECT coldwire.tier_table('d', '{"hot_row_limit": 100, "min_flush_rows": 10, "auto_flush": false}')"#,
    )
    .await;
    admin(&c, "SELECT coldwire.flush_table('d', wait => true)").await;
    direct
        .batch_execute("INSERT INTO d SELECT g, 1 FROM generate_series(1001, 1300) g")
        .await
        .unwrap();
    let job = admin(&c, "SELECT coldwire.flush_table('d')").await;
    let job_id = job["job_id"].as_i64().unwrap();
    // Once its segment is active (the failpoint holds the prune back 2.5 s), a block
    // through coldwire holds the table (its read lock) past the prune's tries.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while direct
        .query_opt(
            "SELECT 1 FROM coldwire.segments WHERE job_id = $1 AND status = 'active'",
            &[&job_id],
        )
        .await
        .unwrap()
        .is_none()
    {
        assert!(tokio::time::Instant::now() < deadline, "no activation");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let blocker = proxy.connect(&db).await;
    let held = tokio::spawn(async move {
        for sql in [
            "BEGIN",
            "SELECT v FROM d WHERE id = 999",
            "SELECT pg_sleep(18)",
            "COMMIT",
        ] {
            blocker.batch_execute(sql).await.unwrap();
        }
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    loop {
        let state: String = direct
            .query_one("SELECT state FROM coldwire.jobs WHERE id = $1", &[&job_id])
            .await
            .unwrap()
            .get(0);
        if state == "failed" {
            break;
        }
        assert!(
            state != "completed" && tokio::time::Instant::now() < deadline,
            "the prune was to fail behind the block: {state}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    held.await.unwrap();
    admin(&c, "SELECT coldwire.flush_table('d', wait => true)").await;
    let row = c
        .query_one(
            "SELECT count(*), count(DISTINCT id), sum(v)::bigint FROM d",
            &[],
        )
        .await
        .unwrap();
    let (rows, keys, sum): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!((rows, keys, sum), (1300, 1300, 1300), "every row once");
    let error: String = direct
        .query_one(
            "SELECT state || ': ' || coalesce(error, '') FROM coldwire.jobs WHERE id = $1",
            &[&job_id],
        )
        .await
        .unwrap()
        .get(0);
    let jobs: Vec<String> = direct
        .query(
            "SELECT id || ' ' || state || ' ' || coalesce(error, '') FROM coldwire.jobs ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        error.starts_with("completed: ") && error.contains("its prune was finished by flush job"),
        "{error}: {jobs:?}\n{}",
        proxy.log()
    );
}
