//! The browser's files, embedded in the binary so one file deploys it all
//! and nothing is fetched from the internet.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use super::AppState;

/// The landing page: the snapshot library with upload. The leptos dashboard
/// (frontend/) replaces it as it lands.
const INDEX_HTML: &str = include_str!("../../../assets/index.html");

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/", get(index)).route("/snapshots/{id}", get(index))
}

async fn index() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], INDEX_HTML)
}
