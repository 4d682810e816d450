use super::*;

fn names(s: &SessionState) -> Vec<&str> {
    let mut v: Vec<&str> = s.prepared_statements().iter().map(String::as_str).collect();
    v.sort_unstable();
    v
}

#[test]
fn phase_follows_ready_for_query() {
    let mut s = SessionState::new(&[]);
    assert_eq!(s.phase, Phase::Authenticating);
    for (status, phase) in [
        (b'I', Phase::Idle),
        (b'T', Phase::InTransaction),
        (b'E', Phase::FailedTransaction),
    ] {
        s.ready_for_query(status);
        assert_eq!(s.phase, phase);
    }
}

#[test]
fn statements_are_known_once_the_server_confirms() {
    let mut s = SessionState::new(&[]);
    s.parse_sent("a");
    s.parse_sent("");
    s.sync_sent();
    assert!(names(&s).is_empty());
    s.parse_completed();
    s.parse_completed();
    s.ready_for_query(b'I');
    assert_eq!(names(&s), ["a"]);
    s.close_sent(None);
    s.close_sent(Some("a"));
    s.sync_sent();
    s.close_completed();
    assert_eq!(names(&s), ["a"]);
    s.close_completed();
    s.ready_for_query(b'I');
    assert!(names(&s).is_empty());
}

#[test]
fn an_error_voids_the_rest_of_its_pipeline_segment_only() {
    let mut s = SessionState::new(&[]);
    // P(a) fails; P(b) in the same segment is skipped; P(c) after the Sync succeeds.
    s.parse_sent("a");
    s.parse_sent("b");
    s.sync_sent();
    s.parse_sent("c");
    s.sync_sent();
    s.ready_for_query(b'I'); // E was sent, then Z
    s.parse_completed();
    s.ready_for_query(b'I');
    assert_eq!(names(&s), ["c"]);
}

#[test]
fn search_path_from_startup_parameters() {
    let p = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    assert_eq!(
        SessionState::new(&[p("search_path", "x")])
            .startup_search_path
            .as_deref(),
        Some("x")
    );
    let s = SessionState::new(&[p("options", "-c geqo=off -c search_path=app,public")]);
    assert_eq!(s.startup_search_path.as_deref(), Some("app,public"));
    let s = SessionState::new(&[p("options", "--search_path=b")]);
    assert_eq!(s.startup_search_path.as_deref(), Some("b"));
    assert_eq!(
        SessionState::new(&[p("user", "u")]).startup_search_path,
        None
    );
}

#[test]
fn a_retry_is_answered_before_what_the_client_sent_behind_the_failed_group() {
    let mut s = SessionState::new(&[]);
    s.ready_for_query(b'I');
    // The client's next group, recorded while the retry was pending and written after it.
    s.parse_sent("x");
    s.sync_sent();
    s.retry_group_sent(RewrittenGroup {
        attempt: 1,
        ..RewrittenGroup::default()
    });
    assert_eq!(s.answering_rewritten().map(|g| g.attempt), Some(1));
    s.ready_for_query(b'I');
    assert!(s.answering_rewritten().is_none());
    s.parse_completed();
    s.ready_for_query(b'I');
    assert_eq!(names(&s), ["x"]);
    assert_eq!(s.outstanding_syncs(), 0);
}
