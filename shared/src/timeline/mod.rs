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
mod answer;
mod curves;
mod device;
mod persist;
#[cfg(test)]
mod tests;
mod threads;

pub use answer::{Axis, Bucket, Marker, MarkerKind, Range3, TimelineWindow, VisibleAllocation, YSpan};
pub(crate) use persist::DeviceTimelineHeader;
pub(crate) use threads::{PARALLEL_BUILD_ROWS, THREADS, beside};

use crate::intervals::{DeviceIntervals, SnapshotIntervals};
use crate::snapshot::Snapshot;
use device::DeviceTimeline;

/// Rows per block of the min/max tables. A bucket scans at most two partial
/// blocks row by row and looks the full blocks between them up in O(1).
const BLOCK: usize = 128;

/// The most buckets a query returns, whatever `px` asks for: a guard against
/// a request that would allocate gigabytes. Wider than any screen.
pub const MAX_PX: u32 = 1 << 16;

/// The smallest checkpoint stride of the allocation index, in rows.
const MIN_CHECKPOINT_STRIDE: u64 = 256;

/// Precomputed timeline data of every device of a snapshot with a trace.
/// Owns its data (no borrow of the snapshot), so a server can keep it beside
/// the snapshot or instead of parts of it.
#[derive(Debug, Default)]
pub struct TimelineIndex {
    devices: Vec<DeviceTimeline>,
}

impl TimelineIndex {
    /// Precompute the timelines of every device that has trace rows.
    pub fn build(snapshot: &Snapshot, index: &SnapshotIntervals) -> TimelineIndex {
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
    /// ([`SnapshotIntervals::build`] then [`TimelineIndex::build`], with a
    /// device's curves built beside its intervals on a large trace).
    pub fn build_with_intervals(snapshot: &Snapshot) -> (SnapshotIntervals, TimelineIndex) {
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
    pub fn build_with_intervals_deferred(snapshot: &Snapshot) -> (SnapshotIntervals, TimelineIndex) {
        Self::build_with_intervals_then(snapshot, true)
    }

    fn build_with_intervals_then(snapshot: &Snapshot, defer: bool) -> (SnapshotIntervals, TimelineIndex) {
        let mut intervals = Vec::with_capacity(snapshot.devices.len());
        let mut devices = Vec::new();
        for d in &snapshot.devices {
            if d.trace.is_empty() {
                intervals.push(DeviceIntervals::build(d));
            } else {
                let (i, t) = DeviceTimeline::build_with_intervals(d, defer);
                intervals.push(i);
                devices.push(t);
            }
        }
        (SnapshotIntervals { devices: intervals }, TimelineIndex { devices })
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
