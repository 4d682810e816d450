//! Real Python drivers against tiered tables through coldwire: psycopg 3 (text and binary
//! results, prepared and unprepared statements, transactions, COPY in both directions)
//! and asyncpg (prepared statements and binary results everywhere), each on a table whose
//! rows are mostly cold, reading hot and cold rows, updating and deleting cold ones
//! (tests/clients/python_clients.py holds the checks). `scripts/test.sh` installs both
//! into a virtualenv and names its interpreter in `COLDWIRE_PYTHON`; without it the
//! tests use `python3`, which must then have them.

mod common;

use common::clients::{ClientTable, ROWS};

async fn run_driver(driver: &str) {
    let t = ClientTable::new(driver).await;
    let python = std::env::var("COLDWIRE_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut command = tokio::process::Command::new(&python);
    command.arg(ClientTable::script("python_clients.py")).args([
        driver,
        &t.proxy.url("postgres", &t.db),
        &t.table,
        &ROWS.to_string(),
        &t.cold_max.to_string(),
    ]);
    t.run(
        command,
        driver,
        "scripts/test.sh installs psycopg and asyncpg into a virtualenv",
    )
    .await;
}

#[tokio::test]
async fn psycopg_reads_and_writes_hot_and_cold_rows() {
    run_driver("psycopg").await;
}

#[tokio::test]
async fn asyncpg_reads_and_writes_hot_and_cold_rows() {
    run_driver("asyncpg").await;
}
