//! Leak finding: the allocations still alive when the snapshot was taken,
//! grouped by stack, ranked by how steadily they accumulated over the run.
//!
//! Live bytes alone rank the wrong things first: parameters and optimizer
//! state are large, alive at the end, and allocated once at the start; the
//! activations of the step in progress are large and alive, and will be
//! freed. A leak is what piles up step after step. So the trace is cut into
//! steps ([`super::steps`]) and each live allocation is assigned to the step
//! that allocated it (an allocation from before the trace, a ghost, to the
//! first). The first step (with setup: parameters, optimizer state created
//! at the first `optimizer.step()`), the last step (in progress, or holding
//! the last step's outputs) and any tail after the loop are set aside; over
//! the steps in between, the *completed steps* ([`Steps::completed`]), a
//! stack's score is
//!
//! `score = (bytes retained from completed steps / completed steps)
//!          × (completed steps that retained any / completed steps)`
//!
//! the mean bytes per step it keeps, weighted by how regularly it keeps
//! them: a cache allocated once in one step of twenty scores a twentieth of
//! a leak that keeps as many bytes every step. Sizes are requested
//! (unrounded) bytes. A trace with too few steps to set any aside counts
//! every step.

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use super::steps::{StepSource, Steps};
use super::{FrameText, stack_text};
use crate::intervals::DeviceIntervals;
use crate::snapshot::{DeviceSnapshot, Snapshot, StackId};

/// How a stack's live allocations are spread over the steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// Retained from at least half of the completed steps (and two or
    /// more): the signature of a leak.
    Growing,
    /// Retained from some completed steps, fewer than half.
    Sporadic,
    /// Nothing from completed steps; some allocated in the first step or
    /// before the trace (parameters, optimizer state, caches): steady state.
    Setup,
    /// Allocated in the last step or after the loop only (work in flight
    /// when the snapshot was taken, the last step's outputs).
    LastStep,
}

/// One stack's live allocations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeakCandidate {
    /// 1 for the highest score.
    pub rank: u32,
    /// The stack, innermost frame first.
    pub frames: Vec<FrameText>,
    /// Requested bytes alive at the end.
    pub live_bytes: u64,
    /// Allocations alive at the end.
    pub live_count: u64,
    /// Of those, allocated before the trace began (ghosts).
    pub ghost_count: u64,
    /// Bytes retained from completed steps, divided by the number of
    /// completed steps: how fast the stack grows.
    pub growth_bytes_per_step: u64,
    /// Completed steps that allocated something still alive at the end.
    pub steps_with_growth: u32,
    /// The ranking figure (see the module doc).
    pub score: u64,
    /// How the live allocations are spread.
    pub pattern: Pattern,
    /// Live bytes by the step that allocated them, one entry per step of
    /// [`DeviceLeaks::steps`] (cumulated, the stack's retained memory over time).
    pub retained_by_step: Vec<u64>,
    /// Trace row of the first live allocation (`None`: ghosts only).
    pub first_alloc_row: Option<u32>,
    /// Trace row of the last live allocation.
    pub last_alloc_row: Option<u32>,
}

/// Leak ranking of one device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceLeaks {
    /// CUDA device index.
    pub device: u32,
    /// The trace's steps.
    pub steps: Steps,
    /// How many steps count as completed ([`Steps::completed`]).
    pub completed_steps: u32,
    /// Requested bytes alive at the end, all stacks.
    pub live_bytes: u64,
    /// Allocations alive at the end, all stacks.
    pub live_count: u64,
    /// Bytes retained from completed steps per completed step, all stacks.
    pub growth_bytes_per_step: u64,
    /// Stacks with the [`Pattern::Growing`] pattern.
    pub growing_stacks: u32,
    /// Stacks with live allocations.
    pub stacks: u32,
    /// The highest-ranked stacks, best first (at most the `top` asked for).
    pub candidates: Vec<LeakCandidate>,
    /// The device has no trace: every live allocation is a ghost, nothing
    /// can be said about growth.
    pub no_trace: bool,
}

/// Leak ranking of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeakReport {
    /// One per device with segments or a trace.
    pub devices: Vec<DeviceLeaks>,
}

impl LeakReport {
    /// Rank the live allocations of every device, keeping the `top` best stacks of each.
    pub fn build(snapshot: &Snapshot, top: usize) -> LeakReport {
        let devices = snapshot.devices.iter().map(|d| DeviceLeaks::build(snapshot, d, &DeviceIntervals::build(d), top));
        LeakReport { devices: devices.collect() }
    }
}

#[derive(Default)]
struct Acc {
    bytes: u64,
    count: u64,
    ghosts: u64,
    by_step: Vec<u64>,
    first: Option<u32>,
    last: Option<u32>,
}

impl DeviceLeaks {
    /// Rank one device's live allocations, keeping the `top` best stacks.
    pub fn build(snapshot: &Snapshot, device: &DeviceSnapshot, index: &DeviceIntervals, top: usize) -> DeviceLeaks {
        let steps = Steps::find(snapshot, device);
        let n = steps.steps.len().max(1);
        let completed = steps.completed();
        let m = completed.len() as u64;

        let mut by_stack: FxHashMap<StackId, Acc> = FxHashMap::default();
        // Freed by the program (pending free) is not live.
        for a in index.allocations.iter().filter(|a| a.free_requested_row.is_none() && a.free_completed_row.is_none()) {
            let acc = by_stack.entry(a.stack).or_insert_with(|| Acc { by_step: vec![0; n], ..Acc::default() });
            let step = a.alloc_row.get().map_or(0, |r| steps.step_of(r));
            acc.bytes += a.size;
            acc.count += 1;
            acc.by_step[step] += a.size;
            match a.alloc_row.get() {
                None => acc.ghosts += 1,
                Some(r) => {
                    acc.first = Some(acc.first.map_or(r, |f| f.min(r)));
                    acc.last = Some(acc.last.map_or(r, |l| l.max(r)));
                }
            }
        }

        // Frames are looked up for the listed stacks only, after ranking.
        let mut candidates: Vec<(StackId, LeakCandidate)> = by_stack
            .into_iter()
            .map(|(stack, acc)| {
                let growth: u64 = acc.by_step[completed.clone()].iter().sum();
                let with_growth = acc.by_step[completed.clone()].iter().filter(|&&b| b > 0).count() as u64;
                let per_step = growth.checked_div(m).unwrap_or(0);
                let score = (per_step as u128 * with_growth as u128).checked_div(m as u128).unwrap_or(0) as u64;
                let pattern = if with_growth >= 2 && 2 * with_growth >= m {
                    Pattern::Growing
                } else if with_growth > 0 {
                    Pattern::Sporadic
                } else if acc.by_step[0] > 0 {
                    Pattern::Setup
                } else {
                    Pattern::LastStep
                };
                let candidate = LeakCandidate {
                    rank: 0,
                    frames: Vec::new(),
                    live_bytes: acc.bytes,
                    live_count: acc.count,
                    ghost_count: acc.ghosts,
                    growth_bytes_per_step: per_step,
                    steps_with_growth: with_growth as u32,
                    score,
                    pattern,
                    retained_by_step: acc.by_step,
                    first_alloc_row: acc.first,
                    last_alloc_row: acc.last,
                };
                (stack, candidate)
            })
            .collect();
        // Ties go to the stack interned first, so the order is the same on every run.
        candidates
            .sort_by_key(|(stack, c)| (std::cmp::Reverse((c.score, c.growth_bytes_per_step, c.live_bytes)), *stack));
        let live_bytes = candidates.iter().map(|(_, c)| c.live_bytes).sum();
        let live_count = candidates.iter().map(|(_, c)| c.live_count).sum();
        let growth: u64 =
            candidates.iter().map(|(_, c)| c.retained_by_step[completed.clone()].iter().sum::<u64>()).sum();
        let growing_stacks = candidates.iter().filter(|(_, c)| c.pattern == Pattern::Growing).count() as u32;
        let stacks = candidates.len() as u32;
        candidates.truncate(top);
        let candidates: Vec<LeakCandidate> = candidates
            .into_iter()
            .enumerate()
            .map(|(k, (stack, c))| LeakCandidate { rank: k as u32 + 1, frames: stack_text(snapshot, stack), ..c })
            .collect();
        DeviceLeaks {
            device: device.device,
            no_trace: !device.has_trace || device.trace.is_empty(),
            completed_steps: m as u32,
            steps,
            live_bytes,
            live_count,
            growth_bytes_per_step: growth.checked_div(m).unwrap_or(0),
            growing_stacks,
            stacks,
            candidates,
        }
    }

    /// A few words on where the steps came from, for people.
    pub fn step_source_text(&self) -> String {
        match &self.steps.source {
            StepSource::Numbered { prefix } => format!("record_function ranges {prefix}0, {prefix}1, …"),
            StepSource::OptimizerSteps => "ends of Optimizer.step ranges".to_owned(),
            StepSource::EvenParts => "no step annotations: the trace cut into equal parts".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::testing::Build;
    use crate::snapshot::{Action, BlockState};

    #[test]
    fn without_annotations_the_trace_is_cut_evenly_and_ghosts_are_setup() {
        let mut b = Build::new();
        let kept = b.stack(&[("/srv/jobs/t.py", 7, "loop")]);
        let ghost = b.stack(&[("/srv/jobs/t.py", 2, "init")]);
        let base = 0x1000_0000;
        // Twenty entries; one kept 512-byte tensor every other entry.
        for k in 0..10u64 {
            b.event(Action::Alloc, base + 1024 * k, 512, kept);
            b.event(Action::Snapshot, 0, 0, 0);
        }
        // The kept tensors with gaps between, then one allocated before the trace.
        let mut blocks: Vec<_> = (0..10)
            .flat_map(|_| [(512, BlockState::ActiveAllocated, 512, kept), (512, BlockState::Inactive, 0, 0)])
            .collect();
        blocks.push((512, BlockState::ActiveAllocated, 100, ghost));
        b.segment(base, true, &blocks);
        let snapshot = b.finish();
        let d = &LeakReport::build(&snapshot, 10).devices[0];
        assert_eq!(d.steps.source, StepSource::EvenParts);
        assert_eq!((d.steps.steps.len(), d.completed_steps), (10, 8));
        let top = &d.candidates[0];
        assert_eq!(
            (top.pattern, top.live_count, top.steps_with_growth, top.growth_bytes_per_step),
            (Pattern::Growing, 10, 8, 512)
        );
        assert_eq!((top.first_alloc_row, top.last_alloc_row), (Some(0), Some(18)));
        let init = &d.candidates[1];
        assert_eq!((init.pattern, init.ghost_count, init.live_bytes), (Pattern::Setup, 1, 100));
        assert_eq!(init.first_alloc_row, None);
        assert_eq!((d.live_count, d.stacks, d.growing_stacks), (11, 2, 1));
    }
}
