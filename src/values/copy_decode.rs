//! Streaming decoder of `COPY … TO STDOUT (FORMAT binary)` output into Arrow record batches
//! of at most N rows, sans-IO: bytes in (chunk boundaries anywhere), batches out.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use super::decode_value::ColumnBuilder;
use super::error::ColdError;
use super::types::{arrow_schema, ColdColumn};

/// The 11-byte signature that opens every binary COPY stream.
pub const COPY_SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";
/// Signature, flags and header-extension length.
pub const COPY_HEADER_LEN: usize = 19;
/// Flags bit 16: "If 1, OIDs are included in the data; if 0, not."
const FLAG_OIDS: u32 = 1 << 16;
/// "Bits 16–31 are reserved to denote critical file format issues; a reader should abort if
/// it finds an unexpected bit set in this range."
const CRITICAL_FLAGS: u32 = 0xffff_0000;
/// Header extensions are skipped; one longer than this is taken for garbage.
const MAX_HEADER_EXTENSION_BYTES: usize = 1 << 20;
/// A batch is cut early once its tuples reach this many bytes, so no Utf8/Binary column
/// (i32 offsets, ≤ 2 GiB) can overflow and a batch's memory stays bounded whatever N is.
/// (Numeric text is at most ~2.1× its binary size.)
pub const MAX_BATCH_BYTES: usize = 256 << 20;
/// Builders preallocate at most this many rows; larger batches grow as they fill.
const INITIAL_CAPACITY_ROWS: usize = 8192;

/// Where in the stream the decoder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the 19-byte header and its extension area.
    Header,
    /// Between tuples; `oids` when each tuple carries an OID after its field count.
    Tuples { oids: bool },
    /// After the trailer (a field count of -1): nothing may follow.
    Done,
    /// An error was returned; the builders may hold half a tuple.
    Failed,
}

/// Decodes one binary COPY stream into record batches of at most `batch_rows` rows.
///
/// Feed chunks with [`CopyDecoder::decode`], take finished batches with
/// [`CopyDecoder::next_batch`], and call [`CopyDecoder::finish`] at the end of the stream
/// for the last, partial batch. Memory: the batch being built plus at most one incomplete
/// tuple of input.
pub struct CopyDecoder {
    columns: Vec<ColdColumn>,
    schema: SchemaRef,
    builders: Vec<ColumnBuilder>,
    batch_rows: usize,
    rows_in_batch: usize,
    bytes_in_batch: usize,
    tuples: u64,
    state: State,
    /// Input not consumed yet: the front of a header or tuple whose end has not arrived.
    pending: Vec<u8>,
    /// (offset, length) of each field of the tuple being decoded; -1 length for NULL.
    fields: Vec<(usize, i32)>,
    ready: VecDeque<RecordBatch>,
}

impl CopyDecoder {
    /// A decoder for a stream whose tuples hold `columns`, in order.
    ///
    /// # Errors
    /// An Arrow error if a builder cannot be made (an impossible decimal precision).
    pub fn new(columns: Vec<ColdColumn>, batch_rows: usize) -> Result<Self, ColdError> {
        let batch_rows = batch_rows.max(1);
        let schema = Arc::new(arrow_schema(&columns));
        let builders = new_builders(&columns, batch_rows.min(INITIAL_CAPACITY_ROWS))?;
        Ok(Self {
            columns,
            schema,
            builders,
            batch_rows,
            rows_in_batch: 0,
            bytes_in_batch: 0,
            tuples: 0,
            state: State::Header,
            pending: Vec::new(),
            fields: Vec::new(),
            ready: VecDeque::new(),
        })
    }

    /// The schema of the batches produced.
    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    /// Tuples decoded so far.
    pub fn rows(&self) -> u64 {
        self.tuples
    }

    /// True once the trailer has been read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consumes the next bytes of the stream.
    ///
    /// # Errors
    /// A malformed stream or value; the decoder is unusable afterwards.
    pub fn decode(&mut self, chunk: &[u8]) -> Result<(), ColdError> {
        if self.state == State::Failed {
            return Err(ColdError::Failed);
        }
        let result = if self.pending.is_empty() {
            self.consume(chunk)
                .map(|used| self.pending.extend_from_slice(&chunk[used..]))
        } else {
            let mut pending = std::mem::take(&mut self.pending);
            pending.extend_from_slice(chunk);
            let result = self.consume(&pending);
            if let Ok(used) = result {
                pending.drain(..used);
            }
            self.pending = pending;
            result.map(drop)
        };
        if result.is_err() {
            self.state = State::Failed;
        }
        result
    }

    /// The next finished batch, if any.
    pub fn next_batch(&mut self) -> Option<RecordBatch> {
        self.ready.pop_front()
    }

    /// Ends the stream: checks that the trailer was read and queues the last partial batch.
    ///
    /// # Errors
    /// [`ColdError::Truncated`] when the stream stopped before its trailer.
    pub fn finish(&mut self) -> Result<(), ColdError> {
        match self.state {
            State::Done => self.cut_batch(),
            State::Failed => Err(ColdError::Failed),
            State::Header => {
                self.state = State::Failed;
                Err(ColdError::Truncated("the header"))
            }
            State::Tuples { .. } => {
                self.state = State::Failed;
                Err(ColdError::Truncated(if self.pending.is_empty() {
                    "the tuples (no trailer)"
                } else {
                    "a tuple"
                }))
            }
        }
    }

    /// Decodes whole headers and tuples from the front of `data`; returns the bytes used.
    fn consume(&mut self, data: &[u8]) -> Result<usize, ColdError> {
        let mut pos = 0;
        loop {
            let rest = &data[pos..];
            let used = match self.state {
                State::Header => self.header(rest)?,
                State::Tuples { oids } => self.tuple(rest, oids)?,
                State::Done if rest.is_empty() => return Ok(pos),
                State::Done => {
                    return Err(ColdError::Stream(format!(
                        "{} bytes after the trailer",
                        rest.len()
                    )))
                }
                State::Failed => return Err(ColdError::Failed),
            };
            match used {
                Some(n) => pos += n,
                None => return Ok(pos),
            }
        }
    }

    /// The header: signature, flags, extension area length and the (skipped) extension.
    fn header(&mut self, data: &[u8]) -> Result<Option<usize>, ColdError> {
        let signature_part = &data[..data.len().min(COPY_SIGNATURE.len())];
        if signature_part != &COPY_SIGNATURE[..signature_part.len()] {
            return Err(ColdError::Stream(
                "missing PGCOPY signature (not binary COPY output)".into(),
            ));
        }
        let Some(fixed) = data.get(..COPY_HEADER_LEN) else {
            return Ok(None);
        };
        let flags = u32::from_be_bytes([fixed[11], fixed[12], fixed[13], fixed[14]]);
        if flags & CRITICAL_FLAGS & !FLAG_OIDS != 0 {
            return Err(ColdError::Stream(format!(
                "unknown critical header flags 0x{flags:08x}"
            )));
        }
        let extension = i32::from_be_bytes([fixed[15], fixed[16], fixed[17], fixed[18]]);
        let extension = usize::try_from(extension)
            .ok()
            .filter(|n| *n <= MAX_HEADER_EXTENSION_BYTES)
            .ok_or_else(|| ColdError::Stream(format!("header extension length {extension}")))?;
        // "A reader should silently skip over any header extension data it does not know
        // what to do with."
        if data.len() < COPY_HEADER_LEN + extension {
            return Ok(None);
        }
        self.state = State::Tuples {
            oids: flags & FLAG_OIDS != 0,
        };
        Ok(Some(COPY_HEADER_LEN + extension))
    }

    /// One tuple or the trailer, once the whole of it is in `data`.
    fn tuple(&mut self, data: &[u8], oids: bool) -> Result<Option<usize>, ColdError> {
        let Some(count) = data.get(..2) else {
            return Ok(None);
        };
        let count = i16::from_be_bytes([count[0], count[1]]);
        if count == -1 {
            self.state = State::Done;
            return Ok(Some(2));
        }
        if usize::try_from(count).ok() != Some(self.columns.len()) {
            return Err(ColdError::Stream(format!(
                "tuple {} has {count} fields, expected {}",
                self.tuples,
                self.columns.len()
            )));
        }
        let mut pos = 2;
        // "If OIDs are included in the file, the OID field immediately follows the
        // field-count word. It is a normal field except that it's not included in the
        // field-count."
        let skipped = usize::from(oids);
        self.fields.clear();
        for i in 0..skipped + self.columns.len() {
            let Some(len) = data.get(pos..pos + 4) else {
                return Ok(None);
            };
            let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
            pos += 4;
            let size = match len {
                -1 => 0,
                n if n >= 0 => n as usize,
                n => {
                    return Err(ColdError::Stream(format!(
                        "tuple {} field {i} has length {n}",
                        self.tuples
                    )))
                }
            };
            if data.len() < pos + size {
                return Ok(None);
            }
            if i >= skipped {
                self.fields.push((pos, len));
            }
            pos += size;
        }
        if self.rows_in_batch > 0 && self.bytes_in_batch + pos > MAX_BATCH_BYTES {
            self.cut_batch()?;
        }
        for (column, (builder, &(start, len))) in
            self.builders.iter_mut().zip(&self.fields).enumerate()
        {
            let field = (len >= 0).then(|| &data[start..start + len as usize]);
            builder.append(field).map_err(|source| ColdError::Value {
                column: self.columns[column].name.clone(),
                row: self.tuples,
                source,
            })?;
        }
        self.tuples += 1;
        self.rows_in_batch += 1;
        self.bytes_in_batch += pos;
        if self.rows_in_batch >= self.batch_rows {
            self.cut_batch()?;
        }
        Ok(Some(pos))
    }

    /// Moves the rows built so far into a batch on the ready queue.
    fn cut_batch(&mut self) -> Result<(), ColdError> {
        if self.rows_in_batch == 0 {
            return Ok(());
        }
        let arrays = self
            .builders
            .iter_mut()
            .map(ColumnBuilder::finish)
            .collect::<Result<Vec<ArrayRef>, _>>()?;
        self.ready
            .push_back(RecordBatch::try_new(Arc::clone(&self.schema), arrays)?);
        self.rows_in_batch = 0;
        self.bytes_in_batch = 0;
        Ok(())
    }
}

fn new_builders(columns: &[ColdColumn], capacity: usize) -> Result<Vec<ColumnBuilder>, ColdError> {
    Ok(columns
        .iter()
        .map(|c| ColumnBuilder::new(&c.ty, capacity))
        .collect::<Result<_, _>>()?)
}

#[cfg(test)]
#[path = "copy_decode_tests.rs"]
mod tests;
