//! A tiered table that keeps flushing while a test reads it: table `t` (ids 1 to 2,000,
//! `v = 3 × id`) tiered with a policy that flushes every 100 ms, behind a proxy whose read
//! plans the `after_read_plan` failpoint holds for a while (so flushes finalize between
//! planning and running, and the guard fires), and a writer that keeps inserting new keys
//! above 100,000 until it is stopped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::{admin_call, cluster, connect_direct, Proxy};

/// The rows' count and `sum(v)` for ids up to 2,000, as every read must see them.
pub const EXPECTED: (i64, i64) = (2000, 3 * 2000 * 2001 / 2);

pub struct Flushing {
    pub proxy: Proxy,
    pub direct: tokio_postgres::Client,
    stop: Arc<AtomicBool>,
    writer: Option<tokio::task::JoinHandle<()>>,
    _store: tempfile::TempDir,
}

impl Flushing {
    /// Starts it in database `db`: each read plan held `plan_ms`, flushes of at least
    /// `min_flush_rows` rows.
    pub async fn start(db: &str, plan_ms: u64, min_flush_rows: u32) -> Flushing {
        let dir = tempfile::tempdir().unwrap();
        let store = format!("file://{}", dir.path().display());
        let direct = connect_direct(db).await;
        direct
            .batch_execute("CREATE TABLE t(id bigint PRIMARY KEY, v bigint NOT NULL)")
            .await
            .unwrap();
        let failpoint = format!("after_read_plan:sleep={plan_ms}");
        let proxy = Proxy::start_env(
            &["--service-url", &cluster().url(db), "--cold-store", &store],
            &[("COLDWIRE_FAILPOINT", &failpoint)],
        )
        .await;
        let c = proxy.connect(db).await;
        c.batch_execute("INSERT INTO t SELECT g, g * 3 FROM generate_series(1, 2000) g")
            .await
            .unwrap();
        admin_call(
            &c,
            &format!(
                r#"SELECT coldwire.tier_table('t', '{{"hot_row_limit": 100, "min_flush_rows": {min_flush_rows}, "max_rows_per_file": 400, "check_interval": "100ms"}}')"#
            ),
        )
        .await
        .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let w = proxy.connect(db).await;
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut next = 100_000i64;
                while !stop.load(Ordering::Relaxed) {
                    w.execute(
                        "INSERT INTO t SELECT g, 0 FROM generate_series($1::bigint, $1::bigint + 29) g",
                        &[&next],
                    )
                    .await
                    .unwrap();
                    next += 30;
                    tokio::time::sleep(std::time::Duration::from_millis(15)).await;
                }
            })
        };
        Flushing {
            proxy,
            direct,
            stop,
            writer: Some(writer),
            _store: dir,
        }
    }

    /// Stops the writer, and checks the table was flushed meanwhile.
    pub async fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(writer) = self.writer.take() {
            writer.await.unwrap();
        }
        let (_, cold) = super::active_segments(&self.direct).await;
        assert!(
            cold >= 1900,
            "the table was flushed meanwhile: {cold} cold rows"
        );
    }
}

/// Reads `SELECT count(*), sum(v)::bigint FROM t WHERE id <= 2000` until `deadline`,
/// over the extended protocol or the simple one, checking every answer is [`EXPECTED`]
/// (no row missing or doubled, no error); the task answers how many reads it made.
pub fn reader(
    client: tokio_postgres::Client,
    extended: bool,
    deadline: tokio::time::Instant,
) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let sql = "SELECT count(*), sum(v)::bigint FROM t WHERE id <= 2000";
        let mut reads = 0;
        while tokio::time::Instant::now() < deadline {
            let got = if extended {
                let row = client
                    .query_one(sql, &[])
                    .await
                    .unwrap_or_else(|e| panic!("{e:?}"));
                (row.get::<_, i64>(0), row.get::<_, i64>(1))
            } else {
                let rows = super::simple_rows(&client, sql)
                    .await
                    .unwrap_or_else(|e| panic!("{e:?}"));
                (
                    rows[0][0].as_deref().unwrap().parse().unwrap(),
                    rows[0][1].as_deref().unwrap().parse().unwrap(),
                )
            };
            assert_eq!(got, EXPECTED, "no row missing or doubled");
            reads += 1;
        }
        reads
    })
}
