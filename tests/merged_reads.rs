//! Merged reads through the proxy (simple protocol): a tiered table whose rows are mostly
//! cold answers every read like the plain table it was, for tokio-postgres and psql; a read
//! over the cold-row cap fails with 54000 and the session carries on; a name that resolves
//! to another relation in the session (a temporary table) is refused rather than answered
//! from the wrong table.

mod common;

use common::flushing::{Flushing, EXPECTED};
use common::raw::{self, RawConn};
use common::{admin_call, cluster, connect_direct, create_db, pg_bin, simple_rows, Proxy};
use tokio_postgres::SimpleQueryMessage;

/// Tiers `table` (named as `tier_table` takes it) through `c` and flushes it down to at
/// most 100 hot rows.
async fn tier_and_flush(c: &tokio_postgres::Client, table: &str) {
    let quoted = table.replace('\'', "''");
    admin_call(c, &format!(r#"SELECT coldwire.tier_table('{quoted}', '{{"hot_row_limit": 100, "min_flush_rows": 100, "auto_flush": false}}')"#))
        .await
        .unwrap();
    admin_call(
        c,
        &format!("SELECT coldwire.flush_table('{quoted}', wait => true)"),
    )
    .await
    .unwrap();
}

/// The rows of a simple query, as text.

#[tokio::test]
async fn simple_queries_see_hot_and_cold_rows_like_a_plain_table() {
    let db = create_db("mergedreads");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(
            "CREATE TABLE events(id bigint PRIMARY KEY, kind text, amount numeric(10,2), at timestamptz, tags text[]);
             CREATE TABLE control(LIKE events INCLUDING ALL);
             INSERT INTO events SELECT g, 'k' || g % 4, g / 4.0, '2026-01-01'::timestamptz + g * interval '1 minute', ARRAY[g::text]
             FROM generate_series(1, 3000) g;
             INSERT INTO control SELECT * FROM events;",
        )
        .await
        .unwrap();
    let proxy = Proxy::start_env(
        &["--service-url", &cluster().url(&db), "--cold-store", &store],
        &[("COLDWIRE_MAX_COLD_ROWS", "2500")],
    )
    .await;
    let c = proxy.connect(&db).await;
    admin_call(&c, r#"SELECT coldwire.tier_table('events', '{"hot_row_limit": 200, "min_flush_rows": 100, "max_rows_per_file": 1000, "auto_flush": false}')"#)
        .await
        .unwrap();
    admin_call(&c, "SELECT coldwire.flush_table('events', wait => true)")
        .await
        .unwrap();
    for sql in [
        "UPDATE {t} SET kind = 'late' WHERE id > 2950",
        "INSERT INTO {t} VALUES (5000, 'new', 1, '2026-06-01', '{}')",
    ] {
        c.batch_execute(&sql.replace("{t}", "events"))
            .await
            .unwrap();
        direct
            .batch_execute(&sql.replace("{t}", "control"))
            .await
            .unwrap();
    }
    let hot: i64 = direct
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert!(hot <= 201, "the heap holds the newest rows only: {hot}");

    for sql in [
        "SELECT * FROM events WHERE id = 17",
        "SELECT id, kind, amount, at, tags FROM events WHERE id IN (1, 1500, 2999, 5000) ORDER BY id",
        "SELECT kind, count(*), sum(amount) FROM events WHERE id BETWEEN 100 AND 2000 GROUP BY kind ORDER BY kind",
        "SELECT e.id FROM events e JOIN control c USING (id) WHERE e.id < 40 AND e.kind = c.kind ORDER BY 1",
        "select count(*) from EVENTS where id > 2900",
    ] {
        let expected = simple_rows(&direct, &sql.replace("events", "control").replace("EVENTS", "control")).await.unwrap();
        let got = simple_rows(&c, sql).await.unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        assert_eq!(got, expected, "{sql}");
    }

    // psql reads the whole table through coldwire, cold rows included.
    let out = std::process::Command::new(pg_bin("psql"))
        .args([
            "-X",
            "-A",
            "-t",
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
            "SELECT count(*), min(id), max(id) FROM events WHERE id <= 2400",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "2400|1|2400",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // An aggregate of the whole table is answered from cold partials, under the cap.
    assert_eq!(
        simple_rows(&c, "SELECT count(*) FROM events")
            .await
            .unwrap(),
        vec![vec![Some("3001".to_owned())]]
    );
    // Rows over the cap: 54000 with a hint, and the session goes on.
    let err = c
        .simple_query("SELECT id FROM events WHERE kind <> 'x'")
        .await
        .unwrap_err();
    let db_err = err.as_db_error().unwrap();
    assert_eq!(db_err.code().code(), "54000", "{db_err:?}");
    assert!(
        db_err.message().contains("2500") && db_err.message().contains("events"),
        "{db_err:?}"
    );
    assert!(db_err.hint().is_some_and(|h| h.contains("max_cold_rows")));
    assert_eq!(
        simple_rows(&c, "SELECT kind FROM events WHERE id = 2")
            .await
            .unwrap(),
        vec![vec![Some("k2".to_owned())]]
    );

    // A temporary table named like the tiered one shadows it in this session: refused.
    c.batch_execute("CREATE TEMP TABLE events(id bigint, kind text)")
        .await
        .unwrap();
    let err = c
        .simple_query("SELECT kind FROM events WHERE id = 2")
        .await
        .unwrap_err();
    assert_eq!(
        err.as_db_error().map(|e| e.code().code()),
        Some("0A000"),
        "{err:?}"
    );
    assert_eq!(
        simple_rows(&c, "SELECT kind FROM public.events WHERE id = 2")
            .await
            .unwrap(),
        vec![vec![Some("k2".to_owned())]]
    );
}

#[tokio::test]
async fn reads_during_auto_flush_never_miss_or_double_a_row_and_guard_failures_are_retried() {
    let db = create_db("readsflush");
    let mut flushing = Flushing::start(&db, 25, 50).await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(8);

    let mut readers = Vec::new();
    for r in 0..2i64 {
        let client = flushing.proxy.connect(&db).await;
        readers.push(tokio::spawn(async move {
            let mut reads = 0;
            let mut k = 7 + r * 500;
            while tokio::time::Instant::now() < deadline {
                let all = simple_rows(&client, "SELECT count(*), sum(v) FROM t WHERE id <= 2000")
                    .await
                    .unwrap_or_else(|e| panic!("{e:?}"));
                assert_eq!(
                    all,
                    vec![vec![Some("2000".to_owned()), Some(EXPECTED.1.to_string())]],
                    "no row missing or doubled"
                );
                k = k * 31 % 2000 + 1;
                let one = simple_rows(&client, &format!("SELECT v FROM t WHERE id = {k}"))
                    .await
                    .unwrap_or_else(|e| panic!("{e:?}"));
                assert_eq!(one, vec![vec![Some((k * 3).to_string())]], "key {k}");
                reads += 2;
            }
            reads
        }));
    }
    let mut reads = 0;
    for r in readers {
        match r.await {
            Ok(n) => reads += n,
            Err(e) => panic!("{e:?}\nproxy log:\n{}", flushing.proxy.log()),
        }
    }
    assert!(reads > 20, "{reads} reads");
    assert!(
        flushing.proxy.log_contains("running the read again").await,
        "the guard fired and the read was retried"
    );
    flushing.stop().await;
}

#[tokio::test]
async fn query_strings_of_several_statements_keep_their_implicit_transaction() {
    let db = create_db("multistmt");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(
            "CREATE TABLE events(id bigint PRIMARY KEY, kind text);
             CREATE TABLE control(LIKE events INCLUDING ALL);
             CREATE TABLE side(id int);
             INSERT INTO events SELECT g, 'k' || g % 4 FROM generate_series(1, 1000) g;
             INSERT INTO control SELECT * FROM events;",
        )
        .await
        .unwrap();
    let proxy = Proxy::start(&["--service-url", &cluster().url(&db), "--cold-store", &store]).await;
    let c = proxy.connect(&db).await;
    tier_and_flush(&c, "events").await;

    let messages = |msgs: Vec<tokio_postgres::SimpleQueryMessage>| {
        msgs.into_iter()
            .map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => {
                    format!(
                        "row {:?}",
                        (0..r.len())
                            .map(|i| r.get(i).map(str::to_owned))
                            .collect::<Vec<_>>()
                    )
                }
                tokio_postgres::SimpleQueryMessage::CommandComplete(n) => format!("complete {n}"),
                tokio_postgres::SimpleQueryMessage::RowDescription(d) => {
                    format!("columns {}", d.len())
                }
                _ => "other".to_owned(),
            })
            .collect::<Vec<_>>()
    };
    let sql = "SELECT count(*), max(id) FROM {t}; INSERT INTO side VALUES (1); SELECT kind FROM {t} WHERE id = 2; SELECT 42";
    let got = messages(c.simple_query(&sql.replace("{t}", "events")).await.unwrap());
    let expected = messages(
        direct
            .simple_query(&sql.replace("{t}", "control"))
            .await
            .unwrap(),
    );
    assert_eq!(got, expected);
    assert!(
        got.contains(&"row [Some(\"1000\"), Some(\"1000\")]".to_owned()),
        "{got:?}"
    );

    // One implicit transaction: an error in a later statement undoes the earlier ones.
    let err = c
        .simple_query("INSERT INTO side VALUES (2); SELECT count(*) FROM events; SELECT 1/0")
        .await
        .unwrap_err();
    assert_eq!(err.as_db_error().map(|e| e.code().code()), Some("22012"));
    let side = simple_rows(&direct, "SELECT count(*) FROM side WHERE id = 2")
        .await
        .unwrap();
    assert_eq!(side, vec![vec![Some("0".to_owned())]]);
    // Transaction control inside the string works as in Postgres.
    let got = simple_rows(
        &c,
        "BEGIN; INSERT INTO side VALUES (3); SELECT count(*) FROM events WHERE id <= 500; COMMIT",
    )
    .await
    .unwrap();
    assert_eq!(got, vec![vec![Some("500".to_owned())]]);
    assert_eq!(
        simple_rows(&direct, "SELECT count(*) FROM side WHERE id = 3")
            .await
            .unwrap(),
        vec![vec![Some("1".to_owned())]]
    );
    // The session is idle again: a plain statement outside any block.
    assert_eq!(
        simple_rows(&c, "SELECT count(*) FROM events")
            .await
            .unwrap(),
        vec![vec![Some("1000".to_owned())]]
    );
    // A COPY beside a read of a tiered table is refused, not half-served.
    let err = c
        .simple_query("SELECT count(*) FROM events; COPY side TO STDOUT")
        .await
        .unwrap_err();
    assert_eq!(err.as_db_error().map(|e| e.code().code()), Some("0A000"));
}

#[tokio::test]
async fn views_over_a_tiered_table_see_its_cold_rows_and_materialized_views_are_refused() {
    let db = create_db("views");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(
            "CREATE TABLE events(id bigint PRIMARY KEY, kind text);
             CREATE TABLE control(LIKE events INCLUDING ALL);
             INSERT INTO events SELECT g, 'k' || g % 4 FROM generate_series(1, 1000) g;
             INSERT INTO control SELECT * FROM events;
             CREATE VIEW early AS SELECT id, kind FROM events WHERE id < 600;
             CREATE VIEW early_c AS SELECT id, kind FROM control WHERE id < 600;
             CREATE MATERIALIZED VIEW kinds AS SELECT kind, count(*) FROM events GROUP BY kind;",
        )
        .await
        .unwrap();
    let proxy = Proxy::start(&["--service-url", &cluster().url(&db), "--cold-store", &store]).await;
    let c = proxy.connect(&db).await;
    tier_and_flush(&c, "events").await;
    // Views created through coldwire after tiering are defined on the table as usual.
    for (v, t) in [("", "events"), ("_c", "control")] {
        c.batch_execute(&format!(
            "CREATE VIEW counted{v} (k, n) AS SELECT kind, count(*) FROM {t} GROUP BY kind;
             CREATE VIEW on_view{v} AS SELECT e.id FROM early{v} e WHERE e.kind = 'k1';"
        ))
        .await
        .unwrap();
    }
    for sql in [
        "SELECT count(*), max(id) FROM early{v}",
        "SELECT * FROM counted{v} ORDER BY k",
        "SELECT count(*) FROM on_view{v} o WHERE o.id > 10",
        "SELECT x.k, y.id FROM counted{v} x JOIN early{v} y ON y.kind = x.k WHERE y.id = 7",
    ] {
        let expected = simple_rows(&c, &sql.replace("{v}", "_c")).await.unwrap();
        let got = simple_rows(&c, &sql.replace("{v}", ""))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        assert_eq!(got, expected, "{sql}");
        let extended = c.query(&sql.replace("{v}", ""), &[]).await.unwrap();
        assert_eq!(extended.len(), expected.len(), "{sql} (extended)");
    }
    assert_eq!(
        simple_rows(&c, "SELECT count(*) FROM early").await.unwrap(),
        vec![vec![Some("599".to_owned())]]
    );
    // Refused rather than answered with hot rows only.
    for sql in [
        "CREATE VIEW guarded WITH (security_barrier) AS SELECT * FROM events",
        "CREATE MATERIALIZED VIEW more AS SELECT * FROM events",
        "REFRESH MATERIALIZED VIEW kinds",
    ] {
        match c.simple_query(sql).await {
            Err(e) if sql.starts_with("CREATE VIEW") => panic!("{sql}: {e:?}"),
            Err(e) => assert_eq!(
                e.as_db_error().map(|d| d.code().code()),
                Some("0A000"),
                "{sql}: {e:?}"
            ),
            Ok(_) => {
                let err = c.simple_query("SELECT * FROM guarded").await.unwrap_err();
                assert_eq!(
                    err.as_db_error().map(|d| d.code().code()),
                    Some("0A000"),
                    "{err:?}"
                );
            }
        }
    }
    // A materialized view not over a tiered table is nobody's business.
    c.batch_execute("CREATE MATERIALIZED VIEW events_elsewhere AS SELECT 1 AS one")
        .await
        .unwrap();
}

/// Integer and time columns whose dictionary fills fall back to delta-encoded pages, and
/// read back exactly, extremes included: type limits, ±infinity, `24:00:00` and NULLs,
/// through full scans and through lookups that select rows inside a page.
#[tokio::test]
async fn delta_encoded_pages_read_back_every_value_exactly() {
    let db = create_db("deltapages");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let direct = connect_direct(&db).await;
    // Row g is distinct in every column (so no dictionary holds a column), every 97th row
    // holds the extremes and every 13th is NULL.
    direct
        .batch_execute(
            "CREATE TABLE wide(id bigint PRIMARY KEY, i2 int2, i4 int4, i8 int8, d date, t time, ts timestamp, tz timestamptz);
             CREATE TABLE control(LIKE wide INCLUDING ALL);
             INSERT INTO wide SELECT g,
                 CASE WHEN g % 97 = 0 THEN (CASE WHEN g % 2 = 0 THEN 32767 ELSE -32768 END)
                      WHEN g % 13 = 0 THEN NULL ELSE (g * 7919) % 65536 - 32768 END,
                 CASE WHEN g % 97 = 0 THEN (CASE WHEN g % 2 = 0 THEN 2147483647 ELSE -2147483648 END)
                      WHEN g % 13 = 0 THEN NULL ELSE g * 104729 - 1000000000 END,
                 CASE WHEN g % 97 = 0 THEN (CASE WHEN g % 2 = 0 THEN 9223372036854775807 ELSE -9223372036854775808 END)
                      WHEN g % 13 = 0 THEN NULL ELSE g * 1000003 * (CASE WHEN g % 2 = 0 THEN 1 ELSE -1 END) END,
                 CASE WHEN g % 97 = 0 THEN (CASE WHEN g % 2 = 0 THEN 'infinity' ELSE '-infinity' END)::date
                      WHEN g % 13 = 0 THEN NULL ELSE date '2000-01-01' + ((g * 37) % 200000 - 100000)::int END,
                 CASE WHEN g % 97 = 0 THEN (CASE WHEN g % 2 = 0 THEN '24:00:00' ELSE '00:00:00' END)::time
                      WHEN g % 13 = 0 THEN NULL ELSE time '00:00' + (g * 1000003 % 86400000000) * interval '1 microsecond' END,
                 CASE WHEN g % 97 = 0 THEN (CASE WHEN g % 2 = 0 THEN 'infinity' ELSE '-infinity' END)::timestamp
                      WHEN g % 13 = 0 THEN NULL ELSE timestamp '2026-01-01' + g * interval '30 milliseconds' + (g % 7) * interval '1 microsecond' END,
                 CASE WHEN g % 97 = 0 THEN (CASE WHEN g % 2 = 0 THEN 'infinity' ELSE '-infinity' END)::timestamptz
                      WHEN g % 13 = 0 THEN NULL ELSE timestamptz '1970-01-01 00:00:00+00' - g * interval '1 day 3 seconds' END
             FROM generate_series(1::bigint, 20000) g;
             INSERT INTO control SELECT * FROM wide;",
        )
        .await
        .unwrap();
    let proxy = Proxy::start(&["--service-url", &cluster().url(&db), "--cold-store", &store]).await;
    let c = proxy.connect(&db).await;
    admin_call(&c, r#"SELECT coldwire.tier_table('wide', '{"hot_row_limit": 100, "min_flush_rows": 100, "max_rows_per_file": 12000, "auto_flush": false}')"#)
        .await
        .unwrap();
    admin_call(&c, "SELECT coldwire.flush_table('wide', wait => true)")
        .await
        .unwrap();

    // The segments really hold delta-encoded pages for every one of these columns.
    let segments = common::segments::footers(dir.path());
    assert_eq!(segments.len(), 2);
    for (path, metadata) in &segments {
        for column in metadata.row_group(0).columns() {
            let name = column.column_path().string();
            if ["id", "i2", "i4", "i8", "d", "t", "ts", "tz", "_cw_seq"].contains(&name.as_str()) {
                assert!(
                    column
                        .encodings()
                        .any(|e| e == parquet::basic::Encoding::DELTA_BINARY_PACKED),
                    "{name} in {path:?}: {:?}",
                    column.encodings().collect::<Vec<_>>()
                );
            }
        }
    }

    assert_answers_like_control(
        &c,
        &direct,
        "wide",
        &[
            "SELECT * FROM wide ORDER BY id",
            "SELECT * FROM wide WHERE id IN (1, 13, 97, 194, 4095, 4096, 4097, 5003, 11999, 12000, 12001, 19900) ORDER BY id",
            "SELECT * FROM wide WHERE id = 9991",
            "SELECT count(*), min(i8), max(i8), min(ts), max(ts), min(d), max(t) FROM wide",
        ],
    )
    .await;
}

/// A new database with `t(id bigint PRIMARY KEY, note text, n int)` of ids 1 to `rows`
/// (`note` an expression of `g`, the id; `n` is `g % 100`) and `control`, a plain copy;
/// a folder for the cold store, and its URL; a direct connection.
async fn table_and_control(
    hint: &str,
    note: &str,
    rows: i64,
) -> (String, tempfile::TempDir, String, tokio_postgres::Client) {
    let db = create_db(hint);
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(&format!(
            "CREATE TABLE t(id bigint PRIMARY KEY, note text, n int);
             CREATE TABLE control(LIKE t INCLUDING ALL);
             INSERT INTO t SELECT g, {note}, g % 100 FROM generate_series(1, {rows}) g;
             INSERT INTO control SELECT * FROM t;"
        ))
        .await
        .unwrap();
    (db, dir, store, direct)
}

/// Each of `sqls` answers through `c` exactly as it does directly with the word `table`
/// read as `control` (a plain copy of the table's rows).
async fn assert_answers_like_control(
    c: &tokio_postgres::Client,
    direct: &tokio_postgres::Client,
    table: &str,
    sqls: &[&str],
) {
    for sql in sqls {
        let plain: Vec<&str> = sql
            .split(' ')
            .map(|w| if w == table { "control" } else { w })
            .collect();
        let expected = simple_rows(direct, &plain.join(" ")).await.unwrap();
        let got = simple_rows(c, sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        assert_eq!(got.len(), expected.len(), "{sql}");
        assert_eq!(got, expected, "{sql}");
    }
}

/// The policy's `compression` says how new segments' pages are compressed: LZ4 by
/// default, zstd when asked. Segments of both codecs in one table read back together, by
/// lookups and scans; a codec coldwire does not write is refused with 22023 naming the key.
#[tokio::test]
async fn segments_are_compressed_as_the_policy_says_and_read_back_together() {
    let (db, dir, store, direct) =
        table_and_control("compression", "repeat('note ' || g % 7, 3)", 3000).await;
    let proxy = Proxy::start(&["--service-url", &cluster().url(&db), "--cold-store", &store]).await;
    let c = proxy.connect(&db).await;
    let tiered = admin_call(&c, r#"SELECT coldwire.tier_table('t', '{"hot_row_limit": 1000, "min_flush_rows": 500, "auto_flush": false}')"#)
        .await
        .unwrap();
    assert_eq!(tiered["policy"]["compression"], "lz4", "{tiered}");
    let err = admin_call(
        &c,
        r#"SELECT coldwire.set_policy('t', '{"compression": "gzip"}')"#,
    )
    .await
    .unwrap_err();
    let db_err = err.as_db_error().expect("a database error");
    assert_eq!(db_err.code().code(), "22023", "{db_err:?}");
    assert!(db_err.message().contains("compression"), "{db_err:?}");

    let codecs = || {
        common::segments::footers(dir.path())
            .into_iter()
            .map(|(path, metadata)| {
                let mut codecs: Vec<_> = metadata
                    .row_groups()
                    .iter()
                    .flat_map(|g| g.columns().iter().map(|c| c.compression()))
                    .collect();
                codecs.dedup();
                (path, codecs)
            })
            .collect::<Vec<_>>()
    };
    admin_call(&c, "SELECT coldwire.flush_table('t', wait => true)")
        .await
        .unwrap();
    let first = codecs();
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(
        first[0].1,
        vec![parquet::basic::Compression::LZ4_RAW],
        "{first:?}"
    );

    let changed = admin_call(
        &c,
        r#"SELECT coldwire.set_policy('t', '{"compression": "zstd", "hot_row_limit": 200}')"#,
    )
    .await
    .unwrap();
    assert_eq!(changed["policy"]["compression"], "zstd", "{changed}");
    admin_call(&c, "SELECT coldwire.flush_table('t', wait => true)")
        .await
        .unwrap();
    let both = codecs();
    assert_eq!(both.len(), 2, "{both:?}");
    let second: Vec<_> = both.iter().filter(|(p, _)| *p != first[0].0).collect();
    assert_eq!(second.len(), 1, "{both:?}");
    assert!(
        matches!(
            second[0].1.as_slice(),
            [parquet::basic::Compression::ZSTD(_)]
        ),
        "{both:?}"
    );

    assert_answers_like_control(
        &c,
        &direct,
        "t",
        &[
            "SELECT * FROM t ORDER BY id",
            "SELECT * FROM t WHERE id IN (1, 999, 1000, 1001, 2500, 2800, 3000) ORDER BY id",
            "SELECT * FROM t WHERE id = 1700",
            "SELECT count(*), sum(n), min(note), max(id) FROM t",
        ],
    )
    .await;
}

/// A lookup whose pages the page cache does not keep decodes only the rows whose key it
/// asks for: the reader filters the key column before it decodes the others. Whether the
/// cache is off, or so small that it keeps some pages and refuses others, every lookup
/// (cold, hot, updated and deleted cold keys, absent keys, IN lists short and long,
/// conditions on other columns) answers as the plain table does.
#[tokio::test]
async fn lookups_answer_alike_whether_the_page_cache_keeps_their_pages_or_not() {
    let (db, _dir, store, direct) =
        table_and_control("lookupcache", "repeat(md5(g::text), 4)", 20000).await;
    let service = cluster().url(&db);
    let proxy = |cache_mb: &'static str| {
        let (service, store) = (service.clone(), store.clone());
        async move {
            Proxy::start(&[
                "--service-url",
                &service,
                "--cold-store",
                &store,
                "--cold-cache-mb",
                cache_mb,
            ])
            .await
        }
    };
    let (off, small) = (proxy("0").await, proxy("1").await);
    let c = off.connect(&db).await;
    admin_call(
        &c,
        r#"SELECT coldwire.tier_table('t', '{"hot_row_limit": 2000, "auto_flush": false}')"#,
    )
    .await
    .unwrap();
    admin_call(&c, "SELECT coldwire.flush_table('t', wait => true)")
        .await
        .unwrap();
    for sql in [
        "UPDATE t SET n = -1 WHERE id IN (5, 1500, 7000)",
        "DELETE FROM t WHERE id IN (6, 9000)",
    ] {
        c.batch_execute(sql).await.unwrap();
        direct
            .batch_execute(&sql.replace(" t ", " control "))
            .await
            .unwrap();
    }

    // With the cache off, a cold key's lookup scans its one row, not its page's 1,024.
    let explained = simple_rows(
        &c,
        "SELECT coldwire.explain('SELECT * FROM t WHERE id = 12345')",
    )
    .await
    .unwrap()[0][0]
        .clone()
        .unwrap();
    assert!(explained.contains("1 injected (1 scanned"), "{explained}");

    let mut sqls: Vec<String> = [
        1, 5, 6, 1023, 1024, 1025, 1500, 7000, 9000, 12345, 17999, 18000, 18001, 19999, 20000,
        20001, 0, -3,
    ]
    .iter()
    .map(|id| format!("SELECT * FROM t WHERE id = {id}"))
    .collect();
    let long: Vec<String> = (1..=20).map(|i| (i * 911).to_string()).collect();
    sqls.extend([
        "SELECT * FROM t WHERE id IN (1, 6, 2000, 4097, 9000, 15000, 19000) ORDER BY id".to_owned(),
        format!(
            "SELECT * FROM t WHERE id IN ({}) ORDER BY id",
            long.join(", ")
        ),
        "SELECT id, n FROM t WHERE id = 3333 AND n = 33".to_owned(),
        "SELECT id, n FROM t WHERE id = 3333 AND n = 34".to_owned(),
        "SELECT count(*) FROM t WHERE id = 1500 AND n = -1".to_owned(),
    ]);
    let sqls: Vec<&str> = sqls.iter().map(String::as_str).collect();
    let s = small.connect(&db).await;
    // Three passes: first touches, keys asked for again, pages pushed out.
    for _ in 0..3 {
        assert_answers_like_control(&c, &direct, "t", &sqls).await;
        assert_answers_like_control(&s, &direct, "t", &sqls).await;
    }
}

/// At default settings, a read that needs more cold rows than the old row cap (100,000)
/// answers like the plain table; the bound that remains is on memory, and a read past it
/// fails with 54000 naming the table and `max_cold_memory_mb`, and the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_many_cold_rows_answer_at_default_settings_and_memory_bounds_them() {
    let db = create_db("manycold");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(
            "CREATE TABLE wide(id bigint PRIMARY KEY, n int4, note text);
             INSERT INTO wide SELECT g, g % 97, 'n' || g FROM generate_series(1, 150000) g;
             CREATE TABLE control AS SELECT * FROM wide;
             CREATE TABLE big(id bigint PRIMARY KEY, body text);
             INSERT INTO big SELECT g, repeat(chr(65 + g % 26), 1000) FROM generate_series(1, 3000) g;",
        )
        .await
        .unwrap();
    let url = cluster().url(&db);
    let defaults = Proxy::start(&["--service-url", &url, "--cold-store", &store]).await;
    let c = defaults.connect(&db).await;
    for table in ["wide", "big"] {
        admin_call(&c, &format!(r#"SELECT coldwire.tier_table('{table}', '{{"hot_row_limit": 100, "min_flush_rows": 100, "auto_flush": false}}')"#))
            .await
            .unwrap();
        admin_call(
            &c,
            &format!("SELECT coldwire.flush_table('{table}', wait => true)"),
        )
        .await
        .unwrap();
    }
    // `note LIKE` is not evaluated cold-side: every cold row is bound to the statement.
    let summary = "SELECT count(*), sum(n), max(note) FROM {t} WHERE note LIKE 'n%'";
    let rows = "SELECT id, n, note FROM {t} WHERE note LIKE 'n1%' ORDER BY id";
    for sql in [summary, rows] {
        assert_eq!(
            simple_rows(&c, &sql.replace("{t}", "wide")).await.unwrap(),
            simple_rows(&direct, &sql.replace("{t}", "control"))
                .await
                .unwrap(),
            "{sql}"
        );
    }
    // 3 MB of cold text against a 1 MiB bound.
    let bounded = Proxy::start(&[
        "--service-url",
        &url,
        "--cold-store",
        &store,
        "--max-cold-memory-mb",
        "1",
    ])
    .await;
    let c = bounded.connect(&db).await;
    let err = c
        .simple_query("SELECT count(*) FROM big WHERE body LIKE 'A%'")
        .await
        .unwrap_err();
    let db_err = err.as_db_error().unwrap();
    assert_eq!(db_err.code().code(), "54000", "{db_err:?}");
    assert!(
        db_err.message().contains("big") && db_err.message().contains("1 MiB"),
        "{db_err:?}"
    );
    assert!(db_err
        .hint()
        .is_some_and(|h| h.contains("max_cold_memory_mb")));
    // A narrower read fits, and the session went on.
    assert_eq!(
        simple_rows(
            &c,
            "SELECT count(*) FROM big WHERE body LIKE 'A%' AND id <= 500"
        )
        .await
        .unwrap(),
        vec![vec![Some("19".to_owned())]]
    );
}

/// A function or procedure whose body reads a tiered table (or a view over one)
/// server-side would see its hot rows only: a statement that calls one, in any form, is
/// refused with 0A000 naming it and runs nothing, unless the session or the function
/// declares that it reads hot rows only (`coldwire.hot_only_reads = on`). Calls of other
/// functions, and an EXPLAIN that does not run the call, pass.
#[tokio::test]
async fn calls_of_functions_that_read_a_tiered_table_server_side_are_refused() {
    let TieredEvents {
        c, direct, hot, ..
    } = &tiered_events(
        "readingfns",
        r#"CREATE TABLE log(n bigint);
             CREATE VIEW recent AS SELECT * FROM events WHERE id > 10;
             CREATE SCHEMA other;
             CREATE FUNCTION count_events() RETURNS bigint LANGUAGE plpgsql
                 AS $$ BEGIN RETURN (SELECT count(*) FROM public.EVENTS); END $$;
             CREATE FUNCTION other.count_events() RETURNS bigint LANGUAGE sql AS 'SELECT 7::bigint';
             CREATE FUNCTION old_style(k text) RETURNS SETOF bigint LANGUAGE sql
                 AS 'SELECT id FROM "events" WHERE kind = k';
             CREATE FUNCTION standard() RETURNS bigint LANGUAGE sql
                 BEGIN ATOMIC SELECT count(*) FROM events; END;
             CREATE FUNCTION "Through View"() RETURNS bigint LANGUAGE plpgsql
                 AS $$ BEGIN RETURN (SELECT count(*) FROM recent); END $$;
             CREATE PROCEDURE tally() LANGUAGE plpgsql
                 AS $$ BEGIN INSERT INTO log SELECT count(*) FROM events; END $$;
             CREATE FUNCTION add_one(x int) RETURNS int LANGUAGE sql AS 'SELECT x + 1';
             CREATE FUNCTION lower(x events) RETURNS text LANGUAGE sql AS 'SELECT x.kind FROM events LIMIT 1';
             CREATE FUNCTION version(n bigint) RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM events WHERE id > n';
             CREATE FUNCTION rank(n int) RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM events WHERE id > n';
             CREATE FUNCTION near_miss() RETURNS text LANGUAGE sql AS $$ SELECT 'eventsx' || 'my_events' $$;"#,
    )
    .await;
    let hot = *hot;

    let count_events = (
        "function public.count_events reads tiered table events ",
        "ALTER FUNCTION public.count_events() SET",
    );
    for (sql, (message, alter)) in [
        ("SELECT count_events()", count_events),
        (
            "/* a comment */ select   PUBLIC.count_events ( ) + 1",
            count_events,
        ),
        (
            "SELECT * FROM old_style('k1')",
            (
                "function public.old_style reads tiered table events ",
                "ALTER FUNCTION public.old_style(k text) SET",
            ),
        ),
        (
            "SELECT 1 WHERE standard() > 0",
            (
                "function public.standard reads tiered table events ",
                "ALTER FUNCTION public.standard() SET",
            ),
        ),
        (
            r#"SELECT "Through View"()"#,
            (
                r#"function public."Through View" reads recent, a view over a tiered table, "#,
                r#"ALTER FUNCTION public."Through View"() SET"#,
            ),
        ),
        (
            "CALL tally()",
            (
                "procedure public.tally reads tiered table events ",
                "ALTER PROCEDURE public.tally() SET",
            ),
        ),
        ("INSERT INTO log SELECT count_events()", count_events),
        ("EXPLAIN ANALYZE SELECT count_events()", count_events),
        ("PREPARE p AS SELECT count_events() + $1", count_events),
        ("SELECT 1; SELECT count_events()", count_events),
        (
            "SELECT public.lower(e) FROM events e WHERE id = 1",
            (
                "function public.lower reads tiered table events ",
                "ALTER FUNCTION public.lower(x public.events) SET",
            ),
        ),
        (
            "WITH x AS (SELECT count_events() AS n) SELECT n FROM x",
            count_events,
        ),
        // Named like pg_catalog's version(), which takes no argument: this call can only
        // run public's.
        (
            "SELECT version(5)",
            (
                "function public.version reads tiered table events ",
                "ALTER FUNCTION public.version(n bigint) SET",
            ),
        ),
        // pg_catalog's rank(VARIADIC "any") takes one argument too, but only under
        // WITHIN GROUP: this call runs public's (an exact match of its type).
        (
            "SELECT rank(5)",
            (
                "function public.rank reads tiered table events ",
                "ALTER FUNCTION public.rank(n integer) SET",
            ),
        ),
        ("COPY (SELECT count_events()) TO STDOUT", count_events),
    ] {
        let err = c.simple_query(sql).await.unwrap_err();
        let db_err = err
            .as_db_error()
            .unwrap_or_else(|| panic!("{sql}: {err:?}"));
        assert_eq!(db_err.code().code(), "0A000", "{sql}: {db_err:?}");
        assert!(db_err.message().contains(message), "{sql}: {db_err:?}");
        let hint = db_err.hint().unwrap_or_default();
        assert!(
            hint.contains(&format!("{alter} coldwire.hot_only_reads = on"))
                && hint.contains("SET coldwire.hot_only_reads = on in the session"),
            "{sql}: {db_err:?}"
        );
    }
    // The extended protocol, with parameters Postgres infers: the statement is described
    // as written, and each execution fails.
    let statement = c
        .prepare("SELECT count_events() + $1, $2::text")
        .await
        .unwrap();
    assert_eq!(statement.params().len(), 2);
    for _ in 0..2 {
        let err = c.query_one(&statement, &[&1i64, &"x"]).await.unwrap_err();
        assert_eq!(err.code().map(|c| c.code()), Some("0A000"), "{err:?}");
    }
    // Nor can an SQL-level EXECUTE of the statement run it unchecked, alone or among
    // others.
    let name: String = c
        .query_one(
            "SELECT name FROM pg_prepared_statements WHERE statement = 'SELECT count_events() + $1, $2::text'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    for sql in [
        format!("EXECUTE {name}(1, 'x')"),
        format!("/* c */ execute   {name} (1, 'x')"),
        format!("SELECT 1; EXECUTE {name}(1, 'x')"),
    ] {
        let err = c.simple_query(&sql).await.unwrap_err();
        assert_eq!(
            err.code().map(|c| c.code()),
            Some("0A000"),
            "{sql}: {err:?}"
        );
    }
    let err = c.query_one("CALL tally()", &[]).await.unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("0A000"), "{err:?}");
    assert_eq!(
        simple_rows(c, "SELECT add_one(1)").await.unwrap(),
        [[Some("2".to_owned())]],
        "the session goes on"
    );
    // Nothing ran.
    let logged: i64 = direct
        .query_one("SELECT count(*) FROM log", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(logged, 0);

    // ALTER TABLE runs a default on every row it fills.
    let err = c
        .simple_query("ALTER TABLE log ADD COLUMN total bigint DEFAULT count_events()")
        .await
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("0A000"), "{err:?}");

    // Other functions, a function of another schema by its qualified name, and an
    // EXPLAIN that does not run the call.
    for (sql, want) in [
        ("SELECT add_one(41)", "42"),
        ("SELECT near_miss()", "eventsxmy_events"),
        ("SELECT other.count_events()", "7"),
        ("SELECT count(*) FROM events", "1000"),
        // pg_catalog's lower, which comes first, not the one of public.
        ("SELECT lower('ABC')", "abc"),
        // pg_catalog's rank, as a window function and as a hypothetical-set aggregate.
        (
            "SELECT max(r) FROM (SELECT rank() OVER (ORDER BY id) AS r FROM events) s",
            "1000",
        ),
        (
            "SELECT rank(5) WITHIN GROUP (ORDER BY n) FROM generate_series(1, 9) n",
            "5",
        ),
    ] {
        assert_eq!(
            simple_rows(c, sql).await.unwrap(),
            [[Some(want.to_owned())]],
            "{sql}"
        );
    }
    c.simple_query("EXPLAIN SELECT count_events()")
        .await
        .unwrap();
    let version = simple_rows(c, "SELECT version()").await.unwrap();
    assert!(
        version[0][0].as_deref().unwrap().starts_with("PostgreSQL"),
        "{version:?}"
    );

    // A session that reads hot rows only on purpose calls them (Postgres knows its
    // settings; coldwire's check asks it), in either protocol, until it resets.
    c.batch_execute("SET coldwire.hot_only_reads = on")
        .await
        .unwrap();
    assert_eq!(
        simple_rows(c, "SELECT standard()").await.unwrap(),
        [[Some(hot.to_string())]]
    );
    let n: i64 = c
        .query_one(&statement, &[&1i64, &"x"])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, hot + 1);
    assert_eq!(
        simple_rows(c, &format!("EXECUTE {name}(2, 'x')"))
            .await
            .unwrap()[0][0],
        Some((hot + 2).to_string())
    );
    // A statement that also reads the tiered table itself is refused all the same: behind
    // the check its own read would miss the cold rows. DDL that only names a call passes.
    // So is a COPY of a call, alone or among others.
    for sql in [
        "SELECT count_events(), (SELECT count(*) FROM events)",
        "COPY (SELECT count_events()) TO STDOUT",
        "SELECT 1; COPY (SELECT count_events()) TO STDOUT",
    ] {
        let err = c.simple_query(sql).await.unwrap_err();
        assert_eq!(
            err.code().map(|c| c.code()),
            Some("0A000"),
            "{sql}: {err:?}"
        );
    }
    // A CTE named like the table is the CTE.
    assert_eq!(
        simple_rows(
            c,
            "WITH events AS (SELECT 1 AS x) SELECT count_events() FROM events"
        )
        .await
        .unwrap(),
        [[Some(hot.to_string())]]
    );
    c.batch_execute("CREATE VIEW calls AS SELECT count_events() AS n")
        .await
        .unwrap();
    // A call, then a write that brings a cold row back, in one string: each answer in
    // its place.
    let answers: Vec<String> = c
        .simple_query("SELECT 'first'; SELECT standard(); UPDATE events SET kind = 'both' WHERE id = 5 RETURNING id, kind")
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(format!("row {:?}", (0..r.len()).map(|i| r.get(i)).collect::<Vec<_>>())),
            SimpleQueryMessage::CommandComplete(n) => Some(format!("complete {n}")),
            _ => None,
        })
        .collect();
    assert_eq!(
        answers,
        [
            "row [Some(\"first\")]".to_owned(),
            "complete 1".to_owned(),
            format!("row [Some(\"{hot}\")]"),
            "complete 1".to_owned(),
            "row [Some(\"5\"), Some(\"both\")]".to_owned(),
            "complete 1".to_owned()
        ]
    );
    // Several statements: the check runs where the call does, after a SET before it.
    c.batch_execute("RESET coldwire.hot_only_reads")
        .await
        .unwrap();
    // Refusals leave nothing prepared behind, however many there are, and coldwire's
    // own prepared statements (the write's rehydration above) stay in use.
    let prepared = "SELECT count(*) FROM pg_prepared_statements";
    let mut counts = Vec::new();
    for round in 0..6 {
        c.simple_query("SELECT count_events()").await.unwrap_err();
        c.query("SELECT count_events()", &[]).await.unwrap_err();
        c.simple_query(&format!(
            "UPDATE events SET kind = 'again' WHERE id = {}",
            6 + round
        ))
        .await
        .unwrap();
        counts.push(simple_rows(c, prepared).await.unwrap());
    }
    assert!(counts[1..].iter().all(|n| *n == counts[1]), "{counts:?}");
    // The writes brought their rows back into the heap.
    let hot: i64 = direct
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        simple_rows(c, "SET coldwire.hot_only_reads = on; SELECT standard()")
            .await
            .unwrap(),
        [[Some(hot.to_string())]]
    );
    c.batch_execute("BEGIN; SET LOCAL coldwire.hot_only_reads = off")
        .await
        .unwrap();
    let err = c.simple_query("SELECT standard()").await.unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("0A000"), "{err:?}");
    c.batch_execute("ROLLBACK; RESET coldwire.hot_only_reads")
        .await
        .unwrap();
    let err = c.query_one(&statement, &[&1i64, &"x"]).await.unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("0A000"), "{err:?}");

    // Declared to read hot rows only: called, and it reads what the heap holds.
    direct
        .batch_execute("ALTER FUNCTION count_events() SET coldwire.hot_only_reads = on")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    assert_eq!(
        simple_rows(c, "SELECT count_events()").await.unwrap(),
        [[Some(hot.to_string())]]
    );
    // So is one that declares it writes hot rows only; the others are still refused.
    direct
        .batch_execute("ALTER FUNCTION old_style(text) SET coldwire.hot_only_writes = true")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    c.simple_query("SELECT * FROM old_style('k1')")
        .await
        .unwrap();
    let err = c.simple_query("SELECT standard()").await.unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("0A000"), "{err:?}");
}

/// Functions that read a tiered table through other functions (wrappers, at any depth,
/// in any language), views whose query calls one, and functions that read such views:
/// each is refused like a direct reader, naming what it reads and through what, and found
/// when created or declared hot-only while the proxy runs. A wrapper that declares it reads
/// hot rows only takes its callers out with it.
#[tokio::test]
async fn calls_through_wrappers_and_views_that_call_reading_functions_are_refused() {
    let TieredEvents { c, direct, hot, .. } = &tiered_events(
        "wrappers",
        r#"CREATE FUNCTION count_events() RETURNS bigint LANGUAGE plpgsql
                 AS $$ BEGIN RETURN (SELECT count(*) FROM events); END $$;
             CREATE FUNCTION wrap() RETURNS bigint LANGUAGE plpgsql
                 AS $$ BEGIN /* twice */ RETURN public.Count_Events() * 2; END $$;
             CREATE FUNCTION "Wrap Again"() RETURNS bigint LANGUAGE sql AS 'SELECT wrap() + 1';
             CREATE FUNCTION standard_wrap() RETURNS bigint LANGUAGE sql
                 BEGIN ATOMIC SELECT count_events(); END;
             CREATE VIEW counted AS SELECT count_events() AS n;
             CREATE VIEW counted_again AS SELECT n + 1 AS n FROM counted;
             CREATE FUNCTION via_view() RETURNS bigint LANGUAGE sql AS 'SELECT n FROM counted';
             CREATE PROCEDURE tally(INOUT n bigint) LANGUAGE plpgsql
                 AS $$ BEGIN n := "Wrap Again"(); END $$;
             CREATE FUNCTION hot_wrap() RETURNS bigint LANGUAGE sql
                 SET coldwire.hot_only_reads = on AS 'SELECT count_events()';
             CREATE FUNCTION calls_hot_wrap() RETURNS bigint LANGUAGE sql AS 'SELECT hot_wrap()';
             CREATE FUNCTION wrapless() RETURNS text LANGUAGE sql AS $$ SELECT 'count_eventsx' $$;
             CREATE FUNCTION log_event(k bigint) RETURNS void LANGUAGE sql
                 AS 'insert  into EVENTS values (k, ''logged'')';
             CREATE MATERIALIZED VIEW frozen AS SELECT count_events() AS n WITH NO DATA;"#,
    )
    .await;
    let hot = *hot;

    let through = "tiered table events server-side through public.count_events,";
    for (sql, message, hint) in [
        (
            "SELECT wrap()",
            "function public.wrap reads tiered table events server-side through public.count_events,",
            "ALTER FUNCTION public.wrap() SET coldwire.hot_only_reads = on",
        ),
        (
            r#"select "Wrap Again"() -- two deep"#,
            r#"function public."Wrap Again" reads tiered table events server-side through public.wrap,"#,
            r#"ALTER FUNCTION public."Wrap Again"() SET"#,
        ),
        (
            "SELECT standard_wrap()",
            "function public.standard_wrap reads tiered table events server-side through public.count_events,",
            "SET coldwire.hot_only_reads = on in the session",
        ),
        (
            "SELECT n FROM counted",
            "view public.counted reads tiered table events server-side through public.count_events,",
            "on the function it calls",
        ),
        (
            "/* a view over it */ SELECT * FROM public.counted_again",
            "view public.counted_again reads tiered table events server-side through public.counted,",
            "SET coldwire.hot_only_reads = on in the session",
        ),
        (
            "SELECT via_view()",
            "function public.via_view reads tiered table events server-side through public.counted,",
            "ALTER FUNCTION public.via_view() SET",
        ),
        (
            "CALL tally(NULL)",
            // Its body names "Wrap Again", and wrap as a word of it.
            "procedure public.tally reads tiered table events server-side through public.",
            "ALTER PROCEDURE public.tally(INOUT n bigint) SET",
        ),
        (
            "WITH x AS (SELECT * FROM counted) SELECT n FROM x",
            through,
            "SET coldwire.hot_only_reads = on in the session",
        ),
    ] {
        assert_refused(c, sql, message, hint).await;
    }
    // A materialized view that calls one runs it when refreshed (reading it runs
    // nothing).
    assert_refused(
        c,
        "REFRESH MATERIALIZED VIEW frozen",
        "refreshing materialized view public.frozen reads tiered table events server-side through public.count_events,",
        "SET coldwire.hot_only_reads = on in the session",
    )
    .await;
    assert_eq!(
        simple_rows(
            c,
            "SET coldwire.hot_only_reads = on; REFRESH MATERIALIZED VIEW frozen; RESET coldwire.hot_only_reads; SELECT n FROM frozen"
        )
        .await
        .unwrap(),
        [[Some(hot.to_string())]]
    );
    // The extended protocol too.
    let err = c
        .query("SELECT n FROM counted_again", &[])
        .await
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("0A000"), "{err:?}");
    // A wrapper that declares it reads hot rows only, and its callers, are called; so are
    // look-alikes, and DDL that only names a calling view.
    for (sql, want) in [
        ("SELECT hot_wrap()", hot.to_string()),
        ("SELECT calls_hot_wrap()", hot.to_string()),
        ("SELECT wrapless()", "count_eventsx".to_owned()),
        ("SELECT count(*) FROM events", "1000".to_owned()),
    ] {
        assert_eq!(simple_rows(c, sql).await.unwrap(), [[Some(want)]], "{sql}");
    }
    c.batch_execute(
        "CREATE VIEW counted_third AS SELECT * FROM counted_again;
         ALTER VIEW counted_again ALTER COLUMN n SET DEFAULT 0",
    )
    .await
    .unwrap();
    // A session that reads hot rows only on purpose reads them.
    assert_eq!(
        simple_rows(
            c,
            "SET coldwire.hot_only_reads = on; SELECT n FROM counted_third"
        )
        .await
        .unwrap(),
        [[Some((hot + 1).to_string())]]
    );
    c.batch_execute("RESET coldwire.hot_only_reads")
        .await
        .unwrap();
    assert_refused(
        c,
        "SELECT n FROM counted_third",
        "view public.counted_third reads tiered table events server-side through public.counted_again,",
        "on the function it calls",
    )
    .await;

    // Created while the proxy runs, on another connection: found at the next refresh.
    direct
        .batch_execute(
            "CREATE FUNCTION later() RETURNS bigint LANGUAGE plpgsql AS $$ BEGIN RETURN via_view(); END $$",
        )
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    assert_refused(
        c,
        "SELECT later()",
        "function public.later reads tiered table events server-side through public.via_view,",
        "ALTER FUNCTION public.later() SET",
    )
    .await;
    // The reader declared hot-only: everything that reaches the table through it alone
    // is called.
    direct
        .batch_execute("ALTER FUNCTION count_events() SET coldwire.hot_only_reads = on")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    for (sql, want) in [
        ("SELECT wrap()", 2 * hot),
        (r#"SELECT "Wrap Again"()"#, 2 * hot + 1),
        ("SELECT later()", hot),
        ("SELECT n FROM counted_third", hot + 1),
    ] {
        assert_eq!(
            simple_rows(c, sql).await.unwrap(),
            [[Some(want.to_string())]],
            "{sql}"
        );
    }
    // A function that only writes the table reads nothing of it: called.
    c.batch_execute("SELECT log_event(5001)").await.unwrap();
    assert_eq!(
        simple_rows(c, "SELECT count(*) FROM events").await.unwrap(),
        [[Some("1001".to_owned())]]
    );
}

/// A plain table whose trigger, default or CHECK runs a function that reads a tiered
/// table: its writes (of the kinds that run it) are refused like a call, naming the table
/// and the function, until the session reads hot rows only on purpose or the trigger is
/// disabled. Before, a trigger checking that an order's event exists refused orders of
/// cold events, and a default counted hot rows only.
#[tokio::test]
async fn writes_of_tables_whose_triggers_defaults_or_checks_read_a_tiered_table_are_refused() {
    let TieredEvents {
        c,
        direct,
        _proxy,
        db,
        ..
    } = &tiered_events(
        "writingtables",
        r#"CREATE FUNCTION count_events() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM events';
             CREATE FUNCTION check_event() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN
                     IF NOT EXISTS (SELECT 1 FROM events WHERE id = NEW.event_id) THEN
                         RAISE EXCEPTION 'no event %', NEW.event_id;
                     END IF;
                     RETURN NEW;
                 END $$;
             CREATE TABLE orders(id int PRIMARY KEY, event_id bigint);
             CREATE TRIGGER orders_check BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION check_event();
             INSERT INTO orders VALUES (1, 1), (2, 2);
             CREATE TABLE "Tallies"(n bigint DEFAULT count_events(), note text);
             CREATE TABLE capped(n bigint CHECK (n <= count_events()));
             CREATE TABLE plain(n int);
             -- Writes into the tiered table only: reads nothing of it.
             CREATE FUNCTION log_order() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN
                     INSERT INTO public."events" VALUES (NEW.id + 5000, 'order');
                     PERFORM pg_notify('events', NEW.id::text);
                     RETURN NEW;
                 END $$;
             CREATE TRIGGER orders_log AFTER UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION log_order();
             CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN PERFORM count(*) FROM events; RETURN coalesce(NEW, OLD); END $$;
             CREATE TABLE stock(id int PRIMARY KEY, n int);
             CREATE TRIGGER stock_touch BEFORE UPDATE ON stock FOR EACH ROW EXECUTE FUNCTION touch();
             CREATE TABLE gone(id int);
             INSERT INTO gone VALUES (1);
             CREATE TRIGGER gone_touch BEFORE DELETE ON gone FOR EACH ROW EXECUTE FUNCTION touch();
             CREATE TRIGGER orders_touch BEFORE DELETE ON orders FOR EACH ROW EXECUTE FUNCTION touch();
             CREATE SCHEMA archive;
             CREATE TABLE archive.events(id int);
             CREATE TABLE notes(id int, events bigint);
             CREATE FUNCTION fill_note() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN
                     -- counts what archive keeps of events /* not the tiered events */
                     NEW.events := (SELECT count(*) FROM archive.events);
                     RETURN NEW;
                 END $$;
             CREATE TRIGGER notes_fill BEFORE INSERT ON notes FOR EACH ROW EXECUTE FUNCTION fill_note();
             -- A trigger function found in a round after a materialized view.
             CREATE MATERIALIZED VIEW counted_mv AS SELECT count_events() AS n WITH NO DATA;
             CREATE FUNCTION wrap_count() RETURNS bigint LANGUAGE sql AS 'SELECT count_events()';
             CREATE FUNCTION check_deep() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN PERFORM wrap_count(); RETURN NEW; END $$;
             CREATE TABLE deep(id int);
             CREATE TRIGGER deep_check BEFORE INSERT ON deep FOR EACH ROW EXECUTE FUNCTION check_deep();"#,
    )
    .await;

    let orders = "writes of table public.orders read tiered table events server-side through public.check_event,";
    let tallies = r#"writes of table public."Tallies" read tiered table events server-side through public.count_events,"#;
    let capped = "writes of table public.capped read tiered table events server-side through public.count_events,";
    for (sql, message) in [
        ("INSERT INTO orders VALUES (3, 5)", orders),
        ("/* c */ insert into PUBLIC.orders (id, event_id) SELECT 4, 6", orders),
        (
            "WITH moved AS (DELETE FROM plain RETURNING n) INSERT INTO orders SELECT n, n FROM moved",
            orders,
        ),
        (
            "MERGE INTO orders o USING (SELECT 9 AS id) s ON o.id = s.id WHEN NOT MATCHED THEN INSERT VALUES (9, 9)",
            orders,
        ),
        (r#"INSERT INTO "Tallies"(note) VALUES ('x')"#, tallies),
        // An UPDATE runs a default only where it sets a column to it.
        (r#"UPDATE "Tallies" SET note = 'y', n = DEFAULT"#, tallies),
        // A CTE named like the target does not hide it.
        ("WITH orders AS (SELECT 1) INSERT INTO orders VALUES (12, 6)", orders),
        ("INSERT INTO capped VALUES (1)", capped),
        // The function a trigger runs is named, however deep it was found.
        (
            "INSERT INTO deep VALUES (1)",
            "writes of table public.deep read tiered table events server-side through public.check_deep,",
        ),
        ("EXPLAIN ANALYZE INSERT INTO orders VALUES (3, 5)", orders),
        // The function of the trigger that fires is named.
        (
            "DELETE FROM orders WHERE id = 1",
            "writes of table public.orders read tiered table events server-side through public.touch,",
        ),
        // An upsert fires UPDATE triggers too.
        (
            "INSERT INTO stock VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET n = 2",
            "writes of table public.stock read tiered table events server-side through public.touch,",
        ),
        // A delete in a CTE of an INSERT.
        (
            "WITH d AS (DELETE FROM gone RETURNING id) INSERT INTO plain SELECT id FROM d",
            "writes of table public.gone read tiered table events server-side through public.touch,",
        ),
        // COPY FROM inserts: triggers, defaults and checks run for each row.
        ("COPY orders FROM STDIN", orders),
        ("/* load */ copy public.orders (id, event_id) from stdin with (format csv)", orders),
        (r#"COPY "Tallies" (note) FROM STDIN"#, tallies),
        ("COPY capped FROM STDIN", capped),
        // First of several statements.
        ("COPY orders FROM STDIN; SELECT 1", orders),
    ] {
        assert_refused(c, sql, message, "SET coldwire.hot_only_reads = on in the session").await;
    }
    let err = c
        .execute("INSERT INTO orders VALUES ($1, $2)", &[&3i32, &5i64])
        .await
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("0A000"), "{err:?}");
    // COPY FROM into tables whose writes read nothing tiered, and COPY TO of one that
    // does, pass.
    for (sql, rows) in [
        ("COPY plain FROM STDIN", "41\n42\n"),
        ("COPY notes (id) FROM STDIN", "7\n"),
        ("COPY stock FROM STDIN", "9\t1\n"),
    ] {
        copy_in(c, sql, &[rows])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }
    let out = c
        .copy_out("COPY orders TO STDOUT")
        .await
        .expect("COPY TO of orders runs no trigger");
    futures_util::pin_mut!(out);
    let mut copied = Vec::new();
    while let Some(chunk) = futures_util::TryStreamExt::try_next(&mut out)
        .await
        .unwrap()
    {
        copied.extend_from_slice(&chunk);
    }
    assert_eq!(String::from_utf8(copied).unwrap(), "1\t1\n2\t2\n");
    assert_eq!(
        simple_rows(
            c,
            "SELECT (SELECT count(*) FROM plain), (SELECT count(*) FROM notes)"
        )
        .await
        .unwrap(),
        [[Some("2".to_owned()), Some("1".to_owned())]],
        "the COPYs that run no reader went in"
    );
    // Refused in the extended protocol too (on a connection of its own: tokio-postgres
    // loses its place on a connection whose COPY FROM fails at its Execute, whoever
    // refuses it, Postgres included).
    let err = _proxy
        .connect(db)
        .await
        .copy_in::<_, bytes::Bytes>("COPY orders FROM STDIN")
        .await
        .err()
        .expect("COPY FROM into orders is refused");
    assert_eq!(err.code().map(|c| c.code()), Some("0A000"), "{err:?}");
    // Writes that run none of them pass: the trigger fires on INSERT only, defaults and
    // checks on INSERT and UPDATE.
    for sql in [
        "UPDATE orders SET event_id = 7 WHERE id = 2",
        r#"DELETE FROM "Tallies""#,
        "DELETE FROM capped",
        "INSERT INTO plain VALUES (1)",
        "SELECT count(*) FROM orders",
        "INSERT INTO stock VALUES (2, 1) ON CONFLICT (id) DO NOTHING",
        "INSERT INTO gone VALUES (2)",
        r#"UPDATE "Tallies" SET note = 'y'"#,
        // Its trigger names another schema's events, a field and a comment.
        "INSERT INTO notes VALUES (1)",
    ] {
        c.simple_query(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }
    assert_eq!(
        simple_rows(c, "SELECT id, event_id FROM orders ORDER BY id")
            .await
            .unwrap(),
        [
            [Some("1".to_owned()), Some("1".to_owned())],
            [Some("2".to_owned()), Some("7".to_owned())]
        ]
    );
    assert_eq!(
        simple_rows(c, "SELECT count(*), max(id) FROM events")
            .await
            .unwrap(),
        [[Some("1001".to_owned()), Some("5002".to_owned())]],
        "the update's trigger logged it"
    );
    // On purpose: hot rows only, and the trigger sees a hot event.
    c.batch_execute("SET coldwire.hot_only_reads = on; INSERT INTO orders VALUES (10, 1000)")
        .await
        .unwrap();
    c.batch_execute("RESET coldwire.hot_only_reads")
        .await
        .unwrap();
    // Disabled on another connection: found at the next refresh, and orders go in.
    direct
        .batch_execute("ALTER TABLE orders DISABLE TRIGGER orders_check")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    c.batch_execute("INSERT INTO orders VALUES (11, 5)")
        .await
        .unwrap();
    assert_eq!(
        simple_rows(c, "SELECT count(*) FROM orders").await.unwrap(),
        [[Some("4".to_owned())]]
    );
    // Renamed on another connection: its writes are checked under the new name.
    direct
        .batch_execute("ALTER TABLE stock RENAME TO goods")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let err = c.simple_query("UPDATE goods SET n = 3").await.unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("0A000"), "{err:?}");
    assert!(
        err.as_db_error()
            .is_some_and(|e| e.message().contains("public.goods")),
        "{err:?}"
    );
}

/// A view replaced through the proxy is read by its new definition at once, also by the
/// very statement text read before (statement caches key on the registry's version,
/// which must not start again after the DDL drops the registry).
#[tokio::test]
async fn a_view_replaced_through_the_proxy_is_read_by_its_new_definition() {
    let TieredEvents { c, .. } = &tiered_events("replacedview", "").await;
    let count = "SELECT count(*) FROM early";
    for (bound, want) in [(10, "9"), (20, "19"), (500, "499"), (30, "29")] {
        c.batch_execute(&format!(
            "CREATE OR REPLACE VIEW early AS SELECT id FROM events WHERE id < {bound}"
        ))
        .await
        .unwrap();
        for _ in 0..2 {
            assert_eq!(
                simple_rows(c, count).await.unwrap(),
                [[Some(want.to_owned())]],
                "bound {bound}"
            );
            let n: i64 = c.query_one(count, &[]).await.unwrap().get(0);
            assert_eq!(n.to_string(), want, "bound {bound}, extended");
        }
    }
}

/// What [`tiered_events`] sets up; the proxy and the cold store live as long as it.
struct TieredEvents {
    _proxy: Proxy,
    db: String,
    _store: tempfile::TempDir,
    /// A session through the proxy.
    c: tokio_postgres::Client,
    /// A session straight to Postgres.
    direct: tokio_postgres::Client,
    /// The rows of `events` left in the heap.
    hot: i64,
}

/// A database `name` with `events(id bigint PRIMARY KEY, kind text)` of 1000 rows, and
/// `setup` run in it; then a proxy in front, `events` tiered and flushed down to at most
/// 100 hot rows.
async fn tiered_events(name: &str, setup: &str) -> TieredEvents {
    let db = create_db(name);
    let store = tempfile::tempdir().unwrap();
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(&format!(
            "CREATE TABLE events(id bigint PRIMARY KEY, kind text);
             INSERT INTO events SELECT g, 'k' || g % 4 FROM generate_series(1, 1000) g;
             {setup}"
        ))
        .await
        .unwrap();
    let proxy = Proxy::start(&[
        "--service-url",
        &cluster().url(&db),
        "--cold-store",
        &format!("file://{}", store.path().display()),
    ])
    .await;
    let c = proxy.connect(&db).await;
    tier_and_flush(&c, "events").await;
    let hot: i64 = direct
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert!(hot <= 100, "{hot} hot rows");
    TieredEvents {
        _proxy: proxy,
        db,
        _store: store,
        c,
        direct,
        hot,
    }
}

/// `sql` fails with 0A000, its message holding `message` and its hint `hint`.
async fn assert_refused(c: &tokio_postgres::Client, sql: &str, message: &str, hint: &str) {
    let err = c.simple_query(sql).await.unwrap_err();
    let db_err = err
        .as_db_error()
        .unwrap_or_else(|| panic!("{sql}: {err:?}"));
    assert_eq!(db_err.code().code(), "0A000", "{sql}: {db_err:?}");
    assert!(db_err.message().contains(message), "{sql}: {db_err:?}");
    assert!(
        db_err.hint().unwrap_or_default().contains(hint),
        "{sql}: {db_err:?}"
    );
}

/// A COPY FROM STDIN in the extended protocol (tokio-postgres' `copy_in`), then reads of
/// a tiered table on the same connection.
#[tokio::test]
async fn reads_after_a_copy_in_of_the_extended_protocol_are_served() {
    let TieredEvents { c, _proxy, .. } =
        &tiered_events("copythenread", "CREATE TABLE plain(n int);").await;
    assert_eq!(
        copy_in(c, "COPY plain FROM STDIN", &["1\n2\n"])
            .await
            .unwrap(),
        2
    );
    let read = |what: &'static str| async move {
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            simple_rows(c, "SELECT count(*) FROM events"),
        )
        .await
        .unwrap_or_else(|_| panic!("the read after {what} hung"));
        assert_eq!(read.unwrap(), [[Some("1000".to_owned())]], "{what}");
        let n: i64 = c
            .query_one("SELECT count(*) FROM events WHERE id > $1", &[&0i64])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 1000, "{what}, extended");
    };
    read("a COPY FROM").await;
    // A COPY the client gives up (CopyFail), then one that ends with several rows.
    {
        let sink = c
            .copy_in::<_, bytes::Bytes>("COPY plain FROM STDIN")
            .await
            .unwrap();
        futures_util::pin_mut!(sink);
        futures_util::SinkExt::send(&mut sink, bytes::Bytes::from("3\n"))
            .await
            .unwrap();
    }
    read("a COPY given up").await;
    // One that Postgres fails on a bad row.
    let err = copy_in(c, "COPY plain FROM STDIN", &["4\nnot a number\n"])
        .await
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("22P02"), "{err:?}");
    read("a COPY Postgres failed").await;
    let sends: Vec<String> = (0..100).map(|i| format!("{i}\n")).collect();
    let sends: Vec<&str> = sends.iter().map(String::as_str).collect();
    assert_eq!(
        copy_in(c, "COPY plain FROM STDIN", &sends).await.unwrap(),
        100
    );
    read("a COPY of 100 rows").await;
    // A COPY inside a transaction block, and reads in it.
    c.batch_execute("BEGIN").await.unwrap();
    assert_eq!(
        copy_in(c, "COPY plain FROM STDIN", &["5\n"]).await.unwrap(),
        1
    );
    read("a COPY in a block").await;
    c.batch_execute("COMMIT").await.unwrap();
    assert_eq!(
        simple_rows(c, "SELECT count(*) FROM plain").await.unwrap(),
        [[Some("103".to_owned())]],
        "the given-up COPY left nothing"
    );
}

/// tokio-postgres's `copy_in` of `sql` (a `COPY … FROM STDIN`), one send per item of
/// `sends`: the rows Postgres counts, or its error.
async fn copy_in(
    c: &tokio_postgres::Client,
    sql: &str,
    sends: &[&str],
) -> Result<u64, tokio_postgres::Error> {
    let sink = c
        .copy_in::<_, bytes::Bytes>(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    futures_util::pin_mut!(sink);
    for send in sends {
        futures_util::SinkExt::send(&mut sink, bytes::Bytes::from(send.to_string()))
            .await
            .unwrap();
    }
    sink.finish().await
}

/// A COPY FROM STDIN that Postgres fails, where the client sends neither CopyDone nor
/// CopyFail after the error (Postgres drops them anyway; pgjdbc sends none), in both
/// protocols: the COPY ends at Postgres's error, and reads of a tiered table are served
/// after it.
#[tokio::test]
async fn reads_after_a_copy_in_failed_without_copy_done_are_served() {
    let TieredEvents { _proxy, db, .. } =
        &tiered_events("copyfailnodone", "CREATE TABLE plain(n int);").await;
    let mut conn = RawConn::ready(_proxy.addr, db).await;
    count_events(&mut conn, "before any COPY").await;
    for extended in [false, true] {
        if extended {
            let mut group = raw::parse("", "COPY plain FROM STDIN");
            group.extend(raw::bind("", &[]));
            group.extend(raw::execute());
            group.extend(raw::sync());
            conn.send(&group).await;
            let ack = conn.next().await.unwrap();
            assert_eq!(ack.tag, b'1');
            assert_eq!(conn.next().await.unwrap().tag, b'2');
        } else {
            conn.send(&raw::query("COPY plain FROM STDIN")).await;
        }
        assert_eq!(conn.next().await.unwrap().tag, b'G', "extended: {extended}");
        conn.send(&raw::frame(b'd', b"1\nnot a number\n")).await;
        let err = conn.next().await.unwrap();
        assert_eq!(err.tag, b'E');
        assert_eq!(err.field(b'C').as_deref(), Some("22P02"));
        if extended {
            // Postgres drops messages until the client's next Sync, which is answered
            // (sent together with the next read: the read waits for it).
            let mut group = raw::sync();
            group.extend(raw::parse("", "SELECT count(*) FROM events WHERE id > $1"));
            group.extend(raw::bind("", &["0"]));
            group.extend(raw::execute());
            group.extend(raw::sync());
            conn.send(&group).await;
            assert_eq!(raw::tags(&conn.until_ready().await), "Z");
            let msgs = conn.until_ready().await;
            assert_eq!(raw::tags(&msgs), "12DCZ", "{msgs:?}");
            assert_eq!(msgs[2].body[6..], *b"1000");
        } else {
            assert_eq!(raw::tags(&conn.until_ready().await), "Z");
        }
        count_events(&mut conn, if extended { "extended" } else { "simple" }).await;
    }
}

/// `SELECT count(*) FROM events` on `conn` answers 1000.
async fn count_events(conn: &mut RawConn, what: &str) {
    conn.send(&raw::query("SELECT count(*) FROM events")).await;
    let msgs = conn.until_ready().await;
    assert_eq!(raw::tags(&msgs), "TDCZ", "{what}: {msgs:?}");
    assert_eq!(msgs[1].body[6..], *b"1000", "{what}");
}

/// Writes that run a function reading a tiered table by routes other than the written
/// table's own triggers, defaults and CHECKs are refused the same way: a trigger's
/// `WHEN`, a domain's CHECK, a partition's trigger written through its parent, an
/// inheritance child's, and a foreign key's cascade into a table with such a trigger.
/// Writes that reach none of them pass.
#[tokio::test]
async fn writes_that_reach_a_reader_through_when_domains_partitions_or_cascades_are_refused() {
    let TieredEvents { c, direct, .. } = &tiered_events(
        "reachedtables",
        r#"CREATE FUNCTION count_events() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM events';
             CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
             CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN PERFORM count(*) FROM events; RETURN coalesce(NEW, OLD); END $$;
             -- A trigger whose function reads nothing but whose WHEN calls a reader.
             CREATE TABLE capped(n bigint);
             CREATE TRIGGER capped_when BEFORE INSERT ON capped FOR EACH ROW
                 WHEN (NEW.n > count_events()) EXECUTE FUNCTION noop();
             -- A domain whose CHECK calls one.
             CREATE DOMAIN below_events AS bigint CHECK (VALUE <= count_events());
             CREATE TABLE domained(id int, n below_events);
             -- A partition's own trigger, and a partitioned parent written through.
             CREATE TABLE parted(id int, n int) PARTITION BY RANGE (id);
             CREATE TABLE parted_low PARTITION OF parted FOR VALUES FROM (0) TO (100);
             CREATE TABLE parted_high PARTITION OF parted FOR VALUES FROM (100) TO (200);
             CREATE TRIGGER parted_low_touch BEFORE INSERT ON parted_low FOR EACH ROW EXECUTE FUNCTION touch();
             -- An inheritance child's row trigger, and a statement trigger (which does not
             -- fire for rows written through the parent).
             CREATE TABLE base(id int, n int);
             CREATE TABLE derived() INHERITS (base);
             CREATE TRIGGER derived_touch BEFORE UPDATE ON derived FOR EACH ROW EXECUTE FUNCTION touch();
             CREATE FUNCTION touch_all() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN PERFORM count(*) FROM events; RETURN NULL; END $$;
             CREATE TRIGGER derived_deleted AFTER DELETE ON derived FOR EACH STATEMENT EXECUTE FUNCTION touch_all();
             -- Cascades: a DELETE into holdings' DELETE trigger, a SET NULL into tags'
             -- UPDATE trigger, two levels deep into lots.
             CREATE TABLE accounts(id int PRIMARY KEY);
             CREATE TABLE holdings(id int PRIMARY KEY, account int REFERENCES accounts ON DELETE CASCADE);
             CREATE TRIGGER holdings_touch BEFORE DELETE ON holdings FOR EACH ROW EXECUTE FUNCTION touch();
             CREATE TABLE tags(id int, account int REFERENCES accounts ON DELETE SET NULL);
             CREATE TRIGGER tags_touch AFTER UPDATE ON tags FOR EACH STATEMENT EXECUTE FUNCTION touch_all();
             CREATE TABLE firms(id int PRIMARY KEY);
             CREATE TABLE desks(id int PRIMARY KEY, firm int REFERENCES firms ON UPDATE CASCADE ON DELETE CASCADE);
             CREATE TABLE lots(id int, desk int REFERENCES desks ON DELETE CASCADE);
             CREATE TRIGGER lots_touch BEFORE DELETE ON lots FOR EACH ROW EXECUTE FUNCTION touch();
             -- A foreign key of a table to itself, whose SET NULL runs its UPDATE trigger;
             -- a SET DEFAULT that runs a reader default.
             CREATE TABLE tree(id int PRIMARY KEY, parent int REFERENCES tree ON DELETE SET NULL);
             CREATE TRIGGER tree_touch BEFORE UPDATE ON tree FOR EACH ROW EXECUTE FUNCTION touch();
             CREATE TABLE owners(id int PRIMARY KEY);
             CREATE TABLE pets(id int, owner int DEFAULT count_events() REFERENCES owners ON DELETE SET DEFAULT);
             -- A partition's statement trigger does not fire for the cascade, which
             -- deletes through the partitioned table.
             CREATE TABLE regions(id int PRIMARY KEY);
             CREATE TABLE sales(id int, region int REFERENCES regions ON DELETE CASCADE) PARTITION BY RANGE (id);
             CREATE TABLE sales_low PARTITION OF sales FOR VALUES FROM (0) TO (100);
             CREATE TRIGGER sales_low_all AFTER DELETE ON sales_low FOR EACH STATEMENT EXECUTE FUNCTION touch_all();
             INSERT INTO regions VALUES (1), (2);
             INSERT INTO sales VALUES (1, 1);
             -- A foreign key to a partitioned table: deleting from its partition runs the
             -- referencing table's SET DEFAULT.
             CREATE TABLE plots(id int PRIMARY KEY) PARTITION BY RANGE (id);
             CREATE TABLE plots_low PARTITION OF plots FOR VALUES FROM (0) TO (100);
             CREATE TABLE crops(id int, plot int DEFAULT count_events() REFERENCES plots ON DELETE SET DEFAULT);
             INSERT INTO plots VALUES (1);
             INSERT INTO accounts VALUES (1), (2), (3);
             INSERT INTO firms VALUES (1);"#,
    )
    .await;
    let through = |table: &str, function: &str| {
        format!("writes of table public.{table} read tiered table events server-side through public.{function},")
    };
    // Reached from another table, which the message names too.
    let reached = |table: &str, function: &str, of: &str| {
        format!("writes of table public.{table} read tiered table events server-side through public.{function} (of table public.{of}),")
    };
    for (sql, message) in [
        (
            "INSERT INTO capped VALUES (1)",
            through("capped", "count_events"),
        ),
        (
            "INSERT INTO domained VALUES (1, 1)",
            through("domained", "count_events"),
        ),
        (
            "UPDATE domained SET n = 2",
            through("domained", "count_events"),
        ),
        (
            "INSERT INTO parted VALUES (150, 1)",
            reached("parted", "touch", "parted_low"),
        ),
        (
            "/* c */ insert into public.parted select 1, 1",
            reached("parted", "touch", "parted_low"),
        ),
        (
            "COPY parted FROM STDIN",
            reached("parted", "touch", "parted_low"),
        ),
        (
            "INSERT INTO parted_low VALUES (1, 1)",
            through("parted_low", "touch"),
        ),
        ("UPDATE base SET n = 1", reached("base", "touch", "derived")),
        // An UPDATE of a partitioned table may move a row into the partition.
        (
            "UPDATE parted SET id = 50 WHERE id = 150",
            reached("parted", "touch", "parted_low"),
        ),
        ("DELETE FROM tree WHERE id = 1", through("tree", "touch")),
        (
            "DELETE FROM owners",
            reached("owners", "count_events", "pets"),
        ),
        (
            "DELETE FROM accounts WHERE id = 1",
            reached("accounts", "touch", "holdings"),
        ),
        ("DELETE FROM firms", reached("firms", "touch", "lots")),
        (
            "DELETE FROM plots_low WHERE id = 1",
            reached("plots_low", "count_events", "crops"),
        ),
        (
            "DELETE FROM plots",
            reached("plots", "count_events", "crops"),
        ),
        (
            "WITH gone AS (DELETE FROM accounts RETURNING id) SELECT count(*) FROM gone",
            reached("accounts", "touch", "holdings"),
        ),
    ] {
        assert_refused(
            c,
            sql,
            &message,
            "SET coldwire.hot_only_reads = on in the session",
        )
        .await;
    }
    // Writes that run none of them.
    for sql in [
        "UPDATE capped SET n = 5",
        "DELETE FROM domained",
        "DELETE FROM parted",
        "INSERT INTO tree VALUES (1, NULL)",
        "UPDATE owners SET id = 2",
        "DELETE FROM regions WHERE id = 1",
        "INSERT INTO base VALUES (1, 1)",
        "DELETE FROM base",
        "INSERT INTO accounts VALUES (4)",
        "UPDATE accounts SET id = 5 WHERE id = 4",
        "INSERT INTO desks VALUES (1, 1)",
        "UPDATE desks SET id = 2",
        "INSERT INTO lots VALUES (1, 2)",
    ] {
        c.simple_query(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }
    // A partition attached later, with such a trigger, on another connection: found at
    // the next refresh.
    direct
        .batch_execute(
            "CREATE TABLE parted_more(id int, n int);
             CREATE TRIGGER parted_more_touch BEFORE DELETE ON parted_more FOR EACH ROW EXECUTE FUNCTION touch();
             ALTER TABLE parted ATTACH PARTITION parted_more FOR VALUES FROM (200) TO (300);",
        )
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    assert_refused(
        c,
        "DELETE FROM parted WHERE id = 250",
        &reached("parted", "touch", "parted_more"),
        "SET coldwire.hot_only_reads = on in the session",
    )
    .await;
    // Nothing refused ran: the cascades deleted nothing.
    assert_eq!(
        simple_rows(c, "SELECT (SELECT count(*) FROM accounts), (SELECT count(*) FROM firms), (SELECT count(*) FROM domained)")
            .await
            .unwrap(),
        [[Some("4".to_owned()), Some("1".to_owned()), Some("0".to_owned())]]
    );
}

/// The `TABLE name` command reads every row of a tiered table, or of a view over one,
/// however it is dressed; TABLESAMPLE of a tiered table is refused (its cold rows have no
/// heap blocks to sample) rather than sampling the hot rows alone.
#[tokio::test]
async fn table_commands_read_every_row_and_tablesample_is_refused() {
    let TieredEvents { c, .. } = &tiered_events(
        "tablecommand",
        "CREATE TABLE plain(n int); INSERT INTO plain VALUES (1), (2);
         CREATE VIEW recent AS SELECT * FROM events WHERE id > 10;",
    )
    .await;
    for (sql, expected) in [
        ("SELECT count(*) FROM (TABLE events) s", "1000"),
        (
            "SELECT count(*) FROM (table /* c */ only public.events) s",
            "1000",
        ),
        ("WITH e AS (TABLE events) SELECT count(*) FROM e", "1000"),
        ("SELECT count(*) FROM (TABLE recent) s", "990"),
        (
            "SELECT count(*) FROM (TABLE events UNION ALL TABLE events) s",
            "2000",
        ),
    ] {
        assert_eq!(
            simple_rows(c, sql).await.unwrap(),
            [[Some(expected.to_owned())]],
            "{sql}"
        );
    }
    let first: Vec<Vec<Option<String>>> =
        simple_rows(c, "-- tag\nTABLE events ORDER BY id LIMIT 2")
            .await
            .unwrap();
    assert_eq!(
        first,
        [
            [Some("1".to_owned()), Some("k1".to_owned())],
            [Some("2".to_owned()), Some("k2".to_owned())]
        ]
    );
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM (TABLE events) s WHERE id > $1",
            &[&500i64],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 500, "extended protocol");
    for sql in [
        "SELECT count(*) FROM events TABLESAMPLE SYSTEM (100)",
        "select * from public.events as e tablesample bernoulli (10) repeatable (3)",
        "SELECT (SELECT count(*) FROM events TABLESAMPLE SYSTEM (50))",
    ] {
        assert_refused(c, sql, "TABLESAMPLE of tiered table events", "random()").await;
    }
    assert_eq!(
        simple_rows(c, "SELECT count(*) FROM plain TABLESAMPLE SYSTEM (100)")
            .await
            .unwrap(),
        [[Some("2".to_owned())]],
        "a plain table's sample is Postgres's"
    );
}

/// An unqualified name that tiered tables have in two schemas is refused rather than read
/// from the heap alone (which one it means depends on the session's search_path, which
/// coldwire does not know); schema-qualified, each reads every row.
#[tokio::test]
async fn a_name_tiered_in_two_schemas_must_be_qualified() {
    let TieredEvents { c, .. } = &tiered_events(
        "twoschemas",
        "CREATE SCHEMA other;
         CREATE TABLE other.events(id bigint PRIMARY KEY, kind text);
         INSERT INTO other.events SELECT g, 'o' FROM generate_series(1, 300) g;",
    )
    .await;
    admin_call(c, r#"SELECT coldwire.tier_table('other.events', '{"hot_row_limit": 50, "min_flush_rows": 50, "auto_flush": false}')"#)
        .await
        .unwrap();
    admin_call(
        c,
        "SELECT coldwire.flush_table('other.events', wait => true)",
    )
    .await
    .unwrap();
    for sql in [
        "SELECT count(*) FROM events",
        "/* c */ select count(*) from EVENTS e where e.id > 10",
        "SELECT count(*) FROM public.events p JOIN events o USING (id)",
        "INSERT INTO other.events SELECT id + 1000, kind FROM events",
        // Written with Unicode escapes.
        r#"SELECT count(*) FROM U&"event\0073""#,
    ] {
        assert_refused(
            c,
            sql,
            "events names tiered tables or views over them in more than one schema",
            "Schema-qualify",
        )
        .await;
    }
    // In the extended protocol too; with parameters whose types the client declares,
    // the refusal takes them and the client sees coldwire's error, not a count mismatch.
    let err = c
        .query("SELECT count(*) FROM events WHERE id > 0", &[])
        .await
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("0A000"), "{err:?}");
    let typed = c
        .prepare_typed(
            "SELECT count(*) FROM events WHERE id > $1 AND kind <> $2",
            &[
                tokio_postgres::types::Type::INT8,
                tokio_postgres::types::Type::TEXT,
            ],
        )
        .await
        .unwrap();
    assert_eq!(typed.params().len(), 2);
    let err = c.query(&typed, &[&0i64, &"x"]).await.unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("0A000"), "{err:?}");
    for (sql, expected) in [
        ("SELECT count(*) FROM public.events", "1000"),
        ("SELECT count(*) FROM other.events", "300"),
        ("WITH events AS (SELECT 1) SELECT count(*) FROM events", "1"),
        (r#"SELECT count(*) FROM public.U&"event\0073""#, "1000"),
        (r#"SELECT count(*) FROM other.u&"\0065vents" AS o"#, "300"),
    ] {
        assert_eq!(
            simple_rows(c, sql).await.unwrap(),
            [[Some(expected.to_owned())]],
            "{sql}"
        );
    }
}

#[tokio::test]
async fn tables_whose_names_need_quotes_are_read_and_written_whole() {
    let db = create_db("quotednames");
    let store = tempfile::tempdir().unwrap();
    let direct = connect_direct(&db).await;
    // Each tiered table beside a plain copy, and a plain table of the name Postgres would
    // fold an unquoted spelling to.
    let tables = [
        r#""Events""#,
        r#""Événements""#,
        r#""My Schema"."Odd.Name ""q""""#,
    ];
    direct
        .batch_execute(r#"CREATE SCHEMA "My Schema"; CREATE TABLE events(id int PRIMARY KEY, k text, v int); CREATE TABLE "événements"(LIKE events)"#)
        .await
        .unwrap();
    for (i, t) in tables.iter().enumerate() {
        direct
            .batch_execute(&format!(
                "CREATE TABLE {t}(id int PRIMARY KEY, k text, v int);
                 INSERT INTO {t} SELECT g, 'k' || g % 3, g FROM generate_series(1, 1000) g;
                 CREATE TABLE control_{i} AS TABLE {t};"
            ))
            .await
            .unwrap();
    }
    let proxy = Proxy::start(&[
        "--service-url",
        &cluster().url(&db),
        "--cold-store",
        &format!("file://{}", store.path().display()),
    ])
    .await;
    let c = proxy.connect(&db).await;
    for t in tables {
        let quoted = t.replace('\'', "''");
        admin_call(&c, &format!(r#"SELECT coldwire.tier_table('{quoted}', '{{"hot_row_limit": 100, "min_flush_rows": 100, "auto_flush": false}}')"#))
            .await
            .unwrap();
        admin_call(
            &c,
            &format!("SELECT coldwire.flush_table('{quoted}', wait => true)"),
        )
        .await
        .unwrap();
        let hot: i64 = direct
            .query_one(&format!("SELECT count(*) FROM {t}"), &[])
            .await
            .unwrap()
            .get(0);
        assert!(hot <= 100, "{t}: {hot} hot rows");
    }
    let reads = [
        "SELECT count(*), sum(v) FROM {t}",
        "SELECT k, count(*), max(v) FROM {t} GROUP BY k ORDER BY k",
        "SELECT * FROM {t} WHERE id = 7",
        "SELECT count(*) FROM {t} a JOIN {t} b USING (id) WHERE a.id > 500",
        "SELECT id, v FROM {t} ORDER BY v DESC LIMIT 3",
    ];
    let writes = [
        "UPDATE {t} SET v = -v WHERE id IN (8, 950)",
        "DELETE FROM {t} WHERE id = 9",
    ];
    // A view and a function over a tiered table, named with a non-ASCII capital.
    direct
        .batch_execute(
            r#"CREATE VIEW "Él" AS SELECT * FROM "Événements" WHERE id > 10;
               CREATE FUNCTION "Écompte"() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM "Événements"'"#,
        )
        .await
        .unwrap();
    let through_view = simple_rows(&c, r#"SELECT count(*), sum(v) FROM "Él""#)
        .await
        .unwrap();
    let want = simple_rows(
        &direct,
        "SELECT count(*), sum(v) FROM control_1 WHERE id > 10",
    )
    .await
    .unwrap();
    assert_eq!(through_view, want);
    let e = c.simple_query(r#"SELECT "Écompte"()"#).await.unwrap_err();
    assert_eq!(e.code().map(|c| c.code()), Some("0A000"), "{e:?}");
    let unqualified = r#""Odd.Name ""q""""#;
    for (i, t) in tables.iter().enumerate() {
        let control = format!("control_{i}");
        let mut spellings = vec![t.to_string()];
        if t.contains("My Schema") {
            spellings.push(unqualified.to_owned());
        }
        for spelling in &spellings {
            let session = proxy.connect(&db).await;
            session
                .batch_execute(r#"SET search_path = "My Schema", public"#)
                .await
                .unwrap();
            for round in 0..2 {
                for read in reads {
                    let got = simple_rows(&session, &read.replace("{t}", spelling))
                        .await
                        .unwrap_or_else(|e| panic!("{spelling}: {read}: {e:?}"));
                    let want = simple_rows(&direct, &read.replace("{t}", &control))
                        .await
                        .unwrap();
                    assert_eq!(got, want, "{spelling}: {read} (round {round})");
                }
                let sql = format!("SELECT v FROM {spelling} WHERE id = $1");
                for id in [7, 950, 9] {
                    let got: Vec<i32> = session
                        .query(&sql, &[&id])
                        .await
                        .unwrap()
                        .iter()
                        .map(|r| r.get(0))
                        .collect();
                    let want: Vec<i32> = direct
                        .query(&format!("SELECT v FROM {control} WHERE id = $1"), &[&id])
                        .await
                        .unwrap()
                        .iter()
                        .map(|r| r.get(0))
                        .collect();
                    assert_eq!(got, want, "{sql} with {id}");
                }
                // Written once, through the first spelling; read again after.
                if round == 0 && spelling == t {
                    for write in writes {
                        session
                            .batch_execute(&write.replace("{t}", spelling))
                            .await
                            .unwrap_or_else(|e| panic!("{spelling}: {write}: {e:?}"));
                        direct
                            .batch_execute(&write.replace("{t}", &control))
                            .await
                            .unwrap();
                    }
                }
            }
        }
    }
}

/// A session in another client_encoding spells a name outside ASCII in other bytes than
/// the catalog holds, so coldwire's name test cannot find it: a statement of such a
/// session that may name one (it holds the name's ASCII letters and a byte outside ASCII)
/// is refused, in both protocols, instead of being relayed to read the hot rows alone.
/// Statements that cannot name one are relayed as before.
#[tokio::test]
async fn names_outside_ascii_are_refused_to_sessions_in_other_encodings() {
    let db = create_db("latin1names");
    let store = tempfile::tempdir().unwrap();
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(
            r#"CREATE TABLE "Événements"(id int PRIMARY KEY, k text);
               INSERT INTO "Événements" SELECT g, 'k' || g FROM generate_series(1, 1000) g;
               CREATE TABLE notes(id int PRIMARY KEY, k text);
               INSERT INTO notes VALUES (1, 'café');"#,
        )
        .await
        .unwrap();
    let proxy = Proxy::tiering(&db, store.path(), &[]).await;
    let c = proxy.connect(&db).await;
    tier_and_flush(&c, r#""Événements""#).await;
    let hot: i64 = direct
        .query_one(r#"SELECT count(*) FROM "Événements""#, &[])
        .await
        .unwrap()
        .get(0);
    assert!(hot <= 100, "{hot} hot rows");

    let mut raw = RawConn::ready(proxy.addr, &db).await;
    raw.send(&raw::query("SET client_encoding = 'LATIN1'"))
        .await;
    raw.until_ready().await;
    let text = |sql: &[u8]| {
        let mut body = sql.to_vec();
        body.push(0);
        body
    };
    // A count of the tiered table, named in LATIN1, as a simple Query and as Parse, Bind
    // and Execute: refused (before, both answered the hot count).
    let count = b"SELECT count(*) FROM \"\xc9v\xe9nements\"";
    raw.send(&raw::frame(b'Q', &text(count))).await;
    let msgs = raw.until_ready().await;
    let error = msgs.iter().find(|m| m.tag == b'E');
    assert!(
        error.is_some() && !msgs.iter().any(|m| m.tag == b'D'),
        "{msgs:?}"
    );
    assert_eq!(error.unwrap().field(b'C').as_deref(), Some("0A000"));
    let extended = |sql: &[u8]| {
        let mut parse = vec![0];
        parse.extend_from_slice(sql);
        parse.extend_from_slice(b"\0\0\0");
        let mut bytes = raw::frame(b'P', &parse);
        bytes.extend(raw::frame(b'B', b"\0\0\0\0\0\0\0\0"));
        bytes.extend(raw::frame(b'E', b"\0\0\0\0\0"));
        bytes.extend(raw::sync());
        bytes
    };
    raw.send(&extended(count)).await;
    let msgs = raw.until_ready().await;
    let error = msgs.iter().find(|m| m.tag == b'E');
    assert!(
        error.is_some() && !msgs.iter().any(|m| m.tag == b'D'),
        "{msgs:?}"
    );
    assert_eq!(error.unwrap().field(b'C').as_deref(), Some("0A000"));
    // Text outside ASCII that cannot name the table is relayed, in both protocols.
    let plain = b"SELECT k FROM notes WHERE k = 'caf\xe9'";
    raw.send(&raw::frame(b'Q', &text(plain))).await;
    let msgs = raw.until_ready().await;
    let row = msgs.iter().find(|m| m.tag == b'D').expect("a row");
    assert!(row.body.ends_with(b"caf\xe9"), "{:?}", row.body);
    raw.send(&extended(plain)).await;
    let msgs = raw.until_ready().await;
    assert!(msgs.iter().any(|m| m.tag == b'D'), "{msgs:?}");
    // In UTF-8 the session reads the table whole.
    raw.send(&raw::query("SET client_encoding = 'UTF8'")).await;
    raw.until_ready().await;
    raw.send(&raw::query(r#"SELECT count(*) FROM "Événements""#))
        .await;
    let msgs = raw.until_ready().await;
    let row = msgs.iter().find(|m| m.tag == b'D').expect("a row");
    assert!(row.body.ends_with(b"1000"), "{:?}", row.body);
}

#[tokio::test]
async fn a_cte_named_like_its_table_reads_the_table_where_postgres_does() {
    let t = tiered_events("ctescope", "CREATE TABLE control AS TABLE events").await;
    let reads = [
        "WITH events AS (SELECT * FROM events WHERE kind = 'k1') SELECT count(*) FROM events",
        "WITH x AS (SELECT 1), events AS (SELECT * FROM events) SELECT count(*), min(id), max(id) FROM events",
        "WITH a AS (SELECT count(*) AS n FROM events), events AS (SELECT 1) SELECT * FROM a, events",
        "(WITH events AS (SELECT 1 AS n) SELECT count(*) FROM events) UNION ALL SELECT count(*) FROM events",
        "SELECT (WITH events AS (SELECT 1) SELECT count(*) FROM events), (SELECT count(*) FROM events)",
        "WITH RECURSIVE events AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM events WHERE n < 3) SELECT count(*) FROM events",
        "WITH events AS MATERIALIZED (SELECT id FROM events WHERE id % 7 = 0) SELECT count(*), sum(id) FROM events",
    ];
    let writes = [
        "WITH events AS (SELECT id FROM events WHERE id BETWEEN 10 AND 14) \
         UPDATE events SET kind = 'w' WHERE id IN (SELECT id FROM events)",
        "WITH events AS (SELECT id FROM events WHERE id % 100 = 1) \
         DELETE FROM events WHERE id IN (SELECT id FROM events)",
    ];
    let check = |sql: &'static str| {
        let c = &t.c;
        let direct = &t.direct;
        async move {
            let got = simple_rows(c, sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
            let want = simple_rows(direct, &sql.replace("events", "control"))
                .await
                .unwrap();
            assert_eq!(got, want, "{sql}");
        }
    };
    for read in reads {
        check(read).await;
    }
    for write in writes {
        t.c.batch_execute(write)
            .await
            .unwrap_or_else(|e| panic!("{write}: {e:?}"));
        t.direct
            .batch_execute(&write.replace("events", "control"))
            .await
            .unwrap();
    }
    check("SELECT id, kind FROM events ORDER BY id").await;
}

#[tokio::test]
async fn names_holding_coldwires_own_quote_tag_are_tiered_and_served() {
    let db = create_db("dollarnames");
    let store = tempfile::tempdir().unwrap();
    let direct = connect_direct(&db).await;
    // coldwire writes its trigger functions' bodies quoted; a name holding the tag it
    // used ended the body there. A backslash before a quote is read as an escape where
    // `standard_conforming_strings` is off.
    let t = r#""t$coldwire$\'x""#;
    let t_literal = t.replace('\'', "''");
    direct
        .batch_execute(&format!(
            r#"CREATE TABLE {t}("k$coldwire$" int PRIMARY KEY, "$cw$" text);
               INSERT INTO {t} SELECT g, 'v' || g FROM generate_series(1, 500) g;
               CREATE TABLE control AS TABLE {t};"#
        ))
        .await
        .unwrap();
    let proxy = Proxy::start(&[
        "--service-url",
        &cluster().url(&db),
        "--cold-store",
        &format!("file://{}", store.path().display()),
    ])
    .await;
    let c = proxy.connect(&db).await;
    admin_call(&c, &format!(r#"SELECT coldwire.tier_table('{t_literal}', '{{"hot_row_limit": 50, "min_flush_rows": 50, "auto_flush": false}}')"#))
        .await
        .unwrap();
    admin_call(
        &c,
        &format!("SELECT coldwire.flush_table('{t_literal}', wait => true)"),
    )
    .await
    .unwrap();
    for sql in [
        r#"UPDATE {t} SET "$cw$" = 'w' WHERE "k$coldwire$" IN (8, 300)"#,
        r#"DELETE FROM {t} WHERE "k$coldwire$" = 9"#,
        r#"INSERT INTO {t} VALUES (1000, 'new')"#,
    ] {
        c.batch_execute(&sql.replace("{t}", t))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        direct
            .batch_execute(&sql.replace("{t}", "control"))
            .await
            .unwrap();
    }
    for sql in [
        r#"SELECT count(*), sum("k$coldwire$"), max("$cw$") FROM {t}"#,
        r#"SELECT * FROM {t} ORDER BY "k$coldwire$""#,
    ] {
        let got = simple_rows(&c, &sql.replace("{t}", t)).await.unwrap();
        let want = simple_rows(&direct, &sql.replace("{t}", "control"))
            .await
            .unwrap();
        assert_eq!(got, want, "{sql}");
    }
    let hot: i64 = direct
        .query_one(&format!("SELECT count(*) FROM {t}"), &[])
        .await
        .unwrap()
        .get(0);
    assert!(hot < 100, "{hot} rows hot");
    // Writes straight to Postgres from a session whose strings do not conform: the
    // capture function, compiled in that session, records an insert of a key past the
    // cold ones and refuses a delete as unplanned.
    let plain = connect_direct(&db).await;
    plain
        .batch_execute("SET standard_conforming_strings = off")
        .await
        .unwrap();
    plain
        .batch_execute(&format!("INSERT INTO {t} VALUES (2000, 'direct')"))
        .await
        .unwrap();
    let e = plain
        .batch_execute(&format!(r#"DELETE FROM {t} WHERE "k$coldwire$" = 1"#))
        .await
        .unwrap_err();
    assert_eq!(e.code().map(|c| c.code()), Some("CW001"), "{e:?}");
}

#[tokio::test]
async fn a_view_name_that_resolves_elsewhere_in_the_session_is_refused() {
    let t = tiered_events(
        "viewelsewhere",
        "CREATE SCHEMA reports; CREATE VIEW reports.recent AS SELECT * FROM events WHERE id > 500;
         CREATE SCHEMA app; CREATE TABLE app.recent(id bigint, kind text);
         INSERT INTO app.recent VALUES (1, 'a'), (2, 'b'), (3, 'c');",
    )
    .await;
    let count = |sql: &'static str| {
        let c = &t.c;
        async move {
            simple_rows(c, sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e:?}"))[0][0]
                .clone()
                .unwrap()
        }
    };
    t.c.batch_execute("SET search_path = reports, public")
        .await
        .unwrap();
    assert_eq!(count("SELECT count(*) FROM recent").await, "500");
    assert_eq!(count("SELECT count(*) FROM reports.recent").await, "500");
    // Where the name means another relation, Postgres would read that one: coldwire
    // refuses rather than answer from the view.
    t.c.batch_execute("SET search_path = app, public")
        .await
        .unwrap();
    for _ in 0..2 {
        assert_refused(
            &t.c,
            "SELECT count(*) FROM recent",
            "does not name the view",
            "schema-qualify",
        )
        .await;
    }
    assert_eq!(count("SELECT count(*) FROM app.recent").await, "3");
    assert_eq!(count("SELECT count(*) FROM reports.recent").await, "500");
    t.c.batch_execute("SET search_path = reports, public; CREATE TEMP TABLE recent(id int)")
        .await
        .unwrap();
    assert_refused(
        &t.c,
        "SELECT count(*) FROM recent",
        "does not name the view",
        "schema-qualify",
    )
    .await;
}

/// A locking read runs as written once the rows of the table it locks are back in the
/// heap: one that also reads another tiered table is refused (it would read that table's
/// hot rows only), and one that reads its table twice brings every row back first.
#[tokio::test]
async fn locking_reads_never_read_a_tiered_tables_hot_rows_alone() {
    let t = tiered_events(
        "lockingtwo",
        "CREATE TABLE other(id bigint PRIMARY KEY, events_id bigint);
         INSERT INTO other SELECT g, g FROM generate_series(1, 1000) g;
         CREATE VIEW recent AS SELECT * FROM events WHERE id > 0;",
    )
    .await;
    tier_and_flush(&t.c, "other").await;
    let join = "SELECT e.id, o.id FROM events e JOIN other o ON o.events_id = e.id WHERE e.id < 6 ORDER BY 1";
    assert_eq!(simple_rows(&t.c, join).await.unwrap().len(), 5);
    for sql in [
        format!("{join} FOR UPDATE"),
        format!("{join} FOR SHARE OF e"),
        "SELECT id FROM events e WHERE id > 80 AND id < 85 AND NOT EXISTS (SELECT 1 FROM other o WHERE o.events_id = e.id) FOR UPDATE".to_owned(),
        "SELECT id FROM events WHERE id IN (SELECT events_id FROM other WHERE id BETWEEN 70 AND 72) ORDER BY id LIMIT 3 FOR UPDATE SKIP LOCKED".to_owned(),
        // Through a view over one: no planner locks it.
        "SELECT * FROM recent WHERE id = 3 FOR UPDATE".to_owned(),
    ] {
        let e = t.c.simple_query(&sql).await.unwrap_err();
        let db = e.as_db_error().unwrap_or_else(|| panic!("{sql}: {e:?}"));
        assert_eq!(db.code().code(), "0A000", "{sql}: {db:?}");
        assert!(
            db.message().contains("locks rows of events and reads another tiered table, other")
                || db.message().contains("locks rows and reads the view public.recent"),
            "{sql}: {db:?}"
        );
    }
    // The same table read twice: every row back first, so the second reference sees
    // them (in a block, where the locks hold).
    t.c.batch_execute("BEGIN").await.unwrap();
    let rows = simple_rows(
        &t.c,
        "SELECT a.id, b.id FROM events a JOIN events b ON b.id = a.id + 1 WHERE a.id < 6 ORDER BY 1 FOR UPDATE OF a",
    )
    .await
    .unwrap();
    assert_eq!(rows.len(), 5, "{rows:?}");
    t.c.batch_execute("COMMIT").await.unwrap();
    let count: i64 = t
        .direct
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, 1000, "every row was brought back");
}

/// Under a nondeterministic collation values of other bytes may be equal ('Name5' and
/// 'name5' case-insensitively): no comparison on such a column is made on cold rows,
/// which Postgres compares whole, so reads and writes answer as on a plain table.
#[tokio::test]
async fn columns_under_a_nondeterministic_collation_compare_as_postgres_does() {
    let t = tiered_events(
        "nondeterministic",
        "CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
         CREATE TABLE c1(id bigint PRIMARY KEY, name text COLLATE ci, v int);
         INSERT INTO c1 SELECT g, 'Name' || g, g FROM generate_series(1, 1000) g;
         CREATE TABLE c1_plain AS TABLE c1;",
    )
    .await;
    tier_and_flush(&t.c, "c1").await;
    let hot: i64 = t
        .direct
        .query_one("SELECT count(*) FROM c1", &[])
        .await
        .unwrap()
        .get(0);
    assert!(hot <= 100, "{hot}");
    for sql in [
        "SELECT id FROM {t} WHERE name = 'name5'",
        "SELECT count(*) FROM {t} WHERE name <> 'name5'",
        "SELECT id FROM {t} WHERE name IN ('name5', 'NAME6') ORDER BY id",
        "SELECT count(*) FROM {t} WHERE name NOT IN ('name5', 'nAmE7')",
        "SELECT count(*), sum(v) FROM {t} WHERE name = 'NAME9' OR name = 'name10'",
        "SELECT lower(name), count(*) FROM {t} WHERE id < 20 GROUP BY name ORDER BY 1",
    ] {
        let got = simple_rows(&t.c, &sql.replace("{t}", "c1")).await.unwrap();
        let want = simple_rows(&t.c, &sql.replace("{t}", "c1_plain"))
            .await
            .unwrap();
        assert_eq!(got, want, "{sql}");
        assert!(!got.is_empty(), "{sql}");
    }
    let statement =
        t.c.prepare("SELECT id FROM c1 WHERE name = $1")
            .await
            .unwrap();
    let rows = t.c.query(&statement, &[&"NAME11"]).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, i64>(0), 11);
    // A write reaches the cold row its condition matches.
    let n =
        t.c.execute("UPDATE c1 SET v = -1 WHERE name = 'nAmE12'", &[])
            .await
            .unwrap();
    assert_eq!(n, 1);
    let v: i32 =
        t.c.query_one("SELECT v FROM c1 WHERE id = 12", &[])
            .await
            .unwrap()
            .get(0);
    assert_eq!(v, -1);
}

/// A foreign key of a tiered table with NO ACTION or RESTRICT checks the referencing rows
/// in its heap alone: a DELETE of the referenced table, or an UPDATE of the referenced
/// columns, is refused rather than left to orphan cold rows; other UPDATEs run, and after
/// the referencing rows are gone a session that says so (`coldwire.hot_only_writes`) may
/// run it.
#[tokio::test]
async fn writes_that_a_tiered_tables_foreign_key_checks_are_refused() {
    let t = tiered_events(
        "fkrestrict",
        "CREATE TABLE grand(id bigint PRIMARY KEY, note text);
         CREATE TABLE aunt(id bigint PRIMARY KEY);
         INSERT INTO grand SELECT g, 'g' FROM generate_series(1, 1000) g;
         INSERT INTO aunt SELECT g FROM generate_series(1, 1000) g;
         CREATE TABLE par(id bigint PRIMARY KEY REFERENCES grand ON DELETE CASCADE ON UPDATE CASCADE,
                          note text, aunt_id bigint REFERENCES aunt ON DELETE SET NULL ON UPDATE CASCADE);
         INSERT INTO par SELECT g, 'p', g FROM generate_series(1, 1000) g;
         CREATE TABLE kid(id bigint PRIMARY KEY, par_id bigint REFERENCES par(id) ON UPDATE RESTRICT);
         INSERT INTO kid SELECT g, g FROM generate_series(1, 1000) g;",
    )
    .await;
    tier_and_flush(&t.c, "kid").await;
    let orphans =
        "SELECT count(*) FROM kid k WHERE NOT EXISTS (SELECT 1 FROM par p WHERE p.id = k.par_id)";
    for sql in [
        "DELETE FROM par WHERE id = 5",
        "/* orm */ delete from public.par where id in (6, 600)",
        "UPDATE par SET id = 5000 WHERE id = 7",
        "UPDATE par SET note = 'n', id = id + 5000 WHERE id = 8",
    ] {
        let e = t.c.simple_query(sql).await.unwrap_err();
        let db = e.as_db_error().unwrap_or_else(|| panic!("{sql}: {e:?}"));
        assert_eq!(db.code().code(), "0A000", "{sql}: {db:?}");
        assert!(
            db.message().contains("checks tiered table kid"),
            "{sql}: {db:?}"
        );
    }
    // Writes of a table whose foreign key cascades into the referenced rows: deleting
    // them, or changing their key.
    for sql in [
        "DELETE FROM grand WHERE id = 12",
        "UPDATE grand SET id = 5013 WHERE id = 13",
    ] {
        let e = t.c.simple_query(sql).await.unwrap_err();
        let db = e.as_db_error().unwrap_or_else(|| panic!("{sql}: {e:?}"));
        assert_eq!(db.code().code(), "0A000", "{sql}: {db:?}");
        assert!(
            db.message().contains("checks tiered table kid")
                && db
                    .message()
                    .contains("which a cascade reaches in table public.par"),
            "{sql}: {db:?}"
        );
    }
    // Cascades that leave the referenced key alone check nothing.
    for sql in [
        "UPDATE grand SET note = 'n' WHERE id = 14",
        "UPDATE aunt SET id = 5015 WHERE id = 15",
        "DELETE FROM aunt WHERE id = 16",
    ] {
        assert_eq!(t.c.execute(sql, &[]).await.unwrap(), 1, "{sql}");
    }
    let e =
        t.c.execute("DELETE FROM par WHERE id = $1", &[&9i64])
            .await
            .unwrap_err();
    assert_eq!(e.code().map(|c| c.code()), Some("0A000"), "{e:?}");
    assert_eq!(
        simple_rows(&t.c, orphans).await.unwrap(),
        [[Some("0".to_owned())]]
    );
    // An UPDATE of other columns checks nothing, nor does an upsert that sets them.
    assert_eq!(
        t.c.execute("UPDATE par SET note = 'kept' WHERE id = 10", &[])
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        t.c.execute(
            "INSERT INTO par VALUES (10, 'up') ON CONFLICT (id) DO UPDATE SET note = excluded.note",
            &[]
        )
        .await
        .unwrap(),
        1
    );
    // With the referencing rows deleted through coldwire first, the session may say so.
    t.c.batch_execute(
        "BEGIN; DELETE FROM kid WHERE par_id = 11; SET LOCAL coldwire.hot_only_writes = on; \
         DELETE FROM par WHERE id = 11; COMMIT",
    )
    .await
    .unwrap();
    assert_eq!(
        simple_rows(&t.c, orphans).await.unwrap(),
        [[Some("0".to_owned())]]
    );
    assert_eq!(
        simple_rows(&t.c, "SELECT count(*) FROM par").await.unwrap(),
        [[Some("999".to_owned())]]
    );
}

/// Columns qualified by schema and table, as Prisma, PostgREST and Hasura write every
/// column: read through coldwire as from a plain table, in both protocols.
#[tokio::test]
async fn columns_qualified_by_schema_and_table_are_read_as_written() {
    let t = tiered_events(
        "schemacolumns",
        "CREATE TABLE control AS TABLE events; CREATE SCHEMA reports;
         CREATE VIEW reports.recent AS SELECT * FROM events WHERE id > 900;
         CREATE VIEW reports.recent_control AS SELECT * FROM control WHERE id > 900;",
    )
    .await;
    for sql in [
        r#"SELECT "public"."events"."id", "public"."events"."kind" FROM "public"."events" WHERE "public"."events"."id" < 20 ORDER BY "public"."events"."id" ASC LIMIT 10 OFFSET 0"#,
        r#"SELECT COUNT(*) FROM (SELECT "public"."events"."id" FROM "public"."events" WHERE "public"."events"."kind" = 'k1' OFFSET 0) AS "sub""#,
        r#"SELECT COUNT("public"."events"."id"), "public"."events"."kind" FROM "public"."events" GROUP BY "public"."events"."kind" ORDER BY 2"#,
        r#"SELECT count(*) FROM "public"."events" WHERE "public"."events"."kind" = 'k2'"#,
        "SELECT public.events.* FROM events WHERE public.events.id IN (3, 950) ORDER BY 1",
        "SELECT reports.recent.kind, count(*) FROM reports.recent GROUP BY reports.recent.kind ORDER BY 1",
    ] {
        let want_sql = sql
            .replace("recent", "recent_control")
            .replace("events", "control");
        let want = simple_rows(&t.c, &want_sql).await.unwrap();
        let got = simple_rows(&t.c, sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        assert_eq!(got, want, "{sql}");
        assert!(!got.is_empty(), "{sql}");
        // Prepared, as the drivers send them.
        let rows = t
            .c
            .query(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        assert_eq!(rows.len(), want.len(), "{sql}");
    }
    // A write in that form brings back the rows its conditions bound, not every row.
    let n =
        t.c.execute(
            r#"UPDATE "public"."events" SET "kind" = $1 WHERE "public"."events"."id" = $2"#,
            &[&"prisma", &5i64],
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    let heap: i64 = t
        .direct
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(heap, t.hot + 1, "only the row updated came back");
    let kind: String =
        t.c.query_one("SELECT kind FROM events WHERE id = 5", &[])
            .await
            .unwrap()
            .get(0);
    assert_eq!(kind, "prisma");
}

/// A view over a tiered table replaced, renamed or dropped directly on Postgres (coldwire
/// reads views again within a second) is never read as it was: a statement in that second
/// is refused (40001, retry) or reads the view as it is now, in both protocols.
#[tokio::test]
async fn a_view_replaced_renamed_or_dropped_is_never_read_as_it_was() {
    let t = tiered_events(
        "viewchanged",
        "CREATE SCHEMA reports; CREATE VIEW reports.recent AS SELECT * FROM events WHERE id > 900;",
    )
    .await;
    let ttl = std::time::Duration::from_millis(1200);
    // A count through coldwire: the count, or the refusal's SQLSTATE and message.
    let count = |sql: &'static str| {
        let c = &t.c;
        async move {
            match simple_rows(c, sql).await {
                Ok(rows) => Ok(rows[0][0].clone().unwrap()),
                Err(e) => {
                    let db = e.as_db_error().unwrap_or_else(|| panic!("{sql}: {e:?}"));
                    Err((db.code().code().to_owned(), db.message().to_owned()))
                }
            }
        }
    };
    let changed = |r: &Result<String, (String, String)>| matches!(r, Err((code, message)) if code == "40001" && message.contains("replaced, renamed or dropped"));
    let prepared =
        t.c.prepare("SELECT count(*) FROM reports.recent")
            .await
            .unwrap();
    let run_prepared = || async {
        match t.c.query_one(&prepared, &[]).await {
            Ok(row) => Ok(row.get::<_, i64>(0).to_string()),
            Err(e) => {
                let db = e.as_db_error().unwrap_or_else(|| panic!("{e:?}"));
                Err((db.code().code().to_owned(), db.message().to_owned()))
            }
        }
    };
    // Read afresh by coldwire just before each change, so that it acts on the view as it
    // was for about a second.
    tokio::time::sleep(ttl).await;
    assert_eq!(
        count("SELECT count(*) FROM reports.recent").await,
        Ok("100".into())
    );
    assert_eq!(run_prepared().await, Ok("100".into()));
    t.direct
        .batch_execute(
            "CREATE OR REPLACE VIEW reports.recent AS SELECT * FROM events WHERE id > 500",
        )
        .await
        .unwrap();
    let simple = count("SELECT count(*) FROM reports.recent").await;
    assert!(simple == Ok("500".into()) || changed(&simple), "{simple:?}");
    let bound = run_prepared().await;
    assert!(bound == Ok("500".into()) || changed(&bound), "{bound:?}");
    tokio::time::sleep(ttl).await;
    assert_eq!(
        count("SELECT count(*) FROM reports.recent").await,
        Ok("500".into())
    );
    assert_eq!(run_prepared().await, Ok("500".into()));

    t.direct
        .batch_execute("ALTER VIEW reports.recent RENAME TO earlier")
        .await
        .unwrap();
    let renamed = count("SELECT count(*) FROM reports.recent").await;
    assert!(
        changed(&renamed) || matches!(&renamed, Err((code, _)) if code == "42P01"),
        "{renamed:?}"
    );
    tokio::time::sleep(ttl).await;
    assert_eq!(
        count("SELECT count(*) FROM reports.earlier").await,
        Ok("500".into())
    );

    t.direct
        .batch_execute("DROP VIEW reports.earlier")
        .await
        .unwrap();
    let dropped = count("SELECT count(*) FROM reports.earlier").await;
    assert!(
        changed(&dropped) || matches!(&dropped, Err((code, _)) if code == "42P01"),
        "{dropped:?}"
    );
    tokio::time::sleep(ttl).await;
    assert!(matches!(
        count("SELECT count(*) FROM reports.earlier").await,
        Err((code, _)) if code == "42P01"
    ));
}

#[tokio::test]
async fn a_write_of_a_tiered_table_that_reads_a_view_over_one_is_refused() {
    let t = tiered_events(
        "writeview",
        "CREATE VIEW recent AS SELECT * FROM events WHERE id > 500;
         CREATE TABLE tally(n bigint);",
    )
    .await;
    // The view would read the hot rows only (the write is relayed as written, its views
    // not expanded): the INSERT copied 100 of its 500 rows. The others read every row
    // only where the write happened to bring all of them back first; refused alike.
    for sql in [
        "INSERT INTO events SELECT id + 5000, kind FROM recent",
        "UPDATE events SET kind = 'v' FROM recent r WHERE r.id = events.id",
        "DELETE FROM events WHERE id IN (SELECT id FROM recent)",
    ] {
        assert_refused(
            &t.c,
            sql,
            "reads the view public.recent",
            "Split the statement",
        )
        .await;
    }
    let untouched: i64 = t
        .direct
        .query_one(
            "SELECT count(*) FROM events WHERE kind = 'v' OR id > 5000",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(untouched, 0);
    // A write of a plain table reading the view is a read of it: served whole.
    t.c.batch_execute("INSERT INTO tally SELECT count(*) FROM recent")
        .await
        .unwrap();
    let n: i64 = t
        .direct
        .query_one("SELECT n FROM tally", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 500);
}

/// A tiered table that gains, where coldwire sees no DDL (a `DO` block) or through it,
/// what coldwire cannot serve (a foreign key with `ON DELETE CASCADE` referencing it, a row
/// trigger, a rule, row-level security, a unique index) is neither read, written nor
/// flushed until that is dropped: the flush's delete would have cascaded into the other
/// table, the rows brought back for a write would have been rewritten by the trigger or
/// swallowed by the rule, and cold rows would have passed the policies.
#[tokio::test]
async fn a_tiered_table_that_gains_what_coldwire_cannot_serve_is_refused_until_it_is_dropped() {
    let t = tiered_events(
        "unservable",
        "CREATE VIEW recent AS SELECT * FROM events WHERE id > 10;
         CREATE FUNCTION shout() RETURNS trigger LANGUAGE plpgsql
             AS $$ BEGIN NEW.kind := upper(NEW.kind); RETURN NEW; END $$;",
    )
    .await;
    let (c, direct) = (&t.c, &t.direct);
    let count = "SELECT count(*) FROM events";
    assert_eq!(
        simple_rows(c, count).await.unwrap(),
        [[Some("1000".to_owned())]]
    );
    // The registry is read again within a second of DDL it did not see.
    let settle = || tokio::time::sleep(std::time::Duration::from_millis(1200));
    let refused = |sql: &'static str, offender: &'static str| async move {
        let e = match c.simple_query(sql).await {
            Ok(answer) => panic!("{sql} with {offender}: {answer:?}"),
            Err(e) => e,
        };
        let db = e.as_db_error().unwrap_or_else(|| panic!("{sql}: {e:?}"));
        assert_eq!(db.code().code(), "0A000", "{sql}: {db:?}");
        assert!(
            db.message()
                .contains("tiered table public.events gained what coldwire cannot serve")
                && db.message().contains(offender),
            "{sql}: {db:?}"
        );
    };

    // Extended statistics are DDL like any other (they were once rewritten as a read).
    c.batch_execute("CREATE STATISTICS events_st ON id, kind FROM events")
        .await
        .unwrap();
    assert_eq!(
        simple_rows(c, count).await.unwrap(),
        [[Some("1000".to_owned())]]
    );

    // What tiering refuses is refused through coldwire once tiered too.
    for (sql, what) in [
        (
            "CREATE TABLE ch(cid int PRIMARY KEY, ref bigint REFERENCES events ON DELETE CASCADE)",
            "a foreign key referencing tiered table events",
        ),
        (
            "CREATE TRIGGER shout BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION shout()",
            "a row trigger on tiered table events",
        ),
        (
            "CREATE RULE quiet AS ON INSERT TO events DO INSTEAD NOTHING",
            "a rule on tiered table events",
        ),
        (
            "CREATE UNIQUE INDEX events_kind ON events (kind, id)",
            "a unique index on tiered table events",
        ),
    ] {
        let e = c.simple_query(sql).await.unwrap_err();
        let db = e.as_db_error().unwrap_or_else(|| panic!("{sql}: {e:?}"));
        assert_eq!(db.code().code(), "0A000", "{sql}: {db:?}");
        assert!(db.message().contains(what), "{sql}: {db:?}");
    }

    // A foreign key that cascades, added directly: the flush must not delete.
    direct
        .batch_execute(
            "CREATE TABLE ch(cid int PRIMARY KEY, ref bigint REFERENCES events ON DELETE CASCADE);
             INSERT INTO ch SELECT g, 900 + g FROM generate_series(1, 100) g;",
        )
        .await
        .unwrap();
    direct
        .batch_execute("INSERT INTO events SELECT g, 'n' FROM generate_series(1001, 1300) g")
        .await
        .unwrap();
    settle().await;
    refused(count, "foreign key ch_ref_fkey on ").await;
    refused("SELECT * FROM recent WHERE id = 5", "ch_ref_fkey").await;
    refused("UPDATE events SET kind = 'u' WHERE id = 5", "ch_ref_fkey").await;
    let job = admin_call(c, "SELECT coldwire.flush_table('events', wait => true)")
        .await
        .unwrap();
    assert_eq!(job["state"], "failed", "{job}");
    assert!(
        job["error"].as_str().is_some_and(
            |e| e.contains("gained what coldwire cannot serve: foreign key ch_ref_fkey")
        ),
        "{job}"
    );
    let kept: i64 = direct
        .query_one("SELECT count(*) FROM ch", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, 100, "the flush deleted nothing");
    c.batch_execute("DROP TABLE ch").await.unwrap();
    settle().await;
    assert_eq!(
        simple_rows(c, count).await.unwrap(),
        [[Some("1300".to_owned())]]
    );

    // A row trigger added inside a DO block would rewrite the row an UPDATE brings back.
    c.batch_execute(
        "DO $$ BEGIN EXECUTE 'CREATE TRIGGER shout BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION shout()'; END $$",
    )
    .await
    .unwrap();
    settle().await;
    refused(
        "UPDATE events SET id = id WHERE id = 5",
        "row trigger shout",
    )
    .await;
    refused(
        "/* orm */ select * from public.events where id = 5",
        "row trigger shout",
    )
    .await;
    c.batch_execute("DROP TRIGGER shout ON events")
        .await
        .unwrap();
    assert_eq!(
        c.execute("UPDATE events SET id = id WHERE id = 5", &[])
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        simple_rows(c, "SELECT kind FROM events WHERE id = 5")
            .await
            .unwrap(),
        [[Some("k1".to_owned())]]
    );

    // A rule that swallows the rows brought back; row-level security; a unique index.
    for (add, offender, drop) in [
        (
            "CREATE RULE quiet AS ON INSERT TO events DO INSTEAD NOTHING",
            "rule quiet",
            "DROP RULE quiet ON events",
        ),
        (
            "DO $$ BEGIN EXECUTE 'ALTER TABLE events ENABLE ROW LEVEL SECURITY'; END $$",
            "row-level security is enabled",
            "DO $$ BEGIN EXECUTE 'ALTER TABLE events DISABLE ROW LEVEL SECURITY'; END $$",
        ),
        (
            "CREATE UNIQUE INDEX events_kind ON events (kind, id)",
            "unique index events_kind",
            "DROP INDEX events_kind",
        ),
    ] {
        direct.batch_execute(add).await.unwrap();
        settle().await;
        refused("DELETE FROM events WHERE id = 6", offender).await;
        refused(count, offender).await;
        c.batch_execute(drop).await.unwrap();
        settle().await;
    }
    // untier_table brings the cold rows back with an INSERT, which a rule or a row
    // trigger could swallow: refused, and the cold rows stay.
    direct
        .batch_execute("CREATE RULE quiet AS ON INSERT TO events DO INSTEAD NOTHING")
        .await
        .unwrap();
    let e = admin_call(c, "SELECT coldwire.untier_table('events')")
        .await
        .unwrap_err();
    assert!(
        format!("{e:?}").contains("cannot be untiered: rule quiet"),
        "{e:?}"
    );
    direct
        .batch_execute("DROP RULE quiet ON events")
        .await
        .unwrap();
    settle().await;
    assert_eq!(
        c.execute("DELETE FROM events WHERE id = 6", &[])
            .await
            .unwrap(),
        1
    );
    // And the table flushes again.
    admin_call(c, "SELECT coldwire.flush_table('events', wait => true)")
        .await
        .unwrap();
    assert_eq!(
        simple_rows(c, count).await.unwrap(),
        [[Some("1299".to_owned())]]
    );
}

/// A read of a tiered table in the same group or Query string as a write that brings a
/// cold row back, after it: Postgres runs both in one transaction, whose mirror rows
/// coldwire's own connection cannot see. The aggregate counted the row's cold version and
/// its guard failed at every retry (40001 in a pipeline, for ever), and a retry of a Query
/// string ran, and answered, its earlier statements twice.
#[tokio::test]
async fn reads_after_a_write_of_their_group_see_the_write_once() {
    let t = tiered_events("groupwrites", "CREATE TABLE log(n serial, note text);").await;
    let (c, direct) = (&t.c, &t.direct);
    let total = "SELECT count(*), count(*) FILTER (WHERE kind = 'q') FROM events";

    // A pipeline: one Sync for both, as psycopg's pipeline mode and pgx's batches send.
    let mut raw = RawConn::ready(t._proxy.addr, &t.db).await;
    let mut frames = Vec::new();
    for sql in [
        "UPDATE events SET kind = 'q' WHERE id = 60",
        "SELECT count(*) FROM events",
        "DELETE FROM events WHERE id = 61",
        "SELECT count(*), sum(id) FROM events WHERE kind <> 'zz'",
    ] {
        frames.extend(raw::parse("", sql));
        frames.extend(raw::bind("", &[]));
        frames.extend(raw::execute());
    }
    frames.extend(raw::sync());
    raw.send(&frames).await;
    let answers = raw.until_ready().await;
    assert_eq!(raw::tags(&answers), "12C12DC12C12DCZ", "{answers:?}");
    let rows: Vec<String> = answers
        .iter()
        .filter(|m| m.tag == b'D')
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    assert!(rows[0].ends_with("1000"), "{rows:?}");
    let sum = (1..=1000i64).sum::<i64>() - 61;
    assert!(
        rows[1].contains("999") && rows[1].ends_with(&sum.to_string()),
        "{rows:?}"
    );
    assert_eq!(
        simple_rows(c, total).await.unwrap(),
        vec![vec![Some("999".to_owned()), Some("1".to_owned())]]
    );

    // Query strings, in autocommit and with a block that commits inside them.
    for (sql, logged) in [
        (
            "UPDATE events SET kind = 'q' WHERE id = 70; INSERT INTO log(note) VALUES ('a'); SELECT count(*), count(*) FILTER (WHERE kind = 'q') FROM events",
            1,
        ),
        (
            "BEGIN; UPDATE events SET kind = 'q' WHERE id = 81; INSERT INTO log(note) VALUES ('b'); COMMIT; SELECT count(*), count(*) FILTER (WHERE kind = 'q') FROM events",
            2,
        ),
    ] {
        let answers = c.simple_query(sql).await.unwrap();
        let completions = answers
            .iter()
            .filter(|m| matches!(m, SimpleQueryMessage::CommandComplete(_)))
            .count();
        let statements = sql.matches(';').count() + 1;
        assert_eq!(completions, statements, "{sql}: each statement answered once");
        let logged_now: i64 = direct
            .query_one("SELECT count(*) FROM log", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(logged_now, logged, "{sql}: run once");
    }
    assert_eq!(
        simple_rows(c, total).await.unwrap(),
        vec![vec![Some("999".to_owned()), Some("3".to_owned())]]
    );
}

/// A Query string whose read of a tiered table comes after a write whose completion the
/// client has seen: when the read's guard fails (a flush finalized as it started), the
/// string is not run again (its write would run, and be answered, twice); the client gets
/// the 40001, and the implicit transaction took the write back with it.
#[tokio::test]
async fn a_query_string_is_never_run_again_after_the_client_saw_a_statement_of_it_complete() {
    let db = create_db("stringretry");
    let mut flushing = Flushing::start(&db, 150, 50).await;
    flushing
        .direct
        .batch_execute("CREATE TABLE log(n bigint PRIMARY KEY)")
        .await
        .unwrap();
    let c = flushing.proxy.connect(&db).await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(6);
    let (mut done, mut refused) = (0i64, 0);
    let mut k = 0i64;
    while tokio::time::Instant::now() < deadline {
        k += 1;
        let sql = format!(
            "INSERT INTO log VALUES ({k}); SELECT count(*), sum(v) FROM t WHERE id <= 2000"
        );
        match c.simple_query(&sql).await {
            Ok(answers) => {
                let completions = answers
                    .iter()
                    .filter(|m| matches!(m, SimpleQueryMessage::CommandComplete(_)))
                    .count();
                assert_eq!(completions, 2, "each statement answered once: {answers:?}");
                let rows: Vec<_> = answers
                    .iter()
                    .filter_map(|m| match m {
                        SimpleQueryMessage::Row(r) => {
                            Some((r.get(0).unwrap().to_owned(), r.get(1).unwrap().to_owned()))
                        }
                        _ => None,
                    })
                    .collect();
                assert_eq!(
                    rows,
                    [("2000".to_owned(), EXPECTED.1.to_string())],
                    "no row missing or doubled"
                );
                done += 1;
            }
            Err(e) => {
                assert_eq!(
                    e.code(),
                    Some(&tokio_postgres::error::SqlState::T_R_SERIALIZATION_FAILURE),
                    "{e:?}"
                );
                refused += 1;
            }
        }
    }
    flushing.stop().await;
    let logged: i64 = flushing
        .direct
        .query_one("SELECT count(*) FROM log", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        logged, done,
        "each string that succeeded wrote once, each refused one not at all ({refused} refused)"
    );
    assert!(done > 0, "{refused} refused");
    assert!(
        refused > 0,
        "a guard failed at least once ({done} answered)"
    );
}

/// A cursor or a table made from a locking read (psycopg's and Django's server-side
/// cursors over `select_for_update()` declare one) brings back and locks every row it
/// reads, hot or cold, as the locking read alone does.
#[tokio::test]
async fn cursors_and_tables_made_from_locking_reads_read_every_row() {
    let t = tiered_events("declarelocking", "").await;
    let c = &t.c;
    let tag = |answers: &[SimpleQueryMessage]| {
        answers
            .iter()
            .filter(|m| matches!(m, SimpleQueryMessage::Row(_)))
            .count()
    };
    c.batch_execute("BEGIN").await.unwrap();
    for (sql, fetch, rows) in [
        (
            r#"DECLARE "c_1" CURSOR WITHOUT HOLD FOR SELECT * FROM events WHERE id <= 500 FOR SHARE"#,
            r#"FETCH FORWARD ALL FROM "c_1""#,
            500,
        ),
        (
            "/* orm */ declare d cursor for select id, kind from public.events where id = 10 for update",
            "FETCH ALL d",
            1,
        ),
        (
            "DECLARE e CURSOR FOR SELECT id FROM (SELECT * FROM events WHERE id BETWEEN 200 AND 260 FOR UPDATE) s",
            "FETCH ALL e",
            61,
        ),
    ] {
        c.simple_query(sql).await.unwrap();
        let answers = c.simple_query(fetch).await.unwrap();
        assert_eq!(tag(&answers), rows, "{sql}");
    }
    // In the extended protocol, with a parameter.
    c.execute(
        "DECLARE f CURSOR FOR SELECT * FROM events WHERE id = $1 FOR UPDATE",
        &[&20i64],
    )
    .await
    .unwrap();
    assert_eq!(tag(&c.simple_query("FETCH ALL f").await.unwrap()), 1);
    c.batch_execute("COMMIT").await.unwrap();
    let answers = c
        .simple_query("CREATE TEMP TABLE x1 AS SELECT * FROM events WHERE id < 300 FOR UPDATE; SELECT count(*) FROM x1")
        .await
        .unwrap();
    assert_eq!(
        answers.iter().find_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        }),
        Some("299".to_owned())
    );
    // Every row once, and the table whole.
    assert_eq!(
        simple_rows(c, "SELECT count(*), count(DISTINCT id) FROM events")
            .await
            .unwrap(),
        [[Some("1000".to_owned()), Some("1000".to_owned())]]
    );
}

/// A REPEATABLE READ block whose snapshot was taken before another session changed a
/// cold row and flushed it: Postgres refuses the block's write of that row with 40001;
/// coldwire brought back the row as the snapshot saw it, and the write undid the other
/// session's change (a lost update, a deleted row back).
#[tokio::test]
async fn writes_of_a_snapshot_older_than_a_flush_fail_as_serialization_failures() {
    let t = tiered_events("rrflush", "").await;
    let other = t._proxy.connect(&t.db).await;
    let a = &t.c;
    // A block takes its snapshot; the other session then changes cold rows and flushes.
    let snapshot_then_flush = |change: &'static str| {
        let other = &other;
        async move {
            a.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                .await
                .unwrap();
            a.simple_query("SELECT 1").await.unwrap();
            other.batch_execute(change).await.unwrap();
            admin_call(
                other,
                "SELECT coldwire.flush_table('events', drain => true, wait => true)",
            )
            .await
            .unwrap();
        }
    };
    for (change, sql) in [
        (
            "UPDATE events SET kind = 'b' WHERE id = 5; DELETE FROM events WHERE id = 6",
            "UPDATE events SET kind = kind || 'a' WHERE id = 5",
        ),
        (
            "UPDATE events SET kind = 'c' WHERE id = 7",
            "UPDATE events SET kind = 'a' WHERE id IN (5, 6)",
        ),
    ] {
        snapshot_then_flush(change).await;
        let e = a.simple_query(sql).await.unwrap_err();
        assert_eq!(
            e.code(),
            Some(&tokio_postgres::error::SqlState::T_R_SERIALIZATION_FAILURE),
            "{sql}: {e:?}"
        );
        a.batch_execute("ROLLBACK").await.unwrap();
    }
    assert_eq!(
        simple_rows(
            a,
            "SELECT kind FROM events WHERE id IN (5, 6, 7) ORDER BY id"
        )
        .await
        .unwrap(),
        [[Some("b".to_owned())], [Some("c".to_owned())]]
    );
    // A block whose snapshot is current writes as before.
    a.batch_execute(
        "BEGIN ISOLATION LEVEL REPEATABLE READ; UPDATE events SET kind = 'd' WHERE id = 5; COMMIT",
    )
    .await
    .unwrap();
    assert_eq!(
        simple_rows(a, "SELECT kind FROM events WHERE id = 5")
            .await
            .unwrap(),
        [[Some("d".to_owned())]]
    );
}
