//! The comparison of two snapshots: memory by stack, and both timelines
//! aligned by event or by step.

use serde::{Deserialize, Serialize};

use super::{MAX_TOP, device_snapshot};
use crate::analysis::diff::{DeviceDiff, SnapshotDiff};
use crate::analysis::steps::{StepSource, Steps};
use crate::error::ViewError;
use crate::indexed::IndexedSnapshot;
use crate::timeline::{Axis, Bucket, MAX_PX, Range3};

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
pub fn diff(a: &IndexedSnapshot, b: &IndexedSnapshot, p: &DiffParams) -> Result<DiffAnswer, ViewError> {
    let top = p.top.unwrap_or(20).min(MAX_TOP);
    let d = SnapshotDiff::build(&a.snapshot, &b.snapshot, top);
    let traced = |x: &IndexedSnapshot, asked: Option<u32>| -> Result<Option<u32>, ViewError> {
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

fn aligned(
    a: &IndexedSnapshot,
    da: u32,
    b: &IndexedSnapshot,
    db: u32,
    align: Align,
    px: u32,
) -> Result<AlignedTimelines, ViewError> {
    let px = px.clamp(1, MAX_PX);
    let rows = |x: &IndexedSnapshot, d: u32| device_snapshot(x, d).map(|d| d.trace.len());
    let (rows_a, rows_b) = (rows(a, da)?, rows(b, db)?);
    let steps_a = Steps::find(&a.snapshot, device_snapshot(a, da)?);
    let steps_b = Steps::find(&b.snapshot, device_snapshot(b, db)?);
    let x_end = match align {
        Align::Event => rows_a.max(rows_b).max(1) as f64,
        Align::Step => steps_a.steps.len().max(steps_b.steps.len()).max(1) as f64,
    };
    let side = |x: &IndexedSnapshot, d: u32, n: usize, steps: Steps| -> Result<AlignedTimeline, ViewError> {
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
fn event_buckets(x: &IndexedSnapshot, device: u32, start: i64, end: i64, px: u32) -> Result<Vec<Bucket>, ViewError> {
    if end <= start {
        return Ok(Vec::new());
    }
    x.timeline
        .query(device, Axis::Event, start, end, px, 0)
        .map(|w| w.buckets)
        .ok_or_else(|| ViewError::NotFound(format!("a trace on device {device}")))
}
