//! `COPY … TO STDOUT` of a tiered table through coldwire gives, byte for byte, what
//! Postgres gives for the same plain table, in text, CSV and binary, with their options;
//! psql's `\copy` and pg_dump through coldwire write every row, cold ones included; a COPY
//! into a server-side file, or with options Postgres refuses, fails clearly.

mod common;

use common::raw::{self, RawConn};
use common::{admin_call, cluster, connect_direct, create_db, pg_bin, Proxy};

/// The CopyData payloads (or the SQLSTATE of an error) of a COPY run as a simple Query.
async fn copy_bytes(conn: &mut RawConn, sql: &str) -> Result<Vec<u8>, String> {
    conn.send(&raw::query(sql)).await;
    let msgs = conn.until_ready().await;
    if let Some(e) = msgs.iter().find(|m| m.tag == b'E') {
        return Err(e.field(b'C').unwrap_or_default());
    }
    let tags = raw::tags(&msgs);
    assert!(
        tags.starts_with('H') && tags.ends_with("cCZ"),
        "{sql}: {tags}"
    );
    Ok(msgs
        .iter()
        .filter(|m| m.tag == b'd')
        .flat_map(|m| m.body.clone())
        .collect())
}

fn sorted_lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut lines: Vec<Vec<u8>> = bytes.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
    lines.sort();
    lines
}

#[tokio::test]
async fn copy_to_stdout_matches_postgres_in_every_format() {
    let db = create_db("copyto");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(
            r#"CREATE TABLE t(id bigint PRIMARY KEY, s text, n numeric(12,3), b bytea, at timestamptz, a int[], j jsonb, f float8);
             CREATE TABLE control(LIKE t INCLUDING ALL);
             INSERT INTO t SELECT g,
                 CASE g % 7 WHEN 0 THEN NULL WHEN 1 THEN 'tab	and
newline' WHEN 2 THEN 'back\slash "quoted", comma' WHEN 3 THEN '' WHEN 4 THEN 'ünïcödé ☃' WHEN 5 THEN '\.' ELSE 'plain ' || g END,
                 g / 7.0, decode(lpad(to_hex(g), 6, '0'), 'hex'), '2026-01-01'::timestamptz + g * interval '1 hour',
                 ARRAY[g, NULL, -g], jsonb_build_object('k', g, 'q', 'a"b'), CASE WHEN g % 50 = 0 THEN 'NaN' ELSE g * 0.25 END
             FROM generate_series(1, 1200) g;
             INSERT INTO control SELECT * FROM t;"#,
        )
        .await
        .unwrap();
    let proxy = Proxy::start(&["--service-url", &cluster().url(&db), "--cold-store", &store]).await;
    let c = proxy.connect(&db).await;
    admin_call(&c, r#"SELECT coldwire.tier_table('t', '{"hot_row_limit": 100, "min_flush_rows": 100, "max_rows_per_file": 500, "auto_flush": false}')"#)
        .await
        .unwrap();
    admin_call(&c, "SELECT coldwire.flush_table('t', wait => true)")
        .await
        .unwrap();
    let hot: i64 = direct
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert!(hot <= 100, "{hot} hot rows");

    let mut tiered = RawConn::ready(proxy.addr, &db).await;
    let mut plain = RawConn::ready(
        format!("127.0.0.1:{}", cluster().port()).parse().unwrap(),
        &db,
    )
    .await;
    let ordered = [
        "COPY (SELECT * FROM {t} ORDER BY id) TO STDOUT",
        "COPY (SELECT * FROM {t} ORDER BY id) TO STDOUT WITH (FORMAT csv, HEADER, FORCE_QUOTE *)",
        "COPY (SELECT id, s, a FROM {t} ORDER BY id) TO STDOUT WITH (FORMAT csv, DELIMITER ';', NULL 'NULL', QUOTE '''', ESCAPE '\\', FORCE_QUOTE (s))",
        "COPY (SELECT * FROM {t} ORDER BY id) TO STDOUT (FORMAT binary)",
        "COPY (SELECT id, s FROM {t} WHERE id BETWEEN 500 AND 700 ORDER BY id) TO STDOUT (DELIMITER '|', NULL '', HEADER)",
        "copy (select s from {t} order by id) to stdout csv",
        // Comments before the statement or its query, a `;` before it.
        "/* tool */ COPY (SELECT * FROM {t} ORDER BY id) TO STDOUT",
        ";COPY /* q */ (SELECT id, s FROM {t} ORDER BY id) TO STDOUT (FORMAT csv)",
    ];
    for sql in ordered {
        let expected = copy_bytes(&mut plain, &sql.replace("{t}", "control"))
            .await
            .unwrap();
        let got = copy_bytes(&mut tiered, &sql.replace("{t}", "t"))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert!(expected.len() > 1000, "{sql}");
        assert!(
            got == expected,
            "{sql}: {} bytes, {} expected",
            got.len(),
            expected.len()
        );
    }
    // Whole-table forms: same rows in another order.
    for sql in [
        "COPY {t} TO STDOUT",
        "COPY public.{t} (id, s, f) TO STDOUT (FORMAT csv, HEADER)",
    ] {
        let expected = copy_bytes(&mut plain, &sql.replace("{t}", "control"))
            .await
            .unwrap();
        let got = copy_bytes(&mut tiered, &sql.replace("{t}", "t"))
            .await
            .unwrap();
        assert_eq!(sorted_lines(&got), sorted_lines(&expected), "{sql}");
    }

    // Refused, and the session carries on.
    assert_eq!(
        copy_bytes(&mut tiered, "COPY t TO '/tmp/coldwire-copy'").await,
        Err("0A000".into())
    );
    let err = copy_bytes(
        &mut tiered,
        "COPY t TO STDOUT (FORMAT csv, FORCE_QUOTE (nope))",
    )
    .await;
    assert_eq!(err, Err("42703".into()));
    assert_eq!(
        copy_bytes(
            &mut plain,
            "COPY control TO STDOUT (FORMAT csv, FORCE_QUOTE (nope))"
        )
        .await,
        Err("42703".into()),
        "as Postgres says"
    );
    assert_eq!(
        copy_bytes(&mut tiered, "COPY (SELECT 1) TO STDOUT")
            .await
            .unwrap(),
        b"1\n"
    );

    // A COPY of a tiered table is served only as a Query of its own. Among several
    // statements, first or not, it is refused rather than relayed with its hot rows only;
    // so is any COPY beside a statement on a tiered table. Nothing of the string runs.
    for sql in [
        "COPY t TO STDOUT; SELECT 1",
        "SELECT 1; COPY t TO STDOUT",
        "/* first */ COPY (SELECT id FROM t WHERE id > 0) TO STDOUT;SELECT 1",
        "select 1 ;\n  copy public.t (id) to stdout (format csv) ; ",
        "COPY control TO STDOUT; SELECT count(*) FROM t",
        "SELECT count(*) FROM t; COPY control TO STDOUT",
        "COPY control TO STDOUT; UPDATE t SET s = 'changed' WHERE id < 1000",
        "SELECT 1; COPY (SELECT id FROM t FOR UPDATE) TO STDOUT",
        // Alone, a COPY whose query locks or writes the rows coldwire cannot serve.
        "COPY (SELECT id FROM t WHERE id < 10 FOR UPDATE) TO STDOUT",
        "/* c */ COPY (DELETE FROM t WHERE id = 5 RETURNING id) TO STDOUT",
        "COPY (UPDATE t SET s = 'changed' WHERE id < 1000 RETURNING id) TO STDOUT",
    ] {
        assert_eq!(
            copy_bytes(&mut tiered, sql).await,
            Err("0A000".into()),
            "{sql}"
        );
    }
    let changed: i64 = c
        .query_one("SELECT count(*) FROM t WHERE s = 'changed'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(changed, 0);
    let five: i64 = c
        .query_one("SELECT count(*) FROM t WHERE id = 5", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(five, 1, "the refused DELETE ran nowhere");
    // A materialized view over the table is Postgres's to copy (reading one runs
    // nothing), alone or among statements.
    direct
        .batch_execute("CREATE MATERIALIZED VIEW frozen AS SELECT id FROM t")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    for sql in [
        "COPY (SELECT count(*) FROM frozen) TO STDOUT",
        "SELECT 1; COPY (SELECT count(*) FROM frozen) TO STDOUT",
    ] {
        tiered.send(&raw::query(sql)).await;
        let msgs = tiered.until_ready().await;
        assert!(
            !raw::tags(&msgs).contains('E'),
            "{sql}: {:?}",
            msgs.iter()
                .find(|m| m.tag == b'E')
                .and_then(|m| m.field(b'M'))
        );
        let data: Vec<u8> = msgs
            .iter()
            .filter(|m| m.tag == b'd')
            .flat_map(|m| m.body.clone())
            .collect();
        assert_eq!(data, format!("{hot}\n").into_bytes(), "{sql}");
    }
    // A CTE named like the table is the CTE.
    assert_eq!(
        copy_bytes(
            &mut tiered,
            "COPY (WITH t AS (SELECT 7) SELECT * FROM t) TO STDOUT"
        )
        .await
        .unwrap(),
        b"7\n"
    );
    // A COPY of a plain table among several statements is Postgres's, message for message.
    let sql = "COPY control (id, s) TO STDOUT; SELECT 1";
    let mut answers = Vec::new();
    for conn in [&mut tiered, &mut plain] {
        conn.send(&raw::query(sql)).await;
        let msgs = conn.until_ready().await;
        let data: Vec<Vec<u8>> = msgs
            .iter()
            .filter(|m| m.tag == b'd')
            .map(|m| m.body.clone())
            .collect();
        answers.push((raw::tags(&msgs), data));
    }
    assert_eq!(answers[0], answers[1]);
    assert!(answers[0].0.starts_with('H'), "{}", answers[0].0);
    assert_eq!(answers[0].1.len(), 1200);

    // In the extended protocol (tokio-postgres's copy_out) a COPY of a tiered table is
    // refused rather than answered with its hot rows only.
    let err = c
        .copy_out("COPY t TO STDOUT")
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(
        err.as_db_error().map(|e| e.code().code()),
        Some("0A000"),
        "{err:?}"
    );
    assert!(err
        .as_db_error()
        .unwrap()
        .hint()
        .unwrap()
        .contains("simple Query"));
    let plain_copy = c.copy_out("COPY (SELECT 1) TO STDOUT").await;
    assert!(plain_copy.is_ok(), "COPY without tiered tables passes");

    // psql's \copy and pg_dump through coldwire write every row.
    let out = dir.path().join("t.copy");
    let psql = std::process::Command::new(pg_bin("psql"))
        .args([
            "-X",
            "-q",
            "-h",
            "127.0.0.1",
            "-p",
            &proxy.addr.port().to_string(),
            "-U",
            "postgres",
            "-d",
            &db,
        ])
        .args([
            "-c",
            &format!("\\copy t TO '{}' WITH (FORMAT csv)", out.display()),
        ])
        .output()
        .unwrap();
    assert!(
        psql.status.success(),
        "{}",
        String::from_utf8_lossy(&psql.stderr)
    );
    let copied = std::fs::read_to_string(&out).unwrap();
    let expected = copy_bytes(&mut plain, "COPY control TO STDOUT (FORMAT csv)")
        .await
        .unwrap();
    assert_eq!(sorted_lines(copied.as_bytes()), sorted_lines(&expected));

    let dump = std::process::Command::new(pg_bin("pg_dump"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &proxy.addr.port().to_string(),
            "-U",
            "postgres",
        ])
        .args(["--data-only", "-t", "public.t", &db])
        .output()
        .unwrap();
    assert!(
        dump.status.success(),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let text = String::from_utf8_lossy(&dump.stdout);
    let data: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("COPY public.t "))
        .skip(1)
        .take_while(|l| *l != "\\.")
        .collect();
    assert_eq!(data.len(), 1200, "pg_dump wrote every row");
}
