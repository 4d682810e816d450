//! The differential read suite: the same history of writes and flushes applied to a
//! tiered table through coldwire and to a plain control table directly; then a seeded
//! generator of queries (point lookups, ranges, IN lists, IS NULL, joins with a plain
//! table and with itself, aggregates with GROUP BY/HAVING, DISTINCT, ORDER BY with
//! LIMIT/OFFSET, window functions, subqueries, CTEs, set operations, EXISTS) runs against
//! both, and every result must be identical. Each query runs three ways: the simple
//! protocol with its constants inline (text results); the extended protocol with the
//! constants as typed parameters (tokio-postgres, binary results compared byte for
//! byte); and, for every third query, the extended protocol over a raw connection with
//! text parameters and text results.

mod common;

use common::disguise::Disguise;
use common::raw::{self, RawConn};
use common::{
    admin_call, binary_rows, cluster, connect_direct, create_db, simple_rows, Decimal, Proxy,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_postgres::types::ToSql;

/// Queries in CI; `COLDWIRE_DIFFERENTIAL_QUERIES` asks for more.
const DEFAULT_QUERIES: usize = 1500;
const SEED: u64 = 0x636f_6c64;
const ROWS: i64 = 5000;

/// A constant of a generated query: written inline, or bound as parameter `$n`.
#[derive(Debug, Clone)]
enum Value {
    Int8(i64),
    Int4(i32),
    Float8(f64),
    Numeric(Decimal),
}

impl Value {
    fn text(&self) -> String {
        match self {
            Value::Int8(v) => v.to_string(),
            Value::Int4(v) => v.to_string(),
            Value::Float8(v) => v.to_string(),
            Value::Numeric(Decimal(v)) => v.clone(),
        }
    }
    fn param(&self) -> &(dyn ToSql + Sync) {
        match self {
            Value::Int8(v) => v,
            Value::Int4(v) => v,
            Value::Float8(v) => v,
            Value::Numeric(v) => v,
        }
    }
}

/// A generated query over table `{t}`: its text with the constants inline, its text with
/// them as parameters, and the values.
struct Generated {
    inline: String,
    parameterized: String,
    values: Vec<Value>,
}

/// Builds both texts of a query from pieces and constants.
#[derive(Default)]
struct Builder {
    inline: String,
    parameterized: String,
    values: Vec<Value>,
}

impl Builder {
    fn sql(mut self, text: &str) -> Self {
        self.inline.push_str(text);
        self.parameterized.push_str(text);
        self
    }
    fn v(mut self, value: Value) -> Self {
        self.inline.push_str(&value.text());
        self.values.push(value);
        self.parameterized
            .push_str(&format!("${}", self.values.len()));
        self
    }
    fn done(self) -> Generated {
        Generated {
            inline: self.inline,
            parameterized: self.parameterized,
            values: self.values,
        }
    }
}

/// One query, with constants drawn from `rng`.
fn query(rng: &mut StdRng) -> Generated {
    use Value::{Float8, Int4, Int8, Numeric};
    // A numeric(10, 2) constant, often between two values of the column's scale.
    let n = |rng: &mut StdRng| {
        let thousandths = rng.random_range(-2_000..1_800_000);
        let sign = if thousandths < 0 { "-" } else { "" };
        let t: i64 = i64::abs(thousandths);
        Numeric(Decimal(format!("{sign}{}.{:03}", t / 1000, t % 1000)))
    };
    let k = |rng: &mut StdRng| rng.random_range(-10..ROWS + 60);
    let (k1, k2, k3) = (k(rng), k(rng), k(rng));
    let (lo, hi) = (k1.min(k2), k1.max(k2));
    let v = rng.random_range(0..50);
    let b = Builder::default();
    match rng.random_range(0..33) {
        // The TABLE command, alone and as a subquery.
        31 => b
            .sql("TABLE {t} ORDER BY id LIMIT 10 OFFSET ")
            .v(Int8(rng.random_range(0..ROWS))),
        32 => b
            .sql("SELECT count(*), sum(a), max(b) FROM (TABLE {t}) s WHERE id > ")
            .v(Int8(lo)),
        // numeric(10, 2) conditions, evaluated cold-side at the column's scale.
        27 => b
            .sql("SELECT id, c FROM {t} WHERE c > ")
            .v(n(rng))
            .sql(" AND c <= ")
            .v(n(rng))
            .sql(" ORDER BY id LIMIT 40"),
        28 => b
            .sql("SELECT id, c, a FROM {t} WHERE (c = ")
            .v(n(rng))
            .sql(" OR c IN (1, ")
            .v(n(rng))
            .sql(", 'NaN')) AND id < ")
            .v(Int8(hi))
            .sql(" ORDER BY id"),
        29 => b
            .sql("SELECT count(*), sum(c), max(c), min(c) FROM {t} WHERE c < ")
            .v(n(rng))
            .sql(" AND c <> ")
            .v(n(rng)),
        0 => b.sql("SELECT * FROM {t} WHERE id = ").v(Int8(k1)),
        1 => b
            .sql("SELECT id, a, c FROM {t} WHERE id BETWEEN ")
            .v(Int8(lo))
            .sql(" AND ")
            .v(Int8(hi))
            .sql(" ORDER BY id LIMIT 200"),
        2 => b
            .sql("SELECT id, b FROM {t} WHERE id IN (")
            .v(Int8(k1))
            .sql(", ")
            .v(Int8(k2))
            .sql(", ")
            .v(Int8(k3))
            .sql(", ")
            .v(Int8(k1 + 1))
            .sql(") ORDER BY id"),
        3 => b
            .sql("SELECT count(*), count(b), sum(a) FROM {t} WHERE b IS NULL AND id > ")
            .v(Int8(lo)),
        4 => b
            .sql("SELECT a % 7 AS g, count(*), sum(c), min(d), max(f) FROM {t} WHERE id > ")
            .v(Int8(lo))
            .sql(" GROUP BY 1 HAVING count(*) > ")
            .v(Int8(i64::from(v % 5)))
            .sql(" ORDER BY 1"),
        5 => b.sql("SELECT DISTINCT e, a % 3 FROM {t} ORDER BY 1, 2"),
        6 => b
            .sql("SELECT id, b FROM {t} ORDER BY b NULLS FIRST, id LIMIT 10 OFFSET ")
            .v(Int8(rng.random_range(0..ROWS))),
        7 => b
            .sql("SELECT id, sum(a) OVER (ORDER BY id ROWS 2 PRECEDING) FROM {t} WHERE id < ")
            .v(Int8(lo))
            .sql(" ORDER BY id DESC LIMIT 50"),
        8 => b
            .sql("SELECT x.id, dim.name FROM {t} x JOIN dim ON dim.id = x.a WHERE x.id < ")
            .v(Int8(lo))
            .sql(" ORDER BY 1 LIMIT 100"),
        9 => b
            .sql("SELECT x.id, y.a FROM {t} x JOIN {t} y ON y.id = x.id + 1 WHERE x.id BETWEEN ")
            .v(Int8(lo))
            .sql(" AND ")
            .v(Int8(lo + 40))
            .sql(" ORDER BY 1"),
        10 => b
            .sql("WITH w AS (SELECT * FROM {t} WHERE a = ")
            .v(Int4(v))
            .sql(") SELECT count(*), sum(c), max(id) FROM w"),
        11 => b
            .sql("SELECT id FROM {t} WHERE a = ")
            .v(Int4(v))
            .sql(" AND id < ")
            .v(Int8(hi))
            .sql(" ORDER BY id"),
        12 => b.sql("SELECT count(*) FROM {t} WHERE id IN (SELECT id FROM {t} WHERE e)"),
        13 => b.sql(&format!(
            "SELECT id, g FROM {{t}} WHERE g @> ARRAY['x{}'] ORDER BY id LIMIT 5",
            v % 10
        )),
        14 => b
            .sql("SELECT id FROM {t} WHERE id < ")
            .v(Int8(lo))
            .sql(" UNION SELECT a FROM {t} WHERE id > ")
            .v(Int8(hi))
            .sql(" ORDER BY 1 LIMIT 20"),
        15 => b
            .sql("SELECT EXISTS (SELECT 1 FROM {t} WHERE id = ")
            .v(Int8(k1))
            .sql("), EXISTS (SELECT 1 FROM {t} WHERE id = ")
            .v(Int8(k2))
            .sql(" AND e)"),
        // Tables in clauses pg_query's own walk does not reach (LIMIT, FILTER).
        17 => b
            .sql("SELECT id FROM dim ORDER BY id LIMIT (SELECT count(*) FROM {t} WHERE id < ")
            .v(Int8(lo))
            .sql(") / 100"),
        18 => b
            .sql("SELECT sum(a) FILTER (WHERE id IN (SELECT id FROM {t} WHERE id BETWEEN ")
            .v(Int8(lo))
            .sql(" AND ")
            .v(Int8(lo + 30))
            .sql(")), count(*) FROM {t} WHERE id > ")
            .v(Int8(hi)),
        16 => b
            .sql("SELECT d::date, count(*) FROM {t} WHERE f > ")
            .v(Float8(f64::from(v) * 10.5))
            .sql(" GROUP BY 1 ORDER BY 1 LIMIT 10"),
        // OR, NOT, <> and boolean columns, filtered cold-side.
        24 => b
            .sql("SELECT id, a, b FROM {t} WHERE (a = ")
            .v(Int4(v))
            .sql(" OR b IS NULL) AND id > ")
            .v(Int8(lo))
            .sql(" ORDER BY id LIMIT 30"),
        25 => b
            .sql("SELECT id, e FROM {t} WHERE a <> ")
            .v(Int4(v))
            .sql(" AND NOT (id BETWEEN ")
            .v(Int8(lo))
            .sql(" AND ")
            .v(Int8(hi))
            .sql(" OR e) ORDER BY id DESC LIMIT 20"),
        26 => b
            .sql("SELECT id, f FROM {t} WHERE e IS NOT TRUE AND id NOT IN (")
            .v(Int8(k1))
            .sql(", ")
            .v(Int8(k2))
            .sql(") AND id <= ")
            .v(Int8(k3))
            .sql(" ORDER BY id DESC LIMIT 25"),
        // The whole row, or columns by position: every cold column is bound.
        21 => b
            .sql("SELECT row_to_json(x)::text FROM {t} x WHERE id BETWEEN ")
            .v(Int8(lo))
            .sql(" AND ")
            .v(Int8(lo + 20))
            .sql(" ORDER BY x.id"),
        22 => b
            .sql("SELECT x, (x).c FROM {t} x WHERE a = ")
            .v(Int4(v))
            .sql(" ORDER BY id LIMIT 20"),
        23 => b
            .sql("SELECT q, r, s FROM {t} AS x(q, r, s) WHERE q BETWEEN ")
            .v(Int8(lo))
            .sql(" AND ")
            .v(Int8(lo + 40))
            .sql(" ORDER BY 1"),
        // Only some columns: the others are bound as NULL and must stay unseen.
        19 => b
            .sql("SELECT b, count(*) FROM {t} WHERE d < '2026-01-20' AND id > ")
            .v(Int8(lo))
            .sql(" GROUP BY b ORDER BY 2 DESC, 1 NULLS FIRST LIMIT 5"),
        20 => b
            .sql("SELECT /* c, f */ id, g[1] FROM {t} WHERE e AND id < ")
            .v(Int8(hi))
            .sql(" ORDER BY id DESC LIMIT 15"),
        _ => b
            .sql("SELECT dim.id, (SELECT count(*) FROM {t} x WHERE x.a = dim.id AND x.id <= ")
            .v(Int8(hi))
            .sql(") FROM dim ORDER BY 1"),
    }
    .done()
}

/// A result column as RowDescription describes it: name, type OID and typmod (the table
/// OID and attnum differ between the tiered table and the control by nature).
type Described = (String, u32, i32);

/// The pseudo-type of an anonymous row.
const RECORD: u32 = 2249;

/// The rows of `sql` run through the extended protocol on a raw connection: Parse, Bind
/// with `params` as text, Describe, Execute, Sync; the columns described, and each row's
/// text values (None: NULL).
async fn raw_text_rows(
    conn: &mut RawConn,
    sql: &str,
    params: &[String],
) -> Result<(Vec<Described>, Vec<Vec<Option<String>>>), String> {
    let refs: Vec<&str> = params.iter().map(String::as_str).collect();
    conn.send(
        &[
            raw::parse("", sql),
            raw::bind("", &refs),
            raw::frame(b'D', b"P\0"),
            raw::execute(),
            raw::sync(),
        ]
        .concat(),
    )
    .await;
    let msgs = conn.until_ready().await;
    if let Some(e) = msgs.iter().find(|m| m.tag == b'E') {
        return Err(format!("{:?}: {:?}", e.field(b'C'), e.field(b'M')));
    }
    let mut described = Vec::new();
    if let Some(t) = msgs.iter().find(|m| m.tag == b'T') {
        let mut rest = &t.body[2..];
        while let Some(end) = rest.iter().position(|&b| b == 0) {
            let name = String::from_utf8_lossy(&rest[..end]).into_owned();
            let field = &rest[end + 1..end + 19];
            let type_oid = u32::from_be_bytes(field[6..10].try_into().unwrap());
            let typmod = i32::from_be_bytes(field[12..16].try_into().unwrap());
            described.push((name, type_oid, typmod));
            rest = &rest[end + 19..];
        }
    }
    let rows = msgs
        .iter()
        .filter(|m| m.tag == b'D')
        .map(|m| {
            let mut rest = &m.body[2..];
            let mut row = Vec::new();
            while rest.len() >= 4 {
                let len = i32::from_be_bytes(rest[..4].try_into().unwrap());
                rest = &rest[4..];
                if len < 0 {
                    row.push(None);
                } else {
                    row.push(Some(
                        String::from_utf8_lossy(&rest[..len as usize]).into_owned(),
                    ));
                    rest = &rest[len as usize..];
                }
            }
            row
        })
        .collect();
    Ok((described, rows))
}

#[tokio::test]
async fn generated_reads_over_a_flushed_table_match_a_plain_table() {
    let db = create_db("differential");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let direct = connect_direct(&db).await;
    direct
        .batch_execute(&format!(
            "CREATE TABLE t(id bigint PRIMARY KEY, a int, b text, c numeric(10,2), d timestamptz, e bool, f float8, g text[]);
             CREATE TABLE control(LIKE t INCLUDING ALL);
             CREATE TABLE dim(id int PRIMARY KEY, name text);
             INSERT INTO dim SELECT g, 'd' || g FROM generate_series(0, 60) g;
             INSERT INTO t SELECT g, g % 50, CASE WHEN g % 11 = 0 THEN NULL ELSE 'b' || (g * 7919 % 1000) END, g / 3.0,
                                  '2026-01-01'::timestamptz + g * interval '37 minutes', g % 3 = 0,
                                  CASE WHEN g % 97 = 0 THEN 'NaN' ELSE g * 1.5 END, ARRAY['x' || g % 10, 'y']
             FROM generate_series(1, {ROWS}) g;
             INSERT INTO control SELECT * FROM t;
             CREATE VIEW t_view AS SELECT id, a, b FROM t WHERE e OR a < 25;
             CREATE VIEW control_view AS SELECT id, a, b FROM control WHERE e OR a < 25;"
        ))
        .await
        .unwrap();
    let proxy = Proxy::start(&["--service-url", &cluster().url(&db), "--cold-store", &store]).await;
    let c = proxy.connect(&db).await;
    admin_call(&c, r#"SELECT coldwire.tier_table('t', '{"hot_row_limit": 500, "min_flush_rows": 250, "max_rows_per_file": 1000, "auto_flush": false}')"#)
        .await
        .unwrap();
    let flush = || admin_call(&c, "SELECT coldwire.flush_table('t', wait => true)");
    flush().await.unwrap();
    // Hot writes after the flush; new versions of cold keys (an insert through coldwire, an
    // update of the plain table); a second flush; more hot writes.
    let both = [
        "UPDATE {t} SET b = 'hot', a = a + 1 WHERE id > 4800",
        "DELETE FROM {t} WHERE id BETWEEN 4950 AND 4960",
        "INSERT INTO {t} SELECT g, g % 50, 'new', 0, '2026-09-01', true, g, '{}' FROM generate_series(5001, 5050) g",
    ];
    for sql in both {
        c.batch_execute(&sql.replace("{t}", "t")).await.unwrap();
        direct
            .batch_execute(&sql.replace("{t}", "control"))
            .await
            .unwrap();
    }
    c.batch_execute("UPDATE t SET a = 49, b = 'again', c = 1, d = '2026-10-01', e = false, f = -1, g = ARRAY['x1'] WHERE id BETWEEN 10 AND 30")
        .await
        .unwrap();
    direct
        .batch_execute("UPDATE control SET a = 49, b = 'again', c = 1, d = '2026-10-01', e = false, f = -1, g = ARRAY['x1'] WHERE id BETWEEN 10 AND 30")
        .await
        .unwrap();
    flush().await.unwrap();
    for sql in [
        "UPDATE {t} SET c = c + 1 WHERE id > 5040",
        "DELETE FROM {t} WHERE id = 5049",
    ] {
        c.batch_execute(&sql.replace("{t}", "t")).await.unwrap();
        direct
            .batch_execute(&sql.replace("{t}", "control"))
            .await
            .unwrap();
    }
    let (hot, cold): (i64, i64) = {
        let r = direct
            .query_one("SELECT (SELECT count(*) FROM t), (SELECT coalesce(sum(row_count), 0)::bigint FROM coldwire.segments WHERE status = 'active')", &[])
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert!(
        hot < 1000 && cold > 4000,
        "mostly cold: {hot} hot, {cold} cold rows"
    );

    let queries = std::env::var("COLDWIRE_DIFFERENTIAL_QUERIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_QUERIES);
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut compared = 0;
    let mut raw_tiered = RawConn::ready(proxy.addr, &db).await;
    let mut raw_control = RawConn::ready(
        format!("127.0.0.1:{}", cluster().port()).parse().unwrap(),
        &db,
    )
    .await;
    // Comments, case and spacing as applications send them, the same on both sides.
    let mut dress = StdRng::seed_from_u64(SEED ^ 0xd15_9415e);
    for i in 0..queries {
        let mut q = query(&mut rng);
        let disguise = Disguise::draw(&mut dress);
        q.inline = disguise.apply(&q.inline.replace("{t}", "cw_table_"));
        q.parameterized = disguise.apply(&q.parameterized.replace("{t}", "cw_table_"));
        let on = |sql: &str, table: &str| sql.replace("cw_table_", table);
        let expected = simple_rows(&direct, &on(&q.inline, "control"))
            .await
            .unwrap_or_else(|e| panic!("control: {}: {e:?}", q.inline));
        let got = simple_rows(&c, &on(&q.inline, "t"))
            .await
            .unwrap_or_else(|e| panic!("query {i}: {}: {e:?}", q.inline));
        assert_eq!(got, expected, "query {i} (simple): {}", q.inline);

        let params: Vec<&(dyn ToSql + Sync)> = q.values.iter().map(Value::param).collect();
        let expected_binary = binary_rows(&direct, &on(&q.parameterized, "control"), &params)
            .await
            .unwrap_or_else(|e| panic!("control: {}: {e:?}", q.parameterized));
        let got_binary = binary_rows(&c, &on(&q.parameterized, "t"), &params)
            .await
            .unwrap_or_else(|e| panic!("query {i}: {}: {e:?}", q.parameterized));
        assert_eq!(
            got_binary.len(),
            expected_binary.len(),
            "query {i} (extended, binary): {}",
            q.parameterized
        );
        assert!(
            got_binary == expected_binary,
            "query {i} (extended, binary): {}: first differing row {:?}",
            q.parameterized,
            got_binary
                .iter()
                .zip(&expected_binary)
                .position(|(a, b)| a != b)
        );

        if i % 3 == 0 {
            let texts: Vec<String> = q.values.iter().map(|v| v.text()).collect();
            let expected_text =
                raw_text_rows(&mut raw_control, &on(&q.parameterized, "control"), &texts)
                    .await
                    .unwrap_or_else(|e| panic!("control: {}: {e}", q.parameterized));
            let got_text = raw_text_rows(&mut raw_tiered, &on(&q.parameterized, "t"), &texts)
                .await
                .unwrap_or_else(|e| panic!("query {i}: {}: {e}", q.parameterized));
            // A whole row of a derived table is a `record`, not the table's row type
            // (documented); every other column keeps its type and typmod.
            let shape = |d: &[Described], other: &[Described]| -> Vec<Described> {
                d.iter()
                    .zip(other)
                    .map(|(a, b)| match a.1 == RECORD || b.1 == RECORD {
                        true => (a.0.clone(), RECORD, a.2),
                        false => a.clone(),
                    })
                    .collect()
            };
            assert_eq!(
                shape(&got_text.0, &expected_text.0),
                shape(&expected_text.0, &got_text.0),
                "query {i} (extended, described): {}",
                q.parameterized
            );
            assert_eq!(
                got_text.1, expected_text.1,
                "query {i} (extended, text): {}",
                q.parameterized
            );
            assert_eq!(
                got_text.1, expected,
                "query {i}: text results of both protocols"
            );
        }
        compared += usize::from(!expected.is_empty());
    }
    assert!(
        compared > queries / 2,
        "most queries return rows: {compared}"
    );
}
