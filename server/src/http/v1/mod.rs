//! `/api/v1`: snapshots, their files, statistics and views.

mod analysis;
mod extract;
mod jobs;
mod lru;
pub(crate) mod mcp;
mod predict;
mod review;
mod snapshots;
mod telemetry;
mod upload;
mod views;

use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{get, post};
use tower_http::timeout::TimeoutLayer;

use super::AppState;
pub(crate) use analysis::AnalysisQueue;
pub(crate) use snapshots::SIGNABLE;

/// Routes whose role is not their method's (see `http::required_role`).
pub(crate) fn role_override(method: &axum::http::Method, path: &str) -> Option<crate::auth::Role> {
    review::role_override(method, path)
        .or_else(|| snapshots::role_override(method, path))
        .or_else(|| mcp::role_override(method, path))
}

/// The v1 routes. Uploads and file downloads are not under the request
/// timeout: they last as long as the bytes take.
pub(super) fn routes(timeout: Duration) -> Router<AppState> {
    let timed = Router::new()
        .route("/api/v1/snapshots", get(snapshots::list))
        .route("/api/v1/snapshots/{id}", get(snapshots::get_one).patch(snapshots::update).delete(snapshots::delete))
        .route("/api/v1/snapshots/{id}/stats", get(snapshots::stats))
        .route("/api/v1/snapshots/{id}/report.html", get(snapshots::report))
        .route("/api/v1/snapshots/{id}/links", post(snapshots::links))
        .route("/api/v1/snapshots/{id}/chart.svg", get(snapshots::chart_svg))
        .route("/api/v1/snapshots/{id}/chart.png", get(snapshots::chart_png))
        .route("/api/v1/snapshots/{id}/timeline", get(views::timeline))
        .route("/api/v1/snapshots/{id}/blocks", get(views::blocks))
        .route("/api/v1/snapshots/{id}/stacks/{stack}", get(views::stack))
        .route("/api/v1/snapshots/{id}/state", get(views::state))
        .route("/api/v1/snapshots/{id}/segments", get(views::segments))
        .route("/api/v1/snapshots/{id}/fragmentation", get(views::fragmentation))
        .route("/api/v1/snapshots/{id}/annotations", get(views::annotations))
        .route("/api/v1/snapshots/{id}/search", get(views::search))
        .route("/api/v1/snapshots/{id}/entry", get(views::entry))
        .route("/api/v1/snapshots/{id}/host", get(views::host))
        .route("/api/v1/snapshots/{id}/pools", get(views::pools))
        .route("/api/v1/snapshots/{id}/comments", get(review::list).post(review::post))
        .route("/api/v1/snapshots/{id}/comments/{comment}", axum::routing::delete(review::delete))
        .route("/api/v1/token", get(review::token_holder))
        .route("/api/v1/jobs", get(jobs::list))
        .route("/api/v1/jobs/{job}", get(jobs::get_one))
        .route("/api/v1/snapshots/{id}/whatif", get(analysis::whatif))
        .route("/api/v1/snapshots/{id}/tune", get(analysis::tune))
        .route("/api/v1/snapshots/{id}/explain", get(analysis::explain))
        .route("/api/v1/snapshots/{id}/leaks", get(analysis::leaks))
        .route("/api/v1/snapshots/{id}/breakdown", get(analysis::breakdown))
        .route("/api/v1/compare", get(analysis::compare))
        .route("/api/v1/snapshots/{id}/check", get(analysis::check_snapshot))
        .route("/api/v1/jobs/{job}/check", get(analysis::check_job))
        .route("/api/v1/predict", get(predict::predict))
        .layer(TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, timeout));
    let streaming = Router::new()
        .route("/api/v1/snapshots", post(upload::upload).layer(axum::extract::DefaultBodyLimit::disable()))
        .route("/api/v1/snapshots/{id}/file", get(snapshots::file));
    timed.merge(streaming).merge(telemetry::routes())
}
