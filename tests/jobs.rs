//! The durable job queue against a real catalog: one active flush per table, claims that
//! never hand one job to two executors, fencing by attempt, reclaim of stale jobs.

mod common;

use std::time::Duration;

use coldwire::catalog::jobs;
use common::{cluster, create_db};
use tokio_postgres::{Client, NoTls};

async fn service(db: &str) -> Client {
    let (client, conn) = tokio_postgres::connect(&cluster().url(db), NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// A database with the catalog and one table registered as tiered; returns its id.
async fn catalog_with_table(db: &str) -> i64 {
    let mut c = service(db).await;
    coldwire::catalog::migrate(&mut c).await.unwrap();
    c.batch_execute("CREATE TABLE t(id int PRIMARY KEY)")
        .await
        .unwrap();
    c.query_one(
        "INSERT INTO coldwire.tables (relid, schema_name, table_name, pk_attnums, columns, storage_prefix, state) \
         VALUES ('t'::regclass, 'public', 't', '{1}', '[]', 'public.t', 'active') RETURNING id",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test]
async fn one_active_flush_job_per_table() {
    let db = create_db("jobs_one");
    let table = catalog_with_table(&db).await;
    let c = service(&db).await;
    let a = jobs::enqueue_flush(&c, table, false).await.unwrap();
    let b = jobs::enqueue_flush(&c, table, true).await.unwrap();
    assert_eq!(a.id, b.id, "the active job is returned, not a second one");
    assert_eq!(
        (a.state.as_str(), a.attempt, a.drain),
        ("pending", 0, false)
    );
}

#[tokio::test]
async fn concurrent_claims_hand_each_job_to_one_executor() {
    let db = create_db("jobs_claim");
    let table = catalog_with_table(&db).await;
    let c = service(&db).await;
    let job = jobs::enqueue_flush(&c, table, false).await.unwrap();
    let (mut x, mut y) = (service(&db).await, service(&db).await);
    let (a, b) = tokio::join!(jobs::claim(&mut x, "x"), jobs::claim(&mut y, "y"));
    let claimed: Vec<jobs::Job> = [a.unwrap(), b.unwrap()].into_iter().flatten().collect();
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    assert_eq!(claimed[0].id, job.id);
    assert_eq!(
        (claimed[0].state.as_str(), claimed[0].attempt),
        ("running", 1)
    );
    // Nothing else to claim while it runs with a fresh heartbeat.
    assert!(jobs::claim(&mut x, "x").await.unwrap().is_none());
}

#[tokio::test]
async fn a_reclaimed_job_fences_out_the_old_attempt() {
    let db = create_db("jobs_fence");
    let table = catalog_with_table(&db).await;
    let c = service(&db).await;
    jobs::enqueue_flush(&c, table, false).await.unwrap();
    let mut first = service(&db).await;
    let old = jobs::claim(&mut first, "first").await.unwrap().unwrap();
    assert!(jobs::heartbeat(&first, &old, 10).await.unwrap());

    // The first executor stalls: even with a stale heartbeat, it still holds the table's
    // flush lock (it is alive), so nobody else may take the job.
    c.execute(
        "UPDATE coldwire.jobs SET heartbeat_at = now() - interval '1 hour'",
        &[],
    )
    .await
    .unwrap();
    let mut second = service(&db).await;
    assert!(jobs::claim(&mut second, "second").await.unwrap().is_none());

    // Once its connection is gone (the process died), the job is reclaimed at once, with a
    // new attempt.
    drop(first);
    let mut new = None;
    for _ in 0..50 {
        new = jobs::claim(&mut second, "second").await.unwrap();
        if new.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let new = new.expect("reclaimed");
    assert_eq!((new.id, new.attempt), (old.id, 2));
    // The old attempt can neither heartbeat nor fail the job any more.
    assert!(!jobs::heartbeat(&c, &old, 99).await.unwrap());
    jobs::fail(&c, &old, "stale").await.unwrap();
    let now = jobs::get(&c, old.id).await.unwrap();
    assert_eq!(
        (now.state.as_str(), now.attempt, now.error),
        ("running", 2, None)
    );
    // The live attempt can.
    assert!(jobs::heartbeat(&second, &new, 5).await.unwrap());
    jobs::fail(&second, &new, "object store unreachable")
        .await
        .unwrap();
    let done = jobs::get(&c, new.id).await.unwrap();
    assert_eq!(
        (done.state.as_str(), done.error.as_deref()),
        ("failed", Some("object store unreachable"))
    );
    jobs::release(&second, &new).await.unwrap();
    // A failed job is not active: a new flush can be queued.
    assert_ne!(
        jobs::enqueue_flush(&c, table, false).await.unwrap().id,
        new.id
    );
}
