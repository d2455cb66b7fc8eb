//! The three curves without a value per row: running values at the start
//! of every sub-block of rows, each sub-block's (min, max), sparse min/max
//! tables over blocks, and the replay of a sub-block from the trace's
//! action and size columns.

use super::{BLOCK, Range3};
use crate::column::Column;
use crate::snapshot::Action;

/// The trace columns the curves are replayed from.
#[derive(Debug)]
pub(super) struct Rows {
    pub(super) action: Column<u16>,
    pub(super) size: Column<u64>,
}

impl Rows {
    /// The columns as slices, taken once per query (a column access checks
    /// its representation; a slice access does not).
    pub(super) fn slices(&self) -> RowSlices<'_> {
        RowSlices { action: &self.action, size: &self.size }
    }
}

/// [`Rows`] borrowed as plain slices.
pub(super) struct RowSlices<'a> {
    pub(super) action: &'a [u16],
    pub(super) size: &'a [u64],
}

impl RowSlices<'_> {
    /// Apply row `r` to the running (unclamped) values of the curves.
    #[inline]
    pub(super) fn apply(&self, state: &mut [i128; 3], r: usize) {
        let d = DELTAS.get(usize::from(self.action[r])).copied().unwrap_or([0; 3]);
        let s = i128::from(self.size[r]);
        for c in 0..3 {
            // A select, not a multiplication: i128 products are slow.
            state[c] += match d[c] {
                1 => s,
                -1 => -s,
                _ => 0,
            };
        }
    }
}

/// What an action does to (`allocated`, `active`, `reserved`): add its
/// size, subtract it, or nothing. See the module's doc.
pub(super) const fn delta(action: Action) -> [i8; 3] {
    match action {
        Action::Alloc => [1, 1, 0],
        Action::FreeRequested => [-1, 0, 0],
        Action::FreeCompleted => [0, -1, 0],
        Action::SegmentAlloc | Action::SegmentMap => [0, 0, 1],
        Action::SegmentFree | Action::SegmentUnmap => [0, 0, -1],
        Action::Snapshot | Action::Oom | Action::Other => [0, 0, 0],
    }
}

/// [`delta`] by action code: a table lookup instead of a branch per row.
pub(super) const DELTAS: [[i8; 3]; Action::KNOWN.len()] = {
    let mut table = [[0i8; 3]; Action::KNOWN.len()];
    let mut i = 0;
    while i < table.len() {
        table[i] = delta(Action::KNOWN[i].1);
        i += 1;
    }
    table
};

/// Rows per sub-block of the curves: the most rows a query replays at a
/// bucket edge.
pub(super) const SUB: usize = 32;
/// Sub-blocks per block of the min/max tables.
pub(super) const SUBS_PER_BLOCK: usize = BLOCK / SUB;

/// The three curves, kept without a value per row: the running values at
/// the start of every sub-block of [`SUB`] rows with each sub-block's
/// (min, max), and min/max tables over whole blocks of [`BLOCK`] rows.
/// Inside a sub-block the values are replayed from the trace's columns:
/// 3 bytes per row instead of 24 for stored values, and a bucket edge
/// replays at most [`SUB`] rows.
#[derive(Debug)]
pub(super) struct Curves {
    /// Running values before each sub-block `s` (row `s · SUB`), one entry
    /// per sub-block and one past the last: `i128`s as (low, high) words,
    /// so that clamping happens on the output only, as the curves are
    /// defined.
    pub(super) sub_starts: Column<[u64; 6]>,
    /// Per sub-block, (min, max) of each curve: `[min0, max0, min1, ...]`.
    pub(super) sub_ranges: Column<[u64; 6]>,
    /// Per curve, `levels[k][j]` = (min, max) over blocks `j .. j + 2^k` (a
    /// sparse table over blocks): any run of whole blocks is the union of
    /// two overlapping entries.
    pub(super) levels: [Vec<Column<[u64; 2]>>; 3],
}

pub(super) fn pack(state: [i128; 3]) -> [u64; 6] {
    let mut out = [0u64; 6];
    for (c, v) in state.iter().enumerate() {
        out[2 * c] = *v as u64;
        out[2 * c + 1] = (*v >> 64) as u64;
    }
    out
}

pub(super) fn unpack(words: [u64; 6]) -> [i128; 3] {
    std::array::from_fn(|c| (i128::from(words[2 * c + 1] as i64) << 64) | i128::from(words[2 * c]))
}

/// Widen each curve's (min, max) to take in its value `v`.
#[inline]
pub(super) fn fold(mm: &mut [(u64, u64); 3], v: [u64; 3]) {
    for c in 0..3 {
        mm[c] = (mm[c].0.min(v[c]), mm[c].1.max(v[c]));
    }
}

/// Widen each curve's (min, max) by another's.
#[inline]
pub(super) fn fold_ranges(mm: &mut [(u64, u64); 3], other: [(u64, u64); 3]) {
    for c in 0..3 {
        mm[c] = merge(mm[c], other[c]);
    }
}

pub(super) fn clamp3(state: [i128; 3]) -> [u64; 3] {
    state.map(clamp)
}

pub(super) const EMPTY3: [(u64, u64); 3] = [(u64::MAX, 0); 3];

impl Curves {
    /// One pass over the trace from the running values before its first row.
    pub(super) fn build(rows: &Rows, initial: [i128; 3]) -> Curves {
        let rows = &rows.slices();
        let n = rows.action.len();
        let mut sub_starts = Vec::with_capacity(n.div_ceil(SUB) + 1);
        let mut sub_ranges = Vec::with_capacity(n.div_ceil(SUB));
        let mut blocks: [Vec<[u64; 2]>; 3] = std::array::from_fn(|_| Vec::with_capacity(n.div_ceil(BLOCK)));
        let mut state = initial;
        let mut block = EMPTY3;
        for s in 0..n.div_ceil(SUB) {
            sub_starts.push(pack(state));
            let mut mm = EMPTY3;
            for r in s * SUB..((s + 1) * SUB).min(n) {
                rows.apply(&mut state, r);
                fold(&mut mm, clamp3(state));
            }
            sub_ranges.push([mm[0].0, mm[0].1, mm[1].0, mm[1].1, mm[2].0, mm[2].1]);
            fold_ranges(&mut block, mm);
            if (s + 1) % SUBS_PER_BLOCK == 0 || (s + 1) * SUB >= n {
                for c in 0..3 {
                    blocks[c].push(pair(block[c]));
                }
                block = EMPTY3;
            }
        }
        sub_starts.push(pack(state));
        let levels = blocks.map(|blocks| {
            let mut levels: Vec<Column<[u64; 2]>> = vec![blocks.into()];
            let mut span = 1;
            while let Some(prev) = levels.last().filter(|p| p.len() > span) {
                let next = (0..prev.len() - span).map(|j| pair(merge(tuple(prev[j]), tuple(prev[j + span])))).collect();
                levels.push(next);
                span *= 2;
            }
            levels
        });
        Curves { sub_starts: sub_starts.into(), sub_ranges: sub_ranges.into(), levels }
    }

    /// The number of entries of each level for `rows` rows, as `build` makes them.
    pub(super) fn level_lengths(rows: usize) -> Vec<usize> {
        let mut lengths = vec![rows.div_ceil(BLOCK)];
        let mut span = 1;
        while let Some(&prev) = lengths.last().filter(|&&p| p > span) {
            lengths.push(prev - span);
            span *= 2;
        }
        lengths
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.sub_starts.heap_bytes()
            + self.sub_ranges.heap_bytes()
            + self.levels.iter().flatten().map(Column::heap_bytes).sum::<usize>()
    }

    pub(super) fn sub_range(&self, s: usize) -> [(u64, u64); 3] {
        let w = self.sub_ranges[s];
        [(w[0], w[1]), (w[2], w[3]), (w[4], w[5])]
    }

    /// (min, max) over the whole sub-blocks `p..q`: sub-blocks up to a
    /// block boundary, the tables for whole blocks, sub-blocks after.
    pub(super) fn whole_subs(&self, p: usize, q: usize) -> [(u64, u64); 3] {
        let mut mm = EMPTY3;
        let (bp, bq) = (p.div_ceil(SUBS_PER_BLOCK), q / SUBS_PER_BLOCK);
        if bp >= bq {
            for s in p..q {
                fold_ranges(&mut mm, self.sub_range(s));
            }
            return mm;
        }
        for s in (p..bp * SUBS_PER_BLOCK).chain(bq * SUBS_PER_BLOCK..q) {
            fold_ranges(&mut mm, self.sub_range(s));
        }
        let k = (bq - bp).ilog2() as usize;
        let blocks = std::array::from_fn(|c| {
            let level = &self.levels[c][k];
            merge(tuple(level[bp]), tuple(level[bq - (1 << k)]))
        });
        fold_ranges(&mut mm, blocks);
        mm
    }

    /// The curves at row `r` (`r <= rows`): the running values before it,
    /// and (min, max) over the rows of its sub-block before it and from it
    /// on. One replay of the sub-block serves both buckets that meet at `r`.
    pub(super) fn edge(&self, rows: &RowSlices<'_>, r: usize) -> Edge {
        let s = r / SUB;
        let n = rows.action.len();
        let mut state = unpack(self.sub_starts[s]);
        if r.is_multiple_of(SUB) && r < n {
            return Edge { state, before: EMPTY3, after: self.sub_range(s) };
        }
        // Two loops, so that each keeps its (min, max) in registers.
        let end = ((s + 1) * SUB).min(n);
        let mut before = EMPTY3;
        for x in s * SUB..r.min(end) {
            rows.apply(&mut state, x);
            fold(&mut before, clamp3(state));
        }
        let at = state;
        let mut after = EMPTY3;
        for x in r..end {
            rows.apply(&mut state, x);
            fold(&mut after, clamp3(state));
        }
        Edge { state: at, before, after }
    }

    /// The three curves over each bucket `rows[i]..rows[i + 1]` (ascending
    /// rows, at most `rows`); with `carry_in(i)`, the value before the
    /// bucket counts too.
    pub(super) fn buckets(&self, rows: &Rows, edges: &[usize], carry_in: impl Fn(usize) -> bool) -> Vec<[Range3; 3]> {
        let rows = &rows.slices();
        let at: Vec<Edge> = edges.iter().map(|&r| self.edge(rows, r)).collect();
        (0..edges.len().saturating_sub(1))
            .map(|i| {
                let (a, b) = (edges[i], edges[i + 1]);
                let start = clamp3(at[i].state);
                if a >= b {
                    return start.map(|v| Range3 { min: v, max: v, last: v });
                }
                let mut mm = EMPTY3;
                if a / SUB == b / SUB {
                    // Inside one sub-block: the rows themselves, from a's values.
                    let mut state = at[i].state;
                    for x in a..b {
                        rows.apply(&mut state, x);
                        fold(&mut mm, clamp3(state));
                    }
                } else {
                    // a's sub-block from a, the whole ones between, b's before b.
                    mm = self.whole_subs(a / SUB + 1, b / SUB);
                    fold_ranges(&mut mm, at[i].after);
                    fold_ranges(&mut mm, at[i + 1].before);
                }
                if carry_in(i) {
                    fold(&mut mm, start);
                }
                let last = clamp3(at[i + 1].state);
                std::array::from_fn(|c| Range3 { min: mm[c].0, max: mm[c].1, last: last[c] })
            })
            .collect()
    }
}

/// The curves at one row: see [`Curves::edge`].
pub(super) struct Edge {
    pub(super) state: [i128; 3],
    pub(super) before: [(u64, u64); 3],
    pub(super) after: [(u64, u64); 3],
}

/// The identity of [`merge`] is (MAX, 0).
pub(super) fn pair((lo, hi): (u64, u64)) -> [u64; 2] {
    [lo, hi]
}

pub(super) fn tuple([lo, hi]: [u64; 2]) -> (u64, u64) {
    (lo, hi)
}

pub(super) fn merge(a: (u64, u64), b: (u64, u64)) -> (u64, u64) {
    (a.0.min(b.0), a.1.max(b.1))
}

pub(super) fn clamp(v: i128) -> u64 {
    u64::try_from(v.max(0)).unwrap_or(u64::MAX)
}
