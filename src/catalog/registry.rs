//! The registry: which tables are tiered and which views read them, as sessions see them
//! (DESIGN §6.1), read from the catalog in one place.

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::Client;

use crate::sql::rewrite::{TieredTable, ViewDef};
use crate::values::ColdType;

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
            coalesce(c.reloptions, '{}') @> ARRAY['security_barrier=true'], c.oid \
     FROM (SELECT DISTINCT view FROM dep) v JOIN pg_class c ON c.oid = v.view \
     JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('v', 'm') ORDER BY 1, 2";

/// Functions and procedures whose bodies read a tiered table or a view over one
/// server-side, where coldwire cannot merge cold rows in: a body whose text names one
/// (`$1`, a case-insensitive pattern of the names as words), whatever its language
/// besides C and internal ones, or one Postgres records as depending on one (SQL-standard
/// bodies; `$2`, the views' oids). A function that declares it works on hot rows only
/// (`ALTER FUNCTION … SET coldwire.hot_only_reads = on`, or `coldwire.hot_only_writes`,
/// with which it writes hot rows only) is left out, and so are temporary functions (of
/// other sessions; a session's own are called qualified only). Each row: schema, name,
/// the relation its body names, whether pg_catalog has a function of that name, whether
/// it is a procedure, and its arguments' types.
const FUNCTIONS: &str = "SELECT n.nspname::text, p.proname::text, \
       coalesce(substring(p.prosrc from $1), \
                (SELECT c.relname::text FROM pg_depend d JOIN pg_class c ON c.oid = d.refobjid \
                 WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.refclassid = 'pg_class'::regclass \
                   AND (d.refobjid = ANY ($2) OR d.refobjid IN (SELECT relid FROM coldwire.tables WHERE state = 'active')) \
                 ORDER BY 1 LIMIT 1)), \
       EXISTS (SELECT 1 FROM pg_proc b WHERE b.proname = p.proname AND b.pronamespace = 'pg_catalog'::regnamespace), \
       p.prokind = 'p', pg_get_function_identity_arguments(p.oid) \
     FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang \
     WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'coldwire') AND n.nspname NOT LIKE 'pg\\_temp\\_%' \
       AND l.lanname NOT IN ('internal', 'c') \
       AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) s \
                       WHERE lower(split_part(s, '=', 1)) IN ('coldwire.hot_only_reads', 'coldwire.hot_only_writes') \
                         AND lower(substr(s, strpos(s, '=') + 1)) IN ('on', 'true', 'yes', '1')) \
       AND (p.prosrc ~ $1 OR EXISTS (SELECT 1 FROM pg_depend d \
            WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.refclassid = 'pg_class'::regclass \
              AND (d.refobjid = ANY ($2) OR d.refobjid IN (SELECT relid FROM coldwire.tables WHERE state = 'active')))) \
     ORDER BY 1, 2, 3";

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
    /// `catalog::segments::byte_ordered_columns`).
    pub byte_ordered: Vec<bool>,
}

/// A view or materialized view that reads a tiered table (directly or through views).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TieredView {
    pub schema: String,
    pub name: String,
    pub materialized: bool,
    pub view: ViewDef,
}

/// A function or procedure whose body reads a tiered table server-side ([`FUNCTIONS`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadingFunction {
    pub schema: String,
    pub name: String,
    /// The tiered table or view its body names, as the registry names it.
    pub reads: String,
    /// `reads` is a view over tiered tables.
    pub reads_view: bool,
    /// A procedure (`CALL`), not a function.
    pub procedure: bool,
    /// Its arguments' types, as `pg_get_function_identity_arguments` writes them.
    pub arguments: String,
    /// pg_catalog has a function of this name, which an unqualified call means (it comes
    /// first in every search_path that does not place it later).
    pub shadowed: bool,
}

/// The list of tiered tables, with a version that moves whenever its content does.
#[derive(Debug, Default)]
pub struct Registry {
    pub tables: Vec<Tiered>,
    pub views: Vec<TieredView>,
    /// Functions and procedures that read tiered tables server-side.
    pub functions: Vec<ReadingFunction>,
    /// Lower-case names (of tables, views and such functions), for the cheap test of
    /// every statement.
    pub names: Vec<String>,
    pub version: u64,
    /// The database's secret (`coldwire.secret`, catalog v13), with which coldwire signs
    /// the rows it brings back (`catalog::capture::rehydration_mac`).
    pub secret: Option<SigningKey>,
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

    /// A function reading tiered tables server-side that a call of `schema.name` (as
    /// written) may run: when unqualified, one of any schema (the session's search_path
    /// is not known here) unless pg_catalog has a function of the name, which comes
    /// first.
    pub fn function(&self, schema: Option<&str>, name: &str) -> Option<&ReadingFunction> {
        self.functions.iter().find(|f| {
            f.name == name
                && match schema {
                    Some(s) => f.schema == s,
                    None => !f.shadowed,
                }
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
    pub functions: Vec<ReadingFunction>,
}

/// The tiered tables, the views over them and the functions that read them, as the
/// catalog has them now.
///
/// # Errors
/// The catalog could not be read.
pub async fn read(client: &Client) -> Result<Listed, tokio_postgres::Error> {
    let rows = client
            .query(
                "SELECT t.id, c.reltype, n.nspname, c.relname, t.columns, t.pk_attnums \
                 FROM coldwire.tables t JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE t.state = 'active' ORDER BY t.id",
                &[],
            )
            .await?;
    let ordered = super::segments::byte_ordered_columns(client, None).await?;
    let mut tables = Vec::new();
    for row in rows {
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
        let byte_ordered = list
            .iter()
            .filter(|c| c["name"].as_str().is_some())
            .map(|c| {
                let attnum = c["attnum"].as_i64().and_then(|a| i16::try_from(a).ok());
                attnum.is_some_and(|a| ordered.contains(&(row.get::<_, i64>(0), a)))
            })
            .collect();
        tables.push(Tiered {
            byte_ordered,
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
        });
    }
    let mut views = Vec::new();
    let mut functions = Vec::new();
    if !tables.is_empty() {
        let mut view_oids: Vec<u32> = Vec::new();
        for row in client.query(VIEWS, &[]).await? {
            views.push(TieredView {
                schema: row.get(0),
                name: row.get(1),
                materialized: row.get::<_, String>(2) == "m",
                view: ViewDef {
                    definition: row.get(3),
                    security_barrier: row.get(4),
                },
            });
            view_oids.push(row.get(5));
        }
        let names = tables
            .iter()
            .map(|t| t.table.name.as_str())
            .chain(views.iter().map(|v| v.name.as_str()));
        for row in client
            .query(FUNCTIONS, &[&names_as_words(names), &view_oids])
            .await?
        {
            // The name as the body wrote it, matched case-insensitively: the registry's.
            let written = row.get::<_, Option<String>>(2).unwrap_or_default();
            let table = tables
                .iter()
                .map(|t| &t.table.name)
                .find(|n| n.eq_ignore_ascii_case(&written));
            let view = views
                .iter()
                .map(|v| &v.name)
                .find(|n| n.eq_ignore_ascii_case(&written));
            functions.push(ReadingFunction {
                schema: row.get(0),
                name: row.get(1),
                reads: table.or(view).cloned().unwrap_or(written),
                reads_view: table.is_none() && view.is_some(),
                shadowed: row.get(3),
                procedure: row.get(4),
                arguments: row.get(5),
            });
        }
    }
    Ok(Listed {
        tables,
        views,
        functions,
    })
}

/// A case-insensitive pattern (Postgres's advanced regular expressions) that finds any
/// of `names` as a word of a function's text, the name itself its one capture.
fn names_as_words<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let alternatives: Vec<String> = names
        .map(|name| {
            name.chars()
                .map(|c| {
                    if c.is_ascii_punctuation() || c == ' ' {
                        format!("\\{c}")
                    } else {
                        c.to_string()
                    }
                })
                .collect()
        })
        .collect();
    format!(
        "(?i)(?:^|[^[:alnum:]_$])({})(?:[^[:alnum:]_$]|$)",
        alternatives.join("|")
    )
}
