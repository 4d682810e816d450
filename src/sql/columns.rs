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
/// `range_names` (its alias, and the table's name); `None` when it may read every column.
pub fn read_names(parsed: &pg_query::ParseResult, range_names: &[&str]) -> Option<HashSet<String>> {
    let tree = serde_json::to_value(&parsed.protobuf).ok()?;
    let mut names = HashSet::new();
    visit(&tree, range_names, &mut names).then_some(names)
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
    let last = column_ref
        .get("fields")
        .and_then(Value::as_array)
        .and_then(|f| f.last())
        .and_then(|f| f.get("node"))
        .and_then(|n| n.get("String"))
        .and_then(|s| s.get("sval"))
        .and_then(Value::as_str);
    last.is_some_and(|name| range_names.contains(&name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(sql: &str) -> Option<Vec<String>> {
        let parsed = pg_query::parse(sql, 0).unwrap();
        let mut found: Vec<String> = read_names(&parsed, &["e", "events"])?.into_iter().collect();
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
        ] {
            assert_eq!(names(sql), None, "{sql}");
        }
    }
}
