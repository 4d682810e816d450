//! The operator's command line against a real Postgres, with no proxy running: `coldwire
//! tier`, `policy`, `flush` (which then runs the job itself), `status` and `untier`, their
//! output and exit codes.

mod common;

use common::{cluster, connect_direct, create_db};
use serde_json::Value;

struct Outcome {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn coldwire(db: &str, store: &std::path::Path, args: &[&str]) -> Outcome {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_coldwire"))
        .args(args)
        .args([
            "--service-url",
            &cluster().url(db),
            "--cold-store",
            &format!("file://{}", store.display()),
        ])
        .env("RUST_LOG", "coldwire=warn")
        .output()
        .await
        .expect("run coldwire");
    Outcome {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The policy of the tests' table: 100 rows stay hot, flushed on request only.
const SMALL_POLICY: &str = r#"{"hot_row_limit": 100, "min_flush_rows": 100, "auto_flush": false}"#;

/// A new database with table `t` of 1000 rows, and a direct connection to it.
async fn with_table(prefix: &str) -> (String, tokio_postgres::Client) {
    let db = create_db(prefix);
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(
            "CREATE TABLE t(id bigint PRIMARY KEY, v text);
             INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 1000) g;",
        )
        .await
        .unwrap();
    (db, direct)
}

async fn count(c: &tokio_postgres::Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).await.unwrap().get(0)
}

#[tokio::test]
async fn operators_tier_flush_inspect_and_untier_from_the_command_line() {
    let (db, direct) = with_table("cli").await;
    let store = tempfile::tempdir().unwrap();
    let run = |args: &'static [&'static str]| coldwire(&db, store.path(), args);

    let none = run(&["status"]).await;
    assert_eq!(none.code, 1, "{}", none.stderr);
    assert!(
        none.stderr.contains("no coldwire catalog"),
        "{}",
        none.stderr
    );

    let tiered = run(&["tier", "t", "--policy", SMALL_POLICY]).await;
    assert_eq!(tiered.code, 0, "{}", tiered.stderr);
    assert!(
        tiered.stdout.contains(
            "tiered public.t (id 1): 1000 rows recorded; flush beyond 100 rows; on request only"
        ),
        "{}",
        tiered.stdout
    );
    let again = run(&["tier", "t"]).await;
    assert_eq!(again.code, 1);
    assert!(again.stderr.contains("already tiered"), "{}", again.stderr);

    let bad = run(&["policy", "t", r#"{"hot_row_limit": -1}"#]).await;
    assert_eq!(bad.code, 1);
    assert!(
        bad.stderr.contains("\"hot_row_limit\"")
            && bad.stderr.contains("SQLSTATE 22023")
            && bad.stderr.contains("HINT: policy keys"),
        "{}",
        bad.stderr
    );
    let not_json = run(&["policy", "t", "{hot_row_limit: 5}"]).await;
    assert_eq!(not_json.code, 1);
    assert!(not_json.stderr.contains("not JSON"), "{}", not_json.stderr);

    // No proxy runs: the command runs the job it queued, and says what it did.
    let flushed = run(&["flush", "t"]).await;
    assert_eq!(flushed.code, 0, "{}", flushed.stderr);
    assert!(
        flushed
            .stdout
            .contains("flush of public.t completed: 900 rows in 1 segments"),
        "{}",
        flushed.stdout
    );
    assert_eq!(count(&direct, "SELECT count(*) FROM t").await, 100);

    // Queued without waiting, then run by the next flush command (the table's one job).
    direct
        .batch_execute("INSERT INTO t SELECT g, 'w' FROM generate_series(1001, 1300) g")
        .await
        .unwrap();
    let queued = run(&["flush", "t", "--no-wait"]).await;
    assert_eq!(queued.code, 0, "{}", queued.stderr);
    assert!(
        queued.stdout.contains("flush of public.t queued: job 2"),
        "{}",
        queued.stdout
    );
    assert_eq!(count(&direct, "SELECT count(*) FROM t").await, 400);
    let resumed = run(&["flush", "t"]).await;
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert!(resumed.stdout.contains("300 rows"), "{}", resumed.stdout);

    let status = run(&["status", "--exact"]).await;
    assert_eq!(status.code, 0, "{}", status.stderr);
    let line = status
        .stdout
        .lines()
        .find(|l| l.starts_with("public.t"))
        .unwrap_or_else(|| panic!("{}", status.stdout));
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        &cells[..5],
        ["public.t", "active", "100", "100", "1200"],
        "{}",
        status.stdout
    );
    let json = run(&["status", "--exact", "--json"]).await;
    let parsed: Value = serde_json::from_str(&json.stdout).unwrap();
    let table = &parsed["tables"][0];
    assert_eq!(
        (
            &table["hot_rows"],
            &table["cold_rows"],
            &table["segments"],
            &table["counts"]
        ),
        (
            &Value::from(100),
            &Value::from(1200),
            &Value::from(2),
            &Value::from("exact")
        ),
        "{parsed}"
    );
    assert_eq!(parsed["jobs"], Value::Array(vec![]));

    let untiered = run(&["untier", "t"]).await;
    assert_eq!(untiered.code, 0, "{}", untiered.stderr);
    assert!(
        untiered
            .stdout
            .contains("untiered public.t: 1200 rows back in the heap from 2 segments"),
        "{}",
        untiered.stdout
    );
    assert_eq!(count(&direct, "SELECT count(*) FROM t").await, 1300);

    let unknown = run(&["flush", "nope"]).await;
    assert_eq!(unknown.code, 1);
    assert!(unknown.stderr.contains("42P01"), "{}", unknown.stderr);
    let usage = run(&["flush"]).await;
    assert_eq!(usage.code, 2, "a usage error: {}", usage.stderr);
}

#[tokio::test]
async fn commands_check_the_cold_store_and_the_database_as_a_proxy_does() {
    let db = create_db("clistore");
    let other_db = create_db("clistore_b");
    let store = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let table = "CREATE TABLE t(id bigint PRIMARY KEY, v text);
                 INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 500) g;";
    let direct = connect_direct(&db).await;
    direct.batch_execute(table).await.unwrap();
    let other = connect_direct(&other_db).await;
    other.batch_execute(table).await.unwrap();
    let policy = SMALL_POLICY;

    let tiered = coldwire(&db, store.path(), &["tier", "t", "--policy", policy]).await;
    assert_eq!(tiered.code, 0, "{}", tiered.stderr);
    // The catalog records its cold store: a command with another one is refused.
    let wrong = coldwire(&db, elsewhere.path(), &["flush", "t"]).await;
    assert_eq!(wrong.code, 1, "{}", wrong.stdout);
    assert!(
        wrong.stderr.contains("another cold store"),
        "{}",
        wrong.stderr
    );
    assert_eq!(
        count(&direct, "SELECT count(*) FROM coldwire.jobs").await,
        0
    );

    // Another database, named with --database: served as the proxy serves it, its
    // tables' segments in a folder named after it, listed in service_url's database.
    let in_other = |args: &[&str]| {
        let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        all.extend(["--database".to_owned(), other_db.clone()]);
        let (db, store) = (db.clone(), store.path().to_owned());
        async move {
            let all: Vec<&str> = all.iter().map(String::as_str).collect();
            coldwire(&db, &store, &all).await
        }
    };
    let tiered = in_other(&["tier", "t", "--policy", policy]).await;
    assert_eq!(tiered.code, 0, "{}", tiered.stderr);
    let prefix: String = other
        .query_one("SELECT storage_prefix FROM coldwire.tables", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(prefix, format!("{other_db}/public.t"));
    assert_eq!(
        count(
            &direct,
            &format!("SELECT count(*) FROM coldwire.meta WHERE key = 'database:{other_db}'")
        )
        .await,
        1
    );
    let flushed = in_other(&["flush", "t"]).await;
    assert_eq!(flushed.code, 0, "{}", flushed.stderr);
    assert!(flushed.stdout.contains("400 rows"), "{}", flushed.stdout);
    assert!(store.path().join(&other_db).join("public.t").is_dir());
    assert_eq!(count(&other, "SELECT count(*) FROM t").await, 100);
    let status = in_other(&["status", "--exact", "--json"]).await;
    let parsed: Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(parsed["tables"][0]["cold_rows"], 400, "{parsed}");

    // Pointed straight at that database (as a proxy whose service_url names it is),
    // a command keeps its tables in its folder: new ones go there too.
    other
        .batch_execute(
            "INSERT INTO t SELECT g, 'w' FROM generate_series(501, 700) g;
             CREATE TABLE u(id bigint PRIMARY KEY);",
        )
        .await
        .unwrap();
    let direct_at = coldwire(&other_db, store.path(), &["flush", "t"]).await;
    assert_eq!(direct_at.code, 0, "{}", direct_at.stderr);
    assert!(
        direct_at.stdout.contains("200 rows"),
        "{}",
        direct_at.stdout
    );
    let tiered_u = coldwire(&other_db, store.path(), &["tier", "u"]).await;
    assert_eq!(tiered_u.code, 0, "{}", tiered_u.stderr);
    let prefix: String = other
        .query_one(
            "SELECT storage_prefix FROM coldwire.tables WHERE table_name = 'u'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(prefix, format!("{other_db}/public.u"));

    // A database whose tables are at the store's root is some proxy's default database:
    // it is not served beside another one, and is left unmarked.
    let at_root = coldwire(&other_db, store.path(), &["tier", "t", "--database", &db]).await;
    assert_eq!(at_root.code, 1, "{}", at_root.stdout);
    assert!(
        at_root.stderr.contains("at the cold store's root"),
        "{}",
        at_root.stderr
    );
    assert_eq!(
        count(
            &direct,
            "SELECT count(*) FROM coldwire.meta WHERE key = 'cold_folder'"
        )
        .await,
        0
    );
}

#[tokio::test]
async fn a_flush_whose_connection_is_lost_is_run_again_by_the_same_command() {
    let (db, direct) = with_table("cliretry").await;
    let store = tempfile::tempdir().unwrap();
    let tiered = coldwire(&db, store.path(), &["tier", "t", "--policy", SMALL_POLICY]).await;
    assert_eq!(tiered.code, 0, "{}", tiered.stderr);

    // Each attempt pauses once its segment is published and recorded; the first one's
    // connection is ended there, as a restarted Postgres or a network cut would.
    let flush = tokio::spawn({
        let (db, store) = (db.clone(), store.path().to_owned());
        async move {
            let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_coldwire"))
                .args(["flush", "t", "--service-url", &cluster().url(&db)])
                .args(["--cold-store", &format!("file://{}", store.display())])
                .env("RUST_LOG", "coldwire=warn")
                .env("COLDWIRE_FAILPOINT", "after_pending_insert:sleep=1500")
                .output();
            tokio::time::timeout(std::time::Duration::from_secs(60), out)
                .await
                .expect("the command ends")
                .unwrap()
        }
    });
    // The flush lock (catalog::locks).
    let holder = "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted \
                  AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                  AND classid = 1668743170 AND objsubid = 2";
    // Ended while the attempt pauses with its segment published and recorded (pending).
    let published = "SELECT count(*) FROM coldwire.segments WHERE status IN ('pending', 'active')";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let pid: i32 = loop {
        if count(&direct, published).await > 0 {
            if let Some(row) = direct.query_opt(holder, &[]).await.unwrap() {
                break row.get(0);
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no segment published under the flush lock"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    direct
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    let out = flush.await.unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("flush of public.t completed: 900 rows"),
        "{stdout}{stderr}"
    );
    assert!(
        stderr.contains("running it again (attempt 2 of 5 by this command)"),
        "{stderr}"
    );
    assert!(!stderr.contains("proxy's executor"), "{stderr}");
    let attempt: i32 = direct
        .query_one("SELECT attempt FROM coldwire.jobs", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(attempt, 2, "run again after the lost connection");
    assert_eq!(count(&direct, "SELECT count(*) FROM t").await, 100);
    let (_, cold) = common::active_segments(&direct).await;
    assert_eq!(cold, 900, "each row once");
}
