//! A stored file to the analyzed snapshot every view reads: from the
//! cache, or joining the load under way, or opened from its persisted
//! index, or else parsed, indexed and persisted.
//!
//! A large snapshot ([`DEFERRED_WRITE_ROWS`]) is served from memory as
//! soon as its intervals and curves are built. Its allocation indexes are
//! built behind the first answers (which scan the intervals for a window's
//! largest allocations meanwhile), then its index file is written and
//! synced on another thread; once the file is durable the cache lets the
//! in-memory copy go, and the next view maps the file. A crash before
//! then costs one parse at the next open, never an answer: the row's
//! figures came from the parse, and no half-written index is ever opened.

use std::sync::Arc;

use anyhow::Context;
use vramscope_shared::indexed::IndexedSnapshot;
use vramscope_shared::{Snapshot, SnapshotStats};

use super::parse::UploadParse;
use super::{Ingest, Loaded, ParseFailure};

/// Trace rows from which a snapshot's index file is written after the
/// snapshot is served rather than before: about 60 MB of pickle, whose
/// index takes tenths of a second to write and sync (a second for 1 GB).
/// Below it the order stays the simple one: the file written, then served.
const DEFERRED_WRITE_ROWS: usize = 1 << 20;

impl Ingest {
    /// The analyzed snapshot of a stored file: from the cache, or joining
    /// the parse of it under way, or in a task of its own (see
    /// [`super::SnapshotCache`]): opened from its persisted index, or
    /// parsed (and persisted) when it has none.
    pub(crate) async fn load(&self, blob_key: &str) -> Loaded {
        let (ingest, key) = (self.clone(), blob_key.to_owned());
        self.cache.get_or_load(blob_key, move || async move { ingest.open_or_parse(&key).await }).await
    }

    /// The analyzed snapshot of the stored file `key`: opened from its
    /// persisted index, or else parsed, indexed and persisted.
    pub(crate) async fn open_or_parse(&self, key: &str) -> Result<Arc<IndexedSnapshot>, ParseFailure> {
        if let Some(analyzed) = self.indexes.open(key, &self.metrics).await {
            return Ok(warmed(Arc::new(analyzed)));
        }
        let snapshot = self.parser.parse_stored(&self.blobs, key, &self.metrics).await?;
        self.index(key, snapshot, None).await
    }

    /// The analyzed snapshot of the file `key` from the parse that ran
    /// while its upload (of `size` bytes) streamed in, shown as this
    /// file's parse; the stored file parsed instead if that parse did not
    /// finish ([`UploadParse::worth_redoing`]).
    pub(crate) async fn finish_upload_parse(
        &self,
        key: &str,
        early: UploadParse,
        size: u64,
    ) -> Result<Arc<IndexedSnapshot>, ParseFailure> {
        let _shown = self.parser.track(key, early.read(), size);
        match early.finish().await {
            Ok(snapshot) => self.index(key, snapshot, None).await,
            Err(failure) if UploadParse::worth_redoing(&failure) => {
                let error = failure.message();
                tracing::debug!(error, "the upload's own parse did not finish; parsing the stored file");
                self.open_or_parse(key).await
            }
            Err(failure) => Err(failure),
        }
    }

    /// Build the indexes of a snapshot just parsed from `key`, persist
    /// them, and return the snapshot mapped from that file (the parsed
    /// copy is dropped). If the file cannot be written, the parsed copy is
    /// served and the next open parses again. A large snapshot is returned
    /// before its allocation indexes are built (its first windows scan for
    /// their largest allocations meanwhile), and they are built and its
    /// file written behind (see the module's doc). The
    /// statistics, `stats` when the caller computed them, are kept with it
    /// (the background parse stores them).
    pub(crate) async fn index(
        &self,
        key: &str,
        snapshot: Snapshot,
        stats: Option<SnapshotStats>,
    ) -> Result<Arc<IndexedSnapshot>, ParseFailure> {
        let rows: usize = snapshot.devices.iter().map(|d| d.trace.len()).sum();
        let deferred = rows >= DEFERRED_WRITE_ROWS;
        let built = tokio::task::spawn_blocking(move || {
            if deferred {
                IndexedSnapshot::build_with_stats_deferred(snapshot, stats)
            } else {
                IndexedSnapshot::build_with_stats(snapshot, stats)
            }
        })
        .await
        .context("index worker")
        .map_err(ParseFailure::Storage)?;
        if deferred {
            let analyzed = Arc::new(built);
            let (ingest, key, held) = (self.clone(), key.to_owned(), Arc::clone(&analyzed));
            let counted = self.persisting();
            tokio::spawn(async move {
                ingest.persist_behind(&key, held).await;
                drop(counted);
            });
            return Ok(analyzed);
        }
        let analyzed = match self.indexes.save(key, built).await {
            Ok(mapped) => {
                self.metrics.index_writes.inc();
                mapped
            }
            Err(failed) => {
                let error = format!("{:#}", failed.error);
                tracing::warn!(file = key, error, "could not persist the index");
                *failed.parsed.ok_or_else(|| ParseFailure::Storage(failed.error))?
            }
        };
        Ok(warmed(Arc::new(analyzed)))
    }

    /// Write the index file of `analyzed`, served from memory meanwhile;
    /// once it is durable, the cache lets the in-memory copy go (the next
    /// view maps the file: the heap does not keep a second copy of what the
    /// file holds). Not written, the copy stays, as after a failed write.
    /// The copy's layout checkpoints are not warmed: that thread would
    /// keep it alive for seconds after it is let go.
    async fn persist_behind(&self, key: &str, analyzed: Arc<IndexedSnapshot>) {
        // First what the answers meanwhile scan for (nearly half of the build).
        let building = Arc::clone(&analyzed);
        if let Err(e) = tokio::task::spawn_blocking(move || building.build_allocation_indexes()).await {
            tracing::error!(file = key, error = format!("{e:#}"), "could not build the allocation indexes");
        }
        match self.indexes.write(key, Arc::clone(&analyzed)).await {
            Ok(()) => {
                self.metrics.index_writes.inc();
                self.cache.evict_if(key, &analyzed);
            }
            Err(e) => tracing::warn!(file = key, error = format!("{e:#}"), "could not persist the index"),
        }
    }
}

/// Build the layout checkpoints, where the state and segment views start
/// rewinding, on another blocking thread, off the answer's path: two
/// passes over the trace that the first segment timeline would otherwise
/// wait for. A view that comes first waits for that build rather than
/// doing it twice.
fn warmed(analyzed: Arc<IndexedSnapshot>) -> Arc<IndexedSnapshot> {
    let warm = Arc::clone(&analyzed);
    drop(tokio::task::spawn_blocking(move || warm.build_layout_checkpoints()));
    analyzed
}
