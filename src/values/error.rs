//! The cold layer's errors: malformed COPY streams, values that cannot be stored exactly,
//! and Arrow data that does not match the cold schema.

use arrow::error::ArrowError;

use super::types::UnsupportedType;

/// An error of the cold value layer.
#[derive(Debug, thiserror::Error)]
pub enum ColdError {
    #[error(transparent)]
    Unsupported(#[from] UnsupportedType),
    /// The binary COPY stream breaks the format (bad signature, field count, lengths…).
    #[error("malformed binary COPY stream: {0}")]
    Stream(String),
    /// The stream ended before its trailer.
    #[error("binary COPY stream ended inside {0}")]
    Truncated(&'static str),
    /// One value could not be converted; `row` counts from 0 in the stream or batch.
    #[error("column \"{column}\", row {row}: {source}")]
    Value {
        column: String,
        row: u64,
        #[source]
        source: ValueError,
    },
    /// A record batch whose columns are not those of the cold schema.
    #[error("record batch does not match the cold schema: {0}")]
    Schema(String),
    #[error("arrow: {0}")]
    Arrow(#[from] ArrowError),
    /// A decoder that already returned an error is not usable any more.
    #[error("the binary COPY decoder already failed")]
    Failed,
}

/// Why one value could not be converted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// The bytes are not a valid binary value of the type.
    #[error("malformed {ty} value: {detail}")]
    Malformed { ty: &'static str, detail: String },
    /// A valid Postgres value that coldwire refuses because it could not come back exactly.
    #[error("{ty} value cannot be stored cold: {detail}")]
    Unrepresentable { ty: &'static str, detail: String },
}

impl ValueError {
    pub(crate) fn malformed(ty: &'static str, detail: impl Into<String>) -> Self {
        ValueError::Malformed {
            ty,
            detail: detail.into(),
        }
    }

    pub(crate) fn unrepresentable(ty: &'static str, detail: impl Into<String>) -> Self {
        ValueError::Unrepresentable {
            ty,
            detail: detail.into(),
        }
    }
}
