//! Simple Queries over tiered tables (DESIGN §6): one statement or a string of several,
//! planned into one group of the unnamed statement's Parse/Bind/Describe/Execute with
//! coldwire's own statements where writes need them; and EXPLAIN of such reads.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::BytesMut;

use super::own::{own_frames, refusal_unless_hot_only_sql, OWN_COMPLETIONS};
use super::path::{KnownHot, PreparedRead, ReadPath, TxnView};
use super::writes::PreparedWrite;
use crate::cold::scan::scan;
use crate::cold::scan::ScanError;
use crate::error::PlanError;
use crate::session::state::OwnPrefix;
use crate::sql::classify::{contains_ignore_ascii_case, kinds_of, Kind};
use crate::sql::params::{BoundParams, Settings};
use crate::sql::predicates::to_prune;
use crate::wire::extended as ext;
use crate::wire::messages::ErrorFields;

/// What to do with a simple Query.
#[derive(Debug)]
pub enum Plan {
    /// Relay it unchanged.
    PassThrough,
    /// Send these frames upstream instead (their ParseComplete and BindComplete are
    /// coldwire's to drop), with coldwire's own statements among them where these say.
    Run(BytesMut, Vec<OwnPrefix>),
    /// Answer the client with this error (and ReadyForQuery).
    Fail(ErrorFields),
    /// Nothing planned: the write's table is to be locked first (planned with
    /// [`TxnView::lock_here`](super::TxnView::lock_here), it needed no rehydration).
    LockFirst,
}

/// One statement of a simple Query string of several.
#[derive(Debug, Clone)]
pub enum Part {
    /// Run as written.
    Plain(String),
    /// A read of tiered tables, rewritten.
    Read(Arc<PreparedRead>),
    /// A write to a tiered table (its text): run as it is after coldwire's rehydration.
    Write(Arc<PreparedWrite>, String),
    /// A call of a function that reads tiered tables server-side (its text): run as it
    /// is behind coldwire's check, which fails with these fields unless the session reads
    /// or writes hot rows only on purpose (`own::refusal_unless_hot_only_sql`).
    HotOnlyCall(ErrorFields, String),
}

impl ReadPath {
    /// The statements of a simple Query string of several, when one of them reads tiered
    /// tables (`None` otherwise, or for a single statement).
    ///
    /// # Errors
    /// The catalog could not be read.
    pub async fn prepare_multi(&self, sql: &str) -> Result<Option<Vec<Part>>, PlanError> {
        let statements = match pg_query::split_with_parser(sql) {
            Ok(s) if s.len() > 1 => s,
            _ => return Ok(None),
        };
        let mut parts = Vec::with_capacity(statements.len());
        for statement in statements {
            // A SQL-level PREPARE runs nothing: of a write, its EXECUTEs are planned (the
            // session follows it); of a read of a tiered table, `prepare` refuses it.
            if contains_ignore_ascii_case(statement, "prepare")
                && matches!(kinds_of(statement).first(), Some(Kind::Prepare { .. }))
            {
                if self.prepare_write(statement, 0).await?.is_none() {
                    self.prepare(statement, 0).await?;
                }
                parts.push(Part::Plain(statement.to_owned()));
                continue;
            }
            parts.push(match self.prepare(statement, 0).await {
                Ok(Some(read)) => Part::Read(read),
                Ok(None) => match self.prepare_write(statement, 0).await? {
                    Some(write) => Part::Write(write, statement.to_owned()),
                    None => Part::Plain(statement.to_owned()),
                },
                Err(PlanError::HotOnlyCall(e)) => Part::HotOnlyCall(e, statement.to_owned()),
                Err(e) => return Err(e),
            });
        }
        Ok(parts
            .iter()
            .any(|p| !matches!(p, Part::Plain(_)))
            .then_some(parts))
    }

    /// The plan for a simple Query string of several statements: each statement as
    /// Parse/Bind/Describe/Execute of the unnamed statement, one Sync after the last, so
    /// they share one implicit transaction as in the simple protocol. Arguments as for
    /// [`ReadPath::plan`].
    pub async fn plan_multi(
        &self,
        parts: &[Part],
        txn: TxnView<'_>,
        settings: Settings,
        candidates: &HashMap<i64, Vec<serde_json::Value>>,
    ) -> Plan {
        let params = BoundParams {
            settings,
            ..BoundParams::none()
        };
        // Rehydrations go first, ahead of every statement of the string, while no
        // statement before their write ends a transaction: an error of theirs (a finalize
        // that slipped in) then arrives before anything reached the client and the whole
        // string can be run again, and rows brought back early are rows Postgres would
        // have had all along. After a COMMIT, ROLLBACK or ROLLBACK TO SAVEPOINT (which
        // would undo them) they go just before their write, in the transaction it runs in.
        let mut front = BytesMut::new();
        let mut out = BytesMut::new();
        let mut own = Vec::new();
        let mut hoist = true;
        // Completions of the statements since coldwire's last own part that is not at
        // the front (Parse, Bind, Describe, Execute each).
        let mut before = 0;
        // Planned before any of the string runs, and a statement of it may undo rows the
        // block brought back (ROLLBACK TO SAVEPOINT): no key is taken as known.
        let known = KnownHot::new();
        let txn = TxnView {
            known: &known,
            quiet: false,
            after_others: true,
            ..txn
        };
        for part in parts {
            before += 4;
            match part {
                Part::Plain(sql) => {
                    hoist &= !ends_transaction(sql);
                    ext::execute_unnamed(&mut out, sql, &[], false);
                }
                Part::Write(write, sql) => {
                    // Hoisted rehydrations after the first keep the marks before them.
                    let append = hoist && !front.is_empty();
                    let rehydration = match self
                        .rehydration(write, &params, txn, candidates, append)
                        .await
                    {
                        Ok(call) => call,
                        Err(e) => return Plan::Fail(e.client_error()),
                    };
                    if let Some(call) = rehydration {
                        let frames = call.frames();
                        if hoist {
                            front.extend_from_slice(&frames);
                            own.push(OwnPrefix {
                                before: 0,
                                left: OWN_COMPLETIONS,
                                brought_back: call.brought_back,
                                ..OwnPrefix::default()
                            });
                        } else {
                            out.extend_from_slice(&frames);
                            own.push(OwnPrefix {
                                before: before - 4,
                                left: OWN_COMPLETIONS,
                                brought_back: call.brought_back,
                                ..OwnPrefix::default()
                            });
                            before = 4;
                        }
                    }
                    ext::execute_unnamed(&mut out, sql, &[], false);
                }
                // Checked where it runs: a statement before it may set what the check
                // reads.
                Part::HotOnlyCall(error, sql) => {
                    out.extend_from_slice(&own_frames(&refusal_unless_hot_only_sql(error), &[]));
                    own.push(OwnPrefix {
                        before: before - 4,
                        left: OWN_COMPLETIONS,
                        refusal: true,
                        ..OwnPrefix::default()
                    });
                    before = 4;
                    // coldwire's parts answer in the order they are sent: nothing after
                    // this one goes to the front.
                    hoist = false;
                    ext::execute_unnamed(&mut out, sql, &[], false);
                }
                Part::Read(read) => match self.cold_params(read, &params, txn).await {
                    Ok(cold) => {
                        let (sql, values) = read.form(cold);
                        let values: Vec<Option<&[u8]>> =
                            values.iter().map(|p| Some(&p[..])).collect();
                        ext::execute_unnamed(&mut out, sql, &values, false);
                    }
                    Err(e) => return Plan::Fail(e.client_error()),
                },
            }
        }
        out.extend_from_slice(&ext::empty(b'S'));
        front.extend_from_slice(&out);
        Plan::Run(front, own)
    }

    /// `coldwire.explain(sql)`: the rewritten text of `sql` and, per reference to a
    /// tiered table, the conditions the cold planner prunes by and what the scan kept and
    /// pruned, planned for the tables' current generations (parameters unbound) in a
    /// session with `settings`.
    ///
    /// # Errors
    /// The catalog or the cold store could not be read.
    pub async fn explain(&self, sql: &str, settings: Settings) -> Result<String, PlanError> {
        let unbound = BoundParams {
            settings,
            ..BoundParams::none()
        };
        self.explain_bound(sql, 0, &unbound).await
    }

    /// [`ReadPath::explain`] of a statement with `declared` parameter types, bound to
    /// `params`.
    ///
    /// # Errors
    /// As [`ReadPath::explain`].
    pub async fn explain_bound(
        &self,
        sql: &str,
        declared: usize,
        params: &BoundParams<'_>,
    ) -> Result<String, PlanError> {
        use std::fmt::Write;
        let Some(read) = self.prepare(sql, declared).await? else {
            return Ok("The statement reads no tiered table (or is not a single read coldwire rewrites): it is relayed unchanged.".into());
        };
        let mut out = format!("Rewritten statement:\n  {}\n", read.sql);
        let mut param = read.client_params;
        for (i, r) in read.references.iter().enumerate() {
            let cold = self.catalog.cold_table(r.table_id, true).await?;
            let predicates = to_prune(&r.predicates, &cold.columns, params);
            let conditions: Vec<String> = r.predicates.iter().map(ToString::to_string).collect();
            let count = r.param_count();
            let numbers: Vec<String> = (param + 1..=param + count)
                .map(|n| format!("${n}"))
                .collect();
            param += count;
            let _ = writeln!(
                out,
                "Reference {} (parameters {}): {} at generation {}",
                i + 1,
                numbers.join(", "),
                cold.name,
                cold.generation
            );
            if let Some(plan) = &r.aggregate {
                if let Some(filters) = plan.cold_filters(&predicates, &cold, params) {
                    let found = self
                        .partials(r, plan, cold.clone(), predicates, filters)
                        .await?;
                    let (groups, st) = (found.rows.len(), found.stats);
                    let _ = writeln!(
                        out,
                        "  Path: aggregate pushdown ({} partials per group{}, every condition evaluated on cold rows)\n  Segments: {} kept, {} pruned of {}; row groups pruned: {}\n  Cold rows: {} scanned, {} aggregated into {} partial rows",
                        plan.partials.len(),
                        if plan.group.is_empty() { String::new() } else { format!(", {} group columns", plan.group.len()) },
                        st.segments - st.segments_pruned,
                        st.segments_pruned,
                        st.segments,
                        st.row_groups_pruned,
                        st.rows_scanned,
                        st.rows_aggregated,
                        groups
                    );
                    if st.row_groups_counted > 0 {
                        let _ = writeln!(
                            out,
                            "  Row groups counted from their statistics: {}",
                            st.row_groups_counted
                        );
                    }
                    continue;
                }
                let _ = writeln!(
                    out,
                    "  Path: aggregate of cold rows (a condition cannot be evaluated exactly on cold rows: Postgres applies it)"
                );
            } else {
                let _ = writeln!(
                    out,
                    "  Path: cold rows injected (those that may match; Postgres applies the whole statement)"
                );
            }
            let _ = writeln!(
                out,
                "  Conditions: {} ({} used for pruning)",
                if conditions.is_empty() {
                    "none".to_owned()
                } else {
                    conditions.join(" AND ")
                },
                predicates.len()
            );
            let read = r.read_columns(&cold);
            let _ = writeln!(
                out,
                "  Columns decoded: {}",
                match &read {
                    Some(read) => {
                        let names: Vec<&str> = cold
                            .columns
                            .iter()
                            .enumerate()
                            .filter(|(i, _)| read[*i] || cold.pk_positions.contains(i))
                            .map(|(_, c)| c.name.as_str())
                            .collect();
                        format!(
                            "{} of {} ({})",
                            names.len(),
                            cold.columns.len(),
                            names.join(", ")
                        )
                    }
                    None => format!("all {}", cold.columns.len()),
                }
            );
            match scan(
                &self.store,
                &cold,
                &predicates,
                read.as_deref(),
                self.limits,
            )
            .await
            {
                Ok(found) => {
                    let st = found.stats;
                    let _ = writeln!(
                        out,
                        "  Segments: {} kept, {} pruned of {}\n  Row groups: {} read, {} pruned of {}\n  Cold rows: {} injected ({} scanned, {} bytes read)",
                        st.segments - st.segments_pruned,
                        st.segments_pruned,
                        st.segments,
                        st.row_groups - st.row_groups_pruned,
                        st.row_groups_pruned,
                        st.row_groups,
                        found.num_rows(),
                        st.rows_scanned,
                        st.bytes_read
                    );
                }
                Err(ScanError::TooManyRows { cap, .. }) => {
                    let _ = writeln!(out, "  Cold rows: more than max_cold_rows ({cap}); the statement would fail with 54000");
                }
                Err(ScanError::TooMuchMemory { cap, .. }) => {
                    let _ = writeln!(out, "  Cold rows: more than max_cold_memory_mb ({} MiB); the statement would fail with 54000", cap >> 20);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(out)
    }

    /// The plan for one simple Query already prepared (with no declared parameters);
    /// `txn` as for [`ReadPath::cold_params`], `settings` the session's (client_encoding,
    /// TimeZone), results in binary for a binary COPY.
    pub async fn plan(
        &self,
        prepared: &PreparedRead,
        txn: TxnView<'_>,
        settings: Settings,
        binary_results: bool,
    ) -> Plan {
        let params = BoundParams {
            settings,
            ..BoundParams::none()
        };
        match self.cold_params(prepared, &params, txn).await {
            Err(PlanError::Scan(ScanError::NotTiered(_))) => {
                // Untiered meanwhile: the table is plain, the Query right as it is.
                self.invalidate();
                Plan::PassThrough
            }
            Ok(cold) => {
                let mut out = BytesMut::new();
                let (sql, values) = prepared.form(cold);
                let values: Vec<Option<&[u8]>> = values.iter().map(|p| Some(&p[..])).collect();
                ext::run_unnamed(&mut out, sql, &values, binary_results);
                Plan::Run(out, Vec::new())
            }
            Err(e) => Plan::Fail(e.client_error()),
        }
    }
}

/// Whether `sql` ends the transaction it runs in or rolls back to a savepoint
/// ([`Kind::Transaction`]), so that a rehydration moved ahead of it could be undone by
/// it, or begins a block with modes, which no statement may go ahead of.
fn ends_transaction(sql: &str) -> bool {
    kinds_of(sql).contains(&Kind::Transaction { ends: true }) || begins_with_modes(sql)
}

/// Whether `sql` begins a transaction block with modes (`BEGIN ISOLATION LEVEL …`,
/// `START TRANSACTION READ ONLY`): they must come before any query of the transaction,
/// so no rehydration may be moved ahead of it.
fn begins_with_modes(sql: &str) -> bool {
    use pg_query::protobuf::TransactionStmtKind as T;
    let Ok(parsed) = pg_query::parse(sql, 0) else {
        return false;
    };
    parsed.protobuf.stmts.iter().any(|s| {
        matches!(
            s.stmt.as_ref().and_then(|n| n.node.as_ref()),
            Some(pg_query::NodeEnum::TransactionStmt(t))
                if (t.kind == T::TransStmtBegin as i32 || t.kind == T::TransStmtStart as i32)
                    && !t.options.is_empty()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_before_a_commit_do_not_hide_it() {
        assert!(ends_transaction("/* app */ COMMIT"));
        assert!(ends_transaction("-- c\nrollback"));
        assert!(ends_transaction("ROLLBACK TO SAVEPOINT a"));
        assert!(!ends_transaction("SAVEPOINT a"));
        assert!(!ends_transaction("/* COMMIT */ SELECT 1"));
        assert!(ends_transaction("BEGIN ISOLATION LEVEL REPEATABLE READ"));
        assert!(ends_transaction("start transaction read only"));
        assert!(!ends_transaction("BEGIN"));
    }
}
