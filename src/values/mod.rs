//! Postgres values as Arrow: the exact conversion between Postgres values (binary format,
//! binary COPY streams) and Arrow arrays, which the flush writes to Parquet and cold reads
//! bind back. Sans-IO, and the lowest layer that knows Postgres types; docs/architecture.md
//! ("Cold values") has the type mapping and exactness rules.

pub mod copy_decode;
pub mod copy_encode;
mod decode_value;
pub mod encode_value;
pub mod error;
pub mod literal;
pub mod numeric;
pub mod ordered;
pub mod record;
pub mod temporal;
pub mod trunc;
pub mod types;

pub use copy_decode::CopyDecoder;
pub use copy_encode::{encode_batch, encode_header, encode_trailer};
pub use encode_value::{encode_value, ColumnEncoder};
pub use error::{ColdError, ValueError};
pub use types::{
    arrow_schema, ColdColumn, ColdType, NumericRepr, ScalarType, TextKind, UnsupportedType,
};
