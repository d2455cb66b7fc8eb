//! One device's precomputed timeline: the curves, the OOM markers and the
//! allocation index, and the queries on them.

use std::sync::OnceLock;

use super::allocations::{AllocItem, AllocationIndex, NONE};
use super::curves::{Curves, Rows};
use super::{
    Axis, Bucket, MIN_CHECKPOINT_STRIDE, Marker, MarkerKind, PARALLEL_BUILD_ROWS, TimelineWindow, VisibleAllocation,
    YSpan, beside,
};
use crate::column::Column;
use crate::intervals::{Allocation, DeviceIntervals};
use crate::snapshot::{Action, BlockState, DeviceSnapshot};

/// One device's precomputed timeline.
#[derive(Debug)]
pub(super) struct DeviceTimeline {
    pub(super) device: u32,
    pub(super) rows: usize,
    /// Running maximum of `time_us` per row; `None` without times. The
    /// trace's own column when its times never go back (real files).
    pub(super) times: Option<Column<i64>>,
    /// `times` is the trace's `time_us` column, shared.
    pub(super) times_from_trace: bool,
    /// The trace's action and size columns (shared), from which the
    /// curves are replayed inside a block.
    pub(super) columns: Rows,
    /// `allocated`, `active` and `reserved`.
    pub(super) curves: Curves,
    /// Rows of `oom` entries, ascending.
    pub(super) oom_rows: Column<u32>,
    pub(super) trace_wrapped: bool,
    /// The allocation index: built with the rest, else from `intervals`
    /// by [`DeviceTimeline::allocation_index`].
    pub(super) allocations: OnceLock<AllocationIndex>,
    /// The device's allocation intervals while `allocations` may not be
    /// built yet (shared with the interval index); empty otherwise.
    pub(super) intervals: Column<Allocation>,
}

impl DeviceTimeline {
    pub(super) fn build(device: &DeviceSnapshot, intervals: &DeviceIntervals) -> DeviceTimeline {
        let n = device.trace.len();
        let index = || AllocationIndex::build(&intervals.allocations, n, MIN_CHECKPOINT_STRIDE, None);
        Self::build_beside(device, || ((), Some(index()))).1
    }

    /// The device's intervals and its timeline, built together: the
    /// curves need no intervals, so they are built beside the intervals
    /// and the allocation index that follows from them (unless `defer`:
    /// see [`TimelineIndex::build_with_intervals_deferred`]).
    pub(super) fn build_with_intervals(device: &DeviceSnapshot, defer: bool) -> (DeviceIntervals, DeviceTimeline) {
        let n = device.trace.len();
        let (intervals, mut timeline) = Self::build_beside(device, || {
            let intervals = DeviceIntervals::build(device);
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
    pub(super) fn build_beside<T: Send>(
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
    pub(super) fn allocation_index(&self) -> &AllocationIndex {
        self.allocations.get_or_init(|| AllocationIndex::build(&self.intervals, self.rows, MIN_CHECKPOINT_STRIDE, None))
    }

    /// The `k` largest allocations of at least `min_size` alive in
    /// positions `[pa, pb)` ([`AllocationIndex::top_k`]): from the index,
    /// or while it is not built, from a scan of the intervals.
    pub(super) fn largest(&self, pa: u64, pb: u64, min_size: u64, k: usize) -> Vec<AllocItem> {
        match self.allocations.get() {
            Some(index) => index.top_k(pa, pb, min_size, k).into_iter().map(|i| index.items[i as usize]).collect(),
            None => super::allocations::scan_top_k(&self.intervals, self.rows, pa, pb, min_size, k),
        }
    }

    /// Everything but the allocation index (left empty).
    pub(super) fn build_curves(device: &DeviceSnapshot) -> DeviceTimeline {
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

    pub(super) fn heap_bytes(&self) -> usize {
        // Times shared with the trace are counted there.
        self.times.as_ref().filter(|_| !self.times_from_trace).map_or(0, Column::heap_bytes)
            + self.curves.heap_bytes()
            + self.oom_rows.heap_bytes()
            + self.allocations.get().map_or(0, AllocationIndex::heap_bytes)
    }

    pub(super) fn extent(&self, axis: Axis) -> Option<(i64, i64)> {
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
    pub(super) fn x_of(&self, axis: Axis, row: usize) -> i64 {
        match (axis, &self.times) {
            (Axis::Time, Some(t)) => t[row],
            _ => row as i64,
        }
    }

    /// The first row at or after x.
    /// [`DeviceTimeline::row_at`] of ascending `xs`: on the time axis, each
    /// search gallops from the previous row instead of bisecting the whole
    /// column (a 16M-row column bisected 2000 times is cache misses).
    pub(super) fn rows_at(&self, axis: Axis, xs: &[i64]) -> Vec<usize> {
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

    pub(super) fn row_at(&self, axis: Axis, x: i64) -> usize {
        match (axis, &self.times) {
            (Axis::Time, Some(t)) => t.partition_point(|&v| v < x),
            _ => x.clamp(0, self.rows as i64) as usize,
        }
    }

    pub(super) fn query(
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
    pub(super) fn window_positions(&self, axis: Axis, start: i64, end: i64) -> (u64, u64) {
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
