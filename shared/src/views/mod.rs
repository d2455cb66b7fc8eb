//! The questions the dashboard asks of one snapshot, answered the same way
//! by the server (`/api/v1/snapshots/{id}/…`) and by the browser for a file
//! opened locally: a timeline window, the allocator state at a row, a stack.
//!
//! Each view is a plain function of an [`Analyzed`] snapshot and a query
//! struct that deserializes from the URL's query string, returning a
//! serializable answer. The server's handlers are thin wrappers; the
//! frontend's local mode calls the very same functions, so both sides can
//! never drift apart.

pub mod analysis;
pub mod annotations;
pub mod entry;
pub mod fragmentation;
pub mod host;
pub mod pools;
pub mod route;
pub mod search;
pub mod segments;
pub mod state;

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::Snapshot;
use crate::analysis::breakdown::DeviceCategories;
use crate::analysis::layout::{Checkpoints, Rewinder};
use crate::index::{DeviceIndex, SnapshotIndex};
use crate::pools::PoolMap;
use crate::timeline::{Axis, MAX_PX, TimelineIndex, TimelineWindow, YSpan};

/// Most allocations a timeline answer lists.
pub const MAX_ALLOCATIONS: usize = 5_000;

/// A snapshot with its indexes, ready for timeline and state queries.
#[derive(Debug)]
pub struct Analyzed {
    /// The model.
    pub snapshot: Snapshot,
    /// Allocation and segment intervals.
    pub index: SnapshotIndex,
    /// Level-of-detail curves.
    pub timeline: TimelineIndex,
    /// Per device, layout checkpoints for the state and segment views,
    /// built by the first query that rewinds the device.
    checkpoints: Vec<(u32, OnceLock<Checkpoints>)>,
    /// Per device, each allocation's category over its life, built by the
    /// first breakdown query of the device.
    categories: Vec<(u32, OnceLock<DeviceCategories>)>,
    /// Per device, the memory pool of each trace row, built by the first
    /// query that needs it (one pass over the trace, none for a run that
    /// used no private pool).
    pools: Vec<(u32, OnceLock<PoolMap>)>,
    /// Opened from a persisted index: the big columns view its file.
    from_index: bool,
}

/// Rows between two layout checkpoints: a query undoes at most this many
/// rows more than its own window (a few milliseconds), and a 1.5M-entry
/// trace keeps 23 copies of its layout.
const CHECKPOINT_ROWS: usize = 1 << 16;

impl Analyzed {
    /// About how much memory this holds: the trace columns, intervals,
    /// level-of-detail tables and checkpoints all grow with the trace rows.
    /// An estimate, for caches that hold several: measured as the growth
    /// of the server's RSS over uploading and viewing `gpt_long` (40 MB for
    /// 255,577 rows, parse leftovers included).
    ///
    /// Opened from a persisted index, the trace and timeline columns view
    /// the file (pages the operating system keeps or drops), so what counts
    /// is the heap: the interval lists, the tables and the final segments.
    ///
    /// What the first queries of a kind build later (the breakdown's
    /// categories, the pools map) counts once built: a cache that asks
    /// again sees it.
    pub fn approx_bytes(&self) -> u64 {
        const PER_ROW: u64 = 160;
        let rows: u64 = self.snapshot.devices.iter().map(|d| d.trace.len() as u64).sum();
        let blocks: u64 = self.snapshot.devices.iter().flat_map(|d| &d.segments).map(|s| s.blocks.len() as u64).sum();
        let built: usize =
            self.categories.iter().filter_map(|(_, c)| c.get()).map(DeviceCategories::heap_bytes).sum::<usize>()
                + self.pools.iter().filter_map(|(_, p)| p.get()).map(PoolMap::heap_bytes).sum::<usize>();
        if !self.from_index {
            return (1 << 20) + rows * PER_ROW + blocks * 64 + built as u64;
        }
        let intervals: usize =
            self.index.devices.iter().map(|d| d.allocations.heap_bytes() + d.segments.len() * 40).sum();
        (1 << 20) + intervals as u64 + self.timeline.heap_bytes() as u64 + blocks * 64 + built as u64
    }

    /// Whether this was opened from a persisted index rather than parsed.
    pub fn is_from_index(&self) -> bool {
        self.from_index
    }

    /// Build the indexes of a parsed snapshot (CPU work: tens of ms per
    /// million trace entries).
    pub fn build(snapshot: Snapshot) -> Analyzed {
        let index = SnapshotIndex::build(&snapshot);
        let timeline = TimelineIndex::build(&snapshot, &index);
        Analyzed::from_parts(snapshot, index, timeline, false)
    }

    /// Assemble built or loaded parts.
    pub(crate) fn from_parts(
        snapshot: Snapshot,
        index: SnapshotIndex,
        timeline: TimelineIndex,
        from_index: bool,
    ) -> Analyzed {
        let checkpoints = snapshot.devices.iter().map(|d| (d.device, OnceLock::new())).collect();
        let categories = snapshot.devices.iter().map(|d| (d.device, OnceLock::new())).collect();
        let pools = snapshot.devices.iter().map(|d| (d.device, OnceLock::new())).collect();
        Analyzed { snapshot, index, timeline, checkpoints, categories, pools, from_index }
    }

    /// The device asked for, or the first one when none was.
    pub fn device_or_first(&self, device: Option<u32>) -> Result<u32, ViewError> {
        match device {
            Some(d) if self.snapshot.device(d).is_some() => Ok(d),
            Some(d) => Err(ViewError::NotFound(format!("device {d}"))),
            None => self
                .snapshot
                .devices
                .first()
                .map(|d| d.device)
                .ok_or_else(|| ViewError::NotFound("any device".to_owned())),
        }
    }

    /// A layout rewinder of `device` standing at or just after `row` (`None`:
    /// the trace's start), ready to rewind to `row` and then to earlier
    /// rows. The first call for a device builds its checkpoints.
    pub fn rewinder(&self, device: u32, row: Option<u32>) -> Result<Rewinder<'_>, ViewError> {
        let d = self.snapshot.device(device).ok_or_else(|| ViewError::NotFound(format!("device {device}")))?;
        let cell = self
            .checkpoints
            .iter()
            .find(|(id, _)| *id == device)
            .map(|(_, c)| c)
            .ok_or_else(|| ViewError::NotFound(format!("device {device}")))?;
        let checkpoints = cell.get_or_init(|| Rewinder::new(&self.snapshot, d).checkpoints(CHECKPOINT_ROWS));
        Ok(Rewinder::from_checkpoints(&self.snapshot, d, checkpoints, row))
    }

    /// The memory pool of each trace row of `device` (CUDA graphs' private
    /// pools), inferred once.
    pub fn pool_map(&self, device: u32) -> Result<&PoolMap, ViewError> {
        let d = self.snapshot.device(device).ok_or_else(|| ViewError::NotFound(format!("device {device}")))?;
        let cell = self
            .pools
            .iter()
            .find(|(id, _)| *id == device)
            .map(|(_, c)| c)
            .ok_or_else(|| ViewError::NotFound(format!("device {device}")))?;
        Ok(cell.get_or_init(|| PoolMap::of(d)))
    }

    /// Build every device's layout checkpoints now (they are otherwise
    /// built by the first query that needs them).
    pub fn build_layout_checkpoints(&self) {
        for d in &self.snapshot.devices {
            let _ = self.rewinder(d.device, None);
        }
    }

    /// The categories of a device's allocations
    /// ([`crate::analysis::breakdown`]); the first call for a device builds them.
    pub fn categories(&self, device: u32) -> Result<&DeviceCategories, ViewError> {
        let d = self.snapshot.device(device).ok_or_else(|| ViewError::NotFound(format!("device {device}")))?;
        let index = self.device_index(device)?;
        let cell = self
            .categories
            .iter()
            .find(|(id, _)| *id == device)
            .map(|(_, c)| c)
            .ok_or_else(|| ViewError::NotFound(format!("device {device}")))?;
        Ok(cell.get_or_init(|| DeviceCategories::build(&self.snapshot, d, index)))
    }

    /// The interval index of a device.
    pub fn device_index(&self, device: u32) -> Result<&DeviceIndex, ViewError> {
        self.index
            .devices
            .iter()
            .find(|d| d.device == device)
            .ok_or_else(|| ViewError::NotFound(format!("device {device}")))
    }
}

/// Why a view could not be answered. The server maps these to 404 and 400.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ViewError {
    /// The device, stack, or axis asked for does not exist.
    #[error("no such {0}")]
    NotFound(String),
    /// The query itself is wrong (an empty window, a row past the end).
    #[error("{0}")]
    BadRequest(String),
}

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
pub fn timeline(a: &Analyzed, p: &TimelineParams) -> Result<TimelineWindow, ViewError> {
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
        .query_zoomed(device, axis, start, end, px, max_allocations, y_span)
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
pub fn blocks(a: &Analyzed, p: &BlocksParams) -> Result<StateAt, ViewError> {
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
pub fn stack(a: &Analyzed, stack: u32) -> Result<Vec<FrameJson>, ViewError> {
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

    fn streams() -> Analyzed {
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
