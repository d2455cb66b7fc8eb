//! Which memory pool each trace row belongs to: the default pool or a
//! private pool (a CUDA graph's, one from `graph_pool_handle()`, a
//! `MemPool`).
//!
//! PyTorch 2.11 does not say so in the trace: its `TraceEntry` holds a
//! `mempool_` but the snapshot's trace entries have no `pool_id` key
//! (checked on an H200, `tests/gpu/graph_pools_job.py`), and nothing marks
//! where a capture begins or ends (`beginAllocateToPool` and
//! `endAllocateToPool` record nothing). What the snapshot does say is the
//! pool of every segment alive at the end (`segment_pool_id`), and the trace
//! says where each segment was and which addresses each allocation got.
//! Segments never move between pools, and an allocation is served from a
//! segment of the pool it was asked of, so:
//!
//! 1. a `segment_alloc` belongs to the pool its row's `pool_id` names
//!    (newer PyTorch records it); else, when no later `segment_free` releases
//!    that range, to the pool of the final segment at that address;
//!    expandable mappings (`segment_map`) to the pool of the final segment
//!    containing them (a reservation belongs to one pool until it is gone);
//! 2. every `alloc` and free belongs to the pool of the recorded segment
//!    holding its address at that row (or its own `pool_id`, where recorded).
//!
//! A segment released before the snapshot, under a PyTorch that records no
//! `pool_id`, is not in the final segments. A private one is released only
//! once every graph using its pool is destroyed (then `empty_cache()`), and
//! the driver may hand its address to another pool next. Its pool is
//! inferred from the allocations around its first one on the same stream
//! (a capture allocates on its capture stream throughout): the pool of the
//! nearest attributed allocation before it, when the nearest after it is in
//! the same pool or there is none; the default pool otherwise. Not the pool
//! of the next allocation alone: `CUDAGraph.capture_begin` makes two 8-byte
//! allocations on the capture stream before it starts allocating to the
//! pool (the CUDA generator's seed and offset, by their size), from the
//! default pool, and on a fresh capture stream nothing precedes them (seen
//! on the H200: `graph_release`, whose stacks name `capture_begin`).
//! [`PoolMap::inferred_segments`] says how many segments were inferred so.

use std::collections::BTreeMap;

use crate::snapshot::{Action, DeviceSnapshot};

/// A memory pool's id as PyTorch names it (`MempoolId_t`): `(0, 0)` is the
/// default pool; a CUDA graph's own pool is `(n, 0)`, one from
/// `graph_pool_handle()` (or cudagraph trees, or a `MemPool`) `(0, n)`.
pub type PoolId = (i64, i64);

/// The default pool's id.
pub const DEFAULT_POOL: PoolId = (0, 0);

/// The pool of each trace row of one device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolMap {
    /// Sparse, by row: rows that belong to a private pool (allocations,
    /// frees and segment entries); every other row is the default pool's.
    rows: Vec<(u32, PoolId)>,
    /// Private pools in order of first appearance in the trace, then those
    /// only the final segments name.
    pub private_pools: Vec<PoolId>,
    /// In a run that used private pools: segments created in the trace and
    /// released before the snapshot, with no `pool_id` recorded, whose pool
    /// was inferred from the allocations beside them.
    pub inferred_segments: usize,
    /// The lives of private segments (expandable: mapped ranges), by the
    /// row that created them.
    segments: Vec<PrivateSegment>,
}

/// One private segment's life in trace rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PrivateSegment {
    start: u64,
    end: u64,
    /// The `segment_alloc` or `segment_map` row; `None` before the trace.
    from: Option<u32>,
    /// The row that released it (or the first of its range); `None`: alive
    /// at the end.
    to: Option<u32>,
    pool: PoolId,
}

impl PoolMap {
    /// About how much memory this holds, for caches that count what they
    /// keep.
    pub fn heap_bytes(&self) -> usize {
        self.rows.capacity() * std::mem::size_of::<(u32, PoolId)>()
            + self.private_pools.capacity() * std::mem::size_of::<PoolId>()
            + self.segments.capacity() * std::mem::size_of::<PrivateSegment>()
    }

    /// Attribute every row of `device`'s trace to its pool.
    pub fn of(device: &DeviceSnapshot) -> PoolMap {
        let trace = &device.trace;
        let mut map = PoolMap::default();
        for s in &device.segments {
            if s.pool_id != DEFAULT_POOL && !map.private_pools.contains(&s.pool_id) {
                map.private_pools.push(s.pool_id);
            }
        }
        let recorded = !trace.pool_id.is_empty();
        if map.private_pools.is_empty() && !recorded {
            // The common case, decided without a pass over a long trace.
            return map;
        }
        let segment_pools = segment_pools(device);
        let from_final: Vec<PoolId> = std::mem::take(&mut map.private_pools);
        // Recorded segments alive at each row: start → (end, (attribution,
        // index in `lives`)). Final segments the trace never created (its
        // ring buffer wrapped) were there from the start.
        let mut live: Live<Attr> = BTreeMap::new();
        let mut lives: Vec<Life> = Vec::new();
        let created: rustc_hash::FxHashSet<u64> =
            (0..trace.len()).filter(|&i| trace.action(i) == Action::SegmentAlloc).map(|i| trace.addrs()[i]).collect();
        for seg in device.segments.iter().filter(|s| !s.is_expandable && !created.contains(&s.address)) {
            let end = seg.address.saturating_add(seg.total_size);
            live.insert(seg.address, (end, (Attr::Read(seg.pool_id), lives.len())));
            lives.push(Life { start: seg.address, end, from: None, to: None, attr: Attr::Read(seg.pool_id) });
        }
        let mut guesses = 0u32;
        let mut attrs: Vec<(u32, Attr)> = Vec::new();
        let (addrs, sizes) = (trace.addrs(), trace.sizes());
        for i in 0..trace.len() {
            let row = i as u32;
            let (addr, size) = (addrs[i], sizes[i]);
            let attr = match trace.action(i) {
                Action::SegmentAlloc | Action::SegmentMap => {
                    let attr = match segment_pools.get(&row) {
                        Some(&p) => Attr::Read(p),
                        None => {
                            guesses += 1;
                            Attr::Unknown(guesses - 1)
                        }
                    };
                    let end = addr.saturating_add(size);
                    live.insert(addr, (end, (attr, lives.len())));
                    lives.push(Life { start: addr, end, from: Some(row), to: None, attr });
                    attr
                }
                Action::SegmentFree | Action::SegmentUnmap => {
                    let attr = trace.pool_id(row).map(Attr::Read).unwrap_or_else(|| containing(&live, addr));
                    for life in remove_range(&mut live, addr, addr.saturating_add(size)) {
                        lives[life].to.get_or_insert(row);
                    }
                    attr
                }
                Action::Alloc | Action::FreeRequested | Action::FreeCompleted => {
                    trace.pool_id(row).map(Attr::Read).unwrap_or_else(|| containing(&live, addr))
                }
                _ => Attr::Read(trace.pool_id(row).unwrap_or(DEFAULT_POOL)),
            };
            if attr != Attr::Read(DEFAULT_POOL) {
                attrs.push((row, attr));
            }
        }
        let resolved = resolve_unknown(device, &attrs, guesses as usize);
        map.inferred_segments = guesses as usize;
        let pool_of = |attr: Attr| match attr {
            Attr::Read(p) => p,
            Attr::Unknown(k) => resolved[k as usize],
        };
        map.segments = lives
            .into_iter()
            .map(|l| PrivateSegment { start: l.start, end: l.end, from: l.from, to: l.to, pool: pool_of(l.attr) })
            .filter(|s| s.pool != DEFAULT_POOL)
            .collect();
        for (row, attr) in attrs {
            let pool = match attr {
                Attr::Read(p) => p,
                Attr::Unknown(k) => resolved[k as usize],
            };
            if pool != DEFAULT_POOL {
                map.rows.push((row, pool));
                if !map.private_pools.contains(&pool) {
                    map.private_pools.push(pool);
                }
            }
        }
        for p in from_final {
            if !map.private_pools.contains(&p) {
                map.private_pools.push(p);
            }
        }
        map
    }

    /// The pool of trace row `row` ([`DEFAULT_POOL`] unless it belongs to a
    /// private pool).
    pub fn pool(&self, row: u32) -> PoolId {
        match self.rows.binary_search_by_key(&row, |&(r, _)| r) {
            Ok(i) => self.rows[i].1,
            Err(_) => DEFAULT_POOL,
        }
    }

    /// The pool of the segment holding `addr` right after trace row `row`
    /// (`None`: before the first row): [`DEFAULT_POOL`] unless a private
    /// segment held it then.
    pub fn segment_pool(&self, addr: u64, row: Option<u32>) -> PoolId {
        let alive = |s: &PrivateSegment| {
            let born = match (s.from, row) {
                (None, _) => true,
                (Some(_), None) => false,
                (Some(f), Some(r)) => f <= r,
            };
            let dead = matches!((s.to, row), (Some(t), Some(r)) if t <= r);
            born && !dead
        };
        self.segments.iter().find(|s| s.start <= addr && addr < s.end && alive(s)).map_or(DEFAULT_POOL, |s| s.pool)
    }

    /// No row belongs to a private pool.
    pub fn is_default_only(&self) -> bool {
        self.rows.is_empty()
    }
}

/// A recorded segment's life while attributing rows.
struct Life {
    start: u64,
    end: u64,
    from: Option<u32>,
    to: Option<u32>,
    attr: Attr,
}

/// Recorded segments alive: start → (end, (attribution, index of its life)).
type Live<T> = BTreeMap<u64, (u64, (T, usize))>;

/// Where a row's pool came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attr {
    /// Read from the final segments or the trace's `pool_id`.
    Read(PoolId),
    /// The `k`-th segment whose pool could not be read.
    Unknown(u32),
}

/// The pool of each segment that could not be read: that of the nearest
/// read allocation on the same stream before its first allocation, when
/// the nearest after it agrees or there is none; else the default.
fn resolve_unknown(device: &DeviceSnapshot, attrs: &[(u32, Attr)], unknown: usize) -> Vec<PoolId> {
    let mut out = vec![DEFAULT_POOL; unknown];
    if unknown == 0 {
        return out;
    }
    let trace = &device.trace;
    let attr_of = |row: usize| match attrs.binary_search_by_key(&(row as u32), |&(r, _)| r) {
        Ok(i) => attrs[i].1,
        Err(_) => Attr::Read(DEFAULT_POOL),
    };
    // The first allocation of each unknown segment.
    let mut first: Vec<Option<usize>> = vec![None; unknown];
    for &(row, attr) in attrs {
        if let Attr::Unknown(k) = attr
            && trace.action(row as usize) == Action::Alloc
            && first[k as usize].is_none()
        {
            first[k as usize] = Some(row as usize);
        }
    }
    let stream = |row: usize| trace.stream[row];
    let read_alloc =
        |row: usize, s| trace.action(row) == Action::Alloc && stream(row) == s && matches!(attr_of(row), Attr::Read(_));
    for (k, first) in first.into_iter().enumerate() {
        let Some(at) = first else { continue };
        let s = stream(at);
        let before = (0..at).rev().find(|&r| read_alloc(r, s)).map(attr_of);
        let after = (at + 1..trace.len()).find(|&r| read_alloc(r, s)).map(attr_of);
        out[k] = match (before, after) {
            (Some(Attr::Read(a)), Some(Attr::Read(b))) if a == b => a,
            (Some(Attr::Read(a)), None) => a,
            _ => DEFAULT_POOL,
        };
    }
    out
}

/// The pool of each `segment_alloc` and `segment_map` row that can be read:
/// its own `pool_id`, or the final segment's.
fn segment_pools(device: &DeviceSnapshot) -> BTreeMap<u32, PoolId> {
    let trace = &device.trace;
    let freed_later = later_frees(device);
    let mut finals: BTreeMap<u64, (u64, PoolId)> = BTreeMap::new();
    for s in &device.segments {
        finals.insert(s.address, (s.address.saturating_add(s.total_size), s.pool_id));
    }
    let mut out = BTreeMap::new();
    for (i, &freed) in freed_later.iter().enumerate() {
        let row = i as u32;
        let addr = trace.addrs()[i];
        let pool = match trace.action(i) {
            Action::SegmentAlloc => match trace.pool_id(row) {
                Some(p) => Some(p),
                None if freed => None,
                None => finals.get(&addr).map(|&(_, p)| p),
            },
            Action::SegmentMap => trace.pool_id(row).or_else(|| {
                finals.range(..=addr).next_back().filter(|(_, (end, _))| *end > addr).map(|(_, &(_, p))| p)
            }),
            _ => continue,
        };
        if let Some(p) = pool {
            out.insert(row, p);
        }
    }
    out
}

/// For each row, whether it is a `segment_alloc` whose range a later
/// `segment_free` releases (so the final segments do not describe it).
fn later_frees(device: &DeviceSnapshot) -> Vec<bool> {
    let trace = &device.trace;
    let mut out = vec![false; trace.len()];
    // Addresses a later segment_free releases, seen walking backwards; a
    // segment_alloc at that address is the one it released.
    let mut freed: rustc_hash::FxHashSet<u64> = rustc_hash::FxHashSet::default();
    for i in (0..trace.len()).rev() {
        let addr = trace.addrs()[i];
        match trace.action(i) {
            Action::SegmentFree => {
                freed.insert(addr);
            }
            Action::SegmentAlloc => out[i] = freed.remove(&addr),
            _ => {}
        }
    }
    out
}

/// The pool of the live recorded segment holding `addr`.
fn containing(live: &Live<Attr>, addr: u64) -> Attr {
    live.range(..=addr)
        .next_back()
        .filter(|(_, (end, _))| *end > addr)
        .map(|(_, &(_, (a, _)))| a)
        .unwrap_or(Attr::Read(DEFAULT_POOL))
}

/// Forget `[start, end)`: whole recorded segments, or the unmapped part of
/// an expandable mapping; returns the lives it touched.
fn remove_range<T: Copy>(live: &mut Live<T>, start: u64, end: u64) -> Vec<usize> {
    let overlapping: Vec<_> =
        live.range(..end).rev().take_while(|(_, (e, _))| *e > start).map(|(&s, &v)| (s, v)).collect();
    let touched = overlapping.iter().map(|&(_, (_, (_, life)))| life).collect();
    for (s, (e, pool)) in overlapping {
        live.remove(&s);
        if s < start {
            live.insert(s, (start, pool));
        }
        if e > end {
            live.insert(end, (e, pool));
        }
    }
    touched
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Block, BlockState, EMPTY_STACK, Segment, SegmentType};

    const MIB: u64 = 1 << 20;

    fn device(rows: &[(Action, u64, u64)], segments: Vec<Segment>) -> DeviceSnapshot {
        crate::analysis::testing::rows_device(rows, segments)
    }

    fn segment(address: u64, total_size: u64, pool_id: PoolId) -> Segment {
        Segment {
            address,
            total_size,
            allocated_size: 0,
            active_size: 0,
            requested_size: 0,
            stream: 0,
            segment_type: SegmentType::Small,
            pool_id,
            is_expandable: false,
            stack: EMPTY_STACK,
            blocks: vec![Block {
                address,
                size: total_size,
                requested_size: 0,
                state: BlockState::Inactive,
                stack: EMPTY_STACK,
                history: Vec::new(),
            }],
        }
    }

    #[test]
    fn allocations_take_the_pool_of_the_segment_holding_them() {
        use Action::*;
        let graph = (1, 0);
        let d = device(
            &[
                (SegmentAlloc, 0x1000_0000, 2 * MIB),
                (Alloc, 0x1000_0000, 512),
                (SegmentAlloc, 0x2000_0000, 2 * MIB),
                (Alloc, 0x2000_0200, 512),
                (FreeRequested, 0x2000_0200, 512),
                (FreeCompleted, 0x2000_0200, 512),
                // The default segment is released; the driver hands its
                // address to the graph's pool next.
                (FreeRequested, 0x1000_0000, 512),
                (FreeCompleted, 0x1000_0000, 512),
                (SegmentFree, 0x1000_0000, 2 * MIB),
                (SegmentAlloc, 0x1000_0000, 2 * MIB),
                (Alloc, 0x1000_0000, 512),
            ],
            vec![segment(0x1000_0000, 2 * MIB, graph), segment(0x2000_0000, 2 * MIB, graph)],
        );
        let map = PoolMap::of(&d);
        let pools: Vec<PoolId> = (0..11).map(|r| map.pool(r)).collect();
        assert_eq!(
            pools,
            vec![
                DEFAULT_POOL,
                DEFAULT_POOL,
                graph,
                graph,
                graph,
                graph,
                DEFAULT_POOL,
                DEFAULT_POOL,
                DEFAULT_POOL,
                graph,
                graph
            ]
        );
        assert_eq!(map.private_pools, vec![graph]);
        // The segment at 0x1000_0000 was the default pool's until row 8,
        // the graph's from row 9.
        assert_eq!(map.segment_pool(0x1000_0100, Some(5)), DEFAULT_POOL);
        assert_eq!(map.segment_pool(0x1000_0100, Some(9)), graph);
        assert_eq!(map.segment_pool(0x2000_0000, Some(2)), graph);
        assert_eq!(map.segment_pool(0x2000_0000, Some(1)), DEFAULT_POOL, "not yet there");
        assert_eq!(map.segment_pool(0x2000_0000, None), DEFAULT_POOL);
        assert_eq!(map.inferred_segments, 1, "the default segment freed before the end is inferred");
    }

    #[test]
    fn a_run_without_private_pools_needs_no_pass() {
        use Action::*;
        let d = device(&[(SegmentAlloc, 0x1000_0000, 2 * MIB), (Alloc, 0x1000_0000, 512)], vec![]);
        let map = PoolMap::of(&d);
        assert!(map.is_default_only());
        assert!(map.private_pools.is_empty());
        assert_eq!(map.pool(1), DEFAULT_POOL);
    }

    #[test]
    fn unmapping_trims_expandable_ranges() {
        let mut live = BTreeMap::new();
        live.insert(0u64, (100u64, ('a', 7)));
        assert_eq!(remove_range(&mut live, 20, 40), vec![7]);
        assert_eq!(live.into_iter().collect::<Vec<_>>(), vec![(0, (20, ('a', 7))), (40, (100, ('a', 7)))]);
    }
}
