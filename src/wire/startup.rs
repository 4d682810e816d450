//! The untagged packets a connection starts with: SSLRequest, GSSENCRequest,
//! CancelRequest and StartupMessage (sans-IO decode and encode).

use bytes::{BufMut, Bytes, BytesMut};

use super::WireError;

/// Protocol "version" of an SSLRequest (1234.5679).
pub const SSL_REQUEST_CODE: u32 = 80_877_103;
/// Protocol "version" of a GSSENCRequest (1234.5680).
pub const GSSENC_REQUEST_CODE: u32 = 80_877_104;
/// Protocol "version" of a CancelRequest (1234.5678).
pub const CANCEL_REQUEST_CODE: u32 = 80_877_102;
/// Postgres refuses startup packets above this size (`MAX_STARTUP_PACKET_LENGTH`); so do we.
pub const MAX_STARTUP_PACKET_BYTES: usize = 10_000;
/// Protocol 3.2 allows cancel secrets of up to 256 bytes.
const MAX_CANCEL_SECRET_BYTES: usize = 256;

/// One decoded initial packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitialPacket {
    SslRequest,
    GssEncRequest,
    Cancel(CancelKey),
    Startup(StartupMessage),
}

/// A backend's cancel key: process id and secret (4 bytes in protocol 3.0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelKey {
    pub pid: i32,
    pub secret: Bytes,
}

impl CancelKey {
    /// The CancelRequest packet that presents this key.
    pub fn encode_cancel_request(&self) -> BytesMut {
        let mut out = BytesMut::with_capacity(12 + self.secret.len());
        out.put_u32((12 + self.secret.len()) as u32);
        out.put_u32(CANCEL_REQUEST_CODE);
        out.put_i32(self.pid);
        out.put_slice(&self.secret);
        out
    }
}

/// A StartupMessage: protocol version and the parameters in the order the client sent them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartupMessage {
    pub major: u16,
    pub minor: u16,
    pub params: Vec<(String, String)>,
}

impl StartupMessage {
    /// The value of parameter `name`, if the client sent it.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Sets `name` to `value`, replacing an existing value.
    pub fn set_param(&mut self, name: &str, value: &str) {
        match self.params.iter_mut().find(|(k, _)| k == name) {
            Some(slot) => slot.1 = value.to_owned(),
            None => self.params.push((name.to_owned(), value.to_owned())),
        }
    }

    /// The packet bytes, length prefix included.
    pub fn encode(&self) -> BytesMut {
        let mut out = BytesMut::with_capacity(64);
        out.put_u32(0);
        out.put_u16(self.major);
        out.put_u16(self.minor);
        for (k, v) in &self.params {
            out.put_slice(k.as_bytes());
            out.put_u8(0);
            out.put_slice(v.as_bytes());
            out.put_u8(0);
        }
        out.put_u8(0);
        let len = out.len() as u32;
        out[..4].copy_from_slice(&len.to_be_bytes());
        out
    }
}

/// Decodes the packet at the front of `buf`: `Ok(None)` while it is incomplete, else the
/// packet and the number of bytes it took.
///
/// # Errors
/// A length outside 8..=10000, an unknown protocol major version (0A000 upstream of us),
/// or a body that is not what its code says.
pub fn decode_initial(buf: &[u8]) -> Result<Option<(InitialPacket, usize)>, WireError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if !(8..=MAX_STARTUP_PACKET_BYTES).contains(&len) {
        return Err(WireError::BadStartupLength(len));
    }
    if buf.len() < len {
        return Ok(None);
    }
    let code = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
    let body = &buf[8..len];
    let packet = match code {
        SSL_REQUEST_CODE if body.is_empty() => InitialPacket::SslRequest,
        GSSENC_REQUEST_CODE if body.is_empty() => InitialPacket::GssEncRequest,
        SSL_REQUEST_CODE | GSSENC_REQUEST_CODE => {
            return Err(WireError::Malformed("SSLRequest or GSSENCRequest"))
        }
        CANCEL_REQUEST_CODE => {
            if body.len() < 8 || body.len() > 4 + MAX_CANCEL_SECRET_BYTES {
                return Err(WireError::Malformed("CancelRequest"));
            }
            let pid = i32::from_be_bytes([body[0], body[1], body[2], body[3]]);
            InitialPacket::Cancel(CancelKey {
                pid,
                secret: Bytes::copy_from_slice(&body[4..]),
            })
        }
        _ => {
            let (major, minor) = ((code >> 16) as u16, (code & 0xffff) as u16);
            if major != 3 {
                return Err(WireError::UnsupportedProtocol { major, minor });
            }
            InitialPacket::Startup(StartupMessage {
                major,
                minor,
                params: decode_params(body)?,
            })
        }
    };
    Ok(Some((packet, len)))
}

/// Startup parameters: name/value C-string pairs ended by one more NUL.
fn decode_params(body: &[u8]) -> Result<Vec<(String, String)>, WireError> {
    const WHAT: &str = "startup packet parameters";
    let Some((&0, mut rest)) = body.split_last() else {
        return Err(WireError::Malformed(WHAT));
    };
    let mut params = Vec::new();
    while !rest.is_empty() {
        let (name, after) = split_cstr(rest).ok_or(WireError::Malformed(WHAT))?;
        let (value, after) = split_cstr(after).ok_or(WireError::Malformed(WHAT))?;
        if name.is_empty() {
            return Err(WireError::Malformed(WHAT));
        }
        params.push((name.to_owned(), value.to_owned()));
        rest = after;
    }
    Ok(params)
}

/// Splits one NUL-terminated UTF-8 string off the front of `buf`.
pub(crate) fn split_cstr(buf: &[u8]) -> Option<(&str, &[u8])> {
    let nul = buf.iter().position(|&b| b == 0)?;
    let s = std::str::from_utf8(&buf[..nul]).ok()?;
    Some((s, &buf[nul + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn startup() -> StartupMessage {
        StartupMessage {
            major: 3,
            minor: 0,
            params: vec![
                ("user".into(), "alice".into()),
                ("options".into(), "-c search_path=a,b".into()),
            ],
        }
    }

    #[test]
    fn startup_round_trips_and_consumes_exactly_its_bytes() {
        let msg = startup();
        let mut bytes = msg.encode().to_vec();
        bytes.extend_from_slice(b"Q\0\0\0\x05x");
        let (decoded, used) = decode_initial(&bytes).unwrap().unwrap();
        assert_eq!(decoded, InitialPacket::Startup(msg.clone()));
        assert_eq!(used, msg.encode().len());
    }

    #[test]
    fn truncated_startup_waits_for_more() {
        let bytes = startup().encode();
        for cut in 0..bytes.len() {
            assert_eq!(decode_initial(&bytes[..cut]).unwrap(), None, "cut at {cut}");
        }
    }

    #[test]
    fn cancel_request_round_trips() {
        let key = CancelKey {
            pid: 4242,
            secret: Bytes::from_static(&[1, 2, 3, 4]),
        };
        let bytes = key.encode_cancel_request();
        assert_eq!(
            decode_initial(&bytes).unwrap(),
            Some((InitialPacket::Cancel(key), 16))
        );
    }

    #[test]
    fn ssl_and_gss_requests() {
        let ssl = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
        assert_eq!(
            decode_initial(&ssl).unwrap(),
            Some((InitialPacket::SslRequest, 8))
        );
        let gss = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30];
        assert_eq!(
            decode_initial(&gss).unwrap(),
            Some((InitialPacket::GssEncRequest, 8))
        );
    }

    #[test]
    fn bad_inputs_are_errors() {
        // HTTP sent to a Postgres port: "GET " read as a length.
        assert!(matches!(
            decode_initial(b"GET / HTTP/1.1\r\n"),
            Err(WireError::BadStartupLength(_))
        ));
        assert!(matches!(
            decode_initial(&[0, 0, 0, 4]),
            Err(WireError::BadStartupLength(4))
        ));
        let v2 = [0, 0, 0, 9, 0, 2, 0, 0, 0];
        assert!(matches!(
            decode_initial(&v2),
            Err(WireError::UnsupportedProtocol { major: 2, minor: 0 })
        ));
        // parameters without the final NUL
        let mut bad = startup().encode();
        let n = bad.len();
        bad[n - 1] = b'x';
        assert!(matches!(decode_initial(&bad), Err(WireError::Malformed(_))));
        // a name without a value
        let mut pkt = vec![0, 0, 0, 0, 0, 3, 0, 0];
        pkt.extend_from_slice(b"user\0");
        pkt.push(0);
        let len = pkt.len() as u32;
        pkt[..4].copy_from_slice(&len.to_be_bytes());
        assert!(matches!(decode_initial(&pkt), Err(WireError::Malformed(_))));
        // invalid UTF-8
        let mut pkt = vec![0, 0, 0, 0, 0, 3, 0, 0, b'u', 0, 0xff, 0, 0];
        let len = pkt.len() as u32;
        pkt[..4].copy_from_slice(&len.to_be_bytes());
        assert!(matches!(decode_initial(&pkt), Err(WireError::Malformed(_))));
    }
}
