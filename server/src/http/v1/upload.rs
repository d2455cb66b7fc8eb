//! `POST /api/v1/snapshots`: stream an upload (raw or multipart) into a
//! staging object, bounded in size, then hand it to `ingest::commit`,
//! which parses, commits and records it.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Query, Request, State};
use axum::http::{StatusCode, header};
use futures::StreamExt;

use crate::http::AppState;
use crate::http::error::{AppError, AppResult};
use crate::ingest::commit::CommitError;
use crate::ingest::labels::Labels;
use crate::store::StagedUpload;
use vramscope_shared::api::UploadAnswer;

/// Longest multipart text field (a label or the tag list), in bytes.
const MAX_FIELD_BYTES: usize = 4096;

/// Receives chunks into a staged upload, enforcing the size limit.
struct Receiver {
    staged: Option<StagedUpload>,
    size: u64,
    max: u64,
}

impl Receiver {
    async fn push(&mut self, chunk: Bytes) -> AppResult<()> {
        self.size += chunk.len() as u64;
        if self.size > self.max {
            return Err(AppError::PayloadTooLarge(self.max));
        }
        match self.staged.as_mut() {
            Some(s) => s.write(chunk).await.map_err(AppError::Internal),
            None => Err(AppError::Internal(anyhow::anyhow!("upload already finished"))),
        }
    }

    async fn abort(&mut self) {
        if let Some(s) = self.staged.take()
            && let Err(e) = s.abort().await
        {
            tracing::warn!(error = format!("{e:#}"), "could not remove a staged upload");
        }
    }
}

pub(crate) async fn upload(
    State(state): State<AppState>,
    Query(mut meta): Query<Labels>,
    request: Request,
) -> AppResult<(StatusCode, Json<UploadAnswer>)> {
    let max = state.settings.max_upload_bytes;
    let declared =
        request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max) {
        state.metrics.upload("too_large");
        return Err(AppError::PayloadTooLarge(max));
    }
    let content_type = request.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let multipart = content_type.starts_with("multipart/form-data");
    // The types a web form or a plain `fetch` sends without a preflight
    // (besides multipart, which the dashboard uses): never a snapshot.
    if content_type.starts_with("text/") || content_type.starts_with("application/x-www-form-urlencoded") {
        state.metrics.upload("rejected");
        return Err(AppError::UnsupportedMediaType(format!(
            "a snapshot is sent as application/octet-stream or multipart/form-data, not {content_type} (with curl: \
             -H 'Content-Type: application/octet-stream' --data-binary @FILE)"
        )));
    }

    let mut receiver = Receiver { staged: Some(state.blobs.begin_upload().await?), size: 0, max };
    let received = if multipart {
        receive_multipart(&state, request, &mut receiver, &mut meta).await
    } else {
        receive_raw(request, &mut receiver).await
    };
    if let Err(e) = received {
        receiver.abort().await;
        state.metrics.upload(if matches!(e, AppError::PayloadTooLarge(_)) { "too_large" } else { "failed" });
        return Err(e);
    }
    state.metrics.upload_bytes.inc_by(receiver.size);
    let Some(staged) = receiver.staged.take() else {
        return Err(AppError::Internal(anyhow::anyhow!("upload lost its staging object")));
    };
    let staged = staged.finish().await?;
    if staged.size == 0 {
        state.blobs.discard(&staged).await?;
        state.metrics.upload("rejected");
        return Err(AppError::BadRequest("the upload is empty".to_owned()));
    }
    match state.ingest.commit(staged, meta, state.settings.inline_parse_max_bytes).await {
        Ok(done) => {
            let status = if done.created { StatusCode::CREATED } else { StatusCode::OK };
            Ok((status, Json(done.answer)))
        }
        Err(CommitError::BadRequest(why)) => Err(AppError::BadRequest(why)),
        Err(CommitError::Unreadable(failure)) => Err(AppError::from(&failure)),
        Err(CommitError::Storage(e)) => Err(AppError::Internal(e)),
    }
}

async fn receive_raw(request: Request, receiver: &mut Receiver) -> AppResult<()> {
    let mut body = request.into_body().into_data_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| AppError::BadRequest(format!("the upload broke off: {e}")))?;
        receiver.push(chunk).await?;
    }
    Ok(())
}

/// Read a multipart text field in chunks: at most [`MAX_FIELD_BYTES`], and
/// counted against the upload's limit like the file.
async fn field_text(
    field: &mut axum::extract::multipart::Field<'_>,
    name: &str,
    receiver: &mut Receiver,
) -> AppResult<String> {
    let mut bytes = Vec::new();
    while let Some(chunk) = field.chunk().await.map_err(|e| AppError::BadRequest(format!("field {name}: {e}")))? {
        receiver.size += chunk.len() as u64;
        if receiver.size > receiver.max {
            return Err(AppError::PayloadTooLarge(receiver.max));
        }
        if bytes.len() + chunk.len() > MAX_FIELD_BYTES {
            return Err(AppError::BadRequest(format!("field {name}: longer than {MAX_FIELD_BYTES} bytes")));
        }
        bytes.extend_from_slice(&chunk);
    }
    String::from_utf8(bytes).map_err(|_| AppError::BadRequest(format!("field {name}: not UTF-8 text")))
}

async fn receive_multipart(
    state: &AppState,
    request: Request,
    receiver: &mut Receiver,
    meta: &mut Labels,
) -> AppResult<()> {
    let mut form = Multipart::from_request(request, state)
        .await
        .map_err(|e| AppError::BadRequest(format!("bad multipart body: {e}")))?;
    let mut saw_file = false;
    while let Some(mut field) =
        form.next_field().await.map_err(|e| AppError::BadRequest(format!("bad multipart body: {e}")))?
    {
        let name = field.name().unwrap_or_default().to_owned();
        if name == "file" {
            if saw_file {
                return Err(AppError::BadRequest("more than one `file` part".to_owned()));
            }
            saw_file = true;
            if meta.name.is_none() {
                meta.name = field.file_name().map(str::to_owned);
            }
            while let Some(chunk) =
                field.chunk().await.map_err(|e| AppError::BadRequest(format!("the upload broke off: {e}")))?
            {
                receiver.push(chunk).await?;
            }
            continue;
        }
        let value = field_text(&mut field, &name, receiver).await?;
        match name.as_str() {
            "name" => meta.name = Some(value),
            "job" => meta.job = Some(value),
            "host" => meta.host = Some(value),
            "tags" => meta.tags = Some(value),
            "trigger" => meta.trigger = Some(value),
            "rank" => {
                meta.rank = Some(
                    value
                        .trim()
                        .parse()
                        .map_err(|_| AppError::BadRequest(format!("rank is not an integer: {value}")))?,
                )
            }
            other => return Err(AppError::BadRequest(format!("unknown form field `{other}`"))),
        }
    }
    if !saw_file {
        return Err(AppError::BadRequest("the form has no `file` part".to_owned()));
    }
    Ok(())
}
