//! The one error type of the HTTP API, and its JSON form:
//! `{"error": "<what went wrong>", "kind": "<stable name>"}`.

use axum::Json;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use vramscope_shared::error::ViewError;

use super::AppState;

/// Why a request failed.
#[derive(Debug)]
pub(crate) enum AppError {
    /// No such snapshot, stack or device.
    NotFound(String),
    /// A malformed request (bad query parameter, bad field).
    BadRequest(String),
    /// No token, or a token that does not verify.
    Unauthorized,
    /// A valid token whose role is too low for the route.
    Forbidden(&'static str),
    /// The upload is larger than the configured limit.
    PayloadTooLarge(u64),
    /// Any other request body larger than `max_body_bytes`.
    BodyTooLarge(usize),
    /// A body of a type the route does not take.
    UnsupportedMediaType(String),
    /// Without tokens: a `Host` that does not name this server (DNS rebinding).
    ForeignHost(String),
    /// Without tokens: a change asked for by another web page.
    CrossOrigin(String),
    /// Asked again too soon (capture now).
    TooManyRequests(String),
    /// A configured count is reached (a snapshot's comments): 409.
    LimitReached(String),
    /// The file is not a readable snapshot, or its parse was stopped: the
    /// reader's error kind (or `parse_timeout`) and message.
    Unreadable {
        /// Stable kind (`truncated`, `memory_budget`, `parse_timeout`, …).
        kind: &'static str,
        /// What was wrong, and where.
        message: String,
    },
    /// The snapshot exists but could not be parsed (an earlier background parse failed).
    Unprocessable(String),
    /// The snapshots are readable but cannot answer the question asked (a
    /// prediction over a wrapped trace, a device without one): the
    /// analysis's stable kind and message.
    Unanswerable {
        /// Stable kind (`trace_wrapped`, `no_trace`, …).
        kind: &'static str,
        /// What was wrong, and where.
        message: String,
    },
    /// Anything else: storage, database. Logged, and answered without details.
    Internal(anyhow::Error),
}

impl AppError {
    fn status_and_kind(&self) -> (StatusCode, &'static str) {
        match self {
            AppError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            AppError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            AppError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            AppError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            AppError::PayloadTooLarge(_) | AppError::BodyTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
            AppError::UnsupportedMediaType(_) => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
            AppError::ForeignHost(_) => (StatusCode::FORBIDDEN, "foreign_host"),
            AppError::CrossOrigin(_) => (StatusCode::FORBIDDEN, "cross_origin"),
            AppError::TooManyRequests(_) => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
            AppError::LimitReached(_) => (StatusCode::CONFLICT, "limit_reached"),
            AppError::Unreadable { kind, .. } => (StatusCode::UNPROCESSABLE_ENTITY, kind),
            AppError::Unprocessable(_) => (StatusCode::UNPROCESSABLE_ENTITY, "parse_failed"),
            AppError::Unanswerable { kind, .. } => (StatusCode::UNPROCESSABLE_ENTITY, kind),
            AppError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }

    pub(crate) fn message(&self) -> String {
        match self {
            AppError::NotFound(what) => format!("not found: {what}"),
            AppError::BadRequest(why) => why.clone(),
            AppError::Unauthorized => "a valid API token is required (Authorization: Bearer vs_...)".to_owned(),
            AppError::Forbidden(role) => format!("this needs a token with the {role} role"),
            AppError::PayloadTooLarge(limit) => format!("upload larger than the limit of {limit} bytes"),
            AppError::BodyTooLarge(limit) => {
                format!("request body larger than the limit of {limit} bytes (max_body_bytes)")
            }
            AppError::UnsupportedMediaType(why) | AppError::TooManyRequests(why) | AppError::LimitReached(why) => {
                why.clone()
            }
            AppError::ForeignHost(host) => format!(
                "Host {host:?} does not name this server: without API tokens it answers only requests to its own \
                 address, localhost or a name in allowed_hosts (this stops DNS rebinding)"
            ),
            AppError::CrossOrigin(what) => format!(
                "refused {what}: without API tokens this server takes changes only from its own pages and from \
                 clients that are not web pages"
            ),
            AppError::Unreadable { message, .. } | AppError::Unanswerable { message, .. } => message.clone(),
            AppError::Unprocessable(why) => why.clone(),
            AppError::Internal(_) => "internal error (see the server log)".to_owned(),
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let (status, kind) = self.status_and_kind();
        if let AppError::Internal(e) = &self {
            tracing::error!(error = format!("{e:#}"), "request failed");
        }
        let body = vramscope_shared::api::ErrorBody { error: bounded(self.message()), kind: kind.to_owned() };
        let mut response = (status, Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert("www-authenticate", axum::http::HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// Most characters of an error message answered: messages name what was
/// wrong and where, and some quote the client's input (a query value, a
/// path segment), which must not come back whole (a 50 KB query value was
/// echoed in full by five routes).
pub(crate) const MAX_MESSAGE_CHARS: usize = 300;

/// `message`, cut to [`MAX_MESSAGE_CHARS`] with a note saying so.
pub(crate) fn bounded(message: String) -> String {
    match message.char_indices().nth(MAX_MESSAGE_CHARS) {
        None => message,
        Some((at, _)) => {
            let left = message[at..].chars().count();
            format!("{}… ({left} more characters cut)", &message[..at])
        }
    }
}

impl From<&crate::ingest::ParseFailure> for AppError {
    fn from(failure: &crate::ingest::ParseFailure) -> AppError {
        match failure {
            crate::ingest::ParseFailure::Storage(e) => AppError::Internal(anyhow::anyhow!("{e:#}")),
            other => AppError::Unreadable { kind: other.kind(), message: other.message() },
        }
    }
}

impl From<ViewError> for AppError {
    fn from(e: ViewError) -> AppError {
        match e {
            ViewError::NotFound(what) => AppError::NotFound(what),
            ViewError::BadRequest(why) => AppError::BadRequest(why),
        }
    }
}

impl From<anyhow::Error> for AppError {
    fn from(e: anyhow::Error) -> Self {
        AppError::Internal(e)
    }
}

/// Result of a handler.
pub(crate) type AppResult<T> = Result<T, AppError>;

/// Extractors refuse an oversized body with a plain-text 413: answer this
/// API's JSON error instead.
pub(super) async fn json_errors(State(state): State<AppState>, request: Request, next: Next) -> Response {
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
