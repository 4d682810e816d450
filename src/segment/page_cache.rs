//! Decoded cold rows kept in memory: the batches a narrow read of a segment decoded (the
//! pages of a pk lookup or a short key range, as the page index chose them), by segment
//! path, row groups and row selection. A cold lookup spends most of its time decompressing
//! and decoding one page of every column, and with zstd segments also opening a codec per
//! column chunk (bench/README.md, "Cold lookups" and "LZ4 segments"); a lookup whose pages
//! were read before skips all of that.
//!
//! Segments are immutable and their paths never reused, so an entry never goes stale: a
//! retired segment's entries are simply never asked for again and age out. Entries are
//! evicted oldest first once the budget ([`set_budget`], `--cold-cache-mb`) is spent;
//! reads wider than [`MAX_ENTRY_ROWS`] rows are not kept, so scans do not flush lookups
//! out. Budget 0 turns the cache off.
//!
//! Decoding pages whole only pays when they are read again. A miss [`admit`]s its pages
//! while the budget has room, and once it is spent only when they were asked for more
//! often than the oldest entry, the one they would push out (counts halve every
//! [`AGING_TOUCHES`] lookups, so they follow what is read now). Otherwise the reader
//! decodes only the rows the lookup wants (`cold::scan`). When the cold rows read by key
//! are many times the budget and read evenly, most misses then stay narrow instead of
//! decoding a page whole to push out another that was as likely to be read
//! (bench/README.md, "Cold lookups beyond the cache").

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use arrow::array::RecordBatch;
use parquet::arrow::arrow_reader::RowSelection;

/// The budget when none is set: 256 MiB.
pub const DEFAULT_BUDGET_BYTES: usize = 256 << 20;
/// Reads selecting more rows than this are not kept.
pub const MAX_ENTRY_ROWS: usize = 16_384;

static BUDGET: AtomicUsize = AtomicUsize::new(DEFAULT_BUDGET_BYTES);
static CACHE: Mutex<Option<Cache>> = Mutex::new(None);

/// Segment path, row groups, and the selection as (skip, rows) runs.
pub type Key = (String, Vec<usize>, Vec<(bool, usize)>);

/// Lookups between two halvings of the counts of [`admit`].
pub const AGING_TOUCHES: u32 = 32_768;

#[derive(Default)]
struct Cache {
    entries: HashMap<Key, Arc<[RecordBatch]>>,
    /// Keys oldest first, with their sizes.
    order: VecDeque<(Key, usize)>,
    bytes: usize,
    /// How often each key was asked for lately (by hash; saturating), kept or not.
    touches: HashMap<u64, u8>,
    /// Lookups since the counts last halved.
    since_aging: u32,
    hasher: std::collections::hash_map::RandomState,
}

impl Cache {
    fn hash(&self, key: &Key) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Counts a lookup of `key`, halving every count each [`AGING_TOUCHES`] lookups.
    fn touch(&mut self, key: &Key) {
        let h = self.hash(key);
        let n = self.touches.entry(h).or_insert(0);
        *n = n.saturating_add(1);
        self.since_aging += 1;
        if self.since_aging >= AGING_TOUCHES {
            self.since_aging = 0;
            self.touches.retain(|_, n| {
                *n /= 2;
                *n > 0
            });
        }
    }

    fn touches(&self, key: &Key) -> u8 {
        self.touches.get(&self.hash(key)).copied().unwrap_or(0)
    }
}

/// Sets how many bytes of decoded rows may be kept (0: none); what is kept beyond it
/// goes at the next insert.
pub fn set_budget(bytes: usize) {
    BUDGET.store(bytes, Ordering::Relaxed);
    if bytes == 0 {
        *CACHE.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// The key of a read of `groups` (of `rows` rows in all) of segment `path`, narrowed to
/// `selection` if any, when it is narrow enough to keep and the cache is on.
pub fn key(
    path: &str,
    groups: &[usize],
    rows: usize,
    selection: Option<&RowSelection>,
) -> Option<Key> {
    let selected = selection.map_or(rows, RowSelection::row_count);
    if BUDGET.load(Ordering::Relaxed) == 0 || selected > MAX_ENTRY_ROWS {
        return None;
    }
    Some((
        path.to_owned(),
        groups.to_vec(),
        selection
            .into_iter()
            .flat_map(|s| s.iter().map(|s| (s.skip, s.row_count)))
            .collect(),
    ))
}

/// The batches kept for `key`; counts the lookup either way.
pub fn get(key: &Key) -> Option<Arc<[RecordBatch]>> {
    let found = {
        let mut guard = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
        let cache = guard.get_or_insert_with(Cache::default);
        cache.touch(key);
        cache.entries.get(key).cloned()
    };
    let outcome = if found.is_some() { "hit" } else { "miss" };
    metrics::counter!(crate::metrics::COLD_CACHE_LOOKUPS_TOTAL, "outcome" => outcome).increment(1);
    found
}

/// Whether a read of `key` that missed should decode its pages whole and [`insert`] them:
/// while the budget has room for one more entry of the average size, and after that
/// when `key` was asked for more often lately than the oldest entry.
pub fn admit(key: &Key) -> bool {
    let budget = BUDGET.load(Ordering::Relaxed);
    let guard = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(cache) = guard.as_ref() else {
        return budget > 0;
    };
    let average = cache.bytes.checked_div(cache.entries.len()).unwrap_or(0);
    if cache.bytes + average <= budget {
        return true;
    }
    cache
        .order
        .front()
        .is_none_or(|(oldest, _)| cache.touches(key) > cache.touches(oldest))
}

/// Keeps `batches` for `key`, evicting the oldest entries beyond the budget. The batches
/// are copied into buffers of their size first: the reader's buffers are sized for a
/// whole decode batch, many times the rows a lookup selects.
pub fn insert(key: Key, batches: Vec<RecordBatch>) {
    let budget = BUDGET.load(Ordering::Relaxed);
    let Ok(batches) = batches.iter().map(compact).collect::<Result<Vec<_>, _>>() else {
        return;
    };
    let size: usize = batches
        .iter()
        .map(RecordBatch::get_array_memory_size)
        .sum::<usize>()
        + std::mem::size_of::<Key>();
    if size > budget {
        return;
    }
    let mut guard = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    let cache = guard.get_or_insert_with(Cache::default);
    if cache.entries.contains_key(&key) {
        return;
    }
    while cache.bytes + size > budget {
        let Some((old, old_size)) = cache.order.pop_front() else {
            break;
        };
        cache.entries.remove(&old);
        cache.bytes -= old_size;
    }
    cache.entries.insert(key.clone(), batches.into());
    cache.order.push_back((key, size));
    cache.bytes += size;
    metrics::gauge!(crate::metrics::COLD_CACHE_BYTES).set(cache.bytes as f64);
}

/// `batch` in buffers of its own size.
fn compact(batch: &RecordBatch) -> Result<RecordBatch, arrow::error::ArrowError> {
    let rows = u32::try_from(batch.num_rows())
        .map_err(|_| arrow::error::ArrowError::ComputeError("batch too large".into()))?;
    let indices = arrow::array::UInt32Array::from_iter_values(0..rows);
    arrow::compute::take_record_batch(batch, &indices)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use parquet::arrow::arrow_reader::RowSelector;

    fn batch(rows: i64) -> RecordBatch {
        RecordBatch::try_from_iter([(
            "id",
            Arc::new(Int64Array::from_iter_values(0..rows)) as arrow::array::ArrayRef,
        )])
        .unwrap()
    }

    /// The cache is process-wide: its tests take turns.
    static SERIAL: Mutex<()> = Mutex::new(());

    #[test]
    fn narrow_reads_are_kept_within_the_budget_oldest_out_first() {
        let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        let narrow = RowSelection::from(vec![RowSelector::skip(1024), RowSelector::select(1024)]);
        let wide = RowSelection::from(vec![RowSelector::select(MAX_ENTRY_ROWS + 1)]);
        assert!(key("a", &[0], 1 << 20, Some(&wide)).is_none());
        assert!(key("a", &[0, 1], MAX_ENTRY_ROWS + 1, None).is_none());
        assert!(key("a", &[0, 1], 800, None).is_some());
        let size = batch(1024).get_array_memory_size() + std::mem::size_of::<Key>();
        set_budget(2 * size);
        let keys: Vec<Key> = ["p1", "p2", "p3"]
            .iter()
            .map(|p| key(p, &[0], 1 << 20, Some(&narrow)).unwrap())
            .collect();
        for k in &keys {
            insert(k.clone(), vec![batch(1024)]);
        }
        assert!(get(&keys[0]).is_none(), "the oldest went");
        assert_eq!(get(&keys[2]).unwrap()[0].num_rows(), 1024);
        assert!(get(&keys[1]).is_some());
        set_budget(0);
        assert!(key("p1", &[0], 1 << 20, Some(&narrow)).is_none());
        assert!(get(&keys[2]).is_none());
        set_budget(DEFAULT_BUDGET_BYTES);
    }

    #[test]
    fn once_the_budget_is_spent_only_keys_asked_for_more_than_the_oldest_are_admitted() {
        let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        set_budget(0);
        let size = batch(1024).get_array_memory_size() + std::mem::size_of::<Key>();
        set_budget(2 * size);
        let narrow = RowSelection::from(vec![RowSelector::skip(1024), RowSelector::select(1024)]);
        let [a, b, c] = ["a", "b", "c"].map(|p| key(p, &[0], 1 << 20, Some(&narrow)).unwrap());
        for k in [&a, &b] {
            assert!(get(k).is_none());
            assert!(admit(k), "room in the budget");
            insert(k.clone(), vec![batch(1024)]);
        }
        assert!(get(&c).is_none());
        assert!(!admit(&c), "asked for once, as often as the oldest entry");
        assert!(get(&c).is_none());
        assert!(admit(&c), "asked for twice, more than the oldest entry");
        insert(c.clone(), vec![batch(1024)]);
        assert!(get(&a).is_none(), "the oldest went");
        assert!(get(&b).is_some() && get(&c).is_some());
        set_budget(DEFAULT_BUDGET_BYTES);
    }
}
