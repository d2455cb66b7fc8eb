//! The HTTP API and the dashboard's files: `fn app(state) -> Router`.

pub(crate) mod error;
mod guard;
mod listen;
pub(crate) mod role;

mod v1;
pub(crate) mod web;

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use tower_http::CompressionLevel;
use tower_http::compression::CompressionLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::auth::{Auth, Checked, Identity, LinkSigner, Role};
use crate::ingest::{AnalysisCache, IndexFiles, Ingest, Parser, Parts as IngestParts};
use crate::metrics::Metrics;
use crate::settings::Settings;
use crate::store::{BlobStore, Db};
use error::AppError;
pub(crate) use listen::serve;

/// Shared state of the server: cheap to clone.
#[derive(Clone)]
pub(crate) struct AppState(Arc<Inner>);

/// What the handlers share.
pub(crate) struct Inner {
    pub(crate) settings: Settings,
    pub(crate) db: Db,
    pub(crate) blobs: BlobStore,
    pub(crate) auth: Auth,
    pub(crate) metrics: Arc<Metrics>,
    /// Parsing, indexing and the cache of analyzed snapshots.
    pub(crate) ingest: Ingest,
    /// Where the analysis routes wait for a thread.
    pub(crate) analyses: v1::AnalysisQueue,
    /// Signs the dashboard's download links.
    pub(crate) links: LinkSigner,
    /// `trusted_proxies`, read.
    pub(crate) proxies: Vec<ipnet::IpNet>,
}

impl Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl AppState {
    /// `link_key`: the key of signed links, shared by every instance
    /// (`Db::shared_secret`).
    pub(crate) fn new(settings: Settings, db: Db, blobs: BlobStore, link_key: Vec<u8>) -> anyhow::Result<AppState> {
        let auth = Auth::new(db.clone(), settings.tokens_required());
        let cache = AnalysisCache::new(settings.cache_entries, settings.cache_budget());
        let parser = Parser::new(
            settings.read_options(),
            Duration::from_secs_f64(settings.parse_timeout_secs),
            settings.parse_concurrency,
        );
        let analyses = v1::AnalysisQueue::new(settings.analysis_concurrency);
        let links = LinkSigner::new(link_key);
        let proxies = settings.trusted_proxies()?;
        let indexes =
            IndexFiles::new(blobs.clone(), &settings.data_dir.join("index-cache"), settings.index_cache_bytes)?;
        let metrics = Arc::new(Metrics::new());
        let ingest = Ingest::new(IngestParts {
            db: db.clone(),
            blobs: blobs.clone(),
            parser,
            indexes,
            cache,
            metrics: Arc::clone(&metrics),
            settled: tokio::sync::Notify::new(),
        });
        Ok(AppState(Arc::new(Inner { settings, db, blobs, auth, metrics, ingest, analyses, links, proxies })))
    }
}

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
        .layer(middleware::from_fn_with_state(state.clone(), authorize));
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

/// Extractors refuse an oversized body with a plain-text 413: answer this
/// API's JSON error instead.
async fn json_errors(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let api = request.uri().path().starts_with("/api/");
    let response = next.run(request).await;
    let is_json = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if response.status() == StatusCode::PAYLOAD_TOO_LARGE && !is_json {
        return AppError::BodyTooLarge(state.settings.max_body_bytes).into_response();
    }
    // axum's extractors refuse a bad query, path or body with plain text
    // quoting the input (`unknown variant `…``): the API answers its JSON
    // error, its message bounded like every other.
    let status = response.status();
    if api && !is_json && matches!(status.as_u16(), 400 | 415 | 422) {
        let text = match axum::body::to_bytes(response.into_body(), 1 << 20).await {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(_) => "the request was refused".to_owned(),
        };
        let mut answer = AppError::BadRequest(text).into_response();
        *answer.status_mut() = status;
        return answer;
    }
    response
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

/// A GET of a snapshot's file or export carrying a valid signature (see
/// [`LinkSigner`]) and no token: a viewer for that one path.
fn signed_link(state: &AppState, request: &Request) -> Option<Identity> {
    if request.method() != Method::GET || request.headers().contains_key(axum::http::header::AUTHORIZATION) {
        return None;
    }
    let path = request.uri().path();
    if !v1::SIGNABLE.iter().any(|e| e.matches(path)) {
        return None;
    }
    let query = request.uri().query()?;
    let (mut expires, mut sig) = (None, None);
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        match &*k {
            "expires" => expires = v.parse::<i64>().ok(),
            "sig" => sig = Some(v.into_owned()),
            _ => {}
        }
    }
    state.links.verify(path, expires?, &sig?).then(|| Identity {
        name: "signed link".to_owned(),
        role: Role::Viewer,
        token_id: None,
    })
}

async fn authorize(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    if let Some(identity) = signed_link(&state, &request) {
        request.extensions_mut().insert::<Identity>(identity);
        return next.run(request).await;
    }
    let token = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let client = guard::client_address(&request, &state.proxies);
    let identity = match state.auth.identify(token, client).await {
        Ok(Checked::Holder(identity)) => identity,
        Ok(Checked::Refused) => {
            state.metrics.error("unauthorized");
            return AppError::Unauthorized.into_response();
        }
        Ok(Checked::Limited(wait)) => {
            state.metrics.error("rate_limited");
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            let why = format!(
                "too many wrong secrets for this token id from this address: try again in {secs} s \
                 (requests from other addresses are not affected)"
            );
            let mut response = AppError::TooManyRequests(why).into_response();
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from(secs));
            return response;
        }
        Err(e) => return AppError::Internal(e).into_response(),
    };
    // The role each route needs is declared on it (see `role`).
    request.extensions_mut().insert::<Identity>(identity);
    let response = next.run(request).await;
    if response.status().is_server_error() {
        state.metrics.error("internal");
    } else if response.status() == StatusCode::UNPROCESSABLE_ENTITY {
        state.metrics.error("unprocessable");
    }
    response
}

#[cfg(test)]
mod tests {
    //! The router driven in process with `oneshot` (no socket), over a real
    //! SQLite database and a real local blob folder.

    use axum::body::Body;
    use axum::http::{Request, StatusCode, header};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;

    async fn test_app(tag: &str) -> Router {
        let dir = std::env::temp_dir().join(format!("vramscope-oneshot-{tag}-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let settings = Settings { data_dir: dir, ..Settings::default() };
        let (db, blobs) = settings.open_stores().await.expect("stores");
        let key = db.shared_secret("link_key").await.expect("link key");
        app(AppState::new(settings, db, blobs, key).expect("state"))
    }

    async fn json(response: axum::response::Response) -> serde_json::Value {
        let bytes = response.into_body().collect().await.expect("body").to_bytes();
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null)
    }

    use vramscope_shared::testing::corpus_bytes as fixture;

    #[tokio::test]
    async fn healthz_answers_without_a_token() {
        let response =
            test_app("health").await.oneshot(Request::get("/healthz").body(Body::empty()).expect("req")).await;
        let response = response.expect("response");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(json(response).await["status"], "ok");
    }

    #[tokio::test]
    async fn upload_then_stats_in_process() {
        let app = test_app("upload").await;
        let request = Request::post("/api/v1/snapshots?name=streams.pickle&rank=1")
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .body(Body::from(fixture("streams.pickle")))
            .expect("request");
        let response = app.clone().oneshot(request).await.expect("response");
        assert_eq!(response.status(), StatusCode::CREATED);
        let id = json(response).await["id"].as_str().expect("id").to_owned();
        let request = Request::get(format!("/api/v1/snapshots/{id}/stats")).body(Body::empty()).expect("request");
        let stats = json(app.clone().oneshot(request).await.expect("response")).await;
        assert_eq!(stats["devices"][0]["trace_entries"], 1727);
        assert_eq!(stats["file"], "streams.pickle");
    }

    #[tokio::test]
    async fn unknown_ids_bad_cursors_and_bad_triggers_are_client_errors() {
        let app = test_app("errors").await;
        let get = |uri: &str| Request::get(uri).body(Body::empty()).expect("request");
        let response = app.clone().oneshot(get("/api/v1/snapshots/nope/stats")).await.expect("response");
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert_eq!(json(response).await["kind"], "not_found");
        let response = app.clone().oneshot(get("/api/v1/snapshots?cursor=garbage")).await.expect("response");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let request = Request::post("/api/v1/snapshots?trigger=sometimes")
            .body(Body::from(fixture("state_only.pickle")))
            .expect("r");
        let response = app.clone().oneshot(request).await.expect("response");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let request = Request::get("/api/v1/snapshots?limit=1").body(Body::empty()).expect("request");
        let page = json(app.oneshot(request).await.expect("response")).await;
        assert_eq!(page["items"], serde_json::json!([]), "the refused upload left no row");
    }
}
