//! The cold side of reads (`cold::scan`) against segments a real flush wrote: pruning
//! and filtering never lose a matching row, and every key comes back in its newest cold
//! version only (re-inserted keys, tombstones, overrides), compared with a plain control
//! table that received the same writes.

mod common;

use std::collections::BTreeMap;

use arrow::array::AsArray;
use arrow::datatypes::Int64Type;
use coldwire::cold::scan::{scan, ColdTable, ScanError, ScanLimits, ScanOutput};
use coldwire::segment::prune::Predicate;
use coldwire::store::backend::StoreOptions;
use coldwire::store::ColdStore;
use coldwire::values::ordered;
use common::{admin_call, cluster, connect_direct, create_db, Proxy};
use tokio_postgres::Client;

/// id → kind of the rows a scan returned.
fn rows(out: &ScanOutput) -> BTreeMap<i64, String> {
    let rows = out.rows().unwrap();
    let ids = rows
        .column_by_name("id")
        .unwrap()
        .as_primitive::<Int64Type>();
    let kinds = rows.column_by_name("kind").unwrap().as_string::<i32>();
    (0..ids.len())
        .map(|i| (ids.value(i), kinds.value(i).to_owned()))
        .collect()
}

async fn control(direct: &Client, filter: &str) -> BTreeMap<i64, String> {
    direct
        .query(&format!("SELECT id, kind FROM control WHERE {filter}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

fn int(v: i64) -> Vec<u8> {
    ordered::int(v).to_vec()
}

#[tokio::test]
async fn cold_scans_return_the_newest_matching_version_of_every_key() {
    let db = create_db("coldscan");
    let dir = tempfile::tempdir().unwrap();
    let store_url = format!("file://{}", dir.path().display());
    let mut direct = connect_direct(&db).await;
    direct
        .batch_execute(
            "CREATE TABLE events(id bigint PRIMARY KEY, kind text COLLATE \"C\", amount float8);
             CREATE TABLE control(id bigint PRIMARY KEY, kind text COLLATE \"C\", amount float8);
             INSERT INTO events SELECT g, 'k' || g % 7, g * 0.25 FROM generate_series(1, 3000) g;
             INSERT INTO control SELECT * FROM events;",
        )
        .await
        .unwrap();
    let proxy = Proxy::start(&[
        "--service-url",
        &cluster().url(&db),
        "--cold-store",
        &store_url,
    ])
    .await;
    let c = proxy.connect(&db).await;
    let call = |sql: &'static str| {
        let c = &c;
        async move {
            admin_call(c, sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
        }
    };
    let id = call(r#"SELECT coldwire.tier_table('events', '{"max_rows_per_file": 1000, "auto_flush": false}')"#).await["id"].as_i64().unwrap();
    call("SELECT coldwire.flush_table('events', wait => true, drain => true)").await;

    // New versions of cold keys 5..=14 and 20 (brought back into the heap) and new keys;
    // 20 and 3001..=3010 deleted again while hot; then a flush: new versions, tombstones.
    c.batch_execute(
        "UPDATE events SET kind = 'v2', amount = -id WHERE id BETWEEN 5 AND 14;
         UPDATE events SET kind = 'v2', amount = -id WHERE id = 20;
         INSERT INTO events SELECT g, 'k' || g % 7, g * 0.25 FROM generate_series(3001, 3100) g;",
    )
    .await
    .unwrap();
    direct
        .batch_execute(
            "UPDATE control SET kind = 'v2', amount = -id WHERE id BETWEEN 5 AND 14 OR id = 20;
             INSERT INTO control SELECT g, 'k' || g % 7, g * 0.25 FROM generate_series(3001, 3100) g;",
        )
        .await
        .unwrap();
    c.batch_execute("DELETE FROM events WHERE id = 20 OR id BETWEEN 3001 AND 3010")
        .await
        .unwrap();
    direct
        .batch_execute("DELETE FROM control WHERE id = 20 OR id BETWEEN 3001 AND 3010")
        .await
        .unwrap();
    call("SELECT coldwire.flush_table('events', wait => true, drain => true)").await;
    let hot: i64 = direct
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(hot, 0, "everything is cold");

    let store = ColdStore::open(&store_url, &StoreOptions::default()).unwrap();
    let table = ColdTable::load(&mut direct, id, None).await.unwrap();
    assert_eq!(table.segments.len(), 4, "{} segments", table.segments.len());
    assert!(
        table.overrides.len() >= 11,
        "keys 5..=14 and 20 have two cold versions"
    );
    let kind: i16 = 2;

    // Everything: exactly the control table.
    let all = scan(&store, &table, &[], None, ScanLimits::rows(100_000))
        .await
        .unwrap();
    assert_eq!(rows(&all), control(&direct, "true").await);

    // A point lookup reads only the segments that can hold the key.
    let one = scan(
        &store,
        &table,
        &[Predicate::Eq(1, int(7))],
        None,
        ScanLimits::rows(100_000),
    )
    .await
    .unwrap();
    assert_eq!(rows(&one), control(&direct, "id = 7").await);
    assert!(
        one.stats.segments_pruned >= table.segments.len() - 2,
        "{:?}",
        one.stats
    );
    // A deleted key stays deleted; a key nobody wrote is found nowhere.
    assert!(rows(
        &scan(
            &store,
            &table,
            &[Predicate::Eq(1, int(20))],
            None,
            ScanLimits::rows(100_000)
        )
        .await
        .unwrap()
    )
    .is_empty());
    let absent = scan(
        &store,
        &table,
        &[Predicate::In(1, vec![int(1500), int(99_999)])],
        None,
        ScanLimits::rows(100_000),
    )
    .await
    .unwrap();
    assert_eq!(rows(&absent), control(&direct, "id IN (1500, 99999)").await);

    // Ranges and a non-key column.
    let low = scan(
        &store,
        &table,
        &[Predicate::Below(1, int(100), false)],
        None,
        ScanLimits::rows(100_000),
    )
    .await
    .unwrap();
    assert_eq!(rows(&low), control(&direct, "id < 100").await);
    let v2 = scan(
        &store,
        &table,
        &[Predicate::Eq(kind, b"v2".to_vec())],
        None,
        ScanLimits::rows(100_000),
    )
    .await
    .unwrap();
    assert_eq!(rows(&v2), control(&direct, "kind = 'v2'").await);
    // The superseded versions of 5..=14 had kind 'k5'.. 'k0': they must not come back.
    for k in 0..7 {
        let value = format!("k{k}");
        let out = scan(
            &store,
            &table,
            &[Predicate::Eq(kind, value.clone().into_bytes())],
            None,
            ScanLimits::rows(100_000),
        )
        .await
        .unwrap();
        assert_eq!(
            rows(&out),
            control(&direct, &format!("kind = '{value}'")).await,
            "kind = {value}"
        );
    }
    let both = scan(
        &store,
        &table,
        &[
            Predicate::Above(1, int(2990), true),
            Predicate::Eq(kind, b"k3".to_vec()),
        ],
        None,
        ScanLimits::rows(100_000),
    )
    .await
    .unwrap();
    assert_eq!(
        rows(&both),
        control(&direct, "id >= 2990 AND kind = 'k3'").await
    );

    // The cap names the table.
    match scan(&store, &table, &[], None, ScanLimits::rows(10)).await {
        Err(ScanError::TooManyRows { table, cap }) => {
            assert_eq!((table.as_str(), cap), ("public.events", 10))
        }
        other => panic!("expected the cap: {:?}", other.map(|o| o.stats)),
    }
    // So does the memory bound; the rows it admits come back whole.
    let bytes = |rows: usize| ScanLimits {
        rows: usize::MAX,
        bytes: rows,
    };
    match scan(&store, &table, &[], None, bytes(10_000)).await {
        Err(ScanError::TooMuchMemory { table, cap }) => {
            assert_eq!((table.as_str(), cap), ("public.events", 10_000))
        }
        other => panic!("expected the memory bound: {:?}", other.map(|o| o.stats)),
    }
    let roomy = scan(&store, &table, &[], None, bytes(64 << 20))
        .await
        .unwrap();
    assert_eq!(rows(&roomy), rows(&all));
}
