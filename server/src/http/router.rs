//! The router: every route, and the layers every request passes
//! (body limits, JSON errors, the same-origin guard, CORS, compression,
//! tracing, tokens).

use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tower_http::CompressionLevel;
use tower_http::compression::CompressionLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use super::error::{AppError, json_errors};
use super::{AppState, authorize, guard, role, v1, web};
use crate::settings::Settings;

/// The whole application.
pub(crate) fn app(state: AppState) -> Router {
    let timeout = Duration::from_secs(state.settings.request_timeout_secs);
    let api = v1::routes(timeout)
        .nest_service(
            v1::mcp::PATH,
            // rmcp reads the body itself, past `DefaultBodyLimit` (which
            // only axum's extractors honour): the same limit and timeout
            // as every other API request, as layers. The body is read whole
            // before rmcp sees it, so a chunked body over the limit is this
            // API's 413, not rmcp's 500 (issue 44).
            tower::ServiceBuilder::new()
                .layer(TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, timeout))
                .layer(middleware::from_fn_with_state(state.clone(), whole_body))
                .service(v1::mcp::service(state.clone(), state.settings.read_options())),
        )
        .route("/metrics", get(metrics_text))
        .route_layer(middleware::from_fn_with_state(state.clone(), role::deny_by_default))
        .layer(middleware::from_fn_with_state(state.clone(), authorize::authorize));
    Router::new()
        .route("/healthz", get(healthz))
        .merge(api)
        .merge(web::routes())
        // Every body is small but an upload's, which streams to storage with
        // its own limit (max_upload_bytes; its route lifts this one).
        .layer(DefaultBodyLimit::max(state.settings.max_body_bytes))
        .layer(middleware::from_fn_with_state(state.clone(), json_errors))
        .layer(middleware::from_fn_with_state(state.clone(), guard::same_origin_only))
        .layer(cors(&state.settings))
        // gzip at its fastest level: a timeline answer (~700 kB of JSON)
        // still shrinks 7x, at ~1 ms. The default level, and brotli or zstd
        // (which browsers prefer when offered), cost 40-55 ms at p99 in
        // `cargo bench --bench server`, more than the query itself.
        .layer(CompressionLayer::new().quality(CompressionLevel::Fastest).no_br().no_zstd().no_deflate())
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// Reads a body whole, up to `max_body_bytes` whether it comes with a
/// length or chunked, for a service that reads bodies itself (rmcp): past
/// the limit, this API's JSON 413.
async fn whole_body(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let max = state.settings.max_body_bytes;
    let (parts, body) = request.into_parts();
    match axum::body::to_bytes(body, max).await {
        Ok(bytes) => next.run(Request::from_parts(parts, axum::body::Body::from(bytes))).await,
        Err(e) => {
            let over =
                std::error::Error::source(&e).is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
            if over {
                AppError::BodyTooLarge(max).into_response()
            } else {
                AppError::BadRequest(format!("the request body could not be read: {e}")).into_response()
            }
        }
    }
}

fn cors(settings: &Settings) -> CorsLayer {
    // Closed by default: no Access-Control-Allow-Origin unless configured.
    // "*" (allowed only with tokens, see Settings::load) is any origin:
    // listing it as a value panicked at start-up.
    let allow = if settings.cors_allowed_origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(settings.cors_allowed_origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    CorsLayer::new()
        .allow_origin(allow)
        .allow_methods([Method::GET, Method::POST, Method::PATCH, Method::DELETE])
        .allow_headers([axum::http::header::AUTHORIZATION, axum::http::header::CONTENT_TYPE])
}

async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

async fn metrics_text(State(state): State<AppState>) -> impl IntoResponse {
    state.metrics.cached_snapshots.set(state.ingest.cache.len() as i64);
    state.metrics.cached_bytes.set(i64::try_from(state.ingest.cache.bytes()).unwrap_or(i64::MAX));
    state.metrics.token_hashes.set(state.auth.hashes() as i64);
    let (running, peak) = state.analyses.running();
    state.metrics.analyses_running.set(running);
    state.metrics.analyses_running_peak.set(peak);
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], state.metrics.render())
}
