//! What a session knows about its client's connection, learnt from the messages it relays:
//! the protocol phase, server parameters, and the client's prepared statement names.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use bytes::BytesMut;
use tokio::sync::oneshot;

use super::reads::{BroughtBack, KnownHot, OwnForm, PreparedRead, PreparedWrite};
use crate::sql::copy_to::{CopyEncoder, CopyOptions};
use crate::wire::messages::ErrorFields;

/// Most keys a transaction block's rehydrations are remembered for
/// ([`SessionState::rows_brought_back`]).
pub const MAX_BROUGHT_BACK: usize = 4096;

/// Most own statements a session prepares ([`SessionState::own_form`]): one per tiered
/// table's rehydration, and `plan_write`.
pub const MAX_OWN_PREPARED: usize = 64;

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
    /// Describe of a statement, answered by ParameterDescription: the statement it
    /// describes, if coldwire rewrote it or follows it as relayed (its name and `id`, to
    /// learn the types Postgres inferred), and `Some(n)` when its description must show
    /// the client's `n` parameters only.
    DescribeStatement {
        statement: Option<(String, u64)>,
        trim: Option<usize>,
    },
    /// `DEALLOCATE name` (`None`: `DEALLOCATE ALL` or `DISCARD ALL`) in a simple Query,
    /// answered by CommandComplete `DEALLOCATE` (`DEALLOCATE ALL`, `DISCARD ALL`); a
    /// statement that fails frees nothing, and its entry is void at ReadyForQuery.
    /// The second field is the newest statement id when the Query was sent: statements
    /// parsed after it (pipelined behind it) are not the ones it frees.
    Deallocate(Option<String>, u64),
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
    /// DDL that coldwire's catalog follows (`sql::ddl`) was sent: at the next
    /// ReadyForQuery the registry is read again.
    pub catalog_changed: bool,
    /// A notice for the client about an EXPLAIN it sent (`rewritten::explain_notice`),
    /// sent ahead of the next BindComplete, where a message starts; dropped at the next
    /// ReadyForQuery if no BindComplete came.
    pub explain_notice: Option<bytes::BytesMut>,
    /// Per outstanding sync point, oldest first: what the responses up to it answer.
    groups: VecDeque<Group>,
    /// Generations of tiered tables as the client's current transaction block sees them
    /// (learnt by `coldwire.read_lock`), so its reads are planned for exactly those.
    pub txn_generations: HashMap<i64, i64>,
    /// Why coldwire's own group aborted the client's transaction block (`read_lock`
    /// failing, e.g. on lock_timeout): told to the client in place of the 25P02 its next
    /// statement gets, which would not say why ([`SessionState::block_failure`]).
    pub own_failure: Option<ErrorFields>,
    /// Rows the client's transaction block brought back into the heap (coldwire's
    /// rehydrations that answered they inserted every row they were given), by table:
    /// their cold versions are hidden from the block's statements, so reads and writes
    /// asking for those keys only skip the cold lookup ([`KnownHot`]). Forgotten when
    /// the block ends or fails, and at any command but a plain read or write, which may
    /// be a ROLLBACK TO SAVEPOINT; told to planners only when every message sent is
    /// answered ([`Self::known_hot`]).
    brought_back: KnownHot,
    /// coldwire's own statements inside the client's groups (rehydrations, `plan_write`)
    /// prepared in the session, by text: their number and whether Postgres has them yet
    /// ([`Self::own_form`]).
    own_prepared: HashMap<String, (u64, HotForm)>,
    /// Own statements prepared so far (their numbers).
    own_prepared_ids: u64,
    /// The group being sent, when coldwire put messages of its own into it before its
    /// Sync; it becomes the group's entry at the Sync.
    open_group: Option<RewrittenGroup>,
    /// A COPY FROM STDIN is under way: Postgres ignores the client's Syncs.
    copy_in: bool,
    /// How many Syncs the client sent since its last Execute, when that Execute was its
    /// last group-starting message (`None` after a Query).
    syncs_since_execute: Option<usize>,
    /// Completions the client already got for messages of the group being sent, before
    /// its Sync and before any message of coldwire's in it (the client sent Flush, as
    /// asyncpg does after Parse and Describe): coldwire's own messages sent next are
    /// answered after that many fewer of the client's.
    early_completions: u32,
    /// Client statements (by name, "" for the unnamed one) that coldwire rewrote at Parse
    /// and gives cold parameters at each Bind.
    rewritten_statements: HashMap<String, RewrittenStatement>,
    /// Client statements (by name) relayed as the client wrote them, with their Parse:
    /// planned again at a Bind once the names of tiered tables changed since they were
    /// last checked ([`Self::passed_to_plan`]), so that a statement prepared before its
    /// table was tiered still reads and writes every row.
    passed: HashMap<String, PassedStatement>,
    /// Statements the client prepared with SQL-level PREPARE, relayed as written, by
    /// name: planned as their PREPARE would be now at an EXECUTE once the names of tiered
    /// tables changed since they were last checked (`sql_prepared::sql_prepared`).
    sql_passed: HashMap<String, SqlPassed>,
    /// The next Bind was just planned again ([`Self::statement_replanned`]): its
    /// statement is not checked a second time (the registry may be unreadable).
    pub bind_replanned: bool,
    /// Parses of client statements so far (their ids).
    statement_ids: u64,
    /// The hot forms Postgres has or is preparing, by their statement's id
    /// ([`hot_statement_name`]): a rewritten read's Bind that binds no cold row runs its
    /// statement's hot form, parsed at the first such Bind.
    hot_forms: HashMap<u64, HotForm>,
    /// Hot forms whose client statement is gone (closed, parsed again, deallocated),
    /// closed ahead of the next Bind that sends coldwire's own messages.
    hot_to_close: Vec<u64>,
    /// Statements were freed where coldwire could not see which ([`Self::deallocated`]):
    /// no hot form is used for the rest of the session.
    hot_forms_off: bool,
    /// Nothing was sent upstream after the Sync of the newest outstanding group, so that
    /// group can be retried without reordering anything the client sent later.
    pub quiet_since_sync: bool,
    /// A guard failure was held back from the client: the client direction must send the
    /// retry before anything else.
    pub retry_pending: bool,
    /// Keys the capture check refused as possibly cold (DESIGN §7), by table id, from
    /// the failed attempts of the statement being retried: its retry brings them back.
    /// Cleared when a group ends without a retry.
    pub write_candidates: HashMap<i64, Vec<serde_json::Value>>,
    /// Writes to tiered tables the client prepared with SQL-level PREPARE, by name, with
    /// the parameter types it declared: their EXECUTEs are planned as the write (DESIGN
    /// §7.1).
    sql_prepared: HashMap<String, (Arc<PreparedWrite>, Vec<u32>)>,
    /// Whether the session checks, while coldwire does not serve its database, that the
    /// database has no tiered tables (`relay::ClientDirection::check_tiers`); not a
    /// replication connection's.
    pub checks_tiers: bool,
}

/// What the responses up to one sync point answer.
#[derive(Debug)]
enum Group {
    /// The client's messages, relayed as sent.
    Client,
    /// A group that runs a read coldwire rewrote.
    Rewritten(RewrittenGroup),
    /// coldwire's own statement: every response is coldwire's.
    Own(OwnGroup),
}

/// The rows (values in the format coldwire asked for) of coldwire's own statement, or
/// its error.
pub type OwnResult = Result<Vec<Vec<Option<Vec<u8>>>>, ErrorFields>;

/// coldwire's own statement in the session, being answered.
#[derive(Debug)]
pub struct OwnGroup {
    pub rows: Vec<Vec<Option<Vec<u8>>>>,
    pub error: Option<ErrorFields>,
    reply: Option<oneshot::Sender<OwnResult>>,
}

impl OwnGroup {
    /// Hands the result to whoever sent the statement.
    pub fn finish(mut self) {
        let result = match self.error.take() {
            Some(e) => Err(e),
            None => Ok(std::mem::take(&mut self.rows)),
        };
        if let Some(reply) = self.reply.take() {
            let _ = reply.send(result);
        }
    }
}

/// What coldwire does with a client statement at each Bind.
#[derive(Debug, Clone)]
pub enum Prepared {
    /// A read, rewritten at Parse: cold parameters appended.
    Read(Arc<PreparedRead>),
    /// A write, relayed as it is: its cold rows brought back into the heap first.
    Write(Arc<PreparedWrite>),
    /// A call of a function that reads tiered tables server-side, relayed as it is (so
    /// Postgres describes it as the client wrote it): each Bind of it fails with this
    /// error, in protocol order, unless the session reads or writes hot rows only on
    /// purpose.
    HotOnlyCall(crate::wire::messages::ErrorFields),
}

/// A client statement coldwire prepared at Parse.
#[derive(Debug, Clone)]
pub struct RewrittenStatement {
    pub prepared: Prepared,
    /// Parameter types the client's Parse declared, where it left one out (0) the type
    /// Postgres inferred once a ParameterDescription of the statement has shown it.
    pub param_types: Vec<u32>,
    /// Set by [`SessionState::statement_parsed`]: which Parse of the name this is.
    pub id: u64,
    /// The client's Parse, planned again at a Bind once the registry changed
    /// ([`SessionState::rewritten_to_plan`]).
    pub parse: bytes::Bytes,
    /// The registry version it was last planned or checked under.
    pub names_at: u64,
    /// As [`PassedStatement`]'s: Postgres holds nothing under the name.
    pub lost: bool,
}

/// A client statement relayed as the client wrote it (coldwire had no tiered table to
/// plan it for), remembered so that it can be planned once it may name one.
#[derive(Debug, Clone)]
pub struct PassedStatement {
    /// The client's Parse.
    pub parse: bytes::Bytes,
    /// The registry version whose names it was last checked against (0: none yet).
    names_at: u64,
    /// Which Parse of the name this is (as [`RewrittenStatement::id`]).
    id: u64,
    /// The types Postgres inferred for its parameters, once a ParameterDescription of
    /// the statement showed them.
    pub inferred: Vec<u32>,
    /// coldwire's Close of it ran but its Parse did not (an aborted block): Postgres
    /// holds nothing under the name until coldwire parses it again.
    lost: bool,
}

impl PassedStatement {
    /// The text of its Parse (empty if the frame cannot be read).
    fn query(&self) -> &[u8] {
        crate::wire::extended::Parse::decode_raw(&self.parse)
            .map(|(_, q)| q)
            .unwrap_or_default()
    }

    /// The parameter types the client declared, those it left out (0 or missing) as
    /// Postgres inferred them.
    pub fn param_types(&self, declared: &[u32]) -> Vec<u32> {
        let mut types = declared.to_vec();
        fill_inferred(&mut types, &self.inferred);
        types
    }
}

/// Fills the parameter types a Parse left out (0, or missing at the end) with those
/// Postgres inferred.
fn fill_inferred(types: &mut Vec<u32>, inferred: &[u32]) {
    if types.len() < inferred.len() {
        types.resize(inferred.len(), 0);
    }
    for (t, inferred) in types.iter_mut().zip(inferred) {
        if *t == 0 {
            *t = *inferred;
        }
    }
}

/// A statement the client prepared with SQL-level PREPARE, as it went upstream.
#[derive(Debug, Clone)]
struct SqlPassed {
    /// The PREPARE's text.
    text: String,
    /// The registry version whose names it was last checked against (0: none yet).
    names_at: u64,
    /// Which statement of the session's it is (as [`RewrittenStatement::id`]).
    id: u64,
    /// Its EXECUTE is refused: the PREPARE would be now.
    refusal: Option<ErrorFields>,
}

impl RewrittenStatement {
    /// The client's Parse `parse`, planned as `prepared` under registry version
    /// `names_at` (its id is set when it is recorded).
    pub fn new(
        prepared: Prepared,
        param_types: Vec<u32>,
        parse: bytes::Bytes,
        names_at: u64,
    ) -> Self {
        Self {
            prepared,
            param_types,
            id: 0,
            parse,
            names_at,
            lost: false,
        }
    }
}

/// Where a rewritten statement's hot form stands upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HotForm {
    /// Its Parse went upstream and is not answered yet.
    Sent,
    /// Postgres has it.
    Ready,
}

/// The upstream name of the hot form of the rewritten statement `id` (ids are the
/// session's own: one upstream connection per client session).
pub fn hot_statement_name(id: u64) -> String {
    format!("coldwire_hot_{id}")
}

/// What coldwire sends again after a guard failure the client was not shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retry {
    /// A simple Query (the client's frame).
    Query(BytesMut),
    /// An extended-protocol execution: the client's Bind (re-planned), the Describe of
    /// its portal if one followed it, and Execute.
    Bind {
        bind: BytesMut,
        describe: Option<BytesMut>,
        execute: BytesMut,
    },
}

/// A group of messages (up to a sync point) that runs a read coldwire rewrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RewrittenGroup {
    /// What to send again if the guard fails (DESIGN §6.4), while that is still possible:
    /// outside a transaction block, within the retry budget.
    pub retry: Option<Retry>,
    /// Retries already made.
    pub attempt: u8,
    /// Responses to messages coldwire sent itself, which the client must not see.
    pub drop_parse_complete: bool,
    pub drop_bind_complete: bool,
    /// The client got the BindComplete of its Bind (a retry must not send it again; a
    /// guard failure in coldwire's rehydration comes before it).
    pub bind_completed: bool,
    /// RowDescriptions the client already has (from the attempt that failed), to drop.
    pub skip_row_descriptions: u32,
    /// RowDescriptions of this Query that the client has, over every attempt.
    pub client_row_descriptions: u32,
    /// NoData is coldwire's to drop (a simple Query never gets one).
    pub drop_no_data: bool,
    /// The guard failed and the failure was held back: at ReadyForQuery, run it again.
    pub retrying: bool,
    /// A `COPY … TO STDOUT` coldwire serves: the rows of its query re-encoded as COPY data.
    pub copy: Option<CopyOut>,
    /// coldwire's own statements inside the group (the rehydration before each write),
    /// in order.
    pub own: VecDeque<OwnPrefix>,
    /// The group was sent inside a transaction block: a failure is run again only when it
    /// came from coldwire's own part under its savepoint ([`OwnPrefix::in_savepoint`]).
    pub in_block: bool,
    /// Its retry first rolls back to coldwire's savepoint (the failure left the block
    /// aborted inside it).
    pub rollback_to: bool,
}

/// A client statement as coldwire plans it again (`rewritten::replan`).
pub struct Origin {
    /// Which Parse of the name it is.
    pub id: u64,
    /// The client's Parse.
    pub parse: bytes::Bytes,
    /// The parameter types the client declared, or Postgres inferred where it did not.
    pub param_types: Vec<u32>,
    /// The text Postgres holds under the name (`None`: the client's own).
    pub held: Option<String>,
    /// The kind of coldwire's plan of it (`None`: relayed as written).
    pub kind: Option<std::mem::Discriminant<Prepared>>,
}

/// What a client statement is after coldwire planned it again (`rewritten::replan`).
pub enum Planned {
    Rewritten(RewrittenStatement),
    /// Relayed as written: its Parse, the registry version it was checked against, and
    /// the parameter types Postgres inferred for it.
    Passed {
        parse: bytes::Bytes,
        names_at: u64,
        inferred: Vec<u32>,
    },
    /// The name holds coldwire's refusal.
    Refused,
}

/// What a client statement's name held before coldwire planned it again.
#[derive(Debug, Clone)]
enum Held {
    Passed(PassedStatement),
    Rewritten(RewrittenStatement),
}

impl Held {
    fn id(&self) -> u64 {
        match self {
            Held::Passed(p) => p.id,
            Held::Rewritten(r) => r.id,
        }
    }
}

/// A client statement that coldwire planned again and replaced upstream (a Close and a
/// Parse of coldwire's, [`OwnPrefix::replanned`]): restored if Postgres skips them.
#[derive(Debug, Clone)]
pub struct Replanned {
    name: String,
    before: Held,
    /// The id of what replaced it.
    id: u64,
}

impl PartialEq for Replanned {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.id == other.id && self.before.id() == other.before.id()
    }
}

impl Eq for Replanned {}

/// Where coldwire's own messages sit among a group's: after `before` completions of the
/// client's messages since the previous own part (or the group's start), and answered by
/// `left` completions of their own (ParseComplete, BindComplete, CloseComplete,
/// CommandComplete, …), which the client must not see.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnPrefix {
    pub before: u32,
    pub left: u32,
    /// The statement whose hot form coldwire's messages parse, if they do: ready once
    /// they are all answered, absent if they are not.
    pub hot: Option<u64>,
    /// The statements whose hot forms coldwire's messages close: to be closed again if
    /// an error makes Postgres skip them.
    pub closes: Vec<u64>,
    /// The rows coldwire's rehydration brings back, remembered once it answered
    /// ([`SessionState::rows_brought_back`]).
    pub brought_back: Option<BroughtBack>,
    /// The own prepared statement (text, number) its Parse prepares, until answered
    /// ([`SessionState::own_parse_answered`]).
    pub parses: Option<(String, u64)>,
    /// It runs under coldwire's savepoint inside a transaction block: an error of its
    /// guard is undone by rolling back to the savepoint, and the group runs again.
    pub in_savepoint: bool,
    /// Once answered, the block holds these tables' locks and sees these generations
    /// (the savepoint's release, after coldwire's statement that took the locks and
    /// checked them).
    pub locks: Vec<(i64, i64)>,
    /// coldwire's own statement raises a refusal of the client's (it may fail with 0A000
    /// by design): its error says nothing about coldwire's prepared statements.
    pub refusal: bool,
    /// Its Close and Parse replace a client statement relayed as written by coldwire's
    /// plan of it: restored if they are skipped.
    pub replanned: Option<Replanned>,
}

/// A `COPY … TO STDOUT` being served from the rows of its rewritten query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyOut {
    pub options: CopyOptions,
    /// Made when the query's RowDescription arrives; `None` before, or after it failed.
    pub encoder: Option<CopyEncoder>,
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
            catalog_changed: false,
            explain_notice: None,
            groups: VecDeque::new(),
            open_group: None,
            copy_in: false,
            syncs_since_execute: None,
            txn_generations: HashMap::new(),
            own_failure: None,
            brought_back: HashMap::new(),
            own_prepared: HashMap::new(),
            own_prepared_ids: 0,
            early_completions: 0,
            rewritten_statements: HashMap::new(),
            passed: HashMap::new(),
            sql_passed: HashMap::new(),
            bind_replanned: false,
            statement_ids: 0,
            hot_forms: HashMap::new(),
            hot_to_close: Vec::new(),
            hot_forms_off: false,
            sql_prepared: HashMap::new(),
            quiet_since_sync: false,
            retry_pending: false,
            write_candidates: HashMap::new(),
            checks_tiers: false,
        }
    }

    /// The rewrite of the client's statement `name`, if coldwire rewrote it.
    pub fn rewritten_statement(&self, name: &str) -> Option<&RewrittenStatement> {
        self.rewritten_statements.get(name)
    }

    /// Whether the client prepared any write to a tiered table with SQL-level PREPARE.
    pub fn has_sql_prepared_writes(&self) -> bool {
        !self.sql_prepared.is_empty()
    }

    /// The check a statement prepared with the protocol's Parse runs behind, when it
    /// calls a function that reads tiered tables server-side (its SQL-level EXECUTE must
    /// run behind it too).
    pub fn hot_only_call(&self, name: &str) -> Option<&crate::wire::messages::ErrorFields> {
        match self.rewritten_statements.get(name).map(|r| &r.prepared) {
            Some(Prepared::HotOnlyCall(e)) => Some(e),
            _ => None,
        }
    }

    /// Whether any statement the session prepared with Parse is such a call.
    pub fn has_hot_only_calls(&self) -> bool {
        self.rewritten_statements
            .values()
            .any(|r| matches!(r.prepared, Prepared::HotOnlyCall(_)))
    }

    /// The client's SQL-level `PREPARE name(types) AS write` went upstream.
    pub fn sql_prepared_write(&mut self, name: String, write: Arc<PreparedWrite>, types: Vec<u32>) {
        self.sql_prepared.insert(name, (write, types));
    }

    /// The write prepared as `name` with SQL-level PREPARE, and its declared types.
    pub fn sql_prepared(&self, name: &str) -> Option<(&Arc<PreparedWrite>, &[u32])> {
        self.sql_prepared.get(name).map(|(w, t)| (w, t.as_slice()))
    }

    /// `DEALLOCATE name` (`None`: every statement) or a PREPARE of `name` that is no
    /// write to a tiered table.
    pub fn forget_sql_prepared(&mut self, name: Option<&str>) {
        match name {
            Some(name) => {
                self.sql_prepared.remove(name);
            }
            None => self.sql_prepared.clear(),
        }
    }

    /// Whether any client statement is a rewrite (so Bind must be inspected).
    pub fn has_rewritten_statements(&self) -> bool {
        !self.rewritten_statements.is_empty()
    }

    /// The client's Parse of `name` went upstream, rewritten (`Some`) or as it was; `passed`:
    /// as it was, the client's Parse frame, and the registry version whose names it was
    /// checked against (0: none). A named statement Postgres already has is left alone:
    /// Postgres refuses to redefine it.
    pub fn statement_parsed(
        &mut self,
        name: &str,
        rewrite: Option<RewrittenStatement>,
        passed: Option<(&[u8], u64)>,
    ) {
        // A Close or DEALLOCATE of the name sent ahead of the Parse frees it first.
        let closing = self.pending.iter().any(|p| match p {
            Pending::Close(Some(n)) | Pending::Deallocate(Some(n), _) => n == name,
            Pending::Deallocate(None, _) => true,
            _ => false,
        });
        if !name.is_empty() && self.statements.contains(name) && !closing {
            return;
        }
        self.statement_ids += 1;
        let id = self.statement_ids;
        match passed {
            Some((parse, names_at)) => {
                self.passed.insert(
                    name.to_owned(),
                    PassedStatement {
                        parse: bytes::Bytes::copy_from_slice(parse),
                        names_at,
                        id,
                        inferred: Vec::new(),
                        lost: false,
                    },
                );
            }
            None => {
                self.passed.remove(name);
            }
        }
        let replaced = match rewrite {
            Some(mut r) => {
                r.id = id;
                self.rewritten_statements.insert(name.to_owned(), r)
            }
            None => self.rewritten_statements.remove(name),
        };
        self.retire(replaced);
    }

    /// Whether any client statement is followed as relayed (so Bind must be inspected).
    pub fn has_passed_statements(&self) -> bool {
        !self.passed.is_empty()
    }

    /// Whether a Bind of the client's statement `name`, relayed as the client wrote it,
    /// must be planned first: the names of tiered tables changed since it was checked
    /// (`names`: the version of the registry now, `None` when it is not known fresh) and
    /// its text may name one (`may_name`). A statement found not to is marked checked.
    pub fn passed_to_plan(
        &mut self,
        name: &str,
        names: impl FnOnce() -> Option<u64>,
        may_name: impl FnOnce(&[u8]) -> bool,
    ) -> bool {
        let Some(passed) = self.passed.get_mut(name) else {
            return false;
        };
        if passed.lost {
            return true;
        }
        let Some(version) = names() else {
            return true;
        };
        if passed.names_at == version {
            return false;
        }
        if may_name(passed.query()) {
            return true;
        }
        passed.names_at = version;
        false
    }

    /// Whether the text of the client's statement `name`, relayed as written, may name a
    /// tiered table by `may_name`, the names of registry version `known`, unless it was
    /// checked against that version.
    pub fn passed_may_name(
        &self,
        name: &str,
        known: Option<u64>,
        may_name: impl FnOnce(&[u8]) -> bool,
    ) -> bool {
        self.passed
            .get(name)
            .is_some_and(|passed| Some(passed.names_at) != known && may_name(passed.query()))
    }

    /// Whether a statement the client prepared with SQL-level PREPARE was not checked
    /// against the names of registry version `names` (`None`: not known fresh).
    pub fn has_sql_passed_unchecked(&self, names: Option<u64>) -> bool {
        self.sql_passed.values().any(|p| Some(p.names_at) != names)
    }

    /// The statements the client prepared with SQL-level PREPARE, relayed as written,
    /// that were not checked against the names of registry version `names`: their names
    /// and the texts of their PREPAREs.
    pub fn sql_passed_unchecked(&self, names: u64) -> Vec<(String, String)> {
        self.sql_passed
            .iter()
            .filter(|(_, p)| p.names_at != names)
            .map(|(name, p)| (name.clone(), p.text.clone()))
            .collect()
    }

    /// The SQL-level prepared statement `name` was checked against the names of registry
    /// version `names`; `refusal`: its EXECUTE is refused so.
    pub fn sql_passed_checked(&mut self, name: &str, names: u64, refusal: Option<ErrorFields>) {
        if let Some(p) = self.sql_passed.get_mut(name) {
            p.names_at = names;
            p.refusal = refusal;
        }
    }

    /// The refusal of an EXECUTE of the SQL-level prepared statement `name`, if it has one.
    pub fn sql_passed_refusal(&self, name: &str) -> Option<&ErrorFields> {
        self.sql_passed.get(name)?.refusal.as_ref()
    }

    /// Whether an EXECUTE of some SQL-level prepared statement is refused.
    pub fn has_sql_passed_refusals(&self) -> bool {
        self.sql_passed.values().any(|p| p.refusal.is_some())
    }

    /// Whether a Bind of the client's statement `name`, which coldwire rewrote, must be
    /// planned again first: the registry changed since it was planned (`names`: the
    /// version of the registry now, `None` when it is not known fresh), so the tables it
    /// names may have been tiered or untiered, or their columns changed. While the
    /// registry is not known fresh (after an admin call through this proxy, or once its
    /// time to live passed) it is planned again too: its plan is cached per registry
    /// version, and the planning reads the registry afresh.
    pub fn rewritten_to_plan(&self, name: &str, names: impl FnOnce() -> Option<u64>) -> bool {
        self.rewritten_statements
            .get(name)
            .is_some_and(|s| s.lost || names() != Some(s.names_at))
    }

    /// What the client's statement `name` is planned from again, if coldwire follows it.
    pub fn statement_origin(&self, name: &str) -> Option<Origin> {
        if let Some(passed) = self.passed.get(name) {
            let declared = crate::wire::extended::Parse::decode(&passed.parse)
                .map(|p| p.param_types)
                .unwrap_or_default();
            return Some(Origin {
                id: passed.id,
                parse: passed.parse.clone(),
                param_types: passed.param_types(&declared),
                held: passed.lost.then(String::new),
                kind: None,
            });
        }
        let statement = self.rewritten_statements.get(name)?;
        let held = match &statement.prepared {
            // Nothing: no plan holds it, so it is parsed again whatever the plan.
            _ if statement.lost => Some(String::new()),
            Prepared::Read(read) => Some(read.sql.clone()),
            Prepared::Write(_) | Prepared::HotOnlyCall(_) => None,
        };
        Some(Origin {
            id: statement.id,
            parse: statement.parse.clone(),
            param_types: statement.param_types.clone(),
            held,
            kind: Some(std::mem::discriminant(&statement.prepared)),
        })
    }

    /// Whether the name `name` still holds statement `id` (not parsed again, closed or
    /// freed).
    pub fn still_holds(&self, name: &str, id: u64) -> bool {
        self.passed.get(name).map(|p| p.id) == Some(id)
            || self.rewritten_statements.get(name).map(|r| r.id) == Some(id)
    }

    /// The statement `name`, which coldwire rewrote, was planned again to the same text
    /// under registry version `names_at`: `prepared` is its plan now.
    pub fn rewritten_checked(&mut self, name: &str, names_at: u64, prepared: Prepared) {
        if let Some(statement) = self.rewritten_statements.get_mut(name) {
            statement.names_at = names_at;
            statement.prepared = prepared;
        }
        self.bind_replanned = true;
    }

    /// The statement `name`, relayed as written, was planned again and stays as it is,
    /// checked against the names of registry version `names_at`.
    pub fn passed_checked(&mut self, name: &str, names_at: u64) {
        if let Some(passed) = self.passed.get_mut(name) {
            passed.names_at = names_at;
        }
    }

    /// The client's statement `name` was planned again and is now `now`. Returns what it
    /// was, to be restored if Postgres skips coldwire's messages that replace it
    /// ([`Self::replan_skipped`]); `None` if the name holds no statement coldwire follows.
    pub fn statement_replanned(&mut self, name: &str, now: Planned) -> Option<Replanned> {
        let before = match self.passed.remove(name) {
            Some(passed) => Held::Passed(passed),
            None => {
                let rewritten = self.rewritten_statements.remove(name)?;
                // Its hot form holds its old plan.
                self.retire(Some(rewritten.clone()));
                Held::Rewritten(rewritten)
            }
        };
        self.bind_replanned = true;
        self.statement_ids += 1;
        let id = self.statement_ids;
        match now {
            Planned::Rewritten(mut r) => {
                r.id = id;
                self.rewritten_statements.insert(name.to_owned(), r);
            }
            Planned::Passed {
                parse,
                names_at,
                inferred,
            } => {
                self.passed.insert(
                    name.to_owned(),
                    PassedStatement {
                        parse,
                        names_at,
                        id,
                        inferred,
                        lost: false,
                    },
                );
            }
            Planned::Refused => {}
        }
        Some(Replanned {
            name: name.to_owned(),
            before,
            id,
        })
    }

    /// Postgres skipped coldwire's messages that replaced a client statement with its
    /// new plan (an error earlier in their group, or in them): the name still holds what
    /// it held, or nothing when only the Parse failed (`closed`: the Close ran, as it does
    /// in an aborted block where the Parse does not), and it is planned again at its next
    /// Bind.
    pub fn replan_skipped(&mut self, replanned: Replanned, closed: bool) {
        let Replanned { name, before, id } = replanned;
        let holds_new = match (self.passed.get(&name), self.rewritten_statements.get(&name)) {
            (Some(p), _) => p.id == id,
            (None, Some(r)) => r.id == id,
            (None, None) => true,
        };
        if !holds_new {
            return;
        }
        self.passed.remove(&name);
        let gone = self.rewritten_statements.remove(&name);
        self.retire(gone);
        match before {
            Held::Passed(mut passed) => {
                passed.names_at = 0;
                passed.lost |= closed;
                self.passed.insert(name, passed);
            }
            Held::Rewritten(mut rewritten) => {
                rewritten.names_at = 0;
                rewritten.lost |= closed;
                self.rewritten_statements.insert(name, rewritten);
            }
        }
    }

    /// A rewritten statement is gone: its hot form, if Postgres has or is preparing one,
    /// is to be closed.
    fn retire(&mut self, statement: Option<RewrittenStatement>) {
        if let Some(id) = statement.map(|s| s.id) {
            if self.hot_forms.remove(&id).is_some() {
                self.hot_to_close.push(id);
            }
        }
    }

    /// Where the hot form of the rewritten statement `id` stands upstream.
    pub fn hot_form(&self, id: u64) -> Option<HotForm> {
        self.hot_forms.get(&id).copied()
    }

    /// Whether a Bind of the client's statement `name` may run its hot form: Postgres
    /// confirmed the statement (ParseComplete), no Parse, Close or DEALLOCATE that may
    /// change what the name holds is unanswered, and no statement was freed unseen.
    /// Otherwise the name may hold another statement than coldwire's record by the time
    /// the Bind runs, and the full rewrite, bound to the client's own statement, fails
    /// as Postgres would where the hot form would answer for the wrong one.
    pub fn may_use_hot_form(&self, name: &str) -> bool {
        !self.hot_forms_off
            && !name.is_empty()
            && self.statements.contains(name)
            && !self.pending.iter().any(|p| match p {
                Pending::Parse(n) | Pending::Close(Some(n)) => n == name,
                Pending::Deallocate(..) => true,
                _ => false,
            })
    }

    /// coldwire sent the Parse of the hot form of statement `id`.
    pub fn hot_form_sent(&mut self, id: u64) {
        self.hot_forms.insert(id, HotForm::Sent);
    }

    /// The Parse of the hot form of statement `id` was answered: by its ParseComplete
    /// (`parsed`), or not (an error before or at it, and Postgres skipped to Sync).
    pub fn hot_form_answered(&mut self, id: u64, parsed: bool) {
        if !parsed {
            self.hot_forms.remove(&id);
        } else if self.rewritten_statements.values().any(|s| s.id == id) {
            self.hot_forms.insert(id, HotForm::Ready);
        } else {
            // Its statement went while it was being prepared.
            self.hot_forms.remove(&id);
            self.hot_to_close.push(id);
        }
    }

    /// The hot forms to close, taken.
    pub fn take_hot_to_close(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.hot_to_close)
    }

    /// Postgres skipped coldwire's Closes of these hot forms (an error earlier in their
    /// group): they are closed at the next chance. A Close that did run is harmless to
    /// send again.
    pub fn hot_closes_skipped(&mut self, ids: Vec<u64>) {
        self.hot_to_close.extend(ids);
    }

    /// The client sent Describe of statement `name`.
    pub fn describe_statement_sent(&mut self, name: &str) {
        let statement = self.rewritten_statements.get(name);
        let trim = match statement.map(|r| &r.prepared) {
            Some(Prepared::Read(read)) => Some(read.client_params),
            _ => None,
        };
        let statement = statement
            .map(|r| r.id)
            .or_else(|| self.passed.get(name).map(|p| p.id))
            .map(|id| (name.to_owned(), id));
        self.pending
            .push_back(Pending::DescribeStatement { statement, trim });
    }

    /// The server answered ParameterDescription, whose parameter types `types` reads
    /// (only for a statement coldwire rewrote): the types the client may see, when the
    /// description must be trimmed to the client's parameters. The types Postgres
    /// inferred for parameters the client's Parse left untyped are kept for its Binds
    /// (a binary value is read only as its true type), unless the name was parsed again
    /// since.
    ///
    /// # Errors
    /// Those of `types`.
    pub fn parameter_description_received<E>(
        &mut self,
        types: impl FnOnce() -> Result<Vec<u32>, E>,
    ) -> Result<Option<Vec<u32>>, E> {
        let Some(Pending::DescribeStatement { statement, trim }) =
            self.pop_until(|p| matches!(p, Pending::DescribeStatement { .. }))
        else {
            return Ok(None);
        };
        if statement.is_none() && trim.is_none() {
            return Ok(None);
        }
        let mut types = types()?;
        if let Some(passed) = statement
            .as_ref()
            .and_then(|(name, id)| self.passed.get_mut(name).filter(|p| p.id == *id))
        {
            passed.inferred.clone_from(&types);
        }
        if let Some((name, id)) = statement {
            if let Some(statement) = self
                .rewritten_statements
                .get_mut(&name)
                .filter(|s| s.id == id)
            {
                let seen = trim.unwrap_or(types.len()).min(types.len());
                fill_inferred(&mut statement.param_types, &types[..seen]);
            }
        }
        Ok(trim.map(|client_params| {
            types.truncate(client_params);
            types
        }))
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
        if let Some(name) = statement {
            self.passed.remove(name);
            let closed = self.rewritten_statements.remove(name);
            self.retire(closed);
        }
        self.pending
            .push_back(Pending::Close(statement.map(str::to_owned)));
    }

    /// The client sent an Execute: a Sync after it is not answered if the statement turns
    /// out to be a COPY FROM STDIN ([`SessionState::copy_in_started`]).
    pub fn execute_sent(&mut self) {
        self.syncs_since_execute = Some(0);
    }

    /// The server began a COPY FROM STDIN. Postgres ignores every Sync the client sends
    /// until its CopyDone or CopyFail (protocol.sgml, "COPY Operations"), so they are not
    /// waited for: those sent already behind the Execute that began it (tokio-postgres
    /// sends Bind, Execute and Sync together) are taken back, and later ones not counted.
    pub fn copy_in_started(&mut self) {
        self.copy_in = true;
        if let Some(syncs) = &mut self.syncs_since_execute {
            for _ in 0..std::mem::take(syncs) {
                if let Some(at) = self.pending.iter().rposition(|p| *p == Pending::SyncPoint) {
                    self.pending.remove(at);
                }
                self.groups.pop_back();
                self.outstanding_syncs = self.outstanding_syncs.saturating_sub(1);
            }
        }
    }

    /// A COPY FROM STDIN ended: the client sent CopyDone or CopyFail, or Postgres sent an
    /// error or ReadyForQuery (after an error Postgres drops the client's copy messages,
    /// and a client need not send them). The client's next Sync is answered.
    pub fn copy_in_ended(&mut self) {
        self.copy_in = false;
    }

    /// A simple Query went upstream (its text, when UTF-8): it replaces the unnamed
    /// statement, and the named statements its DEALLOCATE or DISCARD ALL free are
    /// forgotten once Postgres confirms ([`Self::deallocated`]).
    pub fn query_sent(&mut self, sql: Option<&str>) {
        self.syncs_since_execute = None;
        for freed in sql
            .map(crate::sql::classify::freed_statements)
            .unwrap_or_default()
        {
            self.pending
                .push_back(Pending::Deallocate(freed, self.statement_ids));
        }
        if let Some(sql) = sql {
            self.sql_prepares_sent(sql.as_bytes());
        }
        self.forget_unnamed();
        self.sync_sent();
    }

    /// Statement text `sql` went upstream, in a Query or a Parse: the statements its SQL
    /// PREPAREs make are remembered, to be checked again at their EXECUTE once the
    /// tables they name may have been tiered. Text that is not UTF-8 is not read.
    pub fn sql_prepares_sent(&mut self, sql: &[u8]) {
        let Ok(sql) = std::str::from_utf8(sql) else {
            return;
        };
        for (name, text) in crate::sql::classify::sql_prepares(sql) {
            self.statement_ids += 1;
            let id = self.statement_ids;
            self.sql_passed.insert(
                name,
                SqlPassed {
                    text,
                    names_at: 0,
                    id,
                    refusal: None,
                },
            );
        }
    }

    /// The unnamed statement was replaced by one coldwire did not rewrite.
    pub fn forget_unnamed(&mut self) {
        self.rewritten_statements.remove("");
        self.passed.remove("");
    }

    /// The client sent a message that ReadyForQuery answers (Sync, Query, FunctionCall).
    pub fn sync_sent(&mut self) {
        if self.copy_in {
            return;
        }
        if let Some(syncs) = &mut self.syncs_since_execute {
            *syncs += 1;
        }
        match self.open_group.take() {
            Some(open) => self.group_sent(Group::Rewritten(open)),
            None => self.group_sent(Group::Client),
        }
    }

    /// coldwire sent messages of its own into the group being sent, answered after
    /// `before` completions of the client's messages in it.
    pub fn own_messages_sent(&mut self, mut own: OwnPrefix) {
        own.before = own
            .before
            .saturating_sub(std::mem::take(&mut self.early_completions));
        self.open_group
            .get_or_insert_with(RewrittenGroup::default)
            .own
            .push_back(own);
    }

    /// A completion went to the client: counted when it answers the group being sent
    /// (no Sync outstanding) after coldwire's own messages in it were all answered.
    pub fn completion_passed(&mut self) {
        let open =
            self.groups.is_empty() && self.open_group.as_ref().is_none_or(|g| g.own.is_empty());
        if open {
            self.early_completions += 1;
        }
    }

    fn group_sent(&mut self, group: Group) {
        self.early_completions = 0;
        self.pending.push_back(Pending::SyncPoint);
        self.outstanding_syncs += 1;
        self.groups.push_back(group);
    }

    /// A retry went upstream as a group of its own, ahead of everything the client sent
    /// after the group that failed: the client direction holds that back while a retry
    /// is pending, so the groups and pending answers recorded since are all behind the
    /// retry on the wire, and so it is answered first. coldwire's messages of the group
    /// the client is sending (`open_group`) stay with that group.
    pub fn retry_group_sent(&mut self, group: RewrittenGroup) {
        self.pending.push_front(Pending::SyncPoint);
        self.outstanding_syncs += 1;
        self.groups.push_front(Group::Rewritten(group));
    }

    /// A group that runs a rewritten read went upstream, ending with its sync point.
    pub fn rewritten_group_sent(&mut self, mut group: RewrittenGroup) {
        if let Some(open) = self.open_group.take() {
            if group.own.is_empty() {
                group.own = open.own;
            }
        }
        self.group_sent(Group::Rewritten(group));
    }

    /// coldwire's own statement went upstream as a group of its own (Sync included, its
    /// messages untracked); `reply` gets its result.
    pub fn own_group_sent(&mut self, reply: oneshot::Sender<OwnResult>) {
        self.quiet_since_sync = false;
        self.group_sent(Group::Own(OwnGroup {
            rows: Vec::new(),
            error: None,
            reply: Some(reply),
        }));
    }

    /// Whether every message sent upstream is answered (given the client sent nothing
    /// since its last Sync).
    pub fn quiet(&self) -> bool {
        self.outstanding_syncs == 0 && self.pending.is_empty()
    }

    /// How to send coldwire's own statement `sql` now ([`OwnForm`]), `quiet` when nothing
    /// sent before it is unanswered (so no DEALLOCATE or DISCARD the client sent, which
    /// may free coldwire's statements too, is on its way): bound by name once Postgres
    /// has it; prepared under a new name the first time (the Parse then travels with it:
    /// [`OwnForm::Parse`], to be answered by [`Self::own_parse_answered`]); parsed and
    /// closed again otherwise: while not quiet, while its Parse is on its way, or beyond
    /// [`MAX_OWN_PREPARED`] statements.
    pub fn own_form(&mut self, sql: &str, quiet: bool) -> OwnForm {
        if !quiet {
            return OwnForm::Once;
        }
        match self.own_prepared.get(sql) {
            Some((id, HotForm::Ready)) => OwnForm::Bind(*id),
            Some((_, HotForm::Sent)) => OwnForm::Once,
            None if self.own_prepared.len() < MAX_OWN_PREPARED => {
                self.own_prepared_ids += 1;
                let id = self.own_prepared_ids;
                self.own_prepared
                    .insert(sql.to_owned(), (id, HotForm::Sent));
                OwnForm::Parse(id)
            }
            None => OwnForm::Once,
        }
    }

    /// The Parse of coldwire's own statement `sql` number `id` was answered: by its
    /// ParseComplete (`parsed`), or not (an error before or at it; Postgres skipped to
    /// Sync), when it is parsed again next time.
    pub fn own_parse_answered(&mut self, (sql, id): (String, u64), parsed: bool) {
        if self.own_prepared.get(&sql).is_some_and(|(i, _)| *i == id) {
            if parsed {
                self.own_prepared.insert(sql, (id, HotForm::Ready));
            } else {
                self.own_prepared.remove(&sql);
            }
        }
    }

    /// coldwire's own prepared statements may be gone (an error said a statement does
    /// not exist: freed where coldwire could not see it): each is prepared again.
    pub fn forget_own_prepared(&mut self) {
        self.own_prepared.clear();
    }

    /// Whether upstream frames of every type must be held whole: coldwire's own
    /// statements (alone or inside a group) or a COPY it serves are being answered.
    pub fn needs_whole_frames(&self) -> bool {
        let rewritten = |g: &RewrittenGroup| g.copy.is_some() || !g.own.is_empty();
        self.open_group.as_ref().is_some_and(rewritten)
            || self.groups.iter().any(|g| match g {
                Group::Own(_) => true,
                Group::Rewritten(r) => rewritten(r),
                Group::Client => false,
            })
    }

    /// coldwire's own statement that responses arriving now answer, if they answer one.
    pub fn answering_own(&mut self) -> Option<&mut OwnGroup> {
        match self.groups.front_mut() {
            Some(Group::Own(own)) => Some(own),
            _ => None,
        }
    }

    /// Ends coldwire's own group being answered (its ReadyForQuery with `status` arrived).
    pub fn own_group_answered(&mut self, status: u8) -> Option<OwnGroup> {
        let own = match self.groups.front_mut() {
            Some(Group::Own(own)) => Some(OwnGroup {
                rows: std::mem::take(&mut own.rows),
                error: own.error.take(),
                reply: own.reply.take(),
            }),
            _ => None,
        };
        self.ready_for_query(status);
        own
    }

    /// The rewritten group that responses arriving now answer, if they answer one (the
    /// group still being sent, when every earlier one is answered).
    pub fn answering_rewritten(&mut self) -> Option<&mut RewrittenGroup> {
        match self.groups.front_mut() {
            Some(Group::Rewritten(group)) => Some(group),
            Some(_) => None,
            None => self.open_group.as_mut(),
        }
    }

    /// The rewritten group the next ReadyForQuery ends, taken out.
    pub fn take_answered_group(&mut self) -> Option<RewrittenGroup> {
        match self.groups.front_mut() {
            Some(Group::Rewritten(group)) => Some(std::mem::take(group)),
            _ => None,
        }
    }

    /// Messages answered by ReadyForQuery that are still unanswered; zero means every
    /// request the client sent so far has been answered (given the client has not sent
    /// extended-protocol messages since its last Sync).
    pub fn outstanding_syncs(&self) -> usize {
        // A COPY FROM under way is a request not yet answered: nothing of coldwire's own
        // may go upstream in the middle of it.
        self.outstanding_syncs + usize::from(self.copy_in)
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

    /// The server answered CommandComplete `DEALLOCATE`, `DEALLOCATE ALL` or `DISCARD
    /// ALL` (`all`: one of the last two): the names it freed may be parsed again, as
    /// other statements.
    pub fn deallocated(&mut self, all: bool) {
        // coldwire's own prepared statements are freed by DEALLOCATE ALL and DISCARD ALL:
        // prepared again under new names. (A DEALLOCATE of one of their names is met by
        // its 26000.)
        if all {
            self.own_prepared.clear();
        }
        // Only a simple Query's DEALLOCATE left an entry, and its entries are all that is
        // pending when its answers arrive. One run otherwise (the extended protocol, a
        // string of statements coldwire sends as a group, a function) freed names coldwire
        // cannot tell: its hot forms may bind a statement the client no longer has.
        // So the next Parse of any name is taken as Postgres's (the name was most likely
        // freed to be parsed again), and no hot form is used again.
        if !matches!(self.pending.front(), Some(Pending::Deallocate(..))) {
            self.hot_forms_off = true;
            self.hot_forms.clear();
            self.statements.clear();
            return;
        }
        let Some(Pending::Deallocate(freed, newest)) = self.pending.pop_front() else {
            return;
        };
        match freed {
            Some(name) => {
                self.statements.remove(&name);
                if self.passed.get(&name).is_some_and(|p| p.id <= newest) {
                    self.passed.remove(&name);
                }
                if self.sql_passed.get(&name).is_some_and(|p| p.id <= newest) {
                    self.sql_passed.remove(&name);
                }
                if self
                    .rewritten_statements
                    .get(&name)
                    .is_some_and(|s| s.id <= newest)
                {
                    let freed = self.rewritten_statements.remove(&name);
                    self.retire(freed);
                }
            }
            // Every named statement, hot forms included; the unnamed one stays.
            None => {
                self.statements.clear();
                self.rewritten_statements
                    .retain(|name, s| name.is_empty() || s.id > newest);
                self.passed
                    .retain(|name, p| name.is_empty() || p.id > newest);
                self.sql_passed.retain(|_, p| p.id > newest);
                self.hot_forms.retain(|id, _| *id > newest);
                self.hot_to_close.retain(|id| *id > newest);
            }
        }
    }

    /// The server sent ReadyForQuery with `status`.
    pub fn ready_for_query(&mut self, status: u8) {
        if let Some(phase) = Phase::from_status(status) {
            self.phase = phase;
        }
        // Idle: the transaction block ended, and its snapshot and locks with it. Failed:
        // the ROLLBACK TO SAVEPOINT that may follow gives back the locks `read_lock` took
        // after the savepoint, so the next read asks again.
        if matches!(self.phase, Phase::Idle | Phase::FailedTransaction) {
            self.txn_generations.clear();
            self.brought_back.clear();
        }
        if self.phase == Phase::Idle {
            self.own_failure = None;
        }
        self.outstanding_syncs = self.outstanding_syncs.saturating_sub(1);
        self.groups.pop_front();
        // Everything up to the first sync point is answered or was skipped after an error.
        let mut skipped_parses = Vec::new();
        while let Some(p) = self.pending.pop_front() {
            match p {
                Pending::SyncPoint => break,
                Pending::Parse(name) if !name.is_empty() => skipped_parses.push(name),
                _ => {}
            }
        }
        // A named statement whose Parse failed is not Postgres's: nothing to follow (unless
        // the name is parsed again, or Postgres holds an earlier statement under it).
        for name in skipped_parses {
            let again = self
                .pending
                .iter()
                .any(|p| matches!(p, Pending::Parse(n) if *n == name));
            if !again && !self.statements.contains(&name) {
                self.passed.remove(&name);
            }
        }
    }

    /// The error to give the client for an error Postgres sent it with `code`: the
    /// failure of coldwire's own group that aborted the block, once, in place of the
    /// first 25P02 ("current transaction is aborted") after it.
    pub fn block_failure(&mut self, code: &str) -> Option<ErrorFields> {
        if code != "25P02" {
            return None;
        }
        let cause = self.own_failure.take()?;
        Some(ErrorFields {
            detail: Some(format!(
                "coldwire's own statement for this transaction block (coldwire.read_lock before the block's first statement on a tiered table, or the rollback to its savepoint) failed, which aborted the block{}",
                cause.detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default()
            )),
            hint: Some("Roll the transaction block back and run it again.".into()),
            ..cause
        })
    }

    /// A rehydration of the client's transaction answered: its rows are remembered when
    /// it inserted every one of them itself, inside a transaction block (an implicit
    /// transaction ends at its Sync), up to [`MAX_BROUGHT_BACK`] keys per block.
    pub fn rows_brought_back(&mut self, rows: BroughtBack) {
        let held: usize = self.brought_back.values().map(HashSet::len).sum();
        if rows.confirmed
            && self.phase == Phase::InTransaction
            && held + rows.keys.len() <= MAX_BROUGHT_BACK
        {
            self.brought_back
                .entry(rows.table)
                .or_default()
                .extend(rows.keys);
        }
    }

    /// The server completed a command with `tag` (the CommandComplete's text). Any
    /// command but a plain read or write may undo rows the block brought back (`ROLLBACK
    /// TO SAVEPOINT`, a procedure's `ROLLBACK`, `COMMIT AND CHAIN`): they are forgotten.
    pub fn command_completed(&mut self, tag: &[u8]) {
        const KEEP: [&[u8]; 6] = [
            b"SELECT ", b"INSERT ", b"UPDATE ", b"DELETE ", b"MERGE ", b"FETCH ",
        ];
        if !self.brought_back.is_empty() && !KEEP.iter().any(|k| tag.starts_with(k)) {
            self.brought_back.clear();
        }
    }

    /// The rows of `tables` the block brought back, for planning the statement about to
    /// be sent, when every message sent before it is answered (so a ROLLBACK TO still on
    /// its way cannot undo them unseen).
    pub fn known_hot(&self, tables: &[i64]) -> KnownHot {
        if self.phase != Phase::InTransaction || !self.quiet() {
            return KnownHot::new();
        }
        tables
            .iter()
            .filter_map(|t| Some((*t, self.brought_back.get(t)?.clone())))
            .collect()
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
#[path = "state_tests.rs"]
mod tests;
