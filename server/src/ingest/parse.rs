//! Parsing stored snapshots: streamed from the blob store on blocking
//! threads, at most `parse_concurrency` at a time, under the settings'
//! memory budget, expansion limit and time limit, with the bytes read so
//! far known to the library page (its progress).

use std::collections::HashMap;
use std::io::{BufReader, Read};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::TryStreamExt;
use tokio::sync::Semaphore;
use tokio_util::io::{StreamReader, SyncIoBridge};
use vramscope_shared::{ReadError, ReadOptions, Snapshot, read_snapshot};

use crate::metrics::Metrics;
use crate::store::BlobStore;

/// The statistics stored with a parsed snapshot (`/stats` serves them).
pub(crate) fn stats_json(snapshot: &vramscope_shared::Snapshot) -> anyhow::Result<String> {
    serde_json::to_string(&snapshot.stats().report(String::new()))
        .map_err(|e| anyhow::anyhow!("serializing stats: {e}"))
}

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
    /// Parses under way, by file: (bytes read, file size).
    pub(crate) progress: Mutex<HashMap<String, (Arc<AtomicU64>, u64)>>,
}

/// Counts the bytes read through it.
struct Counting<R> {
    inner: R,
    read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Removes a parse from [`Parser::progress`] when it ends, however it ends.
struct Tracked<'a> {
    parser: &'a Parser,
    key: String,
}

impl Drop for Tracked<'_> {
    fn drop(&mut self) {
        self.parser.progress.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.key);
    }
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
    /// A parser with these limits.
    pub(crate) fn new(options: ReadOptions, timeout: Duration, concurrency: usize) -> Parser {
        Parser { options, timeout, permits: Semaphore::new(concurrency), progress: Mutex::new(HashMap::new()) }
    }

    /// How far the parse of a file is, as (bytes read, file size), while
    /// this instance parses it.
    pub(crate) fn progress(&self, key: &str) -> Option<(u64, u64)> {
        let parses = self.progress.lock().unwrap_or_else(|p| p.into_inner());
        parses.get(key).map(|(read, total)| (read.load(Ordering::Relaxed), *total))
    }

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
        // A local file is read directly, in large reads on the parse's own
        // thread; through the store's stream it parsed at half the speed.
        let (total, source): (u64, Box<dyn Read + Send>) = match blobs.local_root() {
            Some(root) => {
                let path = root.join(key);
                let file = std::fs::File::open(&path)
                    .with_context(|| format!("cannot open {}", path.display()))
                    .map_err(ParseFailure::Storage)?;
                let total = file.metadata().map(|m| m.len()).unwrap_or(0);
                (total, Box::new(file))
            }
            None => {
                let (total, stream) = blobs.get_range(key, None).await.map_err(ParseFailure::Storage)?;
                let reader = StreamReader::new(stream.map_err(std::io::Error::other));
                (total, Box::new(SyncIoBridge::new(reader)))
            }
        };
        let read = Arc::new(AtomicU64::new(0));
        self.progress.lock().unwrap_or_else(|p| p.into_inner()).insert(key.to_owned(), (Arc::clone(&read), total));
        let _tracked = Tracked { parser: self, key: key.to_owned() };
        let bridge = Counting { inner: source, read };
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
