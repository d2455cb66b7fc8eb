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
use crate::http::role::{RequireRole, Uploader};
use crate::ingest::commit::CommitError;
use crate::ingest::labels::Labels;
use crate::store::StagedUpload;
use vramscope_shared::api::UploadAnswer;

/// Longest multipart text field (a label or the tag list), in bytes.
const MAX_FIELD_BYTES: usize = 4096;
/// Longest header section of one multipart part, in bytes: its
/// `Content-Disposition` and `Content-Type` take a few hundred.
const MAX_PART_HEADER_BYTES: usize = 8192;
/// Most of a client's text quoted back in an error.
const QUOTED: usize = 64;

/// `text`, cut to [`QUOTED`] characters for an error message.
fn quoted(text: &str) -> String {
    match text.char_indices().nth(QUOTED) {
        Some((at, _)) => format!("{}… ({} bytes)", &text[..at], text.len()),
        None => text.to_owned(),
    }
}

/// Watches a multipart body as it streams, before the multipart parser
/// buffers it: a part's header section (from a boundary to its blank line)
/// longer than [`MAX_PART_HEADER_BYTES`] is refused. The parser keeps a
/// header section whole in memory and searches it again at every chunk, so
/// a huge one cost memory and time growing faster than its size.
/// Hand-written: no multipart crate bounds the header section.
struct PartHeaders {
    /// `--BOUNDARY`, then `\r\n--BOUNDARY` for every later part.
    delimiter: Vec<u8>,
    in_headers: bool,
    /// Header bytes of the current part so far.
    header_len: usize,
    /// The end of the last chunk, for a pattern split across chunks.
    carry: Vec<u8>,
}

impl PartHeaders {
    fn new(boundary: &str) -> PartHeaders {
        PartHeaders {
            delimiter: format!("--{boundary}").into_bytes(),
            in_headers: false,
            header_len: 0,
            carry: Vec::new(),
        }
    }

    fn check(&mut self, chunk: &[u8]) -> Result<(), String> {
        let mut data = std::mem::take(&mut self.carry);
        data.extend_from_slice(chunk);
        let mut at = 0;
        loop {
            if self.in_headers {
                match memchr::memmem::find(&data[at..], b"\r\n\r\n") {
                    Some(i) => {
                        self.header_len += i;
                        at += i + 4;
                        self.in_headers = false;
                    }
                    None => {
                        self.header_len += data.len() - at;
                        if self.header_len > MAX_PART_HEADER_BYTES {
                            return Err(format!(
                                "a part's headers are longer than {MAX_PART_HEADER_BYTES} bytes (a form field's name \
                                 takes a few)"
                            ));
                        }
                        // Keep 3 bytes: a blank line may straddle chunks.
                        let keep = (data.len() - at).min(3);
                        self.header_len -= keep;
                        self.carry = data[data.len() - keep..].to_vec();
                        return Ok(());
                    }
                }
                if self.header_len > MAX_PART_HEADER_BYTES {
                    return Err(format!("a part's headers are longer than {MAX_PART_HEADER_BYTES} bytes"));
                }
            } else {
                match memchr::memmem::find(&data[at..], &self.delimiter) {
                    Some(i) => {
                        at += i + self.delimiter.len();
                        self.in_headers = true;
                        self.header_len = 0;
                        if !self.delimiter.starts_with(b"\r\n") {
                            let mut d = b"\r\n".to_vec();
                            d.extend_from_slice(&self.delimiter);
                            self.delimiter = d;
                        }
                    }
                    None => {
                        let keep = (data.len() - at).min(self.delimiter.len() - 1);
                        self.carry = data[data.len() - keep..].to_vec();
                        return Ok(());
                    }
                }
            }
        }
    }
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
    _: RequireRole<Uploader>,
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
    // Media types are case-insensitive (RFC 9110): `Text/Plain` is text.
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
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

    let mut receiver = Receiver { staged: Some(state.ingest.begin_upload().await?), size: 0, max };
    let idle = std::time::Duration::from_secs_f64(state.settings.upload_idle_timeout_secs);
    let received = if multipart {
        receive_multipart(&state, request, &mut receiver, &mut meta, idle).await
    } else {
        receive_raw(request, &mut receiver, idle).await
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

/// The next of `next`, unless the client sends nothing for `idle`.
async fn within<T>(idle: std::time::Duration, next: impl std::future::Future<Output = T>) -> AppResult<T> {
    tokio::time::timeout(idle, next).await.map_err(|_| {
        AppError::BadRequest(format!(
            "the upload sent nothing for {} s and was cut off (upload_idle_timeout_secs)",
            idle.as_secs_f64()
        ))
    })
}

async fn receive_raw(request: Request, receiver: &mut Receiver, idle: std::time::Duration) -> AppResult<()> {
    let mut body = request.into_body().into_data_stream();
    while let Some(chunk) = within(idle, body.next()).await? {
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
    idle: std::time::Duration,
) -> AppResult<()> {
    // The body watched for oversized part headers on its way to the parser.
    let (parts, body) = request.into_parts();
    let boundary = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|t| multer::parse_boundary(t).ok())
        .ok_or_else(|| AppError::BadRequest("multipart/form-data without a boundary".to_owned()))?;
    let mut watch = PartHeaders::new(&boundary);
    // The parser says only that it could not read the stream; the watcher's
    // own words are kept here for the answer.
    let refusal = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
    let said = refusal.clone();
    let watched = body.into_data_stream().map(move |chunk| {
        let chunk = chunk.map_err(std::io::Error::other)?;
        if let Err(why) = watch.check(&chunk) {
            if let Ok(mut slot) = said.lock() {
                *slot = Some(why.clone());
            }
            return Err(std::io::Error::other(why));
        }
        Ok::<_, std::io::Error>(chunk)
    });
    let request = Request::from_parts(parts, axum::body::Body::from_stream(watched));
    let said_or = |fallback: String| {
        let why = refusal.lock().ok().and_then(|r| r.clone());
        AppError::BadRequest(why.unwrap_or(fallback))
    };
    let bad = |e: &dyn std::fmt::Display| said_or(format!("bad multipart body: {e}"));
    let mut form = Multipart::from_request(request, state).await.map_err(|e| bad(&e))?;
    let mut saw_file = false;
    while let Some(mut field) = within(idle, form.next_field()).await?.map_err(|e| bad(&e))? {
        let name = quoted(field.name().unwrap_or_default());
        if name == "file" {
            if saw_file {
                return Err(AppError::BadRequest("more than one `file` part".to_owned()));
            }
            saw_file = true;
            if meta.name.is_none() {
                meta.name = field.file_name().map(str::to_owned);
            }
            while let Some(chunk) =
                within(idle, field.chunk()).await?.map_err(|e| said_or(format!("the upload broke off: {e}")))?
            {
                receiver.push(chunk).await?;
            }
            continue;
        }
        let value = within(idle, field_text(&mut field, &name, receiver)).await??;
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
                        .map_err(|_| AppError::BadRequest(format!("rank is not an integer: {}", quoted(&value))))?,
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

#[cfg(test)]
mod tests {
    use super::*;

    const FORM: &[u8] = b"preamble\r\n--B\r\nContent-Disposition: form-data; name=\"job\"\r\n\r\nci\r\n--B\r\n\
        Content-Disposition: form-data; name=\"file\"\r\n\r\n\x80\x04some\r\n\r\nbytes\r\n--B--\r\n";

    #[test]
    fn a_form_passes_in_chunks_of_any_size() {
        for size in [1, 2, 3, 5, 7, 64, FORM.len()] {
            let mut watch = PartHeaders::new("B");
            for chunk in FORM.chunks(size) {
                watch.check(chunk).expect("a form with small headers");
            }
        }
    }

    #[test]
    fn a_long_header_section_is_refused_however_it_is_cut() {
        let mut form = b"--B\r\nContent-Disposition: form-data; name=\"".to_vec();
        form.extend(std::iter::repeat_n(b'n', 10_000));
        form.extend_from_slice(b"\"\r\n\r\nv\r\n--B--\r\n");
        for size in [1, 100, 4096, form.len()] {
            let mut watch = PartHeaders::new("B");
            let refused = form.chunks(size).map(|c| watch.check(c)).find(Result::is_err);
            assert!(refused.is_some(), "chunks of {size}");
        }
    }

    #[test]
    fn quotes_are_cut() {
        assert_eq!(quoted("job"), "job");
        assert!(quoted(&"x".repeat(100)).ends_with("… (100 bytes)"));
    }
}
