//! Tiering a table through coldwire: tier_table's checks, the mirror it seeds, the capture
//! triggers that keep the mirror current under every kind of write, and set_policy.

mod common;

use std::collections::BTreeMap;

use common::{cluster, connect_direct, connect_url, create_db, psql_admin, PrivateCluster, Proxy};
use serde_json::{json, Value};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::Client;

/// A proxy whose service connection is the test database's superuser.
async fn tiering_proxy(db: &str) -> Proxy {
    Proxy::start(&["--service-url", &cluster().url(db)]).await
}

async fn admin(c: &Client, sql: &str) -> Result<Value, tokio_postgres::Error> {
    common::admin_call(c, sql).await
}

/// key → op of every mirror row.
async fn mirror(c: &Client, id: i64) -> BTreeMap<i64, i16> {
    c.query(&format!("SELECT id, op FROM coldwire.m_{id}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

async fn heap_keys(c: &Client) -> Vec<i64> {
    c.query("SELECT id FROM events ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Every mirror key is live exactly when its row is in the heap.
async fn assert_mirror_matches_heap(c: &Client, id: i64, touched: &[i64]) {
    let m = mirror(c, id).await;
    let heap = heap_keys(c).await;
    for key in touched {
        let expected = if heap.contains(key) { 1 } else { 3 };
        assert_eq!(
            m.get(key),
            Some(&expected),
            "mirror entry of key {key}: {m:?}"
        );
    }
    for key in &heap {
        assert_eq!(
            m.get(key),
            Some(&1),
            "live key {key} must be in the mirror as live"
        );
    }
}

#[tokio::test]
async fn tier_table_seeds_the_mirror_and_capture_follows_every_write() {
    let db = create_db("tier");
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(
            "CREATE TABLE events(id bigint PRIMARY KEY, kind text NOT NULL, payload jsonb, at timestamptz DEFAULT now());
             INSERT INTO events(id, kind) SELECT g, 'seed' FROM generate_series(1, 500) g;",
        )
        .await
        .unwrap();
    let proxy = tiering_proxy(&db).await;
    let c = proxy.connect(&db).await;

    let result = admin(
        &c,
        r#"SELECT coldwire.tier_table('events', '{"hot_row_limit": 100, "min_flush_rows": 10}')"#,
    )
    .await
    .unwrap();
    assert_eq!(result["table"], "public.events");
    assert_eq!(result["mirror_rows"], 500);
    assert_eq!(result["primary_key"], json!(["id"]));
    assert_eq!(result["policy"]["hot_row_limit"], 100);
    assert_eq!(result["policy"]["max_rows_per_file"], 1_000_000);
    let id = result["id"].as_i64().unwrap();

    let row = direct
        .query_one(
            "SELECT state, policy FROM coldwire.tables WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "active");
    assert_eq!(row.get::<_, Value>(1)["min_flush_rows"], 10);
    let enabled: Vec<String> = direct
        .query("SELECT tgenabled::text FROM pg_trigger WHERE tgrelid = 'events'::regclass AND tgname LIKE 'coldwire%'", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        enabled,
        vec!["A"; 5],
        "four statement capture triggers and the keys trigger, enabled always"
    );
    assert_eq!(mirror(&direct, id).await.len(), 500);
    assert!(mirror(&direct, id).await.values().all(|op| *op == 1));

    // Every kind of write, through coldwire and directly.
    c.batch_execute("INSERT INTO events(id, kind) VALUES (501, 'a'), (502, 'b')")
        .await
        .unwrap();
    c.batch_execute("UPDATE events SET kind = 'u' WHERE id BETWEEN 10 AND 19")
        .await
        .unwrap();
    c.batch_execute("DELETE FROM events WHERE id BETWEEN 20 AND 24")
        .await
        .unwrap();
    c.execute(
        "INSERT INTO events(id, kind) VALUES ($1, 'x'), ($2, 'y') ON CONFLICT (id) DO UPDATE SET kind = 'upserted'",
        &[&30i64, &600i64],
    )
    .await
    .unwrap();
    c.batch_execute("UPDATE events SET id = id + 1000 WHERE id BETWEEN 40 AND 42")
        .await
        .unwrap();
    c.batch_execute("WITH gone AS (DELETE FROM events WHERE id = 50 RETURNING *) INSERT INTO events(id, kind) SELECT id + 2000, kind FROM gone")
        .await
        .unwrap();
    // Insert then delete in one transaction: the key ends deleted.
    c.batch_execute("BEGIN; INSERT INTO events(id, kind) VALUES (700, 'tmp'); DELETE FROM events WHERE id = 700; COMMIT")
        .await
        .unwrap();
    // A rolled-back write leaves no trace.
    c.batch_execute("BEGIN; DELETE FROM events WHERE id = 60; ROLLBACK")
        .await
        .unwrap();
    direct
        .batch_execute(
            // Hot rows only, on purpose (DESIGN §7.1): a direct write is refused otherwise.
            "SET coldwire.hot_only_writes = on; \
             DELETE FROM events WHERE id = 70; INSERT INTO events(id, kind) VALUES (800, 'direct')",
        )
        .await
        .unwrap();

    let touched: Vec<i64> = [
        501, 502, 10, 15, 19, 20, 24, 30, 600, 40, 42, 1040, 1042, 50, 2050, 700, 60, 70, 800,
    ]
    .into();
    assert_mirror_matches_heap(&direct, id, &touched).await;
    let m = mirror(&direct, id).await;
    assert_eq!(m.get(&700), Some(&3));
    assert_eq!(
        m.get(&60),
        Some(&1),
        "rolled back: still the seeded live entry"
    );

    // Later statements get later seqs.
    let seq = |key: i64| {
        let direct = &direct;
        async move {
            direct
                .query_one(
                    &format!("SELECT seq FROM coldwire.m_{id} WHERE id = $1"),
                    &[&key],
                )
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    assert!(seq(800).await > seq(501).await);

    // TRUNCATE empties the mirror with the table.
    c.batch_execute("TRUNCATE events").await.unwrap();
    assert!(mirror(&direct, id).await.is_empty());

    // Tiering twice is refused; the status view shows the table.
    let e = admin(&c, "SELECT coldwire.tier_table('events')")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::DUPLICATE_OBJECT));
    let n: i64 = direct
        .query_one(
            "SELECT count(*) FROM coldwire.status WHERE table_name = 'events'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
}

/// The INSERT capture records its keys live without probing the heap unless this
/// transaction already recorded the key deleted: every way a key inserted by a statement
/// can be gone by the end of it must still end deleted in the mirror.
#[tokio::test]
async fn inserted_keys_deleted_within_the_statement_end_deleted() {
    let db = create_db("tier_ins_del");
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(
            "CREATE TABLE events(id bigint PRIMARY KEY, kind text NOT NULL);
             INSERT INTO events(id, kind) SELECT g, 'seed' FROM generate_series(1, 100) g;
             -- Deletes a key while the calling statement runs (sees rows it inserted so far).
             CREATE FUNCTION drop_key(k bigint) RETURNS bigint LANGUAGE plpgsql AS
                 $$ BEGIN DELETE FROM events WHERE id = k; RETURN k; END $$;
             -- Statement triggers may delete what the statement inserted, before (aa_) and
             -- after (zz_) coldwire's capture trigger fires.
             CREATE FUNCTION prune_doomed() RETURNS trigger LANGUAGE plpgsql AS
                 $$ BEGIN DELETE FROM events WHERE kind = TG_ARGV[0]; RETURN NULL; END $$;
             CREATE TRIGGER aa_prune AFTER INSERT ON events FOR EACH STATEMENT EXECUTE FUNCTION prune_doomed('doomed_early');
             CREATE TRIGGER zz_prune AFTER INSERT ON events FOR EACH STATEMENT EXECUTE FUNCTION prune_doomed('doomed_late');",
        )
        .await
        .unwrap();
    let proxy = tiering_proxy(&db).await;
    let c = proxy.connect(&db).await;
    let id = admin(&c, "SELECT coldwire.tier_table('events')")
        .await
        .unwrap()["id"]
        .as_i64()
        .unwrap();

    // Writes inside functions and triggers reach hot rows only: refused unless the
    // session says so (DESIGN §7.1), here by coldwire at the call of a function whose body
    // names the table (0A000; the capture's CW001 catches the rest). With no cold rows
    // yet, capture must still follow them.
    let e = c
        .batch_execute("INSERT INTO events(id, kind) SELECT 9, 'x' WHERE drop_key(1) IS NOT NULL")
        .await
        .unwrap_err();
    assert_eq!(e.as_db_error().unwrap().code().code(), "0A000");
    c.batch_execute("SET coldwire.hot_only_writes = on")
        .await
        .unwrap();
    // Each row deletes the key inserted just before it: 201 and 202 end deleted, 203 live.
    c.batch_execute(
        "INSERT INTO events(id, kind) SELECT g, 'chain' FROM generate_series(201, 203) g \
         WHERE drop_key(g - 1) IS NOT NULL",
    )
    .await
    .unwrap();
    // Deleted by a statement trigger that fires before, and one that fires after, capture.
    c.batch_execute("INSERT INTO events(id, kind) VALUES (301, 'doomed_early'), (302, 'kept'), (303, 'doomed_late')")
        .await
        .unwrap();
    // Deleted earlier in the transaction, inserted again: live.
    c.batch_execute("BEGIN; DELETE FROM events WHERE id = 5; INSERT INTO events(id, kind) VALUES (5, 'again'); COMMIT")
        .await
        .unwrap();
    // Inserted, deleted and inserted again in one transaction, the last time in a
    // statement whose own function deletes it once more: deleted.
    c.batch_execute(
        "BEGIN; INSERT INTO events(id, kind) VALUES (401, 'a'); DELETE FROM events WHERE id = 401; \
         INSERT INTO events(id, kind) SELECT 401, 'b' UNION ALL SELECT 402, 'c' WHERE drop_key(401) IS NOT NULL; COMMIT",
    )
    .await
    .unwrap();
    // Deleted and inserted again by one statement (writable CTE): live.
    c.batch_execute("WITH gone AS (DELETE FROM events WHERE id = 7 RETURNING *) INSERT INTO events SELECT id, 'back' FROM gone")
        .await
        .unwrap();

    let touched: Vec<i64> = [201, 202, 203, 301, 302, 303, 5, 401, 402, 7].into();
    assert_mirror_matches_heap(&direct, id, &touched).await;
    let m = mirror(&direct, id).await;
    for (key, op) in [
        (201, 3),
        (202, 3),
        (203, 1),
        (301, 3),
        (302, 1),
        (303, 3),
        (5, 1),
        (401, 3),
        (402, 1),
        (7, 1),
    ] {
        assert_eq!(m.get(&key), Some(&op), "key {key}: {m:?}");
    }
}

/// A table tiered by a build before catalog version 2 (an index on the mirror's seq, an
/// older capture function) is brought up to date by the migration.
#[tokio::test]
async fn migration_v2_upgrades_capture_of_tables_tiered_before() {
    let db = create_db("tier_upgrade");
    let mut direct = connect_direct(&db).await;
    direct
        .batch_execute("CREATE TABLE events(id bigint PRIMARY KEY, kind text NOT NULL)")
        .await
        .unwrap();
    let proxy = tiering_proxy(&db).await;
    let c = proxy.connect(&db).await;
    let id = admin(&c, "SELECT coldwire.tier_table('events')")
        .await
        .unwrap()["id"]
        .as_i64()
        .unwrap();
    drop(c);
    drop(proxy);
    // What an older build left: version 1, a seq index, a capture function that differs.
    direct
        .batch_execute(&format!(
            "UPDATE coldwire.meta SET value = '1' WHERE key = 'schema_version';
             CREATE INDEX m_{id}_seq ON coldwire.m_{id} (seq);
             CREATE OR REPLACE FUNCTION coldwire.capture_{id}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
                 SET search_path = pg_catalog, pg_temp AS $$ BEGIN RETURN NULL; END $$;
             ALTER TABLE events RENAME TO events_renamed;
             ALTER TABLE coldwire.m_{id} RESET (autovacuum_vacuum_insert_threshold);"
        ))
        .await
        .unwrap();
    let report = coldwire::catalog::migrate(&mut direct).await.unwrap();
    // The mirror's own autovacuum thresholds (catalog v9), set again by the upgrade.
    let options: Vec<String> = direct
        .query_one(
            &format!("SELECT reloptions FROM pg_class WHERE oid = 'coldwire.m_{id}'::regclass"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        options.contains(&"autovacuum_vacuum_insert_threshold=1000".to_owned()),
        "{options:?}"
    );
    assert_eq!(
        (report.from_version, report.to_version),
        (1, coldwire::catalog::latest_version())
    );
    let index: Option<String> = direct
        .query_one(
            &format!("SELECT to_regclass('coldwire.m_{id}_seq')::text"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(index, None, "the seq index is dropped");
    // The new function captures again, under the table's current name.
    direct
        .batch_execute("SET coldwire.hot_only_writes = on; INSERT INTO events_renamed VALUES (1, 'a'), (2, 'b'); DELETE FROM events_renamed WHERE id = 2")
        .await
        .unwrap();
    let m: BTreeMap<i64, i16> = mirror(&direct, id).await;
    assert_eq!(m, BTreeMap::from([(1, 1), (2, 3)]));
    let public: bool = direct
        .query_one(
            &format!(
                "SELECT has_function_privilege('public', 'coldwire.capture_{id}()', 'EXECUTE')"
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!public, "grants survive CREATE OR REPLACE");
    // The table's own rehydrate function (catalog v10), made by the upgrade under the
    // current name, brings rows back; renamed again where coldwire does not see it, the
    // function names the table by its oid.
    // Signed as coldwire signs (catalog v13), with the secret the superuser may read.
    let rehydrate = |table: &str, key: i64| {
        let rows = format!("ARRAY[ROW({key}, 'back')::{table}]");
        format!(
            "SELECT coldwire.rehydrate_{id}({id}, g, {rows}, '[]', NULL, 'test', false, \
                 sha256((SELECT key FROM coldwire.secret) || sha256(int8send({id}::bigint) || int8send(g) \
                 || sha256(array_send({rows})) || sha256(convert_to('[]', 'UTF8'))))) \
             FROM (SELECT generation AS g FROM coldwire.tables WHERE id = {id}) AS t"
        )
    };
    let brought: i64 = direct
        .query_one(&rehydrate("events_renamed", 10), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(brought, 1);
    direct
        .batch_execute("ALTER TABLE events_renamed RENAME TO events_again")
        .await
        .unwrap();
    let brought: i64 = direct
        .query_one(&rehydrate("events_again", 11), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(brought, 1);
    // A key already in the mirror is not brought back twice.
    let brought: i64 = direct
        .query_one(&rehydrate("events_again", 11), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(brought, 0);
    let m: BTreeMap<i64, i16> = mirror(&direct, id).await;
    // Key 10's insert, by the statement as written, was left alone by the capture (catalog
    // v12: the claim recorded it); key 11's, through EXECUTE after the rename, was not.
    assert_eq!((m.get(&10), m.get(&11)), (Some(&4), Some(&1)), "{m:?}");
    let heap: i64 = direct
        .query_one(
            "SELECT count(*) FROM events_again WHERE id IN (10, 11) AND kind = 'back'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(heap, 2);
}

#[tokio::test]
async fn tables_that_cannot_be_tiered_are_refused_with_every_offender_named() {
    let db = create_db("refuse");
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(
            "CREATE TABLE nopk(v int);
             CREATE TABLE numkey(k numeric PRIMARY KEY);
             CREATE TABLE odd(id int PRIMARY KEY, at point, code text UNIQUE);
             CREATE TABLE parent(id int PRIMARY KEY);
             CREATE TABLE child(id int PRIMARY KEY, parent_id int REFERENCES parent(id));
             CREATE TABLE audited(id int PRIMARY KEY);
             CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
             CREATE TRIGGER audit BEFORE INSERT ON audited FOR EACH ROW EXECUTE FUNCTION noop();
             CREATE TABLE secret(id int PRIMARY KEY); ALTER TABLE secret ENABLE ROW LEVEL SECURITY;
             CREATE TABLE parted(id int, PRIMARY KEY (id)) PARTITION BY RANGE (id);
             CREATE TABLE deferred(id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED);",
        )
        .await
        .unwrap();
    let proxy = tiering_proxy(&db).await;
    let c = proxy.connect(&db).await;
    let refused = |table: &'static str, needle: &'static str| {
        let c = &c;
        async move {
            let e = admin(c, &format!("SELECT coldwire.tier_table('{table}')"))
                .await
                .unwrap_err();
            let db_err = e.as_db_error().unwrap_or_else(|| panic!("{table}: {e:?}"));
            assert_eq!(
                db_err.code(),
                &SqlState::FEATURE_NOT_SUPPORTED,
                "{table}: {db_err:?}"
            );
            let detail = db_err.detail().unwrap_or_default();
            assert!(
                detail.contains(needle),
                "{table}: {needle:?} not in {detail:?}"
            );
        }
    };
    refused("nopk", "no primary key").await;
    refused(
        "numkey",
        "column k has type numeric, whose equality is not byte equality",
    )
    .await;
    refused("odd", "column at has type point").await;
    refused("odd", "odd_code_key").await;
    refused("parent", "child_parent_id_fkey on child").await;
    refused("audited", "row trigger audit").await;
    refused("secret", "row-level security").await;
    refused("parted", "partitioned").await;
    refused("deferred", "primary key is DEFERRABLE").await;
    refused("coldwire.secret", "one of coldwire's own catalog tables").await;

    let e = admin(&c, "SELECT coldwire.tier_table('missing')")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::UNDEFINED_TABLE));
    // Nothing was created for any of them.
    let n: i64 = direct
        .query_one("SELECT count(*) FROM coldwire.tables", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
    let triggers: i64 = direct
        .query_one(
            "SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'coldwire%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(triggers, 0);
}

/// A table that logical replication writes into is neither tiered nor flushed: apply
/// fires row triggers only, never the statement triggers that capture writes, so a
/// replicated insert of a cold key would duplicate it and a replicated update or delete of
/// a cold row would miss it. tier_table refuses such a table, and a table tiered before a
/// subscription took it is not flushed (its job fails saying why) until it leaves.
/// Publisher and subscriber are two databases of one cluster with `wal_level = logical`,
/// the slot made beforehand (a subscription cannot create one on its own cluster while its
/// own transaction runs). The publisher's side is a documented limit (DESIGN §9).
#[tokio::test]
async fn tables_a_subscription_writes_into_are_neither_tiered_nor_flushed() {
    let pg = PrivateCluster::start_with("logical", &[("wal_level", "logical")]);
    let setup = connect_url(&pg.url("postgres")).await;
    for db in ["origin", "replica"] {
        setup
            .batch_execute(&format!("CREATE DATABASE {db}"))
            .await
            .unwrap();
    }
    const TABLES: &str = r#"CREATE TABLE feed(id bigint PRIMARY KEY, v text);
         CREATE TABLE "Later"(id bigint PRIMARY KEY, v text);"#;
    let origin = connect_url(&pg.url("origin")).await;
    origin
        .batch_execute(&format!("{TABLES} CREATE PUBLICATION pub FOR TABLE feed;"))
        .await
        .unwrap();
    origin
        .batch_execute("SELECT pg_create_logical_replication_slot('sub_slot', 'pgoutput')")
        .await
        .unwrap();
    let replica = connect_url(&pg.url("replica")).await;
    replica
        .batch_execute(&format!(
            r#"{TABLES} INSERT INTO "Later" SELECT g, 'r' FROM generate_series(1, 20) g;"#
        ))
        .await
        .unwrap();
    let subscribe = format!(
        r#"CREATE SUBSCRIPTION "Sub" CONNECTION 'host=127.0.0.1 port={} dbname=origin user=postgres'
           PUBLICATION pub WITH (create_slot = false, slot_name = 'sub_slot', copy_data = false)"#,
        pg.port()
    );
    replica.batch_execute(&subscribe).await.unwrap();

    let store = tempfile::tempdir().unwrap();
    let store_url = format!("file://{}", store.path().display());
    // Every flush pauses once its segments are published, before the finalize.
    let proxy = Proxy::start_with_upstream_env(
        &pg.url("postgres"),
        &[
            "--service-url",
            &pg.url("replica"),
            "--cold-store",
            &store_url,
        ],
        &[("COLDWIRE_FAILPOINT", "after_publish:sleep=2000")],
    )
    .await;
    let c = proxy.connect("replica").await;
    let e = admin(&c, "SELECT coldwire.tier_table('feed')")
        .await
        .unwrap_err();
    let db_err = e.as_db_error().expect("a Postgres error");
    assert_eq!(
        db_err.code(),
        &SqlState::FEATURE_NOT_SUPPORTED,
        "{db_err:?}"
    );
    let detail = db_err.detail().unwrap_or_default();
    assert!(
        detail.contains(r#"subscription "Sub" replicates into it"#),
        "{detail:?}"
    );

    // Tiered first, then taken by the subscription while a flush runs: the finalize
    // checks again and the job fails; the next flush fails before it reads a row. Neither
    // moves anything.
    admin(
        &c,
        r#"SELECT coldwire.tier_table('"Later"', '{"hot_row_limit": 0, "min_flush_rows": 1, "auto_flush": false}')"#,
    )
    .await
    .unwrap();
    let running = admin(&c, r#"SELECT coldwire.flush_table('"Later"')"#)
        .await
        .unwrap();
    assert!(
        proxy.log_contains("failpoint reached: sleeping").await,
        "{}",
        proxy.log()
    );
    // The table joins or leaves the publication, and the subscription follows.
    let membership = |change: &'static str| {
        let (origin, replica) = (&origin, &replica);
        async move {
            origin
                .batch_execute(&format!(r#"ALTER PUBLICATION pub {change} TABLE "Later""#))
                .await
                .unwrap();
            replica
                .batch_execute(
                    r#"ALTER SUBSCRIPTION "Sub" REFRESH PUBLICATION WITH (copy_data = false)"#,
                )
                .await
                .unwrap();
        }
    };
    membership("ADD").await;
    let flush = r#"SELECT coldwire.flush_table('"Later"', wait => true)"#;
    // flush_table returns the active job, the one paused, and waits for it.
    // The paused job selected its 20 rows; the next selects none.
    for selected in [json!(20), Value::Null] {
        let job = admin(&c, flush).await.unwrap();
        assert_eq!(job["state"], "failed", "{job}");
        let error = job["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(r#"logical replication writes into it (subscription "Sub")"#),
            "{job}"
        );
        assert_eq!(job["rows_total"], selected, "{job}");
    }
    let jobs: i64 = replica
        .query_one(
            "SELECT count(*) FROM coldwire.jobs WHERE state = 'failed' AND id >= $1",
            &[&running["job_id"].as_i64()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(jobs, 2);
    let counts = c
        .query_one(
            r#"SELECT (SELECT count(*) FROM "Later"), (SELECT count(*) FROM coldwire.segments WHERE status = 'active')"#,
            &[],
        )
        .await
        .unwrap();
    assert_eq!((counts.get::<_, i64>(0), counts.get::<_, i64>(1)), (20, 0));
    // Out of the subscription again, the table flushes.
    membership("DROP").await;
    let job = admin(&c, flush).await.unwrap();
    assert_eq!(job["state"], "completed", "{job}");
    assert_eq!(job["rows_done"], 20, "{job}");
}

#[tokio::test]
async fn only_owners_and_coldwire_admins_may_tier() {
    let db = create_db("perm");
    psql_admin(&db, "CREATE TABLE owned(id int PRIMARY KEY); CREATE ROLE mallory LOGIN; GRANT ALL ON owned TO mallory;");
    let proxy = tiering_proxy(&db).await;
    let mallory = common::connect_url(&proxy.url("mallory", &db)).await;
    let e = admin(&mallory, "SELECT coldwire.tier_table('owned')")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE));
    assert!(e
        .as_db_error()
        .unwrap()
        .message()
        .contains("owner of table public.owned"));
    let e = admin(
        &mallory,
        r#"SELECT coldwire.set_policy('owned', '{"auto_flush": false}')"#,
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE));
    // The owner may.
    let owner = proxy.connect(&db).await;
    assert_eq!(
        admin(&owner, "SELECT coldwire.tier_table('owned')")
            .await
            .unwrap()["mirror_rows"],
        0
    );
}

#[tokio::test]
async fn policies_are_validated_stored_and_merged() {
    let db = create_db("policy");
    psql_admin(
        &db,
        "CREATE TABLE p(id uuid PRIMARY KEY, v text); CREATE TABLE plain(id int PRIMARY KEY);",
    );
    let proxy = tiering_proxy(&db).await;
    let c = proxy.connect(&db).await;

    let e = admin(
        &c,
        r#"SELECT coldwire.tier_table('p', '{"max_rows_per_file": 0}')"#,
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::INVALID_PARAMETER_VALUE));
    assert!(e
        .as_db_error()
        .unwrap()
        .message()
        .contains("max_rows_per_file"));
    let direct = connect_direct(&db).await;
    let n: i64 = direct
        .query_one("SELECT count(*) FROM coldwire.tables", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "a bad policy creates nothing");

    // Extended protocol, typed parameters, jsonb result.
    let stmt = c
        .prepare_typed(
            "SELECT coldwire.tier_table($1, $2)",
            &[Type::TEXT, Type::JSONB],
        )
        .await
        .unwrap();
    let row = c
        .query_one(&stmt, &[&"p", &json!({"check_interval": "1s"})])
        .await
        .unwrap();
    let result: Value = row.get("details");
    assert_eq!(result["policy"]["check_interval"], "1s");
    // The readable columns, in binary as tokio-postgres asks for them.
    assert_eq!(row.get::<_, &str>("table"), "public.p");
    assert!(row.get::<_, i64>("id") > 0);
    assert_eq!(
        row.get::<_, i64>("mirror_rows"),
        result["mirror_rows"].as_i64().unwrap()
    );
    assert_eq!(
        row.get::<_, &str>("policy"),
        "flush beyond 100000 rows; checked every 1s"
    );

    let updated = admin(
        &c,
        r#"SELECT coldwire.set_policy('p', '{"hot_row_limit": 42}')"#,
    )
    .await
    .unwrap();
    assert_eq!(updated["policy"]["hot_row_limit"], 42);
    assert_eq!(
        updated["policy"]["check_interval"], "1s",
        "earlier keys are kept"
    );
    // The FROM form answers the same columns (psql, simple protocol).
    let from_form = c
        .simple_query(r#"SELECT * FROM coldwire.set_policy('p', '{"min_flush_rows": 7}')"#)
        .await
        .unwrap();
    let row = from_form
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        })
        .expect("a row");
    assert_eq!(row.get("table"), Some("public.p"));
    let details: Value = serde_json::from_str(row.get("details").unwrap()).unwrap();
    assert_eq!(details["policy"]["min_flush_rows"], 7);
    assert_eq!(details["policy"]["hot_row_limit"], 42);
    let e = c
        .simple_query("SELECT state FROM coldwire.flush_table('p')")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED));
    // Compaction is not built: its call says so, not "call it through coldwire".
    let e = admin(&c, "SELECT coldwire.compact_table('p')")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED));
    let message = e.as_db_error().unwrap().message().to_owned();
    assert!(
        message.contains("compact_table") && message.contains("not implemented yet"),
        "{message}"
    );
    let stored: Value = direct
        .query_one("SELECT policy FROM coldwire.tables", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, details["policy"]);

    let e = admin(
        &c,
        r#"SELECT coldwire.set_policy('plain', '{"hot_row_limit": 1}')"#,
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE));
    let e = admin(&c, "SELECT coldwire.flush_table('plain')")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE));

    // A session on another database tiers that database's tables (tests/databases.rs):
    // `p` is looked up there, where it does not exist.
    let other = create_db("policy_other");
    let c2 = proxy.connect(&other).await;
    let e = admin(&c2, "SELECT coldwire.tier_table('p')")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::UNDEFINED_TABLE), "{e:?}");
}
