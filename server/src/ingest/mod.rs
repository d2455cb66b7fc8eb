//! From a stored snapshot file to the analyzed snapshot the views read,
//! once: parse it (`parse`), build its indexes, persist them beside the
//! file (`index_file`), and keep the result in memory (`cache`). Every
//! later open, on this instance or another, maps the persisted index.
//!
//! `Ingest` is the handle; its entry points live by concept: `commit`
//! (an upload staged, checked, parsed inline or not, committed),
//! `load` (a stored file to its analyzed snapshot, through the cache, the
//! persisted index or a parse: what every view uses), `background` (the
//! parse of a large upload after its answer, the parses a stopped server
//! left resumed at start-up, a file that cannot be read given up on).

mod background;
pub(crate) mod cache;
pub(crate) mod commit;
pub(crate) mod index_file;
pub(crate) mod labels;
mod load;
pub(crate) mod parse;

use std::ops::Deref;
use std::sync::Arc;

pub(crate) use cache::{Loaded, SnapshotCache};
pub(crate) use index_file::IndexFiles;
pub(crate) use parse::{ParseFailure, Parser};

use crate::metrics::Metrics;
use crate::store::{BlobStore, Db};

/// Ingestion's handle: what loading and parsing stored files needs. Cheap
/// to clone (one `Arc`), so background tasks own one.
#[derive(Clone)]
pub(crate) struct Ingest(Arc<Parts>);

/// What [`Ingest`] holds.
pub(crate) struct Parts {
    /// Snapshot rows: a background parse records its outcome there.
    pub(crate) db: Db,
    /// The stored files.
    pub(crate) blobs: BlobStore,
    /// Parses stored files under the settings' limits, a few at a time.
    pub(crate) parser: Parser,
    /// The persisted indexes of stored files.
    pub(crate) indexes: IndexFiles,
    /// IndexedSnapshot snapshots in memory, bounded in bytes.
    pub(crate) cache: SnapshotCache,
    /// The server's metrics.
    pub(crate) metrics: Arc<Metrics>,
    /// Woken each time a parse of this instance ends, ready or failed:
    /// what a request waiting on a parse (`stats?wait=`) listens to.
    pub(crate) settled: tokio::sync::Notify,
    /// Index files being built and written behind an answer (a large
    /// snapshot's): a graceful stop waits for them
    /// ([`Ingest::finish_persisting`]).
    pub(crate) persisting: tokio::sync::watch::Sender<usize>,
}

/// Counts an index being written behind until dropped.
pub(crate) struct Persisting(tokio::sync::watch::Sender<usize>);

impl Drop for Persisting {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Deref for Ingest {
    type Target = Parts;
    fn deref(&self) -> &Parts {
        &self.0
    }
}

impl Ingest {
    /// The handle over these parts.
    pub(crate) fn new(parts: Parts) -> Ingest {
        Ingest(Arc::new(parts))
    }

    /// Count one more index being written behind, until the guard drops.
    pub(crate) fn persisting(&self) -> Persisting {
        self.persisting.send_modify(|n| *n += 1);
        Persisting(self.persisting.clone())
    }

    /// Wait, at most `limit`, for the index files being written behind to
    /// be written, saying so in the log: a graceful stop right after a
    /// large upload otherwise dropped its index, and the next start parsed
    /// the file again. True when none is left.
    pub(crate) async fn finish_persisting(&self, limit: std::time::Duration) -> bool {
        let writing = *self.persisting.borrow();
        if writing == 0 {
            return true;
        }
        tracing::warn!(
            writing,
            limit_secs = limit.as_secs_f64(),
            "waiting for index files being written before stopping"
        );
        let mut watch = self.persisting.subscribe();
        let done = tokio::time::timeout(limit, watch.wait_for(|n| *n == 0)).await.is_ok_and(|r| r.is_ok());
        if done {
            tracing::warn!(writing, "index files written; stopping");
        } else {
            tracing::warn!(
                left = *self.persisting.borrow(),
                "stopping before every index file was written (shutdown_index_wait_secs): the next open parses again"
            );
        }
        done
    }
}
