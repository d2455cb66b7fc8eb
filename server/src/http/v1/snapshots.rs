//! Listing, metadata, statistics, file download and deletion, and the
//! report export (the page and chart of `vramscope report`).

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;
use vramscope_shared::StatsReport;

use crate::report::{self, ChartFormat};

use super::extract;
use crate::http::AppState;
use crate::http::error::{AppError, AppResult};
use crate::http::role::{Admin, RequireRole, Uploader};
use crate::store::{Cursor, ListFilter, SnapshotRecord, SnapshotStatus, is_not_found};
use vramscope_shared::api::paths;
use vramscope_shared::api::snapshots::{ListParams, Page, STATS_WAIT_MAX_S, SignedLinks, SnapshotMeta, StatsParams};

/// How often a `stats?wait=` request reads its row again: a parse on
/// another instance wakes nothing here.
const RECHECK: Duration = Duration::from_secs(1);

pub(crate) async fn list(
    State(state): State<AppState>,
    Query(p): Query<ListParams<Cursor>>,
) -> AppResult<Json<Page<SnapshotMeta>>> {
    let filter =
        ListFilter { job: p.job, host: p.host, tag: p.tag, q: p.q, limit: p.limit, cursor: p.cursor, pinned: p.pinned };
    let page = state.db.list(&filter).await?;
    let items = page.items.into_iter().map(|rec| with_progress(&state, rec)).collect();
    Ok(Json(Page { items, next_cursor: page.next_cursor.map(|c| c.to_string()) }))
}

/// What the API shows of `rec`, with how far this instance's parse of a
/// `parsing` snapshot is.
fn with_progress(state: &AppState, rec: SnapshotRecord) -> SnapshotMeta {
    let mut meta = rec.meta;
    if meta.status == SnapshotStatus::Parsing {
        meta.parsed_bytes = state.ingest.parser.progress(&rec.blob_key).map(|(read, _)| read.min(meta.size_bytes));
    }
    meta
}

pub(crate) async fn get_one(State(state): State<AppState>, Path(id): Path<String>) -> AppResult<Json<SnapshotMeta>> {
    let rec = extract::record(&state, &id).await?;
    Ok(Json(with_progress(&state, rec)))
}

/// `GET /api/v1/snapshots/{id}/stats`: the object `vramscope stats --json` prints.
///
/// With `?wait=S` a snapshot still parsing holds the answer up to `S`
/// seconds (at most [`STATS_WAIT_MAX_S`]) for its parse to end: woken by
/// this instance's parses as they end, and reading the row again every
/// [`RECHECK`] for a parse on another instance behind the same database.
///
/// Not a declared view ([`vramscope_shared::views::view`]): a view is "the
/// answer of the loaded snapshot to a query", and this one never loads it.
/// It answers the statistics stored with the row at ingest (named after the
/// record), 202 while the file is being parsed and 422 once its parse failed,
/// which the dashboard reads as "not yet" and `api::view` does not.
pub(crate) async fn stats(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<StatsParams>,
) -> AppResult<Response> {
    let wait = Duration::from_secs(params.wait.unwrap_or(0).min(STATS_WAIT_MAX_S).into());
    let deadline = tokio::time::Instant::now() + wait;
    let rec = loop {
        // Listening before the row is read: a parse ending between the
        // read and the wait still wakes it.
        let settled = state.ingest.settled.notified();
        let rec = extract::record(&state, &id).await?;
        let now = tokio::time::Instant::now();
        if rec.status != SnapshotStatus::Parsing || now >= deadline {
            break rec;
        }
        let _ = tokio::time::timeout(RECHECK.min(deadline - now), settled).await;
    };
    match (rec.status, &rec.stats_json) {
        (SnapshotStatus::Ready, Some(json)) => {
            let mut report: StatsReport = serde_json::from_str(json)
                .map_err(|e| AppError::Internal(anyhow::anyhow!("stored stats of {id} do not parse: {e}")))?;
            report.file = rec.name.clone();
            Ok(Json(report).into_response())
        }
        (SnapshotStatus::Failed, _) => {
            Err(AppError::Unprocessable(rec.meta.error.unwrap_or_else(|| "parse failed".to_owned())))
        }
        _ => Ok((StatusCode::ACCEPTED, Json(serde_json::json!({ "status": rec.status }))).into_response()),
    }
}

/// Body of `PATCH /api/v1/snapshots/{id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Update {
    name: Option<String>,
    tags: Option<Vec<String>>,
    /// Pinned snapshots are kept by retention (see `crate::retention`).
    pinned: Option<bool>,
}

pub(crate) async fn update(
    _: RequireRole<Uploader>,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Json(update): Json<Update>,
) -> AppResult<Json<SnapshotMeta>> {
    if let Some(name) = &update.name {
        if name.trim().is_empty() {
            return Err(AppError::BadRequest("name must not be empty".to_owned()));
        }
        crate::ingest::labels::check_label("name", name).map_err(|e| AppError::BadRequest(e.0))?;
    }
    let tags = update.tags.map(|tags| crate::ingest::labels::clean_tags(tags.iter().map(String::as_str)));
    if let Some(tags) = &tags {
        crate::ingest::labels::check_tags(tags).map_err(|e| AppError::BadRequest(e.0))?;
    }
    if let Some(pinned) = update.pinned
        && !state.db.set_pinned(&id, pinned).await?
    {
        return Err(AppError::NotFound(format!("snapshot {id}")));
    }
    let rec = state.db.update_meta(&id, update.name, tags).await?;
    rec.map(|rec| Json(rec.meta)).ok_or_else(|| AppError::NotFound(format!("snapshot {id}")))
}

pub(crate) async fn delete(
    _: RequireRole<Admin>,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> AppResult<StatusCode> {
    let rec = state.db.delete(&id).await?.ok_or_else(|| AppError::NotFound(format!("snapshot {id}")))?;
    state.ingest.cache.remove(&rec.blob_key);
    state.ingest.indexes.forget(&rec.blob_key).await;
    // The file is shared by identical uploads: remove it with its last row.
    crate::store::delete_blob_if_unused(&state.db, &state.blobs, &rec.blob_key).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// What a signed link may fetch.
pub(crate) const SIGNABLE: [paths::Endpoint<1>; 4] = [paths::FILE, paths::REPORT, paths::CHART_SVG, paths::CHART_PNG];

/// `POST /api/v1/snapshots/{id}/links` is for viewers (it declares no
/// role): it changes nothing, and only gives links to what a viewer may read.
pub(crate) async fn links(State(state): State<AppState>, Path(id): Path<String>) -> AppResult<Json<SignedLinks>> {
    let rec = extract::record(&state, &id).await?;
    let [file, report, chart_svg, chart_png] = SIGNABLE.map(|what| state.links.sign(&what.path([&rec.id])));
    Ok(Json(SignedLinks {
        file,
        report,
        chart_svg,
        chart_png,
        expires_ms: crate::clock::now_ms() + crate::auth::LINK_VALID_MS,
    }))
}

/// Parse a single `Range: bytes=a-b` (or `a-`, or `-n`) against a size.
fn parse_range(value: &str, size: u64) -> Option<std::ops::Range<u64>> {
    let spec = value.strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None; // Multiple ranges: answer with the whole file.
    }
    let (a, b) = spec.split_once('-')?;
    let range = match (a.trim(), b.trim()) {
        ("", n) => {
            let n: u64 = n.parse().ok()?;
            size.saturating_sub(n)..size
        }
        (a, "") => a.parse().ok()?..size,
        (a, b) => a.parse().ok()?..b.parse::<u64>().ok()?.saturating_add(1).min(size),
    };
    (range.start < range.end).then_some(range)
}

/// `GET /api/v1/snapshots/{id}/file`: the original bytes, with Range support.
pub(crate) async fn file(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> AppResult<Response> {
    let rec = extract::record(&state, &id).await?;
    let size = rec.size_bytes;
    let requested = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    let range = requested.and_then(|r| parse_range(r, size));
    if requested.is_some() && range.is_none() && size > 0 && !requested.is_some_and(|r| r.contains(',')) {
        let mut response = StatusCode::RANGE_NOT_SATISFIABLE.into_response();
        if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
            response.headers_mut().insert(header::CONTENT_RANGE, v);
        }
        return Ok(response);
    }
    let (_, stream) = state.blobs.get_range(&rec.blob_key, range.clone()).await.map_err(|e| {
        if is_not_found(&e) { AppError::NotFound(format!("the file of snapshot {id}")) } else { AppError::Internal(e) }
    })?;
    let mut response = Response::new(Body::from_stream(stream));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    let filename: String =
        rec.name.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{filename}\"")) {
        headers.insert(header::CONTENT_DISPOSITION, v);
    }
    match range {
        Some(r) => {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(r.end - r.start));
            if let Ok(v) = HeaderValue::from_str(&format!("bytes {}-{}/{size}", r.start, r.end - 1)) {
                headers.insert(header::CONTENT_RANGE, v);
            }
            *response.status_mut() = StatusCode::PARTIAL_CONTENT;
        }
        None => {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
        }
    }
    Ok(response)
}

/// Rendered report pages kept, by the file's SHA-256, at most this many
/// bytes together: asking again for the same report costs no rendering.
/// A page is kept when it is at most half of this: `gpt_long`'s (22 MB of
/// snapshot) is 34 MB as base64 with the dashboard, and the dashboard grows.
const REPORTS_KEPT_BYTES: usize = 96 << 20;

/// The most recently rendered report pages (most recent last).
static REPORTS: std::sync::Mutex<Vec<(String, bytes::Bytes)>> = std::sync::Mutex::new(Vec::new());

fn kept_report(sha256: &str) -> Option<bytes::Bytes> {
    let mut kept = REPORTS.lock().unwrap_or_else(|p| p.into_inner());
    let i = kept.iter().position(|(k, _)| k == sha256)?;
    let entry = kept.remove(i);
    let page = entry.1.clone();
    kept.push(entry);
    Some(page)
}

fn keep_report(sha256: &str, page: bytes::Bytes) {
    if page.len() > REPORTS_KEPT_BYTES / 2 {
        return;
    }
    let mut kept = REPORTS.lock().unwrap_or_else(|p| p.into_inner());
    kept.retain(|(k, _)| k != sha256);
    kept.push((sha256.to_owned(), page));
    while kept.iter().map(|(_, p)| p.len()).sum::<usize>() > REPORTS_KEPT_BYTES {
        kept.remove(0);
    }
}

/// `GET /api/v1/snapshots/{id}/report.html`: the same self-contained page
/// as `vramscope report FILE` (dashboard, snapshot and findings inlined),
/// as a download named after the snapshot. The page holds the whole file;
/// above `report_inline_max_bytes` it holds what the index gives instead
/// (the findings and the main chart), and the file is never read. Rendering
/// takes a parse slot.
pub(crate) async fn report(State(state): State<AppState>, Path(id): Path<String>) -> AppResult<Response> {
    let rec = extract::record(&state, &id).await?;
    if let Some(page) = kept_report(&rec.sha256) {
        return Ok(download(page, "text/html; charset=utf-8", &rec.name, "html"));
    }
    let (rec, analyzed) = extract::analyzed_record(&state, &id).await?;
    // The slot goes into the rendering thread: a client that hangs up
    // stops waiting, not the render (issue 44).
    let slot =
        Arc::clone(&state.ingest.parser.permits).acquire_owned().await.map_err(|e| AppError::Internal(e.into()))?;
    let name = rec.name.clone();
    let limit = state.settings.report_inline_max_bytes;
    let html = if rec.size_bytes > limit {
        let size = rec.size_bytes;
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            report::index_report_html(&name, size, limit, &analyzed)
        })
        .await
    } else {
        let bytes = state.blobs.get_bytes(&rec.blob_key).await.map_err(|e| {
            if is_not_found(&e) {
                AppError::NotFound(format!("the file of snapshot {id}"))
            } else {
                AppError::Internal(e)
            }
        })?;
        let modified_ms = u64::try_from(rec.uploaded_at_ms).unwrap_or(0);
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            report::report_html(&name, modified_ms, &bytes, &analyzed.snapshot)
        })
        .await
    }
    .map_err(|e| AppError::Internal(anyhow::anyhow!("the report's worker thread failed: {e}")))?
    .map_err(AppError::Internal)?;
    state.metrics.reports_rendered.inc();
    let page = bytes::Bytes::from(html.into_bytes());
    keep_report(&rec.sha256, page.clone());
    Ok(download(page, "text/html; charset=utf-8", &rec.name, "html"))
}

/// `GET /api/v1/snapshots/{id}/chart.svg`: the report's main chart, as
/// `vramscope report --svg` draws it.
pub(crate) async fn chart_svg(State(state): State<AppState>, Path(id): Path<String>) -> AppResult<Response> {
    chart(&state, &id, ChartFormat::Svg).await
}

/// `GET /api/v1/snapshots/{id}/chart.png`: the same chart as `--png`.
pub(crate) async fn chart_png(State(state): State<AppState>, Path(id): Path<String>) -> AppResult<Response> {
    chart(&state, &id, ChartFormat::Png).await
}

async fn chart(state: &AppState, id: &str, format: ChartFormat) -> AppResult<Response> {
    let (rec, analyzed) = extract::analyzed_record(state, id).await?;
    let name = rec.name.clone();
    let chart = tokio::task::spawn_blocking(move || report::main_chart(&analyzed, &name, format))
        .await
        .map_err(|e| AppError::Internal(anyhow::anyhow!("the chart's worker thread failed: {e}")))?
        // The only failure of a readable snapshot: no device has a trace.
        .map_err(|e| AppError::Unprocessable(e.to_string()))?;
    let (content_type, extension) = match format {
        ChartFormat::Svg => ("image/svg+xml", "svg"),
        ChartFormat::Png => ("image/png", "png"),
    };
    Ok(download(chart, content_type, &rec.name, extension))
}

/// A response with `bytes`, saved as the snapshot's name with `extension`.
fn download(bytes: impl Into<Body>, content_type: &'static str, name: &str, extension: &str) -> Response {
    let mut response = Response::new(bytes.into());
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    let stem = std::path::Path::new(name).file_stem().map_or_else(|| name.to_owned(), |s| s.to_string_lossy().into());
    let filename: String =
        stem.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{filename}.{extension}\"")) {
        headers.insert(header::CONTENT_DISPOSITION, v);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::parse_range;

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-9", 100), Some(0..10));
        assert_eq!(parse_range("bytes=90-", 100), Some(90..100));
        assert_eq!(parse_range("bytes=-5", 100), Some(95..100));
        assert_eq!(parse_range("bytes=95-200", 100), Some(95..100));
        assert_eq!(parse_range("bytes=100-", 100), None);
        assert_eq!(parse_range("bytes=0-1,5-6", 100), None);
        assert_eq!(parse_range("items=0-1", 100), None);
    }
}
