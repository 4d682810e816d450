//! Authentication is relayed (Postgres decides who gets in) and TLS ends at coldwire; a
//! SIGHUP reloads the certificate (and the log filter and policy defaults).

mod common;

use std::path::Path;
use std::process::Command;

use common::{cluster, create_db, pg_bin, psql_admin, Proxy, MD5_GROUP, SCRAM_GROUP};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio_postgres::error::SqlState;

async fn connect_err(url: &str) -> tokio_postgres::Error {
    match tokio_postgres::connect(url, tokio_postgres::NoTls).await {
        Ok(_) => panic!("connection to {url} should have been refused"),
        Err(e) => e,
    }
}

#[tokio::test]
async fn scram_password_is_checked_by_postgres() {
    let db = create_db("scram");
    psql_admin(
        "postgres",
        &format!("CREATE ROLE alice LOGIN PASSWORD 'correct horse' IN ROLE {SCRAM_GROUP}"),
    );
    let proxy = Proxy::start(&[]).await;
    let addr = proxy.addr;
    let good = format!("postgres://alice:correct%20horse@{addr}/{db}");
    let client = common::connect_url(&good).await;
    let who: String = client
        .query_one("SELECT current_user::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(who, "alice");
    let method: String = psql_admin(
        "postgres",
        "SELECT substr(rolpassword, 1, 13) FROM pg_authid WHERE rolname = 'alice'",
    );
    assert_eq!(method.trim(), "SCRAM-SHA-256");

    let e = connect_err(&format!("postgres://alice:wrong@{addr}/{db}")).await;
    assert_eq!(e.code(), Some(&SqlState::INVALID_PASSWORD), "{e}");
    let e = connect_err(&format!("postgres://alice@{addr}/{db}")).await;
    assert!(format!("{e:?}").contains("password missing"), "{e:?}");
}

#[tokio::test]
async fn md5_password_is_checked_by_postgres() {
    let db = create_db("md5");
    psql_admin(
        "postgres",
        &format!("SET password_encryption = 'md5'; CREATE ROLE bob LOGIN PASSWORD 's3cret' IN ROLE {MD5_GROUP}"),
    );
    let proxy = Proxy::start(&[]).await;
    let client = common::connect_url(&format!("postgres://bob:s3cret@{}/{db}", proxy.addr)).await;
    let who: String = client
        .query_one("SELECT current_user::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(who, "bob");
    let e = connect_err(&format!("postgres://bob:nope@{}/{db}", proxy.addr)).await;
    assert_eq!(e.code(), Some(&SqlState::INVALID_PASSWORD));
}

/// A self-signed certificate for `localhost`, written as PEM files into `dir`.
fn self_signed(dir: &Path) -> (String, String) {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert = dir.join("server.crt");
    let key = dir.join("server.key");
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.key_pair.serialize_pem()).unwrap();
    (cert.display().to_string(), key.display().to_string())
}

fn psql(conninfo: &str, sql: &str, password: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(pg_bin("psql"));
    cmd.args(["-X", "-At", "-d", conninfo, "-c", sql])
        .env_remove("PGSSLMODE");
    if let Some(p) = password {
        cmd.env("PGPASSWORD", p);
    }
    cmd.output().expect("run psql")
}

#[tokio::test]
async fn tls_with_a_self_signed_certificate() {
    let db = create_db("tls");
    psql_admin(
        "postgres",
        &format!("CREATE ROLE carol LOGIN PASSWORD 'pw' IN ROLE {SCRAM_GROUP}"),
    );
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(dir.path());
    let proxy = Proxy::start(&["--tls-cert", &cert, "--tls-key", &key]).await;
    let port = proxy.addr.port();

    // The certificate verifies against itself for host name localhost.
    let verified = format!("host=localhost hostaddr=127.0.0.1 port={port} dbname={db} user=postgres sslmode=verify-full sslrootcert={cert}");
    let out = psql(&verified, "SELECT 40 + 2", None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "42");

    // SCRAM over the client's TLS (channel binding is not offered across the proxy).
    let scram = format!("host=127.0.0.1 port={port} dbname={db} user=carol sslmode=require");
    let out = psql(&scram, "SELECT current_user", Some("pw"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "carol");
    let out = psql(&scram, "SELECT 1", Some("bad"));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("password authentication failed"));

    // Without TLS the same proxy still serves plaintext clients.
    let plain = format!("host=127.0.0.1 port={port} dbname={db} user=postgres sslmode=disable");
    assert!(psql(&plain, "SELECT 1", None).status.success());
    assert!(proxy.log_contains("tls=true").await);
}

#[tokio::test]
async fn require_tls_refuses_plaintext_with_28000() {
    let db = create_db("requiretls");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(dir.path());
    let proxy = Proxy::start(&["--tls-cert", &cert, "--tls-key", &key, "--require-tls"]).await;
    let e = connect_err(&format!("postgres://postgres@{}/{db}", proxy.addr)).await;
    assert_eq!(
        e.code(),
        Some(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION),
        "{e}"
    );
    let message = e
        .as_db_error()
        .map(|d| d.message().to_owned())
        .unwrap_or_default();
    assert!(message.contains("accepts only TLS"), "{e:?}");

    let port = proxy.addr.port();
    let out = psql(
        &format!("host=127.0.0.1 port={port} dbname={db} user=postgres sslmode=disable"),
        "SELECT 1",
        None,
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("accepts only TLS"));
    let out = psql(
        &format!("host=127.0.0.1 port={port} dbname={db} user=postgres sslmode=require"),
        "SELECT 7",
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "7");
}

#[tokio::test]
async fn sighup_reloads_the_certificate_the_log_filter_and_policy_defaults() {
    let db = create_db("sighup");
    let dir = tempfile::tempdir().unwrap();
    let first = tempfile::tempdir().unwrap();
    let (first_cert, _) = self_signed(first.path());
    // The served files are replaced in place on renewal: keep copies of the first one.
    let (cert, key) = self_signed(dir.path());
    std::fs::copy(&cert, &first_cert).unwrap();
    std::fs::copy(&key, first.path().join("server.key")).unwrap();
    let file = dir.path().join("coldwire.toml");
    let write_config = |extra: &str| {
        std::fs::write(
            &file,
            format!("tls_cert = '{cert}'\ntls_key = '{key}'\n{extra}"),
        )
        .unwrap()
    };
    write_config("log = 'coldwire=info'\n");
    let store = tempfile::tempdir().unwrap();
    let store_url = format!("file://{}", store.path().display());
    let proxy = Proxy::start(&[
        "--config",
        file.to_str().unwrap(),
        "--service-url",
        &cluster().url(&db),
        "--cold-store",
        &store_url,
    ])
    .await;
    let port = proxy.addr.port();
    let verified = |root: &str| {
        format!("host=localhost hostaddr=127.0.0.1 port={port} dbname={db} user=postgres sslmode=verify-full sslrootcert={root}")
    };
    assert!(psql(&verified(&first_cert), "SELECT 1", None)
        .status
        .success());
    let hangup =
        |proxy: &Proxy| kill(Pid::from_raw(proxy.pid().unwrap() as i32), Signal::SIGHUP).unwrap();
    let reloads = |proxy: &Proxy| proxy.log().matches("configuration reloaded").count();
    let wait_for = |proxy: &Proxy, needle: &str, n: usize| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while proxy.log().matches(needle).count() < n {
            assert!(
                std::time::Instant::now() < deadline,
                "{needle}: {}",
                proxy.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    // Cold rows read at the file's level, info: their debug line is not logged.
    let c = proxy.connect(&db).await;
    c.batch_execute(
        "CREATE TABLE a(id int PRIMARY KEY); INSERT INTO a SELECT generate_series(1, 3)",
    )
    .await
    .unwrap();
    common::admin_call(&c, "SELECT coldwire.tier_table('a')")
        .await
        .unwrap();
    common::admin_call(
        &c,
        "SELECT coldwire.flush_table('a', wait => true, drain => true)",
    )
    .await
    .unwrap();
    let read_cold = || async {
        let rows = c.query("SELECT id FROM a WHERE id > 0", &[]).await.unwrap();
        assert_eq!(rows.len(), 3);
    };
    read_cold().await;
    assert!(
        !proxy.log().contains("cold rows injected"),
        "the file's log filter replaced RUST_LOG"
    );

    // A renewed certificate at the same paths, a louder log, defaults for new tables.
    let renewed = self_signed(dir.path());
    assert_eq!(renewed.0, cert);
    write_config("log = 'coldwire=debug'\npolicy_defaults = '{\"hot_row_limit\": 7, \"auto_flush\": false}'\n");
    hangup(&proxy);
    wait_for(&proxy, "configuration reloaded", 1);
    let log = proxy.log();
    let line = log
        .lines()
        .find(|l| l.contains("configuration reloaded"))
        .unwrap();
    assert!(
        line.contains("TLS certificate and key read from")
            && line
                .contains("policy defaults for new tables: flush beyond 7 rows; on request only")
            && line.contains("log: coldwire=debug"),
        "{line}"
    );
    let old = psql(&verified(&first_cert), "SELECT 1", None);
    assert!(
        !old.status.success(),
        "the old certificate is no longer served"
    );
    let new = psql(&verified(&cert), "SELECT 1", None);
    assert!(
        new.status.success(),
        "{}",
        String::from_utf8_lossy(&new.stderr)
    );
    c.batch_execute("CREATE TABLE t(id int PRIMARY KEY)")
        .await
        .unwrap();
    let tiered = common::admin_call(&c, "SELECT coldwire.tier_table('t')")
        .await
        .unwrap();
    assert_eq!(tiered["policy"]["hot_row_limit"], 7, "{tiered}");
    assert_eq!(tiered["policy"]["auto_flush"], false);
    read_cold().await;
    assert!(
        proxy.log_contains("cold rows injected").await,
        "debug lines now: {}",
        proxy.log()
    );

    // An invalid configuration is refused whole; the running one stays.
    write_config("policy_defaults = '{\"hot_row_limit\": -1}'\n");
    hangup(&proxy);
    wait_for(&proxy, "the running one stays", 1);
    assert_eq!(reloads(&proxy), 1);
    assert!(psql(&verified(&cert), "SELECT 1", None).status.success());
}

#[tokio::test]
async fn a_reload_cannot_turn_tls_off_while_tls_is_required() {
    let db = create_db("sighuptls");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(dir.path());
    let file = dir.path().join("coldwire.toml");
    std::fs::write(
        &file,
        format!("tls_cert = '{cert}'\ntls_key = '{key}'\nrequire_tls = true\n"),
    )
    .unwrap();
    let proxy = Proxy::start(&["--config", file.to_str().unwrap()]).await;
    let port = proxy.addr.port();
    let verified = format!("host=localhost hostaddr=127.0.0.1 port={port} dbname={db} user=postgres sslmode=verify-full sslrootcert={cert}");
    assert!(psql(&verified, "SELECT 1", None).status.success());

    // require_tls changes at a restart only: dropping the certificate would lock every
    // client out until then, so the reload is refused whole.
    std::fs::write(&file, "require_tls = false\nlog = 'coldwire=debug'\n").unwrap();
    kill(Pid::from_raw(proxy.pid().unwrap() as i32), Signal::SIGHUP).unwrap();
    assert!(
        proxy.log_contains("the running one stays").await,
        "{}",
        proxy.log()
    );
    assert!(
        proxy.log().contains("the running proxy requires TLS"),
        "{}",
        proxy.log()
    );
    assert!(!proxy.log().contains("configuration reloaded"));
    let still = psql(&verified, "SELECT 1", None);
    assert!(
        still.status.success(),
        "{}",
        String::from_utf8_lossy(&still.stderr)
    );
}
