//! Parsing stored snapshots: streamed from the blob store on blocking
//! threads, at most `parse_concurrency` at a time, under the settings'
//! memory budget, expansion limit and time limit, with the bytes read so
//! far known to the library page (its progress).
//!
//! An upload is parsed while it streams in, when a parse slot is free as
//! it starts ([`Parser::parse_upload`]): the upload hands each piece it
//! stores to that parse too, so that the parse ends about when the upload
//! does, instead of starting then. Its time limit counts from the
//! upload's first byte; one that runs out lets go of the upload, and the
//! stored file is parsed after the commit as before. The commit takes the result
//! ([`Parser::take_upload_parse`]); a parse nobody takes within
//! [`UNCLAIMED`] of its end (the upload was refused or broke off) is
//! dropped.

use std::collections::HashMap;
use std::io::{BufReader, Read};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::TryStreamExt;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_util::io::{StreamReader, SyncIoBridge};
use vramscope_shared::pickle::{CHUNK_HEADROOM, ChunkFeed};
use vramscope_shared::{ReadError, ReadOptions, Snapshot, read_snapshot, read_snapshot_chunks};

use crate::metrics::Metrics;
use crate::store::{BlobStore, Tap, Tapped};

/// Pieces of an upload in flight to its parse: with the server's read
/// chunks (at most a few hundred kB) a few MB, enough for the two to run
/// side by side.
const TAP_PIECES: usize = 64;

/// How long the result of an upload's parse waits for its commit.
const UNCLAIMED: Duration = Duration::from_secs(60);

/// The statistics stored with a parsed snapshot (`/stats` serves them),
/// from [`vramscope_shared::Snapshot::stats`] or an analyzed snapshot's
/// copy ([`vramscope_shared::indexed::IndexedSnapshot::stats`]).
pub(crate) fn stats_json(stats: &vramscope_shared::SnapshotStats) -> anyhow::Result<String> {
    serde_json::to_string(&stats.report(String::new())).map_err(|e| anyhow::anyhow!("serializing stats: {e}"))
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

/// Parses under way, by file: (bytes read, file size).
type Progress = HashMap<String, (Arc<AtomicU64>, u64)>;

/// How the server parses: the reader's limits, the time limit and the
/// slots that bound parses at once.
pub(crate) struct Parser {
    /// Budget and expansion limit (the cancel flag is set per parse).
    pub(crate) options: ReadOptions,
    /// A parse still running after this long is stopped.
    pub(crate) timeout: Duration,
    /// Bounds the snapshots parsed at once (each takes about its size in memory).
    pub(crate) permits: Arc<Semaphore>,
    /// Parses under way, by file: (bytes read, file size).
    progress: Arc<Mutex<Progress>>,
    /// Parses of uploads, by staging key, until their commit takes them.
    uploads: Arc<Mutex<HashMap<String, UploadParse>>>,
}

/// The parse of an upload that runs while the upload streams in
/// ([`Parser::parse_upload`]). Dropping it stops the parse.
pub(crate) struct UploadParse {
    result: oneshot::Receiver<Result<Snapshot, ParseFailure>>,
    /// Bytes of the upload parsed so far.
    read: Arc<AtomicU64>,
    _cancel: CancelOnDrop,
}

impl UploadParse {
    /// The count of bytes parsed so far (for [`Parser::track`]).
    pub(crate) fn read(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.read)
    }

    /// The parsed snapshot, once the parse has read the whole upload.
    pub(crate) async fn finish(self) -> Result<Snapshot, ParseFailure> {
        match self.result.await {
            Ok(parsed) => parsed,
            Err(_) => Err(ParseFailure::Storage(anyhow::anyhow!("the upload's parse ended without an answer"))),
        }
    }

    /// Whether a parse that ended so is better done again from the stored
    /// file: it could not read the upload's copy, or its time limit,
    /// counted from the upload's first byte, ran out (a slow client's
    /// transfer is not the file's fault; a file slow to parse times out
    /// again, under a limit of its own).
    pub(crate) fn worth_redoing(failure: &ParseFailure) -> bool {
        matches!(failure, ParseFailure::Storage(_) | ParseFailure::TimedOut { .. })
    }
}

/// Reads an upload from its tap: the pieces in order, gathered into
/// chunks of about [`TAP_CHUNK`] bytes after the reader's headroom (one
/// copy), which the reader reads in place and hands back for reuse. The
/// end comes only once [`Tapped::End`] says the upload is whole (a tap
/// that closes before is an upload that stopped, an error, never a shorter
/// file). Counts the bytes handed over.
struct TapFeed {
    pieces: mpsc::Receiver<Tapped>,
    ended: bool,
    spare: Vec<Vec<u8>>,
    read: Arc<AtomicU64>,
    /// The parse's cancel flag: a feed waiting for a slow client's next
    /// piece stops when it is set (the time limit), so the parse lets go
    /// of its slot then, not when the client sends again.
    cancel: Arc<AtomicBool>,
    runtime: tokio::runtime::Handle,
}

/// How often a feed waiting for a piece looks at its cancel flag.
const TAP_CANCEL_POLL: Duration = Duration::from_millis(100);

/// Bytes per chunk handed to the upload's parse.
const TAP_CHUNK: usize = 1 << 20;

impl ChunkFeed for TapFeed {
    fn next_chunk(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        if self.ended {
            return Ok(None);
        }
        let mut chunk = self.spare.pop().unwrap_or_default();
        chunk.clear();
        chunk.resize(CHUNK_HEADROOM, 0);
        while !self.ended && chunk.len() < CHUNK_HEADROOM + TAP_CHUNK {
            let next = loop {
                if self.cancel.load(Ordering::Relaxed) {
                    return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the parse was stopped"));
                }
                let wait = tokio::time::timeout(TAP_CANCEL_POLL, self.pieces.recv());
                if let Ok(next) = self.runtime.block_on(wait) {
                    break next;
                }
            };
            match next {
                Some(Tapped::Bytes(piece)) => chunk.extend_from_slice(&piece),
                Some(Tapped::End) => self.ended = true,
                None => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the upload stopped before its end",
                    ));
                }
            }
        }
        if chunk.len() == CHUNK_HEADROOM {
            self.spare.push(chunk);
            return Ok(None);
        }
        self.read.fetch_add((chunk.len() - CHUNK_HEADROOM) as u64, Ordering::Relaxed);
        Ok(Some(chunk))
    }

    fn recycle(&mut self, chunk: Vec<u8>) {
        // The chunk being filled and one ahead: what a parse holds at most.
        if self.spare.len() < 2 && chunk.capacity() <= 2 * (CHUNK_HEADROOM + TAP_CHUNK) {
            self.spare.push(chunk);
        }
    }
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
pub(crate) struct Tracked {
    progress: Arc<Mutex<Progress>>,
    key: String,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.progress.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.key);
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
        Parser {
            options,
            timeout,
            permits: Arc::new(Semaphore::new(concurrency)),
            progress: Arc::default(),
            uploads: Arc::default(),
        }
    }

    /// Show `read` of `total` bytes as the progress of parsing `key` until
    /// the guard is dropped.
    pub(crate) fn track(&self, key: &str, read: Arc<AtomicU64>, total: u64) -> Tracked {
        self.progress.lock().unwrap_or_else(|p| p.into_inner()).insert(key.to_owned(), (read, total));
        Tracked { progress: Arc::clone(&self.progress), key: key.to_owned() }
    }

    /// Start parsing the upload staged at `staging_key` from the copies of
    /// its bytes sent to the returned tap, if two parse slots are free now
    /// (else `None`: the file is parsed after its commit, as it would be
    /// anyway). It holds one slot for as long as the client takes to send
    /// the file, so it never takes the last: a slow client does not hold
    /// back the parses of files already stored. Its time limit counts from
    /// now (see [`UploadParse::worth_redoing`]).
    pub(crate) fn parse_upload(&self, staging_key: &str, metrics: Arc<Metrics>) -> Option<Tap> {
        let mut permit = Arc::clone(&self.permits).try_acquire_many_owned(2).ok()?;
        // Taken two to check, one kept.
        drop(permit.split(1));
        let (tap, pieces) = mpsc::channel(TAP_PIECES);
        let (answer, result) = oneshot::channel();
        let read = Arc::new(AtomicU64::new(0));
        let cancel = Arc::new(AtomicBool::new(false));
        let options = ReadOptions { cancel: Some(Arc::clone(&cancel)), ..self.options.clone() };
        let source = TapFeed {
            pieces,
            ended: false,
            spare: Vec::new(),
            read: Arc::clone(&read),
            cancel: Arc::clone(&cancel),
            runtime: tokio::runtime::Handle::current(),
        };
        // The limit counts from the upload's first byte: a parse stopped by
        // it lets go of the upload, whose stored file is parsed after its
        // commit, under a limit of its own.
        let timed_out = Arc::new(AtomicBool::new(false));
        let watchdog = watchdog(Arc::clone(&cancel), Arc::clone(&timed_out), self.timeout);
        let entry = UploadParse { result, read, _cancel: CancelOnDrop(cancel) };
        self.uploads.lock().unwrap_or_else(|p| p.into_inner()).insert(staging_key.to_owned(), entry);
        let (uploads, key, limit) = (Arc::clone(&self.uploads), staging_key.to_owned(), self.timeout);
        tokio::spawn(async move {
            let started = Instant::now();
            let parsed = tokio::task::spawn_blocking(move || {
                // Read in the chunks the pieces were gathered into, in place:
                // one copy of the upload instead of two (stop 37).
                let parsed = read_snapshot_chunks(source, &options);
                drop(permit);
                parsed
            })
            .await;
            watchdog.abort();
            metrics.parse_seconds.observe(started.elapsed().as_secs_f64());
            let timed_out = timed_out.load(Ordering::Relaxed).then_some(limit);
            let parsed = match parsed {
                Ok(parsed) => parsed.map_err(|e| failure_of(e, timed_out)),
                Err(e) => Err(ParseFailure::Storage(anyhow::Error::from(e).context("parse worker"))),
            };
            drop(answer.send(parsed));
            tokio::time::sleep(UNCLAIMED).await;
            uploads.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
        });
        Some(tap)
    }

    /// The parse of the upload staged at `staging_key`, if one runs.
    pub(crate) fn take_upload_parse(&self, staging_key: &str) -> Option<UploadParse> {
        self.uploads.lock().unwrap_or_else(|p| p.into_inner()).remove(staging_key)
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
        let _tracked = self.track(key, Arc::clone(&read), total);
        let bridge = Counting { inner: source, read };
        let cancel = Arc::new(AtomicBool::new(false));
        let _stop_when_dropped = CancelOnDrop(Arc::clone(&cancel));
        let timed_out = Arc::new(AtomicBool::new(false));
        let watchdog = watchdog(Arc::clone(&cancel), Arc::clone(&timed_out), self.timeout);
        let options = ReadOptions { cancel: Some(cancel), ..self.options.clone() };
        let started = Instant::now();
        let result =
            tokio::task::spawn_blocking(move || read_snapshot(BufReader::with_capacity(1 << 20, bridge), &options))
                .await
                .map_err(|e| ParseFailure::Storage(anyhow::Error::from(e).context("parse worker")));
        watchdog.abort();
        metrics.parse_seconds.observe(started.elapsed().as_secs_f64());
        let timed_out = timed_out.load(Ordering::Relaxed).then_some(self.timeout);
        result?.map_err(|e| failure_of(e, timed_out))
    }
}

/// Stops a parse (`cancel`) once `limit` has passed, saying so (`timed_out`).
fn watchdog(cancel: Arc<AtomicBool>, timed_out: Arc<AtomicBool>, limit: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        tokio::time::sleep(limit).await;
        timed_out.store(true, Ordering::Relaxed);
        cancel.store(true, Ordering::Relaxed);
    })
}

/// What a reader's error means here; `timed_out`: the limit, when the
/// watchdog stopped the parse.
fn failure_of(error: ReadError, timed_out: Option<Duration>) -> ParseFailure {
    match (error, timed_out) {
        (ReadError::Cancelled { offset }, Some(limit)) => ParseFailure::TimedOut { secs: limit.as_secs_f64(), offset },
        // An upload's feed stopped by the limit while it waited for the client.
        (ReadError::Io { offset, source }, Some(limit)) if source.kind() == std::io::ErrorKind::TimedOut => {
            ParseFailure::TimedOut { secs: limit.as_secs_f64(), offset }
        }
        // A storage failure (or an upload that stopped) surfaces as an I/O
        // error of the reader.
        (ReadError::Io { source, .. }, _) => {
            ParseFailure::Storage(anyhow::Error::from(source).context("reading the file"))
        }
        (other, _) => ParseFailure::Invalid(other),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn parser() -> Parser {
        Parser::new(ReadOptions::default(), Duration::from_secs(60), 2)
    }

    /// The limit counts from the upload's first byte; a parse it stopped
    /// is one to do again from the stored file.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_upload_parse_out_of_time_is_redone_from_the_file() {
        let bytes = vramscope_shared::testing::corpus_bytes("oom_leak.pickle");
        let parser = Parser::new(ReadOptions::default(), Duration::from_millis(1), 2);
        let tap = parser.parse_upload("staging/a", Arc::new(Metrics::new())).expect("a free slot");
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The parse may be gone by now: the upload goes on regardless.
        drop(tap.send(Tapped::Bytes(Bytes::from(bytes))).await);
        drop(tap.send(Tapped::End).await);
        let early = parser.take_upload_parse("staging/a").expect("under way");
        match early.finish().await {
            Err(failure @ ParseFailure::TimedOut { .. }) => assert!(UploadParse::worth_redoing(&failure)),
            other => panic!("expected a time-out, got {:?}", other.map(|_| "a snapshot")),
        }
    }

    /// An upload parsed from its tap reads as the file does; its parse slot
    /// is held until the parse ends.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_upload_parsed_as_it_streams_reads_as_its_file() {
        let bytes = vramscope_shared::testing::corpus_bytes("oom_leak.pickle");
        let parser = parser();
        let tap = parser.parse_upload("staging/a", Arc::new(Metrics::new())).expect("a free slot");
        assert_eq!(parser.permits.available_permits(), 1, "one slot taken");
        assert!(parser.parse_upload("staging/b", Arc::new(Metrics::new())).is_none(), "never the last slot");
        for piece in bytes.chunks(1000) {
            tap.send(Tapped::Bytes(Bytes::copy_from_slice(piece))).await.expect("send");
        }
        tap.send(Tapped::End).await.expect("end");
        let early = parser.take_upload_parse("staging/a").expect("under way");
        let parsed = early.finish().await.expect("parsed");
        let expected = read_snapshot(&bytes[..], &ReadOptions::default()).expect("the file reads");
        assert_eq!(format!("{parsed:?}"), format!("{expected:?}"));
        assert!(parser.take_upload_parse("staging/a").is_none(), "taken once");
        assert_eq!(parser.permits.available_permits(), 2, "the slot is free again");
    }

    /// An upload that stops before its end is never parsed as a shorter
    /// file: its parse fails as storage (the commit, which never comes,
    /// would parse the stored file).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_upload_that_stops_is_not_a_shorter_file() {
        let bytes = vramscope_shared::testing::corpus_bytes("oom_leak.pickle");
        let parser = parser();
        let tap = parser.parse_upload("staging/a", Arc::new(Metrics::new())).expect("a free slot");
        // Half of it, and no `End`.
        tap.send(Tapped::Bytes(Bytes::copy_from_slice(&bytes[..bytes.len() / 2]))).await.expect("send");
        drop(tap);
        let early = parser.take_upload_parse("staging/a").expect("under way");
        match early.finish().await {
            Err(ParseFailure::Storage(_)) => {}
            other => panic!("expected a storage failure, got {:?}", other.map(|_| "a snapshot")),
        }
    }
}
