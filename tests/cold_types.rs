//! Cold values against a real Postgres: every supported type (and a 1-D array of each), rows
//! of edge values, binary COPY out → Arrow batches of 7 rows → Parquet (zstd) in memory →
//! Arrow → binary COPY in, and the copy must be byte-identical to the original, in binary
//! COPY and in text. Unsupported types are refused with the type named.

mod common;

use std::error::Error as _;

use arrow::array::AsArray;
use arrow::datatypes::Float64Type;
use arrow::record_batch::RecordBatch;
use bytes::{Bytes, BytesMut};
use coldwire::values::{
    encode_batch, encode_header, encode_trailer, encode_value, ColdColumn, ColdError, ColdType,
    ColumnEncoder, CopyDecoder, ValueError,
};
use common::RawBinary;
use futures_util::{pin_mut, SinkExt, StreamExt};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, DecimalType, LogicalType, TimestampType, ZstdLevel};
use parquet::file::properties::WriterProperties;
use tokio_postgres::types::Type;
use tokio_postgres::Client;

const BATCH_ROWS: usize = 7;
const ROWS: usize = 30;

/// (column suffix, SQL type, edge values as SQL expressions).
fn columns() -> Vec<(&'static str, &'static str, Vec<String>)> {
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    vec![
        ("int2", "int2", s(&["0", "-32768", "32767", "1", "-1"])),
        ("int4", "int4", s(&["-2147483648", "2147483647", "0", "42"])),
        (
            "int8",
            "int8",
            s(&["'-9223372036854775808'", "'9223372036854775807'", "0", "-7"]),
        ),
        (
            "float4",
            "float4",
            s(&[
                "'NaN'",
                "'Infinity'",
                "'-Infinity'",
                "'-0'",
                "'0'",
                "'1.4e-45'",
                "'3.4028235e38'",
                "'-1.17549435e-38'",
                "'0.1'",
                "-('NaN'::float4)",
            ]),
        ),
        (
            "float8",
            "float8",
            s(&[
                "'NaN'",
                "'Infinity'",
                "'-Infinity'",
                "'-0'",
                "'5e-324'",
                "'1.7976931348623157e308'",
                "'0.1'",
                "'-2.2250738585072014e-308'",
                "-('NaN'::float8)",
            ]),
        ),
        (
            "num38",
            "numeric(38,10)",
            s(&[
                "'9999999999999999999999999999.9999999999'",
                "'-9999999999999999999999999999.9999999999'",
                "'0'",
                "'NaN'",
                "'0.0000000001'",
                "'-0.0000000001'",
                "'12345.6789'",
                "1::numeric / 3",
            ]),
        ),
        (
            "num5",
            "numeric(5,2)",
            s(&["'999.99'", "'-999.99'", "'0'", "'0.01'", "'NaN'", "'1.5'"]),
        ),
        (
            "numfree",
            "numeric",
            s(&[
                "repeat('9', 1000)",
                "'-' || repeat('9', 999) || '.' || repeat('0', 999) || '1'",
                "'1.500'",
                "'0.000'",
                "'NaN'",
                "'Infinity'",
                "'-Infinity'",
                "'1e-100'",
                "'-0.5'",
                "'123456789012345678901234567890.123456789'",
                "1::numeric / 3",
                "sqrt(2::numeric)",
                "exp(1::numeric)",
                "ln(10::numeric)",
                "power(2::numeric, 100)",
                "round(123.456, -1)",
                "'2.5e20'",
                "SELECT avg(x) FROM (VALUES (1.10), (2.205), (7)) v(x)",
            ]),
        ),
        (
            "num50",
            "numeric(50,5)",
            s(&[
                "'123456789012345678901234567890123456789012345.12345'",
                "'NaN'",
                "'-1.5'",
                "'0'",
            ]),
        ),
        (
            "text",
            "text",
            s(&[
                "''",
                "'héllo wörld'",
                "'日本語テキスト'",
                "'🦀🎉👩‍👩‍👧'",
                r"E'tab\there\nnewline\\backslash'",
                "'a''quote'",
                "repeat('x', 10000)",
            ]),
        ),
        (
            "varchar",
            "varchar(20)",
            s(&["''", "'ünïcödé'", "'🦀'", "'trailing   '"]),
        ),
        (
            "bpchar",
            "char(10)",
            s(&["'ab'", "''", "'🦀'", "'abcdefghij'", "'x  '"]),
        ),
        ("bool", "bool", s(&["true", "false"])),
        (
            "bytea",
            "bytea",
            s(&[
                r"'\x'",
                r"'\x00ff10'",
                r"'\xdeadbeef00'",
                "decode(repeat('ab', 5000), 'hex')",
            ]),
        ),
        (
            "date",
            "date",
            s(&[
                "'infinity'",
                "'-infinity'",
                "'4714-11-24 BC'",
                "'5874897-12-31'",
                "'2000-01-01'",
                "'1970-01-01'",
                "'1999-12-31'",
            ]),
        ),
        (
            "time",
            "time",
            s(&[
                "'00:00'",
                "'24:00:00'",
                "'23:59:59.999999'",
                "'12:34:56.789'",
            ]),
        ),
        (
            "ts",
            "timestamp",
            s(&[
                "'infinity'",
                "'-infinity'",
                "'4714-11-24 00:00:00 BC'",
                "'294247-01-10 04:00:54.775806'",
                "'2000-01-01'",
                "'1970-01-01 00:00:00.000001'",
                "'1969-12-31 23:59:59.999999'",
            ]),
        ),
        (
            "tstz",
            "timestamptz",
            s(&[
                "'infinity'",
                "'-infinity'",
                "'4714-11-24 00:00:00+00 BC'",
                "'294247-01-10 04:00:54.775806+00'",
                "'2000-01-01 00:00:00+00'",
                "'2024-02-29 12:00:00.123456+05:30'",
            ]),
        ),
        (
            "interval",
            "interval",
            s(&[
                "'0'",
                "'1 microsecond'",
                "'-1 microsecond'",
                "'178000000 years'",
                "'-178000000 years'",
                "'2147483647 days'",
                "'-2147483648 days'",
                "'2562047788:00:54.775807'",
                "'-2562047788:00:54.775807'",
                "'1 year 2 mons -3 days 04:05:06.789'",
            ]),
        ),
        (
            "uuid",
            "uuid",
            s(&[
                "'00000000-0000-0000-0000-000000000000'",
                "'ffffffff-ffff-ffff-ffff-ffffffffffff'",
                "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
            ]),
        ),
        (
            "json",
            "json",
            s(&[
                r#"'{"a":1, "a":2}'"#,
                r#"'  {"b" : [1, 2 ,3] }  '"#,
                r#"'"🦀"'"#,
                "'null'",
                "'[]'",
                "'1.000'",
                r#"'{"k": "\u00e9"}'"#,
            ]),
        ),
        (
            "jsonb",
            "jsonb",
            s(&[
                r#"'{"b":2,"a":[1,{"c":null}]}'"#,
                r#"'"str"'"#,
                "'null'",
                "'1.000'",
                r#"'{"a":1, "a":2}'"#,
                "'[]'",
                r#"'{"🦀": "é"}'"#,
            ]),
        ),
    ]
}

/// CREATE TABLE with `id`, then `s_<name>` and `a_<name>` (its array) per type.
fn create_table(name: &str) -> String {
    let cols: Vec<String> = columns()
        .iter()
        .flat_map(|(n, ty, _)| [format!("s_{n} {ty}"), format!("a_{n} {ty}[]")])
        .collect();
    format!(
        "CREATE TABLE {name} (id int PRIMARY KEY, {})",
        cols.join(", ")
    )
}

/// Row `r` (1-based): value r of each list (cycling); arrays mix values, NULL elements,
/// empty arrays and NULL; the last row is all NULL.
fn insert_rows(table: &str) -> String {
    let mut rows = Vec::new();
    for r in 1..=ROWS {
        let mut values = vec![r.to_string()];
        for (_, ty, edge) in columns() {
            if r == ROWS {
                values.push("NULL".into());
                values.push("NULL".into());
                continue;
            }
            let v = |k: usize| format!("({})::{ty}", edge[k % edge.len()]);
            values.push(v(r));
            values.push(match r % 4 {
                0 => format!("'{{}}'::{ty}[]"),
                1 => format!("ARRAY[{}, NULL, {}]", v(r), v(r + 1)),
                2 => format!(
                    "ARRAY[{}]",
                    (0..edge.len()).map(v).collect::<Vec<_>>().join(", ")
                ),
                _ => {
                    if r % 8 == 3 {
                        "NULL".into()
                    } else {
                        format!("ARRAY[NULL::{ty}]")
                    }
                }
            });
        }
        rows.push(format!("({})", values.join(", ")));
    }
    format!("INSERT INTO {table} VALUES {}", rows.join(",\n"))
}

async fn cold_columns(
    client: &Client,
    table: &str,
) -> Vec<Result<ColdColumn, coldwire::values::UnsupportedType>> {
    let rows = client
        .query(
            "SELECT attname::text, atttypid::oid, atttypmod, format_type(atttypid, atttypmod) FROM pg_attribute \
             WHERE attrelid = $1::text::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            &[&table],
        )
        .await
        .unwrap();
    rows.iter()
        .map(|r| {
            let name: String = r.get(0);
            let oid: u32 = r.get(1);
            let typmod: i32 = r.get(2);
            let type_name: String = r.get(3);
            ColdType::for_column(oid, typmod)
                .map(|ty| ColdColumn::new(name, ty))
                .map_err(|e| e.with_type_name(type_name))
        })
        .collect()
}

async fn copy_out(client: &Client, sql: &str) -> Vec<Bytes> {
    let stream = client.copy_out(sql).await.unwrap();
    pin_mut!(stream);
    let mut chunks = Vec::new();
    while let Some(chunk) = stream.next().await {
        chunks.push(chunk.unwrap());
    }
    chunks
}

/// Decodes `chunks` re-cut into pieces of `piece` bytes, so boundaries fall anywhere.
fn decode(
    columns: &[ColdColumn],
    chunks: &[Bytes],
    piece: usize,
) -> Result<Vec<RecordBatch>, ColdError> {
    let mut decoder = CopyDecoder::new(columns.to_vec(), BATCH_ROWS)?;
    let mut batches = Vec::new();
    let all: Vec<u8> = chunks.concat();
    for part in all.chunks(piece) {
        decoder.decode(part)?;
        batches.extend(std::iter::from_fn(|| decoder.next_batch()));
    }
    decoder.finish()?;
    batches.extend(std::iter::from_fn(|| decoder.next_batch()));
    Ok(batches)
}

/// Writes the batches to an in-memory Parquet file (zstd) and reads them back.
fn parquet_round_trip(
    batches: &[RecordBatch],
) -> (Vec<RecordBatch>, Vec<(String, Option<LogicalType>)>) {
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let mut writer = ArrowWriter::try_new(Vec::new(), batches[0].schema(), Some(props)).unwrap();
    for b in batches {
        writer.write(b).unwrap();
    }
    let file = Bytes::from(writer.into_inner().unwrap());
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .with_batch_size(BATCH_ROWS);
    let logical = builder
        .metadata()
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .map(|c| (c.path().string(), c.logical_type_ref().cloned()))
        .collect();
    let read = builder
        .build()
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    (read, logical)
}

fn encode(columns: &[ColdColumn], batches: &[RecordBatch]) -> Vec<u8> {
    let mut out = BytesMut::new();
    encode_header(&mut out);
    for b in batches {
        encode_batch(columns, b, &mut out).unwrap();
    }
    encode_trailer(&mut out);
    out.to_vec()
}

async fn text_rows(client: &Client, table: &str) -> Vec<Vec<Option<String>>> {
    let messages = client
        .simple_query(&format!("SELECT * FROM {table} ORDER BY id"))
        .await
        .unwrap();
    messages
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect())
            }
            _ => None,
        })
        .collect()
}

/// A value already in Postgres's binary format, bound as a parameter of any type.
#[tokio::test]
async fn every_type_round_trips_byte_identically_through_arrow_and_parquet() {
    let db = common::create_db("cold_types");
    let client = common::connect_direct(&db).await;
    client
        .batch_execute(&format!(
            "{};\n{};\nCREATE TABLE t2 (LIKE t INCLUDING ALL)",
            create_table("t"),
            insert_rows("t")
        ))
        .await
        .unwrap();
    let columns: Vec<ColdColumn> = cold_columns(&client, "t")
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(columns.len(), 1 + 2 * self::columns().len());

    let original = copy_out(
        &client,
        "COPY (SELECT * FROM t ORDER BY id) TO STDOUT (FORMAT binary)",
    )
    .await;
    let original_bytes: Vec<u8> = original.concat();

    // chunk boundaries from Postgres's CopyData messages, and odd re-cuts of the stream
    let batches = decode(&columns, &original, usize::MAX).unwrap();
    for piece in [1, 13, 4096] {
        assert_eq!(
            decode(&columns, &original, piece).unwrap(),
            batches,
            "pieces of {piece} bytes"
        );
    }
    let sizes: Vec<usize> = batches.iter().map(RecordBatch::num_rows).collect();
    assert_eq!(sizes, vec![7, 7, 7, 7, 2]);
    // float NaN keeps its sign bit, -0.0 stays -0.0
    let float8 = columns.iter().position(|c| c.name == "s_float8").unwrap();
    let bits: Vec<u64> = batches
        .iter()
        .flat_map(|b| {
            b.column(float8)
                .as_primitive::<Float64Type>()
                .values()
                .to_vec()
        })
        .map(f64::to_bits)
        .collect();
    assert!(
        bits.iter()
            .any(|b| f64::from_bits(*b).is_nan() && b >> 63 == 1),
        "a negative NaN"
    );
    assert!(bits.contains(&(-0.0_f64).to_bits()));
    // Arrow → binary COPY alone is already byte-identical
    assert_eq!(encode(&columns, &batches), original_bytes);

    // Parquet (zstd) in memory and back; the standard logical types are written
    let (read, logical) = parquet_round_trip(&batches);
    assert_eq!(read.iter().map(RecordBatch::num_rows).sum::<usize>(), ROWS);
    let logical_of = |path: &str| {
        logical
            .iter()
            .find(|(p, _)| p == path)
            .and_then(|(_, l)| l.clone())
    };
    assert_eq!(logical_of("s_uuid"), Some(LogicalType::Uuid));
    assert_eq!(logical_of("s_json"), Some(LogicalType::Json));
    assert_eq!(logical_of("s_jsonb"), Some(LogicalType::Json));
    assert_eq!(
        logical_of("s_num38.value"),
        Some(LogicalType::Decimal(DecimalType {
            scale: 10,
            precision: 38
        }))
    );
    assert!(matches!(
        logical_of("s_tstz"),
        Some(LogicalType::Timestamp(TimestampType {
            is_adjusted_to_u_t_c: true,
            ..
        }))
    ));
    assert!(matches!(
        logical_of("s_ts"),
        Some(LogicalType::Timestamp(TimestampType {
            is_adjusted_to_u_t_c: false,
            ..
        }))
    ));
    assert_eq!(logical_of("s_date"), Some(LogicalType::Date));
    assert_eq!(logical_of("s_text"), Some(LogicalType::String));
    let copied = encode(&columns, &read);
    assert_eq!(
        copied, original_bytes,
        "Arrow → Parquet → Arrow → binary COPY differs"
    );

    // binary COPY FROM into an identical empty table
    let sink = client
        .copy_in("COPY t2 FROM STDIN (FORMAT binary)")
        .await
        .unwrap();
    pin_mut!(sink);
    for part in copied.chunks(8192) {
        sink.send(Bytes::copy_from_slice(part)).await.unwrap();
    }
    assert_eq!(sink.finish().await.unwrap(), ROWS as u64);

    let t = copy_out(
        &client,
        "COPY (SELECT * FROM t ORDER BY id) TO STDOUT (FORMAT binary)",
    )
    .await
    .concat();
    let t2 = copy_out(
        &client,
        "COPY (SELECT * FROM t2 ORDER BY id) TO STDOUT (FORMAT binary)",
    )
    .await
    .concat();
    assert_eq!(t, t2, "binary COPY of the copy differs");
    let (text, text2) = (
        text_rows(&client, "t").await,
        text_rows(&client, "t2").await,
    );
    assert_eq!(text.len(), ROWS);
    for (a, b) in text.iter().zip(&text2) {
        assert_eq!(a, b, "text of row {:?}", a[0]);
    }

    // all rows bound as one binary parameter of type t[]: unnest gives them back exactly
    let row_type: u32 = client
        .query_one(
            "SELECT reltype FROM pg_class WHERE oid = 't'::regclass",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let mut array = BytesMut::new();
    let all = arrow::compute::concat_batches(&read[0].schema(), &read).unwrap();
    coldwire::values::record::encode_record_array(&columns, row_type, &all, &mut array).unwrap();
    client
        .batch_execute("CREATE TABLE t3 (LIKE t INCLUDING ALL)")
        .await
        .unwrap();
    let inserted = client
        .execute(
            "INSERT INTO t3 SELECT * FROM unnest($1::t[])",
            &[&RawBinary(Some(array.to_vec()))],
        )
        .await
        .unwrap();
    assert_eq!(inserted, ROWS as u64);
    let t3 = copy_out(
        &client,
        "COPY (SELECT * FROM t3 ORDER BY id) TO STDOUT (FORMAT binary)",
    )
    .await
    .concat();
    assert_eq!(t, t3, "rows bound as t[] differ");
    let mut empty = BytesMut::new();
    coldwire::values::record::encode_record_array(&columns, row_type, &all.slice(0, 0), &mut empty)
        .unwrap();
    let none: i64 = client
        .query_one(
            "SELECT count(*) FROM unnest($1::t[])",
            &[&RawBinary(Some(empty.to_vec()))],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(none, 0);

    // each cold value bound as a binary parameter reads back as the heap value's text
    // (format's %s is the type's output function: bpchar keeps its padding, unlike ::text)
    for (column_index, column) in columns.iter().enumerate().skip(1) {
        let ty = Type::from_oid(column.ty.type_oid()).unwrap();
        let sql = "SELECT CASE WHEN $1 IS NULL THEN NULL ELSE format('%s', $1) END";
        let stmt = client.prepare_typed(sql, &[ty]).await.unwrap();
        let mut row_index = 0;
        for batch in &read {
            let array = batch.column(column_index).as_ref();
            let encoder = ColumnEncoder::new(column, array).unwrap();
            assert!(matches!(
                encoder.encode(batch.num_rows(), &mut BytesMut::new()),
                Err(ColdError::Schema(_))
            ));
            for row in 0..batch.num_rows() {
                let mut out = BytesMut::new();
                let param = encoder.encode(row, &mut out).unwrap().map(|_| out.to_vec());
                let mut single = BytesMut::new();
                assert_eq!(
                    encode_value(column, array, row, &mut single)
                        .unwrap()
                        .map(|_| single.to_vec()),
                    param
                );
                let got: Option<String> = client
                    .query_one(&stmt, &[&RawBinary(param)])
                    .await
                    .unwrap()
                    .get(0);
                assert_eq!(
                    got, text[row_index][column_index],
                    "{} row {row_index}",
                    column.name
                );
                row_index += 1;
            }
        }
    }
}

async fn decode_error(client: &Client, table: &str) -> ColdError {
    let columns: Vec<ColdColumn> = cold_columns(client, table)
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    let stream = copy_out(client, &format!("COPY {table} TO STDOUT (FORMAT binary)")).await;
    decode(&columns, &stream, 64).unwrap_err()
}

#[tokio::test]
async fn values_that_cannot_come_back_exactly_are_refused_at_decode() {
    let db = common::create_db("cold_refuse");
    let client = common::connect_direct(&db).await;
    client
        .batch_execute(
            "CREATE TABLE md (id int, a int4[]); INSERT INTO md VALUES (1, '{1}'), (2, '{{1,2},{3,4}}');
             CREATE TABLE lb (id int, a text[]); INSERT INTO lb VALUES (1, '[0:1]={x,y}');
             CREATE TABLE far (id int, ts timestamptz); INSERT INTO far VALUES (1, '294247-01-10 04:00:54.775807+00');",
        )
        .await
        .unwrap();
    let e = decode_error(&client, "md").await;
    assert!(
        matches!(&e, ColdError::Value { column, row: 1, source: ValueError::Unrepresentable { .. } } if column == "a"),
        "{e}"
    );
    assert!(e.to_string().contains("2-dimensional"), "{e}");
    let e = decode_error(&client, "lb").await;
    assert!(e.to_string().contains("lower bound 0"), "{e}");
    let e = decode_error(&client, "far").await;
    assert!(
        matches!(&e, ColdError::Value { column, source: ValueError::Unrepresentable { .. }, .. } if column == "ts"),
        "{e}"
    );
    assert!(e.source().is_some());
}

#[tokio::test]
async fn unsupported_column_types_are_refused_by_name() {
    let db = common::create_db("cold_unsupported");
    let client = common::connect_direct(&db).await;
    client
        .batch_execute(
            "CREATE TYPE pair AS (a int, b text);
             CREATE DOMAIN posint AS int CHECK (VALUE > 0);
             CREATE TABLE u (p point, m money, c pair, r int4range, d posint, tz timetz, ok int4[])",
        )
        .await
        .unwrap();
    let results = cold_columns(&client, "u").await;
    let messages: Vec<String> = results[..6]
        .iter()
        .map(|r| r.as_ref().unwrap_err().to_string())
        .collect();
    for (message, name) in messages.iter().zip([
        "point",
        "money",
        "pair",
        "int4range",
        "posint",
        "time with time zone",
    ]) {
        assert!(
            message.contains(&format!("column type {name} (OID")),
            "{message}"
        );
    }
    assert!(messages[2].contains("user-defined"), "{}", messages[2]);
    assert!(results[6].is_ok());
}

/// Every type comes back from the cold tier for a write as it went: a rehydration checks
/// coldwire's MAC (catalog v13) over Postgres's own binary form of the rows it received
/// (`array_send`), so a value whose form changed on the way in (a numeric's scale, a
/// bpchar's padding, a jsonb's key order) would be refused with 42501. Every row is
/// brought back by an UPDATE that changes nothing, and the table then copies out byte for
/// byte as it did before it was tiered.
#[tokio::test]
async fn every_type_comes_back_from_the_cold_tier_for_a_write() {
    let db = common::create_db("cold_types_write");
    let direct = common::connect_direct(&db).await;
    direct
        .batch_execute(&format!("{};\n{}", create_table("t"), insert_rows("t")))
        .await
        .unwrap();
    let copy = "COPY (SELECT * FROM t ORDER BY id) TO STDOUT (FORMAT binary)";
    let before = copy_out(&direct, copy).await.concat();
    let store = tempfile::tempdir().unwrap();
    let proxy = common::Proxy::tiering(&db, store.path(), &[]).await;
    let c = proxy.connect(&db).await;
    common::admin_call(
        &c,
        r#"SELECT coldwire.tier_table('t', '{"hot_row_limit": 0, "min_flush_rows": 1, "auto_flush": false}')"#,
    )
    .await
    .unwrap();
    let job = common::admin_call(&c, "SELECT coldwire.flush_table('t', wait => true)")
        .await
        .unwrap();
    assert_eq!(job["rows_done"], ROWS, "{job}");
    let hot = "SELECT count(*) FROM ONLY t";
    let count = |row: tokio_postgres::Row| row.get::<_, i64>(0);
    assert_eq!(count(direct.query_one(hot, &[]).await.unwrap()), 0);
    let updated = c.execute("UPDATE t SET id = id", &[]).await.unwrap();
    assert_eq!(updated, ROWS as u64);
    assert_eq!(
        count(direct.query_one(hot, &[]).await.unwrap()),
        ROWS as i64
    );
    assert_eq!(copy_out(&direct, copy).await.concat(), before);
}
