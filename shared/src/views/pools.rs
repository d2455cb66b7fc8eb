//! Memory by pool and stream: one band per (memory pool, stream), so that
//! CUDA graphs' private pools show beside the default pool, with what each
//! reserves, what is allocated in it, and the difference (memory the pool
//! holds that nothing uses: a graph's pool keeps its high-water mark while
//! the graph lives). Which pool a row belongs to is inferred by
//! [`crate::pools`].
//!
//! The figures are the recorded ones, as the timeline's curves: reserved
//! bytes follow `segment_alloc`/`segment_map` and their frees, allocated
//! bytes the requested sizes of `alloc` until `free_requested`. Each band
//! starts from its final value (the snapshot's segments and blocks) less
//! the trace's changes, so a trace whose ring buffer wrapped starts from
//! what was there before it.

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use super::state::resolve_row;
use crate::error::ViewError;
use crate::indexed::IndexedSnapshot;
use crate::pools::{DEFAULT_POOL, PoolId};
use crate::snapshot::{Action, BlockState};
use crate::timeline::{Axis, MAX_PX};

/// Query of the pools view.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct PoolsParams {
    /// Device (default: the first).
    pub device: Option<u32>,
    /// Trace row: the bands' figures right after it. Default: the end.
    pub at: Option<u32>,
    /// Instead of `at`: the figures at this x of `axis`.
    pub x: Option<i64>,
    /// Axis of `x` (default `event`).
    pub axis: Option<Axis>,
    /// Also give each band's series over the whole trace in this many
    /// buckets of rows (at most [`MAX_PX`]); none when absent.
    pub px: Option<u32>,
}

/// One bucket of a band's series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BandPoint {
    /// The bucket's last row.
    pub row: u32,
    /// Reserved bytes after that row.
    pub reserved: u64,
    /// Allocated (requested) bytes after that row.
    pub allocated: u64,
    /// Reserved minus allocated after that row.
    pub fragmentation: u64,
    /// The most reserved within the bucket.
    pub reserved_max: u64,
    /// The most allocated within the bucket.
    pub allocated_max: u64,
}

/// One (pool, stream) band.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolBand {
    /// The memory pool: `[0, 0]` the default pool; `[n, 0]` a CUDA graph's
    /// own pool, `[0, n]` one from `graph_pool_handle()` (cudagraph trees,
    /// shared pools) or a `MemPool`.
    pub pool: PoolId,
    /// A private pool (not the default one).
    pub private: bool,
    /// Raw `cudaStream_t`.
    pub stream: u64,
    /// Reserved bytes at the row asked for.
    pub reserved: u64,
    /// Allocated (requested) bytes at that row.
    pub allocated: u64,
    /// Reserved minus allocated at that row: held by the pool, used by
    /// nothing.
    pub fragmentation: u64,
    /// The most this band reserved over the trace.
    pub reserved_peak: u64,
    /// The most allocated in it over the trace.
    pub allocated_peak: u64,
    /// The series, when `px` was given.
    pub series: Vec<BandPoint>,
}

/// The pools view's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolsAnswer {
    /// Device.
    pub device: u32,
    /// The figures are right after this row; `None` before the first row.
    pub row: Option<u32>,
    /// Rows in the device's trace.
    pub rows: u32,
    /// Bands: the default pool's first, then each private pool's, streams
    /// in order.
    pub bands: Vec<PoolBand>,
    /// Segments released before the snapshot whose pool was inferred from
    /// the allocations beside them (see [`crate::pools`]).
    pub inferred_segments: usize,
}

/// Running figures of one band.
#[derive(Clone, Copy, Default)]
struct Running {
    reserved: i128,
    allocated: i128,
    reserved_peak: i128,
    allocated_peak: i128,
    bucket_reserved: i128,
    bucket_allocated: i128,
}

fn bytes(v: i128) -> u64 {
    u64::try_from(v.max(0)).unwrap_or(u64::MAX)
}

/// Reserved, allocated and their difference per (pool, stream), at a row
/// and, with `px`, over the trace.
pub fn pools(a: &IndexedSnapshot, p: &PoolsParams) -> Result<PoolsAnswer, ViewError> {
    let device = a.device_or_first(p.device)?;
    let d = a.snapshot.device(device).ok_or_else(|| ViewError::NotFound(format!("device {device}")))?;
    let at = resolve_row(d, p.at, p.x, p.axis)?;
    let map = a.pool_map(device)?;
    let trace = &d.trace;
    let streams = trace.streams();
    let key_of = |r: usize| (map.pool(r as u32), streams.get(trace.stream[r] as usize).copied().unwrap_or(0));
    let delta = |r: usize| -> (i128, i128) {
        let s = i128::from(trace.sizes()[r]);
        match trace.action(r) {
            Action::SegmentAlloc | Action::SegmentMap => (s, 0),
            Action::SegmentFree | Action::SegmentUnmap => (-s, 0),
            Action::Alloc => (0, s),
            Action::FreeRequested => (0, -s),
            _ => (0, 0),
        }
    };

    // The final figures, less every change of the trace: where each band began.
    let mut bands: FxHashMap<(PoolId, u64), Running> = FxHashMap::default();
    for s in &d.segments {
        let b = bands.entry((s.pool_id, s.stream)).or_default();
        b.reserved += i128::from(s.total_size);
        let allocated: u64 =
            s.blocks.iter().filter(|b| b.state == BlockState::ActiveAllocated).map(|b| b.requested_size).sum();
        b.allocated += i128::from(allocated);
    }
    for r in 0..trace.len() {
        let (dr, da) = delta(r);
        if dr != 0 || da != 0 {
            let b = bands.entry(key_of(r)).or_default();
            b.reserved -= dr;
            b.allocated -= da;
        }
    }
    for b in bands.values_mut() {
        b.reserved_peak = b.reserved;
        b.allocated_peak = b.allocated;
        b.bucket_reserved = b.reserved;
        b.bucket_allocated = b.allocated;
    }
    let mut keys: Vec<(PoolId, u64)> = bands.keys().copied().collect();
    let order = |pool: PoolId| {
        if pool == DEFAULT_POOL {
            0
        } else {
            1 + map.private_pools.iter().position(|&p| p == pool).unwrap_or(usize::MAX - 1)
        }
    };
    keys.sort_by_key(|&(pool, stream)| (order(pool), pool, stream));
    let index: FxHashMap<(PoolId, u64), usize> = keys.iter().enumerate().map(|(i, &k)| (k, i)).collect();
    let mut running: Vec<Running> = keys.iter().map(|k| bands[k]).collect();
    let mut out: Vec<PoolBand> = keys
        .iter()
        .map(|&(pool, stream)| PoolBand {
            pool,
            private: pool != DEFAULT_POOL,
            stream,
            reserved: 0,
            allocated: 0,
            fragmentation: 0,
            reserved_peak: 0,
            allocated_peak: 0,
            series: Vec::new(),
        })
        .collect();
    let snapshot_at = |out: &mut Vec<PoolBand>, running: &[Running]| {
        for (band, r) in out.iter_mut().zip(running) {
            band.reserved = bytes(r.reserved);
            band.allocated = bytes(r.allocated);
            band.fragmentation = bytes(r.reserved - r.allocated);
        }
    };
    if at.is_none() {
        snapshot_at(&mut out, &running);
    }
    let rows = trace.len();
    let px = p.px.map(|px| px.clamp(1, MAX_PX) as usize);
    // The bucket each row closes, if any: bucket b ends at row ⌈(b+1)·rows/px⌉ - 1.
    let mut next_bucket = 0usize;
    let bucket_end = |b: usize, px: usize| ((b + 1) * rows).div_ceil(px).saturating_sub(1);
    for r in 0..rows {
        let (dr, da) = delta(r);
        if dr != 0 || da != 0 {
            let b = &mut running[index[&key_of(r)]];
            b.reserved += dr;
            b.allocated += da;
            b.reserved_peak = b.reserved_peak.max(b.reserved);
            b.allocated_peak = b.allocated_peak.max(b.allocated);
            b.bucket_reserved = b.bucket_reserved.max(b.reserved);
            b.bucket_allocated = b.bucket_allocated.max(b.allocated);
        }
        if at == Some(r as u32) {
            snapshot_at(&mut out, &running);
        }
        if let Some(px) = px {
            while next_bucket < px && bucket_end(next_bucket, px) == r {
                for (band, run) in out.iter_mut().zip(running.iter_mut()) {
                    band.series.push(BandPoint {
                        row: r as u32,
                        reserved: bytes(run.reserved),
                        allocated: bytes(run.allocated),
                        fragmentation: bytes(run.reserved - run.allocated),
                        reserved_max: bytes(run.bucket_reserved),
                        allocated_max: bytes(run.bucket_allocated),
                    });
                    run.bucket_reserved = run.reserved;
                    run.bucket_allocated = run.allocated;
                }
                next_bucket += 1;
            }
        }
    }
    for (band, r) in out.iter_mut().zip(&running) {
        band.reserved_peak = bytes(r.reserved_peak);
        band.allocated_peak = bytes(r.allocated_peak);
    }
    Ok(PoolsAnswer { device, row: at, rows: rows as u32, bands: out, inferred_segments: map.inferred_segments })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{corpus, oracle};

    fn private_bytes(a: &IndexedSnapshot) -> u64 {
        let d = a.snapshot.device(0).expect("device 0");
        d.segments.iter().filter(|s| s.pool_id != DEFAULT_POOL).map(|s| s.total_size).sum()
    }

    #[test]
    fn bands_add_up_to_pytorchs_figures_at_the_end() {
        for name in ["graph_manual", "graph_compiled", "graph_shared_pool", "graph_release"] {
            let a = corpus(name);
            let o = oracle(name);
            let v = pools(&a, &PoolsParams::default()).expect("pools");
            assert_eq!(v.bands.iter().map(|b| b.reserved).sum::<u64>(), o["reserved_bytes.all.current"], "{name}");
            let private: u64 = v.bands.iter().filter(|b| b.private).map(|b| b.reserved).sum();
            assert_eq!(private, private_bytes(&a), "{name}: the graphs' pools hold their segments");
            assert!(private > 0, "{name}");
            assert!(!v.bands[0].private, "{name}: the default pool comes first");
            for b in &v.bands {
                assert_eq!(b.fragmentation, b.reserved - b.allocated, "{name}");
                assert!(b.reserved_peak >= b.reserved && b.allocated_peak >= b.allocated, "{name}");
            }
        }
    }

    #[test]
    fn every_band_starts_empty_when_the_trace_reaches_back_to_the_start() {
        for name in ["graph_manual", "graph_release"] {
            let a = corpus(name);
            let v = pools(&a, &PoolsParams { x: Some(-1), ..Default::default() }).expect("before the trace");
            assert_eq!(v.row, None);
            assert!(v.bands.iter().all(|b| b.reserved == 0 && b.allocated == 0), "{name}: {:?}", v.bands);
        }
    }

    #[test]
    fn a_wrapped_trace_starts_from_what_was_there_before_it() {
        let a = corpus("ring_overflow");
        let o = oracle("ring_overflow");
        let end = pools(&a, &PoolsParams::default()).expect("pools");
        assert_eq!(end.bands.iter().map(|b| b.reserved).sum::<u64>(), o["reserved_bytes.all.current"]);
        let before = pools(&a, &PoolsParams { x: Some(-1), ..Default::default() }).expect("before the window");
        assert!(before.bands.iter().map(|b| b.reserved).sum::<u64>() > 0, "segments from before the window");
    }

    #[test]
    fn a_destroyed_graphs_pool_shrinks_below_its_peak() {
        // graph_release: the first graph's pool gave back the segments it
        // could once the graph was gone (empty_cache), keeping those still
        // holding its outputs.
        let a = corpus("graph_release");
        let v = pools(&a, &PoolsParams::default()).expect("pools");
        let first = v.bands.iter().find(|b| b.pool == (1, 0)).expect("the first graph's pool");
        assert!(first.reserved_peak > first.reserved, "{first:?}");
        assert!(v.bands.iter().any(|b| b.pool == (2, 0)), "the second graph's pool");
    }

    #[test]
    fn the_series_ends_at_the_final_figures_and_buckets_hold_their_peaks() {
        let a = corpus("graph_shared_pool");
        let v = pools(&a, &PoolsParams { px: Some(40), ..Default::default() }).expect("pools");
        for b in &v.bands {
            assert_eq!(b.series.len(), 40);
            let last = b.series.last().expect("a bucket");
            assert_eq!(last.row, v.rows - 1);
            assert_eq!((last.reserved, last.allocated), (b.reserved, b.allocated));
            assert_eq!(b.series.iter().map(|p| p.reserved_max).max(), Some(b.reserved_peak));
            assert_eq!(b.series.iter().map(|p| p.allocated_max).max(), Some(b.allocated_peak));
        }
        // The figures at a row are the series' at the bucket ending there.
        let mid = v.bands[0].series[19];
        let at = pools(&a, &PoolsParams { at: Some(mid.row), ..Default::default() }).expect("at");
        assert_eq!((at.bands[0].reserved, at.bands[0].allocated), (mid.reserved, mid.allocated));
    }

    #[test]
    fn the_blocks_view_names_each_allocations_pool() {
        let a = corpus("graph_shared_pool");
        let at_end = crate::views::blocks(&a, &crate::views::BlocksParams::default()).expect("blocks");
        let d = a.snapshot.device(0).expect("device 0");
        for seg in &at_end.segments {
            let recorded = d.segments.iter().find(|r| r.address == seg.addr).expect("a final segment");
            assert_eq!(seg.pool, recorded.pool_id, "segment {:#x}", seg.addr);
        }
        // Every live allocation lies in a segment of its own pool.
        for x in &at_end.allocations {
            let seg = d.segments.iter().find(|s| s.address <= x.addr && x.addr < s.address + s.total_size);
            assert_eq!(Some(x.pool), seg.map(|s| s.pool_id), "allocation {:#x}", x.addr);
        }
        assert!(at_end.allocations.iter().any(|x| x.pool == (0, 1)), "the graphs' outputs live in their pool");
    }

    #[test]
    fn a_run_without_graphs_has_default_bands_only() {
        let a = corpus("streams");
        let v = pools(&a, &PoolsParams::default()).expect("pools");
        assert!(v.bands.iter().all(|b| !b.private));
        assert_eq!(v.bands.len(), 2, "two streams");
        assert!(matches!(
            pools(&a, &PoolsParams { at: Some(1 << 30), ..Default::default() }),
            Err(ViewError::BadRequest(_))
        ));
    }
}
