//! Views of a parsed snapshot, every one declared in
//! `vramscope_shared::views::view` (its path, query and answer) and served
//! here by one generic handler, [`answer`]: the snapshot behind `{id}`
//! loaded once into the analysis cache, the query read into the view's
//! parameters, the answer computed where its declared [`Work`] says. The
//! answers themselves come from `vramscope_shared::views`, the same code
//! the dashboard runs in the browser for a file opened locally.

use axum::Json;
use axum::extract::{Path, Query, State};
use vramscope_shared::views::view::{View, Work};
use vramscope_shared::views::{self, FrameJson};

use super::extract::Snapshot;
use crate::http::AppState;
use crate::http::error::{AppError, AppResult};

/// `GET /api/v1/snapshots/{id}/{V::PATH}?{V::Params}`: the view `V`. The
/// query is read before the snapshot is loaded, so a bad one is refused
/// at once.
pub(crate) async fn answer<V: View>(
    State(state): State<AppState>,
    Query(p): Query<V::Params>,
    Snapshot { id, analyzed: a }: Snapshot,
) -> AppResult<Json<V::Answer>> {
    let answer = match V::WORK {
        Work::Light if a.timeline.allocation_indexes_built() => V::answer(&a, &p)?,
        // A pass over the trace: off the async workers. So is a timeline
        // window of a large upload whose allocation index is still being
        // built behind its first answers (it scans the intervals).
        Work::Light | Work::Pass => blocking(move || V::answer(&a, &p)).await??,
        Work::Analysis => state.analyses.run(&id, move || Ok(V::answer(&a, &p)?)).await?,
    };
    Ok(Json(answer))
}

/// `GET /api/v1/snapshots/{id}/stacks/{stack}`: the frames, innermost first.
///
/// Not a declared view: its argument is a path segment, and a view's path is
/// a literal with all of its arguments in the query (`View::PATH`,
/// `View::Params`); making it one would mean a new URL (`stack?id=`) and
/// teaching the View table path parameters for this one route.
pub(crate) async fn stack(
    Path((_, stack)): Path<(String, u32)>,
    Snapshot { analyzed: a, .. }: Snapshot,
) -> AppResult<Json<Vec<FrameJson>>> {
    Ok(Json(views::stack(&a, stack)?))
}

/// Run CPU work of a view on a blocking thread.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> AppResult<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| AppError::Internal(anyhow::anyhow!("a view's worker thread failed: {e}")))
}
