//! A snapshot's review thread: `GET`/`POST /api/v1/snapshots/{id}/comments`
//! and `DELETE /api/v1/snapshots/{id}/comments/{cid}`.
//!
//! Who may do what: reading is for viewers, like every `GET`. Writing and
//! deleting one's own comment are for viewers too (their handlers declare no
//! role, see `http::role`):
//! a post-mortem is reviewed by people who only read the snapshots, and a
//! comment changes no snapshot data. Deleting someone else's comment is
//! for admins, checked here since the role middleware cannot know authors.

use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::{Json, body::Bytes};

use crate::auth::{Identity, Role};
use crate::http::AppState;
use crate::http::error::{AppError, AppResult};
use crate::store::NewComment;
use vramscope_shared::api::review::{Comment, PostComment, TokenHolder};

/// Longest comment accepted, in bytes: a review note, not a file.
const MAX_COMMENT_BYTES: usize = 16 * 1024;

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
    let json = headers
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().to_ascii_lowercase().starts_with(b"application/json"));
    if !json {
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
