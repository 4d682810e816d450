//! Writes of tiered tables (DESIGN §7): the cold rows a write may touch brought back into
//! the heap first, in the same transaction, by `coldwire.rehydrate`, which also marks the
//! statement planned for the capture check (catalog v7, DESIGN §7.1); and the frames of
//! coldwire's own statements inside a client's group.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};

use bytes::BytesMut;

use super::path::{all_known, highest_param, ReadPath, TxnView, STATEMENT_CACHE_ENTRIES};
use crate::cold::scan::{scan, ScanError, ScanLimits};
use crate::error::fields;
use crate::error::PlanError;
use crate::session::reads::{BroughtBack, OwnCall};
use crate::sql::classify::{executed, prepared_body, ExecuteArg, Kind};
use crate::sql::params::BoundParams;
use crate::sql::predicates::{candidate_scan, pinned_keys, to_prune, ColumnPredicate};
use crate::sql::writes::{classify, Touched};
use crate::values::record::encode_record_batches;
use crate::values::ColdColumn;

/// A statement that writes (or locks rows of) a tiered table: relayed unchanged, after
/// coldwire's own statement that brings the cold rows it may touch back into the heap.
#[derive(Debug)]
pub struct PreparedWrite {
    pub table_id: i64,
    /// `schema.table`, for messages.
    pub table_name: String,
    /// As [`PreparedRead::client_params`](super::PreparedRead::client_params).
    pub client_params: usize,
    touched: Touched,
    /// As [`crate::sql::writes::Write::inserted`].
    inserted: Vec<Vec<ColumnPredicate>>,
    /// The key columns, in key order.
    pk: Vec<String>,
    row_type: u32,
    /// `SELECT coldwire.rehydrate_<id>($1, $2, $3::t[], $4, $5, $6, $7)` (the shared
    /// `coldwire.rehydrate` for a table without its own).
    pub rehydrate_sql: String,
    /// The statement's text as it goes upstream: what coldwire marks as planned in the
    /// transaction before it runs (`coldwire.plan_write`, catalog v7).
    pub statement: String,
    /// The statement fires the table's UPDATE or DELETE triggers (an UPDATE, DELETE,
    /// MERGE or upsert), whose capture refuses it unless marked planned: it is marked
    /// even when no cold row needs to come back.
    marks: bool,
    /// A SQL-level `EXECUTE` of a prepared write: its arguments, which stand for the
    /// prepared statement's `$n`, and the types the PREPARE declared.
    execute: Option<(Vec<ExecuteArg>, Vec<u32>)>,
}

impl PreparedWrite {
    /// The write `EXECUTE` (text `statement`, with `args`) runs, for a SQL-level PREPARE
    /// of this write that declared `types`.
    pub fn for_execute(&self, statement: &str, args: Vec<ExecuteArg>, types: Vec<u32>) -> Self {
        Self {
            client_params: highest_param(statement),
            statement: statement.to_owned(),
            execute: Some((args, types)),
            touched: self.touched.clone(),
            inserted: self.inserted.clone(),
            pk: self.pk.clone(),
            table_name: self.table_name.clone(),
            rehydrate_sql: self.rehydrate_sql.clone(),
            ..*self
        }
    }

    /// The parameters of the prepared statement that an EXECUTE's `args` stand for,
    /// given the client's own `params` of the statement the EXECUTE is sent in.
    fn execute_params<'a>(&'a self, params: &BoundParams<'a>) -> Option<BoundParams<'a>> {
        let (args, types) = self.execute.as_ref()?;
        let mut out = BoundParams {
            settings: params.settings,
            ..BoundParams::none()
        };
        for (i, arg) in args.iter().enumerate() {
            let declared = types.get(i).copied().unwrap_or(0);
            let (value, binary, declared) = match arg {
                ExecuteArg::Literal(text) => (Some(text.as_bytes()), false, declared),
                // A NULL, to the planner: nothing known about the value.
                ExecuteArg::Unknown => (None, false, declared),
                ExecuteArg::Param(n) => {
                    let j = n - 1;
                    let known = params.declared.get(j).copied().unwrap_or(0);
                    // Usable only where both declarations agree (or one is left open).
                    let declared = match (declared, known) {
                        (0, k) => k,
                        (d, 0) => d,
                        (d, k) if d == k => d,
                        _ => crate::sql::classify::UNUSABLE_TYPE,
                    };
                    (
                        params.values.get(j).copied().flatten(),
                        params.binary.get(j).copied().unwrap_or(false),
                        declared,
                    )
                }
            };
            out.values.push(value);
            out.binary.push(binary);
            out.declared.push(declared);
        }
        Some(out)
    }
}

/// Marks a statement planned without bringing rows back (catalog v7).
const PLAN_WRITE_SQL: &str = "SELECT coldwire.plan_write($1::text, $2::text, $3::bool)";

/// The parameters that mark `statement` planned (`coldwire.plan_write`): the md5 of its
/// text as the server reads it, computed here when the session sends UTF-8 (the encoding
/// of every database with tiered tables) or the text is ASCII, else the text for the
/// server to hash; and `append`.
fn mark_params(statement: &str, utf8: bool, append: bool) -> [Option<BytesMut>; 3] {
    use md5::Digest;
    let (digest, text) = if utf8 || statement.is_ascii() {
        let digest = md5::Md5::digest(statement.as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        (Some(BytesMut::from(hex.as_bytes())), None)
    } else {
        (None, Some(BytesMut::from(statement.as_bytes())))
    };
    [digest, text, Some(BytesMut::from(&[u8::from(append)][..]))]
}

impl ReadPath {
    /// The write `sql` makes to a tiered table, if any (for a Parse that declared
    /// `declared_params` parameter types).
    ///
    /// # Errors
    /// The catalog could not be read; a write coldwire cannot serve (0A000).
    pub async fn prepare_write(
        &self,
        sql: &str,
        declared_params: usize,
    ) -> Result<Option<Arc<PreparedWrite>>, PlanError> {
        if !self.may_name_tiered(sql) {
            return Ok(None);
        }
        let key = (sql.to_owned(), declared_params);
        if let Some(registry) = self.catalog.current_registry() {
            if let Some((version, found)) = self
                .writes
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&key)
            {
                if *version == registry.version {
                    return Ok(found.clone());
                }
            }
        }
        let Ok(parsed) = pg_query::parse(sql, 0) else {
            return Ok(None);
        };
        // Only DML, locking reads, EXPLAIN ANALYZE of them and SQL-level PREPAREs of them
        // write, whatever comes before them in the text (DDL must not reload the
        // registry before it runs: see `prepare`).
        let runs_dml = |k: &Kind| matches!(k, Kind::Read | Kind::Write);
        let writes = match parsed.protobuf.stmts.as_slice() {
            [one] => one
                .stmt
                .as_ref()
                .and_then(|s| s.node.as_ref())
                .is_some_and(|n| {
                    let run = executed(n);
                    runs_dml(&Kind::of(run))
                        || prepared_body(run).is_some_and(|b| runs_dml(&Kind::of(executed(b))))
                        // A cursor or a table made from a locking read locks as it does.
                        || (crate::sql::classify::declared_query(run).is_some()
                            && crate::sql::tree::walk(&parsed).locking)
                }),
            _ => false,
        };
        if !writes {
            return Ok(None);
        }
        let registry = self.catalog.registry().await?;
        if let Some(refusal) = super::path::unservable_refusal(&parsed, &registry) {
            return Err(refusal);
        }
        // Planned with `public.events.id` read as `events.id`, so that its conditions
        // bound the rows it may touch; the statement itself is sent as written.
        let parsed = match crate::sql::rewrite::unqualify_columns(sql, &parsed, |schema, name| {
            registry.unique(schema, name).map(|t| t.table.clone())
        }) {
            Ok(Some(text)) => pg_query::parse(&text, 0).unwrap_or(parsed),
            _ => parsed,
        };
        let write = classify(&parsed, |schema, name| {
            registry.unique(schema, name).map(|t| t.table.clone())
        })
        .map_err(|e| {
            PlanError::Refused(fields(
                "0A000",
                format!("coldwire: {e}"),
                Some("Split the statement, or schema-qualify the tables.".into()),
            ))
        })?;
        // A view over tiered tables that the write reads would read their hot rows only
        // (the write is relayed, its views not expanded), as would the tables themselves,
        // which `classify` refuses.
        // So would a locking read of such a view, which no planner serves: the read
        // path does not lock, and the write path locks tiered tables only.
        let walked = crate::sql::tree::walk(&parsed);
        if write.is_some() || walked.locking {
            let view = walked
                .relations
                .iter()
                .filter(|r| r.read && !r.cte)
                .filter_map(|r| registry.view(r.schema.as_deref(), &r.name))
                .find(|v| !v.materialized);
            if let Some(view) = view {
                let does = match &write {
                    Some(w) => format!("writes {}", w.table.name),
                    None => "locks rows".to_owned(),
                };
                return Err(PlanError::Refused(fields(
                    "0A000",
                    format!(
                        "coldwire: a statement that {does} and reads the view {}.{} over tiered tables is not supported yet",
                        view.schema, view.name
                    ),
                    Some("Split the statement, or read the tables the view reads.".into()),
                )));
            }
        }
        let prepared = match write {
            None => None,
            Some(w) => {
                let tiered = registry
                    .by_id(w.table.table_id)
                    .ok_or(PlanError::Catalog("table vanished".into()))?;
                let qualified = crate::sql::quote::qualified_ident(&w.table.schema, &w.table.name);
                Some(Arc::new(PreparedWrite {
                    statement: sql.to_owned(),
                    marks: w.fires_update_or_delete,
                    execute: None,
                    table_id: w.table.table_id,
                    table_name: format!("{}.{}", w.table.schema, w.table.name),
                    client_params: highest_param(sql).max(declared_params),
                    touched: w.touched,
                    inserted: w.inserted,
                    pk: w.table.pk.clone(),
                    row_type: tiered.row_type,
                    // Every type named in full: a client's search_path must not put its own
                    // type, whose input function could see the arguments, in their place.
                    rehydrate_sql: format!(
                        "SELECT coldwire.rehydrate_{id}($1::pg_catalog.int8, $2::pg_catalog.int8, $3::{qualified}[], \
                         $4::pg_catalog.text, $5::pg_catalog.text, $6::pg_catalog.text, $7::pg_catalog.bool, $8::pg_catalog.bytea)",
                        id = w.table.table_id,
                    ),
                }))
            }
        };
        let mut writes = self.writes.lock().unwrap_or_else(PoisonError::into_inner);
        if writes.len() >= STATEMENT_CACHE_ENTRIES {
            writes.clear();
        }
        writes.insert(key, (registry.version, prepared.clone()));
        Ok(prepared)
    }

    /// The refusal of an execution of a write prepared (SQL-level) before its table
    /// gained what coldwire cannot serve ([`super::path::unservable_refusal`]).
    ///
    /// # Errors
    /// The registry could not be read.
    pub async fn unservable_write(&self, table_id: i64) -> Result<Option<PlanError>, PlanError> {
        let registry = self.catalog.registry().await?;
        Ok(registry
            .by_id(table_id)
            .filter(|t| !t.unservable.is_empty())
            .map(super::path::unservable_error))
    }

    /// coldwire's own statement before one execution of `write` with the client's
    /// `params`: `coldwire.rehydrate`, or `coldwire.plan_write` alone when no cold row may
    /// come back but the statement must be marked planned (`None`: neither is needed).
    /// `append`: keep the marks of statements planned before (rehydrations run ahead of
    /// several statements of one Query string).
    ///
    /// The parameters of `coldwire.rehydrate`: the table, the generation planned for (as
    /// `txn` names it, else the current one), every live cold row the statement may touch
    /// (the union of its scans and of its table's keys in `candidates`, which the capture
    /// check refused in an earlier attempt; one row per key), and the keys it may create
    /// that it pins down (with the candidates), to claim where no segment holds them.
    /// Scans whose keys the transaction brought back already are not made.
    ///
    /// # Errors
    /// The catalog or the cold store could not be read; more rows than
    /// `max_rehydrate_rows` (54000).
    pub async fn rehydration(
        &self,
        write: &PreparedWrite,
        params: &BoundParams<'_>,
        txn: TxnView<'_>,
        candidates: &HashMap<i64, Vec<serde_json::Value>>,
        append: bool,
    ) -> Result<Option<OwnCall>, PlanError> {
        let TxnView {
            at,
            fresh,
            known,
            lock_here,
            ..
        } = txn;
        let executed = write.execute_params(params);
        let params = executed.as_ref().unwrap_or(params);
        let mark = mark_params(&write.statement, params.settings.utf8, append);
        let candidates = candidates
            .get(&write.table_id)
            .map_or(&[][..], Vec::as_slice);
        let cold = match at.get(&write.table_id) {
            Some(generation) => {
                // A transaction block that sees an older generation than the current one
                // took its snapshot before a flush finalized (REPEATABLE READ or
                // SERIALIZABLE; under READ COMMITTED the block's lock keeps the
                // generation it learnt current). The rows it would bring back are the
                // cold tier as its snapshot saw it: a row changed and flushed since would
                // come back old, and the write would undo that change where Postgres
                // refuses it with 40001. So does coldwire, for every write it plans
                // there (also one that would bring nothing back: rarely worth telling
                // apart).
                let current = self.catalog.cold_table(write.table_id, false).await?;
                if current.generation > *generation {
                    return Err(PlanError::Refused(crate::error::fields(
                        "40001",
                        format!(
                            "could not serialize access due to a flush of {} after this transaction's snapshot",
                            write.table_name
                        ),
                        Some("Retry the transaction.".into()),
                    )));
                }
                self.catalog
                    .cold_table_at(write.table_id, *generation)
                    .await?
            }
            None => self.catalog.cold_table(write.table_id, fresh).await?,
        };
        let mut scans: Vec<Vec<ColumnPredicate>> = match &write.touched {
            Touched::All => vec![Vec::new()],
            Touched::Scans(scans) => scans.clone(),
        };
        let mut absent: Vec<serde_json::Value> = candidates.to_vec();
        if !candidates.is_empty() {
            scans.push(candidate_scan(candidates, &write.pk));
        }
        for scan in &write.inserted {
            if let Some(keys) = pinned_keys(
                scan,
                &write.pk,
                &cold.columns,
                params,
                crate::catalog::capture::MAY_BE_COLD_LIMIT,
            ) {
                absent.extend(keys.into_iter().map(serde_json::Value::Object));
            }
        }
        if scans.is_empty() && absent.is_empty() {
            // Only rows whose keys coldwire cannot see are created (INSERT … SELECT,
            // keys from nextval): nothing to bring back, and no lock to take, so such
            // writers never wait for a finalize. The capture check refuses any of their
            // keys that may be cold (a finalize that moved one meanwhile included: its
            // heap row's delete commits before the insert can proceed), and coldwire then
            // runs the statement again with those keys planned.
            if lock_here {
                // Not a call that takes the table's lock: the caller takes it first.
                return Ok(None);
            }
            metrics::counter!(crate::metrics::ROUTES_TOTAL, "route" => "write").increment(1);
            return Ok(write.marks.then(|| OwnCall {
                sql: PLAN_WRITE_SQL.to_owned(),
                params: mark.into(),
                brought_back: None,
                locks: None,
            }));
        }
        let too_many = || {
            PlanError::Refused(fields(
                "54000",
                format!(
                    "coldwire: the statement would bring more than {} cold rows of {} back into the heap",
                    self.max_rehydrate_rows, write.table_name
                ),
                Some("Add a condition on the primary key, or raise max_rehydrate_rows in coldwire's configuration.".into()),
            ))
        };
        let mut seen = std::collections::HashSet::new();
        let mut batches = Vec::new();
        for scan_predicates in &scans {
            let predicates = to_prune(scan_predicates, &cold.columns, params);
            if all_known(known, write.table_id, &cold, &predicates) {
                continue;
            }
            let found = match scan(
                &self.store,
                &cold,
                &predicates,
                None,
                ScanLimits {
                    rows: self.max_rehydrate_rows,
                    ..self.limits
                },
            )
            .await
            {
                Err(ScanError::TooManyRows { .. }) => return Err(too_many()),
                other => other?,
            };
            for rows in found.batches {
                let keep: arrow::array::BooleanArray = (0..rows.num_rows())
                    .map(|row| Some(seen.insert(cold.key_of(&rows, row))))
                    .collect();
                batches.push(
                    arrow::compute::filter_record_batch(&rows, &keep)
                        .map_err(|e| PlanError::Catalog(e.to_string()))?,
                );
            }
        }
        if seen.len() > self.max_rehydrate_rows {
            return Err(too_many());
        }
        if !seen.is_empty() && !params.settings.utf8 {
            return Err(PlanError::Encoding);
        }
        let columns: Vec<ColdColumn> = cold
            .columns
            .iter()
            .map(|c| ColdColumn::new(c.name.clone(), c.ty))
            .collect();
        let array = if seen.is_empty() {
            // An empty array of the row type (no scan ran, so no columns to check).
            super::path::empty_array(write.row_type)
        } else {
            let mut array = BytesMut::new();
            encode_record_batches(&columns, write.row_type, batches, &mut array)
                .map_err(|e| PlanError::Catalog(e.to_string()))?;
            array
        };
        metrics::counter!(crate::metrics::ROUTES_TOTAL, "route" => "write").increment(1);
        metrics::counter!(crate::metrics::ROWS_REHYDRATED_TOTAL).increment(seen.len() as u64);
        tracing::debug!(table = %write.table_name, rows = seen.len(), "cold rows to rehydrate");
        let absent = serde_json::Value::Array(absent).to_string();
        if !absent.is_ascii() && !params.settings.utf8 {
            // The function checks the MAC over the keys as the server reads them.
            return Err(PlanError::Encoding);
        }
        // Signed with the database's secret: the function brings back only what coldwire
        // sends (catalog v13).
        let registry = self.catalog.registry().await?;
        let secret = registry.secret.as_ref().ok_or_else(|| {
            PlanError::Catalog(
                "coldwire.secret is empty, so coldwire cannot sign the rows it brings back; \
                 the flush executor makes a new secret within seconds"
                    .into(),
            )
        })?;
        let mac = crate::catalog::capture::rehydration_mac(
            secret.bytes(),
            write.table_id,
            cold.generation,
            &array,
            absent.as_bytes(),
        );
        let mut params = vec![
            Some(BytesMut::from(&write.table_id.to_be_bytes()[..])),
            Some(BytesMut::from(&cold.generation.to_be_bytes()[..])),
            Some(array),
            Some(BytesMut::from(absent.as_bytes())),
        ];
        params.extend(mark);
        params.push(Some(BytesMut::from(&mac[..])));
        // Remembered only where reads can ask for them ([`ColdTable::asked_keys`]).
        let brought_back = (!seen.is_empty() && cold.integer_key()).then(|| BroughtBack {
            table: write.table_id,
            keys: seen.into_iter().collect(),
            confirmed: false,
        });
        Ok(Some(OwnCall {
            sql: write.rehydrate_sql.clone(),
            params,
            brought_back,
            locks: Some((write.table_id, cold.generation)),
        }))
    }
}
