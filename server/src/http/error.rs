//! The one error type of the HTTP API, and its JSON form:
//! `{"error": "<what went wrong>", "kind": "<stable name>"}`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

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
    /// The upload is not a readable snapshot: the reader's error.
    NotASnapshot(vramscope_shared::ReadError),
    /// The snapshot exists but could not be parsed (an earlier background parse failed).
    Unprocessable(String),
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
            AppError::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
            AppError::NotASnapshot(e) => (StatusCode::UNPROCESSABLE_ENTITY, e.kind()),
            AppError::Unprocessable(_) => (StatusCode::UNPROCESSABLE_ENTITY, "parse_failed"),
            AppError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }

    fn message(&self) -> String {
        match self {
            AppError::NotFound(what) => format!("not found: {what}"),
            AppError::BadRequest(why) => why.clone(),
            AppError::Unauthorized => "a valid API token is required (Authorization: Bearer vs_...)".to_owned(),
            AppError::Forbidden(role) => format!("this needs a token with the {role} role"),
            AppError::PayloadTooLarge(limit) => format!("upload larger than the limit of {limit} bytes"),
            AppError::NotASnapshot(e) => e.to_string(),
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
        let mut response = (status, Json(json!({ "error": self.message(), "kind": kind }))).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert("www-authenticate", axum::http::HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<anyhow::Error> for AppError {
    fn from(e: anyhow::Error) -> Self {
        AppError::Internal(e)
    }
}

/// Result of a handler.
pub(crate) type AppResult<T> = Result<T, AppError>;
