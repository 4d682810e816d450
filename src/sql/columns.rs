//! Which columns a statement may read through a reference to a table: the row path
//! decodes only those cold columns and binds NULL in the others, which nothing of the
//! statement can see.
//!
//! The test is by name and deliberately coarse. A column is taken as read when its name
//! is any identifier of the statement (every `String` node of the tree: column
//! references, `USING` lists, and names that are not columns at all). Every column is
//! taken as read when the statement may see the reference's whole row or its columns by
//! position: a `*` anywhere, a column reference that names the reference itself (`t`,
//! `row_to_json(t)`, `(t).x`), `NATURAL JOIN`, or column aliases (`AS x(a, b)`).

use std::collections::HashSet;

use serde_json::Value;

/// The names of the columns `parsed` may read through a reference whose range names are
/// `range_names` (its alias, and the table's name) to a table with `columns`; `None` when
/// it may read every column.
pub fn read_names(
    parsed: &pg_query::ParseResult,
    range_names: &[&str],
    columns: &[String],
) -> Option<HashSet<String>> {
    let tree = serde_json::to_value(&parsed.protobuf).ok()?;
    // Every range name of the statement: a join's or subquery's alias stands for rows
    // that hold the table's columns too (`SELECT j FROM (t JOIN u ON …) AS j`).
    let mut ranges: Vec<String> = range_names.iter().map(|n| (*n).to_owned()).collect();
    range_names_in(&tree, &mut ranges);
    let ranges: Vec<&str> = ranges.iter().map(String::as_str).collect();
    let mut names = HashSet::new();
    if !visit(&tree, &ranges, &mut names) {
        return None;
    }
    // `t.f` naming no column of the table is a function of its whole row (`f(t)`).
    let mut qualified = Vec::new();
    qualified_names(&tree, range_names, &mut qualified);
    qualified
        .iter()
        .all(|name| columns.contains(name))
        .then_some(names)
}

/// Aliases, relation and CTE names anywhere in `value`.
fn range_names_in(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                let name = match key.as_str() {
                    "alias" | "Alias" => inner.get("aliasname"),
                    "RangeVar" => inner.get("relname"),
                    "CommonTableExpr" => inner.get("ctename"),
                    _ => None,
                };
                if let Some(name) = name.and_then(Value::as_str) {
                    out.push(name.to_owned());
                }
                range_names_in(inner, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| range_names_in(v, out)),
        _ => {}
    }
}

/// The last field of every column reference qualified by one of `range_names`.
fn qualified_names(value: &Value, range_names: &[&str], out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                if key == "ColumnRef" {
                    if let [.., Some(qualifier), Some(last)] = column_ref_fields(inner).as_slice() {
                        if range_names.contains(qualifier) {
                            out.push((*last).to_owned());
                        }
                    }
                }
                qualified_names(inner, range_names, out);
            }
        }
        Value::Array(items) => items
            .iter()
            .for_each(|v| qualified_names(v, range_names, out)),
        _ => {}
    }
}

/// Collects identifiers into `names`; false when every column may be read.
fn visit(value: &Value, range_names: &[&str], names: &mut HashSet<String>) -> bool {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                let narrow = match key.as_str() {
                    "AStar" => false,
                    "ColumnRef" => !whole_row(inner, range_names),
                    "JoinExpr" => inner.get("is_natural").and_then(Value::as_bool) != Some(true),
                    "alias" | "Alias" => inner
                        .get("colnames")
                        .and_then(Value::as_array)
                        .is_none_or(Vec::is_empty),
                    "String" => {
                        if let Some(name) = inner.get("sval").and_then(Value::as_str) {
                            names.insert(name.to_owned());
                        }
                        true
                    }
                    _ => true,
                };
                if !narrow || !visit(inner, range_names, names) {
                    return false;
                }
            }
            true
        }
        Value::Array(items) => items.iter().all(|v| visit(v, range_names, names)),
        _ => true,
    }
}

/// Whether a `ColumnRef` ends in one of `range_names`: a whole-row reference (or a column
/// named like the table, which is read then anyway).
fn whole_row(column_ref: &Value, range_names: &[&str]) -> bool {
    let last = column_ref_fields(column_ref).last().copied().flatten();
    last.is_some_and(|name| range_names.contains(&name))
}

/// The fields of a `ColumnRef` of the parse tree as JSON: each name, `None` for `*`.
pub(crate) fn column_ref_fields(column_ref: &Value) -> Vec<Option<&str>> {
    column_ref
        .get("fields")
        .and_then(Value::as_array)
        .map(|f| {
            f.iter()
                .map(|f| f.get("node")?.get("String")?.get("sval")?.as_str())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(sql: &str) -> Option<Vec<String>> {
        let parsed = pg_query::parse(sql, 0).unwrap();
        let columns: Vec<String> = ["id", "kind", "at", "v", "payload", "x", "a"]
            .iter()
            .map(|c| (*c).to_owned())
            .collect();
        let mut found: Vec<String> = read_names(&parsed, &["e", "events"], &columns)?
            .into_iter()
            .collect();
        found.sort();
        Some(found)
    }

    fn reads(sql: &str, column: &str) -> bool {
        names(sql).is_none_or(|n| n.iter().any(|c| c == column))
    }

    #[test]
    fn named_columns_are_read_and_others_are_not() {
        let sql = "SELECT id, lower(kind) FROM events e WHERE at > now() ORDER BY e.v";
        for column in ["id", "kind", "at", "v"] {
            assert!(reads(sql, column), "{column}");
        }
        assert!(!reads(sql, "payload"));
        assert!(!reads("SELECT count(*) FROM events", "payload"));
        // USING names columns without column references.
        assert!(reads(
            "SELECT 1 FROM events JOIN other USING (payload)",
            "payload"
        ));
        // Subqueries anywhere, and identifiers that are not columns, count too.
        assert!(reads(
            "SELECT id FROM events LIMIT (SELECT count(payload) FROM other)",
            "payload"
        ));
        assert!(reads(
            "SELECT id FROM events WHERE kind = 'x' -- payload",
            "id"
        ));
    }

    #[test]
    fn the_whole_row_or_positions_read_every_column() {
        for sql in [
            "SELECT * FROM events",
            "SELECT e.* FROM events e",
            "SELECT row_to_json(e) FROM events e",
            "SELECT (events).id FROM events",
            "SELECT count(events) FROM events",
            "SELECT x FROM (SELECT * FROM events) s",
            "SELECT a FROM events AS e(a)",
            "SELECT id FROM events NATURAL JOIN other",
            "SELECT id FROM events WHERE e IS NOT NULL",
            "TABLE events",
            // The whole row under a join's or a subquery's alias.
            "SELECT j FROM (events e JOIN tags g ON g.event_id = e.id) AS j",
            "SELECT row_to_json(s) FROM (SELECT id, kind FROM events) s, LATERAL (SELECT 1) l",
            // A function of the whole row, in field notation.
            "SELECT e.total FROM events e",
            "SELECT events.total FROM events",
        ] {
            assert_eq!(names(sql), None, "{sql}");
        }
    }
}
