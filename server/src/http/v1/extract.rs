//! What the v1 handlers take from a request's path and query before their
//! own work, one way for all: a snapshot's record (or 404), its analyzed
//! snapshot from the cache (never parsed twice; [`Snapshot`], the extractor
//! of the one behind `{id}`), a replay's checked capacity and allocator
//! settings.

use std::sync::Arc;

use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;
use vramscope_shared::indexed::IndexedSnapshot;
use vramscope_shared::views::findings;

use crate::http::AppState;
use crate::http::error::{AppError, AppResult};
use crate::store::{SnapshotRecord, SnapshotStatus};

/// The record of a snapshot, or 404.
pub(super) async fn record(state: &AppState, id: &str) -> AppResult<SnapshotRecord> {
    state.db.get(id).await?.ok_or_else(|| AppError::NotFound(format!("snapshot {id}")))
}

/// The analyzed snapshot behind an id.
pub(super) async fn analyzed(state: &AppState, id: &str) -> AppResult<Arc<IndexedSnapshot>> {
    Ok(analyzed_record(state, id).await?.1)
}

/// The record and the analyzed snapshot behind an id, from the analysis
/// cache (or the parse of it under way): a failed parse is 422 with its
/// reason, and nothing here parses on its own.
pub(super) async fn analyzed_record(state: &AppState, id: &str) -> AppResult<(SnapshotRecord, Arc<IndexedSnapshot>)> {
    let rec = record(state, id).await?;
    if rec.status == SnapshotStatus::Failed {
        return Err(AppError::Unprocessable(rec.meta.error.unwrap_or_else(|| "parse failed".to_owned())));
    }
    let analyzed = state.ingest.load(&rec.blob_key).await.map_err(|failure| AppError::from(&*failure))?;
    Ok((rec, analyzed))
}

/// The analyzed snapshot behind the route's `{id}`, as an extractor: 404
/// for an unknown id, 422 for a file that did not parse (see
/// [`analyzed_record`]).
pub(crate) struct Snapshot {
    /// The snapshot's id.
    pub(crate) id: String,
    /// The snapshot, analyzed.
    pub(crate) analyzed: Arc<IndexedSnapshot>,
}

impl FromRequestParts<AppState> for Snapshot {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> AppResult<Snapshot> {
        let params = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|e| AppError::BadRequest(format!("the snapshot's id: {e}")))?;
        let Some((_, id)) = params.iter().find(|(name, _)| *name == "id") else {
            return Err(AppError::Internal(anyhow::anyhow!("a snapshot's route without {{id}}")));
        };
        let id = id.to_owned();
        let analyzed = analyzed(state, &id).await?;
        Ok(Snapshot { id, analyzed })
    }
}

/// The capacity of a replay, checked ([`findings::replay_capacity`]).
pub(super) fn capacity(text: Option<&str>) -> AppResult<Option<u64>> {
    Ok(findings::replay_capacity(text)?)
}

/// The allocator settings of a replay, checked and in one spelling
/// ([`findings::replay_alloc_conf`]).
pub(super) fn alloc_conf(text: Option<&str>) -> AppResult<Option<String>> {
    Ok(findings::replay_alloc_conf(text)?)
}
