//! The allocator's block layout at an earlier trace row, rewound from the
//! final segments.
//!
//! The snapshot's `segments` are the layout after the trace's last entry.
//! Undoing entries from the end back to a row gives the layout right after
//! that row: an undone `alloc` frees its block (merging it with free
//! neighbours), an undone `segment_alloc` removes the segment, an undone
//! `segment_free` brings it back whole and free.
//!
//! Only an undone free needs thought: trace entries carry requested sizes,
//! and the block the allocator had handed out may have been larger. It
//! starts at the entry's address. Its size is learnt where the block was
//! allocated: right before that `alloc`, the allocator's free block holding
//! the address started there (an allocation takes the front of a free
//! block, and free blocks are always merged with free neighbours), so the
//! request rounded the way the allocator rounds (512 bytes, or
//! `roundup_power2_divisions`) and the split rule applied to that free block
//! give the size exactly. A first pass over the whole trace learns these
//! sizes; the rewind proper uses them.
//!
//! Blocks allocated before the trace (a wrapped ring buffer) have no
//! `alloc` to learn from; for them the split rule is applied to the free
//! range behind the block at its free: a large-pool block whose leftover is
//! at most 1 MiB was never split, so it reaches the end of the range (every
//! large-pool block is over 1 MiB, so a shorter free tail cannot be a block
//! of its own). A large-pool block with more room behind it may have
//! absorbed up to 1 MiB of it: that case, and oversize blocks under
//! `max_split_size`, are estimates, and [`Layout::exact`] says so.
//!
//! Checked on the corpus: the highest allocated bytes over the rewound
//! layouts equal PyTorch's `allocated_bytes.all.peak`, rounding and unsplit
//! blocks included, which no per-request rounding rule reproduces.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::snapshot::{
    Action, AllocatorSettings, BlockState, DeviceSnapshot, EMPTY_STACK, SegmentType, Snapshot, StackId,
};

// The allocator's constants and rounding rules are the simulator's: one
// model of PyTorch's allocator serves both.
use crate::simulate::AllocatorConfig;
pub use crate::simulate::{LARGE_BUFFER, MIN_BLOCK_SIZE as MIN_BLOCK, SMALL_BUFFER, SMALL_SIZE, allocation_size};

/// The block size the allocator gives a request (`round_size`) under the
/// recorded settings (PyTorch's defaults when there are none).
pub fn round_size(size: u64, settings: Option<&AllocatorSettings>) -> u64 {
    crate::simulate::round_size(size, &config_of(settings))
}

fn config_of(settings: Option<&AllocatorSettings>) -> AllocatorConfig {
    settings.map(AllocatorConfig::from_recorded).unwrap_or_default()
}

/// A block of a [`Layout`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LayoutBlock {
    /// Start address.
    pub address: u64,
    /// Bytes (the block's rounded size).
    pub size: u64,
    /// Requested bytes (0 for free blocks).
    pub requested_size: u64,
    /// Allocated, pending free, or free (`inactive`).
    pub state: BlockState,
    /// Stack of the allocation ([`EMPTY_STACK`] for free blocks).
    pub stack: StackId,
}

/// A segment of a [`Layout`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LayoutSegment {
    /// Start address (of the lowest mapped byte, for an expandable segment).
    pub address: u64,
    /// Bytes reserved (mapped) in it.
    pub size: u64,
    /// Raw `cudaStream_t` it serves.
    pub stream: u64,
    /// Serves the small pool (requests up to 1 MiB).
    pub small: bool,
    /// An expandable segment.
    pub expandable: bool,
    /// Blocks in address order (an expandable segment may have unmapped gaps between them).
    pub blocks: Vec<LayoutBlock>,
}

impl LayoutSegment {
    /// Bytes of blocks in a state.
    pub fn bytes(&self, state: BlockState) -> u64 {
        self.blocks.iter().filter(|b| b.state == state).map(|b| b.size).sum()
    }
}

/// The segments and blocks of one device right after one trace row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Layout {
    /// The layout is right after this row (`None`: before the first row).
    pub after_row: Option<u32>,
    /// Segments by address.
    pub segments: Vec<LayoutSegment>,
    /// Trace entries undone to get here.
    pub undone: u32,
    /// Every block size is certain. `false` when an undone free needed a
    /// size estimate (see the module doc) or the trace disagreed with the
    /// layout somewhere (`mismatches`).
    pub exact: bool,
    /// Undone entries that did not fit the layout (a free of a block the
    /// layout does not have, a segment freed with blocks in use): a trace
    /// that lost entries. Each is skipped.
    pub mismatches: u32,
}

impl Layout {
    /// Bytes reserved from CUDA.
    pub fn reserved(&self) -> u64 {
        self.segments.iter().map(|s| s.size).sum()
    }

    /// Bytes of blocks in a state, over all segments.
    pub fn bytes(&self, state: BlockState) -> u64 {
        self.segments.iter().map(|s| s.bytes(state)).sum()
    }

    /// All blocks with their segments.
    pub fn blocks(&self) -> impl Iterator<Item = (&LayoutSegment, &LayoutBlock)> {
        self.segments.iter().flat_map(|s| s.blocks.iter().map(move |b| (s, b)))
    }
}

#[derive(Clone, Copy, Debug)]
struct Piece {
    size: u64,
    segment: u64,
    state: BlockState,
    requested: u64,
    stack: StackId,
    /// The `free_completed` row whose undoing carved this block, if any.
    carved_at: Option<u32>,
}

#[derive(Clone, Copy, Debug)]
struct SegmentInfo {
    stream: u64,
    small: bool,
    expandable: bool,
}

/// Where a rewinder stands: the layout's pieces and segments after the
/// rows not yet undone. Owned, so that [`Checkpoints`] can keep copies.
#[derive(Clone, Debug, Default)]
struct Position {
    pieces: BTreeMap<u64, Piece>,
    segments: BTreeMap<u64, SegmentInfo>,
    /// Rows `next..` have been undone.
    next: usize,
    estimated: bool,
    mismatches: u32,
}

/// A device's rewinder positions every so many rows, and the block sizes
/// its learning pass found. Built once (two passes over the trace), they
/// let each later query start next to its rows instead of at the trace's
/// end: on a 1.5M-entry trace a segment timeline took 370-540 ms, nearly
/// all of it those two passes.
#[derive(Debug)]
pub struct Checkpoints {
    learnt: Arc<FxHashMap<u32, u64>>,
    /// By `next`, ascending; the first at the trace's start, the last at
    /// its end.
    positions: Vec<Position>,
}

/// Rewinds a device's final layout row by row, towards the trace's start.
/// Creating one costs a pass over the trace (learning block sizes);
/// rewinding to several rows in decreasing order costs one more in all.
#[derive(Clone, Debug)]
pub struct Rewinder<'a> {
    device: &'a DeviceSnapshot,
    settings: Option<&'a AllocatorSettings>,
    /// The recorded settings as the simulator's config, for rounding.
    config: AllocatorConfig,
    at: Position,
    /// Block sizes learnt by a first pass, by `free_completed` row.
    learnt: Arc<FxHashMap<u32, u64>>,
    /// Whether this pass records block sizes into `learnt`.
    learning: bool,
}

impl<'a> Rewinder<'a> {
    /// Start from the layout at snapshot time.
    pub fn new(snapshot: &'a Snapshot, device: &'a DeviceSnapshot) -> Rewinder<'a> {
        let mut pieces = BTreeMap::new();
        let mut segments = BTreeMap::new();
        for seg in &device.segments {
            let small = match seg.segment_type {
                SegmentType::Small => true,
                SegmentType::Large => false,
                SegmentType::Unknown => seg.total_size <= SMALL_BUFFER,
            };
            segments.insert(seg.address, SegmentInfo { stream: seg.stream, small, expandable: seg.is_expandable });
            for b in &seg.blocks {
                let state = if b.state == BlockState::Unknown { BlockState::ActiveAllocated } else { b.state };
                let requested = if state.is_active() { b.requested_size } else { 0 };
                let stack = if state.is_active() { b.stack } else { EMPTY_STACK };
                let piece = Piece { size: b.size, segment: seg.address, state, requested, stack, carved_at: None };
                pieces.insert(b.address, piece);
            }
        }
        let at = Position { pieces, segments, next: device.trace.len(), estimated: false, mismatches: 0 };
        let mut first = Rewinder {
            device,
            settings: snapshot.allocator_settings.as_ref(),
            config: config_of(snapshot.allocator_settings.as_ref()),
            at,
            learnt: Arc::default(),
            learning: true,
        };
        let mut second = Rewinder { learning: false, ..first.clone() };
        // The first pass rewinds the whole trace to learn the true size of
        // every block it had to guess (see `learn`); the second uses them.
        while first.at.next > 0 {
            first.at.next -= 1;
            first.undo(first.at.next);
        }
        second.learnt = first.learnt;
        second
    }

    /// This rewinder's positions every `every` rows from where it stands
    /// down to the trace's start (see [`Checkpoints`]).
    pub fn checkpoints(mut self, every: usize) -> Checkpoints {
        let every = every.max(1);
        let mut positions = vec![self.at.clone()];
        while self.at.next > 0 {
            self.at.next -= 1;
            self.undo(self.at.next);
            if self.at.next.is_multiple_of(every) {
                positions.push(self.at.clone());
            }
        }
        positions.reverse();
        Checkpoints { learnt: self.learnt, positions }
    }

    /// A rewinder standing at the nearest of `checkpoints` at or after
    /// `row` (`None`: the trace's start), as [`Rewinder::new`] would stand
    /// once rewound there: rewinding to `row` and earlier rows then undoes
    /// at most the checkpoints' spacing more than the rows between them.
    pub fn from_checkpoints(
        snapshot: &'a Snapshot,
        device: &'a DeviceSnapshot,
        checkpoints: &Checkpoints,
        row: Option<u32>,
    ) -> Rewinder<'a> {
        let target = row.map_or(0, |r| r as usize + 1);
        let k = checkpoints.positions.partition_point(|p| p.next < target);
        let at = checkpoints.positions.get(k).or(checkpoints.positions.last()).cloned().unwrap_or_default();
        Rewinder {
            device,
            settings: snapshot.allocator_settings.as_ref(),
            config: config_of(snapshot.allocator_settings.as_ref()),
            at,
            learnt: Arc::clone(&checkpoints.learnt),
            learning: false,
        }
    }

    /// Undo entries until the layout is the one right after `row` (`None`:
    /// before the first row). Rows must come in decreasing order; a row at
    /// or after one already reached changes nothing.
    pub fn rewind_to(&mut self, row: Option<u32>) -> Layout {
        let target = row.map_or(0, |r| r as usize + 1);
        while self.at.next > target {
            self.at.next -= 1;
            self.undo(self.at.next);
        }
        self.layout(row)
    }

    fn layout(&self, row: Option<u32>) -> Layout {
        let mut out: Vec<LayoutSegment> = self
            .at
            .segments
            .iter()
            .map(|(&address, info)| LayoutSegment {
                address,
                size: 0,
                stream: info.stream,
                small: info.small,
                expandable: info.expandable,
                blocks: Vec::new(),
            })
            .collect();
        for (&address, p) in &self.at.pieces {
            let Ok(k) = out.binary_search_by_key(&p.segment, |s| s.address) else { continue };
            let seg = &mut out[k];
            seg.size += p.size;
            seg.blocks.push(LayoutBlock {
                address,
                size: p.size,
                requested_size: p.requested,
                state: p.state,
                stack: p.stack,
            });
        }
        // An expandable segment's lowest mapped byte may have moved.
        for seg in &mut out {
            if let Some(first) = seg.blocks.first() {
                seg.address = seg.address.min(first.address);
            }
        }
        out.sort_by_key(|s| s.address);
        Layout {
            after_row: row,
            segments: out,
            undone: (self.device.trace.len() - self.at.next) as u32,
            exact: !self.at.estimated && self.at.mismatches == 0,
            mismatches: self.at.mismatches,
        }
    }

    /// The piece holding `addr`.
    fn piece_at(&self, addr: u64) -> Option<(u64, Piece)> {
        self.at.pieces.range(..=addr).next_back().filter(|(a, p)| addr < **a + p.size).map(|(a, p)| (*a, *p))
    }

    fn undo(&mut self, i: usize) {
        let trace = &self.device.trace;
        let (addr, size) = (trace.addrs()[i], trace.sizes()[i]);
        match trace.action(i) {
            Action::Alloc => match self.at.pieces.get_mut(&addr) {
                Some(p) if p.state.is_active() => {
                    let carved_at = p.carved_at;
                    *p = Piece { state: BlockState::Inactive, requested: 0, stack: EMPTY_STACK, carved_at: None, ..*p };
                    self.merge_around(addr);
                    if let Some(row) = carved_at.filter(|_| self.learning) {
                        self.learn(addr, size, row);
                    }
                }
                _ => self.at.mismatches += 1,
            },
            Action::FreeRequested => match self.at.pieces.get_mut(&addr) {
                Some(p) if p.state.is_active() => p.state = BlockState::ActiveAllocated,
                _ => self.at.mismatches += 1,
            },
            Action::FreeCompleted => self.unfree(i as u32, addr, size, trace.stacks()[i]),
            Action::SegmentAlloc => {
                let busy = self.remove_range(addr, addr.saturating_add(size));
                if busy || self.at.segments.remove(&addr).is_none() {
                    self.at.mismatches += 1;
                }
            }
            Action::SegmentFree => {
                if self.piece_at(addr).is_some() {
                    self.at.mismatches += 1;
                    return;
                }
                let stream = trace.streams().get(trace.entry(i).stream as usize).copied().unwrap_or(0);
                let small = size <= SMALL_BUFFER;
                self.at.segments.insert(addr, SegmentInfo { stream, small, expandable: false });
                self.insert_free(addr, size, addr);
            }
            Action::SegmentMap => {
                let segment = self.piece_at(addr).map(|(_, p)| p.segment);
                if self.remove_range(addr, addr.saturating_add(size)) {
                    self.at.mismatches += 1;
                }
                if let Some(s) = segment
                    && !self.at.pieces.values().any(|p| p.segment == s)
                {
                    self.at.segments.remove(&s);
                }
            }
            Action::SegmentUnmap => {
                if self.piece_at(addr).is_some() {
                    self.at.mismatches += 1;
                    return;
                }
                let end = addr.saturating_add(size);
                let before = self.at.pieces.range(..addr).next_back().filter(|(a, p)| **a + p.size == addr);
                let after = self.at.pieces.get(&end);
                let segment = match before.map(|(_, p)| p.segment).or(after.map(|p| p.segment)) {
                    Some(s) => s,
                    None => {
                        // A range of a reservation with nothing else mapped.
                        let stream = trace.streams().get(trace.entry(i).stream as usize).copied().unwrap_or(0);
                        let small = size < LARGE_BUFFER;
                        self.at.segments.insert(addr, SegmentInfo { stream, small, expandable: true });
                        addr
                    }
                };
                self.insert_free(addr, size, segment);
            }
            Action::Snapshot | Action::Oom | Action::Other => {}
        }
    }

    /// Right before an `alloc`, the allocator's free block holding its
    /// address started there (allocations take the front of a free block,
    /// and free blocks are always merged with free neighbours): its size,
    /// with the split rule, gives the block's true size, for the pass that
    /// carves it back at `free_row`.
    fn learn(&mut self, addr: u64, requested: u64, free_row: u32) {
        let Some((start, free)) = self.piece_at(addr).filter(|(_, p)| p.state == BlockState::Inactive) else {
            return;
        };
        // The free range may seem to begin before `addr`, where this pass
        // guessed a neighbour too short; its end is certain (the next
        // block's address, or the segment's end).
        let room = start + free.size - addr;
        let rounded = crate::simulate::round_size(requested, &self.config);
        if rounded > room {
            return;
        }
        let leftover = room - rounded;
        let info = self.at.segments.get(&free.segment).copied();
        let oversize = self.settings.and_then(|s| s.max_split_size).is_some_and(|m| rounded >= m);
        let split = match info {
            Some(i) if i.small || i.expandable => leftover >= MIN_BLOCK,
            _ => !oversize && leftover > SMALL_SIZE,
        };
        Arc::make_mut(&mut self.learnt).insert(free_row, if split { rounded } else { room });
    }

    /// Undo a `free_completed`: carve the freed block back out of the free
    /// range holding its address, as pending free.
    fn unfree(&mut self, row: u32, addr: u64, requested: u64, stack: StackId) {
        let Some((start, free)) = self.piece_at(addr).filter(|(_, p)| p.state == BlockState::Inactive) else {
            self.at.mismatches += 1;
            return;
        };
        let info = self.at.segments.get(&free.segment).copied();
        let end = start + free.size;
        let rounded = crate::simulate::round_size(requested, &self.config);
        let room = end - addr;
        let size = if let Some(&known) = self.learnt.get(&row).filter(|&&k| k <= room) {
            known
        } else if rounded >= room {
            if rounded > room {
                self.at.estimated = true;
            }
            room
        } else {
            let leftover = room - rounded;
            let oversize = self.settings.and_then(|s| s.max_split_size).is_some_and(|m| rounded >= m);
            match info {
                Some(i) if i.small || i.expandable => {
                    // Split whenever at least 512 bytes are left.
                    if leftover >= MIN_BLOCK { rounded } else { room }
                }
                _ if oversize => {
                    self.at.estimated = true;
                    room
                }
                _ if leftover <= SMALL_SIZE => room,
                _ => {
                    self.at.estimated = true;
                    rounded
                }
            }
        };
        if addr > start {
            self.at.pieces.insert(start, Piece { size: addr - start, ..free });
        } else {
            self.at.pieces.remove(&start);
        }
        let carved_at = Some(row);
        let state = BlockState::ActivePendingFree;
        self.at.pieces.insert(addr, Piece { size, segment: free.segment, state, requested, stack, carved_at });
        if addr + size < end {
            self.at.pieces.insert(addr + size, Piece { size: end - addr - size, ..free });
        }
    }

    /// Insert a free piece and merge it with free neighbours of its segment.
    fn insert_free(&mut self, addr: u64, size: u64, segment: u64) {
        let piece =
            Piece { size, segment, state: BlockState::Inactive, requested: 0, stack: EMPTY_STACK, carved_at: None };
        self.at.pieces.insert(addr, piece);
        self.merge_around(addr);
    }

    /// Merge the free piece at `addr` with free, adjacent pieces of the same segment.
    fn merge_around(&mut self, mut addr: u64) {
        let Some(&p) = self.at.pieces.get(&addr) else { return };
        let mergeable = |q: &Piece| q.state == BlockState::Inactive && q.segment == p.segment;
        if let Some((&a, q)) = self.at.pieces.range(..addr).next_back()
            && a + q.size == addr
            && mergeable(q)
        {
            let merged = q.size + p.size;
            self.at.pieces.remove(&addr);
            if let Some(q) = self.at.pieces.get_mut(&a) {
                q.size = merged;
            }
            addr = a;
        }
        let Some(&p) = self.at.pieces.get(&addr) else { return };
        let next = addr + p.size;
        if let Some(q) = self.at.pieces.get(&next).copied().filter(mergeable) {
            self.at.pieces.remove(&next);
            if let Some(p) = self.at.pieces.get_mut(&addr) {
                p.size += q.size;
            }
        }
    }

    /// Remove `[lo, hi)` from the pieces, trimming pieces that overlap its
    /// ends. Returns whether any removed byte was in use.
    fn remove_range(&mut self, lo: u64, hi: u64) -> bool {
        let mut busy = false;
        let overlapping: Vec<(u64, Piece)> =
            self.at.pieces.range(..hi).rev().take_while(|(a, p)| **a + p.size > lo).map(|(a, p)| (*a, *p)).collect();
        for (a, p) in overlapping {
            self.at.pieces.remove(&a);
            busy |= p.state.is_active();
            if a < lo {
                self.at.pieces.insert(a, Piece { size: lo - a, ..p });
            }
            if a + p.size > hi {
                self.at.pieces.insert(hi, Piece { size: a + p.size - hi, ..p });
            }
        }
        busy
    }
}

/// The layout of a device right after `row` (`None`: before the first row).
pub fn layout_after(snapshot: &Snapshot, device: &DeviceSnapshot, row: Option<u32>) -> Layout {
    Rewinder::new(snapshot, device).rewind_to(row)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::testing::Build;

    const M: u64 = 1 << 20;
    const BASE: u64 = 0x7f00_0000_0000;

    /// (offset in the segment, size, state) of each block.
    fn blocks(layout: &Layout) -> Vec<(u64, u64, BlockState)> {
        layout.blocks().map(|(_, b)| (b.address - BASE, b.size / 512 * 512, b.state)).collect()
    }

    #[test]
    fn rewinding_learns_the_size_of_an_unsplit_block() {
        use BlockState::{ActiveAllocated as A, Inactive as F};
        let mut b = Build::new();
        let s = b.stack(&[("/srv/jobs/t.py", 1, "f")]);
        let (a, x, c) = (BASE, BASE + 12 * M, BASE + 40 * M);
        b.event(Action::SegmentAlloc, BASE, 60 * M, 0); // 0
        b.event(Action::Alloc, a, 12 * M, s); // 1
        b.event(Action::Alloc, x, 28 * M, s); // 2: split, 20 MiB left
        b.event(Action::Alloc, c, 20 * M, s); // 3: takes the rest
        b.event(Action::FreeRequested, x, 28 * M, s); // 4
        b.event(Action::FreeCompleted, x, 28 * M, s); // 5
        // 6: 27.5 MiB in the 28 MiB hole: half a MiB left, so not split.
        b.event(Action::Alloc, x, 27 * M + M / 2, s);
        b.event(Action::FreeRequested, c, 20 * M, s); // 7
        b.event(Action::FreeCompleted, c, 20 * M, s); // 8
        b.event(Action::FreeRequested, x, 27 * M + M / 2, s); // 9
        b.event(Action::FreeCompleted, x, 27 * M + M / 2, s); // 10
        b.segment(BASE, false, &[(12 * M, A, 12 * M, s), (48 * M, F, 0, 0)]);
        let snapshot = b.finish();
        let mut r = Rewinder::new(&snapshot, &snapshot.devices[0]);
        // When freed, 48 MiB were free behind the block: only its allocation
        // tells that it was 28 MiB, not 27.5.
        let at_8 = r.rewind_to(Some(8));
        assert_eq!(blocks(&at_8), [(0, 12 * M, A), (12 * M, 28 * M, A), (40 * M, 20 * M, F)]);
        assert!(at_8.exact);
        let at_3 = r.rewind_to(Some(3));
        assert_eq!(blocks(&at_3), [(0, 12 * M, A), (12 * M, 28 * M, A), (40 * M, 20 * M, A)]);
        assert_eq!((at_3.reserved(), at_3.undone, at_3.mismatches), (60 * M, 7, 0));
        let start = r.rewind_to(None);
        assert!(start.segments.is_empty() && start.exact && start.mismatches == 0);
    }

    #[test]
    fn a_rewinder_from_checkpoints_finds_the_layouts_of_a_fresh_one() {
        for name in ["oom_leak", "mlp_train_all", "ring_overflow", "streams", "compiled"] {
            let a = crate::testing::corpus(name);
            let device = &a.snapshot.devices[0];
            let rows = device.trace.len() as u32;
            // Spacing that does not divide the trace, so rows fall between
            // checkpoints, before the first and after the last.
            let checkpoints = Rewinder::new(&a.snapshot, device).checkpoints(97);
            let mut fresh = Rewinder::new(&a.snapshot, device);
            let wanted: Vec<Option<u32>> =
                (0..rows).rev().step_by((rows as usize / 40).max(1)).map(Some).chain([None]).collect();
            for &row in &wanted {
                let expected = fresh.rewind_to(row);
                let mut near = Rewinder::from_checkpoints(&a.snapshot, device, &checkpoints, row);
                assert!(near.at.next <= row.map_or(0, |r| r as usize + 1) + 97, "{name}: starts near {row:?}");
                assert_eq!(near.rewind_to(row), expected, "{name}: after row {row:?}");
            }
            // Through the view's cache as well.
            let last = wanted[1];
            assert_eq!(a.rewinder(device.device, last).expect("device").rewind_to(last), {
                let mut r = Rewinder::new(&a.snapshot, device);
                r.rewind_to(last)
            });
        }
    }

    #[test]
    fn a_free_the_layout_cannot_hold_is_a_mismatch() {
        let mut b = Build::new();
        b.event(Action::FreeCompleted, BASE, M, 0);
        b.segment(BASE, true, &[(2 * M, BlockState::ActiveAllocated, 2 * M, 0)]);
        let snapshot = b.finish();
        let layout = layout_after(&snapshot, &snapshot.devices[0], None);
        assert_eq!(layout.mismatches, 1);
        assert!(!layout.exact);
        assert_eq!(layout.reserved(), 2 * M, "the layout is kept as it was");
    }

    #[test]
    fn sizes_round_like_the_allocator() {
        assert_eq!(round_size(1, None), 512);
        assert_eq!(round_size(513, None), 1024);
        assert_eq!(round_size(305_920_000, None), 305_920_000);
        assert_eq!(allocation_size(305_920_000), 306_184_192);
        assert_eq!(allocation_size(4), SMALL_BUFFER);
        assert_eq!(allocation_size(5 << 20), LARGE_BUFFER);
        // roundup_power2_divisions:4 over every interval: 1.2 GiB in
        // [1 GiB, 2 GiB) rounds to the next quarter, 1.25 GiB.
        let settings = AllocatorSettings {
            roundup_power2_divisions: (0..17).map(|k| (1 << k, 4)).collect(),
            ..Default::default()
        };
        assert_eq!(round_size(1_288_490_189, Some(&settings)), 1_342_177_280);
        assert_eq!(round_size(1 << 30, Some(&settings)), 1 << 30);
        // Below 512 · divisions, plain 512 rounding.
        assert_eq!(round_size(1000, Some(&settings)), 1024);
    }
}
