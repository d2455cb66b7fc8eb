//! Parsing stored snapshots, and a small cache of parsed ones for the views.
//!
//! Parsing is CPU work that takes about the file's size in memory, so it runs
//! on blocking threads, at most `parse_concurrency` at a time, reading the
//! file as a stream from the blob store, under the settings' memory budget,
//! expansion limit and time limit.
//!
//! One file is parsed at most once at a time: the cache is keyed by the
//! content-addressed file, and a parse runs in a task of its own that every
//! request for that file waits on. A request that goes away (its client
//! left, or its timeout fired) does not stop that parse or start another;
//! the result is kept for the next request.

use std::io::BufReader;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::TryStreamExt;
use futures::future::{BoxFuture, FutureExt, Shared};
use tokio::sync::Semaphore;
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
    /// The parse ran past `parse_timeout_secs` and was stopped.
    TimedOut {
        /// The limit.
        secs: f64,
        /// Bytes of pickle read by then.
        offset: u64,
    },
    /// Reading it from storage failed, or the worker died.
    Storage(anyhow::Error),
}

impl ParseFailure {
    /// The stable kind of the failure, as the API names it.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            ParseFailure::Invalid(e) => e.kind(),
            ParseFailure::TimedOut { .. } => "parse_timeout",
            ParseFailure::Storage(_) => "internal",
        }
    }

    /// What to tell the user (and keep on a failed row).
    pub(crate) fn message(&self) -> String {
        match self {
            ParseFailure::Invalid(e) => e.to_string(),
            ParseFailure::TimedOut { secs, offset } => format!(
                "parsing took longer than the server's limit of {secs} s (parse_timeout_secs) and was stopped at \
                 byte {offset} of the pickle"
            ),
            ParseFailure::Storage(e) => format!("{e:#}"),
        }
    }

    /// Whether the file itself is at fault (the row is marked failed), as
    /// opposed to storage (worth trying again).
    pub(crate) fn is_the_files_fault(&self) -> bool {
        !matches!(self, ParseFailure::Storage(_))
    }
}

/// How the server parses: the reader's limits, the time limit and the
/// slots that bound parses at once.
pub(crate) struct Parser {
    /// Budget and expansion limit (the cancel flag is set per parse).
    pub(crate) options: ReadOptions,
    /// A parse still running after this long is stopped.
    pub(crate) timeout: Duration,
    /// Bounds the snapshots parsed at once (each takes about its size in memory).
    pub(crate) permits: Semaphore,
}

/// Sets the flag when dropped: a parse whose caller went away stops at its
/// next read instead of running on for nobody.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl Parser {
    /// Parse a stored file (streamed from the blob store, never whole in
    /// memory besides what the model needs). Dropping the future stops the
    /// parse.
    pub(crate) async fn parse_stored(
        &self,
        blobs: &BlobStore,
        key: &str,
        metrics: &Metrics,
    ) -> Result<Snapshot, ParseFailure> {
        let _permit = self.permits.acquire().await.map_err(|e| ParseFailure::Storage(e.into()))?;
        let (_, stream) = blobs.get_range(key, None).await.map_err(ParseFailure::Storage)?;
        let reader = StreamReader::new(stream.map_err(std::io::Error::other));
        let bridge = SyncIoBridge::new(reader);
        let cancel = Arc::new(AtomicBool::new(false));
        let _stop_when_dropped = CancelOnDrop(Arc::clone(&cancel));
        let timed_out = Arc::new(AtomicBool::new(false));
        let watchdog = {
            let (cancel, timed_out, timeout) = (Arc::clone(&cancel), Arc::clone(&timed_out), self.timeout);
            tokio::spawn(async move {
                tokio::time::sleep(timeout).await;
                timed_out.store(true, Ordering::Relaxed);
                cancel.store(true, Ordering::Relaxed);
            })
        };
        let options = ReadOptions { cancel: Some(cancel), ..self.options.clone() };
        let started = Instant::now();
        let result =
            tokio::task::spawn_blocking(move || read_snapshot(BufReader::with_capacity(1 << 20, bridge), &options))
                .await
                .map_err(|e| ParseFailure::Storage(anyhow::Error::from(e).context("parse worker")));
        watchdog.abort();
        metrics.parse_seconds.observe(started.elapsed().as_secs_f64());
        result?.map_err(|e| match e {
            ReadError::Cancelled { offset } if timed_out.load(Ordering::Relaxed) => {
                ParseFailure::TimedOut { secs: self.timeout.as_secs_f64(), offset }
            }
            // A storage failure surfaces as an I/O error of the reader.
            ReadError::Io { source, .. } => {
                ParseFailure::Storage(anyhow::Error::from(source).context("reading the file"))
            }
            other => ParseFailure::Invalid(other),
        })
    }
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

/// The outcome of loading one file, shared by everyone who waits for it.
pub(crate) type Loaded = Result<Arc<Analyzed>, Arc<ParseFailure>>;
pub(crate) type Slot = Shared<BoxFuture<'static, Loaded>>;

/// The most recently used analyzed snapshots, by file (`blob_key`), at
/// most `capacity` of them and about `max_bytes` together (the newest is
/// kept whatever its size). Concurrent requests for the same file share
/// one parse.
pub(crate) struct AnalysisCache {
    capacity: usize,
    max_bytes: u64,
    /// Most recently used last.
    slots: Mutex<Vec<(String, Slot)>>,
}

/// What a cached slot holds, by [`Analyzed::approx_bytes`]: nothing while
/// it loads or after it failed.
fn weight(slot: &Slot) -> u64 {
    match slot.peek() {
        Some(Ok(analyzed)) => analyzed.approx_bytes(),
        _ => 0,
    }
}

impl AnalysisCache {
    pub(crate) fn new(capacity: usize, max_bytes: u64) -> AnalysisCache {
        AnalysisCache { capacity: capacity.max(1), max_bytes, slots: Mutex::new(Vec::new()) }
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
        Fut: Future<Output = Result<Arc<Analyzed>, ParseFailure>> + Send + 'static,
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
        Fut: Future<Output = Result<Arc<Analyzed>, ParseFailure>> + Send + 'static,
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
