//! Malformed and hostile input: each gets a proper ErrorResponse and a closed connection,
//! and every other session (and the next client) carries on.

mod common;

use std::time::Duration;

use common::raw::{self, tags, Msg, RawConn};
use common::{create_db, Proxy};
use tokio_postgres::error::SqlState;

/// The connection's last words: one FATAL ErrorResponse, then EOF.
async fn fatal_then_closed(c: &mut RawConn) -> Msg {
    let msgs = c.until_closed().await;
    let error = msgs
        .iter()
        .find(|m| m.tag == b'E')
        .unwrap_or_else(|| panic!("no ErrorResponse in {msgs:?}"));
    assert_eq!(error.field(b'S').as_deref(), Some("FATAL"));
    assert_eq!(
        msgs.last().map(|m| m.tag),
        Some(b'E'),
        "nothing may follow the FATAL error"
    );
    error.clone()
}

async fn still_serves(proxy: &Proxy, db: &str) {
    let c = proxy.connect(db).await;
    assert_eq!(
        c.query_one("SELECT 1 + 1", &[])
            .await
            .unwrap()
            .get::<_, i32>(0),
        2
    );
}

#[tokio::test]
async fn garbage_instead_of_a_startup_packet() {
    let db = create_db("garbage");
    let proxy = Proxy::start(&[]).await;
    // A session that is open the whole time must not notice anything.
    let bystander = proxy.connect(&db).await;

    let mut c = RawConn::connect(proxy.addr).await;
    c.send(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").await;
    let e = fatal_then_closed(&mut c).await;
    assert_eq!(e.field(b'C').as_deref(), Some("08P01"));
    assert!(e.field(b'M').unwrap().contains("startup packet length"));

    let mut c = RawConn::connect(proxy.addr).await;
    c.send(&[0, 0, 0, 4]).await;
    assert_eq!(
        fatal_then_closed(&mut c).await.field(b'C').as_deref(),
        Some("08P01")
    );

    // Random bytes that happen to have a plausible length.
    let mut c = RawConn::connect(proxy.addr).await;
    c.send(&[0, 0, 0, 12, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4])
        .await;
    let e = fatal_then_closed(&mut c).await;
    assert_eq!(
        e.field(b'C').as_deref(),
        Some("0A000"),
        "unknown protocol version"
    );

    assert_eq!(
        bystander
            .query_one("SELECT 3", &[])
            .await
            .unwrap()
            .get::<_, i32>(0),
        3
    );
    still_serves(&proxy, &db).await;
}

#[tokio::test]
async fn unsupported_protocol_version_gets_0a000() {
    let db = create_db("v2");
    let proxy = Proxy::start(&[]).await;
    let mut c = RawConn::connect(proxy.addr).await;
    let mut v2 = raw::startup("postgres", &db);
    v2[4..8].copy_from_slice(&[0, 2, 0, 0]);
    c.send(&v2).await;
    let e = fatal_then_closed(&mut c).await;
    assert_eq!(e.field(b'C').as_deref(), Some("0A000"));
    assert!(e.field(b'M').unwrap().contains("protocol 2.0"));
    still_serves(&proxy, &db).await;
}

#[tokio::test]
async fn malformed_startup_parameters_get_08p01() {
    let db = create_db("badparams");
    let proxy = Proxy::start(&[]).await;
    let mut packet = raw::startup("postgres", &db);
    let last = packet.len() - 1;
    packet[last] = b'x'; // no terminating NUL
    let mut c = RawConn::connect(proxy.addr).await;
    c.send(&packet).await;
    let e = fatal_then_closed(&mut c).await;
    assert_eq!(e.field(b'C').as_deref(), Some("08P01"));
    assert!(e.field(b'M').unwrap().contains("startup packet parameters"));

    // A startup packet longer than Postgres allows.
    let mut c = RawConn::connect(proxy.addr).await;
    c.send(&[0, 1, 0, 0, 0, 3, 0, 0]).await;
    assert_eq!(
        fatal_then_closed(&mut c).await.field(b'C').as_deref(),
        Some("08P01")
    );
    still_serves(&proxy, &db).await;
}

#[tokio::test]
async fn oversized_and_short_frames_after_startup() {
    let db = create_db("oversized");
    let proxy = Proxy::start(&["--max-message-bytes", "65536"]).await;

    let mut c = RawConn::ready(proxy.addr, &db).await;
    c.send(&[b'Q', 0x10, 0, 0, 0]).await; // declares 256 MiB
    let e = fatal_then_closed(&mut c).await;
    assert_eq!(e.field(b'C').as_deref(), Some("08P01"));
    assert!(
        e.field(b'M').unwrap().contains("max_message_bytes"),
        "{e:?}"
    );

    let mut c = RawConn::ready(proxy.addr, &db).await;
    c.send(&[b'Q', 0, 0, 0, 2]).await;
    let e = fatal_then_closed(&mut c).await;
    assert_eq!(e.field(b'C').as_deref(), Some("08P01"));
    assert!(e.field(b'M').unwrap().contains("below the minimum"));

    // A query just under the limit still works; COPY data above it streams through
    // because only inspected frames are bounded.
    let client = proxy.connect(&db).await;
    let sql = format!("SELECT length('{}')", "a".repeat(60_000));
    assert_eq!(
        client
            .query_one(sql.as_str(), &[])
            .await
            .unwrap()
            .get::<_, i32>(0),
        60_000
    );
    let e = client
        .query_one(&format!("SELECT '{}'", "a".repeat(70_000)), &[])
        .await
        .unwrap_err();
    assert!(e.is_closed() || e.code().is_some());
    still_serves(&proxy, &db).await;
}

#[tokio::test]
async fn malformed_frame_from_a_ready_client_after_a_query() {
    let db = create_db("malformed");
    let proxy = Proxy::start(&[]).await;
    let mut c = RawConn::ready(proxy.addr, &db).await;
    c.send(&raw::query("SELECT 1")).await;
    assert_eq!(tags(&c.until_ready().await), "TDCZ");
    // A Parse whose statement name is not NUL-terminated.
    c.send(&raw::frame(b'P', b"no-terminator")).await;
    let e = fatal_then_closed(&mut c).await;
    assert_eq!(e.field(b'C').as_deref(), Some("08P01"));
    // Unknown message types are Postgres's to judge: it answers 08P01 itself.
    let mut c = RawConn::ready(proxy.addr, &db).await;
    c.send(&raw::frame(b'!', b"")).await;
    let e = fatal_then_closed(&mut c).await;
    assert_eq!(e.field(b'C').as_deref(), Some("08P01"));
    still_serves(&proxy, &db).await;
}

#[tokio::test]
async fn data_smuggled_after_ssl_request_is_refused() {
    let db = create_db("stuffing");
    let dir = tempfile::tempdir().unwrap();
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.key_pair.serialize_pem()).unwrap();
    let proxy = Proxy::start(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ])
    .await;

    let mut c = RawConn::connect(proxy.addr).await;
    let mut bytes = vec![0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    bytes.extend(raw::startup("postgres", &db));
    c.send(&bytes).await;
    let e = fatal_then_closed(&mut c).await;
    assert_eq!(e.field(b'C').as_deref(), Some("08P01"));

    // Without TLS configured an SSLRequest gets 'N' and the plaintext startup proceeds.
    let plain = Proxy::start(&[]).await;
    let mut c = RawConn::connect(plain.addr).await;
    c.send(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]).await;
    assert_eq!(c.read_byte().await, Some(b'N'));
    c.send(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30]).await; // GSSENCRequest
    assert_eq!(c.read_byte().await, Some(b'N'));
    c.send(&raw::startup("postgres", &db)).await;
    assert_eq!(c.until_ready().await.last().map(|m| m.tag), Some(b'Z'));
    still_serves(&proxy, &db).await;
}

#[tokio::test]
async fn unreachable_upstream_is_a_clear_fatal_not_a_hang() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let proxy =
        Proxy::start_with_upstream(&format!("postgres://127.0.0.1:{port}/postgres"), &[]).await;
    let started = std::time::Instant::now();
    let err =
        match tokio_postgres::connect(&proxy.url("postgres", "postgres"), tokio_postgres::NoTls)
            .await
        {
            Ok(_) => panic!("connected to nothing"),
            Err(e) => e,
        };
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        err.code(),
        Some(&SqlState::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
        "{err:?}"
    );
    let db_err = err.as_db_error().unwrap();
    assert!(db_err
        .message()
        .contains("cannot connect to the database server"));
    assert!(db_err.hint().is_some());
    assert!(
        !db_err.message().contains(&port.to_string()),
        "the client must not see internal addresses"
    );
    assert!(
        proxy.log_contains(&format!("127.0.0.1:{port}")).await,
        "the log names the address"
    );
}

#[tokio::test]
async fn client_vanishing_mid_message_leaves_others_untouched() {
    let db = create_db("vanish");
    let proxy = Proxy::start(&[]).await;
    let bystander = proxy.connect(&db).await;
    for _ in 0..20 {
        let mut c = RawConn::ready(proxy.addr, &db).await;
        // Half a query, then gone.
        c.send(&raw::query("SELECT pg_sleep(0)")[..7]).await;
        drop(c);
    }
    assert_eq!(
        bystander
            .query_one("SELECT 5", &[])
            .await
            .unwrap()
            .get::<_, i32>(0),
        5
    );
    // The upstream backends of the vanished clients are gone too.
    let mut open = i64::MAX;
    for _ in 0..50 {
        open = bystander
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if open == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(open, 1, "backends of vanished clients must end");
}
