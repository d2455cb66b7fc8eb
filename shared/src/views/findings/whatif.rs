//! What-if: the trace replayed through the allocator model under other
//! settings (or a capacity), drawn over the recorded curves.

use serde::{Deserialize, Serialize};

use super::{check_alloc_conf, device_snapshot, parse_capacity};
use crate::analysis::capacity::device_replay_capacity;
use crate::error::ViewError;
use crate::indexed::IndexedSnapshot;
use crate::simulate::{Replayer, SimOom, settings_for};
use crate::snapshot::DeviceSnapshot;
use crate::timeline::{Axis, Bucket, MAX_PX, Range3, TimelineWindow};

/// What a replay found where it ran out of memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimulatedOom {
    /// Trace row of the request.
    pub row: u32,
    /// Where that row sits on the answer's axis.
    pub x: i64,
    /// Bytes the program asked for.
    pub requested_bytes: u64,
    /// The segment or mapping that did not fit.
    pub allocation_bytes: u64,
    /// Reserved bytes when it failed.
    pub reserved_bytes: u64,
    /// The recorded run failed on this request too (and went on).
    pub recorded: bool,
}

/// The figures of one device's replay.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimulatedFigures {
    /// Peaks and counts.
    #[serde(flatten)]
    pub peaks: crate::simulate::ReplayPeaks,
    /// Trace rows replayed (all, unless it ran out of memory first).
    pub rows_replayed: u32,
    /// Rows in the trace.
    pub trace_entries: u32,
}

/// One device replayed with some settings, with its curves over the rows:
/// the expensive part of a what-if (about 100 ms per million trace
/// entries), worth caching by `(snapshot, device, alloc_conf, capacity)`.
#[derive(Clone, Debug)]
pub struct SimulatedDevice {
    /// CUDA device index.
    pub device: u32,
    /// The settings string replayed with (the recorded one when none was given).
    pub alloc_conf: String,
    /// The settings came from the snapshot.
    pub recorded_settings: bool,
    /// The capacity replayed under.
    pub capacity: Option<u64>,
    /// The capacity was not given: the least the device had when it ran out.
    pub capacity_inferred: bool,
    /// Where the capacity came from: `given`, `recorded` (the cap the
    /// capture recorded) or `inferred`; `None` without one.
    pub capacity_source: Option<&'static str>,
    /// Peaks and counts.
    pub figures: SimulatedFigures,
    /// Where it ran out of memory (before its x is known).
    oom: Option<SimOom>,
    /// Rows after which the allocator changed, ascending, with its
    /// allocated and reserved bytes then.
    rows: Vec<u32>,
    allocated: Vec<u64>,
    reserved: Vec<u64>,
}

impl SimulatedDevice {
    /// Bytes held, for cache accounting.
    pub fn heap_bytes(&self) -> usize {
        self.rows.len() * 4 + (self.allocated.len() + self.reserved.len()) * 8
    }
}

/// Replay one device's trace with `alloc_conf` (`None`: the recorded
/// settings) under `capacity` (`None`: unlimited), keeping the curves.
pub fn simulate_device(
    a: &IndexedSnapshot,
    device: u32,
    alloc_conf: Option<&str>,
    capacity: Option<u64>,
) -> Result<SimulatedDevice, ViewError> {
    let d = device_snapshot(a, device)?;
    let (config, conf) = settings_for(&a.snapshot, alloc_conf)?;
    let same = config == settings_for(&a.snapshot, None)?.0;
    // A device that ran out replays under the least it had unless a
    // capacity is given: the recorded OOM is not carried into other
    // settings; a cap the capture recorded comes first (see
    // `analysis::capacity`).
    let chosen = device_replay_capacity(&a.snapshot, d, capacity);
    let capacity = chosen.bytes;
    let sim = Replayer::new(d, config, capacity, true)?.recorded_settings(same).finish();
    let s = &sim.stats;
    let series = sim.series.unwrap_or_default();
    Ok(SimulatedDevice {
        device,
        alloc_conf: conf,
        recorded_settings: alloc_conf.is_none(),
        capacity,
        capacity_inferred: chosen.source == Some("inferred"),
        capacity_source: chosen.source,
        figures: SimulatedFigures {
            peaks: crate::simulate::ReplayPeaks::of(s),
            rows_replayed: u32::try_from(sim.rows_replayed).unwrap_or(u32::MAX),
            trace_entries: u32::try_from(d.trace.len()).unwrap_or(u32::MAX),
        },
        oom: sim.oom,
        rows: series.rows,
        allocated: series.allocated,
        reserved: series.reserved,
    })
}

/// Query of the what-if view.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct WhatIfParams {
    /// Device (default: the first).
    pub device: Option<u32>,
    /// `PYTORCH_CUDA_ALLOC_CONF` to replay with, e.g.
    /// `expandable_segments:True` (absent: the recorded settings; empty:
    /// PyTorch's defaults).
    pub alloc_conf: Option<String>,
    /// Memory the device may reserve: `80GiB`, `500MB` or bytes (absent: unlimited).
    pub capacity: Option<String>,
    /// `time` (default when the trace has times) or `event`.
    pub axis: Option<Axis>,
    /// Window start, in the axis' units (default: the trace's first).
    pub start: Option<i64>,
    /// Window end (default: the trace's last).
    pub end: Option<i64>,
    /// Pixel width of the plot (default 1000).
    pub px: Option<u32>,
}

/// The simulated curves over one bucket of the recorded timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimulatedBucket {
    /// Allocated bytes (rounded block sizes, PyTorch's `allocated_bytes`).
    pub allocated: Range3,
    /// Reserved bytes.
    pub reserved: Range3,
    /// The replay reached into this bucket (it stops where it runs out of
    /// memory on a request the recorded run served).
    pub replayed: bool,
}

/// The what-if answer: the recorded curves of a window and the simulated
/// ones over the same buckets, with both runs' peaks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WhatIfAnswer {
    /// The settings replayed with.
    pub alloc_conf: String,
    /// `recorded` or `given`.
    pub settings: String,
    /// The capacity replayed under.
    pub capacity_bytes: Option<u64>,
    /// Not given: inferred from the recorded OOM (the least the device had).
    #[serde(default)]
    pub capacity_inferred: bool,
    /// Where the capacity came from: `given`, `recorded` (the cap the
    /// capture recorded for the process) or `inferred`; absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_source: Option<String>,
    /// The recorded timeline's window (curves and markers; no allocations).
    /// Its `allocated` curve is requested bytes, the trace's own figure.
    pub recorded: TimelineWindow,
    /// One per bucket of `recorded`.
    pub simulated: Vec<SimulatedBucket>,
    /// The replay's figures.
    pub figures: SimulatedFigures,
    /// Highest reserved bytes of the recorded run (over its trace).
    pub recorded_reserved_peak_bytes: Option<u64>,
    /// Highest requested bytes of the recorded run.
    pub recorded_requested_peak_bytes: Option<u64>,
    /// Where the replay ran out of memory, if it did.
    pub oom: Option<SimulatedOom>,
}

/// The recorded window and the simulated curves over its buckets.
pub fn whatif(a: &IndexedSnapshot, p: &WhatIfParams) -> Result<WhatIfAnswer, ViewError> {
    let device = a.device_or_first(p.device)?;
    check_alloc_conf(p.alloc_conf.as_deref())?;
    let capacity = parse_capacity(p.capacity.as_deref())?;
    let sim = simulate_device(a, device, p.alloc_conf.as_deref(), capacity)?;
    whatif_window(a, &sim, p)
}

/// [`whatif`] for a replay already done (and cached) by [`simulate_device`].
pub fn whatif_window(a: &IndexedSnapshot, sim: &SimulatedDevice, p: &WhatIfParams) -> Result<WhatIfAnswer, ViewError> {
    let device = sim.device;
    let d = device_snapshot(a, device)?;
    let timeline = crate::views::TimelineParams {
        device: Some(device),
        start: p.start,
        end: p.end,
        px: Some(p.px.unwrap_or(1000).clamp(1, MAX_PX)),
        axis: p.axis,
        max_allocations: Some(0),
        ..Default::default()
    };
    let recorded = crate::views::timeline(a, &timeline)?;
    let axis = recorded.axis;
    let xs = RowAxis::new(d, axis);
    // The buckets tile the window: the first starts at row_at(start), each
    // next one where the previous ended.
    let mut row = xs.row_at(recorded.start);
    let mut simulated = Vec::with_capacity(recorded.buckets.len());
    for b in &recorded.buckets {
        let end = row + b.events as usize;
        simulated.push(sim_bucket(sim, &xs, b, row, end));
        row = end;
    }
    let stats = crate::stats::DeviceStats::of(d);
    Ok(WhatIfAnswer {
        alloc_conf: sim.alloc_conf.clone(),
        settings: if sim.recorded_settings { "recorded" } else { "given" }.to_owned(),
        capacity_bytes: sim.capacity,
        capacity_inferred: sim.capacity_inferred,
        capacity_source: sim.capacity_source.map(str::to_owned),
        figures: sim.figures.clone(),
        recorded_reserved_peak_bytes: stats.reserved_peak_bytes,
        recorded_requested_peak_bytes: stats.requested_peak_bytes,
        oom: sim.oom.map(|o| SimulatedOom {
            row: o.row,
            x: xs.x_of(o.row as usize),
            requested_bytes: o.requested_bytes,
            allocation_bytes: o.allocation_bytes,
            reserved_bytes: o.reserved_bytes,
            recorded: o.recorded,
        }),
        recorded,
        simulated,
    })
}

/// Rows and x positions of a device's trace, as the timeline places them
/// (on the time axis, a row's time is the running maximum so far).
struct RowAxis<'a> {
    axis: Axis,
    times: &'a [i64],
    rows: usize,
}

impl RowAxis<'_> {
    fn new(d: &DeviceSnapshot, axis: Axis) -> RowAxis<'_> {
        let times = if d.trace.has_time() { d.trace.times_us() } else { &[] };
        RowAxis { axis, times, rows: d.trace.len() }
    }

    fn time_axis(&self) -> bool {
        self.axis == Axis::Time && self.times.len() == self.rows
    }

    /// x of a row (clamped to the last).
    fn x_of(&self, row: usize) -> i64 {
        if !self.time_axis() {
            return row as i64;
        }
        self.times.iter().take(row.saturating_add(1)).copied().max().unwrap_or(0)
    }

    /// The first row at or after x.
    fn row_at(&self, x: i64) -> usize {
        if !self.time_axis() {
            return x.clamp(0, self.rows as i64) as usize;
        }
        // The running maximum is non-decreasing: the first row whose
        // running maximum reaches x.
        let mut max = i64::MIN;
        for (i, &t) in self.times.iter().enumerate() {
            max = max.max(t);
            if max >= x {
                return i;
            }
        }
        self.rows
    }
}

/// The simulated curves over rows `a..b` of a bucket. A row without a
/// series point did not change the allocator: the value carries on.
fn sim_bucket(sim: &SimulatedDevice, xs: &RowAxis<'_>, bucket: &Bucket, a: usize, b: usize) -> SimulatedBucket {
    let lo = sim.rows.partition_point(|&r| (r as usize) < a);
    let hi = sim.rows.partition_point(|&r| (r as usize) < b);
    let replayed_until = sim.figures.rows_replayed as usize;
    let carried = |v: &[u64]| if lo == 0 { 0 } else { v[lo - 1] };
    // As the recorded curves: on the time axis the value carried in counts
    // when the bucket's first event comes after its left edge.
    let carry_in = lo == hi || (xs.time_axis() && a < xs.rows && xs.x_of(a) > bucket.x0);
    let range = |v: &[u64]| {
        let c = carried(v);
        let slice = &v[lo..hi];
        let (mut min, mut max) = if carry_in { (c, c) } else { (u64::MAX, 0) };
        for &x in slice {
            min = min.min(x);
            max = max.max(x);
        }
        Range3 { min, max, last: slice.last().copied().unwrap_or(c) }
    };
    SimulatedBucket {
        allocated: range(&sim.allocated),
        reserved: range(&sim.reserved),
        replayed: a < replayed_until || (a == b && a <= replayed_until && replayed_until > 0),
    }
}
