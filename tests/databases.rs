//! Sessions are planned only against the catalog of their own database (DESIGN §3): with
//! `events` and `pgbench_accounts` tiered in the service database, another database on
//! the same server with plain tables of the same names is relayed untouched — reads,
//! writes, DDL, COPY and pgbench's TPC-B script see exactly its own rows — and its
//! sessions cannot tier tables (coldwire tiers the service database's tables only, yet).

mod common;

use std::process::Command;

use common::{admin_call, cluster, connect_direct, create_db, pg_bin, simple_rows, Proxy};

const TABLE: &str = "CREATE TABLE events(id bigint PRIMARY KEY, kind text NOT NULL, n int)";

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

#[tokio::test]
async fn another_database_with_same_named_tables_is_relayed_untouched() {
    let tiered_db = create_db("db_tiered");
    let other_db = create_db("db_other");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());

    let tiered_direct = connect_direct(&tiered_db).await;
    tiered_direct
        .batch_execute(&format!(
            "{TABLE}; INSERT INTO events SELECT g, 'tiered', g FROM generate_series(1, 2000) g"
        ))
        .await
        .unwrap();
    let other_direct = connect_direct(&other_db).await;
    other_direct
        .batch_execute(&format!(
            "{TABLE}; INSERT INTO events SELECT g, 'other', -g FROM generate_series(1, 300) g"
        ))
        .await
        .unwrap();
    let url = cluster().url(&tiered_db);
    let proxy = Proxy::start(&["--service-url", &url, "--cold-store", &store]).await;
    let host = proxy.addr.ip().to_string();
    let port = proxy.addr.port().to_string();
    let conn = ["-h", host.as_str(), "-p", port.as_str(), "-U", "postgres"];
    for db in [&tiered_db, &other_db] {
        let mut init = conn.to_vec();
        init.extend(["-i", "-s", "1", "-q", db]);
        pgbench(&init);
    }

    let tiered = proxy.connect(&tiered_db).await;
    for table in ["events", "pgbench_accounts"] {
        admin_call(
            &tiered,
            &format!("SELECT coldwire.tier_table('{table}', '{{\"hot_row_limit\": 100, \"min_flush_rows\": 100, \"auto_flush\": false}}')"),
        )
        .await
        .unwrap();
        admin_call(
            &tiered,
            &format!("SELECT coldwire.flush_table('{table}', wait => true)"),
        )
        .await
        .unwrap();
    }
    let hot: i64 = tiered_direct
        .query_one("SELECT count(*) FROM pgbench_accounts", &[])
        .await
        .unwrap()
        .get(0);
    assert!(hot <= 100, "{hot} hot accounts in the tiered database");

    let other = proxy.connect(&other_db).await;
    // Reads and writes in the other database see its own rows only, in both protocols.
    assert_eq!(
        simple_rows(&other, "SELECT count(*), min(kind), sum(n) FROM events")
            .await
            .unwrap(),
        vec![vec![
            Some("300".to_owned()),
            Some("other".to_owned()),
            Some("-45150".to_owned())
        ]]
    );
    let n: i64 = other
        .query_one("SELECT count(*) FROM events WHERE id > $1", &[&100i64])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 200);
    assert_eq!(
        other
            .execute("UPDATE events SET kind = 'updated' WHERE id = 5", &[])
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        other
            .execute("/* c */ DELETE FROM events WHERE id = 1500", &[])
            .await
            .unwrap(),
        0,
        "the other database has no row 1500, hot or cold"
    );
    other
        .batch_execute(
            "INSERT INTO events VALUES (1000, 'other', 0) ON CONFLICT (id) DO UPDATE SET n = 1",
        )
        .await
        .unwrap();
    // DDL that coldwire refuses on the tiered table is the other database's own business.
    other
        .batch_execute("ALTER TABLE events ALTER COLUMN n TYPE bigint; ALTER TABLE events RENAME COLUMN kind TO k")
        .await
        .unwrap();
    // COPY … TO a server-side file is too (coldwire refuses it for tiered tables).
    let copy_file = format!("/tmp/coldwire-db-other-{}.csv", std::process::id());
    other
        .batch_execute(&format!("COPY events TO '{copy_file}'"))
        .await
        .unwrap();
    let _ = std::fs::remove_file(&copy_file);
    assert_eq!(
        simple_rows(
            &other,
            "SELECT count(*), count(*) FILTER (WHERE k = 'updated') FROM events"
        )
        .await
        .unwrap(),
        vec![vec![Some("301".to_owned()), Some("1".to_owned())]]
    );
    // Admin calls there are refused, naming the database coldwire tiers.
    let e = admin_call(&other, "SELECT coldwire.tier_table('events')")
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains(&tiered_db), "{e:?}");

    // pgbench's TPC-B script on the other database runs without a failure, while the
    // tiered database's accounts are mostly cold.
    let mut bench = conn.to_vec();
    bench.extend([
        "-c", "2", "-j", "2", "-T", "3", "-n", "-M", "prepared", &other_db,
    ]);
    let out = pgbench(&bench);
    assert!(out.contains("number of failed transactions: 0"), "{out}");
    let mut bench = conn.to_vec();
    bench.extend([
        "-c", "2", "-j", "2", "-T", "2", "-n", "-M", "simple", &other_db,
    ]);
    let out = pgbench(&bench);
    assert!(out.contains("number of failed transactions: 0"), "{out}");
    let sums = other_direct
        .query_one(
            "SELECT (SELECT sum(abalance) FROM pgbench_accounts), (SELECT sum(bbalance) FROM pgbench_branches), \
             (SELECT sum(delta) FROM pgbench_history)",
            &[],
        )
        .await
        .unwrap();
    let (accounts, branches, history): (i64, i64, i64) = (sums.get(0), sums.get(1), sums.get(2));
    assert_eq!((accounts, branches), (history, history));

    // The tiered database is as it was: every row, merged from both tiers.
    assert_eq!(
        simple_rows(&tiered, "SELECT count(*), min(kind) FROM events")
            .await
            .unwrap(),
        vec![vec![Some("2000".to_owned()), Some("tiered".to_owned())]]
    );
    assert_eq!(
        simple_rows(&tiered, "SELECT count(*) FROM pgbench_accounts")
            .await
            .unwrap(),
        vec![vec![Some("100000".to_owned())]]
    );
}
