//! Admin calls answered by the proxy itself, in the simple and the extended protocol, in
//! protocol order with whatever else the client sends. (This proxy runs without a service
//! connection, so calls that pass validation are refused with 55000.)

mod common;

use common::raw::{self, tags, RawConn};
use common::{create_db, Proxy};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

#[tokio::test]
async fn simple_protocol_calls_are_answered_by_coldwire() {
    let db = create_db("admin_simple");
    let proxy = Proxy::start(&[]).await;
    let c = proxy.connect(&db).await;
    c.batch_execute("CREATE TABLE events(id bigint PRIMARY KEY, v text)")
        .await
        .unwrap();

    let e = c
        .simple_query("SELECT coldwire.tier_table('events')")
        .await
        .unwrap_err();
    let db_err = e.as_db_error().expect("an ErrorResponse");
    assert_eq!(db_err.code(), &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE);
    assert!(
        db_err.hint().unwrap().contains("--service-url"),
        "{db_err:?}"
    );

    // Bad policies are reported with the key named, before anything else.
    let e = c
        .simple_query(r#"SELECT coldwire.tier_table('events', '{"hot_rows": 5}')"#)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::INVALID_PARAMETER_VALUE));
    assert!(e.as_db_error().unwrap().message().contains("\"hot_rows\""));
    let e = c
        .simple_query("SELECT coldwire.set_policy('events', '{\"min_flush_rows\": 0}')")
        .await
        .unwrap_err();
    assert!(e
        .as_db_error()
        .unwrap()
        .message()
        .contains("min_flush_rows"));

    // Forms coldwire cannot answer get 0A000 with a hint; Postgres never sees them.
    let e = c
        .simple_query("SELECT coldwire.tier_table(relname::regclass) FROM pg_class")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED));
    let e = c
        .simple_query("SELECT coldwire.flush_table('events', hurry => true)")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::UNDEFINED_FUNCTION));

    // The session carries on, inside a transaction block too.
    c.batch_execute("BEGIN").await.unwrap();
    c.batch_execute("INSERT INTO events VALUES (1, 'a')")
        .await
        .unwrap();
    assert!(c
        .simple_query("SELECT coldwire.tier_table('events')")
        .await
        .is_err());
    let n: i64 = c
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
    c.batch_execute("COMMIT").await.unwrap();
    assert!(proxy.log_contains("admin call refused").await);
}

#[tokio::test]
async fn extended_protocol_calls_are_answered_by_coldwire() {
    let db = create_db("admin_extended");
    let proxy = Proxy::start(&[]).await;
    let c = proxy.connect(&db).await;

    // Parse and Describe are answered by coldwire: the parameter types are the
    // function's (regclass, boolean), the columns those of its readable answer.
    let stmt = c
        .prepare("SELECT coldwire.flush_table($1, wait => $2)")
        .await
        .unwrap();
    assert_eq!(stmt.params(), &[Type::REGCLASS, Type::BOOL]);
    let described: Vec<(&str, &Type)> = stmt
        .columns()
        .iter()
        .map(|c| (c.name(), c.type_()))
        .collect();
    assert_eq!(
        described,
        [
            ("table", &Type::TEXT),
            ("job_id", &Type::INT8),
            ("state", &Type::TEXT),
            ("rows_done", &Type::INT8),
            ("rows_total", &Type::INT8),
            ("segments", &Type::INT8),
            ("error", &Type::TEXT),
            ("details", &Type::JSONB),
        ]
    );

    let from_form = c
        .prepare("SELECT * FROM coldwire.flush_table($1, wait => $2)")
        .await
        .unwrap();
    assert_eq!(from_form.params(), stmt.params());
    assert_eq!(from_form.columns().len(), 8);
    assert_eq!(from_form.columns()[7].name(), "details");

    let typed = c
        .prepare_typed(
            "SELECT coldwire.flush_table($1, wait => $2) AS job",
            &[Type::TEXT, Type::BOOL],
        )
        .await
        .unwrap();
    assert_eq!(typed.params(), &[Type::TEXT, Type::BOOL]);
    assert_eq!(
        typed.columns().len(),
        8,
        "an alias does not change the answer's columns"
    );
    let e = c.query(&typed, &[&"events", &true]).await.unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE));
    // The same prepared statement again, after the error: still coldwire's.
    let e = c.query(&typed, &[&"events", &false]).await.unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE));

    let policy = c
        .prepare_typed(
            "SELECT coldwire.set_policy($1, $2)",
            &[Type::TEXT, Type::JSONB],
        )
        .await
        .unwrap();
    let bad = serde_json::json!({"check_interval": "soon"});
    let e = c.query(&policy, &[&"events", &bad]).await.unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::INVALID_PARAMETER_VALUE));

    // Ordinary statements on the same connection are untouched.
    let n: i32 = c
        .query_one("SELECT $1::int + 1", &[&41i32])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 42);
}

#[tokio::test]
async fn raw_groups_are_answered_in_protocol_order() {
    let db = create_db("admin_raw");
    let proxy = Proxy::start(&[]).await;
    let mut c = RawConn::ready(proxy.addr, &db).await;

    // A group coldwire answers from Parse to Execute; Postgres answers the Sync.
    let mut batch = Vec::new();
    batch.extend(raw::parse("", "SELECT coldwire.tier_table($1)"));
    batch.extend(raw::bind("", &["events"]));
    batch.extend(raw::frame(b'D', b"P\0"));
    batch.extend(raw::execute());
    batch.extend(raw::parse("", "SELECT 'skipped after the error'"));
    batch.extend(raw::sync());
    c.send(&batch).await;
    let msgs = c.until_ready().await;
    assert_eq!(tags(&msgs), "12TEZ");
    assert_eq!(msgs[3].field(b'C').as_deref(), Some("55000"));
    assert_eq!(msgs[4].body, b"I");

    // The unnamed statement is the client's again after a normal Parse.
    let mut batch = Vec::new();
    batch.extend(raw::parse("", "SELECT 7"));
    batch.extend(raw::bind("", &[]));
    batch.extend(raw::execute());
    batch.extend(raw::sync());
    c.send(&batch).await;
    let msgs = c.until_ready().await;
    assert_eq!(tags(&msgs), "12DCZ");
    assert_eq!(msgs[2].body[6..], *b"7");

    // After other messages went upstream in the same group, an admin call cannot be
    // answered in order: it is relayed, and this database has no coldwire catalog, so
    // Postgres reports the function as missing — in order, after the first statement.
    let mut batch = Vec::new();
    batch.extend(raw::parse("", "SELECT 1"));
    batch.extend(raw::bind("", &[]));
    batch.extend(raw::execute());
    batch.extend(raw::parse("", "SELECT coldwire.tier_table('events')"));
    batch.extend(raw::bind("", &[]));
    batch.extend(raw::execute());
    batch.extend(raw::sync());
    c.send(&batch).await;
    let msgs = c.until_ready().await;
    assert_eq!(tags(&msgs), "12DCEZ");
    assert_eq!(
        msgs[4].field(b'C').as_deref(),
        Some("3F000"),
        "{:?}",
        msgs[4].field(b'M')
    );

    // A simple query inside a failed transaction block is refused like Postgres would.
    c.send(&raw::query("BEGIN")).await;
    c.until_ready().await;
    c.send(&raw::query("SELECT 1/0")).await;
    assert_eq!(c.until_ready().await.last().unwrap().body, b"E");
    c.send(&raw::query("SELECT coldwire.tier_table('events')"))
        .await;
    let msgs = c.until_ready().await;
    assert_eq!(tags(&msgs), "EZ");
    assert_eq!(msgs[0].field(b'C').as_deref(), Some("25P02"));
    assert_eq!(msgs[1].body, b"E");
    c.send(&raw::query("ROLLBACK")).await;
    assert_eq!(c.until_ready().await.last().unwrap().body, b"I");
}
