use super::*;

fn parse(sql: &str) -> Result<Option<CopyTo>, CopyError> {
    match copy_to(sql, &pg_query::parse(sql, 0).unwrap()) {
        None => Ok(None),
        Some(c) => match c.options.clone() {
            Ok(_) => Ok(Some(c)),
            Err(e) => Err(e),
        },
    }
}
fn opts(sql: &str) -> CopyOptions {
    parse(sql).unwrap().unwrap().options.unwrap()
}

#[test]
fn statements_become_queries_and_options_get_defaults() {
    let c = parse("COPY public.t (a, \"B\") TO STDOUT WITH (FORMAT csv, HEADER, FORCE_QUOTE *)")
        .unwrap()
        .unwrap();
    assert_eq!(c.select_sql(), r#"SELECT "a", "B" FROM "public"."t""#);
    let o = c.options.unwrap();
    assert_eq!(o.delimiter, b',');
    assert!(o.header && o.null.is_empty());
    assert_eq!(o.force_quote, ForceQuote::All);
    let c = parse("COPY (SELECT 1 FROM t WHERE (a) > 0) TO STDOUT BINARY")
        .unwrap()
        .unwrap();
    assert_eq!(
        c.source,
        CopySource::Query("SELECT 1 FROM t WHERE (a) > 0".into())
    );
    assert_eq!(c.options.unwrap().format, CopyFormat::Binary);
    // Comments before or inside, and a `;` before the statement.
    for sql in [
        "/* tool */ COPY (SELECT 1 FROM t) TO STDOUT",
        "-- tag\nCOPY /* q */ (SELECT 1 FROM t) TO STDOUT",
        ";COPY (SELECT 1 FROM t) TO STDOUT",
    ] {
        assert_eq!(
            parse(sql).unwrap().unwrap().source,
            CopySource::Query("SELECT 1 FROM t".into()),
            "{sql}"
        );
    }
    assert!(parse("COPY t TO '/tmp/x'").unwrap().unwrap().to_server);
    assert_eq!(parse("COPY t FROM STDIN").unwrap(), None);
    assert_eq!(parse("SELECT 1").unwrap(), None);
}

#[test]
fn bad_options_are_refused_like_postgres() {
    for (sql, code) in [
        ("COPY t TO STDOUT (FORMAT binary, HEADER)", "42601"),
        ("COPY t TO STDOUT (QUOTE '''')", "0A000"),
        ("COPY t TO STDOUT (DELIMITER 'ab')", "0A000"),
        ("COPY t TO STDOUT (FORMAT csv, DELIMITER '\"')", "22023"),
        ("COPY t TO STDOUT (FORCE_NULL (a))", "0A000"),
        ("COPY t TO STDOUT (ENCODING 'LATIN1')", "0A000"),
        ("COPY t TO STDOUT (BOGUS 1)", "42601"),
        ("COPY t TO STDOUT (HEADER match)", "0A000"),
    ] {
        assert_eq!(parse(sql).unwrap_err().code, code, "{sql}");
    }
    assert!(parse("COPY t TO STDOUT (ENCODING 'utf-8')").is_ok());
}

fn lines(options: &CopyOptions, columns: &[&str], rows: &[Vec<Option<&str>>]) -> Vec<u8> {
    let names: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
    let mut e = CopyEncoder::new(options, &names).unwrap();
    let mut out = BytesMut::new();
    e.start(&names, &mut out);
    for r in rows {
        let values: Vec<Option<Vec<u8>>> =
            r.iter().map(|v| v.map(|s| s.as_bytes().to_vec())).collect();
        e.row(&values, &mut out);
    }
    e.finish(&mut out);
    // Concatenate the CopyData payloads.
    let mut data = Vec::new();
    let mut rest = &out[..];
    while !rest.is_empty() {
        let len = u32::from_be_bytes(rest[1..5].try_into().unwrap()) as usize;
        if rest[0] == b'd' {
            data.extend_from_slice(&rest[5..len + 1]);
        }
        rest = &rest[len + 1..];
    }
    data
}

#[test]
fn text_rows_escape_like_copy() {
    let o = opts("COPY t TO STDOUT (HEADER)");
    let got = lines(&o, &["a", "b\tc"], &[vec![Some("x\\y\n\tz\x01"), None]]);
    assert_eq!(got, b"a\tb\\tc\nx\\\\y\\n\\tz\x01\t\\N\n");
}

#[test]
fn csv_rows_quote_like_copy() {
    let o = opts("COPY t TO STDOUT (FORMAT csv, FORCE_QUOTE (b))");
    let got = lines(
        &o,
        &["a", "b"],
        &[
            vec![Some("plain"), Some("forced")],
            vec![Some("a,b \"q\""), None],
            vec![Some(""), Some("x\ny")],
        ],
    );
    assert_eq!(
        got,
        b"plain,\"forced\"\n\"a,b \"\"q\"\"\",\n\"\",\"x\ny\"\n"
    );
    let o = opts("COPY t TO STDOUT (FORMAT csv)");
    assert_eq!(lines(&o, &["a"], &[vec![Some("\\.")]]), b"\"\\.\"\n");
}

#[test]
fn binary_rows_are_wrapped_in_header_and_trailer() {
    let o = opts("COPY t TO STDOUT (FORMAT binary)");
    let got = lines(&o, &["a"], &[vec![Some("\x00\x00\x00\x07")], vec![None]]);
    let mut expected = BINARY_SIGNATURE.to_vec();
    expected.extend_from_slice(&[0; 8]);
    expected.extend_from_slice(&[0, 1, 0, 0, 0, 4, 0, 0, 0, 7]);
    expected.extend_from_slice(&[0, 1, 255, 255, 255, 255]);
    expected.extend_from_slice(&[255, 255]);
    assert_eq!(got, expected);
}
