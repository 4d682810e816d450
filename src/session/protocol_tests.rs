//! Table-driven tests of the session's protocol decisions: a script of client frames sent
//! and server frames answered, each with the action expected, run against a fresh
//! [`SessionState`].

use std::sync::atomic::AtomicBool;

use bytes::{BufMut, BytesMut};
use tokio::sync::oneshot;

use super::*;
use crate::session::state::{OwnResult, Retry};
use crate::wire::extended as ext;

/// What a step expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    Pass,
    Drop,
    Replace,
    Answered,
    CancelKey,
    Retry(u8),
    /// A client frame that stops the relay (to plan or answer it).
    Stop,
    /// A client frame relayed, being the Sync of a group that may be retried.
    PassRetryable,
}

/// One frame of a script.
enum Step {
    Client(BytesMut, Want),
    Server(BytesMut, Want),
}

fn frame(tag: u8, body: &[u8]) -> BytesMut {
    let mut out = BytesMut::new();
    out.put_u8(tag);
    out.put_u32(body.len() as u32 + 4);
    out.put_slice(body);
    out
}

fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

fn parse(name: &str, sql: &str) -> BytesMut {
    let mut out = BytesMut::new();
    ext::encode_parse(&mut out, name, sql, &[]);
    out
}

fn bind(statement: &str) -> BytesMut {
    let mut out = BytesMut::new();
    ext::encode_bind(&mut out, "", statement, &[], false);
    out
}

fn execute() -> BytesMut {
    let mut out = BytesMut::new();
    ext::encode_execute(&mut out, "");
    out
}

fn sync() -> BytesMut {
    BytesMut::from(&ext::empty(msg::SYNC)[..])
}

fn query(sql: &str) -> BytesMut {
    frame(msg::QUERY, &cstr(sql))
}

fn completion(tag: u8) -> BytesMut {
    BytesMut::from(&ext::empty(tag)[..])
}

fn command_complete(tag: &str) -> BytesMut {
    frame(msg::COMMAND_COMPLETE, &cstr(tag))
}

fn data_row(value: &[u8]) -> BytesMut {
    let mut out = BytesMut::new();
    ext::data_row(&mut out, value);
    out
}

fn row_description() -> BytesMut {
    let mut out = BytesMut::new();
    ext::row_description(&mut out, "x", 23, false);
    out
}

fn ready(status: u8) -> BytesMut {
    BytesMut::from(&msg::encode_ready_for_query(status)[..])
}

/// An ErrorResponse with `code` and, when given, a constraint name.
fn error(code: &str, constraint: Option<&str>) -> BytesMut {
    let mut body = Vec::new();
    for (tag, value) in [(b'S', "ERROR"), (b'C', code), (b'M', "failed")] {
        body.push(tag);
        body.extend_from_slice(&cstr(value));
    }
    if let Some(name) = constraint {
        body.push(b'n');
        body.extend_from_slice(&cstr(name));
    }
    body.push(0);
    frame(msg::ERROR_RESPONSE, &body)
}

fn parameter_status(name: &str, value: &str) -> BytesMut {
    let mut body = cstr(name);
    body.extend_from_slice(&cstr(value));
    frame(msg::PARAMETER_STATUS, &body)
}

/// Runs `script` on `state`, checking each action; `streamed` stands for the scanner's
/// flag of each direction.
fn run(state: &mut SessionState, script: Vec<Step>) {
    let mut client = ClientSide::default();
    let (c_streamed, s_streamed) = (AtomicBool::new(false), AtomicBool::new(false));
    for (i, step) in script.into_iter().enumerate() {
        let (got, want) = match step {
            Step::Client(f, want) => {
                let action = client
                    .on_client_frame(state, None, f[0], &f, &c_streamed)
                    .unwrap_or_else(|e| panic!("step {i}: {e}"));
                let got = match action {
                    ClientAction::Pass {
                        ends_retryable: false,
                    } => Want::Pass,
                    ClientAction::Pass {
                        ends_retryable: true,
                    } => Want::PassRetryable,
                    ClientAction::Drop => Want::Drop,
                    ClientAction::Stop(_) => Want::Stop,
                };
                (got, want)
            }
            Step::Server(f, want) => {
                let action = on_server_frame(state, f[0], &f, &s_streamed)
                    .unwrap_or_else(|e| panic!("step {i}: {e}"));
                let got = match action {
                    ServerAction::Pass => Want::Pass,
                    ServerAction::Drop => Want::Drop,
                    ServerAction::Replace(_) => Want::Replace,
                    ServerAction::Answered(own) => {
                        own.finish();
                        Want::Answered
                    }
                    ServerAction::CancelKey { .. } => Want::CancelKey,
                    ServerAction::Retry { attempt, .. } => Want::Retry(attempt),
                };
                (got, want)
            }
        };
        assert_eq!(got, want, "step {i}");
    }
}

use Step::{Client as C, Server as S};

#[test]
fn a_pipeline_relays_everything_and_an_error_voids_only_its_own_group() {
    let mut state = SessionState::new(&[]);
    run(
        &mut state,
        vec![
            C(parse("s1", "SELECT 1"), Want::Pass),
            C(bind("s1"), Want::Pass),
            C(execute(), Want::Pass),
            C(sync(), Want::Pass),
            C(parse("s2", "SELECT x"), Want::Pass),
            C(bind("s2"), Want::Pass),
            C(execute(), Want::Pass),
            C(sync(), Want::Pass),
            C(parse("s3", "SELECT 3"), Want::Pass),
            C(sync(), Want::Pass),
            S(completion(msg::PARSE_COMPLETE), Want::Pass),
            S(completion(msg::BIND_COMPLETE), Want::Pass),
            S(data_row(b"1"), Want::Pass),
            S(command_complete("SELECT 1"), Want::Pass),
            S(ready(b'I'), Want::Pass),
            // The second group fails at Parse: its Bind and Execute are skipped.
            S(error("42703", None), Want::Pass),
            S(ready(b'I'), Want::Pass),
            S(completion(msg::PARSE_COMPLETE), Want::Pass),
            S(ready(b'T'), Want::Pass),
        ],
    );
    let mut names: Vec<&str> = state
        .prepared_statements()
        .iter()
        .map(String::as_str)
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["s1", "s3"]);
    assert_eq!(state.outstanding_syncs(), 0);
    assert_eq!(state.status_byte(), b'T');
}

#[test]
fn coldwires_own_group_is_consumed_and_its_rows_handed_back() {
    let mut state = SessionState::new(&[]);
    let (tx, mut rx) = oneshot::channel::<OwnResult>();
    state.own_group_sent(tx);
    run(
        &mut state,
        vec![
            S(completion(msg::PARSE_COMPLETE), Want::Drop),
            S(row_description(), Want::Drop),
            S(data_row(b"7"), Want::Drop),
            // Everybody's: a parameter change reaches the client.
            S(parameter_status("TimeZone", "UTC"), Want::Pass),
            S(command_complete("SELECT 1"), Want::Drop),
            S(ready(b'I'), Want::Answered),
            // The next group is the client's again.
            C(query("SELECT 2"), Want::Pass),
            S(row_description(), Want::Pass),
            S(ready(b'I'), Want::Pass),
        ],
    );
    let rows = rx.try_recv().expect("answered").expect("no error");
    assert_eq!(rows, vec![vec![Some(b"7".to_vec())]]);
    assert_eq!(
        state.parameters.get("TimeZone").map(String::as_str),
        Some("UTC")
    );
}

#[test]
fn an_error_of_coldwires_own_group_is_handed_back_not_relayed() {
    let mut state = SessionState::new(&[]);
    let (tx, mut rx) = oneshot::channel::<OwnResult>();
    state.own_group_sent(tx);
    run(
        &mut state,
        vec![
            S(error("40001", None), Want::Drop),
            S(ready(b'I'), Want::Answered),
        ],
    );
    let error = rx.try_recv().expect("answered").expect_err("an error");
    assert_eq!(error.code, "40001");
}

/// A rewritten simple Query whose guard failure may be retried unseen.
fn retryable_query(state: &mut SessionState) {
    state.rewritten_group_sent(RewrittenGroup {
        retry: Some(Retry::Query(query("SELECT * FROM t"))),
        ..RewrittenGroup::default()
    });
    state.quiet_since_sync = true;
}

#[test]
fn retries_happen_only_for_coldwires_named_conditions_before_anything_streamed() {
    let changed = || error("40001", Some(conditions::COLD_TIER_CHANGED));
    let cases: Vec<(&str, Vec<Step>)> = vec![
        (
            "guard failure before any row: held back and retried",
            vec![
                S(row_description(), Want::Pass),
                S(changed(), Want::Drop),
                S(ready(b'I'), Want::Retry(1)),
            ],
        ),
        (
            "a row reached the client: the failure is the client's",
            vec![
                S(row_description(), Want::Pass),
                S(data_row(b"1"), Want::Pass),
                S(changed(), Want::Pass),
                S(ready(b'I'), Want::Pass),
            ],
        ),
        (
            "a serialization failure that is not coldwire's",
            vec![
                S(error("40001", None), Want::Pass),
                S(ready(b'I'), Want::Pass),
            ],
        ),
        (
            "coldwire's name under another code",
            vec![
                S(
                    error("55000", Some(conditions::COLD_TIER_CHANGED)),
                    Want::Pass,
                ),
                S(ready(b'I'), Want::Pass),
            ],
        ),
    ];
    for (name, script) in cases {
        let mut state = SessionState::new(&[]);
        retryable_query(&mut state);
        run(&mut state, script);
        let retried = state.retry_pending;
        assert_eq!(retried, name.contains("retried"), "{name}");
        assert_eq!(state.outstanding_syncs(), 0, "{name}");
    }
}

#[test]
fn keys_that_may_be_cold_are_kept_for_the_retry() {
    let mut state = SessionState::new(&[]);
    retryable_query(&mut state);
    let mut body = Vec::new();
    for (tag, value) in [
        (b'C', "55000"),
        (b'D', r#"{"table": 3, "keys": [{"id": 9}]}"#),
        (b'n', conditions::KEYS_MAY_BE_COLD),
    ] {
        body.push(tag);
        body.extend_from_slice(&cstr(value));
    }
    body.push(0);
    run(
        &mut state,
        vec![
            S(frame(msg::ERROR_RESPONSE, &body), Want::Drop),
            S(ready(b'I'), Want::Retry(1)),
        ],
    );
    assert_eq!(
        state.write_candidates[&3],
        vec![serde_json::json!({"id": 9})]
    );
}

#[test]
fn a_group_behind_the_failed_one_forbids_the_retry() {
    let mut state = SessionState::new(&[]);
    retryable_query(&mut state);
    run(
        &mut state,
        vec![
            C(query("SELECT 2"), Want::Pass),
            S(
                error("40001", Some(conditions::COLD_TIER_CHANGED)),
                Want::Pass,
            ),
            S(ready(b'I'), Want::Pass),
            S(row_description(), Want::Pass),
            S(ready(b'I'), Want::Pass),
        ],
    );
    assert!(!state.retry_pending);
}

#[test]
fn coldwires_messages_inside_a_group_are_answered_unseen() {
    // A rewritten Bind whose rehydration (two completions of coldwire's own) comes after
    // the client's Parse was answered.
    let cases: Vec<(&str, Vec<Step>)> = vec![
        (
            "all answered",
            vec![
                S(completion(msg::PARSE_COMPLETE), Want::Pass),
                S(completion(msg::BIND_COMPLETE), Want::Drop),
                S(command_complete("SELECT 1"), Want::Drop),
                S(completion(msg::BIND_COMPLETE), Want::Pass),
                S(command_complete("UPDATE 1"), Want::Pass),
                S(ready(b'I'), Want::Pass),
            ],
        ),
        (
            "an error in coldwire's part is the client's statement's",
            vec![
                S(completion(msg::PARSE_COMPLETE), Want::Pass),
                S(completion(msg::BIND_COMPLETE), Want::Drop),
                S(error("42501", None), Want::Pass),
                S(ready(b'I'), Want::Pass),
            ],
        ),
    ];
    for (name, script) in cases {
        let mut state = SessionState::new(&[]);
        state.own_messages_sent(OwnPrefix {
            before: 1,
            left: 2,
            ..OwnPrefix::default()
        });
        state.sync_sent();
        run(&mut state, script);
        assert_eq!(state.outstanding_syncs(), 0, "{name}");
    }
}

#[test]
fn cancel_keys_and_sasl_offers_are_replaced() {
    let mut state = SessionState::new(&[]);
    let mut sasl = 10i32.to_be_bytes().to_vec();
    sasl.extend_from_slice(&cstr("SCRAM-SHA-256-PLUS"));
    sasl.extend_from_slice(&cstr("SCRAM-SHA-256"));
    sasl.push(0);
    run(
        &mut state,
        vec![
            S(frame(msg::AUTHENTICATION, &sasl), Want::Replace),
            S(
                msg::encode_backend_key_data(42, &[1, 2, 3, 4]),
                Want::CancelKey,
            ),
            S(parameter_status("client_encoding", "UTF8"), Want::Pass),
            S(ready(b'I'), Want::Pass),
        ],
    );
}

#[test]
fn admin_calls_stop_the_client_direction() {
    let mut state = SessionState::new(&[]);
    run(
        &mut state,
        vec![
            C(query("SELECT coldwire.flush_table('t')"), Want::Stop),
            C(query("/* c */ select 1"), Want::Pass),
            C(parse("", "SELECT coldwire.flush_table('t')"), Want::Stop),
        ],
    );
}
