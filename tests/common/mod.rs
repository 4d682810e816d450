//! Test harness: one real Postgres cluster per test binary (initdb into a temp dir, free
//! port, gone with the process), one database per test, and the real `coldwire` binary
//! started per test on a free port; a real S3-compatible server where a test asks for one
//! ([`moto`]).

#![allow(dead_code)]

pub mod clients;
pub mod disguise;
pub mod flushing;
pub mod moto;
pub mod raw;
pub mod segments;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use coldwire::demo::cluster::{ClusterOptions, LocalCluster};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Roles whose members must authenticate with a password (pg_hba rules of the cluster).
pub const SCRAM_GROUP: &str = "cw_scram_users";
pub const MD5_GROUP: &str = "cw_md5_users";

static CLUSTER: OnceLock<LocalCluster> = OnceLock::new();
static NEXT_DB: AtomicU32 = AtomicU32::new(1);

/// The test binary's cluster, started on first use.
pub fn cluster() -> &'static LocalCluster {
    CLUSTER.get_or_init(|| {
        sweep_stale_dirs();
        let root = std::env::temp_dir().join(format!(
            "coldwire-test-{}-{}",
            std::process::id(),
            binary_name()
        ));
        let opts = ClusterOptions {
            root,
            hba_lines: vec![
                format!("host all +{SCRAM_GROUP} 127.0.0.1/32 scram-sha-256"),
                format!("host all +{MD5_GROUP} 127.0.0.1/32 md5"),
            ],
            settings: vec![],
            die_with_parent: true,
            keep: false,
        };
        // The postmaster dies with the thread that started it (PR_SET_PDEATHSIG), so start
        // it from a thread that lives as long as the process.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(LocalCluster::start(&opts));
            loop {
                std::thread::park();
            }
        });
        let cluster = rx
            .recv()
            .expect("cluster thread")
            .expect("start the test cluster");
        psql_admin_on(
            &cluster,
            "postgres",
            &format!("CREATE ROLE {SCRAM_GROUP} NOLOGIN; CREATE ROLE {MD5_GROUP} NOLOGIN;"),
        );
        cluster
    })
}

/// Removes clusters left by test processes that no longer exist.
fn sweep_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("coldwire-test-") else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
        if !alive {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn binary_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "tests".into())
}

/// Runs SQL as superuser directly on the cluster (not through coldwire) with psql.
pub fn psql_admin(database: &str, sql: &str) -> String {
    psql_admin_on(cluster(), database, sql)
}

fn psql_admin_on(cluster: &LocalCluster, database: &str, sql: &str) -> String {
    let out = std::process::Command::new(cluster.bin_dir().join("psql"))
        .args([
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-At",
            "-d",
            &cluster.url(database),
            "-c",
            sql,
        ])
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "psql {sql:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A new, empty database for one test.
pub fn create_db(hint: &str) -> String {
    let name = format!("t_{}_{}", hint, NEXT_DB.fetch_add(1, Ordering::Relaxed));
    psql_admin("postgres", &format!("CREATE DATABASE {name}"));
    name
}

/// A client connected directly to the cluster, bypassing coldwire.
pub async fn connect_direct(database: &str) -> tokio_postgres::Client {
    connect_url(&cluster().url(database)).await
}

/// Connects with tokio-postgres (no TLS) and drives the connection in the background.
pub async fn connect_url(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    client
}

/// A running `coldwire serve` process, killed when dropped.
pub struct Proxy {
    child: Child,
    pub addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    log: PathBuf,
}

impl Proxy {
    /// Starts coldwire in front of the test cluster, tiering in `database` with the local
    /// cold store `store`, with extra environment.
    pub async fn tiering(database: &str, store: &std::path::Path, env: &[(&str, &str)]) -> Proxy {
        let store_url = format!("file://{}", store.display());
        Self::start_env(
            &[
                "--service-url",
                &cluster().url(database),
                "--cold-store",
                &store_url,
            ],
            env,
        )
        .await
    }

    /// Starts coldwire in front of the test cluster with extra flags.
    pub async fn start(extra: &[&str]) -> Proxy {
        let upstream = format!("postgres://127.0.0.1:{}/postgres", cluster().port());
        Self::start_with_upstream(&upstream, extra).await
    }

    /// Starts coldwire in front of the test cluster with extra flags and environment.
    pub async fn start_env(extra: &[&str], env: &[(&str, &str)]) -> Proxy {
        let upstream = format!("postgres://127.0.0.1:{}/postgres", cluster().port());
        Self::spawn(&upstream, extra, env).await
    }

    /// Starts coldwire in front of `upstream` with extra flags.
    pub async fn start_with_upstream(upstream: &str, extra: &[&str]) -> Proxy {
        Self::spawn(upstream, extra, &[]).await
    }

    /// Starts coldwire in front of `upstream` with extra flags and environment.
    pub async fn start_with_upstream_env(
        upstream: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Proxy {
        Self::spawn(upstream, extra, env).await
    }

    async fn spawn(upstream: &str, extra: &[&str], env: &[(&str, &str)]) -> Proxy {
        let log = cluster().root().join(format!(
            "coldwire-{}.log",
            NEXT_DB.fetch_add(1, Ordering::Relaxed)
        ));
        let log_file = std::fs::File::create(&log).expect("proxy log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_coldwire"));
        cmd.arg("serve")
            .args(["--listen", "127.0.0.1:0", "--upstream", upstream])
            .args(extra)
            .env("RUST_LOG", "coldwire=debug")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .kill_on_drop(true);
        // SAFETY: prctl is async-signal-safe; the proxy dies with the test's thread.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)
            });
        }
        let mut child = cmd.spawn().expect("start coldwire");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut addr = None;
        let mut metrics_addr = None;
        let wanted_metrics = extra.contains(&"--metrics-listen");
        let read = async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(a) = line.strip_prefix("coldwire listening on ") {
                    addr = a.parse().ok();
                }
                if let Some(a) = line.strip_prefix("coldwire metrics on http://") {
                    metrics_addr = a.trim_end_matches("/metrics").parse().ok();
                }
                if addr.is_some() && (metrics_addr.is_some() || !wanted_metrics) {
                    break;
                }
            }
        };
        if tokio::time::timeout(Duration::from_secs(20), read)
            .await
            .is_err()
            || addr.is_none()
        {
            panic!(
                "coldwire did not start: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        // Keep draining stdout so the proxy never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Proxy {
            child,
            addr: addr.expect("address"),
            metrics_addr,
            log,
        }
    }

    /// A libpq-style URL for `user` on `database` through the proxy.
    pub fn url(&self, user: &str, database: &str) -> String {
        format!(
            "postgres://{user}@{}:{}/{database}",
            self.addr.ip(),
            self.addr.port()
        )
    }

    /// Connects as superuser `postgres` through the proxy.
    pub async fn connect(&self, database: &str) -> tokio_postgres::Client {
        connect_url(&self.url("postgres", database)).await
    }

    /// The proxy's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits up to 10 s for `needle` to appear in the log (sessions log after they answer).
    pub async fn log_contains(&self, needle: &str) -> bool {
        for _ in 0..100 {
            if self.log().contains(needle) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    /// The process id, for signals.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Waits for the process to exit.
    pub async fn wait(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        tokio::time::timeout(limit, self.child.wait())
            .await
            .ok()
            .and_then(Result::ok)
    }
}

/// A cluster of one test's own, for tests that restart Postgres (the binary's shared
/// cluster serves other tests meanwhile). A dedicated thread owns the postmaster, so it
/// dies with that thread (PR_SET_PDEATHSIG) across restarts too; dropping this stops it.
pub struct PrivateCluster {
    port: u16,
    restarts: std::sync::mpsc::Sender<std::sync::mpsc::Sender<Result<(), String>>>,
}

impl PrivateCluster {
    /// initdb and start a cluster under the test directory prefix (swept if left behind).
    pub fn start(hint: &str) -> PrivateCluster {
        Self::start_with(hint, &[])
    }

    /// Like [`PrivateCluster::start`], with postgresql.conf settings added.
    pub fn start_with(hint: &str, settings: &[(&str, &str)]) -> PrivateCluster {
        let root = std::env::temp_dir().join(format!(
            "coldwire-test-{}-{}-{hint}",
            std::process::id(),
            binary_name()
        ));
        let opts = ClusterOptions {
            root,
            die_with_parent: true,
            settings: settings
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..ClusterOptions::default()
        };
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (restarts, requests) =
            std::sync::mpsc::channel::<std::sync::mpsc::Sender<Result<(), String>>>();
        std::thread::spawn(move || {
            let mut cluster = match LocalCluster::start(&opts) {
                Ok(c) => c,
                Err(e) => {
                    let _ = started_tx.send(Err(e.to_string()));
                    return;
                }
            };
            let _ = started_tx.send(Ok(cluster.port()));
            // Serve restarts until the handle is dropped; the cluster is dropped (stopped,
            // removed) when the loop ends.
            while let Ok(reply) = requests.recv() {
                let _ = reply.send(cluster.restart().map_err(|e| e.to_string()));
            }
        });
        let port = started_rx
            .recv()
            .expect("cluster thread")
            .expect("start a private cluster");
        PrivateCluster { port, restarts }
    }

    /// The port Postgres listens on (loopback).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL for `database` as superuser `postgres`.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Restarts Postgres (fast shutdown: sessions are terminated, then a clean start on
    /// the same port), returning once it accepts connections again.
    pub async fn restart(&self) {
        let (reply, done) = std::sync::mpsc::channel();
        self.restarts.send(reply).expect("cluster thread alive");
        tokio::task::spawn_blocking(move || done.recv())
            .await
            .expect("join")
            .expect("restart reply")
            .expect("restart the private cluster");
    }
}

/// Path of a PostgreSQL client program (psql, pgbench) from the cluster's binaries.
pub fn pg_bin(name: &str) -> PathBuf {
    cluster().bin_dir().join(name)
}

/// The jsonb an admin call returns (its `details` column), sent as a simple Query.
pub async fn admin_call(
    c: &tokio_postgres::Client,
    sql: &str,
) -> Result<serde_json::Value, tokio_postgres::Error> {
    let msgs = c.simple_query(sql).await?;
    let text = msgs
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => {
                let details = r.columns().iter().position(|c| c.name() == "details");
                r.get(details.unwrap_or(0)).map(str::to_owned)
            }
            _ => None,
        })
        .expect("one row");
    Ok(serde_json::from_str(&text).expect("jsonb"))
}

/// A parameter already in Postgres's binary format (None: NULL), accepted for any type.
#[derive(Debug)]
pub struct RawBinary(pub Option<Vec<u8>>);

impl tokio_postgres::types::ToSql for RawBinary {
    fn to_sql(
        &self,
        _: &tokio_postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match &self.0 {
            None => Ok(tokio_postgres::types::IsNull::Yes),
            Some(v) => {
                out.extend_from_slice(v);
                Ok(tokio_postgres::types::IsNull::No)
            }
        }
    }

    fn accepts(_: &tokio_postgres::types::Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

/// The rows of a simple-protocol query, as text (NULL as `None`).
pub async fn simple_rows(
    client: &tokio_postgres::Client,
    sql: &str,
) -> Result<Vec<Vec<Option<String>>>, tokio_postgres::Error> {
    Ok(client
        .simple_query(sql)
        .await?
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect())
            }
            _ => None,
        })
        .collect())
}

/// A result value exactly as Postgres sent it in binary format (None: NULL), for any type.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RawValue(pub Option<Vec<u8>>);

impl<'a> tokio_postgres::types::FromSql<'a> for RawValue {
    fn from_sql(
        _: &tokio_postgres::types::Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(RawValue(Some(raw.to_vec())))
    }

    fn from_sql_null(
        _: &tokio_postgres::types::Type,
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(RawValue(None))
    }

    fn accepts(_: &tokio_postgres::types::Type) -> bool {
        true
    }
}

/// The rows of an extended-protocol query (binary results), byte for byte.
pub async fn binary_rows(
    client: &tokio_postgres::Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Vec<Vec<RawValue>>, tokio_postgres::Error> {
    Ok(client
        .query(sql, params)
        .await?
        .iter()
        .map(|r| (0..r.len()).map(|i| r.get::<_, RawValue>(i)).collect())
        .collect())
}

/// A plain HTTP GET of `path` (the metrics endpoint): the whole response, headers too.
pub async fn http_get(addr: SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).await.unwrap();
    body
}

/// The value of the first sample line of `metric` whose labels contain `labels`.
pub fn sample(text: &str, metric: &str, labels: &str) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(metric) && l.contains(labels))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

/// A numeric parameter (its text in Postgres's form), sent in numeric's binary format.
#[derive(Debug, Clone)]
pub struct Decimal(pub String);

impl tokio_postgres::types::ToSql for Decimal {
    fn to_sql(
        &self,
        _: &tokio_postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        // Base-10000 digit groups around the point, stripped of zero groups at both ends.
        let (negative, unsigned) = match self.0.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, self.0.as_str()),
        };
        let (int, frac) = unsigned.split_once('.').unwrap_or((unsigned, ""));
        let int = format!("{}{int}", "0".repeat((4 - int.len() % 4) % 4));
        let frac = format!("{frac}{}", "0".repeat((4 - frac.len() % 4) % 4));
        let group = |s: &str| s.parse::<i16>().unwrap();
        let mut groups: Vec<i16> = (0..int.len() / 4)
            .map(|i| group(&int[4 * i..4 * i + 4]))
            .chain((0..frac.len() / 4).map(|i| group(&frac[4 * i..4 * i + 4])))
            .collect();
        let mut weight = (int.len() / 4) as i16 - 1;
        while groups.first() == Some(&0) {
            groups.remove(0);
            weight -= 1;
        }
        while groups.last() == Some(&0) {
            groups.pop();
        }
        if groups.is_empty() {
            weight = 0;
        }
        let dscale = unsigned.split_once('.').map_or(0, |(_, f)| f.len()) as i16;
        let sign: u16 = if negative && !groups.is_empty() {
            0x4000
        } else {
            0
        };
        for v in [groups.len() as i16, weight, sign as i16, dscale]
            .into_iter()
            .chain(groups)
        {
            out.extend_from_slice(&v.to_be_bytes());
        }
        Ok(tokio_postgres::types::IsNull::No)
    }

    fn accepts(ty: &tokio_postgres::types::Type) -> bool {
        *ty == tokio_postgres::types::Type::NUMERIC
    }

    tokio_postgres::types::to_sql_checked!();
}

/// The active segments of the connected database's tiered tables: how many, and their rows.
pub async fn active_segments(c: &tokio_postgres::Client) -> (i64, i64) {
    let row = c
        .query_one(
            "SELECT count(*), coalesce(sum(row_count), 0)::int8 FROM coldwire.segments WHERE status = 'active'",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// Statements a differential write test generates: `COLDWIRE_DIFFERENTIAL_WRITES` when
/// set to a number, else `default` (the CI's count).
pub fn differential_writes(default: usize) -> usize {
    std::env::var("COLDWIRE_DIFFERENTIAL_WRITES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `SELECT coldwire.flush_table('t', wait => true, drain => drain)` through coldwire on
/// `c`, which must complete; its answer.
pub async fn flush_t(c: &tokio_postgres::Client, drain: bool) -> serde_json::Value {
    let sql = format!("SELECT coldwire.flush_table('t', wait => true, drain => {drain})");
    let job = admin_call(c, &sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    assert_eq!(job["state"], "completed", "{job}");
    job
}

/// Waits up to ten seconds for the first job in `coldwire.jobs` to read completed; the
/// state it read last.
pub async fn first_job_completed(direct: &tokio_postgres::Client) -> String {
    let mut state = String::new();
    for _ in 0..100 {
        state = direct
            .query_one("SELECT state FROM coldwire.jobs ORDER BY id LIMIT 1", &[])
            .await
            .expect("read coldwire.jobs")
            .get(0);
        if state == "completed" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    state
}

/// Asserts that table `t` read through `c` holds, byte for byte in binary, what `control`
/// holds read directly (both in `id` order).
pub async fn assert_same_as_control(c: &tokio_postgres::Client, direct: &tokio_postgres::Client) {
    let expected = binary_rows(direct, "SELECT * FROM control ORDER BY id", &[])
        .await
        .expect("read control");
    let got = binary_rows(c, "SELECT * FROM t ORDER BY id", &[])
        .await
        .expect("read t through coldwire");
    assert_eq!(got.len(), expected.len());
    assert!(
        got == expected,
        "first differing row: {:?}",
        got.iter().zip(&expected).position(|(a, b)| a != b)
    );
}
