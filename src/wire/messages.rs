//! The few message bodies coldwire reads or writes itself; every other message is relayed
//! as opaque bytes. Each function takes or returns a whole frame, tag byte included.

use bytes::{BufMut, Bytes, BytesMut};

use super::startup::split_cstr;
use super::WireError;

/// Backend: Authentication request (`R`).
pub const AUTHENTICATION: u8 = b'R';
/// Backend: BackendKeyData (`K`).
pub const BACKEND_KEY_DATA: u8 = b'K';
/// Backend: ParameterStatus (`S`).
pub const PARAMETER_STATUS: u8 = b'S';
/// Backend: ReadyForQuery (`Z`).
pub const READY_FOR_QUERY: u8 = b'Z';
/// Backend: ErrorResponse (`E`).
pub const ERROR_RESPONSE: u8 = b'E';
/// RowDescription.
pub const ROW_DESCRIPTION: u8 = b'T';
/// Backend: EmptyQueryResponse (`I`).
pub const EMPTY_QUERY_RESPONSE: u8 = b'I';
/// Backend: PortalSuspended (`s`).
pub const PORTAL_SUSPENDED: u8 = b's';
/// Backend: NoData (`n`).
pub const NO_DATA: u8 = b'n';
/// Backend: CommandComplete (`C`).
pub const COMMAND_COMPLETE: u8 = b'C';
/// Backend: DataRow (`D`).
pub const DATA_ROW: u8 = b'D';
/// Backend: NotificationResponse (`A`).
pub const NOTIFICATION_RESPONSE: u8 = b'A';
/// Backend: ParameterDescription (`t`).
pub const PARAMETER_DESCRIPTION: u8 = b't';
/// Backend: ParseComplete (`1`).
pub const PARSE_COMPLETE: u8 = b'1';
/// Backend: CloseComplete (`3`).
pub const CLOSE_COMPLETE: u8 = b'3';
/// Backend: BindComplete (`2`).
pub const BIND_COMPLETE: u8 = b'2';
/// Frontend: Bind (`B`).
pub const BIND: u8 = b'B';
/// Frontend: Describe (`D`).
pub const DESCRIBE: u8 = b'D';
/// Frontend: Execute (`E`).
pub const EXECUTE: u8 = b'E';
/// Frontend: Flush (`H`).
pub const FLUSH: u8 = b'H';
/// Frontend: Parse (`P`).
pub const PARSE: u8 = b'P';
/// Frontend: Close (`C`).
pub const CLOSE: u8 = b'C';
/// Frontend: Sync (`S`).
pub const SYNC: u8 = b'S';
/// Frontend: simple Query (`Q`).
pub const QUERY: u8 = b'Q';
/// Frontend: FunctionCall (`F`), answered with its own ReadyForQuery.
pub const FUNCTION_CALL: u8 = b'F';
/// Frontend: Terminate (`X`).
pub const TERMINATE: u8 = b'X';
pub const NOTICE_RESPONSE: u8 = b'N';
/// CopyInResponse (server): a COPY FROM STDIN is under way.
pub const COPY_IN_RESPONSE: u8 = b'G';
/// CopyDone (either direction).
pub const COPY_DONE: u8 = b'c';
/// CopyFail (client).
pub const COPY_FAIL: u8 = b'f';

/// AuthenticationSASL: the request code in an `R` message that lists SASL mechanisms.
const AUTH_SASL: i32 = 10;

/// Severity of an ErrorResponse that coldwire itself sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Fatal,
    /// A NoticeResponse, not an error.
    Notice,
}

impl Severity {
    fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "ERROR",
            Severity::Fatal => "FATAL",
            Severity::Notice => "NOTICE",
        }
    }
}

/// An ErrorResponse written by coldwire (errors from Postgres are relayed untouched).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorFields {
    pub severity: Severity,
    /// Five-character SQLSTATE.
    pub code: String,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

impl ErrorFields {
    /// The ErrorResponse frame (a NoticeResponse for [`Severity::Notice`]).
    pub fn encode(&self) -> BytesMut {
        let mut out = BytesMut::with_capacity(64 + self.message.len());
        out.put_u8(if self.severity == Severity::Notice {
            NOTICE_RESPONSE
        } else {
            ERROR_RESPONSE
        });
        out.put_u32(0);
        let mut field = |tag: u8, value: &str| {
            out.put_u8(tag);
            // A NUL inside a field would end it early; Postgres never sends one either.
            out.put_slice(value.replace('\0', " ").as_bytes());
            out.put_u8(0);
        };
        field(b'S', self.severity.as_str());
        field(b'V', self.severity.as_str());
        field(b'C', &self.code);
        field(b'M', &self.message);
        if let Some(detail) = &self.detail {
            field(b'D', detail);
        }
        if let Some(hint) = &self.hint {
            field(b'H', hint);
        }
        out.put_u8(0);
        patch_len(&mut out);
        out
    }

    /// Decodes an ErrorResponse frame's severity, code, message, detail and hint.
    ///
    /// # Errors
    /// A frame that is not a well-formed ErrorResponse.
    pub fn decode(frame: &[u8]) -> Result<Self, WireError> {
        const WHAT: &str = "ErrorResponse";
        let mut rest = body(frame, ERROR_RESPONSE).ok_or(WireError::Malformed(WHAT))?;
        let mut fields = ErrorFields {
            severity: Severity::Error,
            code: String::new(),
            message: String::new(),
            detail: None,
            hint: None,
        };
        loop {
            let (&tag, after) = rest.split_first().ok_or(WireError::Malformed(WHAT))?;
            if tag == 0 {
                break;
            }
            let (value, after) = split_cstr(after).ok_or(WireError::Malformed(WHAT))?;
            match tag {
                b'V' => {
                    fields.severity = if value == "FATAL" {
                        Severity::Fatal
                    } else {
                        Severity::Error
                    }
                }
                b'C' => fields.code = value.to_owned(),
                b'M' => fields.message = value.to_owned(),
                b'D' => fields.detail = Some(value.to_owned()),
                b'H' => fields.hint = Some(value.to_owned()),
                _ => {}
            }
            rest = after;
        }
        Ok(fields)
    }
}

/// The values of a DataRow frame (None: NULL).
///
/// # Errors
/// A frame that is not a well-formed DataRow.
pub fn data_row_values(frame: &[u8]) -> Result<Vec<Option<Vec<u8>>>, WireError> {
    const WHAT: &str = "DataRow";
    let mut rest = body(frame, DATA_ROW).ok_or(WireError::Malformed(WHAT))?;
    let (count, after) = rest
        .split_first_chunk::<2>()
        .ok_or(WireError::Malformed(WHAT))?;
    rest = after;
    let mut values = Vec::with_capacity(usize::from(u16::from_be_bytes(*count)));
    for _ in 0..u16::from_be_bytes(*count) {
        let (len, after) = rest
            .split_first_chunk::<4>()
            .ok_or(WireError::Malformed(WHAT))?;
        rest = after;
        let len = i32::from_be_bytes(*len);
        if len < 0 {
            values.push(None);
            continue;
        }
        let len = len as usize;
        if rest.len() < len {
            return Err(WireError::Malformed(WHAT));
        }
        values.push(Some(rest[..len].to_vec()));
        rest = &rest[len..];
    }
    Ok(values)
}

/// The transaction status byte of a ReadyForQuery frame (`I`, `T` or `E`).
pub fn ready_for_query_status(frame: &[u8]) -> Option<u8> {
    match body(frame, READY_FOR_QUERY)? {
        [status @ (b'I' | b'T' | b'E')] => Some(*status),
        _ => None,
    }
}

/// A ReadyForQuery frame.
pub fn encode_ready_for_query(status: u8) -> [u8; 6] {
    [READY_FOR_QUERY, 0, 0, 0, 5, status]
}

/// Name and value of a ParameterStatus frame.
pub fn parameter_status(frame: &[u8]) -> Option<(&str, &str)> {
    let rest = body(frame, PARAMETER_STATUS)?;
    let (name, rest) = split_cstr(rest)?;
    let (value, rest) = split_cstr(rest)?;
    rest.is_empty().then_some((name, value))
}

/// A BackendKeyData frame's process id and secret.
pub fn backend_key_data(frame: &[u8]) -> Option<(i32, Bytes)> {
    let rest = body(frame, BACKEND_KEY_DATA)?;
    if rest.len() < 8 {
        return None;
    }
    let pid = i32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
    Some((pid, Bytes::copy_from_slice(&rest[4..])))
}

/// A BackendKeyData frame.
pub fn encode_backend_key_data(pid: i32, secret: &[u8]) -> BytesMut {
    let mut out = BytesMut::with_capacity(9 + secret.len());
    out.put_u8(BACKEND_KEY_DATA);
    out.put_u32((8 + secret.len()) as u32);
    out.put_i32(pid);
    out.put_slice(secret);
    out
}

/// For an AuthenticationSASL frame, the same request without channel-binding mechanisms
/// (`*-PLUS`): the TLS channel the client sees ends at coldwire, so binding to it cannot
/// succeed upstream. `None` for every other frame, which is then relayed unchanged.
pub fn sasl_without_channel_binding(frame: &[u8]) -> Option<BytesMut> {
    let rest = body(frame, AUTHENTICATION)?;
    let (code, mut rest) = rest.split_first_chunk::<4>()?;
    if i32::from_be_bytes(*code) != AUTH_SASL {
        return None;
    }
    let mut mechanisms = Vec::new();
    while let Some((mechanism, after)) = split_cstr(rest) {
        if mechanism.is_empty() {
            break;
        }
        mechanisms.push(mechanism);
        rest = after;
    }
    if !mechanisms.iter().any(|m| m.ends_with("-PLUS")) {
        return None;
    }
    let mut out = BytesMut::with_capacity(frame.len());
    out.put_u8(AUTHENTICATION);
    out.put_u32(0);
    out.put_i32(AUTH_SASL);
    for mechanism in mechanisms.iter().filter(|m| !m.ends_with("-PLUS")) {
        out.put_slice(mechanism.as_bytes());
        out.put_u8(0);
    }
    out.put_u8(0);
    patch_len(&mut out);
    Some(out)
}

/// The body of a whole frame whose tag is `tag`.
/// One field of an ErrorResponse frame (`tag`: `b'C'` code, `b'n'` constraint name, …), or
/// `None` when the frame is no well-formed ErrorResponse or lacks the field.
pub fn error_field(frame: &[u8], tag: u8) -> Option<&str> {
    let mut rest = body(frame, ERROR_RESPONSE)?;
    loop {
        let (&t, after) = rest.split_first()?;
        if t == 0 {
            return None;
        }
        let (value, after) = split_cstr(after)?;
        if t == tag {
            return Some(value);
        }
        rest = after;
    }
}

fn body(frame: &[u8], tag: u8) -> Option<&[u8]> {
    let (&t, rest) = frame.split_first()?;
    let (len, body) = rest.split_first_chunk::<4>()?;
    (t == tag && u32::from_be_bytes(*len) as usize == body.len() + 4).then_some(body)
}

/// Writes the length field of the frame in `out` (bytes 1..5) from its size.
fn patch_len(out: &mut BytesMut) {
    let len = (out.len() - 1) as u32;
    out[1..5].copy_from_slice(&len.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::wire::test_frame as frame;

    #[test]
    fn data_rows_decode_values_and_nulls() {
        let mut body = 2u16.to_be_bytes().to_vec();
        body.extend_from_slice(&2i32.to_be_bytes());
        body.extend_from_slice(b"ab");
        body.extend_from_slice(&(-1i32).to_be_bytes());
        let f = frame(b'D', &body);
        assert_eq!(
            data_row_values(&f).unwrap(),
            vec![Some(b"ab".to_vec()), None]
        );
        assert!(data_row_values(&f[..f.len() - 5]).is_err());
        assert!(data_row_values(&frame(b'D', &[0])).is_err());
    }

    #[test]
    fn error_response_round_trips() {
        let e = ErrorFields {
            severity: Severity::Fatal,
            code: "08P01".into(),
            message: "bad\0thing".into(),
            detail: Some("d".into()),
            hint: None,
        };
        let bytes = e.encode();
        assert_eq!(
            u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize,
            bytes.len() - 1
        );
        let back = ErrorFields::decode(&bytes).unwrap();
        assert_eq!(
            back,
            ErrorFields {
                message: "bad thing".into(),
                ..e
            }
        );
        assert!(ErrorFields::decode(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn ready_for_query_round_trips() {
        for s in [b'I', b'T', b'E'] {
            assert_eq!(ready_for_query_status(&encode_ready_for_query(s)), Some(s));
        }
        assert_eq!(ready_for_query_status(&frame(b'Z', b"X")), None);
        assert_eq!(ready_for_query_status(&frame(b'Z', b"II")), None);
    }

    #[test]
    fn parameter_status_decodes() {
        assert_eq!(
            parameter_status(&frame(b'S', b"client_encoding\0UTF8\0")),
            Some(("client_encoding", "UTF8"))
        );
        assert_eq!(
            parameter_status(&frame(b'S', b"client_encoding\0UTF8")),
            None
        );
    }

    #[test]
    fn backend_key_data_round_trips() {
        let f = encode_backend_key_data(77, &[1, 2, 3, 4]);
        assert_eq!(
            backend_key_data(&f),
            Some((77, Bytes::from_static(&[1, 2, 3, 4])))
        );
        assert_eq!(backend_key_data(&f[..f.len() - 1]), None);
    }

    #[test]
    fn sasl_plus_mechanisms_are_removed() {
        let mut body = 10i32.to_be_bytes().to_vec();
        body.extend_from_slice(b"SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0");
        let rewritten = sasl_without_channel_binding(&frame(b'R', &body)).unwrap();
        let mut expected = 10i32.to_be_bytes().to_vec();
        expected.extend_from_slice(b"SCRAM-SHA-256\0\0");
        assert_eq!(&rewritten[..], &frame(b'R', &expected)[..]);
        // nothing to strip, or not a SASL request: relayed as is
        assert!(sasl_without_channel_binding(&frame(b'R', &expected)).is_none());
        assert!(sasl_without_channel_binding(&frame(b'R', &0i32.to_be_bytes())).is_none());
    }
}
