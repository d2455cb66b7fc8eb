//! Views of a parsed snapshot: timeline windows, allocator state at a row,
//! stacks. Each loads the snapshot into the analysis cache on first use;
//! the answers themselves come from `vramscope_shared::views`, the same code
//! the dashboard runs in the browser for a file opened locally.

use axum::Json;
use axum::extract::{Path, Query, State};
use vramscope_shared::error::ViewError;
use vramscope_shared::timeline::TimelineWindow;
use vramscope_shared::views::annotations::{AnnotationsAnswer, AnnotationsParams};
use vramscope_shared::views::entry::{EntryAnswer, EntryParams};
use vramscope_shared::views::fragmentation::{FragmentationAnswer, FragmentationParams};
use vramscope_shared::views::host::{HostAnswer, HostParams};
use vramscope_shared::views::pools::{PoolsAnswer, PoolsParams};
use vramscope_shared::views::search::{SearchAnswer, SearchParams};
use vramscope_shared::views::segments::{SegmentsAnswer, SegmentsParams};
use vramscope_shared::views::state::{AllocatorState, StateParams};
use vramscope_shared::views::{self, BlocksParams, FrameJson, StateAt, TimelineParams};

use super::extract::analyzed;
use crate::http::AppState;
use crate::http::error::{AppError, AppResult};

impl From<ViewError> for AppError {
    fn from(e: ViewError) -> AppError {
        match e {
            ViewError::NotFound(what) => AppError::NotFound(what),
            ViewError::BadRequest(why) => AppError::BadRequest(why),
        }
    }
}

/// `GET /api/v1/snapshots/{id}/timeline`: see [`views::timeline`].
pub(crate) async fn timeline(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(p): Query<TimelineParams>,
) -> AppResult<Json<TimelineWindow>> {
    let a = analyzed(&state, &id).await?;
    Ok(Json(views::timeline(&a, &p)?))
}

/// `GET /api/v1/snapshots/{id}/blocks?at=`: see [`views::blocks`].
pub(crate) async fn blocks(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(p): Query<BlocksParams>,
) -> AppResult<Json<StateAt>> {
    let a = analyzed(&state, &id).await?;
    Ok(Json(views::blocks(&a, &p)?))
}

/// `GET /api/v1/snapshots/{id}/stacks/{stack}`: the frames, innermost first.
pub(crate) async fn stack(
    State(state): State<AppState>,
    Path((id, stack)): Path<(String, u32)>,
) -> AppResult<Json<Vec<FrameJson>>> {
    let a = analyzed(&state, &id).await?;
    Ok(Json(views::stack(&a, stack)?))
}

/// `GET /api/v1/snapshots/{id}/state?at=`: every segment and block after a
/// row, with the instant's figures; see [`views::state::state`].
pub(crate) async fn state(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(p): Query<StateParams>,
) -> AppResult<Json<AllocatorState>> {
    let a = analyzed(&state, &id).await?;
    // Rewinding walks the trace twice: off the async workers.
    Ok(Json(blocking(move || views::state::state(&a, &p)).await??))
}

/// `GET /api/v1/snapshots/{id}/segments`: see [`views::segments::segments`].
pub(crate) async fn segments(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(p): Query<SegmentsParams>,
) -> AppResult<Json<SegmentsAnswer>> {
    let a = analyzed(&state, &id).await?;
    Ok(Json(blocking(move || views::segments::segments(&a, &p)).await??))
}

/// `GET /api/v1/snapshots/{id}/fragmentation`: see
/// [`views::fragmentation::fragmentation`].
pub(crate) async fn fragmentation(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(p): Query<FragmentationParams>,
) -> AppResult<Json<FragmentationAnswer>> {
    let a = analyzed(&state, &id).await?;
    Ok(Json(blocking(move || views::fragmentation::fragmentation(&a, &p)).await??))
}

/// `GET /api/v1/snapshots/{id}/annotations`: see [`views::annotations::annotations`].
pub(crate) async fn annotations(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(p): Query<AnnotationsParams>,
) -> AppResult<Json<AnnotationsAnswer>> {
    let a = analyzed(&state, &id).await?;
    Ok(Json(views::annotations::annotations(&a, &p)?))
}

/// `GET /api/v1/snapshots/{id}/search?q=`: see [`views::search::search`].
pub(crate) async fn search(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(p): Query<SearchParams>,
) -> AppResult<Json<SearchAnswer>> {
    let a = analyzed(&state, &id).await?;
    Ok(Json(blocking(move || views::search::search(&a, &p)).await??))
}

/// `GET /api/v1/snapshots/{id}/entry?row=`: see [`views::entry::entry`].
pub(crate) async fn entry(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(p): Query<EntryParams>,
) -> AppResult<Json<EntryAnswer>> {
    let a = analyzed(&state, &id).await?;
    // The first question about a device's pools passes over its trace.
    Ok(Json(blocking(move || views::entry::entry(&a, &p)).await??))
}

/// `GET /api/v1/snapshots/{id}/pools?at=&px=`: memory by (pool, stream),
/// CUDA graphs' private pools beside the default one; see
/// [`views::pools::pools`].
pub(crate) async fn pools(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(p): Query<PoolsParams>,
) -> AppResult<Json<PoolsAnswer>> {
    let a = analyzed(&state, &id).await?;
    Ok(Json(blocking(move || views::pools::pools(&a, &p)).await??))
}

/// `GET /api/v1/snapshots/{id}/host?px=`: pinned host memory's figures and
/// timeline; see [`views::host::host`].
pub(crate) async fn host(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(p): Query<HostParams>,
) -> AppResult<Json<HostAnswer>> {
    let a = analyzed(&state, &id).await?;
    Ok(Json(blocking(move || views::host::host(&a, &p)).await??))
}

/// Run CPU work of a view on a blocking thread.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> AppResult<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| AppError::Internal(anyhow::anyhow!("a view's worker thread failed: {e}")))
}
