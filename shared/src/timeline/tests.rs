//! The timeline's tests: curves against a replay, windows, zoom, the
//! allocation index and its persisted form.

use super::allocations::AllocationIndex;
use super::*;
use crate::DeviceStats;
use crate::intervals::SnapshotIntervals;
use crate::snapshot::{Action, BlockState, DeviceSnapshot, Snapshot};

const FIXTURES: [&str; 6] = ["compiled", "mlp_train_all", "oom_leak", "ring_overflow", "state_only", "streams"];

fn load(name: &str) -> (Snapshot, SnapshotIntervals, TimelineIndex) {
    let snapshot = crate::testing::snapshot(name);
    let index = SnapshotIntervals::build(&snapshot);
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
fn intervals(index: &SnapshotIntervals, device: u32, rows: usize) -> Vec<(u64, u64, u64)> {
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
                let got: Vec<u64> = ai.top_k(pa, pb, min_size, k).iter().map(|&i| ai.items[i as usize].size).collect();
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
    let index = SnapshotIntervals::build(&snapshot);
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
