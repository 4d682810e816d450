//! The Postgres wire protocol, sans-IO: frame splitting, the startup packets, the few
//! message bodies coldwire reads or writes, plus TLS setup and the cancel-key registry.

pub mod cancel;
pub mod extended;
pub mod frame;
pub mod messages;
pub mod startup;
pub mod tls;

pub use frame::{FrameScanner, Step};

/// A violation of the wire protocol by a peer.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("message of type {} declares length {len}, below the minimum of 4", tag_name(*.tag))]
    BadLength { tag: u8, len: usize },
    #[error("message of type {} declares {len} bytes, above the limit of {max} (max_message_bytes)", tag_name(*.tag))]
    Oversized { tag: u8, len: usize, max: usize },
    #[error("invalid startup packet length {0} (expected 8 to 10000 bytes)")]
    BadStartupLength(usize),
    #[error("unsupported frontend protocol {major}.{minor}: coldwire supports protocol 3")]
    UnsupportedProtocol { major: u16, minor: u16 },
    #[error("malformed {0}")]
    Malformed(&'static str),
}

/// A message tag as people write it: `'Q'`, or `0x00` when it is not printable.
fn tag_name(tag: u8) -> String {
    if tag.is_ascii_graphic() {
        format!("'{}'", tag as char)
    } else {
        format!("0x{tag:02x}")
    }
}

/// A whole frame (tag, length, body), for unit tests of the codec and its users.
#[cfg(test)]
pub(crate) fn test_frame(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![tag];
    v.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    v.extend_from_slice(body);
    v
}
