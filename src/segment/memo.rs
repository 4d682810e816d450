//! A process-wide map of facts about immutable segments (footers, bloom filters, reader
//! metadata): a segment's path is never rewritten, so an entry never goes stale. Bounded
//! by entry count: the map is emptied when it would grow past its bound.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};

pub struct Memo<K, V> {
    entries: Mutex<Option<HashMap<K, V>>>,
    bound: usize,
}

impl<K: Eq + Hash, V: Clone> Memo<K, V> {
    /// An empty map of at most `bound` entries.
    pub const fn new(bound: usize) -> Self {
        Memo {
            entries: Mutex::new(None),
            bound,
        }
    }

    /// The value kept for `key`.
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .and_then(|m| m.get(key).cloned())
    }

    /// Keeps `value` for `key`, emptying the map first when it is full.
    pub fn insert(&self, key: K, value: V) {
        let mut guard = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let map = guard.get_or_insert_with(HashMap::new);
        if map.len() >= self.bound {
            map.clear();
        }
        map.insert(key, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_memo_starts_over() {
        let memo: Memo<u32, &str> = Memo::new(2);
        memo.insert(1, "a");
        memo.insert(2, "b");
        assert_eq!(memo.get(&1), Some("a"));
        memo.insert(3, "c");
        assert_eq!(
            (memo.get(&1), memo.get(&2), memo.get(&3)),
            (None, None, Some("c"))
        );
    }
}
