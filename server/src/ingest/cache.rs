//! The analyzed snapshots held in memory for the views, by file.
//!
//! One file is loaded at most once at a time: the cache is keyed by the
//! content-addressed file, and a load (opening its persisted index, or
//! parsing it) runs in a task of its own that every request for that file
//! waits on. A request that goes away (its client left, or its timeout
//! fired) does not stop that load or start another; the result is kept
//! for the next request.

use std::sync::{Arc, Mutex};

use futures::future::{BoxFuture, FutureExt, Shared};
use vramscope_shared::indexed::IndexedSnapshot;

use super::ParseFailure;

/// The outcome of loading one file, shared by everyone who waits for it.
pub(crate) type Loaded = Result<Arc<IndexedSnapshot>, Arc<ParseFailure>>;
pub(crate) type Slot = Shared<BoxFuture<'static, Loaded>>;

/// The most recently used analyzed snapshots, by file (`blob_key`), at
/// most `capacity` of them and about `max_bytes` together (the newest is
/// kept whatever its size). Concurrent requests for the same file share
/// one parse.
pub(crate) struct SnapshotCache {
    capacity: usize,
    max_bytes: u64,
    /// Most recently used last.
    slots: Mutex<Vec<(String, Slot)>>,
}

/// What a cached slot holds, by [`IndexedSnapshot::approx_bytes`]: nothing while
/// it loads or after it failed.
fn weight(slot: &Slot) -> u64 {
    match slot.peek() {
        Some(Ok(analyzed)) => analyzed.approx_bytes(),
        _ => 0,
    }
}

impl SnapshotCache {
    pub(crate) fn new(capacity: usize, max_bytes: u64) -> SnapshotCache {
        SnapshotCache { capacity: capacity.max(1), max_bytes, slots: Mutex::new(Vec::new()) }
    }

    /// The slot of a file, made with `make` (and marked most recent).
    fn slot(&self, key: &str, make: impl FnOnce() -> Slot) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let slot = match slots.iter().position(|(k, _)| k == key) {
            Some(i) => slots.remove(i).1,
            None => make(),
        };
        slots.push((key.to_owned(), slot.clone()));
        Self::trim(&mut slots, self.capacity, self.max_bytes);
        slot
    }

    /// Evict the least recently used until the count and the bytes fit,
    /// never the newest. An evicted load still running finishes for its
    /// waiters.
    fn trim(slots: &mut Vec<(String, Slot)>, capacity: usize, max_bytes: u64) {
        while slots.len() > 1
            && (slots.len() > capacity || slots.iter().map(|(_, s)| weight(s)).sum::<u64>() > max_bytes)
        {
            drop(slots.remove(0));
        }
    }

    /// The analyzed snapshot of a file, loading it with `load` in a task of
    /// its own if it is neither cached nor being loaded. A failure caused by
    /// storage is forgotten, so that the next request tries again.
    pub(crate) async fn get_or_load<F, Fut>(&self, key: &str, load: F) -> Loaded
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Arc<IndexedSnapshot>, ParseFailure>> + Send + 'static,
    {
        let slot = self.start(key, load);
        let loaded = slot.clone().await;
        let mut slots = self.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Err(failure) = &loaded
            && !failure.is_the_files_fault()
        {
            slots.retain(|(k, s)| k != key || !s.ptr_eq(&slot));
        }
        // Now that it weighs something, the others may have to go.
        Self::trim(&mut slots, self.capacity, self.max_bytes);
        loaded
    }

    /// Start loading a file with `load` in a task of its own, now, unless
    /// it is cached or being loaded: a request that comes next waits for
    /// this load. The upload of a file parsed inline starts its indexing so,
    /// before it answers.
    pub(crate) fn start<F, Fut>(&self, key: &str, load: F) -> Slot
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Arc<IndexedSnapshot>, ParseFailure>> + Send + 'static,
    {
        self.slot(key, || {
            let task = tokio::spawn(load());
            async move {
                match task.await {
                    Ok(result) => result.map_err(Arc::new),
                    Err(e) => Err(Arc::new(ParseFailure::Storage(anyhow::Error::from(e).context("load task")))),
                }
            }
            .boxed()
            .shared()
        })
    }

    /// Forget a file's loaded snapshot if it is `analyzed` (not one loaded
    /// since): the next request loads the file again. Those holding it
    /// keep it until they are done.
    pub(crate) fn evict_if(&self, key: &str, analyzed: &Arc<IndexedSnapshot>) {
        let mut slots = self.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        slots.retain(|(k, s)| k != key || !matches!(s.peek(), Some(Ok(held)) if Arc::ptr_eq(held, analyzed)));
    }

    /// Forget a file (its last snapshot was deleted).
    pub(crate) fn remove(&self, key: &str) {
        let mut slots = self.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        slots.retain(|(k, _)| k != key);
    }

    /// About how many bytes the loaded snapshots hold.
    pub(crate) fn bytes(&self) -> u64 {
        let slots = self.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        slots.iter().map(|(_, s)| weight(s)).sum()
    }

    /// Number of snapshots held.
    pub(crate) fn len(&self) -> usize {
        let slots = self.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        slots.iter().filter(|(_, s)| matches!(s.peek(), Some(Ok(_)))).count()
    }
}
