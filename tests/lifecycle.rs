//! The process around the relay: metrics, graceful shutdown, configuration, the demo.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{cluster, create_db, http_get, sample, Proxy};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio_postgres::error::SqlState;

#[tokio::test]
async fn metrics_count_sessions_bytes_and_errors() {
    let db = create_db("metrics");
    let proxy = Proxy::start(&["--metrics-listen", "127.0.0.1:0"]).await;
    let metrics = proxy.metrics_addr.expect("metrics address");
    let c = proxy.connect(&db).await;
    c.query_one("SELECT repeat('x', 100000)", &[])
        .await
        .unwrap();
    let mut garbage = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    garbage.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    let mut sink = Vec::new();
    let _ = garbage.read_to_end(&mut sink).await;

    let mut text = String::new();
    for _ in 0..50 {
        text = http_get(metrics, "/metrics").await;
        if sample(&text, "coldwire_errors_total", "client_protocol").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    assert!(
        sample(&text, "coldwire_sessions_total", "").unwrap() >= 2.0,
        "{text}"
    );
    assert_eq!(
        sample(&text, "coldwire_client_connections", ""),
        Some(1.0),
        "{text}"
    );
    assert!(
        sample(&text, "coldwire_bytes_relayed_total", "upstream_to_client").unwrap() > 100_000.0
    );
    assert!(sample(&text, "coldwire_bytes_relayed_total", "client_to_upstream").unwrap() > 0.0);
    assert_eq!(
        sample(&text, "coldwire_errors_total", "kind=\"client_protocol\""),
        Some(1.0),
        "{text}"
    );
    assert!(http_get(metrics, "/nope").await.starts_with("HTTP/1.1 404"));
    assert!(http_get(metrics, "/healthz").await.ends_with("ok\n"));
}

#[tokio::test]
async fn sigterm_stops_accepting_lets_sessions_finish_then_closes_them() {
    let db = create_db("sigterm");
    let mut proxy = Proxy::start(&["--shutdown-grace-secs", "2"]).await;
    let c = proxy.connect(&db).await;
    kill(Pid::from_raw(proxy.pid().unwrap() as i32), Signal::SIGTERM).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // New clients are refused; the open session still works during the grace period.
    assert!(
        tokio::net::TcpStream::connect(proxy.addr).await.is_err(),
        "listener must be closed"
    );
    assert_eq!(
        c.query_one("SELECT 1", &[]).await.unwrap().get::<_, i32>(0),
        1
    );

    // After the grace period the session is closed with 57P01 and the process exits 0.
    let started = Instant::now();
    let status = proxy
        .wait(Duration::from_secs(15))
        .await
        .expect("coldwire exits");
    assert!(status.success(), "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let e = c.query_one("SELECT 1", &[]).await.unwrap_err();
    assert!(
        e.is_closed() || e.code() == Some(&SqlState::ADMIN_SHUTDOWN),
        "{e:?}"
    );
    assert!(proxy.log().contains("grace period over"));
}

#[tokio::test]
async fn sigterm_with_no_sessions_exits_at_once() {
    let mut proxy = Proxy::start(&[]).await;
    kill(Pid::from_raw(proxy.pid().unwrap() as i32), Signal::SIGTERM).unwrap();
    let status = proxy
        .wait(Duration::from_secs(5))
        .await
        .expect("coldwire exits promptly");
    assert!(status.success());
}

#[test]
fn bad_configuration_is_refused_with_the_setting_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("coldwire.toml");
    std::fs::write(&file, "listen = '127.0.0.1:0'\nlisten_backlog = 5\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_coldwire"))
        .args(["serve", "--config", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown field") && err.contains("listen_backlog"),
        "{err}"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_coldwire"))
        .args(["serve", "--upstream", "mysql://x/y"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid setting upstream"));

    // Environment variables are read, and flags beat them.
    let out = Command::new(env!("CARGO_BIN_EXE_coldwire"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("COLDWIRE_UPSTREAM", "nonsense")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid setting upstream"));
}

#[tokio::test]
async fn config_file_settings_are_used() {
    let db = create_db("configfile");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("coldwire.toml");
    std::fs::write(
        &file,
        format!(
            "upstream = 'postgres://127.0.0.1:{}/{db}'\nmax_message_bytes = 2048\n",
            cluster().port()
        ),
    )
    .unwrap();
    // Not the harness's Proxy: its --upstream flag would override the file.
    let (mut child, mut lines) = spawn_coldwire(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--config",
        file.to_str().unwrap(),
    ]);
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let addr = line.strip_prefix("coldwire listening on ").unwrap();
    // No database in the client's startup: the upstream URL's database is used.
    let mut c = common::raw::RawConn::connect(addr.parse().unwrap()).await;
    let mut startup = vec![0, 3, 0, 0];
    startup.extend_from_slice(b"user\0postgres\0\0");
    let mut packet = ((startup.len() + 4) as u32).to_be_bytes().to_vec();
    packet.extend(startup);
    c.send(&packet).await;
    c.until_ready().await;
    c.send(&common::raw::query("SELECT current_database()"))
        .await;
    let reply = c.until_ready().await;
    let row = reply.iter().find(|m| m.tag == b'D').unwrap();
    assert_eq!(&row.body[6..], db.as_bytes());
    // max_message_bytes = 2048 from the file applies.
    c.send(&common::raw::query(&"x".repeat(3000))).await;
    let last = c.until_closed().await;
    assert_eq!(
        last.last().and_then(|m| m.field(b'C')).as_deref(),
        Some("08P01")
    );
    child.kill().await.unwrap();
}

#[tokio::test]
async fn demo_runs_postgres_and_the_proxy_then_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("demo");
    let (mut child, mut lines) = spawn_coldwire(&[
        "demo",
        "--listen",
        "127.0.0.1:0",
        "--dir",
        root.to_str().unwrap(),
    ]);
    let mut printed = String::new();
    let mut psql_url = None;
    while let Ok(Ok(Some(line))) =
        tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await
    {
        printed.push_str(&line);
        printed.push('\n');
        if let Some(cmd) = line.trim().strip_prefix("psql \"") {
            psql_url = Some(cmd.trim_end_matches('"').to_owned());
            break;
        }
    }
    let url = psql_url.unwrap_or_else(|| panic!("demo printed no psql command:\n{printed}"));
    let client = common::connect_url(&url).await;
    let n: i64 = client
        .query_one("SELECT count(*) FROM pg_database", &[])
        .await
        .unwrap()
        .get(0);
    assert!(n >= 3);
    assert!(root.join("data").join("PG_VERSION").exists());
    drop(client);

    kill(Pid::from_raw(child.id().unwrap() as i32), Signal::SIGINT).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
    assert!(!root.exists(), "the demo removes its directory");
}

/// Runs the coldwire binary with `args` (not through the harness, whose flags would
/// override what these tests set), returning it and the lines of its stdout.
fn spawn_coldwire(
    args: &[&str],
) -> (
    tokio::process::Child,
    tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_coldwire"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, lines)
}

/// docker/compose.yaml configures coldwire through environment variables: each one it
/// sets is one `coldwire serve` reads, and the Dockerfile builds with the toolchain
/// Cargo.toml names (no Docker engine runs in CI; `.ci/run` runs the build stage's script).
#[test]
fn the_compose_file_sets_only_variables_coldwire_reads() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let compose = std::fs::read_to_string(root.join("docker/compose.yaml")).unwrap();
    let help = Command::new(env!("CARGO_BIN_EXE_coldwire"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let set: Vec<&str> = compose
        .lines()
        .filter_map(|l| l.trim().split_once(':').map(|(k, _)| k))
        .filter(|k| k.starts_with("COLDWIRE_"))
        .collect();
    assert!(set.len() >= 6, "{set:?}");
    for name in set {
        // The secret key has no flag (ps would show it); the settings read it directly.
        let read = help.contains(&format!("env: {name}"))
            || (name == "COLDWIRE_S3_SECRET_ACCESS_KEY" && help.contains(name));
        assert!(
            read,
            "docker/compose.yaml sets {name}, which coldwire does not read"
        );
    }
    let cargo = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let version = cargo
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .unwrap()
        .trim_matches('"');
    let dockerfile = std::fs::read_to_string(root.join("docker/Dockerfile")).unwrap();
    assert!(
        dockerfile.contains(&format!("FROM rust:{version}-bookworm AS build")),
        "the build stage uses rust {version}"
    );
    assert!(dockerfile.contains("RUN bash docker/build.sh"));
}
