//! What a statement is (read, write, DDL, COPY, transaction control, EXPLAIN, SQL-level
//! PREPARE/EXECUTE/DEALLOCATE), decided from pg_query's parse tree of the whole statement
//! (DESIGN §7.1), never from its first word: comments, parentheses, case and whitespace
//! change nothing. Sans-IO.

use pg_query::protobuf::{node::Node as N, TransactionStmtKind};

use super::params::oid;

/// The kind of one statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// SELECT, VALUES, TABLE (a locking read included).
    Read,
    /// INSERT, UPDATE, DELETE or MERGE, with or without WITH.
    Write,
    /// COPY, either direction.
    Copy,
    /// Transaction control; `ends`: it ends the transaction it runs in (COMMIT, END,
    /// ROLLBACK or ABORT, PREPARE TRANSACTION, COMMIT/ROLLBACK PREPARED) or the
    /// subtransactions since a savepoint (ROLLBACK TO): work done before it may be gone
    /// after it.
    Transaction { ends: bool },
    /// EXPLAIN; `analyze`: it runs the statement it explains.
    Explain { analyze: bool },
    /// SQL-level `PREPARE name AS …` (`name` as Postgres folded it).
    Prepare { name: String },
    /// SQL-level `EXECUTE name(…)`.
    Execute { name: String },
    /// `DEALLOCATE name` (`None`: `DEALLOCATE ALL`).
    Deallocate { name: Option<String> },
    /// `DISCARD ALL` (drops every prepared statement too).
    DiscardAll,
    /// Data definition (CREATE, ALTER, DROP, …), which may change what a name means.
    Ddl,
    /// Anything else (SET, SHOW, CALL, DO, LISTEN, VACUUM, …).
    Other,
}

impl Kind {
    /// The kind of statement node `node`.
    pub fn of(node: &N) -> Kind {
        match node {
            N::SelectStmt(_) => Kind::Read,
            N::InsertStmt(_) | N::UpdateStmt(_) | N::DeleteStmt(_) | N::MergeStmt(_) => Kind::Write,
            N::CopyStmt(_) => Kind::Copy,
            N::TransactionStmt(t) => {
                let kind = TransactionStmtKind::try_from(t.kind).ok();
                Kind::Transaction {
                    ends: matches!(
                        kind,
                        Some(
                            TransactionStmtKind::TransStmtCommit
                                | TransactionStmtKind::TransStmtRollback
                                | TransactionStmtKind::TransStmtPrepare
                                | TransactionStmtKind::TransStmtCommitPrepared
                                | TransactionStmtKind::TransStmtRollbackPrepared
                                | TransactionStmtKind::TransStmtRollbackTo
                        )
                    ),
                }
            }
            N::ExplainStmt(e) => Kind::Explain {
                analyze: e.options.iter().any(|o| match o.node.as_ref() {
                    Some(N::DefElem(d)) => d.defname == "analyze" && !explicitly_off(d),
                    _ => false,
                }),
            },
            N::PrepareStmt(p) => Kind::Prepare {
                name: p.name.clone(),
            },
            N::ExecuteStmt(e) => Kind::Execute {
                name: e.name.clone(),
            },
            N::DeallocateStmt(d) => Kind::Deallocate {
                name: (!d.name.is_empty()).then(|| d.name.clone()),
            },
            N::DiscardStmt(d) => {
                if d.target == pg_query::protobuf::DiscardMode::DiscardAll as i32 {
                    Kind::DiscardAll
                } else {
                    Kind::Other
                }
            }
            N::VariableSetStmt(_)
            | N::VariableShowStmt(_)
            | N::CallStmt(_)
            | N::DoStmt(_)
            | N::ListenStmt(_)
            | N::UnlistenStmt(_)
            | N::NotifyStmt(_)
            | N::VacuumStmt(_)
            | N::CheckPointStmt(_)
            | N::LockStmt(_)
            | N::DeclareCursorStmt(_)
            | N::FetchStmt(_)
            | N::ClosePortalStmt(_)
            | N::LoadStmt(_)
            | N::ConstraintsSetStmt(_) => Kind::Other,
            _ => Kind::Ddl,
        }
    }
}

/// `EXPLAIN (ANALYZE false)`, `(ANALYZE off)`, `(ANALYZE 0)`.
fn explicitly_off(d: &pg_query::protobuf::DefElem) -> bool {
    match d.arg.as_ref().and_then(|a| a.node.as_ref()) {
        Some(N::String(s)) => matches!(
            s.sval.to_ascii_lowercase().as_str(),
            "false" | "off" | "no" | "0"
        ),
        Some(N::Boolean(b)) => !b.boolval,
        Some(N::Integer(i)) => i.ival == 0,
        _ => false,
    }
}

/// Whether `haystack` contains `needle` (lower-case ASCII or any UTF-8), ignoring ASCII
/// case: the cheap name test, without allocating.
pub fn contains_ignore_ascii_case(haystack: &str, needle: &str) -> bool {
    bytes_contain_ignore_ascii_case(haystack.as_bytes(), needle)
}

/// [`contains_ignore_ascii_case`] over bytes in any ASCII-compatible encoding.
pub fn bytes_contain_ignore_ascii_case(haystack: &[u8], needle: &str) -> bool {
    let (h, n) = (haystack, needle.as_bytes());
    if n.is_empty() {
        return true;
    }
    h.windows(n.len()).any(|w| w.eq_ignore_ascii_case(n))
}

/// The kinds of the statements of `parsed`, in order.
pub fn kinds(parsed: &pg_query::ParseResult) -> Vec<Kind> {
    parsed
        .protobuf
        .stmts
        .iter()
        .map(|s| {
            s.stmt
                .as_ref()
                .and_then(|s| s.node.as_ref())
                .map_or(Kind::Other, Kind::of)
        })
        .collect()
}

/// The scanner's tokens of `sql` without its comments, which may stand between any two
/// tokens (`TABLE /* c */ t`, `public./* c */t`).
///
/// # Errors
/// Text the scanner cannot read.
pub fn code_tokens(sql: &str) -> Result<Vec<pg_query::protobuf::ScanToken>, pg_query::Error> {
    use pg_query::protobuf::Token;
    Ok(pg_query::scan(sql)?
        .tokens
        .into_iter()
        .filter(|t| t.token != Token::SqlComment as i32 && t.token != Token::CComment as i32)
        .collect())
}

/// The kinds of the statements of `sql` (empty when it does not parse: Postgres will say
/// why).
pub fn kinds_of(sql: &str) -> Vec<Kind> {
    pg_query::parse(sql, 0)
        .map(|p| kinds(&p))
        .unwrap_or_default()
}

/// The prepared statements `sql` frees, in order: a name per `DEALLOCATE name`, `None`
/// per `DEALLOCATE ALL` or `DISCARD ALL`. Parsed only when one of the two words occurs.
pub fn freed_statements(sql: &str) -> Vec<Option<String>> {
    if !contains_ignore_ascii_case(sql, "deallocate") && !contains_ignore_ascii_case(sql, "discard")
    {
        return Vec::new();
    }
    kinds_of(sql)
        .into_iter()
        .filter_map(|kind| match kind {
            Kind::Deallocate { name } => Some(name),
            Kind::DiscardAll => Some(None),
            _ => None,
        })
        .collect()
}

/// Whether `word` occurs in `sql` where a statement may begin with it: at the start, or
/// after a `;`, the end of a comment or a line break, with only spaces and tabs between
/// (a superset: a column named `prepared_at`, or a word inside a string, does not
/// qualify unless it follows one of those).
fn may_begin_statement(sql: &str, word: &str) -> bool {
    let (h, n) = (sql.as_bytes(), word.as_bytes());
    (0..h.len().saturating_sub(n.len() - 1)).any(|at| {
        h[at..at + n.len()].eq_ignore_ascii_case(n)
            && matches!(
                h[..at]
                    .iter()
                    .rev()
                    .find(|&&b| b != b' ' && b != b'\t' && b != b'\r'),
                None | Some(b';' | b'/' | b'\n' | b'(')
            )
    })
}

/// The statements `sql` prepares with SQL-level PREPARE: each one's name, with the text
/// of its PREPARE. Parsed only when the word occurs.
pub fn sql_prepares(sql: &str) -> Vec<(String, String)> {
    if !may_begin_statement(sql, "prepare") {
        return Vec::new();
    }
    let kinds = kinds_of(sql);
    if !kinds.iter().any(|k| matches!(k, Kind::Prepare { .. })) {
        return Vec::new();
    }
    let texts = if kinds.len() > 1 {
        pg_query::split_with_parser(sql).unwrap_or_default()
    } else {
        vec![sql]
    };
    kinds
        .into_iter()
        .zip(texts)
        .filter_map(|(kind, text)| match kind {
            Kind::Prepare { name } => Some((name, text.to_owned())),
            _ => None,
        })
        .collect()
}

/// The statement `node` runs: the one an `EXPLAIN ANALYZE` explains (nested EXPLAINs
/// unwrapped), else `node` itself. `EXPLAIN` without ANALYZE runs nothing and is returned
/// as it is.
pub fn executed(node: &N) -> &N {
    match node {
        N::ExplainStmt(e) if matches!(Kind::of(node), Kind::Explain { analyze: true }) => e
            .query
            .as_ref()
            .and_then(|q| q.node.as_ref())
            .map_or(node, executed),
        _ => node,
    }
}

/// The query a `DECLARE … CURSOR FOR` or a `CREATE TABLE … AS` runs (not a materialized
/// view's, which runs at each refresh): a locking read there is a locking read.
pub fn declared_query(node: &N) -> Option<&N> {
    match node {
        N::DeclareCursorStmt(d) => d.query.as_ref()?.node.as_ref(),
        N::CreateTableAsStmt(c)
            if c.objtype == pg_query::protobuf::ObjectType::ObjectTable as i32 =>
        {
            c.query.as_ref()?.node.as_ref()
        }
        _ => None,
    }
}

/// The statement a SQL-level `PREPARE` defines.
pub fn prepared_body(node: &N) -> Option<&N> {
    match node {
        N::PrepareStmt(p) => p.query.as_ref()?.node.as_ref(),
        _ => None,
    }
}

/// An argument of a SQL-level `EXECUTE`, as the cold planner may use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecuteArg {
    /// A literal (its text, as Postgres would read it for the parameter's type).
    Literal(String),
    /// `$n` of the statement the EXECUTE is sent in (extended protocol).
    Param(usize),
    /// NULL, or an expression coldwire does not evaluate: nothing known, so nothing pruned.
    Unknown,
}

/// The arguments of the `EXECUTE` at the top of `node`.
pub fn execute_args(node: &N) -> Vec<ExecuteArg> {
    let N::ExecuteStmt(e) = node else {
        return Vec::new();
    };
    e.params
        .iter()
        .map(|p| match p.node.as_ref() {
            Some(N::AConst(c)) if !c.isnull => match c.val.as_ref() {
                Some(pg_query::protobuf::a_const::Val::Ival(i)) => {
                    ExecuteArg::Literal(i.ival.to_string())
                }
                Some(pg_query::protobuf::a_const::Val::Fval(f)) => {
                    ExecuteArg::Literal(f.fval.clone())
                }
                Some(pg_query::protobuf::a_const::Val::Sval(s)) => {
                    ExecuteArg::Literal(s.sval.clone())
                }
                _ => ExecuteArg::Unknown,
            },
            Some(N::ParamRef(r)) => usize::try_from(r.number)
                .ok()
                .filter(|n| *n > 0)
                .map_or(ExecuteArg::Unknown, ExecuteArg::Param),
            _ => ExecuteArg::Unknown,
        })
        .collect()
}

/// The type OIDs of a SQL-level `PREPARE name(types…)` that the cold planner reads
/// parameters as (see `sql::params`); any other type is given an OID that planner never
/// uses a value of, so it prunes nothing by it.
pub fn prepare_param_types(node: &N) -> Vec<u32> {
    let N::PrepareStmt(p) = node else {
        return Vec::new();
    };
    p.argtypes
        .iter()
        .map(|t| match t.node.as_ref() {
            Some(N::TypeName(tn)) if tn.array_bounds.is_empty() => {
                let names: Vec<&str> = tn
                    .names
                    .iter()
                    .filter_map(|n| match n.node.as_ref() {
                        Some(N::String(s)) => Some(s.sval.as_str()),
                        _ => None,
                    })
                    .collect();
                match names.as_slice() {
                    ["pg_catalog", "int2"] | ["int2"] | ["smallint"] => oid::INT2,
                    ["pg_catalog", "int4"] | ["int4"] | ["integer"] | ["int"] => oid::INT4,
                    ["pg_catalog", "int8"] | ["int8"] | ["bigint"] => oid::INT8,
                    ["text"] | ["pg_catalog", "text"] => oid::TEXT,
                    ["pg_catalog", "varchar"] | ["varchar"] => oid::VARCHAR,
                    ["uuid"] | ["pg_catalog", "uuid"] => oid::UUID,
                    _ => UNUSABLE_TYPE,
                }
            }
            _ => UNUSABLE_TYPE,
        })
        .collect()
}

/// A type OID no parameter of the cold planner is read as (`sql::params`).
pub const UNUSABLE_TYPE: u32 = u32::MAX;

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(sql: &str) -> Kind {
        let k = kinds_of(sql);
        assert_eq!(k.len(), 1, "{sql}");
        k.into_iter().next().unwrap()
    }

    #[test]
    fn prepares_are_found_where_a_statement_may_begin() {
        let sql = "/* pool */ PREPARE a AS SELECT 1; SELECT 'x';\n  prepare b(int) AS SELECT $1";
        assert_eq!(
            sql_prepares(sql),
            vec![
                ("a".to_owned(), "PREPARE a AS SELECT 1".to_owned()),
                ("b".to_owned(), "prepare b(int) AS SELECT $1".to_owned()),
            ]
        );
        // The word elsewhere is not parsed for.
        assert!(!may_begin_statement("SELECT prepared_at FROM t", "prepare"));
        assert!(!may_begin_statement(
            "INSERT INTO t VALUES ('x prepare')",
            "prepare"
        ));
        assert!(may_begin_statement("  Prepare x AS SELECT 1", "prepare"));
    }

    #[test]
    fn comments_case_and_spacing_change_nothing() {
        for sql in [
            "UPDATE t SET a = 1",
            "/* app:checkout */ UPDATE t SET a = 1",
            "-- trace\nDELETE FROM t",
            "  \n\t/* a */ /* b */ -- c\n  merge into t using s on t.id = s.id when matched then delete",
            "WITH x AS (SELECT 1) UPDATE t SET a = 1",
            "/**/insert into t values (1)",
            "InSeRt /* mid */ INTO t VALUES (1) -- after",
        ] {
            assert_eq!(kind(sql), Kind::Write, "{sql}");
        }
        for sql in [
            "/* x */ SELECT 1",
            "(SELECT 1)",
            "-- c\nVALUES (1)",
            "TABLE t",
        ] {
            assert_eq!(kind(sql), Kind::Read, "{sql}");
        }
        assert_eq!(kind("/* x */ copy t to stdout"), Kind::Copy);
        assert_eq!(kind("-- x\n ALTER TABLE t ADD COLUMN c int"), Kind::Ddl);
        assert_eq!(kind("/**/drop table t"), Kind::Ddl);
        assert_eq!(kind("/* x */ DO $$ BEGIN END $$"), Kind::Other);
    }

    #[test]
    fn statements_that_end_a_transaction_are_told_apart() {
        for sql in [
            "COMMIT",
            " commit;",
            "/* c */ END",
            "ROLLBACK",
            "abort",
            "PREPARE TRANSACTION 'x'",
            "ROLLBACK PREPARED 'x'",
            "COMMIT PREPARED 'x'",
            "ROLLBACK TO SAVEPOINT a",
            "rollback to a",
        ] {
            assert_eq!(kind(sql), Kind::Transaction { ends: true }, "{sql}");
        }
        for sql in [
            "BEGIN",
            "SAVEPOINT a",
            "RELEASE a",
            "/* commit */ START TRANSACTION",
        ] {
            assert_eq!(kind(sql), Kind::Transaction { ends: false }, "{sql}");
        }
        assert_eq!(
            kind("PREPARE p AS SELECT 1"),
            Kind::Prepare { name: "p".into() }
        );
    }

    #[test]
    fn explain_runs_its_statement_only_with_analyze() {
        for (sql, analyze) in [
            ("EXPLAIN UPDATE t SET a = 1", false),
            ("EXPLAIN ANALYZE UPDATE t SET a = 1", true),
            ("explain (analyze, buffers) delete from t", true),
            ("EXPLAIN (ANALYZE false) DELETE FROM t", false),
            ("EXPLAIN (ANALYZE off, VERBOSE) DELETE FROM t", false),
            ("EXPLAIN (ANALYZE on) DELETE FROM t", true),
            ("EXPLAIN (ANALYZE 1) DELETE FROM t", true),
            ("/* x */ EXPLAIN VERBOSE DELETE FROM t", false),
        ] {
            assert_eq!(kind(sql), Kind::Explain { analyze }, "{sql}");
            let parsed = pg_query::parse(sql, 0).unwrap();
            let node = parsed.protobuf.stmts[0]
                .stmt
                .as_ref()
                .unwrap()
                .node
                .as_ref()
                .unwrap();
            let runs = Kind::of(executed(node));
            assert_eq!(runs == Kind::Write, analyze, "{sql}");
        }
    }

    #[test]
    fn prepare_execute_and_deallocate_are_named() {
        let parsed = pg_query::parse(
            "PREPARE Upd(bigint, text, numeric, int[]) AS UPDATE t SET a = $2 WHERE id = $1",
            0,
        )
        .unwrap();
        let node = parsed.protobuf.stmts[0]
            .stmt
            .as_ref()
            .unwrap()
            .node
            .as_ref()
            .unwrap();
        assert_eq!(Kind::of(node), Kind::Prepare { name: "upd".into() });
        assert_eq!(Kind::of(prepared_body(node).unwrap()), Kind::Write);
        assert_eq!(
            prepare_param_types(node),
            vec![20, 25, UNUSABLE_TYPE, UNUSABLE_TYPE]
        );
        let parsed = pg_query::parse("EXECUTE upd(5, 'x', -7, NULL, now(), $3, 2.5)", 0).unwrap();
        let node = parsed.protobuf.stmts[0]
            .stmt
            .as_ref()
            .unwrap()
            .node
            .as_ref()
            .unwrap();
        assert_eq!(Kind::of(node), Kind::Execute { name: "upd".into() });
        assert_eq!(
            execute_args(node),
            vec![
                ExecuteArg::Literal("5".into()),
                ExecuteArg::Literal("x".into()),
                ExecuteArg::Literal("-7".into()),
                ExecuteArg::Unknown,
                ExecuteArg::Unknown,
                ExecuteArg::Param(3),
                ExecuteArg::Literal("2.5".into()),
            ]
        );
        assert_eq!(
            kind("DEALLOCATE upd"),
            Kind::Deallocate {
                name: Some("upd".into())
            }
        );
        assert_eq!(
            kind("deallocate prepare ALL"),
            Kind::Deallocate { name: None }
        );
        assert_eq!(kind("DISCARD ALL"), Kind::DiscardAll);
        assert_eq!(kind("DISCARD PLANS"), Kind::Other);
    }

    #[test]
    fn a_query_frees_the_statements_its_deallocates_and_discard_all_name() {
        assert_eq!(
            freed_statements(
                "SELECT 1; /* pool */ DEALLOCATE q; discard all; DEALLOCATE ALL; DISCARD PLANS"
            ),
            vec![Some("q".to_owned()), None, None]
        );
        assert!(freed_statements("SELECT 'deallocate q'").is_empty());
        assert!(freed_statements("SELECT 1").is_empty());
    }
}
