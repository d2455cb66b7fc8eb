//! The annotations track: `record_function` ranges the snapshot recorded
//! (`external_annotations`, PyTorch 2.4+), paired START with END by name
//! and placed on the timeline's axis, nested ranges one level deeper.
//!
//! Annotations carry wall times only; on the event axis a range starts at
//! the first row recorded at or after its start time and ends at the first
//! row at or after its end time.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::segments::span;
use super::state::rows_before;
use crate::error::ViewError;
use crate::indexed::IndexedSnapshot;
use crate::snapshot::AnnotationStage;
use crate::timeline::Axis;

/// Most ranges an answer lists unless `limit` says otherwise.
pub const DEFAULT_LIMIT: usize = 2_000;

/// Query of the annotations track.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct AnnotationsParams {
    /// Device (default: the first).
    pub device: Option<u32>,
    /// `time` (default when the trace has times) or `event`.
    pub axis: Option<Axis>,
    /// Window start (default: the trace's first x).
    pub start: Option<i64>,
    /// Window end (default: the trace's end).
    pub end: Option<i64>,
    /// Most ranges (default [`DEFAULT_LIMIT`]); the longest are kept.
    pub limit: Option<usize>,
}

/// One range on the axis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnnotationRange {
    /// The range's name (`step12`, `Optimizer.step#AdamW.step`).
    pub name: String,
    /// x of its start.
    pub start: i64,
    /// x of its end (the trace's end when it never closed).
    pub end: i64,
    /// Start time, microseconds since the epoch.
    pub start_us: i64,
    /// End time; `None` when no END was recorded.
    pub end_us: Option<i64>,
    /// Nesting level: 0 for a range inside no other.
    pub depth: u32,
}

/// The ranges overlapping a window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnnotationsAnswer {
    /// Device.
    pub device: u32,
    /// x axis.
    pub axis: Axis,
    /// Ranges overlapping the window, by start.
    pub ranges: Vec<AnnotationRange>,
    /// Ranges overlapping the window before `limit` applied.
    pub total: usize,
    /// Deepest nesting level among `ranges`, plus one (0 when none).
    pub levels: u32,
}

/// The `record_function` ranges of a device overlapping a window.
pub fn annotations(a: &IndexedSnapshot, p: &AnnotationsParams) -> Result<AnnotationsAnswer, ViewError> {
    let span = span(a, p.device, p.axis, p.start, p.end)?;
    let d = a.snapshot.device(span.device).ok_or_else(|| ViewError::NotFound(format!("device {}", span.device)))?;
    let x_of = |t: i64| match span.axis {
        Axis::Time => t,
        Axis::Event => rows_before(d, Axis::Time, t) as i64,
    };
    let extent_end = a.timeline.extent(span.device, span.axis).map_or(span.end, |(_, e)| e);
    let mut marks: Vec<_> = a.snapshot.annotations.iter().filter(|n| n.device == span.device).collect();
    marks.sort_by_key(|n| (n.time_us, n.stage == AnnotationStage::Start));
    let mut open: HashMap<&str, Vec<(i64, usize)>> = HashMap::new();
    let mut ranges: Vec<(i64, Option<i64>, &str)> = Vec::new();
    for n in marks {
        match n.stage {
            AnnotationStage::Start => {
                ranges.push((n.time_us, None, &n.name));
                open.entry(&n.name).or_default().push((n.time_us, ranges.len() - 1));
            }
            AnnotationStage::End => {
                // An END without its START (recording began inside the range).
                if let Some((_, i)) = open.get_mut(n.name.as_str()).and_then(|s| s.pop()) {
                    ranges[i].1 = Some(n.time_us);
                }
            }
        }
    }
    // Depth: how many earlier ranges are still open at a range's start.
    let mut ends: Vec<i64> = Vec::new();
    let mut out: Vec<AnnotationRange> = Vec::new();
    for (start_us, end_us, name) in ranges {
        ends.retain(|&e| e > start_us);
        let depth = ends.len() as u32;
        ends.push(end_us.unwrap_or(i64::MAX));
        let start = x_of(start_us);
        let end = end_us.map_or(extent_end, x_of).max(start + 1);
        if end > span.start && start < span.end {
            out.push(AnnotationRange { name: name.to_owned(), start, end, start_us, end_us, depth });
        }
    }
    let total = out.len();
    let limit = p.limit.unwrap_or(DEFAULT_LIMIT);
    if out.len() > limit {
        out.sort_by_key(|r| std::cmp::Reverse(r.end - r.start));
        out.truncate(limit);
        out.sort_by_key(|r| (r.start, r.depth));
    }
    let levels = out.iter().map(|r| r.depth + 1).max().unwrap_or(0);
    Ok(AnnotationsAnswer { device: span.device, axis: span.axis, ranges: out, total, levels })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::corpus;

    #[test]
    fn a_file_without_annotations_has_an_empty_track() {
        let a = corpus("streams");
        let answer = annotations(&a, &AnnotationsParams::default()).expect("track");
        assert_eq!((answer.ranges.len(), answer.total, answer.levels), (0, 0, 0));
    }

    #[test]
    fn record_function_ranges_pair_up_on_both_axes() {
        // gpt_varlen records one `record_function` range per training step
        // (40 steps); the file stays in the corpus folder beside the checkout.
        let a = corpus("gpt_varlen");
        let device = a.snapshot.annotations.first().expect("annotations").device;
        let time =
            annotations(&a, &AnnotationsParams { device: Some(device), axis: Some(Axis::Time), ..Default::default() })
                .expect("time");
        let starts = a.snapshot.annotations.iter().filter(|n| n.stage == AnnotationStage::Start).count();
        assert_eq!(time.total, starts, "every START makes a range");
        assert!(time.ranges.iter().all(|r| r.end_us.is_some_and(|e| e >= r.start_us)), "every range closes");
        assert!(time.ranges.windows(2).all(|w| w[0].start_us <= w[1].start_us));
        let event =
            annotations(&a, &AnnotationsParams { device: Some(device), axis: Some(Axis::Event), ..Default::default() })
                .expect("event");
        assert_eq!(event.total, time.total);
        let rows = a.snapshot.device(device).expect("device").trace.len() as i64;
        assert!(event.ranges.iter().all(|r| r.start >= 0 && r.end <= rows && r.start < r.end), "rows");
        // A narrow window keeps only the ranges crossing it.
        let mid = &time.ranges[time.ranges.len() / 2];
        let narrow = annotations(
            &a,
            &AnnotationsParams {
                device: Some(device),
                axis: Some(Axis::Time),
                start: Some(mid.start),
                end: Some(mid.start + 1),
                ..Default::default()
            },
        )
        .expect("narrow");
        assert!(narrow.ranges.iter().any(|r| r.name == mid.name) && narrow.total < time.total);
    }
}
