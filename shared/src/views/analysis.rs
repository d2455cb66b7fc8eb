//! The analyses the dashboard shows beside the timeline, as views: a
//! what-if replay drawn over the recorded curves ([`whatif`]), the ranking
//! of allocator settings ([`tune`]), the OOM post-mortem ([`explain`]), the
//! leak ranking ([`leaks`]) and the comparison of two snapshots ([`diff`]).
//!
//! Like the other views, each is a plain function of [`Analyzed`]
//! snapshots and a query struct read from the URL, answering plain data
//! whose size depends on the query (`px`, `top`), never on the trace. The
//! server wraps them (and caches the expensive replay, [`simulate_device`]);
//! the browser calls them directly for a file opened locally.

use serde::{Deserialize, Serialize};

use super::{Analyzed, ViewError};
use crate::analysis::diff::{DeviceDiff, SnapshotDiff};
use crate::analysis::leaks::DeviceLeaks;
use crate::analysis::oom::{Avoidance, OomReport, SettingVerdict, explain_device};
use crate::analysis::steps::{StepSource, Steps};
use crate::simulate::tune::{DEFAULT_GRID, TuneRow};
use crate::simulate::{AllocatorConfig, Replayer, SimError, SimOom, parse_size, settings_for};
use crate::snapshot::{DeviceSnapshot, Snapshot};
use crate::timeline::{Axis, Bucket, MAX_PX, Range3, TimelineWindow};

/// Most stacks a leak or comparison answer lists.
pub const MAX_TOP: usize = 200;

impl From<SimError> for ViewError {
    fn from(e: SimError) -> ViewError {
        // Every simulator error is about the request (bad settings) or about
        // what the file allows (no trace, a wrapped trace): the caller's to fix.
        ViewError::BadRequest(e.to_string())
    }
}

/// A `capacity` query value (`80GiB`, `500MB`, plain bytes) in bytes.
pub fn parse_capacity(text: Option<&str>) -> Result<Option<u64>, ViewError> {
    match text.map(str::trim) {
        None | Some("") => Ok(None),
        Some(t) => parse_size(t).map(Some).map_err(|e| ViewError::BadRequest(format!("capacity: {e}"))),
    }
}

/// The allocator settings a replay uses: `None` for the recorded ones.
/// Checked before any replay, so that a typo is answered at once.
pub fn check_alloc_conf(conf: Option<&str>) -> Result<(), ViewError> {
    match conf {
        Some(c) => AllocatorConfig::parse(c).map(|_| ()).map_err(|e| ViewError::BadRequest(e.to_string())),
        None => Ok(()),
    }
}

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
    /// Highest reserved bytes.
    pub reserved_peak_bytes: u64,
    /// Highest allocated bytes (rounded block sizes).
    pub allocated_peak_bytes: u64,
    /// Highest requested (unrounded) bytes.
    pub requested_peak_bytes: u64,
    /// Highest free-but-unreleasable bytes in split segments.
    pub inactive_split_peak_bytes: u64,
    /// cudaMalloc calls and page mappings.
    pub device_allocs: u64,
    /// cudaFree calls and page unmappings.
    pub device_frees: u64,
    /// Allocations retried after releasing the cache.
    pub alloc_retries: u64,
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
    a: &Analyzed,
    device: u32,
    alloc_conf: Option<&str>,
    capacity: Option<u64>,
) -> Result<SimulatedDevice, ViewError> {
    let d = device_snapshot(a, device)?;
    let (config, conf) = settings_for(&a.snapshot, alloc_conf)?;
    let same = config == settings_for(&a.snapshot, None)?.0;
    let sim = Replayer::new(d, config, capacity, true)?.recorded_settings(same).finish();
    let s = &sim.stats;
    let series = sim.series.unwrap_or_default();
    Ok(SimulatedDevice {
        device,
        alloc_conf: conf,
        recorded_settings: alloc_conf.is_none(),
        capacity,
        figures: SimulatedFigures {
            reserved_peak_bytes: s.reserved_bytes.peak,
            allocated_peak_bytes: s.allocated_bytes.peak,
            requested_peak_bytes: s.requested_bytes.peak,
            inactive_split_peak_bytes: s.inactive_split_bytes.peak,
            device_allocs: s.num_device_alloc,
            device_frees: s.num_device_free,
            alloc_retries: s.num_alloc_retries,
            rows_replayed: u32::try_from(sim.rows_replayed).unwrap_or(u32::MAX),
            trace_entries: u32::try_from(d.trace.len()).unwrap_or(u32::MAX),
        },
        oom: sim.oom,
        rows: series.rows,
        allocated: series.allocated,
        reserved: series.reserved,
    })
}

fn device_snapshot(a: &Analyzed, device: u32) -> Result<&DeviceSnapshot, ViewError> {
    a.snapshot.device(device).ok_or_else(|| ViewError::NotFound(format!("device {device}")))
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
pub fn whatif(a: &Analyzed, p: &WhatIfParams) -> Result<WhatIfAnswer, ViewError> {
    let device = a.device_or_first(p.device)?;
    check_alloc_conf(p.alloc_conf.as_deref())?;
    let capacity = parse_capacity(p.capacity.as_deref())?;
    let sim = simulate_device(a, device, p.alloc_conf.as_deref(), capacity)?;
    whatif_window(a, &sim, p)
}

/// [`whatif`] for a replay already done (and cached) by [`simulate_device`].
pub fn whatif_window(a: &Analyzed, sim: &SimulatedDevice, p: &WhatIfParams) -> Result<WhatIfAnswer, ViewError> {
    let device = sim.device;
    let d = device_snapshot(a, device)?;
    let timeline = super::TimelineParams {
        device: Some(device),
        start: p.start,
        end: p.end,
        px: Some(p.px.unwrap_or(1000).clamp(1, MAX_PX)),
        axis: p.axis,
        max_allocations: Some(0),
        ..Default::default()
    };
    let recorded = super::timeline(a, &timeline)?;
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

/// Query of the tune view.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct TuneParams {
    /// Memory each device may reserve (absent: unlimited).
    pub capacity: Option<String>,
}

/// One candidate setting's outcome with its place in the ranking.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuneCandidate {
    /// 1 for the best.
    pub rank: u32,
    /// The replay's figures, flattened into the same JSON object.
    #[serde(flatten)]
    pub outcome: TuneRow,
}

/// Every candidate setting ranked: those that fit before those that do
/// not, then by reserved peak. Over several devices each figure is the
/// largest of any device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuneAnswer {
    /// The capacity tried under.
    pub capacity_bytes: Option<u64>,
    /// Reserved peak of the recorded settings' replay.
    pub recorded_reserved_peak_bytes: u64,
    /// Best first.
    pub rows: Vec<TuneCandidate>,
}

/// Replay the recorded settings and each of [`DEFAULT_GRID`], and rank them.
pub fn tune(a: &Analyzed, p: &TuneParams) -> Result<TuneAnswer, ViewError> {
    let capacity = parse_capacity(p.capacity.as_deref())?;
    let report = crate::simulate::tune::tune(&a.snapshot, capacity, DEFAULT_GRID)?;
    let rows: Vec<TuneCandidate> =
        report.rows.iter().enumerate().map(|(k, r)| TuneCandidate { rank: k as u32 + 1, outcome: r.clone() }).collect();
    let recorded_reserved_peak_bytes =
        rows.iter().find(|r| r.outcome.recorded).map_or(0, |r| r.outcome.reserved_peak_bytes);
    Ok(TuneAnswer { capacity_bytes: capacity, recorded_reserved_peak_bytes, rows })
}

/// Query of the explain view.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct ExplainParams {
    /// Device (default: every device).
    pub device: Option<u32>,
    /// Replay the suggested settings to say which would have avoided each
    /// OOM (default true; a few replays of the trace).
    pub simulate: Option<bool>,
}

/// The OOM post-mortems of a snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExplainAnswer {
    /// Whether any device has a trace (without one an OOM leaves no entry).
    pub has_trace: bool,
    /// One per `oom` entry, in trace order.
    pub ooms: Vec<OomReport>,
}

/// Post-mortems of the `oom` entries, each with the settings the simulator
/// says would have avoided it.
pub fn explain(a: &Analyzed, p: &ExplainParams) -> Result<ExplainAnswer, ViewError> {
    let devices: Vec<&DeviceSnapshot> = match p.device {
        Some(d) => vec![device_snapshot(a, d)?],
        None => a.snapshot.devices.iter().collect(),
    };
    let has_trace = devices.iter().any(|d| d.has_trace && !d.trace.is_empty());
    let mut ooms: Vec<OomReport> = devices.iter().flat_map(|d| explain_device(&a.snapshot, d)).collect();
    if p.simulate.unwrap_or(true) {
        for r in &mut ooms {
            r.avoided_by = avoided_by(&a.snapshot, r);
        }
    }
    Ok(ExplainAnswer { has_trace, ooms })
}

/// Replay the OOM's device with each setting its report suggests and judge
/// the reserved peak against what the OOM says about the memory cap.
/// Garbage collection acts only under a cap, so those settings are replayed
/// under the largest cap consistent with the OOM (just below the
/// reservation that failed) and judged by whether that replay still fails.
/// `None` when the trace cannot be replayed (a wrapped ring buffer). Fits
/// [`crate::analysis::oom::explain_with`] as its `what_if`.
pub fn avoided_by(snapshot: &Snapshot, report: &OomReport) -> Option<Vec<SettingVerdict>> {
    let (_, failed) = report.capacity_bytes_range;
    let device = snapshot.device(report.device)?;
    let recorded = settings_for(snapshot, None).ok()?.0;
    let mut verdicts = Vec::new();
    for setting in report.candidate_settings() {
        let needs_cap = setting.starts_with("garbage_collection_threshold");
        let capacity = needs_cap.then(|| failed.saturating_sub(1));
        let (config, _) = settings_for(snapshot, Some(&setting)).ok()?;
        let same = config == recorded;
        let sim = Replayer::new(device, config, capacity, false).ok()?.recorded_settings(same).finish();
        let mut verdict = SettingVerdict::judge(report, setting, sim.stats.reserved_bytes.peak);
        if let Some(cap) = capacity {
            verdict.avoids =
                if sim.oom.is_none() { Avoidance::IfCapacityAtLeast { bytes: cap } } else { Avoidance::No };
            verdict.note = Some(format!(
                "replayed under a {:.2} GiB cap, just below the reservation that failed (GC acts only under a cap)",
                cap as f64 / f64::from(1u32 << 30)
            ));
        }
        verdicts.push(verdict);
    }
    Some(verdicts)
}

/// Query of the leaks view.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct LeaksParams {
    /// Device (default: every device with segments or a trace).
    pub device: Option<u32>,
    /// Stacks to list per device (default 20, at most [`MAX_TOP`]).
    pub top: Option<usize>,
}

/// One device's leak ranking, with where its steps came from in words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceLeaksAnswer {
    /// Where the step boundaries came from, for people.
    pub step_source: String,
    /// The ranking.
    pub leaks: DeviceLeaks,
}

/// The leak ranking of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaksAnswer {
    /// One per device.
    pub devices: Vec<DeviceLeaksAnswer>,
}

/// Allocations alive at the end, grouped by stack and ranked by how
/// steadily they grew (see [`crate::analysis::leaks`]).
pub fn leaks(a: &Analyzed, p: &LeaksParams) -> Result<LeaksAnswer, ViewError> {
    let top = p.top.unwrap_or(20).min(MAX_TOP);
    let devices: Vec<&DeviceSnapshot> = match p.device {
        Some(d) => vec![device_snapshot(a, d)?],
        None => a.snapshot.devices.iter().collect(),
    };
    let mut out = Vec::with_capacity(devices.len());
    for d in devices {
        let leaks = DeviceLeaks::build(&a.snapshot, d, a.device_index(d.device)?, top);
        out.push(DeviceLeaksAnswer { step_source: leaks.step_source_text(), leaks });
    }
    Ok(LeaksAnswer { devices: out })
}

/// How the two timelines of a comparison share their x axis.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Align {
    /// Row `r` of both traces at the same x.
    #[default]
    Event,
    /// Step `k` of both traces over the same span of x (x in steps).
    Step,
}

/// Query of the comparison view.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct DiffParams {
    /// Stacks to list per device pair (default 20, at most [`MAX_TOP`]).
    pub top: Option<usize>,
    /// Device of A whose timeline to draw (default: the first with a trace).
    pub device_a: Option<u32>,
    /// Device of B whose timeline to draw (default: the first with a trace).
    pub device_b: Option<u32>,
    /// `event` (default) or `step`.
    pub align: Option<Align>,
    /// Pixel width of each timeline (default 1000).
    pub px: Option<u32>,
}

/// A bucket of an aligned timeline; x in the shared axis' units (rows, or steps).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlignedBucket {
    /// Left edge.
    pub x0: f64,
    /// Right edge.
    pub x1: f64,
    /// Requested bytes of allocated blocks.
    pub allocated: Range3,
    /// Reserved bytes.
    pub reserved: Range3,
}

/// One side of a comparison's timelines.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlignedTimeline {
    /// The device drawn.
    pub device: u32,
    /// Rows in its trace.
    pub rows: u32,
    /// Its steps (by name), in order; their edges are at x = 0, 1, 2, … when aligned by step.
    pub steps: Vec<String>,
    /// Where its steps came from.
    pub step_source: StepSource,
    /// The buckets, left to right.
    pub buckets: Vec<AlignedBucket>,
}

/// The two timelines on one x axis, for one y scale.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlignedTimelines {
    /// How x is shared.
    pub align: Align,
    /// The shared x range.
    pub x_end: f64,
    /// The highest value of either (the shared y scale's top).
    pub y_max: u64,
    /// A's timeline.
    pub a: AlignedTimeline,
    /// B's timeline.
    pub b: AlignedTimeline,
}

/// The comparison of two snapshots.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiffAnswer {
    /// No stack changed and the figures agree.
    pub identical: bool,
    /// Paired devices, with stacks that grew, shrank, appeared, vanished.
    pub devices: Vec<DeviceDiff>,
    /// The two timelines, when both have a trace.
    pub timelines: Option<AlignedTimelines>,
}

/// Compare `a` with `b`: memory by stack at the end of each, and their
/// timelines on one axis.
pub fn diff(a: &Analyzed, b: &Analyzed, p: &DiffParams) -> Result<DiffAnswer, ViewError> {
    let top = p.top.unwrap_or(20).min(MAX_TOP);
    let d = SnapshotDiff::build(&a.snapshot, &b.snapshot, top);
    let traced = |x: &Analyzed, asked: Option<u32>| -> Result<Option<u32>, ViewError> {
        match asked {
            Some(dev) => Ok(Some(x.device_or_first(Some(dev))?)),
            None => Ok(x.snapshot.devices.iter().find(|d| !d.trace.is_empty()).map(|d| d.device)),
        }
    };
    let timelines = match (traced(a, p.device_a)?, traced(b, p.device_b)?) {
        (Some(da), Some(db)) => Some(aligned(a, da, b, db, p.align.unwrap_or_default(), p.px.unwrap_or(1000))?),
        _ => None,
    };
    Ok(DiffAnswer { identical: d.is_empty(), devices: d.devices, timelines })
}

fn aligned(a: &Analyzed, da: u32, b: &Analyzed, db: u32, align: Align, px: u32) -> Result<AlignedTimelines, ViewError> {
    let px = px.clamp(1, MAX_PX);
    let rows = |x: &Analyzed, d: u32| device_snapshot(x, d).map(|d| d.trace.len());
    let (rows_a, rows_b) = (rows(a, da)?, rows(b, db)?);
    let steps_a = Steps::find(&a.snapshot, device_snapshot(a, da)?);
    let steps_b = Steps::find(&b.snapshot, device_snapshot(b, db)?);
    let x_end = match align {
        Align::Event => rows_a.max(rows_b).max(1) as f64,
        Align::Step => steps_a.steps.len().max(steps_b.steps.len()).max(1) as f64,
    };
    let side = |x: &Analyzed, d: u32, n: usize, steps: Steps| -> Result<AlignedTimeline, ViewError> {
        let buckets = match align {
            // Each trace over its own rows, with its share of the pixels.
            Align::Event => {
                let share = ((px as f64) * n as f64 / x_end).ceil().max(1.0) as u32;
                event_buckets(x, d, 0, n as i64, share)?.into_iter().map(|b| (b, 0.0, 1.0, 0.0)).collect()
            }
            // Each step over [k, k + 1), its rows spread evenly inside.
            Align::Step => {
                let per_step = (px as usize / steps.steps.len().max(1)).max(1) as u32;
                let mut out = Vec::new();
                for (k, s) in steps.steps.iter().enumerate() {
                    let span = (s.end_row - s.start_row).max(1) as f64;
                    for bucket in event_buckets(x, d, i64::from(s.start_row), i64::from(s.end_row), per_step)? {
                        out.push((bucket, f64::from(s.start_row), 1.0 / span, k as f64));
                    }
                }
                out
            }
        }
        .into_iter()
        .map(|(bk, origin, scale, offset)| AlignedBucket {
            x0: offset + (bk.x0 as f64 - origin) * scale,
            x1: offset + (bk.x1 as f64 - origin) * scale,
            allocated: bk.allocated,
            reserved: bk.reserved,
        })
        .collect();
        Ok(AlignedTimeline {
            device: d,
            rows: u32::try_from(n).unwrap_or(u32::MAX),
            steps: steps.steps.iter().map(|s| s.name.clone()).collect(),
            step_source: steps.source,
            buckets,
        })
    };
    let a_side = side(a, da, rows_a, steps_a)?;
    let b_side = side(b, db, rows_b, steps_b)?;
    let y_max =
        a_side.buckets.iter().chain(&b_side.buckets).map(|k| k.reserved.max.max(k.allocated.max)).max().unwrap_or(0);
    Ok(AlignedTimelines { align, x_end, y_max, a: a_side, b: b_side })
}

/// Buckets of rows `[start, end)` of a device on the event axis.
fn event_buckets(x: &Analyzed, device: u32, start: i64, end: i64, px: u32) -> Result<Vec<Bucket>, ViewError> {
    if end <= start {
        return Ok(Vec::new());
    }
    x.timeline
        .query(device, Axis::Event, start, end, px, 0)
        .map(|w| w.buckets)
        .ok_or_else(|| ViewError::NotFound(format!("a trace on device {device}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::corpus as fixture;

    #[test]
    fn whatif_buckets_follow_the_timeline_and_end_at_the_simulated_peak() {
        let a = fixture("streams");
        let p = WhatIfParams { px: Some(64), axis: Some(Axis::Event), ..Default::default() };
        let w = whatif(&a, &p).expect("what-if");
        assert_eq!(w.simulated.len(), w.recorded.buckets.len());
        assert!(w.recorded.buckets.len() <= 64);
        let peak = w.simulated.iter().map(|b| b.reserved.max).max().expect("buckets");
        assert_eq!(peak, w.figures.reserved_peak_bytes, "the buckets see every row");
        assert!(w.simulated.iter().all(|b| b.replayed));
        assert_eq!(w.settings, "recorded");
        // The recorded settings replay the recorded reserved peak.
        assert_eq!(Some(w.figures.reserved_peak_bytes), w.recorded_reserved_peak_bytes);
        // The same on the time axis, zoomed into the middle.
        let full = whatif(&a, &WhatIfParams { px: Some(50), ..Default::default() }).expect("time axis");
        assert_eq!(full.recorded.axis, Axis::Time);
        let (s, e) = (full.recorded.start, full.recorded.end);
        let zoom = WhatIfParams {
            px: Some(50),
            start: Some(s + (e - s) / 4),
            end: Some(e - (e - s) / 4),
            ..Default::default()
        };
        let z = whatif(&a, &zoom).expect("zoomed");
        assert_eq!(z.simulated.len(), z.recorded.buckets.len());
    }

    #[test]
    fn bad_settings_and_capacities_are_refused_with_the_reason() {
        let a = fixture("streams");
        let bad = WhatIfParams { alloc_conf: Some("max_split_size_mb:8".into()), ..Default::default() };
        match whatif(&a, &bad) {
            Err(ViewError::BadRequest(m)) => assert!(m.contains("max_split_size_mb"), "{m}"),
            other => panic!("{other:?}"),
        }
        let bad = WhatIfParams { capacity: Some("80G".into()), ..Default::default() };
        assert!(matches!(whatif(&a, &bad), Err(ViewError::BadRequest(m)) if m.contains("capacity")));
        assert_eq!(parse_capacity(Some("1GiB")), Ok(Some(1 << 30)));
    }

    #[test]
    fn a_small_capacity_runs_out_where_the_answer_says() {
        let a = fixture("streams");
        let p = WhatIfParams {
            capacity: Some("4MiB".into()),
            axis: Some(Axis::Event),
            px: Some(100),
            ..Default::default()
        };
        let w = whatif(&a, &p).expect("what-if");
        let oom = w.oom.expect("4 MiB is too little");
        assert_eq!(oom.x, i64::from(oom.row));
        assert!(w.simulated.iter().any(|b| !b.replayed), "nothing after the failure");
        assert!(w.figures.reserved_peak_bytes <= 4 << 20);
    }

    #[test]
    fn oom_leak_is_explained_leaks_ranked_and_tuned() {
        let a = fixture("oom_leak");
        let e = explain(&a, &ExplainParams::default()).expect("explain");
        assert_eq!(e.ooms.len(), 1);
        let verdicts = e.ooms[0].avoided_by.as_ref().expect("simulated");
        assert!(verdicts.iter().any(|v| v.setting == "expandable_segments:True"));
        let l = leaks(&a, &LeaksParams { top: Some(5), ..Default::default() }).expect("leaks");
        let top = &l.devices[0].leaks.candidates[0];
        assert!(top.frames.iter().any(|f| f.filename == "/srv/jobs/train.py" && f.line == 96), "{top:?}");
        let t = tune(&a, &TuneParams::default()).expect("tune");
        assert!(t.rows.iter().any(|r| r.outcome.recorded));
        let key = |r: &TuneCandidate| (r.outcome.oom.is_some(), r.outcome.reserved_peak_bytes);
        assert!(t.rows.windows(2).all(|w| key(&w[0]) <= key(&w[1])));
    }

    #[test]
    fn the_local_mode_route_answers_what_the_functions_answer() {
        let a = fixture("oom_leak");
        let p = WhatIfParams {
            alloc_conf: Some("expandable_segments:True".into()),
            px: Some(40),
            axis: Some(Axis::Event),
            ..Default::default()
        };
        let direct = serde_json::to_string(&whatif(&a, &p).expect("what-if")).expect("json");
        let routed = super::super::route::answer(&a, "whatif", "alloc_conf=expandable_segments:True&px=40&axis=event");
        assert_eq!(routed.expect("routed"), direct);
        let leaks = super::super::route::answer(&a, "leaks", "top=3").expect("leaks");
        let back: LeaksAnswer = serde_json::from_str(&leaks).expect("answers deserialize");
        assert_eq!(back.devices[0].leaks.candidates.len(), 3);
        assert!(super::super::route::answer(&a, "explain", "simulate=false").is_ok());
        assert!(super::super::route::answer(&a, "tune", "capacity=1GiB").is_ok());
    }

    #[test]
    fn diff_aligns_two_timelines_on_one_scale() {
        let (a, b) = (fixture("streams"), fixture("oom_leak"));
        for align in [Align::Event, Align::Step] {
            let p = DiffParams { align: Some(align), px: Some(200), ..Default::default() };
            let d = diff(&a, &b, &p).expect("diff");
            let t = d.timelines.expect("both have traces");
            for side in [&t.a, &t.b] {
                assert!(!side.buckets.is_empty());
                assert!(
                    side.buckets.iter().all(|k| k.x0 >= 0.0 && k.x1 <= t.x_end + 1e-9 && k.reserved.max <= t.y_max)
                );
                assert!(side.buckets.len() <= 2 * 200, "{align:?}: {}", side.buckets.len());
            }
            assert!(!d.identical);
        }
        let same = diff(&a, &a, &DiffParams::default()).expect("diff");
        assert!(same.identical);
    }
}
