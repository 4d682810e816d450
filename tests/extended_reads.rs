//! Merged reads in the extended protocol: prepared statements (named and unnamed) over a
//! tiered table return, byte for byte in binary format, what the same statements return on
//! a plain control table, with Bind values used for cold pruning, across flushes, inside
//! REPEATABLE READ while flushes finalize, for raw pipelines, pgbench and tokio-postgres.

mod common;

use common::flushing::{reader, Flushing, EXPECTED};
use common::raw::{self, tags, RawConn};
use common::{
    admin_call, binary_rows, cluster, connect_direct, create_db, http_get, pg_bin, sample,
    simple_rows, Proxy,
};
use tokio_postgres::types::Type;

const SCHEMA: &str = "CREATE TABLE events(id bigint PRIMARY KEY, kind text, amount numeric(10,2), at timestamptz, tags text[], small int);
     CREATE TABLE control(LIKE events INCLUDING ALL);
     INSERT INTO events SELECT g, 'k' || g % 4, g / 4.0, '2026-01-01'::timestamptz + g * interval '1 minute', ARRAY[g::text], g % 100
     FROM generate_series(1, 3000) g;
     INSERT INTO control SELECT * FROM events;";

/// A tiered `events` table (mostly cold after one flush) beside a plain `control` copy;
/// the proxy and a client through it.
async fn flushed_events(
    db: &str,
    store: &str,
    extra: &[&str],
) -> (Proxy, tokio_postgres::Client, tokio_postgres::Client) {
    let direct = connect_direct(db).await;
    direct.batch_execute(SCHEMA).await.unwrap();
    let url = cluster().url(db);
    let mut args = vec!["--service-url", &url, "--cold-store", store];
    args.extend_from_slice(extra);
    let proxy = Proxy::start(&args).await;
    let c = proxy.connect(db).await;
    admin_call(&c, r#"SELECT coldwire.tier_table('events', '{"hot_row_limit": 200, "min_flush_rows": 100, "max_rows_per_file": 1000, "auto_flush": false}')"#)
        .await
        .unwrap();
    admin_call(&c, "SELECT coldwire.flush_table('events', wait => true)")
        .await
        .unwrap();
    (proxy, c, direct)
}

/// Applies `sql` (with `{t}` for the table) to the tiered table through coldwire and to
/// the control table directly.
async fn both(c: &tokio_postgres::Client, direct: &tokio_postgres::Client, sql: &str) {
    c.batch_execute(&sql.replace("{t}", "events"))
        .await
        .unwrap();
    direct
        .batch_execute(&sql.replace("{t}", "control"))
        .await
        .unwrap();
}

#[tokio::test]
async fn prepared_statements_see_cold_rows_with_bind_values_and_survive_flushes() {
    let db = create_db("extreads");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let (proxy, c, direct) =
        flushed_events(&db, &store, &["--metrics-listen", "127.0.0.1:0"]).await;
    both(&c, &direct, "UPDATE {t} SET kind = 'late' WHERE id > 2950; INSERT INTO {t} VALUES (5000, 'new', 1, '2026-06-01', '{}', 7)").await;

    // The client sees its own parameters only, typed as on the plain table.
    let lookup = c
        .prepare("SELECT * FROM events WHERE id = $1")
        .await
        .unwrap();
    assert_eq!(lookup.params(), &[Type::INT8]);
    let control_lookup = direct
        .prepare("SELECT * FROM control WHERE id = $1")
        .await
        .unwrap();
    let types = |s: &tokio_postgres::Statement| {
        s.columns()
            .iter()
            .map(|c| (c.name().to_owned(), c.type_().clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(types(&lookup), types(&control_lookup));

    let metrics = proxy.metrics_addr.unwrap();
    let pruned_before = sample(
        &http_get(metrics, "/metrics").await,
        "coldwire_cold_segments_pruned_total",
        "",
    )
    .unwrap_or(0.0);
    for id in [1i64, 17, 999, 1000, 1001, 2800, 2999, 5000, 7777, -1] {
        let got = c.query(&lookup, &[&id]).await.unwrap();
        let expected = direct.query(&control_lookup, &[&id]).await.unwrap();
        assert_eq!(got.len(), expected.len(), "id {id}");
        let raw = |rows: &[tokio_postgres::Row]| {
            rows.iter()
                .map(|r| {
                    (0..r.len())
                        .map(|i| r.get::<_, common::RawValue>(i))
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(raw(&got), raw(&expected), "id {id}");
    }
    let pruned_after = sample(
        &http_get(metrics, "/metrics").await,
        "coldwire_cold_segments_pruned_total",
        "",
    )
    .unwrap();
    assert!(
        pruned_after - pruned_before >= 10.0,
        "point lookups by a Bind value prune segments: {pruned_before} -> {pruned_after}"
    );

    // More shapes, parameters of several types and formats, binary results compared
    // byte for byte.
    let kinds = ["k1", "late", "none"];
    let small: i32 = 42;
    let ids: Vec<i64> = vec![3, 1500, 2999, 5000];
    let (lo, hi) = (950i64, 1100i64);
    let cases: Vec<(&str, Vec<&(dyn tokio_postgres::types::ToSql + Sync)>)> = vec![
        ("SELECT id, kind, amount FROM {t} WHERE id BETWEEN $1 AND $2 ORDER BY id", vec![&lo, &hi]),
        ("SELECT count(*), sum(amount) FROM {t} WHERE kind = $1", vec![&kinds[0]]),
        ("SELECT count(*) FROM {t} WHERE kind = $1", vec![&kinds[1]]),
        ("SELECT count(*) FROM {t} WHERE kind = $1", vec![&kinds[2]]),
        ("SELECT id, at, tags FROM {t} WHERE id = ANY($1) ORDER BY id", vec![&ids]),
        ("SELECT id FROM {t} WHERE small = $1 AND id > $2 ORDER BY id", vec![&small, &lo]),
        ("SELECT e.id, f.kind FROM {t} e JOIN {t} f ON f.id = e.id + 1 WHERE e.id < $1 ORDER BY 1", vec![&lo]),
        ("SELECT max(id), min(at) FROM {t}", vec![]),
    ];
    for (sql, params) in &cases {
        let got = binary_rows(&c, &sql.replace("{t}", "events"), params)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        let expected = binary_rows(&direct, &sql.replace("{t}", "control"), params)
            .await
            .unwrap();
        assert!(!expected.is_empty(), "{sql}");
        assert_eq!(got, expected, "{sql}");
    }

    // A statement prepared once keeps seeing every row while flushes move them.
    let count = c
        .prepare("SELECT count(*), sum(id), sum(amount)::text FROM events WHERE id >= $1")
        .await
        .unwrap();
    let control_count = direct
        .prepare("SELECT count(*), sum(id), sum(amount)::text FROM control WHERE id >= $1")
        .await
        .unwrap();
    for round in 0..3i64 {
        let first = 6000 + round * 500;
        both(
            &c,
            &direct,
            &format!("INSERT INTO {{t}} SELECT g, 'r{round}', g / 8.0, '2026-04-01', NULL, 1 FROM generate_series({first}, {}) g; UPDATE {{t}} SET amount = amount + 1 WHERE id >= {first} AND id % 7 = {round}", first + 399),
        )
        .await;
        admin_call(&c, "SELECT coldwire.flush_table('events', wait => true)")
            .await
            .unwrap();
        for from in [0i64, 2000, 6000] {
            let got = c.query_one(&count, &[&from]).await.unwrap();
            let expected = direct.query_one(&control_count, &[&from]).await.unwrap();
            let pair =
                |r: &tokio_postgres::Row| (r.get::<_, i64>(0), r.get::<_, Option<String>>(2));
            assert_eq!(pair(&got), pair(&expected), "round {round}, from {from}");
        }
    }
}

/// One group of a read (no message of coldwire's own) and then a cold write (coldwire's
/// rehydration ahead of it): the client gets each of its completions once, in order, and
/// none of coldwire's.
#[tokio::test]
async fn a_group_of_a_read_then_a_cold_write_keeps_protocol_order() {
    let db = create_db("extmixed");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let (proxy, c, _direct) = flushed_events(&db, &store, &[]).await;
    let mut conn = RawConn::ready(proxy.addr, &db).await;
    let mut group = raw::parse("", "SELECT kind FROM events WHERE id = $1");
    group.extend(raw::bind("", &["6"]));
    group.extend(raw::execute());
    group.extend(raw::parse(
        "",
        "UPDATE events SET kind = 'mixed' WHERE id = $1",
    ));
    group.extend(raw::bind("", &["5"]));
    group.extend(raw::execute());
    group.extend(raw::sync());
    conn.send(&group).await;
    let msgs = conn.until_ready().await;
    assert_eq!(tags(&msgs), "12DC12CZ", "{msgs:?}");
    let kind: String = c
        .query_one("SELECT kind FROM events WHERE id = 5", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(kind, "mixed");
}

#[tokio::test]
async fn unnamed_statements_pipelines_and_refusals_keep_protocol_order() {
    let db = create_db("extraw");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let (proxy, _c, _direct) = flushed_events(&db, &store, &[]).await;
    let mut conn = RawConn::ready(proxy.addr, &db).await;

    // Parse, Describe statement, Bind (text parameter), Describe portal, Execute, Sync.
    let mut group = raw::parse("", "SELECT kind, id FROM events WHERE id = $1");
    group.extend(raw::frame(b'D', b"S\0"));
    group.extend(raw::bind("", &["5"]));
    group.extend(raw::frame(b'D', b"P\0"));
    group.extend(raw::execute());
    group.extend(raw::sync());
    conn.send(&group).await;
    let msgs = conn.until_ready().await;
    assert_eq!(tags(&msgs), "1tT2TDCZ", "{msgs:?}");
    let description = &msgs[1].body;
    assert_eq!(&description[..2], &[0, 1], "one parameter: {description:?}");
    let row = &msgs[5].body;
    assert!(row.windows(2).any(|w| w == b"k1"), "{row:?}");

    // Two groups pipelined, the second on a named statement, then a Bind of the unnamed
    // statement again with another value.
    let mut pipeline = raw::parse("byid", "SELECT kind FROM events WHERE id = $1 OR id = $2");
    pipeline.extend(raw::bind("byid", &["6", "2999"]));
    pipeline.extend(raw::execute());
    pipeline.extend(raw::sync());
    pipeline.extend(raw::bind("", &["7"]));
    pipeline.extend(raw::execute());
    pipeline.extend(raw::sync());
    conn.send(&pipeline).await;
    let first = conn.until_ready().await;
    assert_eq!(tags(&first), "12DDCZ", "{first:?}");
    let second = conn.until_ready().await;
    assert_eq!(tags(&second), "2DCZ", "{second:?}");
    assert!(second[1].body.windows(2).any(|w| w == b"k3"));

    // A simple Query in between replaces the unnamed statement; a Bind of it then fails
    // as in Postgres, and the named one still works.
    conn.send(&raw::query("SELECT 1")).await;
    conn.until_ready().await;
    conn.send(&[raw::bind("", &["7"]), raw::execute(), raw::sync()].concat())
        .await;
    let msgs = conn.until_ready().await;
    assert_eq!(tags(&msgs), "EZ", "{msgs:?}");
    conn.send(&[raw::bind("byid", &["8", "9"]), raw::execute(), raw::sync()].concat())
        .await;
    assert_eq!(tags(&conn.until_ready().await), "2DDCZ");
}

#[tokio::test]
async fn a_bind_over_the_cold_row_cap_fails_in_order_and_the_session_goes_on() {
    let db = create_db("extcap");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let (proxy, _c, _direct) = flushed_events(&db, &store, &["--max-cold-rows", "500"]).await;
    let mut conn = RawConn::ready(proxy.addr, &db).await;
    // (`id + 0 > 0` cannot be evaluated on cold rows: the count takes the row path.)
    let mut group = raw::parse(
        "",
        "SELECT count(*) FROM events WHERE id > $1 AND id + 0 > 0",
    );
    group.extend(raw::bind("", &["0"]));
    group.extend(raw::execute());
    group.extend(raw::sync());
    conn.send(&group).await;
    let msgs = conn.until_ready().await;
    assert_eq!(tags(&msgs), "12EZ", "{msgs:?}");
    let error = &msgs[2];
    assert_eq!(error.field(b'C').as_deref(), Some("54000"), "{error:?}");
    assert!(error.field(b'M').unwrap().contains("500"), "{error:?}");
    assert!(error.field(b'H').unwrap().contains("max_cold_rows"));
    // The same statement with a value the cap allows.
    conn.send(&[raw::bind("", &["2700"]), raw::execute(), raw::sync()].concat())
        .await;
    let msgs = conn.until_ready().await;
    assert_eq!(tags(&msgs), "2DCZ", "{msgs:?}");
    assert!(msgs[1].body.ends_with(b"300"), "{:?}", msgs[1]);
}

#[tokio::test]
async fn repeatable_read_keeps_its_snapshot_while_flushes_finalize() {
    let db = create_db("extrr");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let (proxy, c, _direct) = flushed_events(&db, &store, &[]).await;
    let count_sql = "SELECT count(*), sum(id)::bigint FROM events WHERE id > $1";
    let reader = proxy.connect(&db).await;
    reader
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .await
        .unwrap();
    let before = reader.query_one(count_sql, &[&0i64]).await.unwrap();
    let hot_row = reader
        .query_one("SELECT kind FROM events WHERE id = $1", &[&2950i64])
        .await
        .unwrap();
    // Meanwhile: new rows, and a drain that moves every hot row (2950 among them) cold.
    c.batch_execute(
        "INSERT INTO events SELECT g, 'x', 0, now(), NULL, 0 FROM generate_series(4000, 4099) g",
    )
    .await
    .unwrap();
    admin_call(
        &c,
        "SELECT coldwire.flush_table('events', wait => true, drain => true)",
    )
    .await
    .unwrap();
    // The snapshot sees neither the new rows nor the flush: same answers, no 40001.
    for _ in 0..2 {
        let again = reader.query_one(count_sql, &[&0i64]).await.unwrap();
        assert_eq!(
            (again.get::<_, i64>(0), again.get::<_, i64>(1)),
            (before.get::<_, i64>(0), before.get::<_, i64>(1))
        );
        let row = reader
            .query_one("SELECT kind FROM events WHERE id = $1", &[&2950i64])
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), hot_row.get::<_, String>(0));
        assert_eq!(
            simple_rows(&reader, "SELECT count(*) FROM events WHERE id > 0")
                .await
                .unwrap(),
            vec![vec![Some(before.get::<_, i64>(0).to_string())]]
        );
    }
    reader.batch_execute("COMMIT").await.unwrap();
    let after = reader.query_one(count_sql, &[&0i64]).await.unwrap();
    assert_eq!(after.get::<_, i64>(0), before.get::<_, i64>(0) + 100);
}

/// Asserts that no row of `events` is left in the heap.
async fn assert_drained(direct: &tokio_postgres::Client) {
    let hot: i64 = direct
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(hot, 0, "drained");
}

/// Rows and the sum of their ids, of `events` from a key on.
const COUNT_SUM: &str = "SELECT count(*), sum(id)::bigint FROM events WHERE id > $1";

/// [`flushed_events`] in a database of its own, with 100 hot rows (ids 4000 to 4099) added
/// to both tables: 3,100 rows in all.
async fn events_with_hot_rows(
    hint: &str,
) -> (
    String,
    tempfile::TempDir,
    Proxy,
    tokio_postgres::Client,
    tokio_postgres::Client,
) {
    let db = create_db(hint);
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let (proxy, c, direct) = flushed_events(&db, &store, &[]).await;
    both(&c, &direct, "INSERT INTO {t} SELECT g, 'x', 0, '2026-03-01', NULL, 0 FROM generate_series(4000, 4099) g").await;
    (db, dir, proxy, c, direct)
}

#[tokio::test]
async fn read_committed_transactions_hold_off_finalize_and_stay_consistent() {
    let (db, _dir, proxy, c, direct) = events_with_hot_rows("extrc").await;
    let reader = proxy.connect(&db).await;
    reader.batch_execute("BEGIN").await.unwrap();
    let first = reader.query_one(COUNT_SUM, &[&0i64]).await.unwrap();
    assert_eq!(first.get::<_, i64>(0), 3100);
    let count = COUNT_SUM;
    // A drain now waits for the reader's transaction: every statement of it plans for the
    // generation its first read saw, and no finalize can change that under it.
    let flusher = {
        let f = proxy.connect(&db).await;
        tokio::spawn(async move {
            admin_call(
                &f,
                "SELECT coldwire.flush_table('events', wait => true, drain => true)",
            )
            .await
            .unwrap()
        })
    };
    for i in 0..5 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let again = reader.query_one(count, &[&0i64]).await.unwrap();
        assert_eq!(again.get::<_, i64>(0), 3100, "read {i}");
        assert_eq!(again.get::<_, i64>(1), first.get::<_, i64>(1));
        let simple = simple_rows(&reader, "SELECT count(*) FROM events WHERE id >= 4000")
            .await
            .unwrap();
        assert_eq!(simple, vec![vec![Some("100".to_owned())]]);
    }
    reader.batch_execute("COMMIT").await.unwrap();
    let job = flusher.await.unwrap();
    assert_eq!(job["state"], "completed", "{job}");
    assert_drained(&direct).await;
    let got = binary_rows(&c, "SELECT * FROM events ORDER BY id", &[])
        .await
        .unwrap();
    let expected = binary_rows(&direct, "SELECT * FROM control ORDER BY id", &[])
        .await
        .unwrap();
    assert_eq!(got.len(), expected.len());
    let differing = got.iter().zip(&expected).position(|(a, b)| a != b);
    assert_eq!(differing, None, "first differing row");
}

#[tokio::test]
async fn a_savepoint_rolled_back_after_an_error_lets_a_flush_finalize_and_reads_go_on() {
    let (db, _dir, proxy, _c, direct) = events_with_hot_rows("extsp").await;
    let reader = proxy.connect(&db).await;
    reader.batch_execute("BEGIN; SAVEPOINT s").await.unwrap();
    let count = COUNT_SUM;
    let first = reader.query_one(count, &[&0i64]).await.unwrap();
    assert_eq!(first.get::<_, i64>(0), 3100);
    // The read's table lock was taken after the savepoint: an error and ROLLBACK TO give
    // it back, so a drain finalizes while the transaction goes on...
    let error = reader.batch_execute("SELECT 1 / 0").await.unwrap_err();
    assert_eq!(error.code().map(|c| c.code()), Some("22012"));
    reader
        .batch_execute("ROLLBACK TO SAVEPOINT s")
        .await
        .unwrap();
    let f = proxy.connect(&db).await;
    let job = admin_call(
        &f,
        "SELECT coldwire.flush_table('events', wait => true, drain => true)",
    )
    .await
    .unwrap();
    assert_eq!(job["state"], "completed", "{job}");
    // ...and the transaction's next reads are planned for the generation they now see
    // (not the one learnt before the savepoint, which the guard would refuse with 40001).
    for sql in [
        count,
        "SELECT count(*), sum(id)::bigint FROM events WHERE id > $1 AND kind <> 'none'",
    ] {
        let again = reader.query_one(sql, &[&0i64]).await.unwrap();
        assert_eq!(again.get::<_, i64>(0), 3100, "{sql}");
        assert_eq!(again.get::<_, i64>(1), first.get::<_, i64>(1), "{sql}");
    }
    let simple = simple_rows(&reader, "SELECT count(*) FROM events WHERE id >= 4000")
        .await
        .unwrap();
    assert_eq!(simple, vec![vec![Some("100".to_owned())]]);
    reader.batch_execute("COMMIT").await.unwrap();
    assert_drained(&direct).await;
}

#[tokio::test]
async fn pgbench_extended_and_prepared_modes_read_a_tiered_table() {
    let db = create_db("extbench");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let (proxy, _c, _direct) = flushed_events(&db, &store, &[]).await;
    let script = dir.path().join("lookup.sql");
    std::fs::write(
        &script,
        "\\set id random(1, 3000)\nSELECT kind, amount FROM events WHERE id = :id;\nSELECT count(*) FROM events WHERE id BETWEEN :id AND :id + 10;\n",
    )
    .unwrap();
    for mode in ["extended", "prepared"] {
        let out = std::process::Command::new(pg_bin("pgbench"))
            .args([
                "-n",
                "-h",
                "127.0.0.1",
                "-p",
                &proxy.addr.port().to_string(),
            ])
            .args(["-U", "postgres", "-c", "2", "-t", "100", "-M", mode, "-f"])
            .arg(&script)
            .arg(&db)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success()
                && stdout.contains("number of transactions actually processed: 200/200"),
            "{mode}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(proxy.log_contains("cold rows injected").await);
}

#[tokio::test]
async fn prepared_reads_during_auto_flush_never_miss_or_double_a_row() {
    let db = create_db("extflush");
    let mut flushing = Flushing::start(&db, 25, 50).await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(8);
    let mut readers = Vec::new();
    for in_transactions in [false, true] {
        let client = flushing.proxy.connect(&db).await;
        readers.push(tokio::spawn(async move {
            let all = client
                .prepare("SELECT count(*), sum(v)::bigint FROM t WHERE id <= $1")
                .await
                .unwrap();
            let one = client
                .prepare("SELECT v FROM t WHERE id = $1")
                .await
                .unwrap();
            let mut reads = 0;
            let mut k = 7i64;
            while tokio::time::Instant::now() < deadline {
                if in_transactions {
                    client.batch_execute("BEGIN").await.unwrap();
                }
                for _ in 0..2 {
                    let row = client
                        .query_one(&all, &[&2000i64])
                        .await
                        .unwrap_or_else(|e| panic!("{e:?}"));
                    assert_eq!(
                        (row.get::<_, i64>(0), row.get::<_, i64>(1)),
                        EXPECTED,
                        "no row missing or doubled"
                    );
                    k = k * 31 % 2000 + 1;
                    let v: i64 = client
                        .query_one(&one, &[&k])
                        .await
                        .unwrap_or_else(|e| panic!("{e:?}"))
                        .get(0);
                    assert_eq!(v, k * 3, "key {k}");
                    reads += 2;
                }
                if in_transactions {
                    client.batch_execute("COMMIT").await.unwrap();
                }
            }
            reads
        }));
    }
    let mut reads = 0;
    for r in readers {
        match r.await {
            Ok(n) => reads += n,
            Err(e) => panic!("{e:?}\nproxy log:\n{}", flushing.proxy.log()),
        }
    }
    assert!(reads > 20, "{reads} reads");
    assert!(
        flushing.proxy.log_contains("running the read again").await,
        "the guard fired and the read was retried"
    );
    flushing.stop().await;
}

/// Reads in autocommit whose planning takes longer than flushes take to finalize (the
/// failpoint holds every plan 2.5 s while a writer keeps the table flushing every 100 ms):
/// the first attempt's guard fails, and the retry holds the table's lock shared, so it
/// cannot fail again. No read reaches the client as 40001.
#[tokio::test]
async fn long_reads_in_autocommit_never_surface_40001_while_flushes_finalize() {
    let db = create_db("longreads");
    let mut flushing = Flushing::start(&db, 2500, 20).await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(12);
    let mut readers = Vec::new();
    for extended in [false, true] {
        let client = flushing.proxy.connect(&db).await;
        readers.push(reader(client, extended, deadline));
    }
    let mut reads = 0;
    for r in readers {
        match r.await {
            Ok(n) => reads += n,
            Err(e) => panic!("{e:?}\nproxy log:\n{}", flushing.proxy.log()),
        }
    }
    assert!(reads >= 3, "{reads} reads");
    assert!(
        flushing
            .proxy
            .log_contains("running the read again attempt=1")
            .await,
        "the guard fired and the read was retried"
    );
    assert!(
        !flushing
            .proxy
            .log()
            .contains("running the read again attempt=2"),
        "no retry failed again:\n{}",
        flushing.proxy.log()
    );
    flushing.stop().await;
}

/// Cold writes that open their table in a transaction block, planned for longer than
/// flushes take to finalize (the failpoint holds every plan 1.5 s while a writer keeps
/// the table flushing): coldwire takes the table's lock in the write's own round trip,
/// under a savepoint, so a flush that finalized meanwhile fails the rehydration's guard
/// there. coldwire rolls back to its savepoint and runs the write again, and the client's
/// block goes on as if nothing happened: no 40001, every update counted once, the block's
/// later read sees it, and its COMMIT commits it. Writes alternate between the extended
/// protocol and simple Queries; one block in four reads the row first (which asks
/// `coldwire.read_lock` first, so the write after it needs no savepoint).
#[tokio::test]
async fn cold_writes_opening_a_block_run_again_when_a_flush_finalizes_under_them() {
    let db = create_db("blockwrites");
    let mut flushing = Flushing::start(&db, 1500, 20).await;
    let c = flushing.proxy.connect(&db).await;
    let update = c
        .prepare("UPDATE t SET v = v + 1 WHERE id = $1")
        .await
        .unwrap();
    let read = c.prepare("SELECT v FROM t WHERE id = $1").await.unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
    let mut updated = Vec::new();
    let mut id = 1i64;
    while tokio::time::Instant::now() < deadline {
        let fail = |e: tokio_postgres::Error| -> ! {
            panic!("{e:?}\nproxy log:\n{}", flushing.proxy.log())
        };
        c.batch_execute("BEGIN").await.unwrap_or_else(|e| fail(e));
        // Blocks open the table with the write (in turn through the extended protocol
        // and a simple Query), one in four with a read first.
        let mode = updated.len() % 4;
        if mode == 3 {
            let rows = c
                .simple_query(&format!("SELECT v FROM t WHERE id = {id}"))
                .await
                .unwrap_or_else(|e| fail(e));
            let v = rows.iter().find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
                _ => None,
            });
            assert_eq!(
                v,
                Some((id * 3).to_string()),
                "id {id} read first in its block"
            );
        }
        if mode % 2 == 0 {
            let n = c.execute(&update, &[&id]).await.unwrap_or_else(|e| fail(e));
            assert_eq!(n, 1, "id {id}");
        } else {
            c.batch_execute(&format!("UPDATE t SET v = v + 1 WHERE id = {id}"))
                .await
                .unwrap_or_else(|e| fail(e));
        }
        let v: i64 = c
            .query_one(&read, &[&id])
            .await
            .unwrap_or_else(|e| fail(e))
            .get(0);
        assert_eq!(v, id * 3 + 1, "id {id} read back in its block");
        c.batch_execute("COMMIT").await.unwrap_or_else(|e| fail(e));
        updated.push(id);
        id += 7;
    }
    assert!(updated.len() >= 3, "{} blocks", updated.len());
    let log = flushing.proxy.log();
    eprintln!(
        "{} blocks, rolled back: {} Binds, {} Queries",
        updated.len(),
        log.matches("query=false").count(),
        log.matches("query=true").count()
    );
    assert!(
        flushing
            .proxy
            .log_contains("rolling back to coldwire's savepoint")
            .await,
        "a flush finalized under a write, which ran again:\n{log}"
    );
    let through: i64 = c
        .query_one(
            "SELECT count(*) FROM t WHERE id <= 2000 AND v = id * 3 + 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(through, updated.len() as i64, "each update counted once");
    let all: i64 = c
        .query_one("SELECT count(*) FROM t WHERE id <= 2000", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(all, 2000, "no row lost or doubled");
    flushing.stop().await;
}

/// The same as libpq sends it (Bind, Describe of the portal, Execute, Sync), for a write
/// with RETURNING: when coldwire's part fails under its savepoint, Postgres skips the
/// client's Describe too, and the write run again answers it: the client gets its
/// BindComplete, RowDescription, row and completion once each, in order.
#[tokio::test]
async fn a_write_run_again_answers_the_describe_of_its_portal() {
    let db = create_db("blockdescribe");
    let mut flushing = Flushing::start(&db, 1500, 20).await;
    let mut conn = RawConn::ready(flushing.proxy.addr, &db).await;
    let mut prepare = raw::parse("upd", "UPDATE t SET v = v + 1 WHERE id = $1 RETURNING v");
    prepare.extend(raw::sync());
    conn.send(&prepare).await;
    assert_eq!(tags(&conn.until_ready().await), "1Z");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
    let mut id = 3i64;
    let mut blocks = 0;
    while tokio::time::Instant::now() < deadline {
        conn.send(&raw::query("BEGIN")).await;
        assert_eq!(tags(&conn.until_ready().await), "CZ");
        let mut group = raw::bind("upd", &[&id.to_string()]);
        group.extend(raw::frame(b'D', b"P\0"));
        group.extend(raw::execute());
        group.extend(raw::sync());
        conn.send(&group).await;
        let msgs = conn.until_ready().await;
        assert_eq!(
            tags(&msgs),
            "2TDCZ",
            "id {id}: {msgs:?}\nproxy log:\n{}",
            flushing.proxy.log()
        );
        let v = (id * 3 + 1).to_string();
        assert!(msgs[2].body.ends_with(v.as_bytes()), "{msgs:?}");
        conn.send(&raw::query("COMMIT")).await;
        assert_eq!(tags(&conn.until_ready().await), "CZ");
        blocks += 1;
        id += 7;
    }
    assert!(blocks >= 3, "{blocks} blocks");
    assert!(
        flushing
            .proxy
            .log_contains("rolling back to coldwire's savepoint")
            .await,
        "a flush finalized under a write, which ran again:\n{}",
        flushing.proxy.log()
    );
    flushing.stop().await;
}

#[tokio::test]
async fn lookups_read_only_the_pages_of_their_keys_and_find_every_row() {
    let db = create_db("extpages");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(
            "CREATE TABLE big(id bigint PRIMARY KEY, pad text, n int);
             CREATE TABLE control(LIKE big INCLUDING ALL);
             INSERT INTO big SELECT g, repeat(md5(g::text), 4), g % 1000 FROM generate_series(1, 30000) g;
             INSERT INTO control SELECT * FROM big;",
        )
        .await
        .unwrap();
    let proxy =
        common::Proxy::start(&["--service-url", &cluster().url(&db), "--cold-store", &store]).await;
    let c = proxy.connect(&db).await;
    admin_call(&c, r#"SELECT coldwire.tier_table('big', '{"hot_row_limit": 1000, "min_flush_rows": 1000, "max_rows_per_file": 100000, "auto_flush": false}')"#)
        .await
        .unwrap();
    admin_call(&c, "SELECT coldwire.flush_table('big', wait => true)")
        .await
        .unwrap();
    let file_bytes: i64 = direct
        .query_one(
            "SELECT sum(byte_size)::bigint FROM coldwire.segments WHERE status = 'active'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // Keys at and around page boundaries (pages hold 1024 rows), ranges across them.
    let lookup = c.prepare("SELECT * FROM big WHERE id = $1").await.unwrap();
    let control_lookup = direct
        .prepare("SELECT * FROM control WHERE id = $1")
        .await
        .unwrap();
    for id in [
        1i64, 2047, 2048, 2049, 4096, 4097, 16384, 28999, 29000, 29001, 30001,
    ] {
        let got = c.query(&lookup, &[&id]).await.unwrap();
        let expected = direct.query(&control_lookup, &[&id]).await.unwrap();
        let text = |rows: &[tokio_postgres::Row]| {
            rows.iter()
                .map(|r| (r.get::<_, i64>(0), r.get::<_, String>(1)))
                .collect::<Vec<_>>()
        };
        assert_eq!(text(&got), text(&expected), "id {id}");
    }
    for (lo, hi) in [(2040i64, 2060i64), (4000, 8200), (1, 5), (28990, 29010)] {
        let sql = "SELECT count(*), sum(n)::bigint FROM {t} WHERE id BETWEEN $1 AND $1 + $2";
        let span = hi - lo;
        let got = c
            .query_one(&sql.replace("{t}", "big"), &[&lo, &span])
            .await
            .unwrap();
        let expected = direct
            .query_one(&sql.replace("{t}", "control"), &[&lo, &span])
            .await
            .unwrap();
        assert_eq!(
            (got.get::<_, i64>(0), got.get::<_, i64>(1)),
            (expected.get::<_, i64>(0), expected.get::<_, i64>(1)),
            "{lo}..{hi}"
        );
    }
    // explain: a point lookup reads a small part of the segment (its bloom filter and
    // page index are cached by now).
    let explain = simple_rows(
        &c,
        "SELECT coldwire.explain('SELECT * FROM big WHERE id = 12345')",
    )
    .await
    .unwrap();
    let text = explain[0][0].clone().unwrap();
    let read: i64 = text
        .split(" bytes read")
        .next()
        .and_then(|s| s.rsplit(", ").next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        read * 4 < file_bytes,
        "{read} of {file_bytes} bytes read: {text}"
    );

    // A read of some columns decodes only those and the key, and binds NULL in the
    // others, which the statement cannot see.
    let explained = |sql: &'static str| {
        let c = &c;
        async move {
            let text = simple_rows(c, &format!("SELECT coldwire.explain('{sql}')"))
                .await
                .unwrap()[0][0]
                .clone()
                .unwrap();
            let bytes: i64 = text
                .split(" bytes read")
                .next()
                .and_then(|s| s.rsplit(", ").next())
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("{text}"));
            (text, bytes)
        }
    };
    let (all, all_bytes) = explained("SELECT * FROM big WHERE id > 5000").await;
    let (some, some_bytes) = explained("SELECT n FROM big WHERE id > 5000").await;
    assert!(all.contains("Columns decoded: all 3"), "{all}");
    assert!(some.contains("Columns decoded: 2 of 3 (id, n)"), "{some}");
    assert!(some_bytes * 3 < all_bytes, "{some_bytes} vs {all_bytes}");
    for sql in [
        "SELECT n, id % 7 FROM {t} WHERE id > 5000 ORDER BY id",
        "SELECT count(*), sum(n), max(id) FROM {t} WHERE id > 5000 AND n < 20",
        "SELECT {t} FROM {t} WHERE id > 29990 ORDER BY id",
    ] {
        assert_eq!(
            simple_rows(&c, &sql.replace("{t}", "big")).await.unwrap(),
            simple_rows(&direct, &sql.replace("{t}", "control"))
                .await
                .unwrap(),
            "{sql}"
        );
    }
}

/// Runs one Parse/Bind/Execute/Sync of `name` with text parameters; the group's messages.
async fn parse_bind_execute(
    conn: &mut RawConn,
    name: &str,
    sql: &str,
    params: &[&str],
) -> Vec<raw::Msg> {
    conn.send(
        &[
            raw::parse(name, sql),
            raw::bind(name, params),
            raw::execute(),
            raw::sync(),
        ]
        .concat(),
    )
    .await;
    conn.until_ready().await
}

/// Runs one Bind/Execute/Sync of `name`; the group's messages.
async fn bind_execute(conn: &mut RawConn, name: &str, params: &[&str]) -> Vec<raw::Msg> {
    conn.send(&[raw::bind(name, params), raw::execute(), raw::sync()].concat())
        .await;
    conn.until_ready().await
}

fn row_has(msgs: &[raw::Msg], value: &[u8]) -> bool {
    msgs.iter()
        .any(|m| m.tag == b'D' && m.body.windows(value.len()).any(|w| w == value))
}

#[tokio::test]
async fn a_name_freed_by_deallocate_or_discard_all_binds_the_statement_parsed_under_it_next() {
    let db = create_db("extdealloc");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let (proxy, _c, _direct) = flushed_events(&db, &store, &[]).await;
    let mut conn = RawConn::ready(proxy.addr, &db).await;
    let read = "SELECT kind FROM events WHERE id = $1";

    // q reads cold row 5 (kind k1).
    let msgs = parse_bind_execute(&mut conn, "q", read, &["5"]).await;
    assert_eq!(tags(&msgs), "12DCZ", "{msgs:?}");
    assert!(row_has(&msgs, b"k1"), "{msgs:?}");

    // A DEALLOCATE that fails (in a failed transaction block) leaves q as it was.
    for sql in ["BEGIN", "SELECT 1/0", "DEALLOCATE q", "ROLLBACK"] {
        conn.send(&raw::query(sql)).await;
        conn.until_ready().await;
    }
    let msgs = bind_execute(&mut conn, "q", &["6"]).await;
    assert_eq!(tags(&msgs), "2DCZ", "{msgs:?}");
    assert!(row_has(&msgs, b"k2"), "{msgs:?}");

    // Freed by SQL DEALLOCATE (with a comment in front), the name holds a statement that
    // reads no tiered table: its Bind is relayed as the client sent it.
    conn.send(&raw::query("/* pool */ DEALLOCATE q")).await;
    assert_eq!(tags(&conn.until_ready().await), "CZ");
    let msgs = parse_bind_execute(&mut conn, "q", "SELECT $1::text || '!' AS x", &["5"]).await;
    assert_eq!(tags(&msgs), "12DCZ", "{msgs:?}");
    assert!(row_has(&msgs, b"5!"), "{msgs:?}");

    // Freed by DISCARD ALL (as a pooler resets a connection), q and r are parsed again,
    // q as a read of another column of the tiered table.
    let msgs = parse_bind_execute(&mut conn, "r", read, &["7"]).await;
    assert!(row_has(&msgs, b"k3"), "{msgs:?}");
    conn.send(&raw::query("DISCARD ALL")).await;
    assert_eq!(tags(&conn.until_ready().await), "CZ");
    let msgs = parse_bind_execute(
        &mut conn,
        "q",
        "SELECT tags FROM events WHERE id = $1",
        &["9"],
    )
    .await;
    assert_eq!(tags(&msgs), "12DCZ", "{msgs:?}");
    assert!(row_has(&msgs, b"{9}"), "{msgs:?}");
    let msgs = parse_bind_execute(&mut conn, "r", "SELECT $1::int + 1 AS y", &["41"]).await;
    assert_eq!(tags(&msgs), "12DCZ", "{msgs:?}");
    assert!(row_has(&msgs, b"42"), "{msgs:?}");

    // Pipelined: DEALLOCATE, then the name parsed again and bound, before any answer.
    let msgs = parse_bind_execute(&mut conn, "p", read, &["5"]).await;
    assert!(row_has(&msgs, b"k1"), "{msgs:?}");
    bind_execute(&mut conn, "p", &["2999"]).await;
    conn.send(
        &[
            raw::query("DEALLOCATE p"),
            raw::parse("p", "SELECT tags FROM events WHERE id = $1"),
            raw::bind("p", &["2999"]),
            raw::execute(),
            raw::sync(),
        ]
        .concat(),
    )
    .await;
    assert_eq!(tags(&conn.until_ready().await), "CZ");
    let msgs = conn.until_ready().await;
    assert_eq!(tags(&msgs), "12DCZ", "{msgs:?}");
    assert!(row_has(&msgs, b"{2999}"), "{msgs:?}");
    let msgs = bind_execute(&mut conn, "p", &["2998"]).await;
    assert!(row_has(&msgs, b"{2998}"), "{msgs:?}");

    // A DEALLOCATE in the extended protocol (as JDBC sends every statement): coldwire
    // cannot tell which name it freed, and the rest of the group is tracked as before
    // (the read's description is trimmed to the client's one parameter).
    let msgs = parse_bind_execute(&mut conn, "e", read, &["5"]).await;
    assert!(row_has(&msgs, b"k1"), "{msgs:?}");
    bind_execute(&mut conn, "e", &["2999"]).await;
    conn.send(
        &[
            raw::parse("", "DEALLOCATE e"),
            raw::bind("", &[]),
            raw::execute(),
            raw::parse("s2", read),
            raw::frame(b'D', b"Ss2\0"),
            raw::sync(),
        ]
        .concat(),
    )
    .await;
    let msgs = conn.until_ready().await;
    assert_eq!(tags(&msgs), "12C1tTZ", "{msgs:?}");
    assert_eq!(&msgs[4].body[..2], &[0, 1], "{msgs:?}");
    let msgs = parse_bind_execute(
        &mut conn,
        "e",
        "SELECT tags FROM events WHERE id = $1",
        &["2997"],
    )
    .await;
    assert_eq!(tags(&msgs), "12DCZ", "{msgs:?}");
    assert!(row_has(&msgs, b"{2997}"), "{msgs:?}");
    let msgs = bind_execute(&mut conn, "e", &["6"]).await;
    assert!(row_has(&msgs, b"{6}"), "{msgs:?}");
    let msgs = bind_execute(&mut conn, "s2", &["7"]).await;
    assert!(row_has(&msgs, b"k3"), "{msgs:?}");
}

/// The table OID Postgres gives the first column of the RowDescription in `msgs` (0 for a
/// column computed by a union, such as the full rewrite's).
fn first_column_table(msgs: &[raw::Msg]) -> u32 {
    let body = &msgs
        .iter()
        .find(|m| m.tag == b'T')
        .expect("a RowDescription")
        .body;
    let name_end = 2 + body[2..].iter().position(|&b| b == 0).unwrap();
    u32::from_be_bytes(body[name_end + 1..name_end + 5].try_into().unwrap())
}

/// Hot forms the session has upstream.
async fn hot_forms(conn: &mut RawConn) -> String {
    conn.send(&raw::query(
        "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'coldwire\\_hot\\_%'",
    ))
    .await;
    let msgs = conn.until_ready().await;
    let row = &msgs.iter().find(|m| m.tag == b'D').expect("a row").body;
    String::from_utf8_lossy(&row[6..]).into_owned()
}

/// Bind of `name` with a Describe of the portal, Execute and Sync.
fn bind_describe_execute(name: &str, params: &[&str]) -> Vec<u8> {
    [
        raw::bind(name, params),
        raw::frame(b'D', b"P\0"),
        raw::execute(),
    ]
    .concat()
}

#[tokio::test]
async fn named_statements_run_their_hot_form_while_no_cold_row_is_bound() {
    let db = create_db("exthot");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let (proxy, c, _direct) = flushed_events(&db, &store, &[]).await;
    let mut conn = RawConn::ready(proxy.addr, &db).await;
    let read = "SELECT kind FROM events WHERE id = $1";

    // Until Postgres has confirmed q, its Binds take the full rewrite, whose column
    // comes from a union (table OID 0).
    conn.send(
        &[
            raw::parse("q", read),
            bind_describe_execute("q", &["2999"]),
            raw::sync(),
        ]
        .concat(),
    )
    .await;
    let msgs = conn.until_ready().await;
    assert_eq!(tags(&msgs), "12TDCZ", "{msgs:?}");
    assert!(row_has(&msgs, b"k3"));
    assert_eq!(first_column_table(&msgs), 0, "{msgs:?}");
    // One pipeline: a hot key (the hot form, parsed on the way), a cold key (the full
    // rewrite), a hot key again (either form, as the hot form's Parse may be unanswered).
    conn.send(
        &[
            bind_describe_execute("q", &["2999"]),
            bind_describe_execute("q", &["5"]),
            bind_describe_execute("q", &["2998"]),
            raw::sync(),
        ]
        .concat(),
    )
    .await;
    let msgs = conn.until_ready().await;
    assert_eq!(tags(&msgs), "2TDC2TDC2TDCZ", "{msgs:?}");
    assert_ne!(first_column_table(&msgs), 0, "{msgs:?}");
    assert!(
        row_has(&msgs[..4], b"k3") && row_has(&msgs[4..8], b"k1") && row_has(&msgs[8..], b"k2")
    );
    assert_eq!(first_column_table(&msgs[4..]), 0, "{msgs:?}");
    let msgs = {
        conn.send(&[bind_describe_execute("q", &["2997"]), raw::sync()].concat())
            .await;
        conn.until_ready().await
    };
    assert_eq!(tags(&msgs), "2TDCZ", "{msgs:?}");
    assert!(row_has(&msgs, b"k1"));
    assert_ne!(first_column_table(&msgs), 0);
    assert_eq!(hot_forms(&mut conn).await, "1");

    // An error ahead of a hot form's Parse skips it; the next Bind parses it again.
    conn.send(&[raw::parse("r", read), raw::sync()].concat())
        .await;
    assert_eq!(tags(&conn.until_ready().await), "1Z");
    conn.send(
        &[
            raw::bind("nosuch", &[]),
            raw::bind("r", &["2996"]),
            raw::execute(),
            raw::sync(),
        ]
        .concat(),
    )
    .await;
    assert_eq!(tags(&conn.until_ready().await), "EZ");
    conn.send(&[bind_describe_execute("r", &["2996"]), raw::sync()].concat())
        .await;
    let msgs = conn.until_ready().await;
    assert_eq!(tags(&msgs), "2TDCZ", "{msgs:?}");
    assert!(row_has(&msgs, b"k0"));
    assert_eq!(hot_forms(&mut conn).await, "2");

    // Closed and parsed again as another read, q's old hot form is closed at the next
    // Bind, and the new q gets its own; DISCARD ALL drops them all, and they are parsed
    // again when needed.
    conn.send(&[raw::frame(b'C', b"Sq\0"), raw::sync()].concat())
        .await;
    assert_eq!(tags(&conn.until_ready().await), "3Z");
    let msgs = parse_bind_execute(
        &mut conn,
        "q",
        "SELECT tags FROM events WHERE id = $1",
        &["2995"],
    )
    .await;
    assert_eq!(tags(&msgs), "12DCZ", "{msgs:?}");
    assert!(row_has(&msgs, b"{2995}"), "{msgs:?}");
    assert_eq!(hot_forms(&mut conn).await, "1");
    let msgs = bind_execute(&mut conn, "q", &["2993"]).await;
    assert!(row_has(&msgs, b"{2993}"), "{msgs:?}");
    assert_eq!(hot_forms(&mut conn).await, "2");
    conn.send(&raw::query("DISCARD ALL")).await;
    conn.until_ready().await;
    assert_eq!(hot_forms(&mut conn).await, "0");
    let msgs = parse_bind_execute(&mut conn, "r", read, &["2994"]).await;
    assert_eq!(tags(&msgs), "12DCZ", "{msgs:?}");
    assert!(row_has(&msgs, b"k2"));
    let msgs = bind_execute(&mut conn, "r", &["2994"]).await;
    assert!(row_has(&msgs, b"k2"));
    assert_eq!(hot_forms(&mut conn).await, "1");
    // u closed, the Close of its hot form goes with the next Bind of a rewritten read;
    // an error ahead of it in that group skips it, and the Bind after closes it then.
    conn.send(&[raw::parse("u", read), raw::parse("t", read), raw::sync()].concat())
        .await;
    assert_eq!(tags(&conn.until_ready().await), "11Z");
    let msgs = bind_execute(&mut conn, "u", &["2994"]).await;
    assert!(row_has(&msgs, b"k2"));
    assert_eq!(hot_forms(&mut conn).await, "2");
    conn.send(&[raw::frame(b'C', b"Su\0"), raw::sync()].concat())
        .await;
    assert_eq!(tags(&conn.until_ready().await), "3Z");
    conn.send(
        &[
            raw::bind("nosuch", &[]),
            raw::bind("t", &["2994"]),
            raw::execute(),
            raw::sync(),
        ]
        .concat(),
    )
    .await;
    assert_eq!(tags(&conn.until_ready().await), "EZ");
    assert_eq!(hot_forms(&mut conn).await, "2");
    let msgs = bind_execute(&mut conn, "t", &["2994"]).await;
    assert!(row_has(&msgs, b"k2"));
    assert_eq!(hot_forms(&mut conn).await, "2");
    conn.send(&[bind_describe_execute("t", &["2994"]), raw::sync()].concat())
        .await;
    let msgs = conn.until_ready().await;
    assert!(row_has(&msgs, b"k2"));
    assert_ne!(first_column_table(&msgs), 0, "{msgs:?}");

    // A Parse that fails (in a failed transaction block) leaves the name unknown to
    // Postgres, and so to coldwire: its Bind fails as Postgres says.
    for sql in ["BEGIN", "SELECT 1/0"] {
        conn.send(&raw::query(sql)).await;
        conn.until_ready().await;
    }
    conn.send(&[raw::parse("s", read), raw::sync()].concat())
        .await;
    assert_eq!(tags(&conn.until_ready().await), "EZ");
    conn.send(&raw::query("ROLLBACK")).await;
    conn.until_ready().await;
    let msgs = bind_execute(&mut conn, "s", &["2999"]).await;
    assert_eq!(tags(&msgs), "EZ", "{msgs:?}");
    assert_eq!(msgs[0].field(b'C').as_deref(), Some("26000"), "{msgs:?}");

    // Flushed cold since the last Bind, the key is not in the heap any more: the hot
    // form's guard sees the new cold tier, and the read runs again with the cold row.
    c.batch_execute("INSERT INTO events SELECT g, 'k' || g % 4, g / 4.0, now(), ARRAY[g::text], g % 100 FROM generate_series(3001, 3600) g")
        .await
        .unwrap();
    admin_call(&c, "SELECT coldwire.flush_table('events', wait => true)")
        .await
        .unwrap();
    let msgs = bind_execute(&mut conn, "r", &["2994"]).await;
    assert_eq!(tags(&msgs), "2DCZ", "{msgs:?}");
    assert!(row_has(&msgs, b"k2"), "{msgs:?}");
    let msgs = bind_execute(&mut conn, "r", &["3599"]).await;
    assert!(row_has(&msgs, b"k3"), "{msgs:?}");
}

/// The number of parameters Postgres describes for statement `name` (through coldwire:
/// the client's own), with a row description.
async fn described_params(conn: &mut RawConn, name: &str) -> u16 {
    let body = [name.as_bytes(), b"\0"].concat();
    conn.send(
        &[
            raw::frame(b'D', &[b"S", body.as_slice()].concat()),
            raw::sync(),
        ]
        .concat(),
    )
    .await;
    let msgs = conn.until_ready().await;
    assert_eq!(tags(&msgs), "tTZ", "{msgs:?}");
    u16::from_be_bytes([msgs[0].body[0], msgs[0].body[1]])
}

#[tokio::test]
async fn statements_prepared_before_their_table_was_tiered_read_and_write_every_row() {
    let db = create_db("extstale");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(&format!(
            "{SCHEMA};
             CREATE VIEW recent AS SELECT id, kind FROM events;
             CREATE TABLE events_archive(id bigint PRIMARY KEY, kind text);
             INSERT INTO events_archive VALUES (1, 'archived');"
        ))
        .await
        .unwrap();
    let url = cluster().url(&db);
    let proxy = Proxy::start(&["--service-url", &url, "--cold-store", &store]).await;

    // An application's connections prepare their statements while the table is plain:
    // tokio-postgres (untyped parameters, described, bound in binary), raw named and
    // unnamed statements, and SQL-level PREPARE.
    let app = proxy.connect(&db).await;
    let count = app
        .prepare("SELECT count(*), sum(amount) FROM events WHERE id > $1")
        .await
        .unwrap();
    let update = app
        .prepare("UPDATE events SET kind = $1 WHERE id = $2")
        .await
        .unwrap();
    let through_view = app
        .prepare("SELECT kind FROM recent WHERE id = $1")
        .await
        .unwrap();
    let archive = app
        .prepare("SELECT kind FROM events_archive WHERE id = $1")
        .await
        .unwrap();
    for _ in 0..2 {
        app.query(&count, &[&0i64]).await.unwrap();
        app.query(&through_view, &[&5i64]).await.unwrap();
    }
    let mut conn = RawConn::ready(proxy.addr, &db).await;
    for sql in [
        "PREPARE r AS SELECT count(*) FROM events",
        "PREPARE w(bigint) AS UPDATE events SET kind = 'w' WHERE id = $1",
    ] {
        conn.send(&raw::query(sql)).await;
        assert_eq!(tags(&conn.until_ready().await), "CZ");
    }
    // ... and SQL-level PREPARE sent in the extended protocol, as psycopg sends every
    // statement.
    for sql in [
        "PREPARE pr AS SELECT count(*) FROM events",
        "PREPARE pw(bigint) AS UPDATE events SET kind = 'pw' WHERE id = $1",
    ] {
        let msgs = parse_bind_execute(&mut conn, "", sql, &[]).await;
        assert_eq!(tags(&msgs), "12CZ", "{sql}: {msgs:?}");
    }
    // (A simple Query would replace the unnamed statement: none follows it.)
    let read = "SELECT kind FROM events WHERE id = $1";
    for name in ["q", "q2", ""] {
        let msgs = parse_bind_execute(&mut conn, name, read, &["5"]).await;
        assert_eq!(tags(&msgs), "12DCZ", "{msgs:?}");
    }

    // Then the table is tiered and flushed: 2,800 of its 3,000 rows go cold.
    let admin = proxy.connect(&db).await;
    admin_call(&admin, r#"SELECT coldwire.tier_table('events', '{"hot_row_limit": 200, "min_flush_rows": 100, "auto_flush": false}')"#)
        .await
        .unwrap();
    admin_call(
        &admin,
        "SELECT coldwire.flush_table('events', wait => true)",
    )
    .await
    .unwrap();
    let heap: i64 = direct
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(heap, 200);

    // The statements prepared before read and write every row.
    let expected = direct
        .query_one(
            "SELECT count(*), sum(amount)::text FROM control WHERE id > 10",
            &[],
        )
        .await
        .unwrap();
    let got = app.query_one(&count, &[&10i64]).await.unwrap();
    assert_eq!(got.get::<_, i64>(0), expected.get::<_, i64>(0));
    let got = app
        .query_one(
            "SELECT sum(amount)::text FROM events WHERE id > $1",
            &[&10i64],
        )
        .await
        .unwrap();
    assert_eq!(got.get::<_, String>(0), expected.get::<_, String>(1));
    assert_eq!(app.execute(&update, &[&"moved", &6i64]).await.unwrap(), 1);
    let kind: String = app.query_one(&through_view, &[&6i64]).await.unwrap().get(0);
    assert_eq!(kind, "moved");
    let kind: String = app.query_one(&archive, &[&1i64]).await.unwrap().get(0);
    assert_eq!(kind, "archived");

    // Named and unnamed statements, bound in groups of their own, read the cold row;
    // coldwire's replacement of the statement leaves no message of its own.
    for name in ["q", ""] {
        let msgs = bind_execute(&mut conn, name, &["7"]).await;
        assert_eq!(tags(&msgs), "2DCZ", "{name}: {msgs:?}");
        assert!(row_has(&msgs, b"k3"), "{name}: {msgs:?}");
    }
    // Its description shows the client's one parameter.
    assert_eq!(described_params(&mut conn, "q").await, 1);

    // An error ahead of the Bind in its group makes Postgres skip coldwire's replacement
    // too: the statement is replaced at its next Bind.
    conn.send(
        &[
            raw::parse("z", "SELECT 1/0"),
            raw::bind("z", &[]),
            raw::execute(),
            raw::bind("q2", &["9"]),
            raw::execute(),
            raw::sync(),
        ]
        .concat(),
    )
    .await;
    let msgs = conn.until_ready().await;
    assert_eq!(tags(&msgs), "1EZ", "{msgs:?}");
    let msgs = bind_execute(&mut conn, "q2", &["9"]).await;
    assert_eq!(tags(&msgs), "2DCZ", "{msgs:?}");
    assert!(row_has(&msgs, b"k1"), "{msgs:?}");

    // SQL-level EXECUTE: the write is planned (its row is cold), the read refused, as
    // its PREPARE would be now, rather than counting the hot rows.
    conn.send(&raw::query("EXECUTE w(11)")).await;
    let msgs = conn.until_ready().await;
    assert_eq!(tags(&msgs), "CZ", "{msgs:?}");
    let kind: String = app
        .query_one(&through_view, &[&11i64])
        .await
        .unwrap()
        .get(0);
    assert_eq!(kind, "w");
    conn.send(&raw::query("EXECUTE r")).await;
    let msgs = conn.until_ready().await;
    assert_eq!(tags(&msgs), "EZ", "{msgs:?}");
    assert_eq!(msgs[0].field(b'C').as_deref(), Some("0A000"));
    let message = msgs[0].field(b'M').unwrap();
    assert!(message.contains("PREPARE of a read"), "{message}");
    // The same for those prepared in the extended protocol, executed in either.
    let msgs = parse_bind_execute(&mut conn, "", "EXECUTE pr", &[]).await;
    let error = msgs.iter().find(|m| m.tag == b'E');
    assert!(
        error.is_some_and(|e| e.field(b'C').as_deref() == Some("0A000"))
            && !msgs.iter().any(|m| m.tag == b'D'),
        "{msgs:?}"
    );
    conn.send(&raw::query("EXECUTE pr")).await;
    let msgs = conn.until_ready().await;
    assert_eq!(tags(&msgs), "EZ", "{msgs:?}");
    let msgs = parse_bind_execute(&mut conn, "", "EXECUTE pw(12)", &[]).await;
    assert_eq!(tags(&msgs), "12CZ", "{msgs:?}");
    let kind: String = app
        .query_one("SELECT kind FROM events WHERE id = 12", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(kind, "pw");
    // A PREPARE in a Parse that coldwire plans (its text holds a tiered table's name)
    // and sends unchanged is followed too.
    let msgs = parse_bind_execute(
        &mut conn,
        "",
        "PREPARE pa AS SELECT count(*) FROM events_archive",
        &[],
    )
    .await;
    assert_eq!(tags(&msgs), "12CZ", "{msgs:?}");
    admin_call(&admin, r#"SELECT coldwire.tier_table('events_archive', '{"hot_row_limit": 0, "min_flush_rows": 1, "auto_flush": false}')"#)
        .await
        .unwrap();
    admin_call(
        &admin,
        "SELECT coldwire.flush_table('events_archive', wait => true)",
    )
    .await
    .unwrap();
    let heap: i64 = direct
        .query_one("SELECT count(*) FROM events_archive", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(heap, 0);
    conn.send(&raw::query("EXECUTE pa")).await;
    let msgs = conn.until_ready().await;
    assert_eq!(tags(&msgs), "EZ", "{msgs:?}");
    let rows: i64 = admin
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 3000);
}

#[tokio::test]
async fn statements_prepared_while_their_table_was_tiered_run_after_it_is_untiered() {
    let db = create_db("extuntier");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let (proxy, admin, direct) = flushed_events(&db, &store, &[]).await;
    let app = proxy.connect(&db).await;
    let count = app
        .prepare("SELECT count(*) FROM events WHERE id > $1")
        .await
        .unwrap();
    let update = app
        .prepare("UPDATE events SET kind = $1 WHERE id = $2")
        .await
        .unwrap();
    let got: i64 = app.query_one(&count, &[&0i64]).await.unwrap().get(0);
    assert_eq!(got, 3000);
    let mut conn = RawConn::ready(proxy.addr, &db).await;
    let read = "SELECT kind FROM events WHERE id = $1";
    for name in ["q", ""] {
        let msgs = parse_bind_execute(&mut conn, name, read, &["5"]).await;
        assert!(row_has(&msgs, b"k1"), "{msgs:?}");
    }

    // Every row comes back into the heap, and coldwire's objects for the table go.
    admin_call(&admin, "SELECT coldwire.untier_table('events')")
        .await
        .unwrap();

    // The statements run as the client wrote them.
    let got: i64 = app.query_one(&count, &[&10i64]).await.unwrap().get(0);
    assert_eq!(got, 2990);
    assert_eq!(app.execute(&update, &[&"back", &6i64]).await.unwrap(), 1);
    for name in ["q", ""] {
        let msgs = bind_execute(&mut conn, name, &["6"]).await;
        assert_eq!(tags(&msgs), "2DCZ", "{name}: {msgs:?}");
        assert!(row_has(&msgs, b"back"), "{name}: {msgs:?}");
    }
    assert_eq!(described_params(&mut conn, "q").await, 1);
    let kind: String = direct
        .query_one("SELECT kind FROM events WHERE id = 6", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(kind, "back");
}

#[tokio::test]
async fn a_prepared_read_of_two_tables_reads_the_second_once_it_is_tiered_even_in_aborted_blocks() {
    let db = create_db("extsecond");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let (proxy, admin, direct) = flushed_events(&db, &store, &[]).await;
    direct
        .batch_execute(
            "CREATE TABLE notes(id bigint PRIMARY KEY, note text);
             INSERT INTO notes SELECT g, 'n' || g FROM generate_series(1, 3000, 2) g;",
        )
        .await
        .unwrap();
    // Prepared while only events is tiered: rewritten for events alone.
    let app = proxy.connect(&db).await;
    let joined = app
        .prepare("SELECT count(*) FROM events JOIN notes USING (id) WHERE id > $1")
        .await
        .unwrap();
    let got: i64 = app.query_one(&joined, &[&0i64]).await.unwrap().get(0);
    assert_eq!(got, 1500);
    let mut conn = RawConn::ready(proxy.addr, &db).await;
    let read = "SELECT note FROM notes WHERE id = $1";
    let msgs = parse_bind_execute(&mut conn, "n", read, &["5"]).await;
    assert!(row_has(&msgs, b"n5"), "{msgs:?}");

    admin_call(&admin, r#"SELECT coldwire.tier_table('notes', '{"hot_row_limit": 100, "min_flush_rows": 100, "auto_flush": false}')"#)
        .await
        .unwrap();
    admin_call(&admin, "SELECT coldwire.flush_table('notes', wait => true)")
        .await
        .unwrap();
    let got: i64 = app.query_one(&joined, &[&10i64]).await.unwrap().get(0);
    assert_eq!(got, 1495);

    // The Bind follows a failed statement in the same pipeline, before coldwire knows the
    // block is aborted: Postgres runs coldwire's Close but refuses its Parse (25P02), as
    // it refuses the Bind. After the ROLLBACK the statement is parsed again and reads the
    // cold row.
    conn.send(
        &[
            raw::query("BEGIN"),
            raw::query("SELECT 1/0"),
            raw::bind("n", &["7"]),
            raw::execute(),
            raw::sync(),
        ]
        .concat(),
    )
    .await;
    assert_eq!(tags(&conn.until_ready().await), "CZ");
    assert_eq!(tags(&conn.until_ready().await), "EZ");
    let msgs = conn.until_ready().await;
    assert_eq!(tags(&msgs), "EZ", "{msgs:?}");
    assert_eq!(msgs[0].field(b'C').as_deref(), Some("25P02"), "{msgs:?}");
    conn.send(&raw::query("ROLLBACK")).await;
    assert_eq!(tags(&conn.until_ready().await), "CZ");
    let msgs = bind_execute(&mut conn, "n", &["7"]).await;
    assert_eq!(tags(&msgs), "2DCZ", "{msgs:?}");
    assert!(row_has(&msgs, b"n7"), "{msgs:?}");
}

/// The SQLSTATE of a failed statement.
fn code_of(e: &tokio_postgres::Error) -> Option<&str> {
    e.code().map(tokio_postgres::error::SqlState::code)
}

/// The one count a statement returns.
async fn counted(
    c: &tokio_postgres::Client,
    statement: &(impl tokio_postgres::ToStatement + ?Sized),
) -> Result<i64, tokio_postgres::Error> {
    Ok(c.query_one(statement, &[&0i64]).await?.get(0))
}

#[tokio::test]
async fn while_the_catalog_cannot_be_read_statements_on_tiered_tables_fail_and_others_run() {
    let db = create_db("extoutage");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(&format!(
            "{SCHEMA};
             CREATE TABLE plain_t AS SELECT g AS id FROM generate_series(1, 50) g;
             CREATE TABLE events_log AS SELECT g::bigint AS id FROM generate_series(1, 40) g;"
        ))
        .await
        .unwrap();
    // coldwire reads its catalog as a role of its own, which the test can lock out.
    let service_role = format!("{db}_service");
    common::psql_admin(
        "postgres",
        &format!("CREATE ROLE {service_role} LOGIN SUPERUSER"),
    );
    let service = format!(
        "postgres://{service_role}@127.0.0.1:{}/{db}",
        cluster().port()
    );
    let proxy = Proxy::start(&["--service-url", &service, "--cold-store", &store]).await;
    let app = proxy.connect(&db).await;
    let read = "SELECT count(*) FROM events WHERE id > $1";
    // Prepared while the table is plain (relayed as written), first bound after the
    // table was tiered while the catalog cannot be read.
    let before = app.prepare(read).await.unwrap();
    assert_eq!(counted(&app, &before).await.unwrap(), 3000);
    // So is an SQL-level PREPARE, first executed while the catalog cannot be read.
    let mut sql_conn = RawConn::ready(proxy.addr, &db).await;
    sql_conn
        .send(&raw::query("PREPARE r AS SELECT count(*) FROM events"))
        .await;
    assert_eq!(tags(&sql_conn.until_ready().await), "CZ");
    admin_call(&app, r#"SELECT coldwire.tier_table('events', '{"hot_row_limit": 200, "min_flush_rows": 100, "auto_flush": false}')"#)
        .await
        .unwrap();
    admin_call(&app, "SELECT coldwire.flush_table('events', wait => true)")
        .await
        .unwrap();
    // Prepared while the table is tiered (rewritten).
    let during = app
        .prepare("SELECT count(*) FROM events WHERE id > $1 AND kind IS NOT NULL")
        .await
        .unwrap();
    assert_eq!(counted(&app, &during).await.unwrap(), 3000);
    // A plain table whose name holds the tiered one's, its statement checked against the
    // names coldwire read last.
    let log = app
        .prepare("SELECT count(*) FROM events_log WHERE id > $1")
        .await
        .unwrap();
    assert_eq!(counted(&app, &log).await.unwrap(), 40);
    let heap: i64 = direct
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert!(heap <= 200, "{heap} rows left hot");
    let mut conn = RawConn::ready(proxy.addr, &db).await;

    // The catalog cannot be read: the service role may no longer log in, and then its
    // connections are gone.
    common::psql_admin("postgres", &format!("ALTER ROLE {service_role} NOLOGIN"));
    common::psql_admin(
        "postgres",
        &format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{service_role}'"
        ),
    );
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;

    // A Bind of the statement relayed before the tiering, planned again (more than a
    // second after the last failure to read the catalog: none yet).
    let e = counted(&app, &before).await.unwrap_err();
    assert_eq!(
        code_of(&e),
        Some("58030"),
        "a statement relayed before: {e:?}"
    );
    // An SQL EXECUTE while the catalog cannot be read.
    sql_conn.send(&raw::query("EXECUTE r")).await;
    let msgs = sql_conn.until_ready().await;
    assert_eq!(tags(&msgs), "EZ", "{msgs:?}");
    assert_eq!(msgs[0].field(b'C').as_deref(), Some("58030"), "{msgs:?}");

    // Statements that name the tiered table fail, whichever way they come; none reads
    // the hot rows alone.
    for _ in 0..2 {
        let e = counted(&app, read).await.unwrap_err();
        assert_eq!(code_of(&e), Some("58030"), "a fresh Parse: {e:?}");
        let e = counted(&app, &before).await.unwrap_err();
        assert_eq!(
            code_of(&e),
            Some("58030"),
            "a statement relayed before: {e:?}"
        );
        let e = counted(&app, &during).await.unwrap_err();
        assert_eq!(code_of(&e), Some("58030"), "a rewritten statement: {e:?}");
        let e = app
            .simple_query("SELECT count(*) FROM events")
            .await
            .unwrap_err();
        assert_eq!(code_of(&e), Some("58030"), "a simple Query: {e:?}");
        // Those that name no tiered table run, one whose text holds its name among them.
        assert_eq!(counted(&app, &log).await.unwrap(), 40);
        let plain: i64 = app
            .query_one("SELECT count(*) FROM plain_t WHERE id > $1", &[&0i32])
            .await
            .unwrap()
            .get(0);
        assert_eq!(plain, 50);
        app.batch_execute("BEGIN; SELECT count(*) FROM plain_t; COMMIT")
            .await
            .unwrap();
    }
    // In protocol order: the statements before it in the group run, the refused Parse
    // answers with the error, and nothing is prepared under its name.
    conn.send(
        &[
            raw::parse("", "SELECT count(*) FROM plain_t"),
            raw::bind("", &[]),
            raw::execute(),
            raw::parse("n1", "SELECT count(*) FROM events"),
            raw::bind("n1", &[]),
            raw::execute(),
            raw::sync(),
        ]
        .concat(),
    )
    .await;
    let msgs = conn.until_ready().await;
    assert_eq!(tags(&msgs), "12DCEZ", "{msgs:?}");
    let error = msgs.iter().find(|m| m.tag == b'E').unwrap();
    assert_eq!(error.field(b'C').as_deref(), Some("58030"));
    assert!(row_has(&msgs, b"50"), "{msgs:?}");

    // The catalog can be read again: every statement reads every row (once a second
    // passed since the last failure to read it), the refused name is free to be parsed.
    common::psql_admin("postgres", &format!("ALTER ROLE {service_role} LOGIN"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let mut served = true;
        for statement in [&during, &before] {
            served &= counted(&app, statement).await.is_ok();
        }
        if served && counted(&app, read).await.is_ok() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the catalog is not read again"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(counted(&app, &during).await.unwrap(), 3000);
    assert_eq!(counted(&app, &before).await.unwrap(), 3000);
    assert_eq!(counted(&app, read).await.unwrap(), 3000);
    let msgs = parse_bind_execute(&mut conn, "n1", "SELECT count(*) FROM events", &[]).await;
    assert_eq!(tags(&msgs), "12DCZ", "{msgs:?}");
    assert!(row_has(&msgs, b"3000"), "{msgs:?}");
}
