//! The age policy (`tier_after` with `age_column`): checked where it is set, flushes that
//! take exactly the rows older than the interval (keys deleted meanwhile too, NULL ages
//! never), alone and together with a row limit, on request and automatically, through a
//! crash, and under generated writes that age rows and make them young again.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::{admin_call, binary_rows, connect_direct, create_db, Proxy};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use tokio_postgres::Client;

async fn admin(c: &Client, sql: &str) -> Value {
    admin_call(c, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
}

async fn ids(c: &Client, sql: &str) -> BTreeSet<i64> {
    c.query(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// The keys of the live cold versions and of the tombstones, read from the segments.
async fn cold_keys(direct: &Client, store: &Path) -> (Vec<i64>, BTreeSet<i64>) {
    let rows = common::segments::active_rows(direct, store).await;
    let live = rows.iter().filter(|r| r.op == 1).map(|r| r.id).collect();
    let tombstones = rows.iter().filter(|r| r.op == 3).map(|r| r.id).collect();
    (live, tombstones)
}

/// `t(id, at <age_type>, v)`: 1,000 rows aged 0 to 199 days, every 37th with a NULL age.
async fn aged_table(direct: &Client, age_type: &str) {
    direct
        .batch_execute(&format!(
            "CREATE TABLE t(id bigint PRIMARY KEY, at {age_type}, v text);
             INSERT INTO t SELECT g, CASE WHEN g % 37 <> 0 THEN (now() - (g % 200) * interval '1 day' - interval '1 hour')::{age_type} END, 'v' || g
             FROM generate_series(1, 1000) g;"
        ))
        .await
        .unwrap();
}

const AGED: &str = "SELECT id FROM t WHERE at < now() - interval '90 days'";

#[tokio::test]
async fn an_age_rule_is_checked_where_it_is_set() {
    let db = create_db("agecheck");
    let store = tempfile::tempdir().unwrap();
    let direct = connect_direct(&db).await;
    direct
        .batch_execute("CREATE TABLE t(id bigint PRIMARY KEY, at timestamptz, note text)")
        .await
        .unwrap();
    let proxy = Proxy::tiering(&db, store.path(), &[]).await;
    let c = proxy.connect(&db).await;
    for (policy, key, says) in [
        (
            r#"{"tier_after": "90 days"}"#,
            "age_column",
            "needs an age_column",
        ),
        (
            r#"{"age_column": "at"}"#,
            "tier_after",
            "needs a tier_after",
        ),
        (
            r#"{"tier_after": "90 days", "age_column": "note"}"#,
            "age_column",
            "is text",
        ),
        (
            r#"{"tier_after": "90 days", "age_column": "gone"}"#,
            "age_column",
            "has no column",
        ),
        (
            r#"{"tier_after": "90 dayz", "age_column": "at"}"#,
            "tier_after",
            "interval",
        ),
        (
            r#"{"tier_after": "-1 day", "age_column": "at"}"#,
            "tier_after",
            "not a positive interval",
        ),
        (
            r#"{"tier_after": "1 day -25 hours", "age_column": "at"}"#,
            "tier_after",
            "not a positive interval",
        ),
        (
            r#"{"tier_after": 90, "age_column": "at"}"#,
            "tier_after",
            "must be an interval",
        ),
    ] {
        refused(&c, "tier_table", policy, key, says).await;
    }
    let tables: i64 = direct
        .query_one("SELECT count(*) FROM coldwire.tables", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 0, "nothing was tiered by a refused call");

    // Accepted: stored as Postgres prints the interval, the default row limit gone.
    let tiered = admin(
        &c,
        r#"SELECT coldwire.tier_table('t', '{"tier_after": "3 months 2 days", "age_column": "at"}')"#,
    )
    .await;
    assert_eq!(tiered["policy"]["tier_after"], "3 mons 2 days", "{tiered}");
    assert_eq!(tiered["policy"]["age_column"], "at");
    assert_eq!(tiered["policy"]["hot_row_limit"], Value::Null);

    // set_policy refuses the same mistakes and leaves the policy as it was.
    for (policy, key, says) in [
        (r#"{"age_column": "note"}"#, "age_column", "is text"),
        (r#"{"tier_after": "soon"}"#, "tier_after", "interval"),
        (
            r#"{"tier_after": null, "age_column": null}"#,
            "hot_row_limit",
            "needs a row limit or an age rule",
        ),
        (
            r#"{"tier_after": null}"#,
            "tier_after",
            "needs a tier_after",
        ),
    ] {
        refused(&c, "set_policy", policy, key, says).await;
    }
    let stored: Value = direct
        .query_one("SELECT policy FROM coldwire.tables", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored["tier_after"], "3 mons 2 days", "{stored}");
    assert_eq!(stored["age_column"], "at");

    // Both rules, then back to a row limit alone.
    let both = admin(
        &c,
        r#"SELECT coldwire.set_policy('t', '{"hot_row_limit": 500, "tier_after": "1 year"}')"#,
    )
    .await;
    assert_eq!(both["policy"]["hot_row_limit"], 500, "{both}");
    assert_eq!(both["policy"]["tier_after"], "1 year");
    let rows_only = admin(
        &c,
        r#"SELECT coldwire.set_policy('t', '{"tier_after": null, "age_column": null}')"#,
    )
    .await;
    assert_eq!(rows_only["policy"]["hot_row_limit"], 500, "{rows_only}");
    assert_eq!(rows_only["policy"]["age_column"], Value::Null);
}

/// `coldwire.<call>('t', policy)` is refused with 22023 naming `key` and saying `says`.
async fn refused(c: &Client, call: &str, policy: &str, key: &str, says: &str) {
    let sql = format!("SELECT coldwire.{call}('t', '{policy}')");
    let e = admin_call(c, &sql).await.unwrap_err();
    let db = e.as_db_error().unwrap_or_else(|| panic!("{sql}: {e:?}"));
    assert_eq!(db.code().code(), "22023", "{sql}: {db:?}");
    assert!(
        db.message().contains(&format!("\"{key}\"")) && db.message().contains(says),
        "{sql}: {}",
        db.message()
    );
}

#[tokio::test]
async fn a_flush_by_age_takes_exactly_the_rows_older_than_tier_after() {
    for age_type in ["timestamptz", "timestamp", "date"] {
        let db = create_db("ageflush");
        let store = tempfile::tempdir().unwrap();
        let direct = connect_direct(&db).await;
        aged_table(&direct, age_type).await;
        let proxy = Proxy::tiering(&db, store.path(), &[]).await;
        let c = proxy.connect(&db).await;
        let tiered = admin(&c, r#"SELECT coldwire.tier_table('t', '{"tier_after": "90 days", "age_column": "at", "auto_flush": false, "max_rows_per_file": 200}')"#).await;
        let id = tiered["id"].as_i64().unwrap();
        // Keys deleted after tiering are due too (they have no age to keep them hot); a
        // young row aged by an update is due, an old one made young is not.
        c.batch_execute(
            "DELETE FROM t WHERE id IN (5, 150, 151);
             UPDATE t SET at = now() - interval '300 days' WHERE id = 1;
             UPDATE t SET at = now() WHERE id = 199;",
        )
        .await
        .unwrap();
        let before = binary_rows(&c, "SELECT * FROM t ORDER BY id", &[])
            .await
            .unwrap();
        let aged = ids(&direct, AGED).await;
        assert!(aged.contains(&1) && !aged.contains(&199), "{age_type}");
        let young = ids(&direct, &format!("SELECT id FROM t EXCEPT {AGED}")).await;
        assert!(young.len() > 400 && aged.len() > 400, "{age_type}");

        let job = admin(&c, "SELECT coldwire.flush_table('t', wait => true)").await;
        assert_eq!(job["state"], "completed", "{age_type}: {job}");
        assert_eq!(job["rows_done"], aged.len() as i64 + 3, "{age_type}: {job}");

        assert_eq!(
            ids(&direct, "SELECT id FROM t").await,
            young,
            "{age_type}: the heap keeps exactly the young rows and the NULL ages"
        );
        assert!(young.contains(&37), "{age_type}: a NULL age stays hot");
        let mirror = ids(&direct, &format!("SELECT id FROM coldwire.m_{id}")).await;
        assert_eq!(mirror, young, "{age_type}: deleted keys left the mirror");
        let (live, tombstones) = cold_keys(&direct, store.path()).await;
        assert_eq!(
            live.iter().copied().collect::<BTreeSet<_>>(),
            aged,
            "{age_type}"
        );
        assert_eq!(live.len(), aged.len(), "{age_type}: no key twice");
        assert!(tombstones.is_empty(), "{age_type}: no cold version to hide");
        let after = binary_rows(&c, "SELECT * FROM t ORDER BY id", &[])
            .await
            .unwrap();
        assert!(after == before, "{age_type}: the merged table is unchanged");

        // Nothing more is due: a second flush takes nothing.
        let job = admin(&c, "SELECT coldwire.flush_table('t', wait => true)").await;
        assert_eq!(job["rows_done"], 0, "{age_type}: {job}");
    }
}

#[tokio::test]
async fn an_age_rule_with_a_row_limit_takes_the_oldest_rows_beyond_both() {
    let db = create_db("ageboth");
    let store = tempfile::tempdir().unwrap();
    let direct = connect_direct(&db).await;
    aged_table(&direct, "timestamptz").await;
    let proxy = Proxy::tiering(&db, store.path(), &[]).await;
    let c = proxy.connect(&db).await;
    // The age rule alone would leave about 450 rows hot; the row limit asks for 200.
    direct
        .batch_execute("CREATE TABLE control_ages AS SELECT id, at FROM t")
        .await
        .unwrap();
    admin(&c, r#"SELECT coldwire.tier_table('t', '{"tier_after": "90 days", "age_column": "at", "hot_row_limit": 200, "min_flush_rows": 100, "auto_flush": false}')"#).await;
    let aged = ids(&direct, AGED).await;
    let job = admin(&c, "SELECT coldwire.flush_table('t', wait => true)").await;
    assert_eq!(job["state"], "completed", "{job}");
    assert_eq!(job["rows_done"], 800, "{job}");
    let hot = ids(&direct, "SELECT id FROM t").await;
    assert_eq!(hot.len(), 200);
    assert!(hot.is_disjoint(&aged), "every aged row went");
    // By age: every row taken is at least as old as every row kept, NULL ages kept last.
    let nulls = ids(&direct, "SELECT id FROM t WHERE at IS NULL").await;
    assert_eq!(nulls.len(), 27, "NULL ages are taken last");
    let (live, _) = cold_keys(&direct, store.path()).await;
    let age = |ids: Vec<i64>| {
        let direct = &direct;
        async move {
            direct
                .query_one(
                    "SELECT min(extract(epoch FROM at)::float8), max(extract(epoch FROM at)::float8) FROM control_ages WHERE id = ANY($1)",
                    &[&ids],
                )
                .await
                .map(|r| (r.get::<_, f64>(0), r.get::<_, f64>(1)))
                .unwrap()
        }
    };
    let (_, newest_cold) = age(live).await;
    let (oldest_hot, _) = age(hot.into_iter().collect()).await;
    assert!(newest_cold <= oldest_hot, "the oldest rows went first");
}

#[tokio::test]
async fn auto_flush_moves_rows_as_they_age() {
    let db = create_db("ageauto");
    let store = tempfile::tempdir().unwrap();
    let direct = connect_direct(&db).await;
    aged_table(&direct, "timestamptz").await;
    let proxy = Proxy::tiering(&db, store.path(), &[]).await;
    let c = proxy.connect(&db).await;
    admin(&c, r#"SELECT coldwire.tier_table('t', '{"tier_after": "90 days", "age_column": "at", "min_flush_rows": 50, "check_interval": "200ms"}')"#).await;
    let wait_for_no_aged = || async {
        for _ in 0..150 {
            if ids(&direct, AGED).await.is_empty() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    };
    assert!(wait_for_no_aged().await, "{}", proxy.log());
    assert!(proxy.log_contains("rows older than 90 days").await);
    let young = ids(&direct, "SELECT id FROM t").await.len();
    // Rows age (here: are written old) after the first flush: the next one takes them once
    // half a chunk of them is due.
    c.batch_execute("UPDATE t SET at = now() - interval '100 days' WHERE id BETWEEN 200 AND 260 AND at IS NOT NULL AND at > now() - interval '90 days'")
        .await
        .unwrap();
    let aged_now = ids(&direct, AGED).await.len();
    assert!(aged_now >= 25, "{aged_now}");
    assert!(wait_for_no_aged().await, "{}", proxy.log());
    assert_eq!(
        ids(&direct, "SELECT id FROM t").await.len(),
        young - aged_now
    );
    let total: i64 = c
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(total, 1000, "nothing lost through coldwire");
}

#[tokio::test]
async fn a_proxy_killed_mid_flush_by_age_leaves_a_job_the_next_one_finishes() {
    for failpoint in [
        "after_publish",
        "before_finalize_commit",
        "after_activation",
    ] {
        let db = create_db("agecrash");
        let store = tempfile::tempdir().unwrap();
        let direct = connect_direct(&db).await;
        aged_table(&direct, "timestamptz").await;
        let aged = ids(&direct, AGED).await;
        let young = ids(&direct, &format!("SELECT id FROM t EXCEPT {AGED}")).await;
        let mut doomed =
            Proxy::tiering(&db, store.path(), &[("COLDWIRE_FAILPOINT", failpoint)]).await;
        let c = doomed.connect(&db).await;
        admin(&c, r#"SELECT coldwire.tier_table('t', '{"tier_after": "90 days", "age_column": "at", "auto_flush": false, "max_rows_per_file": 150}')"#).await;
        assert!(
            c.simple_query("SELECT coldwire.flush_table('t', wait => true)")
                .await
                .is_err(),
            "{failpoint}: the proxy dies"
        );
        doomed.wait(Duration::from_secs(10)).await.expect("exited");
        let recorded: (Option<i64>, Option<i64>) = direct
            .query_one("SELECT target_seq, rows_total FROM coldwire.jobs", &[])
            .await
            .map(|r| (r.get(0), r.get(1)))
            .unwrap();
        assert_eq!(
            recorded,
            (None, Some(aged.len() as i64)),
            "{failpoint}: a job by age records its row count"
        );

        let proxy = Proxy::tiering(&db, store.path(), &[]).await;
        let state = common::first_job_completed(&direct).await;
        assert_eq!(state, "completed", "{failpoint}: {}", proxy.log());
        assert_eq!(ids(&direct, "SELECT id FROM t").await, young, "{failpoint}");
        let (live, _) = cold_keys(&direct, store.path()).await;
        assert_eq!(live.len(), aged.len(), "{failpoint}: no key twice");
        assert_eq!(
            live.into_iter().collect::<BTreeSet<_>>(),
            aged,
            "{failpoint}"
        );
        let c = proxy.connect(&db).await;
        let total: i64 = c
            .query_one("SELECT count(*) FROM t", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(total, 1000, "{failpoint}");
    }
}

/// Statements in CI; `COLDWIRE_DIFFERENTIAL_WRITES` asks for more.
const DEFAULT_STATEMENTS: usize = 400;

/// One write or read over `{t}`, ages written as constants relative to `{base}` (a fixed
/// timestamp), so both tables get the same values.
fn statement(rng: &mut StdRng) -> String {
    let k = |rng: &mut StdRng| rng.random_range(1..1100);
    let (k1, k2) = (k(rng), k(rng));
    let (lo, hi) = (k1.min(k2), k1.min(k2) + rng.random_range(0..40));
    let age = |rng: &mut StdRng| match rng.random_range(0..8) {
        0 => "NULL".to_owned(),
        _ => format!(
            "'{{base}}'::timestamptz - interval '{} days'",
            rng.random_range(0..200)
        ),
    };
    match rng.random_range(0..9) {
        0 => format!("UPDATE {{t}} SET at = {} WHERE id = {k1}", age(rng)),
        1 => format!("UPDATE {{t}} SET at = {} WHERE id BETWEEN {lo} AND {hi}", age(rng)),
        2 => format!("UPDATE {{t}} SET v = v || '+' WHERE id BETWEEN {lo} AND {hi} AND at < '{{base}}'::timestamptz - interval '80 days'"),
        3 => format!("DELETE FROM {{t}} WHERE id = {k1}"),
        4 => format!("INSERT INTO {{t}} VALUES ({k1}, {}, 'ins') ON CONFLICT (id) DO UPDATE SET at = excluded.at, v = 'upd'", age(rng)),
        5 => format!("DELETE FROM {{t}} WHERE at < '{{base}}'::timestamptz - interval '{} days' AND id BETWEEN {lo} AND {hi}", rng.random_range(100..200)),
        6 => format!("SELECT id, at, v FROM {{t}} WHERE at < '{{base}}'::timestamptz - interval '{} days' ORDER BY id LIMIT 20", rng.random_range(0..200)),
        7 => format!("SELECT count(*), min(at), max(v) FROM {{t}} WHERE id BETWEEN {lo} AND {hi}"),
        _ => format!("SELECT id, at FROM {{t}} WHERE id IN ({k1}, {k2}) ORDER BY id"),
    }
}

async fn simple_rows(c: &Client, sql: &str) -> Result<Vec<String>, String> {
    c.simple_query(sql)
        .await
        .map(|msgs| {
            msgs.into_iter()
                .filter_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => Some(format!(
                        "{:?}",
                        (0..r.len())
                            .map(|i| r.get(i).map(str::to_owned))
                            .collect::<Vec<_>>()
                    )),
                    tokio_postgres::SimpleQueryMessage::CommandComplete(n) => {
                        Some(format!("tag {n}"))
                    }
                    _ => None,
                })
                .collect()
        })
        .map_err(|e| match e.as_db_error() {
            Some(db) => db.code().code().to_owned(),
            None => panic!("{sql}: {e:?}"),
        })
}

#[tokio::test]
async fn generated_writes_that_age_rows_match_a_plain_table() {
    let db = create_db("agediff");
    let store = tempfile::tempdir().unwrap();
    let direct = connect_direct(&db).await;
    aged_table(&direct, "timestamptz").await;
    direct
        .batch_execute(
            "CREATE TABLE control(LIKE t INCLUDING ALL); INSERT INTO control SELECT * FROM t;",
        )
        .await
        .unwrap();
    let base: String = direct
        .query_one("SELECT date_trunc('day', now())::text", &[])
        .await
        .unwrap()
        .get(0);
    let proxy = Proxy::tiering(&db, store.path(), &[]).await;
    let c = proxy.connect(&db).await;
    admin(&c, r#"SELECT coldwire.tier_table('t', '{"tier_after": "90 days", "age_column": "at", "auto_flush": false, "max_rows_per_file": 300}')"#).await;
    let flush = |drain: bool| common::flush_t(&c, drain);
    flush(false).await;
    let statements = common::differential_writes(DEFAULT_STATEMENTS);
    let mut rng = StdRng::seed_from_u64(0x6167_6564);
    for i in 0..statements {
        let sql = statement(&mut rng).replace("{base}", &base);
        let expected = simple_rows(&direct, &sql.replace("{t}", "control")).await;
        let got = simple_rows(&c, &sql.replace("{t}", "t")).await;
        assert_eq!(got, expected, "statement {i}: {sql}");
        if i % 40 == 39 {
            flush(i % 200 == 199).await;
            // After a flush by age no row older than the interval is hot.
            if i % 200 != 199 {
                assert!(
                    ids(&direct, AGED).await.is_empty(),
                    "statement {i}: aged rows left hot"
                );
            }
        }
    }
    let (segments, _) = common::active_segments(&direct).await;
    assert!(segments > 5, "{segments} segments");
    common::assert_same_as_control(&c, &direct).await;
}
