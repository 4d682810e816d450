//! The catalog in a real Postgres: migrations (fresh, repeated, racing, as an ordinary
//! owner, refused), the privileges around schema coldwire, the admin stubs, the status
//! view, and `coldwire serve --service-url`.

mod common;

use std::time::Duration;

use coldwire::catalog::{self, latest_version, AdminRole, CatalogError, ADMIN_ROLE, MIGRATIONS};
use coldwire::demo::cluster::{ClusterOptions, LocalCluster};
use common::{cluster, connect_direct, connect_url, create_db, psql_admin, Proxy};
use tokio_postgres::error::SqlState;

/// A URL for `role` on `database` of the test cluster (trust authentication).
fn url_as(role: &str, database: &str) -> String {
    format!(
        "postgres://{role}@127.0.0.1:{}/{database}",
        cluster().port()
    )
}

/// A new database owned by a new ordinary login role (no superuser, no CREATEROLE).
fn db_owned_by_ordinary_role(hint: &str) -> (String, String) {
    let db = create_db(hint);
    let role = format!("{db}_owner");
    psql_admin("postgres", &format!("CREATE ROLE {role} LOGIN"));
    psql_admin("postgres", &format!("ALTER DATABASE {db} OWNER TO {role}"));
    (db, role)
}

/// A new ordinary login role with no privileges of its own (only what PUBLIC has).
fn stranger(db: &str) -> String {
    let role = format!("{db}_stranger");
    psql_admin("postgres", &format!("CREATE ROLE {role} LOGIN"));
    role
}

/// (relname, relkind) of the tables, sequences and views in schema coldwire.
async fn catalog_relations(c: &tokio_postgres::Client) -> Vec<(String, String)> {
    c.query(
        "SELECT relname::text, relkind::text FROM pg_class \
         WHERE relnamespace = 'coldwire'::regnamespace AND relkind IN ('r', 'S', 'v') ORDER BY relname",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// What the migrations create, as [`catalog_relations`] lists it.
fn expected_relations() -> Vec<(String, String)> {
    [
        ("change_seq", "S"),
        ("jobs", "r"),
        ("jobs_id_seq", "S"),
        ("maintenance", "r"),
        ("meta", "r"),
        ("secret", "r"),
        ("segment_stats", "r"),
        ("segments", "r"),
        ("status", "v"),
        ("tables", "r"),
        ("tables_id_seq", "S"),
    ]
    .iter()
    .map(|(n, k)| (n.to_string(), k.to_string()))
    .collect()
}

async fn schema_version(c: &tokio_postgres::Client) -> String {
    c.query_one(
        "SELECT value FROM coldwire.meta WHERE key = 'schema_version'",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test]
async fn fresh_database_gets_every_object_and_a_second_migration_applies_nothing() {
    let db = create_db("cat_fresh");
    let mut c = connect_direct(&db).await;

    let report = catalog::migrate(&mut c).await.unwrap();
    assert_eq!(
        (report.from_version, report.to_version),
        (0, latest_version())
    );
    assert_eq!(report.applied, MIGRATIONS.to_vec());

    assert_eq!(catalog_relations(&c).await, expected_relations());
    let functions: Vec<String> = c
        .query(
            "SELECT proname::text FROM pg_proc WHERE pronamespace = 'coldwire'::regnamespace ORDER BY proname",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        functions,
        [
            "call_through_coldwire",
            "can_manage",
            "compact_table",
            "estimated_rows",
            "explain",
            "flush_table",
            // guard(bigint, bigint, text) of catalog v3, kept for proxies not yet
            // upgraded, and guard(bigint, jsonb, text) of v4.
            "guard",
            "guard",
            "plan_write",
            "read_lock",
            // No shared rehydrate: catalog v13 dropped it (each table has its own,
            // which checks coldwire's MAC of what it brings back).
            "set_policy",
            "tier_table",
            "untier_table"
        ]
    );
    assert_eq!(schema_version(&c).await, latest_version().to_string());
    let owner: String = c
        .query_one(
            "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'coldwire'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(owner, "postgres");

    // The second run changes nothing: same objects (same OIDs), same version.
    let oids = "SELECT array_agg(oid ORDER BY oid)::text FROM pg_class WHERE relnamespace = 'coldwire'::regnamespace";
    let before: String = c.query_one(oids, &[]).await.unwrap().get(0);
    let again = catalog::migrate(&mut c).await.unwrap();
    assert_eq!(
        (again.from_version, again.to_version),
        (latest_version(), latest_version())
    );
    assert!(again.applied.is_empty());
    assert_eq!(
        again.admin_role,
        AdminRole::Existed,
        "the first run created it or found it"
    );
    let after: String = c.query_one(oids, &[]).await.unwrap().get(0);
    assert_eq!(before, after);
    let rows: i64 = c
        .query_one("SELECT count(*) FROM coldwire.meta", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
}

#[tokio::test]
async fn racing_migrations_both_succeed_and_apply_once() {
    let db = create_db("cat_race");
    let mut a = connect_direct(&db).await;
    let mut b = connect_direct(&db).await;

    let (ra, rb) = tokio::join!(catalog::migrate(&mut a), catalog::migrate(&mut b));
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    let mut applied = [ra.applied.len(), rb.applied.len()];
    applied.sort_unstable();
    assert_eq!(
        applied,
        [0, MIGRATIONS.len()],
        "exactly one of them applies the migrations"
    );
    let waited = if ra.applied.is_empty() { &ra } else { &rb };
    assert_eq!(
        waited.from_version,
        latest_version(),
        "the one that waited saw the other's commit"
    );
    assert_eq!(catalog_relations(&a).await, expected_relations());
    let metas: i64 = a
        .query_one("SELECT count(*) FROM coldwire.meta", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(metas, 1);
}

#[tokio::test]
async fn an_ordinary_database_owner_migrates_and_public_is_fenced_off() {
    let (db, owner) = db_owned_by_ordinary_role("cat_owner");
    let mut c = connect_url(&url_as(&owner, &db)).await;
    let report = catalog::migrate(&mut c).await.unwrap();
    assert_eq!(report.applied.len(), MIGRATIONS.len());
    assert_ne!(
        report.admin_role,
        AdminRole::Created,
        "an ordinary role cannot create roles"
    );
    let schema_owner: String = c
        .query_one(
            "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'coldwire'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(schema_owner, owner);
    assert_eq!(schema_version(&c).await, latest_version().to_string());

    let who = stranger(&db);
    let s = connect_url(&url_as(&who, &db)).await;
    let can_create: bool = s
        .query_one("SELECT has_schema_privilege('coldwire', 'CREATE')", &[])
        .await
        .unwrap()
        .get(0);
    assert!(!can_create);
    let e = s
        .batch_execute("CREATE TABLE coldwire.intruder (i int)")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE), "{e:?}");
    let e = s
        .batch_execute("CREATE FUNCTION coldwire.guard() RETURNS int LANGUAGE sql AS 'SELECT 1'")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE), "{e:?}");
    for owner_only in [
        "coldwire.maintenance",
        "coldwire.segment_stats",
        "coldwire.secret",
    ] {
        let e = s
            .query(&format!("SELECT * FROM {owner_only}"), &[])
            .await
            .unwrap_err();
        assert_eq!(
            e.code(),
            Some(&SqlState::INSUFFICIENT_PRIVILEGE),
            "{owner_only}: {e:?}"
        );
    }
    let e = s
        .execute(
            "INSERT INTO coldwire.maintenance (xid) VALUES (pg_current_xact_id())",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE));
    let e = s
        .execute("DELETE FROM coldwire.tables", &[])
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE));
    // What PUBLIC may read, it can.
    for readable in [
        "coldwire.status",
        "coldwire.tables",
        "coldwire.segments",
        "coldwire.jobs",
    ] {
        s.query(&format!("SELECT * FROM {readable}"), &[])
            .await
            .unwrap_or_else(|e| panic!("{readable}: {e:?}"));
    }
}

#[tokio::test]
async fn a_schema_coldwire_of_a_foreign_role_is_refused() {
    let (db, owner) = db_owned_by_ordinary_role("cat_foreign");
    let squatter = stranger(&db);
    psql_admin(&db, &format!("CREATE SCHEMA coldwire AUTHORIZATION {squatter}; GRANT CREATE ON SCHEMA coldwire TO PUBLIC"));
    let mut c = connect_url(&url_as(&owner, &db)).await;
    let e = catalog::migrate(&mut c).await.unwrap_err();
    assert!(
        matches!(&e, CatalogError::ForeignSchema { owner } if *owner == squatter),
        "{e}"
    );
    assert!(e.to_string().contains(&squatter), "{e}");
    assert!(
        catalog_relations(&c).await.is_empty(),
        "nothing was created"
    );
}

#[tokio::test]
async fn a_role_owning_a_schema_made_for_it_needs_no_privilege_on_the_database() {
    let db = create_db("cat_preschema");
    let svc = stranger(&db);
    psql_admin(&db, &format!("CREATE SCHEMA coldwire AUTHORIZATION {svc}"));
    let mut c = connect_url(&url_as(&svc, &db)).await;
    let may_create: bool = c
        .query_one(
            "SELECT has_database_privilege(current_database(), 'CREATE')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!may_create);
    for _ in 0..2 {
        catalog::migrate(&mut c).await.unwrap();
    }
    assert_eq!(catalog_relations(&c).await, expected_relations());
}

#[tokio::test]
async fn a_newer_or_unreadable_catalog_version_is_refused() {
    let db = create_db("cat_newer");
    let mut c = connect_direct(&db).await;
    catalog::migrate(&mut c).await.unwrap();

    c.batch_execute("UPDATE coldwire.meta SET value = '999' WHERE key = 'schema_version'")
        .await
        .unwrap();
    let e = catalog::migrate(&mut c).await.unwrap_err();
    assert!(
        matches!(e, CatalogError::TooNew { found: 999, known } if known == latest_version()),
        "{e}"
    );
    let text = e.to_string();
    assert!(
        text.contains("version 999") && text.contains("newer"),
        "{text}"
    );
    assert_eq!(schema_version(&c).await, "999", "left as it was");

    c.batch_execute("UPDATE coldwire.meta SET value = 'one' WHERE key = 'schema_version'")
        .await
        .unwrap();
    let e = catalog::migrate(&mut c).await.unwrap_err();
    assert!(
        matches!(&e, CatalogError::BadVersion(v) if v == "one"),
        "{e}"
    );
}

#[tokio::test]
async fn a_database_that_is_not_utf8_is_refused() {
    let db = create_db("cat_ascii_probe");
    let ascii = format!("{db}_ascii");
    psql_admin(
        "postgres",
        &format!("CREATE DATABASE {ascii} ENCODING 'SQL_ASCII' TEMPLATE template0"),
    );
    let mut c = connect_direct(&ascii).await;
    let e = catalog::migrate(&mut c).await.unwrap_err();
    assert!(
        matches!(&e, CatalogError::Encoding { found } if found == "SQL_ASCII"),
        "{e}"
    );
    assert!(e.to_string().contains("UTF8"), "{e}");
    let schemas: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'coldwire'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(schemas, 0, "nothing was created");
}

#[tokio::test]
async fn admin_stubs_refuse_direct_calls_with_0a000() {
    let db = create_db("cat_stubs");
    let mut c = connect_direct(&db).await;
    catalog::migrate(&mut c).await.unwrap();
    c.batch_execute("CREATE TABLE x (id int PRIMARY KEY)")
        .await
        .unwrap();
    let who = stranger(&db);
    let s = connect_url(&url_as(&who, &db)).await;

    let calls = [
        ("tier_table", "SELECT coldwire.tier_table('x'::regclass)"),
        (
            "tier_table",
            "SELECT coldwire.tier_table('x', '{\"hot_row_limit\": 10}')",
        ),
        ("untier_table", "SELECT coldwire.untier_table('x')"),
        ("set_policy", "SELECT coldwire.set_policy('x', '{}')"),
        ("flush_table", "SELECT coldwire.flush_table('x'::regclass)"),
        (
            "flush_table",
            "SELECT coldwire.flush_table('x', wait => true, drain => true)",
        ),
        (
            "compact_table",
            "SELECT coldwire.compact_table('x', wait => true)",
        ),
        ("explain", "SELECT coldwire.explain('SELECT * FROM x')"),
    ];
    for client in [&c, &s] {
        for (name, sql) in calls {
            let e = client.query(sql, &[]).await.unwrap_err();
            let db_err = e.as_db_error().unwrap_or_else(|| panic!("{sql}: {e:?}"));
            assert_eq!(db_err.code(), &SqlState::FEATURE_NOT_SUPPORTED, "{sql}");
            assert_eq!(
                db_err.message(),
                format!("coldwire.{name} must be called through the coldwire proxy")
            );
            assert!(
                db_err.hint().is_some_and(|h| h.contains("coldwire")),
                "{sql}"
            );
        }
    }
}

/// A row of coldwire.status.
#[derive(Debug, PartialEq)]
struct Status {
    table_id: i64,
    schema_name: String,
    table_name: String,
    state: String,
    hot_rows: Option<i64>,
    mirror_rows: Option<i64>,
    cold_rows: i64,
    cold_bytes: i64,
    segments: i64,
    generation: i64,
    /// As text in UTC.
    last_flush: Option<String>,
    queued_jobs: i64,
}

async fn status_rows(c: &tokio_postgres::Client) -> Vec<Status> {
    c.batch_execute("SET TimeZone = 'UTC'").await.unwrap();
    let sql = "SELECT table_id, schema_name, table_name, state, hot_rows, mirror_rows, cold_rows, cold_bytes, \
               segments, generation, last_flush::text, queued_jobs FROM coldwire.status ORDER BY table_id";
    let rows = c.query(sql, &[]).await.unwrap();
    rows.iter()
        .map(|r| Status {
            table_id: r.get(0),
            schema_name: r.get(1),
            table_name: r.get(2),
            state: r.get(3),
            hot_rows: r.get(4),
            mirror_rows: r.get(5),
            cold_rows: r.get(6),
            cold_bytes: r.get(7),
            segments: r.get(8),
            generation: r.get(9),
            last_flush: r.get(10),
            queued_jobs: r.get(11),
        })
        .collect()
}

#[tokio::test]
async fn status_reports_each_tiered_table_and_follows_renames() {
    let db = create_db("cat_status");
    let mut c = connect_direct(&db).await;
    catalog::migrate(&mut c).await.unwrap();
    c.batch_execute(
        "CREATE SCHEMA app;
         CREATE TABLE app.events (id int PRIMARY KEY, v text);
         INSERT INTO app.events SELECT g, 'v' || g FROM generate_series(1, 1000) g;
         ANALYZE app.events;
         CREATE TABLE app.quiet (id int PRIMARY KEY);",
    )
    .await
    .unwrap();
    let tier = "INSERT INTO coldwire.tables (relid, schema_name, table_name, pk_attnums, columns, storage_prefix, state, generation) \
                VALUES ($1::text::regclass, 'app', $2, '{1}', '{}', $3, 'active', $4) RETURNING id";
    let events: i64 = c
        .query_one(tier, &[&"app.events", &"events", &"app.events-a", &3i64])
        .await
        .unwrap()
        .get(0);
    let quiet: i64 = c
        .query_one(tier, &[&"app.quiet", &"quiet", &"app.quiet-b", &0i64])
        .await
        .unwrap()
        .get(0);
    c.batch_execute(&format!(
        "CREATE TABLE coldwire.m_{events} (id int PRIMARY KEY, seq bigint NOT NULL, op smallint NOT NULL);
         INSERT INTO coldwire.m_{events} SELECT g, g, 1 FROM generate_series(1, 40) g;
         ANALYZE coldwire.m_{events};
         INSERT INTO coldwire.segments (segment_id, table_id, path, status, row_count, byte_size, sha256, schema_version, job_id, attempt)
         SELECT gen_random_uuid(), {events}, 'seg-' || n, st, rc, bs, repeat('a', 64), 1, 1, 1
         FROM (VALUES (1, 'active', 100, 1000), (2, 'active', 200, 3000), (3, 'pending', 50, 500), (4, 'retired', 70, 700))
              AS v(n, st, rc, bs);
         INSERT INTO coldwire.jobs (table_id, kind, state, finished_at) VALUES
             ({events}, 'flush', 'completed', '2026-01-01 00:00:00+00'),
             ({events}, 'flush', 'completed', '2026-01-02 03:04:05+00'),
             ({events}, 'flush', 'failed', '2026-02-01 00:00:00+00'),
             ({events}, 'compact', 'completed', '2026-03-01 00:00:00+00'),
             ({events}, 'flush', 'running', NULL),
             ({events}, 'compact', 'pending', NULL),
             ({quiet}, 'gc', 'failed', '2026-01-05 00:00:00+00');"
    ))
    .await
    .unwrap();

    // Hot and mirror rows are Postgres's running live counts (catalog v11): this
    // backend's counts reach the shared statistics at its next idle point.
    c.batch_execute("SELECT pg_stat_force_next_flush()")
        .await
        .unwrap();
    let rows = status_rows(&c).await;
    let events_row = Status {
        table_id: events,
        schema_name: "app".into(),
        table_name: "events".into(),
        state: "active".into(),
        hot_rows: Some(1000),
        mirror_rows: Some(40),
        cold_rows: 300,
        cold_bytes: 4000,
        segments: 2,
        generation: 3,
        last_flush: Some("2026-01-02 03:04:05+00".into()),
        queued_jobs: 2,
    };
    let quiet_row = Status {
        table_id: quiet,
        schema_name: "app".into(),
        table_name: "quiet".into(),
        state: "active".into(),
        hot_rows: Some(0),
        mirror_rows: None,
        cold_rows: 0,
        cold_bytes: 0,
        segments: 0,
        generation: 0,
        last_flush: None,
        queued_jobs: 0,
    };
    assert_eq!(rows, vec![events_row, quiet_row]);

    // Renames on a direct connection are followed (by relid), not the stored names.
    c.batch_execute("ALTER SCHEMA app RENAME TO app2; ALTER TABLE app2.events RENAME TO events2")
        .await
        .unwrap();
    let rows = status_rows(&c).await;
    assert_eq!(
        (rows[0].schema_name.as_str(), rows[0].table_name.as_str()),
        ("app2", "events2")
    );
    assert_eq!(
        (rows[1].schema_name.as_str(), rows[1].table_name.as_str()),
        ("app2", "quiet")
    );

    // Any role reads the view; segments and jobs only of tables it may SELECT.
    let who = stranger(&db);
    let s = connect_url(&url_as(&who, &db)).await;
    let seen = status_rows(&s).await;
    assert_eq!(
        seen,
        status_rows(&c).await,
        "the view shows every reader the same"
    );
    let count = |sql: &'static str| {
        let s = &s;
        async move { s.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    assert_eq!(count("SELECT count(*) FROM coldwire.segments").await, 0);
    assert_eq!(count("SELECT count(*) FROM coldwire.jobs").await, 0);
    assert_eq!(count("SELECT count(*) FROM coldwire.tables").await, 2);
    c.batch_execute(&format!("GRANT SELECT ON app2.events2 TO {who}"))
        .await
        .unwrap();
    assert_eq!(count("SELECT count(*) FROM coldwire.segments").await, 4);
    assert_eq!(count("SELECT count(*) FROM coldwire.jobs").await, 6);

    // A table dropped behind coldwire's back keeps its row (its cold data still exists),
    // under the stored names, without hot rows.
    c.batch_execute("DROP TABLE app2.quiet").await.unwrap();
    let rows = status_rows(&c).await;
    assert_eq!(
        (
            rows[1].schema_name.as_str(),
            rows[1].table_name.as_str(),
            rows[1].hot_rows
        ),
        ("app", "quiet", None)
    );
}

#[tokio::test]
async fn serve_with_a_service_url_migrates_the_catalog_and_hides_the_password() {
    let db = create_db("cat_serve");
    // Trust authentication ignores the password; it is there to prove it is never printed.
    let service = format!(
        "postgres://postgres:hunter2-secret@127.0.0.1:{}/{db}",
        cluster().port()
    );
    let proxy = Proxy::start(&["--service-url", &service]).await;
    let c = connect_direct(&db).await;
    assert_eq!(schema_version(&c).await, latest_version().to_string());
    assert!(
        proxy.log_contains("catalog migrated").await,
        "{}",
        proxy.log()
    );
    assert!(
        proxy
            .log()
            .contains(&format!("postgres@127.0.0.1:{}/{db}", cluster().port())),
        "{}",
        proxy.log()
    );
    assert!(!proxy.log().contains("hunter2"), "{}", proxy.log());
    // Through the proxy, the catalog is just there.
    let via = proxy.connect(&db).await;
    let n: i64 = via
        .query_one("SELECT count(*) FROM coldwire.status", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0);

    let second = Proxy::start(&["--service-url", &service]).await;
    assert!(
        second.log_contains("catalog is current").await,
        "{}",
        second.log()
    );

    let plain = Proxy::start(&[]).await;
    assert!(
        plain.log_contains("tiering is disabled").await,
        "{}",
        plain.log()
    );
}

#[tokio::test]
async fn serve_exits_naming_service_url_when_the_service_database_is_unreachable() {
    let closed_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let service = format!("postgres://svc:topsecret-pw@127.0.0.1:{closed_port}/app");
    let upstream = format!("postgres://127.0.0.1:{}/postgres", cluster().port());
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_coldwire"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &upstream,
            "--service-url",
            &service,
        ])
        .env("RUST_LOG", "coldwire=debug")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("coldwire exits")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains("listening"), "{stdout}");
    assert!(stderr.contains("service_url"), "{stderr}");
    assert!(
        stderr.contains(&format!("svc@127.0.0.1:{closed_port}/app")),
        "{stderr}"
    );
    assert!(
        !stderr.contains("topsecret") && !stdout.contains("topsecret"),
        "{stderr}"
    );
}

/// Role coldwire_admin belongs to the cluster, so its absence is tested on a cluster of
/// this test's own, where no other test creates it.
#[tokio::test]
async fn the_admin_role_is_created_when_allowed_and_optional_otherwise() {
    let opts = ClusterOptions {
        root: std::env::temp_dir().join(format!(
            "coldwire-test-{}-catalog-roles",
            std::process::id()
        )),
        die_with_parent: true,
        ..ClusterOptions::default()
    };
    let own = LocalCluster::start(&opts).expect("start a second cluster");
    let url = |role: &str, db: &str| format!("postgres://{role}@127.0.0.1:{}/{db}", own.port());
    let su = connect_url(&url("postgres", "postgres")).await;
    su.batch_execute("CREATE ROLE svc LOGIN").await.unwrap();
    su.batch_execute("CREATE ROLE alice LOGIN").await.unwrap();
    su.batch_execute("CREATE DATABASE app OWNER svc")
        .await
        .unwrap();

    // Without CREATEROLE: the catalog is created, the role is not, and the membership check
    // works without it.
    let mut svc = connect_url(&url("svc", "app")).await;
    let report = catalog::migrate(&mut svc).await.unwrap();
    assert_eq!(
        (report.applied.len(), report.admin_role),
        (MIGRATIONS.len(), AdminRole::Missing)
    );
    let roles: i64 = su
        .query_one(
            "SELECT count(*) FROM pg_roles WHERE rolname = $1",
            &[&ADMIN_ROLE],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(roles, 0);
    svc.batch_execute("CREATE TABLE t (id int PRIMARY KEY)")
        .await
        .unwrap();
    let alice = connect_url(&url("alice", "app")).await;
    let can_manage = "SELECT coldwire.can_manage('public.t')";
    assert!(
        svc.query_one(can_manage, &[])
            .await
            .unwrap()
            .get::<_, bool>(0),
        "the owner may"
    );
    assert!(
        !alice
            .query_one(can_manage, &[])
            .await
            .unwrap()
            .get::<_, bool>(0),
        "others may not"
    );

    // With CREATEROLE the next start creates it; members may manage every tiered table.
    su.batch_execute("ALTER ROLE svc CREATEROLE").await.unwrap();
    let report = catalog::migrate(&mut svc).await.unwrap();
    assert!(report.applied.is_empty());
    assert_eq!(report.admin_role, AdminRole::Created);
    assert_eq!(
        catalog::migrate(&mut svc).await.unwrap().admin_role,
        AdminRole::Existed
    );
    assert!(!alice
        .query_one(can_manage, &[])
        .await
        .unwrap()
        .get::<_, bool>(0));
    su.batch_execute(&format!("GRANT {ADMIN_ROLE} TO alice"))
        .await
        .unwrap();
    assert!(
        alice
            .query_one(can_manage, &[])
            .await
            .unwrap()
            .get::<_, bool>(0),
        "a member of {ADMIN_ROLE} may"
    );
    drop(own);
}
