//! The largest size that fits under a capacity, found by replaying
//! candidates on a grid of the search's step (1, every integer size,
//! unless the caller asks for multiples).
//!
//! Fit is not monotonic in the size, so no formula and no plain bisection
//! can be trusted alone:
//!
//! 1. A floor under the reserved peak ([`Model::floor_bytes`], the highest
//!    sum of live rounded requests, no replay) bounds the search from above:
//!    a size whose floor is over the capacity runs out for sure.
//! 2. When the grid below that bound has at most [`SCAN_LIMIT`] sizes (and
//!    replaying them all stays under [`SCAN_EVENTS`]), every one is
//!    replayed: the answer is exact on the grid, dips included.
//! 3. Otherwise it bisects (two sizes a round, for two cores), then replays
//!    a few sizes on each side of the boundary it found ([`WINDOW_BELOW`],
//!    [`WINDOW_ABOVE`]), so a dip or a fit again close to it is seen;
//!    farther ones are not, and the answer says so.
//!
//! Given a hint (another setting's answer, when settings are compared), the
//! bisection's bracket is found by galloping out from the hint instead of
//! from the largest recorded size: settings move the answer by a few sizes,
//! so a round or two brackets it where bisection over the whole range
//! takes five or six.

use std::collections::BTreeMap;

use super::{Dip, Model, SizePrediction};
use crate::simulate::AllocatorConfig;

/// Most grid sizes replayed one by one.
pub const SCAN_LIMIT: u64 = 48;
/// Most program events replayed by a scan of every grid size (sizes ×
/// events): past it (a long trace), bisection. About 3 s of replays on
/// two cores.
pub const SCAN_EVENTS: u64 = 12_000_000;
/// Grid sizes replayed below a bisection's boundary (each a whole replay:
/// they fit) and above it (each stops where it runs out: cheap).
pub const WINDOW_BELOW: u64 = 2;
/// See [`WINDOW_BELOW`].
pub const WINDOW_ABOVE: u64 = 6;
/// The largest size the search goes to.
const MAX_SIZE: u64 = 1 << 40;

/// What the search found.
#[derive(Clone, Debug, Default)]
pub struct Largest {
    /// The grid's step.
    pub step: u64,
    /// The largest size that fits, replayed.
    pub largest: Option<SizePrediction>,
    /// The smallest size above it that does not, replayed.
    pub first_failure: Option<SizePrediction>,
    /// Every size replayed, by size.
    pub tried: Vec<SizePrediction>,
    /// Sizes that run out below a size that fits.
    pub dips: Vec<Dip>,
    /// What to know about the search.
    pub notes: Vec<String>,
}

/// Replays a batch of sizes: [`super::replay_sequentially`], or in
/// parallel where the caller can ([`super::replay_in_parallel`]).
pub type ReplayMany<'r> = &'r dyn Fn(&Model<'_>, &[u64], &AllocatorConfig, Option<u64>) -> Vec<SizePrediction>;

struct Search<'m, 'a, 'r> {
    model: &'m Model<'a>,
    config: &'m AllocatorConfig,
    capacity: u64,
    step: u64,
    replay_many: ReplayMany<'r>,
    /// Replayed, by grid index (size / step).
    replayed: BTreeMap<u64, SizePrediction>,
}

impl Search<'_, '_, '_> {
    fn fits_floor(&self, k: u64) -> bool {
        self.model.floor_bytes(k * self.step, self.config) <= self.capacity
    }

    /// Replay the grid indices not replayed yet (those over the floor fail
    /// without a replay); true for each that fits.
    fn run(&mut self, ks: &[u64]) -> Vec<bool> {
        let todo: Vec<u64> =
            ks.iter().copied().filter(|k| !self.replayed.contains_key(k) && self.fits_floor(*k)).collect();
        let sizes: Vec<u64> = todo.iter().map(|k| k * self.step).collect();
        for (k, p) in todo.iter().zip((self.replay_many)(self.model, &sizes, self.config, Some(self.capacity))) {
            self.replayed.insert(*k, p);
        }
        ks.iter().map(|k| self.replayed.get(k).is_some_and(|p| !p.oom)).collect()
    }

    fn replay_one(&mut self, k: u64) -> SizePrediction {
        if let Some(p) = self.replayed.get(&k) {
            return p.clone();
        }
        let p = self.model.replay(k * self.step, self.config, Some(self.capacity));
        self.replayed.insert(k, p.clone());
        p
    }
}

/// A bracket `(lo, hi)` for the bisection, `lo` fitting (or 0) and `hi`
/// not (or `bound`), found by galloping from grid index `start` (in
/// `1..bound`): two sizes a round, at distances 1 and 2, then 2 and 4, ...
/// up when `start` fits, down when it does not.
fn gallop(s: &mut Search<'_, '_, '_>, start: u64, bound: u64) -> (u64, u64) {
    let first: Vec<u64> = [start, start + 1].into_iter().filter(|k| *k < bound).collect();
    let fits = s.run(&first);
    if !fits[0] {
        let mut hi = start;
        let mut d = 1;
        loop {
            let picks: Vec<u64> =
                [hi.saturating_sub(d), hi.saturating_sub(2 * d)].into_iter().filter(|k| *k >= 1).collect();
            if picks.is_empty() {
                return (0, hi);
            }
            let fits = s.run(&picks);
            // Picks go down: the first that fits is the highest.
            if let Some(i) = fits.iter().position(|f| *f) {
                let above = if i == 0 { hi } else { picks[i - 1] };
                return (picks[i], above);
            }
            hi = picks[picks.len() - 1];
            d *= 2;
        }
    }
    let mut lo = match fits.get(1) {
        Some(true) => start + 1,
        Some(false) => return (start, start + 1),
        None => return (start, bound),
    };
    let mut d = 1;
    loop {
        let picks: Vec<u64> = [lo + d, lo + 2 * d].into_iter().filter(|k| *k < bound).collect();
        if picks.is_empty() {
            return (lo, bound);
        }
        let fits = s.run(&picks);
        // Picks go up: the first that fails closes the bracket.
        if let Some(i) = fits.iter().position(|f| !*f) {
            let below = if i == 0 { lo } else { picks[i - 1] };
            return (below, picks[i]);
        }
        lo = picks[picks.len() - 1];
        d *= 2;
    }
}

/// Search the largest size that fits under `capacity` (see the module doc).
pub(crate) fn largest(
    model: &Model<'_>,
    config: &AllocatorConfig,
    capacity: u64,
    step: Option<u64>,
    hint: Option<u64>,
    replay_many: ReplayMany<'_>,
) -> Largest {
    let recorded = model.recorded_sizes();
    // Every integer size unless told otherwise: stepping by the recorded
    // sizes' spacing missed real answers (runs at 4 and 8 under an 8 GiB
    // cap: 24 by 4, where 26 is the largest that fits, issue 43).
    let step = step.filter(|s| *s > 0).unwrap_or(1);
    let mut s = Search { model, config, capacity, step, replay_many, replayed: BTreeMap::new() };
    let mut notes = Vec::new();

    // The bound above: the first grid index, doubling from the largest
    // recorded size, whose floor is over the capacity.
    let reference_k = (recorded.first().copied().unwrap_or(step) / step).max(1);
    let mut bound = reference_k;
    while s.fits_floor(bound) && bound * step < MAX_SIZE {
        bound *= 2;
    }
    let unbounded = s.fits_floor(bound);
    if unbounded {
        notes.push(format!(
            "every size up to {} stays under the capacity by the floor of live requests; the search stops there",
            bound * step
        ));
    }
    // Grid indices 1..bound may fit.
    let candidates = bound - 1;
    if candidates <= SCAN_LIMIT && candidates * model.events() <= SCAN_EVENTS {
        let all: Vec<u64> = (1..bound).collect();
        s.run(&all);
    } else {
        let (mut lo, mut hi) = match hint {
            Some(size) => gallop(&mut s, (size / step).clamp(1, bound - 1), bound),
            None if s.run(&[reference_k])[0] => (reference_k, bound),
            None => (0, reference_k),
        };
        while hi - lo > 1 {
            let gap = hi - lo;
            let picks: Vec<u64> = [lo + gap / 3, lo + 2 * gap / 3]
                .into_iter()
                .filter(|k| *k > lo && *k < hi)
                .chain((gap == 2).then_some(lo + 1))
                .collect::<std::collections::BTreeSet<u64>>()
                .into_iter()
                .collect();
            let fits = s.run(&picks);
            match picks.iter().zip(&fits).find(|(_, f)| !**f) {
                Some((&fail, _)) => {
                    lo =
                        picks.iter().zip(&fits).filter(|(k, f)| **f && **k < fail).map(|(k, _)| *k).max().unwrap_or(lo);
                    hi = fail;
                }
                None => lo = picks.last().copied().unwrap_or(lo),
            }
        }
        // Around the boundary: a fit again above it, a dip below it.
        let around: Vec<u64> = (lo.saturating_sub(WINDOW_BELOW).max(1)..(hi + 1 + WINDOW_ABOVE).min(bound)).collect();
        s.run(&around);
        notes.push(format!(
            "searched by bisection over {candidates} sizes (step {step}), then {WINDOW_BELOW} sizes below the \
             boundary and {WINDOW_ABOVE} above; a dip or a fit farther from it is not looked for (a --step that \
             leaves at most {SCAN_LIMIT} sizes scans every one)"
        ));
    }

    let largest_k = s.replayed.iter().rev().find(|(_, p)| !p.oom).map(|(k, _)| *k);
    let first_failure_k = match largest_k {
        Some(k) => ((k + 1)..=bound).find(|i| s.replayed.get(i).is_none_or(|p| p.oom)),
        None => Some(1),
    };
    let first_failure = first_failure_k.filter(|k| !(unbounded && *k == bound)).map(|k| s.replay_one(k));
    let largest = largest_k.and_then(|k| s.replayed.get(&k).cloned());
    let tried: Vec<SizePrediction> = s.replayed.values().cloned().collect();
    let mut dips = Vec::new();
    if let Some(top) = largest_k {
        let mut fails: Option<u64> = None;
        for (k, p) in s.replayed.range(..=top) {
            match (p.oom, fails) {
                (true, None) => fails = Some(*k),
                (false, Some(f)) => {
                    dips.push(Dip { fails: f * step, fits: k * step });
                    fails = None;
                }
                _ => {}
            }
        }
    }
    if let Some(d) = dips.first() {
        notes.push(format!(
            "not monotonic: size {} runs out of memory while {} fits (the cache holds other blocks at each size; \
             the allocator frees it and retries before failing)",
            d.fails, d.fits
        ));
    }
    Largest { step, largest, first_failure, tried, dips, notes }
}
