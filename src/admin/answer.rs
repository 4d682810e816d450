//! The row an admin call answers: columns a person can read in psql (the table, the job's
//! state and counts, the policy in words), then `details`, the whole answer as jsonb for
//! scripts. `explain` answers its plan as one text column named as the call's.

use bytes::{BufMut, BytesMut};
use serde_json::Value;

use super::call::oid;
use super::{AdminCall, AdminFunction, Policy};
use crate::wire::extended as ext;

/// Where a column's value comes from in the call's JSON answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The key of that name.
    Key,
    /// The policy under `policy`, in words.
    PolicyInWords,
    /// The whole answer (jsonb), or for `explain` the plan (text).
    Whole,
}

struct Column {
    name: &'static str,
    type_oid: u32,
    source: Source,
}

const fn key(name: &'static str, type_oid: u32) -> Column {
    Column {
        name,
        type_oid,
        source: Source::Key,
    }
}

const POLICY: Column = Column {
    name: "policy",
    type_oid: oid::TEXT,
    source: Source::PolicyInWords,
};
const DETAILS: Column = Column {
    name: "details",
    type_oid: oid::JSONB,
    source: Source::Whole,
};

const TIER_TABLE: &[Column] = &[
    key("table", oid::TEXT),
    key("id", oid::INT8),
    key("mirror_rows", oid::INT8),
    POLICY,
    DETAILS,
];
const SET_POLICY: &[Column] = &[key("table", oid::TEXT), POLICY, DETAILS];
const FLUSH_TABLE: &[Column] = &[
    key("table", oid::TEXT),
    key("job_id", oid::INT8),
    key("state", oid::TEXT),
    key("rows_done", oid::INT8),
    key("rows_total", oid::INT8),
    key("segments", oid::INT8),
    key("error", oid::TEXT),
    DETAILS,
];
const UNTIER_TABLE: &[Column] = &[
    key("table", oid::TEXT),
    key("rows_rehydrated", oid::INT8),
    key("segments", oid::INT8),
    key("objects_deleted", oid::INT8),
    DETAILS,
];
/// Named as the call (or its alias).
const EXPLAIN: &[Column] = &[Column {
    name: "",
    type_oid: oid::TEXT,
    source: Source::Whole,
}];

fn columns(function: AdminFunction) -> &'static [Column] {
    match function {
        AdminFunction::TierTable => TIER_TABLE,
        AdminFunction::SetPolicy => SET_POLICY,
        AdminFunction::FlushTable => FLUSH_TABLE,
        AdminFunction::UntierTable => UNTIER_TABLE,
        // Refused before it answers; described as the job it will queue.
        AdminFunction::CompactTable => FLUSH_TABLE,
        AdminFunction::Explain => EXPLAIN,
    }
}

/// Whether column `i` is sent in binary, by Bind's result format codes (none: all text;
/// one: all columns; else one per column).
fn binary(formats: &[bool], i: usize) -> bool {
    match formats {
        [] => false,
        [all] => *all,
        per_column => per_column.get(i).copied().unwrap_or(false),
    }
}

/// The RowDescription of `call`'s answer.
pub fn row_description(out: &mut BytesMut, call: &AdminCall, formats: &[bool]) {
    let described: Vec<(&str, u32, bool)> = columns(call.function)
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let name = if c.name.is_empty() {
                call.column.as_str()
            } else {
                c.name
            };
            (name, c.type_oid, binary(formats, i))
        })
        .collect();
    ext::row_description_of(out, &described);
}

/// The DataRow of `call`'s answer `result`.
pub fn data_row(out: &mut BytesMut, call: &AdminCall, result: &Value, formats: &[bool]) {
    let values: Vec<Option<Vec<u8>>> = columns(call.function)
        .iter()
        .enumerate()
        .map(|(i, c)| value(c, result, binary(formats, i)))
        .collect();
    ext::data_row_of(out, &values);
}

fn value(column: &Column, result: &Value, binary: bool) -> Option<Vec<u8>> {
    let text = match column.source {
        Source::Whole => match result {
            Value::String(plan) if column.type_oid == oid::TEXT => plan.clone(),
            json => json.to_string(),
        },
        Source::PolicyInWords => Policy::default()
            .merged(result.get("policy")?)
            .ok()?
            .in_words(),
        Source::Key => match result.get(column.name)? {
            Value::Null => return None,
            Value::String(s) => s.clone(),
            other => other.to_string(),
        },
    };
    // A bigint column holds a number or NULL, never text a client would fail to decode.
    let number = text.parse::<i64>().ok();
    if column.type_oid == oid::INT8 && number.is_none() {
        return None;
    }
    Some(match (binary, column.type_oid) {
        (false, _) | (true, oid::TEXT) => text.into_bytes(),
        (true, oid::JSONB) => {
            let mut v = BytesMut::with_capacity(text.len() + 1);
            v.put_u8(1); // jsonb binary format version
            v.put_slice(text.as_bytes());
            v.to_vec()
        }
        (true, _) => number.unwrap_or_default().to_be_bytes().to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_flush_answer_reads_as_columns_then_details() {
        let result = json!({"table": "public.t", "job_id": 7, "state": "completed", "rows_done": 900,
                            "rows_total": 900, "segments": 3, "error": null, "attempt": 1});
        let c = &columns(AdminFunction::FlushTable);
        let text: Vec<Option<String>> = c
            .iter()
            .map(|c| value(c, &result, false).map(|v| String::from_utf8(v).unwrap()))
            .collect();
        assert_eq!(
            text,
            [
                Some("public.t".into()),
                Some("7".into()),
                Some("completed".into()),
                Some("900".into()),
                Some("900".into()),
                Some("3".into()),
                None,
                Some(result.to_string()),
            ]
        );
        assert_eq!(
            value(&c[1], &result, true),
            Some(7i64.to_be_bytes().to_vec())
        );
        assert_eq!(value(&c[7], &result, true).unwrap()[0], 1);
        // What is not a number is NULL in a bigint column, in either format.
        let odd = json!({"job_id": "seven"});
        assert_eq!(value(&c[1], &odd, true), None);
        assert_eq!(value(&c[1], &odd, false), None);
    }

    #[test]
    fn formats_apply_to_all_or_each() {
        assert!(!binary(&[], 3));
        assert!(binary(&[true], 3));
        assert!(binary(&[false, true], 1));
        assert!(!binary(&[false, true], 5));
    }
}
