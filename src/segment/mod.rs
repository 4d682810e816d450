//! The one definition of a segment file (DESIGN §3): a Parquet file of a tiered table's
//! rows, its columns in table order followed by [`SEQ_COLUMN`] and [`OP_COLUMN`], rows
//! sorted by primary key, written with [`writer_properties`]. [`writer`] writes one and
//! gathers the statistics the catalog records, [`file`](mod@file) reads footers and pages back by
//! byte ranges, [`prune`] judges which segments and row groups a predicate can skip, and
//! [`page_cache`] keeps decoded pages of narrow reads, and [`memo`] bounds the
//! process-wide maps of other facts about segments (footers, bloom filters, reader
//! metadata). Below both the flush and cold reads.

use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::errors::ParquetError;
use parquet::file::metadata::{ParquetMetaData, SortingColumn};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

pub mod file;
pub mod memo;
pub mod page_cache;
pub mod prune;
pub mod writer;

/// How a segment's pages are compressed (the policy's `compression`). Segments already
/// written keep theirs: a reader takes each file's codec from its footer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentCompression {
    /// LZ4 (Parquet's `LZ4_RAW`): about 45% more bytes than zstd on bench/flush's table,
    /// and a cold lookup that misses the page cache takes half the time, since opening an
    /// LZ4 codec costs nothing while a zstd one asks the CPU for its features
    /// (docs/decisions.md, "Segments in LZ4 by default").
    Lz4,
    /// zstd at level 3: the fewest bytes, for tables read in scans more than by key.
    Zstd,
}

impl SegmentCompression {
    /// The codec a policy names.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "lz4" => Some(Self::Lz4),
            "zstd" => Some(Self::Zstd),
            _ => None,
        }
    }

    /// The name a policy gives it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Lz4 => "lz4",
            Self::Zstd => "zstd",
        }
    }
}

/// The cold columns coldwire adds to each segment.
pub const SEQ_COLUMN: &str = "_cw_seq";
pub const OP_COLUMN: &str = "_cw_op";

/// Op codes of mirror rows, carried into segments as [`OP_COLUMN`].
pub mod op {
    /// The key's row is in the heap.
    pub const LIVE: i16 = 1;
    /// The key was deleted.
    pub const DELETED: i16 = 3;
    /// The row was brought back from cold to the heap (DESIGN §7).
    pub const REHYDRATED: i16 = 4;
}

/// Rows per Parquet row group (at most; a segment may be smaller).
pub const ROW_GROUP_ROWS: usize = 131_072;
/// Rows per data page at most: a cold lookup reads and decodes one page of each column
/// (the page index says which), and the page cache keeps whole pages, so pages are kept
/// small. Each page is compressed on its own: 4,096 rows write 8% fewer bytes than 1,024,
/// but cold lookups ran 25% slower (fewer pages fit the cache, each costs more to
/// decode): bench/README.md, "Cold bytes and flush memory".
const PAGE_ROWS: usize = 1024;
/// zstd level of the pages of a table whose policy asks for zstd. Decompression costs
/// about the same at any level. On the events table of bench/flush, level 9 wrote 4%
/// fewer bytes than 3 but spent half of coldwire's flush CPU in zstd's match finders:
/// the flush took 12.4 s against 9.3 s (docs/decisions.md, "Segments at zstd level 3").
const ZSTD_LEVEL: i32 = 3;
/// Largest dictionary page: every lookup in a column chunk reads and decodes its
/// dictionary, so a column with many distinct values falls back to plain encoding early
/// (its values then compress with zstd alone); columns with few values keep theirs.
const DICTIONARY_PAGE_BYTES: usize = 16 * 1024;

/// Pages compressed as the policy says (`compression`), page-level statistics (so a page
/// index), bloom filters on the pk columns, rows sorted by pk and declared so, and the
/// encoding each column falls back to when its dictionary fills (`fallback_encoding`).
pub fn writer_properties(
    pk: &[String],
    schema: &arrow::datatypes::Schema,
    compression: SegmentCompression,
) -> Result<WriterProperties, ParquetError> {
    let compression = match compression {
        SegmentCompression::Lz4 => Compression::LZ4_RAW,
        SegmentCompression::Zstd => Compression::ZSTD(ZstdLevel::try_new(ZSTD_LEVEL)?),
    };
    let mut builder = WriterProperties::builder()
        .set_compression(compression)
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_data_page_row_count_limit(PAGE_ROWS)
        .set_dictionary_page_size_limit(DICTIONARY_PAGE_BYTES)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS));
    for field in schema.fields() {
        if let Some(encoding) = fallback_encoding(field.data_type()) {
            builder =
                builder.set_column_encoding(ColumnPath::from(field.name().as_str()), encoding);
        }
    }
    let mut sorting = Vec::new();
    for pk in pk {
        if let Ok(index) = schema.index_of(pk) {
            sorting.push(SortingColumn {
                column_idx: index as i32,
                descending: false,
                nulls_first: false,
            });
        }
        // Sized for one row group of distinct keys.
        builder = builder
            .set_column_bloom_filter_enabled(ColumnPath::from(pk.as_str()), true)
            .set_column_bloom_filter_max_ndv(ColumnPath::from(pk.as_str()), ROW_GROUP_ROWS as u64);
    }
    Ok(builder.set_sorting_columns(Some(sorting)).build())
}

/// The encoding a column of `data_type` uses once its dictionary is full (columns with
/// few distinct values keep the dictionary): integers and times as deltas, which take
/// keys, sequences and clock readings of sorted rows down to a few bits a value.
/// Everything else stays plain (floats split into byte streams came out larger for
/// decimal fractions such as coordinates: bench/README.md, "Cold bytes and flush memory").
fn fallback_encoding(data_type: &arrow::datatypes::DataType) -> Option<Encoding> {
    use arrow::datatypes::DataType;
    match data_type {
        DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::Date32
        | DataType::Time64(_)
        | DataType::Timestamp(_, _) => Some(Encoding::DELTA_BINARY_PACKED),
        _ => None,
    }
}

/// How many table columns segment file `metadata` holds: every top-level field but seq
/// and op (files written before a column was added hold fewer than the table has).
pub fn file_columns(metadata: &ParquetMetaData) -> usize {
    metadata
        .file_metadata()
        .schema_descr()
        .root_schema()
        .get_fields()
        .len()
        .saturating_sub(2)
}
