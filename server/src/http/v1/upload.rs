//! `POST /api/v1/snapshots`: stream an upload (raw or multipart) into a
//! staging object, bounded in size, then hand it to `ingest::commit`,
//! which parses, commits and records it.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Query, Request, State};
use axum::http::{StatusCode, header};
use futures::StreamExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

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
    /// Bytes before the first boundary so far, and the most allowed: the
    /// parser kept them whole and searched them again at every read.
    preamble_len: u64,
    max_preamble: u64,
    in_headers: bool,
    /// Header bytes of the current part so far.
    header_len: usize,
    /// The end of the last chunk, for a pattern split across chunks.
    carry: Vec<u8>,
}

impl PartHeaders {
    fn new(boundary: &str, max_preamble: u64) -> PartHeaders {
        PartHeaders {
            delimiter: format!("--{boundary}").into_bytes(),
            preamble_len: 0,
            max_preamble,
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
                        if !self.delimiter.starts_with(b"\r\n") {
                            self.preamble_len += i as u64;
                            if self.preamble_len > self.max_preamble {
                                return Err(format!(
                                    "more than {} bytes before the first boundary (multipart_preamble_max_bytes)",
                                    self.max_preamble
                                ));
                            }
                        }
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
                        // Before the first boundary: the preamble, bounded.
                        if !self.delimiter.starts_with(b"\r\n") {
                            self.preamble_len += (data.len() - at - keep) as u64;
                            if self.preamble_len > self.max_preamble {
                                return Err(format!(
                                    "more than {} bytes before the first boundary (multipart_preamble_max_bytes)",
                                    self.max_preamble
                                ));
                            }
                        }
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

/// How an upload's body must arrive: at most `max_bytes` in all (framing
/// included), never silent for `idle`, and on average at least
/// `min_rate` bytes a second over each `window` of waiting for it.
#[derive(Clone, Copy)]
struct Pace {
    max_bytes: u64,
    idle: Duration,
    min_rate: f64,
    window: Duration,
    max_preamble: u64,
}

/// Why the body's reader stopped an upload.
#[derive(Clone, Debug)]
enum Cut {
    /// Past `max_upload_bytes`.
    TooLarge(u64),
    /// Too slow, silent, or a malformed form: said to the client.
    Refused(String),
}

impl Cut {
    fn error(&self) -> AppError {
        match self {
            Cut::TooLarge(max) => AppError::PayloadTooLarge(*max),
            Cut::Refused(why) => AppError::BadRequest(why.clone()),
        }
    }
}

/// The unit in which the lookahead's bytes are counted.
const LOOKAHEAD_UNIT: u64 = 1024;

/// An upload's body, read on a task of its own up to `upload_lookahead_bytes`
/// ahead of the handler, which is held back by its storage and its parse.
/// The task enforces the [`Pace`] (time spent waiting for the client is
/// all it counts: a server busy elsewhere is no fault of the client's) and
/// watches a form's part headers, and it says at once when the body ends
/// badly (`gone`): a client that left is noticed while the handler waits
/// on its parse, whose staged bytes go then, not when the parse reaches the
/// end of what the socket held (a flaky test under load).
struct Intake {
    /// Each chunk with its share of the lookahead, let go as it is taken.
    chunks: Option<tokio::sync::mpsc::UnboundedReceiver<(Bytes, tokio::sync::OwnedSemaphorePermit)>>,
    /// Set before `gone` fires; `None` with `gone` fired: the body broke off.
    cut: Arc<Mutex<Option<Cut>>>,
    gone: CancellationToken,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Intake {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Intake {
    fn start(body: axum::body::Body, pace: Pace, lookahead: u64, mut watch: Option<PartHeaders>) -> Intake {
        let (tx, chunks) = tokio::sync::mpsc::unbounded_channel();
        let units = u32::try_from(lookahead.div_ceil(LOOKAHEAD_UNIT).max(1)).unwrap_or(u32::MAX >> 4);
        let room = Arc::new(tokio::sync::Semaphore::new(units as usize));
        let cut = Arc::new(Mutex::new(None));
        let gone = CancellationToken::new();
        let (said, fired) = (Arc::clone(&cut), gone.clone());
        let stop = move |why: Option<Cut>| {
            *said.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = why;
            fired.cancel();
        };
        let mut body = body.into_data_stream();
        let reader = tokio::spawn(async move {
            let (mut total, mut window_bytes, mut window_waited) = (0u64, 0u64, Duration::ZERO);
            loop {
                let started = Instant::now();
                let until = started + pace.idle.min(pace.window.saturating_sub(window_waited));
                let next = tokio::time::timeout_at(until, body.next()).await;
                let waited = started.elapsed();
                window_waited += waited;
                let chunk = match next {
                    Ok(Some(Ok(chunk))) => Some(chunk),
                    Ok(Some(Err(_))) => return stop(None),
                    Ok(None) => return,
                    Err(_) if waited >= pace.idle => {
                        return stop(Some(Cut::Refused(format!(
                            "the upload sent nothing for {} s and was cut off (upload_idle_timeout_secs)",
                            pace.idle.as_secs_f64()
                        ))));
                    }
                    Err(_) => None,
                };
                if let Some(chunk) = &chunk {
                    total += chunk.len() as u64;
                    window_bytes += chunk.len() as u64;
                    if total > pace.max_bytes {
                        return stop(Some(Cut::TooLarge(pace.max_bytes)));
                    }
                    if let Some(Err(why)) = watch.as_mut().map(|w| w.check(chunk)) {
                        return stop(Some(Cut::Refused(why)));
                    }
                }
                if window_waited >= pace.window {
                    let floor = pace.min_rate * pace.window.as_secs_f64();
                    if (window_bytes as f64) < floor {
                        return stop(Some(Cut::Refused(format!(
                            "the upload sent {window_bytes} bytes in {} s of waiting for it, slower than {} bytes a \
                             second, and was cut off (upload_min_bytes_per_sec, upload_rate_window_secs)",
                            pace.window.as_secs_f64(),
                            pace.min_rate
                        ))));
                    }
                    (window_bytes, window_waited) = (0, Duration::ZERO);
                }
                if let Some(chunk) = chunk {
                    let need = u32::try_from((chunk.len() as u64).div_ceil(LOOKAHEAD_UNIT)).unwrap_or(units).min(units);
                    let Ok(share) = Arc::clone(&room).acquire_many_owned(need).await else { return };
                    if tx.send((chunk, share)).is_err() {
                        return;
                    }
                }
            }
        });
        Intake { chunks: Some(chunks), cut, gone, reader }
    }

    /// What stopped the body, as the answer's error.
    fn error(&self) -> AppError {
        match &*self.cut.lock().unwrap_or_else(std::sync::PoisonError::into_inner) {
            Some(cut) => cut.error(),
            None => AppError::BadRequest("the upload broke off".to_owned()),
        }
    }

    /// The chunks as a body stream, which ends with an error (never as a
    /// shorter body) when the reader stopped the upload.
    fn stream(&mut self) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
        let chunks = self.chunks.take();
        let (cut, gone) = (Arc::clone(&self.cut), self.gone.clone());
        futures::stream::unfold(chunks, move |chunks| {
            let (cut, gone) = (Arc::clone(&cut), gone.clone());
            async move {
                let mut chunks = chunks?;
                match chunks.recv().await {
                    Some((chunk, _share)) => Some((Ok(chunk), Some(chunks))),
                    None if gone.is_cancelled() => {
                        let why = match &*cut.lock().unwrap_or_else(std::sync::PoisonError::into_inner) {
                            Some(Cut::TooLarge(max)) => format!("upload larger than the limit of {max} bytes"),
                            Some(Cut::Refused(why)) => why.clone(),
                            None => "the upload broke off".to_owned(),
                        };
                        Some((Err(std::io::Error::other(why)), None))
                    }
                    None => None,
                }
            }
        })
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
    let settings = &state.settings;
    let pace = Pace {
        max_bytes: max,
        idle: Duration::from_secs_f64(settings.upload_idle_timeout_secs),
        min_rate: settings.upload_min_bytes_per_sec,
        window: Duration::from_secs_f64(settings.upload_rate_window_secs),
        max_preamble: settings.multipart_preamble_max_bytes,
    };
    let (parts, body) = request.into_parts();
    let watch = if multipart {
        let boundary = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|t| multer::parse_boundary(t).ok())
            .ok_or_else(|| AppError::BadRequest("multipart/form-data without a boundary".to_owned()))?;
        Some(PartHeaders::new(&boundary, pace.max_preamble))
    } else {
        None
    };
    let mut intake = Intake::start(body, pace, settings.upload_lookahead_bytes, watch);

    let mut receiver = Receiver { staged: Some(state.ingest.begin_upload().await?), size: 0, max };
    let body = intake.stream();
    let received = {
        let receive = async {
            if multipart {
                let request = Request::from_parts(parts, axum::body::Body::from_stream(body));
                receive_multipart(&state, request, &mut receiver, &mut meta).await
            } else {
                receive_raw(body, &mut receiver).await
            }
        };
        // The reader's verdict comes first: a client gone while the handler
        // waits on storage or the parse stops it there.
        tokio::select! {
            biased;
            () = intake.gone.cancelled() => Err(intake.error()),
            received = receive => received.map_err(|e| if intake.gone.is_cancelled() { intake.error() } else { e }),
        }
    };
    if let Err(e) = received {
        receiver.abort().await;
        state.metrics.upload(if matches!(e, AppError::PayloadTooLarge(_)) { "too_large" } else { "failed" });
        return Err(e);
    }
    drop(intake);
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

async fn receive_raw(
    body: impl futures::Stream<Item = Result<Bytes, std::io::Error>>,
    receiver: &mut Receiver,
) -> AppResult<()> {
    let mut body = std::pin::pin!(body);
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

/// A form's fields and its `file` part, from a body the [`Intake`] watches
/// (its part headers bounded, its pace kept: a parser waiting for the next
/// field is waiting on data, and is cut off only when the client is silent).
async fn receive_multipart(
    state: &AppState,
    request: Request,
    receiver: &mut Receiver,
    meta: &mut Labels,
) -> AppResult<()> {
    let bad = |e: &dyn std::fmt::Display| AppError::BadRequest(format!("bad multipart body: {e}"));
    let mut form = Multipart::from_request(request, state).await.map_err(|e| bad(&e))?;
    let mut saw_file = false;
    while let Some(mut field) = form.next_field().await.map_err(|e| bad(&e))? {
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
            let mut watch = PartHeaders::new("B", 8192);
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
            let mut watch = PartHeaders::new("B", 8192);
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
