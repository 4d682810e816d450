//! The registry: which tables are tiered and which views read them, as sessions see them
//! (DESIGN §6.1), read from the catalog in one place.

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::Client;

use super::segments::Compared;
use crate::sql::rewrite::{TieredTable, ViewDef, ViewIdentity};
use crate::values::ColdType;

mod callers;

/// How long the list of tiered tables is trusted before it is read again. A proxy that
/// has not seen a table as tiered relays its reads unchanged, so the first flush of a
/// table waits until every proxy's list is newer than the table
/// (`FIRST_FINALIZE_DELAY` of the flush's finalize, a multiple of this).
pub const REGISTRY_TTL: Duration = Duration::from_secs(1);
/// The channel finalize and TRUNCATE notify.
pub const CATALOG_CHANNEL: &str = "coldwire_catalog";
/// Views and materialized views that read tiered tables, directly or through other views
/// (the rewrite rules that depend on them, transitively).
const VIEWS: &str = "WITH RECURSIVE dep(view) AS ( \
       SELECT r.ev_class FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid \
       WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_class'::regclass \
         AND d.refobjid IN (SELECT relid FROM coldwire.tables WHERE state = 'active') AND r.ev_class <> d.refobjid \
     UNION \
       SELECT r.ev_class FROM dep JOIN pg_depend d ON d.refobjid = dep.view \
         AND d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_class'::regclass \
       JOIN pg_rewrite r ON r.oid = d.objid WHERE r.ev_class <> dep.view) \
     SELECT n.nspname::text, c.relname::text, c.relkind::text, pg_get_viewdef(c.oid), \
            coalesce(c.reloptions, '{}') @> ARRAY['security_barrier=true'], c.oid, \
            (SELECT r.xmin::text FROM pg_rewrite r WHERE r.ev_class = c.oid AND r.rulename = '_RETURN') \
     FROM (SELECT DISTINCT view FROM dep) v JOIN pg_class c ON c.oid = v.view \
     JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('v', 'm') ORDER BY 1, 2";

/// A cheap digest of the catalog rows the search for functions and views that read
/// tiered tables depends on: it moves when a function, rewrite rule, view, table (a
/// rename; temporary tables are left out, though their defaults and triggers move it),
/// schema, trigger, default, CHECK or foreign-key constraint, or inheritance (a
/// partition) is created, replaced, altered or dropped (a new `xmin`, or one row fewer). Objects of the
/// database's own (oids from 16384, `FirstNormalObjectId`) only, read by index, but every
/// schema (`public` is older).
const CATALOG_PROBE: &str = "SELECT concat_ws('/', \
       (SELECT count(*) || ':' || coalesce(sum(xmin::text::bigint), 0) FROM pg_proc WHERE oid >= 16384), \
       (SELECT count(*) || ':' || coalesce(sum(xmin::text::bigint), 0) FROM pg_rewrite WHERE oid >= 16384), \
       (SELECT count(*) || ':' || coalesce(sum(xmin::text::bigint), 0) FROM pg_class \
        WHERE oid >= 16384 AND relkind IN ('r', 'p', 'v') AND relpersistence <> 't'), \
       (SELECT count(*) || ':' || coalesce(sum(xmin::text::bigint), 0) FROM pg_namespace), \
       (SELECT count(*) || ':' || coalesce(sum(xmin::text::bigint), 0) FROM pg_trigger WHERE oid >= 16384), \
       (SELECT count(*) || ':' || coalesce(sum(xmin::text::bigint), 0) FROM pg_attrdef WHERE oid >= 16384), \
       (SELECT count(*) || ':' || coalesce(sum(xmin::text::bigint), 0) FROM pg_constraint WHERE oid >= 16384 AND contype IN ('c', 'f')), \
       (SELECT count(*) || ':' || coalesce(sum(xmin::text::bigint), 0) FROM pg_inherits))";

/// The setting with which a function declares that it reads the hot rows of tiered
/// tables only, on purpose (`ALTER FUNCTION … SET coldwire.hot_only_reads = on`).
pub const HOT_ONLY_READS_SETTING: &str = "coldwire.hot_only_reads";

/// A tiered table as sessions see it.
#[derive(Debug, Clone)]
pub struct Tiered {
    pub table: TieredTable,
    /// `pg_class.reltype`: the row type cold rows are bound as.
    pub row_type: u32,
    /// Per column of `table.columns`: its type as `format_type` writes it, and how it is
    /// stored cold (`None`: a type this build cannot read back).
    pub types: Vec<(String, Option<ColdType>)>,
    /// Per column: Postgres orders its values as their bytes (text under the C collation,
    /// `catalog::segments::compared_columns`).
    pub byte_ordered: Vec<bool>,
    /// `types` as the aggregate rewrite may use them: a column under a nondeterministic
    /// collation (values of other bytes may be equal) has none, so that no condition on
    /// it, nor aggregate or grouping of it, is computed cold-side.
    pub aggregate_types: Vec<(String, Option<ColdType>)>,
    /// What the table gained since it was tiered that coldwire cannot serve
    /// ([`super::inspect::unservable_sql`]): while any is there, coldwire refuses to read,
    /// write or flush the table.
    pub unservable: Vec<String>,
}

/// A view or materialized view that reads a tiered table (directly or through views).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TieredView {
    pub schema: String,
    pub name: String,
    pub materialized: bool,
    pub view: ViewDef,
}

/// A function, procedure or view that reads a tiered table server-side, where coldwire
/// cannot merge in its cold rows (`callers`): its body or query names one, or calls one
/// that does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadingFunction {
    pub schema: String,
    pub name: String,
    pub kind: CallerKind,
    /// The tiered table or view over one it reads in the end, as the registry names it.
    pub reads: String,
    /// `reads` is a view over tiered tables.
    pub reads_view: bool,
    /// The function or view (qualified, for messages) through which it reads `reads`;
    /// `None` when its own body names `reads`.
    pub through: Option<String>,
    /// Its arguments' types, as `pg_get_function_identity_arguments` writes them.
    pub arguments: String,
    /// pg_catalog has a function of this name, which an unqualified call may mean (it
    /// comes first in every search_path that does not place it later).
    pub shadowed: bool,
    /// How many arguments a call of a function or procedure passes (`None` for views and
    /// tables).
    pub arity: Option<Arity>,
    /// What calls pg_catalog's functions of the same name take, one per function.
    pub catalog_arities: Vec<Arity>,
    /// For a table a tiered table's foreign key references: the referenced columns (an
    /// UPDATE that sets none of them checks nothing). Empty otherwise.
    pub key_columns: Vec<String>,
}

/// The numbers of arguments a call of a function may pass: all but those with defaults,
/// up to all of them, or any number from there for a VARIADIC one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arity {
    pub min: usize,
    /// `None`: VARIADIC.
    pub max: Option<usize>,
}

impl Arity {
    pub fn admits(self, args: usize) -> bool {
        args >= self.min && self.max.is_none_or(|max| args <= max)
    }
}

/// What a [`ReadingFunction`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallerKind {
    Function,
    Procedure,
    /// A view whose query calls one of them (reading it runs the call).
    View,
    /// A materialized view whose query calls one of them (refreshing it runs the call).
    MaterializedView,
    /// A plain table whose writes run one of them (a trigger, a default, a CHECK):
    /// `writes` has the bits of the writes that do (`pg_trigger.tgtype`'s: 4 INSERT,
    /// 8 DELETE, 16 UPDATE).
    Table {
        writes: u8,
    },
}

impl ReadingFunction {
    /// `schema.name`, quoted where needed.
    pub fn qualified(&self) -> String {
        format!(
            "{}.{}",
            crate::sql::quote::display_ident(&self.schema),
            crate::sql::quote::display_ident(&self.name)
        )
    }
}

/// The list of tiered tables, with a version that moves whenever its content does.
#[derive(Debug, Default)]
pub struct Registry {
    pub tables: Vec<Tiered>,
    pub views: Vec<TieredView>,
    /// Functions and procedures that read tiered tables server-side.
    pub functions: Arc<[ReadingFunction]>,
    /// The names of tables, views and such functions, as statements may spell them
    /// ([`written_forms`]), for the cheap test of every statement.
    pub names: Vec<String>,
    /// The names that tiered tables, or views over them, have in more than one schema
    /// ([`ambiguous_names`]).
    pub ambiguous: Vec<String>,
    pub version: u64,
    /// The database's secret (`coldwire.secret`, catalog v13), with which coldwire signs
    /// the rows it brings back (`catalog::capture::rehydration_mac`).
    pub secret: Option<SigningKey>,
}

/// The texts the cheap name test ([`Registry::names`]) looks for in a statement that may
/// name the table, view or function `name`: the name as Postgres stores it (the test
/// ignores ASCII case only, as Postgres folds only ASCII letters of an unquoted name),
/// and for a name holding a double quote, the name as a quoted identifier spells it, each
/// `"` doubled. (A name spelt with Unicode escapes, `U&"…"`, is the test's own case.)
pub fn written_forms(name: &str) -> impl Iterator<Item = String> {
    let quoted = name.contains('"').then(|| name.replace('"', "\"\""));
    std::iter::once(name.to_owned()).chain(quoted)
}

/// The names that `tables`, or `views` over them, have in more than one schema: an
/// unqualified reference to one of them is ambiguous to coldwire.
pub fn ambiguous_names(tables: &[Tiered], views: &[TieredView]) -> Vec<String> {
    let names = tables
        .iter()
        .map(|t| (t.table.schema.as_str(), t.table.name.as_str()))
        .chain(views.iter().map(|v| (v.schema.as_str(), v.name.as_str())));
    let mut seen: Vec<(&str, &str)> = Vec::new();
    let mut ambiguous: Vec<String> = Vec::new();
    for (schema, name) in names {
        if seen.iter().any(|&(s, n)| n == name && s != schema)
            && !ambiguous.iter().any(|a| a == name)
        {
            ambiguous.push(name.to_owned());
        }
        seen.push((schema, name));
    }
    ambiguous
}

/// A database's secret, never shown (`Debug` prints `<redacted>`).
#[derive(Clone, PartialEq, Eq)]
pub struct SigningKey(Arc<[u8]>);

impl SigningKey {
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Registry {
    /// The one tiered table `schema.name` (as written; any schema when unqualified) names.
    pub fn unique(&self, schema: Option<&str>, name: &str) -> Option<&Tiered> {
        let mut candidates = self
            .tables
            .iter()
            .filter(|t| t.table.name == name && schema.is_none_or(|s| t.table.schema == s));
        match (candidates.next(), candidates.next()) {
            (Some(only), None) => Some(only),
            _ => None,
        }
    }

    /// The one view over tiered tables `schema.name` (as written) names.
    pub fn view(&self, schema: Option<&str>, name: &str) -> Option<&TieredView> {
        let mut candidates = self
            .views
            .iter()
            .filter(|v| v.name == name && schema.is_none_or(|s| v.schema == s));
        match (candidates.next(), candidates.next()) {
            (Some(only), None) => Some(only),
            _ => None,
        }
    }

    /// A function reading tiered tables server-side that `call` may run: when
    /// unqualified, one of any schema (the session's search_path is not known here) that
    /// takes as many arguments as the call passes, and that no function of pg_catalog of
    /// the same name takes too (pg_catalog's comes first: `lower('A')` is its own, though
    /// a `public.lower(events)` takes one argument too). Postgres chooses among all of
    /// them by their arguments, so `version(5)` runs `public.version(bigint)`, which no
    /// function of pg_catalog could.
    pub fn function(&self, call: &crate::sql::tree::FunctionCall) -> Option<&ReadingFunction> {
        self.functions.iter().find(|f| {
            matches!(f.kind, CallerKind::Function | CallerKind::Procedure)
                && f.name == call.name
                && f.arity.is_none_or(|a| a.admits(call.args))
                && match &call.schema {
                    Some(s) => f.schema == *s,
                    None => !f.catalog_arities.iter().any(|a| a.admits(call.args)),
                }
        })
    }

    /// A view whose query calls a function that reads tiered tables server-side, which
    /// `schema.name` (as written; any schema when unqualified) may name.
    pub fn calling_view(&self, schema: Option<&str>, name: &str) -> Option<&ReadingFunction> {
        self.caller(schema, name, |k| k == CallerKind::View)
    }

    /// A materialized view whose query calls a function that reads tiered tables
    /// server-side, which `schema.name` (as written; any schema when unqualified) may
    /// name.
    pub fn calling_matview(&self, schema: Option<&str>, name: &str) -> Option<&ReadingFunction> {
        self.caller(schema, name, |k| k == CallerKind::MaterializedView)
    }

    /// A plain table whose writes of a kind in `writes` (bits as [`CallerKind::Table`]'s)
    /// read tiered tables server-side (a function they run, a foreign key's check),
    /// which `schema.name` (as written; any schema when unqualified) may name. `sets`: the
    /// columns an UPDATE sets, when known (an UPDATE that sets no referenced column
    /// checks no foreign key).
    pub fn writing_table(
        &self,
        schema: Option<&str>,
        name: &str,
        writes: u8,
        sets: Option<&[String]>,
    ) -> Option<&ReadingFunction> {
        let update_of = sets.filter(|_| writes & 8 == 0);
        self.functions.iter().find(|f| {
            matches!(f.kind, CallerKind::Table { writes: w } if w & writes != 0)
                && f.name == name
                && schema.map_or(!f.shadowed, |s| f.schema == s)
                && (f.key_columns.is_empty()
                    || update_of.is_none_or(|sets| sets.iter().any(|c| f.key_columns.contains(c))))
        })
    }

    /// The first of [`Self::functions`] of a kind `kind` admits named `schema.name` (as
    /// written; unqualified, any schema, but not a function pg_catalog shadows).
    fn caller(
        &self,
        schema: Option<&str>,
        name: &str,
        kind: impl Fn(CallerKind) -> bool,
    ) -> Option<&ReadingFunction> {
        self.functions.iter().find(|f| {
            kind(f.kind) && f.name == name && schema.map_or(!f.shadowed, |s| f.schema == s)
        })
    }

    pub fn by_id(&self, id: i64) -> Option<&Tiered> {
        self.tables.iter().find(|t| t.table.table_id == id)
    }
}

/// The database's secret (catalog v13), readable by the catalog's owner only.
///
/// # Errors
/// The catalog could not be read.
pub async fn secret(client: &Client) -> Result<Option<SigningKey>, tokio_postgres::Error> {
    Ok(client
        .query_opt("SELECT key FROM coldwire.secret", &[])
        .await?
        .map(|row| SigningKey(Arc::from(row.get::<_, Vec<u8>>(0)))))
}

/// What [`read`] found.
pub struct Listed {
    pub tables: Vec<Tiered>,
    pub views: Vec<TieredView>,
    pub functions: Arc<[ReadingFunction]>,
    /// A digest of the catalog `functions` was found from: the tiered tables and views
    /// over them, and [`CATALOG_PROBE`].
    pub callers_key: String,
}

/// The tiered tables, the views over them and the functions that read them, as the
/// catalog has them now (the functions as `previous` had them, found from the catalog
/// its key names, when nothing they were found from changed).
///
/// # Errors
/// The catalog could not be read.
pub async fn read(
    client: &Client,
    previous: Option<(&str, &Arc<[ReadingFunction]>)>,
) -> Result<Listed, tokio_postgres::Error> {
    let rows = client
        .query(
            &format!(
                "SELECT t.id, c.reltype, n.nspname, c.relname, t.columns, t.pk_attnums, c.oid, {} \
                 FROM coldwire.tables t JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE t.state = 'active' ORDER BY t.id",
                super::inspect::unservable_sql("c.oid")
            ),
            &[],
        )
        .await?;
    let compared = super::segments::compared_columns(client, None).await?;
    let mut tables = Vec::new();
    let mut table_oids: Vec<u32> = Vec::new();
    for row in rows {
        table_oids.push(row.get(6));
        let columns: serde_json::Value = row.get(4);
        let pk_attnums: Vec<i16> = row.get(5);
        let list = columns.as_array().cloned().unwrap_or_default();
        let name_of = |attnum: i16| {
            list.iter()
                .find(|c| c["attnum"].as_i64() == Some(attnum.into()))
                .and_then(|c| c["name"].as_str())
                .map(str::to_owned)
        };
        let types: Vec<(String, Option<ColdType>)> = list
            .iter()
            .filter(|c| c["name"].as_str().is_some())
            .map(|c| {
                let oid =
                    u32::try_from(c["type_oid"].as_u64().unwrap_or_default()).unwrap_or_default();
                let typmod = i32::try_from(c["typmod"].as_i64().unwrap_or(-1)).unwrap_or(-1);
                (
                    c["type"].as_str().unwrap_or_default().to_owned(),
                    ColdType::for_column(oid, typmod).ok(),
                )
            })
            .collect();
        // Scalars bind as arrays of their own; an array column would be flattened.
        let bound_types = types
            .iter()
            .map(|(text, ty)| match ty {
                Some(ty @ ColdType::Scalar(_)) => (text.clone(), Some(ty.type_oid())),
                _ => (text.clone(), None),
            })
            .collect();
        // How each column compares, where it differs from its type's other columns.
        let how: Vec<Option<Compared>> = list
            .iter()
            .filter(|c| c["name"].as_str().is_some())
            .map(|c| {
                let attnum = c["attnum"].as_i64().and_then(|a| i16::try_from(a).ok())?;
                compared
                    .iter()
                    .find(|(t, a, _)| *t == row.get::<_, i64>(0) && *a == attnum)
                    .map(|(_, _, how)| *how)
            })
            .collect();
        let byte_ordered = how.iter().map(|h| *h == Some(Compared::AsBytes)).collect();
        let aggregate_types = types
            .iter()
            .zip(&how)
            .map(|((text, ty), h)| match h {
                Some(Compared::Nondeterministically) => (text.clone(), None),
                _ => (text.clone(), *ty),
            })
            .collect();
        tables.push(Tiered {
            byte_ordered,
            aggregate_types,
            table: TieredTable {
                table_id: row.get(0),
                schema: row.get(2),
                name: row.get(3),
                columns: list
                    .iter()
                    .filter_map(|c| c["name"].as_str().map(str::to_owned))
                    .collect(),
                pk: pk_attnums.iter().filter_map(|a| name_of(*a)).collect(),
                guarded: true,
                types: bound_types,
            },
            row_type: row.get(1),
            types,
            unservable: row.get(7),
        });
    }
    let mut views = Vec::new();
    let mut view_oids: Vec<u32> = Vec::new();
    if !tables.is_empty() {
        for row in client.query(VIEWS, &[]).await? {
            views.push(TieredView {
                schema: row.get(0),
                name: row.get(1),
                materialized: row.get::<_, String>(2) == "m",
                view: ViewDef {
                    definition: row.get(3),
                    security_barrier: row.get(4),
                    qualified: crate::sql::quote::qualified_ident(row.get(0), row.get(1)),
                    identity: ViewIdentity {
                        oid: row.get(5),
                        schema: row.get(0),
                        name: row.get(1),
                        rule_xmin: row.get::<_, Option<String>>(6).unwrap_or_default(),
                    },
                },
            });
            view_oids.push(row.get(5));
        }
    }
    let start = callers::Start {
        relations: table_oids
            .iter()
            .zip(&tables)
            .map(|(oid, t)| (*oid, t.table.schema.as_str(), t.table.name.as_str(), false))
            .chain(
                view_oids
                    .iter()
                    .zip(&views)
                    .map(|(oid, v)| (*oid, v.schema.as_str(), v.name.as_str(), true)),
            )
            .collect(),
        tiered: table_oids.clone(),
    };
    let mut callers_key = String::new();
    let functions = if tables.is_empty() {
        Arc::default()
    } else {
        // The search reads every function's text; it runs again only when functions,
        // views, schemas or what they may read changed since the last one.
        let probe: String = client.query_one(CATALOG_PROBE, &[]).await?.get(0);
        callers_key = format!("{probe}|{:?}", start.relations);
        match previous {
            Some((key, functions)) if key == callers_key => Arc::clone(functions),
            _ => callers::find(client, &start).await?.into(),
        }
    };
    Ok(Listed {
        tables,
        views,
        functions,
        callers_key,
    })
}

/// A name a function's body may mention ([`names_as_words`]).
pub(crate) struct Mention<'a> {
    pub schema: &'a str,
    pub name: &'a str,
    /// A function, mentioned as a call (followed by `(`); else a table or view.
    pub function: bool,
    /// Only its qualified form counts (pg_catalog has a function of the name, which its
    /// unqualified calls mean, and whose names are common words).
    pub qualified_only: bool,
}

/// A case-insensitive pattern (Postgres's advanced regular expressions) that finds any
/// of `mentions` in a function's text (comments taken out, [`WITHOUT_COMMENTS`]), the
/// name itself its one capture:
/// - a table or view as a word, a function as a word followed by `(` (a call; a column
///   or variable of the same name is not one);
/// - unqualified, or qualified by its own schema (quoted or not); not after another
///   qualifier (`archive.events`, `NEW.events`), nor right after a quote (`'events'`:
///   a channel, a comparison with `TG_TABLE_NAME`, not a query);
/// - not as the target of an `INSERT INTO` (qualified or quoted or not), which reads
///   nothing.
///
/// `None` when there is nothing to look for.
pub(crate) fn names_as_words(mentions: &[Mention<'_>]) -> Option<String> {
    fn escaped(name: &str) -> String {
        name.chars()
            .map(|c| {
                if c.is_ascii_punctuation() || c == ' ' {
                    format!("\\{c}")
                } else {
                    c.to_string()
                }
            })
            .collect()
    }
    let mut alternatives = Vec::new();
    for function in [false, true] {
        let suffix = if function {
            "(?=\"?\\s*\\()"
        } else {
            "(?=[^[:alnum:]_$]|$)"
        };
        let of_kind = || mentions.iter().filter(move |m| m.function == function);
        let unqualified: Vec<String> = of_kind()
            .filter(|m| !m.qualified_only)
            .map(|m| escaped(m.name))
            .collect();
        if !unqualified.is_empty() {
            alternatives.push(format!(
                "(?<![.'])(?<!\\.\")(?:{}){suffix}",
                unqualified.join("|")
            ));
        }
        let mut schemas: Vec<&str> = of_kind().map(|m| m.schema).collect();
        schemas.sort_unstable();
        schemas.dedup();
        for schema in schemas {
            let names: Vec<String> = of_kind()
                .filter(|m| m.schema == schema)
                .map(|m| escaped(m.name))
                .collect();
            alternatives.push(format!(
                "(?<=(?:^|[^[:alnum:]_$])\"?{}\"?\\.\"?)(?:{}){suffix}",
                escaped(schema),
                names.join("|")
            ));
        }
    }
    (!alternatives.is_empty()).then(|| {
        format!(
            "(?i)(?:^|[^[:alnum:]_$])(?<!insert\\s+into\\s+\"?)\
             (?<!insert\\s+into\\s+(?:\"[^\"]*\"|[[:alnum:]_$]+)\\.\"?)({})",
            alternatives.join("|")
        )
    })
}

/// A function's text without its comments (`/* … */` first, then `-- …` to the end of
/// the line), as SQL over `pg_proc p`.
pub(crate) const WITHOUT_COMMENTS: &str =
    "regexp_replace(regexp_replace(p.prosrc, '/\\*.*?\\*/', ' ', 'g'), '--[^\\n]*', ' ', 'g')";

#[cfg(test)]
mod tests {
    use super::written_forms;
    use crate::sql::classify::bytes_contain_ignore_ascii_case as contains;

    /// Whether the name test finds the table stored as `name` in `sql`.
    fn found(name: &str, sql: &str) -> bool {
        written_forms(name).any(|form| contains(sql.as_bytes(), &form))
    }

    #[test]
    fn the_name_test_finds_a_name_however_a_statement_may_spell_it() {
        assert!(found("events", "SELECT * FROM EVENTS"));
        assert!(found("Events", "SELECT * FROM \"Events\""));
        // Postgres folds only ASCII letters: the name is stored as written in quotes, and
        // only that spelling (ASCII case aside) names it.
        assert!(found("Événements", "SELECT * FROM \"Événements\""));
        assert!(!found("Événements", "SELECT * FROM \"éVÉNEMENTS\""));
        // A quote in a name is doubled where a statement spells it.
        assert!(found(
            "Odd.Name \"q\"",
            "SELECT * FROM \"Odd.Name \"\"q\"\"\""
        ));
        assert!(found("a\"", "TABLE s.\"a\"\"\""));
        assert!(!found("events", "SELECT * FROM event"));
    }
}
