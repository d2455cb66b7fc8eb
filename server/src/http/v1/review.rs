//! A snapshot's review thread: `GET`/`POST /api/v1/snapshots/{id}/comments`
//! and `DELETE /api/v1/snapshots/{id}/comments/{cid}`.
//!
//! Who may do what: reading is for viewers, like every `GET`. Writing and
//! deleting one's own comment are for viewers too (see [`role_override`]):
//! a post-mortem is reviewed by people who only read the snapshots, and a
//! comment changes no snapshot data. Deleting someone else's comment is
//! for admins, checked here since the role middleware cannot know authors.

use axum::extract::{Extension, Path, State};
use axum::http::{Method, StatusCode};
use axum::{Json, body::Bytes};

use crate::auth::{Identity, Role};
use crate::http::AppState;
use crate::http::error::{AppError, AppResult};
use crate::store::NewComment;
use vramscope_shared::api::review::{Comment, PostComment, TokenHolder};

/// Longest comment accepted, in bytes: a review note, not a file.
const MAX_COMMENT_BYTES: usize = 16 * 1024;

/// The role a request on a comment route needs, where it differs from the
/// method's default (POST: uploader, DELETE: admin): posting a comment and
/// deleting one (the handler then checks authorship) need only a viewer.
pub(crate) fn role_override(method: &Method, path: &str) -> Option<Role> {
    let rest = path.strip_prefix("/api/v1/snapshots/")?;
    let mut parts = rest.split('/');
    let (_id, comments) = (parts.next()?, parts.next()?);
    if comments != "comments" {
        return None;
    }
    match (method, parts.next(), parts.next()) {
        (&Method::POST, None, _) | (&Method::DELETE, Some(_), None) => Some(Role::Viewer),
        _ => None,
    }
}

pub(crate) async fn list(State(state): State<AppState>, Path(id): Path<String>) -> AppResult<Json<Vec<Comment>>> {
    super::extract::record(&state, &id).await?;
    Ok(Json(state.db.list_comments(&id).await?.into_iter().map(|c| c.comment).collect()))
}

pub(crate) async fn post(
    State(state): State<AppState>,
    Extension(identity): Extension<Identity>,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> AppResult<(StatusCode, Json<Comment>)> {
    // A JSON body only: `text/plain` is what another web page can send
    // without asking (a "simple" request).
    if !headers.get(axum::http::header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/json")) {
        return Err(AppError::UnsupportedMediaType("a comment is a JSON body (Content-Type: application/json)".into()));
    }
    // Parsed by hand (not `Json<…>`) so a bad body gets this API's JSON error.
    let post: PostComment = serde_json::from_slice(&body)
        .map_err(|e| AppError::BadRequest(format!("comment body: expected {{\"body\": \"…\"}}: {e}")))?;
    let text = post.body.trim();
    if text.is_empty() {
        return Err(AppError::BadRequest("comment body: must not be empty".to_owned()));
    }
    if text.len() > MAX_COMMENT_BYTES {
        return Err(AppError::BadRequest(format!(
            "comment body: {} bytes, more than the limit of {MAX_COMMENT_BYTES}",
            text.len()
        )));
    }
    let new = NewComment {
        comment: Comment {
            id: uuid::Uuid::now_v7().to_string(),
            author: identity.name,
            body: text.to_owned(),
            created_ms: crate::clock::now_ms(),
            row: post.row,
            time_us: post.time_us,
            addr: post.addr,
        },
        author_token: identity.token_id,
        author_role: identity.role.as_str().to_owned(),
    };
    let limit = state.settings.max_comments_per_snapshot;
    let Some(stored) = state.db.insert_comment(&id, &new, limit).await? else {
        if state.db.count_comments(&id).await? >= limit {
            return Err(AppError::LimitReached(format!(
                "this snapshot has {limit} comments, the most it may have (max_comments_per_snapshot)"
            )));
        }
        return Err(AppError::NotFound(format!("snapshot {id}")));
    };
    Ok((StatusCode::CREATED, Json(stored.comment)))
}

pub(crate) async fn delete(
    State(state): State<AppState>,
    Extension(identity): Extension<Identity>,
    Path((id, comment_id)): Path<(String, String)>,
) -> AppResult<StatusCode> {
    let comment = state
        .db
        .get_comment(&id, &comment_id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("comment {comment_id} of snapshot {id}")))?;
    // By token id, not name: two tokens may share a name ("default").
    let own = comment.author_token.is_some() && comment.author_token == identity.token_id;
    if !own && identity.role < Role::Admin {
        // "needs the admin role": deleting another author's comment is moderation.
        return Err(AppError::Forbidden("admin"));
    }
    state.db.delete_comment(&id, &comment_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/v1/token`: who the request's token names, and its role.
pub(crate) async fn token_holder(Extension(identity): Extension<Identity>) -> Json<TokenHolder> {
    Json(TokenHolder { name: identity.name, role: identity.role.as_str().to_owned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comment_routes_need_a_viewer_only_for_writing_and_own_deletes() {
        let path = "/api/v1/snapshots/0190abc/comments";
        assert_eq!(role_override(&Method::POST, path), Some(Role::Viewer));
        assert_eq!(role_override(&Method::DELETE, &format!("{path}/c1")), Some(Role::Viewer));
        assert_eq!(role_override(&Method::GET, path), None, "GET keeps the default");
        assert_eq!(role_override(&Method::DELETE, path), None);
        assert_eq!(role_override(&Method::DELETE, &format!("{path}/c1/x")), None);
        assert_eq!(role_override(&Method::DELETE, "/api/v1/snapshots/0190abc"), None);
        assert_eq!(role_override(&Method::PATCH, "/api/v1/snapshots/0190abc"), None);
        assert_eq!(role_override(&Method::POST, "/api/v1/snapshots"), None, "uploads keep the default");
        assert_eq!(role_override(&Method::POST, "/api/v1/snapshots/x/stats"), None);
    }
}
