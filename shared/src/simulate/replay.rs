//! Driving a device's trace through the allocator model.
//!
//! The trace's `alloc` and free entries are the program's requests (sizes
//! are the requested, unrounded ones); everything the allocator itself did
//! (`segment_alloc`, `segment_map`, block addresses) is re-derived by the
//! model. The recorded address of an `alloc` is only the key under which its
//! frees find the simulated block. A few recorded entries are the program's
//! doing rather than the allocator's and are honoured:
//!
//! - `segment_free` and `segment_unmap` entries are `empty_cache()` or the
//!   recorded allocator's own release under memory pressure (OOM path,
//!   garbage collection, oversize blocks). With the recorded settings the
//!   model releases the same segment when it has it whole and free (the
//!   replay gives segments the recorded driver's addresses, see below);
//!   otherwise, and always with other settings, once per run of such
//!   entries it releases every cached segment and whole free page it has at
//!   that moment, as `empty_cache()` does;
//! - an `oom` entry is a request that failed in the recorded run. Without a
//!   capacity the model cannot know the memory the recorded run had, so it
//!   honours the failure: nothing is allocated, the replay notes where the
//!   run ran out and goes on, as the recorded program did (and reproduces
//!   its peaks). Under a capacity, or when asked to grant the recorded
//!   failures ("what if there had been more memory"), the model attempts it
//!   (its size is the rounded request); if it fits, the block is returned at
//!   once, since the program never received it.
//!
//! A request that fails in the model but succeeded in the recorded run ends
//! the replay there: the program would have raised `OutOfMemoryError`, and
//! what it did next is not in the trace.
//!
//! CUDA graph captures (and cudagraph trees' warm-ups, and `MemPool`s)
//! allocate from private pools. The trace does not say when a capture
//! begins or ends, so each `alloc` is sent to the pool of the recorded
//! segment that served it ([`PoolMap`], from the final segments'
//! `segment_pool_id`). A recorded `segment_free` of a private segment means
//! its pool had become freeable (every graph using it destroyed): from then
//! on the model's `empty_cache()` releases that pool's cached segments too,
//! and before it only the default pool's, as PyTorch does.
//!
//! `segment_alloc` addresses are offered to the model as the addresses the
//! driver returns for new segments of the same size (see
//! [`CachingAllocator::offer_segment_addresses`]), so that ties between
//! equally sized free blocks break as in the recorded run.

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use super::SimError;
use super::allocator::{
    Allocation, AllocatorStats, CachingAllocator, OutOfMemory, SimSegment, allocation_size_with, round_size,
};
use super::config::AllocatorConfig;
use crate::pools::{DEFAULT_POOL, PoolMap};
use crate::snapshot::{Action, DeviceSnapshot};
use crate::stats::DeviceStats;

/// Where the simulated allocator ran out of memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimOom {
    /// Trace row of the request.
    pub row: u32,
    /// Time of the request (µs since the epoch; 0 when the file has no times).
    pub time_us: i64,
    /// The size the program asked for.
    pub requested_bytes: u64,
    /// The segment or mapping that did not fit ("Tried to allocate …").
    pub allocation_bytes: u64,
    /// Reserved bytes when it failed.
    pub reserved_bytes: u64,
    /// Allocated bytes when it failed.
    pub allocated_bytes: u64,
    /// The recorded run failed on this request too (an `oom` entry).
    pub recorded: bool,
}

/// Allocated, reserved and inactive-split bytes after each trace entry that
/// changed the allocator, as columns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Series {
    /// Trace row.
    pub rows: Vec<u32>,
    /// Allocated bytes after the row.
    pub allocated: Vec<u64>,
    /// Reserved bytes after the row.
    pub reserved: Vec<u64>,
    /// Inactive-split bytes after the row.
    pub inactive_split: Vec<u64>,
}

/// One device's replay.
#[derive(Clone, Debug)]
pub struct DeviceSimulation {
    /// CUDA device index.
    pub device: u32,
    /// Counters at the end (or at the OOM), with peaks.
    pub stats: AllocatorStats,
    /// The segments at the end (or at the OOM), simulated addresses.
    pub segments: Vec<SimSegment>,
    /// The first request that did not fit. The replay stops there, unless
    /// the recorded run failed on it too (and went on).
    pub oom: Option<SimOom>,
    /// Trace rows replayed (all of them unless it ran out of memory).
    pub rows_replayed: usize,
    /// Frees whose address had no live allocation (should be 0).
    pub unmatched_frees: usize,
    /// The series over time, when asked for.
    pub series: Option<Series>,
}

/// A device's trace being replayed, entry by entry: stop at any row to look
/// at the simulated layout ([`Replayer::allocator`]).
#[derive(Debug)]
pub struct Replayer<'a> {
    device: &'a DeviceSnapshot,
    allocator: CachingAllocator,
    /// The memory pool of each recorded row.
    pools: PoolMap,
    /// Recorded block address → the simulated allocation it stands for.
    live: FxHashMap<u64, Allocation>,
    /// `segment_alloc` entries since the last request.
    hints: Vec<(u64, u64)>,
    /// This run of `segment_free`/`segment_unmap` entries has released the
    /// whole cache already.
    released_all: bool,
    /// Replaying with the recorded settings: recorded releases are matched
    /// segment by segment.
    same_settings: bool,
    next_row: usize,
    unmatched_frees: usize,
    /// A request the model failed but the recorded run served: the end.
    stopped_at: Option<SimOom>,
    /// The first request both the model and the recorded run failed.
    recorded_oom: Option<SimOom>,
    /// Attempt the recorded run's failed requests even without a capacity.
    grant_recorded_ooms: bool,
    /// The capacity replayed under.
    capacity: Option<u64>,
    series: Option<Series>,
}

impl<'a> Replayer<'a> {
    /// Start replaying `device` from the state at its trace's first entry:
    /// an empty allocator when the trace reaches back to one, else the
    /// final state less the trace's effects ([`super::window_start`]), the
    /// memory in use before the window counting as a baseline. For the
    /// figures of a trace's window with the recorded settings (other
    /// settings would not have made that state).
    pub fn from_window_start(
        device: &'a DeviceSnapshot,
        config: AllocatorConfig,
        capacity: Option<u64>,
        record_series: bool,
    ) -> Result<Replayer<'a>, SimError> {
        if device.trace.is_empty() {
            return Err(SimError::NoTrace { device: device.device });
        }
        if !DeviceStats::of(device).trace_wrapped {
            return Replayer::new(device, config, capacity, record_series);
        }
        let start = super::window_start::window_start(device, &config)
            .map_err(|reason| SimError::WindowStart { device: device.device, reason })?;
        let mut replayer = Replayer::empty(device, config, capacity, record_series);
        for segment in &start {
            for (addr, allocation) in replayer.allocator.seed_segment(segment) {
                replayer.live.insert(addr, allocation);
            }
        }
        Ok(replayer)
    }

    /// Start replaying `device` from an empty allocator. Refuses a device
    /// whose trace does not reach back to an empty allocator.
    pub fn new(
        device: &'a DeviceSnapshot,
        config: AllocatorConfig,
        capacity: Option<u64>,
        record_series: bool,
    ) -> Result<Replayer<'a>, SimError> {
        if device.trace.is_empty() {
            return Err(SimError::NoTrace { device: device.device });
        }
        if DeviceStats::of(device).trace_wrapped {
            return Err(SimError::TraceWrapped { device: device.device });
        }
        Ok(Replayer::empty(device, config, capacity, record_series))
    }

    fn empty(
        device: &'a DeviceSnapshot,
        config: AllocatorConfig,
        capacity: Option<u64>,
        record_series: bool,
    ) -> Replayer<'a> {
        Replayer {
            device,
            allocator: CachingAllocator::new(config, capacity),
            pools: PoolMap::of(device),
            grant_recorded_ooms: false,
            capacity,
            live: FxHashMap::default(),
            hints: Vec::new(),
            released_all: false,
            same_settings: true,
            next_row: 0,
            unmatched_frees: 0,
            stopped_at: None,
            recorded_oom: None,
            series: record_series.then(Series::default),
        }
    }

    /// Say whether the settings are the recorded ones (the default). With
    /// other settings the model's segments differ from the recorded ones, so
    /// every run of recorded releases is taken as an `empty_cache()`.
    pub fn recorded_settings(mut self, same: bool) -> Replayer<'a> {
        self.same_settings = same;
        self
    }

    /// Attempt the requests that failed in the recorded run even without a
    /// capacity ("what if there had been more memory"); by default, without
    /// one they are honoured as failures.
    pub fn grant_recorded_ooms(mut self, grant: bool) -> Replayer<'a> {
        self.grant_recorded_ooms = grant;
        self
    }

    /// The allocator as it stands after the rows replayed so far.
    pub fn allocator(&self) -> &CachingAllocator {
        &self.allocator
    }

    /// The next row to replay (the trace's length when done).
    pub fn next_row(&self) -> usize {
        self.next_row
    }

    /// The replay stopped: the model ran out of memory on a request the
    /// recorded run served.
    pub fn stopped(&self) -> bool {
        self.stopped_at.is_some()
    }

    /// Replay rows up to (not including) `row`, or to the end of the trace;
    /// returns false if the replay stopped on the way.
    pub fn run_until(&mut self, row: usize) -> bool {
        let end = row.min(self.device.trace.len());
        while self.next_row < end && self.stopped_at.is_none() {
            self.step(self.next_row);
            self.next_row += 1;
        }
        self.stopped_at.is_none()
    }

    fn step(&mut self, i: usize) {
        let trace = &self.device.trace;
        let action = trace.action(i);
        let (addr, size) = (trace.addrs()[i], trace.sizes()[i]);
        let stream = trace.streams().get(trace.stream[i] as usize).copied().unwrap_or(0);
        match action {
            Action::Alloc => {
                self.allocator.offer_segment_addresses(&self.hints);
                self.hints.clear();
                match self.allocator.malloc_in(size, stream, self.pools.pool(i as u32)) {
                    Ok(a) => {
                        // An address still live means the trace lost a free:
                        // the recorded allocator reused the block, so free it.
                        if let Some(old) = self.live.insert(addr, a) {
                            self.allocator.complete_free(old);
                        }
                    }
                    Err(e) => self.stopped_at = Some(self.failure(i, e, false)),
                }
            }
            Action::FreeRequested => match self.live.get(&addr) {
                Some(&a) => {
                    self.allocator.request_free(a);
                }
                None => self.unmatched_frees += 1,
            },
            Action::FreeCompleted => match self.live.remove(&addr) {
                Some(a) => {
                    self.allocator.complete_free(a);
                }
                None => self.unmatched_frees += 1,
            },
            Action::SegmentAlloc => self.hints.push((addr, size)),
            Action::SegmentFree | Action::SegmentUnmap => self.release(i, action, addr, size),
            Action::Oom if self.capacity.is_none() && !self.grant_recorded_ooms => {
                if self.recorded_oom.is_none() {
                    let rounded = round_size(size, self.allocator.config());
                    let e = OutOfMemory {
                        requested_bytes: size,
                        rounded_bytes: rounded,
                        allocation_bytes: allocation_size_with(rounded, self.allocator.config().large_segment_size),
                    };
                    self.recorded_oom = Some(self.failure(i, e, true));
                }
            }
            Action::Oom => {
                self.allocator.offer_segment_addresses(&self.hints);
                self.hints.clear();
                match self.allocator.malloc(size, stream) {
                    Ok(a) => {
                        self.allocator.complete_free(a);
                    }
                    // The recorded program survived this failure (its trace
                    // goes on), so the replay goes on too.
                    Err(e) => {
                        if self.recorded_oom.is_none() {
                            self.recorded_oom = Some(self.failure(i, e, true));
                        }
                    }
                }
            }
            Action::SegmentMap | Action::Snapshot | Action::Other => {}
        }
        if !matches!(action, Action::SegmentFree | Action::SegmentUnmap) {
            self.released_all = false;
        }
        if let Some(s) = self.series.as_mut()
            && !matches!(action, Action::Snapshot | Action::Other)
        {
            let st = self.allocator.stats();
            s.rows.push(i as u32);
            s.allocated.push(st.allocated_bytes.current);
            s.reserved.push(st.reserved_bytes.current);
            s.inactive_split.push(st.inactive_split_bytes.current);
        }
    }

    /// A recorded `segment_free` or `segment_unmap` at row `i`: the segment
    /// the recorded allocator freed, if the model has it free too (so a
    /// recorded GC or oversize release frees just that); otherwise, once per
    /// run of releases, everything, as `empty_cache` does. Unmapping releases
    /// whole free pages only in `release_cached_blocks`, so a run of unmaps
    /// is one. A private pool only gives memory back once no graph uses it,
    /// so the pools the run releases from are marked freeable first.
    fn release(&mut self, i: usize, action: Action, addr: u64, size: u64) {
        let trace = &self.device.trace;
        let pool = self.pools.pool(i as u32);
        if pool != DEFAULT_POOL {
            self.allocator.mark_pool_freeable(pool);
        }
        if action == Action::SegmentFree && self.same_settings && self.allocator.release_segment(addr, size) {
            return;
        }
        if !self.released_all {
            let run =
                (i..trace.len()).take_while(|&r| matches!(trace.action(r), Action::SegmentFree | Action::SegmentUnmap));
            for r in run {
                let pool = self.pools.pool(r as u32);
                if pool != DEFAULT_POOL {
                    self.allocator.mark_pool_freeable(pool);
                }
            }
            self.allocator.release_cached_blocks();
            self.released_all = true;
        }
    }

    fn failure(&self, row: usize, e: OutOfMemory, recorded: bool) -> SimOom {
        let st = self.allocator.stats();
        SimOom {
            row: row as u32,
            time_us: self.device.trace.times_us()[row],
            requested_bytes: e.requested_bytes,
            allocation_bytes: e.allocation_bytes,
            reserved_bytes: st.reserved_bytes.current,
            allocated_bytes: st.allocated_bytes.current,
            recorded,
        }
    }

    /// Replay the rest of the trace and sum up.
    pub fn finish(mut self) -> DeviceSimulation {
        self.run_until(usize::MAX);
        DeviceSimulation {
            device: self.device.device,
            stats: *self.allocator.stats(),
            segments: self.allocator.segments(),
            oom: self.recorded_oom.or(self.stopped_at),
            rows_replayed: self.next_row,
            unmatched_frees: self.unmatched_frees,
            series: self.series,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// A device whose trace is these (action, recorded address, size) rows on
    /// stream 0. The rows must leave nothing allocated and no recorded
    /// segment, or the trace would not look like it starts from empty.
    fn device(rows: &[(Action, u64, u64)]) -> DeviceSnapshot {
        crate::analysis::testing::rows_device(rows, Vec::new())
    }

    #[test]
    fn steps_through_a_trace_and_honours_releases() {
        use Action::*;
        let d = device(&[
            (SegmentAlloc, 0x1000_0000, 20 * MIB),
            (Alloc, 0xa, 3 * MIB),
            (Alloc, 0xb, 5 * MIB),
            (FreeRequested, 0xa, 3 * MIB),
            (FreeCompleted, 0xa, 3 * MIB),
            (FreeRequested, 0xb, 5 * MIB),
            (FreeCompleted, 0xb, 5 * MIB),
            (SegmentFree, 0x1000_0000, 20 * MIB),
            (Alloc, 0xc, 1000),
            (FreeRequested, 0xc, 1000),
            (FreeCompleted, 0xc, 1000),
        ]);
        let mut r = Replayer::new(&d, AllocatorConfig::default(), None, true).expect("replayable");
        assert!(r.run_until(3));
        let segs = r.allocator().segments();
        assert_eq!(segs.len(), 1);
        assert_eq!(segs[0].address, 0x1000_0000, "the driver's address, offered by segment_alloc");
        assert_eq!(segs[0].blocks.iter().map(|b| b.size).collect::<Vec<_>>(), vec![3 * MIB, 5 * MIB, 12 * MIB]);
        assert!(r.run_until(8));
        assert_eq!(r.allocator().stats().reserved_bytes.current, 0, "segment_free is an empty_cache");
        let sim = r.finish();
        assert_eq!(sim.stats.reserved_bytes.peak, 20 * MIB);
        assert_eq!(sim.stats.reserved_bytes.current, 2 * MIB);
        assert_eq!(sim.rows_replayed, 11);
        assert_eq!(sim.unmatched_frees, 0);
        assert_eq!(sim.series.expect("series").rows.len(), 11);
    }

    #[test]
    fn recorded_releases_free_the_same_segment_with_the_recorded_settings() {
        use Action::*;
        // Two cached 30 MiB segments; the recorded allocator (say, its GC)
        // freed only the second.
        let d = device(&[
            (SegmentAlloc, 0x4000_0000, 30 * MIB),
            (Alloc, 0xa, 30 * MIB),
            (SegmentAlloc, 0x8000_0000, 30 * MIB),
            (Alloc, 0xb, 30 * MIB),
            (FreeRequested, 0xa, 30 * MIB),
            (FreeCompleted, 0xa, 30 * MIB),
            (FreeRequested, 0xb, 30 * MIB),
            (FreeCompleted, 0xb, 30 * MIB),
            (SegmentFree, 0x8000_0000, 30 * MIB),
            (Snapshot, 0, 0),
            (SegmentFree, 0x4000_0000, 30 * MIB),
        ]);
        let mut r = Replayer::new(&d, AllocatorConfig::default(), None, false).expect("replayable");
        r.run_until(9);
        let left: Vec<u64> = r.allocator().segments().iter().map(|s| s.address).collect();
        assert_eq!(left, vec![0x4000_0000]);
        // Other settings: the run of releases is an empty_cache.
        let mut r = Replayer::new(&d, AllocatorConfig::default(), None, false).expect("ok").recorded_settings(false);
        r.run_until(9);
        assert!(r.allocator().segments().is_empty());
    }

    #[test]
    fn a_failure_the_recorded_run_did_not_have_ends_the_replay() {
        use Action::*;
        let d = device(&[
            (Alloc, 0xa, 30 * MIB),
            (Alloc, 0xb, 30 * MIB),
            (FreeRequested, 0xa, 30 * MIB),
            (FreeCompleted, 0xa, 30 * MIB),
            (FreeRequested, 0xb, 30 * MIB),
            (FreeCompleted, 0xb, 30 * MIB),
        ]);
        let sim = Replayer::new(&d, AllocatorConfig::default(), Some(40 * MIB), false).expect("replayable").finish();
        let oom = sim.oom.expect("out of memory");
        assert_eq!((oom.row, oom.time_us, oom.recorded), (1, 1001, false));
        assert_eq!(oom.allocation_bytes, 30 * MIB);
        assert_eq!(sim.rows_replayed, 2);
    }

    #[test]
    fn a_recorded_failure_is_attempted_and_the_replay_goes_on() {
        use Action::*;
        let d = device(&[
            (Alloc, 0xa, 30 * MIB),
            (Oom, 0, 30 * MIB),
            (FreeRequested, 0xa, 30 * MIB),
            (FreeCompleted, 0xa, 30 * MIB),
        ]);
        let limited = Replayer::new(&d, AllocatorConfig::default(), Some(40 * MIB), false).expect("ok").finish();
        assert_eq!(limited.oom.map(|o| (o.row, o.recorded)), Some((1, true)));
        assert_eq!(limited.rows_replayed, 4);
        // Without a capacity the recorded failure is honoured: nothing is
        // allocated, and the replay says where the run ran out.
        let honoured = Replayer::new(&d, AllocatorConfig::default(), None, false).expect("ok").finish();
        assert_eq!(honoured.oom.map(|o| (o.row, o.recorded, o.requested_bytes)), Some((1, true, 30 * MIB)));
        assert_eq!(honoured.stats.reserved_bytes.peak, 30 * MIB);
        assert_eq!(honoured.rows_replayed, 4);
        // Granted ("more memory"), the request fits, then is given back.
        let granted =
            Replayer::new(&d, AllocatorConfig::default(), None, false).expect("ok").grant_recorded_ooms(true).finish();
        assert_eq!(granted.oom, None);
        assert_eq!(granted.stats.reserved_bytes.peak, 60 * MIB, "the request fits, then is given back");
        assert_eq!(granted.stats.allocated_bytes.peak, 60 * MIB);
    }

    #[test]
    fn traces_that_start_mid_run_are_refused() {
        use Action::*;
        // A free of something never allocated: the allocator was not empty.
        let d = device(&[(FreeRequested, 0xa, 4096), (FreeCompleted, 0xa, 4096)]);
        let err = Replayer::new(&d, AllocatorConfig::default(), None, false).expect_err("wrapped");
        assert_eq!(err, SimError::TraceWrapped { device: 0 });
        let empty = device(&[]);
        let err = Replayer::new(&empty, AllocatorConfig::default(), None, false).expect_err("no trace");
        assert_eq!(err, SimError::NoTrace { device: 0 });
    }
}
