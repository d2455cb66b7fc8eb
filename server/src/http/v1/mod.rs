//! `/api/v1`: snapshots, their files, statistics and views.

mod extract;
mod findings;
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
use vramscope_shared::api::paths::{
    self, CHART_PNG, CHART_SVG, COMMENT, COMMENTS, COMPARE, FILE, JOB, JOB_CHECK, JOBS, LINKS, PREDICT, REPORT,
    SNAPSHOT, SNAPSHOT_CHECK, SNAPSHOTS, STACK, STATS, TOKEN,
};
use vramscope_shared::views::view::{self, Tune, View, Visit, WhatIf};

use super::AppState;
pub(crate) use findings::AnalysisQueue;
pub(crate) use snapshots::SIGNABLE;

/// The v1 routes. Uploads and file downloads are not under the request
/// timeout: they last as long as the bytes take.
pub(super) fn routes(timeout: Duration) -> Router<AppState> {
    let mut views = Mount(Router::new());
    view::each(&mut views);
    let timed = views
        .0
        .route(SNAPSHOTS.route(), get(snapshots::list))
        .route(SNAPSHOT.route(), get(snapshots::get_one).patch(snapshots::update).delete(snapshots::delete))
        .route(STATS.route(), get(snapshots::stats))
        .route(REPORT.route(), get(snapshots::report))
        .route(LINKS.route(), post(snapshots::links))
        .route(CHART_SVG.route(), get(snapshots::chart_svg))
        .route(CHART_PNG.route(), get(snapshots::chart_png))
        .route(STACK.route(), get(views::stack))
        .route(COMMENTS.route(), get(review::list).post(review::post))
        .route(COMMENT.route(), axum::routing::delete(review::delete))
        .route(TOKEN.route(), get(review::token_holder))
        .route(JOBS.route(), get(jobs::list))
        .route(JOB.route(), get(jobs::get_one))
        .route(COMPARE.route(), get(findings::compare))
        .route(SNAPSHOT_CHECK.route(), get(findings::check_snapshot))
        .route(JOB_CHECK.route(), get(findings::check_job))
        .route(PREDICT.route(), get(predict::predict))
        .layer(TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, timeout));
    let streaming = Router::new()
        .route(SNAPSHOTS.route(), post(upload::upload).layer(axum::extract::DefaultBodyLimit::disable()))
        .route(FILE.route(), get(snapshots::file));
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
            get(findings::whatif)
        } else if V::PATH == Tune::PATH {
            get(findings::tune)
        } else {
            get(views::answer::<V>)
        };
        let router = std::mem::take(&mut self.0);
        self.0 = router.route(&paths::view_route(V::PATH), handler);
    }
}
