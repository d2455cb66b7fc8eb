//! Training steps as ranges of trace rows, found in the snapshot's
//! `record_function` annotations (`external_annotations`).
//!
//! Where the boundaries come from, in order of preference:
//! 1. a numbered family of ranges: `step0`, `step1`, … (or `ProfilerStep#3`,
//!    `iter_12`): names that end in a number after a common prefix, the
//!    family with the most `START` entries;
//! 2. optimizer steps: the `Optimizer.step#AdamW.step` ranges PyTorch records
//!    by itself;
//! 3. neither (or a trace without times): the trace cut into ten equal parts.
//!
//! A step ends where its range ends; it begins where the previous one ended,
//! so the work between two ranges (loading the next batch) belongs to the
//! step it prepares, and setup belongs to the first step. Rows after the
//! last end are either a step in progress (a numbered range started and
//! never ended; for optimizer steps, a span at least a quarter as long as
//! the median step) or a tail (the program after its loop).
//!
//! Annotations carry times, not rows: a boundary at time `t` falls on the
//! first row whose `time_us` is at least `t`.

use serde::{Deserialize, Serialize};

use crate::snapshot::{AnnotationStage, DeviceSnapshot, Snapshot};

/// Parts the trace is cut into when it has no step annotations.
pub const EVEN_PARTS: usize = 10;

/// Where the step boundaries came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum StepSource {
    /// Numbered `record_function` ranges sharing a prefix (`step0`, `step1`, …).
    Numbered {
        /// The shared prefix, e.g. `"step"`.
        prefix: String,
    },
    /// Ends of `Optimizer.step#…` ranges.
    OptimizerSteps,
    /// No usable annotations: the trace's rows cut into equal parts.
    EvenParts,
}

/// One step: rows `start_row..end_row` of the device's trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// The annotation's name (`step12`), or a generated one (`step 3` for
    /// optimizer steps, `part 4/10`, `after the last step` for a tail).
    pub name: String,
    /// First row (inclusive).
    pub start_row: u32,
    /// Last row (exclusive).
    pub end_row: u32,
}

/// A device's trace cut into steps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Steps {
    /// Where the boundaries came from.
    pub source: StepSource,
    /// The steps, tiling `0..trace length` in order (empty spans dropped).
    pub steps: Vec<Step>,
    /// Index in `steps` of the last training step: the last span, or the one
    /// before it when the last span is a tail after the loop.
    pub last_step: usize,
}

impl Steps {
    /// The step holding `row` (the last one for rows past the end).
    pub fn step_of(&self, row: u32) -> usize {
        self.steps.partition_point(|s| s.end_row <= row).min(self.steps.len().saturating_sub(1))
    }

    /// The steps with training before and after them: all but the first
    /// (setup, and optimizers creating their state), the last training step
    /// (in progress, or holding the last step's outputs) and any tail. With
    /// too few steps for that, all of them.
    pub fn completed(&self) -> std::ops::Range<usize> {
        if 1 < self.last_step { 1..self.last_step } else { 0..self.steps.len() }
    }

    /// Whether a step is the tail after the last training step.
    pub fn is_tail(&self, step: usize) -> bool {
        step > self.last_step
    }

    /// Find the steps of one device's trace.
    pub fn find(snapshot: &Snapshot, device: &DeviceSnapshot) -> Steps {
        let rows = device.trace.len() as u32;
        if device.trace.has_time() {
            if let Some(steps) = numbered(snapshot, device) {
                return steps;
            }
            if let Some(steps) = optimizer_steps(snapshot, device) {
                return steps;
            }
        }
        let parts = (EVEN_PARTS as u32).min(rows).max(1);
        let steps: Vec<Step> = (0..parts)
            .map(|k| Step {
                name: format!("part {}/{parts}", k + 1),
                start_row: (rows as u64 * k as u64 / parts as u64) as u32,
                end_row: (rows as u64 * (k + 1) as u64 / parts as u64) as u32,
            })
            .collect();
        Steps { source: StepSource::EvenParts, last_step: steps.len() - 1, steps }
    }
}

/// The first row at or after time `t`.
fn row_at(device: &DeviceSnapshot, t: i64) -> u32 {
    device.trace.times_us().partition_point(|&x| x < t) as u32
}

/// Split a name into a prefix and a trailing number (`step12` → `step`, 12).
fn numbered_name(name: &str) -> Option<(&str, u64)> {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 || digits == name.len() || digits > 18 {
        return None;
    }
    let (prefix, number) = name.split_at(name.len() - digits);
    Some((prefix, number.parse().ok()?))
}

/// What follows the last step's end.
enum Trailing {
    /// A step that started and did not end, with its name.
    InProgress(String),
    /// The program after its loop.
    Tail,
    /// Decide by length: a step in progress if at least a quarter of the median step.
    ByLength,
}

fn numbered(snapshot: &Snapshot, device: &DeviceSnapshot) -> Option<Steps> {
    let marks: Vec<(&str, u64, AnnotationStage, i64)> = snapshot
        .annotations
        .iter()
        .filter(|a| a.device == device.device)
        .filter_map(|a| numbered_name(&a.name).map(|(p, n)| (p, n, a.stage, a.time_us)))
        .collect();
    // The family with the most starts; on a tie, the shorter prefix.
    let mut families: Vec<(&str, usize)> = Vec::new();
    for &(prefix, ..) in marks.iter().filter(|m| m.2 == AnnotationStage::Start) {
        match families.iter_mut().find(|(p, _)| *p == prefix) {
            Some((_, n)) => *n += 1,
            None => families.push((prefix, 1)),
        }
    }
    let (prefix, count) = families.iter().copied().max_by_key(|&(p, n)| (n, std::cmp::Reverse(p.len())))?;
    if count < 2 {
        return None;
    }
    let mut family: Vec<(i64, AnnotationStage, String)> =
        marks.iter().filter(|m| m.0 == prefix).map(|&(p, n, stage, t)| (t, stage, format!("{p}{n}"))).collect();
    family.sort_by_key(|m| m.0);
    let mut ends: Vec<(u32, String)> = family
        .iter()
        .filter(|m| m.1 == AnnotationStage::End)
        .map(|(t, _, name)| (row_at(device, *t), name.clone()))
        .collect();
    // The last step to start is still open when no end of its name follows.
    let open = family
        .iter()
        .rev()
        .find(|m| m.1 == AnnotationStage::Start)
        .filter(|start| !family.iter().any(|m| m.1 == AnnotationStage::End && m.2 == start.2 && m.0 >= start.0));
    if ends.is_empty() {
        // Ranges without ends: each step ends where the next starts.
        let starts: Vec<&(i64, AnnotationStage, String)> = family.iter().collect();
        ends = starts.windows(2).map(|w| (row_at(device, w[1].0), w[0].2.clone())).collect();
    }
    let trailing = match open {
        Some(m) => Trailing::InProgress(m.2.clone()),
        None => Trailing::Tail,
    };
    Some(build(device, StepSource::Numbered { prefix: prefix.to_owned() }, ends, trailing))
}

fn optimizer_steps(snapshot: &Snapshot, device: &DeviceSnapshot) -> Option<Steps> {
    let mut ends: Vec<i64> = snapshot
        .annotations
        .iter()
        .filter(|a| a.device == device.device && a.stage == AnnotationStage::End)
        .filter(|a| a.name.starts_with("Optimizer.step#"))
        .map(|a| a.time_us)
        .collect();
    if ends.len() < 2 {
        return None;
    }
    ends.sort_unstable();
    let ends = ends.iter().enumerate().map(|(k, &t)| (row_at(device, t), format!("step {}", k + 1))).collect();
    Some(build(device, StepSource::OptimizerSteps, ends, Trailing::ByLength))
}

/// Steps from the rows where each ends, plus what follows the last.
fn build(device: &DeviceSnapshot, source: StepSource, ends: Vec<(u32, String)>, trailing: Trailing) -> Steps {
    let rows = device.trace.len() as u32;
    let mut steps = Vec::with_capacity(ends.len() + 1);
    let mut start = 0;
    for (row, name) in ends {
        let row = row.clamp(start, rows);
        if row > start {
            steps.push(Step { name, start_row: start, end_row: row });
        }
        start = row;
    }
    let mut last_step = steps.len().saturating_sub(1);
    if start < rows {
        let in_progress = match trailing {
            Trailing::InProgress(name) => Some(name),
            Trailing::Tail => None,
            Trailing::ByLength => {
                let mut lengths: Vec<u32> = steps.iter().map(|s| s.end_row - s.start_row).collect();
                lengths.sort_unstable();
                let median = lengths.get(lengths.len() / 2).copied().unwrap_or(0);
                (4 * (rows - start) >= median).then(|| format!("step {} (in progress)", steps.len() + 1))
            }
        };
        let is_step = in_progress.is_some();
        let name = in_progress.unwrap_or_else(|| "after the last step".to_owned());
        steps.push(Step { name, start_row: start, end_row: rows });
        if is_step || steps.len() == 1 {
            last_step = steps.len() - 1;
        }
    }
    if steps.is_empty() {
        steps.push(Step { name: "whole trace".to_owned(), start_row: 0, end_row: rows });
    }
    Steps { source, steps, last_step }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::testing::Build;
    use crate::snapshot::Action;

    /// Steps `step0..step{n}` of four entries each, the last one unfinished
    /// when `open`, then `after` entries after the loop.
    fn run(n: usize, open: bool, after: usize) -> Snapshot {
        let mut b = Build::new();
        b.event(Action::SegmentAlloc, 0, 1 << 21, 0);
        for k in 0..n {
            b.annotate(AnnotationStage::Start, &format!("step{k}"));
            for _ in 0..4 {
                b.event(Action::Snapshot, 0, 0, 0);
            }
            if !(open && k == n - 1) {
                b.annotate(AnnotationStage::End, &format!("step{k}"));
            }
            b.annotate(AnnotationStage::Start, "Optimizer.zero_grad#SGD.zero_grad");
        }
        for _ in 0..after {
            b.event(Action::Snapshot, 0, 0, 0);
        }
        b.finish()
    }

    #[test]
    fn numbered_steps_end_where_their_ranges_end() {
        let snapshot = run(5, false, 3);
        let steps = Steps::find(&snapshot, &snapshot.devices[0]);
        assert_eq!(steps.source, StepSource::Numbered { prefix: "step".into() });
        let spans: Vec<(&str, u32, u32)> =
            steps.steps.iter().map(|s| (s.name.as_str(), s.start_row, s.end_row)).collect();
        // The segment before step0 belongs to step0; three entries after the loop are a tail.
        assert_eq!(
            spans,
            [
                ("step0", 0, 5),
                ("step1", 5, 9),
                ("step2", 9, 13),
                ("step3", 13, 17),
                ("step4", 17, 21),
                ("after the last step", 21, 24)
            ]
        );
        assert_eq!(steps.last_step, 4);
        assert_eq!(steps.completed(), 1..4);

        // A step that started and never ended (an OOM) is the last step.
        let snapshot = run(5, true, 0);
        let steps = Steps::find(&snapshot, &snapshot.devices[0]);
        assert_eq!(steps.steps.last().map(|s| s.name.as_str()), Some("step4"));
        assert_eq!((steps.steps.len(), steps.last_step), (5, 4));
    }

    #[test]
    fn numbered_names_split_prefix_and_number() {
        assert_eq!(numbered_name("step12"), Some(("step", 12)));
        assert_eq!(numbered_name("ProfilerStep#3"), Some(("ProfilerStep#", 3)));
        assert_eq!(numbered_name("42"), None);
        assert_eq!(numbered_name("forward"), None);
    }

    #[test]
    fn step_of_finds_the_span_holding_a_row() {
        let steps = Steps {
            source: StepSource::EvenParts,
            steps: vec![
                Step { name: "a".into(), start_row: 0, end_row: 3 },
                Step { name: "b".into(), start_row: 3, end_row: 7 },
            ],
            last_step: 1,
        };
        assert_eq!([0, 2, 3, 6, 7, 100].map(|r| steps.step_of(r)), [0, 0, 1, 1, 1, 1]);
        assert_eq!(steps.completed(), 0..2, "too few steps: all count");
    }

    #[test]
    fn completed_steps_leave_out_the_first_the_last_and_the_tail() {
        let span = |k: u32| Step { name: format!("s{k}"), start_row: k, end_row: k + 1 };
        let mut steps = Steps { source: StepSource::EvenParts, steps: (0..5).map(span).collect(), last_step: 4 };
        assert_eq!(steps.completed(), 1..4);
        steps.last_step = 3;
        assert_eq!(steps.completed(), 1..3);
        assert!(steps.is_tail(4) && !steps.is_tail(3));
        steps.last_step = 1;
        assert_eq!(steps.completed(), 0..5);
    }
}
