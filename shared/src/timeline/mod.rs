//! Level-of-detail timeline data: for a window of a device's trace and a
//! pixel width, per-pixel buckets of the memory curves, the largest
//! allocations visible at that zoom, and markers (OOMs, the start of a
//! wrapped trace). An answer's size is bounded by the pixel width and the
//! allocation cap, never by the trace (a trace can have 1.5M+ entries).
//!
//! # The curves
//!
//! Each curve has one value per trace row, the state *after* that row's
//! event, replayed from the state at the trace's first entry (the final
//! state minus the trace's net effect, as in [`crate::stats`]):
//! - `allocated`: requested (unrounded) bytes of blocks the program holds.
//!   `alloc` adds its size, `free_requested` subtracts it. Trace entries carry
//!   only requested sizes, so this is *not* PyTorch's rounded
//!   `allocated_bytes`; that needs the allocator simulator.
//! - `active`: requested bytes of allocated *and* pending-free blocks.
//!   `alloc` adds, `free_completed` subtracts (a pending free still occupies
//!   its block). This is PyTorch's `requested_bytes` counter, the curve whose
//!   peak [`crate::DeviceStats::requested_peak_bytes`] reports.
//! - `reserved`: bytes reserved from CUDA. `segment_alloc`/`segment_map`
//!   add, `segment_free`/`segment_unmap` subtract. Its peak is
//!   [`crate::DeviceStats::reserved_peak_bytes`].
//!
//! A value that inconsistent input would drive below zero is clamped to 0.
//!
//! # The axes and windows
//!
//! On [`Axis::Event`] row `r` sits at `x = r`; on [`Axis::Time`] at its
//! `time_us`. `time_us` is non-decreasing in real files; where it is not,
//! a row's time is taken as the running maximum of the times so far, so the
//! axis stays in row order and binary search stays valid. Windows and
//! buckets are half-open, `[start, end)`; [`TimelineIndex::extent`] is
//! half-open too (the time extent ends one microsecond after the last row).
//!
//! # Costs
//!
//! Per device, with `n` rows and `m` allocations: no per-row values for
//! the curves (they are replayed inside a sub-block of 32 rows from the
//! trace's action and size columns, shared with the trace; 3 B/row of
//! starting values and ranges per sub-block), `0.375 · log2(n / BLOCK)` B/row for the min/max
//! tables (6.4 at 16M rows), the trace's own times unless they go back
//! (then 8 B/row), 32 B and about 8 B per allocation for the allocation
//! index, plus its checkpoints (bounded to about 16 B per allocation, see
//! `AllocationIndex`).
//! A query costs `O(px · (log n + BLOCK))` for the buckets and
//! `O((k + C) · log m)` for the `k` largest allocations, `C` being the
//! checkpoint stride (256 for ordinary traces).

mod allocations;
mod curves;
mod persist;

pub(crate) use persist::DeviceTimelineHeader;

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::column::Column;
use crate::index::{Allocation, DeviceIndex, SnapshotIndex};
use crate::snapshot::{Action, BlockState, DeviceSnapshot, Snapshot, StackId};

use allocations::{AllocItem, AllocationIndex, NONE};
use curves::{Curves, Rows};

/// Rows per block of the min/max tables. A bucket scans at most two partial
/// blocks row by row and looks the full blocks between them up in O(1).
const BLOCK: usize = 128;

/// The most buckets a query returns, whatever `px` asks for: a guard against
/// a request that would allocate gigabytes. Wider than any screen.
pub const MAX_PX: u32 = 1 << 16;

/// The smallest checkpoint stride of the allocation index, in rows.
const MIN_CHECKPOINT_STRIDE: u64 = 256;

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

/// Precomputed timeline data of every device of a snapshot with a trace.
/// Owns its data (no borrow of the snapshot), so a server can keep it beside
/// the snapshot or instead of parts of it.
#[derive(Debug, Default)]
pub struct TimelineIndex {
    devices: Vec<DeviceTimeline>,
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

/// Rows from which a device's timeline is built on two threads.
pub(crate) const PARALLEL_BUILD_ROWS: usize = 200_000;

/// Whether [`beside`] runs its two halves on two threads (not in the
/// browser's wasm, where they run in turn): for splits that pay only then.
pub(crate) const THREADS: bool = cfg!(not(target_arch = "wasm32"));

/// `a` on another thread while `b` runs on this one, where there are
/// threads (not in the browser's wasm, where both run here in turn).
pub(crate) fn beside<A: Send, B>(a: impl FnOnce() -> A + Send, b: impl FnOnce() -> B) -> (A, B) {
    #[cfg(not(target_arch = "wasm32"))]
    {
        std::thread::scope(|scope| {
            let other = scope.spawn(a);
            let here = b();
            match other.join() {
                Ok(there) => (there, here),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }
    #[cfg(target_arch = "wasm32")]
    {
        (a(), b())
    }
}

impl TimelineIndex {
    /// Precompute the timelines of every device that has trace rows.
    pub fn build(snapshot: &Snapshot, index: &SnapshotIndex) -> TimelineIndex {
        let devices = snapshot
            .devices
            .iter()
            .filter(|d| !d.trace.is_empty())
            .filter_map(|d| {
                let intervals = index.devices.iter().find(|i| i.device == d.device)?;
                Some(DeviceTimeline::build(d, intervals))
            })
            .collect();
        TimelineIndex { devices }
    }

    /// The intervals and the timelines of every device, built together
    /// ([`SnapshotIndex::build`] then [`TimelineIndex::build`], with a
    /// device's curves built beside its intervals on a large trace).
    pub fn build_with_intervals(snapshot: &Snapshot) -> (SnapshotIndex, TimelineIndex) {
        Self::build_with_intervals_then(snapshot, false)
    }

    /// [`TimelineIndex::build_with_intervals`] without the allocation
    /// indexes, which are built by
    /// [`TimelineIndex::build_allocation_indexes`] (or by the first write
    /// of an index file). Until then a window's largest allocations are
    /// found by a pass over the device's intervals: the same answers, each
    /// costing a pass. A server answers its first windows of a large
    /// upload this way while the indexes are built behind them (they are
    /// nearly half of the build).
    pub fn build_with_intervals_deferred(snapshot: &Snapshot) -> (SnapshotIndex, TimelineIndex) {
        Self::build_with_intervals_then(snapshot, true)
    }

    fn build_with_intervals_then(snapshot: &Snapshot, defer: bool) -> (SnapshotIndex, TimelineIndex) {
        let mut intervals = Vec::with_capacity(snapshot.devices.len());
        let mut devices = Vec::new();
        for d in &snapshot.devices {
            if d.trace.is_empty() {
                intervals.push(DeviceIndex::build(d));
            } else {
                let (i, t) = DeviceTimeline::build_with_intervals(d, defer);
                intervals.push(i);
                devices.push(t);
            }
        }
        (SnapshotIndex { devices: intervals }, TimelineIndex { devices })
    }

    /// Build the allocation indexes that
    /// [`TimelineIndex::build_with_intervals_deferred`] left (nothing when
    /// they are built). Queries meanwhile answer by a scan; one that comes
    /// after this returns uses the index.
    pub fn build_allocation_indexes(&self) {
        for d in &self.devices {
            d.allocation_index();
        }
    }

    /// Whether every device's allocation index is built.
    pub fn allocation_indexes_built(&self) -> bool {
        self.devices.iter().all(|d| d.allocations.get().is_some())
    }

    /// Devices with a timeline, in snapshot order.
    pub fn devices(&self) -> impl Iterator<Item = u32> + '_ {
        self.devices.iter().map(|d| d.device)
    }

    /// Approximate heap bytes held, for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        self.devices.iter().map(DeviceTimeline::heap_bytes).sum()
    }

    /// Full x range of a device's trace on that axis, half-open: `(0, rows)`
    /// on [`Axis::Event`], `(first time_us, last time_us + 1)` on
    /// [`Axis::Time`]. `None` for an unknown device, a device without trace
    /// rows, or [`Axis::Time`] on a trace without times.
    pub fn extent(&self, device: u32, axis: Axis) -> Option<(i64, i64)> {
        self.device(device)?.extent(axis)
    }

    /// The window `[start, end)` of a device's timeline at `px` buckets
    /// (capped at [`MAX_PX`]), with at most `max_allocations` allocations.
    /// The window may reach past the extent: buckets there carry the state
    /// at the trace's start or end. `None` where [`TimelineIndex::extent`]
    /// is `None`, or when `px == 0` or `end <= start`.
    pub fn query(
        &self,
        device: u32,
        axis: Axis,
        start: i64,
        end: i64,
        px: u32,
        max_allocations: usize,
    ) -> Option<TimelineWindow> {
        self.query_zoomed(WindowRequest { device, axis, start, end, px, max_allocations }, None)
    }

    /// [`TimelineIndex::query`] for a plot whose y axis shows `y_span`
    /// (`None`: the window's peak, as `query`), which sets the window's
    /// [`TimelineWindow::min_visible_size`].
    pub fn query_zoomed(&self, window: WindowRequest, y_span: Option<YSpan>) -> Option<TimelineWindow> {
        let WindowRequest { device, axis, start, end, px, max_allocations } = window;
        let d = self.device(device)?;
        d.extent(axis)?;
        if px == 0 || end <= start {
            return None;
        }
        Some(d.query(axis, start, end, px.min(MAX_PX), max_allocations, y_span))
    }

    fn device(&self, device: u32) -> Option<&DeviceTimeline> {
        self.devices.iter().find(|d| d.device == device)
    }
}

/// The window [`TimelineIndex::query_zoomed`] is asked for: one field per
/// query field, as the API's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowRequest {
    /// CUDA device.
    pub device: u32,
    /// x axis.
    pub axis: Axis,
    /// First x of the window.
    pub start: i64,
    /// First x past it.
    pub end: i64,
    /// Pixel columns of the plot (buckets).
    pub px: u32,
    /// The most allocations listed.
    pub max_allocations: usize,
}

/// One device's precomputed timeline.
#[derive(Debug)]
struct DeviceTimeline {
    device: u32,
    rows: usize,
    /// Running maximum of `time_us` per row; `None` without times. The
    /// trace's own column when its times never go back (real files).
    times: Option<Column<i64>>,
    /// `times` is the trace's `time_us` column, shared.
    times_from_trace: bool,
    /// The trace's action and size columns (shared), from which the
    /// curves are replayed inside a block.
    columns: Rows,
    /// `allocated`, `active` and `reserved`.
    curves: Curves,
    /// Rows of `oom` entries, ascending.
    oom_rows: Column<u32>,
    trace_wrapped: bool,
    /// The allocation index: built with the rest, else from `intervals`
    /// by [`DeviceTimeline::allocation_index`].
    allocations: OnceLock<AllocationIndex>,
    /// The device's allocation intervals while `allocations` may not be
    /// built yet (shared with the interval index); empty otherwise.
    intervals: Column<Allocation>,
}

impl DeviceTimeline {
    fn build(device: &DeviceSnapshot, intervals: &DeviceIndex) -> DeviceTimeline {
        let n = device.trace.len();
        let index = || AllocationIndex::build(&intervals.allocations, n, MIN_CHECKPOINT_STRIDE, None);
        Self::build_beside(device, || ((), Some(index()))).1
    }

    /// The device's intervals and its timeline, built together: the
    /// curves need no intervals, so they are built beside the intervals
    /// and the allocation index that follows from them (unless `defer`:
    /// see [`TimelineIndex::build_with_intervals_deferred`]).
    fn build_with_intervals(device: &DeviceSnapshot, defer: bool) -> (DeviceIndex, DeviceTimeline) {
        let n = device.trace.len();
        let (intervals, mut timeline) = Self::build_beside(device, || {
            let intervals = DeviceIndex::build(device);
            let allocations =
                (!defer).then(|| AllocationIndex::build(&intervals.allocations, n, MIN_CHECKPOINT_STRIDE, None));
            (intervals, allocations)
        });
        if defer {
            timeline.intervals = intervals.allocations.clone();
        }
        (intervals, timeline)
    }

    /// The curves here and `other` (which builds the allocation index, if
    /// it does, and whatever else it returns) side by side where there are
    /// threads and enough rows to pay for one: on a large trace each is
    /// about half the build, and they share nothing.
    fn build_beside<T: Send>(
        device: &DeviceSnapshot,
        other: impl FnOnce() -> (T, Option<AllocationIndex>) + Send,
    ) -> (T, DeviceTimeline) {
        let ((extra, allocations), mut timeline) = if device.trace.len() >= PARALLEL_BUILD_ROWS {
            beside(other, || DeviceTimeline::build_curves(device))
        } else {
            (other(), DeviceTimeline::build_curves(device))
        };
        if let Some(allocations) = allocations {
            timeline.allocations = OnceLock::from(allocations);
        }
        (extra, timeline)
    }

    /// The allocation index, built now if it was deferred (a call made
    /// meanwhile on another thread waits for that build).
    fn allocation_index(&self) -> &AllocationIndex {
        self.allocations.get_or_init(|| AllocationIndex::build(&self.intervals, self.rows, MIN_CHECKPOINT_STRIDE, None))
    }

    /// The `k` largest allocations of at least `min_size` alive in
    /// positions `[pa, pb)` ([`AllocationIndex::top_k`]): from the index,
    /// or while it is not built, from a scan of the intervals.
    fn largest(&self, pa: u64, pb: u64, min_size: u64, k: usize) -> Vec<AllocItem> {
        match self.allocations.get() {
            Some(index) => index.top_k(pa, pb, min_size, k).into_iter().map(|i| index.items[i as usize]).collect(),
            None => allocations::scan_top_k(&self.intervals, self.rows, pa, pb, min_size, k),
        }
    }

    /// Everything but the allocation index (left empty).
    fn build_curves(device: &DeviceSnapshot) -> DeviceTimeline {
        let trace = &device.trace;
        let n = trace.len();
        let sizes = trace.sizes();

        // Net effect of the trace on each curve, to find the state at its start.
        let (mut net_alloc, mut net_active, mut net_reserved) = (0i128, 0i128, 0i128);
        let mut oom_rows = Vec::new();
        for (i, &size) in sizes.iter().enumerate() {
            let s = i128::from(size);
            match trace.action(i) {
                Action::Alloc => {
                    net_alloc += s;
                    net_active += s;
                }
                Action::FreeRequested => net_alloc -= s,
                Action::FreeCompleted => net_active -= s,
                Action::SegmentAlloc | Action::SegmentMap => net_reserved += s,
                Action::SegmentFree | Action::SegmentUnmap => net_reserved -= s,
                Action::Oom => oom_rows.push(i as u32),
                Action::Snapshot | Action::Other => {}
            }
        }
        let blocks = || device.segments.iter().flat_map(|s| s.blocks.iter());
        let final_reserved: i128 = device.segments.iter().map(|s| i128::from(s.total_size)).sum();
        let final_active: i128 = blocks().filter(|b| b.state.is_active()).map(|b| i128::from(b.requested_size)).sum();
        let final_alloc: i128 =
            blocks().filter(|b| b.state == BlockState::ActiveAllocated).map(|b| i128::from(b.requested_size)).sum();
        let (alloc, active, reserved) =
            (final_alloc - net_alloc, final_active - net_active, final_reserved - net_reserved);
        // Same test as stats.rs (its `requested` is our `active`).
        let trace_wrapped = reserved != 0 || active != 0;
        let columns = Rows { action: trace.action.clone(), size: trace.size.clone() };
        let curves = Curves::build(&columns, [alloc, active, reserved]);

        let times_from_trace = trace.has_time() && trace.times_us().is_sorted();
        let times = trace.has_time().then(|| {
            if times_from_trace {
                return trace.time_us.clone();
            }
            let mut max = i64::MIN;
            trace
                .times_us()
                .iter()
                .map(|&t| {
                    max = max.max(t);
                    max
                })
                .collect()
        });

        DeviceTimeline {
            device: device.device,
            rows: n,
            times,
            times_from_trace,
            columns,
            curves,
            oom_rows: oom_rows.into(),
            trace_wrapped,
            allocations: OnceLock::new(),
            intervals: Column::default(),
        }
    }

    fn heap_bytes(&self) -> usize {
        // Times shared with the trace are counted there.
        self.times.as_ref().filter(|_| !self.times_from_trace).map_or(0, Column::heap_bytes)
            + self.curves.heap_bytes()
            + self.oom_rows.heap_bytes()
            + self.allocations.get().map_or(0, AllocationIndex::heap_bytes)
    }

    fn extent(&self, axis: Axis) -> Option<(i64, i64)> {
        if self.rows == 0 {
            return None;
        }
        match axis {
            Axis::Event => Some((0, i64::try_from(self.rows).unwrap_or(i64::MAX))),
            Axis::Time => {
                let times = self.times.as_ref()?;
                Some((*times.first()?, times.last()?.saturating_add(1)))
            }
        }
    }

    /// x of row `row` (which must be `< rows`).
    fn x_of(&self, axis: Axis, row: usize) -> i64 {
        match (axis, &self.times) {
            (Axis::Time, Some(t)) => t[row],
            _ => row as i64,
        }
    }

    /// The first row at or after x.
    /// [`DeviceTimeline::row_at`] of ascending `xs`: on the time axis, each
    /// search gallops from the previous row instead of bisecting the whole
    /// column (a 16M-row column bisected 2000 times is cache misses).
    fn rows_at(&self, axis: Axis, xs: &[i64]) -> Vec<usize> {
        let Some(times) = self.times.as_ref().filter(|_| axis == Axis::Time) else {
            return xs.iter().map(|&x| self.row_at(axis, x)).collect();
        };
        let mut from = 0usize;
        xs.iter()
            .map(|&x| {
                let t = &times[from..];
                // Smallest k with t[k] >= x: gallop to a bracket, then bisect it.
                let (mut lo, mut step) = (0usize, 1usize);
                while lo + step < t.len() && t[lo + step] < x {
                    lo += step;
                    step *= 2;
                }
                let hi = (lo + step + 1).min(t.len());
                from += if t.first().is_some_and(|&v| v >= x) { 0 } else { lo + t[lo..hi].partition_point(|&v| v < x) };
                from
            })
            .collect()
    }

    fn row_at(&self, axis: Axis, x: i64) -> usize {
        match (axis, &self.times) {
            (Axis::Time, Some(t)) => t.partition_point(|&v| v < x),
            _ => x.clamp(0, self.rows as i64) as usize,
        }
    }

    fn query(
        &self,
        axis: Axis,
        start: i64,
        end: i64,
        px: u32,
        max_allocations: usize,
        y_span: Option<YSpan>,
    ) -> TimelineWindow {
        let width = i128::from(end) - i128::from(start);
        let count = width.min(i128::from(px)) as usize;
        // Bucket edges in x and the first row at or after each edge.
        let xs: Vec<i64> =
            (0..=count).map(|i| (i128::from(start) + width * i as i128 / count as i128) as i64).collect();
        let rows = self.rows_at(axis, &xs);
        let carry = |a: usize, x0: i64| axis == Axis::Time && a < self.rows && self.x_of(axis, a) > x0;
        let curves = self.curves.buckets(&self.columns, &rows, |i| carry(rows[i], xs[i]));

        let mut buckets = Vec::with_capacity(count);
        let mut markers = Vec::new();
        let mut window_start_marked = false;
        for i in 0..count {
            let (x0, x1, a, b) = (xs[i], xs[i + 1], rows[i], rows[i + 1]);
            let [allocated, active, reserved] = curves[i];
            buckets.push(Bucket {
                x0,
                x1,
                allocated,
                reserved,
                active,
                events: u32::try_from(b - a).unwrap_or(u32::MAX),
            });
            if a >= b {
                continue;
            }
            if self.trace_wrapped && a == 0 && !window_start_marked {
                window_start_marked = true;
                markers.push(Marker { x: self.x_of(axis, 0), row: 0, kind: MarkerKind::WindowStart, count: 1 });
            }
            // One marker per bucket, however many OOMs it holds: bounded by px.
            let lo = self.oom_rows.partition_point(|&r| (r as usize) < a);
            let hi = self.oom_rows.partition_point(|&r| (r as usize) < b);
            if let Some(&row) = self.oom_rows.get(lo).filter(|_| lo < hi) {
                markers.push(Marker {
                    x: self.x_of(axis, row as usize),
                    row,
                    kind: MarkerKind::Oom,
                    count: u32::try_from(hi - lo).unwrap_or(u32::MAX),
                });
            }
        }

        let peak = buckets.iter().map(|b| b.reserved.max.max(b.active.max).max(b.allocated.max)).max().unwrap_or(0);
        let min_visible_size = y_span.map_or((peak / (2 * u64::from(px))).max(1), YSpan::min_visible_size);
        let (pa, pb) = self.window_positions(axis, start, end);
        let mut found = self.largest(pa, pb, min_visible_size, max_allocations.saturating_add(1));
        let more_allocations = found.len() > max_allocations;
        found.truncate(max_allocations);
        let (ext_start, ext_end) = self.extent(axis).unwrap_or((start, end));
        let allocations = found
            .into_iter()
            .map(|it| {
                let alloc_row = it.lo.checked_sub(1);
                let free_row = (it.hi as usize <= self.rows).then(|| it.hi - 1);
                VisibleAllocation {
                    addr: it.addr,
                    size: it.size,
                    stack: it.stack,
                    start: alloc_row.map_or(ext_start, |r| self.x_of(axis, r as usize)),
                    end: free_row.map_or(ext_end, |r| self.x_of(axis, r as usize)),
                    alloc_row,
                    free_requested_row: (it.free_requested != NONE).then_some(it.free_requested),
                    free_row,
                }
            })
            .collect();

        TimelineWindow {
            device: self.device,
            axis,
            start,
            end,
            buckets,
            allocations,
            more_allocations,
            min_visible_size,
            markers,
            trace_wrapped: self.trace_wrapped,
        }
    }

    /// The states a window shows, as positions `[pa, pb)`: position 0 is the
    /// state before row 0, position `r + 1` the state after row `r`.
    ///
    /// On [`Axis::Event`], x = r shows the state after row r; x < 0 the
    /// state before the trace, x >= rows the final state. On [`Axis::Time`],
    /// the window shows the states after its rows, plus the state carried in
    /// at `start` unless a row sits exactly at `start`.
    fn window_positions(&self, axis: Axis, start: i64, end: i64) -> (u64, u64) {
        let n = self.rows as i64;
        let (sa, sb) = match (axis, &self.times) {
            (Axis::Time, Some(t)) => {
                let ra = t.partition_point(|&v| v < start);
                let rb = t.partition_point(|&v| v < end);
                let sa = if t.get(ra) == Some(&start) { ra as i64 } else { ra as i64 - 1 };
                (sa, (rb as i64).max(sa + 1))
            }
            _ => {
                let sa = start.clamp(-1, n - 1);
                (sa, end.clamp(sa + 1, n))
            }
        };
        ((sa + 1) as u64, (sb + 1) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DeviceStats;
    use crate::index::SnapshotIndex;

    const FIXTURES: [&str; 6] = ["compiled", "mlp_train_all", "oom_leak", "ring_overflow", "state_only", "streams"];

    fn load(name: &str) -> (Snapshot, SnapshotIndex, TimelineIndex) {
        let snapshot = crate::testing::snapshot(name);
        let index = SnapshotIndex::build(&snapshot);
        let timeline = TimelineIndex::build(&snapshot, &index);
        (snapshot, index, timeline)
    }

    /// Curves recomputed the slow way: undo the trace backwards from the
    /// final state (stats.rs goes forwards from the net effect instead).
    struct Naive {
        /// [allocated, active, reserved] before row 0.
        start: [u64; 3],
        /// [allocated, active, reserved] after each row.
        rows: Vec<[u64; 3]>,
        /// x of each row on the time axis (running max of time_us).
        times: Vec<i64>,
        oom_rows: Vec<u32>,
    }

    fn final_state(d: &DeviceSnapshot) -> [u64; 3] {
        let blocks = || d.segments.iter().flat_map(|s| s.blocks.iter());
        [
            blocks().filter(|b| b.state == BlockState::ActiveAllocated).map(|b| b.requested_size).sum(),
            blocks().filter(|b| b.state.is_active()).map(|b| b.requested_size).sum(),
            d.segments.iter().map(|s| s.total_size).sum(),
        ]
    }

    fn naive(d: &DeviceSnapshot) -> Naive {
        let t = &d.trace;
        let effect = |i: usize| -> [i128; 3] {
            let s = i128::from(t.sizes()[i]);
            match t.action(i) {
                Action::Alloc => [s, s, 0],
                Action::FreeRequested => [-s, 0, 0],
                Action::FreeCompleted => [0, -s, 0],
                Action::SegmentAlloc | Action::SegmentMap => [0, 0, s],
                Action::SegmentFree | Action::SegmentUnmap => [0, 0, -s],
                _ => [0, 0, 0],
            }
        };
        let mut state = final_state(d).map(i128::from);
        let mut rows = vec![[0u64; 3]; t.len()];
        for i in (0..t.len()).rev() {
            rows[i] = state.map(|v| u64::try_from(v).expect("fixtures stay non-negative"));
            let e = effect(i);
            for c in 0..3 {
                state[c] -= e[c];
            }
        }
        let start = state.map(|v| u64::try_from(v).expect("fixtures stay non-negative"));
        let mut max = i64::MIN;
        let times = t.times_us().iter().map(|&v| {
            max = max.max(v);
            max
        });
        let oom_rows = (0..t.len()).filter(|&i| t.action(i) == Action::Oom).map(|i| i as u32).collect();
        Naive { start, rows, times: times.collect(), oom_rows }
    }

    fn x_of(n: &Naive, axis: Axis, row: usize) -> i64 {
        if axis == Axis::Time { n.times[row] } else { row as i64 }
    }

    fn ranges(b: &Bucket) -> [Range3; 3] {
        [b.allocated, b.active, b.reserved]
    }

    /// A bucket as the docs define it, by scanning every row.
    fn naive_bucket(n: &Naive, axis: Axis, x0: i64, x1: i64) -> ([Range3; 3], u32) {
        // x is non-decreasing in row order, so the bucket's rows are a run.
        let first = if axis == Axis::Time {
            n.times.partition_point(|&t| t < x0)
        } else {
            x0.clamp(0, n.rows.len() as i64) as usize
        };
        let rows: Vec<usize> = (first..n.rows.len()).take_while(|&r| x_of(n, axis, r) < x1).collect();
        assert!(rows.iter().all(|&r| (x0..x1).contains(&x_of(n, axis, r))));
        let before = |r: usize| if r == 0 { n.start } else { n.rows[r - 1] };
        let out = std::array::from_fn(|c| match (rows.first(), rows.last()) {
            (Some(&a), Some(&b)) => {
                let mut values: Vec<u64> = rows.iter().map(|&r| n.rows[r][c]).collect();
                if axis == Axis::Time && x_of(n, axis, a) > x0 {
                    values.push(before(a)[c]);
                }
                let (min, max) = (values.iter().min(), values.iter().max());
                Range3 { min: *min.expect("rows"), max: *max.expect("rows"), last: n.rows[b][c] }
            }
            _ => {
                let v = before(first)[c];
                Range3 { min: v, max: v, last: v }
            }
        });
        (out, rows.len() as u32)
    }

    fn axes(t: &TimelineIndex, device: u32) -> Vec<Axis> {
        [Axis::Event, Axis::Time].into_iter().filter(|&a| t.extent(device, a).is_some()).collect()
    }

    /// Deterministic pseudo-random numbers (no rand dependency).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, below: u64) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (self.0 >> 33) % below.max(1)
        }
        fn in_range(&mut self, lo: i64, hi: i64) -> i64 {
            lo + self.next((hi - lo).max(1) as u64) as i64
        }
        /// A window over the extent `[lo, hi)` (reaching a little past
        /// it) of a random width, down to a 4096th of it.
        fn window(&mut self, lo: i64, hi: i64) -> (i64, i64) {
            let a = self.in_range(lo - 5, hi + 5);
            let shift = self.next(12);
            let width = 1 + self.next(((hi - lo) as u64 >> shift).max(1)) as i64;
            (a, a + width)
        }
    }

    fn check_buckets(w: &TimelineWindow, px: u32) {
        assert!(!w.buckets.is_empty());
        assert!(w.buckets.len() <= px as usize);
        let width = i128::from(w.end) - i128::from(w.start);
        assert_eq!(w.buckets.len() as i128, width.min(i128::from(px.min(MAX_PX))));
        assert_eq!(w.buckets[0].x0, w.start);
        assert_eq!(w.buckets.last().expect("buckets").x1, w.end);
        for pair in w.buckets.windows(2) {
            assert_eq!(pair[0].x1, pair[1].x0);
            assert!(pair[0].x0 < pair[0].x1);
        }
    }

    #[test]
    fn whole_extent_keeps_true_extremes_and_final_state() {
        for name in FIXTURES {
            let (snapshot, _, t) = load(name);
            for d in snapshot.devices.iter().filter(|d| !d.trace.is_empty()) {
                let n = naive(d);
                let stats = DeviceStats::of(d);
                for axis in axes(&t, d.device) {
                    let (start, end) = t.extent(d.device, axis).expect("extent");
                    for px in [1, 3, 100, 1000, 1 << 20] {
                        let w = t.query(d.device, axis, start, end, px, 10).expect("window");
                        check_buckets(&w, px);
                        let total: u64 = w.buckets.iter().map(|b| u64::from(b.events)).sum();
                        assert_eq!(total, d.trace.len() as u64, "{name} {axis:?} px={px}: every row in one bucket");
                        for c in 0..3 {
                            let max = w.buckets.iter().map(|b| ranges(b)[c].max).max();
                            let min = w.buckets.iter().map(|b| ranges(b)[c].min).min();
                            assert_eq!(max, n.rows.iter().map(|r| r[c]).max(), "{name} {axis:?} px={px} curve {c}");
                            assert_eq!(min, n.rows.iter().map(|r| r[c]).min(), "{name} {axis:?} px={px} curve {c}");
                        }
                        let last = w.buckets.last().expect("buckets");
                        assert_eq!(ranges(last).map(|r| r.last), final_state(d), "{name}: ends at the final state");
                        assert_eq!(last.active.last, stats.requested_bytes, "{name}: active is requested_bytes");
                        assert_eq!(last.reserved.last, stats.reserved_bytes);
                        assert_eq!(w.trace_wrapped, stats.trace_wrapped, "{name}");
                        if px <= 100 {
                            for b in &w.buckets {
                                assert_eq!((ranges(b), b.events), naive_bucket(&n, axis, b.x0, b.x1), "{name}");
                            }
                        }
                    }
                }
                // The peaks stats.rs reports (which count the start state too).
                let w = t.query(d.device, Axis::Event, -1, d.trace.len() as i64, 1, 0).expect("window");
                assert_eq!(Some(w.buckets[0].reserved.max.max(n.start[2])), stats.reserved_peak_bytes, "{name}");
                assert_eq!(Some(w.buckets[0].active.max.max(n.start[1])), stats.requested_peak_bytes, "{name}");
            }
        }
    }

    #[test]
    fn state_before_the_trace_is_empty_unless_wrapped() {
        for name in FIXTURES {
            let (snapshot, _, t) = load(name);
            for d in snapshot.devices.iter().filter(|d| !d.trace.is_empty()) {
                let w = t.query(d.device, Axis::Event, -5, 0, 100, 10).expect("window");
                assert_eq!(w.buckets.len(), 5);
                let b = w.buckets[0];
                assert_eq!(b.events, 0);
                let start = ranges(&b).map(|r| r.last);
                assert_eq!(start, naive(d).start, "{name}");
                assert_eq!(start == [0, 0, 0], !w.trace_wrapped, "{name}");
                // Past the end: the final state, flat.
                let n = d.trace.len() as i64;
                let w = t.query(d.device, Axis::Event, n + 3, n + 9, 100, 10).expect("window");
                assert!(w.buckets.iter().all(|b| b.events == 0 && ranges(b).map(|r| r.min) == final_state(d)));
            }
        }
    }

    #[test]
    fn random_windows_match_a_naive_scan() {
        let mut rng = Lcg(7);
        for name in FIXTURES {
            let (snapshot, _, t) = load(name);
            for d in snapshot.devices.iter().filter(|d| !d.trace.is_empty()) {
                let n = naive(d);
                for axis in axes(&t, d.device) {
                    let (lo, hi) = t.extent(d.device, axis).expect("extent");
                    let slack = (hi - lo) / 10 + 2;
                    for _ in 0..40 {
                        let a = rng.in_range(lo - slack, hi + slack);
                        let b = rng.in_range(lo - slack, hi + slack);
                        let (start, end) = (a.min(b), a.max(b) + 1);
                        let px = 1 + rng.next(300) as u32;
                        let w = t.query(d.device, axis, start, end, px, 20).expect("window");
                        check_buckets(&w, px);
                        for b in &w.buckets {
                            assert_eq!((ranges(b), b.events), naive_bucket(&n, axis, b.x0, b.x1), "{name} {axis:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_narrow_window_gives_the_raw_rows() {
        let (snapshot, _, t) = load("oom_leak");
        let d = &snapshot.devices[0];
        let n = naive(d);
        let w = t.query(d.device, Axis::Event, 1000, 1050, 100, 10).expect("window");
        assert_eq!(w.buckets.len(), 50);
        for (i, b) in w.buckets.iter().enumerate() {
            assert_eq!((b.x0, b.x1, b.events), (1000 + i as i64, 1001 + i as i64, 1));
            for (c, r) in ranges(b).iter().enumerate() {
                assert_eq!([r.min, r.max, r.last], [n.rows[1000 + i][c]; 3]);
            }
        }
        // On the time axis the finest bucket is one microsecond, holding
        // every row of that microsecond.
        let t0 = n.times[3000];
        let w = t.query(d.device, Axis::Time, t0, t0 + 200, 1000, 10).expect("window");
        assert_eq!(w.buckets.len(), 200);
        for b in &w.buckets {
            assert_eq!(b.x1 - b.x0, 1);
            assert_eq!((ranges(b), b.events), naive_bucket(&n, Axis::Time, b.x0, b.x1));
        }
        let rows = n.times.iter().filter(|&&x| (t0..t0 + 200).contains(&x)).count();
        assert_eq!(w.buckets.iter().map(|b| b.events as usize).sum::<usize>(), rows);
    }

    /// Positions alive `[lo, hi)` of every nonzero allocation, from the index.
    fn intervals(index: &SnapshotIndex, device: u32, rows: usize) -> Vec<(u64, u64, u64)> {
        let d = index.devices.iter().find(|d| d.device == device).expect("device");
        d.allocations
            .iter()
            .filter(|a| a.size > 0)
            .map(|a| {
                let lo = a.alloc_row.get().map_or(0, |r| u64::from(r) + 1);
                let hi = a.free_completed_row.get().map_or(rows as u64 + 1, |r| u64::from(r) + 1);
                (a.size, lo, hi)
            })
            .collect()
    }

    fn brute_top_sizes(all: &[(u64, u64, u64)], pa: u64, pb: u64, min_size: u64, k: usize) -> Vec<u64> {
        let mut sizes: Vec<u64> =
            all.iter().filter(|&&(s, lo, hi)| lo < pb && hi > pa && s >= min_size).map(|x| x.0).collect();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        sizes.truncate(k);
        sizes
    }

    #[test]
    fn visible_allocations_are_the_largest_intersecting_ones() {
        let mut rng = Lcg(11);
        for name in FIXTURES {
            let (snapshot, index, t) = load(name);
            for d in snapshot.devices.iter().filter(|d| !d.trace.is_empty()) {
                let all = intervals(&index, d.device, d.trace.len());
                let dt = t.device(d.device).expect("timeline");
                let n = naive(d);
                for axis in axes(&t, d.device) {
                    let (lo, hi) = t.extent(d.device, axis).expect("extent");
                    for round in 0..60 {
                        let (start, end) = if round == 0 { (lo, hi) } else { rng.window(lo, hi) };
                        let px = 1 + rng.next(2000) as u32;
                        let k = [0, 1, 5, 50, 100_000][rng.next(5) as usize];
                        let w = t.query(d.device, axis, start, end, px, k).expect("window");
                        let (pa, pb) = dt.window_positions(axis, start, end);
                        let expect = brute_top_sizes(&all, pa, pb, w.min_visible_size, k + 1);
                        let got: Vec<u64> = w.allocations.iter().map(|a| a.size).collect();
                        assert_eq!(got, expect[..expect.len().min(k)], "{name} {axis:?} [{start}, {end}) k={k}");
                        assert_eq!(w.more_allocations, expect.len() > k);
                        let peak = w.buckets.iter().map(|b| b.reserved.max.max(b.active.max)).max().expect("bucket");
                        assert_eq!(w.min_visible_size, (peak / (2 * u64::from(px))).max(1));
                        for a in &w.allocations {
                            // Meets the window in x. On the time axis a bar may end
                            // exactly at `start`: rows sharing that microsecond saw it.
                            assert!(a.start <= a.end);
                            let meets = if axis == Axis::Time { a.end >= start } else { a.end > start };
                            assert!(a.start < end && (meets || a.end == hi), "{name} {a:?} [{start}, {end})");
                            assert_eq!(a.alloc_row.map(|r| x_of(&n, axis, r as usize)).unwrap_or(lo), a.start);
                            assert_eq!(a.free_row.map(|r| x_of(&n, axis, r as usize)).unwrap_or(hi), a.end);
                            if let (Some(q), Some(f)) = (a.free_requested_row, a.free_row) {
                                assert!(q <= f);
                            }
                        }
                    }
                }
            }
        }
    }

    /// A timeline whose allocation indexes are deferred answers every
    /// window as the one built whole, by its scan and again once the
    /// indexes are built (y spans included: they set the size threshold).
    #[test]
    fn a_deferred_timeline_answers_as_the_whole_one() {
        let mut rng = Lcg(29);
        for name in FIXTURES.iter().copied().chain(["gpt_long"]) {
            let snapshot = crate::testing::snapshot(name);
            let (_, whole) = TimelineIndex::build_with_intervals(&snapshot);
            let (_, deferred) = TimelineIndex::build_with_intervals_deferred(&snapshot);
            assert!(whole.allocation_indexes_built(), "{name}");
            let mut windows = Vec::new();
            for device in whole.devices() {
                for axis in axes(&whole, device) {
                    let (lo, hi) = whole.extent(device, axis).expect("extent");
                    for round in 0..40 {
                        let (start, end) = if round == 0 { (lo, hi) } else { rng.window(lo, hi) };
                        let px = 1 + rng.next(2000) as u32;
                        let max_allocations = [0, 1, 5, 2000][rng.next(4) as usize];
                        let y_span = (round % 3 == 0).then(|| YSpan { bytes: 1 + rng.next(1 << 32), px: 300 });
                        windows.push((WindowRequest { device, axis, start, end, px, max_allocations }, y_span));
                    }
                }
            }
            assert_eq!(deferred.allocation_indexes_built(), windows.is_empty(), "{name}: deferred");
            let answers = |t: &TimelineIndex| windows.iter().map(|&(w, y)| t.query_zoomed(w, y)).collect::<Vec<_>>();
            let expected = answers(&whole);
            let shown = expected.iter().flatten().any(|w| w.allocations.len() > 1);
            assert!(shown || windows.is_empty(), "{name}: allocations shown");
            assert_eq!(answers(&deferred), expected, "{name}: by the scan");
            deferred.build_allocation_indexes();
            assert!(deferred.allocation_indexes_built(), "{name}");
            assert_eq!(answers(&deferred), expected, "{name}: by the index built later");
        }
    }

    #[test]
    fn allocation_index_is_exact_at_any_stride() {
        let mut rng = Lcg(3);
        for name in ["oom_leak", "ring_overflow"] {
            let (snapshot, index, _) = load(name);
            let d = &snapshot.devices[0];
            let rows = d.trace.len();
            let all = intervals(&index, d.device, rows);
            let di = &index.devices[0];
            // Stride 1: a checkpoint per position; huge: only checkpoint 0.
            for stride in [1, 7, 256, 1 << 40] {
                let ai = AllocationIndex::build(&di.allocations, rows, stride, Some(u64::MAX));
                assert_eq!(ai.stride, stride);
                for _ in 0..200 {
                    let pa = rng.next(rows as u64 + 1);
                    let shift = rng.next(14);
                    let pb = pa + 1 + rng.next(1 + (rows as u64 >> shift));
                    let min_size = [1, 512, 1 << 20][rng.next(3) as usize];
                    let k = 1 + rng.next(40) as usize;
                    let got: Vec<u64> =
                        ai.top_k(pa, pb, min_size, k).iter().map(|&i| ai.items[i as usize].size).collect();
                    assert_eq!(got, brute_top_sizes(&all, pa, pb, min_size, k), "{name} stride {stride}");
                }
            }
        }
    }

    #[test]
    fn zooming_in_reveals_smaller_allocations() {
        let (snapshot, _, t) = load("mlp_train_all");
        let d = &snapshot.devices[0];
        let (lo, hi) = t.extent(d.device, Axis::Event).expect("extent");
        let whole = t.query(d.device, Axis::Event, lo, hi, 100, 10).expect("window");
        assert_eq!(whole.allocations.len(), 10);
        assert!(whole.more_allocations);
        let smallest = whole.allocations.iter().map(|a| a.size).min().expect("some");
        let listed: Vec<(u64, Option<u32>)> = whole.allocations.iter().map(|a| (a.addr, a.alloc_row)).collect();
        // Narrow windows swept over the trace list smaller allocations.
        let revealed: Vec<VisibleAllocation> = (lo..hi)
            .step_by(16)
            .flat_map(|x| t.query(d.device, Axis::Event, x, x + 16, 100, 10).expect("window").allocations)
            .filter(|a| a.size < smallest)
            .collect();
        assert!(!revealed.is_empty(), "a narrower window lists a smaller allocation");
        assert!(revealed.iter().all(|a| !listed.contains(&(a.addr, a.alloc_row))));
    }

    #[test]
    fn a_one_row_window_at_the_smallest_threshold_lists_every_allocation_alive_there() {
        let one_byte_rows = YSpan { bytes: 1, px: 1 };
        for name in FIXTURES {
            let (snapshot, index, t) = load(name);
            for d in snapshot.devices.iter().filter(|d| !d.trace.is_empty()) {
                let rows = d.trace.len();
                let all = intervals(&index, d.device, rows);
                let dt = t.device(d.device).expect("timeline");
                for row in (0..rows).step_by(rows / 23 + 1).chain([rows - 1]) {
                    let (start, end) = (row as i64, row as i64 + 1);
                    let w = t
                        .query_zoomed(
                            WindowRequest {
                                device: d.device,
                                axis: Axis::Event,
                                start,
                                end,
                                px: 1000,
                                max_allocations: 100_000,
                            },
                            Some(one_byte_rows),
                        )
                        .expect("window");
                    assert_eq!(w.min_visible_size, 1);
                    let (pa, pb) = dt.window_positions(Axis::Event, start, end);
                    assert_eq!(pb, pa + 1, "one row is one state");
                    let alive = brute_top_sizes(&all, pa, pb, 1, usize::MAX);
                    let got: Vec<u64> = w.allocations.iter().map(|a| a.size).collect();
                    assert_eq!(got, alive, "{name} row {row}");
                    assert!(!w.more_allocations);
                }
            }
        }
    }

    #[test]
    fn a_memory_span_lists_smaller_allocations_than_the_peak_does() {
        let (_, _, t) = load("mlp_train_all");
        let (lo, hi) = t.extent(0, Axis::Event).expect("extent");
        let whole = t.query(0, Axis::Event, lo, hi, 1000, 100_000).expect("window");
        assert!(!whole.more_allocations);
        let peak = whole.buckets.iter().map(|b| b.reserved.max.max(b.active.max)).max().expect("bucket");
        let y = YSpan { bytes: peak / 64, px: 400 };
        let request =
            WindowRequest { device: 0, axis: Axis::Event, start: lo, end: hi, px: 1000, max_allocations: 100_000 };
        let zoomed = t.query_zoomed(request, Some(y)).expect("window");
        assert_eq!(zoomed.min_visible_size, peak / 64 / 800);
        assert!(zoomed.min_visible_size < whole.min_visible_size);
        assert!(zoomed.allocations.iter().any(|a| a.size < whole.min_visible_size), "smaller ones appear");
        // Nothing listed before is lost, and the buckets are the same.
        let key = |a: &VisibleAllocation| (a.addr, a.alloc_row);
        assert!(whole.allocations.iter().all(|a| zoomed.allocations.iter().any(|z| key(z) == key(a))));
        assert_eq!(whole.buckets, zoomed.buckets);
        // A degenerate span still has a threshold of at least one byte.
        assert_eq!(YSpan { bytes: 0, px: 0 }.min_visible_size(), 1);
    }

    /// Issue 4: at the deepest zoom the page listed only the largest
    /// allocations; one under a pixel row of the whole peak could never
    /// appear, since zooming was on x only.
    #[test]
    fn regression_deep_zoom_lists_only_the_largest() {
        // The dashboard's deepest zoom: 8 rows, a plot ~1800 px wide and
        // ~400 tall, zoomed on memory to its narrowest span (512 bytes), at
        // the API's allocation cap.
        let (px, deepest_y) = (1800, YSpan { bytes: 512, px: 400 });
        let (snapshot, index, t) = load("mlp_train_all");
        let rows = snapshot.devices[0].trace.len();
        let all = intervals(&index, 0, rows);
        let dt = t.device(0).expect("timeline");
        let mut hidden_before = 0;
        for x in (0..rows as i64 - 8).step_by(97) {
            let (pa, pb) = dt.window_positions(Axis::Event, x, x + 8);
            let alive = brute_top_sizes(&all, pa, pb, 1, usize::MAX);
            let old = t.query(0, Axis::Event, x, x + 8, px, 2000).expect("window");
            hidden_before += alive.len() - old.allocations.len();
            let w = t
                .query_zoomed(
                    WindowRequest {
                        device: 0,
                        axis: Axis::Event,
                        start: x,
                        end: x + 8,
                        px,
                        max_allocations: crate::views::MAX_ALLOCATIONS,
                    },
                    Some(deepest_y),
                )
                .expect("window");
            let got: Vec<u64> = w.allocations.iter().map(|a| a.size).collect();
            assert_eq!(got, alive, "every allocation alive in [{x}, {})", x + 8);
            assert!(!w.more_allocations);
        }
        assert!(hidden_before > 0, "the x zoom alone hides small allocations here");
    }

    #[test]
    fn a_cut_trace_continues_the_full_one_and_draws_its_ghosts() {
        // Keep only the second half of a trace, as a wrapped ring buffer would.
        let (mut snapshot, _, full) = load("oom_leak");
        let rows = snapshot.devices[0].trace.len();
        let cut = rows / 2;
        let kept = snapshot.devices[0].trace.to_builder().split_off(cut).into();
        snapshot.devices[0].trace = kept;
        let index = SnapshotIndex::build(&snapshot);
        let t = TimelineIndex::build(&snapshot, &index);
        assert!(index.devices[0].ghosts().count() > 0);

        let n = (rows - cut) as i64;
        let w = t.query(0, Axis::Event, -1, n, 1 << 16, 100_000).expect("window");
        let reference = full.query(0, Axis::Event, cut as i64 - 1, rows as i64, 1 << 16, 0).expect("window");
        assert_eq!(w.buckets.len(), reference.buckets.len());
        for (a, b) in w.buckets.iter().zip(&reference.buckets) {
            assert_eq!((a.allocated, a.active, a.reserved), (b.allocated, b.active, b.reserved));
        }
        assert!(w.trace_wrapped && !reference.trace_wrapped);
        assert_eq!(w.markers.first().map(|m| (m.row, m.kind)), Some((0, MarkerKind::WindowStart)));
        let ghosts: Vec<&VisibleAllocation> = w.allocations.iter().filter(|a| a.alloc_row.is_none()).collect();
        assert!(!ghosts.is_empty());
        assert!(ghosts.iter().all(|a| a.start == 0));
        for axis in [Axis::Event, Axis::Time] {
            let (lo, hi) = t.extent(0, axis).expect("extent");
            let w = t.query(0, axis, lo, hi, 300, 100_000).expect("window");
            assert!(w.allocations.iter().filter(|a| a.alloc_row.is_none()).all(|a| a.start == lo));
            assert!(w.allocations.iter().filter(|a| a.free_row.is_none()).all(|a| a.end == hi));
        }
    }

    #[test]
    fn oom_and_window_start_markers() {
        let (snapshot, _, t) = load("oom_leak");
        let d = &snapshot.devices[0];
        let n = naive(d);
        assert!(!n.oom_rows.is_empty());
        for axis in [Axis::Event, Axis::Time] {
            let (lo, hi) = t.extent(0, axis).expect("extent");
            for px in [1, 100, 100_000] {
                let w = t.query(0, axis, lo, hi, px, 0).expect("window");
                let ooms: Vec<&Marker> = w.markers.iter().filter(|m| m.kind == MarkerKind::Oom).collect();
                assert!(!ooms.is_empty());
                assert_eq!(ooms.iter().map(|m| m.count as usize).sum::<usize>(), n.oom_rows.len());
                assert_eq!(ooms[0].row, n.oom_rows[0]);
                assert_eq!(ooms[0].x, x_of(&n, axis, n.oom_rows[0] as usize));
                assert!(!w.trace_wrapped && w.markers.iter().all(|m| m.kind == MarkerKind::Oom));
            }
        }
        // A window that misses the OOM has no marker.
        let row = i64::from(n.oom_rows[0]);
        let w = t.query(0, Axis::Event, row + 1, row + 100, 50, 0).expect("window");
        assert!(w.markers.iter().all(|m| i64::from(m.row) > row));

        let (_, _, t) = load("ring_overflow");
        for axis in [Axis::Event, Axis::Time] {
            let (lo, hi) = t.extent(0, axis).expect("extent");
            let w = t.query(0, axis, lo, hi, 500, 10).expect("window");
            assert!(w.trace_wrapped);
            assert_eq!(w.markers.first(), Some(&Marker { x: lo, row: 0, kind: MarkerKind::WindowStart, count: 1 }));
            let later = t.query(0, axis, lo + 10, hi, 500, 10).expect("window");
            assert!(later.markers.iter().all(|m| m.kind != MarkerKind::WindowStart));
        }
    }

    #[test]
    fn bad_queries_answer_none_and_windows_round_trip_as_json() {
        let (snapshot, _, t) = load("streams");
        assert_eq!(t.devices().collect::<Vec<_>>(), vec![0]);
        assert!(t.heap_bytes() > 0);
        assert!(t.query(0, Axis::Event, 10, 10, 100, 5).is_none());
        assert!(t.query(0, Axis::Event, 10, 5, 100, 5).is_none());
        assert!(t.query(0, Axis::Event, 0, 5, 0, 5).is_none());
        assert!(t.query(7, Axis::Event, 0, 5, 100, 5).is_none());
        assert_eq!(t.extent(0, Axis::Event), Some((0, snapshot.devices[0].trace.len() as i64)));
        // A request for absurdly many buckets is capped.
        let w = t.query(0, Axis::Time, i64::MIN, i64::MAX, u32::MAX, 5).expect("window");
        assert_eq!(w.buckets.len(), MAX_PX as usize);
        let w = t.query(0, Axis::Time, t.extent(0, Axis::Time).expect("times").0, i64::MAX, 64, 5).expect("window");
        let json = serde_json::to_string(&w).expect("serializes");
        assert!(json.contains("\"axis\":\"time\""));
        let back: TimelineWindow = serde_json::from_str(&json).expect("deserializes");
        assert_eq!(back, w);

        // A snapshot without a trace has no timeline.
        let (_, _, t) = load("state_only");
        assert_eq!(t.devices().count(), 0);
        assert!(t.extent(0, Axis::Event).is_none());
        assert!(t.query(0, Axis::Event, 0, 10, 10, 10).is_none());
    }
}
