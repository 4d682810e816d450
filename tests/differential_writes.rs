//! The differential write suite: a seeded generator of UPDATE, DELETE, INSERT, upserts,
//! key moves, MERGE and locking reads over hot, cold and mixed keys, applied through
//! coldwire to a tiered table and directly to a plain control table, with flushes
//! interleaved (plain and draining). After every statement its outcome — rows, command
//! tag or row count, or the SQLSTATE and constraint of its error — must match, in the
//! simple and the extended protocol; at the end the whole tables must match, byte for byte.

mod common;

use common::disguise::Disguise;
use common::{admin_call, cluster, connect_direct, create_db, Proxy};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_postgres::SimpleQueryMessage;

/// Statements in CI; `COLDWIRE_DIFFERENTIAL_WRITES` asks for more.
const DEFAULT_STATEMENTS: usize = 700;
const SEED: u64 = 0x7772_6974;
const ROWS: i64 = 3000;

/// One statement over `{t}`, and whether it returns rows.
fn statement(rng: &mut StdRng) -> (String, bool) {
    let k = |rng: &mut StdRng| rng.random_range(-5..ROWS + 200);
    let (k1, k2, k3) = (k(rng), k(rng), k(rng));
    let v = rng.random_range(-50..50);
    let lo = k1.min(k2);
    match rng.random_range(0..12) {
        0 => (format!("UPDATE {{t}} SET a = a + {v} WHERE id = {k1} RETURNING id, a, b"), true),
        1 => (format!("UPDATE {{t}} SET b = 'r{v}' WHERE id BETWEEN {lo} AND {}", lo + rng.random_range(0..30)), false),
        2 => (format!("DELETE FROM {{t}} WHERE id = {k1} RETURNING id, a"), true),
        3 => (format!("DELETE FROM {{t}} WHERE id IN ({k1}, {k2}, {k3})"), false),
        4 => (format!("INSERT INTO {{t}} VALUES ({k1}, {v}, 'ins')"), false),
        5 => (format!("INSERT INTO {{t}} VALUES ({k1}, {v}, 'nothing'), ({k2}, {v}, 'nothing') ON CONFLICT DO NOTHING"), false),
        6 => (format!("INSERT INTO {{t}} AS x VALUES ({k1}, {v}, 'up') ON CONFLICT (id) DO UPDATE SET a = x.a + excluded.a, b = 'upserted' RETURNING id, a, b"), true),
        7 => (format!("UPDATE {{t}} SET id = {k2} WHERE id = {k1}"), false),
        8 => (format!("MERGE INTO {{t}} x USING (VALUES ({k1}::bigint, {v})) s(id, a) ON x.id = s.id WHEN MATCHED AND x.a > 0 THEN UPDATE SET a = s.a WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.a, 'merged')"), false),
        9 => (format!("SELECT id, a, b FROM {{t}} WHERE id IN ({k1}, {k2}) ORDER BY id FOR UPDATE"), true),
        10 => (format!("UPDATE {{t}} SET a = a - 1 WHERE id >= {lo} AND id < {} AND a % 3 = 0", lo + 25), false),
        _ => (format!("DELETE FROM {{t}} WHERE id >= {lo} AND id < {} AND b = 'ins'", lo + 40), false),
    }
}

/// The outcome of a statement, comparable across the two tables.
async fn outcome(
    c: &tokio_postgres::Client,
    sql: &str,
    extended: bool,
    returns: bool,
) -> Result<Vec<String>, String> {
    let err = |e: tokio_postgres::Error| match e.as_db_error() {
        Some(db) => format!(
            "{} {:?}",
            db.code().code(),
            db.constraint().map(|c| c.replace("control", "t"))
        ),
        None => panic!("{sql}: {e:?}"),
    };
    if !extended {
        return c
            .simple_query(sql)
            .await
            .map(|msgs| {
                msgs.into_iter()
                    .filter_map(|m| match m {
                        SimpleQueryMessage::Row(r) => Some(format!(
                            "{:?}",
                            (0..r.len())
                                .map(|i| r.get(i).map(str::to_owned))
                                .collect::<Vec<_>>()
                        )),
                        SimpleQueryMessage::CommandComplete(n) => Some(format!("tag {n}")),
                        _ => None,
                    })
                    .collect()
            })
            .map_err(err);
    }
    if returns {
        c.query(sql, &[])
            .await
            .map(|rows| {
                rows.iter()
                    .map(|r| {
                        format!(
                            "{:?}",
                            (0..r.len())
                                .map(|i| r.get::<_, common::RawValue>(i))
                                .collect::<Vec<_>>()
                        )
                    })
                    .collect()
            })
            .map_err(err)
    } else {
        c.execute(sql, &[])
            .await
            .map(|n| vec![format!("count {n}")])
            .map_err(err)
    }
}

#[tokio::test]
async fn generated_writes_over_hot_and_cold_rows_match_a_plain_table() {
    let db = create_db("diffwrites");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(&format!(
            "CREATE TABLE t(id bigint PRIMARY KEY, a int NOT NULL, b text);
             CREATE TABLE control(LIKE t INCLUDING ALL);
             INSERT INTO t SELECT g, g % 97, 'b' || g FROM generate_series(1, {ROWS}) g;
             INSERT INTO control SELECT * FROM t;"
        ))
        .await
        .unwrap();
    let proxy = Proxy::start(&["--service-url", &cluster().url(&db), "--cold-store", &store]).await;
    let c = proxy.connect(&db).await;
    admin_call(&c, r#"SELECT coldwire.tier_table('t', '{"hot_row_limit": 300, "min_flush_rows": 100, "max_rows_per_file": 500, "auto_flush": false}')"#)
        .await
        .unwrap();
    let flush = |drain: bool| common::flush_t(&c, drain);
    flush(false).await;

    let statements = common::differential_writes(DEFAULT_STATEMENTS);
    let mut rng = StdRng::seed_from_u64(SEED);
    // Comments, case and spacing as applications send them, the same on both sides.
    let mut dress = StdRng::seed_from_u64(SEED ^ 0xd15_9415e);
    let mut errors = 0;
    for i in 0..statements {
        let (sql, returns) = statement(&mut rng);
        let disguise = Disguise::draw(&mut dress);
        let sql = disguise.apply(&sql.replace("{t}", "cw_table_"));
        let extended = i % 2 == 1;
        let on = |table: &str| sql.replace("cw_table_", table);
        let expected = outcome(&direct, &on("control"), extended, returns).await;
        let got = outcome(&c, &on("t"), extended, returns).await;
        assert_eq!(
            got,
            expected,
            "statement {i} ({}): {sql}",
            if extended { "extended" } else { "simple" }
        );
        errors += usize::from(expected.is_err());
        if i % 50 == 49 {
            flush(i % 100 == 99).await;
        }
    }
    assert!(
        errors > 10,
        "unique violations and the like were exercised: {errors}"
    );
    let (cold, _) = common::active_segments(&direct).await;
    assert!(cold > 3, "{cold} segments");
    common::assert_same_as_control(&c, &direct).await;
}
