//! The pass-through relay with real clients: simple and extended protocol, errors,
//! pipelines, COPY, LISTEN/NOTIFY, cancel — each compared with what Postgres itself says.

mod common;

use std::time::{Duration, Instant};

use common::raw::{self, tags, RawConn};
use common::{connect_direct, create_db, Proxy};
use futures_util::{SinkExt, StreamExt, TryStreamExt};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::{AsyncMessage, SimpleQueryMessage};

#[tokio::test]
async fn simple_and_extended_queries_match_direct() {
    let db = create_db("queries");
    let proxy = Proxy::start(&[]).await;
    let via = proxy.connect(&db).await;
    let direct = connect_direct(&db).await;

    let batch = "CREATE TABLE t(id int PRIMARY KEY, name text, b bytea, f float8, ok bool); \
                 INSERT INTO t VALUES (1, 'a', '\\x00ff', 1.5, true), (2, NULL, NULL, 'NaN', false); \
                 SELECT id, name FROM t ORDER BY id";
    let msgs = via.simple_query(batch).await.unwrap();
    let rows: Vec<(String, Option<String>)> = msgs
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((r.get(0).unwrap().to_owned(), r.get(1).map(str::to_owned)))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            ("1".to_owned(), Some("a".to_owned())),
            ("2".to_owned(), None)
        ]
    );

    // Extended protocol, typed parameters, binary results: identical through coldwire.
    let sql =
        "SELECT id, name, b, f, ok, $1::int8 + id AS sum, $2::text || 'x' AS s FROM t ORDER BY id";
    let stmt = via
        .prepare_typed(sql, &[Type::INT8, Type::TEXT])
        .await
        .unwrap();
    assert_eq!(stmt.params(), &[Type::INT8, Type::TEXT]);
    let through: Vec<_> = via.query(&stmt, &[&40i64, &"é"]).await.unwrap();
    let plain: Vec<_> = direct.query(sql, &[&40i64, &"é"]).await.unwrap();
    assert_eq!(through.len(), 2);
    for (a, b) in through.iter().zip(&plain) {
        assert_eq!(a.get::<_, i32>(0), b.get::<_, i32>(0));
        assert_eq!(a.get::<_, Option<&str>>(1), b.get::<_, Option<&str>>(1));
        assert_eq!(a.get::<_, Option<&[u8]>>(2), b.get::<_, Option<&[u8]>>(2));
        let (fa, fb) = (a.get::<_, f64>(3), b.get::<_, f64>(3));
        assert!(fa == fb || (fa.is_nan() && fb.is_nan()));
        assert_eq!(a.get::<_, bool>(4), b.get::<_, bool>(4));
        assert_eq!(a.get::<_, i64>(5), b.get::<_, i64>(5));
        assert_eq!(a.get::<_, &str>(6), "éx");
    }
    assert_eq!(
        through[0].get::<_, Option<&[u8]>>(2),
        Some(&[0u8, 0xff][..])
    );

    // Prepared statements survive across transactions on the same session.
    let tx_stmt = via
        .prepare("SELECT count(*) FROM t WHERE id > $1")
        .await
        .unwrap();
    for _ in 0..3 {
        via.batch_execute("BEGIN").await.unwrap();
        assert_eq!(
            via.query_one(&tx_stmt, &[&0i32])
                .await
                .unwrap()
                .get::<_, i64>(0),
            2
        );
        via.batch_execute("COMMIT").await.unwrap();
    }
}

#[tokio::test]
async fn postgres_errors_arrive_with_every_field() {
    let db = create_db("errors");
    let proxy = Proxy::start(&[]).await;
    let c = proxy.connect(&db).await;
    c.batch_execute("CREATE TABLE u(id int CONSTRAINT u_pk PRIMARY KEY); INSERT INTO u VALUES (1)")
        .await
        .unwrap();

    let e = c
        .execute("INSERT INTO u VALUES (1)", &[])
        .await
        .unwrap_err();
    let db_err = e.as_db_error().expect("a server error");
    assert_eq!(db_err.code(), &SqlState::UNIQUE_VIOLATION);
    assert_eq!(db_err.constraint(), Some("u_pk"));
    assert_eq!(db_err.table(), Some("u"));
    assert_eq!(db_err.detail(), Some("Key (id)=(1) already exists."));

    let e = c.simple_query("SELECT 1 FROM nowhere").await.unwrap_err();
    let db_err = e.as_db_error().unwrap();
    assert_eq!(db_err.code(), &SqlState::UNDEFINED_TABLE);
    assert_eq!(
        db_err.position(),
        Some(&tokio_postgres::error::ErrorPosition::Original(15))
    );

    let e = c
        .batch_execute("DO $$ BEGIN RAISE EXCEPTION 'boom' USING DETAIL = 'd1', HINT = 'h1', ERRCODE = 'P0099'; END $$")
        .await
        .unwrap_err();
    let db_err = e.as_db_error().unwrap();
    assert_eq!(
        (db_err.message(), db_err.detail(), db_err.hint()),
        ("boom", Some("d1"), Some("h1"))
    );
    assert_eq!(db_err.code().code(), "P0099");

    // The session is still usable after errors, inside and outside transactions.
    c.batch_execute("BEGIN").await.unwrap();
    assert!(c.batch_execute("SELECT 1/0").await.is_err());
    let e = c.batch_execute("SELECT 1").await.unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::IN_FAILED_SQL_TRANSACTION));
    c.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(
        c.query_one("SELECT 2", &[]).await.unwrap().get::<_, i32>(0),
        2
    );
}

#[tokio::test]
async fn pipelined_extended_messages_before_one_sync() {
    let db = create_db("pipeline");
    let proxy = Proxy::start(&[]).await;
    let mut c = RawConn::ready(proxy.addr, &db).await;

    let mut batch = Vec::new();
    batch.extend(raw::parse("s1", "SELECT $1::int + 1"));
    batch.extend(raw::bind("s1", &["41"]));
    batch.extend(raw::execute());
    batch.extend(raw::parse("s2", "SELECT 'two'"));
    batch.extend(raw::bind("s2", &[]));
    batch.extend(raw::execute());
    batch.extend(raw::bind("s1", &["1"]));
    batch.extend(raw::execute());
    batch.extend(raw::sync());
    c.send(&batch).await;
    let msgs = c.until_ready().await;
    assert_eq!(tags(&msgs), "12DC12DC2DCZ");
    assert_eq!(msgs[2].body[6..], *b"42");
    assert_eq!(msgs[6].body[6..], *b"two");
    assert_eq!(msgs[9].body[6..], *b"2");

    // An error mid-pipeline: the rest up to Sync is skipped, the next segment runs.
    let mut batch = Vec::new();
    batch.extend(raw::parse("bad", "SELEC 1"));
    batch.extend(raw::bind("bad", &[]));
    batch.extend(raw::execute());
    batch.extend(raw::sync());
    batch.extend(raw::bind("s2", &[]));
    batch.extend(raw::execute());
    batch.extend(raw::sync());
    c.send(&batch).await;
    let first = c.until_ready().await;
    assert_eq!(tags(&first), "EZ");
    assert_eq!(first[0].field(b'C').as_deref(), Some("42601"));
    assert_eq!(tags(&c.until_ready().await), "2DCZ");
}

#[tokio::test]
async fn copy_in_and_out_of_100k_rows() {
    let db = create_db("copy");
    let proxy = Proxy::start(&[]).await;
    let c = proxy.connect(&db).await;
    c.batch_execute("CREATE TABLE c(id int, payload text)")
        .await
        .unwrap();

    let sink = c.copy_in("COPY c FROM STDIN").await.unwrap();
    futures_util::pin_mut!(sink);
    let mut chunk = String::new();
    for i in 0..100_000 {
        chunk.push_str(&format!("{i}\trow {i} \\\\ tab\\there\n"));
        if chunk.len() > 60_000 {
            sink.send(bytes::Bytes::from(std::mem::take(&mut chunk)))
                .await
                .unwrap();
        }
    }
    sink.send(bytes::Bytes::from(chunk)).await.unwrap();
    assert_eq!(sink.finish().await.unwrap(), 100_000);

    let direct = connect_direct(&db).await;
    let n: i64 = direct
        .query_one("SELECT count(*) FROM c", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 100_000);

    let read = |client: tokio_postgres::Client| async move {
        let stream = client
            .copy_out("COPY (SELECT * FROM c ORDER BY id) TO STDOUT")
            .await
            .unwrap();
        let parts: Vec<bytes::Bytes> = stream.try_collect().await.unwrap();
        parts.concat()
    };
    let through = read(c).await;
    let plain = read(direct).await;
    assert_eq!(through.len(), plain.len());
    assert!(through == plain, "COPY TO output differs through coldwire");
    assert_eq!(through.iter().filter(|&&b| b == b'\n').count(), 100_000);
}

#[tokio::test]
async fn listen_notify_between_two_clients() {
    let db = create_db("notify");
    let proxy = Proxy::start(&[]).await;
    let url = proxy.url("postgres", &db);
    let (listener, mut connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(m)) = messages.next().await {
            if let AsyncMessage::Notification(n) = m {
                let _ = tx.send((n.channel().to_owned(), n.payload().to_owned()));
            }
        }
    });
    listener
        .batch_execute("LISTEN coldwire_test")
        .await
        .unwrap();
    let notifier = proxy.connect(&db).await;
    notifier
        .batch_execute("NOTIFY coldwire_test, 'hello'")
        .await
        .unwrap();
    notifier
        .execute("SELECT pg_notify('coldwire_test', $1)", &[&"second"])
        .await
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap()
        .unwrap();
    let second = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first, ("coldwire_test".to_owned(), "hello".to_owned()));
    assert_eq!(second.1, "second");
}

#[tokio::test]
async fn cancel_through_the_proxy_ends_the_query_with_57014() {
    let db = create_db("cancel");
    let proxy = Proxy::start(&[]).await;
    let c = proxy.connect(&db).await;
    let token = c.cancel_token();
    let started = Instant::now();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        token.cancel_query(tokio_postgres::NoTls).await
    });
    let e = c.batch_execute("SELECT pg_sleep(30)").await.unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::QUERY_CANCELED));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "cancel took {:?}",
        started.elapsed()
    );
    canceller.await.unwrap().unwrap();
    // The session carries on after the cancel.
    assert_eq!(
        c.query_one("SELECT 1", &[]).await.unwrap().get::<_, i32>(0),
        1
    );
    assert!(
        proxy
            .log_contains("cancel request forwarded upstream")
            .await
    );
}

#[tokio::test]
async fn the_client_holds_coldwires_cancel_key_not_the_backends() {
    let db = create_db("cancelkey");
    let proxy = Proxy::start(&[]).await;
    let mut c = RawConn::connect(proxy.addr).await;
    c.send(&raw::startup("postgres", &db)).await;
    let opening = c.until_ready().await;
    let key = opening
        .iter()
        .find(|m| m.tag == b'K')
        .expect("BackendKeyData");
    let issued_pid = i32::from_be_bytes(key.body[..4].try_into().unwrap());
    c.send(&raw::query("SELECT pg_backend_pid()")).await;
    let reply = c.until_ready().await;
    let data_row = reply.iter().find(|m| m.tag == b'D').expect("a row");
    let backend_pid: i32 = std::str::from_utf8(&data_row.body[6..])
        .unwrap()
        .parse()
        .unwrap();
    assert_ne!(issued_pid, backend_pid);
    assert!(issued_pid > 0);

    // A forged key cancels nothing and gets no answer; the session is unaffected.
    let mut forged = vec![0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e];
    forged.extend_from_slice(&backend_pid.to_be_bytes());
    forged.extend_from_slice(&key.body[4..8]);
    let mut cancel = RawConn::connect(proxy.addr).await;
    cancel.send(&forged).await;
    assert!(cancel.next().await.is_none());
    c.send(&raw::query("SELECT 1")).await;
    assert_eq!(tags(&c.until_ready().await), "TDCZ");
}

#[tokio::test]
async fn large_values_stream_both_ways() {
    let db = create_db("large");
    let proxy = Proxy::start(&[]).await;
    let c = proxy.connect(&db).await;
    let big = "x".repeat(20 * 1024 * 1024);
    let row = c
        .query_one("SELECT $1::text AS v, length($1::text)", &[&big])
        .await
        .unwrap();
    assert_eq!(row.get::<_, &str>(0).len(), big.len());
    assert_eq!(row.get::<_, i32>(1) as usize, big.len());
    let generated: i32 = c
        .query_one("SELECT length(repeat('y', 50000000))", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(generated, 50_000_000);
    let row = c
        .query_one("SELECT repeat('z', 30000000)", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, &str>(0).len(), 30_000_000);
}
