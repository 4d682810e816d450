//! node-postgres (`pg`) against a tiered table through coldwire: parameters in the
//! extended protocol with text results, named (prepared) queries, array row mode,
//! transactions and a multi-statement simple query, over hot and cold rows, with updates
//! and deletes of cold rows (tests/clients/node_clients.js holds the checks).
//! `scripts/test.sh` installs `pg` from npm under `~/.cache/coldwire` and names its
//! `node_modules` in `COLDWIRE_NODE_PATH`.

mod common;

use common::{admin_call, connect_direct, create_db, Proxy};

const ROWS: i64 = 3000;
const HOT: i64 = 500;

#[tokio::test]
async fn node_postgres_reads_and_writes_hot_and_cold_rows() {
    let db = create_db("clients_node");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let direct = connect_direct(&db).await;
    let table = "accounts_node";
    direct
        .batch_execute(&format!(
            "CREATE TABLE {table} (id bigint PRIMARY KEY, owner text NOT NULL, balance numeric(12,2), \
                                  at timestamptz, tags text[]);
             INSERT INTO {table} SELECT g, 'o' || g % 7, g * 1.25, '2026-01-01 00:00:00+00'::timestamptz + g * interval '1 minute',
                                        ARRAY['t' || g % 3, 'x']
             FROM generate_series(1, {ROWS}) g;"
        ))
        .await
        .unwrap();
    let proxy = Proxy::start(&[
        "--service-url",
        &common::cluster().url(&db),
        "--cold-store",
        &store,
    ])
    .await;
    let c = proxy.connect(&db).await;
    admin_call(
        &c,
        &format!(
            r#"SELECT coldwire.tier_table('{table}', '{{"hot_row_limit": {HOT}, "min_flush_rows": 100, "auto_flush": false}}')"#
        ),
    )
    .await
    .unwrap();
    let job = admin_call(
        &c,
        &format!("SELECT coldwire.flush_table('{table}', wait => true)"),
    )
    .await
    .unwrap();
    assert_eq!(job["state"], "completed", "{job}");
    let cold_max = ROWS - HOT;

    let node_path = std::env::var("COLDWIRE_NODE_PATH").unwrap_or_default();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/node_clients.js");
    let out = tokio::process::Command::new("node")
        .arg(&script)
        .args([
            &proxy.url("postgres", &db),
            table,
            &ROWS.to_string(),
            &cold_max.to_string(),
        ])
        .env("NODE_PATH", &node_path)
        .output()
        .await
        .unwrap_or_else(|e| panic!("node: {e} (run scripts/test.sh, which installs pg)"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "node-postgres through coldwire:\n{stdout}\n{stderr}\n(scripts/test.sh installs pg from npm)\ncoldwire's log:\n{}",
        proxy.log()
    );
    assert!(stdout.contains("all checks passed (node-postgres)"), "{stdout}");
}
