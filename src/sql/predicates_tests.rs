use super::*;
use crate::values::NumericRepr;

fn located(sql: &str, name: &str, nth: usize) -> Vec<ColumnPredicate> {
    let parsed = pg_query::parse(sql, 0).unwrap();
    let mut locations: Vec<i32> = parsed
        .protobuf
        .nodes()
        .into_iter()
        .filter_map(|(n, ..)| match n {
            NodeRef::RangeVar(rv) if rv.relname == "events" => Some(rv.location),
            _ => None,
        })
        .collect();
    locations.sort_unstable();
    extract(&parsed, locations[nth], name)
}

fn p(column: &str, comparison: Comparison) -> ColumnPredicate {
    ColumnPredicate {
        column: column.into(),
        comparison,
    }
}

#[test]
fn top_level_conjuncts_on_the_only_relation() {
    let got = located(
        "SELECT * FROM events WHERE id = 5 AND 10 > id AND kind IN ('a', 'b') AND at IS NULL AND id BETWEEN 1 AND 9 AND (id = 1 OR id = 2)",
        "events",
        0,
    );
    assert_eq!(
        got,
        vec![
            p("id", Comparison::Eq(Constant::Int(5))),
            p("id", Comparison::Below(Constant::Int(10), false)),
            p(
                "kind",
                Comparison::In(vec![Constant::Text("a".into()), Constant::Text("b".into())])
            ),
            p("at", Comparison::IsNull),
            p("id", Comparison::Above(Constant::Int(1), true)),
            p("id", Comparison::Below(Constant::Int(9), true)),
            p(
                "",
                Comparison::Any(vec![
                    vec![p("id", Comparison::Eq(Constant::Int(1)))],
                    vec![p("id", Comparison::Eq(Constant::Int(2)))],
                ])
            ),
        ]
    );
}

/// The conjuncts of the WHERE of `sql` (a SELECT from `events` alone), as text, and
/// whether they say all of it.
fn read_where(sql: &str) -> (String, bool) {
    let parsed = pg_query::parse(sql, 0).unwrap();
    let Some(pg_query::NodeRef::SelectStmt(select)) =
        parsed.protobuf.nodes().into_iter().map(|n| n.0).next()
    else {
        panic!("{sql}");
    };
    let (found, complete) =
        super::complete_conjuncts_of(select.where_clause.as_deref().unwrap(), "events", true);
    let text: Vec<String> = found.iter().map(ToString::to_string).collect();
    (text.join(" AND "), complete)
}

#[test]
fn or_not_and_booleans_become_conditions_and_the_rest_is_told() {
    for (condition, expected, complete) in [
        ("a = 1 OR b > 2", "(a = 1 OR b > 2)", true),
        (
            "a = 1 OR (b > 2 AND c IS NULL)",
            "(a = 1 OR (b > 2 AND c IS NULL))",
            true,
        ),
        ("NOT (a < 5)", "a >= 5", true),
        ("NOT (5 < a)", "a <= 5", true),
        ("NOT (a = 1 OR b = 2)", "a <> 1 AND b <> 2", true),
        ("NOT (a = 1 AND b <= 2)", "(a <> 1 OR b > 2)", true),
        ("NOT NOT a = 3", "a = 3", true),
        ("a <> 3 AND b != 'x'", "a <> 3 AND b <> 'x'", true),
        ("a NOT BETWEEN 1 AND 9", "(a < 1 OR a > 9)", true),
        ("NOT (a NOT BETWEEN 1 AND 9)", "a >= 1 AND a <= 9", true),
        ("NOT (a BETWEEN 1 AND 9)", "(a < 1 OR a > 9)", true),
        ("flag AND NOT other", "flag = true AND other = false", true),
        (
            "flag IS TRUE AND other IS NOT FALSE",
            "flag = true AND (other = true OR other IS NULL)",
            true,
        ),
        ("NOT (a IS NULL)", "a IS NOT NULL", true),
        ("flag = false", "flag = false", true),
        // Parts that say nothing: the rest stays, marked incomplete.
        ("a = 1 AND b LIKE 'x%'", "a = 1", false),
        ("a = 1 OR b LIKE 'x%'", "", false),
        (
            "(a = 1 AND b LIKE 'x%') OR c = 2",
            "(a = 1 OR c = 2)",
            false,
        ),
        ("NOT (a IN (1, 2))", "a <> 1 AND a <> 2", true),
        (
            "a NOT IN ('x') AND NOT b NOT IN (3)",
            "a <> 'x' AND b IN (3)",
            true,
        ),
        ("a NOT IN (1, NULL)", "", false),
        ("a = b", "", false),
    ] {
        let got = read_where(&format!("SELECT 1 FROM events WHERE {condition}"));
        assert_eq!(got, (expected.to_owned(), complete), "{condition}");
    }
}

#[test]
fn sums_of_parameters_and_integers_are_bounds_too() {
    let got = located(
        "SELECT * FROM events WHERE id BETWEEN $1 AND $1 + 99 AND id > 7 - 2 AND id < 1 + $2",
        "events",
        0,
    );
    let sum = |x: Constant, k| Constant::Sum(Box::new(x), k);
    assert_eq!(
        got,
        vec![
            p("id", Comparison::Above(Constant::Param(1), true)),
            p("id", Comparison::Below(sum(Constant::Param(1), 99), true)),
            p("id", Comparison::Above(sum(Constant::Int(7), -2), false)),
            p("id", Comparison::Below(sum(Constant::Param(2), 1), false)),
        ]
    );
    let columns = vec![SegmentColumn {
        name: "id".into(),
        attnum: 1,
        ty: ColdType::Scalar(ScalarType::Int8),
        byte_ordered: false,
        nondeterministic: false,
    }];
    let ten = 10i64.to_be_bytes();
    let params = BoundParams {
        values: vec![Some(&ten[..])],
        binary: vec![true],
        declared: vec![],
        settings: crate::sql::params::Settings {
            utf8: true,
            utc: false,
        },
    };
    assert_eq!(
        to_prune(&got[..2], &columns, &params),
        vec![
            Predicate::Above(1, ordered::int(10).to_vec(), true),
            Predicate::Below(1, ordered::int(109).to_vec(), true)
        ]
    );
    assert_eq!(got[1].to_string(), "id <= $1 + 99");
}

#[test]
fn joins_need_qualified_columns_and_outer_joins_give_nothing() {
    let sql =
        "SELECT * FROM events e JOIN other o ON o.id = e.id WHERE e.id = 3 AND id = 4 AND o.x = 1";
    assert_eq!(
        located(sql, "e", 0),
        vec![p("id", Comparison::Eq(Constant::Int(3)))]
    );
    let sql = "SELECT * FROM other o LEFT JOIN events e ON o.id = e.id WHERE e.kind IS NULL";
    assert!(located(sql, "e", 0).is_empty());
    let sql = "SELECT * FROM events e LEFT JOIN other o ON o.id = e.id WHERE e.id = 3";
    assert_eq!(
        located(sql, "e", 0),
        vec![p("id", Comparison::Eq(Constant::Int(3)))]
    );
}

#[test]
fn subqueries_have_their_own_where() {
    let sql = "SELECT * FROM other WHERE id IN (SELECT id FROM events WHERE id = 7) AND id = 8";
    assert_eq!(
        located(sql, "events", 0),
        vec![p("id", Comparison::Eq(Constant::Int(7)))]
    );
}

#[test]
fn only_encodable_constants_become_prune_predicates() {
    let columns = vec![
        SegmentColumn {
            name: "id".into(),
            attnum: 1,
            ty: ColdType::Scalar(ScalarType::Int8),
            byte_ordered: false,
            nondeterministic: false,
        },
        SegmentColumn {
            name: "kind".into(),
            attnum: 2,
            ty: ColdType::Scalar(ScalarType::Text(TextKind::Text)),
            byte_ordered: false,
            nondeterministic: false,
        },
        SegmentColumn {
            name: "at".into(),
            attnum: 3,
            ty: ColdType::Scalar(ScalarType::Timestamptz),
            byte_ordered: false,
            nondeterministic: false,
        },
    ];
    let got = to_prune(
        &[
            p("id", Comparison::Eq(Constant::Text("42".into()))),
            p("kind", Comparison::Below(Constant::Text("m".into()), false)),
            p("kind", Comparison::Eq(Constant::Text("m".into()))),
            p("at", Comparison::Eq(Constant::Text("2026-01-01".into()))),
            p("at", Comparison::IsNotNull),
            p("missing", Comparison::IsNull),
        ],
        &columns,
        &BoundParams::none(),
    );
    assert_eq!(
        got,
        vec![
            Predicate::Eq(1, ordered::int(42).to_vec()),
            Predicate::Eq(2, b"m".to_vec()),
            Predicate::IsNotNull(3)
        ]
    );
    // Under the C collation text is ordered as its bytes: ranges become predicates.
    let mut c = columns.clone();
    c[1].byte_ordered = true;
    let got = to_prune(
        &[p(
            "kind",
            Comparison::Below(Constant::Text("m".into()), false),
        )],
        &c,
        &BoundParams::none(),
    );
    assert_eq!(got, vec![Predicate::Below(2, b"m".to_vec(), false)]);
}

#[test]
fn float8_constants_read_as_postgres_reads_them() {
    use crate::values::ordered::float;
    let f = |c: Constant| float8_constant(&c);
    assert_eq!(f(Constant::Int(10)), Some(10.0));
    assert_eq!(f(Constant::Decimal("10.5".into())), Some(10.5));
    assert_eq!(f(Constant::Decimal("1e3".into())), Some(1000.0));
    assert_eq!(f(Constant::Text(" -0.125 ".into())), Some(-0.125));
    assert_eq!(
        f(Constant::Text("-Infinity".into())),
        Some(f64::NEG_INFINITY)
    );
    assert_eq!(f(Constant::Text("inf".into())), Some(f64::INFINITY));
    assert_eq!(f(Constant::Float(2.5f64.to_bits())), Some(2.5));
    // No encoding, or a reading that could differ, or a literal Postgres refuses.
    for text in ["NaN", "0x1p3", "1e400", "1e-400", "", "1,5", "ten"] {
        assert_eq!(f(Constant::Text(text.into())), None, "{text}");
    }
    assert_eq!(f(Constant::Float(f64::NAN.to_bits())), None);
    assert_eq!(f(Constant::Text("0e5".into())), Some(0.0));
    // -0 and 0 are one value.
    assert_eq!(
        encode(ScalarType::Float8, &Constant::Text("-0".into()), true),
        float(0.0).map(|b| b.to_vec())
    );
}

#[test]
fn numeric_constants_compare_at_the_columns_scale() {
    use crate::values::numeric::Special;
    let columns = vec![SegmentColumn {
        name: "price".into(),
        attnum: 4,
        ty: ColdType::Scalar(ScalarType::Numeric(NumericRepr::Decimal {
            precision: 10,
            scale: 2,
        })),
        byte_ordered: false,
        nondeterministic: false,
    }];
    let at = |v: i128| ordered::decimal(v).to_vec();
    let nan = ordered::numeric_special(Special::NaN).to_vec();
    let dec = |t: &str| Constant::Decimal(t.into());
    let one = |c: Comparison| to_prune(&[p("price", c)], &columns, &BoundParams::none());
    // Exact at the scale: as written.
    assert_eq!(
        one(Comparison::Below(dec("1.5"), false)),
        vec![Predicate::Below(4, at(150), false)]
    );
    assert_eq!(
        one(Comparison::Eq(Constant::Int(7))),
        vec![Predicate::Eq(4, at(700))]
    );
    // Between two values of the scale: the nearer one on the comparison's side.
    assert_eq!(
        one(Comparison::Below(dec("1.005"), false)),
        vec![Predicate::Below(4, at(100), true)]
    );
    assert_eq!(
        one(Comparison::Above(dec("-1.005"), true)),
        vec![Predicate::Above(4, at(-100), true)]
    );
    assert_eq!(
        one(Comparison::Eq(dec("1.005"))),
        vec![Predicate::In(4, Vec::new())]
    );
    assert_eq!(
        one(Comparison::NotEq(dec("1.005"))),
        vec![Predicate::IsNotNull(4)]
    );
    assert_eq!(
        one(Comparison::In(vec![
            dec("1.5"),
            Constant::Text("NaN".into()),
            dec("2.001")
        ])),
        vec![Predicate::In(4, vec![at(150), nan.clone()])]
    );
    // Specials where numeric orders them; a float8 parameter is not a numeric one.
    assert_eq!(
        one(Comparison::Above(Constant::Text("Infinity".into()), true)),
        vec![Predicate::Above(
            4,
            ordered::numeric_special(Special::PosInf).to_vec(),
            true
        )]
    );
    assert!(one(Comparison::Eq(Constant::Float(1.5f64.to_bits()))).is_empty());
    assert!(one(Comparison::Eq(Constant::Text("1_000".into()))).is_empty());
    // Under an integer cast only integers are the value: '7.6'::numeric::int is 8.
    let cast = |sql: &str| {
        let parsed = pg_query::parse(&format!("SELECT {sql}"), 0).unwrap();
        let stmt = parsed.protobuf.stmts[0].stmt.clone().unwrap();
        let Some(N::SelectStmt(select)) = stmt.node else {
            panic!()
        };
        let Some(N::ResTarget(t)) = select.target_list[0].node.clone() else {
            panic!()
        };
        constant(&t.val.unwrap())
    };
    assert_eq!(cast("'7.6'::numeric::int"), None);
    assert_eq!(cast("'7'::numeric::int8"), Some(Constant::Int(7)));
    assert_eq!(cast("7.6::int"), None);
    assert_eq!(
        cast("$1::int"),
        Some(Constant::Sum(Box::new(Constant::Param(1)), 0))
    );
    let params = BoundParams {
        values: vec![Some(&b"7.6"[..])],
        binary: vec![false],
        declared: vec![1700],
        settings: crate::sql::params::Settings {
            utf8: true,
            utc: false,
        },
    };
    let as_int = p(
        "price",
        Comparison::Below(Constant::Sum(Box::new(Constant::Param(1)), 0), false),
    );
    assert!(to_prune(&[as_int], &columns, &params).is_empty());
    // The order the encodings give: -Infinity < finite < Infinity < NaN.
    let order = [
        ordered::numeric_special(Special::NegInf).to_vec(),
        at(-9_999_999_999),
        at(0),
        at(9_999_999_999),
        ordered::numeric_special(Special::PosInf).to_vec(),
        nan,
    ];
    assert!(order.windows(2).all(|w| w[0] < w[1]));
}
