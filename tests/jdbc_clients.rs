//! pgjdbc (Debian's `libpostgresql-jdbc-java`) against a tiered table through coldwire:
//! PreparedStatements past the driver's prepare threshold (server-side statements),
//! batches of writes (several Bind/Execute pairs before one Sync) over cold and hot keys,
//! transactions, result metadata and CopyManager, over hot and cold rows
//! (tests/clients/JdbcClients.java holds the checks, run as a single source file).
//! `scripts/test.sh` installs the driver and a JDK when missing; `COLDWIRE_JDBC_JAR`
//! names another jar.

mod common;

use common::clients::{ClientTable, ROWS};

#[tokio::test]
async fn pgjdbc_reads_and_writes_hot_and_cold_rows() {
    let t = ClientTable::new("jdbc").await;
    let jar = std::env::var("COLDWIRE_JDBC_JAR")
        .unwrap_or_else(|_| "/usr/share/java/postgresql.jar".into());
    let addr = t.proxy.addr;
    let mut command = tokio::process::Command::new("java");
    command
        .args(["-cp", &jar])
        .arg(ClientTable::script("JdbcClients.java"))
        .args([
            &format!(
                "jdbc:postgresql://{}:{}/{}?user=postgres",
                addr.ip(),
                addr.port(),
                t.db
            ),
            &t.table,
            &ROWS.to_string(),
            &t.cold_max.to_string(),
        ]);
    t.run(
        command,
        "pgjdbc",
        "scripts/test.sh installs libpostgresql-jdbc-java and a JDK",
    )
    .await;
}
