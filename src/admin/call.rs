//! Recognizes an admin call such as `SELECT coldwire.flush_table('events', wait => true)`
//! in SQL text (pg_query, the real Postgres grammar) and extracts its arguments.

use pg_query::protobuf::{a_const, node::Node as N, FuncCall, Node};

use super::AdminError;

/// The functions coldwire answers itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminFunction {
    TierTable,
    SetPolicy,
    FlushTable,
    UntierTable,
    /// Recognized so it is refused clearly (0A000): compaction is not built yet.
    CompactTable,
    Explain,
}

/// Postgres type OIDs of the admin functions' parameters.
pub mod oid {
    pub const BOOL: u32 = 16;
    pub const INT8: u32 = 20;
    pub const TEXT: u32 = 25;
    pub const JSONB: u32 = 3802;
    pub const REGCLASS: u32 = 2205;
}

impl AdminFunction {
    const ALL: [AdminFunction; 6] = [
        AdminFunction::TierTable,
        AdminFunction::SetPolicy,
        AdminFunction::FlushTable,
        AdminFunction::UntierTable,
        AdminFunction::CompactTable,
        AdminFunction::Explain,
    ];

    /// The SQL name, without schema.
    pub fn name(self) -> &'static str {
        match self {
            AdminFunction::TierTable => "tier_table",
            AdminFunction::SetPolicy => "set_policy",
            AdminFunction::FlushTable => "flush_table",
            AdminFunction::UntierTable => "untier_table",
            AdminFunction::CompactTable => "compact_table",
            AdminFunction::Explain => "explain",
        }
    }

    /// Declared parameters, in order: name, type OID, and whether it may be omitted.
    pub fn params(self) -> &'static [(&'static str, u32, bool)] {
        match self {
            AdminFunction::TierTable => {
                &[("t", oid::REGCLASS, false), ("policy", oid::JSONB, true)]
            }
            AdminFunction::SetPolicy => {
                &[("t", oid::REGCLASS, false), ("policy", oid::JSONB, false)]
            }
            AdminFunction::FlushTable => &[
                ("t", oid::REGCLASS, false),
                ("wait", oid::BOOL, true),
                ("drain", oid::BOOL, true),
            ],
            AdminFunction::UntierTable => &[("t", oid::REGCLASS, false)],
            AdminFunction::CompactTable => {
                &[("t", oid::REGCLASS, false), ("wait", oid::BOOL, true)]
            }
            AdminFunction::Explain => &[("sql", oid::TEXT, false)],
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// One argument as written in the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgValue {
    /// A string or numeric literal, as text.
    Literal(String),
    Bool(bool),
    Null,
    /// `$n` (1-based), bound at Bind time.
    Param(usize),
}

/// A recognized admin call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminCall {
    pub function: AdminFunction,
    /// One slot per declared parameter; `None` where the call relies on the default.
    pub args: Vec<Option<ArgValue>>,
    /// Name of the result column: the alias, else the function name (as Postgres names it).
    pub column: String,
    /// Highest `$n` the call uses.
    pub param_count: usize,
}

/// Cheap pre-check run on every Query and Parse: only text that mentions `coldwire` can hold
/// an admin call (identifiers fold to lower case, so compare ignoring ASCII case).
pub fn mentions_coldwire(sql: &[u8]) -> bool {
    const NEEDLE: &[u8] = b"coldwire";
    sql.len() >= NEEDLE.len()
        && sql
            .windows(NEEDLE.len())
            .any(|w| w.eq_ignore_ascii_case(NEEDLE))
}

/// The admin call `sql` consists of, `Ok(None)` when it calls no admin function (or does not
/// parse: Postgres will report that), or an error when it calls one in a form coldwire
/// cannot answer (inside a larger statement, with computed arguments, …).
///
/// # Errors
/// An admin function used other than as `SELECT coldwire.f(args) [AS alias]`, unknown
/// named parameters, missing or surplus arguments.
pub fn recognize(sql: &str) -> Result<Option<AdminCall>, AdminError> {
    let Ok(parsed) = pg_query::parse(sql, 0) else {
        return Ok(None);
    };
    let tree = &parsed.protobuf;
    let uses_admin = tree.nodes().iter().any(|(node, _, _, _)| match node {
        pg_query::NodeRef::FuncCall(f) => admin_function(f).is_some(),
        _ => false,
    });
    if !uses_admin {
        return Ok(None);
    }
    let misuse = || AdminError::Misuse;
    let [raw] = tree.stmts.as_slice() else {
        return Err(misuse());
    };
    let Some(N::SelectStmt(select)) = raw.stmt.as_ref().and_then(|s| s.node.as_ref()) else {
        return Err(misuse());
    };
    let plain = select.where_clause.is_none()
        && select.group_clause.is_empty()
        && select.having_clause.is_none()
        && select.sort_clause.is_empty()
        && select.limit_count.is_none()
        && select.limit_offset.is_none()
        && select.with_clause.is_none()
        && select.into_clause.is_none()
        && select.locking_clause.is_empty()
        && select.distinct_clause.is_empty()
        && select.values_lists.is_empty()
        && select.larg.is_none();
    let (call, alias) = match called_in_from(select) {
        Some(found) => found,
        None if select.from_clause.is_empty() => {
            let [target] = select.target_list.as_slice() else {
                return Err(misuse());
            };
            let Some(N::ResTarget(target)) = target.node.as_ref() else {
                return Err(misuse());
            };
            let Some(N::FuncCall(call)) = target.val.as_ref().and_then(|v| v.node.as_ref()) else {
                return Err(misuse());
            };
            (
                &**call,
                (!target.name.is_empty()).then(|| target.name.clone()),
            )
        }
        None => return Err(misuse()),
    };
    let function = admin_function(call).ok_or_else(misuse)?;
    if !plain || call.agg_star || call.agg_distinct || call.func_variadic || call.over.is_some() {
        return Err(misuse());
    }
    let declared = function.params();
    let mut args: Vec<Option<ArgValue>> = vec![None; declared.len()];
    let mut param_count = 0;
    let mut named_seen = false;
    for (position, arg) in call.args.iter().enumerate() {
        let (slot, value) = match arg.node.as_ref() {
            Some(N::NamedArgExpr(named)) => {
                named_seen = true;
                let slot = declared
                    .iter()
                    .position(|(n, _, _)| *n == named.name)
                    .ok_or_else(|| AdminError::UnknownParameter {
                        function: function.name(),
                        name: named.name.clone(),
                    })?;
                (slot, arg_value(function, named.arg.as_deref())?)
            }
            _ if named_seen => {
                return Err(AdminError::PositionalAfterNamed {
                    function: function.name(),
                })
            }
            _ => (position, arg_value(function, Some(arg))?),
        };
        if slot >= declared.len() {
            return Err(AdminError::TooManyArguments {
                function: function.name(),
                max: declared.len(),
            });
        }
        if args[slot].is_some() {
            return Err(AdminError::DuplicateArgument {
                function: function.name(),
                name: declared[slot].0,
            });
        }
        if let ArgValue::Param(n) = value {
            param_count = param_count.max(n);
        }
        args[slot] = Some(value);
    }
    for ((name, _, optional), arg) in declared.iter().zip(&args) {
        if !optional && arg.is_none() {
            return Err(AdminError::MissingArgument {
                function: function.name(),
                name,
            });
        }
    }
    let column = alias.unwrap_or_else(|| function.name().to_owned());
    Ok(Some(AdminCall {
        function,
        args,
        column,
        param_count,
    }))
}

/// The call of `SELECT * FROM coldwire.f(args) [AS name[(column)]]`, and the column's
/// name (the alias's column, else the alias): answered as
/// `SELECT coldwire.f(args)` is (its columns are the same). Other select lists and FROM
/// clauses are not this form.
fn called_in_from(select: &pg_query::protobuf::SelectStmt) -> Option<(&FuncCall, Option<String>)> {
    let [from] = select.from_clause.as_slice() else {
        return None;
    };
    let Some(N::RangeFunction(range)) = from.node.as_ref() else {
        return None;
    };
    if range.lateral || range.ordinality || range.is_rowsfrom || !range.coldeflist.is_empty() {
        return None;
    }
    let [function] = range.functions.as_slice() else {
        return None;
    };
    let Some(N::List(list)) = function.node.as_ref() else {
        return None;
    };
    let Some(N::FuncCall(call)) = list.items.first().and_then(|n| n.node.as_ref()) else {
        return None;
    };
    let [target] = select.target_list.as_slice() else {
        return None;
    };
    let Some(N::ResTarget(target)) = target.node.as_ref() else {
        return None;
    };
    let Some(N::ColumnRef(column)) = target.val.as_ref().and_then(|v| v.node.as_ref()) else {
        return None;
    };
    let [star] = column.fields.as_slice() else {
        return None;
    };
    if !matches!(star.node, Some(N::AStar(_))) {
        return None;
    }
    // `AS p(x)` names the column x, as Postgres does for a function of one column; more
    // names than that are not this form.
    let alias = match range.alias.as_ref() {
        None => None,
        Some(a) => match a.colnames.as_slice() {
            [] => Some(a.aliasname.clone()),
            [name] => match name.node.as_ref() {
                Some(N::String(name)) => Some(name.sval.clone()),
                _ => return None,
            },
            _ => return None,
        },
    };
    Some((&**call, alias))
}

/// The admin function a call names, if it is `coldwire.<admin function>`.
fn admin_function(call: &FuncCall) -> Option<AdminFunction> {
    let names: Vec<&str> = call
        .funcname
        .iter()
        .filter_map(|n| match n.node.as_ref() {
            Some(N::String(s)) => Some(s.sval.as_str()),
            _ => None,
        })
        .collect();
    match names.as_slice() {
        ["coldwire", name] => AdminFunction::from_name(name),
        _ => None,
    }
}

fn arg_value(function: AdminFunction, node: Option<&Node>) -> Result<ArgValue, AdminError> {
    let computed = || AdminError::ComputedArgument {
        function: function.name(),
    };
    match node.and_then(|n| n.node.as_ref()).ok_or_else(computed)? {
        N::AConst(c) if c.isnull => Ok(ArgValue::Null),
        N::AConst(c) => match c.val.as_ref().ok_or_else(computed)? {
            a_const::Val::Sval(s) => Ok(ArgValue::Literal(s.sval.clone())),
            a_const::Val::Ival(i) => Ok(ArgValue::Literal(i.ival.to_string())),
            a_const::Val::Fval(f) => Ok(ArgValue::Literal(f.fval.clone())),
            a_const::Val::Boolval(b) => Ok(ArgValue::Bool(b.boolval)),
            a_const::Val::Bsval(_) => Err(computed()),
        },
        N::ParamRef(p) if p.number > 0 => Ok(ArgValue::Param(p.number as usize)),
        // `'events'::regclass`, `'{…}'::jsonb`, `$1::regclass`: the function's own parameter
        // type decides how the value is read, so the cast adds nothing.
        N::TypeCast(cast) => arg_value(function, cast.arg.as_deref()),
        _ => Err(computed()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(sql: &str) -> AdminCall {
        recognize(sql)
            .unwrap()
            .unwrap_or_else(|| panic!("{sql} not recognized"))
    }

    #[test]
    fn recognizes_the_documented_forms() {
        let c = call("SELECT coldwire.tier_table('events')");
        assert_eq!(c.function, AdminFunction::TierTable);
        assert_eq!(c.args, vec![Some(ArgValue::Literal("events".into())), None]);
        assert_eq!(c.column, "tier_table");

        let c = call("select COLDWIRE.Flush_Table('s.events'::regclass, wait => true, drain => false) AS job;");
        assert_eq!(c.function, AdminFunction::FlushTable);
        assert_eq!(
            c.args,
            vec![
                Some(ArgValue::Literal("s.events".into())),
                Some(ArgValue::Bool(true)),
                Some(ArgValue::Bool(false))
            ]
        );
        assert_eq!(c.column, "job");

        let c = call("SELECT coldwire.set_policy($1, $2::jsonb)");
        assert_eq!(
            c.args,
            vec![Some(ArgValue::Param(1)), Some(ArgValue::Param(2))]
        );
        assert_eq!(c.param_count, 2);

        let c = call(r#"SELECT coldwire.tier_table('"Mixed Case"', '{"hot_row_limit": 5}')"#);
        assert_eq!(
            c.args[1],
            Some(ArgValue::Literal(r#"{"hot_row_limit": 5}"#.into()))
        );
        // The FROM form psql users write for functions answering columns.
        let c = call("select * from coldwire.flush_table('t', wait => true)");
        assert_eq!(c.function, AdminFunction::FlushTable);
        assert_eq!(
            c.args,
            vec![
                Some(ArgValue::Literal("t".into())),
                Some(ArgValue::Bool(true)),
                None
            ]
        );
        assert_eq!(c.column, "flush_table");
        let c = call("SELECT * FROM coldwire.explain('SELECT 1') AS plan");
        assert_eq!(c.column, "plan");
        let c = call("SELECT * FROM coldwire.explain('SELECT 1') AS p(steps)");
        assert_eq!(c.column, "steps");
        let c = call("SELECT coldwire.flush_table('t', drain => true)");
        assert_eq!(
            c.args,
            vec![
                Some(ArgValue::Literal("t".into())),
                None,
                Some(ArgValue::Bool(true))
            ]
        );
    }

    #[test]
    fn other_sql_is_not_admin() {
        for sql in [
            "SELECT 1",
            "SELECT * FROM coldwire.status",
            "SELECT coldwire.guard(1, '{}')",
            "SELEC coldwire.tier_table('t')",
            "SELECT public.tier_table('t')",
        ] {
            assert_eq!(recognize(sql).unwrap(), None, "{sql}");
        }
    }

    #[test]
    fn misuse_is_an_error_naming_the_problem() {
        assert!(matches!(
            recognize("SELECT coldwire.tier_table('a'); SELECT 1"),
            Err(AdminError::Misuse)
        ));
        assert!(matches!(
            recognize("SELECT coldwire.tier_table(relname) FROM pg_class"),
            Err(AdminError::Misuse)
        ));
        assert!(matches!(
            recognize("SELECT 1, coldwire.flush_table('t')"),
            Err(AdminError::Misuse)
        ));
        for sql in [
            "SELECT state FROM coldwire.flush_table('t')",
            "SELECT * FROM coldwire.flush_table('t') WHERE true",
            "SELECT * FROM coldwire.flush_table('t') WITH ORDINALITY",
            "SELECT * FROM coldwire.flush_table('t'), pg_class",
            "SELECT * FROM ROWS FROM (coldwire.flush_table('t'))",
            "SELECT * FROM coldwire.explain('SELECT 1') AS p(a, b)",
            "SELECT coldwire.flush_table('t') FROM pg_class",
        ] {
            assert!(matches!(recognize(sql), Err(AdminError::Misuse)), "{sql}");
        }
        assert!(matches!(
            recognize("SELECT coldwire.flush_table('t' || 'x')"),
            Err(AdminError::ComputedArgument { .. })
        ));
        assert!(matches!(
            recognize("SELECT coldwire.flush_table('t', hurry => true)"),
            Err(AdminError::UnknownParameter { .. })
        ));
        assert!(matches!(
            recognize("SELECT coldwire.set_policy('t')"),
            Err(AdminError::MissingArgument { name: "policy", .. })
        ));
        assert!(matches!(
            recognize("SELECT coldwire.tier_table('t', NULL, 1)"),
            Err(AdminError::TooManyArguments { .. })
        ));
        assert!(matches!(
            recognize("SELECT coldwire.tier_table(t => 'a', t => 'b')"),
            Err(AdminError::DuplicateArgument { .. })
        ));
        assert!(matches!(
            recognize("SELECT coldwire.flush_table(wait => true, 't')"),
            Err(AdminError::PositionalAfterNamed { .. })
        ));
    }

    #[test]
    fn the_pre_check_ignores_case() {
        assert!(mentions_coldwire(b"select COLDWIRE.tier_table('x')"));
        assert!(!mentions_coldwire(b"select 1"));
        assert!(!mentions_coldwire(b"cold"));
    }
}
