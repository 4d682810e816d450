//! Merged reads (DESIGN §6): a statement that reads a tiered table is rewritten once
//! (`sql::rewrite`, cached per statement text), and at every execution its cold rows are
//! found per reference (`sql::predicates` with the Bind values, `cold::scan`) and bound as
//! parameters after the client's own: per reference, the rows (one array per column read,
//! or one array of the table's row type: `sql::rewrite`), then the guard's plan
//! (`coldwire.guard`, catalog v4).
//!
//! A simple Query runs as Parse/Bind/Describe/Execute/Sync of the unnamed statement
//! ([`ReadPath::plan`]); an extended-protocol statement is rewritten at Parse
//! ([`ReadPath::prepare`]) and given its cold parameters at each Bind
//! ([`ReadPath::cold_params`]).

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::{BufMut, BytesMut};

use super::aggregate::{rewrite_aggregate_read, AggregatePlan, NARROW_KEYS};
use super::catalog::CatalogCache;
use super::writes::PreparedWrite;
use crate::catalog::registry::Registry;
use crate::cold::scan::{scan, ColdTable, ScanError, ScanLimits};
use crate::error::fields;
pub use crate::error::PlanError;
use crate::segment::prune::{integer_values, Predicate};
use crate::sql::classify::{contains_ignore_ascii_case, kinds_of, Kind};
use crate::sql::ddl::Ddl;
use crate::sql::params::BoundParams;
use crate::sql::predicates::{extract, to_prune, ColumnPredicate};
use crate::sql::quote::display_ident;
use crate::sql::rewrite::{expand_views, rewrite_parsed, unqualify_columns, ColdBinding};
use crate::store::ColdStore;
use crate::values::record::{encode_column_arrays, encode_record_batches};
use crate::values::ColdColumn;
use crate::wire::messages::ErrorFields;
use pg_query::protobuf::{node::Node as N, ObjectType};

/// Most cold rows a retried aggregate reads as rows before it takes partials again.
const RETRY_ROWS: usize = 100_000;

/// The most bytes of cold rows bound for one reference: Postgres allocates at most
/// 1 GB - 1 for one value (MaxAllocSize) and for one message, and the arrays' headers and
/// the rest of the Bind stay under this margin.
const MAX_ARRAY_BYTES: usize = 1_000_000_000;

/// Views over views expanded at most this deep.
const MAX_VIEW_DEPTH: usize = 8;

/// Statement texts whose rewrite is remembered; the cache starts over when full.
pub(super) const STATEMENT_CACHE_ENTRIES: usize = 1024;

/// (statement text, declared parameter count) → the rewrite (None: nothing to rewrite),
/// with the registry version it was made under.
type StatementCache = HashMap<(String, usize), (u64, Option<Arc<PreparedRead>>)>;

/// A statement over tiered tables, rewritten and ready to be bound.
#[derive(Debug)]
pub struct PreparedRead {
    /// The rewritten text.
    pub sql: String,
    /// Parameters of the client's statement: its highest `$n`, or as many types as its
    /// Parse declared, whichever is more. coldwire's parameters follow them.
    pub client_params: usize,
    pub(super) references: Vec<PlannedReference>,
    /// For `EXPLAIN …` of a read: the statement explained, which coldwire plans as it
    /// would run it (its path per reference is told to the client in a notice).
    pub explained: Option<String>,
    /// The statement's hot form (`sql::rewrite`), run instead when no reference has a
    /// cold row to bind ([`Self::hot_form`]). `None` for aggregates over partials and
    /// for EXPLAIN, which shows the full rewrite.
    pub hot_sql: Option<String>,
}

/// The parameters coldwire binds for one execution of a [`PreparedRead`].
#[derive(Debug)]
pub struct ColdParams {
    /// Per reference: its cold rows (or partials), none when it has no cold rows to bind
    /// (bound as empty arrays, made only if the full rewrite runs), then its guard's plan.
    refs: Vec<(Option<Vec<BytesMut>>, BytesMut)>,
    /// Whether any reference has cold rows or partials bound.
    pub injected: bool,
}

impl ColdParams {
    /// The parameters after the client's for the full rewrite of `prepared`.
    fn values(self, prepared: &PreparedRead) -> Vec<BytesMut> {
        let mut values = Vec::with_capacity(prepared.cold_param_count());
        for ((rows, plan), r) in self.refs.into_iter().zip(&prepared.references) {
            values.extend(rows.unwrap_or_else(|| r.no_rows()));
            values.push(plan);
        }
        values
    }
}

impl PreparedRead {
    /// Parameters coldwire appends at each Bind.
    pub fn cold_param_count(&self) -> usize {
        self.references
            .iter()
            .map(PlannedReference::param_count)
            .sum()
    }

    /// The statement's hot form and the parameters after the client's for it (each
    /// reference's guard plan), when it has one and no reference of `cold` has a cold row.
    pub fn hot_form(&self, cold: &ColdParams) -> Option<(&str, Vec<BytesMut>)> {
        let hot = self.hot_sql.as_deref().filter(|_| !cold.injected)?;
        let params = cold.refs.iter().map(|(_, plan)| plan.clone()).collect();
        Some((hot, params))
    }

    /// The text to run with `cold` and the parameters after the client's: the hot form
    /// when it serves, else the full rewrite.
    pub fn form(&self, cold: ColdParams) -> (&str, Vec<BytesMut>) {
        match self.hot_form(&cold) {
            Some(hot) => hot,
            None => self.full_form(cold),
        }
    }

    /// The full rewrite with the parameters after the client's for `cold`.
    pub fn full_form(&self, cold: ColdParams) -> (&str, Vec<BytesMut>) {
        (&self.sql, cold.values(self))
    }

    /// The tiered tables the statement reads, each once.
    pub fn table_ids(&self) -> Vec<i64> {
        let mut ids: Vec<i64> = self.references.iter().map(|r| r.table_id).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

#[derive(Debug)]
pub(super) struct PlannedReference {
    pub(super) table_id: i64,
    /// The conjuncts of its query block that constrain it, `$n` unresolved.
    pub(super) predicates: Vec<ColumnPredicate>,
    pub(super) row_type: u32,
    /// Set when the statement aggregates this table and Postgres combines partials
    /// (`sql::aggregate`): its parameters are then the cold rows, the cold partials and
    /// the guard's plan, and each Bind fills one of the first two.
    pub(super) aggregate: Option<AggregatePlan>,
    /// The names of the columns the statement may read through it (`sql::columns`);
    /// `None`: every column. The cold rows bound carry NULL in the others.
    pub(super) read_names: Option<HashSet<String>>,
    /// How its cold rows are bound.
    pub(super) binding: ColdBinding,
}

impl PlannedReference {
    /// Per column of `cold`, whether the statement may read it; `None`: every one.
    pub(super) fn read_columns(&self, cold: &ColdTable) -> Option<Vec<bool>> {
        if let ColdBinding::Columns(bound) = &self.binding {
            let mut read = vec![false; cold.columns.len()];
            for b in bound {
                if let Some(r) = read.get_mut(b.index) {
                    *r = true;
                }
            }
            return read.contains(&false).then_some(read);
        }
        let names = self.read_names.as_ref()?;
        Some(
            cold.columns
                .iter()
                .map(|c| names.contains(&c.name))
                .collect(),
        )
    }
}

impl PlannedReference {
    /// The parameters coldwire binds for it: cold rows (and cold partials, for an
    /// aggregate), then the guard's plan.
    pub(super) fn param_count(&self) -> usize {
        self.binding.param_count() + usize::from(self.aggregate.is_some()) + 1
    }

    /// The cold rows `found` of `cold`, bound as the reference binds them.
    fn bind_rows(
        &self,
        cold: &ColdTable,
        found: Vec<arrow::array::RecordBatch>,
    ) -> Result<Vec<BytesMut>, PlanError> {
        // A hot key's lookup finds none: no column list to make (a String per column).
        if found.iter().all(|b| b.num_rows() == 0) {
            return Ok(self.no_rows());
        }
        let columns: Vec<ColdColumn> = cold
            .columns
            .iter()
            .map(|c| ColdColumn::new(c.name.clone(), c.ty))
            .collect();
        let arrays = match &self.binding {
            ColdBinding::Rows => {
                let mut array = BytesMut::new();
                encode_record_batches(&columns, self.row_type, found, &mut array)
                    .map_err(|e| PlanError::Catalog(e.to_string()))?;
                vec![array]
            }
            ColdBinding::Columns(bound) => {
                // The statement was rewritten for the columns the registry listed; a
                // table that changed since cannot be bound by position.
                if bound.iter().any(|b| {
                    columns
                        .get(b.index)
                        .is_none_or(|c| c.ty.type_oid() != b.type_oid)
                }) {
                    return Err(PlanError::Catalog(format!(
                        "the columns of {} changed while the statement was planned; run it again",
                        cold.name
                    )));
                }
                let positions: Vec<usize> = bound.iter().map(|b| b.index).collect();
                encode_column_arrays(&columns, &positions, found)
                    .map_err(|e| PlanError::Catalog(e.to_string()))?
            }
        };
        // One Bind message takes at most 1 GB - 1 in all.
        let bytes: usize = arrays.iter().map(BytesMut::len).sum();
        if bytes > MAX_ARRAY_BYTES {
            return Err(PlanError::Scan(ScanError::ArrayTooLarge {
                table: cold.name.clone(),
                bytes,
            }));
        }
        Ok(arrays)
    }

    /// Arrays of no cold rows, as the reference binds them.
    fn no_rows(&self) -> Vec<BytesMut> {
        match &self.binding {
            ColdBinding::Rows => vec![empty_array(self.row_type)],
            ColdBinding::Columns(bound) => bound.iter().map(|b| empty_array(b.type_oid)).collect(),
        }
    }
}

/// Keys of tiered tables, per table, whose cold versions no statement of the client's
/// transaction can see: rows it brought back into the heap itself. Their mirror rows are
/// its own and uncommitted, so no other transaction's flush or prune can remove them, and
/// only the transaction itself can undo them (by rolling back). The session knows them
/// between groups ([`crate::session::state::SessionState::known_hot`]).
pub type KnownHot = HashMap<i64, HashSet<Vec<u8>>>;

/// What the session knows of the client's transaction when it plans a statement.
#[derive(Debug, Clone, Copy)]
pub struct TxnView<'a> {
    /// Tables planned for the generation given here (what the client's transaction block
    /// sees, learnt by `coldwire.read_lock`); the others for their current one.
    pub at: &'a HashMap<i64, i64>,
    /// The current generations are read from the catalog again (a retry after the guard
    /// failed).
    pub fresh: bool,
    /// Rows the transaction brought back into the heap itself.
    pub known: &'a KnownHot,
    /// Nothing sent upstream is unanswered and nothing of the statement's group went
    /// before it: coldwire's own statements may run prepared
    /// ([`crate::session::state::SessionState::own_form`]).
    pub quiet: bool,
    /// Statements of the same implicit transaction may have run before it where
    /// coldwire's own connection cannot see what they did (an Execute earlier in its
    /// group, or any statement of a Query string of several): an aggregate reads cold
    /// rows, never partials planned from the mirror as coldwire sees it.
    pub after_others: bool,
    /// Inside a transaction block, the write's table is not locked yet and its
    /// generation not learnt: a write is planned for the current generation only as a
    /// rehydration (which takes the lock and checks the generation, under a savepoint of
    /// coldwire's), anything else not at all (`None`: the caller locks first).
    pub lock_here: bool,
}

/// Whether every cold row of table `id` the scan of `predicates` would keep has a key in
/// `known` (so its cold version is hidden and need not be read).
pub(super) fn all_known(
    known: &KnownHot,
    id: i64,
    cold: &ColdTable,
    predicates: &[Predicate],
) -> bool {
    known.get(&id).is_some_and(|keys| {
        !keys.is_empty()
            && cold
                .asked_keys(predicates)
                .is_some_and(|asked| asked.iter().all(|k| keys.contains(k)))
    }) && {
        metrics::counter!(crate::metrics::COLD_LOOKUPS_SKIPPED_TOTAL).increment(1);
        true
    }
}

/// Whether `sql` may name one of `registry`'s tables, views or functions (a
/// case-insensitive substring test, so a superset).
fn may_name(registry: &Registry, sql: &[u8]) -> bool {
    use crate::sql::classify::bytes_contain_ignore_ascii_case as contains;
    // A name written with Unicode escapes (`U&"ev\0065nts"`) does not contain the name's
    // text: the parser decodes it.
    registry.names.iter().any(|n| contains(sql, n))
        || contains(sql, "u&\"")
        || may_name_in_other_encoding(registry, sql)
}

/// Whether `sql`, text in a client_encoding other than UTF-8 (it is not valid UTF-8),
/// may spell a name outside ASCII, whose bytes there differ from the catalog's: it holds
/// a byte outside ASCII and the name's longest run of ASCII characters, which every
/// encoding Postgres serves to clients writes as ASCII does.
fn may_name_in_other_encoding(registry: &Registry, sql: &[u8]) -> bool {
    use crate::sql::classify::bytes_contain_ignore_ascii_case as contains;
    !sql.is_ascii()
        && registry
            .names
            .iter()
            .any(|n| !n.is_ascii() && contains(sql, longest_ascii_run(n)))
        && std::str::from_utf8(sql).is_err()
}

/// The longest run of ASCII characters in `name` (empty when it has none).
fn longest_ascii_run(name: &str) -> &str {
    name.split(|c: char| !c.is_ascii())
        .max_by_key(|run| run.len())
        .unwrap_or_default()
}

/// Prepared writes by statement text and declared parameter count, with the registry
/// version they were prepared for.
type WriteCache = HashMap<(String, usize), (u64, Option<Arc<PreparedWrite>>)>;

/// The read path shared by a server's sessions.
pub struct ReadPath {
    pub(super) catalog: CatalogCache,
    pub(super) store: ColdStore,
    /// What the cold rows of one table reference may take.
    pub(super) limits: ScanLimits,
    statements: Mutex<StatementCache>,
    pub(super) max_rehydrate_rows: usize,
    /// As `statements`, for writes.
    pub(super) writes: Mutex<WriteCache>,
    /// When planning last found the catalog or the cold tier unreadable.
    catalog_failed_at: std::sync::Mutex<Option<std::time::Instant>>,
}

impl ReadPath {
    pub fn new(
        service: tokio_postgres::Config,
        store: ColdStore,
        limits: ScanLimits,
        max_rehydrate_rows: usize,
    ) -> Self {
        Self {
            catalog: CatalogCache::new(service),
            store,
            limits,
            statements: Mutex::new(HashMap::new()),
            max_rehydrate_rows,
            writes: Mutex::new(HashMap::new()),
            catalog_failed_at: std::sync::Mutex::new(None),
        }
    }

    /// Whether `sql` may name a tiered table (a case-insensitive substring test over the
    /// cached names, so a superset). While the names are unknown or stale every statement
    /// may, so that they are read again.
    pub fn may_name_tiered(&self, sql: &str) -> bool {
        self.may_name_tiered_bytes(sql.as_bytes())
    }

    /// The version of the registry whose names [`ReadPath::may_name_tiered`] tests now,
    /// if it is fresh (else every statement may name a tiered table).
    pub fn names_version(&self) -> Option<u64> {
        self.catalog.current_registry().map(|r| r.version)
    }

    /// The catalog or the cold tier could not be read to plan a statement: for
    /// [`REGISTRY_TTL`], prepared statements keep their plans at their Binds
    /// ([`ReadPath::catalog_failing`]).
    pub fn catalog_failed(&self) {
        *self
            .catalog_failed_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(std::time::Instant::now());
    }

    /// Whether planning found the catalog or the cold tier unreadable within the last
    /// [`REGISTRY_TTL`].
    pub fn catalog_failing(&self) -> bool {
        self.catalog_failed_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some_and(|at| at.elapsed() < crate::catalog::registry::REGISTRY_TTL)
    }

    /// The version of the registry, read afresh when it is older than its time to live.
    ///
    /// # Errors
    /// The registry could not be read.
    pub async fn names_version_now(&self) -> Result<u64, PlanError> {
        Ok(self.catalog.registry().await?.version)
    }

    /// [`ReadPath::may_name_tiered`] of text in any encoding (a session in another
    /// client_encoding; table names are matched as bytes).
    pub fn may_name_tiered_bytes(&self, sql: &[u8]) -> bool {
        self.catalog
            .current_registry()
            .is_none_or(|r| may_name(&r, sql))
    }

    /// The version of the registry last read, however old.
    pub fn known_names_version(&self) -> Option<u64> {
        self.catalog.last_read_registry().map(|r| r.version)
    }

    /// Whether `sql` may name a tiered table, a view over one or a function reading one
    /// by the names of the registry last read, however old (every statement may before
    /// the first read). While the catalog cannot be read, a statement that names none
    /// runs as written, and one that does is refused.
    pub fn may_name_known_tiered_bytes(&self, sql: &[u8]) -> bool {
        self.catalog
            .last_read_registry()
            .is_none_or(|r| may_name(&r, sql))
    }

    /// The refusal of a COPY (`sql`, parsed as `parsed`) that runs a function reading
    /// tiered tables server-side: the INSERT triggers, defaults and CHECKs of the table a `COPY … FROM` fills, or a
    /// function its query or WHERE calls. (A COPY of a tiered table is served by
    /// [`crate::sql::copy_to`].)
    ///
    /// # Errors
    /// The registry could not be read.
    pub async fn copy_refusal(
        &self,
        sql: &str,
        parsed: &pg_query::ParseResult,
    ) -> Result<Option<ErrorFields>, PlanError> {
        if !self.may_name_tiered(sql) {
            return Ok(None);
        }
        let registry = self.catalog.registry().await?;
        // Every statement of the string (a COPY may come first of several).
        Ok(parsed
            .protobuf
            .stmts
            .iter()
            .find_map(|statement| reading_function(statement, parsed, &registry))
            .map(|call| call_refusal(call.function)))
    }

    /// [`ReadPath::may_name_tiered`] against the list of tiered tables read afresh when
    /// it is older than its time to live.
    ///
    /// # Errors
    /// The registry could not be read.
    pub async fn names_tiered_now(&self, sql: &str) -> Result<bool, PlanError> {
        self.names_tiered_now_bytes(sql.as_bytes()).await
    }

    /// [`ReadPath::names_tiered_now`] of text in any encoding.
    ///
    /// # Errors
    /// The registry could not be read.
    pub async fn names_tiered_now_bytes(&self, sql: &[u8]) -> Result<bool, PlanError> {
        self.catalog.registry().await?;
        Ok(self.may_name_tiered_bytes(sql))
    }

    /// Whether `parsed` (the statement text `sql`) holds a `COPY … TO` that reads a
    /// tiered table or a view over one (a CTE of the same name is the CTE).
    ///
    /// # Errors
    /// The registry could not be read.
    pub async fn copies_tiered(
        &self,
        sql: &str,
        parsed: &pg_query::ParseResult,
    ) -> Result<bool, PlanError> {
        let copies_to = parsed.protobuf.stmts.iter().any(|s| {
            matches!(s.stmt.as_ref().and_then(|s| s.node.as_ref()), Some(N::CopyStmt(c)) if !c.is_from)
        });
        if !copies_to || !self.may_name_tiered(sql) {
            return Ok(false);
        }
        let registry = self.catalog.registry().await?;
        let walked = crate::sql::tree::walk(parsed);
        Ok(walked.relations.iter().any(|r| {
            let schema = r.schema.as_deref();
            !r.cte
                && (registry.unique(schema, &r.name).is_some()
                    || registry
                        .view(schema, &r.name)
                        .is_some_and(|v| !v.materialized))
        }))
    }

    /// Forgets the list of tiered tables, so the next statement reads it again.
    pub fn invalidate(&self) {
        self.catalog.invalidate();
    }

    /// [`ReadPath::invalidate`] after DDL the catalog follows ran: the next statement
    /// reads the list once the catalog follows it.
    pub fn invalidate_after_ddl(&self) {
        self.catalog.invalidate_after_ddl();
    }

    /// Whether `sql` is DDL on a tiered table that the catalog follows once it commits
    /// (`sql::ddl`): the session then reads the registry again at its next ReadyForQuery.
    /// `in_block`: the session is in a transaction block (or has statements in flight).
    ///
    /// # Errors
    /// DDL coldwire cannot carry to the cold tier, anywhere in the string, or DDL it
    /// follows sent where it cannot be followed: refused before it runs.
    pub async fn check_ddl(&self, sql: &str, in_block: bool) -> Result<bool, PlanError> {
        // A superset of the texts that may hold such DDL, wherever it is in them (after
        // comments, in the third statement of a string): the parse tree decides.
        let may_be_ddl = ["alter", "drop", "create"]
            .iter()
            .any(|w| contains_ignore_ascii_case(sql, w));
        if !may_be_ddl || !self.may_name_tiered(sql) {
            return Ok(false);
        }
        let registry = self.catalog.registry().await?;
        let Ok(parsed) = pg_query::parse(sql, 0) else {
            return Ok(false);
        };
        let refuse = |what: String, hint: &str| {
            Err(PlanError::Refused(fields(
                "0A000",
                format!("coldwire does not support {what} yet"),
                Some(hint.into()),
            )))
        };
        match crate::sql::ddl::inspect(&parsed, |schema, name| {
            registry.unique(schema, name).is_some()
        }) {
            Ddl::Unaffected => Ok(false),
            Ddl::Refused(what) => refuse(what, crate::sql::ddl::HINT),
            Ddl::FollowedAfterCommit {
                what, alone: false, ..
            } => refuse(
                format!("{what} together with other statements in one Query"),
                crate::sql::ddl::OUTSIDE_BLOCK_HINT,
            ),
            Ddl::FollowedAfterCommit { what, .. } if in_block => refuse(
                format!("{what} inside a transaction block"),
                crate::sql::ddl::OUTSIDE_BLOCK_HINT,
            ),
            Ddl::FollowedAfterCommit { types, .. } => {
                for ty in types {
                    // A type that does not exist is Postgres's to refuse.
                    if let Some(oid) = self.catalog.type_oid(&ty).await? {
                        if let Err(e) = crate::values::ColdType::for_column(oid, -1) {
                            return Err(PlanError::Refused(fields(
                                "0A000",
                                format!("coldwire cannot add this column to a tiered table: {}", e.with_type_name(ty)),
                                Some("Only types coldwire can store cold may be added to a tiered table (README lists them).".into()),
                            )));
                        }
                    }
                }
                Ok(true)
            }
        }
    }

    /// The rewrite of `sql` when it reads tiered tables (`None`: relay it unchanged), for
    /// a Parse that declared `declared_params` parameter types.
    ///
    /// # Errors
    /// The catalog could not be read.
    pub async fn prepare(
        &self,
        sql: &str,
        declared_params: usize,
    ) -> Result<Option<Arc<PreparedRead>>, PlanError> {
        if !self.may_name_tiered(sql) {
            return Ok(None);
        }
        let registry = self.catalog.registry().await?;
        if !self.may_name_tiered(sql) {
            return Ok(None);
        }
        // DDL naming a tiered table or a view over one may change which views read it:
        // the next statement reads the registry again.
        let may_be_ddl = ["create", "drop", "alter"]
            .iter()
            .any(|w| contains_ignore_ascii_case(sql, w));
        if may_be_ddl && kinds_of(sql).contains(&Kind::Ddl) {
            self.invalidate();
        }
        let key = (sql.to_owned(), declared_params);
        if let Some((version, found)) = self
            .statements
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
        {
            if *version == registry.version {
                return Ok(found.clone());
            }
        }
        let prepared = rewrite(sql, declared_params, &registry, false)?.map(Arc::new);
        let mut statements = self
            .statements
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if statements.len() >= STATEMENT_CACHE_ENTRIES {
            statements.clear();
        }
        statements.insert(key, (registry.version, prepared.clone()));
        Ok(prepared)
    }

    /// coldwire's parameters for one execution of `prepared` with the client's `params`:
    /// per reference, the cold rows that may match, then the guard's plan, for the
    /// generations `txn` names or the current ones. No cold row is read for a reference
    /// whose keys the transaction brought back ([`TxnView::known`]).
    ///
    /// # Errors
    /// The catalog or the cold store could not be read; too many cold rows; cold text for
    /// a session whose client_encoding is not UTF-8.
    pub async fn cold_params(
        &self,
        prepared: &PreparedRead,
        params: &BoundParams<'_>,
        txn: TxnView<'_>,
    ) -> Result<ColdParams, PlanError> {
        let TxnView {
            at,
            fresh,
            known,
            after_others,
            ..
        } = txn;
        let mut tables: HashMap<i64, Arc<ColdTable>> = HashMap::new();
        for id in prepared.table_ids() {
            let table = match at.get(&id) {
                Some(generation) => self.catalog.cold_table_at(id, *generation).await?,
                None => self.catalog.cold_table(id, fresh).await?,
            };
            tables.insert(id, table);
        }
        let mut out = Vec::with_capacity(prepared.references.len());
        let mut injected = false;
        for r in &prepared.references {
            let cold = &tables[&r.table_id];
            let predicates = to_prune(&r.predicates, &cold.columns, params);
            // Keys the transaction brought back: their cold versions are hidden.
            if r.aggregate.is_none() && all_known(known, r.table_id, cold, &predicates) {
                out.push((None, planned(cold.generation)));
                continue;
            }
            // No segment's stats admit the conditions (a hot key above the cold range, a
            // table with nothing cold): no cold row, and nothing for the scan to set up.
            if r.aggregate.is_none() && !cold.segments.iter().any(|s| s.may_match(&predicates)) {
                if !cold.segments.is_empty() {
                    metrics::counter!(crate::metrics::COLD_SEGMENTS_PRUNED_TOTAL)
                        .increment(cold.segments.len() as u64);
                }
                out.push((None, planned(cold.generation)));
                continue;
            }
            let mut filters = None;
            if let Some(plan) = &r.aggregate {
                // Partials when every conjunct is exact with these values, the session
                // reads the current generation (a pinned snapshot may not see the
                // mirror coldwire reads), nothing before it in its implicit transaction
                // may have changed the mirror unseen (a cold row brought back for a
                // write: the partials would count its cold version, and the guard's
                // check of the mirror's keys fail at every retry), and its encoding
                // carries the text.
                filters = plan.cold_filters(&predicates, cold, params).filter(|_| {
                    !at.contains_key(&r.table_id) && !after_others && params.settings.utf8
                });
                // A retry (the guard saw the cold tier or the hot keys change) takes the
                // rows when they fit: rows do not depend on which keys are hot, so cold
                // writes that keep coming cannot starve it. So does a statement whose
                // key conditions leave few keys: reading their pages is cheaper than
                // planning partials.
                let key = cold.pk_positions.first().map(|&k| cold.columns[k].attnum);
                let narrow = key.is_some_and(|k| integer_values(&predicates, k) <= NARROW_KEYS);
                if let Some(exact) = filters.clone().filter(|_| !fresh && !narrow) {
                    match self
                        .partial_params(r, plan, cold.clone(), predicates.clone(), exact)
                        .await
                    {
                        Ok([rows, partials, plan]) => {
                            out.push((Some(vec![rows, partials]), plan));
                            injected = true;
                            continue;
                        }
                        // More partial rows than the limit (a DISTINCT over a column of
                        // millions of values): the rows, if they fit.
                        Err(PlanError::Scan(ScanError::TooManyGroups { .. })) => filters = None,
                        Err(e) => return Err(e),
                    }
                }
            }
            // A retry that could take partials tries rows only while they are few.
            let limits = if filters.is_some() {
                ScanLimits {
                    rows: self.limits.rows.min(RETRY_ROWS),
                    ..self.limits
                }
            } else {
                self.limits
            };
            let read = r.read_columns(cold);
            let found = match (
                scan(&self.store, cold, &predicates, read.as_deref(), limits).await,
                filters,
            ) {
                (
                    Err(ScanError::TooManyRows { .. } | ScanError::TooMuchMemory { .. }),
                    Some(filters),
                ) => {
                    let plan = r.aggregate.as_ref().expect("partials are planned");
                    let [rows, partials, plan] = self
                        .partial_params(r, plan, cold.clone(), predicates, filters)
                        .await?;
                    out.push((Some(vec![rows, partials]), plan));
                    injected = true;
                    continue;
                }
                (found, _) => found?,
            };
            let rows = found.num_rows();
            tracing::debug!(
                table = %cold.name,
                rows,
                segments_pruned = found.stats.segments_pruned,
                row_groups_pruned = found.stats.row_groups_pruned,
                bytes = found.stats.bytes_read,
                "cold rows injected"
            );
            metrics::counter!(crate::metrics::COLD_ROWS_INJECTED_TOTAL).increment(rows as u64);
            metrics::counter!(crate::metrics::COLD_BYTES_READ_TOTAL)
                .increment(found.stats.bytes_read);
            metrics::counter!(crate::metrics::COLD_SEGMENTS_PRUNED_TOTAL)
                .increment(found.stats.segments_pruned as u64);
            if rows > 0 && !params.settings.utf8 {
                return Err(PlanError::Encoding);
            }
            let bound = rows > 0 || r.aggregate.is_some();
            injected |= bound;
            let bound = if bound {
                let mut bound = r.bind_rows(cold, found.batches)?;
                if r.aggregate.is_some() {
                    bound.push(jsonb(&serde_json::json!([])));
                }
                Some(bound)
            } else {
                None
            };
            out.push((bound, planned(cold.generation)));
        }
        metrics::counter!(crate::metrics::ROUTES_TOTAL, "route" => "read").increment(1);
        Ok(ColdParams {
            refs: out,
            injected,
        })
    }

    /// Parameters that make the statement fail with `error` where it reads a tiered table
    /// (the guard raises it), for a Bind coldwire could not plan: the error then reaches
    /// the client in protocol order, like any error of the statement.
    pub fn refusal_params(prepared: &PreparedRead, error: &ErrorFields) -> ColdParams {
        let mut refusal = serde_json::json!({"code": error.code, "message": error.message});
        if let Some(hint) = &error.hint {
            refusal["hint"] = hint.clone().into();
        }
        let plan = jsonb(&serde_json::json!({ "refusal": refusal }));
        let refs = prepared
            .references
            .iter()
            .map(|r| {
                let rows = r.aggregate.as_ref().map(|_| {
                    let mut rows = r.no_rows();
                    rows.push(jsonb(&serde_json::json!([])));
                    rows
                });
                (rows, plan.clone())
            })
            .collect();
        ColdParams {
            refs,
            injected: true,
        }
    }
}

/// The refusal of a statement that reads or writes rows of a tiered table (or of a view
/// over one) that gained, since it was tiered, what coldwire cannot serve
/// ([`crate::catalog::inspect::unservable_sql`]: a row trigger, a rule, row-level
/// security, a unique index, a foreign key referencing it), added where coldwire saw no
/// DDL. DDL passes, so that what was added can be dropped.
pub(super) fn unservable_refusal(
    parsed: &pg_query::ParseResult,
    registry: &Registry,
) -> Option<PlanError> {
    if registry.tables.iter().all(|t| t.unservable.is_empty()) {
        return None;
    }
    let serves_rows = |node: &N| match Kind::of(crate::sql::classify::executed(node)) {
        Kind::Read | Kind::Write | Kind::Copy => true,
        Kind::Prepare { .. } => crate::sql::classify::prepared_body(node).is_some_and(|b| {
            matches!(
                Kind::of(crate::sql::classify::executed(b)),
                Kind::Read | Kind::Write
            )
        }),
        _ => matches!(node, N::DeclareCursorStmt(_) | N::CreateTableAsStmt(_)),
    };
    if !parsed
        .protobuf
        .stmts
        .iter()
        .filter_map(|s| s.stmt.as_ref()?.node.as_ref())
        .any(serves_rows)
    {
        return None;
    }
    let changed = |schema: Option<&str>, name: &str| {
        registry
            .unique(schema, name)
            .filter(|t| !t.unservable.is_empty())
    };
    let walked = crate::sql::tree::walk(parsed);
    let found = walked.relations.iter().filter(|r| !r.cte).find_map(|r| {
        let schema = r.schema.as_deref();
        changed(schema, &r.name).or_else(|| {
            // A view over it: the tables its definition reads.
            let view = registry.view(schema, &r.name)?;
            let definition = pg_query::parse(&view.view.definition, 0).ok()?;
            crate::sql::tree::walk(&definition)
                .relations
                .iter()
                .find_map(|v| changed(v.schema.as_deref(), &v.name))
        })
    })?;
    Some(unservable_error(found))
}

/// The refusal of a statement on `found`, which gained what coldwire cannot serve.
pub(super) fn unservable_error(found: &crate::catalog::registry::Tiered) -> PlanError {
    PlanError::Refused(fields(
        "0A000",
        format!(
            "coldwire: tiered table {}.{} gained what coldwire cannot serve: {}",
            display_ident(&found.table.schema),
            display_ident(&found.table.name),
            found.unservable.join("; ")
        ),
        Some(
            "Drop it (DROP TRIGGER, DROP RULE, DROP INDEX, ALTER TABLE … DISABLE ROW LEVEL SECURITY, or the other table's foreign key); \
             until then coldwire neither reads, writes nor flushes the table."
                .into(),
        ),
    ))
}

/// A function that reads tiered tables server-side (`Registry::functions`) which the
/// statement calls, where it runs: not under an EXPLAIN without ANALYZE.
fn reading_function<'r>(
    statement: &pg_query::protobuf::RawStmt,
    parsed: &pg_query::ParseResult,
    registry: &'r Registry,
) -> Option<ReadingCall<'r>> {
    if registry.functions.is_empty() {
        return None;
    }
    // Statements that run what they name; DDL that only defines a call (a view, a
    // default, a policy, a function's body) runs nothing.
    let node = statement.stmt.as_ref().and_then(|s| s.node.as_ref())?;
    let runs = match node {
        N::ExplainStmt(e) => e.options.iter().any(|o| {
            matches!(o.node.as_ref(), Some(N::DefElem(d)) if d.defname.eq_ignore_ascii_case("analyze"))
        }),
        // ALTER TABLE runs a default on the rows it fills, a USING on the rows it
        // converts, a CHECK on the rows it validates.
        N::SelectStmt(_)
        | N::InsertStmt(_)
        | N::UpdateStmt(_)
        | N::DeleteStmt(_)
        | N::MergeStmt(_)
        | N::CallStmt(_)
        | N::PrepareStmt(_)
        | N::CreateTableAsStmt(_)
        | N::CopyStmt(_)
        | N::DeclareCursorStmt(_)
        | N::AlterTableStmt(_) => true,
        // A materialized view's query runs when it is refreshed (not when it is read).
        N::RefreshMatViewStmt(r) => {
            let rv = r.relation.as_ref()?;
            let schema = (!rv.schemaname.is_empty()).then_some(rv.schemaname.as_str());
            return registry
                .calling_matview(schema, &rv.relname)
                .map(|function| ReadingCall {
                    function,
                    reads_tiered: false,
                });
        }
        _ => false,
    };
    if !runs {
        return None;
    }
    let walk = crate::sql::tree::walk(parsed);
    // An unqualified name a CTE of the statement defines is that CTE (but a write's
    // target is a table).
    let relations = || walk.relations.iter().filter(|r| !r.cte);
    // The writes a statement makes of its target (`pg_trigger.tgtype`'s bits: an upsert
    // fires UPDATE triggers too): any, when it writes several (CTEs), or writes under a
    // MERGE, EXPLAIN ANALYZE or a SELECT's CTE.
    let several = walk.relations.iter().filter(|r| r.written).count() > 1;
    let writes = match node {
        _ if several => 28,
        N::InsertStmt(_) if walk.fires_update_or_delete => 4 | 16,
        N::InsertStmt(_) => 4,
        N::DeleteStmt(_) => 8,
        // `SET col = DEFAULT` runs the default, as an INSERT does.
        N::UpdateStmt(u)
            if u.target_list.iter().any(|t| {
                matches!(t.node.as_ref(), Some(N::ResTarget(rt))
                    if matches!(rt.val.as_ref().and_then(|v| v.node.as_ref()), Some(N::SetToDefault(_))))
            }) =>
        {
            16 | 4
        }
        N::UpdateStmt(_) => 16,
        _ => 28,
    };
    // ALTER (VIEW, TABLE) of a view that calls a reader runs nothing of it.
    let alters = matches!(node, N::AlterTableStmt(_));
    // COPY FROM inserts into its table (its INSERT triggers, defaults and CHECKs run),
    // though the walk sees the table named as a read.
    let copied_into = match node {
        N::CopyStmt(copy) if copy.is_from => copy.relation.as_ref(),
        _ => None,
    };
    // The columns a statement's one UPDATE sets: an UPDATE of other columns of a table
    // that a foreign key references checks nothing.
    let names = |targets: &[pg_query::protobuf::Node]| -> Vec<String> {
        targets
            .iter()
            .filter_map(|t| match t.node.as_ref() {
                Some(N::ResTarget(rt)) => Some(rt.name.clone()),
                _ => None,
            })
            .collect()
    };
    let sets: Option<Vec<String>> = match node {
        N::UpdateStmt(u) if !several => Some(names(&u.target_list)),
        // An upsert updates what its DO UPDATE sets.
        N::InsertStmt(i) if !several => Some(
            i.on_conflict_clause
                .as_ref()
                .map(|c| names(&c.target_list))
                .unwrap_or_default(),
        ),
        _ => None,
    };
    let function = walk
        .functions
        .iter()
        .find_map(|call| registry.function(call))
        .or_else(|| {
            copied_into.and_then(|rv| {
                let schema = (!rv.schemaname.is_empty()).then_some(rv.schemaname.as_str());
                registry.writing_table(schema, &rv.relname, 4, None)
            })
        })
        .or_else(|| {
            relations().find_map(|r| {
                let schema = r.schema.as_deref();
                // A view's query runs when it is read, or when rows of it are
                // updated or deleted (not for an INSERT).
                let runs_view = r.read || (r.written && writes & 24 != 0);
                (runs_view && !alters)
                    .then(|| registry.calling_view(schema, &r.name))
                    .flatten()
                    .or_else(|| {
                        r.written
                            .then(|| {
                                registry.writing_table(schema, &r.name, writes, sets.as_deref())
                            })
                            .flatten()
                    })
            })
        })?;
    let reads_tiered = relations().any(|r| {
        let schema = r.schema.as_deref();
        r.read
            && (registry.unique(schema, &r.name).is_some()
                || registry.view(schema, &r.name).is_some())
    });
    Some(ReadingCall {
        function,
        reads_tiered,
    })
}

/// The refusal of a call of `f` (or a read of it, a view), unless the session reads hot
/// rows only on purpose.
fn call_refusal(
    f: &crate::catalog::registry::ReadingFunction,
) -> crate::wire::messages::ErrorFields {
    use crate::catalog::registry::CallerKind;
    let name = f.qualified();
    let reads = if f.reads_view {
        format!("{}, a view over a tiered table,", display_ident(&f.reads))
    } else {
        format!("tiered table {}", display_ident(&f.reads))
    };
    let through = f
        .through
        .as_ref()
        .map(|t| format!(" through {t}"))
        .unwrap_or_default();
    let setting = crate::catalog::registry::HOT_ONLY_READS_SETTING;
    let on_function = format!("ALTER FUNCTION … SET {setting} = on on the function it calls");
    let (subject, run, declare) = match f.kind {
        CallerKind::Function | CallerKind::Procedure => {
            let kind = if f.kind == CallerKind::Function {
                "function"
            } else {
                "procedure"
            };
            (
                format!("{kind} {name} reads"),
                "Run its query itself through coldwire",
                format!(
                    "ALTER {} {name}({}) SET {setting} = on",
                    kind.to_uppercase(),
                    f.arguments
                ),
            )
        }
        CallerKind::View => (
            format!("view {name} reads"),
            "Read what it reads through coldwire instead",
            on_function,
        ),
        CallerKind::MaterializedView => (
            format!("refreshing materialized view {name} reads"),
            "Create a table with CREATE TABLE … AS SELECT through coldwire instead, which fills it with every row",
            on_function,
        ),
        // A foreign key of the tiered table: its check reads the referencing rows.
        CallerKind::Table { .. } if !f.key_columns.is_empty() => {
            return fields(
                "0A000",
                format!(
                    "coldwire: deleting or re-keying rows of table {name} checks tiered table {} for rows that reference them{through}, where coldwire cannot merge in its cold rows",
                    display_ident(&f.reads)
                ),
                Some(format!(
                    "Delete or re-point the referencing rows of {} through coldwire first, then run this statement after SET LOCAL {} = on, \
                     with which the foreign key checks the hot rows only.",
                    display_ident(&f.reads),
                    crate::catalog::capture::HOT_ONLY_SETTING
                )),
            );
        }
        CallerKind::Table { .. } => (
            format!("writes of table {name} read"),
            "Move that read out of the table's trigger, default or CHECK, into statements sent through coldwire",
            on_function,
        ),
    };
    fields(
        "0A000",
        format!(
            "coldwire: {subject} {reads} server-side{through}, where coldwire cannot merge in its cold rows"
        ),
        Some(format!(
            "{run}. To read hot rows only, on purpose, in a statement of its own (not an SQL-level PREPARE \
             or a COPY, and reading no tiered table itself): SET {setting} = on in the session, or {declare}. \
             If the name means one of another schema, qualify it."
        )),
    )
}

/// A call [`reading_function`] found.
struct ReadingCall<'r> {
    function: &'r crate::catalog::registry::ReadingFunction,
    /// The statement also reads a tiered table or a view over one itself.
    reads_tiered: bool,
}

/// The rewrite of `sql` under `registry`, when it reads tiered tables (`calls_checked`:
/// the calls of functions that read tiered tables server-side were checked already, as
/// for the statement an EXPLAIN explains). One statement only:
/// a string of several keeps the simple protocol's own transaction rules, and anything
/// the rewrite refuses (writes, locking reads) is relayed unchanged.
fn rewrite(
    sql: &str,
    declared_params: usize,
    registry: &Registry,
    calls_checked: bool,
) -> Result<Option<PreparedRead>, PlanError> {
    let Ok(parsed) = pg_query::parse(sql, 0) else {
        return Ok(None);
    };
    let [statement] = parsed.protobuf.stmts.as_slice() else {
        return Ok(None);
    };
    let refused = |message: &str, hint: &str| {
        PlanError::Refused(fields(
            "0A000",
            format!("coldwire: {message}"),
            Some(hint.into()),
        ))
    };
    if let Some(call) = (!calls_checked)
        .then(|| reading_function(statement, &parsed, registry))
        .flatten()
    {
        let fields = call_refusal(call.function);
        // Refused outright: a SQL-level PREPARE of the call (its EXECUTE would run
        // unchecked), a COPY of one (coldwire serves COPY in the simple protocol only,
        // where a check cannot go ahead of it), and a statement that also reads tiered
        // tables itself (behind the check it would run as written, its own reads
        // missing their cold rows).
        if call.reads_tiered
            || matches!(
                statement.stmt.as_ref().and_then(|s| s.node.as_ref()),
                Some(N::PrepareStmt(_) | N::CopyStmt(_))
            )
        {
            return Err(PlanError::Refused(fields));
        }
        return Err(PlanError::HotOnlyCall(fields));
    }
    if let Some(refusal) = unservable_refusal(&parsed, registry) {
        return Err(refusal);
    }
    match statement.stmt.as_ref().and_then(|s| s.node.as_ref()) {
        // A view is defined over the heap table; its reads are expanded when they come.
        // Extended statistics are of the heap's rows (what Postgres plans from).
        Some(N::ViewStmt(_) | N::CreateStatsStmt(_)) => return Ok(None),
        Some(N::CreateTableAsStmt(c))
            if c.objtype == ObjectType::ObjectMatview as i32
                && crate::sql::tree::walk(&parsed).relations.iter().any(|r| {
                    let schema = r.schema.as_deref();
                    registry.unique(schema, &r.name).is_some()
                        || registry.view(schema, &r.name).is_some()
                }) =>
        {
            return Err(refused(
                "a materialized view over a tiered table would hold only its hot rows when refreshed",
                "Create a table with CREATE TABLE … AS SELECT, which coldwire fills with every row.",
            ));
        }
        // A SQL-level PREPARE of a read: its EXECUTE would need the cold rows as
        // parameters the client does not pass.
        Some(N::PrepareStmt(_))
            if crate::sql::tree::walk(&parsed).relations.iter().any(|r| {
                let schema = r.schema.as_deref();
                registry.unique(schema, &r.name).is_some()
                    || registry.view(schema, &r.name).is_some()
            }) =>
        {
            return Err(refused(
                "SQL-level PREPARE of a read of a tiered table is not supported yet",
                "Prepare it through the driver (the protocol's Parse), or run the query itself; PREPARE of writes is supported.",
            ));
        }
        Some(N::RefreshMatViewStmt(r)) => {
            let name = r
                .relation
                .as_ref()
                .map(|rv| (rv.schemaname.as_str(), rv.relname.as_str()));
            if let Some((schema, name)) = name {
                let schema = (!schema.is_empty()).then_some(schema);
                if registry.view(schema, name).is_some_and(|v| v.materialized) {
                    return Err(refused(
                        "refreshing a materialized view over a tiered table would keep only its hot rows",
                        "Rebuild it as a table with CREATE TABLE … AS SELECT through coldwire.",
                    ));
                }
            }
            return Ok(None);
        }
        _ => {}
    }
    // EXPLAIN of a read: the statement as it would run, under the same options.
    if let Some(N::ExplainStmt(e)) = statement.stmt.as_ref().and_then(|s| s.node.as_ref()) {
        let reads = matches!(
            e.query.as_deref().and_then(|q| q.node.as_ref()),
            Some(N::SelectStmt(_))
        );
        if let Some(start) = reads.then(|| explained_start(sql)).flatten() {
            return Ok(
                rewrite(&sql[start..], declared_params, registry, true)?.map(|inner| {
                    PreparedRead {
                        sql: format!("{}{}", &sql[..start], inner.sql),
                        explained: Some(sql[start..].to_owned()),
                        hot_sql: None,
                        ..inner
                    }
                }),
            );
        }
    }
    // An unqualified name of tiered tables (or views over them) in several schemas:
    // which one it means depends on the session's search_path, which coldwire does not
    // know, and left as it is it would read the heap alone.
    let ambiguous = &registry.ambiguous;
    if ambiguous
        .iter()
        .flat_map(|n| crate::catalog::registry::written_forms(n))
        .any(|n| contains_ignore_ascii_case(sql, &n))
        || (!ambiguous.is_empty() && contains_ignore_ascii_case(sql, "u&\""))
    {
        let walked = crate::sql::tree::walk(&parsed);
        if let Some(r) = walked
            .relations
            .iter()
            .find(|r| r.schema.is_none() && !r.cte && ambiguous.contains(&r.name))
        {
            return Err(refused(
                &format!(
                    "{} names tiered tables or views over them in more than one schema",
                    crate::sql::quote::display_ident(&r.name)
                ),
                "Schema-qualify the name (schema.table).",
            ));
        }
    }
    // Views over tiered tables become their definitions (views over views in turn).
    let mut text = sql.to_owned();
    let mut parsed = parsed;
    for _ in 0..MAX_VIEW_DEPTH {
        let expanded = expand_views(&text, &parsed, |schema, name| {
            registry
                .view(schema, name)
                .filter(|v| !v.materialized)
                .map(|v| v.view.clone())
        })
        .map_err(|e| refused(&e.to_string(), "Query the tables the view reads instead."))?;
        let Some(expanded) = expanded else { break };
        let Ok(again) = pg_query::parse(&expanded, 0) else {
            return Ok(None);
        };
        text = expanded;
        parsed = again;
    }
    // Views over views over a table that gained what coldwire cannot serve.
    if let Some(refusal) = unservable_refusal(&parsed, registry) {
        return Err(refusal);
    }
    // `public.events.id` as `events.id`, which every planner reads.
    if let Ok(Some(unqualified)) = unqualify_columns(&text, &parsed, |schema, name| {
        registry.unique(schema, name).map(|t| t.table.clone())
    }) {
        let Ok(again) = pg_query::parse(&unqualified, 0) else {
            return Ok(None);
        };
        text = unqualified;
        parsed = again;
    }
    // TABLESAMPLE samples a table's heap blocks or rows: a tiered table's cold rows have
    // neither in Postgres (also when a view's definition samples one).
    if contains_ignore_ascii_case(&text, "tablesample") {
        let walked = crate::sql::tree::walk(&parsed);
        if let Some(r) = walked.relations.iter().find(|r| {
            walked.sampled.contains(&r.location)
                && registry.unique(r.schema.as_deref(), &r.name).is_some()
        }) {
            return Err(refused(
                &format!("TABLESAMPLE of tiered table {} is not supported", r.name),
                "Sample with a condition such as WHERE random() < 0.01, which reads hot and cold rows alike.",
            ));
        }
    }
    let highest_param = highest_param(sql);
    let client_params = highest_param.max(declared_params);
    if let Some(prepared) = rewrite_aggregate_read(&parsed, client_params, registry) {
        return Ok(Some(prepared));
    }
    let Ok(Some(rewritten)) = rewrite_parsed(&text, &parsed, client_params, |schema, name| {
        registry.unique(schema, name).map(|t| t.table.clone())
    }) else {
        return Ok(None);
    };
    let references = rewritten
        .references
        .iter()
        .map(|r| {
            let tiered = registry.by_id(r.table_id)?;
            Some(PlannedReference {
                table_id: r.table_id,
                predicates: extract(&parsed, r.location, &r.name),
                row_type: tiered.row_type,
                aggregate: None,
                read_names: r.read_names.clone(),
                binding: r.binding.clone(),
            })
        })
        .collect::<Option<Vec<_>>>();
    Ok(references.map(|references| PreparedRead {
        sql: rewritten.sql,
        client_params,
        references,
        explained: None,
        hot_sql: rewritten.hot_sql,
    }))
}

/// Where the statement of `EXPLAIN [ANALYZE] [VERBOSE] [(options)] statement` starts.
fn explained_start(sql: &str) -> Option<usize> {
    let tokens = pg_query::scan(sql).ok()?.tokens;
    let mut i = 0;
    let word = |t: &pg_query::protobuf::ScanToken| sql.get(t.start as usize..t.end as usize);
    // EXPLAIN, then legacy keywords or one parenthesized option list.
    if !word(tokens.first()?)?.eq_ignore_ascii_case("explain") {
        return None;
    }
    i += 1;
    if word(tokens.get(i)?)? == "(" {
        let mut depth = 0;
        loop {
            match word(tokens.get(i)?)? {
                "(" => depth += 1,
                ")" => depth -= 1,
                _ => {}
            }
            i += 1;
            if depth == 0 {
                break;
            }
        }
    } else {
        while ["analyze", "analyse", "verbose"].iter().any(|k| {
            tokens
                .get(i)
                .and_then(word)
                .is_some_and(|w| w.eq_ignore_ascii_case(k))
        }) {
            i += 1;
        }
    }
    usize::try_from(tokens.get(i)?.start).ok()
}

/// The highest `$n` of `sql`, from the scanner: the parse tree's walk does not reach every
/// clause (LIMIT and OFFSET, for one).
pub(super) fn highest_param(sql: &str) -> usize {
    pg_query::scan(sql)
        .map(|s| s.tokens)
        .unwrap_or_default()
        .iter()
        .filter(|t| t.token == pg_query::protobuf::Token::Param as i32)
        .filter_map(|t| {
            sql.get(t.start as usize + 1..t.end as usize)?
                .parse::<usize>()
                .ok()
        })
        .max()
        .unwrap_or(0)
}

/// An empty array of element type `element` (a row type, or a column's), in the binary
/// array format: no cold rows.
pub(super) fn empty_array(element: u32) -> BytesMut {
    let mut empty = BytesMut::with_capacity(12);
    empty.put_i32(0); // no dimensions
    empty.put_i32(0); // no NULLs
    empty.put_u32(element);
    empty
}

/// The guard's plan `{"planned": generation}` in jsonb's binary format, written
/// directly: it is made for every Bind of a rewritten read.
pub(super) fn planned(generation: i64) -> BytesMut {
    let mut out = BytesMut::with_capacity(32);
    out.put_u8(1);
    let _ = write!(out, "{{\"planned\":{generation}}}");
    out
}

/// `value` in jsonb's binary format (version byte 1, then the text).
pub(super) fn jsonb(value: &serde_json::Value) -> BytesMut {
    let text = value.to_string();
    let mut out = BytesMut::with_capacity(text.len() + 1);
    out.put_u8(1);
    out.put_slice(text.as_bytes());
    out
}

/// The `after_read_plan` failpoint (tests widen the window between planning a read and
/// running it, so that flushes finalize in between and the guard fires).
pub async fn after_plan() {
    crate::failpoint::hit("after_read_plan").await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_is_the_jsonb_of_its_generation() {
        for generation in [0, 7, -1, i64::MAX] {
            assert_eq!(
                planned(generation),
                jsonb(&serde_json::json!({ "planned": generation }))
            );
        }
    }

    #[test]
    fn the_name_test_ignores_ascii_case_only() {
        assert!(contains_ignore_ascii_case("SELECT * FROM Events", "events"));
        assert!(contains_ignore_ascii_case(
            "select 1 from \"EVENTS\"",
            "events"
        ));
        assert!(!contains_ignore_ascii_case("SELECT 1", "events"));
        // Non-ASCII letters must match exactly (Postgres folds only ASCII in identifiers).
        assert!(!contains_ignore_ascii_case("från Ärende", "ärende"));
        assert!(contains_ignore_ascii_case("x ärende", "ärende"));
    }
}
