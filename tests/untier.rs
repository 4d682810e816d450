//! `coldwire.untier_table` brings every live cold row back into the heap and leaves no
//! coldwire object behind; `coldwire.explain` shows the rewrite and what the cold scan
//! keeps and prunes.

mod common;

use common::{admin_call, binary_rows, cluster, connect_direct, create_db, simple_rows, Proxy};

#[tokio::test]
async fn untier_restores_the_plain_table_and_removes_every_coldwire_object() {
    let db = create_db("untier");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(
            "CREATE TABLE t(id bigint PRIMARY KEY, v text, n numeric, at timestamptz, tags int[]);
             CREATE TABLE control(LIKE t INCLUDING ALL);
             INSERT INTO t SELECT g, 'v' || g, g / 3.0, '2026-01-01'::timestamptz + g * interval '1 day', ARRAY[g] FROM generate_series(1, 3000) g;
             INSERT INTO control SELECT * FROM t;
             CREATE ROLE untier_stranger LOGIN;",
        )
        .await
        .unwrap();
    let proxy = Proxy::start(&["--service-url", &cluster().url(&db), "--cold-store", &store]).await;
    let c = proxy.connect(&db).await;
    let tiered = admin_call(&c, r#"SELECT coldwire.tier_table('t', '{"hot_row_limit": 300, "min_flush_rows": 100, "max_rows_per_file": 700, "auto_flush": false}')"#)
        .await
        .unwrap();
    let id = tiered["id"].as_i64().unwrap();
    let flush = |drain: bool| common::flush_t(&c, drain);
    flush(false).await;
    // New versions of cold keys (written while the old ones are cold), then flushed: the
    // overrides must pick them.
    for sql in [
        "DELETE FROM {t} WHERE id BETWEEN 10 AND 20",
        "INSERT INTO {t} SELECT g, 'again', -1, '2030-01-01', NULL FROM generate_series(10, 20) g",
        "UPDATE {t} SET v = 'hot' WHERE id > 2900",
    ] {
        // On the tiered table the DELETE reaches only hot rows (writes to cold rows come
        // later); keys 10..20 are cold, so only the INSERT takes effect there, as its
        // effect on the control table (delete then insert) is the same.
        c.batch_execute(&sql.replace("{t}", "t")).await.unwrap();
        direct
            .batch_execute(&sql.replace("{t}", "control"))
            .await
            .unwrap();
    }
    // Key 15's new version is hot: deleting it leaves a tombstone over its old cold one.
    c.batch_execute("DELETE FROM t WHERE id = 15")
        .await
        .unwrap();
    direct
        .batch_execute("DELETE FROM control WHERE id = 15")
        .await
        .unwrap();
    flush(true).await;
    let overrides: i64 = direct
        .query_one(
            &format!("SELECT count(*) FROM coldwire.overrides_{id}"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(overrides >= 11, "{overrides} overrides");
    let hot: i64 = direct
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(hot, 0, "all cold before untier");

    // explain: the rewrite and the scan's pruning.
    let explain = simple_rows(
        &c,
        "SELECT coldwire.explain('SELECT * FROM t WHERE id = 2000')",
    )
    .await
    .unwrap();
    let text = explain[0][0].clone().unwrap();
    assert!(text.contains("unnest($1::"), "{text}");
    assert!(
        text.contains("Conditions: id = 2000 (1 used for pruning)"),
        "{text}"
    );
    assert!(text.contains("Cold rows: 1 injected"), "{text}");
    assert!(text.contains("pruned of"), "{text}");
    let plain = simple_rows(&c, "SELECT coldwire.explain('SELECT 1')")
        .await
        .unwrap();
    assert!(plain[0][0]
        .as_deref()
        .unwrap()
        .contains("relayed unchanged"));
    let typed = c
        .query("SELECT coldwire.explain($1)", &[&"SELECT count(*) FROM t"])
        .await
        .unwrap();
    assert!(typed[0].get::<_, String>(0).contains("Segments:"));

    // Only the owner (or coldwire_admin) may untier.
    let stranger = common::connect_url(&proxy.url("untier_stranger", &db)).await;
    let err = admin_call(&stranger, "SELECT coldwire.untier_table('t')")
        .await
        .unwrap_err();
    assert_eq!(err.as_db_error().map(|e| e.code().code()), Some("42501"));

    let result = admin_call(&c, "SELECT coldwire.untier_table('t')")
        .await
        .unwrap();
    assert_eq!(result["rows_rehydrated"], 2999, "{result}");
    assert!(result["objects_deleted"].as_u64().unwrap() >= 2, "{result}");

    // The plain table, identical to the control, directly and through coldwire.
    let expected = binary_rows(&direct, "SELECT * FROM control ORDER BY id", &[])
        .await
        .unwrap();
    assert_eq!(
        binary_rows(&direct, "SELECT * FROM t ORDER BY id", &[])
            .await
            .unwrap(),
        expected
    );
    assert_eq!(
        binary_rows(&c, "SELECT * FROM t ORDER BY id", &[])
            .await
            .unwrap(),
        expected
    );
    // No coldwire object left: triggers, mirror, overrides, catalog rows, cold objects.
    let leftovers: Vec<i64> = direct
        .query_one(
            &format!(
                "SELECT (SELECT count(*) FROM pg_trigger WHERE tgrelid = 't'::regclass),
                        (SELECT count(*) FROM pg_class WHERE relnamespace = 'coldwire'::regnamespace AND relname IN ('m_{id}', 'overrides_{id}')),
                        (SELECT count(*) FROM coldwire.tables WHERE id = {id}),
                        (SELECT count(*) FROM coldwire.segments WHERE table_id = {id})"
            ),
            &[],
        )
        .await
        .map(|r| (0..4).map(|i| r.get(i)).collect())
        .unwrap();
    assert_eq!(leftovers, [0, 0, 0, 0]);
    let files = walk(dir.path());
    assert!(files.is_empty(), "objects left: {files:?}");
    // Plain writes and a second tiering work.
    c.batch_execute("INSERT INTO t VALUES (9999, 'plain', 0, now(), NULL)")
        .await
        .unwrap();
    let again = admin_call(&c, "SELECT coldwire.untier_table('t')")
        .await
        .unwrap_err();
    assert!(
        again
            .as_db_error()
            .unwrap()
            .message()
            .contains("not tiered"),
        "{again:?}"
    );
    admin_call(&c, "SELECT coldwire.tier_table('t')")
        .await
        .unwrap();
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}
