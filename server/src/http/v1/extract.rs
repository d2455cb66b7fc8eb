//! What the v1 handlers take from a request's path and query before their
//! own work, one way for all: a snapshot's record (or 404), its analyzed
//! snapshot from the cache (never parsed twice), a replay's checked
//! capacity and allocator settings.

use std::sync::Arc;

use vramscope_shared::analyzed::Analyzed;
use vramscope_shared::views::analysis;

use crate::http::AppState;
use crate::http::error::{AppError, AppResult};
use crate::store::{SnapshotRecord, SnapshotStatus};

/// The record of a snapshot, or 404.
pub(super) async fn record(state: &AppState, id: &str) -> AppResult<SnapshotRecord> {
    state.db.get(id).await?.ok_or_else(|| AppError::NotFound(format!("snapshot {id}")))
}

/// The analyzed snapshot behind an id.
pub(super) async fn analyzed(state: &AppState, id: &str) -> AppResult<Arc<Analyzed>> {
    Ok(analyzed_record(state, id).await?.1)
}

/// The record and the analyzed snapshot behind an id, from the analysis
/// cache (or the parse of it under way): a failed parse is 422 with its
/// reason, and nothing here parses on its own.
pub(super) async fn analyzed_record(state: &AppState, id: &str) -> AppResult<(SnapshotRecord, Arc<Analyzed>)> {
    let rec = record(state, id).await?;
    if rec.status == SnapshotStatus::Failed {
        return Err(AppError::Unprocessable(rec.meta.error.unwrap_or_else(|| "parse failed".to_owned())));
    }
    let analyzed = state.ingest.load(&rec.blob_key).await.map_err(|failure| AppError::from(&*failure))?;
    Ok((rec, analyzed))
}

/// The capacity of a replay, checked ([`analysis::replay_capacity`]).
pub(super) fn capacity(text: Option<&str>) -> AppResult<Option<u64>> {
    Ok(analysis::replay_capacity(text)?)
}

/// The allocator settings of a replay, checked and in one spelling
/// ([`analysis::replay_alloc_conf`]).
pub(super) fn alloc_conf(text: Option<&str>) -> AppResult<Option<String>> {
    Ok(analysis::replay_alloc_conf(text)?)
}
