//! Quoting for the SQL coldwire builds: identifiers always quoted, literals with their
//! quotes doubled. Built from catalog identifiers and values only, never spliced raw.

/// `"name"`, with embedded quotes doubled: safe for any identifier.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `"schema"."name"`: a qualified name, each part quoted.
pub fn qualified_ident(schema: &str, name: &str) -> String {
    format!("{}.{}", quote_ident(schema), quote_ident(name))
}

/// An identifier as Postgres shows it: bare when it is a plain lower-case name.
pub fn display_ident(name: &str) -> String {
    let plain = !name.is_empty()
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        name.to_owned()
    } else {
        quote_ident(name)
    }
}

/// `p."a", p."b"` (with `prefix` = `p.`; empty for bare names): a list of columns, quoted.
pub fn column_list<'a>(columns: impl IntoIterator<Item = &'a str>, prefix: &str) -> String {
    columns
        .into_iter()
        .map(|n| format!("{prefix}{}", quote_ident(n)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `l."a" = r."a" AND l."b" = r."b"` over the key columns `pk`: the join condition
/// between two relations holding the same key.
pub fn pk_equal<'a>(pk: impl IntoIterator<Item = &'a str>, left: &str, right: &str) -> String {
    pk.into_iter()
        .map(|n| format!("{left}.{q} = {right}.{q}", q = quote_ident(n)))
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// `E'text'`, with embedded quotes and backslashes doubled: the same string whatever
/// `standard_conforming_strings` says where it is parsed (a plpgsql body is parsed with
/// the setting of the session that first calls it, and a table's name may hold `\'`).
pub fn sql_literal(text: &str) -> String {
    format!("E'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

/// [`sql_literal`] in ASCII alone, characters outside it as Unicode escapes (`\u00c9`):
/// the same string in a session of any client_encoding (on a UTF-8 server).
pub fn ascii_literal(text: &str) -> String {
    let mut out = String::from("E'");
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("''"),
            c if c.is_ascii() => out.push(c),
            c if u32::from(c) <= 0xFFFF => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push_str(&format!("\\U{:08x}", u32::from(c))),
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_doubled() {
        assert_eq!(quote_ident(r#"Odd "name""#), r#""Odd ""name""""#);
        assert_eq!(sql_literal("it's"), "E'it''s'");
        assert_eq!(sql_literal(r"a\'b"), r"E'a\\''b'");
        assert_eq!(ascii_literal(r"É\'x𝄞"), r"E'\u00c9\\''x\U0001d11e'");
        assert_eq!(column_list(["a", "b"], "p."), r#"p."a", p."b""#);
        assert_eq!(
            pk_equal(["a", "b"], "l", "r"),
            r#"l."a" = r."a" AND l."b" = r."b""#
        );
    }
}
