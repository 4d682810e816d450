//! The manifest: a derived export of a table's cold tier for other engines (DESIGN §3, §5
//! step 5). The catalog stays the authority; the manifest can always be rebuilt from it.
//!
//! Layout under the table's storage prefix:
//! - `manifest/{folder}-{sha256 of the shard, 16 hex}.json`: one content-addressed
//!   shard per segment folder, listing that folder's segments (an unchanged folder keeps its
//!   shard object);
//! - `manifest.json`: the thin root, naming each shard with its sha256, the table's
//!   columns, primary key and generation, and the rules a reader must apply. Written after
//!   its shards, so a reader following the root always finds them.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio_postgres::Client;

use crate::store::{hex, ColdStore, StoreError};

/// Format name and version written in every root.
pub const FORMAT: &str = "coldwire-manifest";
pub const FORMAT_VERSION: i64 = 1;

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{}", crate::catalog::postgres_text(.0))]
    Postgres(#[from] tokio_postgres::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("table {0} is not in the catalog")]
    Unknown(i64),
}

/// The folder of the manifest's shards under a table's prefix.
pub fn shard_folder(prefix: &str) -> String {
    format!("{prefix}/manifest")
}

/// The key of the manifest's root.
pub fn root_key(prefix: &str) -> String {
    format!("{prefix}/manifest.json")
}

/// Whether `key` is part of the manifest of the table under `prefix`.
pub fn is_manifest_key(prefix: &str, key: &str) -> bool {
    key == root_key(prefix)
        || key
            .strip_prefix(&shard_folder(prefix))
            .is_some_and(|rest| rest.starts_with('/'))
}

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    pub root_key: String,
    pub shards: usize,
    pub segments: usize,
}

/// Exports the manifest of table `table_id`: its active segments, plus the pending ones of
/// `(job_id, attempt)` when given (a flush exports before its finalize makes them active),
/// as of `generation`.
///
/// # Errors
/// Catalog or store failures. A failed export leaves the previous root in place.
pub async fn export(
    client: &Client,
    store: &ColdStore,
    table_id: i64,
    pending_of: Option<(i64, i32)>,
    generation: i64,
) -> Result<Exported, ManifestError> {
    let table = client
        .query_opt(
            "SELECT t.schema_name, t.table_name, t.columns, t.pk_attnums, t.storage_prefix FROM coldwire.tables t WHERE t.id = $1",
            &[&table_id],
        )
        .await?
        .ok_or(ManifestError::Unknown(table_id))?;
    let prefix: String = table.get(4);
    let (job_id, attempt) = pending_of.unwrap_or((-1, -1));
    let rows = client
        .query(
            "SELECT segment_id, path, row_count, byte_size, sha256, min_seq, max_seq, min_pk, max_pk \
             FROM coldwire.segments \
             WHERE table_id = $1 AND (status = 'active' OR (status = 'pending' AND job_id = $2 AND attempt = $3)) \
             ORDER BY path",
            &[&table_id, &job_id, &attempt],
        )
        .await?;
    let mut folders: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for row in &rows {
        let path: String = row.get(1);
        let folder = path
            .strip_prefix(&format!("{prefix}/"))
            .and_then(|rest| rest.split_once('/'))
            .map_or_else(|| "root".to_owned(), |(f, _)| f.to_owned());
        let bytes_hex = |v: Option<Vec<u8>>| v.map(|b| hex(&b));
        folders.entry(folder).or_default().push(json!({
            "segment_id": row.get::<_, uuid::Uuid>(0).to_string(),
            "path": path,
            "rows": row.get::<_, i64>(2),
            "bytes": row.get::<_, i64>(3),
            "sha256": row.get::<_, String>(4),
            "min_seq": row.get::<_, Option<i64>>(5),
            "max_seq": row.get::<_, Option<i64>>(6),
            "min_pk": bytes_hex(row.get(7)),
            "max_pk": bytes_hex(row.get(8)),
        }));
    }

    let base = shard_folder(&prefix);
    let mut shards = Vec::new();
    for (name, segments) in &folders {
        let body = Bytes::from(
            serde_json::to_vec_pretty(&json!({ "folder": name, "segments": segments }))
                .expect("json values serialize"),
        );
        let sha256 = hex(&Sha256::digest(&body));
        let key = format!("{base}/{name}-{}.json", &sha256[..16]);
        store.publish(&key, body).await?;
        let rows: i64 = segments
            .iter()
            .map(|s| s["rows"].as_i64().unwrap_or(0))
            .sum();
        shards.push(json!({ "folder": name, "key": key, "sha256": sha256, "segments": segments.len(), "rows": rows }));
    }
    let root = json!({
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "table": { "id": table_id, "schema": table.get::<_, String>(0), "name": table.get::<_, String>(1) },
        "columns": table.get::<_, Value>(2),
        "primary_key_attnums": table.get::<_, Vec<i16>>(3),
        "generation": generation,
        "rules": [
            "each segment is a Parquet file holding the table's columns plus _cw_seq (int64) and _cw_op (int16)",
            "a primary key's live version is the row with the highest _cw_seq across all segments listed here",
            "a live version with _cw_op = 3 is a tombstone: the row was deleted",
            "rows still in the Postgres heap are newer than any listed here and are not part of this export",
        ],
        "shards": shards,
    });
    let root_key = root_key(&prefix);
    store
        .put(
            &root_key,
            Bytes::from(serde_json::to_vec_pretty(&root).expect("json values serialize")),
        )
        .await?;

    // Shards the new root no longer names.
    let named: std::collections::HashSet<&str> =
        shards.iter().filter_map(|s| s["key"].as_str()).collect();
    for key in store.list(&base).await? {
        if !named.contains(key.as_str()) {
            store.delete(&key).await?;
        }
    }
    Ok(Exported {
        root_key,
        shards: shards.len(),
        segments: rows.len(),
    })
}
