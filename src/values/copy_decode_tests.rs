//! Unit tests of the binary COPY decoder (and, through round trips, of the encoder).

use arrow::array::{Array, AsArray};
use arrow::datatypes::Int32Type;
use bytes::BytesMut;

use super::*;
use crate::values::copy_encode::{encode_batch, encode_header, encode_trailer};
use crate::values::error::ValueError;
use crate::values::types::{ColdType, NumericRepr, ScalarType, TextKind};

fn columns() -> Vec<ColdColumn> {
    vec![
        ColdColumn::new("id", ColdType::Scalar(ScalarType::Int4)),
        ColdColumn::new("name", ColdType::Scalar(ScalarType::Text(TextKind::Text))),
        ColdColumn::new("tags", ColdType::Array(ScalarType::Int4)),
        ColdColumn::new(
            "amount",
            ColdType::Scalar(ScalarType::Numeric(NumericRepr::Decimal {
                precision: 5,
                scale: 2,
            })),
        ),
    ]
}

fn field(out: &mut Vec<u8>, value: Option<&[u8]>) {
    match value {
        None => out.extend_from_slice(&(-1_i32).to_be_bytes()),
        Some(v) => {
            out.extend_from_slice(&(v.len() as i32).to_be_bytes());
            out.extend_from_slice(v);
        }
    }
}

fn int4_array(elements: &[Option<i32>], lower: i32) -> Vec<u8> {
    let mut v = Vec::new();
    let ndim = i32::from(!elements.is_empty());
    let has_null = i32::from(elements.iter().any(Option::is_none));
    for x in [ndim, has_null, 23] {
        v.extend_from_slice(&x.to_be_bytes());
    }
    if !elements.is_empty() {
        v.extend_from_slice(&(elements.len() as i32).to_be_bytes());
        v.extend_from_slice(&lower.to_be_bytes());
    }
    for e in elements {
        field(&mut v, e.map(i32::to_be_bytes).as_ref().map(|b| &b[..]));
    }
    v
}

/// numeric(5,2) in binary for `cents / 100`, |cents| < 10 000.
fn numeric_cents(cents: i32) -> Vec<u8> {
    let abs = cents.unsigned_abs() as i16;
    let sign: u16 = if cents < 0 { 0x4000 } else { 0 };
    let (int, frac) = (abs / 100, (abs % 100) * 100);
    let (digits, weight): (Vec<i16>, i16) = match (int, frac) {
        (0, 0) => (vec![], 0),
        (0, f) => (vec![f], -1),
        (i, 0) => (vec![i], 0),
        (i, f) => (vec![i, f], 0),
    };
    let mut v = Vec::new();
    for x in [
        digits.len() as u16,
        weight as u16,
        if digits.is_empty() { 0 } else { sign },
        2,
    ] {
        v.extend_from_slice(&x.to_be_bytes());
    }
    for d in digits {
        v.extend_from_slice(&d.to_be_bytes());
    }
    v
}

fn header(flags: u32, extension: &[u8]) -> Vec<u8> {
    let mut v = COPY_SIGNATURE.to_vec();
    v.extend_from_slice(&flags.to_be_bytes());
    v.extend_from_slice(&(extension.len() as i32).to_be_bytes());
    v.extend_from_slice(extension);
    v
}

fn tuple(out: &mut Vec<u8>, id: i32) {
    out.extend_from_slice(&4_i16.to_be_bytes());
    field(out, Some(&id.to_be_bytes()));
    let name = ["", "é", "🦀 crab", "line\nbreak"][id as usize % 4];
    field(
        out,
        if id % 5 == 4 {
            None
        } else {
            Some(name.as_bytes())
        },
    );
    let tags = match id % 3 {
        0 => Some(int4_array(&[], 1)),
        1 => Some(int4_array(&[Some(id), None, Some(-id)], 1)),
        _ => None,
    };
    field(out, tags.as_deref());
    field(out, Some(&numeric_cents(id * 137 - 500)));
}

/// A stream of `rows` tuples exactly as Postgres writes it.
fn stream(rows: i32) -> Vec<u8> {
    let mut v = header(0, &[]);
    for id in 0..rows {
        tuple(&mut v, id);
    }
    v.extend_from_slice(&(-1_i16).to_be_bytes());
    v
}

fn decode_chunks(chunks: &[&[u8]], batch_rows: usize) -> Result<Vec<RecordBatch>, ColdError> {
    let mut d = CopyDecoder::new(columns(), batch_rows)?;
    let mut out = Vec::new();
    for c in chunks {
        d.decode(c)?;
        out.extend(std::iter::from_fn(|| d.next_batch()));
    }
    d.finish()?;
    out.extend(std::iter::from_fn(|| d.next_batch()));
    Ok(out)
}

fn encode(batches: &[RecordBatch]) -> Vec<u8> {
    let mut out = BytesMut::new();
    encode_header(&mut out);
    for b in batches {
        encode_batch(&columns(), b, &mut out).unwrap();
    }
    encode_trailer(&mut out);
    out.to_vec()
}

#[test]
fn decodes_and_reencodes_byte_identically() {
    let s = stream(10);
    let batches = decode_chunks(&[&s], 3).unwrap();
    assert_eq!(
        batches
            .iter()
            .map(RecordBatch::num_rows)
            .collect::<Vec<_>>(),
        vec![3, 3, 3, 1]
    );
    let ids = batches[1].column(0).as_primitive::<Int32Type>();
    assert_eq!(ids.values().to_vec(), vec![3, 4, 5]);
    assert!(batches[1].column(1).is_null(1)); // id 4
    let tags = batches[0].column(2).as_list::<i32>();
    assert_eq!(tags.value(0).len(), 0); // empty array, not NULL
    assert_eq!(tags.value(1).null_count(), 1);
    assert!(tags.is_null(2));
    assert_eq!(encode(&batches), s);
}

#[test]
fn every_chunk_boundary_gives_the_same_batches() {
    let s = stream(6);
    let whole = decode_chunks(&[&s], 4).unwrap();
    for i in 0..=s.len() {
        assert_eq!(
            decode_chunks(&[&s[..i], &s[i..]], 4).unwrap(),
            whole,
            "split at {i}"
        );
    }
    for i in 0..s.len() {
        for j in i..=s.len() {
            if (j - i) % 7 == 0 {
                assert_eq!(
                    decode_chunks(&[&s[..i], &s[i..j], &s[j..]], 4).unwrap(),
                    whole,
                    "split at {i}, {j}"
                );
            }
        }
    }
    let bytes: Vec<&[u8]> = s.chunks(1).collect();
    assert_eq!(decode_chunks(&bytes, 4).unwrap(), whole);
}

#[test]
fn every_truncation_is_an_error() {
    let s = stream(4);
    for i in 0..s.len() {
        let e = decode_chunks(&[&s[..i]], 2).unwrap_err();
        assert!(matches!(e, ColdError::Truncated(_)), "prefix {i}: {e}");
    }
}

#[test]
fn bad_headers() {
    let mut s = stream(1);
    s[0] = b'X';
    assert!(
        matches!(decode_chunks(&[&s[..1]], 2), Err(ColdError::Stream(_))),
        "signature checked early"
    );
    let text_copy = b"1\tabc\n";
    assert!(matches!(
        decode_chunks(&[text_copy], 2),
        Err(ColdError::Stream(_))
    ));
    // a critical flag other than OIDs
    let mut s = header(1 << 17, &[]);
    s.extend_from_slice(&(-1_i16).to_be_bytes());
    assert!(matches!(decode_chunks(&[&s], 2), Err(ColdError::Stream(_))));
    // a negative header-extension length
    let mut s = header(0, &[]);
    s[15..19].copy_from_slice(&(-5_i32).to_be_bytes());
    assert!(matches!(decode_chunks(&[&s], 2), Err(ColdError::Stream(_))));
}

#[test]
fn skips_header_extension_low_flags_and_oids() {
    let mut s = header(0x0000_0003, b"future data");
    tuple(&mut s, 1);
    s.extend_from_slice(&(-1_i16).to_be_bytes());
    assert_eq!(decode_chunks(&[&s], 10).unwrap()[0].num_rows(), 1);
    // OIDs: the OID field follows the field count and is not counted in it
    let mut s = header(1 << 16, &[]);
    let mut t = Vec::new();
    tuple(&mut t, 2);
    s.extend_from_slice(&t[..2]);
    field(&mut s, Some(&77_u32.to_be_bytes()));
    s.extend_from_slice(&t[2..]);
    s.extend_from_slice(&(-1_i16).to_be_bytes());
    let b = decode_chunks(&[&s], 10).unwrap();
    assert_eq!(b[0].column(0).as_primitive::<Int32Type>().value(0), 2);
}

#[test]
fn field_length_overruns_and_garbage() {
    // a field that declares more bytes than the stream holds
    let mut s = header(0, &[]);
    s.extend_from_slice(&4_i16.to_be_bytes());
    s.extend_from_slice(&1000_i32.to_be_bytes());
    s.extend_from_slice(&[0; 10]);
    s.extend_from_slice(&(-1_i16).to_be_bytes());
    assert!(matches!(
        decode_chunks(&[&s], 2),
        Err(ColdError::Truncated(_))
    ));
    // an int4 field of 3 bytes
    let mut s = header(0, &[]);
    s.extend_from_slice(&4_i16.to_be_bytes());
    field(&mut s, Some(&[0, 0, 1]));
    for _ in 0..3 {
        field(&mut s, None);
    }
    s.extend_from_slice(&(-1_i16).to_be_bytes());
    let e = decode_chunks(&[&s], 2).unwrap_err();
    assert!(
        matches!(&e, ColdError::Value { column, row: 0, source: ValueError::Malformed { .. } } if column == "id"),
        "{e}"
    );
    // an array element that overruns its array
    let mut arr = int4_array(&[Some(1)], 1);
    let n = arr.len();
    arr[n - 8..n - 4].copy_from_slice(&100_i32.to_be_bytes());
    let e = decode_one_tags(&arr).unwrap_err();
    assert!(
        e.to_string().contains("element 1 declares 100 bytes"),
        "{e}"
    );
    // a negative length other than -1
    let mut s = header(0, &[]);
    s.extend_from_slice(&4_i16.to_be_bytes());
    s.extend_from_slice(&(-2_i32).to_be_bytes());
    assert!(matches!(decode_chunks(&[&s], 2), Err(ColdError::Stream(_))));
    // wrong field count
    let mut s = header(0, &[]);
    s.extend_from_slice(&3_i16.to_be_bytes());
    assert!(matches!(decode_chunks(&[&s], 2), Err(ColdError::Stream(_))));
    // bytes after the trailer
    let mut s = stream(1);
    s.push(0);
    assert!(matches!(decode_chunks(&[&s], 2), Err(ColdError::Stream(_))));
}

fn decode_one_tags(tags: &[u8]) -> Result<Vec<RecordBatch>, ColdError> {
    let mut s = header(0, &[]);
    s.extend_from_slice(&4_i16.to_be_bytes());
    field(&mut s, Some(&1_i32.to_be_bytes()));
    field(&mut s, None);
    field(&mut s, Some(tags));
    field(&mut s, None);
    s.extend_from_slice(&(-1_i16).to_be_bytes());
    decode_chunks(&[&s], 2)
}

#[test]
fn refuses_multidimensional_arrays_and_other_lower_bounds() {
    let e = decode_one_tags(&int4_array(&[Some(1), Some(2)], 0)).unwrap_err();
    assert!(
        matches!(
            &e,
            ColdError::Value {
                source: ValueError::Unrepresentable { .. },
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("lower bound 0") && e.to_string().contains("\"tags\""),
        "{e}"
    );
    // '{{1,2}}': ndim 2, dims (1, 1) and (2, 1)
    let mut two_d = Vec::new();
    for x in [2_i32, 0, 23, 1, 1, 2, 1] {
        two_d.extend_from_slice(&x.to_be_bytes());
    }
    for v in [1_i32, 2] {
        field(&mut two_d, Some(&v.to_be_bytes()));
    }
    let e = decode_one_tags(&two_d).unwrap_err();
    assert!(e.to_string().contains("2-dimensional"), "{e}");
    // wrong element type
    let mut wrong = int4_array(&[Some(1)], 1);
    wrong[8..12].copy_from_slice(&20_u32.to_be_bytes());
    assert!(decode_one_tags(&wrong)
        .unwrap_err()
        .to_string()
        .contains("element type OID 20"));
}

#[test]
fn a_failed_decoder_stays_failed() {
    let mut d = CopyDecoder::new(columns(), 2).unwrap();
    assert!(d.decode(b"garbage").is_err());
    assert!(matches!(d.decode(&stream(1)), Err(ColdError::Failed)));
    assert!(matches!(d.finish(), Err(ColdError::Failed)));
}

#[test]
fn mutated_streams_never_panic() {
    let s = stream(8);
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..3000 {
        let mut m = s.clone();
        for _ in 0..1 + next() % 4 {
            let at = (next() as usize) % m.len();
            m[at] = next() as u8;
        }
        let cut = (next() as usize) % m.len();
        // any outcome but a panic is fine; a success must re-encode consistently
        if let Ok(batches) = decode_chunks(&[&m[..cut], &m[cut..]], 3) {
            let mut out = BytesMut::new();
            for b in &batches {
                encode_batch(&columns(), b, &mut out).unwrap();
            }
        }
    }
}
