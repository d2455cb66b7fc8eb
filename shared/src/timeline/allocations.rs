//! The allocation index: the `k` largest allocations alive in any range of
//! rows, exactly, with memory linear in the allocations.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;

use crate::column::Column;
use crate::intervals::Allocation;
use crate::snapshot::StackId;

/// "No row" in [`AllocItem::free_requested`].
pub(super) const NONE: u32 = u32::MAX;

/// An allocation's life in state positions (0 = before row 0, `r + 1` =
/// after row `r`): alive at positions `lo..hi`.
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub(super) struct AllocItem {
    pub(super) addr: u64,
    pub(super) size: u64,
    pub(super) stack: StackId,
    /// `alloc_row + 1`, or 0 for a ghost.
    pub(super) lo: u32,
    /// `free_completed_row + 1`, or `rows + 1` when alive at the end.
    pub(super) hi: u32,
    /// Row of the `free_requested`, or [`NONE`].
    pub(super) free_requested: u32,
}

/// Finds the `k` largest allocations alive somewhere in a range of
/// positions `[pa, pb)`, exactly, with memory linear in the allocations.
///
/// An allocation meets the range iff it is alive at `pa` or starts inside
/// `(pa, pb)`; the two sets are disjoint and handled apart:
/// - *starts inside*: `items` is sorted by start, so these are one run of
///   it; a max-by-size segment tree over `items` yields the run's largest
///   one by one (a heap of sub-runs), `O(log m)` each.
/// - *alive at `pa`*: every `stride` positions a checkpoint lists the
///   allocations alive there, largest first. Alive at `pa` means alive at
///   the checkpoint `cp <= pa` before it and not dead by `pa`, or started in
///   `(cp, pa]` and not dead by `pa`. The first kind is a scan of the
///   checkpoint's list that skips at most `stride` dead ones (one death per
///   row); the second joins the run above (which then starts after `cp`),
///   rejecting at most `stride` dead ones (one start per row).
///
/// So a query costs `O((k + stride) · log m)`. The stride starts at
/// [`MIN_CHECKPOINT_STRIDE`](super::MIN_CHECKPOINT_STRIDE) and doubles until the checkpoint lists hold at
/// most `max(4m, 65536)` ids, which bounds memory; a trace with a huge live
/// set (many long-lived allocations) gets a longer stride, trading query
/// time for memory.
#[derive(Debug, Default)]
pub(super) struct AllocationIndex {
    /// Allocations of nonzero size, sorted by `lo` (then index order).
    pub(super) items: Column<AllocItem>,
    /// Iterative segment tree over `items`: `tree[m + i] = i`, each inner node
    /// the larger of its children by (size, then lower index).
    pub(super) tree: Column<u32>,
    pub(super) stride: u64,
    /// Checkpoint `j` (at position `j · stride`) lists
    /// `checkpoint_ids[checkpoint_starts[j]..checkpoint_starts[j + 1]]`.
    pub(super) checkpoint_starts: Column<u32>,
    pub(super) checkpoint_ids: Column<u32>,
}

impl AllocationIndex {
    /// The index of a device's allocation intervals `all` over a trace of
    /// `rows` rows. `budget`: most checkpoint ids to hold; `None` for the
    /// default.
    pub(super) fn build(all: &[Allocation], rows: usize, min_stride: u64, budget: Option<u64>) -> AllocationIndex {
        let item = |a: &Allocation| item_of(a, rows);
        // Sorted by start, ties in index order. The intervals list an
        // allocation at its first row, so those with an alloc row come in
        // order already: the ones alive from the start (start 0) go first,
        // then the rest as listed, sorted only if they are not in order.
        // The stable sort of the whole list took a scratch copy of half of
        // it (85 MB on a 16M-entry trace) to find that out.
        let least = CeilDiv::new(min_stride.max(1));
        let Gathered { mut items, from_start, started_in_order, listed_at_least } =
            if all.len() >= super::PARALLEL_BUILD_ROWS {
                gather_beside(all, item, least)
            } else {
                gather(all, item, least)
            };
        if !started_in_order {
            items[from_start..].sort_by_key(|it| it.lo); // stable: ties keep index order
        }
        let m = items.len();

        // The segment tree and the checkpoint lists share nothing but the
        // items: side by side on a large trace.
        let lists = || checkpoint_lists(&items, rows, (least, listed_at_least), budget);
        let (tree, (stride, checkpoint_starts, checkpoint_ids)) = if m >= super::PARALLEL_BUILD_ROWS {
            super::beside(|| segment_tree(&items), lists)
        } else {
            (segment_tree(&items), lists())
        };
        AllocationIndex {
            items: items.into(),
            tree: tree.into(),
            stride,
            checkpoint_starts: checkpoint_starts.into(),
            checkpoint_ids: checkpoint_ids.into(),
        }
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.items.heap_bytes()
            + self.tree.heap_bytes()
            + self.checkpoint_starts.heap_bytes()
            + self.checkpoint_ids.heap_bytes()
    }

    /// Index of the largest item in `items[l..r]` (`l < r`).
    pub(super) fn argmax(&self, l: usize, r: usize) -> u32 {
        let m = self.items.len();
        let (mut l, mut r) = (l + m, r + m);
        let mut best = self.tree[l];
        while l < r {
            if l & 1 == 1 {
                best = larger(&self.items, best, self.tree[l]);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                best = larger(&self.items, best, self.tree[r]);
            }
            l /= 2;
            r /= 2;
        }
        best
    }

    /// The `k` largest items of size at least `min_size` alive somewhere in
    /// positions `[pa, pb)`, by (size descending, index ascending).
    pub(super) fn top_k(&self, pa: u64, pb: u64, min_size: u64, k: usize) -> Vec<u32> {
        if k == 0 || self.items.is_empty() {
            return Vec::new();
        }
        let alive_at_pa = |it: &AllocItem| u64::from(it.hi) > pa;
        let j = ((pa / self.stride) as usize).min(self.checkpoint_starts.len().saturating_sub(2));
        let cp = j as u64 * self.stride;

        // Alive at the checkpoint and still at pa.
        let mut from_checkpoint = Vec::new();
        let ids = self
            .checkpoint_starts
            .get(j..j + 2)
            .and_then(|r| self.checkpoint_ids.get(r[0] as usize..r[1] as usize))
            .unwrap_or(&[]);
        for &i in ids {
            let it = &self.items[i as usize];
            if it.size < min_size || from_checkpoint.len() == k {
                break;
            }
            if alive_at_pa(it) {
                from_checkpoint.push(i);
            }
        }

        // Started after the checkpoint and before pb, alive at or after pa.
        let mut from_run = Vec::new();
        let l = self.items.partition_point(|it| u64::from(it.lo) <= cp);
        let r = self.items.partition_point(|it| u64::from(it.lo) < pb);
        let mut heap = BinaryHeap::new();
        let push = |heap: &mut BinaryHeap<_>, l: usize, r: usize| {
            if l < r {
                let i = self.argmax(l, r);
                heap.push((self.items[i as usize].size, Reverse(i), l, r));
            }
        };
        push(&mut heap, l, r);
        while let Some((size, Reverse(i), l, r)) = heap.pop() {
            if size < min_size {
                break;
            }
            if alive_at_pa(&self.items[i as usize]) {
                from_run.push(i);
                if from_run.len() == k {
                    break;
                }
            }
            push(&mut heap, l, i as usize);
            push(&mut heap, i as usize + 1, r);
        }

        // Both lists are ordered by (size desc, index asc); merge them.
        let key = |i: &u32| (Reverse(self.items[*i as usize].size), *i);
        let mut out = Vec::with_capacity(k.min(from_checkpoint.len() + from_run.len()));
        let (mut a, mut b) = (from_checkpoint.into_iter().peekable(), from_run.into_iter().peekable());
        while out.len() < k {
            let next = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) => {
                    if key(x) <= key(y) {
                        a.next()
                    } else {
                        b.next()
                    }
                }
                (Some(_), None) => a.next(),
                (None, Some(_)) => b.next(),
                (None, None) => None,
            };
            match next {
                Some(i) => out.push(i),
                None => break,
            }
        }
        out
    }
}

/// The item of an allocation interval of a trace of `rows` rows, if it
/// is one: of nonzero size and with its rows inside the trace (rows past
/// it would mean an interval of another trace: skipped rather than
/// indexed out of bounds later).
#[inline]
fn item_of(a: &Allocation, rows: usize) -> Option<AllocItem> {
    let end = u32::try_from(rows + 1).unwrap_or(u32::MAX);
    let in_trace = |row: Option<u32>| row.is_none_or(|r| (r as usize) < rows);
    (a.size > 0 && in_trace(a.alloc_row.get()) && in_trace(a.free_completed_row.get())).then(|| AllocItem {
        addr: a.addr,
        size: a.size,
        stack: a.stack,
        lo: a.alloc_row.get().map_or(0, |r| r.saturating_add(1)),
        hi: a.free_completed_row.get().map_or(end, |r| r.saturating_add(1)),
        free_requested: a.free_requested_row.get().unwrap_or(NONE),
    })
}

/// The items [`AllocationIndex::top_k`] would answer for the index of
/// `all`, in its order, found by one pass over the intervals instead: for
/// the time before that index is built (nearly half of a large trace's
/// build; a pass over 5M intervals takes tens of milliseconds).
///
/// The index orders its items by start, ties in `all`'s order, and breaks
/// ties of size by that position: here the tie-break is (start, position
/// in `all`), the same order.
pub(super) fn scan_top_k(all: &[Allocation], rows: usize, pa: u64, pb: u64, min_size: u64, k: usize) -> Vec<AllocItem> {
    if k == 0 {
        return Vec::new();
    }
    // The kept ones, the worst on top: smallest size, then latest start,
    // then latest position.
    let mut kept: BinaryHeap<(Reverse<u64>, u32, usize)> = BinaryHeap::with_capacity(k.min(all.len()) + 1);
    let mut least = min_size;
    for (at, a) in all.iter().enumerate() {
        if a.size < least {
            continue;
        }
        let Some(it) = item_of(a, rows) else { continue };
        if u64::from(it.lo) >= pb || u64::from(it.hi) <= pa {
            continue;
        }
        let key = (Reverse(it.size), it.lo, at);
        if kept.len() == k {
            if kept.peek().is_some_and(|worst| key >= *worst) {
                continue;
            }
            kept.pop();
        }
        kept.push(key);
        if kept.len() == k {
            least = kept.peek().map_or(least, |worst| worst.0.0);
        }
    }
    kept.into_sorted_vec().into_iter().filter_map(|(_, _, at)| item_of(&all[at], rows)).collect()
}

/// The items, as [`gather`] lists them, with what was learnt on the way.
struct Gathered {
    /// The items alive from the start (start 0), then the rest as listed.
    items: Vec<AllocItem>,
    /// How many come first for being alive from the start.
    from_start: usize,
    /// The rest are already in order of start (real traces: always).
    started_in_order: bool,
    /// Checkpoint-list entries at the least stride (see [`checkpoint_lists`]).
    listed_at_least: u64,
}

/// Checkpoint `j` (at position `j · s`) lies in an item's `[lo, hi)` iff
/// `ceil(lo/s) <= j < ceil(hi/s)`: how many checkpoints list it.
#[inline]
fn checkpoints_spanned(it: &AllocItem, s: CeilDiv) -> u64 {
    s.of(it.hi).saturating_sub(s.of(it.lo))
}

/// The items of `all` (`item` of each, where it is one): those alive from
/// the start (no alloc row) first, then the rest, each part in `all`'s
/// order; where the rest begins, whether it is in order of start, and the
/// checkpoint-list entries at stride `least`. Sized to the allocations (an
/// upper bound), not grown by doubling.
fn gather(all: &[Allocation], item: impl Fn(&Allocation) -> Option<AllocItem>, least: CeilDiv) -> Gathered {
    let mut items = Vec::with_capacity(all.len());
    items.extend(all.iter().filter(|a| a.alloc_row.get().is_none()).filter_map(&item));
    let from_start = items.len();
    items.extend(all.iter().filter(|a| a.alloc_row.get().is_some()).filter_map(&item));
    let started_in_order = items[from_start..].is_sorted_by_key(|it| it.lo);
    let listed_at_least = items.iter().map(|it| checkpoints_spanned(it, least)).sum();
    Gathered { items, from_start, started_in_order, listed_at_least }
}

/// [`gather`] on two threads, each over half of `all`: a pass counts each
/// half's two kinds, then each half writes its own places. Most of the
/// items' time is first touches of their fresh pages (170 MB on a
/// 16M-entry trace), which two threads take in half the time; the
/// counting pass reads without writing. Each half checks its order and
/// counts its checkpoint-list entries as it writes: two passes over the
/// items on one thread after it took 40 ms.
fn gather_beside(
    all: &[Allocation],
    item: impl Fn(&Allocation) -> Option<AllocItem> + Sync,
    least: CeilDiv,
) -> Gathered {
    let (first, second) = all.split_at(all.len() / 2);
    // (alive from the start, the rest) of a half.
    let count = |half: &[Allocation]| {
        half.iter().filter(|a| item(a).is_some()).fold((0usize, 0usize), |(from_start, rest), a| {
            if a.alloc_row.get().is_none() { (from_start + 1, rest) } else { (from_start, rest + 1) }
        })
    };
    let ((start1, rest1), (start2, rest2)) = super::beside(|| count(first), || count(second));
    // Zeroed by the allocator (fresh pages come zeroed), so that each
    // thread faults in its own part as it writes it.
    let mut items: Vec<AllocItem> = bytemuck::zeroed_vec(start1 + start2 + rest1 + rest2);
    let (from_start, rest) = items.split_at_mut(start1 + start2);
    let (from_start1, from_start2) = from_start.split_at_mut(start1);
    let (rest1, rest2) = rest.split_at_mut(rest1);
    // (the half's rest in order of start, its checkpoint-list entries).
    let fill = |half: &[Allocation], from_start: &mut [AllocItem], rest: &mut [AllocItem]| {
        let (mut at_start, mut later) = (from_start.iter_mut(), rest.iter_mut());
        let (mut in_order, mut last_lo, mut listed) = (true, 0u32, 0u64);
        for a in half {
            let Some(it) = item(a) else { continue };
            listed += checkpoints_spanned(&it, least);
            let slot = if a.alloc_row.get().is_none() {
                at_start.next()
            } else {
                in_order &= last_lo <= it.lo;
                last_lo = it.lo;
                later.next()
            };
            if let Some(slot) = slot {
                *slot = it;
            }
        }
        (in_order, listed)
    };
    let ((in_order1, listed1), (in_order2, listed2)) =
        super::beside(|| fill(first, from_start1, &mut *rest1), || fill(second, from_start2, &mut *rest2));
    // Where the halves meet.
    let joined = match (rest1.last(), rest2.first()) {
        (Some(a), Some(b)) => a.lo <= b.lo,
        _ => true,
    };
    Gathered {
        items,
        from_start: start1 + start2,
        started_in_order: in_order1 && in_order2 && joined,
        listed_at_least: listed1 + listed2,
    }
}

/// The larger of two items by size, the lower index on ties.
pub(super) fn larger(items: &[AllocItem], a: u32, b: u32) -> u32 {
    let (sa, sb) = (items[a as usize].size, items[b as usize].size);
    if sa > sb || (sa == sb && a < b) { a } else { b }
}

/// The segment tree over `items` (see [`AllocationIndex::tree`]).
fn segment_tree(items: &[AllocItem]) -> Vec<u32> {
    let m = items.len();
    let mut tree = vec![0u32; 2 * m];
    for (i, slot) in tree[m..].iter_mut().enumerate() {
        *slot = i as u32;
    }
    for i in (1..m).rev() {
        tree[i] = larger(items, tree[2 * i], tree[2 * i + 1]);
    }
    tree
}

/// `x.div_ceil(s)` by a shift where `s` is a power of two (always, but in
/// tests): a division per item for each stride tried and for each pass
/// was a quarter of the build.
#[derive(Clone, Copy)]
struct CeilDiv {
    s: u64,
    shift: Option<u32>,
}

impl CeilDiv {
    fn new(s: u64) -> CeilDiv {
        CeilDiv { s, shift: s.is_power_of_two().then(|| s.trailing_zeros()) }
    }

    #[inline]
    fn of(self, x: u32) -> u64 {
        let x = u64::from(x);
        match self.shift {
            Some(k) => (x + self.s - 1) >> k,
            None => x.div_ceil(self.s),
        }
    }
}

/// The stride and the checkpoint lists (starts, ids) over `items`, given
/// the least stride and the entries its lists would hold (counted as the
/// items were gathered).
fn checkpoint_lists(
    items: &[AllocItem],
    rows: usize,
    (least, listed_at_least): (CeilDiv, u64),
    budget: Option<u64>,
) -> (u64, Vec<u32>, Vec<u32>) {
    let m = items.len();
    // Checkpoint j lies in [lo, hi) iff ceil(lo/s) <= j < ceil(hi/s).
    let span = |it: &AllocItem, s: CeilDiv| (s.of(it.hi), s.of(it.lo));
    let budget = budget.unwrap_or((4 * m as u64).max(1 << 16));
    let (mut stride, mut total) = (least.s, listed_at_least);
    // Doubled until the lists fit the budget (or one checkpoint is left).
    while stride <= rows as u64 && total > budget {
        stride *= 2;
        let s = CeilDiv::new(stride);
        total = items.iter().map(|it| checkpoints_spanned(it, s)).sum();
    }
    let s = CeilDiv::new(stride);
    let checkpoints = rows / stride as usize + 1;

    // The items that span a checkpoint (2.2M of 5.3M on the 16M-entry
    // bench file), in item order, with their spans, computed once: the
    // passes below walk these rather than recompute every item's span.
    let listed: Vec<Listed> = items
        .iter()
        .enumerate()
        .filter_map(|(i, it)| {
            let (h, l) = span(it, s);
            let h = h.min(checkpoints as u64);
            (l < h).then_some(Listed { item: i as u32, first: l as u32, end: h as u32 })
        })
        .collect();
    let checkpoint_starts = list_starts(&listed, checkpoints);
    // Zeroed by the allocator: each thread below faults in its own part.
    let mut checkpoint_ids = vec![0u32; checkpoint_starts[checkpoints] as usize];
    // Filling in size order leaves every list sorted. The sizes are read
    // in item order, as the list is.
    let order = by_size(&listed, |at| items[at.item as usize].size);
    if super::THREADS && listed.len() >= super::PARALLEL_BUILD_ROWS {
        // The checkpoints' first half on one thread, the rest on the
        // other: each reads the whole order and writes its own lists (in
        // turn, on one thread, that would read it twice).
        let half = checkpoints / 2;
        let (low, high) = checkpoint_ids.split_at_mut(checkpoint_starts[half] as usize);
        super::beside(
            || fill_lists(&order, &checkpoint_starts, 0..half, low),
            || fill_lists(&order, &checkpoint_starts, half..checkpoints, high),
        );
    } else {
        fill_lists(&order, &checkpoint_starts, 0..checkpoints, &mut checkpoint_ids);
    }
    (stride, checkpoint_starts, checkpoint_ids)
}

/// Where each of the `checkpoints` lists starts among the ids, and one past
/// the last: the running count of the `listed` entries before it.
fn list_starts(listed: &[Listed], checkpoints: usize) -> Vec<u32> {
    let mut starts = vec![0u32; checkpoints + 1];
    for at in listed {
        for j in at.first..at.end {
            starts[j as usize + 1] += 1;
        }
    }
    for j in 0..checkpoints {
        starts[j + 1] += starts[j];
    }
    starts
}

/// Write the lists of checkpoints `part` into `ids` (theirs, from
/// `starts[part.start]` on), each entry of `order` at the checkpoints it
/// spans there, in `order`'s order.
fn fill_lists(order: &[Listed], starts: &[u32], part: std::ops::Range<usize>, ids: &mut [u32]) {
    let base = starts[part.start];
    let mut cursor: Vec<u32> = starts[part.clone()].iter().map(|&s| s - base).collect();
    let (from, to) = (part.start as u32, part.end as u32);
    for at in order {
        for j in at.first.max(from)..at.end.min(to) {
            let slot = &mut cursor[(j - from) as usize];
            ids[*slot as usize] = at.item;
            *slot += 1;
        }
    }
}

/// Most distinct sizes counted in a map; past it, a comparison sort.
const MAX_DISTINCT_SIZES: usize = 1 << 16;

/// An item listed at checkpoints `first..end`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Listed {
    item: u32,
    first: u32,
    end: u32,
}

/// `entries` ordered by their sizes, largest first, ties in the slice's
/// order.
///
/// Sizes repeat: a real trace has hundreds to a few thousand distinct ones
/// against millions of allocations, so this is a counting sort over the
/// distinct sizes (two lookups per entry in a map that stays in cache),
/// not a comparison sort through an index (0.8 s of a 16M-entry build).
/// A trace of many distinct sizes falls back to the comparison sort.
fn by_size<P: Copy>(entries: &[P], size: impl Fn(&P) -> u64) -> Vec<P> {
    let Some(&first) = entries.first() else { return Vec::new() };
    let mut counts: FxHashMap<u64, u32> = FxHashMap::default();
    for entry in entries {
        *counts.entry(size(entry)).or_insert(0) += 1;
        if counts.len() > MAX_DISTINCT_SIZES {
            let mut order: Vec<(Reverse<u64>, u32)> =
                entries.iter().enumerate().map(|(i, e)| (Reverse(size(e)), i as u32)).collect();
            order.sort_unstable();
            return order.into_iter().map(|(_, i)| entries[i as usize]).collect();
        }
    }
    let mut sizes: Vec<(u64, u32)> = counts.iter().map(|(&size, &n)| (size, n)).collect();
    sizes.sort_unstable_by_key(|&(size, _)| Reverse(size));
    // Each size's next free place in the order.
    let mut next = counts;
    let mut at = 0u32;
    for (size, n) in sizes {
        next.insert(size, at);
        at += n;
    }
    // Every place is written below (each size was counted above): `first`
    // only fills the list until then.
    let mut order: Vec<P> = vec![first; entries.len()];
    for &entry in entries {
        if let Some(slot) = next.get_mut(&size(&entry)) {
            order[*slot as usize] = entry;
            *slot += 1;
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(sizes: impl Iterator<Item = u64>) -> Vec<AllocItem> {
        sizes
            .map(|size| AllocItem { addr: 0, size, stack: StackId::default(), lo: 0, hi: 1, free_requested: NONE })
            .collect()
    }

    fn compared(items: &[AllocItem]) -> Vec<u32> {
        let mut order: Vec<u32> = (0..items.len() as u32).collect();
        order.sort_by_key(|&i| (Reverse(items[i as usize].size), i));
        order
    }

    /// The indexes of the items `keep` keeps, ordered by [`by_size`].
    fn sized(items: &[AllocItem], keep: impl Fn(u32) -> bool) -> Vec<u32> {
        let kept: Vec<u32> = (0..items.len() as u32).filter(|&i| keep(i)).collect();
        by_size(&kept, |&i| items[i as usize].size)
    }

    /// The items in start order, ties in index order, as the stable sort
    /// of the whole list gave them: with the alloc rows in order (as the
    /// intervals list them), and out of order (an index of another
    /// making), ghosts interleaved either way.
    #[test]
    fn items_come_in_start_order_without_sorting_the_ghosts() {
        use crate::intervals::OptRow;
        let allocation = |addr: u64, alloc: Option<u32>, freed: Option<u32>| Allocation {
            addr,
            size: 512,
            stack: StackId::default(),
            alloc_row: alloc.map_or(OptRow::NONE, OptRow::some),
            free_requested_row: OptRow::NONE,
            free_completed_row: freed.map_or(OptRow::NONE, OptRow::some),
        };
        for rows in [[1, 4, 6, 8], [6, 1, 8, 4]] {
            let allocations = vec![
                allocation(1, Some(rows[0]), Some(9)),
                allocation(2, None, Some(3)),
                allocation(3, Some(rows[1]), None),
                allocation(4, Some(rows[2]), None),
                allocation(5, None, None),
                allocation(6, Some(rows[3]), Some(9)),
            ];
            let expected: Vec<(u32, u64)> = {
                let mut by_start: Vec<(u32, u64)> =
                    allocations.iter().map(|a| (a.alloc_row.get().map_or(0, |r| r + 1), a.addr)).collect();
                by_start.sort_by_key(|&(lo, _)| lo);
                by_start
            };
            let index = AllocationIndex::build(&allocations, 10, 1, None);
            let got: Vec<(u32, u64)> = index.items.iter().map(|it| (it.lo, it.addr)).collect();
            assert_eq!(got, expected, "alloc rows {rows:?}");
        }
    }

    /// The items gathered on two threads are those gathered on one, in
    /// the same places, with the same order check and checkpoint-list
    /// count: ghosts, zero sizes (not items) and rows past the trace
    /// spread over both halves, at even and odd lengths, with starts in
    /// order and not, at a stride of a power of two and not.
    #[test]
    fn the_items_gathered_on_two_threads_are_those_on_one() {
        use crate::intervals::OptRow;
        let rows = 1000u32;
        let item = |a: &Allocation| {
            (a.size > 0 && a.alloc_row.get().is_none_or(|r| r < rows)).then(|| AllocItem {
                addr: a.addr,
                size: a.size,
                stack: a.stack,
                lo: a.alloc_row.get().map_or(0, |r| r + 1),
                hi: a.alloc_row.get().map_or(rows + 1, |r| (r + 40).min(rows + 1)),
                free_requested: NONE,
            })
        };
        for (n, step, ordered) in [
            (0u32, 7, true),
            (1, 7, true),
            (2, 7, true),
            (7, 7, true),
            (1000, 7, false),
            (1001, 7, false),
            (1001, 1, true),
            (1000, 1, true),
        ] {
            let all: Vec<Allocation> = (0..n)
                .map(|i| Allocation {
                    addr: u64::from(i),
                    size: u64::from(i % 5) * 512,
                    stack: StackId::default(),
                    alloc_row: if i % 3 == 0 { OptRow::NONE } else { OptRow::some(i * step % 1100) },
                    free_requested_row: OptRow::NONE,
                    free_completed_row: OptRow::NONE,
                })
                .collect();
            for stride in [1u64, 3, 16] {
                let least = CeilDiv::new(stride);
                let (one, two) = (gather(&all, item, least), gather_beside(&all, item, least));
                let key = |items: &[AllocItem]| items.iter().map(|it| (it.addr, it.lo)).collect::<Vec<_>>();
                let what = format!("{n} allocations, stride {stride}");
                assert_eq!(key(&two.items), key(&one.items), "{what}");
                assert_eq!(two.from_start, one.from_start, "{what}");
                assert_eq!((two.started_in_order, one.started_in_order), (ordered, ordered), "{what}");
                assert_eq!(two.listed_at_least, one.listed_at_least, "{what}");
                let spans: u64 = one
                    .items
                    .iter()
                    .map(|it| u64::from(it.hi).div_ceil(stride) - u64::from(it.lo).div_ceil(stride))
                    .sum();
                assert_eq!(one.listed_at_least, spans, "{what}");
                assert!(one.items[..one.from_start].iter().all(|it| it.lo == 0), "{what}: the ghosts first");
                assert!(n == 0 || one.items.len() < n as usize, "{what}: zero sizes are not items");
            }
        }
        // Each half in order, but not where they meet.
        let all: Vec<Allocation> = (0..100u32)
            .map(|i| Allocation {
                addr: u64::from(i),
                size: 512,
                stack: StackId::default(),
                alloc_row: OptRow::some(if i < 50 { 500 + i } else { i }),
                free_requested_row: OptRow::NONE,
                free_completed_row: OptRow::NONE,
            })
            .collect();
        let least = CeilDiv::new(4);
        let (one, two) = (gather(&all, item, least), gather_beside(&all, item, least));
        assert_eq!((one.started_in_order, two.started_in_order), (false, false));
    }

    /// The scan of the intervals answers what the index answers, in the
    /// same order, at every stride: ghosts, zero sizes, rows past the
    /// trace, starts out of order (an index of another making) and many
    /// ties of size, so that the order of ties is what is checked.
    #[test]
    fn the_scan_answers_as_the_index() {
        use crate::intervals::OptRow;
        let rows = 600u32;
        for ordered in [true, false] {
            let all: Vec<Allocation> = (0..700u32)
                .map(|i| {
                    let alloc = if ordered { i * 600 / 700 } else { i * 37 % 650 };
                    let freed = alloc + 1 + i * 13 % 90;
                    Allocation {
                        addr: u64::from(i),
                        size: u64::from(i % 6) * 512,
                        stack: StackId::default(),
                        alloc_row: if i % 11 == 0 { OptRow::NONE } else { OptRow::some(alloc) },
                        free_requested_row: OptRow::some(freed.saturating_sub(1)),
                        free_completed_row: if i % 7 == 0 { OptRow::NONE } else { OptRow::some(freed) },
                    }
                })
                .collect();
            for stride in [1u64, 5, 256] {
                let index = AllocationIndex::build(&all, rows as usize, stride, Some(u64::MAX));
                let mut checked = 0;
                for pa in (0..=u64::from(rows) + 2).step_by(7) {
                    for width in [1u64, 2, 30, 700] {
                        for (min_size, k) in [(1u64, 1usize), (1, 5), (512, 40), (2048, 1000), (1 << 20, 3)] {
                            let pb = pa + width;
                            let from_index: Vec<(u64, u64, u32)> = index
                                .top_k(pa, pb, min_size, k)
                                .iter()
                                .map(|&i| index.items[i as usize])
                                .map(|it| (it.addr, it.size, it.hi))
                                .collect();
                            let scanned: Vec<(u64, u64, u32)> = scan_top_k(&all, rows as usize, pa, pb, min_size, k)
                                .iter()
                                .map(|it| (it.addr, it.size, it.hi))
                                .collect();
                            assert_eq!(
                                scanned, from_index,
                                "ordered {ordered}, stride {stride}, [{pa}, {pb}) ≥{min_size} k={k}"
                            );
                            checked += usize::from(!from_index.is_empty());
                        }
                    }
                }
                assert!(checked > 1000, "{checked} non-empty answers");
            }
        }
        assert!(scan_top_k(&[], 10, 0, 5, 1, 3).is_empty());
    }

    /// The lists filled in two parts (two threads on a large trace) are
    /// those filled in one: entries spanning the cut, ending at it and
    /// starting at it, at an even and an odd number of checkpoints.
    #[test]
    fn the_lists_filled_in_two_parts_are_those_filled_in_one() {
        for checkpoints in [1usize, 2, 9, 10] {
            let order: Vec<Listed> = (0..200u32)
                .map(|i| {
                    let first = i * 7 % checkpoints as u32;
                    let end = (first + 1 + i % 4).min(checkpoints as u32);
                    Listed { item: i, first, end }
                })
                .collect();
            let starts = list_starts(&order, checkpoints);
            let mut one = vec![u32::MAX; starts[checkpoints] as usize];
            fill_lists(&order, &starts, 0..checkpoints, &mut one);
            let mut two = vec![u32::MAX; one.len()];
            let half = checkpoints / 2;
            let (low, high) = two.split_at_mut(starts[half] as usize);
            fill_lists(&order, &starts, 0..half, low);
            fill_lists(&order, &starts, half..checkpoints, high);
            assert_eq!(two, one, "{checkpoints} checkpoints");
            assert!(!one.contains(&u32::MAX), "{checkpoints} checkpoints: every place written");
        }
    }

    #[test]
    fn the_counted_size_order_is_the_compared_one() {
        let all = |items: &[AllocItem]| sized(items, |_| true);
        // Few distinct sizes, in a scrambled order, with ties.
        let few = items((0..10_000u64).map(|i| (i * 7919 % 37) << 9));
        assert_eq!(all(&few), compared(&few));
        // More distinct sizes than the map takes: the comparison sort.
        let many = items((0..(MAX_DISTINCT_SIZES as u64 + 10)).map(|i| i * 2_654_435_761 % 1_000_003));
        assert_eq!(all(&many), compared(&many));
        assert!(all(&[]).is_empty());
        // Only the kept ones, in the same order, both ways.
        for sample in [&few, &many] {
            let odd: Vec<u32> = compared(sample).into_iter().filter(|i| i % 2 == 1).collect();
            assert_eq!(sized(sample, |i| i % 2 == 1), odd);
        }
    }
}
