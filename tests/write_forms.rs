//! No write silently misses a cold row, whatever form it takes (DESIGN §2.4, §7.1): every
//! statement form an application, ORM or tracing tool emits — comments before, inside and
//! after, odd case and spacing, EXPLAIN ANALYZE, SQL-level PREPARE/EXECUTE, RETURNING,
//! MERGE, upserts, writable CTEs, and writes that run inside Postgres (functions,
//! procedures, DO, views, triggers and rules of other tables) — is run on a cold row of a
//! tiered table and on a plain control table, in both protocols, in autocommit and in a
//! transaction block. The outcome (rows, row counts, SQLSTATE) and the rows touched are
//! the control's, or the tiered side is refused with CW001 and nothing changed. Which of
//! the two is fixed per form: coldwire plans what it can see and refuses the rest.

mod common;

use common::{admin_call, binary_rows, cluster, connect_direct, create_db, Proxy, RawValue};
use futures_util::{pin_mut, TryStreamExt};
use tokio_postgres::SimpleQueryMessage;

/// Two plain copies of one table (`events` is tiered), with functions, a procedure, an
/// updatable view, a trigger and a rule of other tables that write each of them.
const SETUP: &str = "CREATE TABLE events(id bigint PRIMARY KEY, kind text NOT NULL, n int);
     CREATE TABLE control(LIKE events INCLUDING ALL);
     INSERT INTO events SELECT g, 'k' || g % 4, g FROM generate_series(1, 3000) g;
     INSERT INTO control SELECT * FROM events;";

/// Per table `{t}`: objects that write it from inside Postgres.
const INSIDE: &str = "CREATE FUNCTION set_kind_{t}(k bigint, v text) RETURNS bigint LANGUAGE sql AS $$ UPDATE {t} SET kind = v WHERE id = k RETURNING id $$;
     CREATE FUNCTION del_{t}(k bigint) RETURNS void LANGUAGE plpgsql AS $$ BEGIN DELETE FROM {t} WHERE id = k; END $$;
     CREATE PROCEDURE bump_{t}(k bigint) LANGUAGE sql AS $$ UPDATE {t} SET n = n + 1 WHERE id = k $$;
     CREATE VIEW v_{t} AS SELECT * FROM {t};
     CREATE TABLE log_{t}(k bigint);
     CREATE FUNCTION log_trg_{t}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN UPDATE {t} SET kind = 'touched' WHERE id = NEW.k; RETURN NEW; END $$;
     CREATE TRIGGER log_{t} AFTER INSERT ON log_{t} FOR EACH ROW EXECUTE FUNCTION log_trg_{t}();
     CREATE TABLE r_{t}(k bigint);
     CREATE RULE r_{t} AS ON INSERT TO r_{t} DO ALSO DELETE FROM {t} WHERE id = NEW.k;";

/// What coldwire must do with a form on a cold row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Planned: the outcome and rows equal the control's.
    Planned,
    /// Refused with CW001 (or, for a call of a function whose body names the table, by
    /// coldwire with 0A000), nothing changed.
    Refused,
}

/// The forms: statements run in order, with `{t}` the table, `{k}` and `{k1}` two cold
/// keys of their own, `{r}` a name suffix of the run; `explain`: the outcome's rows are
/// plans, so only success or SQLSTATE is compared.
const FORMS: &[(&[&str], Expect, bool)] = &[
    (&["/* app:checkout */ UPDATE {t} SET kind = 'c' WHERE id = {k}"], Expect::Planned, false),
    (&["-- trace\nDELETE FROM {t} WHERE id = {k}"], Expect::Planned, false),
    (&["/* merge */ MERGE INTO {t} t USING (VALUES ({k}::bigint, 'm')) s(id, kind) ON t.id = s.id WHEN MATCHED THEN UPDATE SET kind = s.kind WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.kind, 0)"], Expect::Planned, false),
    (&["  \n\t/* a */ -- b\n  uPdAtE   {t}\n SET n = n + 1 /* mid */ WHERE id = {k} RETURNING id, n -- tail"], Expect::Planned, false),
    (&["/* c */ INSERT INTO {t} VALUES ({k}, 'up', 1) ON CONFLICT (id) DO UPDATE SET kind = excluded.kind RETURNING id, kind"], Expect::Planned, false),
    (&["/* c */ insert into {t} values ({k}, 'dup', 1)"], Expect::Planned, false),
    (&["/* c */ WITH d AS (DELETE FROM {t} WHERE id = {k} RETURNING *) SELECT count(*) FROM d"], Expect::Planned, false),
    (&["/* c */ SELECT id, kind FROM {t} WHERE id = {k} FOR UPDATE"], Expect::Planned, false),
    (&["/* c */ DELETE FROM {t} WHERE id IN (SELECT {k} UNION SELECT {k1}) RETURNING id"], Expect::Planned, false),
    (&["EXPLAIN (ANALYZE, COSTS off, TIMING off, SUMMARY off) UPDATE {t} SET kind = 'e' WHERE id = {k}"], Expect::Planned, true),
    (&["/* x */ explain analyze DELETE FROM {t} WHERE id = {k}"], Expect::Planned, true),
    (&["EXPLAIN UPDATE {t} SET kind = 'plan only' WHERE id = {k}"], Expect::Planned, true),
    (&["PREPARE p_{t}_{r}(text, bigint) AS UPDATE {t} SET kind = $1 WHERE id = $2", "/* go */ EXECUTE p_{t}_{r}('prep', {k})", "DEALLOCATE p_{t}_{r}"], Expect::Planned, false),
    (&["/* c */ PREPARE d_{t}_{r} AS DELETE FROM {t} WHERE id = $1 RETURNING id", "execute D_{t}_{r} ({k})", "EXECUTE d_{t}_{r}({k1})"], Expect::Planned, false),
    (&["/* a */ UPDATE {t} SET n = -1 WHERE id = {k}; /* b */ DELETE FROM {t} WHERE id = {k1}"], Expect::Planned, false),
    (&["SELECT set_kind_{t}({k}, 'fn')"], Expect::Refused, false),
    (&["/* c */ SELECT del_{t}({k})"], Expect::Refused, false),
    (&["CALL bump_{t}({k})"], Expect::Refused, false),
    (&["DO $$ BEGIN UPDATE {t} SET kind = 'do' WHERE id = {k}; END $$"], Expect::Refused, false),
    (&["UPDATE v_{t} SET kind = 'view' WHERE id = {k}"], Expect::Refused, false),
    (&["DELETE FROM v_{t} WHERE id = {k}"], Expect::Refused, false),
    (&["INSERT INTO log_{t} VALUES ({k})"], Expect::Refused, false),
    (&["INSERT INTO r_{t} VALUES ({k})"], Expect::Refused, false),
    (&["PREPARE f_{t}_{r} AS SELECT set_kind_{t}($1, 'fn')", "EXECUTE f_{t}_{r}({k})"], Expect::Refused, false),
];

/// How a form is sent.
#[derive(Debug, Clone, Copy)]
enum Variant {
    Simple,
    SimpleInBlock,
    Extended,
    /// The extended protocol with the first key as parameter `$1`.
    ExtendedParam,
}

/// What one statement answered: rows and row counts, or the SQLSTATE.
type Outcome = Result<Vec<String>, String>;

async fn simple(c: &tokio_postgres::Client, sql: &str) -> Outcome {
    match c.simple_query(sql).await {
        Ok(msgs) => Ok(msgs
            .into_iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => Some(format!(
                    "row {:?}",
                    (0..r.len())
                        .map(|i| r.get(i).map(str::to_owned))
                        .collect::<Vec<_>>()
                )),
                SimpleQueryMessage::CommandComplete(n) => Some(format!("complete {n}")),
                _ => None,
            })
            .collect()),
        Err(e) => Err(code(&e, sql)),
    }
}

async fn extended(c: &tokio_postgres::Client, sql: &str, params: &[i64]) -> Outcome {
    let run = async {
        let stream = c.query_raw(sql, params.iter()).await?;
        pin_mut!(stream);
        let mut out = Vec::new();
        while let Some(row) = stream.try_next().await? {
            let values: Vec<RawValue> = (0..row.len()).map(|i| row.get(i)).collect();
            out.push(format!("row {values:?}"));
        }
        out.push(format!("complete {:?}", stream.rows_affected()));
        Ok::<_, tokio_postgres::Error>(out)
    };
    run.await.map_err(|e| code(&e, sql))
}

fn code(e: &tokio_postgres::Error, sql: &str) -> String {
    e.as_db_error()
        .unwrap_or_else(|| panic!("{sql}: {e:?}"))
        .code()
        .code()
        .to_owned()
}

/// The form's statements on `t` with keys `k`, `k1`, as `variant` sends them.
async fn run(
    c: &tokio_postgres::Client,
    form: &[&str],
    variant: Variant,
    t: &str,
    (k, k1, r): (i64, i64, usize),
    explain: bool,
) -> Vec<Outcome> {
    let mut out = Vec::new();
    if matches!(variant, Variant::SimpleInBlock) {
        out.push(simple(c, "BEGIN").await);
    }
    for sql in form {
        let text = sql
            .replace("{t}", t)
            .replace("{k1}", &k1.to_string())
            .replace("{r}", &r.to_string());
        let answer = match variant {
            Variant::Simple | Variant::SimpleInBlock => {
                simple(c, &text.replace("{k}", &k.to_string())).await
            }
            Variant::Extended => extended(c, &text.replace("{k}", &k.to_string()), &[]).await,
            // Where Postgres takes a parameter (not in a DO body, nor as an argument of
            // EXECUTE, whose Parse describes none).
            Variant::ExtendedParam
                if text.contains("{k}")
                    && !text.contains("$$")
                    && !text.to_lowercase().contains("execute") =>
            {
                extended(c, &text.replace("{k}", "$1::int8"), &[k]).await
            }
            Variant::ExtendedParam => extended(c, &text.replace("{k}", &k.to_string()), &[]).await,
        };
        out.push(match answer {
            Ok(_) if explain => Ok(vec!["explained".into()]),
            other => other,
        });
    }
    if matches!(variant, Variant::SimpleInBlock) {
        out.push(simple(c, "COMMIT").await);
    }
    out
}

/// The rows of keys `keys` of `t`, read through `c`, byte for byte.
async fn rows(c: &tokio_postgres::Client, t: &str, keys: &[i64]) -> Vec<Vec<RawValue>> {
    binary_rows(
        c,
        &format!("SELECT * FROM {t} WHERE id = ANY($1) ORDER BY id"),
        &[&keys],
    )
    .await
    .unwrap()
}

/// A test's database with [`SETUP`] and `extra` applied, a proxy in front of it with a
/// cold store of its own, and `events` tiered and flushed down to 100 hot rows (ids
/// 2901..=3000): the proxy, a client through it, a direct client, the database's name and
/// the store's folder (removed when the test ends).
struct Tiered {
    proxy: Proxy,
    c: tokio_postgres::Client,
    direct: tokio_postgres::Client,
    db: String,
    _dir: tempfile::TempDir,
}

async fn tiered(hint: &str, extra: &str) -> Tiered {
    let db = create_db(hint);
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let direct = connect_direct(&db).await;
    direct.batch_execute(SETUP).await.unwrap();
    direct.batch_execute(extra).await.unwrap();
    let url = cluster().url(&db);
    let proxy = Proxy::start(&["--service-url", &url, "--cold-store", &store]).await;
    let c = proxy.connect(&db).await;
    admin_call(&c, r#"SELECT coldwire.tier_table('events', '{"hot_row_limit": 100, "min_flush_rows": 100, "auto_flush": false}')"#)
        .await
        .unwrap();
    admin_call(&c, "SELECT coldwire.flush_table('events', wait => true)")
        .await
        .unwrap();
    Tiered {
        proxy,
        c,
        direct,
        db,
        _dir: dir,
    }
}

#[tokio::test]
async fn every_write_form_is_planned_or_refused_never_missed() {
    let inside: String = ["events", "control"]
        .iter()
        .map(|t| INSIDE.replace("{t}", t))
        .collect();
    let Tiered {
        proxy,
        c,
        direct,
        db,
        _dir,
    } = tiered("write_forms", &inside).await;
    let control = proxy.connect(&db).await;
    let hot: i64 = direct
        .query_one("SELECT max(id) FILTER (WHERE id < 2900) FROM events", &[])
        .await
        .unwrap()
        .get::<_, Option<i64>>(0)
        .unwrap_or(0);
    assert_eq!(hot, 0, "the keys the forms use are cold");

    let variants = [
        Variant::Simple,
        Variant::SimpleInBlock,
        Variant::Extended,
        Variant::ExtendedParam,
    ];
    let mut refused_keys = Vec::new();
    let mut run_index = 0;
    let (mut planned, mut refused) = (0, 0);
    for (form, expect, explain) in FORMS {
        for variant in variants {
            run_index += 1;
            let (k, k1) = (10 + 3 * run_index as i64, 11 + 3 * run_index as i64);
            let keys = [k, k1];
            let before = rows(&c, "events", &keys).await;
            assert_eq!(before, rows(&control, "control", &keys).await);
            let got = run(&c, form, variant, "events", (k, k1, run_index), *explain).await;
            let want = run(
                &control,
                form,
                variant,
                "control",
                (k, k1, run_index),
                *explain,
            )
            .await;
            let after = rows(&c, "events", &keys).await;
            let context = format!("{form:?} {variant:?}: tiered {got:?}, control {want:?}");
            match expect {
                Expect::Planned => {
                    assert_eq!(got, want, "{context}");
                    assert_eq!(after, rows(&control, "control", &keys).await, "{context}");
                    planned += 1;
                }
                Expect::Refused => {
                    // By the capture (CW001), or by coldwire at the call of a function
                    // whose body names the table (0A000, before anything runs).
                    assert!(
                        got.iter().any(|o| o
                            .as_ref()
                            .err()
                            .is_some_and(|c| c == "CW001" || c == "0A000")),
                        "{context}"
                    );
                    assert_ne!(got, want, "{context}");
                    assert_eq!(after, before, "nothing changed: {context}");
                    refused_keys.extend(keys);
                    refused += 1;
                }
            }
        }
    }
    assert_eq!(planned + refused, FORMS.len() * variants.len());

    // Every other row is the control's, before and after the changed rows go cold.
    let all = "SELECT * FROM {t} WHERE id <> ALL($1) ORDER BY id";
    let expected = binary_rows(&control, &all.replace("{t}", "control"), &[&refused_keys])
        .await
        .unwrap();
    assert_eq!(
        binary_rows(&c, &all.replace("{t}", "events"), &[&refused_keys])
            .await
            .unwrap(),
        expected
    );
    admin_call(
        &c,
        "SELECT coldwire.flush_table('events', wait => true, drain => true)",
    )
    .await
    .unwrap();
    assert_eq!(
        binary_rows(&c, &all.replace("{t}", "events"), &[&refused_keys])
            .await
            .unwrap(),
        expected
    );
}

#[tokio::test]
async fn direct_writes_are_refused_unless_hot_only_on_purpose() {
    let Tiered {
        proxy: _proxy,
        c,
        direct,
        _dir,
        ..
    } = tiered("write_forms_direct", "").await;

    // A cold row and a hot one: both refused on a direct connection, with the table
    // named and a hint, and nothing changes.
    for sql in [
        "UPDATE events SET kind = 'direct' WHERE id = 5",
        "DELETE FROM events WHERE id = 2999",
        "/* c */ DELETE FROM events WHERE id = 6",
        "INSERT INTO events VALUES (2998, 'x', 0) ON CONFLICT (id) DO UPDATE SET kind = 'direct'",
    ] {
        let e = direct.batch_execute(sql).await.unwrap_err();
        let db = e.as_db_error().unwrap();
        assert_eq!(db.code().code(), "CW001", "{sql}");
        assert!(db.message().contains("public.events"), "{}", db.message());
        assert!(db.hint().unwrap().contains("coldwire.hot_only_writes"));
    }
    let rows = |sql: &'static str| {
        let c = &c;
        async move { common::simple_rows(c, sql).await.unwrap() }
    };
    assert_eq!(
        rows("SELECT kind FROM events WHERE id IN (5, 6, 2998, 2999) ORDER BY id").await,
        vec![
            vec![Some("k1".to_owned())],
            vec![Some("k2".to_owned())],
            vec![Some("k2".to_owned())],
            vec![Some("k3".to_owned())]
        ]
    );

    // On purpose: hot rows only, as the docs say (the cold row is not reached).
    direct
        .batch_execute("SET coldwire.hot_only_writes = on")
        .await
        .unwrap();
    assert_eq!(
        direct
            .execute(
                "UPDATE events SET kind = 'direct' WHERE id IN (5, 2999)",
                &[]
            )
            .await
            .unwrap(),
        1
    );
    direct
        .batch_execute("RESET coldwire.hot_only_writes")
        .await
        .unwrap();
    assert_eq!(
        rows("SELECT id, kind FROM events WHERE id IN (5, 2999) ORDER BY id").await,
        vec![
            vec![Some("5".to_owned()), Some("k1".to_owned())],
            vec![Some("2999".to_owned()), Some("direct".to_owned())]
        ]
    );
    // The opt-in is the session's: through coldwire, writes still reach cold rows.
    assert_eq!(
        c.execute("UPDATE events SET kind = 'through' WHERE id = 5", &[])
            .await
            .unwrap(),
        1
    );
    let e = direct
        .batch_execute("UPDATE events SET kind = 'direct' WHERE id = 5")
        .await
        .unwrap_err();
    assert_eq!(e.as_db_error().unwrap().code().code(), "CW001");
}

#[tokio::test]
async fn comments_hide_no_ddl_and_no_copy() {
    let Tiered {
        proxy, c, db, _dir, ..
    } = tiered("write_forms_ddl", "").await;

    // DDL the cold tier cannot follow is refused before it runs, whatever comes first.
    for sql in [
        "/* migration 42 */ ALTER TABLE events ALTER COLUMN n TYPE bigint",
        "-- flyway\nalter table events drop column n",
        "SELECT 1; /* then */ ALTER TABLE events RENAME COLUMN n TO m",
    ] {
        let e = c.batch_execute(sql).await.unwrap_err();
        assert_eq!(e.as_db_error().unwrap().code().code(), "0A000", "{sql}");
    }
    // A COPY of the table into a server-side file would see hot rows only.
    let e = c
        .batch_execute("/* export */ COPY events TO '/tmp/coldwire-never-written.csv'")
        .await
        .unwrap_err();
    assert_eq!(e.as_db_error().unwrap().code().code(), "0A000");
    // COPY … TO STDOUT behind a comment is served with every row.
    let psql = std::process::Command::new(common::pg_bin("psql"))
        .args([
            "-X",
            "-q",
            "-h",
            "127.0.0.1",
            "-p",
            &proxy.addr.port().to_string(),
        ])
        .args(["-U", "postgres", "-d", &db])
        .args(["-c", "/* export */ -- nightly\n COPY events TO STDOUT"])
        .output()
        .unwrap();
    assert!(
        psql.status.success(),
        "{}",
        String::from_utf8_lossy(&psql.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&psql.stdout).lines().count(), 3000);
    assert_eq!(
        common::simple_rows(&c, "SELECT count(*) FROM events")
            .await
            .unwrap(),
        vec![vec![Some("3000".to_owned())]]
    );
}

#[tokio::test]
async fn sessions_in_other_encodings_are_planned_or_refused_never_dropped() {
    use common::raw::{frame, query, sync, RawConn};
    use std::os::unix::ffi::OsStrExt;
    let Tiered {
        proxy, c, db, _dir, ..
    } = tiered("write_forms_latin1", "").await;
    let kind = |id: i64| {
        let c = &c;
        async move {
            common::simple_rows(c, &format!("SELECT kind FROM events WHERE id = {id}"))
                .await
                .unwrap()
        }
    };
    let latin1_psql = |sql: &[u8]| {
        std::process::Command::new(common::pg_bin("psql"))
            .env("PGCLIENTENCODING", "LATIN1")
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1"])
            .args([
                "-p",
                &proxy.addr.port().to_string(),
                "-U",
                "postgres",
                "-d",
                &db,
                "-c",
            ])
            .arg(std::ffi::OsStr::from_bytes(sql))
            .output()
            .unwrap()
    };
    // ASCII text from a LATIN1 session is planned and marked as from any other: a hot
    // row is written, a cold one refused (cold rows go to UTF-8 sessions only).
    let out = latin1_psql(b"/* latin1 */ UPDATE events SET kind = 'ascii' WHERE id = 2999");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(kind(2999).await, vec![vec![Some("ascii".to_owned())]]);
    // LATIN1 bytes that happen to be valid UTF-8 are planned, and marked as the server
    // reads them (it hashes the text coldwire sends it, converted like the statement).
    let out = latin1_psql(b"UPDATE events SET kind = '\xc3\xa9' WHERE id = 2997");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(kind(2997).await, vec![vec![Some("Ã©".to_owned())]]);
    let out = latin1_psql(b"/* latin1 */ UPDATE events SET kind = 'ascii' WHERE id = 7");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("client_encoding UTF8"));
    assert_eq!(kind(7).await, vec![vec![Some("k3".to_owned())]]);
    // Text coldwire cannot read as UTF-8 is refused with a hint when it may name a
    // tiered table (it cannot be planned), and nothing changes.
    let out = latin1_psql(b"/* caf\xe9 */ UPDATE events SET kind = 'caf\xe9' WHERE id = 2998");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("UTF-8") && stderr.contains("client_encoding"),
        "{stderr}"
    );
    assert_eq!(kind(2998).await, vec![vec![Some("k2".to_owned())]]);
    // ... also in the extended protocol, where the session carries on.
    let mut raw = RawConn::ready(proxy.addr, &db).await;
    raw.send(&query("SET client_encoding = 'LATIN1'")).await;
    raw.until_ready().await;
    // Parse, Bind and Execute of the unnamed statement `sql` (raw bytes), then Sync.
    let unnamed = |sql: &[u8]| {
        let mut parse = vec![0];
        parse.extend_from_slice(sql);
        parse.extend_from_slice(b"\0\0\0");
        let mut bytes = frame(b'P', &parse);
        bytes.extend(frame(b'B', b"\0\0\0\0\0\0\0\0"));
        bytes.extend(frame(b'E', b"\0\0\0\0\0"));
        bytes.extend(sync());
        bytes
    };
    raw.send(&unnamed(
        b"UPDATE events SET kind = 'caf\xe9' WHERE id = 2998",
    ))
    .await;
    let msgs = raw.until_ready().await;
    let error = msgs.iter().find(|m| m.tag == b'E').expect("an error");
    assert_eq!(error.field(b'C').as_deref(), Some("0A000"));
    // Text that names no tiered table is relayed as it is, in both protocols.
    raw.send(&unnamed(b"SELECT 'caf\xe9' AS w")).await;
    let msgs = raw.until_ready().await;
    let row = msgs.iter().find(|m| m.tag == b'D').expect("a row");
    assert!(row.body.ends_with(b"caf\xe9"), "{:?}", row.body);
    raw.send(&query("SELECT 1")).await;
    assert!(raw.until_ready().await.iter().any(|m| m.tag == b'D'));
    assert_eq!(kind(2998).await, vec![vec![Some("k2".to_owned())]]);
}

#[tokio::test]
async fn sql_prepare_of_a_read_of_a_tiered_table_is_refused_clearly() {
    let Tiered {
        c,
        _dir,
        proxy: _proxy,
        ..
    } = tiered("write_forms_prepare_read", "").await;
    for sql in [
        "PREPARE r(bigint) AS SELECT count(*) FROM events WHERE id <= $1",
        "/* c */ prepare r2 AS SELECT * FROM events",
        "SELECT 1; PREPARE r3 AS SELECT count(*) FROM events",
    ] {
        let e = c.batch_execute(sql).await.unwrap_err();
        let db = e.as_db_error().unwrap();
        assert_eq!(db.code().code(), "0A000", "{sql}: {db:?}");
        assert!(db.message().contains("PREPARE"), "{}", db.message());
    }
    // A PREPARE of a read of plain tables is Postgres's business.
    c.batch_execute("PREPARE plain AS SELECT 1; EXECUTE plain")
        .await
        .unwrap();
}

/// A Query coldwire refuses inside a transaction block fails the block as any error does:
/// Postgres raises the refusal in its place, so a COMMIT then rolls back what the block
/// wrote, and a block that failed already answers 25P02. Outside a block the refusal is
/// answered as before.
#[tokio::test]
async fn a_refused_query_in_a_transaction_block_fails_the_block() {
    let Tiered {
        c,
        direct,
        _dir,
        proxy: _proxy,
        ..
    } = tiered("write_forms_refused_in_block", "CREATE TABLE notes(n int);").await;
    let refused = "PREPARE r AS SELECT count(*) FROM events";
    let code = |e: &tokio_postgres::Error| e.code().map(|c| c.code().to_owned());
    c.batch_execute("BEGIN; INSERT INTO notes VALUES (1)")
        .await
        .unwrap();
    let e = c.simple_query(refused).await.unwrap_err();
    let db = e.as_db_error().unwrap();
    assert_eq!(db.code().code(), "0A000", "{db:?}");
    assert!(db.message().contains("PREPARE"), "{db:?}");
    // The block failed: its next statement is refused by Postgres, and COMMIT rolls back.
    let e = c.simple_query("SELECT 1").await.unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("25P02"), "{e:?}");
    let e = c.simple_query(refused).await.unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("25P02"), "{e:?}");
    let done = c.simple_query("COMMIT").await.unwrap();
    assert!(
        done.iter()
            .any(|m| matches!(m, tokio_postgres::SimpleQueryMessage::CommandComplete(_))),
        "{done:?}"
    );
    let kept: i64 = direct
        .query_one("SELECT count(*) FROM notes", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, 0, "the failed block's insert was rolled back");
    // Outside a block: the refusal, and the session goes on.
    let e = c.simple_query(refused).await.unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("0A000"), "{e:?}");
    c.batch_execute("INSERT INTO notes VALUES (2)")
        .await
        .unwrap();
    let kept: i64 = direct
        .query_one("SELECT count(*) FROM notes", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, 1);
}

/// With standard_conforming_strings off, Postgres reads a backslash in a string as an
/// escape and coldwire's parser does not, so where a string ends can differ: a statement
/// naming a tiered table that holds a backslash is refused, not planned on a misreading.
/// Without a backslash, or with the setting on, statements are served as always.
#[tokio::test]
async fn backslashes_are_refused_when_strings_do_not_conform() {
    let Tiered {
        proxy, db, _dir, ..
    } = tiered("write_forms_scs", "").await;
    let c = proxy.connect(&db).await;
    c.batch_execute("SET standard_conforming_strings = off")
        .await
        .unwrap();
    for sql in [
        r"UPDATE events SET kind = 'a\'b' WHERE id = 7",
        // Postgres reads one string where a parser with conforming strings reads a
        // string, a read of events and a comment.
        r"SELECT 'x\', (SELECT count(*) FROM events) --'",
    ] {
        let err = c.simple_query(sql).await.unwrap_err();
        let db_err = err
            .as_db_error()
            .unwrap_or_else(|| panic!("{sql}: {err:?}"));
        assert_eq!(db_err.code().code(), "0A000", "{sql}: {db_err:?}");
        assert!(
            db_err
                .hint()
                .unwrap_or_default()
                .contains("standard_conforming_strings = on"),
            "{db_err:?}"
        );
    }
    let rows = common::simple_rows(&c, "SELECT count(*), max(kind) FROM events WHERE id <= 7")
        .await
        .unwrap();
    assert_eq!(
        rows,
        [[Some("7".to_owned()), Some("k3".to_owned())]],
        "without a backslash, served"
    );
    let rows = common::simple_rows(&c, "SELECT kind FROM events WHERE id = 7")
        .await
        .unwrap();
    assert_eq!(
        rows,
        [[Some("k3".to_owned())]],
        "the refused UPDATE changed nothing"
    );
    // A backslash in a statement that names no tiered table is Postgres's, also once the
    // list of tiered tables is older than its time to live.
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    c.batch_execute(r"INSERT INTO control (id, kind, n) VALUES (9999, 'C:\x', 0)")
        .await
        .unwrap();
    // A SET sent ahead in the same pipeline, before Postgres reported it: the statement
    // after it is planned once it is answered, and refused.
    let mut raw = common::raw::RawConn::ready(proxy.addr, &db).await;
    let mut both = common::raw::query("SET standard_conforming_strings = off");
    both.extend(common::raw::query(
        r"SELECT 'x\', (SELECT count(*) FROM events) --'",
    ));
    raw.send(&both).await;
    let set = common::raw::tags(&raw.until_ready().await);
    assert!(set.starts_with('C') && set.ends_with('Z'), "{set}");
    let refused = raw.until_ready().await;
    assert_eq!(common::raw::tags(&refused), "EZ");
    assert_eq!(refused[0].field(b'C').as_deref(), Some("0A000"));
    // ... and in the same Query string as the SET, which then does not run.
    let on = proxy.connect(&db).await;
    let err = on
        .simple_query(r"SET standard_conforming_strings = off; SELECT 'x\', ' FROM events --', 1")
        .await
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("0A000"), "{err:?}");
    c.batch_execute("SET standard_conforming_strings = on")
        .await
        .unwrap();
    c.batch_execute(r"UPDATE events SET kind = 'a\b' WHERE id = 7")
        .await
        .unwrap();
    let rows = common::simple_rows(&c, "SELECT kind FROM events WHERE id = 7")
        .await
        .unwrap();
    assert_eq!(rows, [[Some(r"a\b".to_owned())]]);
}
