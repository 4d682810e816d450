//! The flush under concurrency and restarts, through real proxies, Postgres and a local
//! cold store: writers racing auto and manual flushes, two proxies sharing one database
//! and store, Postgres restarted mid-flush, a flush that streams more than one decode batch.
//! Every test ends by proving DESIGN §2's invariants against a plain control table that
//! received exactly the writes Postgres reported on the tiered one.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::segments::{active_rows as cold_rows, store_files, ColdRow};
use common::{connect_direct, connect_url, create_db, PrivateCluster, Proxy};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

/// The tiered table `t` and its control `c` have the same columns.
const SCHEMA: &str = "CREATE TABLE t(id bigint PRIMARY KEY, v bigint NOT NULL, note text);
                      CREATE TABLE c(id bigint PRIMARY KEY, v bigint NOT NULL, note text);";

async fn admin(c: &Client, sql: &str) -> Value {
    common::admin_call(c, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
}

fn store_url(store: &Path) -> String {
    format!("file://{}", store.display())
}

async fn proxy_for(db: &str, store: &Path) -> Proxy {
    Proxy::tiering(db, store, &[]).await
}

/// A database named after `hint` whose `t` and control `c` hold rows 1..=`rows` (note
/// 'p'), a store folder, and a direct connection.
async fn seeded(hint: &str, rows: i64) -> (String, tempfile::TempDir, Client) {
    let db = create_db(hint);
    let store = tempfile::tempdir().unwrap();
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(&format!("{SCHEMA} INSERT INTO t SELECT g, g, 'p' FROM generate_series(1, {rows}) g; INSERT INTO c SELECT * FROM t;"))
        .await
        .unwrap();
    (db, store, direct)
}

/// (v, note) as text, by id.
type Rows = BTreeMap<i64, (String, Option<String>)>;

async fn rows(c: &Client, sql: &str) -> Rows {
    c.query(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect()
}

/// What [`assert_invariants`] counted.
#[derive(Debug, Default)]
struct Summary {
    live: usize,
    hot: usize,
    mirror: usize,
    cold_versions: usize,
    segments: usize,
    completed_jobs: usize,
}

/// DESIGN §2 on a quiet table (no writer, no active job): the state the heap, mirror and
/// active segments describe together (heap row if any; else a pending delete in the
/// mirror; else the newest cold version) is exactly the control table; the catalog, the
/// jobs and the store agree with each other.
async fn assert_invariants(direct: &Client, store: &Path, table_id: i64) -> Summary {
    let control = rows(direct, "SELECT id, v::text, note FROM c").await;
    let heap = rows(direct, "SELECT id, v::text, note FROM ONLY t").await;
    let mirror: BTreeMap<i64, (i64, i16)> = direct
        .query(
            &format!("SELECT id, seq, op FROM coldwire.m_{table_id}"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    let cold = cold_rows(direct, store).await;

    // No (key, seq) is stored twice; each key's versions, oldest first.
    let mut versions: BTreeMap<i64, Vec<&ColdRow>> = BTreeMap::new();
    let mut pairs = BTreeSet::new();
    for r in &cold {
        assert!(
            pairs.insert((r.id, r.seq)),
            "key {} seq {} is stored twice (again in {})",
            r.id,
            r.seq,
            r.segment
        );
        versions.entry(r.id).or_default().push(r);
    }
    for v in versions.values_mut() {
        v.sort_by_key(|r| r.seq);
    }

    // The mirror holds exactly the keys not flushed: every heap row as live (or as
    // rehydrated, brought back and not written since), deletes not yet flushed as deleted,
    // each newer than every cold version of its key.
    for id in heap.keys() {
        let op = mirror.get(id).map(|m| m.1);
        assert!(
            op == Some(1) || op == Some(4),
            "hot key {id} must be live or rehydrated in the mirror, not {op:?}"
        );
    }
    for (id, (seq, op)) in &mirror {
        match op {
            1 | 4 => assert!(
                heap.contains_key(id),
                "mirror says key {id} is in the heap (op {op}); it is not"
            ),
            3 => assert!(
                !heap.contains_key(id),
                "mirror says key {id} is deleted; the heap has it"
            ),
            other => panic!("unexpected mirror op {other} for key {id}"),
        }
        if let Some(newest) = versions.get(id).and_then(|v| v.last()) {
            assert!(
                newest.seq < *seq,
                "key {id}: mirror seq {seq} is not newer than cold seq {}",
                newest.seq
            );
        }
    }

    // Newest version wins, and equals the control table.
    let mut live = Rows::new();
    for id in heap
        .keys()
        .chain(mirror.keys())
        .chain(versions.keys())
        .collect::<BTreeSet<_>>()
    {
        if let Some(row) = heap.get(id) {
            live.insert(*id, row.clone());
        } else if mirror.contains_key(id) {
            // A delete not flushed yet.
        } else if let Some(newest) = versions.get(id).and_then(|v| v.last()) {
            if newest.op == 1 {
                let v = newest
                    .values
                    .get("v")
                    .cloned()
                    .flatten()
                    .expect("cold v is never NULL");
                live.insert(*id, (v, newest.values.get("note").cloned().flatten()));
            } else {
                assert_eq!(newest.op, 3, "key {id}: cold op");
            }
        }
    }
    let lost: Vec<_> = control
        .keys()
        .filter(|k| !live.contains_key(k))
        .take(10)
        .collect();
    let extra: Vec<_> = live
        .keys()
        .filter(|k| !control.contains_key(k))
        .take(10)
        .collect();
    let differ: Vec<_> = control
        .iter()
        .filter(|(k, v)| live.get(k).is_some_and(|l| l != *v))
        .take(10)
        .collect();
    assert!(
        lost.is_empty() && extra.is_empty() && differ.is_empty(),
        "tiered table differs from its control: lost {lost:?}, extra {extra:?}, different {differ:?} \
         (of {} control rows, {} live)",
        control.len(),
        live.len()
    );

    // Catalog, jobs and store agree: only active segments, each written by its job's
    // completing attempt, one generation per finishing job; segments of one job cover
    // disjoint key ranges with each key once; the store holds exactly those objects.
    let statuses: Vec<(String, i64)> = direct
        .query("SELECT status, count(*) FROM coldwire.segments WHERE status <> 'active' GROUP BY status", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert!(
        statuses.is_empty(),
        "segments other than active remain: {statuses:?}"
    );
    let active: Vec<(String, i64, i32, i64)> = direct
        .query("SELECT path, job_id, attempt, activated_generation FROM coldwire.segments WHERE table_id = $1", &[&table_id])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let jobs: HashMap<i64, (String, i32, i32, Option<i64>)> = direct
        .query("SELECT id, state, attempt, segments, rows_total FROM coldwire.jobs WHERE table_id = $1", &[&table_id])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2), r.get(3), r.get(4))))
        .collect();
    let unfinished: Vec<_> = jobs
        .iter()
        .filter(|(_, j)| j.0 == "pending" || j.0 == "running")
        .collect();
    assert!(unfinished.is_empty(), "jobs still active: {unfinished:?}");
    let mut generation_of_job: HashMap<i64, i64> = HashMap::new();
    let mut job_of_generation: HashMap<i64, i64> = HashMap::new();
    for (path, job_id, attempt, generation) in &active {
        let (state, job_attempt, _, _) = jobs
            .get(job_id)
            .unwrap_or_else(|| panic!("segment {path}: no job {job_id}"));
        assert_eq!(
            (state.as_str(), job_attempt),
            ("completed", attempt),
            "segment {path}: its job and attempt"
        );
        assert_eq!(
            *generation_of_job.entry(*job_id).or_insert(*generation),
            *generation,
            "job {job_id}: one generation"
        );
        assert_eq!(
            *job_of_generation.entry(*generation).or_insert(*job_id),
            *job_id,
            "generation {generation}: one job"
        );
    }
    for (job_id, (_, _, segments, _)) in &jobs {
        let n = active.iter().filter(|s| s.1 == *job_id).count();
        assert_eq!(
            n, *segments as usize,
            "job {job_id}: segments recorded vs active"
        );
    }
    let finishing = jobs
        .values()
        .filter(|j| j.0 == "completed" && j.3.unwrap_or(0) > 0)
        .count() as i64;
    let generation: i64 = direct
        .query_one(
            "SELECT generation FROM coldwire.tables WHERE id = $1",
            &[&table_id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        generation, finishing,
        "one generation per completed flush that took rows"
    );
    let mut ranges: BTreeMap<i64, Vec<(i64, i64, &str)>> = BTreeMap::new();
    let mut by_segment: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for r in &cold {
        by_segment.entry(r.segment.as_str()).or_default().push(r.id);
    }
    for (path, ids) in &by_segment {
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "segment {path}: keys ascending, each once"
        );
        let job_id = active
            .iter()
            .find(|s| s.0 == *path)
            .expect("active segment")
            .1;
        ranges
            .entry(job_id)
            .or_default()
            .push((ids[0], ids[ids.len() - 1], path));
    }
    for (job_id, mut spans) in ranges {
        spans.sort();
        for w in spans.windows(2) {
            assert!(
                w[0].1 < w[1].0,
                "job {job_id}: segments {} and {} overlap in key range",
                w[0].2,
                w[1].2
            );
        }
    }
    let prefix: String = direct
        .query_one(
            "SELECT storage_prefix FROM coldwire.tables WHERE id = $1",
            &[&table_id],
        )
        .await
        .unwrap()
        .get(0);
    let objects: BTreeSet<String> = store_files(store)
        .iter()
        .map(|p| {
            p.strip_prefix(store)
                .expect("under the store")
                .to_string_lossy()
                .into_owned()
        })
        .filter(|key| !coldwire::flush::manifest::is_manifest_key(&prefix, key))
        .collect();
    let named: BTreeSet<String> = active.iter().map(|s| s.0.clone()).collect();
    assert_eq!(
        objects, named,
        "besides the manifest, the store holds exactly the active segments (no orphans, no .tmp leftovers)"
    );
    let maintenance: i64 = direct
        .query_one("SELECT count(*) FROM coldwire.maintenance", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        maintenance, 0,
        "no maintenance registration outlives its transaction"
    );

    Summary {
        live: live.len(),
        hot: heap.len(),
        mirror: mirror.len(),
        cold_versions: cold.len(),
        segments: active.len(),
        completed_jobs: jobs.values().filter(|j| j.0 == "completed").count(),
    }
}

/// The table's coldwire id.
async fn table_id(direct: &Client) -> i64 {
    direct
        .query_one(
            "SELECT id FROM coldwire.tables WHERE relid = 't'::regclass",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// Turns auto flush off, then runs manual flushes (drain as given) until one that was
/// queued after the writers stopped has completed, so the table is quiet afterwards.
async fn final_flush(c: &Client, drain: bool) -> Value {
    admin(
        c,
        r#"SELECT coldwire.set_policy('t', '{"auto_flush": false}')"#,
    )
    .await;
    let sql = format!("SELECT coldwire.flush_table('t', wait => true, drain => {drain})");
    // The first call may return a job queued while writers ran; the second is new.
    admin(c, &sql).await;
    let job = admin(c, &sql).await;
    assert_eq!(job["state"], "completed", "{job}");
    job
}

/// Counts of what the writers did.
#[derive(Default)]
struct Tally {
    statements: AtomicU64,
    rolled_back: AtomicU64,
    aborted: AtomicU64,
}

/// A writer through the proxy on `t`, mirroring into `c` exactly what Postgres reported
/// for `t` in the same transaction: single- and multi-row inserts, updates, deletes and
/// upserts, autocommit (writable CTEs) and explicit transactions, some rolled back. Keys
/// come from `first_key` up; updates and deletes pick keys this writer inserted, which may
/// have been flushed meanwhile (then `t` reports no row, and `c` is left alone too).
async fn writer(client: Client, seed: u64, first_key: i64, deadline: Instant, tally: Arc<Tally>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut next_key = first_key;
    let mut keys: Vec<i64> = Vec::new();
    while Instant::now() < deadline {
        let pick = |rng: &mut StdRng, keys: &[i64], n: usize| -> Vec<i64> {
            if keys.is_empty() {
                return Vec::new();
            }
            (0..n)
                .map(|_| keys[rng.random_range(0..keys.len())])
                .collect()
        };
        let roll: u32 = rng.random_range(0..100);
        let result: Result<(), tokio_postgres::Error> = async {
            match roll {
                0..=34 => {
                    let n = rng.random_range(1..=6);
                    let new: Vec<i64> = (next_key..next_key + n).collect();
                    next_key += n;
                    client
                        .execute(
                            "WITH i AS (INSERT INTO t SELECT g, g % 1000, 'n' || g FROM unnest($1::int8[]) g RETURNING *) \
                             INSERT INTO c SELECT * FROM i",
                            &[&new],
                        )
                        .await?;
                    keys.extend(new);
                }
                35..=54 => {
                    let n = rng.random_range(1..=3);
                    let some = pick(&mut rng, &keys, n);
                    client
                        .execute(
                            "WITH u AS (UPDATE t SET v = v + 1, note = note || '+' WHERE id = ANY($1) RETURNING *) \
                             UPDATE c SET v = u.v, note = u.note FROM u WHERE c.id = u.id",
                            &[&some],
                        )
                        .await?;
                }
                55..=62 => {
                    let n = rng.random_range(1..=2);
                    let some = pick(&mut rng, &keys, n);
                    client
                        .execute(
                            "WITH d AS (DELETE FROM t WHERE id = ANY($1) RETURNING id) DELETE FROM c USING d WHERE c.id = d.id",
                            &[&some],
                        )
                        .await?;
                }
                63..=70 => {
                    // Upsert over known and new keys: a known key that was flushed meanwhile
                    // is inserted hot again (no rehydration yet), with the values the
                    // update would have written, so it has a newer hot and an older cold
                    // version.
                    let mut some = pick(&mut rng, &keys, 2);
                    some.push(next_key);
                    keys.push(next_key);
                    next_key += 1;
                    client
                        .execute(
                            "WITH u AS (INSERT INTO t SELECT g, g % 7, 'u' || g FROM unnest($1::int8[]) g \
                                        ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v, note = EXCLUDED.note RETURNING *) \
                             INSERT INTO c SELECT * FROM u ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v, note = EXCLUDED.note",
                            &[&{
                                some.sort_unstable();
                                some.dedup();
                                some
                            }],
                        )
                        .await?;
                }
                _ => {
                    // An explicit transaction of separate statements, mirrored row by row
                    // from what RETURNING reported; one in four is rolled back.
                    client.batch_execute("BEGIN").await?;
                    let new: Vec<i64> = (next_key..next_key + 3).collect();
                    next_key += 3;
                    for id in &new {
                        let r = client.query_one("INSERT INTO t VALUES ($1::int8, $1::int8 % 100, 'x' || $1::int8) RETURNING v, note", &[id]).await?;
                        client
                            .execute("INSERT INTO c VALUES ($1, $2, $3)", &[id, &r.get::<_, i64>(0), &r.get::<_, Option<String>>(1)])
                            .await?;
                    }
                    let some = pick(&mut rng, &keys, 2);
                    for r in client.query("UPDATE t SET v = v * 2 WHERE id = ANY($1) RETURNING id, v, note", &[&some]).await? {
                        client
                            .execute(
                                "UPDATE c SET v = $2, note = $3 WHERE id = $1",
                                &[&r.get::<_, i64>(0), &r.get::<_, i64>(1), &r.get::<_, Option<String>>(2)],
                            )
                            .await?;
                    }
                    let gone: Vec<i64> = client
                        .query("DELETE FROM t WHERE id = ANY($1) RETURNING id", &[&pick(&mut rng, &keys, 1)])
                        .await?
                        .iter()
                        .map(|r| r.get(0))
                        .collect();
                    client.execute("DELETE FROM c WHERE id = ANY($1)", &[&gone]).await?;
                    if rng.random_range(0..4) == 0 {
                        client.batch_execute("ROLLBACK").await?;
                        tally.rolled_back.fetch_add(1, Ordering::Relaxed);
                    } else {
                        client.batch_execute("COMMIT").await?;
                        keys.extend(new);
                    }
                }
            }
            Ok(())
        }
        .await;
        tally.statements.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = result {
            // Writers through coldwire take the table's lock shared (coldwire.rehydrate)
            // only in statements that may touch cold rows; one that locked heap and
            // mirror rows before finalize took the lock may still be chosen as a
            // deadlock victim by Postgres: that transaction rolled back as a whole, `c`
            // included. Anything else is a failure.
            let code = e.code().cloned();
            assert!(
                code == Some(SqlState::T_R_DEADLOCK_DETECTED)
                    || code == Some(SqlState::T_R_SERIALIZATION_FAILURE),
                "writer {seed}: {e:?}"
            );
            tally.aborted.fetch_add(1, Ordering::Relaxed);
            let _ = client.batch_execute("ROLLBACK").await;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..5))).await;
    }
}

#[tokio::test]
async fn writers_racing_flushes_lose_and_double_nothing() {
    let db = create_db("race");
    let store = tempfile::tempdir().unwrap();
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(&format!(
            "{SCHEMA} INSERT INTO t SELECT g, g, 's' || g FROM generate_series(1, 400) g; INSERT INTO c SELECT * FROM t;"
        ))
        .await
        .unwrap();
    let proxy = proxy_for(&db, store.path()).await;
    let c = proxy.connect(&db).await;
    admin(
        &c,
        r#"SELECT coldwire.tier_table('t', '{"hot_row_limit": 150, "min_flush_rows": 60, "max_rows_per_file": 25, "check_interval": "100ms"}')"#,
    )
    .await;
    let id = table_id(&direct).await;

    let deadline = Instant::now() + Duration::from_secs(12);
    let tally = Arc::new(Tally::default());
    let mut tasks = Vec::new();
    for w in 0..4u64 {
        let client = proxy.connect(&db).await;
        tasks.push(tokio::spawn(writer(
            client,
            w,
            1_000_000 * (w as i64 + 1),
            deadline,
            tally.clone(),
        )));
    }
    // Manual flushes among the automatic ones, some waiting for their job.
    let flusher = {
        let client = proxy.connect(&db).await;
        tokio::spawn(async move {
            let mut jobs = 0;
            while Instant::now() < deadline {
                let wait = jobs % 2 == 0;
                let job = admin(
                    &client,
                    &format!("SELECT coldwire.flush_table('t', wait => {wait})"),
                )
                .await;
                assert_ne!(job["state"], "failed", "{job}");
                jobs += 1;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            jobs
        })
    };
    for t in tasks {
        t.await.expect("writer");
    }
    assert!(flusher.await.expect("flusher") > 0);

    final_flush(&c, false).await;
    let s = assert_invariants(&direct, store.path(), id).await;
    let policy_bound = 150 + 60 / 2;
    assert!(
        s.mirror < policy_bound,
        "after a final flush the mirror is within policy: {s:?}"
    );
    assert!(
        s.completed_jobs >= 3 && s.segments >= 3,
        "flushes ran while writers wrote: {s:?}"
    );
    let failed: i64 = direct
        .query_one(
            "SELECT count(*) FROM coldwire.jobs WHERE state = 'failed'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(failed, 0, "no flush failed: {}", proxy.log());
    eprintln!(
        "race: {} statements ({} rolled back, {} deadlock victims), {} finalize retries, {s:?}",
        tally.statements.load(Ordering::Relaxed),
        tally.rolled_back.load(Ordering::Relaxed),
        tally.aborted.load(Ordering::Relaxed),
        proxy
            .log()
            .matches("finalize could not take its locks")
            .count()
    );

    // Draining moves every remaining version cold (deletes of keys with cold versions as
    // tombstones) and the same invariants hold with an empty heap and mirror.
    final_flush(&c, true).await;
    let s = assert_invariants(&direct, store.path(), id).await;
    assert_eq!((s.hot, s.mirror), (0, 0), "{s:?}");
}

/// Job ids of the `flush completed` lines in a proxy's log.
fn completed_job_ids(log: &str) -> BTreeSet<i64> {
    log.lines()
        .filter(|l| l.contains("flush completed"))
        .filter_map(|l| l.split("job_id=").nth(1))
        .filter_map(|rest| {
            rest.split(|ch: char| !ch.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

#[tokio::test]
async fn two_proxies_share_the_flush_work_and_run_each_job_once() {
    let db = create_db("twoproxies");
    let store = tempfile::tempdir().unwrap();
    let direct = connect_direct(&db).await;
    direct.batch_execute(SCHEMA).await.unwrap();
    let a = proxy_for(&db, store.path()).await;
    let b = proxy_for(&db, store.path()).await;
    let ca = a.connect(&db).await;
    admin(
        &ca,
        r#"SELECT coldwire.tier_table('t', '{"hot_row_limit": 100, "min_flush_rows": 40, "max_rows_per_file": 15, "check_interval": "100ms"}')"#,
    )
    .await;
    let id = table_id(&direct).await;

    let deadline = Instant::now() + Duration::from_secs(10);
    let tally = Arc::new(Tally::default());
    let mut tasks = Vec::new();
    for w in 0..4u64 {
        let proxy = if w % 2 == 0 { &a } else { &b };
        let client = proxy.connect(&db).await;
        tasks.push(tokio::spawn(writer(
            client,
            100 + w,
            1_000_000 * (w as i64 + 1),
            deadline,
            tally.clone(),
        )));
    }
    for t in tasks {
        t.await.expect("writer");
    }
    final_flush(&ca, false).await;
    let cb = b.connect(&db).await;
    final_flush(&cb, false).await;

    let s = assert_invariants(&direct, store.path(), id).await;
    assert!(s.completed_jobs >= 3, "{s:?}");
    // Each completed job was run by one proxy, once: the executor that logged completing
    // it is the one the job records, no proxy completed a job the other did, no attempt
    // was fenced off or retried.
    let jobs: Vec<(i64, String, i32, String, Option<String>)> = direct
        .query(
            "SELECT id, state, attempt, claimed_by, error FROM coldwire.jobs WHERE table_id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.get(0),
                r.get(1),
                r.get(2),
                r.get::<_, Option<String>>(3).unwrap_or_default(),
                r.get(4),
            )
        })
        .collect();
    let completed: BTreeSet<i64> = jobs
        .iter()
        .filter(|j| j.1 == "completed")
        .map(|j| j.0)
        .collect();
    // An executor logs a job's completion just after committing it: give the last one time.
    let (mut log_a, mut log_b) = (a.log(), b.log());
    for _ in 0..100 {
        let logged = completed_job_ids(&log_a).len() + completed_job_ids(&log_b).len();
        if logged >= completed.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        (log_a, log_b) = (a.log(), b.log());
    }
    let (done_a, done_b) = (completed_job_ids(&log_a), completed_job_ids(&log_b));
    assert!(
        done_a.is_disjoint(&done_b),
        "a job completed on both proxies: {:?}",
        done_a.intersection(&done_b)
    );
    assert_eq!(
        done_a.union(&done_b).copied().collect::<BTreeSet<_>>(),
        completed,
        "every completed job logged once"
    );
    for (job_id, state, attempt, claimed_by, error) in &jobs {
        assert_eq!(
            (state.as_str(), *attempt),
            ("completed", 1),
            "job {job_id}: {error:?}"
        );
        let (runner, pid) = if done_a.contains(job_id) {
            ("a", a.pid())
        } else {
            ("b", b.pid())
        };
        let pid = pid.expect("proxy pid");
        assert!(
            claimed_by.ends_with(&format!(":{pid}")),
            "job {job_id} completed by proxy {runner} (pid {pid}), claimed by {claimed_by}"
        );
    }
    for log in [&log_a, &log_b] {
        assert!(
            !log.contains("flush abandoned") && !log.contains("flush failed"),
            "{log}"
        );
    }
    eprintln!(
        "two proxies: a completed {}, b completed {}, {s:?}",
        done_a.len(),
        done_b.len()
    );
}

#[tokio::test]
async fn postgres_restarting_mid_flush_leaves_a_job_the_reconnected_proxy_finishes() {
    let pg = PrivateCluster::start("restart");
    // Paused inside the stream's snapshot transaction, and inside the finalize transaction
    // (holding the table lock and the mirror's row locks). The pause (each time the point
    // is passed) is long enough for the restart to land in it even on a loaded machine;
    // if it did not, the job would complete in attempt 1 and the test fail, not pass.
    for failpoint in ["after_publish", "before_finalize_commit"] {
        let db = format!("restart_{failpoint}");
        // A fresh connection each time: the previous round's restart ended the old one.
        let setup = connect_url(&pg.url("postgres")).await;
        setup
            .batch_execute(&format!("CREATE DATABASE {db}"))
            .await
            .unwrap();
        let store = tempfile::tempdir().unwrap();
        let direct = connect_url(&pg.url(&db)).await;
        direct
            .batch_execute(&format!(
                "{SCHEMA} INSERT INTO t SELECT g, g, repeat('r', 30) FROM generate_series(1, 1000) g; INSERT INTO c SELECT * FROM t;"
            ))
            .await
            .unwrap();
        let armed = format!("{failpoint}:sleep=2500");
        let proxy = Proxy::start_with_upstream_env(
            &pg.url("postgres"),
            &[
                "--service-url",
                &pg.url(&db),
                "--cold-store",
                &store_url(store.path()),
            ],
            &[("COLDWIRE_FAILPOINT", &armed)],
        )
        .await;
        let c = proxy.connect(&db).await;
        admin(&c, r#"SELECT coldwire.tier_table('t', '{"hot_row_limit": 0, "min_flush_rows": 1, "max_rows_per_file": 500, "auto_flush": false}')"#).await;
        let job = admin(&c, "SELECT coldwire.flush_table('t')").await;
        assert!(
            proxy.log_contains("failpoint reached: sleeping").await,
            "{failpoint}: {}",
            proxy.log()
        );

        pg.restart().await;

        // The executor reconnects, reclaims the job (its flush lock died with the old
        // connection) as attempt 2, and finishes it; attempt 1 left nothing visible.
        let direct = connect_url(&pg.url(&db)).await;
        let start = Instant::now();
        let mut state = (String::new(), 0);
        while start.elapsed() < Duration::from_secs(60) {
            let r = direct
                .query_one(
                    "SELECT state, attempt FROM coldwire.jobs WHERE id = $1",
                    &[&job["job_id"].as_i64()],
                )
                .await
                .unwrap();
            state = (r.get(0), r.get(1));
            if state.0 != "pending" && state.0 != "running" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(
            (state.0.as_str(), state.1),
            ("completed", 2),
            "{failpoint}: {}",
            proxy.log()
        );
        let id = table_id(&direct).await;
        let s = assert_invariants(&direct, store.path(), id).await;
        assert_eq!(
            (s.hot, s.live, s.cold_versions),
            (0, 1000, 1000),
            "{failpoint}: {s:?}"
        );

        // Sessions and admin calls through the same proxy work against the restarted server.
        let c = proxy.connect(&db).await;
        c.batch_execute("WITH i AS (INSERT INTO t SELECT g, g, 'after' FROM generate_series(2001, 2010) g RETURNING *) INSERT INTO c SELECT * FROM i")
            .await
            .unwrap();
        let job = admin(&c, "SELECT coldwire.flush_table('t', wait => true)").await;
        assert_eq!(
            (job["state"].as_str(), job["rows_done"].as_i64()),
            (Some("completed"), Some(10)),
            "{failpoint}: {job}"
        );
        let s = assert_invariants(&direct, store.path(), id).await;
        assert_eq!((s.hot, s.live), (0, 1010), "{failpoint}: {s:?}");
        assert!(
            proxy.log().contains("flush failed"),
            "{failpoint}: the interrupted attempt is logged"
        );
    }
}

#[tokio::test]
async fn a_flush_larger_than_one_decode_batch_streams_its_segments() {
    // Segments are published while the binary COPY is still streaming: the first decode
    // batch (65536 rows) fills a segment, and what follows is far more than socket buffers
    // hold (wide rows), so the flush must not wait on its own connection mid-stream.
    let db = create_db("large");
    let store = tempfile::tempdir().unwrap();
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(&format!(
            "{SCHEMA} INSERT INTO t SELECT g, g, CASE WHEN g <= 70000 THEN 's' ELSE repeat('w', 4000) END \
                      FROM generate_series(1, 90000) g;
             INSERT INTO c SELECT * FROM t;"
        ))
        .await
        .unwrap();
    let proxy = proxy_for(&db, store.path()).await;
    let c = proxy.connect(&db).await;
    admin(&c, r#"SELECT coldwire.tier_table('t', '{"hot_row_limit": 0, "min_flush_rows": 1, "max_rows_per_file": 50000, "auto_flush": false}')"#).await;
    let job = tokio::time::timeout(
        Duration::from_secs(90),
        admin(&c, "SELECT coldwire.flush_table('t', wait => true)"),
    )
    .await
    .unwrap_or_else(|_| panic!("the flush did not finish in 90 s: {}", proxy.log()));
    assert_eq!(
        (job["state"].as_str(), job["segments"].as_i64()),
        (Some("completed"), Some(2)),
        "{job}"
    );
    let id = table_id(&direct).await;
    let s = assert_invariants(&direct, store.path(), id).await;
    assert_eq!((s.hot, s.live, s.cold_versions), (0, 90000, 90000), "{s:?}");
}

#[tokio::test]
async fn a_policy_change_while_a_flush_streams_does_not_fail_it() {
    // The flush pauses after publishing its first object, inside its snapshot; set_policy
    // updates the table's catalog row meanwhile, which the segments' rows reference.
    let (db, store, direct) = seeded("policy", 300).await;
    let proxy = Proxy::tiering(
        &db,
        store.path(),
        &[("COLDWIRE_FAILPOINT", "after_publish:sleep=1000")],
    )
    .await;
    let c = proxy.connect(&db).await;
    admin(&c, r#"SELECT coldwire.tier_table('t', '{"hot_row_limit": 0, "min_flush_rows": 1, "max_rows_per_file": 200, "auto_flush": false}')"#).await;
    admin(&c, "SELECT coldwire.flush_table('t')").await;
    assert!(
        proxy.log_contains("failpoint reached: sleeping").await,
        "{}",
        proxy.log()
    );
    admin(
        &c,
        r#"SELECT coldwire.set_policy('t', '{"check_interval": "1min"}')"#,
    )
    .await;
    let job = admin(&c, "SELECT coldwire.flush_table('t', wait => true)").await;
    assert_eq!(
        (
            job["state"].as_str(),
            job["attempt"].as_i64(),
            job["segments"].as_i64()
        ),
        (Some("completed"), Some(1), Some(2)),
        "{job}"
    );
    let s = assert_invariants(&direct, store.path(), table_id(&direct).await).await;
    assert_eq!((s.hot, s.live, s.cold_versions), (0, 300, 300), "{s:?}");
}

/// A flush of `t` in `db` (hot_row_limit 0) on a proxy with `failpoint` (a sleep),
/// started in the background, once the failpoint has paused it: the proxy, a client of
/// it, and the flush's task.
async fn paused_flush(
    db: &str,
    store: &Path,
    failpoint: &str,
) -> (Proxy, Client, tokio::task::JoinHandle<Value>) {
    let proxy = Proxy::tiering(db, store, &[("COLDWIRE_FAILPOINT", failpoint)]).await;
    let c = proxy.connect(db).await;
    admin(&c, r#"SELECT coldwire.tier_table('t', '{"hot_row_limit": 0, "min_flush_rows": 1, "max_rows_per_file": 100000, "auto_flush": false}')"#).await;
    let flusher = {
        let client = proxy.connect(db).await;
        tokio::spawn(async move {
            admin(&client, "SELECT coldwire.flush_table('t', wait => true)").await
        })
    };
    let mut waited = 0;
    while !proxy.log_contains("failpoint reached: sleeping").await {
        waited += 1;
        assert!(
            waited < 300,
            "the flush did not reach {failpoint}: {}",
            proxy.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (proxy, c, flusher)
}

#[tokio::test]
async fn chunks_of_dense_and_of_sparse_keys_are_pruned_alike() {
    // The prune takes 5,000 pairs a transaction: a chunk whose integer keys lie close
    // together by one range scan of the mirror and one of the heap, any other pair by
    // pair. Here the first chunk is dense (keys 1..=5000), the others sparse (keys 100
    // apart), and keys written between the activation and the prune, in both kinds of
    // chunk, stay hot.
    let db = create_db("densesparse");
    let store = tempfile::tempdir().unwrap();
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(&format!(
            "{SCHEMA} INSERT INTO t SELECT CASE WHEN g <= 6000 THEN g ELSE g * 100 END, g, 'p' \
                      FROM generate_series(1, 12000) g;
             INSERT INTO c SELECT * FROM t;"
        ))
        .await
        .unwrap();
    let (proxy, c, flusher) = paused_flush(&db, store.path(), "after_activation:sleep=1500").await;
    let writes = "UPDATE {t} SET v = -v, note = 'w' WHERE id IN (10, 4999, 700000, 1100000); \
                  DELETE FROM {t} WHERE id IN (20, 800000)";
    for table in ["t", "c"] {
        c.batch_execute(&writes.replace("{t}", table))
            .await
            .unwrap_or_else(|e| panic!("{table}: {e:?}"));
    }
    let job = tokio::time::timeout(Duration::from_secs(60), flusher)
        .await
        .expect("the flush finishes")
        .unwrap();
    assert_eq!(
        (job["state"].as_str(), job["rows_done"].as_i64()),
        (Some("completed"), Some(12000)),
        "{job}"
    );
    let s = assert_invariants(&direct, store.path(), table_id(&direct).await).await;
    // The four keys written since stay hot; the two deleted wait for the next flush.
    assert_eq!((s.hot, s.live), (4, 11998), "{s:?}");
    let through: Rows = rows(&c, "SELECT id, v::text, note FROM t").await;
    assert_eq!(
        through,
        rows(&direct, "SELECT id, v::text, note FROM c").await
    );
    assert!(
        proxy.log().contains("pairs=12000 chunks=3 by_range=1"),
        "one chunk by range: {}",
        proxy.log()
    );
}

#[tokio::test]
async fn chunks_of_a_composite_key_are_pruned_pair_by_pair() {
    // A range of a composite key's first column may hold any number of rows: two
    // tenants' 12,000 keys are pruned pair by pair, every chunk.
    let db = create_db("compositeprune");
    let store = tempfile::tempdir().unwrap();
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(
            "CREATE TABLE t(tenant int, id bigint, v bigint NOT NULL, PRIMARY KEY (tenant, id));
             INSERT INTO t SELECT g % 2, g, g FROM generate_series(1, 12000) g;",
        )
        .await
        .unwrap();
    let proxy = proxy_for(&db, store.path()).await;
    let c = proxy.connect(&db).await;
    admin(&c, r#"SELECT coldwire.tier_table('t', '{"hot_row_limit": 0, "min_flush_rows": 1, "max_rows_per_file": 100000, "auto_flush": false}')"#).await;
    let job = admin(&c, "SELECT coldwire.flush_table('t', wait => true)").await;
    assert_eq!(job["state"].as_str(), Some("completed"), "{job}");
    let heap: i64 = direct
        .query_one("SELECT count(*) FROM ONLY t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(heap, 0);
    let row = c
        .query_one("SELECT count(*), sum(v)::bigint FROM t", &[])
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, i64>(0), row.get::<_, i64>(1)),
        (12000, 72006000)
    );
    assert!(
        proxy.log().contains("pairs=12000 chunks=3 by_range=0"),
        "no chunk by range: {}",
        proxy.log()
    );
}

/// A flush of the 12,000 rows of a tiered `t` (hot_row_limit 0), started in the
/// background and paused (700 ms) after its first prune transaction of 5,000 pairs and
/// after each later one: so reads and writes run while some of the flushed rows are
/// pruned from the heap and some are not.
struct Pruning {
    store: tempfile::TempDir,
    direct: Client,
    proxy: Proxy,
    c: Client,
    flusher: tokio::task::JoinHandle<Value>,
}

async fn pruning(hint: &str) -> Pruning {
    let (db, store, direct) = seeded(hint, 12000).await;
    let (proxy, c, flusher) = paused_flush(&db, store.path(), "after_prune_chunk:sleep=700").await;
    Pruning {
        store,
        direct,
        proxy,
        c,
        flusher,
    }
}

#[tokio::test]
async fn reads_and_writes_while_a_flush_prunes_in_chunks_see_every_row_once() {
    let Pruning {
        store,
        direct,
        proxy: _proxy,
        c,
        flusher,
    } = pruning("prune").await;
    let id = table_id(&direct).await;
    let mut rng = StdRng::seed_from_u64(7);
    let mut updates = 0;
    while !flusher.is_finished() {
        let key: i64 = rng.random_range(1..=12000);
        let n = c
            .execute(
                "UPDATE t SET v = v + 1, note = note || '+' WHERE id = $1",
                &[&key],
            )
            .await
            .unwrap();
        assert_eq!(n, 1, "UPDATE of key {key} during the prune");
        direct
            .execute(
                "UPDATE c SET v = v + 1, note = note || '+' WHERE id = $1",
                &[&key],
            )
            .await
            .unwrap();
        let count: i64 = c
            .query_one("SELECT count(*) FROM t", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(count, 12000, "rows seen during the prune");
        updates += 1;
    }
    let job = flusher.await.unwrap();
    assert_eq!(job["state"], "completed", "{job}");
    assert!(updates > 5, "only {updates} updates ran during the prune");
    assert_eq!(
        rows(&c, "SELECT id, v::text, note FROM t").await,
        rows(&direct, "SELECT id, v::text, note FROM c").await
    );
    final_flush(&c, true).await;
    assert_invariants(&direct, store.path(), id).await;
}

#[tokio::test]
async fn a_table_renamed_while_a_flush_prunes_it_is_pruned_under_its_new_name() {
    let Pruning {
        store: _store,
        direct,
        proxy: _proxy,
        c,
        flusher,
    } = pruning("prunerename").await;
    c.batch_execute("ALTER TABLE t RENAME TO t2").await.unwrap();
    // Under the old name, a new table that the prune must leave alone.
    c.batch_execute(
        "CREATE TABLE t (id bigint PRIMARY KEY); INSERT INTO t SELECT generate_series(1, 100)",
    )
    .await
    .unwrap();
    let job = flusher.await.unwrap();
    assert_eq!(job["state"], "completed", "{job}");
    let count = |sql: &'static str| {
        let direct = &direct;
        async move { direct.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    assert_eq!(
        count("SELECT count(*) FROM ONLY t2").await,
        0,
        "every flushed row pruned"
    );
    assert_eq!(count("SELECT count(*) FROM t").await, 100);
    let through: i64 = c
        .query_one("SELECT count(*) FROM t2", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(through, 12000);
}

/// A table and mirror rewritten mid-prune (VACUUM FULL moves every row) are still
/// pruned whole: every flushed row leaves the heap once, and reads see each row once.
#[tokio::test]
async fn a_table_rewritten_while_a_flush_prunes_it_is_still_pruned_whole() {
    let Pruning {
        store,
        direct,
        proxy: _proxy,
        c,
        flusher,
    } = pruning("prunerewrite").await;
    let id = table_id(&direct).await;
    // Rows deleted by the first chunk leave room: the rewrite moves the others.
    let first_ctids = || async {
        direct
            .query("SELECT ctid::text FROM ONLY t ORDER BY id LIMIT 3", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>()
    };
    let before = first_ctids().await;
    // A snapshot taken before the chunk committed (a query of the proxy's, at that
    // instant) keeps its deleted rows where they are: the rewrite is tried again then,
    // still within the prune (its chunks are 700 ms apart).
    let mut moved = false;
    for _ in 0..3 {
        for sql in [
            "VACUUM FULL t".to_owned(),
            format!("VACUUM FULL coldwire.m_{id}"),
        ] {
            direct.batch_execute(&sql).await.unwrap();
        }
        if before != first_ctids().await {
            moved = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(moved, "the rewrite moved the rows left to prune");
    let job = flusher.await.unwrap();
    assert_eq!(job["state"], "completed", "{job}");
    let count = |sql: String| {
        let direct = &direct;
        async move { direct.query_one(&sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    assert_eq!(
        count("SELECT count(*) FROM ONLY t".into()).await,
        0,
        "every flushed row pruned"
    );
    assert_eq!(
        count(format!("SELECT count(*) FROM coldwire.m_{id}")).await,
        0
    );
    let through: i64 = c
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(through, 12000);
    let s = assert_invariants(&direct, store.path(), id).await;
    assert_eq!((s.hot, s.live), (0, 12000), "{s:?}");
}
