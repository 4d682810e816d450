//! Functions, procedures and views that read tiered tables server-side, where coldwire
//! cannot merge in cold rows: found from the catalog, directly and through one another.
//!
//! A round starts from a frontier of what reads tiered tables (round one: the tiered
//! tables and the views over them) and finds:
//! - the functions and procedures whose body names one of the frontier as a word, or
//!   which Postgres records as depending on one (SQL-standard bodies, whose text it does
//!   not keep);
//! - the views whose query calls a function of the frontier or reads a view of it (not in
//!   round one: views over tiered tables are coldwire's to expand).
//!
//! What a round finds is the next round's frontier, until a round finds nothing new. A
//! function that declares it works on hot rows only (`ALTER FUNCTION … SET
//! coldwire.hot_only_reads = on`, or `coldwire.hot_only_writes`) is left out, and with it
//! whatever reaches tiered tables only through it: the setting holds for the functions it
//! calls too.

use tokio_postgres::Client;

use super::{Arity, CallerKind, ReadingFunction};
use crate::catalog::capture::{HOT_ONLY_ON, HOT_ONLY_SETTING};

/// The schemas searched (`n`: `pg_namespace`): the database's own, not the system's,
/// coldwire's or temporary ones.
macro_rules! own_schema {
    () => {
        "n.nspname NOT IN ('pg_catalog', 'information_schema', 'coldwire') AND n.nspname NOT LIKE 'pg\\_temp\\_%'"
    };
}

/// The names of the columns `attnums` (an `int2[]` expression) of relation `rel`, in order.
macro_rules! key_names {
    ($attnums:literal, $rel:literal) => {
        concat!(
            "ARRAY(SELECT a.attname::text FROM unnest(",
            $attnums,
            ") WITH ORDINALITY u(attnum, i) JOIN pg_attribute a ON a.attrelid = ",
            $rel,
            " AND a.attnum = u.attnum ORDER BY u.i)"
        )
    };
}

/// At most this many rounds: a chain of wrappers deeper than this is not followed.
const MAX_ROUNDS: usize = 16;

/// What reads tiered tables, as a frontier of one round.
struct Target {
    oid: u32,
    /// A relation (`pg_class`): a tiered table, a view; else a function (`pg_proc`).
    relation: bool,
    /// Its schema and name as the registry has them, which bodies name it by.
    schema: String,
    name: String,
    /// Whether a body can name it unqualified (false for functions pg_catalog shadows,
    /// which are called qualified, and whose names are pg_catalog's common words).
    named: bool,
    /// Its qualified name, as messages show it (`None` for tiered tables and views over
    /// them, which are what is read).
    through: Option<String>,
    reads: String,
    reads_view: bool,
}

impl Target {
    /// What was found, as the next round's frontier.
    fn of(found: &ReadingFunction, oid: u32, relation: bool) -> Self {
        Self {
            oid,
            relation,
            schema: found.schema.clone(),
            name: found.name.clone(),
            named: !found.shadowed,
            through: Some(found.qualified()),
            reads: found.reads.clone(),
            reads_view: found.reads_view,
        }
    }
}

/// The tiered tables and views over them, as round one's frontier: `(oid, schema, name,
/// view)`.
pub struct Start<'a> {
    pub relations: Vec<(u32, &'a str, &'a str, bool)>,
    /// The tiered tables' oids.
    pub tiered: Vec<u32>,
}

/// The functions of one round (see the module's text). `$1`: the frontier's names as
/// words (NULL when none can be named); `$2`, `$3`: its relations' and functions' oids;
/// `$4`: functions found already; `$5`: `ILIKE` patterns of the names, which a body
/// must match before the costlier `$1` is tried. Each row: oid, schema, name, the name its text names,
/// the frontier oid it depends on, whether pg_catalog has a function of its name, whether
/// it is a procedure, its arguments' types.
fn functions_query() -> String {
    let depends = "d.classid = 'pg_proc'::regclass AND d.objid = p.oid \
                   AND ((d.refclassid = 'pg_class'::regclass AND d.refobjid = ANY ($2)) \
                        OR (d.refclassid = 'pg_proc'::regclass AND d.refobjid = ANY ($3)))";
    // pg_catalog's functions of the name that a call without WITHIN GROUP may run:
    // ordered-set and hypothetical-set aggregates (`rank(VARIADIC "any")`,
    // `percentile_cont`) cannot be, so `rank(5)` is a function of another schema.
    let plain_call = "b.proname = p.proname AND b.pronamespace = 'pg_catalog'::regnamespace \
                      AND NOT EXISTS (SELECT 1 FROM pg_aggregate a WHERE a.aggfnoid = b.oid AND a.aggkind <> 'n')";
    format!(
        "SELECT p.oid, n.nspname::text, p.proname::text, substring({body} from $1), \
                (SELECT d.refobjid FROM pg_depend d WHERE {depends} ORDER BY 1 LIMIT 1), \
                EXISTS (SELECT 1 FROM pg_proc b WHERE b.proname = p.proname AND b.pronamespace = 'pg_catalog'::regnamespace), \
                p.prokind = 'p', pg_get_function_identity_arguments(p.oid), \
                p.pronargs::int4, p.pronargdefaults::int4, p.provariadic <> 0, \
                ARRAY(SELECT (b.pronargs - b.pronargdefaults)::int4 FROM pg_proc b WHERE {plain_call} ORDER BY b.oid), \
                ARRAY(SELECT CASE WHEN b.provariadic <> 0 THEN -1 ELSE b.pronargs::int4 END FROM pg_proc b \
                      WHERE {plain_call} ORDER BY b.oid) \
         FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang \
         WHERE {own} \
           AND l.lanname NOT IN ('internal', 'c') AND p.oid <> ALL ($4) \
           AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) s \
                           WHERE lower(split_part(s, '=', 1)) IN ('{reads}', '{writes}') \
                             AND lower(substr(s, strpos(s, '=') + 1)) IN {HOT_ONLY_ON}) \
           AND ((p.prosrc ILIKE ANY ($5) AND {body} ~ $1) \
                OR EXISTS (SELECT 1 FROM pg_depend d WHERE {depends})) \
         ORDER BY 2, 3, 8",
        reads = super::HOT_ONLY_READS_SETTING,
        body = super::WITHOUT_COMMENTS,
        writes = HOT_ONLY_SETTING,
        own = own_schema!(),
    )
}

/// The views and materialized views whose query calls a function of the frontier (`$1`)
/// or reads a view of it (`$2`), but not those found already (`$3`). Each row: oid,
/// schema, name, the frontier oid it depends on, whether it is materialized.
const CALLING_VIEWS: &str = concat!("SELECT DISTINCT ON (c.oid) c.oid, n.nspname::text, c.relname::text, d.refobjid, c.relkind = 'm' \
     FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid JOIN pg_class c ON c.oid = r.ev_class \
     JOIN pg_namespace n ON n.oid = c.relnamespace \
     WHERE d.classid = 'pg_rewrite'::regclass AND c.relkind IN ('v', 'm') AND r.ev_class <> d.refobjid \
       AND ((d.refclassid = 'pg_proc'::regclass AND d.refobjid = ANY ($1)) \
            OR (d.refclassid = 'pg_class'::regclass AND d.refobjid = ANY ($2))) \
       AND c.oid <> ALL ($3) AND ", own_schema!(), " \
     ORDER BY c.oid, d.refobjid");

/// The plain tables (not tiered: their writes are coldwire's to plan) whose writes run a
/// function found (`$1`) or check a foreign key of a tiered table (`$2`: the tiered
/// tables). Each row (one per table, function or key, and table it belongs to): oid,
/// schema, name, the function's or key's oid, the writes that run it (`pg_trigger.tgtype`'s
/// bits: 4 INSERT, 8 DELETE, 16 UPDATE), the table whose trigger, default, CHECK or
/// referenced key it is when that is another (qualified, for messages), whether it is a
/// key, and for a key: the columns of the table an UPDATE must set to reach the check,
/// the key's name and its tiered table's.
///
/// `own` lists what a table runs itself: an enabled trigger's function or a function its
/// `WHEN` calls (Postgres records both as the trigger's dependencies), on the trigger's
/// events; a default's (on INSERT, and on an UPDATE that sets a column to it, which the
/// caller counts as an INSERT; a generated column's on INSERT and UPDATE); a CHECK
/// constraint's, or the CHECK of the domain a column has, on INSERT and UPDATE; a
/// foreign key of a tiered table with `ON DELETE` or `ON UPDATE` `NO ACTION` or
/// `RESTRICT`, on its referenced table's DELETEs or UPDATEs (the check Postgres runs, a
/// row trigger of its own, looks for referencing rows in the tiered table's heap alone).
/// `runs`
/// then carries each up to the tables whose writes reach the table's rows (`row_level`
/// is NULL for a default, false for a statement trigger, which fire only for a
/// statement on the table itself):
/// - a partitioned parent: its INSERTs are routed to its partitions, its UPDATEs and
///   DELETEs reach them, and an UPDATE that moves a row to another partition deletes it
///   from one and inserts it into the other; an inheritance parent's UPDATEs and
///   DELETEs reach its children's rows;
/// - a table (itself included) that a foreign key of the table references with `ON
///   DELETE` or `ON UPDATE` `CASCADE`, `SET NULL` or `SET DEFAULT`: its DELETEs (or
///   UPDATEs) run a DELETE or UPDATE statement of the table (`SET DEFAULT` runs its
///   defaults). A referencing partition's copy of its parent's foreign key runs on the
///   parent, so it carries the partition's row triggers only (a referenced partition's
///   copy runs a statement of the referencing table like any other). Any UPDATE of the
///   referenced table is taken to change its key, except for a foreign key's check:
///   an UPDATE reaches it only where it sets the columns `keys` (at each step up, the
///   columns the step's key references), and a cascade's UPDATE (or SET NULL, SET
///   DEFAULT) only where the columns it sets (`fkeys`) are among them.
const WRITING_TABLES: &str = concat!("WITH RECURSIVE own(rel, fn, events, row_level, fk, keys) AS ( \
         SELECT t.tgrelid, d.refobjid, (t.tgtype & 28)::int, t.tgtype & 1 = 1, false, NULL::text[] \
         FROM pg_trigger t JOIN pg_depend d ON d.classid = 'pg_trigger'::regclass AND d.objid = t.oid \
         WHERE NOT t.tgisinternal AND t.tgenabled IN ('O', 'A') \
           AND d.refclassid = 'pg_proc'::regclass AND d.refobjid = ANY ($1) \
       UNION ALL \
         SELECT a.adrelid, d.refobjid, CASE WHEN att.attgenerated = '' THEN 4 ELSE 20 END, NULL, false, NULL \
         FROM pg_attrdef a JOIN pg_depend d ON d.classid = 'pg_attrdef'::regclass AND d.objid = a.oid \
         JOIN pg_attribute att ON att.attrelid = a.adrelid AND att.attnum = a.adnum \
         WHERE d.refclassid = 'pg_proc'::regclass AND d.refobjid = ANY ($1) \
       UNION ALL \
         SELECT k.conrelid, d.refobjid, 20, true, false, NULL FROM pg_constraint k \
         JOIN pg_depend d ON d.classid = 'pg_constraint'::regclass AND d.objid = k.oid \
         WHERE k.contype = 'c' AND k.conrelid <> 0 AND d.refclassid = 'pg_proc'::regclass AND d.refobjid = ANY ($1) \
       UNION ALL \
         SELECT att.attrelid, d.refobjid, 20, true, false, NULL FROM pg_constraint k \
         JOIN pg_depend d ON d.classid = 'pg_constraint'::regclass AND d.objid = k.oid \
         JOIN pg_attribute att ON att.atttypid = k.contypid AND att.attnum > 0 AND NOT att.attisdropped \
         WHERE k.contype = 'c' AND k.contypid <> 0 AND d.refclassid = 'pg_proc'::regclass AND d.refobjid = ANY ($1) \
       UNION ALL \
         SELECT k.confrelid, k.oid, \
                (CASE WHEN k.confdeltype IN ('a', 'r') THEN 8 ELSE 0 END | CASE WHEN k.confupdtype IN ('a', 'r') THEN 16 ELSE 0 END)::int, \
                true, true, ", key_names!("k.confkey", "k.confrelid"), " \
         FROM pg_constraint k \
         WHERE k.contype = 'f' AND k.conrelid = ANY ($2) AND k.confrelid <> ALL ($2) \
           AND (k.confdeltype IN ('a', 'r') OR k.confupdtype IN ('a', 'r')) \
     ), reach(child, parent, inherits, routed, del, upd, cloned, keys, fkeys) AS ( \
         SELECT i.inhrelid, i.inhparent, true, p.relkind = 'p', NULL::\"char\", NULL::\"char\", false, NULL::text[], NULL::text[] \
         FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent \
       UNION ALL \
         SELECT k.conrelid, k.confrelid, false, false, k.confdeltype, k.confupdtype, \
                EXISTS (SELECT 1 FROM pg_constraint pk WHERE pk.oid = k.conparentid AND pk.conrelid <> k.conrelid), \
                ", key_names!("k.confkey", "k.confrelid"), ", ", key_names!("k.conkey", "k.conrelid"), " \
         FROM pg_constraint k WHERE k.contype = 'f' \
     ), runs(rel, fn, events, row_level, origin, fk, keys) AS ( \
         SELECT rel, fn, events, row_level, rel, fk, keys FROM own \
       UNION \
         SELECT e.parent, r.fn, \
                CASE WHEN e.inherits THEN \
                     r.events & CASE WHEN e.routed THEN 28 ELSE 24 END \
                   | CASE WHEN e.routed AND r.events & 12 <> 0 THEN 16 ELSE 0 END \
                ELSE CASE WHEN (e.del = 'c' AND x.ev & 8 <> 0) \
                            OR (e.del = 'n' AND x.ev & 16 <> 0) \
                            OR (e.del = 'd' AND x.ev & 20 <> 0) THEN 8 ELSE 0 END \
                   | CASE WHEN (e.upd IN ('c', 'n') AND x.ev & 16 <> 0) \
                            OR (e.upd = 'd' AND x.ev & 20 <> 0) THEN 16 ELSE 0 END END, \
                true, r.origin, r.fk, CASE WHEN r.fk THEN CASE WHEN e.inherits THEN r.keys ELSE e.keys END END \
         FROM runs r JOIN reach e ON e.child = r.rel \
         CROSS JOIN LATERAL (SELECT r.events & CASE WHEN r.fk AND NOT coalesce(r.keys && e.fkeys, false) THEN 12 ELSE 28 END) x(ev) \
         WHERE r.events <> 0 AND CASE WHEN e.inherits OR e.cloned THEN coalesce(r.row_level, false) ELSE true END \
     ) \
     SELECT c.oid, n.nspname::text, c.relname::text, r.fn, bit_or(r.events)::int, \
            (SELECT o.relnamespace::regnamespace::text || '.' || quote_ident(o.relname::text) \
             FROM pg_class o WHERE o.oid = r.origin AND o.oid <> c.oid), \
            r.fk, r.keys, \
            (SELECT k.conname::text FROM pg_constraint k WHERE r.fk AND k.oid = r.fn), \
            (SELECT t.relname::text FROM pg_constraint k JOIN pg_class t ON t.oid = k.conrelid WHERE r.fk AND k.oid = r.fn) \
     FROM runs r JOIN pg_class c ON c.oid = r.rel JOIN pg_namespace n ON n.oid = c.relnamespace \
     WHERE r.events <> 0 AND c.relkind IN ('r', 'p') AND c.oid <> ALL ($2) AND ", own_schema!(), " \
     GROUP BY c.oid, n.nspname, c.relname, r.fn, r.origin, r.fk, r.keys ORDER BY 2, 3, 4, r.origin");

/// Everything that reads tiered tables server-side, from `start`.
///
/// # Errors
/// The catalog could not be read.
pub async fn find(
    client: &Client,
    start: &Start<'_>,
) -> Result<Vec<ReadingFunction>, tokio_postgres::Error> {
    let mut frontier: Vec<Target> = start
        .relations
        .iter()
        .map(|&(oid, schema, name, view)| Target {
            oid,
            relation: true,
            schema: schema.to_owned(),
            name: name.to_owned(),
            named: true,
            through: None,
            reads: name.to_owned(),
            reads_view: view,
        })
        .collect();
    let functions_sql = functions_query();
    let mut found: Vec<ReadingFunction> = Vec::new();
    // The functions and procedures found: their oids, and where in `found` each is.
    let mut found_functions: Vec<u32> = Vec::new();
    let mut found_at: Vec<usize> = Vec::new();
    let mut found_views: Vec<u32> = Vec::new();
    for round in 0..MAX_ROUNDS {
        if frontier.is_empty() {
            break;
        }
        let mentions: Vec<super::Mention<'_>> = frontier
            .iter()
            .map(|t| super::Mention {
                schema: &t.schema,
                name: &t.name,
                function: !t.relation,
                qualified_only: !t.named,
            })
            .collect();
        let pattern = super::names_as_words(&mentions);
        // A cheap first sieve (a third of the pattern's cost with 2,000 functions).
        let contains: Vec<String> = frontier.iter().map(|t| like_contains(&t.name)).collect();
        let oids = |relation: bool| -> Vec<u32> {
            frontier
                .iter()
                .filter(|t| t.relation == relation)
                .map(|t| t.oid)
                .collect()
        };
        let (relations, functions) = (oids(true), oids(false));
        let target = |written: Option<&str>, via: Option<u32>| {
            written
                .and_then(|w| frontier.iter().find(|t| t.name.eq_ignore_ascii_case(w)))
                .or_else(|| via.and_then(|v| frontier.iter().find(|t| t.oid == v)))
        };
        let mut next = Vec::new();
        for row in client
            .query(
                &functions_sql,
                &[
                    &pattern,
                    &relations,
                    &functions,
                    &found_functions,
                    &contains,
                ],
            )
            .await?
        {
            let written: Option<String> = row.get(3);
            let Some(t) = target(written.as_deref(), row.get(4)) else {
                continue;
            };
            let f = ReadingFunction {
                schema: row.get(1),
                name: row.get(2),
                reads: t.reads.clone(),
                reads_view: t.reads_view,
                through: t.through.clone(),
                kind: if row.get(6) {
                    CallerKind::Procedure
                } else {
                    CallerKind::Function
                },
                arguments: row.get(7),
                shadowed: row.get(5),
                arity: Some(arity(row.get(8), row.get(9), row.get(10))),
                catalog_arities: row
                    .get::<_, Vec<i32>>(11)
                    .into_iter()
                    .zip(row.get::<_, Vec<i32>>(12))
                    .map(|(min, max)| Arity {
                        min: usize::try_from(min).unwrap_or(0),
                        max: usize::try_from(max).ok(),
                    })
                    .collect(),
                key_columns: Vec::new(),
            };
            found_functions.push(row.get(0));
            found_at.push(found.len());
            next.push(Target::of(&f, row.get(0), false));
            found.push(f);
        }
        // Views over tiered tables (round one's frontier) are coldwire's to expand.
        if round > 0 {
            for row in client
                .query(CALLING_VIEWS, &[&functions, &relations, &found_views])
                .await?
            {
                let Some(t) = target(None, row.get(3)) else {
                    continue;
                };
                let materialized: bool = row.get(4);
                let v = ReadingFunction {
                    schema: row.get(1),
                    name: row.get(2),
                    reads: t.reads.clone(),
                    reads_view: t.reads_view,
                    through: t.through.clone(),
                    kind: if materialized {
                        CallerKind::MaterializedView
                    } else {
                        CallerKind::View
                    },
                    arguments: String::new(),
                    shadowed: false,
                    arity: None,
                    catalog_arities: Vec::new(),
                    key_columns: Vec::new(),
                };
                found_views.push(row.get(0));
                // Reading a materialized view runs nothing: what reads it is no caller.
                if materialized {
                    found.push(v);
                    continue;
                }
                next.push(Target::of(&v, row.get(0), true));
                found.push(v);
            }
        }
        frontier = next;
    }
    // Writes of plain tables that run one of them, or check a tiered table's foreign key.
    let mut tables = Vec::new();
    if !found_functions.is_empty() || !start.tiered.is_empty() {
        for row in client
            .query(WRITING_TABLES, &[&found_functions, &start.tiered])
            .await?
        {
            let oid: u32 = row.get(3);
            let origin: Option<String> = row.get(5);
            let writes = CallerKind::Table {
                writes: u8::try_from(row.get::<_, i32>(4)).unwrap_or(28),
            };
            if row.get(6) {
                // A foreign key's check, on the referenced table or reached from another
                // table's writes by cascades.
                let (Some(key), Some(tiered)) = (
                    row.get::<_, Option<String>>(8),
                    row.get::<_, Option<String>>(9),
                ) else {
                    continue;
                };
                let key = format!(
                    "foreign key {} of table {}",
                    crate::sql::quote::display_ident(&key),
                    crate::sql::quote::display_ident(&tiered),
                );
                tables.push(ReadingFunction {
                    schema: row.get(1),
                    name: row.get(2),
                    reads: tiered,
                    reads_view: false,
                    through: Some(match origin {
                        Some(origin) => format!("{key}, which a cascade reaches in table {origin}"),
                        None => key,
                    }),
                    kind: writes,
                    arguments: String::new(),
                    shadowed: false,
                    arity: None,
                    catalog_arities: Vec::new(),
                    key_columns: row.get::<_, Option<Vec<String>>>(7).unwrap_or_default(),
                });
                continue;
            }
            let Some(f) = found_functions
                .iter()
                .position(|o| *o == oid)
                .map(|i| &found[found_at[i]])
            else {
                continue;
            };
            // Reached from another table's trigger, default or CHECK: that table too.
            let through = match origin {
                Some(origin) => format!("{} (of table {origin})", f.qualified()),
                None => f.qualified(),
            };
            tables.push(ReadingFunction {
                schema: row.get(1),
                name: row.get(2),
                reads: f.reads.clone(),
                reads_view: f.reads_view,
                through: Some(through),
                kind: writes,
                arguments: String::new(),
                shadowed: false,
                arity: None,
                catalog_arities: Vec::new(),
                key_columns: Vec::new(),
            });
        }
    }
    found.extend(tables);
    Ok(found)
}

/// An `ILIKE` pattern matching any text that contains `name`.
fn like_contains(name: &str) -> String {
    let mut pattern = String::from("%");
    for c in name.chars() {
        if matches!(c, '\\' | '%' | '_') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

/// The arguments a call may pass to a function of `args` arguments (`pronargs`), the last
/// `defaults` of which have defaults, the last VARIADIC when `variadic`.
fn arity(args: i32, defaults: i32, variadic: bool) -> Arity {
    let args = usize::try_from(args).unwrap_or(0);
    let defaults = usize::try_from(defaults).unwrap_or(0);
    Arity {
        min: args.saturating_sub(defaults),
        max: (!variadic).then_some(args),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn like_patterns_escape_what_like_means() {
        assert_eq!(super::like_contains("my_events"), "%my\\_events%");
        assert_eq!(super::like_contains("50%\\x"), "%50\\%\\\\x%");
    }
}
