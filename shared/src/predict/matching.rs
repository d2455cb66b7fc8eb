//! Matching the runs' allocations to the reference run's: Myers' diff over
//! the allocations, equal when they share a stack and sizes one polynomial
//! term links; then what is left paired by place (library workspaces).

use rustc_hash::FxHashMap;

use super::program::Program;
use super::{Run, RunSummary, Unmatched, shown_frames};
use crate::analysis::stack_text;
use crate::stats::DeviceStats;

/// The diff's time limit per pair of runs: past it the alignment is coarser
/// (fewer allocations matched, which the answer reports), never wrong.
#[cfg(not(target_arch = "wasm32"))]
const MATCH_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

/// The reference's allocations as found in every run.
pub(super) struct Matching {
    /// `sizes[a][k]`: allocation `a`'s size in run `k`, where found.
    pub(super) sizes: Vec<Vec<Option<u64>>>,
    /// Matched (stack and size) in every run.
    pub(super) matched_in_all: Vec<bool>,
    /// Paired by place only in some run: a library's workspace.
    pub(super) loose: Vec<bool>,
    /// The runs, as the answer names them.
    pub(super) runs: Vec<RunSummary>,
    /// What some runs have and others not, by stack, most first.
    pub(super) unmatched: Vec<Unmatched>,
}

/// Match every run's allocations to the reference's (`runs[0]`).
pub(super) fn match_runs(runs: &[Run<'_>], programs: &[Program], stats: &[DeviceStats]) -> Matching {
    let (reference, reference_program) = (runs[0], &programs[0]);
    let n = reference_program.allocations.len();
    let mut m = Matching {
        sizes: reference_program.allocations.iter().map(|a| vec![Some(a.size)]).collect(),
        matched_in_all: vec![true; n],
        loose: vec![false; n],
        runs: vec![RunSummary {
            name: reference.name.to_owned(),
            size: reference.size,
            allocations: n,
            matched: n,
            reserved_peak_bytes: stats[0].reserved_peak_bytes,
        }],
        unmatched: Vec::new(),
    };
    let reference_items = aligned(reference_program, reference.size);
    for (k, (run, program)) in runs.iter().zip(programs).enumerate().skip(1) {
        let pairs = align(&aligned(program, run.size), &reference_items);
        let by_place = pair_gaps(&pairs, program, reference_program);
        let mut used = vec![false; program.allocations.len()];
        for (a, (pair, place)) in pairs.iter().zip(&by_place).enumerate() {
            m.matched_in_all[a] &= pair.is_some();
            m.loose[a] |= place.is_some();
            let found = pair.or(*place);
            if let Some(o) = found {
                used[o as usize] = true;
            }
            m.sizes[a].push(found.map(|o| program.allocations[o as usize].size));
        }
        m.runs.push(RunSummary {
            name: run.name.to_owned(),
            size: run.size,
            allocations: program.allocations.len(),
            matched: used.iter().filter(|u| **u).count(),
            reserved_peak_bytes: stats[k].reserved_peak_bytes,
        });
        // What this run has and the reference has not.
        m.unmatched.extend(name_unmatched(run, program, |i| !used[i]));
    }
    // What the reference has and some run has not.
    let matched_in_all = &m.matched_in_all;
    m.unmatched.extend(name_unmatched(&reference, reference_program, |a| !matched_in_all[a]));
    m.unmatched.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| b.bytes.cmp(&a.bytes)));
    m.unmatched.truncate(20);
    m
}

/// One allocation as the alignment compares it: its stack, its size, and
/// the knob of its run.
#[derive(Clone, Copy, Debug)]
struct Aligned {
    key: u64,
    size: u64,
    knob: u64,
}

impl PartialEq for Aligned {
    /// The same stack, and sizes that one polynomial term of the knob links:
    /// equal (a constant), in the knobs' ratio (a batch of activations), or
    /// in its square (attention scores over a sequence). Frameless
    /// allocations (autograd's backward thread under `stacks="python"`)
    /// share one stack, so the sizes are what tells them apart; a size that
    /// follows none of these (a library workspace chosen per shape) is left
    /// unmatched, and taken to grow with the knob.
    fn eq(&self, other: &Aligned) -> bool {
        let (a, b) = (self.size as u128, other.size as u128);
        let (x, y) = (self.knob as u128, other.knob as u128);
        self.key == other.key && (a == b || a * y == b * x || a * y * y == b * x * x)
    }
}

fn aligned(program: &Program, knob: u64) -> Vec<Aligned> {
    program.allocations.iter().map(|a| Aligned { key: a.key, size: a.size, knob }).collect()
}

/// For each reference allocation, the allocation of `other` it matches:
/// Myers' diff over the allocations, equal when [`Aligned`] says so.
///
/// Two runs of one program usually make the same calls in the same order:
/// then the pairs are by place (O(n)), and those whose sizes no term links
/// are left to [`pair_gaps`]. Otherwise the common head and tail are paired
/// first and only the middle is diffed: Myers' cost grows with the length
/// times the differences.
fn align(other: &[Aligned], reference: &[Aligned]) -> Vec<Option<u32>> {
    if other.len() == reference.len() && other.iter().zip(reference).all(|(o, r)| o.key == r.key) {
        return other.iter().zip(reference).enumerate().map(|(i, (o, r))| (o == r).then_some(i as u32)).collect();
    }
    let mut pairs = vec![None; reference.len()];
    let head = other.iter().zip(reference).take_while(|(o, r)| o == r).count();
    let tail = other[head..].iter().rev().zip(reference[head..].iter().rev()).take_while(|(o, r)| o == r).count();
    for (i, pair) in pairs.iter_mut().enumerate().take(head) {
        *pair = Some(i as u32);
    }
    for k in 0..tail {
        pairs[reference.len() - 1 - k] = Some((other.len() - 1 - k) as u32);
    }
    #[cfg(not(target_arch = "wasm32"))]
    let deadline = std::time::Instant::now().checked_add(MATCH_DEADLINE);
    // No clock in the browser: no limit.
    #[cfg(target_arch = "wasm32")]
    let deadline = None;
    let mut capture = similar::algorithms::Capture::new();
    // The hook only collects: it cannot fail.
    let _ = similar::algorithms::myers::diff_deadline_raw(
        &mut capture,
        other,
        head..other.len() - tail,
        reference,
        head..reference.len() - tail,
        deadline,
    );
    for op in capture.into_ops() {
        if let similar::DiffOp::Equal { old_index, new_index, len } = op {
            for k in 0..len {
                pairs[new_index + k] = Some((old_index + k) as u32);
            }
        }
    }
    pairs
}

/// Pairs by place what the alignment left unpaired: between two aligned
/// allocations, a run of the reference's and a run of `other`'s of the
/// same length and the same stacks, one by one, whatever their sizes (a
/// library's workspaces: same call, size chosen per shape).
fn pair_gaps(pairs: &[Option<u32>], other: &Program, reference: &Program) -> Vec<Option<u32>> {
    let mut by_place = vec![None; pairs.len()];
    // Anchors: (reference index, other index), in order, with sentinels.
    let anchors: Vec<(i64, i64)> = std::iter::once((-1, -1))
        .chain(pairs.iter().enumerate().filter_map(|(a, o)| Some((a as i64, i64::from((*o)?)))))
        .chain(std::iter::once((reference.allocations.len() as i64, other.allocations.len() as i64)))
        .collect();
    for w in anchors.windows(2) {
        let (r0, o0) = ((w[0].0 + 1) as usize, (w[0].1 + 1) as usize);
        let (r1, o1) = (w[1].0 as usize, w[1].1 as usize);
        if r1 <= r0 || o1 < o0 || r1 - r0 != o1 - o0 {
            continue;
        }
        let same_calls = (0..r1 - r0).all(|i| reference.allocations[r0 + i].key == other.allocations[o0 + i].key);
        if same_calls {
            for i in 0..r1 - r0 {
                by_place[r0 + i] = Some((o0 + i) as u32);
            }
        }
    }
    by_place
}

/// The allocations of `program` that `missing` picks, grouped by stack.
fn name_unmatched(run: &Run<'_>, program: &Program, missing: impl Fn(usize) -> bool) -> Vec<Unmatched> {
    let mut by_stack: FxHashMap<u64, (usize, u64, crate::snapshot::StackId)> = FxHashMap::default();
    for (_, a) in program.allocations.iter().enumerate().filter(|(i, _)| missing(*i)) {
        let e = by_stack.entry(a.key).or_insert((0, 0, a.stack));
        e.0 += 1;
        e.1 += a.size;
    }
    by_stack
        .into_values()
        .map(|(count, bytes, stack)| Unmatched {
            run: run.name.to_owned(),
            count,
            bytes,
            stack: shown_frames(&stack_text(run.snapshot, stack)),
        })
        .collect()
}
