//! SQL-level PREPARE, EXECUTE, DEALLOCATE and DISCARD ALL of writes to tiered tables
//! (DESIGN §7.1): the session remembers the writes it prepared, so that an EXECUTE of one
//! is planned as that write.

use std::sync::{Arc, PoisonError};

use super::reads::PreparedWrite;
use super::rewritten::read_path;
use super::shared::Shared;
use super::state::SessionState;
use crate::sql::classify::{contains_ignore_ascii_case, Kind};

/// Words a text must hold to be a SQL-level PREPARE, EXECUTE, DEALLOCATE or DISCARD ALL.
const SQL_PREPARED_WORDS: [&str; 4] = ["prepare", "execute", "deallocate", "discard"];

/// Whether `sql` may be a SQL-level PREPARE, EXECUTE, DEALLOCATE or DISCARD that the
/// session must follow (a superset: a substring test); `names`, the version of the
/// registry now (`None`: not known fresh).
pub fn may_use_sql_prepared(
    sql: &str,
    state: &SessionState,
    names: impl FnOnce() -> Option<u64>,
) -> bool {
    SQL_PREPARED_WORDS[1..]
        .iter()
        .any(|w| contains_ignore_ascii_case(sql, w))
        && (state.has_sql_prepared_writes()
            || state.has_hot_only_calls()
            || state.has_sql_passed_refusals()
            || state.has_sql_passed_unchecked(names()))
}

/// What [`sql_prepared`] found.
pub(super) enum SqlPrepared {
    /// An EXECUTE of a write the session prepared: the write to plan.
    Execute(Arc<PreparedWrite>),
    /// A PREPARE of a write to a tiered table (alone in its text).
    PrepareWrite,
    /// An EXECUTE of a statement the session prepared with the protocol's Parse that
    /// calls a function reading tiered tables server-side: to run behind the check.
    HotOnlyCall(crate::wire::messages::ErrorFields),
    /// Anything else.
    Other,
}

/// SQL-level PREPARE, EXECUTE and DEALLOCATE of writes to tiered tables (DESIGN §7.1):
/// a PREPARE of such a write is remembered for the session (and relayed as it is), an
/// EXECUTE of one is the write to plan (with its arguments for the prepared `$n`), a
/// DEALLOCATE or DISCARD ALL forgets. In a string of several statements, PREPAREs and
/// DEALLOCATEs are followed; an EXECUTE there is not planned, and the capture function
/// refuses it if it writes (CW001). An EXECUTE of a statement the session prepared with
/// the protocol's Parse that calls a function reading tiered tables runs behind
/// coldwire's check (refused among several statements).
///
/// # Errors
/// The catalog could not be read.
pub(super) async fn sql_prepared(
    sql: &str,
    shared: &Shared<'_>,
) -> Result<SqlPrepared, super::reads::PlanError> {
    if !SQL_PREPARED_WORDS
        .iter()
        .any(|w| contains_ignore_ascii_case(sql, w))
    {
        return Ok(SqlPrepared::Other);
    }
    let Ok(parsed) = pg_query::parse(sql, 0) else {
        return Ok(SqlPrepared::Other);
    };
    let statements: Vec<&pg_query::protobuf::node::Node> = parsed
        .protobuf
        .stmts
        .iter()
        .filter_map(|s| s.stmt.as_ref()?.node.as_ref())
        .collect();
    let texts = if statements.len() > 1 {
        pg_query::split_with_parser(sql).unwrap_or_default()
    } else {
        vec![sql]
    };
    let mut found = SqlPrepared::Other;
    for (node, text) in statements.iter().zip(texts) {
        let node = crate::sql::classify::executed(node);
        match Kind::of(node) {
            Kind::Prepare { name } => {
                let write = read_path(shared).prepare_write(text, 0).await?;
                let mut state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
                match write {
                    Some(write) => {
                        if statements.len() == 1 {
                            found = SqlPrepared::PrepareWrite;
                        }
                        let types = crate::sql::classify::prepare_param_types(node);
                        state.sql_prepared_write(name, write, types);
                    }
                    None => state.forget_sql_prepared(Some(&name)),
                }
            }
            Kind::Deallocate { name } => shared
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .forget_sql_prepared(name.as_deref()),
            Kind::DiscardAll => shared
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .forget_sql_prepared(None),
            Kind::Execute { name } => {
                plan_sql_passed(shared).await;
                let state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(refusal) = state.sql_passed_refusal(&name) {
                    return Err(super::reads::PlanError::Refused(refusal.clone()));
                }
                // A statement prepared with Parse that calls a function reading tiered
                // tables runs behind coldwire's check, alone in its text; among others,
                // it is refused.
                if let Some(e) = state.hot_only_call(&name) {
                    if statements.len() > 1 {
                        return Err(super::reads::PlanError::Refused(e.clone()));
                    }
                    found = SqlPrepared::HotOnlyCall(e.clone());
                } else if let Some((write, types)) =
                    state.sql_prepared(&name).filter(|_| statements.len() == 1)
                {
                    found = SqlPrepared::Execute(Arc::new(write.for_execute(
                        sql,
                        crate::sql::classify::execute_args(node),
                        types.to_vec(),
                    )));
                }
            }
            _ => {}
        }
    }
    // Its table may have gained, since the PREPARE, what coldwire cannot serve.
    if let SqlPrepared::Execute(write) = &found {
        if let Some(refusal) = read_path(shared).unservable_write(write.table_id).await? {
            return Err(refusal);
        }
    }
    Ok(found)
}

/// The statements the client prepared with SQL-level PREPARE when they named no tiered
/// table (relayed as written), planned as their PREPAREs would be now, once per registry
/// version: a write is remembered, so that its EXECUTE is planned as the write; an
/// EXECUTE of a read is refused, as its PREPARE would be now (it would read the hot rows
/// only). While the catalog cannot be read they stay as they are.
async fn plan_sql_passed(shared: &Shared<'_>) {
    let reads = read_path(shared);
    let Ok(names) = reads.names_version_now().await else {
        return;
    };
    let unchecked = shared.locked().sql_passed_unchecked(names);
    for (name, text) in unchecked {
        let mut refusal = None;
        if reads.may_name_tiered(&text) {
            // As `prepare_sql` takes a PREPARE: a write first, then anything else.
            match reads.prepare_write(&text, 0).await {
                Ok(Some(write)) => {
                    let types = pg_query::parse(&text, 0)
                        .ok()
                        .and_then(|parsed| {
                            let node =
                                parsed.protobuf.stmts.first()?.stmt.as_ref()?.node.clone()?;
                            Some(crate::sql::classify::prepare_param_types(&node))
                        })
                        .unwrap_or_default();
                    shared
                        .locked()
                        .sql_prepared_write(name.clone(), write, types);
                }
                Ok(None) => match reads.prepare(&text, 0).await {
                    Ok(_) => {}
                    Err(super::reads::PlanError::Refused(mut fields)) => {
                        fields.detail.get_or_insert_with(|| {
                            format!("Prepared statement \"{name}\" was prepared before a table it reads was tiered.")
                        });
                        refusal = Some(fields);
                    }
                    Err(_) => continue,
                },
                // Not checked: tried again at the next EXECUTE.
                Err(_) => continue,
            }
        }
        shared.locked().sql_passed_checked(&name, names, refusal);
    }
}
