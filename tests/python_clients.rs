//! Real Python drivers against tiered tables through coldwire: psycopg 3 (text and binary
//! results, prepared and unprepared statements, transactions, COPY in both directions)
//! and asyncpg (prepared statements and binary results everywhere), each on a table whose
//! rows are mostly cold, reading hot and cold rows, updating and deleting cold ones
//! (tests/clients/python_clients.py holds the checks). `scripts/test.sh` installs both
//! into a virtualenv and names its interpreter in `COLDWIRE_PYTHON`; without it the
//! tests use `python3`, which must then have them.

mod common;

use common::{admin_call, connect_direct, create_db, Proxy};

const ROWS: i64 = 3000;
const HOT: i64 = 500;

async fn run_driver(driver: &str) {
    let db = create_db(&format!("clients_{driver}"));
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let direct = connect_direct(&db).await;
    let table = format!("accounts_{driver}");
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
    let cold_max: i64 = direct
        .query_one(&format!("SELECT min(id) - 1 FROM ONLY {table}"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(cold_max, ROWS - HOT, "keys 1..{} cold", ROWS - HOT);

    let python = std::env::var("COLDWIRE_PYTHON").unwrap_or_else(|_| "python3".into());
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/python_clients.py");
    let out = tokio::process::Command::new(&python)
        .arg(&script)
        .args([
            driver,
            &proxy.url("postgres", &db),
            &table,
            &ROWS.to_string(),
            &cold_max.to_string(),
        ])
        .output()
        .await
        .unwrap_or_else(|e| panic!("{python}: {e} (run scripts/test.sh, which installs it)"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{driver} through coldwire:\n{stdout}\n{stderr}\n(scripts/test.sh installs psycopg and asyncpg into a virtualenv)\ncoldwire's log:\n{}",
        proxy.log()
    );
    assert!(
        stdout.contains(&format!("all checks passed ({driver})")),
        "{stdout}"
    );
}

#[tokio::test]
async fn psycopg_reads_and_writes_hot_and_cold_rows() {
    run_driver("psycopg").await;
}

#[tokio::test]
async fn asyncpg_reads_and_writes_hot_and_cold_rows() {
    run_driver("asyncpg").await;
}
