//! A real S3-compatible server for the tests: moto's server mode on a free loopback port,
//! with one bucket, gone with the process that started it. `scripts/test.sh` installs
//! moto when `moto_server` is missing; `COLDWIRE_MOTO_SERVER` names another executable.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use object_store::aws::AmazonS3Builder;
use object_store::ObjectStore;

/// The bucket every server starts with.
pub const BUCKET: &str = "coldwire-test";
/// moto accepts any credentials; these only have to be present and consistent.
pub const ACCESS_KEY_ID: &str = "coldwire-test-key";
pub const SECRET_ACCESS_KEY: &str = "coldwire-test-secret";
pub const REGION: &str = "us-east-1";
/// How long moto may take to answer after it is started (it imports a lot of Python).
const START_TIMEOUT: Duration = Duration::from_secs(60);

static SHARED: OnceLock<S3Server> = OnceLock::new();

/// The test binary's server, started on first use and left running until the process
/// exits. Tests that stop their server start their own with [`S3Server::start`].
pub fn s3() -> &'static S3Server {
    SHARED.get_or_init(|| {
        // moto dies with the thread that started it (PR_SET_PDEATHSIG), so start it from a
        // thread that lives as long as the process.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(S3Server::start());
            loop {
                std::thread::park();
            }
        });
        rx.recv().expect("moto thread")
    })
}

/// A running moto server, killed when dropped (or when the thread that started it ends).
pub struct S3Server {
    child: Option<Child>,
    pub port: u16,
}

impl S3Server {
    /// Starts moto on a free port and creates [`BUCKET`].
    pub fn start() -> S3Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("a free port")
            .local_addr()
            .expect("address")
            .port();
        Self::start_on(port)
    }

    /// Starts moto on `port` (again, after [`S3Server::stop`]: a restarted moto is empty)
    /// and creates [`BUCKET`].
    pub fn start_on(port: u16) -> S3Server {
        let program =
            std::env::var("COLDWIRE_MOTO_SERVER").unwrap_or_else(|_| "moto_server".into());
        let mut cmd = Command::new(&program);
        cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: prctl is async-signal-safe; moto dies with the thread that started it.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)
            });
        }
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!("cannot run {program} ({e}): the S3 tests need moto's server; run scripts/test.sh, or pip install \"moto[server]\"")
        });
        let mut server = S3Server {
            child: Some(child),
            port,
        };
        let started = Instant::now();
        loop {
            match http_put(port, &format!("/{BUCKET}")) {
                Some(200) => return server,
                Some(status) => panic!("moto answered PUT /{BUCKET} with HTTP {status}"),
                None if started.elapsed() > START_TIMEOUT => {
                    panic!("moto did not answer on port {port} within {START_TIMEOUT:?}")
                }
                None => {}
            }
            if let Some(status) = server
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("{program} exited with {status} before answering");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Kills the server and waits for it: the endpoint refuses connections until a server
    /// is started on the same port again.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The `COLDWIRE_*` variables that point coldwire at this server (with `--cold-store
    /// s3://BUCKET/...`).
    pub fn proxy_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("COLDWIRE_S3_ENDPOINT", self.endpoint()),
            ("COLDWIRE_S3_REGION", REGION.into()),
            ("COLDWIRE_S3_ALLOW_HTTP", "true".into()),
            ("COLDWIRE_S3_ACCESS_KEY_ID", ACCESS_KEY_ID.into()),
            ("COLDWIRE_S3_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY.into()),
        ]
    }

    /// An S3 client on the whole bucket (not under any prefix), as an outside reader sees it.
    pub fn bucket(&self) -> Arc<dyn ObjectStore> {
        let store = AmazonS3Builder::new()
            .with_endpoint(self.endpoint())
            .with_allow_http(true)
            .with_bucket_name(BUCKET)
            .with_region(REGION)
            .with_access_key_id(ACCESS_KEY_ID)
            .with_secret_access_key(SECRET_ACCESS_KEY)
            .build()
            .expect("an S3 client");
        Arc::new(store)
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The status of an empty `PUT path` (S3's CreateBucket), or `None` when nothing answers.
fn http_put(port: u16, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(stream, "PUT {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| response.strip_prefix("HTTP/1.0 "))?
        .get(..3)?
        .parse()
        .ok()
}
