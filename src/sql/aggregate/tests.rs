use super::*;

fn events() -> (TieredTable, Vec<(String, Option<ColdType>)>) {
    let table = TieredTable {
        table_id: 7,
        schema: "public".into(),
        name: "events".into(),
        columns: vec![
            "id".into(),
            "tenant".into(),
            "amount".into(),
            "note".into(),
            "ok".into(),
            "at".into(),
        ],
        pk: vec!["id".into()],
        guarded: true,
        types: Vec::new(),
    };
    let types = vec![
        ("bigint".into(), Some(ColdType::Scalar(ScalarType::Int8))),
        ("integer".into(), Some(ColdType::Scalar(ScalarType::Int4))),
        (
            "double precision".into(),
            Some(ColdType::Scalar(ScalarType::Float8)),
        ),
        (
            "text".into(),
            Some(ColdType::Scalar(ScalarType::Text(TextKind::Text))),
        ),
        ("boolean".into(), Some(ColdType::Scalar(ScalarType::Bool))),
        (
            "timestamp with time zone".into(),
            Some(ColdType::Scalar(ScalarType::Timestamptz)),
        ),
    ];
    (table, types)
}

fn plan(sql: &str) -> Option<AggregateRewrite> {
    plan_with(sql, &[false; 6])
}

/// [`plan`] with the columns `byte_ordered` says compared as bytes (C collation).
fn plan_with(sql: &str, byte_ordered: &[bool]) -> Option<AggregateRewrite> {
    let (table, types) = events();
    let parsed = pg_query::parse(sql, 0).unwrap();
    rewrite_aggregate(&parsed, 0, |_, name| {
        (name == "events").then_some(AggregateTable {
            table: &table,
            types: &types,
            byte_ordered,
        })
    })
}

fn columns(r: &AggregateRewrite) -> Vec<usize> {
    r.group.iter().map(|g| g.column).collect()
}

#[test]
fn splits_the_common_aggregates() {
    let r = plan("SELECT tenant, count(*), sum(amount), avg(id) FROM events WHERE id > 5 GROUP BY tenant HAVING count(*) > 1 ORDER BY 2 DESC LIMIT 3").unwrap();
    let kinds: Vec<PartialKind> = r.partials.iter().map(|p| p.kind).collect();
    assert_eq!(
        kinds,
        [
            PartialKind::CountStar,
            PartialKind::SumFloat,
            PartialKind::SumNumeric,
            PartialKind::Count
        ]
    );
    assert_eq!(columns(&r), [1]);
    assert!(r.exact_where);
    assert_eq!(r.where_predicates, 1);
    assert!(
        r.sql.contains("COALESCE(sum(_cw_p0), 0)::int8 AS count"),
        "{}",
        r.sql
    );
    assert!(
        r.sql.contains("HAVING COALESCE(sum(_cw_p0), 0)::int8 > 1"),
        "{}",
        r.sql
    );
    assert!(
        r.sql.contains("sum(_cw_p2) / sum(_cw_p3) AS avg"),
        "{}",
        r.sql
    );
    assert!(pg_query::parse(&r.sql, 0).is_ok(), "{}", r.sql);
}

#[test]
fn group_by_ordinals_and_output_names_resolve_to_columns() {
    for sql in [
        "SELECT tenant, count(*) FROM events GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 3",
        "SELECT tenant AS t, count(*) FROM events GROUP BY t",
        "SELECT events.tenant, sum(amount) FROM events GROUP BY events.tenant",
    ] {
        let r = plan(sql).unwrap_or_else(|| panic!("{sql}"));
        assert_eq!(columns(&r), [1], "{sql}");
    }
}

#[test]
fn leaves_what_it_cannot_split() {
    for sql in [
        "SELECT string_agg(note, ',') FROM events",
        "SELECT count(DISTINCT amount) FROM events",
        "SELECT count(DISTINCT tenant + 1) FROM events",
        "SELECT count(DISTINCT tenant) FILTER (WHERE ok) FROM events",
        "SELECT array_agg(DISTINCT tenant ORDER BY note) FROM events",
        "SELECT string_agg(DISTINCT note, note) FROM events",
        "SELECT jsonb_agg(DISTINCT note) FROM events",
        "SELECT sum(id) FILTER (WHERE id IN (SELECT id FROM events WHERE id < 5)) FROM events",
        "SELECT count(*) FILTER (WHERE length(note) > 2) FROM events",
        "SELECT min(note) FROM events",
        "SELECT id, count(*) FROM events GROUP BY tenant",
        "SELECT tenant + 1, count(*) FROM events GROUP BY 1",
        "SELECT count(*) FROM events GROUP BY 2",
        "SELECT count(*) FROM events WHERE id IN (SELECT 1)",
        "SELECT count(*) OVER () FROM events",
        "SELECT * FROM events",
        "SELECT my_agg(tenant) FROM events GROUP BY tenant",
        "SELECT date_trunc('day', at), count(*) FROM events GROUP BY at",
        "SELECT date_trunc('day', at), count(*) FROM events GROUP BY 1, at",
        "SELECT date_trunc('day', at), count(*) FROM events GROUP BY 1, date_trunc('hour', at)",
        "SELECT date_trunc('decade', at), count(*) FROM events GROUP BY 1",
        "SELECT date_trunc('day', at, 'Europe/Paris'), count(*) FROM events GROUP BY 1",
        "SELECT date_trunc('day', tenant), count(*) FROM events GROUP BY 1",
        "SELECT at, count(*) FROM events GROUP BY date_trunc('day', at)",
        "SELECT date_trunc('day', at), count(DISTINCT at) FROM events GROUP BY 1",
        "SELECT other.date_trunc('day', at), count(*) FROM events GROUP BY 1",
    ] {
        assert!(plan(sql).is_none(), "{sql}");
    }
}

#[test]
fn a_where_the_cold_side_cannot_compute_is_not_exact() {
    let r = plan("SELECT count(*) FROM events WHERE note LIKE 'a%'").unwrap();
    assert!(!r.exact_where);
    let r = plan("SELECT count(*) FROM events WHERE note = 'a' AND id BETWEEN 1 AND 9").unwrap();
    assert!(r.exact_where);
    assert_eq!(r.where_predicates, 3);
    // float8 compares as its encoding does (NaN above every number, -0 = 0).
    let r = plan("SELECT count(*) FROM events WHERE amount > 1.5 AND amount <= 1e3").unwrap();
    assert!(r.exact_where);
    // OR, NOT and boolean columns, when every part is exact.
    for exact in [
        "SELECT count(*) FROM events WHERE amount > 1 OR id = 2",
        "SELECT count(*) FROM events WHERE ok",
        "SELECT count(*) FROM events WHERE NOT ok AND note <> 'x'",
        "SELECT count(*) FROM events WHERE NOT (id BETWEEN 3 AND 7 OR ok IS NOT TRUE)",
    ] {
        assert!(plan(exact).unwrap().exact_where, "{exact}");
    }
    for inexact in [
        "SELECT count(*) FROM events WHERE note < 'b'",
        "SELECT count(*) FROM events WHERE note < 'b' OR id = 1",
        "SELECT count(*) FROM events WHERE NOT (note LIKE 'b%')",
        "SELECT count(*) FROM events WHERE id NOT IN (1, NULL)",
    ] {
        assert!(!plan(inexact).unwrap().exact_where, "{inexact}");
    }
    // Text in order under the C collation: bytes, as cold-side; min and max too.
    let c = [false, false, false, true, false, false];
    let r = plan_with("SELECT min(note), max(note) FROM events", &c).unwrap();
    assert_eq!(r.partials.len(), 2, "{}", r.sql);
    assert!(plan("SELECT min(note) FROM events").is_none());
    for exact in [
        "SELECT count(*) FROM events WHERE note < 'b'",
        "SELECT count(*) FROM events WHERE note BETWEEN 'a' AND 'n2' OR id = 1",
        "SELECT count(*) FROM events WHERE NOT (note >= 'b')",
    ] {
        assert!(plan_with(exact, &c).unwrap().exact_where, "{exact}");
    }
    for inexact in [
        "SELECT count(*) FROM events WHERE note < 'b' COLLATE \"en-x-icu\"",
        "SELECT count(*) FROM events WHERE note COLLATE \"en-x-icu\" < 'b'",
    ] {
        assert!(!plan_with(inexact, &c).unwrap().exact_where, "{inexact}");
    }
}

#[test]
fn distinct_aggregates_group_the_partial_rows_by_their_column() {
    let r = plan("SELECT note, count(DISTINCT tenant), sum(DISTINCT tenant), count(*) FROM events GROUP BY note").unwrap();
    assert_eq!(columns(&r), [3, 1], "{}", r.sql);
    assert_eq!(r.partials.len(), 1);
    assert!(r.sql.contains("count(DISTINCT tenant)"), "{}", r.sql);
    assert!(r.sql.contains("GROUP BY note"), "{}", r.sql);
    let r = plan("SELECT count(DISTINCT note), string_agg(DISTINCT note, ',' ORDER BY note), array_agg(DISTINCT ok) FROM events").unwrap();
    assert_eq!(columns(&r), [3, 4], "{}", r.sql);
    assert!(r.partials.is_empty());
    assert!(pg_query::parse(&r.sql, 0).is_ok(), "{}", r.sql);
    assert_eq!(
        r.distinct_sets, 0,
        "array_agg counts NULLs: every combination"
    );
    // Several DISTINCT columns whose aggregates ignore NULLs: a grouping set per column,
    // the partials in the first set's rows only.
    let r = plan("SELECT ok, count(DISTINCT tenant), count(DISTINCT note), count(*), max(tenant) FROM events GROUP BY ok").unwrap();
    assert_eq!(columns(&r), [4, 1, 3], "{}", r.sql);
    assert_eq!(r.distinct_sets, 2);
    assert_eq!(
        r.sql.matches(r#"GROUP BY GROUPING SETS (("events"."ok", "events"."tenant"), ("events"."ok", "events"."note"))"#).count(),
        2,
        "{}",
        r.sql
    );
    assert!(
        r.sql
            .contains(r#"CASE WHEN GROUPING("events"."tenant") = 0 THEN count(*) END"#),
        "{}",
        r.sql
    );
    assert!(pg_query::parse(&r.sql, 0).is_ok(), "{}", r.sql);
    let r = plan("SELECT count(DISTINCT tenant), sum(DISTINCT tenant) FROM events").unwrap();
    assert_eq!(r.distinct_sets, 0, "one column: grouped by it alone");
    // The key itself: one partial row per cold row, still exact.
    assert_eq!(
        columns(&plan("SELECT count(DISTINCT id) FROM events").unwrap()),
        [0]
    );
}

#[test]
fn date_trunc_groups_by_the_truncated_column() {
    for sql in [
        "SELECT date_trunc('day', at), count(*), min(at) FROM events GROUP BY 1 ORDER BY 1",
        "SELECT date_trunc('DAY', at) AS d, count(*) FROM events GROUP BY d",
        "SELECT date_trunc('day', e.at), count(*) FROM events e GROUP BY date_trunc('day', e.at)",
        "SELECT tenant, pg_catalog.date_trunc('day', at), sum(tenant) FROM events GROUP BY 1, 2",
    ] {
        let r = plan(sql).unwrap_or_else(|| panic!("{sql}"));
        let truncated: Vec<_> = r.group.iter().filter(|g| g.trunc.is_some()).collect();
        assert_eq!(truncated.len(), 1, "{sql}");
        assert_eq!(truncated[0].column, 5, "{sql}");
        assert_eq!(truncated[0].trunc, Some(TruncUnit::Day), "{sql}");
        assert!(r.needs_utc, "{sql}");
        assert!(r.sql.contains("date_trunc('day', "), "{}", r.sql);
        assert!(pg_query::parse(&r.sql, 0).is_ok(), "{}", r.sql);
    }
    assert!(
        !plan("SELECT tenant, count(*) FROM events GROUP BY 1")
            .unwrap()
            .needs_utc
    );
}

#[test]
fn filters_travel_with_their_partials() {
    let r = plan("SELECT count(*) FILTER (WHERE tenant = 3), count(*), sum(id) FILTER (WHERE note = 'a' AND id > 5), max(id) FILTER (WHERE ok) FROM events").unwrap();
    let filters: Vec<Option<usize>> = r.partials.iter().map(|p| p.filter).collect();
    assert_eq!(
        filters,
        [Some(0), None, Some(1), Some(2)],
        "{:?}",
        r.partials
    );
    assert_eq!(r.filters[0].exact, Some(1));
    assert_eq!(r.filters[1].exact, Some(2));
    // A bool column alone is `ok = true`.
    assert_eq!(r.filters[2].exact, Some(1));
    assert!(
        r.sql
            .contains("count(*) FILTER (WHERE tenant = 3) AS _cw_p0"),
        "{}",
        r.sql
    );
    assert!(
        r.sql.contains(
            "(sum(\"events\".\"id\") FILTER (WHERE note = 'a' AND id > 5))::numeric AS _cw_p2"
        ),
        "{}",
        r.sql
    );
    assert!(pg_query::parse(&r.sql, 0).is_ok(), "{}", r.sql);
}

#[test]
fn order_by_an_output_name_sorts_by_its_target() {
    for sql in [
        "SELECT date_trunc('day', at) AS day, count(*) AS n FROM events GROUP BY day ORDER BY day",
        "SELECT tenant AS t, count(*) FROM events GROUP BY t ORDER BY count DESC, t LIMIT 5",
        "SELECT date_trunc('day', at) AS day, count(*) FROM events GROUP BY 1 ORDER BY day DESC",
    ] {
        let r = plan(sql).unwrap_or_else(|| panic!("{sql}"));
        assert!(pg_query::parse(&r.sql, 0).is_ok(), "{}", r.sql);
    }
    // A name that is no output column still has to be a group column.
    assert!(plan("SELECT tenant, count(*) FROM events GROUP BY tenant ORDER BY note").is_none());
}

#[test]
fn joins_with_plain_tables_carry_the_columns_read_outside_aggregates() {
    let r = plan("SELECT tn.region, count(*), sum(e.amount) FROM events e JOIN tenants tn ON tn.id = e.tenant WHERE e.id > 5 AND tn.plan = 'pro' AND e.note <> tn.name GROUP BY 1 ORDER BY 1").unwrap();
    // The join key and the column compared with the other table: the rest is partials.
    assert_eq!(columns(&r), [1, 3], "{}", r.sql);
    assert!(r.exact_where, "{}", r.sql);
    assert_eq!(r.where_predicates, 1);
    assert!(
        r.sql.contains(") e JOIN tenants tn ON tn.id = e.tenant WHERE tn.plan = 'pro' AND e.note <> tn.name GROUP BY 1"),
        "{}",
        r.sql
    );
    assert!(
        r.sql
            .contains("WHERE (SELECT ok FROM _cw_guard) AND (e.id > 5) GROUP BY"),
        "{}",
        r.sql
    );
    assert!(pg_query::parse(&r.sql, 0).is_ok(), "{}", r.sql);
    // A FROM list, the table on either side, date_trunc of a carried column.
    for sql in [
        "SELECT count(*) FROM tenants tn, events e WHERE tn.id = e.tenant",
        "SELECT date_trunc('day', e.at), max(e.tenant) FROM tenants JOIN events e ON tenants.id = e.tenant CROSS JOIN regions GROUP BY 1",
        "SELECT tn.region FROM events e JOIN tenants tn ON tn.id = e.tenant GROUP BY tn.region",
        "SELECT count(DISTINCT e.note), count(DISTINCT e.ok) FROM events e JOIN tenants tn ON tn.id = e.tenant",
    ] {
        let r = plan(sql).unwrap_or_else(|| panic!("{sql}"));
        assert!(pg_query::parse(&r.sql, 0).is_ok(), "{}", r.sql);
    }
    // What the partial rows could not answer: rows.
    for sql in [
        "SELECT count(*) FROM events e LEFT JOIN tenants tn ON tn.id = e.tenant",
        "SELECT count(*) FROM events e JOIN tenants tn USING (tenant)",
        "SELECT count(*) FROM events e NATURAL JOIN tenants",
        "SELECT count(*) FROM events e JOIN tenants tn ON tn.id = tenant",
        "SELECT sum(tn.fee) FROM events e JOIN tenants tn ON tn.id = e.tenant",
        "SELECT count(*) FILTER (WHERE tn.plan = 'pro') FROM events e JOIN tenants tn ON tn.id = e.tenant",
        "SELECT count(e.*) FROM events e JOIN tenants tn ON tn.id = e.tenant",
        "SELECT row_to_json(e), count(*) FROM events e JOIN tenants tn ON tn.id = e.tenant GROUP BY 1",
        "SELECT tn.region, e.note FROM events e JOIN tenants tn ON tn.id = e.tenant",
        "SELECT count(*) FROM events e JOIN events f ON f.id = e.id",
        "SELECT count(*) FROM events e JOIN (SELECT 1 AS id) s ON s.id = e.tenant",
        "SELECT count(DISTINCT tn.region) FROM events e JOIN tenants tn ON tn.id = e.tenant",
        // Nothing of the tiered table read outside aggregates: no partial row may stand
        // for no rows.
        "SELECT d.region, count(*) FROM events e JOIN dims d ON d.tenant = 1 WHERE e.tenant = 1 GROUP BY d.region",
        "SELECT d.region FROM events e, dims d WHERE e.tenant = 1 GROUP BY d.region",
        // Grouped by the key, other columns may depend on it.
        "SELECT e.id, e.note, count(*) FROM events e JOIN tags t ON t.event_id = e.id GROUP BY e.id",
    ] {
        assert!(plan(sql).is_none(), "{sql}");
    }
}
