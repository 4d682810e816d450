//! A raw protocol client for tests that must send exactly the bytes they choose:
//! pipelines, malformed frames, garbage.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One backend message: tag and body.
#[derive(Debug, Clone)]
pub struct Msg {
    pub tag: u8,
    pub body: Vec<u8>,
}

impl Msg {
    /// A field of an ErrorResponse or NoticeResponse (`b'C'` for the SQLSTATE, …).
    pub fn field(&self, code: u8) -> Option<String> {
        let mut rest = &self.body[..];
        while let Some((&t, after)) = rest.split_first() {
            if t == 0 {
                break;
            }
            let end = after.iter().position(|&b| b == 0)?;
            if t == code {
                return Some(String::from_utf8_lossy(&after[..end]).into_owned());
            }
            rest = &after[end + 1..];
        }
        None
    }
}

/// A frame: tag, length, body.
pub fn frame(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![tag];
    v.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// A StartupMessage for protocol 3.0.
pub fn startup(user: &str, database: &str) -> Vec<u8> {
    let mut body = vec![0, 3, 0, 0];
    for (k, v) in [("user", user), ("database", database)] {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut v = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    v.extend_from_slice(&body);
    v
}

/// Parse (named statement, no parameter types).
pub fn parse(name: &str, sql: &str) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(name.as_bytes());
    b.push(0);
    b.extend_from_slice(sql.as_bytes());
    b.push(0);
    b.extend_from_slice(&0u16.to_be_bytes());
    frame(b'P', &b)
}

/// Bind of `statement` to the unnamed portal with text parameters, text results.
pub fn bind(statement: &str, params: &[&str]) -> Vec<u8> {
    let mut b = vec![0];
    b.extend_from_slice(statement.as_bytes());
    b.push(0);
    b.extend_from_slice(&0u16.to_be_bytes());
    b.extend_from_slice(&(params.len() as u16).to_be_bytes());
    for p in params {
        b.extend_from_slice(&(p.len() as i32).to_be_bytes());
        b.extend_from_slice(p.as_bytes());
    }
    b.extend_from_slice(&0u16.to_be_bytes());
    frame(b'B', &b)
}

/// Execute of the unnamed portal, all rows.
pub fn execute() -> Vec<u8> {
    frame(b'E', &[0, 0, 0, 0, 0])
}

/// Sync.
pub fn sync() -> Vec<u8> {
    frame(b'S', &[])
}

/// A simple Query.
pub fn query(sql: &str) -> Vec<u8> {
    let mut b = sql.as_bytes().to_vec();
    b.push(0);
    frame(b'Q', &b)
}

/// A raw connection.
pub struct RawConn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl RawConn {
    pub async fn connect(addr: SocketAddr) -> RawConn {
        RawConn {
            stream: TcpStream::connect(addr).await.expect("connect"),
            buf: Vec::new(),
        }
    }

    /// Connects and completes a trust-auth startup as `postgres`.
    pub async fn ready(addr: SocketAddr, database: &str) -> RawConn {
        let mut c = Self::connect(addr).await;
        c.send(&startup("postgres", database)).await;
        let msgs = c.until_ready().await;
        assert!(
            msgs.iter().any(|m| m.tag == b'R'),
            "no authentication message: {msgs:?}"
        );
        c
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("send");
    }

    /// Sends, ignoring failure (the peer may already have closed).
    pub async fn try_send(&mut self, bytes: &[u8]) -> bool {
        self.stream.write_all(bytes).await.is_ok()
    }

    /// The next backend message, or `None` at EOF (or after 10 s).
    pub async fn next(&mut self) -> Option<Msg> {
        loop {
            if self.buf.len() >= 5 {
                let len = u32::from_be_bytes(self.buf[1..5].try_into().unwrap()) as usize;
                if self.buf.len() > len {
                    let body = self.buf[5..len + 1].to_vec();
                    let tag = self.buf[0];
                    self.buf.drain(..len + 1);
                    return Some(Msg { tag, body });
                }
            }
            let mut chunk = [0u8; 8192];
            match tokio::time::timeout(Duration::from_secs(10), self.stream.read(&mut chunk)).await
            {
                Ok(Ok(n)) if n > 0 => self.buf.extend_from_slice(&chunk[..n]),
                _ => return None,
            }
        }
    }

    /// Raw bytes until EOF (for one-byte answers like SSLRequest's).
    pub async fn read_byte(&mut self) -> Option<u8> {
        let mut b = [0u8; 1];
        match tokio::time::timeout(Duration::from_secs(10), self.stream.read(&mut b)).await {
            Ok(Ok(1)) => Some(b[0]),
            _ => None,
        }
    }

    /// Messages up to and including ReadyForQuery; panics on EOF first.
    pub async fn until_ready(&mut self) -> Vec<Msg> {
        let mut out = Vec::new();
        loop {
            let m = self
                .next()
                .await
                .unwrap_or_else(|| panic!("connection closed before ReadyForQuery: {out:?}"));
            let done = m.tag == b'Z';
            out.push(m);
            if done {
                return out;
            }
        }
    }

    /// Messages until the peer closes the connection.
    pub async fn until_closed(&mut self) -> Vec<Msg> {
        let mut out = Vec::new();
        while let Some(m) = self.next().await {
            out.push(m);
        }
        out
    }
}

/// The tags of `msgs` as a string, e.g. "12DCZ".
pub fn tags(msgs: &[Msg]) -> String {
    msgs.iter().map(|m| m.tag as char).collect()
}
