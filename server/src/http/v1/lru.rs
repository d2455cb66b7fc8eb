//! A small least-recently-used map of answers, which the analysis, MCP
//! and prediction handlers each keep in a static.

use std::sync::{Arc, Mutex};

/// A small least-recently-used map; the most recently used entry last.
pub(super) struct Lru<K, V> {
    capacity: usize,
    entries: Mutex<Vec<(K, Arc<V>)>>,
}

impl<K: PartialEq, V> Lru<K, V> {
    pub(super) const fn new(capacity: usize) -> Lru<K, V> {
        Lru { capacity, entries: Mutex::new(Vec::new()) }
    }

    pub(super) fn get(&self, key: &K) -> Option<Arc<V>> {
        let mut entries = self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let i = entries.iter().position(|(k, _)| k == key)?;
        let entry = entries.remove(i);
        let value = entry.1.clone();
        entries.push(entry);
        Some(value)
    }

    pub(super) fn put(&self, key: K, value: Arc<V>) {
        let mut entries = self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        entries.retain(|(k, _)| k != &key);
        entries.push((key, value));
        if entries.len() > self.capacity {
            entries.remove(0);
        }
    }
}
