//! The read rewrite (DESIGN §6.2), as a pure function of SQL text: every reference to a
//! tiered table in a read position becomes a derived table with the same alias that
//! unions the heap with the cold rows bound as array parameters. The rewrite is spliced
//! into the client's text at the parser's token locations (never deparsed), so the rest
//! of the statement, and Postgres's positions in it, stay as the client wrote them.
//!
//! The cold rows are bound one array per column the statement may read (`sql::columns`),
//! the key always among them, and the other columns are typed NULLs:
//!
//! ```sql
//! (SELECT <cols> FROM ONLY s.t
//!  UNION ALL
//!  SELECT c.<pk>::<type>, NULL::<type>, c.<read>::<type>, … FROM
//!    (SELECT unnest($k::<pk type>[]) AS <pk>, unnest($k+1::<read type>[]) AS <read>) AS c
//!  WHERE NOT EXISTS (SELECT 1 FROM coldwire.m_<id> m WHERE m.<pk> = c.<pk>)
//!    AND NOT EXISTS (SELECT 1 FROM ONLY s.t h WHERE h.<pk> = c.<pk>)) AS t
//! ```
//!
//! The unnests run in the select list, in step, so Postgres streams the rows instead of
//! storing them first, and a statement that reads three columns of fifty binds three
//! arrays rather than rows of fifty fields. When a column read is itself an array (which
//! `unnest` would flatten), the rows are bound as one array of the table's row type
//! instead: `SELECT <cols> FROM unnest($k::s.t[]) AS c WHERE …`.
//!
//! A key in the mirror has its authoritative state (live or deleted) in the heap, so its
//! cold versions are never injected; the heap probe is defence in depth against doubles.
//! The mirror is readable, through a row-security policy, exactly by roles that may read
//! the table.

use pg_query::protobuf::Token;

use crate::sql::quote::{column_list, pk_equal, quote_ident};

/// A tiered table as the rewrite needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TieredTable {
    pub table_id: i64,
    pub schema: String,
    pub name: String,
    /// Every column, in attnum order.
    pub columns: Vec<String>,
    /// The primary-key columns, in key order.
    pub pk: Vec<String>,
    /// Whether both branches call `coldwire.guard` (DESIGN §6.4) with a parameter of
    /// their own that says which cold state the rows were planned for: it raises 40001 if
    /// the statement's snapshot sees a cold tier the rows do not cover, and 0A000 if the
    /// name as written resolves to another relation in the session (search_path,
    /// temporary tables).
    pub guarded: bool,
    /// Per column: its type as `format_type` writes it, and the OID of the element type
    /// of a column array binding its values (`None`: it can only be bound within the
    /// row type, as array columns).
    pub types: Vec<(String, Option<u32>)>,
}

/// How the cold rows of a reference are bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColdBinding {
    /// One array of the table's row type.
    Rows,
    /// One array per column listed, the others NULL.
    Columns(Vec<BoundColumn>),
}

/// A column bound as an array of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundColumn {
    /// Its position in the table's columns.
    pub index: usize,
    /// The array's element type.
    pub type_oid: u32,
}

impl ColdBinding {
    /// How many parameters the cold rows take.
    pub fn param_count(&self) -> usize {
        match self {
            Self::Rows => 1,
            Self::Columns(columns) => columns.len(),
        }
    }
}

impl TieredTable {
    /// How the cold rows of a reference that may read `read` (names; `None`: every
    /// column) are bound: the columns read and the key, each as an array, when every one
    /// of them can be.
    pub fn binding(&self, read: Option<&std::collections::HashSet<String>>) -> ColdBinding {
        let mut bound = Vec::new();
        for (index, name) in self.columns.iter().enumerate() {
            if read.is_some_and(|r| !r.contains(name)) && !self.pk.contains(name) {
                continue;
            }
            match self.types.get(index) {
                Some((_, Some(type_oid))) => bound.push(BoundColumn {
                    index,
                    type_oid: *type_oid,
                }),
                _ => return ColdBinding::Rows,
            }
        }
        ColdBinding::Columns(bound)
    }

    fn qualified(&self) -> String {
        super::quote::qualified_ident(&self.schema, &self.name)
    }

    /// The derived table that replaces a reference written as `written`, reading cold rows
    /// bound as `binding` from `$param` on and, when guarded, the guard's plan from the
    /// parameter after them.
    fn derived(
        &self,
        param: usize,
        binding: &ColdBinding,
        written: &str,
        qualified: bool,
    ) -> String {
        // The hot branch runs its guard as a one-time filter, in every execution that
        // reads anything. The cold branch asks it only once a cold row reaches it: a qual
        // that reads a column of the row is checked per row, so its InitPlan runs at the
        // first row and never when no cold rows are bound (a hot key's lookup), whereas a
        // qual of the guard alone would be a one-time filter too. A cold row's key is
        // never NULL.
        let (guard, and_guard) = if self.guarded {
            let check = self.guard_check(param + binding.param_count(), written, qualified);
            (
                format!(" WHERE {check}"),
                format!(" AND (c.{} IS NULL OR {check})", quote_ident(&self.pk[0])),
            )
        } else {
            (String::new(), String::new())
        };
        let cols = column_list(self.columns.iter().map(String::as_str), "");
        let (c_cols, source) = match binding {
            ColdBinding::Rows => (
                column_list(self.columns.iter().map(String::as_str), "c."),
                format!("unnest(${param}::{}[])", self.qualified()),
            ),
            ColdBinding::Columns(bound) => {
                let c_cols = self
                    .columns
                    .iter()
                    .enumerate()
                    .map(|(i, name)| match bound.iter().any(|b| b.index == i) {
                        // unnest's result has no typmod: the cast gives the column's
                        // back (varchar(20), numeric(10,2)), as RowDescription and
                        // CREATE TABLE … AS see it; for a type without one it is no-op.
                        true => format!("c.{}::{}", quote_ident(name), self.type_text(i)),
                        false => format!("NULL::{}", self.type_text(i)),
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                let unnests = bound
                    .iter()
                    .enumerate()
                    .map(|(k, b)| {
                        format!(
                            "unnest(${}::{}[]) AS {}",
                            param + k,
                            self.type_text(b.index),
                            quote_ident(&self.columns[b.index])
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                (c_cols, format!("(SELECT {unnests})"))
            }
        };
        format!(
            "(SELECT {cols} FROM ONLY {t}{guard} UNION ALL SELECT {c_cols} FROM {source} AS c \
             WHERE NOT EXISTS (SELECT 1 FROM coldwire.m_{id} m WHERE {m_c}) AND NOT EXISTS (SELECT 1 FROM ONLY {t} h WHERE {h_c}){and_guard})",
            t = self.qualified(),
            id = self.table_id,
            m_c = pk_equal(self.pk.iter().map(String::as_str), "m", "c"),
            h_c = pk_equal(self.pk.iter().map(String::as_str), "h", "c"),
        )
    }

    /// The guard's check of the plan in `$param` (DESIGN §6.4), for a reference written as
    /// `written`: true, or an error. What `coldwire.guard` checks is checked inline first,
    /// by a scalar subquery (an InitPlan, run once per execution) that reads the table's
    /// generation and, for an unqualified name, what the name resolves to now; only when
    /// that gives no true (another generation, a refusal, a name resolving elsewhere, no
    /// catalog row) is `coldwire.guard` called, to raise the error it describes. Calling
    /// the plpgsql function in every execution cost a hot lookup about a third of its
    /// time in Postgres.
    fn guard_check(&self, param: usize, written: &str, qualified: bool) -> String {
        let (name, resolves) = if qualified {
            ("NULL".to_owned(), String::new())
        } else {
            let name = dollar_quoted(written);
            let resolves =
                format!(" AND pg_catalog.to_regclass({name}) = g.relid::pg_catalog.regclass");
            (name, resolves)
        };
        let id = self.table_id;
        format!(
            "COALESCE((SELECT CASE WHEN g.generation = (${param}::jsonb ->> 'planned')::bigint{resolves} THEN true END \
             FROM coldwire.tables g WHERE g.id = {id}), coldwire.guard({id}, ${param}::jsonb, {name}))"
        )
    }

    /// The derived table of the statement's hot form: the heap behind the guard, whose
    /// plan is `$param`.
    fn hot_derived(&self, param: usize, written: &str, qualified: bool) -> String {
        format!(
            "(SELECT {} FROM ONLY {} WHERE {})",
            column_list(self.columns.iter().map(String::as_str), ""),
            self.qualified(),
            self.guard_check(param, written, qualified)
        )
    }

    /// The type of column `index` (`unknown`, which fails the statement, for a column
    /// the catalog did not type).
    fn type_text(&self, index: usize) -> &str {
        self.types
            .get(index)
            .map_or("unknown", |(text, _)| text.as_str())
    }
}

/// One rewritten reference: which table, the parameter number its cold rows go in (the
/// guard's plan follows it when guarded), and where it was (for
/// [`super::predicates::extract`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub table_id: i64,
    pub param: usize,
    /// How its cold rows are bound, from `param` on.
    pub binding: ColdBinding,
    /// The names of the columns the statement may read through it (`sql::columns`);
    /// `None`: every column.
    pub read_names: Option<std::collections::HashSet<String>>,
    pub guarded: bool,
    /// The RangeVar's location in the client's text.
    pub location: i32,
    /// The alias, or the table's name when it has none: what qualifies its columns.
    pub name: String,
}

/// A rewritten statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewritten {
    pub sql: String,
    pub references: Vec<Reference>,
    /// The statement's hot form, for executions in which no reference has a cold row:
    /// every reference reads its heap behind its guard, whose plan is the parameter after
    /// the client's (one per reference, in order), and nothing else. `None` when a
    /// reference is not guarded.
    pub hot_sql: Option<String>,
}

/// Why a statement could not be rewritten.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RewriteError {
    #[error("{0}")]
    Parse(String),
    #[error("{0} is not supported on a tiered table yet")]
    Unsupported(&'static str),
}

/// Rewrites every read reference in `sql` to a table `resolve` knows as tiered (given the
/// schema as written, if any, and the name); cold-row parameters are numbered after the
/// client's `client_params`. `None` when nothing needed rewriting.
///
/// # Errors
/// [`RewriteError::Parse`] for text Postgres would not parse either (it then gets the
/// statement unchanged and reports the error itself); [`RewriteError::Unsupported`] for a
/// tiered table written to or read where the rewrite cannot reach yet.
pub fn rewrite(
    sql: &str,
    client_params: usize,
    resolve: impl Fn(Option<&str>, &str) -> Option<TieredTable>,
) -> Result<Option<Rewritten>, RewriteError> {
    let parse = |sql: &str| pg_query::parse(sql, 0).map_err(|e| RewriteError::Parse(e.to_string()));
    let parsed = parse(sql)?;
    match unqualify_columns(sql, &parsed, &resolve)? {
        Some(unqualified) => {
            let again = parse(&unqualified)?;
            rewrite_parsed(&unqualified, &again, client_params, resolve)
        }
        None => rewrite_parsed(sql, &parsed, client_params, resolve),
    }
}

/// [`rewrite`] of `sql` already parsed as `parsed` (for callers that use the parse tree
/// themselves), whose columns qualified by a tiered table's schema [`unqualify_columns`]
/// has made plain already.
///
/// # Errors
/// As [`rewrite`].
pub fn rewrite_parsed(
    sql: &str,
    parsed: &pg_query::ParseResult,
    client_params: usize,
    resolve: impl Fn(Option<&str>, &str) -> Option<TieredTable>,
) -> Result<Option<Rewritten>, RewriteError> {
    let walked = super::tree::walk(parsed);
    let mut found: Vec<(usize, TieredTable, Option<String>, bool)> = Vec::new();
    for rv in walked.relations {
        if rv.cte {
            continue;
        }
        let Some(table) = resolve(rv.schema.as_deref(), &rv.name) else {
            continue;
        };
        if !rv.read {
            return Err(RewriteError::Unsupported("writing, COPY or DDL"));
        }
        if walked.locking {
            return Err(RewriteError::Unsupported("SELECT … FOR UPDATE/SHARE"));
        }
        let location = usize::try_from(rv.location)
            .map_err(|_| RewriteError::Parse("a table reference without a location".into()))?;
        found.push((location, table, rv.alias, rv.schema.is_some()));
    }
    if found.is_empty() {
        return Ok(None);
    }
    found.sort_by_key(|(location, ..)| *location);
    let tokens =
        super::classify::code_tokens(sql).map_err(|e| RewriteError::Parse(e.to_string()))?;

    let mut out = String::with_capacity(sql.len() + 256 * found.len());
    let mut hot = found
        .iter()
        .all(|(_, table, ..)| table.guarded)
        .then(|| String::with_capacity(sql.len() + 128 * found.len()));
    let mut hot_param = client_params;
    let mut copied = 0;
    let mut references = Vec::new();
    let mut param = client_params;
    for (location, table, alias, qualified) in found {
        let span = name_span(&tokens, location).ok_or(RewriteError::Parse(
            "a table name the scanner does not see".into(),
        ))?;
        let (start, end, written) = (span.start, span.end, &sql[location..span.name_end]);
        if start < copied {
            return Err(RewriteError::Unsupported(
                "a table reference inside another",
            ));
        }
        param += 1;
        let name = alias.clone().unwrap_or_else(|| table.name.clone());
        let read_names = super::columns::read_names(parsed, &[&name, &table.name], &table.columns);
        let binding = table.binding(read_names.as_ref());
        out.push_str(&sql[copied..start]);
        span.push(
            &mut out,
            &table.derived(param, &binding, written, qualified),
        );
        if let Some(hot) = &mut hot {
            hot_param += 1;
            hot.push_str(&sql[copied..start]);
            span.push(hot, &table.hot_derived(hot_param, written, qualified));
        }
        if alias.is_none() {
            // Column references qualified by the table name keep resolving.
            let as_name = format!(" AS {}", quote_ident(&table.name));
            out.push_str(&as_name);
            if let Some(hot) = &mut hot {
                hot.push_str(&as_name);
            }
        }
        copied = end;
        let cold_params = binding.param_count();
        references.push(Reference {
            table_id: table.table_id,
            param,
            binding,
            read_names,
            guarded: table.guarded,
            location: location as i32,
            name,
        });
        param += cold_params - 1;
        if table.guarded {
            param += 1;
        }
    }
    out.push_str(&sql[copied..]);
    if let Some(hot) = &mut hot {
        hot.push_str(&sql[copied..]);
    }
    Ok(Some(Rewritten {
        sql: out,
        references,
        hot_sql: hot,
    }))
}

/// A view over tiered tables, as the expansion needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewDef {
    /// `pg_get_viewdef` under an empty search path: every name schema-qualified.
    pub definition: String,
    /// `security_barrier` views are not expanded (their barrier would be lost).
    pub security_barrier: bool,
    /// The view's name, schema-qualified and quoted: what an unqualified reference must
    /// resolve to in the session for its expansion to run.
    pub qualified: String,
    /// Which view, and which version of it, `definition` is.
    pub identity: ViewIdentity,
}

/// A view as coldwire read it: every expansion checks, once per execution, that the view
/// is still this one, so that a view replaced, renamed or dropped since coldwire last
/// read its definition is refused rather than read as it was.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ViewIdentity {
    pub oid: u32,
    pub schema: String,
    pub name: String,
    /// The `xmin` of its `_RETURN` rule in `pg_rewrite`, as text: `CREATE OR REPLACE
    /// VIEW` writes a new one.
    pub rule_xmin: String,
}

impl ViewIdentity {
    /// A condition, true while the view named as it was has this oid and rule version.
    fn unchanged(&self) -> String {
        format!(
            "EXISTS (SELECT 1 FROM pg_catalog.pg_class c \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             JOIN pg_catalog.pg_rewrite r ON r.ev_class = c.oid AND r.rulename = '_RETURN' \
             WHERE c.oid = {oid}::pg_catalog.oid AND n.nspname = {schema} AND c.relname = {name} \
             AND r.xmin::pg_catalog.text = {xmin})",
            oid = self.oid,
            schema = dollar_quoted(&self.schema),
            name = dollar_quoted(&self.name),
            xmin = dollar_quoted(&self.rule_xmin),
        )
    }
}

/// Splices the definition of every view `resolve` knows (views over tiered tables) in
/// place of its references in `sql`, as a derived table with the reference's alias or
/// the view's name, so that the tiered tables it reads are rewritten like any other
/// reference. `None` when no view was referenced.
///
/// # Errors
/// A security_barrier view ([`RewriteError::Unsupported`]); text the scanner cannot read.
pub fn expand_views(
    sql: &str,
    parsed: &pg_query::ParseResult,
    resolve: impl Fn(Option<&str>, &str) -> Option<ViewDef>,
) -> Result<Option<String>, RewriteError> {
    let walked = super::tree::walk(parsed);
    let mut found = Vec::new();
    // As in `rewrite_parsed`: `reports.recent.id` names the expansion `AS recent`.
    let mut unqualify = Vec::new();
    let mut ours = Vec::new();
    for rv in walked.relations.iter().filter(|r| r.read) {
        if rv.cte {
            continue;
        }
        if let Some(view) = resolve(rv.schema.as_deref(), &rv.name) {
            if view.security_barrier {
                return Err(RewriteError::Unsupported(
                    "a security_barrier view over a tiered table",
                ));
            }
            unqualify.extend(naming(
                &walked.schema_qualified_columns,
                rv,
                &view.identity.schema,
            ));
            if rv.alias.is_none() {
                ours.push(rv.name.clone());
            }
            found.push((
                rv.location as usize,
                view,
                rv.alias.is_some(),
                rv.name.clone(),
                rv.schema.is_none(),
            ));
        }
    }
    if found.is_empty() {
        return Ok(None);
    }
    let tokens =
        super::classify::code_tokens(sql).map_err(|e| RewriteError::Parse(e.to_string()))?;
    let strips = schema_spans(&unqualify, (&walked.range_names, &ours), &tokens)?;
    let mut out = String::with_capacity(sql.len() + 512);
    let mut copied = 0;
    for (location, view, aliased, name, unqualified) in found {
        let span = name_span(&tokens, location).ok_or(RewriteError::Parse(
            "a view name the scanner does not see".into(),
        ))?;
        if span.start < copied {
            return Err(RewriteError::Unsupported("a view reference inside another"));
        }
        push_stripped(&mut out, sql, copied..span.start, &strips);
        let definition = view.definition.trim().trim_end_matches(';');
        // The view read when coldwire last read the catalog, and as Postgres would read it
        // in the session; refused otherwise, once per execution (a one-time filter).
        let changed = refusal_expression(
            "40001",
            &format!(
                "coldwire: the view {} over tiered tables was replaced, renamed or dropped since coldwire read it",
                view.qualified
            ),
            Some("Retry the statement: coldwire reads views again within a second."),
        );
        let elsewhere = if unqualified {
            // As the guard checks a tiered table's name: the name may resolve to another
            // relation in the session (search_path, a temporary table), which Postgres
            // would read.
            let refusal = refusal_expression(
                "0A000",
                &format!(
                    "coldwire: {name} does not name the view {} over tiered tables in this session",
                    view.qualified
                ),
                Some("search_path or a temporary table makes the name resolve elsewhere; schema-qualify the view name."),
            );
            format!(
                " WHEN pg_catalog.to_regclass({written}) IS DISTINCT FROM {oid}::pg_catalog.oid::pg_catalog.regclass THEN {refusal}",
                written = dollar_quoted(&quote_ident(&name)),
                oid = view.identity.oid,
            )
        } else {
            String::new()
        };
        let expansion = format!(
            "(SELECT * FROM ({definition}) _cw_view WHERE CASE WHEN NOT {unchanged} THEN {changed}{elsewhere} ELSE true END)",
            unchanged = view.identity.unchanged(),
        );
        span.push(&mut out, &expansion);
        if !aliased {
            out.push_str(" AS ");
            out.push_str(&quote_ident(&name));
        }
        copied = span.end;
    }
    push_stripped(&mut out, sql, copied..sql.len(), &strips);
    Ok(Some(out))
}

/// `sql` (parsed as `parsed`) with the schema left out of every column reference that
/// names a table `resolve` knows as tiered by its schema (`public.events.id`, as Prisma,
/// PostgREST and Hasura write every column), where the table is read without an alias:
/// its rewrite takes the table's name alone, and the planners read `events.id`. `None`
/// when there is none.
///
/// # Errors
/// Text the scanner cannot read.
pub fn unqualify_columns(
    sql: &str,
    parsed: &pg_query::ParseResult,
    resolve: impl Fn(Option<&str>, &str) -> Option<TieredTable>,
) -> Result<Option<String>, RewriteError> {
    let walked = super::tree::walk(parsed);
    if walked.schema_qualified_columns.is_empty() {
        return Ok(None);
    }
    let mut unqualify = Vec::new();
    let mut ours = Vec::new();
    for rv in walked.relations.iter().filter(|r| !r.cte) {
        if let Some(table) = resolve(rv.schema.as_deref(), &rv.name) {
            unqualify.extend(naming(&walked.schema_qualified_columns, rv, &table.schema));
            if rv.alias.is_none() && rv.read {
                ours.push(rv.name.clone());
            }
        }
    }
    if unqualify.is_empty() {
        return Ok(None);
    }
    let tokens =
        super::classify::code_tokens(sql).map_err(|e| RewriteError::Parse(e.to_string()))?;
    let strips = schema_spans(&unqualify, (&walked.range_names, &ours), &tokens)?;
    if strips.is_empty() {
        return Ok(None);
    }
    let mut out = String::with_capacity(sql.len());
    push_stripped(&mut out, sql, 0..sql.len(), &strips);
    Ok(Some(out))
}

/// The column references of `columns` that name `rv` (in schema `schema`) by schema and
/// name: none when it has an alias, which is then its only name.
fn naming<'c>(
    columns: &'c [super::tree::QualifiedColumn],
    rv: &super::tree::Relation,
    schema: &str,
) -> impl Iterator<Item = &'c super::tree::QualifiedColumn> {
    let (name, written, aliased) = (rv.name.clone(), rv.schema.clone(), rv.alias.is_some());
    let schema = schema.to_owned();
    columns.iter().filter(move |c| {
        !aliased
            && c.table == name
            && (written.as_deref() == Some(c.schema.as_str()) || c.schema == schema)
    })
}

/// Where the schema (and database) names of the column references `columns` stand in
/// the text, up to their table's name: the spans to leave out, in order. `ranges`: every
/// name a range of the statement goes by ([`super::tree::Walk::range_names`]), and those
/// of the references the columns name (unaliased, once per reference). A column whose
/// table name another range goes by too (a table of another schema, an alias, a CTE) is
/// left as it is: `events.id` would mean the nearest of them, which may not be the one
/// `public.events.id` means (Postgres then says that name is not in scope, 42P01).
fn schema_spans(
    columns: &[&super::tree::QualifiedColumn],
    (names, ours): (&[String], &[String]),
    tokens: &[pg_query::protobuf::ScanToken],
) -> Result<Vec<(usize, usize)>, RewriteError> {
    let count = |list: &[String], name: &str| list.iter().filter(|n| *n == name).count();
    let mut spans = columns
        .iter()
        .filter(|c| count(names, &c.table) <= count(ours, &c.table))
        .map(|c| {
            let at = tokens.iter().position(|t| t.start == c.location)?;
            let table = tokens.get(at + 2 * c.prefix)?;
            Some((
                usize::try_from(tokens[at].start).ok()?,
                usize::try_from(table.start).ok()?,
            ))
        })
        .collect::<Option<Vec<_>>>()
        .ok_or(RewriteError::Parse(
            "a column name the scanner does not see".into(),
        ))?;
    spans.sort_unstable();
    spans.dedup();
    Ok(spans)
}

/// `sql[range]` without the spans `strips` (sorted) cover.
fn push_stripped(
    out: &mut String,
    sql: &str,
    range: std::ops::Range<usize>,
    strips: &[(usize, usize)],
) {
    let mut at = range.start;
    for &(start, end) in strips {
        if start >= at && end <= range.end {
            out.push_str(&sql[at..start]);
            at = end;
        }
    }
    out.push_str(&sql[at..range.end]);
}

/// A statement that fails with this error when executed (the guard raises it), for a
/// client statement coldwire refuses where it can only answer in Postgres's place. The
/// text is coldwire's own, never data.
pub fn refusal_sql(code: &str, message: &str, hint: Option<&str>) -> String {
    format!("SELECT {}", refusal_expression(code, message, hint))
}

/// A `DO` block that raises the error `code`, `message`, `detail`, `hint` (none of
/// coldwire's functions needed: the database may have no catalog yet), in ASCII, so that
/// a session of any client_encoding reads the same text.
pub fn raise_sql(code: &str, message: &str, detail: Option<&str>, hint: Option<&str>) -> String {
    use super::quote::ascii_literal as sql_literal;
    let mut fields = format!(
        "ERRCODE = {}, MESSAGE = {}",
        sql_literal(code),
        sql_literal(message)
    );
    for (field, value) in [("DETAIL", detail), ("HINT", hint)] {
        if let Some(value) = value {
            fields.push_str(&format!(", {field} = {}", sql_literal(value)));
        }
    }
    format!(
        "DO {}",
        dollar_quoted(&format!("BEGIN RAISE EXCEPTION USING {fields}; END"))
    )
}

/// The expression [`refusal_sql`] selects: it raises the error when evaluated.
pub fn refusal_expression(code: &str, message: &str, hint: Option<&str>) -> String {
    let mut refusal = serde_json::json!({"code": code, "message": message});
    if let Some(hint) = hint {
        refusal["hint"] = hint.into();
    }
    let plan = serde_json::json!({ "refusal": refusal }).to_string();
    format!("coldwire.guard(0, {}::jsonb, NULL)", dollar_quoted(&plan))
}

/// `text` as a dollar-quoted literal whose tag does not occur in it.
pub(crate) fn dollar_quoted(text: &str) -> String {
    let mut tag = String::from("cw");
    while text.contains(&format!("${tag}$")) {
        tag.push('x');
    }
    format!("${tag}${text}${tag}$")
}

/// Where a read reference stands in the statement's text.
struct Span {
    start: usize,
    end: usize,
    /// Where the name itself ends (before a `*` that follows it).
    name_end: usize,
    /// The reference is the `TABLE name` command (the span starts at `TABLE`): its
    /// replacement reads `SELECT * FROM (…)`, since `TABLE` takes a name only.
    command: bool,
}

impl Span {
    /// What replaces the span: `derived` (a parenthesized query), after `SELECT * FROM`
    /// when the span is a `TABLE` command.
    fn push(&self, out: &mut String, derived: &str) {
        if self.command {
            out.push_str("SELECT * FROM ");
        }
        out.push_str(derived);
    }
}

/// The span of the relation name starting at `location` (`[TABLE] [ONLY]
/// name[.name[.name]] [*]`) among `code`, the statement's tokens without its comments
/// ([`super::classify::code_tokens`]), so comments anywhere in it are included.
fn name_span(code: &[pg_query::protobuf::ScanToken], location: usize) -> Option<Span> {
    let at = code.iter().position(|t| t.start as usize == location)?;
    let is = |i: usize, token: Token| code.get(i).is_some_and(|t| t.token == token as i32);
    let mut first = at;
    // `ONLY (name)`, which Postgres also accepts: the parentheses go with the name.
    let parenthesized = first > 1 && is(first - 1, Token::Ascii40) && is(first - 2, Token::Only);
    if parenthesized {
        first -= 2;
    } else if first > 0 && is(first - 1, Token::Only) {
        first -= 1;
    }
    // A read reference right after the keyword TABLE is the `TABLE name` command (the
    // other statements that write TABLE before a name do not read it).
    let command = first > 0 && is(first - 1, Token::Table);
    if command {
        first -= 1;
    }
    let mut last = at;
    while last + 2 < code.len() && is(last + 1, Token::Ascii46) {
        last += 2;
    }
    let name_end = code[last].end as usize;
    // `name *`: the table and its descendants (a tiered table has none).
    if is(last + 1, Token::Ascii42) {
        last += 1;
    }
    if parenthesized {
        if !is(last + 1, Token::Ascii41) {
            return None;
        }
        last += 1;
    }
    Some(Span {
        start: code[first].start as usize,
        end: code[last].end as usize,
        name_end,
        command,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events() -> TieredTable {
        TieredTable {
            table_id: 7,
            schema: "public".into(),
            name: "events".into(),
            columns: vec!["id".into(), "kind".into()],
            pk: vec!["id".into()],
            guarded: false,
            types: vec![("bigint".into(), Some(20)), ("text".into(), Some(25))],
        }
    }

    fn both() -> ColdBinding {
        ColdBinding::Columns(vec![
            BoundColumn {
                index: 0,
                type_oid: 20,
            },
            BoundColumn {
                index: 1,
                type_oid: 25,
            },
        ])
    }

    fn resolve(schema: Option<&str>, name: &str) -> Option<TieredTable> {
        (name == "events" && schema.is_none_or(|s| s == "public")).then(events)
    }

    fn derived(param: usize) -> String {
        events().derived(param, &both(), "events", false)
    }

    #[test]
    fn untouched_statements_are_not_rewritten() {
        assert_eq!(
            rewrite("SELECT * FROM other WHERE id = 1", 0, resolve).unwrap(),
            None
        );
        assert_eq!(
            rewrite("WITH events AS (SELECT 1) SELECT * FROM events", 0, resolve).unwrap(),
            None
        );
    }

    #[test]
    fn a_reference_becomes_a_derived_table_with_the_same_name_or_alias() {
        let r = rewrite("SELECT kind FROM events WHERE id = $1", 1, resolve)
            .unwrap()
            .unwrap();
        assert_eq!(
            r.sql,
            format!(
                "SELECT kind FROM {} AS \"events\" WHERE id = $1",
                derived(2)
            )
        );
        assert_eq!(
            r.references,
            vec![Reference {
                table_id: 7,
                param: 2,
                binding: both(),
                read_names: Some(["kind", "id", "="].map(str::to_owned).into()),
                guarded: false,
                location: 17,
                name: "events".into()
            }]
        );

        let r = rewrite(
            "select e.kind from ONLY public.events e join events using (id)",
            0,
            resolve,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            r.sql,
            format!(
                "select e.kind from {} e join {} AS \"events\" using (id)",
                derived(1),
                derived(3)
            )
        );
    }

    #[test]
    fn the_whole_reference_is_replaced_whatever_surrounds_its_name() {
        for (sql, expected) in [
            (
                "TABLE events ORDER BY id",
                format!("SELECT * FROM {} AS \"events\" ORDER BY id", derived(1)),
            ),
            (
                "table /* c */ only public.events",
                format!("SELECT * FROM {} AS \"events\"", derived(1)),
            ),
            (
                "SELECT * FROM events * WHERE id > 1",
                format!("SELECT * FROM {} AS \"events\" WHERE id > 1", derived(1)),
            ),
            (
                "SELECT * FROM public./* c */events e",
                format!("SELECT * FROM {} e", derived(1)),
            ),
        ] {
            let r = rewrite(sql, 0, resolve).unwrap().unwrap();
            assert_eq!(r.sql, expected, "{sql}");
            assert!(pg_query::parse(&r.sql, 0).is_ok(), "{sql}: {}", r.sql);
        }
    }

    #[test]
    fn cold_rows_bind_one_array_per_column_read_or_the_row_type_for_array_columns() {
        let wide = |tags: Option<u32>| TieredTable {
            columns: vec!["id".into(), "kind".into(), "tags".into()],
            types: vec![
                ("bigint".into(), Some(20)),
                ("character varying(20)".into(), Some(1043)),
                ("integer[]".into(), tags),
            ],
            ..events()
        };
        let resolve_wide =
            |tags: Option<u32>| move |s: Option<&str>, n: &str| resolve(s, n).map(|_| wide(tags));
        // The key and the column read, each an array; the unread column a typed NULL.
        let r = rewrite("SELECT kind FROM events", 0, resolve_wide(None))
            .unwrap()
            .unwrap();
        assert!(
            r.sql.contains(
                "SELECT c.\"id\"::bigint, c.\"kind\"::character varying(20), NULL::integer[] FROM (SELECT unnest($1::bigint[]) AS \"id\", unnest($2::character varying(20)[]) AS \"kind\") AS c"
            ),
            "{}",
            r.sql
        );
        assert_eq!(r.references[0].binding.param_count(), 2);
        // An array column read: the rows as the row type.
        let r = rewrite("SELECT tags FROM events", 0, resolve_wide(None))
            .unwrap()
            .unwrap();
        assert_eq!(r.references[0].binding, ColdBinding::Rows);
        assert!(
            r.sql
                .contains("FROM unnest($1::\"public\".\"events\"[]) AS c"),
            "{}",
            r.sql
        );
        // Every column of a table whose columns all bind as arrays.
        let r = rewrite("SELECT * FROM events x", 0, resolve_wide(Some(23)))
            .unwrap()
            .unwrap();
        assert_eq!(r.references[0].binding.param_count(), 3);
        assert!(pg_query::parse(&r.sql, 0).is_ok(), "{}", r.sql);
    }

    #[test]
    fn subqueries_ctes_and_set_operations_are_reached() {
        let sql = "WITH recent AS (SELECT * FROM events WHERE id > 10) \
                   SELECT id FROM recent UNION SELECT id FROM (SELECT id FROM events) s WHERE EXISTS (SELECT 1 FROM events x)";
        let r = rewrite(sql, 0, resolve).unwrap().unwrap();
        assert_eq!(r.references.len(), 3);
        assert_eq!(r.sql.matches("unnest($").count(), 6, "two columns each");
        assert!(
            r.sql.contains("SELECT id FROM recent UNION"),
            "the CTE's own name is left alone"
        );
        assert!(pg_query::parse(&r.sql, 0).is_ok(), "{}", r.sql);
    }

    #[test]
    fn the_guard_takes_a_parameter_and_the_name_as_written_when_unqualified() {
        let guarded = |schema: Option<&str>, name: &str| {
            resolve(schema, name).map(|t| TieredTable { guarded: true, ..t })
        };
        let r = rewrite("SELECT * FROM events WHERE id = $1", 1, guarded)
            .unwrap()
            .unwrap();
        let check = "COALESCE((SELECT CASE WHEN g.generation = ($4::jsonb ->> 'planned')::bigint \
                     AND pg_catalog.to_regclass($cw$events$cw$) = g.relid::pg_catalog.regclass THEN true END \
                     FROM coldwire.tables g WHERE g.id = 7), coldwire.guard(7, $4::jsonb, $cw$events$cw$))";
        assert_eq!(r.sql.matches(check).count(), 2, "{}", r.sql);
        assert!(r.sql.contains("unnest($2::"), "{}", r.sql);
        // The name without the `*` that may follow it.
        let star = rewrite("SELECT * FROM events * WHERE id = $1", 1, guarded)
            .unwrap()
            .unwrap();
        assert_eq!(star.sql.matches(check).count(), 2, "{}", star.sql);
        let r = rewrite(
            "SELECT * FROM public.events a JOIN events b USING (id)",
            0,
            guarded,
        )
        .unwrap()
        .unwrap();
        let check = "COALESCE((SELECT CASE WHEN g.generation = ($3::jsonb ->> 'planned')::bigint THEN true END \
                     FROM coldwire.tables g WHERE g.id = 7), coldwire.guard(7, $3::jsonb, NULL))";
        assert_eq!(r.sql.matches(check).count(), 2, "{}", r.sql);
        assert_eq!(
            r.references.iter().map(|r| r.param).collect::<Vec<_>>(),
            [1, 4]
        );
        assert!(r.sql.contains("guard(7, $6::jsonb, $cw$events$cw$)"));
        assert_eq!(dollar_quoted("a$cw$b"), "$cwx$a$cw$b$cwx$");
    }

    #[test]
    fn the_hot_form_reads_each_heap_behind_its_guard_with_one_parameter_per_reference() {
        let guarded = |schema: Option<&str>, name: &str| {
            resolve(schema, name).map(|t| TieredTable { guarded: true, ..t })
        };
        let r = rewrite(
            "SELECT a.kind FROM public.events a JOIN events USING (id) WHERE a.id = $1 /* x */",
            1,
            guarded,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            r.hot_sql.as_deref(),
            Some(
                "SELECT a.kind FROM (SELECT \"id\", \"kind\" FROM ONLY \"public\".\"events\" \
                 WHERE COALESCE((SELECT CASE WHEN g.generation = ($2::jsonb ->> 'planned')::bigint THEN true END \
                 FROM coldwire.tables g WHERE g.id = 7), coldwire.guard(7, $2::jsonb, NULL))) a JOIN \
                 (SELECT \"id\", \"kind\" FROM ONLY \"public\".\"events\" \
                 WHERE COALESCE((SELECT CASE WHEN g.generation = ($3::jsonb ->> 'planned')::bigint \
                 AND pg_catalog.to_regclass($cw$events$cw$) = g.relid::pg_catalog.regclass THEN true END \
                 FROM coldwire.tables g WHERE g.id = 7), coldwire.guard(7, $3::jsonb, $cw$events$cw$))) \
                 AS \"events\" USING (id) WHERE a.id = $1 /* x */"
            )
        );
        // Unguarded references have no hot form.
        let r = rewrite("SELECT * FROM events WHERE id = $1", 1, resolve)
            .unwrap()
            .unwrap();
        assert_eq!(r.hot_sql, None);
    }

    #[test]
    fn columns_qualified_by_schema_lose_it_where_the_table_is_replaced() {
        let r = rewrite(
            "SELECT \"public\".\"events\".\"id\", public.events.*, x.public.events.kind, e2.id \
             FROM \"public\".\"events\", events e2 WHERE public.events.id = $1",
            1,
            resolve,
        )
        .unwrap()
        .unwrap();
        assert!(pg_query::parse(&r.sql, 0).is_ok(), "{}", r.sql);
        assert!(
            r.sql
                .starts_with("SELECT \"events\".\"id\", events.*, events.kind, e2.id FROM (")
                && r.sql.ends_with(" WHERE events.id = $1")
                && !r.sql.contains("public.events."),
            "{}",
            r.sql
        );
        // Where another range goes by the table's name, `events.id` could mean that one:
        // left as written (Postgres then says 42P01), never bound elsewhere.
        for sql in [
            "SELECT * FROM public.events WHERE NOT EXISTS (SELECT 1 FROM archive.events WHERE archive.events.id = public.events.id)",
            "SELECT * FROM public.events WHERE NOT EXISTS (SELECT 1 FROM notes events WHERE events.id = public.events.id)",
            "WITH events AS (SELECT 1 AS id) SELECT * FROM public.events WHERE public.events.id IN (SELECT id FROM events)",
        ] {
            let r = rewrite(sql, 0, resolve).unwrap().unwrap();
            assert!(r.sql.contains("= public.events.id") || r.sql.contains("WHERE public.events.id IN"), "{sql}: {}", r.sql);
            let parsed = pg_query::parse(sql, 0).unwrap();
            assert_eq!(unqualify_columns(sql, &parsed, resolve).unwrap(), None, "{sql}");
        }
        // Under an alias the name is the alias's: a schema-qualified column would be an
        // error in Postgres too, and stays as written.
        let r = rewrite(
            "SELECT public.other.id FROM public.events e, other",
            0,
            resolve,
        )
        .unwrap()
        .unwrap();
        assert!(
            r.sql.starts_with("SELECT public.other.id FROM ("),
            "{}",
            r.sql
        );
    }

    #[test]
    fn only_with_parentheses_is_replaced_whole() {
        for sql in [
            "SELECT count(*) FROM ONLY (events) WHERE id > 5",
            "SELECT count(*) FROM ONLY (public.events) e",
            "SELECT count(*) FROM ONLY events",
        ] {
            let r = rewrite(sql, 0, resolve).unwrap().unwrap();
            assert!(
                pg_query::parse(&r.sql, 0).is_ok() && !r.sql.contains("FROM ONLY ("),
                "{sql}: {}",
                r.sql
            );
        }
    }

    #[test]
    fn references_outside_the_clauses_pg_query_walks_are_rewritten_too() {
        let r = rewrite(
            "SELECT 1 FROM other LIMIT (SELECT count(*) FROM events)",
            0,
            resolve,
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.references.len(), 1);
        assert!(pg_query::parse(&r.sql, 0).is_ok(), "{}", r.sql);
    }

    #[test]
    fn views_expand_to_their_definition_under_the_reference_name() {
        let view = |schema: Option<&str>, name: &str| {
            (name == "recent" && schema.is_none_or(|s| s == "app")).then(|| ViewDef {
                definition: " SELECT e.id FROM public.events e WHERE (e.id > 5);".into(),
                security_barrier: false,
                qualified: "\"app\".\"recent\"".into(),
                identity: ViewIdentity {
                    oid: 16400,
                    schema: "app".into(),
                    name: "recent".into(),
                    rule_xmin: "742".into(),
                },
            })
        };
        let sql = "SELECT r.id FROM app.recent r JOIN recent USING (id)";
        let expanded = expand_views(sql, &pg_query::parse(sql, 0).unwrap(), view)
            .unwrap()
            .unwrap();
        // The unqualified reference is checked to name the view in the session.
        let unqualified = " WHEN pg_catalog.to_regclass($cw$\"recent\"$cw$) IS DISTINCT FROM 16400::pg_catalog.oid::pg_catalog.regclass THEN coldwire.guard(0, ";
        // Every reference is checked to read the view as coldwire read it.
        let unchanged = "SELECT * FROM (SELECT e.id FROM public.events e WHERE (e.id > 5)) _cw_view WHERE CASE WHEN NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c";
        let version = "WHERE c.oid = 16400::pg_catalog.oid AND n.nspname = $cw$app$cw$ AND c.relname = $cw$recent$cw$ AND r.xmin::pg_catalog.text = $cw$742$cw$)";
        assert!(
            expanded.starts_with(&format!("SELECT r.id FROM ({unchanged}"))
                && expanded.matches(unchanged).count() == 2
                && expanded.matches(version).count() == 2
                && expanded.matches(unqualified).count() == 1
                && expanded.contains(" ELSE true END) r JOIN (")
                && expanded.ends_with(" ELSE true END) AS \"recent\" USING (id)"),
            "{expanded}"
        );
        assert!(pg_query::parse(&expanded, 0).is_ok(), "{expanded}");
        // A column qualified by the view's schema names the expansion by its name.
        let sql = "SELECT app.recent.id FROM app.recent";
        let expanded = expand_views(sql, &pg_query::parse(sql, 0).unwrap(), view)
            .unwrap()
            .unwrap();
        assert!(
            expanded.starts_with("SELECT recent.id FROM (") && expanded.ends_with(" AS \"recent\""),
            "{expanded}"
        );
        let barrier = |_: Option<&str>, _: &str| {
            Some(ViewDef {
                definition: "SELECT 1".into(),
                security_barrier: true,
                qualified: "\"public\".\"recent\"".into(),
                identity: ViewIdentity::default(),
            })
        };
        let sql = "SELECT * FROM recent";
        assert!(expand_views(sql, &pg_query::parse(sql, 0).unwrap(), barrier).is_err());
    }

    #[test]
    fn writes_are_refused_until_supported_and_bad_sql_is_left_to_postgres() {
        assert!(matches!(
            rewrite("DELETE FROM events WHERE id = 1", 0, resolve),
            Err(RewriteError::Unsupported(_))
        ));
        assert!(matches!(
            rewrite("SELECT * FROM events FOR UPDATE", 0, resolve),
            Err(RewriteError::Unsupported(_))
        ));
        assert!(matches!(
            rewrite("INSERT INTO other SELECT * FROM events", 0, resolve),
            Ok(Some(_))
        ));
        assert!(matches!(
            rewrite("SELEC 1", 0, resolve),
            Err(RewriteError::Parse(_))
        ));
    }
}
