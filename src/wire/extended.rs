//! Extended-protocol messages coldwire decodes (Parse, Bind, Describe, Execute) and the
//! responses it encodes when it answers a statement itself. Whole frames, tag included.

use bytes::{BufMut, BytesMut};

use super::startup::split_cstr;
use super::WireError;

/// A decoded Parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parse<'a> {
    pub statement: &'a str,
    pub query: &'a str,
    /// Parameter type OIDs the client specified (0 = unspecified).
    pub param_types: Vec<u32>,
}

/// A decoded Bind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind<'a> {
    pub portal: &'a str,
    pub statement: &'a str,
    /// Per parameter: true for binary format.
    pub param_binary: Vec<bool>,
    pub params: Vec<Option<&'a [u8]>>,
    /// Result column formats as sent (empty = all text, one = applies to all).
    pub result_binary: Vec<bool>,
}

/// What a Describe or Close names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    Statement(&'a str),
    Portal(&'a str),
}

/// A byte reader over a message body.
struct Body<'a>(&'a [u8]);

impl<'a> Body<'a> {
    fn cstr(&mut self, what: &'static str) -> Result<&'a str, WireError> {
        let (s, rest) = split_cstr(self.0).ok_or(WireError::Malformed(what))?;
        self.0 = rest;
        Ok(s)
    }
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        if self.0.len() < n {
            return Err(WireError::Malformed(what));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn i16(&mut self, what: &'static str) -> Result<i16, WireError> {
        let b = self.take(2, what)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }
    fn i32(&mut self, what: &'static str) -> Result<i32, WireError> {
        let b = self.take(4, what)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn count(&mut self, what: &'static str) -> Result<usize, WireError> {
        usize::try_from(self.i16(what)?).map_err(|_| WireError::Malformed(what))
    }
    fn formats(&mut self, what: &'static str) -> Result<Vec<bool>, WireError> {
        (0..self.count(what)?)
            .map(|_| Ok(self.i16(what)? == 1))
            .collect()
    }
}

fn body<'a>(frame: &'a [u8], tag: u8, what: &'static str) -> Result<Body<'a>, WireError> {
    match frame {
        [t, _, _, _, _, rest @ ..] if *t == tag => Ok(Body(rest)),
        _ => Err(WireError::Malformed(what)),
    }
}

impl<'a> Parse<'a> {
    /// The statement name and the query's bytes of a Parse whose query need not be UTF-8
    /// (a session in another client_encoding).
    ///
    /// # Errors
    /// A frame that is not a well-formed Parse, or whose statement name is not UTF-8.
    pub fn decode_raw(frame: &'a [u8]) -> Result<(&'a str, &'a [u8]), WireError> {
        const WHAT: &str = "Parse";
        let b = body(frame, b'P', WHAT)?;
        let (statement, rest) = split_cstr(b.0).ok_or(WireError::Malformed(WHAT))?;
        let nul = rest
            .iter()
            .position(|&c| c == 0)
            .ok_or(WireError::Malformed(WHAT))?;
        Ok((statement, &rest[..nul]))
    }

    /// # Errors
    /// A frame that is not a well-formed Parse.
    pub fn decode(frame: &'a [u8]) -> Result<Self, WireError> {
        const WHAT: &str = "Parse";
        let mut b = body(frame, b'P', WHAT)?;
        let statement = b.cstr(WHAT)?;
        let query = b.cstr(WHAT)?;
        let n = b.count(WHAT)?;
        let param_types = (0..n)
            .map(|_| Ok(b.i32(WHAT)? as u32))
            .collect::<Result<_, WireError>>()?;
        Ok(Parse {
            statement,
            query,
            param_types,
        })
    }
}

impl<'a> Bind<'a> {
    /// The name of the statement a Bind binds, without decoding its parameters.
    ///
    /// # Errors
    /// A frame that does not begin as a Bind does.
    pub fn statement_of(frame: &'a [u8]) -> Result<&'a str, WireError> {
        const WHAT: &str = "Bind";
        let mut b = body(frame, b'B', WHAT)?;
        b.cstr(WHAT)?;
        b.cstr(WHAT)
    }

    /// # Errors
    /// A frame that is not a well-formed Bind.
    pub fn decode(frame: &'a [u8]) -> Result<Self, WireError> {
        const WHAT: &str = "Bind";
        let mut b = body(frame, b'B', WHAT)?;
        let portal = b.cstr(WHAT)?;
        let statement = b.cstr(WHAT)?;
        let param_binary = b.formats(WHAT)?;
        let n = b.count(WHAT)?;
        let mut params = Vec::with_capacity(n);
        for _ in 0..n {
            let len = b.i32(WHAT)?;
            params.push(if len < 0 {
                None
            } else {
                Some(b.take(len as usize, WHAT)?)
            });
        }
        let result_binary = b.formats(WHAT)?;
        Ok(Bind {
            portal,
            statement,
            param_binary,
            params,
            result_binary,
        })
    }

    /// Whether parameter `i` (0-based) is in binary format.
    pub fn is_binary(&self, i: usize) -> bool {
        match self.param_binary.as_slice() {
            [] => false,
            [one] => *one,
            many => many.get(i).copied().unwrap_or(false),
        }
    }

    /// Appends this Bind to `out` with `extra` parameters, in binary format, after the
    /// client's own (whose formats are spelled out one per parameter).
    pub fn encode_with_extra(&self, extra: &[BytesMut], out: &mut BytesMut) {
        // Cold rows may take hundreds of MB: one allocation, not a doubling series.
        let values: usize = self
            .params
            .iter()
            .flatten()
            .map(|v| v.len() + 4)
            .sum::<usize>()
            + extra.iter().map(|e| e.len() + 4).sum::<usize>();
        out.reserve(values + 64 + self.portal.len() + self.statement.len());
        let at = start(out, b'B');
        out.put_slice(self.portal.as_bytes());
        out.put_u8(0);
        out.put_slice(self.statement.as_bytes());
        out.put_u8(0);
        let count = self.params.len() + extra.len();
        out.put_i16(count as i16);
        for i in 0..self.params.len() {
            out.put_i16(i16::from(self.is_binary(i)));
        }
        for _ in extra {
            out.put_i16(1);
        }
        out.put_i16(count as i16);
        for p in self
            .params
            .iter()
            .copied()
            .chain(extra.iter().map(|e| Some(&e[..])))
        {
            match p {
                Some(v) => {
                    out.put_i32(v.len() as i32);
                    out.put_slice(v);
                }
                None => out.put_i32(-1),
            }
        }
        out.put_i16(self.result_binary.len() as i16);
        for b in &self.result_binary {
            out.put_i16(i16::from(*b));
        }
        finish(out, at);
    }
}

/// The parameter type OIDs of a ParameterDescription (`t`).
///
/// # Errors
/// A malformed frame.
pub fn parameter_types(frame: &[u8]) -> Result<Vec<u32>, WireError> {
    const WHAT: &str = "ParameterDescription";
    let mut b = body(frame, b't', WHAT)?;
    let n = b.count(WHAT)?;
    (0..n).map(|_| Ok(b.i32(WHAT)? as u32)).collect()
}

/// Decodes a Describe (`D`) or Close (`C`) frame's target.
///
/// # Errors
/// A malformed frame or an unknown kind byte.
pub fn target(frame: &[u8], tag: u8) -> Result<Target<'_>, WireError> {
    const WHAT: &str = "Describe or Close";
    let mut b = body(frame, tag, WHAT)?;
    let kind = b.take(1, WHAT)?[0];
    let name = b.cstr(WHAT)?;
    match kind {
        b'S' => Ok(Target::Statement(name)),
        b'P' => Ok(Target::Portal(name)),
        _ => Err(WireError::Malformed(WHAT)),
    }
}

/// The portal an Execute runs.
///
/// # Errors
/// A malformed frame.
pub fn execute_portal(frame: &[u8]) -> Result<&str, WireError> {
    body(frame, b'E', "Execute")?.cstr("Execute")
}

/// A message with no body (ParseComplete `1`, BindComplete `2`, CloseComplete `3`, NoData `n`).
pub fn empty(tag: u8) -> [u8; 5] {
    [tag, 0, 0, 0, 4]
}

fn start(out: &mut BytesMut, tag: u8) -> usize {
    let at = out.len();
    out.put_u8(tag);
    out.put_u32(0);
    at
}

fn finish(out: &mut BytesMut, at: usize) {
    let len = (out.len() - at - 1) as u32;
    out[at + 1..at + 5].copy_from_slice(&len.to_be_bytes());
}

/// ParameterDescription with these type OIDs.
pub fn parameter_description(out: &mut BytesMut, types: &[u32]) {
    let at = start(out, b't');
    out.put_i16(types.len() as i16);
    for t in types {
        out.put_u32(*t);
    }
    finish(out, at);
}

/// The column names of a RowDescription (`T`).
///
/// # Errors
/// A malformed frame.
pub fn row_description_names(frame: &[u8]) -> Result<Vec<String>, WireError> {
    const WHAT: &str = "RowDescription";
    let mut b = body(frame, b'T', WHAT)?;
    let n = b.count(WHAT)?;
    (0..n)
        .map(|_| {
            let name = b.cstr(WHAT)?.to_owned();
            b.take(18, WHAT)?; // table OID, column, type OID, size, typmod, format
            Ok(name)
        })
        .collect()
}

/// RowDescription of one computed column (no table) of type `type_oid`.
pub fn row_description(out: &mut BytesMut, column: &str, type_oid: u32, binary: bool) {
    let at = start(out, b'T');
    out.put_i16(1);
    out.put_slice(column.as_bytes());
    out.put_u8(0);
    out.put_u32(0); // table OID
    out.put_i16(0); // column number
    out.put_u32(type_oid);
    out.put_i16(-1); // varlena
    out.put_i32(-1); // typmod
    out.put_i16(i16::from(binary));
    finish(out, at);
}

/// RowDescription of computed columns (no table): name, type OID, binary.
pub fn row_description_of(out: &mut BytesMut, columns: &[(&str, u32, bool)]) {
    let at = start(out, b'T');
    out.put_i16(columns.len() as i16);
    for (name, type_oid, binary) in columns {
        out.put_slice(name.as_bytes());
        out.put_u8(0);
        out.put_u32(0); // table OID
        out.put_i16(0); // column number
        out.put_u32(*type_oid);
        out.put_i16(if *type_oid == 20 { 8 } else { -1 });
        out.put_i32(-1); // typmod
        out.put_i16(i16::from(*binary));
    }
    finish(out, at);
}

/// DataRow of these values (`None`: NULL).
pub fn data_row_of(out: &mut BytesMut, values: &[Option<Vec<u8>>]) {
    let at = start(out, b'D');
    out.put_i16(values.len() as i16);
    for v in values {
        match v {
            Some(v) => {
                out.put_i32(v.len() as i32);
                out.put_slice(v);
            }
            None => out.put_i32(-1),
        }
    }
    finish(out, at);
}

/// DataRow of one value.
pub fn data_row(out: &mut BytesMut, value: &[u8]) {
    let at = start(out, b'D');
    out.put_i16(1);
    out.put_i32(value.len() as i32);
    out.put_slice(value);
    finish(out, at);
}

/// CommandComplete with `tag` (e.g. `SELECT 1`).
pub fn command_complete(out: &mut BytesMut, tag: &str) {
    let at = start(out, b'C');
    out.put_slice(tag.as_bytes());
    out.put_u8(0);
    finish(out, at);
}

/// A simple Query of `sql`.
pub fn encode_query(out: &mut BytesMut, sql: &str) {
    let at = start(out, b'Q');
    out.put_slice(sql.as_bytes());
    out.put_u8(0);
    finish(out, at);
}

/// Parse of `sql` as statement `name` with these declared parameter types (0 or none:
/// inferred by the server).
pub fn encode_parse(out: &mut BytesMut, name: &str, sql: &str, param_types: &[u32]) {
    let at = start(out, b'P');
    out.put_slice(name.as_bytes());
    out.put_u8(0);
    out.put_slice(sql.as_bytes());
    out.put_u8(0);
    out.put_i16(param_types.len() as i16);
    for t in param_types {
        out.put_u32(*t);
    }
    finish(out, at);
}

/// Close of a statement (`b'S'`) or portal (`b'P'`) named `name`.
pub fn encode_close(out: &mut BytesMut, kind: u8, name: &str) {
    let at = start(out, b'C');
    out.put_u8(kind);
    out.put_slice(name.as_bytes());
    out.put_u8(0);
    finish(out, at);
}

/// Bind of `statement` to `portal` with `params` in binary format, results in binary
/// (`binary_results`) or text.
pub fn encode_bind(
    out: &mut BytesMut,
    portal: &str,
    statement: &str,
    params: &[Option<&[u8]>],
    binary_results: bool,
) {
    out.reserve(
        params
            .iter()
            .map(|p| p.map_or(4, |v| v.len() + 4))
            .sum::<usize>()
            + 64,
    );
    let at = start(out, b'B');
    out.put_slice(portal.as_bytes());
    out.put_u8(0);
    out.put_slice(statement.as_bytes());
    out.put_u8(0);
    out.put_i16(1);
    out.put_i16(1); // every parameter in binary
    out.put_i16(params.len() as i16);
    for p in params {
        match p {
            Some(v) => {
                out.put_i32(v.len() as i32);
                out.put_slice(v);
            }
            None => out.put_i32(-1),
        }
    }
    out.put_i16(1);
    out.put_i16(i16::from(binary_results));
    finish(out, at);
}

/// Execute of `portal`, all rows.
pub fn encode_execute(out: &mut BytesMut, portal: &str) {
    let at = start(out, b'E');
    out.put_slice(portal.as_bytes());
    out.put_u8(0);
    out.put_i32(0);
    finish(out, at);
}

/// The frontend messages that run `sql` once as the unnamed statement and portal with
/// `params` in binary format and results in binary (`binary_results`) or text, answered
/// like a simple Query by
/// ParseComplete, BindComplete, RowDescription or NoData, rows, CommandComplete and
/// ReadyForQuery: Parse, Bind, Describe (portal), Execute, Sync.
pub fn run_unnamed(out: &mut BytesMut, sql: &str, params: &[Option<&[u8]>], binary_results: bool) {
    execute_unnamed(out, sql, params, binary_results);
    out.extend_from_slice(&empty(b'S'));
}

/// [`run_unnamed`] without the Sync, for one statement of several run in one group.
pub fn execute_unnamed(
    out: &mut BytesMut,
    sql: &str,
    params: &[Option<&[u8]>],
    binary_results: bool,
) {
    encode_parse(out, "", sql, &[]);
    encode_bind(out, "", "", params, binary_results);
    let at = start(out, b'D');
    out.put_u8(b'P');
    out.put_u8(0);
    finish(out, at);
    encode_execute(out, "");
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::wire::test_frame as frame;

    #[test]
    fn run_unnamed_round_trips_through_the_decoders() {
        let mut out = BytesMut::new();
        run_unnamed(&mut out, "SELECT $1", &[Some(b"\x01"), None], false);
        let parse_len = u32::from_be_bytes(out[1..5].try_into().unwrap()) as usize;
        let parse = Parse::decode(&out[..1 + parse_len]).unwrap();
        assert_eq!((parse.statement, parse.query), ("", "SELECT $1"));
        let bind_at = 1 + parse_len;
        let bind_len =
            u32::from_be_bytes(out[bind_at + 1..bind_at + 5].try_into().unwrap()) as usize;
        let bind = Bind::decode(&out[bind_at..bind_at + 1 + bind_len]).unwrap();
        assert_eq!((bind.portal, bind.statement), ("", ""));
        assert!(bind.is_binary(0) && bind.is_binary(1));
        assert!(out.ends_with(&empty(b'S')));
    }

    #[test]
    fn parse_and_bind_decode() {
        let mut p = b"s1\0SELECT $1\0".to_vec();
        p.extend_from_slice(&1i16.to_be_bytes());
        p.extend_from_slice(&2205u32.to_be_bytes());
        let f = frame(b'P', &p);
        assert_eq!(
            Parse::decode(&f).unwrap(),
            Parse {
                statement: "s1",
                query: "SELECT $1",
                param_types: vec![2205]
            }
        );
        assert!(Parse::decode(&f[..f.len() - 1]).is_err());
        assert_eq!(
            Parse::decode(&frame(b'P', b"\0select 1\0\0\0"))
                .unwrap()
                .statement,
            ""
        );
        assert!(Parse::decode(&frame(b'P', b"no-terminator")).is_err());

        let mut b = b"p\0s1\0".to_vec();
        b.extend_from_slice(&1i16.to_be_bytes());
        b.extend_from_slice(&1i16.to_be_bytes());
        b.extend_from_slice(&2i16.to_be_bytes());
        b.extend_from_slice(&4i32.to_be_bytes());
        b.extend_from_slice(&[0, 0, 0, 42]);
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.extend_from_slice(&0i16.to_be_bytes());
        let f = frame(b'B', &b);
        let bind = Bind::decode(&f).unwrap();
        assert_eq!((bind.portal, bind.statement), ("p", "s1"));
        assert_eq!(bind.params, vec![Some(&[0u8, 0, 0, 42][..]), None]);
        assert!(bind.is_binary(0) && bind.is_binary(1));
        assert!(bind.result_binary.is_empty());
        assert!(Bind::decode(&f[..f.len() - 3]).is_err());
    }

    #[test]
    fn bind_with_extra_parameters_round_trips() {
        let mut b = b"p\0s1\0".to_vec();
        b.extend_from_slice(&1i16.to_be_bytes());
        b.extend_from_slice(&0i16.to_be_bytes()); // all text
        b.extend_from_slice(&2i16.to_be_bytes());
        b.extend_from_slice(&2i32.to_be_bytes());
        b.extend_from_slice(b"42");
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.extend_from_slice(&1i16.to_be_bytes());
        b.extend_from_slice(&1i16.to_be_bytes()); // binary results
        let f = frame(b'B', &b);
        let bind = Bind::decode(&f).unwrap();
        let mut out = BytesMut::new();
        bind.encode_with_extra(&[BytesMut::from(&b"\x01\x02"[..])], &mut out);
        let again = Bind::decode(&out).unwrap();
        assert_eq!((again.portal, again.statement), ("p", "s1"));
        assert_eq!(again.param_binary, vec![false, false, true]);
        assert_eq!(
            again.params,
            vec![Some(&b"42"[..]), None, Some(&[1u8, 2][..])]
        );
        assert_eq!(again.result_binary, vec![true]);
        let mut none = BytesMut::new();
        bind.encode_with_extra(&[], &mut none);
        assert_eq!(Bind::decode(&none).unwrap().params, bind.params);

        let mut t = BytesMut::new();
        parameter_description(&mut t, &[20, 25]);
        assert_eq!(parameter_types(&t).unwrap(), vec![20, 25]);
        assert!(parameter_types(&t[..t.len() - 1]).is_err());
    }

    #[test]
    fn describe_close_execute_decode() {
        assert_eq!(
            target(&frame(b'D', b"Sname\0"), b'D').unwrap(),
            Target::Statement("name")
        );
        assert_eq!(
            target(&frame(b'C', b"P\0"), b'C').unwrap(),
            Target::Portal("")
        );
        assert!(target(&frame(b'D', b"Xn\0"), b'D').is_err());
        assert_eq!(execute_portal(&frame(b'E', b"p\0\0\0\0\0")).unwrap(), "p");
    }

    #[test]
    fn responses_encode_with_correct_lengths() {
        let mut out = BytesMut::new();
        parameter_description(&mut out, &[2205, 3802]);
        row_description(&mut out, "tier_table", 3802, false);
        data_row(&mut out, b"{}");
        command_complete(&mut out, "SELECT 1");
        let mut rest = &out[..];
        let mut tags = Vec::new();
        while !rest.is_empty() {
            let len = u32::from_be_bytes(rest[1..5].try_into().unwrap()) as usize;
            tags.push(rest[0]);
            rest = &rest[len + 1..];
        }
        assert_eq!(tags, b"tTDC");
        let at = 1 + u32::from_be_bytes(out[1..5].try_into().unwrap()) as usize;
        let len = 1 + u32::from_be_bytes(out[at + 1..at + 5].try_into().unwrap()) as usize;
        assert_eq!(
            row_description_names(&out[at..at + len]).unwrap(),
            ["tier_table"]
        );
        assert!(row_description_names(&out[at..at + len - 1]).is_err());
        assert_eq!(&out[..7], &[b't', 0, 0, 0, 14, 0, 2]);
    }
}
