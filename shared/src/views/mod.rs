//! The questions the dashboard asks of one snapshot, answered the same way
//! by the server (`/api/v1/snapshots/{id}/…`) and by the browser for a file
//! opened locally: a timeline window, the allocator state at a row, a stack.
//!
//! Each view is a plain function of an [`IndexedSnapshot`] snapshot ([`crate::indexed`]) and a query
//! struct that deserializes from the URL's query string, returning a
//! serializable answer, and is declared once in [`view`] (its path, query
//! and answer types), where the server, the dashboard and [`route`] find it. The server's handlers are thin wrappers; the
//! frontend's local mode calls the very same functions, so both sides can
//! never drift apart.

pub mod annotations;
pub mod entry;
pub mod findings;
pub mod fragmentation;
pub mod host;
pub mod pools;
pub mod route;
pub mod search;
pub mod segments;
pub mod state;
pub mod view;

use serde::{Deserialize, Serialize};

use crate::error::ViewError;
use crate::indexed::IndexedSnapshot;
use crate::timeline::{Axis, MAX_PX, TimelineWindow, YSpan};

/// Most allocations a timeline answer lists.
pub const MAX_ALLOCATIONS: usize = 5_000;

/// Query of the timeline view.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct TimelineParams {
    /// Device (default: the first).
    pub device: Option<u32>,
    /// Window start, in the axis' units (default: the trace's first).
    pub start: Option<i64>,
    /// Window end (default: the trace's last).
    pub end: Option<i64>,
    /// Pixel width of the plot (default 1000).
    pub px: Option<u32>,
    /// `time` (default when the trace has times) or `event`.
    pub axis: Option<Axis>,
    /// Most allocations to list (default 2000, at most [`MAX_ALLOCATIONS`]).
    pub max_allocations: Option<usize>,
    /// Bytes the plot's y axis shows when zoomed on memory: allocations down
    /// to half a pixel row of it are listed ([`crate::timeline::YSpan`]).
    /// Absent (old links and clients): the window's peak.
    pub y_span: Option<u64>,
    /// The plot's height in pixels, for `y_span` (default `px`).
    pub py: Option<u32>,
}

/// Per-pixel buckets of the curves and the allocations visible at this
/// zoom; the answer's size depends on `px`, never on the trace's length.
pub fn timeline(a: &IndexedSnapshot, p: &TimelineParams) -> Result<TimelineWindow, ViewError> {
    let device = a.device_or_first(p.device)?;
    let has_time = a.snapshot.device(device).is_some_and(|d| d.trace.has_time());
    let axis = p.axis.unwrap_or(if has_time { Axis::Time } else { Axis::Event });
    let (first, last) = a
        .timeline
        .extent(device, axis)
        .ok_or_else(|| ViewError::NotFound(format!("{axis:?} axis for device {device} (no trace, or no times)")))?;
    let (start, end) = (p.start.unwrap_or(first), p.end.unwrap_or(last));
    if end <= start {
        return Err(ViewError::BadRequest(format!("empty window: start {start} >= end {end}")));
    }
    let px = p.px.unwrap_or(1000).clamp(1, MAX_PX);
    let max_allocations = p.max_allocations.unwrap_or(2000).min(MAX_ALLOCATIONS);
    let y_span = p.y_span.map(|bytes| YSpan { bytes, px: p.py.unwrap_or(px).clamp(1, MAX_PX) });
    a.timeline
        .query_zoomed(crate::timeline::WindowRequest { device, axis, start, end, px, max_allocations }, y_span)
        .ok_or_else(|| ViewError::BadRequest("no timeline for that window".to_owned()))
}

/// Query of the blocks view.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct BlocksParams {
    /// Device (default: the first).
    pub device: Option<u32>,
    /// Trace row: the state right after it. Default: the end of the trace.
    pub at: Option<u32>,
    /// Most allocations to list, largest first (default 10000).
    pub limit: Option<usize>,
}

/// A live allocation at a row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveAllocation {
    /// Address.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// Interned stack id (see [`stack`]).
    pub stack: u32,
    /// `allocated`, or `pending_free` (freed, waiting for stream events).
    pub state: String,
    /// Row of its `alloc` entry, if the trace saw it.
    pub alloc_row: Option<u32>,
    /// The memory pool it came from: `[0, 0]` the default pool, else a
    /// private pool (a CUDA graph's); see [`crate::pools`].
    pub pool: (i64, i64),
}

/// A segment alive at a row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveSegment {
    /// Address.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// Row of its `segment_alloc`/`segment_map`, if the trace saw it.
    pub start_row: Option<u32>,
    /// Part of an expandable segment (mapped pages).
    pub mapped: bool,
    /// The memory pool it belongs to (see [`LiveAllocation::pool`]).
    pub pool: (i64, i64),
}

/// Allocator state after a row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateAt {
    /// Device.
    pub device: u32,
    /// The row, or none for the end of the trace.
    pub row: Option<u32>,
    /// Segments alive.
    pub segments: Vec<LiveSegment>,
    /// Allocations alive, largest first.
    pub allocations: Vec<LiveAllocation>,
    /// More allocations were alive than `limit` let through.
    pub truncated: bool,
}

/// Segments and allocations alive right after trace row `at`.
pub fn blocks(a: &IndexedSnapshot, p: &BlocksParams) -> Result<StateAt, ViewError> {
    let device = a.device_or_first(p.device)?;
    let index = a.device_index(device)?;
    let rows = a.snapshot.device(device).map_or(0, |d| d.trace.len());
    let at = p.at.filter(|&r| (r as usize) < rows);
    if let (Some(r), None) = (p.at, at) {
        return Err(ViewError::BadRequest(format!("row {r} is past the trace's {rows} entries")));
    }
    // After row `r` (or at the end): started at or before r, not yet ended.
    let alive = |start: Option<u32>, end: Option<u32>| match at {
        Some(r) => start.is_none_or(|s| s <= r) && end.is_none_or(|e| e > r),
        None => end.is_none(),
    };
    let pools = a.pool_map(device)?;
    let pool = |row: Option<u32>, addr: u64| row.map_or_else(|| pools.segment_pool(addr, at), |r| pools.pool(r));
    let segments = index
        .segments
        .iter()
        .filter(|s| alive(s.start_row, s.end_row))
        .map(|s| LiveSegment {
            addr: s.addr,
            size: s.size,
            start_row: s.start_row,
            mapped: s.mapped,
            pool: pool(s.start_row, s.addr),
        })
        .collect();
    let mut allocations: Vec<LiveAllocation> = index
        .allocations
        .iter()
        .filter(|x| alive(x.alloc_row.get(), x.free_completed_row.get()))
        .map(|x| {
            let pending = match at {
                Some(r) => x.free_requested_row.get().is_some_and(|f| f <= r),
                None => x.free_requested_row.is_some(),
            };
            LiveAllocation {
                addr: x.addr,
                size: x.size,
                stack: x.stack,
                state: if pending { "pending_free" } else { "allocated" }.to_owned(),
                alloc_row: x.alloc_row.get(),
                pool: pool(x.alloc_row.get(), x.addr),
            }
        })
        .collect();
    allocations.sort_by(|x, y| y.size.cmp(&x.size).then(x.addr.cmp(&y.addr)));
    let limit = p.limit.unwrap_or(10_000);
    let truncated = allocations.len() > limit;
    allocations.truncate(limit);
    Ok(StateAt { device, row: at, segments, allocations, truncated })
}

/// One frame of a stack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameJson {
    /// Source file.
    pub filename: String,
    /// Line number.
    pub line: i64,
    /// Function name.
    pub name: String,
}

/// The frames of an interned stack, innermost first.
pub fn stack(a: &IndexedSnapshot, stack: u32) -> Result<Vec<FrameJson>, ViewError> {
    let frames = &a.snapshot.frames;
    if stack as usize >= frames.stack_count() {
        return Err(ViewError::NotFound(format!("stack {stack}")));
    }
    let strings = &a.snapshot.strings;
    Ok(frames
        .stack(stack)
        .iter()
        .filter_map(|&f| frames.frame(f))
        .map(|f| FrameJson {
            filename: strings.get(f.filename).to_owned(),
            line: f.line,
            name: strings.get(f.name).to_owned(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streams() -> IndexedSnapshot {
        crate::testing::corpus("streams")
    }

    #[test]
    fn answers_and_refuses_like_the_api() {
        let a = streams();
        let window = timeline(&a, &TimelineParams { px: Some(100), ..Default::default() }).expect("window");
        assert!(window.buckets.len() <= 100 && !window.buckets.is_empty());
        let bad = timeline(&a, &TimelineParams { start: Some(10), end: Some(10), ..Default::default() });
        assert!(matches!(bad, Err(ViewError::BadRequest(_))), "{bad:?}");
        assert_eq!(a.device_or_first(Some(99)), Err(ViewError::NotFound("device 99".to_owned())));
        let end = blocks(&a, &BlocksParams::default()).expect("state at end");
        assert!(end.segments.iter().all(|s| s.size > 0));
        let past = blocks(&a, &BlocksParams { at: Some(u32::MAX), ..Default::default() });
        assert!(matches!(past, Err(ViewError::BadRequest(_))));
        assert!(matches!(stack(&a, u32::MAX), Err(ViewError::NotFound(_))));
    }
}
