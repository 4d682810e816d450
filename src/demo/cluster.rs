//! A throwaway local Postgres cluster: finds the machine's PostgreSQL binaries, initdb's
//! into a directory, starts `postgres` on a free port, and removes it all when dropped.
//! Used by `coldwire demo` and by the integration tests.

use std::fs;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::{Gid, Pid, Uid, User};

/// How long a fresh cluster may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a fast shutdown may take before the postmaster is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// The log line Postgres prints when it accepts connections.
const READY_LINE: &str = "database system is ready to accept connections";

/// Why a local cluster could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "no PostgreSQL server binaries found (looked in $COLDWIRE_PG_BINDIR, PATH, `pg_config --bindir`, \
         /usr/lib/postgresql/*/bin, /usr/local/pgsql/bin); install them, e.g. `apt-get install postgresql` \
         on Debian or Ubuntu, `brew install postgresql` on macOS"
    )]
    BinariesNotFound,
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{program} failed: {output}")]
    Command { program: String, output: String },
    #[error("postgres did not start: {log_tail}")]
    NotStarted { log_tail: String },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ClusterError {
    let what = what.into();
    move |source| ClusterError::Io { what, source }
}

/// How to set up a cluster.
#[derive(Debug, Clone, Default)]
pub struct ClusterOptions {
    /// Directory to create (must not exist yet, or be empty); holds data, socket and log.
    pub root: PathBuf,
    /// pg_hba.conf lines placed before the default `trust` rules.
    pub hba_lines: Vec<String>,
    /// postgresql.conf settings added to the defaults.
    pub settings: Vec<(String, String)>,
    /// Send the postmaster SIGQUIT when the thread that started it ends, so a killed
    /// test run or demo leaves no server behind.
    pub die_with_parent: bool,
    /// Keep the directory when the cluster is dropped.
    pub keep: bool,
}

/// A running throwaway cluster whose superuser is `postgres` (trust on loopback).
#[derive(Debug)]
pub struct LocalCluster {
    bin_dir: PathBuf,
    root: PathBuf,
    port: u16,
    child: Option<Child>,
    keep: bool,
}

impl LocalCluster {
    /// Finds a directory holding `initdb` and `postgres`.
    ///
    /// # Errors
    /// None found: the message says how to install them.
    pub fn find_bin_dir() -> Result<PathBuf, ClusterError> {
        let has_server =
            |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(dir) = std::env::var_os("COLDWIRE_PG_BINDIR") {
            candidates.push(dir.into());
        }
        if let Some(path) = std::env::var_os("PATH") {
            candidates.extend(std::env::split_paths(&path));
        }
        if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
            candidates.push(String::from_utf8_lossy(&out.stdout).trim().into());
        }
        if let Ok(entries) = fs::read_dir("/usr/lib/postgresql") {
            let mut versions: Vec<(u32, PathBuf)> = entries
                .flatten()
                .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
                .collect();
            versions.sort_by_key(|v| std::cmp::Reverse(v.0));
            candidates.extend(versions.into_iter().map(|(_, p)| p));
        }
        candidates.push("/usr/local/pgsql/bin".into());
        let dir = candidates
            .into_iter()
            .find(|d| has_server(d))
            .ok_or(ClusterError::BinariesNotFound)?;
        // A PATH entry may hold only symlinks to a few programs; the directory they point
        // into has the client programs (psql, pgbench) too.
        Ok(dir
            .join("initdb")
            .canonicalize()
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or(dir))
    }

    /// Initializes and starts a cluster as `opts` says.
    ///
    /// # Errors
    /// Missing binaries, a failed initdb, or a server that does not come up.
    pub fn start(opts: &ClusterOptions) -> Result<Self, ClusterError> {
        let bin_dir = Self::find_bin_dir()?;
        let owner = unprivileged_owner();
        let root = opts.root.clone();
        fs::create_dir_all(&root).map_err(io_err(format!("create {}", root.display())))?;
        let mut cluster = LocalCluster {
            bin_dir,
            root,
            port: 0,
            child: None,
            keep: opts.keep,
        };
        for dir in [cluster.root.clone(), cluster.socket_dir()] {
            fs::create_dir_all(&dir).map_err(io_err(format!("create {}", dir.display())))?;
            if let Some((uid, gid)) = owner {
                nix::unistd::chown(&dir, Some(uid), Some(gid))
                    .map_err(|e| io_err(format!("chown {}", dir.display()))(e.into()))?;
            }
        }
        cluster.initdb(opts, owner)?;
        // Another process may take the free port we picked before postgres binds it.
        let mut last = None;
        for _ in 0..5 {
            cluster.port = free_port()?;
            match cluster.launch(opts, owner) {
                Ok(()) => return Ok(cluster),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(ClusterError::NotStarted {
            log_tail: String::new(),
        }))
    }

    /// The TCP port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Directory of the server's Unix socket.
    pub fn socket_dir(&self) -> PathBuf {
        self.root.join("sock")
    }

    /// Directory of the PostgreSQL binaries in use.
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// The cluster's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A URL for `database` as superuser `postgres` over TCP.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Stops the server (fast shutdown, then SIGKILL after a timeout).
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = Pid::from_raw(child.id() as i32);
        let _ = kill(pid, Signal::SIGINT);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    fn data_dir(&self) -> PathBuf {
        self.root.join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.root.join("postgres.log")
    }

    fn command(&self, program: &str, owner: Option<(Uid, Gid)>) -> Command {
        let mut cmd = Command::new(self.bin_dir.join(program));
        if let Some((uid, gid)) = owner {
            cmd.uid(uid.as_raw()).gid(gid.as_raw());
        }
        cmd.env("LC_ALL", "C").env_remove("PGDATA");
        cmd
    }

    fn initdb(&self, opts: &ClusterOptions, owner: Option<(Uid, Gid)>) -> Result<(), ClusterError> {
        let out = self
            .command("initdb", owner)
            .arg("-D")
            .arg(self.data_dir())
            .args([
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .stdin(Stdio::null())
            .output()
            .map_err(io_err("run initdb"))?;
        if !out.status.success() {
            return Err(ClusterError::Command {
                program: "initdb".into(),
                output: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        let mut hba = String::from("# written by coldwire's local cluster\n");
        for line in &opts.hba_lines {
            hba.push_str(line);
            hba.push('\n');
        }
        hba.push_str(
            "local all all trust\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n",
        );
        let hba_path = self.data_dir().join("pg_hba.conf");
        fs::write(&hba_path, hba).map_err(io_err(format!("write {}", hba_path.display())))?;
        Ok(())
    }

    /// Writes the port into the config, starts the postmaster and waits for it.
    fn launch(
        &mut self,
        opts: &ClusterOptions,
        owner: Option<(Uid, Gid)>,
    ) -> Result<(), ClusterError> {
        let mut conf = vec![
            ("listen_addresses".to_owned(), "'127.0.0.1'".to_owned()),
            ("port".to_owned(), self.port.to_string()),
            (
                "unix_socket_directories".to_owned(),
                format!("'{}'", self.socket_dir().display()),
            ),
            ("max_connections".to_owned(), "200".to_owned()),
            ("fsync".to_owned(), "off".to_owned()),
            ("synchronous_commit".to_owned(), "off".to_owned()),
            ("full_page_writes".to_owned(), "off".to_owned()),
            ("logging_collector".to_owned(), "off".to_owned()),
        ];
        conf.extend(opts.settings.iter().cloned());
        let auto_conf = self.data_dir().join("postgresql.auto.conf");
        let mut text = String::new();
        for (k, v) in &conf {
            text.push_str(&format!("{k} = {v}\n"));
        }
        fs::write(&auto_conf, text).map_err(io_err(format!("write {}", auto_conf.display())))?;

        let log = fs::File::create(self.log_path()).map_err(io_err("create postgres.log"))?;
        let log_err = log.try_clone().map_err(io_err("open postgres.log"))?;
        let mut cmd = self.command("postgres", owner);
        cmd.arg("-D")
            .arg(self.data_dir())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        if opts.die_with_parent {
            // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
            unsafe {
                cmd.pre_exec(|| {
                    nix::sys::prctl::set_pdeathsig(Signal::SIGQUIT).map_err(std::io::Error::from)
                });
            }
        }
        self.child = Some(cmd.spawn().map_err(io_err("start postgres"))?);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let log = fs::read_to_string(self.log_path()).unwrap_or_default();
            if log.contains(READY_LINE) {
                return Ok(());
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
                .is_some();
            if exited || Instant::now() > deadline {
                self.stop();
                let tail: Vec<&str> = log.lines().rev().take(10).collect();
                let log_tail = tail.into_iter().rev().collect::<Vec<_>>().join("\n");
                return Err(ClusterError::NotStarted { log_tail });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop();
        if !self.keep {
            let _ = fs::remove_dir_all(&self.root);
        }
    }
}

/// Postgres refuses to run as root; when we are root, files and processes belong to the
/// `postgres` account if it exists, else `nobody`.
fn unprivileged_owner() -> Option<(Uid, Gid)> {
    if !Uid::effective().is_root() {
        return None;
    }
    ["postgres", "nobody"]
        .iter()
        .find_map(|name| User::from_name(name).ok().flatten())
        .map(|u| (u.uid, u.gid))
}

fn free_port() -> Result<u16, ClusterError> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(io_err("find a free port"))?;
    let port = listener
        .local_addr()
        .map_err(io_err("find a free port"))?
        .port();
    Ok(port)
}
