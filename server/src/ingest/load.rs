//! A stored file to the analyzed snapshot every view reads: from the
//! cache, or joining the load under way, or opened from its persisted
//! index, or else parsed, indexed and persisted.

use std::sync::Arc;

use anyhow::Context;
use vramscope_shared::Snapshot;
use vramscope_shared::analyzed::Analyzed;

use super::{Ingest, Loaded, ParseFailure};

impl Ingest {
    /// The analyzed snapshot of a stored file: from the cache, or joining
    /// the parse of it under way, or in a task of its own (see
    /// [`super::AnalysisCache`]): opened from its persisted index, or
    /// parsed (and persisted) when it has none.
    pub(crate) async fn load(&self, blob_key: &str) -> Loaded {
        let (ingest, key) = (self.clone(), blob_key.to_owned());
        self.cache.get_or_load(blob_key, move || async move { ingest.open_or_parse(&key).await }).await
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
