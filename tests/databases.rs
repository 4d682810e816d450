//! Every database of the server (DESIGN §3): a session is planned only against the
//! catalog of its own database; `tier_table` works in whatever database the session is
//! on (the first one there migrates a catalog into it); same-named tables of two databases
//! are tiered independently, each matching its own control table; a third database with a
//! plain table of the same name is relayed untouched (reads, writes, DDL, COPY, pgbench's
//! TPC-B); a restarted proxy serves every tiered database again; two proxies run each job
//! once; a database the service role cannot reach gets a clear error at `tier_table`.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{
    admin_call, binary_rows, cluster, connect_direct, create_db, pg_bin, psql_admin, simple_rows,
    Proxy,
};

/// `events` and its control, `rows` rows of kind `kind`.
fn setup(rows: i64, kind: &str) -> String {
    format!(
        "CREATE TABLE events(id bigint PRIMARY KEY, kind text NOT NULL, n int);
         CREATE TABLE control(LIKE events INCLUDING ALL);
         INSERT INTO events SELECT g, '{kind}', -g FROM generate_series(1, {rows}) g;
         INSERT INTO control SELECT * FROM events;"
    )
}

fn pgbench(args: &[&str]) -> String {
    let out = Command::new(pg_bin("pgbench"))
        .args(args)
        .env_remove("PGSSLMODE")
        .output()
        .expect("run pgbench");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "pgbench {args:?}: {text}");
    text
}

fn policy(hot: i64, auto: bool) -> String {
    format!(
        r#"{{"hot_row_limit": {hot}, "min_flush_rows": 100, "auto_flush": {auto}, "check_interval": "1s"}}"#
    )
}

async fn tier(c: &tokio_postgres::Client, table: &str, policy: &str) {
    admin_call(
        c,
        &format!("SELECT coldwire.tier_table('{table}', '{policy}')"),
    )
    .await
    .unwrap();
}

async fn flush(c: &tokio_postgres::Client, table: &str) {
    let job = admin_call(
        c,
        &format!("SELECT coldwire.flush_table('{table}', wait => true)"),
    )
    .await
    .unwrap();
    assert_eq!(job["state"], "completed", "{job}");
}

async fn count(c: &tokio_postgres::Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).await.unwrap().get(0)
}

/// The same statements on `events` through coldwire and on `control`: the same outcome
/// and, after all of them, the same rows.
async fn matches_control(c: &tokio_postgres::Client, first: i64) {
    for sql in [
        format!("UPDATE {{t}} SET kind = 'updated' WHERE id = {first} RETURNING id, kind, n"),
        format!("DELETE FROM {{t}} WHERE id = {} RETURNING *", first + 1),
        format!("/* c */ UPDATE {{t}} SET n = n * 2 WHERE id BETWEEN {} AND {}", first + 5, first + 30),
        format!("INSERT INTO {{t}} VALUES ({}, 'up', 0) ON CONFLICT (id) DO UPDATE SET kind = 'upserted'", first + 40),
        "SELECT count(*), sum(n), min(kind), max(kind) FROM {t}".to_owned(),
    ] {
        let on = |t: &str| sql.replace("{t}", t);
        let expected = simple_rows(c, &on("control")).await.unwrap();
        assert_eq!(simple_rows(c, &on("events")).await.unwrap(), expected, "{sql}");
    }
    let all = "SELECT * FROM {t} ORDER BY id";
    assert_eq!(
        binary_rows(c, &all.replace("{t}", "events"), &[])
            .await
            .unwrap(),
        binary_rows(c, &all.replace("{t}", "control"), &[])
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn same_named_tables_of_two_databases_are_tiered_independently_and_a_third_is_untouched() {
    let (a, b, c) = (create_db("dbs_a"), create_db("dbs_b"), create_db("dbs_c"));
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    connect_direct(&a)
        .await
        .batch_execute(&setup(2000, "a"))
        .await
        .unwrap();
    connect_direct(&b)
        .await
        .batch_execute(&setup(1500, "b"))
        .await
        .unwrap();
    let c_direct = connect_direct(&c).await;
    c_direct
        .batch_execute(
            "CREATE TABLE events(id bigint PRIMARY KEY, kind text NOT NULL, n int);
             INSERT INTO events SELECT g, 'c', -g FROM generate_series(1, 300) g",
        )
        .await
        .unwrap();
    let url = cluster().url(&a);
    let proxy = Proxy::start(&["--service-url", &url, "--cold-store", &store]).await;
    let host = proxy.addr.ip().to_string();
    let port = proxy.addr.port().to_string();
    let conn = ["-h", host.as_str(), "-p", port.as_str(), "-U", "postgres"];
    pgbench(&[&conn[..], &["-i", "-s", "1", "-q", &c]].concat());

    // Tiered in a and, through a session on b, in b: b gets a catalog of its own.
    let on_a = proxy.connect(&a).await;
    let on_b = proxy.connect(&b).await;
    tier(&on_a, "events", &policy(100, false)).await;
    tier(&on_b, "events", &policy(200, false)).await;
    flush(&on_a, "events").await;
    flush(&on_b, "events").await;
    let (a_direct, b_direct) = (connect_direct(&a).await, connect_direct(&b).await);
    assert!(count(&a_direct, "SELECT count(*) FROM events").await <= 100);
    let b_hot = count(&b_direct, "SELECT count(*) FROM events").await;
    assert!((101..=200).contains(&b_hot), "{b_hot} hot rows in b");
    // Each database's catalog knows its own table only, and their objects never mix.
    for (direct, folder) in [
        (&a_direct, "public.events".to_owned()),
        (&b_direct, format!("{b}/public.events")),
    ] {
        let rows = simple_rows(
            direct,
            "SELECT table_name, storage_prefix FROM coldwire.tables",
        )
        .await
        .unwrap();
        assert_eq!(
            rows,
            vec![vec![Some("events".to_owned()), Some(folder.clone())]]
        );
        assert!(dir.path().join(&folder).is_dir(), "{folder}");
    }

    matches_control(&on_a, 10).await;
    matches_control(&on_b, 20).await;
    assert_eq!(
        simple_rows(
            &on_b,
            "SELECT min(kind), count(*) FROM events WHERE kind <> 'updated' AND kind <> 'upserted'"
        )
        .await
        .unwrap(),
        vec![vec![Some("b".to_owned()), Some("1497".to_owned())]]
    );

    // The third database: relayed untouched, and left without a catalog.
    let on_c = proxy.connect(&c).await;
    assert_eq!(
        simple_rows(&on_c, "SELECT count(*), min(kind), sum(n) FROM events")
            .await
            .unwrap(),
        vec![vec![
            Some("300".to_owned()),
            Some("c".to_owned()),
            Some("-45150".to_owned())
        ]]
    );
    let n: i64 = on_c
        .query_one("SELECT count(*) FROM events WHERE id > $1", &[&100i64])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 200);
    assert_eq!(
        on_c.execute("UPDATE events SET kind = 'updated' WHERE id = 5", &[])
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        on_c.execute("/* c */ DELETE FROM events WHERE id = 1500", &[])
            .await
            .unwrap(),
        0
    );
    // DDL and COPY that coldwire refuses on a tiered table are this database's business.
    on_c.batch_execute(
        "ALTER TABLE events ALTER COLUMN n TYPE bigint; ALTER TABLE events RENAME COLUMN kind TO k",
    )
    .await
    .unwrap();
    let copy_file = format!("/tmp/coldwire-dbs-c-{}.csv", std::process::id());
    on_c.batch_execute(&format!("COPY events TO '{copy_file}'"))
        .await
        .unwrap();
    let _ = std::fs::remove_file(&copy_file);
    let e = admin_call(&on_c, "SELECT coldwire.flush_table('events')")
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("no table of database"), "{e:?}");
    assert_eq!(
        simple_rows(&c_direct, "SELECT to_regnamespace('coldwire') IS NULL")
            .await
            .unwrap(),
        vec![vec![Some("t".to_owned())]]
    );
    for mode in ["prepared", "simple"] {
        let out = pgbench(
            &[
                &conn[..],
                &["-c", "2", "-j", "2", "-T", "2", "-n", "-M", mode, &c],
            ]
            .concat(),
        );
        assert!(out.contains("number of failed transactions: 0"), "{out}");
    }
    let sums = c_direct
        .query_one(
            "SELECT (SELECT sum(abalance) FROM pgbench_accounts), (SELECT sum(bbalance) FROM pgbench_branches), \
             (SELECT sum(delta) FROM pgbench_history)",
            &[],
        )
        .await
        .unwrap();
    let (accounts, branches, history): (i64, i64, i64) = (sums.get(0), sums.get(1), sums.get(2));
    assert_eq!((accounts, branches), (history, history));
}

#[tokio::test]
async fn a_restarted_proxy_serves_every_tiered_database_again() {
    let (a, b) = (create_db("dbs_restart_a"), create_db("dbs_restart_b"));
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    connect_direct(&a)
        .await
        .batch_execute(&setup(1000, "a"))
        .await
        .unwrap();
    connect_direct(&b)
        .await
        .batch_execute(&setup(1000, "b"))
        .await
        .unwrap();
    let url = cluster().url(&a);
    let args = [
        "--service-url",
        url.as_str(),
        "--cold-store",
        store.as_str(),
    ];
    let proxy = Proxy::start(&args).await;
    tier(&proxy.connect(&a).await, "events", &policy(100, false)).await;
    let on_b = proxy.connect(&b).await;
    tier(&on_b, "events", &policy(100, true)).await;
    flush(&on_b, "events").await;
    drop(on_b);
    drop(proxy);

    let proxy = Proxy::start(&args).await;
    let on_b = proxy.connect(&b).await;
    // Reads in b are merged again at once.
    assert_eq!(count(&on_b, "SELECT count(*) FROM events").await, 1000);
    let b_direct = connect_direct(&b).await;
    assert!(count(&b_direct, "SELECT count(*) FROM events").await <= 100);
    matches_control(&on_b, 30).await;
    // b's auto flush runs again.
    let segments = "SELECT count(*) FROM coldwire.segments WHERE status = 'active'";
    let before = count(&b_direct, segments).await;
    on_b.batch_execute(
        "INSERT INTO events SELECT g, 'later', g FROM generate_series(2001, 2600) g;
         INSERT INTO control SELECT g, 'later', g FROM generate_series(2001, 2600) g",
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while count(&b_direct, segments).await == before {
        assert!(
            Instant::now() < deadline,
            "b's auto flush did not run after the restart"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    matches_control(&on_b, 40).await;
    assert_eq!(
        count(&proxy.connect(&a).await, "SELECT count(*) FROM events").await,
        1000
    );
}

#[tokio::test]
async fn two_proxies_in_front_of_two_databases_run_each_job_once() {
    let (a, b) = (create_db("dbs_two_a"), create_db("dbs_two_b"));
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    connect_direct(&a)
        .await
        .batch_execute(&setup(500, "a"))
        .await
        .unwrap();
    connect_direct(&b)
        .await
        .batch_execute(&setup(500, "b"))
        .await
        .unwrap();
    let url = cluster().url(&a);
    let args = [
        "--service-url",
        url.as_str(),
        "--cold-store",
        store.as_str(),
    ];
    let first = Proxy::start(&args).await;
    let second = Proxy::start(&args).await;
    // A session on b through the second proxy, open before b has a catalog.
    let early = second.connect(&b).await;
    tier(&first.connect(&a).await, "events", &policy(100, true)).await;
    tier(&first.connect(&b).await, "events", &policy(100, true)).await;
    flush(&first.connect(&b).await, "events").await;
    // The second proxy serves b within a second or two, the early session included.
    let b_direct = connect_direct(&b).await;
    assert!(count(&b_direct, "SELECT count(*) FROM events").await <= 100);
    let deadline = Instant::now() + Duration::from_secs(20);
    while count(&early, "SELECT count(*) FROM events").await != 500 {
        assert!(Instant::now() < deadline, "the second proxy never served b");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut next = 1000;
    for round in 0..6 {
        for db in [&a, &b] {
            let proxy = if round % 2 == 0 { &first } else { &second };
            let c = proxy.connect(db).await;
            c.batch_execute(&format!(
                "INSERT INTO events SELECT g, 'more', g FROM generate_series({next}, {}) g;
                 INSERT INTO control SELECT g, 'more', g FROM generate_series({next}, {}) g",
                next + 299,
                next + 299
            ))
            .await
            .unwrap();
            flush(&c, "events").await;
        }
        next += 300;
    }
    for db in [&a, &b] {
        let direct = connect_direct(db).await;
        let jobs = simple_rows(
            &direct,
            "SELECT count(*), count(*) FILTER (WHERE state <> 'completed' OR attempt <> 1), \
                    count(DISTINCT claimed_by) FROM coldwire.jobs",
        )
        .await
        .unwrap();
        let row = &jobs[0];
        assert!(
            row[0].as_deref().unwrap().parse::<i64>().unwrap() >= 6,
            "{jobs:?}"
        );
        assert_eq!(row[1].as_deref(), Some("0"), "every job ran once: {jobs:?}");
        matches_control(&first.connect(db).await, 7).await;
        matches_control(&second.connect(db).await, 50).await;
    }
}

#[tokio::test]
async fn a_database_the_service_role_cannot_reach_gets_a_clear_error() {
    let a = create_db("dbs_role_a");
    let locked = create_db("dbs_role_locked");
    let role = format!("{a}_svc");
    psql_admin("postgres", &format!("CREATE ROLE {role} LOGIN"));
    psql_admin("postgres", &format!("ALTER DATABASE {a} OWNER TO {role}"));
    psql_admin(
        "postgres",
        &format!("REVOKE CONNECT ON DATABASE {locked} FROM PUBLIC"),
    );
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let url = format!("postgres://{role}@127.0.0.1:{}/{a}", cluster().port());
    let proxy = Proxy::start(&["--service-url", &url, "--cold-store", &store]).await;
    let c = proxy.connect(&locked).await;
    c.batch_execute("CREATE TABLE t(id bigint PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'x')")
        .await
        .unwrap();
    let e = admin_call(&c, "SELECT coldwire.tier_table('t')")
        .await
        .unwrap_err();
    let text = format!("{e:?}");
    assert!(text.contains("08001"), "{text}");
    assert!(text.contains(&locked) && text.contains(&role), "{text}");
    // The session and the database are relayed as before.
    assert_eq!(
        simple_rows(&c, "UPDATE t SET v = 'y' RETURNING v")
            .await
            .unwrap(),
        vec![vec![Some("y".to_owned())]]
    );
}

#[tokio::test]
async fn databases_beyond_max_databases_are_refused_with_a_hint() {
    let (a, b) = (create_db("dbs_max_a"), create_db("dbs_max_b"));
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    connect_direct(&b)
        .await
        .batch_execute(&setup(10, "b"))
        .await
        .unwrap();
    let url = cluster().url(&a);
    let proxy = Proxy::start(&[
        "--service-url",
        &url,
        "--cold-store",
        &store,
        "--max-databases",
        "1",
    ])
    .await;
    let on_b = proxy.connect(&b).await;
    let e = admin_call(&on_b, "SELECT coldwire.tier_table('events')")
        .await
        .unwrap_err();
    let text = format!("{e:?}");
    assert!(
        text.contains("54000") && text.contains("max_databases"),
        "{text}"
    );
    assert_eq!(count(&on_b, "SELECT count(*) FROM events").await, 10);
}

/// A proxy without service_url cannot read cold rows: a session on a database with tiered
/// tables is refused before its first statement runs (never answered with the hot rows
/// alone), in either protocol and from psql, naming the tables, and so is the next
/// statement of a session opened before the table was tiered; so is one through a proxy
/// whose cold store is another; a database without any is relayed; once the table is
/// untiered, the database is relayed too.
#[tokio::test]
async fn a_proxy_without_service_url_refuses_sessions_on_databases_with_tiered_tables() {
    let (tiered, plain) = (create_db("dbs_norelay_t"), create_db("dbs_norelay_p"));
    let dir = tempfile::tempdir().unwrap();
    connect_direct(&tiered)
        .await
        .batch_execute(&setup(1000, "a"))
        .await
        .unwrap();
    connect_direct(&plain)
        .await
        .batch_execute(&setup(1000, "b"))
        .await
        .unwrap();
    let relay = Proxy::start(&[]).await;
    // A session opened before the table is tiered.
    let early = relay.connect(&tiered).await;
    assert_eq!(count(&early, "SELECT count(*) FROM events").await, 1000);

    let tiering = Proxy::tiering(&tiered, dir.path(), &[]).await;
    let c = tiering.connect(&tiered).await;
    tier(&c, "events", &policy(100, false)).await;
    flush(&c, "events").await;
    let direct = connect_direct(&tiered).await;
    assert!(count(&direct, "SELECT count(*) FROM events").await <= 100);

    let refused = |e: tokio_postgres::Error| {
        let db = e
            .as_db_error()
            .unwrap_or_else(|| panic!("not a server error: {e}"));
        assert_eq!(db.code().code(), "55000", "{db:?}");
        assert_eq!(db.severity(), "FATAL", "{db:?}");
        assert!(db.message().contains("has tiered tables"), "{db:?}");
        assert!(db.message().contains(&tiered), "{db:?}");
        assert_eq!(db.detail(), Some("Tiered: events."), "{db:?}");
        assert!(
            db.hint().is_some_and(|h| h.contains("--service-url")),
            "{db:?}"
        );
    };
    // The early session's next statement is refused too (the flush waited until its
    // check was out of date).
    refused(
        early
            .query_one("SELECT count(*) FROM events", &[])
            .await
            .unwrap_err(),
    );
    let simple = relay.connect(&tiered).await;
    refused(
        simple
            .simple_query("/* hot rows only? */ SELECT count(*) FROM events")
            .await
            .unwrap_err(),
    );
    // The proxy closed the session after its FATAL; the client's connection task may
    // see the end of the stream a moment after the error it read first.
    for _ in 0..100 {
        if simple.is_closed() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(simple.is_closed());
    let extended = relay.connect(&tiered).await;
    refused(
        extended
            .query_one("SELECT count(*) FROM events WHERE id > $1", &[&0_i64])
            .await
            .unwrap_err(),
    );
    let psql = Command::new(pg_bin("psql"))
        .args([
            relay.url("postgres", &tiered).as_str(),
            "-XAtc",
            "SELECT count(*) FROM events",
        ])
        .env_remove("PGSSLMODE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&psql.stderr);
    assert!(!psql.status.success(), "{stderr}");
    assert!(psql.stdout.is_empty(), "psql printed a result: {stderr}");
    assert!(stderr.contains("has tiered tables"), "{stderr}");
    assert!(relay.log_contains("session refused").await);

    // A database without tiered tables is relayed as before; its checks never run in
    // a transaction block (where SET TRANSACTION must come first).
    let on_plain = relay.connect(&plain).await;
    assert_eq!(count(&on_plain, "SELECT count(*) FROM events").await, 1000);
    on_plain.batch_execute("BEGIN").await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    on_plain
        .batch_execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
        .await
        .unwrap();
    assert_eq!(count(&on_plain, "SELECT count(*) FROM events").await, 1000);
    on_plain.batch_execute("COMMIT").await.unwrap();
    assert_eq!(count(&on_plain, "SELECT count(*) FROM events").await, 1000);

    // A proxy with a service connection but another cold store cannot serve it either.
    let other_store = tempfile::tempdir().unwrap();
    let other = Proxy::tiering(&plain, other_store.path(), &[]).await;
    let err = other
        .connect(&tiered)
        .await
        .simple_query("SELECT count(*) FROM events")
        .await
        .unwrap_err();
    let db = err.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "55000", "{db:?}");
    assert!(
        db.message().ends_with("it does not serve that database"),
        "{db:?}"
    );
    assert!(
        other
            .log_contains("cannot serve its database's tiered tables")
            .await
    );
    // The proxy that serves it reads it whole.
    assert_eq!(count(&c, "SELECT count(*) FROM events").await, 1000);

    // Untiered, the table is whole in Postgres and the database is relayed.
    admin_call(&c, "SELECT coldwire.untier_table('events')")
        .await
        .unwrap();
    let after = relay.connect(&tiered).await;
    assert_eq!(count(&after, "SELECT count(*) FROM events").await, 1000);
}
