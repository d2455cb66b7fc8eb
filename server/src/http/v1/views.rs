//! Views of a parsed snapshot: timeline windows, allocator state at a row,
//! stacks. Each loads the snapshot into the analysis cache on first use.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use serde::{Deserialize, Serialize};
use vramscope_shared::timeline::{Axis, MAX_PX, TimelineWindow};

use super::snapshots::record;
use crate::analysis::{Analyzed, ParseFailure, analyze, parse_stored};
use crate::http::AppState;
use crate::http::error::{AppError, AppResult};
use crate::store::SnapshotStatus;

/// Most allocations a timeline answer lists.
const MAX_ALLOCATIONS: usize = 5_000;

/// The analyzed snapshot behind an id.
async fn analyzed(state: &AppState, id: &str) -> AppResult<Arc<Analyzed>> {
    let rec = record(state, id).await?;
    if rec.status == SnapshotStatus::Failed {
        return Err(AppError::Unprocessable(rec.error.unwrap_or_else(|| "parse failed".to_owned())));
    }
    let key = rec.blob_key.clone();
    state
        .cache
        .get_or_load(id, || async {
            let snapshot = parse_stored(&state.blobs, &key, &state.parse_permits, &state.metrics).await?;
            analyze(snapshot).await.map_err(ParseFailure::Storage)
        })
        .await
        .map_err(|failure| match failure {
            ParseFailure::Invalid(e) => AppError::NotASnapshot(e),
            ParseFailure::Storage(e) => AppError::Internal(e),
        })
}

fn device_or_first(a: &Analyzed, device: Option<u32>) -> AppResult<u32> {
    match device {
        Some(d) if a.snapshot.device(d).is_some() => Ok(d),
        Some(d) => Err(AppError::NotFound(format!("device {d}"))),
        None => a.snapshot.devices.first().map(|d| d.device).ok_or_else(|| AppError::NotFound("any device".to_owned())),
    }
}

/// Query of the timeline route.
#[derive(Debug, Deserialize)]
pub(crate) struct TimelineParams {
    device: Option<u32>,
    start: Option<i64>,
    end: Option<i64>,
    /// Pixel width of the plot (default 1000).
    px: Option<u32>,
    /// `time` (default when the trace has times) or `event`.
    axis: Option<Axis>,
    /// Most allocations to list (default 2000, at most 5000).
    max_allocations: Option<usize>,
}

/// `GET /api/v1/snapshots/{id}/timeline`: per-pixel buckets of the curves and
/// the allocations visible at this zoom; its size depends on `px`, never on
/// the trace's length.
pub(crate) async fn timeline(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(p): Query<TimelineParams>,
) -> AppResult<Json<TimelineWindow>> {
    let a = analyzed(&state, &id).await?;
    let device = device_or_first(&a, p.device)?;
    let has_time = a.snapshot.device(device).is_some_and(|d| d.trace.has_time());
    let axis = p.axis.unwrap_or(if has_time { Axis::Time } else { Axis::Event });
    let (first, last) = a
        .timeline
        .extent(device, axis)
        .ok_or_else(|| AppError::NotFound(format!("a {axis:?} axis for device {device} (no trace, or no times)")))?;
    let (start, end) = (p.start.unwrap_or(first), p.end.unwrap_or(last));
    if end <= start {
        return Err(AppError::BadRequest(format!("empty window: start {start} >= end {end}")));
    }
    let px = p.px.unwrap_or(1000).clamp(1, MAX_PX);
    let max_allocations = p.max_allocations.unwrap_or(2000).min(MAX_ALLOCATIONS);
    a.timeline
        .query(device, axis, start, end, px, max_allocations)
        .map(Json)
        .ok_or_else(|| AppError::BadRequest("no timeline for that window".to_owned()))
}

/// Query of the blocks route.
#[derive(Debug, Deserialize)]
pub(crate) struct BlocksParams {
    device: Option<u32>,
    /// Trace row: the state right after it. Default: the end of the trace.
    at: Option<u32>,
    /// Most allocations to list, largest first (default 10000).
    limit: Option<usize>,
}

/// A live allocation at a row.
#[derive(Debug, Serialize)]
pub(crate) struct LiveAllocation {
    addr: u64,
    size: u64,
    stack: u32,
    /// `allocated`, or `pending_free` (freed, waiting for stream events).
    state: &'static str,
    alloc_row: Option<u32>,
}

/// A segment alive at a row.
#[derive(Debug, Serialize)]
pub(crate) struct LiveSegment {
    addr: u64,
    size: u64,
    start_row: Option<u32>,
    mapped: bool,
}

/// Allocator state after a row.
#[derive(Debug, Serialize)]
pub(crate) struct StateAt {
    device: u32,
    row: Option<u32>,
    segments: Vec<LiveSegment>,
    allocations: Vec<LiveAllocation>,
    /// More allocations were alive than `limit` let through.
    truncated: bool,
}

/// `GET /api/v1/snapshots/{id}/blocks?at=`: segments and allocations alive
/// right after trace row `at`.
pub(crate) async fn blocks(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(p): Query<BlocksParams>,
) -> AppResult<Json<StateAt>> {
    let a = analyzed(&state, &id).await?;
    let device = device_or_first(&a, p.device)?;
    let index = a
        .index
        .devices
        .iter()
        .find(|d| d.device == device)
        .ok_or_else(|| AppError::NotFound(format!("device {device}")))?;
    let rows = a.snapshot.device(device).map_or(0, |d| d.trace.len());
    let at = p.at.filter(|&r| (r as usize) < rows);
    if let (Some(r), None) = (p.at, at) {
        return Err(AppError::BadRequest(format!("row {r} is past the trace's {rows} entries")));
    }
    // After row `r` (or at the end): started at or before r, not yet ended.
    let alive = |start: Option<u32>, end: Option<u32>| match at {
        Some(r) => start.is_none_or(|s| s <= r) && end.is_none_or(|e| e > r),
        None => end.is_none(),
    };
    let segments = index
        .segments
        .iter()
        .filter(|s| alive(s.start_row, s.end_row))
        .map(|s| LiveSegment { addr: s.addr, size: s.size, start_row: s.start_row, mapped: s.mapped })
        .collect();
    let mut allocations: Vec<LiveAllocation> = index
        .allocations
        .iter()
        .filter(|x| alive(x.alloc_row, x.free_completed_row))
        .map(|x| {
            let pending = match at {
                Some(r) => x.free_requested_row.is_some_and(|f| f <= r),
                None => x.free_requested_row.is_some(),
            };
            LiveAllocation {
                addr: x.addr,
                size: x.size,
                stack: x.stack,
                state: if pending { "pending_free" } else { "allocated" },
                alloc_row: x.alloc_row,
            }
        })
        .collect();
    allocations.sort_by(|x, y| y.size.cmp(&x.size).then(x.addr.cmp(&y.addr)));
    let limit = p.limit.unwrap_or(10_000);
    let truncated = allocations.len() > limit;
    allocations.truncate(limit);
    Ok(Json(StateAt { device, row: at, segments, allocations, truncated }))
}

/// One frame of a stack.
#[derive(Debug, Serialize)]
pub(crate) struct FrameJson {
    filename: String,
    line: i64,
    name: String,
}

/// `GET /api/v1/snapshots/{id}/stacks/{stack}`: the frames, innermost first.
pub(crate) async fn stack(
    State(state): State<AppState>,
    Path((id, stack)): Path<(String, u32)>,
) -> AppResult<Json<Vec<FrameJson>>> {
    let a = analyzed(&state, &id).await?;
    let frames = &a.snapshot.frames;
    if stack as usize >= frames.stack_count() {
        return Err(AppError::NotFound(format!("stack {stack}")));
    }
    let strings = &a.snapshot.strings;
    Ok(Json(
        frames
            .stack(stack)
            .iter()
            .filter_map(|&f| frames.frame(f))
            .map(|f| FrameJson {
                filename: strings.get(f.filename).to_owned(),
                line: f.line,
                name: strings.get(f.name).to_owned(),
            })
            .collect(),
    ))
}
