//! Sans-IO splitter of the Postgres message stream: finds frame boundaries from the
//! five-byte header and never decodes a body it was not asked to inspect.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::{Buf, BytesMut};

use super::WireError;

/// Tag byte plus the four-byte length that every post-startup message starts with.
pub const HEADER_LEN: usize = 5;

/// What the caller should do with the front of its buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Forward the next `n` bytes unchanged: a whole frame, or the part of a streamed
    /// frame that has arrived so far.
    Forward(usize),
    /// A whole frame of an inspected type is at the front; `len` counts the tag byte too.
    Inspect { tag: u8, len: usize },
    /// Nothing can be forwarded until more bytes arrive.
    NeedMore,
}

/// Tracks where the next frame starts in one direction of a connection.
///
/// Frames of types the caller does not inspect are streamed: their bytes are forwarded as
/// they arrive, so a 500 MB DataRow or CopyData costs no more memory than a read buffer.
/// Inspected frames are held until complete; `max_message_bytes` bounds them and every
/// other frame's declared length.
#[derive(Debug, Clone)]
pub struct FrameScanner {
    /// Bytes of a streamed frame that are still to come.
    remaining: usize,
    max_message_bytes: usize,
    inspected: [bool; 256],
    /// Hold every frame whole, whatever its type.
    inspect_all: bool,
    streamed: Arc<AtomicBool>,
}

impl FrameScanner {
    /// A scanner that stops for whole frames whose tag is in `inspected_tags`.
    pub fn new(max_message_bytes: usize, inspected_tags: &[u8]) -> Self {
        let mut inspected = [false; 256];
        for &tag in inspected_tags {
            inspected[usize::from(tag)] = true;
        }
        Self {
            remaining: 0,
            max_message_bytes,
            inspected,
            inspect_all: false,
            streamed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Starts or stops holding every frame whole (while coldwire consumes responses of its
    /// own), without changing the set of inspected types.
    pub fn set_inspect_all(&mut self, all: bool) {
        self.inspect_all = all;
    }

    /// Whether frames of type `tag` are held for inspection.
    pub fn is_inspected(&self, tag: u8) -> bool {
        self.inspect_all || self.inspected[usize::from(tag)]
    }

    /// Starts or stops holding whole frames of type `tag` for inspection.
    pub fn set_inspected(&mut self, tag: u8, inspected: bool) {
        self.inspected[usize::from(tag)] = inspected;
    }

    /// True when the next byte of the stream starts a new frame, so a message of our own
    /// (an ErrorResponse, say) can be inserted without corrupting the stream.
    pub fn at_boundary(&self) -> bool {
        self.remaining == 0
    }

    /// Looks at the front of `buf` and says what to do with it.
    ///
    /// # Errors
    /// A declared length below four or above `max_message_bytes`: the stream cannot be
    /// trusted past this point.
    pub fn next(&mut self, buf: &[u8]) -> Result<Step, WireError> {
        if self.remaining > 0 {
            if buf.is_empty() {
                return Ok(Step::NeedMore);
            }
            let n = self.remaining.min(buf.len());
            self.remaining -= n;
            return Ok(Step::Forward(n));
        }
        if buf.len() < HEADER_LEN {
            return Ok(Step::NeedMore);
        }
        let tag = buf[0];
        let declared = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        if declared < 4 {
            return Err(WireError::BadLength { tag, len: declared });
        }
        if declared > self.max_message_bytes {
            return Err(WireError::Oversized {
                tag,
                len: declared,
                max: self.max_message_bytes,
            });
        }
        let total = declared + 1;
        if self.is_inspected(tag) {
            if buf.len() >= total {
                Ok(Step::Inspect { tag, len: total })
            } else {
                Ok(Step::NeedMore)
            }
        } else {
            let n = total.min(buf.len());
            self.remaining = total - n;
            Ok(Step::Forward(n))
        }
    }

    /// Moves every forwardable byte of `input` into `out`, calling `inspect` with each whole
    /// inspected frame (tag byte included); `inspect` appends to `out` what should go on in
    /// its place (the frame itself, a rewrite, or nothing).
    ///
    /// # Errors
    /// A framing error from [`FrameScanner::next`], or whatever `inspect` returns.
    pub fn drain<E, F>(
        &mut self,
        input: &mut BytesMut,
        out: &mut BytesMut,
        mut inspect: F,
    ) -> Result<(), E>
    where
        E: From<WireError>,
        F: FnMut(u8, &[u8], &mut BytesMut) -> Result<(), E>,
    {
        let stopped: Option<()> = self.drain_until(input, out, |tag, frame, out| {
            inspect(tag, frame, out).map(|()| None)
        })?;
        debug_assert!(stopped.is_none());
        Ok(())
    }

    /// Like [`FrameScanner::drain`], but `inspect` may stop the drain by returning
    /// `Some(value)`: the frame it was given has then been consumed, and bytes after it stay
    /// in `input` for the next call.
    ///
    /// # Errors
    /// A framing error from [`FrameScanner::next`], or whatever `inspect` returns.
    pub fn drain_until<T, E, F>(
        &mut self,
        input: &mut BytesMut,
        out: &mut BytesMut,
        mut inspect: F,
    ) -> Result<Option<T>, E>
    where
        E: From<WireError>,
        F: FnMut(u8, &[u8], &mut BytesMut) -> Result<Option<T>, E>,
    {
        loop {
            match self.next(input)? {
                Step::Forward(n) => {
                    out.extend_from_slice(&input[..n]);
                    input.advance(n);
                    self.streamed.store(true, Ordering::Relaxed);
                }
                Step::Inspect { tag, len } => {
                    let frame = input.split_to(len);
                    if let Some(stop) = inspect(tag, &frame, out)? {
                        return Ok(Some(stop));
                    }
                }
                Step::NeedMore => return Ok(None),
            }
        }
    }

    /// A flag the scanner sets whenever it forwards bytes of a frame it does not inspect;
    /// whoever holds it may clear it (a session clears it at each Sync to know whether
    /// anything went upstream since).
    pub fn streamed_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.streamed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::wire::test_frame as frame;

    #[test]
    fn streams_uninspected_frames_as_bytes_arrive() {
        let mut s = FrameScanner::new(1 << 20, b"Z");
        let f = frame(b'D', &[7u8; 100]);
        assert_eq!(s.next(&f[..3]).unwrap(), Step::NeedMore);
        assert_eq!(s.next(&f[..40]).unwrap(), Step::Forward(40));
        assert!(!s.at_boundary());
        assert_eq!(s.next(&f[40..]).unwrap(), Step::Forward(f.len() - 40));
        assert!(s.at_boundary());
    }

    #[test]
    fn holds_inspected_frames_until_whole() {
        let mut s = FrameScanner::new(1 << 20, b"Z");
        let f = frame(b'Z', b"I");
        assert_eq!(s.next(&f[..5]).unwrap(), Step::NeedMore);
        assert_eq!(s.next(&f).unwrap(), Step::Inspect { tag: b'Z', len: 6 });
    }

    #[test]
    fn rejects_short_and_oversized_lengths() {
        let mut s = FrameScanner::new(100, b"");
        assert!(matches!(
            s.next(&[b'Q', 0, 0, 0, 3]),
            Err(WireError::BadLength { tag: b'Q', len: 3 })
        ));
        let mut s = FrameScanner::new(100, b"");
        assert!(matches!(
            s.next(&[b'Q', 0, 0, 0, 101]),
            Err(WireError::Oversized { len: 101, .. })
        ));
        // exactly the limit is fine
        let mut s = FrameScanner::new(100, b"");
        assert_eq!(s.next(&[b'Q', 0, 0, 0, 100]).unwrap(), Step::Forward(5));
    }

    #[test]
    fn drain_rewrites_inspected_and_copies_the_rest() {
        let mut s = FrameScanner::new(1 << 20, b"K");
        let mut input = BytesMut::new();
        input.extend_from_slice(&frame(b'S', b"a\0b\0"));
        input.extend_from_slice(&frame(b'K', &[1, 2, 3, 4, 5, 6, 7, 8]));
        input.extend_from_slice(&frame(b'D', b"0123456789")[..8]);
        let mut out = BytesMut::new();
        s.drain::<WireError, _>(&mut input, &mut out, |tag, f, out| {
            assert_eq!(tag, b'K');
            assert_eq!(f.len(), 13);
            out.extend_from_slice(&frame(b'K', &[9; 8]));
            Ok(())
        })
        .unwrap();
        let mut expected = frame(b'S', b"a\0b\0");
        expected.extend_from_slice(&frame(b'K', &[9; 8]));
        expected.extend_from_slice(&frame(b'D', b"0123456789")[..8]);
        assert_eq!(&out[..], &expected[..]);
        assert!(input.is_empty());
        assert!(!s.at_boundary());
    }
}
