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
use serde::Deserialize;

use crate::http::AppState;
use crate::http::error::{AppError, AppResult};
use crate::store::{BlobStore, NewSnapshot, Recorded, SnapshotStatus, Staged, StagedUpload, Trigger, record_upload};
use vramscope_shared::api::UploadAnswer;

/// Longest name, job or host accepted, in bytes.
const MAX_LABEL_BYTES: usize = 256;
/// Most tags on one snapshot, and the longest tag.
const MAX_TAGS: usize = 32;
const MAX_TAG_BYTES: usize = 64;
/// Longest multipart text field (a label or the tag list), in bytes.
const MAX_FIELD_BYTES: usize = 4096;

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

/// A finished staging object that is discarded if the request goes away
/// before it is committed or discarded (a client that leaves during the
/// inline parse once left up to 256 MiB in staging for an hour).
struct StagedGuard {
    staged: Option<Staged>,
    blobs: BlobStore,
}

impl StagedGuard {
    fn get(&self) -> AppResult<&Staged> {
        self.staged.as_ref().ok_or_else(|| AppError::Internal(anyhow::anyhow!("staged upload already taken")))
    }

    /// Remove the staging object now.
    async fn discard(mut self) -> AppResult<()> {
        match self.staged.take() {
            Some(staged) => Ok(self.blobs.discard(&staged).await?),
            None => Ok(()),
        }
    }

    /// The staging object is in other hands now (committed).
    fn keep(&mut self) {
        self.staged = None;
    }
}

impl Drop for StagedGuard {
    fn drop(&mut self) {
        if let Some(staged) = self.staged.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let blobs = self.blobs.clone();
            runtime.spawn(async move {
                if let Err(e) = blobs.discard(&staged).await {
                    tracing::warn!(error = format!("{e:#}"), "could not remove an abandoned staged upload");
                }
            });
        }
    }
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

/// Refuse labels and tags past their limits.
fn check_labels(meta: &UploadMeta) -> AppResult<()> {
    for (what, value) in [("name", &meta.name), ("job", &meta.job), ("host", &meta.host)] {
        if let Some(v) = value {
            check_label(what, v)?;
        }
    }
    let tags = clean_tags(meta.tags.as_deref().unwrap_or_default().split(','));
    check_tags(&tags)
}

/// Refuse more than [`MAX_TAGS`] tags or one longer than [`MAX_TAG_BYTES`].
pub(crate) fn check_tags(tags: &[String]) -> AppResult<()> {
    if tags.len() > MAX_TAGS {
        return Err(AppError::BadRequest(format!("tags: {} of them, more than {MAX_TAGS}", tags.len())));
    }
    if let Some(t) = tags.iter().find(|t| t.len() > MAX_TAG_BYTES) {
        let start: String = t.chars().take(16).collect();
        return Err(AppError::BadRequest(format!("tags: {start:?}… is longer than {MAX_TAG_BYTES} bytes")));
    }
    Ok(())
}

/// Refuse a label (name, job, host) past [`MAX_LABEL_BYTES`]; renames
/// check the name with it too.
pub(crate) fn check_label(what: &str, value: &str) -> AppResult<()> {
    if value.len() > MAX_LABEL_BYTES {
        return Err(AppError::BadRequest(format!("{what}: {} bytes, more than {MAX_LABEL_BYTES}", value.len())));
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

/// Dedup, parse (inline for small files), commit and record.
async fn finish(state: AppState, staged: Staged, meta: UploadMeta) -> AppResult<(StatusCode, Json<UploadAnswer>)> {
    let mut guard = StagedGuard { staged: Some(staged), blobs: state.blobs.clone() };
    let trigger_name = meta.trigger.clone().unwrap_or_else(|| "manual".to_owned());
    let Some(trigger) = Trigger::parse(&trigger_name) else {
        guard.discard().await?;
        return Err(AppError::BadRequest(format!("trigger must be manual, threshold or oom, not {trigger_name:?}")));
    };
    if let Err(e) = check_labels(&meta) {
        guard.discard().await?;
        return Err(e);
    }
    // A file stored and parsed already is not parsed again: `record_upload`
    // answers it (under the file's lock) as a duplicate or a new row of the
    // same file. Should that snapshot vanish meanwhile, the upload is
    // stored and parsed in the background.
    let known = state.db.find_ready_by_sha256(&guard.get()?.sha256).await?.is_some();
    let staged = guard.get()?.clone();
    let inline = !known && staged.size <= state.settings.inline_parse_max_bytes;
    let mut parsed = None;
    let stats_json = if inline {
        // Dropping this future (the client left) stops the parse, and the
        // guard removes the staged bytes.
        match state.ingest.parser.parse_stored(&state.blobs, &staged.staging_key, &state.metrics).await {
            Ok(snapshot) => {
                let json = crate::ingest::stats_json(&snapshot).map_err(AppError::Internal)?;
                parsed = Some(snapshot);
                Some(json)
            }
            Err(failure) => {
                guard.discard().await?;
                state.metrics.upload("rejected");
                return Err(AppError::from(&failure));
            }
        }
    } else {
        None
    };

    let id = uuid::Uuid::now_v7().to_string();
    let name_given = meta.name.as_deref().is_some_and(|n| !n.trim().is_empty());
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
    // From here the staging object is record_upload's: committed, or
    // discarded as a duplicate.
    guard.keep();
    let blob_key = match record_upload(&state.db, &state.blobs, &staged, row, name_given).await? {
        Recorded::New(record) => record.blob_key,
        Recorded::Duplicate(existing) => {
            state.metrics.upload("duplicate");
            let answer = UploadAnswer {
                id: existing.meta.id,
                sha256: existing.meta.sha256,
                status: existing.meta.status,
                deduplicated: true,
            };
            return Ok((StatusCode::OK, Json(answer)));
        }
        Recorded::Labelled(record) => {
            state.metrics.upload("duplicate");
            let answer = UploadAnswer {
                id: record.meta.id,
                sha256: record.meta.sha256,
                status: record.meta.status,
                deduplicated: true,
            };
            return Ok((StatusCode::CREATED, Json(answer)));
        }
    };
    state.metrics.bytes_stored.inc_by(staged.size);
    state.metrics.upload("ok");
    match parsed {
        // Index and persist it right away, off the answer's path; a view
        // asked for before that ends waits for it instead of parsing again.
        Some(snapshot) => {
            let (task_state, key) = (state.clone(), blob_key.clone());
            drop(
                state
                    .ingest
                    .cache
                    .start(&blob_key, move || async move { task_state.ingest.index(&key, snapshot).await }),
            );
        }
        None => {
            tokio::spawn(state.ingest.clone().parse_in_background(id.clone(), blob_key));
        }
    }
    let answer = UploadAnswer { id, sha256: staged.sha256, status, deduplicated: false };
    Ok((StatusCode::CREATED, Json(answer)))
}
