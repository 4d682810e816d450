//! What the real-driver tests share (tests/python_clients.rs, node_clients.rs,
//! jdbc_clients.rs): a table of [`ROWS`] rows, tiered through coldwire and flushed down to
//! [`HOT`] hot rows, and a driver's script run against it whose exit status says whether
//! every check held (tests/clients/ holds the scripts).

use super::{admin_call, cluster, connect_direct, create_db, Proxy};

pub const ROWS: i64 = 3000;
pub const HOT: i64 = 500;

/// `table`, seeded (row g: owner 'o' || g % 7, balance g * 1.25, at 2026-01-01 plus g
/// minutes, tags {t<g % 3>, x}), tiered and flushed: keys 1..[`ClientTable::cold_max`]
/// are cold.
pub struct ClientTable {
    pub proxy: Proxy,
    pub db: String,
    pub table: String,
    pub cold_max: i64,
    _store: tempfile::TempDir,
}

impl ClientTable {
    pub async fn new(driver: &str) -> ClientTable {
        let db = create_db(&format!("clients_{driver}"));
        let store = tempfile::tempdir().unwrap();
        let direct = connect_direct(&db).await;
        let table = format!("accounts_{driver}");
        direct
            .batch_execute(&format!(
                "CREATE TABLE {table} (id bigint PRIMARY KEY, owner text NOT NULL, balance numeric(12,2), \
                                      at timestamptz, tags text[]);
                 INSERT INTO {table} SELECT g, 'o' || g % 7, g * 1.25,
                                            '2026-01-01 00:00:00+00'::timestamptz + g * interval '1 minute',
                                            ARRAY['t' || g % 3, 'x']
                 FROM generate_series(1, {ROWS}) g;"
            ))
            .await
            .unwrap();
        let proxy = Proxy::start(&[
            "--service-url",
            &cluster().url(&db),
            "--cold-store",
            &format!("file://{}", store.path().display()),
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
        ClientTable {
            proxy,
            db,
            table,
            cold_max,
            _store: store,
        }
    }

    /// `tests/clients/<name>`.
    pub fn script(name: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/clients")
            .join(name)
    }

    /// Runs `command` (a driver's script) and asserts that it passed every check and said
    /// so (`all checks passed (<driver>)`); `install` says how to get the driver.
    pub async fn run(&self, mut command: tokio::process::Command, driver: &str, install: &str) {
        let out = command
            .output()
            .await
            .unwrap_or_else(|e| panic!("{driver}: {e} ({install})"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        println!("{stdout}");
        assert!(
            out.status.success(),
            "{driver} through coldwire:\n{stdout}\n{stderr}\n({install})\ncoldwire's log:\n{}",
            self.proxy.log()
        );
        assert!(
            stdout.contains(&format!("all checks passed ({driver})")),
            "{stdout}"
        );
    }
}
