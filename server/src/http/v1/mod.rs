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

use axum::routing::MethodRouter;
use vramscope_shared::views::view::{self, Tune, View, Visit, WhatIf};

use super::AppState;
pub(crate) use analysis::AnalysisQueue;
pub(crate) use snapshots::SIGNABLE;

/// The v1 routes. Uploads and file downloads are not under the request
/// timeout: they last as long as the bytes take.
pub(super) fn routes(timeout: Duration) -> Router<AppState> {
    let mut views = Mount(Router::new());
    view::each(&mut views);
    let timed = views
        .0
        .route("/api/v1/snapshots", get(snapshots::list))
        .route("/api/v1/snapshots/{id}", get(snapshots::get_one).patch(snapshots::update).delete(snapshots::delete))
        .route("/api/v1/snapshots/{id}/stats", get(snapshots::stats))
        .route("/api/v1/snapshots/{id}/report.html", get(snapshots::report))
        .route("/api/v1/snapshots/{id}/links", post(snapshots::links))
        .route("/api/v1/snapshots/{id}/chart.svg", get(snapshots::chart_svg))
        .route("/api/v1/snapshots/{id}/chart.png", get(snapshots::chart_png))
        .route("/api/v1/snapshots/{id}/stacks/{stack}", get(views::stack))
        .route("/api/v1/snapshots/{id}/comments", get(review::list).post(review::post))
        .route("/api/v1/snapshots/{id}/comments/{comment}", axum::routing::delete(review::delete))
        .route("/api/v1/token", get(review::token_holder))
        .route("/api/v1/jobs", get(jobs::list))
        .route("/api/v1/jobs/{job}", get(jobs::get_one))
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

/// Every declared view, mounted at `/api/v1/snapshots/{id}/{PATH}`: the
/// generic handler ([`views::answer`]), except where this server keeps an
/// expensive part of the answer between requests (the what-if replays and
/// the tune rankings, [`analysis`]).
struct Mount(Router<AppState>);

impl Visit for Mount {
    fn visit<V: View>(&mut self) {
        let handler: MethodRouter<AppState> = if V::PATH == WhatIf::PATH {
            get(analysis::whatif)
        } else if V::PATH == Tune::PATH {
            get(analysis::tune)
        } else {
            get(views::answer::<V>)
        };
        let router = std::mem::take(&mut self.0);
        self.0 = router.route(&format!("/api/v1/snapshots/{{id}}/{}", V::PATH), handler);
    }
}
