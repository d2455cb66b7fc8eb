//! Parsing stored snapshots, and a small cache of parsed ones for the views.
//!
//! Parsing is CPU work that takes about the file's size in memory, so it runs
//! on blocking threads, at most `parse_concurrency` at a time, reading the
//! file as a stream from the blob store.

use std::io::BufReader;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;
use futures::TryStreamExt;
use tokio::sync::{OnceCell, Semaphore};
use tokio_util::io::{StreamReader, SyncIoBridge};
use vramscope_shared::views::Analyzed;
use vramscope_shared::{ReadError, ReadOptions, Snapshot, read_snapshot};

use crate::http::metrics::Metrics;
use crate::store::BlobStore;

/// Why a stored file could not be parsed.
#[derive(Debug)]
pub(crate) enum ParseFailure {
    /// The file is not a readable snapshot.
    Invalid(ReadError),
    /// Reading it from storage failed, or the worker died.
    Storage(anyhow::Error),
}

/// Parse a stored file (streamed from the blob store, never whole in memory
/// besides what the model needs).
pub(crate) async fn parse_stored(
    blobs: &BlobStore,
    key: &str,
    permits: &Semaphore,
    metrics: &Metrics,
) -> Result<Snapshot, ParseFailure> {
    let _permit = permits.acquire().await.map_err(|e| ParseFailure::Storage(e.into()))?;
    let (_, stream) = blobs.get_range(key, None).await.map_err(ParseFailure::Storage)?;
    let reader = StreamReader::new(stream.map_err(std::io::Error::other));
    let bridge = SyncIoBridge::new(reader);
    let started = Instant::now();
    let result = tokio::task::spawn_blocking(move || {
        read_snapshot(BufReader::with_capacity(1 << 20, bridge), &ReadOptions::default())
    })
    .await
    .map_err(|e| ParseFailure::Storage(anyhow::Error::from(e).context("parse worker")))?;
    metrics.parse_seconds.observe(started.elapsed().as_secs_f64());
    result.map_err(|e| match e {
        // A storage failure surfaces as an I/O error of the reader.
        ReadError::Io { source, .. } => ParseFailure::Storage(anyhow::Error::from(source).context("reading the file")),
        other => ParseFailure::Invalid(other),
    })
}

/// Build the indexes of a parsed snapshot (on a blocking thread). Its
/// layout checkpoints, where the state and segment views start rewinding,
/// are built next on another blocking thread, off the answer's path: two
/// passes over the trace (about a second at 1.5M entries) that the first
/// segment timeline would otherwise wait for. A view that comes first
/// waits for that build rather than doing it twice.
pub(crate) async fn analyze(snapshot: Snapshot) -> anyhow::Result<Arc<Analyzed>> {
    let analyzed =
        Arc::new(tokio::task::spawn_blocking(move || Analyzed::build(snapshot)).await.context("index worker")?);
    let warm = Arc::clone(&analyzed);
    drop(tokio::task::spawn_blocking(move || warm.build_layout_checkpoints()));
    Ok(analyzed)
}

type Slot = Arc<OnceCell<Arc<Analyzed>>>;

/// The most recently used analyzed snapshots. Concurrent requests for the
/// same snapshot share one parse.
pub(crate) struct AnalysisCache {
    capacity: usize,
    /// Most recently used last.
    slots: Mutex<Vec<(String, Slot)>>,
}

impl AnalysisCache {
    pub(crate) fn new(capacity: usize) -> AnalysisCache {
        AnalysisCache { capacity: capacity.max(1), slots: Mutex::new(Vec::new()) }
    }

    fn slot(&self, id: &str) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let slot = match slots.iter().position(|(k, _)| k == id) {
            Some(i) => slots.remove(i).1,
            None => Arc::new(OnceCell::new()),
        };
        slots.push((id.to_owned(), slot.clone()));
        if slots.len() > self.capacity {
            slots.remove(0);
        }
        slot
    }

    /// The analyzed snapshot, loading it with `load` if it is not cached.
    pub(crate) async fn get_or_load<F, Fut>(&self, id: &str, load: F) -> Result<Arc<Analyzed>, ParseFailure>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Arc<Analyzed>, ParseFailure>>,
    {
        let slot = self.slot(id);
        slot.get_or_try_init(load).await.cloned()
    }

    /// Keep a snapshot that was just parsed (an upload), so that its first
    /// view does not parse it again.
    pub(crate) fn insert(&self, id: &str, analyzed: Arc<Analyzed>) {
        let _ = self.slot(id).set(analyzed);
    }

    /// Forget a snapshot (deleted).
    pub(crate) fn remove(&self, id: &str) {
        let mut slots = self.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        slots.retain(|(k, _)| k != id);
    }

    /// Number of snapshots held.
    pub(crate) fn len(&self) -> usize {
        let slots = self.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        slots.iter().filter(|(_, s)| s.initialized()).count()
    }
}
