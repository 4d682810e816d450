//! A Parquet segment in the cold store, read by byte ranges: its footer and page index
//! (cached, since segments are immutable: a path is never rewritten) and the pages a scan
//! needs.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::errors::ParquetError;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};

use crate::store::{ColdStore, StoreError};

/// Parquet's footer tail: metadata length (4 bytes LE) and the magic `PAR1`.
const FOOTER_TAIL: u64 = 8;
/// Footers kept in memory, by path (at most 4,096).
static FOOTERS: super::memo::Memo<String, Arc<ParquetMetaData>> = super::memo::Memo::new(4096);

/// Why a segment could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SegmentReadError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("segment {path}: {source}")]
    Parquet { path: String, source: ParquetError },
}

/// The footer of the segment at `path`: from the cache, else read by two ranged GETs.
///
/// # Errors
/// Store failures, or bytes that are not a Parquet footer.
pub async fn footer(
    store: &ColdStore,
    path: &str,
) -> Result<Arc<ParquetMetaData>, SegmentReadError> {
    if let Some(found) = FOOTERS.get(path) {
        return Ok(found);
    }
    let bad = |why: &str| SegmentReadError::Parquet {
        path: path.to_owned(),
        source: ParquetError::General(why.to_owned()),
    };
    let size = store.size(path).await?;
    if size < FOOTER_TAIL {
        return Err(bad("too short to be Parquet"));
    }
    let tail = store.get_range(path, size - FOOTER_TAIL..size).await?;
    if &tail[4..8] != b"PAR1" {
        return Err(bad("no Parquet magic at the end"));
    }
    let metadata_len = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    let start = size
        .checked_sub(FOOTER_TAIL + metadata_len)
        .ok_or_else(|| bad("footer longer than the file"))?;
    let bytes = store.get_range(path, start..size - FOOTER_TAIL).await?;
    let parquet_error = |source| SegmentReadError::Parquet {
        path: path.to_owned(),
        source,
    };
    let footer = ParquetMetaDataReader::decode_metadata(&bytes).map_err(parquet_error)?;
    // The page index (column and offset index, written with page statistics) lets a
    // lookup read only the pages that may hold its keys.
    let mut file = SegmentFile::new(store.clone(), path.to_owned(), Arc::new(footer.clone()));
    let mut reader = ParquetMetaDataReader::new_with_metadata(footer)
        .with_page_index_policy(PageIndexPolicy::Optional);
    reader
        .load_page_index(&mut file)
        .await
        .map_err(parquet_error)?;
    let metadata = Arc::new(reader.finish().map_err(parquet_error)?);
    FOOTERS.insert(path.to_owned(), metadata.clone());
    Ok(metadata)
}

/// A segment as parquet's async reader sees it.
pub struct SegmentFile {
    store: ColdStore,
    path: String,
    metadata: Arc<ParquetMetaData>,
    /// Bytes fetched, for the read counters.
    pub bytes_read: Arc<std::sync::atomic::AtomicU64>,
}

impl SegmentFile {
    /// The segment at `path`, with its footer already read.
    pub fn new(store: ColdStore, path: String, metadata: Arc<ParquetMetaData>) -> Self {
        Self {
            store,
            path,
            metadata,
            bytes_read: Arc::default(),
        }
    }
}

impl AsyncFileReader for SegmentFile {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move {
            let bytes = self
                .store
                .get_range(&self.path, range)
                .await
                .map_err(|e| ParquetError::External(Box::new(e)))?;
            self.bytes_read
                .fetch_add(bytes.len() as u64, std::sync::atomic::Ordering::Relaxed);
            Ok(bytes)
        }
        .boxed()
    }

    /// All the ranges a row group's projection needs, in one call to the store (a
    /// lookup needs two small pages of every column; one request each would cost more
    /// than reading them).
    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        async move {
            let parts = self
                .store
                .get_ranges(&self.path, &ranges)
                .await
                .map_err(|e| ParquetError::External(Box::new(e)))?;
            let total: u64 = parts.iter().map(|b| b.len() as u64).sum();
            self.bytes_read
                .fetch_add(total, std::sync::atomic::Ordering::Relaxed);
            Ok(parts)
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        let metadata = self.metadata.clone();
        async move { Ok(metadata) }.boxed()
    }
}
