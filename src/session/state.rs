//! What a session knows about its client's connection, learnt from the messages it relays:
//! the protocol phase, server parameters, and the client's prepared statement names.

use std::collections::{HashMap, HashSet, VecDeque};

/// Where a session stands in the protocol. Transitions come from relayed messages only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Startup packet relayed; the authentication exchange is under way.
    Authenticating,
    /// ReadyForQuery `I`: "Idle (not in a transaction block)".
    Idle,
    /// ReadyForQuery `T`: "in a transaction block".
    InTransaction,
    /// ReadyForQuery `E`: "in a failed transaction block (queries will be rejected until
    /// block is ended)".
    FailedTransaction,
}

impl Phase {
    /// The phase a ReadyForQuery status byte announces.
    pub fn from_status(status: u8) -> Option<Self> {
        match status {
            b'I' => Some(Phase::Idle),
            b'T' => Some(Phase::InTransaction),
            b'E' => Some(Phase::FailedTransaction),
            _ => None,
        }
    }
}

/// A message sent upstream whose answer changes what we track.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pending {
    /// Parse of a statement ("" = unnamed), answered by ParseComplete.
    Parse(String),
    /// Close of a statement (`Some`) or portal (`None`), answered by CloseComplete.
    Close(Option<String>),
    /// Sync, simple Query or FunctionCall: ends with ReadyForQuery. "When an error is
    /// detected while processing any extended-query message, the backend ... reads and
    /// discards messages until a Sync is reached", so unanswered entries before it are void.
    SyncPoint,
}

/// Per-session protocol state shared by the two relay directions.
#[derive(Debug)]
pub struct SessionState {
    pub phase: Phase,
    /// Latest value of every ParameterStatus the server reported (client_encoding, …).
    pub parameters: HashMap<String, String>,
    /// search_path as set at startup (`search_path` or `options=-c search_path=…`). It is
    /// not reported by the server, so later SETs are not seen here; DESIGN §6.1 has the
    /// rewritten statement check name resolution itself.
    pub startup_search_path: Option<String>,
    statements: HashSet<String>,
    pending: VecDeque<Pending>,
    /// Sync points sent upstream and not yet answered by ReadyForQuery.
    outstanding_syncs: usize,
    /// Per outstanding sync point, oldest first: `Some` when its group is a statement
    /// coldwire runs in place of a simple Query (whose ParseComplete and BindComplete the
    /// client must not see).
    rewritten_groups: VecDeque<Option<RewrittenGroup>>,
}

/// A statement coldwire runs in place of a client's simple Query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RewrittenGroup {
    /// The client's Query frame, kept while the statement may still be retried after a
    /// guard failure (DESIGN §6.4): outside a transaction block, within the retry budget.
    pub retry_with: Option<bytes::BytesMut>,
    /// Retries already made for this Query.
    pub attempt: u8,
    /// The client already has the RowDescription (from the attempt that failed).
    pub drop_row_description: bool,
    /// The guard failed and the failure was held back: at ReadyForQuery, run it again.
    pub retrying: bool,
}

impl SessionState {
    /// State right after the startup packet with these parameters went upstream.
    pub fn new(startup_params: &[(String, String)]) -> Self {
        Self {
            phase: Phase::Authenticating,
            parameters: HashMap::new(),
            startup_search_path: search_path_from_startup(startup_params),
            statements: HashSet::new(),
            pending: VecDeque::new(),
            outstanding_syncs: 0,
            rewritten_groups: VecDeque::new(),
        }
    }

    /// Named prepared statements the server has confirmed and not yet closed.
    pub fn prepared_statements(&self) -> &HashSet<String> {
        &self.statements
    }

    /// The client sent Parse for `name`.
    pub fn parse_sent(&mut self, name: &str) {
        self.pending.push_back(Pending::Parse(name.to_owned()));
    }

    /// The client sent Close for a statement (`Some(name)`) or a portal.
    pub fn close_sent(&mut self, statement: Option<&str>) {
        self.pending
            .push_back(Pending::Close(statement.map(str::to_owned)));
    }

    /// The client sent a message that ReadyForQuery answers (Sync, Query, FunctionCall).
    pub fn sync_sent(&mut self) {
        self.pending.push_back(Pending::SyncPoint);
        self.outstanding_syncs += 1;
        self.rewritten_groups.push_back(None);
    }

    /// coldwire sent its own Parse/Bind/Describe/Execute/Sync in place of a client's
    /// simple Query.
    pub fn rewritten_query_sent(&mut self, group: RewrittenGroup) {
        self.sync_sent();
        if let Some(last) = self.rewritten_groups.back_mut() {
            *last = Some(group);
        }
    }

    /// The statement coldwire runs in place of a simple Query that responses arriving now
    /// answer, if they answer one.
    pub fn answering_rewritten(&mut self) -> Option<&mut RewrittenGroup> {
        self.rewritten_groups.front_mut().and_then(Option::as_mut)
    }

    /// The group the next ReadyForQuery ends, if coldwire ran it in place of a Query.
    pub fn take_answered_group(&mut self) -> Option<RewrittenGroup> {
        self.rewritten_groups.front_mut().and_then(Option::take)
    }

    /// Messages answered by ReadyForQuery that are still unanswered; zero means every
    /// request the client sent so far has been answered (given the client has not sent
    /// extended-protocol messages since its last Sync).
    pub fn outstanding_syncs(&self) -> usize {
        self.outstanding_syncs
    }

    /// The status byte of ReadyForQuery for the current phase.
    pub fn status_byte(&self) -> u8 {
        match self.phase {
            Phase::InTransaction => b'T',
            Phase::FailedTransaction => b'E',
            Phase::Authenticating | Phase::Idle => b'I',
        }
    }

    /// The server answered ParseComplete.
    pub fn parse_completed(&mut self) {
        if let Some(Pending::Parse(name)) = self.pop_until(|p| matches!(p, Pending::Parse(_))) {
            if !name.is_empty() {
                self.statements.insert(name);
            }
        }
    }

    /// The server answered CloseComplete.
    pub fn close_completed(&mut self) {
        if let Some(Pending::Close(Some(name))) = self.pop_until(|p| matches!(p, Pending::Close(_)))
        {
            self.statements.remove(&name);
        }
    }

    /// The server sent ReadyForQuery with `status`.
    pub fn ready_for_query(&mut self, status: u8) {
        if let Some(phase) = Phase::from_status(status) {
            self.phase = phase;
        }
        self.outstanding_syncs = self.outstanding_syncs.saturating_sub(1);
        self.rewritten_groups.pop_front();
        // Everything up to the first sync point is answered or was skipped after an error.
        while let Some(p) = self.pending.pop_front() {
            if p == Pending::SyncPoint {
                break;
            }
        }
    }

    /// The server reported a parameter value.
    pub fn parameter_status(&mut self, name: &str, value: &str) {
        self.parameters.insert(name.to_owned(), value.to_owned());
    }

    /// Pops pending entries until one matches `wanted`; stops (popping nothing more) at a
    /// sync point, since answers never cross one.
    fn pop_until(&mut self, wanted: impl Fn(&Pending) -> bool) -> Option<Pending> {
        while let Some(front) = self.pending.front() {
            if *front == Pending::SyncPoint {
                return None;
            }
            let p = self.pending.pop_front()?;
            if wanted(&p) {
                return Some(p);
            }
        }
        None
    }
}

/// search_path from a `search_path` startup parameter or `-c search_path=…` in `options`.
fn search_path_from_startup(params: &[(String, String)]) -> Option<String> {
    let mut found = None;
    for (name, value) in params {
        if name == "search_path" {
            found = Some(value.clone());
        } else if name == "options" {
            let mut words = value.split_whitespace();
            while let Some(word) = words.next() {
                let setting = match word {
                    "-c" => words.next(),
                    w => w.strip_prefix("-c").or_else(|| w.strip_prefix("--")),
                };
                if let Some(v) = setting.and_then(|s| s.strip_prefix("search_path=")) {
                    found = Some(v.to_owned());
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
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
}
