//! Who is asking: a signed link's viewer, or a token's holder (rate
//! limited per token id and address); the role each route needs is
//! checked by `role`.

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::AppError;
use super::{AppState, guard, v1};
use crate::auth::{Checked, Identity, Role};

/// A GET of a snapshot's file or export carrying a valid signature (see
/// [`crate::auth::LinkSigner`]) and no token: a viewer for that one path.
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

/// The middleware: puts the caller's [`Identity`] in the request, or
/// answers 401 or 429.
pub(super) async fn authorize(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
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
