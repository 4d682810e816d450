//! `COPY … TO STDOUT` of tiered tables (DESIGN §6.2): coldwire serves it itself. The
//! statement becomes a query (`COPY t (a, b) TO` reads `SELECT a, b FROM t`; `COPY (query)
//! TO` reads the query), which is rewritten like any read, and its result rows are
//! re-encoded as COPY data in the format and options the client asked for, byte for byte
//! what Postgres would have sent: each row one CopyData, the text and CSV escaping of
//! Postgres's `CopyAttributeOutText` and `CopyAttributeOutCSV`, binary tuples wrapped in
//! the binary COPY header and trailer. Sans-IO.

use bytes::{BufMut, BytesMut};
use pg_query::protobuf::node::Node as N;
use pg_query::protobuf::{CopyStmt, Node};

use crate::sql::quote::quote_ident;

/// The binary COPY signature (11 bytes), then flags and header extension length.
const BINARY_SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";

/// COPY's output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyFormat {
    Text,
    Csv,
    Binary,
}

/// Columns CSV output quotes even when they need no quoting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForceQuote {
    None,
    All,
    Columns(Vec<String>),
}

/// The options of a COPY TO, with Postgres's defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyOptions {
    pub format: CopyFormat,
    pub delimiter: u8,
    pub null: Vec<u8>,
    pub header: bool,
    pub quote: u8,
    pub escape: u8,
    pub force_quote: ForceQuote,
}

/// What a COPY TO reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopySource {
    /// `COPY [schema.]table [(columns)] TO`.
    Table {
        schema: Option<String>,
        name: String,
        columns: Vec<String>,
    },
    /// `COPY (query) TO`: the query's text.
    Query(String),
}

/// A COPY TO statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyTo {
    pub source: CopySource,
    /// Into a server-side file or program rather than to the client.
    pub to_server: bool,
    /// The options, or why Postgres would refuse them (or coldwire cannot honour them).
    pub options: Result<CopyOptions, CopyError>,
}

/// Why a COPY TO cannot be served; the SQLSTATE Postgres gives for the same mistake.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CopyError {
    pub code: &'static str,
    pub message: String,
}

fn err(code: &'static str, message: impl Into<String>) -> CopyError {
    CopyError {
        code,
        message: message.into(),
    }
}

/// The COPY TO of `sql` (parsed as `parsed`, one statement), if it is one.
pub fn copy_to(sql: &str, parsed: &pg_query::ParseResult) -> Option<CopyTo> {
    let [raw] = parsed.protobuf.stmts.as_slice() else {
        return None;
    };
    let Some(N::CopyStmt(copy)) = raw.stmt.as_ref().and_then(|s| s.node.as_ref()) else {
        return None;
    };
    if copy.is_from {
        return None;
    }
    let source = match (&copy.relation, &copy.query) {
        (Some(rv), None) => CopySource::Table {
            schema: (!rv.schemaname.is_empty()).then(|| rv.schemaname.clone()),
            name: rv.relname.clone(),
            columns: copy.attlist.iter().filter_map(string).collect(),
        },
        (None, Some(_)) => CopySource::Query(query_text(sql)?.to_owned()),
        _ => return None,
    };
    Some(CopyTo {
        source,
        to_server: !copy.filename.is_empty() || copy.is_program,
        options: options(copy),
    })
}

impl CopyTo {
    /// The query whose rows this COPY writes.
    pub fn select_sql(&self) -> String {
        match &self.source {
            CopySource::Query(q) => q.clone(),
            CopySource::Table {
                schema,
                name,
                columns,
            } => {
                let list = if columns.is_empty() {
                    "*".to_owned()
                } else {
                    crate::sql::quote::column_list(columns.iter().map(String::as_str), "")
                };
                let table = match schema {
                    Some(s) => format!("{}.{}", quote_ident(s), quote_ident(name)),
                    None => quote_ident(name),
                };
                format!("SELECT {list} FROM {table}")
            }
        }
    }
}

fn string(node: &Node) -> Option<String> {
    match node.node.as_ref()? {
        N::String(s) => Some(s.sval.clone()),
        _ => None,
    }
}

/// The text between the parentheses that follow `COPY` (comments, and a `;` before the
/// statement, skipped).
fn query_text(sql: &str) -> Option<&str> {
    let tokens = super::classify::code_tokens(sql).ok()?;
    let copy = tokens
        .iter()
        .position(|t| t.token == pg_query::protobuf::Token::Copy as i32)?;
    let open = tokens.get(copy + 1)?;
    if &sql[open.start as usize..open.end as usize] != "(" {
        return None;
    }
    let mut depth = 0;
    for t in &tokens[copy + 1..] {
        match &sql[t.start as usize..t.end as usize] {
            "(" => depth += 1,
            ")" => {
                depth -= 1;
                if depth == 0 {
                    return sql.get(open.end as usize..t.start as usize);
                }
            }
            _ => {}
        }
    }
    None
}

fn options(copy: &CopyStmt) -> Result<CopyOptions, CopyError> {
    let mut format = CopyFormat::Text;
    let (mut delimiter, mut null, mut header, mut quote, mut escape) =
        (None, None, false, None, None);
    let mut force_quote = ForceQuote::None;
    for option in &copy.options {
        let Some(N::DefElem(d)) = option.node.as_ref() else {
            continue;
        };
        let arg = d.arg.as_deref().and_then(|a| a.node.as_ref());
        let text = || match arg {
            Some(N::String(s)) => Ok(s.sval.clone()),
            Some(N::Integer(i)) => Ok(i.ival.to_string()),
            _ => Err(err("42601", format!("{} requires a parameter", d.defname))),
        };
        let one_byte = |what: &str, value: String| match value.as_bytes() {
            [b] => Ok(*b),
            _ => Err(err(
                "0A000",
                format!("COPY {what} must be a single one-byte character"),
            )),
        };
        match d.defname.as_str() {
            "format" => {
                format = match text()?.to_ascii_lowercase().as_str() {
                    "text" => CopyFormat::Text,
                    "csv" => CopyFormat::Csv,
                    "binary" => CopyFormat::Binary,
                    other => {
                        return Err(err(
                            "22023",
                            format!("COPY format \"{other}\" not recognized"),
                        ))
                    }
                }
            }
            "delimiter" => delimiter = Some(one_byte("delimiter", text()?)?),
            "null" => null = Some(text()?.into_bytes()),
            "header" => {
                header = match arg {
                    None => true,
                    Some(N::Boolean(b)) => b.boolval,
                    Some(N::Integer(i)) if i.ival == 0 || i.ival == 1 => i.ival == 1,
                    Some(N::String(s)) => match s.sval.to_ascii_lowercase().as_str() {
                        "true" | "on" | "1" => true,
                        "false" | "off" | "0" => false,
                        "match" => {
                            return Err(err("0A000", "cannot use \"match\" with HEADER in COPY TO"))
                        }
                        _ => {
                            return Err(err(
                                "22023",
                                "header requires a Boolean value or \"match\"",
                            ))
                        }
                    },
                    _ => return Err(err("22023", "header requires a Boolean value or \"match\"")),
                }
            }
            "quote" => quote = Some(one_byte("quote", text()?)?),
            "escape" => escape = Some(one_byte("escape", text()?)?),
            "force_quote" => {
                force_quote = match arg {
                    Some(N::AStar(_)) => ForceQuote::All,
                    Some(N::List(l)) => {
                        ForceQuote::Columns(l.items.iter().filter_map(string).collect())
                    }
                    _ => {
                        return Err(err(
                            "22023",
                            "argument to option \"force_quote\" must be a list of column names",
                        ))
                    }
                }
            }
            "encoding" => {
                let e = text()?.to_ascii_uppercase().replace(['-', '_'], "");
                if e != "UTF8" && e != "UNICODE" {
                    return Err(err(
                        "0A000",
                        format!(
                            "coldwire serves COPY of tiered tables in UTF8 only, not ENCODING '{}'",
                            text()?
                        ),
                    ));
                }
            }
            "freeze" | "force_not_null" | "force_null" | "default" | "on_error"
            | "log_verbosity" => {
                return Err(err(
                    "0A000",
                    format!(
                        "COPY {} is only available using COPY FROM",
                        d.defname.replace('_', " ")
                    ),
                ));
            }
            other => return Err(err("42601", format!("option \"{other}\" not recognized"))),
        }
    }
    let csv = format == CopyFormat::Csv;
    if format == CopyFormat::Binary && (delimiter.is_some() || null.is_some() || header) {
        return Err(err(
            "42601",
            "cannot specify DELIMITER, NULL or HEADER in BINARY mode",
        ));
    }
    if !csv && (quote.is_some() || escape.is_some() || force_quote != ForceQuote::None) {
        return Err(err(
            "0A000",
            "COPY QUOTE, ESCAPE and FORCE_QUOTE are available only in CSV mode",
        ));
    }
    let delimiter = delimiter.unwrap_or(if csv { b',' } else { b'\t' });
    let quote = quote.unwrap_or(b'"');
    if delimiter == b'\n' || delimiter == b'\r' {
        return Err(err(
            "22023",
            "COPY delimiter cannot be newline or carriage return",
        ));
    }
    if csv && delimiter == quote {
        return Err(err("22023", "COPY delimiter and quote must be different"));
    }
    let null = null.unwrap_or_else(|| if csv { Vec::new() } else { b"\\N".to_vec() });
    if null.contains(&delimiter) {
        return Err(err(
            "22023",
            "COPY delimiter must not appear in the NULL specification",
        ));
    }
    Ok(CopyOptions {
        format,
        delimiter,
        null,
        header,
        quote,
        escape: escape.unwrap_or(quote),
        force_quote,
    })
}

/// Encodes the rows of one COPY TO.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyEncoder {
    options: CopyOptions,
    /// Per column: quoted by FORCE_QUOTE.
    forced: Vec<bool>,
    rows: u64,
}

impl CopyEncoder {
    /// An encoder for result columns named `columns`.
    ///
    /// # Errors
    /// A FORCE_QUOTE column that is not one of them (42703, as Postgres says for a
    /// column the COPY does not have).
    pub fn new(options: &CopyOptions, columns: &[String]) -> Result<Self, CopyError> {
        let forced = match &options.force_quote {
            ForceQuote::None => vec![false; columns.len()],
            ForceQuote::All => vec![true; columns.len()],
            ForceQuote::Columns(names) => {
                if let Some(missing) = names.iter().find(|n| !columns.contains(n)) {
                    return Err(err("42703", format!("column \"{missing}\" does not exist")));
                }
                columns.iter().map(|c| names.contains(c)).collect()
            }
        };
        Ok(Self {
            options: options.clone(),
            forced,
            rows: 0,
        })
    }

    /// Whether the query's results must be requested in binary format.
    pub fn binary(&self) -> bool {
        self.options.format == CopyFormat::Binary
    }

    /// CopyOutResponse, then the header (column names, or the binary signature).
    pub fn start(&self, columns: &[String], out: &mut BytesMut) {
        let binary = self.binary();
        out.put_u8(b'H');
        out.put_u32((4 + 1 + 2 + 2 * columns.len()) as u32);
        out.put_u8(u8::from(binary));
        out.put_i16(columns.len() as i16);
        for _ in columns {
            out.put_i16(i16::from(binary));
        }
        if binary {
            let mut header = BINARY_SIGNATURE.to_vec();
            header.extend_from_slice(&0i32.to_be_bytes()); // flags
            header.extend_from_slice(&0i32.to_be_bytes()); // header extension length
            copy_data(out, &header);
        } else if self.options.header {
            let single = columns.len() == 1;
            let mut line = Vec::new();
            for (i, name) in columns.iter().enumerate() {
                if i > 0 {
                    line.push(self.options.delimiter);
                }
                self.field(&mut line, name.as_bytes(), false, single);
            }
            line.push(b'\n');
            copy_data(out, &line);
        }
    }

    /// One result row (values in the result format asked for) as CopyData.
    pub fn row(&mut self, values: &[Option<Vec<u8>>], out: &mut BytesMut) {
        self.rows += 1;
        let mut line = Vec::new();
        if self.binary() {
            line.extend_from_slice(&(values.len() as i16).to_be_bytes());
            for v in values {
                match v {
                    Some(v) => {
                        line.extend_from_slice(&(v.len() as i32).to_be_bytes());
                        line.extend_from_slice(v);
                    }
                    None => line.extend_from_slice(&(-1i32).to_be_bytes()),
                }
            }
        } else {
            let single = values.len() == 1;
            for (i, v) in values.iter().enumerate() {
                if i > 0 {
                    line.push(self.options.delimiter);
                }
                match v {
                    Some(v) => self.field(
                        &mut line,
                        v,
                        self.forced.get(i).copied().unwrap_or(false),
                        single,
                    ),
                    None => line.extend_from_slice(&self.options.null),
                }
            }
            line.push(b'\n');
        }
        copy_data(out, &line);
    }

    /// The binary trailer (binary format), CopyDone and CommandComplete `COPY n`.
    pub fn finish(&self, out: &mut BytesMut) {
        if self.binary() {
            copy_data(out, &(-1i16).to_be_bytes());
        }
        out.extend_from_slice(&[b'c', 0, 0, 0, 4]);
        crate::wire::extended::command_complete(out, &format!("COPY {}", self.rows));
    }

    fn field(&self, line: &mut Vec<u8>, value: &[u8], force: bool, single: bool) {
        if self.options.format == CopyFormat::Csv {
            csv_field(line, value, &self.options, force, single);
        } else {
            text_field(line, value, self.options.delimiter);
        }
    }
}

fn copy_data(out: &mut BytesMut, data: &[u8]) {
    out.put_u8(b'd');
    out.put_u32((data.len() + 4) as u32);
    out.put_slice(data);
}

/// Postgres's `CopyAttributeOutText`: backslash escapes for backslash, the delimiter and
/// the control characters that have one; other bytes as they are.
fn text_field(line: &mut Vec<u8>, value: &[u8], delimiter: u8) {
    for &c in value {
        let escaped = match c {
            0x08 => Some(b'b'),
            0x0c => Some(b'f'),
            b'\n' => Some(b'n'),
            b'\r' => Some(b'r'),
            b'\t' => Some(b't'),
            0x0b => Some(b'v'),
            b'\\' => Some(b'\\'),
            c if c == delimiter => Some(c),
            _ => None,
        };
        match escaped {
            Some(e) => line.extend_from_slice(&[b'\\', e]),
            None => line.push(c),
        }
    }
}

/// Postgres's `CopyAttributeOutCSV`: quoted when forced, when equal to the NULL string,
/// when it alone is `\.` on a line, or when it holds the delimiter, the quote, CR or LF;
/// inside quotes the quote and escape characters are escaped.
fn csv_field(line: &mut Vec<u8>, value: &[u8], o: &CopyOptions, force: bool, single: bool) {
    let quoted = force
        || value == o.null.as_slice()
        || (single && value == b"\\.")
        || value
            .iter()
            .any(|&c| c == o.delimiter || c == o.quote || c == b'\n' || c == b'\r');
    if !quoted {
        line.extend_from_slice(value);
        return;
    }
    line.push(o.quote);
    for &c in value {
        if c == o.quote || c == o.escape {
            line.push(o.escape);
        }
        line.push(c);
    }
    line.push(o.quote);
}

#[cfg(test)]
#[path = "copy_to_tests.rs"]
mod tests;
