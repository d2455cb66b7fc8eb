//! The dashboard's one HTTP client: every call to the server's API, from
//! every page, goes through here. Every failure becomes an [`ApiError`]
//! with a sentence for the page (the server's own `error` text when it sent
//! one); nothing here panics on an unexpected answer. Requests carry the
//! stored API token, and a request for a file opened without uploading it
//! (a `local-` id) is answered by its worker ([`super::local`]) with the
//! JSON the server would send, so no page can tell the difference.
//!
//! Uploads go through `XMLHttpRequest` rather than `fetch`, because only it
//! reports upload progress.

use std::fmt;

use gloo_net::http::{Request, RequestBuilder, Response};
use serde::de::DeserializeOwned;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use vramscope_shared::api::live::{CaptureParams, ReadParams};
use vramscope_shared::api::paths::{self, CompareIds};
use vramscope_shared::api::predict::{PredictQuery, PredictReport};
use vramscope_shared::api::snapshots::{ListParams, STATS_WAIT_MAX_S, StatsParams};
use vramscope_shared::views::TimelineParams;
use vramscope_shared::views::annotations::AnnotationsParams;
use vramscope_shared::views::findings::{Align, DiffAnswer, DiffParams};
use vramscope_shared::views::fragmentation::FragmentationParams;
use vramscope_shared::views::segments::SegmentsParams;
use vramscope_shared::views::state::StateParams;
use vramscope_shared::views::view::{Annotations, Fragmentation, Segments, State, Timeline, View};

use super::{draws, local};
use crate::core::model::jobs::{JobReport, JobSummary};
use crate::core::model::live::{LiveList, LiveRead};
use crate::core::model::review::Comment;
use crate::core::model::{
    AllocatorState, AnnotationsAnswer, Axis, ErrorBody, FragmentationAnswer, Frame, Instant, Page, SegmentsAnswer,
    SnapshotMeta, StatsReport, TimelineWindow, UploadAnswer,
};
use crate::core::viewport::Window;

/// Where the API token is kept in the browser (`localStorage`), for servers
/// that require one (any server not on loopback).
const TOKEN_KEY: &str = "vramscope.api_token";

/// A failed API call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ApiError {
    /// HTTP status, or 0 when no answer came.
    pub(crate) status: u16,
    /// What went wrong, for the page.
    pub(crate) message: String,
}

impl ApiError {
    fn network(what: &str, e: impl fmt::Display) -> ApiError {
        ApiError { status: 0, message: format!("{what}: the server did not answer ({e})") }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if self.status == 401 {
            f.write_str(" — set an API token at the top right")?;
        }
        Ok(())
    }
}

/// The stored API token, if any.
pub(crate) fn token() -> Option<String> {
    let storage = web_sys::window()?.local_storage().ok()??;
    storage.get_item(TOKEN_KEY).ok()?.filter(|t| !t.trim().is_empty())
}

/// Store (or, when blank, forget) the API token.
pub(crate) fn set_token(value: &str) {
    let Some(Ok(Some(storage))) = web_sys::window().map(|w| w.local_storage()) else { return };
    let value = value.trim();
    // Storage can be full or disabled; the token then lasts only for this call.
    let _ = if value.is_empty() { storage.remove_item(TOKEN_KEY) } else { storage.set_item(TOKEN_KEY, value) };
}

fn authorized(request: RequestBuilder) -> RequestBuilder {
    match token() {
        Some(t) => request.header("Authorization", &format!("Bearer {}", t.trim())),
        None => request,
    }
}

/// `value` escaped for a query string.
pub(crate) fn encode(value: &str) -> String {
    String::from(js_sys::encode_uri_component(value))
}

async fn error_of(what: &str, response: Response) -> ApiError {
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    let message = match serde_json::from_str::<ErrorBody>(&text) {
        Ok(body) => format!("{what}: {}", body.error),
        Err(_) if text.trim().is_empty() => format!("{what}: HTTP {status} {}", response.status_text()),
        Err(_) => format!("{what}: HTTP {status}: {}", text.chars().take(200).collect::<String>()),
    };
    ApiError { status, message }
}

/// Send `request` (with `body` as JSON, if any) and the stored token; an
/// answer that is not a success is the error.
async fn send(what: &str, request: RequestBuilder, body: Option<&serde_json::Value>) -> Result<Response, ApiError> {
    let request = authorized(request);
    let request = match body {
        Some(json) => request.json(json),
        None => request.build(),
    }
    .map_err(|e| ApiError::network(what, e))?;
    // A file opened without uploading (`local-` ids) is answered by its
    // worker in this tab, with the JSON the server would send.
    let local = local::local_request(&request.url());
    let early = if local.is_none() && request.method() == gloo_net::http::Method::GET {
        prefetched(&request.url()).await
    } else {
        None
    };
    let response = match (early, local) {
        (Some(early), _) => early,
        (None, Some(local)) => {
            let (status, body) = local::respond(&local, request.method().as_str()).await;
            Response::builder()
                .status(status)
                .header("Content-Type", "application/json")
                .body(Some(body.as_str()))
                .map_err(|e| ApiError::network(what, e))?
        }
        (None, None) => request.send().await.map_err(|e| ApiError::network(what, e))?,
    };
    if response.ok() { Ok(response) } else { Err(error_of(what, response).await) }
}

/// The answer to GET `url` that the page's document asked for before this
/// module was ready (`index.html` sends a snapshot page's first requests
/// with the page and leaves them in `window.__vramscope_prefetched`, by
/// absolute URL), taken once; `None` when it asked no such thing, or where a token
/// is set (its requests carry none) or its request failed (this one is
/// then sent as usual).
async fn prefetched(url: &str) -> Option<Response> {
    let window = web_sys::window()?;
    let asked = js_sys::Reflect::get(&window, &JsValue::from_str("__vramscope_prefetched")).ok()?;
    let asked = asked.dyn_into::<js_sys::Object>().ok()?;
    let key = JsValue::from_str(url);
    let promise = js_sys::Reflect::get(&asked, &key).ok()?.dyn_into::<js_sys::Promise>().ok()?;
    let _ = js_sys::Reflect::delete_property(&asked, &key);
    if token().is_some() {
        return None;
    }
    let response = JsFuture::from(promise).await.ok()?.dyn_into::<web_sys::Response>().ok()?;
    Some(Response::from(response))
}

async fn json<T: DeserializeOwned>(what: &str, response: Response) -> Result<T, ApiError> {
    let status = response.status();
    let text = response.text().await.map_err(|e| ApiError::network(what, e))?;
    let started = draws::now();
    let decoded = serde_json::from_str(&text).map_err(|e| ApiError {
        status,
        message: format!("{what}: the server's answer is not what this page expects ({e})"),
    });
    draws::record_detail("decode", &format!("{what} ({} kB)", text.len() / 1000), started);
    decoded
}

/// A request's path and query as written, or why it could not be.
fn written(what: &str, path: Result<String, serde_urlencoded::ser::Error>) -> Result<String, ApiError> {
    path.map_err(|e| ApiError { status: 0, message: format!("{what}: the query could not be written ({e})") })
}

/// GET `url` as JSON.
pub(crate) async fn get<T: DeserializeOwned>(what: &str, url: &str) -> Result<T, ApiError> {
    json(what, send(what, Request::get(url), None).await?).await
}

/// Filters of the snapshot list; empty fields do not filter.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ListQuery {
    /// Free-text search (name, job, host, tags).
    pub(crate) q: String,
    /// Exact job.
    pub(crate) job: String,
    /// Exact host.
    pub(crate) host: String,
    /// One tag.
    pub(crate) tag: String,
}

/// One page of the snapshot list.
pub(crate) async fn list(query: &ListQuery, cursor: Option<&str>) -> Result<Page, ApiError> {
    let what = "listing snapshots";
    let filter = |value: &str| Some(value.trim().to_owned()).filter(|v| !v.is_empty());
    let params = ListParams {
        job: filter(&query.job),
        host: filter(&query.host),
        tag: filter(&query.tag),
        q: filter(&query.q),
        limit: Some(100),
        cursor: cursor.map(str::to_owned),
        pinned: None,
    };
    get(what, &written(what, paths::SNAPSHOTS.path_with([], &params))?).await
}

/// One snapshot's record.
pub(crate) async fn snapshot(id: &str) -> Result<SnapshotMeta, ApiError> {
    get("loading the snapshot", &paths::SNAPSHOT.path([id])).await
}

/// A snapshot's statistics; `None` while the server is still parsing it
/// (after waiting up to [`STATS_WAIT_MAX_S`] for the parse to end).
pub(crate) async fn stats(id: &str) -> Result<Option<StatsReport>, ApiError> {
    let what = "loading the statistics";
    // While the server parses, it answers when the parse ends (or after
    // the longest wait), not at once: the page is told the moment it can draw.
    let params = StatsParams { wait: Some(STATS_WAIT_MAX_S) };
    let url = written(what, paths::STATS.path_with([id], &params))?;
    let response = send(what, Request::get(&url), None).await?;
    if response.status() == 202 {
        return Ok(None);
    }
    json(what, response).await.map(Some)
}

/// Where a timeline window is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TimelineQuery {
    /// CUDA device.
    pub(crate) device: u32,
    /// x axis; `None` lets the server choose (time when the trace has times).
    pub(crate) axis: Option<Axis>,
    /// `[start, end)`; `None` for the whole trace.
    pub(crate) window: Option<Window>,
    /// Buckets: the plot's width in pixels.
    pub(crate) px: u32,
    /// Most allocations to list.
    pub(crate) max_allocations: u32,
    /// When zoomed on memory: the bytes the y axis shows and the plot's
    /// height in pixels, so the server lists allocations down to half a
    /// pixel row of that span (`y_span`, `py`).
    pub(crate) y_span: Option<(u64, u32)>,
}

/// A window of a device's timeline.
pub(crate) async fn timeline(id: &str, q: TimelineQuery) -> Result<TimelineWindow, ApiError> {
    let p = TimelineParams {
        device: Some(q.device),
        start: q.window.map(|w| w.start),
        end: q.window.map(|w| w.end),
        px: Some(q.px.max(1)),
        axis: q.axis,
        max_allocations: Some(q.max_allocations as usize),
        y_span: q.y_span.map(|(bytes, _)| bytes),
        py: q.y_span.map(|(_, py)| py),
    };
    view::<Timeline>("loading the timeline", id, &p).await
}

/// A declared view of a snapshot (`vramscope_shared::views::view`): GET
/// `/api/v1/snapshots/{id}/{V::PATH}` with `params` serialised as its
/// query, exactly as the server reads it. Every view of the snapshot page
/// goes through here, and so through [`get`] (which hands `local-` ids to
/// the browser's worker).
pub(crate) async fn view<V: View>(what: &str, id: &str, params: &V::Params) -> Result<V::Answer, ApiError> {
    get(what, &written(what, paths::view_path(id, V::PATH, params))?).await
}

/// The device, axis and window of the views over a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WindowQuery {
    /// CUDA device.
    pub(crate) device: u32,
    /// x axis.
    pub(crate) axis: Axis,
    /// `[start, end)`; `None` for the whole trace.
    pub(crate) window: Option<Window>,
}

impl WindowQuery {
    fn start(self) -> Option<i64> {
        self.window.map(|w| w.start)
    }

    fn end(self) -> Option<i64> {
        self.window.map(|w| w.end)
    }
}

/// The allocator's state after a row, or at an x of an axis.
pub(crate) async fn state(id: &str, device: u32, at: Instant) -> Result<AllocatorState, ApiError> {
    let p = match at {
        Instant::Row(r) => StateParams { device: Some(device), at: Some(r), ..Default::default() },
        Instant::X(axis, x) => StateParams { device: Some(device), axis: Some(axis), x: Some(x), ..Default::default() },
    };
    view::<State>("loading the allocator state", id, &p).await
}

/// The segment timeline of a window.
pub(crate) async fn segments(id: &str, w: WindowQuery, columns: u32) -> Result<SegmentsAnswer, ApiError> {
    let p = SegmentsParams {
        device: Some(w.device),
        axis: Some(w.axis),
        start: w.start(),
        end: w.end(),
        columns: Some(columns),
    };
    view::<Segments>("loading the segment timeline", id, &p).await
}

/// Fragmentation over a window, and the allocator settings.
pub(crate) async fn fragmentation(id: &str, w: WindowQuery, columns: u32) -> Result<FragmentationAnswer, ApiError> {
    let p = FragmentationParams {
        device: Some(w.device),
        axis: Some(w.axis),
        start: w.start(),
        end: w.end(),
        columns: Some(columns),
    };
    view::<Fragmentation>("loading the fragmentation figures", id, &p).await
}

/// The `record_function` ranges overlapping a window.
pub(crate) async fn annotations(id: &str, w: WindowQuery) -> Result<AnnotationsAnswer, ApiError> {
    let p =
        AnnotationsParams { device: Some(w.device), axis: Some(w.axis), start: w.start(), end: w.end(), limit: None };
    view::<Annotations>("loading the annotations", id, &p).await
}

/// The frames of a stack, innermost first.
pub(crate) async fn stack(id: &str, stack: u32) -> Result<Vec<Frame>, ApiError> {
    get("loading the stack", &paths::STACK.path([id, &stack.to_string()])).await
}

/// Rename and/or retag a snapshot; answers the new record.
pub(crate) async fn update(id: &str, name: Option<&str>, tags: Option<&[String]>) -> Result<SnapshotMeta, ApiError> {
    let mut body = serde_json::Map::new();
    if let Some(name) = name {
        body.insert("name".to_owned(), name.into());
    }
    if let Some(tags) = tags {
        body.insert("tags".to_owned(), tags.into());
    }
    let what = "saving the change";
    let body = serde_json::Value::Object(body);
    let response = send(what, Request::patch(&paths::SNAPSHOT.path([id])), Some(&body)).await?;
    json(what, response).await
}

/// Links to a snapshot's file and exports that work without a token for a
/// few minutes (`POST /api/v1/snapshots/{id}/links`).
#[derive(Clone, Debug, serde::Deserialize)]
pub(crate) struct SignedLinks {
    /// The original file.
    pub(crate) file: String,
    /// The self-contained report page.
    pub(crate) report: String,
}

/// Ask for signed links: a navigation (a download link) sends no
/// `Authorization` header, so in token mode a plain link answers 401.
pub(crate) async fn signed_links(id: &str) -> Result<SignedLinks, ApiError> {
    let what = "preparing the download";
    json(what, send(what, Request::post(&paths::LINKS.path([id])), None).await?).await
}

/// Delete a snapshot.
pub(crate) async fn delete(id: &str) -> Result<(), ApiError> {
    send("deleting the snapshot", Request::delete(&paths::SNAPSHOT.path([id])), None).await.map(|_| ())
}

/// Upload a file, calling `progress(sent, total)` as bytes go out.
pub(crate) async fn upload(
    file: &web_sys::File,
    progress: impl Fn(f64, f64) + 'static,
) -> Result<UploadAnswer, ApiError> {
    let what = format!("uploading {}", file.name());
    let js = |e: JsValue| ApiError { status: 0, message: format!("{what}: {}", js_message(&e)) };
    let xhr = web_sys::XmlHttpRequest::new().map_err(js)?;
    let url = paths::SNAPSHOTS.path_with([], &[("name", file.name())]).map_err(|e| js(e.to_string().into()))?;
    xhr.open("POST", &url).map_err(js)?;
    xhr.set_request_header("Content-Type", "application/octet-stream").map_err(js)?;
    if let Some(t) = token() {
        xhr.set_request_header("Authorization", &format!("Bearer {}", t.trim())).map_err(js)?;
    }
    let on_progress = Closure::<dyn FnMut(web_sys::ProgressEvent)>::new(move |e: web_sys::ProgressEvent| {
        if e.length_computable() {
            progress(e.loaded(), e.total());
        }
    });
    xhr.upload().map_err(js)?.set_onprogress(Some(on_progress.as_ref().unchecked_ref()));
    // The request's own events settle a promise: load on any HTTP answer,
    // error or abort when none came.
    let settled = js_sys::Promise::new(&mut |resolve, reject| {
        xhr.set_onload(Some(&resolve));
        xhr.set_onerror(Some(&reject));
        xhr.set_onabort(Some(&reject));
    });
    xhr.send_with_opt_blob(Some(file)).map_err(js)?;
    let outcome = JsFuture::from(settled).await;
    drop(on_progress);
    if outcome.is_err() {
        return Err(ApiError::network(&what, "the connection failed"));
    }
    let status = xhr.status().unwrap_or(0);
    let text = xhr.response_text().ok().flatten().unwrap_or_default();
    if !(200..300).contains(&status) {
        let message = match serde_json::from_str::<ErrorBody>(&text) {
            Ok(body) => format!("{what}: {}", body.error),
            Err(_) => format!("{what}: HTTP {status}"),
        };
        return Err(ApiError { status, message });
    }
    serde_json::from_str(&text).map_err(|e| ApiError {
        status,
        message: format!("{what}: the server's answer is not what this page expects ({e})"),
    })
}

/// The comparison of snapshot `a` with `b`, timelines at `px` buckets.
pub(crate) async fn compare(a: &str, b: &str, align: Align, px: u32) -> Result<DiffAnswer, ApiError> {
    let what = "comparing the snapshots";
    let ids = CompareIds { a: Some(a.to_owned()), b: Some(b.to_owned()) };
    let diff = DiffParams { align: Some(align), px: Some(px.max(1)), ..Default::default() };
    let q = written(what, paths::compare_query(&ids, &diff))?;
    // A file opened without uploading is compared in this tab, by its
    // worker: with another local file, or with an uploaded snapshot whose
    // file the page fetches once.
    let (mine, other, mine_is_a) = match (local::is_local(a), local::is_local(b)) {
        (false, false) => return get(what, &format!("{}?{q}", paths::COMPARE.route())).await,
        (true, _) => (a, b, true),
        (false, true) => (b, a, false),
    };
    compare_locally(what, mine, other, mine_is_a, &q).await
}

/// [`compare`] of a local file, by its worker.
async fn compare_locally(
    what: &str,
    mine: &str,
    other: &str,
    mine_is_a: bool,
    q: &str,
) -> Result<DiffAnswer, ApiError> {
    let bytes = if local::is_local(other) || local::holds_other(mine, other) {
        local::OtherBytes::None
    } else {
        let response =
            send("loading the other snapshot's file", Request::get(&paths::FILE.path([other])), None).await?;
        local::OtherBytes::Fetched(response.binary().await.map_err(|e| ApiError::network(what, e))?)
    };
    let (status, body) = local::compare(mine, other, mine_is_a, bytes, q).await;
    let response = Response::builder()
        .status(status)
        .header("Content-Type", "application/json")
        .body(Some(body.as_str()))
        .map_err(|e| ApiError::network(what, e))?;
    if !response.ok() {
        return Err(error_of(what, response).await);
    }
    json(what, response).await
}

/// A snapshot's review comments, oldest first.
pub(crate) async fn comments(id: &str) -> Result<Vec<Comment>, ApiError> {
    get("loading the comments", &paths::COMMENTS.path([id])).await
}

/// Post a comment; `body` is `{"body": …, "row"?: …, "addr"?: …}`.
pub(crate) async fn post_comment(id: &str, body: &serde_json::Value) -> Result<(), ApiError> {
    let url = paths::COMMENTS.path([id]);
    send("posting the comment", Request::post(&url), Some(body)).await.map(|_| ())
}

/// Delete a comment (one's own, or any as an admin).
pub(crate) async fn delete_comment(id: &str, comment_id: &str) -> Result<(), ApiError> {
    let url = paths::COMMENT.path([id, comment_id]);
    send("deleting the comment", Request::delete(&url), None).await.map(|_| ())
}

/// Pin or unpin a snapshot.
pub(crate) async fn set_pinned(id: &str, pinned: bool) -> Result<(), ApiError> {
    let body = serde_json::json!({ "pinned": pinned });
    send("pinning the snapshot", Request::patch(&paths::SNAPSHOT.path([id])), Some(&body)).await.map(|_| ())
}

/// Every job, most recent first.
pub(crate) async fn jobs() -> Result<Vec<JobSummary>, ApiError> {
    get("listing jobs", paths::JOBS.route()).await
}

/// One job's ranks side by side.
pub(crate) async fn job(name: &str) -> Result<JobReport, ApiError> {
    get("loading the job", &paths::JOB.path([name])).await
}

/// Will it fit? A prediction over stored snapshots of one job
/// (`GET /api/v1/predict`, the query serialised by serde).
pub(crate) async fn predict(q: &PredictQuery) -> Result<PredictReport, ApiError> {
    let what = "predicting";
    get(what, &written(what, paths::PREDICT.path_with([], q))?).await
}

/// The processes that streamed telemetry, and their hosts.
pub(crate) async fn live_sources() -> Result<LiveList, ApiError> {
    get("live sources", paths::LIVE.route()).await
}

/// A source's samples after `since_ms` (every kept one when `None`).
pub(crate) async fn live_samples(source: &str, since_ms: Option<i64>) -> Result<LiveRead, ApiError> {
    let what = "live samples";
    let params = ReadParams { since_ms, limit: None };
    get(what, &written(what, paths::LIVE_SOURCE.path_with([source], &params))?).await
}

/// Ask the agent of a source for a snapshot of that process (`all`: of
/// every process it serves).
pub(crate) async fn capture(source: &str, all: bool) -> Result<(), ApiError> {
    let what = "asking for a snapshot";
    let url = written(what, paths::LIVE_CAPTURE.path_with([source], &CaptureParams { all }))?;
    send(what, Request::post(&url), None).await.map(|_| ())
}

/// The message of a JavaScript exception.
fn js_message(e: &JsValue) -> String {
    e.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| e.as_string())
        .unwrap_or_else(|| format!("{e:?}"))
}
