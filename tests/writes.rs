//! Writes through coldwire reach cold rows (DESIGN §7): UPDATE, DELETE, upserts, MERGE
//! and locking reads of rows that are cold behave exactly as on a plain control table —
//! row counts, RETURNING, unique violations across tiers — in the simple and the extended
//! protocol, in and out of transactions, and across flushes.

mod common;

use common::{
    admin_call, binary_rows, cluster, connect_direct, create_db, http_get, sample, simple_rows,
    Proxy,
};
use tokio_postgres::SimpleQueryMessage;

const SETUP: &str = "CREATE TABLE events(id bigint PRIMARY KEY, kind text NOT NULL, n int);
     CREATE TABLE control(LIKE events INCLUDING ALL);
     CREATE TABLE src(id bigint PRIMARY KEY, kind text);
     INSERT INTO events SELECT g, 'k' || g % 4, g FROM generate_series(1, 2000) g;
     INSERT INTO control SELECT * FROM events;
     INSERT INTO src SELECT g, 'merged' FROM generate_series(1990, 2010) g;";

/// A test's database with [`SETUP`] applied, a proxy in front of it with a cold store of
/// its own (and `extra` arguments), `events` tiered and flushed down to 100 hot rows.
struct Tiered {
    proxy: Proxy,
    db: String,
    c: tokio_postgres::Client,
    direct: tokio_postgres::Client,
    /// The cold store's folder (removed when the test ends).
    dir: tempfile::TempDir,
}

async fn tiered(hint: &str, extra: &[&str]) -> Tiered {
    let db = create_db(hint);
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let direct = connect_direct(&db).await;
    direct.batch_execute(SETUP).await.unwrap();
    let url = cluster().url(&db);
    let mut args = vec!["--service-url", &url, "--cold-store", &store];
    args.extend_from_slice(extra);
    let proxy = Proxy::start(&args).await;
    let c = proxy.connect(&db).await;
    admin_call(&c, r#"SELECT coldwire.tier_table('events', '{"hot_row_limit": 100, "min_flush_rows": 100, "max_rows_per_file": 800, "auto_flush": false}')"#)
        .await
        .unwrap();
    admin_call(&c, "SELECT coldwire.flush_table('events', wait => true)")
        .await
        .unwrap();
    Tiered {
        proxy,
        db,
        c,
        direct,
        dir,
    }
}

/// The value of metric `name` (with `labels` among its labels) at `addr`, 0 when absent.
async fn metric(addr: std::net::SocketAddr, name: &str, labels: &str) -> f64 {
    sample(&http_get(addr, "/metrics").await, name, labels).unwrap_or(0.0)
}

/// What a simple Query answered: rows and command tags, or the SQLSTATE and constraint.
async fn outcome(
    c: &tokio_postgres::Client,
    sql: &str,
) -> Result<Vec<String>, (String, Option<String>)> {
    match c.simple_query(sql).await {
        Ok(msgs) => Ok(msgs
            .into_iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => Some(format!(
                    "row {:?}",
                    (0..r.len())
                        .map(|i| r.get(i).map(str::to_owned))
                        .collect::<Vec<_>>()
                )),
                SimpleQueryMessage::CommandComplete(n) => Some(format!("complete {n}")),
                _ => None,
            })
            .collect()),
        Err(e) => {
            let db = e.as_db_error().unwrap_or_else(|| panic!("{sql}: {e:?}"));
            Err((
                db.code().code().to_owned(),
                db.constraint().map(|c| c.replace("control", "events")),
            ))
        }
    }
}

#[tokio::test]
async fn writes_of_cold_rows_behave_as_on_a_plain_table() {
    let Tiered {
        proxy: _proxy,
        c,
        direct,
        dir: _dir,
        ..
    } = tiered("writes", &[]).await;
    let hot: i64 = direct
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert!(hot <= 100, "{hot} hot rows");

    for sql in [
        "UPDATE {t} SET kind = 'updated' WHERE id = 5 RETURNING id, kind, n",
        "UPDATE {t} SET n = n + 1 WHERE id BETWEEN 100 AND 120",
        "DELETE FROM {t} WHERE id = 7 RETURNING *",
        "DELETE FROM {t} WHERE id IN (8, 9, 1999)",
        "INSERT INTO {t} VALUES (10, 'again', 0)",
        "INSERT INTO {t} VALUES (11, 'skip', 0) ON CONFLICT DO NOTHING",
        "INSERT INTO {t} VALUES (12, 'upsert', 0), (5000, 'new', 1) ON CONFLICT (id) DO UPDATE SET kind = excluded.kind RETURNING id, kind",
        "UPDATE {t} SET id = 13 WHERE id = 14",
        "UPDATE {t} SET id = 3000 WHERE id = 15 RETURNING id",
        "SELECT id, kind FROM {t} WHERE id = 16 FOR UPDATE",
        "SELECT id, kind FROM {t} WHERE id IN (17, 18) FOR SHARE",
        "MERGE INTO {t} t USING src s ON t.id = s.id AND t.id >= 1990 WHEN MATCHED THEN UPDATE SET kind = s.kind WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.kind, 0)",
        "UPDATE {t} SET kind = 'all' WHERE n % 500 = 0",
        "DELETE FROM {t} WHERE kind = 'k3' AND id < 40",
        "UPDATE {t} SET n = 0 WHERE id = 5 AND kind = 'nope'",
    ] {
        let expected = outcome(&direct, &sql.replace("{t}", "control")).await;
        let got = outcome(&c, &sql.replace("{t}", "events")).await;
        assert_eq!(got, expected, "{sql}");
    }
    let all = "SELECT * FROM {t} ORDER BY id";
    let expected = binary_rows(&direct, &all.replace("{t}", "control"), &[])
        .await
        .unwrap();
    assert_eq!(
        binary_rows(&c, &all.replace("{t}", "events"), &[])
            .await
            .unwrap(),
        expected
    );
    // After another flush (tombstones, overrides) too.
    admin_call(
        &c,
        "SELECT coldwire.flush_table('events', wait => true, drain => true)",
    )
    .await
    .unwrap();
    assert_eq!(
        binary_rows(&c, &all.replace("{t}", "events"), &[])
            .await
            .unwrap(),
        expected
    );
}

#[tokio::test]
async fn prepared_writes_and_transactions_reach_cold_rows() {
    let Tiered {
        proxy: _proxy,
        c,
        direct,
        dir: _dir,
        ..
    } = tiered("writesext", &[]).await;
    for (t, client) in [("events", &c), ("control", &direct)] {
        let update = client
            .prepare(&format!(
                "UPDATE {t} SET n = n * 10 WHERE id = $1 RETURNING n"
            ))
            .await
            .unwrap();
        for id in [1i64, 2, 3, 1999, 7777] {
            let rows = client.query(&update, &[&id]).await.unwrap();
            assert_eq!(rows.len(), usize::from(id != 7777), "{t} {id}");
        }
        let n = client
            .execute(
                &format!("DELETE FROM {t} WHERE id BETWEEN $1 AND $1 + 9"),
                &[&500i64],
            )
            .await
            .unwrap();
        assert_eq!(n, 10, "{t}");
        let err = client
            .execute(
                &format!("INSERT INTO {t} VALUES ($1, 'dup', 0)"),
                &[&600i64],
            )
            .await
            .unwrap_err();
        assert_eq!(
            err.as_db_error().map(|e| e.code().code()),
            Some("23505"),
            "{t}: {err:?}"
        );
        // An explicit transaction: an error after a cold row was rehydrated and updated
        // rolls all of it back.
        client.batch_execute("BEGIN").await.unwrap();
        client
            .execute(
                &format!("UPDATE {t} SET kind = 'in-tx' WHERE id = $1"),
                &[&700i64],
            )
            .await
            .unwrap();
        let err = client
            .execute(
                &format!("INSERT INTO {t} VALUES ($1, 'dup', 0)"),
                &[&701i64],
            )
            .await
            .unwrap_err();
        assert_eq!(err.as_db_error().map(|e| e.code().code()), Some("23505"));
        client.batch_execute("ROLLBACK").await.unwrap();
        client.batch_execute("BEGIN").await.unwrap();
        client
            .execute(
                &format!("UPDATE {t} SET kind = 'committed' WHERE id = 800"),
                &[],
            )
            .await
            .unwrap();
        let locked = client
            .query(
                &format!("SELECT kind FROM {t} WHERE id = $1 FOR UPDATE"),
                &[&801i64],
            )
            .await
            .unwrap();
        assert_eq!(locked.len(), 1);
        client.batch_execute("COMMIT").await.unwrap();
    }
    let all = "SELECT * FROM {t} ORDER BY id";
    let expected = binary_rows(&direct, &all.replace("{t}", "control"), &[])
        .await
        .unwrap();
    assert_eq!(
        binary_rows(&c, &all.replace("{t}", "events"), &[])
            .await
            .unwrap(),
        expected
    );
    assert_eq!(
        simple_rows(
            &c,
            "SELECT kind FROM events WHERE id IN (700, 800) ORDER BY id"
        )
        .await
        .unwrap(),
        vec![
            vec![Some("k0".to_owned())],
            vec![Some("committed".to_owned())]
        ]
    );
}

#[tokio::test]
async fn unbounded_writes_rehydrate_within_the_cap_or_fail_clearly() {
    let Tiered {
        proxy: _proxy,
        c,
        direct,
        dir: _dir,
        ..
    } = tiered("writescap", &["--max-rehydrate-rows", "500"]).await;
    let err = c.simple_query("UPDATE events SET n = 0").await.unwrap_err();
    let db_err = err.as_db_error().unwrap();
    assert_eq!(db_err.code().code(), "54000", "{db_err:?}");
    assert!(
        db_err.message().contains("500") && db_err.hint().unwrap().contains("max_rehydrate_rows")
    );
    // Bounded by a range below the cap: fine.
    let n = c
        .execute("UPDATE events SET n = 0 WHERE id <= 300", &[])
        .await
        .unwrap();
    assert_eq!(n, 300);
    let expected: i64 = direct
        .query_one("SELECT count(*) FROM control WHERE id <= 300", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n as i64, expected);
}

/// Sets `events`' policy to keep no row hot and flushes it, waiting.
async fn flush_all(c: &tokio_postgres::Client) {
    admin_call(
        c,
        r#"SELECT coldwire.set_policy('events', '{"hot_row_limit": 0, "min_flush_rows": 1}')"#,
    )
    .await
    .unwrap();
    admin_call(c, "SELECT coldwire.flush_table('events', wait => true)")
        .await
        .unwrap();
}

/// Rows of coldwire.m_<id> for `keys`, as (key, op).
async fn mirror_ops(direct: &tokio_postgres::Client, keys: &[i64]) -> Vec<(i64, i16)> {
    direct
        .query(
            "SELECT id, op FROM coldwire.m_1 WHERE id = ANY($1) ORDER BY id",
            &[&keys],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

#[tokio::test]
async fn inserts_whose_keys_coldwire_cannot_see_are_checked_by_capture() {
    let Tiered {
        proxy,
        c,
        direct,
        dir: _dir,
        ..
    } = tiered("writescheck", &["--metrics-listen", "127.0.0.1:0"]).await;
    let metrics = proxy.metrics_addr.unwrap();
    let rehydrated = || metric(metrics, "coldwire_rows_rehydrated_total", "");
    let both = |sql: &str| {
        let sql = sql.to_owned();
        let (c, direct) = (&c, &direct);
        async move {
            let got = outcome(c, &sql).await;
            let expected = outcome(direct, &sql.replace("events", "control")).await;
            assert_eq!(got, expected, "{sql}");
            got
        }
    };

    // Appending beyond every cold key brings nothing back and claims nothing.
    let before = rehydrated().await;
    both("INSERT INTO events SELECT g, 'new', g FROM generate_series(3001, 3100) g")
        .await
        .unwrap();
    both("INSERT INTO events (id, kind) SELECT id + 5000, kind FROM src")
        .await
        .unwrap();
    assert_eq!(rehydrated().await, before, "appends rehydrate nothing");

    // A cold key among the selected ones: the unique violation Postgres would raise.
    let r =
        both("INSERT INTO events SELECT g, 'again', 0 FROM generate_series(1895, 1905) g").await;
    assert_eq!(
        r,
        Err(("23505".into(), Some("events_pkey".into()))),
        "1..=1900 are cold, 1901.. hot"
    );
    let r = both("INSERT INTO events SELECT g, 'again', 0 FROM generate_series(5, 6) g").await;
    assert_eq!(r, Err(("23505".into(), Some("events_pkey".into()))));
    assert!(
        rehydrated().await > before,
        "the cold keys were brought back"
    );
    // Upserts from a SELECT see the cold rows as conflicts.
    both("INSERT INTO events SELECT g, 'upsert', -1 FROM generate_series(7, 9) g ON CONFLICT (id) DO UPDATE SET kind = excluded.kind RETURNING *").await.unwrap();
    both("INSERT INTO events SELECT g, 'skip', -1 FROM generate_series(10, 12) g ON CONFLICT DO NOTHING").await.unwrap();
    // A key moved onto a cold key by an expression.
    let r = both("UPDATE events SET id = id - 1000 WHERE id = 1500").await;
    assert_eq!(r, Err(("23505".into(), Some("events_pkey".into()))));
    // Deleted keys written again.
    both("DELETE FROM events WHERE id BETWEEN 100 AND 103")
        .await
        .unwrap();
    both("INSERT INTO events SELECT g, 'back', 1 FROM generate_series(100, 103) g")
        .await
        .unwrap();
    // Keys inside the cold range that no segment holds (2001..=3000 once 3001.. is
    // flushed): checked, found absent, claimed, written.
    flush_all(&c).await;
    let hi: i64 = direct
        .query_one("SELECT hi FROM coldwire.bounds_1", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(hi, 7010, "the bounds grew with the flush");
    both("INSERT INTO events SELECT g, 'gap', 1 FROM generate_series(2500, 2502) g")
        .await
        .unwrap();
    assert_eq!(
        mirror_ops(&direct, &[2500, 2501, 2502]).await,
        vec![(2500, 1), (2501, 1), (2502, 1)]
    );
    // The same through the extended protocol.
    let n = c
        .execute(
            "INSERT INTO events SELECT g, 'ext', 2 FROM generate_series($1::int8, $2::int8) g",
            &[&20i64, &21i64],
        )
        .await;
    let db_err = n.unwrap_err();
    assert_eq!(db_err.code().map(|c| c.code()), Some("23505"), "{db_err:?}");

    // Inside a transaction block coldwire cannot run the statement again: a clear error
    // names the keys, and the VALUES form works.
    c.batch_execute("BEGIN").await.unwrap();
    let err = c
        .simple_query("INSERT INTO events SELECT 2600, 'txn', 3")
        .await
        .unwrap_err();
    let db_err = err.as_db_error().unwrap();
    assert_eq!(db_err.code().code(), "55000", "{db_err:?}");
    assert!(
        db_err.detail().unwrap().contains(r#"{"id": 2600}"#),
        "{db_err:?}"
    );
    assert!(db_err.hint().unwrap().contains("VALUES"), "{db_err:?}");
    c.batch_execute("ROLLBACK; BEGIN").await.unwrap();
    c.execute("INSERT INTO events VALUES ($1, 'txn', 3)", &[&2600i64])
        .await
        .unwrap();
    let err = c
        .execute("INSERT INTO events VALUES ($1, 'txn', 3)", &[&201i64])
        .await
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("23505"), "{err:?}");
    c.batch_execute("ROLLBACK").await.unwrap();
    assert!(mirror_ops(&direct, &[2600]).await.is_empty(), "rolled back");

    // Writes straight to Postgres cannot duplicate a cold key either.
    let err = direct
        .batch_execute("INSERT INTO events VALUES (300, 'direct', 0)")
        .await
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("55000"), "{err:?}");
    assert!(mirror_ops(&direct, &[300]).await.is_empty());

    // Every statement above matched the control table; so does the whole table.
    let all = "SELECT id, kind, n FROM events ORDER BY id";
    assert_eq!(
        simple_rows(&c, all).await.unwrap(),
        simple_rows(&direct, &all.replace("events", "control"))
            .await
            .unwrap()
    );
}

/// The SQLSTATE and hint coldwire answered `sql` with, or `None` if it ran.
async fn refusal(c: &tokio_postgres::Client, sql: &str) -> Option<(String, Option<String>)> {
    match c.simple_query(sql).await {
        Ok(_) => None,
        Err(e) => {
            let db = e.as_db_error().expect("a database error");
            Some((db.code().code().to_owned(), db.hint().map(str::to_owned)))
        }
    }
}

#[tokio::test]
async fn truncate_retires_the_cold_tier_and_other_ddl_is_refused_clearly() {
    let Tiered {
        proxy: _proxy,
        c,
        direct,
        dir: _dir,
        ..
    } = tiered("writesddl", &[]).await;
    let active = || async {
        direct
            .query_one(
                "SELECT count(*) FROM coldwire.segments WHERE table_id = 1 AND status = 'active'",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    assert!(active().await > 0);
    let count = |sql: &'static str| {
        let c = &c;
        async move { simple_rows(c, sql).await.unwrap()[0][0].clone().unwrap() }
    };

    // A TRUNCATE rolled back leaves both tiers as they were.
    c.batch_execute("BEGIN; TRUNCATE events; ROLLBACK")
        .await
        .unwrap();
    assert_eq!(count("SELECT count(*) FROM events").await, "2000");
    assert!(active().await > 0);

    // DDL coldwire cannot carry to the cold tier yet is refused before it runs, with a
    // hint, and the table is left as it was.
    for sql in [
        "ALTER TABLE events ADD COLUMN extra int DEFAULT random()",
        "ALTER TABLE events DROP COLUMN n",
        "ALTER TABLE events ALTER COLUMN n TYPE bigint",
        "ALTER TABLE events RENAME COLUMN n TO m",
    ] {
        let (code, hint) = refusal(&c, sql)
            .await
            .unwrap_or_else(|| panic!("{sql} ran"));
        assert_eq!(code, "0A000", "{sql}");
        assert!(
            hint.as_deref().unwrap_or_default().contains("untier_table"),
            "{sql}: {hint:?}"
        );
    }
    // In the extended protocol too, and inside a transaction block.
    let e = c
        .execute("ALTER TABLE events DROP COLUMN n", &[])
        .await
        .unwrap_err();
    assert_eq!(e.code().unwrap().code(), "0A000");
    c.batch_execute("BEGIN").await.unwrap();
    assert_eq!(
        refusal(&c, "ALTER TABLE events DROP COLUMN n")
            .await
            .unwrap()
            .0,
        "0A000"
    );
    c.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(count("SELECT count(*) FROM events").await, "2000");
    // Other tables are not affected; harmless changes to the tiered one are allowed.
    c.batch_execute("ALTER TABLE src ADD COLUMN extra int; DROP TABLE src")
        .await
        .unwrap();
    c.batch_execute("ALTER TABLE events SET (fillfactor = 90); ALTER TABLE events ALTER COLUMN kind SET STATISTICS 200")
        .await
        .unwrap();

    // TRUNCATE empties both tiers at once: every segment retired, the mirror and the
    // cold bounds cleared, so former cold keys are new keys again.
    c.batch_execute("TRUNCATE events").await.unwrap();
    assert_eq!(count("SELECT count(*) FROM events").await, "0");
    assert_eq!(active().await, 0);
    let left: i64 = direct
        .query_one(
            "SELECT (SELECT count(*) FROM coldwire.m_1) + (SELECT count(*) FROM coldwire.bounds_1)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
    c.batch_execute("INSERT INTO events SELECT g, 'again', g FROM generate_series(1, 10) g")
        .await
        .unwrap();
    assert_eq!(
        count("SELECT count(*) FROM events WHERE kind = 'again'").await,
        "10"
    );
    // And the table still flushes and reads back.
    admin_call(
        &c,
        "SELECT coldwire.flush_table('events', wait => true, drain => true)",
    )
    .await
    .unwrap();
    assert!(active().await > 0);
    assert_eq!(count("SELECT count(*) FROM events").await, "10");
    let kinds = simple_rows(&c, "SELECT id, kind FROM events WHERE id = 3")
        .await
        .unwrap();
    assert_eq!(kinds, vec![vec![Some("3".into()), Some("again".into())]]);
}

/// One task's writes: each key it owns (id % TASKS == task) with its value, as it should
/// be after every statement it committed; every committed statement in `log`.
async fn writer_task(
    c: tokio_postgres::Client,
    task: i64,
    keys: i64,
    deadline: tokio::time::Instant,
) -> (
    std::collections::BTreeMap<i64, i64>,
    Vec<(String, Vec<i64>)>,
    usize,
) {
    use rand::{Rng, SeedableRng};
    const TASKS: i64 = 4;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xC01D + task as u64);
    let mut model: std::collections::BTreeMap<i64, i64> = (1..=keys)
        .filter(|k| k % TASKS == task)
        .map(|k| (k, k))
        .collect();
    let mut log = Vec::new();
    let mut statements = 0;
    while tokio::time::Instant::now() < deadline {
        let id = rng.random_range(0..keys / TASKS + 20) * TASKS + task;
        let exists = model.get(&id).copied();
        statements += 1;
        match rng.random_range(0..5) {
            0 | 1 => {
                let sql = "UPDATE t SET v = v + 1 WHERE id = $1 RETURNING v";
                let rows = c.query(sql, &[&id]).await.unwrap();
                let got: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
                match exists {
                    Some(v) => {
                        assert_eq!(got, vec![v + 1], "UPDATE of existing key {id}");
                        model.insert(id, v + 1);
                    }
                    None => assert!(got.is_empty(), "UPDATE of absent key {id}"),
                }
                log.push(("UPDATE t SET v = v + 1 WHERE id = $1".to_owned(), vec![id]));
            }
            2 => {
                let n = c
                    .execute("DELETE FROM t WHERE id = $1", &[&id])
                    .await
                    .unwrap();
                assert_eq!(n, u64::from(exists.is_some()), "DELETE of key {id}");
                model.remove(&id);
                log.push(("DELETE FROM t WHERE id = $1".to_owned(), vec![id]));
            }
            3 => {
                let v = rng.random_range(-1000..1000i64);
                let r = c.execute("INSERT INTO t VALUES ($1, $2)", &[&id, &v]).await;
                match exists {
                    Some(_) => {
                        let e = r.expect_err("INSERT of an existing key");
                        assert_eq!(
                            e.code(),
                            Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION),
                            "{e:?}"
                        );
                    }
                    None => {
                        r.unwrap();
                        model.insert(id, v);
                        log.push(("INSERT INTO t VALUES ($1, $2)".to_owned(), vec![id, v]));
                    }
                }
            }
            _ => {
                // An upsert in a transaction block, in the simple protocol.
                let v = rng.random_range(-1000..1000i64);
                let rows = simple_rows(
                    &c,
                    &format!("BEGIN; INSERT INTO t VALUES ({id}, {v}) ON CONFLICT (id) DO UPDATE SET v = t.v + excluded.v RETURNING v; COMMIT"),
                )
                .await
                .unwrap();
                let expected = exists.map_or(v, |old| old + v);
                assert_eq!(
                    rows,
                    vec![vec![Some(expected.to_string())]],
                    "upsert of {id}"
                );
                model.insert(id, expected);
                log.push((
                    "INSERT INTO t VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET v = t.v + excluded.v".to_owned(),
                    vec![id, v],
                ));
            }
        }
    }
    (model, log, statements)
}

#[tokio::test]
async fn concurrent_writers_during_auto_flush_lose_nothing_and_replay_on_a_plain_table() {
    const KEYS: i64 = 1200;
    let db = create_db("writesconc");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(&format!(
            "CREATE TABLE t(id bigint PRIMARY KEY, v bigint NOT NULL);
             CREATE TABLE control(LIKE t INCLUDING ALL);
             INSERT INTO t SELECT g, g FROM generate_series(1, {KEYS}) g;
             INSERT INTO control SELECT * FROM t;"
        ))
        .await
        .unwrap();
    let proxy = Proxy::start(&[
        "--service-url",
        &cluster().url(&db),
        "--cold-store",
        &store,
        "--metrics-listen",
        "127.0.0.1:0",
    ])
    .await;
    let c = proxy.connect(&db).await;
    admin_call(&c, r#"SELECT coldwire.tier_table('t', '{"hot_row_limit": 100, "min_flush_rows": 40, "max_rows_per_file": 300, "check_interval": "100ms"}')"#)
        .await
        .unwrap();
    admin_call(&c, "SELECT coldwire.flush_table('t', wait => true)")
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(8);
    let mut tasks = Vec::new();
    for task in 0..4 {
        let w = proxy.connect(&db).await;
        tasks.push(tokio::spawn(writer_task(w, task, KEYS, deadline)));
    }
    let mut model = std::collections::BTreeMap::new();
    let mut total = 0;
    for task in tasks {
        let (m, log, statements) = task.await.unwrap();
        model.extend(m);
        total += statements;
        // Keys are owned by one task each, so each task's log replays in its own order.
        for (sql, params) in log {
            let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params
                .iter()
                .map(|p| p as &(dyn tokio_postgres::types::ToSql + Sync))
                .collect();
            direct
                .execute(
                    &sql.replace(" t ", " control ").replace("t.v", "control.v"),
                    &params,
                )
                .await
                .unwrap();
        }
    }
    assert!(total > 200, "only {total} statements ran");
    let flushes: i64 = direct
        .query_one(
            "SELECT count(*) FROM coldwire.jobs WHERE state = 'completed'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(flushes >= 3, "auto flush ran {flushes} times");
    let got = id_values(&c, "t").await;
    let replayed = id_values(&direct, "control").await;
    assert_eq!(got, replayed, "the tiered table equals the replayed log");
    assert_eq!(got, model.into_iter().collect::<Vec<_>>());
}

/// `(id, v)` of every row of `table`, by id.
async fn id_values(client: &tokio_postgres::Client, table: &str) -> Vec<(i64, i64)> {
    client
        .query(&format!("SELECT id, v FROM {table} ORDER BY id"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// Polls `sql` (one bigint) on `client` until it is `want`, for up to 10 s.
async fn eventually(client: &tokio_postgres::Client, sql: &str, want: i64) {
    let mut found = -1;
    for _ in 0..100 {
        found = client.query_one(sql, &[]).await.unwrap().get(0);
        if found == want {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{sql}: {found}, expected {want}");
}

/// Files under `dir`, recursively.
fn files_under(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    if e.path().is_dir() {
                        files_under(&e.path())
                    } else {
                        1
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn renamed_tables_stay_tiered_and_dropped_ones_are_untiered() {
    let Tiered {
        proxy: _proxy,
        c,
        direct,
        dir,
        ..
    } = tiered("writesrename", &[]).await;
    let count = |sql: &'static str| {
        let c = &c;
        async move { simple_rows(c, sql).await.unwrap()[0][0].clone().unwrap() }
    };
    let cold: i64 = direct
        .query_one("SELECT 2000 - count(*) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert!(cold > 1000, "{cold} rows cold");

    // Renames are followed after they commit, so inside a transaction block or beside
    // other statements they are refused before they run.
    c.batch_execute("BEGIN").await.unwrap();
    let (code, hint) = refusal(&c, "ALTER TABLE events RENAME TO e2")
        .await
        .unwrap();
    assert_eq!(code, "0A000");
    assert!(hint.unwrap().contains("outside a transaction block"));
    c.batch_execute("ROLLBACK").await.unwrap();
    let (code, _) = refusal(&c, "ALTER TABLE events RENAME TO e2; SELECT 1")
        .await
        .unwrap();
    assert_eq!(code, "0A000");
    assert_eq!(count("SELECT count(*) FROM events").await, "2000");

    // Through coldwire: the very next statement reads the table by its new name, cold
    // rows included, and writes reach cold rows.
    c.batch_execute("ALTER TABLE events RENAME TO e2")
        .await
        .unwrap();
    assert_eq!(count("SELECT count(*) FROM e2").await, "2000");
    assert_eq!(
        c.execute("UPDATE e2 SET n = -1 WHERE id = 5", &[])
            .await
            .unwrap(),
        1
    );
    assert_eq!(count("SELECT n FROM e2 WHERE id = 5").await, "-1");
    let names: (String, String) = direct
        .query_one(
            "SELECT schema_name, table_name FROM coldwire.tables WHERE id = 1",
            &[],
        )
        .await
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(names, ("public".into(), "e2".into()));
    // The old name is free: a new table there is plain, and nothing cold leaks into it.
    c.batch_execute("CREATE TABLE events (id bigint PRIMARY KEY, kind text NOT NULL, n int); INSERT INTO events VALUES (1, 'new', 1)")
        .await
        .unwrap();
    assert_eq!(count("SELECT count(*) FROM events").await, "1");

    // On a direct connection: writes right after the move are captured (the capture
    // function names the table by oid until coldwire makes it again), and coldwire
    // follows the move by itself.
    direct
        .batch_execute(
            "CREATE SCHEMA other; ALTER TABLE e2 SET SCHEMA other; SET coldwire.hot_only_writes = on; \
             UPDATE other.e2 SET n = -2 WHERE id = 1999; DELETE FROM other.e2 WHERE id = 2000",
        )
        .await
        .unwrap();
    eventually(
        &direct,
        "SELECT count(*) FROM coldwire.tables WHERE id = 1 AND schema_name = 'other'",
        1,
    )
    .await;
    assert_eq!(count("SELECT count(*) FROM other.e2").await, "1999");
    assert_eq!(count("SELECT n FROM other.e2 WHERE id = 1999").await, "-2");
    let ops: Vec<(i64, i16)> = direct
        .query(
            "SELECT id, op FROM coldwire.m_1 WHERE id IN (1999, 2000) ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(ops, vec![(1999, 1), (2000, 3)]);
    let function: String = direct
        .query_one(
            "SELECT pg_get_functiondef('coldwire.capture_1()'::regprocedure)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(function.contains(r#""other"."e2""#), "{function}");
    admin_call(&c, "SELECT coldwire.flush_table('other.e2', wait => true)")
        .await
        .unwrap();
    assert_eq!(count("SELECT count(*) FROM other.e2").await, "1999");

    // DROP TABLE through coldwire untiers the table: catalog rows, capture objects and
    // cold objects all go.
    assert!(files_under(dir.path()) > 0);
    c.batch_execute("DROP TABLE other.e2").await.unwrap();
    eventually(
        &direct,
        "SELECT count(*) FROM coldwire.tables WHERE id = 1",
        0,
    )
    .await;
    let left: i64 = direct
        .query_one(
            "SELECT (SELECT count(*) FROM coldwire.segments WHERE table_id = 1) \
                  + (SELECT count(*) FROM pg_class WHERE relnamespace = 'coldwire'::regnamespace AND relname ~ '_1$') \
                  + (SELECT count(*) FROM pg_proc WHERE proname = 'capture_1')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
    assert_eq!(files_under(dir.path()), 0);

    // A table tiered again under the same name, then dropped on a direct connection, is
    // followed the same way.
    admin_call(&c, r#"SELECT coldwire.tier_table('events', '{"hot_row_limit": 0, "min_flush_rows": 1, "auto_flush": false}')"#)
        .await
        .unwrap();
    admin_call(&c, "SELECT coldwire.flush_table('events', wait => true)")
        .await
        .unwrap();
    assert_eq!(count("SELECT kind FROM events WHERE id = 1").await, "new");
    assert!(files_under(dir.path()) > 0);
    direct.batch_execute("DROP TABLE events").await.unwrap();
    eventually(&direct, "SELECT count(*) FROM coldwire.tables", 0).await;
    assert_eq!(files_under(dir.path()), 0);
    c.batch_execute("CREATE TABLE events (id bigint PRIMARY KEY)")
        .await
        .unwrap();
    assert_eq!(count("SELECT count(*) FROM events").await, "0");
}

/// Every row of `table` as text, in key order, read on `client`.
async fn all_rows(client: &tokio_postgres::Client, table: &str) -> Vec<Vec<Option<String>>> {
    simple_rows(client, &format!("SELECT * FROM {table} ORDER BY id"))
        .await
        .unwrap()
}

#[tokio::test]
async fn added_columns_read_their_default_in_segments_written_before() {
    let Tiered {
        proxy: _proxy,
        c,
        direct,
        dir: _dir,
        ..
    } = tiered("writesaddcol", &[]).await;
    let one = |sql: &'static str| {
        let c = &c;
        async move { simple_rows(c, sql).await.unwrap()[0][0].clone() }
    };

    // Columns whose existing rows would not all read one value, or that Postgres would
    // check against the hot rows only, are refused before they run; so is a type that
    // cannot be stored cold, and an ADD COLUMN inside a transaction block.
    for sql in [
        "ALTER TABLE events ADD COLUMN x float8 DEFAULT random()",
        "ALTER TABLE events ADD COLUMN x int NOT NULL",
        "ALTER TABLE events ADD COLUMN x int CHECK (x > 0)",
        "ALTER TABLE events ADD COLUMN x point",
        "ALTER TABLE events ADD COLUMN x int; SELECT 1",
    ] {
        let (code, _) = refusal(&c, sql)
            .await
            .unwrap_or_else(|| panic!("{sql} ran"));
        assert_eq!(code, "0A000", "{sql}");
    }
    c.batch_execute("BEGIN").await.unwrap();
    assert_eq!(
        refusal(&c, "ALTER TABLE events ADD COLUMN x int")
            .await
            .unwrap()
            .0,
        "0A000"
    );
    c.batch_execute("ROLLBACK").await.unwrap();

    // The same changes on the tiered table (through coldwire) and on the control table.
    let both = |sql: &'static str| {
        let (c, direct) = (&c, &direct);
        async move {
            c.batch_execute(sql).await.unwrap();
            direct
                .batch_execute(&sql.replace("events", "control"))
                .await
                .unwrap();
        }
    };
    both("ALTER TABLE events ADD COLUMN extra int DEFAULT 7").await;
    both("ALTER TABLE events ADD COLUMN note text, ADD COLUMN tags text[] DEFAULT '{a,\"b c\"}'")
        .await;
    // The very next statements read cold rows with the new columns.
    assert_eq!(
        one("SELECT count(*) FROM events WHERE extra = 7")
            .await
            .unwrap(),
        "2000"
    );
    assert_eq!(
        one("SELECT extra FROM events WHERE id = 5").await.unwrap(),
        "7"
    );
    assert_eq!(
        one("SELECT count(*) FROM events WHERE note IS NULL AND tags[2] = 'b c'")
            .await
            .unwrap(),
        "2000"
    );
    // New rows carry their own values into new segments; older segments keep reading
    // the default, and writes to their rows bring it back into the heap.
    both("INSERT INTO events SELECT g, 'new', g, 8, 'n' || g FROM generate_series(2001, 2300) g")
        .await;
    admin_call(&c, "SELECT coldwire.flush_table('events', wait => true)")
        .await
        .unwrap();
    assert_eq!(
        simple_rows(
            &c,
            "SELECT extra, count(*) FROM events GROUP BY extra ORDER BY extra"
        )
        .await
        .unwrap(),
        vec![
            vec![Some("7".to_owned()), Some("2000".to_owned())],
            vec![Some("8".to_owned()), Some("300".to_owned())]
        ]
    );
    both("UPDATE events SET extra = 9 WHERE id = 5").await;
    both("UPDATE events SET n = -1 WHERE id IN (6, 2005)").await;
    assert_eq!(
        one("SELECT extra FROM events WHERE id = 6").await.unwrap(),
        "7"
    );
    assert_eq!(
        all_rows(&c, "events").await,
        all_rows(&direct, "control").await
    );

    // On a direct connection: coldwire follows the new column by itself.
    direct
        .batch_execute("ALTER TABLE events ADD COLUMN d date DEFAULT '2020-01-01'; ALTER TABLE control ADD COLUMN d date DEFAULT '2020-01-01'")
        .await
        .unwrap();
    eventually(
        &direct,
        "SELECT jsonb_array_length(columns)::bigint FROM coldwire.tables WHERE id = 1",
        7,
    )
    .await;
    for _ in 0..50 {
        if one("SELECT count(*) FROM events WHERE d = '2020-01-01'")
            .await
            .as_deref()
            == Some("2300")
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        all_rows(&c, "events").await,
        all_rows(&direct, "control").await
    );

    // Untiering brings every row back with its values.
    admin_call(&c, "SELECT coldwire.untier_table('events')")
        .await
        .unwrap();
    assert_eq!(
        all_rows(&direct, "events").await,
        all_rows(&direct, "control").await
    );
}

#[tokio::test]
async fn lookups_served_from_the_page_cache_still_see_writes_and_flushes() {
    let Tiered {
        proxy,
        c,
        direct: _direct,
        dir: _dir,
        ..
    } = tiered("writescache", &["--metrics-listen", "127.0.0.1:0"]).await;
    let metrics = proxy.metrics_addr.unwrap();
    let hits = || {
        metric(
            metrics,
            "coldwire_cold_cache_lookups_total",
            "outcome=\"hit\"",
        )
    };
    let lookup = |id: i64| {
        let c = &c;
        async move {
            c.query("SELECT id, kind, n FROM events WHERE id = $1", &[&id])
                .await
                .unwrap()
                .iter()
                .map(|r| {
                    (
                        r.get::<_, i64>(0),
                        r.get::<_, String>(1),
                        r.get::<_, Option<i32>>(2),
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    let first = lookup(7).await;
    assert_eq!(first, vec![(7, "k3".to_owned(), Some(7))]);
    let before = hits().await;
    // The same pages again: served from memory, same answer.
    assert_eq!(lookup(7).await, first);
    assert_eq!(lookup(8).await, vec![(8, "k0".to_owned(), Some(8))]);
    assert!(hits().await >= before + 2.0, "lookups of cached pages hit");
    // Cached pages hold the segment's versions; the heap and the mirror still decide.
    c.execute("UPDATE events SET n = -7 WHERE id = 7", &[])
        .await
        .unwrap();
    assert_eq!(lookup(7).await, vec![(7, "k3".to_owned(), Some(-7))]);
    c.execute("DELETE FROM events WHERE id = 8", &[])
        .await
        .unwrap();
    assert_eq!(lookup(8).await, vec![]);
    // Flushed again, the newer versions come from a new segment, and the cached older
    // ones are overridden.
    flush_all(&c).await;
    assert_eq!(lookup(7).await, vec![(7, "k3".to_owned(), Some(-7))]);
    assert_eq!(lookup(8).await, vec![]);
    assert_eq!(lookup(7).await, vec![(7, "k3".to_owned(), Some(-7))]);
}

/// A client that sends Flush after Parse and Describe and waits for their answers before
/// it binds (asyncpg does): the write's rehydration goes into the group after answers
/// the client already has, and the client still gets its own BindComplete and
/// CommandComplete, not coldwire's.
#[tokio::test]
async fn a_cold_write_after_a_flushed_describe_gets_its_own_answers() {
    let t = tiered("flush_describe", &[]).await;
    let mut raw = common::raw::RawConn::ready(t.proxy.addr, &t.db).await;
    let describe = common::raw::frame(b'D', b"Sw\0");
    let flush = common::raw::frame(b'H', b"");
    for (key, kind) in [(5, "cold"), (1999, "hot"), (6, "cold again")] {
        let mut out = common::raw::parse("w", "UPDATE events SET n = n + 1 WHERE id = $1");
        out.extend_from_slice(&describe);
        out.extend_from_slice(&flush);
        raw.send(&out).await;
        let mut described = Vec::new();
        while described
            .last()
            .is_none_or(|m: &common::raw::Msg| m.tag != b'n')
        {
            described.push(raw.next().await.expect("answers to Parse and Describe"));
        }
        assert_eq!(common::raw::tags(&described), "1tn", "{kind}");
        let key = key.to_string();
        let mut out = common::raw::bind("w", &[&key]);
        out.extend_from_slice(&common::raw::execute());
        out.extend_from_slice(&common::raw::frame(b'C', b"Sw\0"));
        out.extend_from_slice(&common::raw::sync());
        raw.send(&out).await;
        let answered = raw.until_ready().await;
        assert_eq!(common::raw::tags(&answered), "2C3Z", "{kind}: {answered:?}");
        assert!(
            answered[1].body.starts_with(b"UPDATE 1"),
            "{kind}: {answered:?}"
        );
    }
    let n: Vec<i32> = t
        .direct
        .query(
            "SELECT n FROM events WHERE id IN (5, 6, 1999) ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(n, vec![6, 7, 2000]);
}

/// coldwire.status counts the hot rows a flush left as soon as the flush is done (catalog
/// v11 and the flush's report of its counts), where it used to show the count of the last
/// ANALYZE until the next one.
#[tokio::test]
async fn status_counts_the_hot_rows_a_flush_left() {
    let db = create_db("status_live");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let direct = connect_direct(&db).await;
    direct.batch_execute(SETUP).await.unwrap();
    // The inserts' counts reach the shared statistics before ANALYZE sets the live count
    // (else they would be added to it afterwards).
    direct
        .batch_execute("SELECT pg_stat_force_next_flush()")
        .await
        .unwrap();
    direct.batch_execute("ANALYZE events").await.unwrap();
    let url = cluster().url(&db);
    let proxy = Proxy::start(&["--service-url", &url, "--cold-store", &store]).await;
    let c = proxy.connect(&db).await;
    admin_call(&c, r#"SELECT coldwire.tier_table('events', '{"hot_row_limit": 100, "min_flush_rows": 100, "auto_flush": false}')"#)
        .await
        .unwrap();
    let sql = "SELECT hot_rows FROM coldwire.status WHERE table_name = 'events'";
    let before: i64 = direct.query_one(sql, &[]).await.unwrap().get(0);
    assert_eq!(before, 2000);
    admin_call(&c, "SELECT coldwire.flush_table('events', wait => true)")
        .await
        .unwrap();
    let exact: i64 = direct
        .query_one("SELECT count(*) FROM ONLY events", &[])
        .await
        .unwrap()
        .get(0);
    assert!(exact <= 200, "{exact} hot rows left");
    // The flush reports its prune's counts before it reads completed: right at once.
    let shown: i64 = direct.query_one(sql, &[]).await.unwrap().get(0);
    if shown == exact {
        return;
    }
    let stats: String = direct
        .query_one(
            "SELECT format('ins %s upd %s del %s live %s dead %s', n_tup_ins, n_tup_upd, n_tup_del, n_live_tup, n_dead_tup) \
             FROM pg_stat_user_tables WHERE relname = 'events'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    panic!("coldwire.status shows {shown} hot rows, the heap holds {exact} ({stats})");
}

/// `n` of row `id` of `events`, read through the extended protocol (a named statement,
/// so its hot form may run) or, with `simple`, as a simple Query.
async fn n_of(c: &tokio_postgres::Client, id: i64, simple: bool) -> Option<i32> {
    if simple {
        return simple_rows(c, &format!("SELECT n FROM events WHERE id = {id}"))
            .await
            .unwrap()
            .first()
            .map(|r| r[0].as_deref().unwrap().parse().unwrap());
    }
    c.query_opt("SELECT n FROM events WHERE id = $1", &[&id])
        .await
        .unwrap()
        .map(|r| r.get(0))
}

#[tokio::test]
async fn rows_a_transaction_brought_back_are_read_hot_until_it_may_undo_them() {
    let Tiered {
        proxy,
        c,
        dir: _dir,
        ..
    } = tiered("writesknown", &["--metrics-listen", "127.0.0.1:0"]).await;
    let metrics = proxy.metrics_addr.unwrap();
    let skipped = || metric(metrics, "coldwire_cold_lookups_skipped_total", "");
    let injected = || metric(metrics, "coldwire_cold_rows_injected_total", "");
    let rehydrated = || metric(metrics, "coldwire_rows_rehydrated_total", "");

    // A read after a cold UPDATE of the same key in the block: no cold lookup, the row
    // as updated, in both protocols; a second UPDATE of it brings nothing back.
    c.batch_execute("BEGIN").await.unwrap();
    c.execute("UPDATE events SET n = n + 100 WHERE id = $1", &[&5i64])
        .await
        .unwrap();
    let (s0, i0, r0) = (skipped().await, injected().await, rehydrated().await);
    assert_eq!(n_of(&c, 5, false).await, Some(105));
    assert_eq!(n_of(&c, 5, true).await, Some(105));
    assert_eq!(
        skipped().await,
        s0 + 2.0,
        "both reads skipped the cold lookup"
    );
    assert_eq!(injected().await, i0, "no cold row was bound");
    c.execute("UPDATE events SET n = n + 1 WHERE id = $1", &[&5i64])
        .await
        .unwrap();
    assert_eq!(
        skipped().await,
        s0 + 3.0,
        "the write's lookup was skipped too"
    );
    assert_eq!(rehydrated().await, r0, "and nothing came back again");
    assert_eq!(n_of(&c, 5, false).await, Some(106));
    // A key asked for alongside one not brought back is looked up.
    let both: Vec<i32> = c
        .query(
            "SELECT n FROM events WHERE id = ANY($1) ORDER BY id",
            &[&vec![5i64, 6]],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(both, vec![106, 6]);
    // Deleted after it came back: gone, with or without the lookup.
    c.execute("UPDATE events SET n = 0 WHERE id = 9", &[])
        .await
        .unwrap();
    c.execute("DELETE FROM events WHERE id = 9", &[])
        .await
        .unwrap();
    assert_eq!(n_of(&c, 9, false).await, None);
    assert_eq!(n_of(&c, 9, true).await, None);

    // ROLLBACK TO SAVEPOINT undoes a rehydration: the cold row is read again.
    c.batch_execute("SAVEPOINT s").await.unwrap();
    c.execute("UPDATE events SET n = -1 WHERE id = 6", &[])
        .await
        .unwrap();
    assert_eq!(n_of(&c, 6, false).await, Some(-1));
    c.batch_execute("ROLLBACK TO s").await.unwrap();
    let i1 = injected().await;
    assert_eq!(n_of(&c, 6, false).await, Some(6), "the cold row, as before");
    assert_eq!(injected().await, i1 + 1.0, "read from the cold tier");
    assert_eq!(n_of(&c, 5, false).await, Some(106), "older rows stay right");

    // ... also when it comes in the same Query string as the read.
    c.batch_execute("SAVEPOINT s").await.unwrap();
    c.execute("UPDATE events SET n = -1 WHERE id = 7", &[])
        .await
        .unwrap();
    let rows = simple_rows(&c, "ROLLBACK TO s; SELECT n FROM events WHERE id = 7")
        .await
        .unwrap();
    assert_eq!(rows, vec![vec![Some("7".to_owned())]]);
    // A write after a ROLLBACK TO in the same string brings its rows back after it, not
    // ahead of the string, where the ROLLBACK TO would undo them.
    let rows = simple_rows(
        &c,
        "ROLLBACK TO s; SELECT n FROM events WHERE id = 31 FOR UPDATE; UPDATE events SET n = -31 WHERE id = 32 RETURNING n",
    )
    .await
    .unwrap();
    assert_eq!(
        rows,
        vec![vec![Some("31".to_owned())], vec![Some("-31".to_owned())]]
    );

    // ... and when it is still on its way while the read is sent (pipelined).
    c.batch_execute("SAVEPOINT s").await.unwrap();
    c.execute("UPDATE events SET n = -1 WHERE id = 8", &[])
        .await
        .unwrap();
    let read = c
        .prepare("SELECT n FROM events WHERE id = $1")
        .await
        .unwrap();
    let (rolled, n) = tokio::join!(
        c.batch_execute("ROLLBACK TO s"),
        c.query_one(&read, &[&8i64])
    );
    rolled.unwrap();
    assert_eq!(n.unwrap().get::<_, i32>(0), 8);

    // ROLLBACK AND CHAIN stays in a block and undoes the whole transaction.
    c.execute("UPDATE events SET n = -1 WHERE id = 10", &[])
        .await
        .unwrap();
    assert_eq!(n_of(&c, 10, false).await, Some(-1));
    c.batch_execute("ROLLBACK AND CHAIN").await.unwrap();
    assert_eq!(n_of(&c, 10, false).await, Some(10));
    assert_eq!(n_of(&c, 5, false).await, Some(5), "rolled back with it");
    c.batch_execute("ROLLBACK").await.unwrap();

    // Outside a block nothing is remembered: every read looks up.
    c.execute("UPDATE events SET n = -2 WHERE id = 11", &[])
        .await
        .unwrap();
    let s1 = skipped().await;
    assert_eq!(n_of(&c, 11, false).await, Some(-2));
    assert_eq!(skipped().await, s1);
}

#[tokio::test]
async fn coldwire_prepares_its_own_statements_once_per_session() {
    let Tiered {
        proxy,
        c,
        dir: _dir,
        ..
    } = tiered("writesown", &[]).await;
    // coldwire's own statements prepared in this session (the client's upstream one).
    let own = || async {
        simple_rows(
            &c,
            "SELECT name, statement FROM pg_prepared_statements WHERE name LIKE 'coldwire%' ORDER BY name",
        )
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r[0].clone().unwrap(), r[1].clone().unwrap()))
        .collect::<Vec<_>>()
    };
    let named = |all: &[(String, String)], what: &str| -> Vec<String> {
        all.iter()
            .filter(|(_, sql)| sql.contains(what))
            .map(|(name, _)| name.clone())
            .collect()
    };
    let update = |id: i64, n: i32| {
        let c = &c;
        async move {
            c.execute("UPDATE events SET n = $2 WHERE id = $1", &[&id, &n])
                .await
        }
    };

    // Cold rows brought back by one prepared rehydration, bound again each time.
    for id in [20, 21, 22] {
        assert_eq!(update(id, -1).await.unwrap(), 1);
    }
    let first = named(&own().await, "rehydrate");
    assert_eq!(first.len(), 1, "{:?}", own().await);
    assert!(first[0].starts_with("coldwire_own_"), "{first:?}");
    c.batch_execute("BEGIN").await.unwrap();
    assert_eq!(update(23, -1).await.unwrap(), 1);
    c.batch_execute("COMMIT").await.unwrap();
    c.batch_execute("BEGIN").await.unwrap();
    assert_eq!(update(24, -1).await.unwrap(), 1);
    c.batch_execute("COMMIT").await.unwrap();
    let all = own().await;
    assert_eq!(named(&all, "rehydrate"), first);
    // read_lock runs as a group of its own, parsed each time.
    assert!(named(&all, "read_lock").is_empty(), "{all:?}");
    // A DEALLOCATE of one name frees none of coldwire's.
    c.batch_execute("PREPARE mine AS SELECT 1; DEALLOCATE mine")
        .await
        .unwrap();
    assert_eq!(update(24, -1).await.unwrap(), 1);
    assert_eq!(named(&own().await, "rehydrate"), first);

    // DEALLOCATE ALL frees them too: prepared again under new names.
    c.batch_execute("DEALLOCATE ALL").await.unwrap();
    assert!(own().await.is_empty());
    assert_eq!(update(25, -1).await.unwrap(), 1);
    let again = named(&own().await, "rehydrate");
    assert_eq!(again.len(), 1);
    assert_ne!(again, first);

    // Freed where coldwire cannot see it (inside a function): the write is run again
    // with the statement prepared anew, unseen by the client.
    c.batch_execute(
        "CREATE FUNCTION free_all() RETURNS void LANGUAGE plpgsql AS $$ BEGIN EXECUTE 'DEALLOCATE ALL'; END $$",
    )
    .await
    .unwrap();
    c.batch_execute("SELECT free_all()").await.unwrap();
    assert_eq!(update(26, -1).await.unwrap(), 1);
    assert_eq!(update(27, -1).await.unwrap(), 1);
    assert_eq!(named(&own().await, "rehydrate").len(), 1);
    // In a transaction block, the block's first write of the table runs coldwire's part
    // under a savepoint: rolled back to, and the write run again, unseen.
    c.batch_execute("BEGIN; SELECT free_all()").await.unwrap();
    assert_eq!(update(28, -1).await.unwrap(), 1);
    assert!(
        proxy
            .log_contains("rolling back to coldwire's savepoint")
            .await
    );
    // A later write of the table in the block has no savepoint around coldwire's part:
    // it cannot be run again, the error says what was missing, and the next block works.
    assert_eq!(update(27, -1).await.unwrap(), 1);
    assert_eq!(named(&own().await, "rehydrate").len(), 1);
    c.batch_execute("SELECT free_all()").await.unwrap();
    let err = update(29, -1).await.unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("26000"), "{err:?}");
    c.batch_execute("ROLLBACK").await.unwrap();
    c.batch_execute("BEGIN").await.unwrap();
    assert_eq!(update(28, -1).await.unwrap(), 1);
    c.batch_execute("COMMIT").await.unwrap();

    let rows = simple_rows(
        &c,
        "SELECT id, n FROM events WHERE id BETWEEN 20 AND 29 ORDER BY id",
    )
    .await
    .unwrap();
    let got: Vec<(i64, i32)> = rows
        .iter()
        .map(|r| {
            (
                r[0].as_deref().unwrap().parse().unwrap(),
                r[1].as_deref().unwrap().parse().unwrap(),
            )
        })
        .collect();
    let want: Vec<(i64, i32)> = (20..=29)
        .map(|id| (id, if id == 29 { 29 } else { -1 }))
        .collect();
    assert_eq!(got, want);
}

/// When coldwire's own `read_lock` fails inside a transaction block (here on the
/// session's lock_timeout, while another session holds the table's lock as a finalize
/// does), the block is aborted before the client's statement runs: the client gets that
/// failure, with what coldwire was doing, instead of a bare 25P02 that says nothing of
/// why. Only once: later statements of the block get Postgres's 25P02, and the next block
/// works.
#[tokio::test]
async fn a_block_aborted_by_coldwires_own_statement_says_why() {
    let Tiered {
        proxy: _proxy,
        c,
        direct,
        dir: _dir,
        ..
    } = tiered("writesownfail", &[]).await;
    let id: i64 = direct
        .query_one(
            "SELECT id FROM coldwire.tables WHERE relid = 'events'::regclass",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    direct
        .execute(
            "SELECT pg_advisory_lock($1, $2::int)",
            &[&0x6377_0001i32, &(id as i32)],
        )
        .await
        .unwrap();
    c.batch_execute("SET lock_timeout = '200ms'; BEGIN")
        .await
        .unwrap();
    let err = c
        .query("SELECT n FROM events WHERE id = $1", &[&5i64])
        .await
        .unwrap_err();
    let db = err.as_db_error().expect("a database error");
    assert_eq!(db.code().code(), "55P03", "{db:?}");
    assert!(
        db.detail()
            .is_some_and(|d| d.contains("coldwire.read_lock")),
        "{db:?}"
    );
    let again = c
        .query("SELECT n FROM events WHERE id = $1", &[&5i64])
        .await
        .unwrap_err();
    assert_eq!(again.code().map(|c| c.code()), Some("25P02"), "{again:?}");
    c.batch_execute("ROLLBACK").await.unwrap();
    direct
        .execute(
            "SELECT pg_advisory_unlock($1, $2::int)",
            &[&0x6377_0001i32, &(id as i32)],
        )
        .await
        .unwrap();
    c.batch_execute("BEGIN").await.unwrap();
    let n: i32 = c
        .query_one("SELECT n FROM events WHERE id = $1", &[&5i64])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 5);
    c.batch_execute("COMMIT").await.unwrap();
}

/// A rehydration claims its keys in the mirror and inserts their rows in one statement;
/// the capture trigger that fires for that insert leaves it alone (catalog v12), and for
/// no other insert: one sent through SPI with a text made to look like the rehydration's
/// context is captured as any other.
#[tokio::test]
async fn a_rehydrations_own_insert_is_captured_once_and_no_other_passes_for_it() {
    let Tiered {
        proxy: _proxy,
        c,
        direct,
        db,
        dir: _dir,
    } = tiered("rehydratecapture", &[]).await;
    // Brought back by a locking read, which writes nothing: the claim's op stays (the
    // capture would have recorded it live), and reads and a later flush see the row as it
    // was.
    for sql in [
        "SELECT id, kind, n FROM {t} WHERE id = 5 FOR UPDATE",
        "UPDATE {t} SET n = n + 1 WHERE id = 6",
    ] {
        let expected = outcome(&direct, &sql.replace("{t}", "control")).await;
        assert_eq!(outcome(&c, &sql.replace("{t}", "events")).await, expected);
    }
    assert_eq!(
        mirror_ops(&direct, &[5, 6]).await,
        vec![(5, coldwire::segment::op::REHYDRATED), (6, 1)],
        "the rehydration's insert was not captured again; the client's update was"
    );
    let row = "SELECT id, kind, n FROM {t} WHERE id IN (5, 6) ORDER BY id";
    let expected = simple_rows(&direct, &row.replace("{t}", "control"))
        .await
        .unwrap();
    assert_eq!(
        simple_rows(&c, &row.replace("{t}", "events"))
            .await
            .unwrap(),
        expected
    );
    flush_all(&c).await;
    let hot: i64 = direct
        .query_one("SELECT count(*) FROM events WHERE id IN (5, 6)", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(hot, 0, "flushed again");
    assert_eq!(
        simple_rows(&c, &row.replace("{t}", "events"))
            .await
            .unwrap(),
        expected
    );

    // An insert run by a role that may insert into the table, through a function of its
    // own with a text whose lines imitate the rehydration's context, is captured: the new
    // key is in the mirror, and a key that may be cold is refused. (Postgres's own SPI
    // callers, query_to_xml and the like, run read-only.)
    let role = format!("forger_{db}");
    direct
        .batch_execute(&format!(
            "CREATE ROLE {role}; GRANT SELECT, INSERT ON events TO {role}; \
             CREATE FUNCTION forge(sql text) RETURNS void LANGUAGE plpgsql AS $$ BEGIN EXECUTE sql; END $$; \
             SET ROLE {role}"
        ))
        .await
        .unwrap();
    let forge = |sql: String| {
        let direct = &direct;
        async move {
            direct
                .execute("SELECT forge($1)", &[&sql])
                .await
                .map(|_| ())
        }
    };
    let forged = |key: i64| {
        format!("INSERT INTO events VALUES ({key}, 'forged', 0) /*\nPL/pgSQL function coldwire.rehydrate_1( */")
    };
    forge(forged(9001)).await.unwrap();
    let err = forge(forged(1000)).await.unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("55000"), "{err:?}");
    // The rehydration's statement itself writes the mirror, which the role may not.
    let statement: String = direct
        .query_one(
            "SELECT substring(prosrc from '(WITH claimed AS [^\n]*);') FROM pg_proc \
             WHERE oid = 'coldwire.rehydrate_1(bigint, bigint, anyarray, text, text, text, boolean, bytea)'::regprocedure",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let imitation = format!("{statement} /*\nPL/pgSQL function coldwire.rehydrate_1( */")
        .replace("(cold)", "(ARRAY[ROW(1001, 'forged', 0)::events])");
    let err = forge(imitation).await.unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("42501"), "{err:?}");
    // Nor can it call the rehydration itself with rows or absent keys of its own making
    // (catalog v13): it cannot read the database's secret, and a call without coldwire's
    // MAC of what it passes is refused, so cold key 1000 is neither replaced nor hidden.
    let err = direct
        .query_one("SELECT key FROM coldwire.secret", &[])
        .await
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("42501"), "{err:?}");
    let call =
        "SELECT coldwire.rehydrate_1(1, (SELECT generation FROM coldwire.tables WHERE id = 1), \
                ARRAY[ROW(1000, 'forged', 0)::events], $1, NULL, 'forged', false, $2)";
    // A call that brings nothing back is not checked: it only marks a statement planned
    // and takes the table's lock, as coldwire.plan_write and coldwire.read_lock let any
    // role do. Absent keys alone are checked.
    let empty = |absent: &str| {
        format!(
            "SELECT coldwire.rehydrate_1(1, (SELECT generation FROM coldwire.tables WHERE id = 1), \
             ARRAY[]::events[], '{absent}', NULL, 'forged', false, NULL)"
        )
    };
    let nothing: i64 = direct.query_one(&empty("[]"), &[]).await.unwrap().get(0);
    assert_eq!(nothing, 0);
    for absent in ["[ ]", r#"[{"id": 1000}]"#] {
        let err = direct.query_one(&empty(absent), &[]).await.unwrap_err();
        assert_eq!(
            err.code().map(|c| c.code()),
            Some("42501"),
            "{absent}: {err:?}"
        );
    }
    for absent in ["[]", r#"[{"id": 1000}]"#] {
        for mac in [None, Some(vec![0u8; 32])] {
            let err = direct.query_one(call, &[&absent, &mac]).await.unwrap_err();
            let db_err = err.as_db_error().expect("a Postgres error");
            assert_eq!(db_err.code().code(), "42501", "{db_err:?}");
            assert!(
                db_err.message().contains("not sent by coldwire"),
                "{db_err:?}"
            );
        }
    }
    direct.batch_execute("RESET ROLE").await.unwrap();
    assert_eq!(
        mirror_ops(&direct, &[9001, 1000, 1001]).await,
        vec![(9001, 1)]
    );

    // What signing relies on is put back by the flush executor's reconcile: an unsigned
    // function beside the signed one (as a proxy of an older build makes when it follows
    // a rename) is dropped, and a deleted secret is made anew. Cold writes then go on.
    direct
        .batch_execute(
            "CREATE FUNCTION coldwire.rehydrate_1(bigint, bigint, anyarray, jsonb, text, text, boolean) \
             RETURNS bigint LANGUAGE sql AS 'SELECT 0::bigint'; \
             DELETE FROM coldwire.secret;",
        )
        .await
        .unwrap();
    let repaired = "SELECT (SELECT count(*) FROM pg_proc WHERE proname = 'rehydrate_1') = 1 \
                    AND EXISTS (SELECT 1 FROM coldwire.secret)";
    let mut ok = false;
    for _ in 0..100 {
        ok = direct.query_one(repaired, &[]).await.unwrap().get(0);
        if ok {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        ok,
        "the unsigned function and the missing secret were not repaired"
    );
    // The proxy reads the new secret with its registry (at most a second old).
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let n = c
        .execute("UPDATE events SET n = n + 1 WHERE id = 1002", &[])
        .await
        .unwrap();
    assert_eq!(n, 1);
}

/// An UPDATE that moves a key onto one that may be cold is refused by the capture check
/// however the key moved (catalog v12 runs the check in the row trigger
/// `coldwire_capture_keys`, for rows whose key changed, instead of on every UPDATE), with
/// every such key of the statement named, and through coldwire it then fails as on a
/// plain table; UPDATEs that keep their keys are captured as before.
#[tokio::test]
async fn keys_moved_by_any_form_of_update_are_checked_against_the_cold_tier() {
    let Tiered {
        proxy: _proxy,
        c,
        direct,
        dir: _dir,
        ..
    } = tiered("keysmoved", &[]).await;
    // 1..=1900 are cold, 1901..=2000 hot. Straight to Postgres, hot rows only on purpose:
    // nothing brings the cold keys back, so each move onto one is refused.
    direct
        .batch_execute(
            "SET coldwire.hot_only_writes = on;
             CREATE FUNCTION shift() RETURNS trigger LANGUAGE plpgsql AS
                 $$ BEGIN NEW.id := NEW.id - 1000; RETURN NEW; END $$;
             CREATE TRIGGER shift BEFORE UPDATE ON events FOR EACH ROW
                 WHEN (NEW.kind = 'shift') EXECUTE FUNCTION shift();
             CREATE TEMP TABLE b (id bigint, x int);
             INSERT INTO b VALUES (1967, 0), (1968, 0);
             CREATE FUNCTION meddle() RETURNS trigger LANGUAGE plpgsql AS
                 $$ BEGIN PERFORM set_config('coldwire.keys_moved_1', '', true); RETURN NULL; END $$;
             CREATE TRIGGER meddle AFTER UPDATE ON b FOR EACH ROW EXECUTE FUNCTION meddle();",
        )
        .await
        .unwrap();
    for sql in [
        "UPDATE events SET id = 1000 WHERE id = 1950",
        "UPDATE events SET id = id - 1000 WHERE id BETWEEN 1960 AND 1962",
        "INSERT INTO events VALUES (1951, 'x', 0) ON CONFLICT (id) DO UPDATE SET id = 999",
        "MERGE INTO events e USING (VALUES (1952)) s(id) ON e.id = s.id \
         WHEN MATCHED THEN UPDATE SET id = 998",
        // Moved by a trigger, not by the SET list.
        "UPDATE events SET kind = 'shift' WHERE id = 1953",
        // Row events of another table queued between the moved rows' own, in one query.
        "WITH u AS (UPDATE b SET x = x + 1 RETURNING id) UPDATE events e SET id = e.id - 950 FROM u WHERE e.id = u.id",
    ] {
        let err = direct.batch_execute(sql).await.unwrap_err();
        assert_eq!(err.code().map(|c| c.code()), Some("55000"), "{sql}: {err:?}");
    }
    // Every key of the statement that may be cold is named, for coldwire to bring back at
    // once.
    let err = direct
        .batch_execute("UPDATE events SET id = id - 1000 WHERE id BETWEEN 1960 AND 1962")
        .await
        .unwrap_err();
    let detail = err
        .as_db_error()
        .and_then(|e| e.detail())
        .unwrap_or_default();
    for key in [960, 961, 962] {
        assert!(detail.contains(&format!(r#"{{"id": {key}}}"#)), "{detail}");
    }
    // Keys kept, or moved beyond the cold tier: written and captured.
    direct
        .batch_execute(
            "UPDATE events SET n = -1 WHERE id BETWEEN 1955 AND 1957;
             UPDATE events SET id = 9000 WHERE id = 1958;
             RESET coldwire.hot_only_writes;",
        )
        .await
        .unwrap();
    assert_eq!(
        mirror_ops(&direct, &[1955, 1958, 9000]).await,
        vec![(1955, 1), (1958, 3), (9000, 1)]
    );
    direct
        .batch_execute("UPDATE control SET n = -1 WHERE id BETWEEN 1955 AND 1957; UPDATE control SET id = 9000 WHERE id = 1958; DROP TRIGGER shift ON events")
        .await
        .unwrap();
    // Through coldwire the refused keys are brought back and the statement run again: it
    // fails as it does on the plain table, or succeeds as there.
    for sql in [
        "UPDATE {t} SET id = 1000 WHERE id = 1950",
        "INSERT INTO {t} VALUES (1951, 'x', 0) ON CONFLICT (id) DO UPDATE SET id = 999",
        "MERGE INTO {t} e USING (VALUES (1952)) s(id) ON e.id = s.id WHEN MATCHED THEN UPDATE SET id = 998",
        "UPDATE {t} SET id = id + 5000 WHERE id BETWEEN 1963 AND 1965 RETURNING id",
        "UPDATE {t} SET n = n + 1 WHERE id = 1966",
    ] {
        let expected = outcome(&direct, &sql.replace("{t}", "control")).await;
        assert_eq!(outcome(&c, &sql.replace("{t}", "events")).await, expected, "{sql}");
    }
    let all = "SELECT id, kind, n FROM {t} ORDER BY id";
    assert_eq!(
        simple_rows(&c, &all.replace("{t}", "events"))
            .await
            .unwrap(),
        simple_rows(&direct, &all.replace("{t}", "control"))
            .await
            .unwrap()
    );
}

/// Columns named like the variables, arguments and own columns of the functions and
/// tables coldwire makes for a tiered table (`cur`, `ctx`, `flagged`, `k`, `n`, `cold`,
/// `seq`, `op`, `xid`, `generation`, …), as key columns and as others: tiering, every
/// write form, flushes and reads behave as on a plain table. A key column named like a
/// column the mirror keeps beside the key is refused by `tier_table`, clearly, and its
/// table stays as it was.
#[tokio::test]
async fn columns_named_like_coldwires_own_names_write_as_on_a_plain_table() {
    let db = create_db("ownnames");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let direct = connect_direct(&db).await;
    let columns = "ctx text, flagged int, flagged_n int, rel text, cold int, absent text, planned int, \
                   mac bytea, digest text, statement text, append bool, table_id int, found_generation int, \
                   lo int, hi int, one int, new int, old int, found bool, seq int, op int, xid int, generation int";
    let tables = [
        (
            "events_by_cur",
            "cur bigint PRIMARY KEY, k int, n int",
            "cur, k, n",
            "g, g, g",
            "cur",
        ),
        (
            "events_by_k",
            "k bigint, n int, cur int, PRIMARY KEY (k, n)",
            "k, n, cur",
            "g, g % 3, g",
            "k, n",
        ),
    ];
    for (name, key, ..) in tables {
        direct
            .batch_execute(&format!(
                "CREATE TABLE {name} ({key}, {columns});
                 CREATE TABLE {control} (LIKE {name} INCLUDING ALL);",
                control = name.replace("events", "control")
            ))
            .await
            .unwrap();
    }
    let url = cluster().url(&db);
    let proxy = Proxy::start(&["--service-url", &url, "--cold-store", &store]).await;
    let c = proxy.connect(&db).await;

    for key in ["seq", "op", "xid", "generation"] {
        c.batch_execute(&format!(
            "CREATE TABLE by_{key} ({key} bigint PRIMARY KEY, v int); INSERT INTO by_{key} VALUES (1, 1)"
        ))
        .await
        .unwrap();
        let err = admin_call(&c, &format!("SELECT coldwire.tier_table('by_{key}')"))
            .await
            .unwrap_err();
        let db_err = err.as_db_error().unwrap();
        assert_eq!(db_err.code().code(), "0A000", "{err:?}");
        let detail = db_err.detail().unwrap_or_default();
        assert!(
            detail.contains(&format!(
                "primary-key column {key} has the name of a column coldwire keeps"
            )),
            "{detail}"
        );
        let n = c
            .simple_query(&format!("UPDATE by_{key} SET v = 2 WHERE {key} = 1"))
            .await
            .unwrap();
        assert!(
            matches!(&n[0], SimpleQueryMessage::CommandComplete(1)),
            "{key}"
        );
    }

    let all_columns = "ctx, flagged, flagged_n, rel, cold, absent, planned, mac, digest, statement, append, \
                       table_id, found_generation, lo, hi, one, new, old, found, seq, op, xid, generation";
    let values = "'c' || g, g, g, 'r', g, 'a', g, '\\x01', 'd', 's', true, g, g, g, g, g, g, g, false, g, g, g, g";
    for (name, _, key_columns, key_values, pk) in tables {
        let seed = format!(
            "INSERT INTO {{t}} ({key_columns}, {all_columns}) SELECT {key_values}, {values} FROM generate_series(1, 300) g"
        );
        direct
            .batch_execute(&seed.replace("{t}", &name.replace("events", "control")))
            .await
            .unwrap();
        c.batch_execute(&seed.replace("{t}", name)).await.unwrap();
        admin_call(&c, &format!(r#"SELECT coldwire.tier_table('{name}', '{{"hot_row_limit": 50, "min_flush_rows": 50, "auto_flush": false}}')"#))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        admin_call(
            &c,
            &format!("SELECT coldwire.flush_table('{name}', wait => true)"),
        )
        .await
        .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let first = pk.split(',').next().unwrap();
        for sql in [
            format!("INSERT INTO {{t}} ({key_columns}, {all_columns}) SELECT {key_values}, {values} FROM generate_series(301, 310) g"),
            format!("INSERT INTO {{t}} ({key_columns}, {all_columns}) SELECT {key_values}, {values} FROM generate_series(5, 6) g ON CONFLICT DO NOTHING"),
            format!("INSERT INTO {{t}} ({key_columns}, {all_columns}) VALUES ({v}, 'dup', 0, 0, 'r', 0, 'a', 0, '\\x02', 'd', 's', false, 0, 0, 0, 0, 0, 0, 0, true, 0, 0, 0, 0)",
                    v = if name == "events_by_k" { "7, 1, 7" } else { "7, 7, 7" }),
            format!("UPDATE {{t}} SET ctx = 'x', flagged = flagged + 1, cold = 0, seq = -seq, xid = 1 WHERE {first} BETWEEN 3 AND 12 RETURNING {pk}, ctx, seq"),
            format!("UPDATE {{t}} SET {first} = {first} + 1000 WHERE {first} = 20"),
            format!("DELETE FROM {{t}} WHERE {first} IN (30, 31, 305)"),
            format!("DELETE FROM {{t}} WHERE {first} = 32 RETURNING {pk}, ctx"),
            format!("INSERT INTO {{t}} ({key_columns}, {all_columns}) SELECT {key_values}, {values} FROM generate_series(40, 41) g \
                     ON CONFLICT ({pk}) DO UPDATE SET flagged = EXCLUDED.flagged + 100, op = EXCLUDED.op + 1"),
            format!("MERGE INTO {{t}} t USING (VALUES (42), (9042)) s(g) ON t.{first} = s.g \
                     WHEN MATCHED THEN UPDATE SET generation = -1 \
                     WHEN NOT MATCHED THEN INSERT ({key_columns}, {all_columns}) VALUES ({key_values}, {values})"),
            format!("SELECT {pk}, flagged, op, generation FROM {{t}} WHERE {first} IN (40, 41, 42, 50, 9042) ORDER BY {pk}"),
            "SELECT count(*), sum(seq), sum(op), sum(xid), sum(generation), max(ctx) FROM {t}".to_owned(),
        ] {
            // Rows in either order: the two tables' plans may differ.
            let sorted = |o: Result<Vec<String>, _>| {
                o.map(|mut v: Vec<String>| {
                    v.sort();
                    v
                })
            };
            let expected = sorted(outcome(&direct, &sql.replace("{t}", &name.replace("events", "control"))).await);
            let got = sorted(outcome(&c, &sql.replace("{t}", name)).await);
            assert_eq!(got, expected, "{name}: {sql}");
        }
        admin_call(
            &c,
            &format!("SELECT coldwire.flush_table('{name}', wait => true, drain => true)"),
        )
        .await
        .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let all = format!("SELECT * FROM {{t}} ORDER BY {pk}");
        assert_eq!(
            binary_rows(&c, &all.replace("{t}", name), &[])
                .await
                .unwrap(),
            binary_rows(
                &direct,
                &all.replace("{t}", &name.replace("events", "control")),
                &[]
            )
            .await
            .unwrap(),
            "{name}"
        );
    }
}
