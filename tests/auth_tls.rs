//! Authentication is relayed (Postgres decides who gets in) and TLS ends at coldwire.

mod common;

use std::path::Path;
use std::process::Command;

use common::{create_db, pg_bin, psql_admin, Proxy, MD5_GROUP, SCRAM_GROUP};
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
