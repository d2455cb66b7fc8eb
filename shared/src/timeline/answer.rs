//! What a timeline query answers: plain data, its size bounded by the
//! pixel width and the allocation cap.

use serde::{Deserialize, Serialize};

use crate::snapshot::StackId;

/// The x axis of a timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Axis {
    /// Wall time, `time_us` (microseconds since the epoch); only for traces
    /// that record times (PyTorch 2.2+).
    Time,
    /// Event order: row `r` of the trace is at `x = r`.
    Event,
}

/// One window of a timeline, ready to draw.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TimelineWindow {
    /// CUDA device index.
    pub device: u32,
    /// The x axis of `start`, `end` and every x below.
    pub axis: Axis,
    /// Window start (inclusive).
    pub start: i64,
    /// Window end (exclusive).
    pub end: i64,
    /// Buckets tiling `[start, end)` in order, `x1` of one being `x0` of the
    /// next: `min(px, end - start)` of them, so a window narrower than `px`
    /// x units gets one bucket per unit (on [`Axis::Event`], one per row).
    pub buckets: Vec<Bucket>,
    /// The largest allocations alive somewhere in the window and at least
    /// [`TimelineWindow::min_visible_size`] bytes, largest first (ties in
    /// order of allocation), at most `max_allocations` of them. Nothing is
    /// lumped away for good: a narrower window has fewer competitors, and
    /// smaller ones appear.
    pub allocations: Vec<VisibleAllocation>,
    /// More allocations qualified than `max_allocations` let through.
    pub more_allocations: bool,
    /// The size threshold used for `allocations`, at least 1: by default the
    /// window's highest curve value divided by `2 · px` (an allocation
    /// smaller than this is under one pixel row of a plot up to `2 · px`
    /// pixels tall, whose y axis spans the window's peak); with a [`YSpan`]
    /// (the plot zoomed on its byte axis) its bytes divided by `2 ·` its
    /// pixel height, so smaller allocations appear as one zooms in on memory.
    pub min_visible_size: u64,
    /// Markers in the window, in x order, at most one per kind per bucket.
    pub markers: Vec<Marker>,
    /// The trace does not reach back to an empty allocator (the ring buffer
    /// wrapped or recording started late); same test as
    /// [`crate::DeviceStats::trace_wrapped`].
    pub trace_wrapped: bool,
}

/// The byte span a plot's y axis shows and its height in pixels: with it,
/// a query lists the allocations of at least half a pixel row of *that*
/// plot instead of one spanning the window's peak. Zooming in on x alone
/// cannot reveal an allocation under one pixel row; zooming on y can.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct YSpan {
    /// Bytes from the bottom to the top of the plot.
    pub bytes: u64,
    /// The plot's height in pixels.
    pub px: u32,
}

impl YSpan {
    /// The smallest allocation worth listing: half a pixel row, at least 1.
    pub fn min_visible_size(self) -> u64 {
        (self.bytes / (2 * u64::from(self.px.max(1)))).max(1)
    }
}

/// The curves over one bucket `[x0, x1)`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// Bucket start (inclusive).
    pub x0: i64,
    /// Bucket end (exclusive).
    pub x1: i64,
    /// Requested bytes of allocated blocks (falls at `free_requested`).
    pub allocated: Range3,
    /// Bytes reserved from CUDA.
    pub reserved: Range3,
    /// Requested bytes of allocated and pending-free blocks (falls at
    /// `free_completed`).
    pub active: Range3,
    /// Trace rows in the bucket.
    pub events: u32,
}

/// A curve over a bucket.
///
/// With events: `min`/`max` over the values after each event in the bucket
/// (on [`Axis::Time`], also the value carried in from before the first event
/// when that event comes after `x0`, since the curve holds it until then),
/// `last` the value after the bucket's last event. Without events:
/// `min = max = last` = the value carried in from the previous row (the
/// state at the trace's start before row 0).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range3 {
    /// Lowest value.
    pub min: u64,
    /// Highest value.
    pub max: u64,
    /// Value at the end of the bucket.
    pub last: u64,
}

/// An allocation to draw as a bar from `start` to `end`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct VisibleAllocation {
    /// Block address.
    pub addr: u64,
    /// Requested size in bytes.
    pub size: u64,
    /// Stack id of the allocation (see [`crate::snapshot::FrameTable`]).
    pub stack: StackId,
    /// x of the `alloc` row; the extent's start for a ghost (allocated
    /// before the trace). Always set, so every bar can be drawn alike.
    pub start: i64,
    /// x of the `free_completed` row; the extent's end for an allocation
    /// still alive (or pending free) at the end.
    pub end: i64,
    /// Row of the `alloc`; `None` for a ghost.
    pub alloc_row: Option<u32>,
    /// Row of the `free_requested`, if freed (the pending-free window runs
    /// from here to `free_row`).
    pub free_requested_row: Option<u32>,
    /// Row of the `free_completed`; `None` while alive at the end.
    pub free_row: Option<u32>,
}

/// A point of interest on the x axis.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marker {
    /// x of the row.
    pub x: i64,
    /// The (first) row marked.
    pub row: u32,
    /// What is marked.
    pub kind: MarkerKind,
    /// Rows of this kind merged into this marker (all in one bucket).
    pub count: u32,
}

/// What a [`Marker`] marks.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum MarkerKind {
    /// An `oom` entry: an allocation failed.
    Oom,
    /// The first row of a wrapped trace: history before it was lost.
    WindowStart,
}
