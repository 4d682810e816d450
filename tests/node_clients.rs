//! node-postgres (`pg`) against a tiered table through coldwire: parameters in the
//! extended protocol with text results, named (prepared) queries, array row mode,
//! transactions and a multi-statement simple query, over hot and cold rows, with updates
//! and deletes of cold rows (tests/clients/node_clients.js holds the checks).
//! `scripts/test.sh` installs `pg` from npm under `~/.cache/coldwire` and names its
//! `node_modules` in `COLDWIRE_NODE_PATH`.

mod common;

use common::clients::{ClientTable, ROWS};

#[tokio::test]
async fn node_postgres_reads_and_writes_hot_and_cold_rows() {
    let t = ClientTable::new("node").await;
    let mut command = tokio::process::Command::new("node");
    command
        .arg(ClientTable::script("node_clients.js"))
        .args([
            &t.proxy.url("postgres", &t.db),
            &t.table,
            &ROWS.to_string(),
            &t.cold_max.to_string(),
        ])
        .env(
            "NODE_PATH",
            std::env::var("COLDWIRE_NODE_PATH").unwrap_or_default(),
        );
    t.run(
        command,
        "node-postgres",
        "scripts/test.sh installs pg from npm",
    )
    .await;
}
