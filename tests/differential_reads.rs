//! The differential read suite (simple protocol): the same history of writes and flushes
//! applied to a tiered table through coldwire and to a plain control table directly; then
//! a seeded generator of queries (point lookups, ranges, IN lists, IS NULL, joins with a
//! plain table and with itself, aggregates with GROUP BY/HAVING, DISTINCT, ORDER BY with
//! LIMIT/OFFSET, window functions, subqueries, CTEs, set operations, EXISTS) runs against
//! both, and every result must be identical. Extended protocol and binary results follow
//! with the Parse/Bind read path.

mod common;

use common::{admin_call, cluster, connect_direct, create_db, simple_rows, Proxy};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Queries in CI; `COLDWIRE_DIFFERENTIAL_QUERIES` asks for more.
const DEFAULT_QUERIES: usize = 2000;
const SEED: u64 = 0x636f_6c64;
const ROWS: i64 = 5000;

/// One query over table `{t}`, with constants drawn from `rng`.
fn query(rng: &mut StdRng) -> String {
    let k = |rng: &mut StdRng| rng.random_range(-10..ROWS + 60);
    let (k1, k2, k3) = (k(rng), k(rng), k(rng));
    let (lo, hi) = (k1.min(k2), k1.max(k2));
    let v = rng.random_range(0..50);
    match rng.random_range(0..18) {
        0 => format!("SELECT * FROM {{t}} WHERE id = {k1}"),
        1 => format!("SELECT id, a, c FROM {{t}} WHERE id BETWEEN {lo} AND {hi} ORDER BY id LIMIT 200"),
        2 => format!("SELECT id, b FROM {{t}} WHERE id IN ({k1}, {k2}, {k3}, {}) ORDER BY id", k1 + 1),
        3 => format!("SELECT count(*), count(b), sum(a) FROM {{t}} WHERE b IS NULL AND id > {lo}"),
        4 => format!(
            "SELECT a % 7 AS g, count(*), sum(c), min(d), max(f) FROM {{t}} WHERE id > {lo} GROUP BY 1 HAVING count(*) > {} ORDER BY 1",
            v % 5
        ),
        5 => "SELECT DISTINCT e, a % 3 FROM {t} ORDER BY 1, 2".to_owned(),
        6 => format!("SELECT id, b FROM {{t}} ORDER BY b NULLS FIRST, id LIMIT 10 OFFSET {}", rng.random_range(0..ROWS)),
        7 => format!("SELECT id, sum(a) OVER (ORDER BY id ROWS 2 PRECEDING) FROM {{t}} WHERE id < {lo} ORDER BY id DESC LIMIT 50"),
        8 => format!("SELECT x.id, dim.name FROM {{t}} x JOIN dim ON dim.id = x.a WHERE x.id < {lo} ORDER BY 1 LIMIT 100"),
        9 => format!("SELECT x.id, y.a FROM {{t}} x JOIN {{t}} y ON y.id = x.id + 1 WHERE x.id BETWEEN {lo} AND {} ORDER BY 1", lo + 40),
        10 => format!("WITH w AS (SELECT * FROM {{t}} WHERE a = {v}) SELECT count(*), sum(c), max(id) FROM w"),
        11 => format!("SELECT id FROM {{t}} WHERE a = {v} AND id < {hi} ORDER BY id"),
        12 => "SELECT count(*) FROM {t} WHERE id IN (SELECT id FROM {t} WHERE e)".to_owned(),
        13 => format!("SELECT id, g FROM {{t}} WHERE g @> ARRAY['x{}'] ORDER BY id LIMIT 5", v % 10),
        14 => format!("SELECT id FROM {{t}} WHERE id < {lo} UNION SELECT a FROM {{t}} WHERE id > {hi} ORDER BY 1 LIMIT 20"),
        15 => format!("SELECT EXISTS (SELECT 1 FROM {{t}} WHERE id = {k1}), EXISTS (SELECT 1 FROM {{t}} WHERE id = {k2} AND e)"),
        16 => format!("SELECT d::date, count(*) FROM {{t}} WHERE f > {} GROUP BY 1 ORDER BY 1 LIMIT 10", f64::from(v) * 10.5),
        _ => format!("SELECT dim.id, (SELECT count(*) FROM {{t}} x WHERE x.a = dim.id AND x.id <= {hi}) FROM dim ORDER BY 1"),
    }
}

#[tokio::test]
async fn generated_reads_over_a_flushed_table_match_a_plain_table() {
    let db = create_db("differential");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(&format!(
            "CREATE TABLE t(id bigint PRIMARY KEY, a int, b text, c numeric(10,2), d timestamptz, e bool, f float8, g text[]);
             CREATE TABLE control(LIKE t INCLUDING ALL);
             CREATE TABLE dim(id int PRIMARY KEY, name text);
             INSERT INTO dim SELECT g, 'd' || g FROM generate_series(0, 60) g;
             INSERT INTO t SELECT g, g % 50, CASE WHEN g % 11 = 0 THEN NULL ELSE 'b' || (g * 7919 % 1000) END, g / 3.0,
                                  '2026-01-01'::timestamptz + g * interval '37 minutes', g % 3 = 0,
                                  CASE WHEN g % 97 = 0 THEN 'NaN' ELSE g * 1.5 END, ARRAY['x' || g % 10, 'y']
             FROM generate_series(1, {ROWS}) g;
             INSERT INTO control SELECT * FROM t;"
        ))
        .await
        .unwrap();
    let proxy = Proxy::start(&["--service-url", &cluster().url(&db), "--cold-store", &store]).await;
    let c = proxy.connect(&db).await;
    admin_call(&c, r#"SELECT coldwire.tier_table('t', '{"hot_row_limit": 500, "min_flush_rows": 250, "max_rows_per_file": 1000, "auto_flush": false}')"#)
        .await
        .unwrap();
    let flush = || admin_call(&c, "SELECT coldwire.flush_table('t', wait => true)");
    flush().await.unwrap();
    // Hot writes after the flush; new versions of cold keys (an insert through coldwire, an
    // update of the plain table); a second flush; more hot writes.
    let both = [
        "UPDATE {t} SET b = 'hot', a = a + 1 WHERE id > 4800",
        "DELETE FROM {t} WHERE id BETWEEN 4950 AND 4960",
        "INSERT INTO {t} SELECT g, g % 50, 'new', 0, '2026-09-01', true, g, '{}' FROM generate_series(5001, 5050) g",
    ];
    for sql in both {
        c.batch_execute(&sql.replace("{t}", "t")).await.unwrap();
        direct
            .batch_execute(&sql.replace("{t}", "control"))
            .await
            .unwrap();
    }
    c.batch_execute("INSERT INTO t SELECT g, 49, 'again', 1, '2026-10-01', false, -1, ARRAY['x1'] FROM generate_series(10, 30) g")
        .await
        .unwrap();
    direct
        .batch_execute("UPDATE control SET a = 49, b = 'again', c = 1, d = '2026-10-01', e = false, f = -1, g = ARRAY['x1'] WHERE id BETWEEN 10 AND 30")
        .await
        .unwrap();
    flush().await.unwrap();
    for sql in [
        "UPDATE {t} SET c = c + 1 WHERE id > 5040",
        "DELETE FROM {t} WHERE id = 5049",
    ] {
        c.batch_execute(&sql.replace("{t}", "t")).await.unwrap();
        direct
            .batch_execute(&sql.replace("{t}", "control"))
            .await
            .unwrap();
    }
    let (hot, cold): (i64, i64) = {
        let r = direct
            .query_one("SELECT (SELECT count(*) FROM t), (SELECT coalesce(sum(row_count), 0)::bigint FROM coldwire.segments WHERE status = 'active')", &[])
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert!(
        hot < 1000 && cold > 4000,
        "mostly cold: {hot} hot, {cold} cold rows"
    );

    let queries = std::env::var("COLDWIRE_DIFFERENTIAL_QUERIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_QUERIES);
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut compared = 0;
    for i in 0..queries {
        let sql = query(&mut rng);
        let expected = simple_rows(&direct, &sql.replace("{t}", "control"))
            .await
            .unwrap_or_else(|e| panic!("control: {sql}: {e:?}"));
        let got = simple_rows(&c, &sql.replace("{t}", "t"))
            .await
            .unwrap_or_else(|e| panic!("query {i}: {sql}: {e:?}"));
        assert_eq!(got, expected, "query {i}: {sql}");
        compared += usize::from(!expected.is_empty());
    }
    assert!(
        compared > queries / 2,
        "most queries return rows: {compared}"
    );
}
