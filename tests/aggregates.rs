//! Aggregate pushdown (DESIGN §6.5) and conditions evaluated on cold rows. A seeded
//! generator of aggregate queries over one tiered table (count, sum, avg, min, max,
//! bool_and, bool_or, and aggregates over DISTINCT values × column types with NULLs,
//! NaN, ±Infinity and extreme integers × GROUP BY of columns and of date_trunc of
//! timestamps, with NULL groups × WHERE on integers, text, dates and timestamps × HAVING
//! × ORDER BY/LIMIT) runs through coldwire and directly on a plain control table with the
//! same history, after updates and deletes of cold rows and several flushes, over the
//! simple protocol (text results) and the extended protocol (binary results). The proxy
//! runs with `max_cold_rows` far below the table's cold rows, so an answer proves the
//! cold side was aggregated, not shipped as rows. Writes with such conditions bring back
//! only the cold rows they select.

mod common;

use common::{admin_call, binary_rows, cluster, connect_direct, create_db, http_get, sample};
use common::{simple_rows, Proxy};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const SEED: u64 = 0x6167_6772;
const ROWS: i64 = 20_000;
const QUERIES: usize = 250;
const JOIN_QUERIES: usize = 120;

const SETUP: &str = "
CREATE TABLE {t} (
  id bigint PRIMARY KEY,
  tenant int4,
  small int2,
  qty int8,
  amount float8,
  flag bool,
  day date,
  at timestamptz,
  ts timestamp,
  note text,
  label varchar(12),
  price numeric(12,2)
);
INSERT INTO {t}
SELECT g,
       CASE WHEN g % 13 = 0 THEN NULL ELSE g % 7 END,
       (g % 200 - 100)::int2,
       CASE WHEN g % 11 = 0 THEN NULL WHEN g % 997 = 0 THEN 9223372036854775807 - g ELSE g::int8 * 1000003 END,
       CASE WHEN g % 17 = 0 THEN NULL WHEN g = 4242 THEN 'NaN'::float8 WHEN g = 777 THEN 'Infinity'::float8
            WHEN g = 778 THEN '-Infinity'::float8 ELSE (g % 1000) / 8.0 END,
       CASE WHEN g % 19 = 0 THEN NULL ELSE g % 3 = 0 END,
       CASE WHEN g = 5 THEN 'infinity'::date ELSE DATE '2020-01-01' + (g % 400) END,
       TIMESTAMPTZ '2024-01-01 00:00:00+00' + g * interval '37 minutes',
       CASE WHEN g = 6 THEN '-infinity'::timestamp ELSE TIMESTAMP '1999-12-31 23:00:00' + g * interval '1 second' END,
       CASE WHEN g % 23 = 0 THEN NULL ELSE 'n' || (g % 5) END,
       'L' || (g % 3),
       CASE WHEN g % 29 = 0 THEN NULL WHEN g IN (779, 4243) THEN 'NaN'::numeric WHEN g = 998 THEN 9999999999.99 WHEN g = 999 THEN -9999999999.99
            ELSE ((g % 2000) - 700) / 8.0 END
FROM generate_series(1, {rows}) g;
";

/// History applied to both tables after the first flush (the tiered one through coldwire).
const WRITES: &[&str] = &[
    "UPDATE {t} SET amount = amount + 1, tenant = 99 WHERE id BETWEEN 100 AND 160",
    "DELETE FROM {t} WHERE id BETWEEN 1000 AND 1100",
    "UPDATE {t} SET note = NULL, flag = NULL WHERE id IN (7, 8, 9, 5000, 12000)",
    "INSERT INTO {t} SELECT g, g % 4, 1, g, g, true, DATE '2030-01-01', TIMESTAMPTZ '2030-01-01 12:00:00+00', TIMESTAMP '2030-01-01', 'fresh', 'L9', g / 3.0 FROM generate_series({rows} + 1, {rows} + 500) g",
    "DELETE FROM {t} WHERE id = 3",
    "UPDATE {t} SET price = price + 0.01 WHERE id BETWEEN 300 AND 320 OR id = 779",
];

/// A plain table the tiered one is joined with: tenant 1 twice (each of its rows counts
/// twice), tenant 5 absent (its rows drop out), a NULL tenant (matches nothing).
const DIMS: &str = "
CREATE TABLE dims (tenant int4, region text, weight int4);
INSERT INTO dims VALUES (0, 'r0', 1), (1, 'r1', 2), (1, 'r2', 3), (2, 'r1', 4), (3, 'r0', 5),
  (4, 'r2', 6), (6, 'r0', 7), (99, 'r9', 8), (NULL, 'r0', 9);
CREATE TABLE regions (region text PRIMARY KEY, zone text);
INSERT INTO regions VALUES ('r0', 'z0'), ('r1', 'z1'), ('r2', 'z0');
";

/// A query aggregating the tiered table joined with plain tables: the partial rows carry
/// the join and group columns, and the combined aggregates add up over the join's output.
fn generate_join(rng: &mut StdRng) -> Query {
    let groups = [
        "d.region",
        "e.label",
        "e.flag",
        "z.zone",
        "date_trunc('month', e.day)",
    ];
    let mut group: Vec<&str> = Vec::new();
    for _ in 0..rng.random_range(0..3) {
        let g = groups[rng.random_range(0..groups.len())];
        if !group.contains(&g) {
            group.push(g);
        }
    }
    let aggregates: [(&str, bool); 12] = [
        ("count(*)", false),
        ("count(e.note)", false),
        ("sum(e.qty)", false),
        ("sum(e.small)", false),
        ("avg(e.tenant)", false),
        ("min(e.day)", false),
        ("max(e.at)", false),
        ("bool_or(e.flag)", false),
        ("count(DISTINCT e.note)", false),
        ("sum(e.amount)", true),
        ("count(*) FILTER (WHERE e.small > 0)", false),
        ("max(e.id) FILTER (WHERE e.label = 'L1')", false),
    ];
    let mut select: Vec<String> = group.iter().map(|g| (*g).to_owned()).collect();
    let mut approximate = Vec::new();
    for _ in 0..rng.random_range(1..4) {
        let (a, approx) = aggregates[rng.random_range(0..aggregates.len())];
        if approx {
            approximate.push(select.len());
        }
        select.push(a.to_owned());
    }
    let mut from = String::from("{t} e JOIN dims d ON d.tenant = e.tenant");
    if rng.random_bool(0.3) {
        from.push_str(&format!(" AND d.weight > {}", rng.random_range(0..6)));
    }
    // The regions join, always there when a group names it.
    if group.contains(&"z.zone") || rng.random_bool(0.3) {
        from = match rng.random_bool(0.5) {
            true => format!("{from} JOIN regions z ON z.region = d.region"),
            false => format!("regions z JOIN {from} ON z.region = d.region"),
        };
    }
    let conjuncts = [
        "e.id > {k}",
        "e.id BETWEEN {k} AND {k} + 6000",
        "e.small < {s}",
        "e.note = 'n{s}'",
        "e.day >= '2020-0{m}-01'",
        "(e.tenant = {s} OR e.note IS NULL)",
        "d.region <> 'r{s}'",
        "e.small < d.weight * 10",
        "d.weight > {s} OR e.flag",
    ];
    let mut wheres = Vec::new();
    for _ in 0..rng.random_range(0..3) {
        wheres.push(
            conjuncts[rng.random_range(0..conjuncts.len())]
                .replace("{k}", &rng.random_range(1..ROWS).to_string())
                .replace("{s}", &rng.random_range(0..5).to_string())
                .replace("{m}", &rng.random_range(1..10).to_string()),
        );
    }
    let mut sql = format!("SELECT {} FROM {from}", select.join(", "));
    if !wheres.is_empty() {
        let wheres: Vec<String> = wheres.iter().map(|w| format!("({w})")).collect();
        sql.push_str(&format!(" WHERE {}", wheres.join(" AND ")));
    }
    if !group.is_empty() {
        let by: Vec<String> = (1..=group.len()).map(|i| i.to_string()).collect();
        sql.push_str(&format!(" GROUP BY {0} ORDER BY {0}", by.join(", ")));
    }
    Query { sql, approximate }
}

struct Query {
    sql: String,
    /// Result columns compared with a tolerance (sums and averages of float8).
    approximate: Vec<usize>,
}

fn generate(rng: &mut StdRng) -> Query {
    let groupable = [
        "tenant",
        "small",
        "flag",
        "day",
        "note",
        "label",
        "date_trunc('day', at)",
        "date_trunc('month', at)",
        "date_trunc('HOUR', ts)",
        "date_trunc('week', ts)",
        "date_trunc('year', ts)",
        "date_trunc('quarter', at)",
    ];
    let column = |g: &str| {
        g.rsplit(' ')
            .next()
            .unwrap_or(g)
            .trim_end_matches(')')
            .to_owned()
    };
    let mut group: Vec<&str> = Vec::new();
    for _ in 0..rng.random_range(0..3) {
        let g = groupable[rng.random_range(0..groupable.len())];
        // One item per column: two truncations of one column take the row path.
        if !group.iter().any(|h| column(h) == column(g)) {
            group.push(g);
        }
    }
    let aggregates: [(&str, bool); 52] = [
        ("count(*)", false),
        ("count(1)", false),
        ("count(note)", false),
        ("count(amount)", false),
        ("sum(tenant)", false),
        ("sum(small)", false),
        ("sum(qty)", false),
        ("sum(amount)", true),
        ("avg(tenant)", false),
        ("avg(qty)", false),
        ("avg(small)", false),
        ("avg(amount)", true),
        ("min(qty)", false),
        ("max(qty)", false),
        ("min(day)", false),
        ("max(day)", false),
        ("min(at)", false),
        ("max(ts)", false),
        ("min(ts)", false),
        ("bool_and(flag)", false),
        ("bool_or(flag)", false),
        ("max(small)", false),
        ("count(DISTINCT tenant)", false),
        ("count(DISTINCT note)", false),
        ("count(DISTINCT day)", false),
        ("sum(DISTINCT small)", false),
        ("avg(DISTINCT tenant)", false),
        ("min(DISTINCT label)", false),
        ("string_agg(DISTINCT label, ',' ORDER BY label)", false),
        ("array_agg(DISTINCT flag)", false),
        ("count(*) FILTER (WHERE tenant = 1)", false),
        ("count(note) FILTER (WHERE day >= '2020-03-01')", false),
        ("sum(qty) FILTER (WHERE note IS NULL)", false),
        ("sum(qty) FILTER (WHERE small < 0 AND id > 5000)", false),
        ("avg(small) FILTER (WHERE label = 'L1')", false),
        ("min(at) FILTER (WHERE tenant IN (2, 3))", false),
        ("max(day) FILTER (WHERE flag IS NOT NULL)", false),
        (
            "bool_or(flag) FILTER (WHERE ts > '2000-01-01 02:00:00')",
            false,
        ),
        ("sum(amount) FILTER (WHERE id BETWEEN 100 AND 9000)", true),
        ("count(*) FILTER (WHERE flag)", false),
        ("count(qty) FILTER (WHERE NOT flag OR note = 'n2')", false),
        (
            "max(id) FILTER (WHERE tenant <> 2 AND (small > 1 OR small IS NULL))",
            false,
        ),
        // Text under the C collation (the test clusters' default).
        ("min(note)", false),
        ("max(label) FILTER (WHERE tenant > 1)", false),
        // numeric(12, 2), with NaN (a declared precision holds no infinity) and its
        // extremes among the values.
        ("sum(price)", false),
        ("avg(price)", false),
        ("min(price)", false),
        ("max(price)", false),
        ("count(price)", false),
        ("sum(price) FILTER (WHERE price > 10.005)", false),
        (
            "max(price) FILTER (WHERE price < 'Infinity' AND price <> 'NaN')",
            false,
        ),
        ("avg(price) FILTER (WHERE tenant = 2)", false),
    ];
    // Group items under output names (`date_trunc('day', at) AS g0`), grouped and sorted
    // by those names, as reporting tools write them.
    let aliased = rng.random_bool(0.3);
    let names: Vec<String> = (0..group.len()).map(|i| format!("g{i}")).collect();
    let mut select: Vec<String> = group
        .iter()
        .zip(&names)
        .map(|(g, n)| {
            if aliased {
                format!("{g} AS {n}")
            } else {
                (*g).to_owned()
            }
        })
        .collect();
    let mut approximate = Vec::new();
    for _ in 0..rng.random_range(1..5) {
        let (a, approx) = aggregates[rng.random_range(0..aggregates.len())];
        if approx {
            approximate.push(select.len());
        }
        select.push(a.to_owned());
    }
    // Aggregates over the DISTINCT values of several columns at once (grouping sets of
    // partial rows, one per column).
    if rng.random_bool(0.25) {
        let distinct = &aggregates[22..30];
        for _ in 0..2 {
            select.push(distinct[rng.random_range(0..distinct.len())].0.to_owned());
        }
    }
    let conjuncts = [
        "id > {k}",
        "id <= {k}",
        "id BETWEEN {k} AND {k} + 3000",
        "tenant = {s}",
        "tenant IN (1, 2, {s})",
        "small < {s}",
        "note = 'n{s}'",
        "note IS NULL",
        "qty IS NOT NULL",
        "label = 'L{s}'",
        "day >= '2020-0{m}-01'",
        "day BETWEEN '2020-02-01' AND '2020-0{m}-15'",
        "at < '2024-01-0{m} 12:00:00+00'",
        "at >= '2024-01-0{m}'",
        "ts > '2000-01-01 0{m}:30:00'",
        "ts <= '2000-01-01 02:00:00.5'",
        "day < DATE '2020-0{m}-20'",
        "at >= TIMESTAMPTZ '2024-01-0{m} 06:00:00+00'",
        "ts BETWEEN '2000-01-01 00:10:00'::timestamp AND '2000-01-01 0{m}:00:00'::timestamp",
        "amount > {s}.5",
        "amount <= {m}0",
        "amount BETWEEN 10 AND 4{s}.25",
        "amount = 12.5",
        "amount IN (0.125, 1.5, 'Infinity')",
        "amount < '-1e2'",
        "amount >= ' infinity'",
        "(tenant = {s} OR note IS NULL)",
        "(id < {k} OR (small > {s} AND label <> 'L{s}'))",
        "NOT (tenant IN (1, {s}) OR day < '2020-0{m}-01')",
        "NOT (amount > {s}.5 AND flag)",
        "flag",
        "NOT flag",
        "flag IS NOT TRUE",
        "flag IS FALSE OR at >= '2024-01-0{m}'",
        "tenant != {s}",
        "amount <> 12.5",
        "note <> 'n{s}'",
        "id NOT BETWEEN {k} AND {k} + 5000",
        // Text in order: the test clusters' default collation is C.
        "note < 'n{s}'",
        "label >= 'L{s}'",
        "note BETWEEN 'n1' AND 'n{s}' OR label > 'L1'",
        // numeric(12, 2): constants between two values of the scale, specials, extremes.
        "price > {s}.005",
        "price <= -{m}.125",
        "price = {s}.5",
        "price = 1.005",
        "price <> 1.005",
        "price BETWEEN -5 AND {m}.499",
        "price IN (1.5, 'NaN', 2.25, 1.001)",
        "price NOT IN (-87.5, 12)",
        "price >= 'Infinity'",
        "price = 'NaN'",
        "price IN (' nan', 1e9)",
        "price > '-inf'",
        "price < 1e3",
        "price >= 9999999999.99 OR price <= -99999999999",
        "price >= '{s}'::numeric",
    ];
    let mut wheres = Vec::new();
    for _ in 0..rng.random_range(0..3) {
        let c = conjuncts[rng.random_range(0..conjuncts.len())]
            .replace("{k}", &rng.random_range(1..ROWS).to_string())
            .replace("{s}", &rng.random_range(0..5).to_string())
            .replace("{m}", &rng.random_range(1..10).to_string());
        wheres.push(c);
    }
    let mut sql = format!("SELECT {} FROM {{t}}", select.join(", "));
    if !wheres.is_empty() {
        sql.push_str(&format!(" WHERE {}", wheres.join(" AND ")));
    }
    if !group.is_empty() {
        // By name, or by position in the select list (where the group columns lead).
        let by: Vec<String> = if aliased {
            names.clone()
        } else if rng.random_bool(0.3) {
            (1..=group.len()).map(|i| i.to_string()).collect()
        } else {
            group.iter().map(|g| (*g).to_owned()).collect()
        };
        sql.push_str(&format!(" GROUP BY {}", by.join(", ")));
        if rng.random_bool(0.3) {
            sql.push_str(&format!(" HAVING count(*) > {}", rng.random_range(0..50)));
        }
        let order: Vec<String> = if aliased {
            names.clone()
        } else {
            (1..=group.len()).map(|i| i.to_string()).collect()
        };
        sql.push_str(&format!(" ORDER BY {}", order.join(", ")));
        if rng.random_bool(0.3) {
            sql.push_str(&format!(" LIMIT {}", rng.random_range(1..10)));
        }
    }
    Query { sql, approximate }
}

/// Asserts that `sql` fails with 54000: it takes the row path, and its cold rows are more
/// than the proxy's cap (`context` names the case in the message).
async fn over_the_cap(c: &tokio_postgres::Client, sql: &str, context: &str) {
    let err = c.simple_query(sql).await.unwrap_err();
    assert_eq!(
        err.as_db_error().map(|e| e.code().code()),
        Some("54000"),
        "{context}: {sql}: {err:?}"
    );
}

/// Runs `q` on the tiered table through coldwire and on the control directly, in the
/// simple protocol (text results, floats compared with a tolerance where `q` says) and,
/// when every column is exact, the extended protocol (binary results, byte for byte).
async fn compare(c: &tokio_postgres::Client, direct: &tokio_postgres::Client, q: &Query) {
    let expected = simple_rows(direct, &q.sql.replace("{t}", "control"))
        .await
        .unwrap();
    let got = simple_rows(c, &q.sql.replace("{t}", "events"))
        .await
        .unwrap_or_else(|e| panic!("{}: {e:?}", q.sql));
    assert!(
        same(&got, &expected, &q.approximate),
        "{}\n got: {got:?}\nwant: {expected:?}",
        q.sql
    );
    if q.approximate.is_empty() {
        let expected = binary_rows(direct, &q.sql.replace("{t}", "control"), &[])
            .await
            .unwrap();
        let got = binary_rows(c, &q.sql.replace("{t}", "events"), &[])
            .await
            .unwrap_or_else(|e| panic!("{}: {e:?}", q.sql));
        assert_eq!(got, expected, "{}", q.sql);
    }
}

fn same(
    got: &[Vec<Option<String>>],
    expected: &[Vec<Option<String>>],
    approximate: &[usize],
) -> bool {
    got.len() == expected.len()
        && got.iter().zip(expected).all(|(g, e)| {
            g.len() == e.len()
                && g.iter().zip(e).enumerate().all(|(i, (a, b))| {
                    a == b
                        || approximate.contains(&i)
                            && match (a, b) {
                                (Some(a), Some(b)) => match (a.parse::<f64>(), b.parse::<f64>()) {
                                    (Ok(x), Ok(y)) => {
                                        (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0)
                                    }
                                    _ => false,
                                },
                                _ => false,
                            }
                })
        })
}

/// Tables `events` (tiered through coldwire, then flushed down to `hot_row_limit` hot
/// rows) and `control` (plain), both seeded with `rows` rows of [`SETUP`], behind a proxy
/// started with `env` (and a metrics listener).
struct Tiered {
    proxy: Proxy,
    db: String,
    /// Through coldwire.
    c: tokio_postgres::Client,
    /// Directly on Postgres.
    direct: tokio_postgres::Client,
    _store: tempfile::TempDir,
}

impl Tiered {
    async fn start(hint: &str, rows: i64, policy: &str, env: &[(&str, &str)]) -> Tiered {
        let db = create_db(hint);
        let dir = tempfile::tempdir().unwrap();
        let store = format!("file://{}", dir.path().display());
        let direct = connect_direct(&db).await;
        for t in ["events", "control"] {
            direct
                .batch_execute(&SETUP.replace("{t}", t).replace("{rows}", &rows.to_string()))
                .await
                .unwrap();
        }
        let proxy = Proxy::start_env(
            &[
                "--service-url",
                &cluster().url(&db),
                "--cold-store",
                &store,
                "--metrics-listen",
                "127.0.0.1:0",
            ],
            env,
        )
        .await;
        let c = proxy.connect(&db).await;
        admin_call(
            &c,
            &format!("SELECT coldwire.tier_table('events', '{policy}')"),
        )
        .await
        .unwrap();
        admin_call(&c, "SELECT coldwire.flush_table('events', wait => true)")
            .await
            .unwrap();
        Tiered {
            proxy,
            db,
            c,
            direct,
            _store: dir,
        }
    }

    /// Runs `sql` (with `{t}` for the table) on both tables.
    async fn both(&self, sql: &str) {
        self.c
            .batch_execute(&sql.replace("{t}", "events"))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        self.direct
            .batch_execute(&sql.replace("{t}", "control"))
            .await
            .unwrap();
    }

    /// Asserts `sql` (with `{t}`) answers the same on both tables.
    /// The `count(*)` and the text of the second column that `tiered` answers through
    /// coldwire with `params` equal those `control` answers on the control table.
    async fn same_row<S>(
        &self,
        tiered: &S,
        control: &S,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
        what: &str,
    ) where
        S: tokio_postgres::ToStatement + ?Sized,
    {
        let row = |r: tokio_postgres::Row| (r.get::<_, i64>(0), r.get::<_, Option<String>>(1));
        let got = self
            .c
            .query_one(tiered, params)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e:?}"));
        let expected = self.direct.query_one(control, params).await.unwrap();
        assert_eq!(row(got), row(expected), "{what}");
    }

    async fn same(&self, sql: &str) {
        let expected = simple_rows(&self.direct, &sql.replace("{t}", "control"))
            .await
            .unwrap();
        let got = simple_rows(&self.c, &sql.replace("{t}", "events"))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        assert_eq!(got, expected, "{sql}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_aggregates_over_a_tiered_table_match_a_plain_table() {
    let t = Tiered::start(
        "aggregates",
        ROWS,
        r#"{"hot_row_limit": 2000, "min_flush_rows": 100, "max_rows_per_file": 7000, "auto_flush": false}"#,
        &[("COLDWIRE_MAX_COLD_ROWS", "1000")],
    )
    .await;
    let (c, direct) = (&t.c, &t.direct);
    // In UTC sessions a timestamptz literal without an offset is evaluated cold-side too.
    t.both("SET TimeZone = 'UTC'").await;
    for w in WRITES {
        t.both(&w.replace("{rows}", &ROWS.to_string())).await;
    }
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut checked = 0;
    for round in 0..2 {
        if round == 1 {
            // A second flush moves rehydrated and new rows cold; more writes follow.
            admin_call(c, "SELECT coldwire.flush_table('events', wait => true)")
                .await
                .unwrap();
            t.both("UPDATE {t} SET qty = -qty WHERE id BETWEEN 2000 AND 2100")
                .await;
            t.both("DELETE FROM {t} WHERE tenant = 6 AND id < 4000")
                .await;
        }
        let hot: i64 = direct
            .query_one("SELECT count(*) FROM events", &[])
            .await
            .unwrap()
            .get(0);
        assert!(hot < 3000, "most rows are cold: {hot} hot");
        // Counts alone: row groups no write touched are counted from their statistics.
        for sql in [
            "SELECT count(*) FROM {t}",
            "SELECT count(note), count(*), count(qty), count(1) FROM {t}",
        ] {
            t.same(sql).await;
        }
        let explained = simple_rows(c, "SELECT coldwire.explain('SELECT count(*) FROM events')")
            .await
            .unwrap()[0][0]
            .clone()
            .unwrap();
        assert!(
            explained.contains("Row groups counted from their statistics: "),
            "{explained}"
        );
        for _ in 0..QUERIES {
            compare(c, direct, &generate(&mut rng)).await;
            checked += 1;
        }
    }
    assert_eq!(checked, 2 * QUERIES);
    // Joins with plain tables, from partials too (the cold rows are over the proxy's cap).
    direct.batch_execute(DIMS).await.unwrap();
    for _ in 0..JOIN_QUERIES {
        compare(c, direct, &generate_join(&mut rng)).await;
    }
    // Joins that read nothing of the tiered table outside aggregates, over no rows: no
    // partial row may stand for them (a row of count 0 would match every region).
    for sql in [
        "SELECT d.region, count(*) FROM {t} e JOIN dims d ON d.tenant = 1 WHERE e.id < 0 GROUP BY 1 ORDER BY 1",
        "SELECT d.region FROM {t} e, dims d WHERE e.id < 0 GROUP BY d.region",
    ] {
        t.same(sql).await;
    }
    let metrics = http_get(t.proxy.metrics_addr.unwrap(), "/metrics").await;
    let pushed = sample(
        &metrics,
        "coldwire_routes_total",
        "route=\"aggregate_pushdown\"",
    )
    .unwrap_or(0.0);
    assert!(
        pushed >= (2 * QUERIES + JOIN_QUERIES) as f64,
        "aggregates answered from partials: {pushed}"
    );
}

/// An aggregate whose WHERE the cold side cannot evaluate exactly takes the row path
/// (and its cap); with the cap raised it answers like the control.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregates_with_inexact_conditions_take_the_row_path() {
    let t = Tiered::start(
        "aggregates_rows",
        3000,
        r#"{"hot_row_limit": 500, "min_flush_rows": 100, "auto_flush": false}"#,
        &[("COLDWIRE_MAX_COLD_ROWS", "1000")],
    )
    .await;
    let (c, direct) = (&t.c, &t.direct);
    // `note LIKE` is not evaluated cold-side, nor is a disjunction or negation with it
    // inside: rows, over the cap.
    for sql in [
        "SELECT count(*) FROM events WHERE note LIKE 'n1%'",
        "SELECT count(*) FROM events WHERE NOT (note LIKE 'n1%' AND tenant = 1)",
        "SELECT count(*) FROM events WHERE tenant = 1 OR note LIKE 'n1%'",
        "SELECT count(*) FROM events WHERE tenant NOT IN (1, NULL) OR tenant IS NULL",
    ] {
        over_the_cap(c, sql, "").await;
    }
    // coldwire.explain names the path.
    let explain = |sql: &str| format!("SELECT coldwire.explain($q${sql}$q$)");
    let text = simple_rows(
        c,
        &explain("SELECT tenant, count(*) FROM events WHERE id > 10 GROUP BY 1"),
    )
    .await
    .unwrap()[0][0]
        .clone()
        .unwrap();
    assert!(text.contains("Path: aggregate pushdown"), "{text}");
    assert!(text.contains("aggregated into 8 partial rows"), "{text}");
    // DISTINCT values of several columns: a partial row per value of each column, not
    // one per combination of them (about one per cold row).
    let sql =
        "SELECT count(DISTINCT tenant), count(DISTINCT qty), count(*), sum(small) FROM events";
    let text = simple_rows(c, &explain(sql)).await.unwrap()[0][0]
        .clone()
        .unwrap();
    assert!(text.contains("Path: aggregate pushdown"), "{text}");
    let partial_rows: usize = text
        .split(" partial rows")
        .next()
        .and_then(|t| t.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    let distinct: i64 = direct
        .query_one(
            "SELECT count(DISTINCT tenant) + count(DISTINCT qty) + 2 FROM control",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        partial_rows as i64 <= distinct,
        "{partial_rows} partial rows: {text}"
    );
    assert_eq!(
        simple_rows(c, sql).await.unwrap(),
        simple_rows(direct, &sql.replace("events", "control"))
            .await
            .unwrap()
    );
    let text = simple_rows(
        c,
        &explain("SELECT count(*) FROM events WHERE note LIKE 'n1%'"),
    )
    .await
    .unwrap()[0][0]
        .clone()
        .unwrap();
    assert!(text.contains("Path: aggregate of cold rows"), "{text}");
    // Float8 parameters, binary, declared float8: partials (no cap met), like the
    // control's answer.
    let sql = "SELECT count(*), sum(qty)::text FROM {t} WHERE amount >= $1";
    let typed = [tokio_postgres::types::Type::FLOAT8];
    let tiered = c
        .prepare_typed(&sql.replace("{t}", "events"), &typed)
        .await
        .unwrap();
    let control = t
        .direct
        .prepare_typed(&sql.replace("{t}", "control"), &typed)
        .await
        .unwrap();
    for v in [10.5f64, -0.0, f64::INFINITY, 124.875] {
        t.same_row(&tiered, &control, &[&v], &v.to_string()).await;
    }
    // Untyped in Parse, as drivers send them: coldwire learns the types Postgres
    // inferred from its ParameterDescription (tokio-postgres describes every statement),
    // so the float8 is read as one (partials, no cap met), and a parameter that Postgres
    // typed float8 by its first use is not read as an int8 where it meets `id`.
    for (sql, v) in [
        (
            "SELECT count(*), sum(qty)::text FROM {t} WHERE amount >= $1",
            10.5f64,
        ),
        (
            "SELECT count(*), sum(qty)::text FROM {t} WHERE amount > $1 AND id >= $1 AND id < 900",
            10.0,
        ),
    ] {
        let (tiered, control) = (sql.replace("{t}", "events"), sql.replace("{t}", "control"));
        t.same_row(tiered.as_str(), control.as_str(), &[&v], sql)
            .await;
    }
    // numeric parameters, binary, compared with the numeric(12, 2) column: read at its
    // scale (1.005 lies between two of its values), partials (no cap met).
    let sql = "SELECT count(*), sum(price)::text FROM {t} WHERE price > $1 AND price <= $2";
    let (tiered, control) = (sql.replace("{t}", "events"), sql.replace("{t}", "control"));
    for (lo, hi) in [
        ("1.005", "100"),
        ("-3.5", "-0.001"),
        ("12.25", "9999999999.99"),
    ] {
        let (lo, hi) = (common::Decimal(lo.into()), common::Decimal(hi.into()));
        t.same_row(tiered.as_str(), control.as_str(), &[&lo, &hi], sql)
            .await;
    }
    // Under an integer cast a decimal is rounded ('7.6'::numeric::int is 8): the cast
    // value is not read as 7.6 (the row path, narrowed by the key, answers), in a literal
    // and in a numeric parameter.
    t.same(
        "SELECT count(*), sum(price)::text FROM {t} WHERE price < '7.6'::numeric::int AND id < 900",
    )
    .await;
    let sql = "SELECT count(*), sum(price)::text FROM {t} WHERE price < $1::int AND id < 900";
    let numeric = [tokio_postgres::types::Type::NUMERIC];
    let tiered = c
        .prepare_typed(&sql.replace("{t}", "events"), &numeric)
        .await
        .unwrap();
    let control = direct
        .prepare_typed(&sql.replace("{t}", "control"), &numeric)
        .await
        .unwrap();
    let seven_point_six = common::Decimal("7.6".into());
    t.same_row(&tiered, &control, &[&seven_point_six], sql)
        .await;
    // An integer parameter compared with a float8 column (eight binary bytes that are
    // not a float8), and a decimal under an integer cast (5.7::int4 is 6): the row path,
    // narrowed by the key, answers like the control.
    let sql = "SELECT count(*), sum(qty)::text FROM {t} WHERE amount >= $1::bigint AND id < 900";
    let (tiered, control) = (sql.replace("{t}", "events"), sql.replace("{t}", "control"));
    for v in [10i64, 100] {
        t.same_row(tiered.as_str(), control.as_str(), &[&v], sql)
            .await;
    }
    for sql in [
        "SELECT count(*), sum(qty) FROM {t} WHERE amount = 12.7::int4 AND id < 900",
        "SELECT count(*) FROM {t} WHERE amount >= 99.5::int8 AND id < 900",
    ] {
        t.same(sql).await;
    }
    let text = simple_rows(
        c,
        &explain("SELECT count(*) FILTER (WHERE note LIKE 'n%'), count(*) FROM events"),
    )
    .await
    .unwrap()[0][0]
        .clone()
        .unwrap();
    assert!(text.contains("Path: aggregate of cold rows"), "{text}");
    let text = simple_rows(
        c,
        &explain("SELECT count(*) FILTER (WHERE tenant = 2), count(*) FROM events"),
    )
    .await
    .unwrap()[0][0]
        .clone()
        .unwrap();
    assert!(text.contains("Path: aggregate pushdown"), "{text}");
    // Outside UTC, a timestamptz literal without an offset depends on the session's
    // TimeZone: the row path (narrowed by the key) answers; with an offset, partials.
    t.both("SET TimeZone = 'America/New_York'").await;
    for sql in [
        "SELECT count(*), min(at) FROM {t} WHERE at >= '2024-01-02 12:00' AND id < 900",
        "SELECT count(*), max(at) FROM {t} WHERE at >= '2024-01-02 12:00:00-05'",
        "SELECT flag, count(*) FROM {t} WHERE day < '2020-06-01' AND ts >= '2000-01-01 00:10' GROUP BY 1 ORDER BY 1",
        // A date compared with a timestamp compares as timestamps: not read cold-side.
        "SELECT count(*) FROM {t} WHERE day >= TIMESTAMP '2020-03-01 12:00' AND id < 900",
        // Days of a timestamptz begin at the zone's midnights: cold rows, cut by Postgres.
        "SELECT date_trunc('day', at), count(*) FROM {t} WHERE id < 900 GROUP BY 1 ORDER BY 1",
        // A timestamp's days are the same in every zone: partials.
        "SELECT date_trunc('day', ts), count(*), max(at) FROM {t} GROUP BY 1 ORDER BY 1",
        // NaN has no place in the order coldwire compares by: cold rows.
        "SELECT count(*), sum(qty) FROM {t} WHERE amount < 'NaN' AND id < 900",
        // A FILTER the cold engine cannot evaluate: cold rows, narrowed by the key.
        "SELECT tenant, count(*) FILTER (WHERE note LIKE 'n1%'), sum(qty) FILTER (WHERE flag) FROM {t} WHERE id < 900 GROUP BY 1 ORDER BY 1",
    ] {
        t.same(sql).await;
    }
    let text = simple_rows(
        c,
        &explain("SELECT date_trunc('month', at), count(*) FROM events GROUP BY 1"),
    )
    .await
    .unwrap()[0][0]
        .clone()
        .unwrap();
    assert!(text.contains("Path: aggregate of cold rows"), "{text}");
    // Narrowed by the key, the row path answers exactly.
    for sql in [
        "SELECT count(*), sum(qty) FROM {t} WHERE note LIKE 'n1%' AND id < 900",
        "SELECT tenant, count(*) FROM {t} WHERE amount > 10 AND id BETWEEN 1 AND 800 GROUP BY tenant ORDER BY 1",
    ] {
        t.same(sql).await;
    }
    explain_through_coldwire_plans_what_runs_and_tells_the_path(&t).await;
}

/// EXPLAIN through coldwire: Postgres's plan of the statement as coldwire runs it (the
/// partials' branch of an aggregate pushdown), and a notice telling the path per table.
async fn explain_through_coldwire_plans_what_runs_and_tells_the_path(t: &Tiered) {
    let (client, mut connection) =
        tokio_postgres::connect(&t.proxy.url("postgres", &t.db), tokio_postgres::NoTls)
            .await
            .unwrap();
    let (notices_tx, mut notices) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = futures_util::StreamExt::next(&mut messages).await {
            if let tokio_postgres::AsyncMessage::Notice(n) = message {
                let _ = notices_tx.send(n.message().to_owned());
            }
        }
    });
    let plan = |rows: Vec<tokio_postgres::SimpleQueryMessage>| -> String {
        rows.iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    for (sql, path, in_plan) in [
        (
            "EXPLAIN SELECT tenant, count(*) FROM events WHERE tenant <> 3 GROUP BY 1",
            "Path: aggregate pushdown",
            "jsonb_to_recordset",
        ),
        (
            "EXPLAIN (ANALYZE, COSTS OFF) SELECT count(*) FROM events WHERE note LIKE 'n1%' AND id < 900",
            "Path: aggregate of cold rows",
            "unnest",
        ),
        (
            "explain analyze verbose SELECT id, note FROM events WHERE id = 7 OR id = 4000",
            "Path: cold rows injected",
            "actual time",
        ),
    ] {
        let rows = client.simple_query(sql).await.unwrap();
        let text = plan(rows);
        assert!(text.contains(in_plan), "{sql}: {text}");
        let notice = notices.recv().await.unwrap();
        assert!(
            notice.starts_with("coldwire: Reference 1") && notice.contains(path),
            "{sql}: {notice}"
        );
    }
    // The extended protocol: the notice comes with the Bind.
    let rows = client
        .query(
            "EXPLAIN SELECT count(*) FROM events WHERE id > $1",
            &[&10i64],
        )
        .await
        .unwrap();
    let text: Vec<String> = rows.iter().map(|r| r.get::<_, String>(0)).collect();
    assert!(text.join("\n").contains("jsonb_to_recordset"), "{text:?}");
    let notice = notices.recv().await.unwrap();
    assert!(notice.contains("Path: aggregate pushdown"), "{notice}");
}

/// Aggregates while auto-flush runs, a writer inserts, and another rewrites cold rows
/// (each rewrite rehydrates a key: the hot keys the partials leave out change under
/// them): no row missing or doubled in any answer, simple or extended protocol, and no
/// 40001 reaches the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregates_while_cold_rows_are_rewritten_and_flushed_stay_exact() {
    use common::flushing::{reader, Flushing};
    let db = create_db("aggregates_busy");
    let mut flushing = Flushing::start(&db, 40, 50).await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(8);
    let rewriter = {
        let w = flushing.proxy.connect(&db).await;
        tokio::spawn(async move {
            let mut k = 11i64;
            let mut rewritten = 0;
            while tokio::time::Instant::now() < deadline {
                k = k * 37 % 2000 + 1;
                w.execute("UPDATE t SET v = v WHERE id = $1", &[&k])
                    .await
                    .unwrap_or_else(|e| panic!("{e:?}"));
                rewritten += 1;
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            rewritten
        })
    };
    let mut readers = Vec::new();
    for extended in [false, true] {
        let client = flushing.proxy.connect(&db).await;
        readers.push(reader(client, extended, deadline));
    }
    for r in readers {
        assert!(r.await.unwrap() > 5);
    }
    assert!(rewriter.await.unwrap() > 50);
    flushing.stop().await;
    assert!(
        flushing.proxy.log_contains("cold partials injected").await,
        "the aggregates were answered from partials"
    );
}

/// A write whose conditions coldwire evaluates on cold rows (integers, text equality,
/// dates and timestamps) brings back only the cold rows they select, so
/// `max_rehydrate_rows` counts those: writes touching a few hundred of thousands of cold
/// rows work under a low cap, and the table matches a plain one afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_with_conditions_evaluated_on_cold_rows_bring_back_only_those_rows() {
    let t = Tiered::start(
        "aggregates_writes",
        3000,
        r#"{"hot_row_limit": 500, "min_flush_rows": 100, "auto_flush": false}"#,
        &[("COLDWIRE_MAX_REHYDRATE_ROWS", "300")],
    )
    .await;
    let (c, direct) = (&t.c, &t.direct);
    for w in [
        "UPDATE {t} SET note = 'u' WHERE tenant = 3 AND day >= '2020-06-01'",
        "DELETE FROM {t} WHERE label = 'L1' AND at < '2024-01-02 00:00:00+00'",
        "UPDATE {t} SET qty = 0 WHERE ts BETWEEN '2000-01-01 00:00:00' AND '2000-01-01 00:05:00' AND small > 0",
    ] {
        t.both(w).await;
    }
    // A condition coldwire cannot evaluate selects every cold row: over the cap.
    let err = c
        .batch_execute("UPDATE events SET note = 'v' WHERE note LIKE 'n%'")
        .await
        .unwrap_err();
    assert_eq!(
        err.as_db_error().map(|e| e.code().code()),
        Some("54000"),
        "{err:?}"
    );
    let hot: i64 = direct
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        hot < 500 + 300,
        "only the selected rows came back: {hot} hot"
    );
    let sql = "SELECT id, note, qty FROM {t} WHERE id < 40 OR note = 'u' OR qty = 0 ORDER BY id";
    let all = "SELECT count(*), count(note), sum(qty), max(id) FROM {t}";
    for q in [sql, all] {
        t.same(q).await;
    }
}

/// Tables keyed by uuid or by text aggregate from partials too: the hot keys left out of
/// the partials are read as text, in one order for the plan and the statement (byte
/// order for text, whose keys here differ in case so collations and bytes disagree), and
/// rewritten cold rows are counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_keyed_by_uuid_or_text_aggregate_from_partials() {
    for (hint, key, value) in [
        ("aggregates_uuid", "uuid", "md5(g::text)::uuid"),
        (
            "aggregates_text",
            "text",
            "CASE WHEN g % 2 = 0 THEN 'K' ELSE 'k' END || g",
        ),
    ] {
        let db = create_db(hint);
        let dir = tempfile::tempdir().unwrap();
        let store = format!("file://{}", dir.path().display());
        let direct = connect_direct(&db).await;
        for t in ["events", "control"] {
            direct
                .batch_execute(&format!(
                    "CREATE TABLE {t} (k {key} PRIMARY KEY, g int4, v int8, name text COLLATE \"C\", label text COLLATE \"und-x-icu\");
                     INSERT INTO {t} SELECT {value}, g, g * 10, chr(65 + g % 26) || chr(97 + g % 7), chr(97 + g % 26) FROM generate_series(1, 3000) g;"
                ))
                .await
                .unwrap();
        }
        let proxy = Proxy::start_env(
            &["--service-url", &cluster().url(&db), "--cold-store", &store],
            &[("COLDWIRE_MAX_COLD_ROWS", "500")],
        )
        .await;
        let c = proxy.connect(&db).await;
        admin_call(&c, r#"SELECT coldwire.tier_table('events', '{"hot_row_limit": 300, "min_flush_rows": 100, "auto_flush": false}')"#)
            .await
            .unwrap();
        admin_call(&c, "SELECT coldwire.flush_table('events', wait => true)")
            .await
            .unwrap();
        for w in [
            "UPDATE {t} SET v = v + 1 WHERE g <= 200",
            "DELETE FROM {t} WHERE g BETWEEN 1000 AND 1010",
            "INSERT INTO {t} SELECT {value}, g, 0, 'zz' FROM generate_series(5001, 5100) g",
        ] {
            let w = w.replace("{value}", value);
            c.batch_execute(&w.replace("{t}", "events"))
                .await
                .unwrap_or_else(|e| panic!("{w}: {e:?}"));
            direct
                .batch_execute(&w.replace("{t}", "control"))
                .await
                .unwrap();
        }
        for sql in [
            "SELECT count(*), sum(v), min(g), max(g) FROM {t}",
            "SELECT count(*), sum(v), max(v) FROM {t} WHERE g > 150 AND v > 0",
            "SELECT count(*), avg(v) FROM {t} WHERE g BETWEEN 100 AND 2500",
            // A column whose collation is not its type's default: the jsonb branch's
            // column has the default one, which yields to the column's in the UNION ALL,
            // so Postgres groups and sorts the partial rows under the column's.
            "SELECT name, count(*), sum(v) FROM {t} GROUP BY name ORDER BY name",
            "SELECT count(DISTINCT name), min(DISTINCT name), max(DISTINCT name) FROM {t}",
            // Text in order under the C collation: evaluated on cold rows, as bytes.
            "SELECT count(*), sum(v) FROM {t} WHERE name < 'Mc'",
            "SELECT name, count(*) FROM {t} WHERE name BETWEEN 'Bb' AND 'K' OR name >= 'x' GROUP BY 1 ORDER BY 1",
            "SELECT count(*) FROM {t} WHERE NOT (name > 'Q')",
            "SELECT min(name), max(name) FROM {t}",
            "SELECT label, min(name), max(name) FILTER (WHERE v > 100) FROM {t} WHERE name >= 'C' GROUP BY 1 ORDER BY 1",
        ] {
            let expected = simple_rows(&direct, &sql.replace("{t}", "control"))
                .await
                .unwrap();
            let got = simple_rows(&c, &sql.replace("{t}", "events"))
                .await
                .unwrap_or_else(|e| panic!("{key}: {sql}: {e:?}"));
            assert_eq!(got, expected, "{key}: {sql}");
        }
        // Under an ICU collation text is not ordered as bytes: rows, over the cap.
        for sql in [
            "SELECT count(*) FROM events WHERE label < 'm'",
            "SELECT min(label) FROM events",
        ] {
            over_the_cap(&c, sql, key).await;
        }
        // The largest key of the first flush rewritten and flushed again: two cold
        // versions, and an override at the very end of a row group's key range.
        let top: String = direct
            .query_one(
                "SELECT max(k::text COLLATE \"C\") FROM control WHERE g <= 2700",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        let w = format!("UPDATE {{t}} SET v = v + 5 WHERE k = '{top}'");
        c.batch_execute(&w.replace("{t}", "events")).await.unwrap();
        direct
            .batch_execute(&w.replace("{t}", "control"))
            .await
            .unwrap();
        admin_call(&c, "SELECT coldwire.flush_table('events', wait => true)")
            .await
            .unwrap();
        let sql = "SELECT count(*), count(v), count(name) FROM {t}";
        assert_eq!(
            simple_rows(&c, &sql.replace("{t}", "events"))
                .await
                .unwrap(),
            simple_rows(&direct, &sql.replace("{t}", "control"))
                .await
                .unwrap(),
            "{key}: {sql}"
        );
        assert!(
            proxy.log_contains("cold partials injected").await,
            "{key}: answered from partials"
        );
    }
}

/// A text key flushed twice (two cold versions, an override) at the very end of a row
/// group's key range: counts stay exact (overrides hold escaped, terminated encodings of
/// text keys, which row-group statistics do not).
#[tokio::test]
async fn counts_stay_exact_when_a_text_key_at_a_range_end_is_flushed_twice() {
    let db = create_db("aggregates_textedge");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let direct = connect_direct(&db).await;
    direct
        .batch_execute("CREATE TABLE edge (k text PRIMARY KEY, v int4, iv interval)")
        .await
        .unwrap();
    let proxy = Proxy::start(&["--service-url", &cluster().url(&db), "--cold-store", &store]).await;
    let c = proxy.connect(&db).await;
    admin_call(&c, r#"SELECT coldwire.tier_table('edge', '{"hot_row_limit": 0, "min_flush_rows": 1, "auto_flush": false}')"#)
        .await
        .unwrap();
    c.batch_execute(
        "INSERT INTO edge VALUES ('a', 1, '1 day'), ('b', 1, NULL), ('c', 1, '2 hours')",
    )
    .await
    .unwrap();
    let flush = || admin_call(&c, "SELECT coldwire.flush_table('edge', wait => true)");
    flush().await.unwrap();
    c.batch_execute("UPDATE edge SET v = 2 WHERE k = 'c'")
        .await
        .unwrap();
    flush().await.unwrap();
    let hot: i64 = direct
        .query_one("SELECT count(*) FROM edge", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(hot, 0, "every row is cold");
    // Counts alone are the ones row-group statistics answer.
    assert_eq!(
        simple_rows(&c, "SELECT count(*), count(v) FROM edge")
            .await
            .unwrap(),
        vec![vec![Some("3".to_owned()), Some("3".to_owned())]]
    );
    assert_eq!(
        simple_rows(&c, "SELECT sum(v) FROM edge").await.unwrap(),
        vec![vec![Some("4".to_owned())]]
    );
    // A NULL test on a type without a byte order (interval) is exact cold-side too.
    assert_eq!(
        simple_rows(
            &c,
            "SELECT count(*) FILTER (WHERE iv IS NULL), sum(v) FROM edge WHERE iv IS NOT NULL OR k = 'b'"
        )
        .await
        .unwrap(),
        vec![vec![Some("1".to_owned()), Some("4".to_owned())]]
    );
}

/// An aggregate sent as libpq's `PQexecParams`, psycopg 3 and node-postgres send every
/// statement (Parse, Bind, Describe, Execute, Sync in one group) takes partials; after a
/// write earlier in its group it reads cold rows instead, within the cap, and over it
/// fails with the cap's clear error rather than with a 40001 that repeats at every retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregates_in_a_group_take_partials_unless_a_statement_ran_before_them() {
    let t = Tiered::start(
        "aggregates_groups",
        3000,
        r#"{"hot_row_limit": 500, "min_flush_rows": 100, "auto_flush": false}"#,
        &[("COLDWIRE_MAX_COLD_ROWS", "1000")],
    )
    .await;
    let want: i64 = t
        .direct
        .query_one("SELECT count(*) FROM control", &[])
        .await
        .unwrap()
        .get(0);
    let mut raw = common::raw::RawConn::ready(t.proxy.addr, &t.db).await;
    let group = |statements: &[&str]| {
        let mut frames = Vec::new();
        for sql in statements {
            frames.extend(common::raw::parse("", sql));
            frames.extend(common::raw::bind("", &[]));
            frames.extend(common::raw::frame(b'D', b"P\0"));
            frames.extend(common::raw::execute());
        }
        frames.extend(common::raw::sync());
        frames
    };
    // Alone in its group: from partials (the 2,500 cold rows are over the cap).
    raw.send(&group(&["SELECT count(*) FROM events"])).await;
    let answers = raw.until_ready().await;
    assert_eq!(common::raw::tags(&answers), "12TDCZ", "{answers:?}");
    assert!(
        String::from_utf8_lossy(&answers[3].body).ends_with(&want.to_string()),
        "{answers:?}"
    );
    // After a write of a cold row in the same group: rows, over the cap here, so the
    // cap's error, once, and the write undone with the group.
    raw.send(&group(&[
        "UPDATE events SET note = 'moved' WHERE id = 7",
        "SELECT count(*) FROM events",
    ]))
    .await;
    let answers = raw.until_ready().await;
    let tags = common::raw::tags(&answers);
    assert_eq!(tags, "12nC12TEZ", "{answers:?}");
    let error = answers.iter().find(|m| m.tag == b'E').unwrap();
    assert_eq!(error.field(b'C').as_deref(), Some("54000"), "{error:?}");
    let note: Option<String> = t
        .direct
        .query_one("SELECT note FROM events WHERE id = 7", &[])
        .await
        .map(|r| r.get(0))
        .unwrap_or(None);
    assert_ne!(note.as_deref(), Some("moved"));
}
