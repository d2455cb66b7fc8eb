//! `POST /api/v1/snapshots`: stream an upload to storage, hash it, parse it,
//! and record it.
//!
//! The order makes a crash harmless: bytes go to a staging object first (never
//! listed), the file moves to its content-addressed key only once it is
//! complete and, for files up to `inline_parse_max_bytes`, parsed; the
//! database row comes last. Leftover staging objects are swept at start-up.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Query, Request, State};
use axum::http::{StatusCode, header};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::analysis::{ParseFailure, analyze, parse_stored};
use crate::http::AppState;
use crate::http::error::{AppError, AppResult};
use crate::store::{NewSnapshot, Recorded, SnapshotStatus, Staged, StagedUpload, Trigger, record_upload};

/// Metadata of an upload, from the query string or multipart form fields.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct UploadMeta {
    name: Option<String>,
    job: Option<String>,
    host: Option<String>,
    rank: Option<i64>,
    /// Comma-separated.
    tags: Option<String>,
    /// `manual` (default), `threshold` or `oom`.
    trigger: Option<String>,
}

/// The answer to an upload.
#[derive(Debug, Serialize)]
pub(crate) struct UploadAnswer {
    id: String,
    sha256: String,
    /// `ready` (parsed), or `parsing` (large file, parsed in the background).
    status: SnapshotStatus,
    /// The same bytes were uploaded before; `id` is that snapshot.
    deduplicated: bool,
}

/// Split, trim and deduplicate tags.
pub(crate) fn clean_tags<'a>(tags: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in tags.map(str::trim).filter(|t| !t.is_empty()) {
        if !out.iter().any(|o| o == t) {
            out.push(t.to_owned());
        }
    }
    out
}

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
    Query(mut meta): Query<UploadMeta>,
    request: Request,
) -> AppResult<(StatusCode, Json<UploadAnswer>)> {
    let max = state.settings.max_upload_bytes;
    let declared =
        request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max) {
        state.metrics.upload("too_large");
        return Err(AppError::PayloadTooLarge(max));
    }
    let multipart = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/form-data"));

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
    finish(state, staged, meta).await
}

async fn receive_raw(request: Request, receiver: &mut Receiver) -> AppResult<()> {
    let mut body = request.into_body().into_data_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| AppError::BadRequest(format!("the upload broke off: {e}")))?;
        receiver.push(chunk).await?;
    }
    Ok(())
}

async fn receive_multipart(
    state: &AppState,
    request: Request,
    receiver: &mut Receiver,
    meta: &mut UploadMeta,
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
        let value = field.text().await.map_err(|e| AppError::BadRequest(format!("field {name}: {e}")))?;
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

/// Dedup, parse (inline for small files), commit and record.
async fn finish(state: AppState, staged: Staged, meta: UploadMeta) -> AppResult<(StatusCode, Json<UploadAnswer>)> {
    let trigger_name = meta.trigger.unwrap_or_else(|| "manual".to_owned());
    let Some(trigger) = Trigger::parse(&trigger_name) else {
        state.blobs.discard(&staged).await?;
        return Err(AppError::BadRequest(format!("trigger must be manual, threshold or oom, not {trigger_name:?}")));
    };
    // A fast path that skips the parse of a duplicate; `record_upload`
    // checks again under the file's lock before committing.
    if let Some(existing) = state.db.find_ready_by_sha256(&staged.sha256).await? {
        state.blobs.discard(&staged).await?;
        state.metrics.upload("duplicate");
        let answer =
            UploadAnswer { id: existing.id, sha256: existing.sha256, status: existing.status, deduplicated: true };
        return Ok((StatusCode::OK, Json(answer)));
    }

    let inline = staged.size <= state.settings.inline_parse_max_bytes;
    let mut parsed = None;
    let stats_json = if inline {
        match parse_stored(&state.blobs, &staged.staging_key, &state.parse_permits, &state.metrics).await {
            Ok(snapshot) => {
                let json = stats_json(&snapshot)?;
                parsed = Some(snapshot);
                Some(json)
            }
            Err(failure) => {
                state.blobs.discard(&staged).await?;
                state.metrics.upload("rejected");
                return Err(match failure {
                    ParseFailure::Invalid(e) => AppError::NotASnapshot(e),
                    ParseFailure::Storage(e) => AppError::Internal(e),
                });
            }
        }
    } else {
        None
    };

    let id = uuid::Uuid::now_v7().to_string();
    let name = meta.name.filter(|n| !n.trim().is_empty()).unwrap_or_else(|| format!("snapshot-{id}"));
    let status = if inline { SnapshotStatus::Ready } else { SnapshotStatus::Parsing };
    let row = |blob_key: String| NewSnapshot {
        id: id.clone(),
        sha256: staged.sha256.clone(),
        blob_key,
        name,
        job: meta.job.filter(|s| !s.is_empty()),
        host: meta.host.filter(|s| !s.is_empty()),
        rank: meta.rank,
        tags: clean_tags(meta.tags.as_deref().unwrap_or_default().split(',')),
        trigger,
        size_bytes: staged.size,
        uploaded_at_ms: crate::now_ms(),
        status,
        stats_json,
    };
    // Dedup lookup, commit and row under the file's lock: a retention run
    // or a delete on another instance cannot remove the file in between.
    let blob_key = match record_upload(&state.db, &state.blobs, &staged, row).await? {
        Recorded::New(record) => record.blob_key,
        Recorded::Duplicate(existing) => {
            state.metrics.upload("duplicate");
            let answer =
                UploadAnswer { id: existing.id, sha256: existing.sha256, status: existing.status, deduplicated: true };
            return Ok((StatusCode::OK, Json(answer)));
        }
    };
    state.metrics.bytes_stored.inc_by(staged.size);
    state.metrics.upload("ok");
    match parsed {
        // Index it for the views right away, off the answer's path.
        Some(snapshot) => {
            let (state, id) = (state.clone(), id.clone());
            tokio::spawn(async move {
                match analyze(snapshot).await {
                    Ok(analyzed) => state.cache.insert(&id, analyzed),
                    Err(e) => tracing::warn!(snapshot = id, error = format!("{e:#}"), "indexing failed"),
                }
            });
        }
        None => {
            tokio::spawn(parse_in_background(state.clone(), id.clone(), blob_key));
        }
    }
    let answer = UploadAnswer { id, sha256: staged.sha256, status, deduplicated: false };
    Ok((StatusCode::CREATED, Json(answer)))
}

fn stats_json(snapshot: &vramscope_shared::Snapshot) -> AppResult<String> {
    serde_json::to_string(&snapshot.stats().report(String::new()))
        .map_err(|e| AppError::Internal(anyhow::anyhow!("serializing stats: {e}")))
}

/// Removes the file of an upload that failed to parse unless a ready row
/// shares it, under the file's lock: an upload of the same bytes on another
/// instance must not see the file vanish between its commit and its row.
async fn remove_bad_bytes(state: &AppState, blob_key: &str) -> anyhow::Result<()> {
    let lock = state.db.lock_blob(blob_key).await?;
    if state.db.count_ready_by_blob(blob_key).await? == 0 {
        state.blobs.delete(blob_key).await?;
    }
    lock.release().await
}

/// Parse a large upload after answering it; also used at start-up for rows
/// left `parsing` by a stopped server. A file that turns out not to be a
/// snapshot is marked failed (with the reader's error) and its bytes removed.
pub(crate) async fn parse_in_background(state: AppState, id: String, blob_key: String) {
    let outcome = parse_stored(&state.blobs, &blob_key, &state.parse_permits, &state.metrics).await;
    let result = match outcome {
        Ok(snapshot) => match stats_json(&snapshot) {
            Ok(json) => state.db.set_ready(&id, &json).await,
            Err(_) => state.db.set_failed(&id, "could not serialize the statistics").await,
        },
        Err(ParseFailure::Invalid(e)) => {
            let marked = state.db.set_failed(&id, &e.to_string()).await;
            if let Err(e) = remove_bad_bytes(&state, &blob_key).await {
                tracing::warn!(error = format!("{e:#}"), "could not remove the bytes of a bad upload");
            }
            marked
        }
        Err(ParseFailure::Storage(e)) => {
            tracing::error!(snapshot = id, error = format!("{e:#}"), "background parse could not read the file");
            Ok(())
        }
    };
    if let Err(e) = result {
        tracing::error!(snapshot = id, error = format!("{e:#}"), "could not record the parse result");
    }
}
