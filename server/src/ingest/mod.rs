//! From a stored snapshot file to the analyzed snapshot the views read,
//! once: parse it (`parse`), build its indexes, persist them beside the
//! file (`index_file`), and keep the result in memory (`cache`). Every
//! later open, on this instance or another, maps the persisted index.
//! `background` runs the parse of a large upload after its answer, resumes
//! the parses a stopped server left, and gives up on a file that cannot be
//! read.

mod background;
pub(crate) mod cache;
pub(crate) mod commit;
pub(crate) mod index_file;
pub(crate) mod labels;
pub(crate) mod parse;

use std::ops::Deref;
use std::sync::Arc;

use anyhow::Context;
use vramscope_shared::Snapshot;
use vramscope_shared::analyzed::Analyzed;

pub(crate) use cache::{AnalysisCache, Loaded};
pub(crate) use index_file::IndexFiles;
pub(crate) use parse::{ParseFailure, Parser};

use crate::metrics::Metrics;
use crate::store::{BlobStore, Db};
pub(crate) use background::stats_json;

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
    /// Analyzed snapshots in memory, bounded in bytes.
    pub(crate) cache: AnalysisCache,
    /// The server's metrics.
    pub(crate) metrics: Arc<Metrics>,
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

    /// The analyzed snapshot of the stored file `key`: opened from its
    /// persisted index, or else parsed, indexed and persisted.
    pub(crate) async fn open_or_parse(&self, key: &str) -> Result<Arc<Analyzed>, ParseFailure> {
        if let Some(analyzed) = self.indexes.open(key, &self.metrics).await {
            return Ok(warmed(Arc::new(analyzed)));
        }
        let snapshot = self.parser.parse_stored(&self.blobs, key, &self.metrics).await?;
        self.index(key, snapshot).await
    }

    /// Build the indexes of a snapshot just parsed from `key`, persist
    /// them, and return the snapshot mapped from that file (the parsed
    /// copy is dropped). If the file cannot be written, the parsed copy is
    /// served and the next open parses again.
    pub(crate) async fn index(&self, key: &str, snapshot: Snapshot) -> Result<Arc<Analyzed>, ParseFailure> {
        let built = tokio::task::spawn_blocking(move || Analyzed::build(snapshot))
            .await
            .context("index worker")
            .map_err(ParseFailure::Storage)?;
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
}

/// Build the layout checkpoints, where the state and segment views start
/// rewinding, on another blocking thread, off the answer's path: two
/// passes over the trace that the first segment timeline would otherwise
/// wait for. A view that comes first waits for that build rather than
/// doing it twice.
fn warmed(analyzed: Arc<Analyzed>) -> Arc<Analyzed> {
    let warm = Arc::clone(&analyzed);
    drop(tokio::task::spawn_blocking(move || warm.build_layout_checkpoints()));
    analyzed
}
