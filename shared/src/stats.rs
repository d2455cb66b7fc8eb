//! PyTorch's own memory counters, recomputed from a snapshot alone.
//!
//! Each figure matches a key of `torch.cuda.memory_stats()` at snapshot time
//! (checked to the byte against the corpus's oracle files):
//! - `reserved_bytes`: sum of segment sizes (`reserved_bytes.all.current`);
//! - `allocated_bytes`: `active_allocated` block sizes (`allocated_bytes.all.current`);
//! - `active_bytes`: all `active_*` blocks (`active_bytes.all.current`);
//! - `requested_bytes`: requested sizes of `active_*` blocks, pending frees
//!   included, since PyTorch releases them at `free_completed`
//!   (`requested_bytes.all.current`);
//! - `inactive_split_bytes`: free blocks of split, non-expandable segments
//!   (`inactive_split_bytes.all.current`);
//! - peaks: the trace replayed from the state at its first entry, which is
//!   the final state minus the trace's net effect.

use serde::{Deserialize, Serialize};

use crate::snapshot::{Action, BlockState, CaptureContext, DeviceSnapshot, Snapshot, TraceColumns};

/// The figures `vramscope stats --json` prints for a file.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct SnapshotStats {
    /// The snapshot format generation, e.g. `"2.5"` (meaning 2.5 or later).
    pub format_version: &'static str,
    /// One entry per device with segments or a trace.
    pub devices: Vec<DeviceStats>,
    /// What vramscope's capture module recorded with the snapshot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture: Option<CaptureContext>,
    /// Pinned host memory, when the snapshot recorded it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<DeviceStats>,
}

/// The JSON object of `vramscope stats --json` and of the server's
/// `/api/v1/snapshots/{id}/stats`. Other tools parse it: fields are only
/// ever added, never renamed or removed.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct StatsReport {
    /// The file the figures are for (a path, or the snapshot's name on the server).
    pub file: String,
    /// The snapshot format generation.
    pub format_version: String,
    /// One entry per device with segments or a trace.
    pub devices: Vec<DeviceStats>,
    /// What vramscope's capture module recorded with the snapshot (the
    /// job's torch, allocator backend and settings, NVML's figures);
    /// absent for snapshots taken otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture: Option<CaptureContext>,
    /// Pinned host memory (`host_segments`/`host_traces`, PyTorch 2.14 with
    /// `record_host=True`), counted like a device's (its `device` is 0 and
    /// names nothing); absent when the snapshot did not record it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<DeviceStats>,
}

impl SnapshotStats {
    /// The report for a file name.
    pub fn report(&self, file: impl Into<String>) -> StatsReport {
        StatsReport {
            file: file.into(),
            format_version: self.format_version.to_owned(),
            devices: self.devices.clone(),
            capture: self.capture.clone(),
            host: self.host.clone(),
        }
    }
}

/// One device's figures.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DeviceStats {
    /// CUDA device index.
    pub device: u32,
    /// Segments at snapshot time, expandable ones included.
    pub segments: usize,
    /// Of `segments`, the expandable ones (`expandable_segments:True`).
    /// PyTorch's `segment.all.current` counts only the others (an
    /// expandable segment grows by mapping pages, not by a cudaMalloc):
    /// it equals `segments - expandable_segments`.
    #[serde(default)]
    pub expandable_segments: usize,
    /// Entries in the device's trace.
    pub trace_entries: usize,
    /// The trace does not reach back to an empty allocator: the ring buffer
    /// wrapped (or recording started after memory was already in use).
    pub trace_wrapped: bool,
    /// Bytes reserved from CUDA.
    pub reserved_bytes: u64,
    /// Bytes in allocated blocks (rounded sizes).
    pub allocated_bytes: u64,
    /// Bytes in active blocks (allocated plus pending free).
    pub active_bytes: u64,
    /// Requested (unrounded) bytes of active blocks.
    pub requested_bytes: u64,
    /// Free bytes inside split segments, which cannot be returned to CUDA.
    pub inactive_split_bytes: u64,
    /// Highest reserved bytes over the trace; `None` without a trace.
    pub reserved_peak_bytes: Option<u64>,
    /// Highest requested bytes over the trace; `None` without a trace.
    pub requested_peak_bytes: Option<u64>,
    /// The peaks cover only the trace's window (it wrapped), not the whole run.
    pub peak_is_window_only: bool,
    /// The largest free (inactive) block.
    pub largest_free_block_bytes: u64,
    /// All free (inactive) bytes.
    pub free_bytes: u64,
    /// Reserved minus allocated: memory held by the cache but not in use.
    pub reserved_unallocated_bytes: u64,
    /// Rounding waste of allocated blocks: size minus requested size.
    pub internal_waste_bytes: u64,
    /// `oom` entries in the trace.
    pub ooms: usize,
    /// NVML: memory this process used on the device when the snapshot was
    /// captured, the caching allocator's reserved memory included; `None`
    /// unless vramscope's capture module took the snapshot.
    #[serde(default)]
    pub process_used_bytes: Option<u64>,
    /// Memory outside the caching allocator: `process_used_bytes` minus
    /// `reserved_bytes` (the CUDA context, NCCL buffers, cuBLAS workspaces,
    /// other libraries' allocations). Zero if NVML saw less than reserved.
    #[serde(default)]
    pub outside_allocator_bytes: Option<u64>,
}

impl Snapshot {
    /// Whether a device's trace recorded an out-of-memory event: what
    /// `oom` as a trigger means when nobody says (a file opened in the
    /// browser; the server decides an upload's from its statistics' OOM
    /// counts, which count the same entries).
    pub fn records_oom(&self) -> bool {
        self.devices.iter().any(|d| (0..d.trace.len()).any(|i| d.trace.action(i) == Action::Oom))
    }

    /// Recompute PyTorch's counters for every device.
    pub fn stats(&self) -> SnapshotStats {
        SnapshotStats {
            format_version: self.format.as_str(),
            devices: self
                .devices
                .iter()
                .map(|d| {
                    let mut stats = DeviceStats::of(d);
                    let captured = self.capture.as_ref().and_then(|c| c.devices.iter().find(|c| c.device == d.device));
                    if let Some(used) = captured.and_then(|c| c.process_used_bytes) {
                        stats.process_used_bytes = Some(used);
                        stats.outside_allocator_bytes = Some(used.saturating_sub(stats.reserved_bytes));
                    }
                    stats
                })
                .collect(),
            capture: self.capture.clone(),
            host: self.host.as_ref().map(DeviceStats::of),
        }
    }
}

/// Running totals of the trace's effect on reserved and requested bytes,
/// relative to the state at its first entry; the peaks start at zero (the
/// start itself).
#[derive(Default)]
struct Replay {
    reserved: i128,
    requested: i128,
    peak_reserved: i128,
    peak_requested: i128,
    ooms: usize,
}

impl Replay {
    /// One pass over the action and size columns: this is the only
    /// per-entry work of `stats` (4% of `vramscope stats` when it went
    /// through `action(i)`, a `match` and `i128` sums per entry, then a
    /// second pass to count OOMs). The sums are kept in `i128` so that no
    /// file can overflow them, but per block of [`BLOCK`] rows they run in
    /// `i64` (a shorter chain of dependent instructions) when every size in
    /// the block is below 2^48, so a block's sum cannot overflow.
    fn of(trace: &TraceColumns) -> Replay {
        /// Rows per block.
        const BLOCK: usize = 4096;
        /// Sizes under this sum to less than `i64::MAX` over a block.
        const SMALL: u64 = 1 << 48;
        // Per action code: the sign of its effect on reserved and on
        // requested bytes, and whether it is an OOM. Codes past the known
        // ones (`Other`) do nothing.
        let mut effect = [(0i64, 0i64, 0usize); Action::KNOWN.len() + 1];
        for (code, (_, action)) in Action::KNOWN.iter().enumerate() {
            let (reserve, request) = action.byte_effect();
            effect[code] = (i64::from(reserve), i64::from(request), usize::from(*action == Action::Oom));
        }
        let effect_of = |code: u16| effect[usize::from(code).min(Action::KNOWN.len())];
        let mut r = Replay::default();
        for (codes, sizes) in trace.action.chunks(BLOCK).zip(trace.sizes().chunks(BLOCK)) {
            if sizes.iter().all(|&s| s < SMALL) {
                // Totals and peaks relative to the block's start.
                let (mut reserved, mut requested, mut peak_reserved, mut peak_requested) = (0i64, 0i64, 0i64, 0i64);
                for (&code, &size) in codes.iter().zip(sizes) {
                    let (reserve, request, oom) = effect_of(code);
                    reserved += reserve * size as i64;
                    requested += request * size as i64;
                    peak_reserved = peak_reserved.max(reserved);
                    peak_requested = peak_requested.max(requested);
                    r.ooms += oom;
                }
                r.peak_reserved = r.peak_reserved.max(r.reserved + i128::from(peak_reserved));
                r.peak_requested = r.peak_requested.max(r.requested + i128::from(peak_requested));
                r.reserved += i128::from(reserved);
                r.requested += i128::from(requested);
            } else {
                for (&code, &size) in codes.iter().zip(sizes) {
                    let (reserve, request, oom) = effect_of(code);
                    r.reserved += i128::from(reserve) * i128::from(size);
                    r.requested += i128::from(request) * i128::from(size);
                    r.peak_reserved = r.peak_reserved.max(r.reserved);
                    r.peak_requested = r.peak_requested.max(r.requested);
                    r.ooms += oom;
                }
            }
        }
        r
    }
}

impl DeviceStats {
    /// Compute a device's figures.
    pub fn of(device: &DeviceSnapshot) -> DeviceStats {
        let blocks = || device.segments.iter().flat_map(|s| s.blocks.iter());
        let reserved_bytes: u64 = device.segments.iter().map(|s| s.total_size).sum();
        let sum_where =
            |f: &dyn Fn(BlockState) -> bool| -> u64 { blocks().filter(|b| f(b.state)).map(|b| b.size).sum() };
        let allocated_bytes = sum_where(&|s| s == BlockState::ActiveAllocated);
        let active_bytes = sum_where(&|s| s.is_active());
        let free_bytes = sum_where(&|s| s == BlockState::Inactive);
        let requested_bytes: u64 = blocks().filter(|b| b.state.is_active()).map(|b| b.requested_size).sum();
        let inactive_split_bytes: u64 = device
            .segments
            .iter()
            .filter(|s| s.blocks.len() > 1 && !s.is_expandable)
            .flat_map(|s| s.blocks.iter())
            .filter(|b| b.state == BlockState::Inactive)
            .map(|b| b.size)
            .sum();
        let largest_free_block_bytes =
            blocks().filter(|b| b.state == BlockState::Inactive).map(|b| b.size).max().unwrap_or(0);
        let internal_waste_bytes = blocks().map(|b| b.internal_waste()).sum();

        // The state at the trace's first entry is the final state minus the
        // trace's net effect. One pass gives both the net effect and the
        // highest point relative to the start; the peak is start + that.
        let trace = &device.trace;
        let replay = Replay::of(trace);
        let start_reserved = reserved_bytes as i128 - replay.reserved;
        let start_requested = requested_bytes as i128 - replay.requested;
        let trace_wrapped = !trace.is_empty() && (start_reserved != 0 || start_requested != 0);
        let (reserved_peak_bytes, requested_peak_bytes) = if trace.is_empty() {
            (None, None)
        } else {
            (Some(clamp(start_reserved + replay.peak_reserved)), Some(clamp(start_requested + replay.peak_requested)))
        };

        DeviceStats {
            device: device.device,
            segments: device.segments.len(),
            expandable_segments: device.segments.iter().filter(|s| s.is_expandable).count(),
            trace_entries: trace.len(),
            trace_wrapped,
            reserved_bytes,
            allocated_bytes,
            active_bytes,
            requested_bytes,
            inactive_split_bytes,
            reserved_peak_bytes,
            requested_peak_bytes,
            peak_is_window_only: trace_wrapped,
            largest_free_block_bytes,
            free_bytes,
            reserved_unallocated_bytes: reserved_bytes.saturating_sub(allocated_bytes),
            internal_waste_bytes,
            ooms: replay.ooms,
            process_used_bytes: None,
            outside_allocator_bytes: None,
        }
    }
}

fn clamp(v: i128) -> u64 {
    u64::try_from(v.max(0)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::trace::TraceBuilder;

    /// The replay of one action at a time, in `i128`: what the blocked
    /// pass must equal.
    fn naive(trace: &TraceColumns) -> (i128, i128, i128, i128, usize) {
        let (mut res, mut req, mut peak_res, mut peak_req, mut ooms) = (0i128, 0i128, 0i128, 0i128, 0);
        for i in 0..trace.len() {
            let size = trace.sizes()[i] as i128;
            match trace.action(i) {
                Action::SegmentAlloc | Action::SegmentMap => res += size,
                Action::SegmentFree | Action::SegmentUnmap => res -= size,
                Action::Alloc => req += size,
                Action::FreeCompleted => req -= size,
                Action::Oom => ooms += 1,
                _ => {}
            }
            peak_res = peak_res.max(res);
            peak_req = peak_req.max(req);
        }
        (res, req, peak_res, peak_req, ooms)
    }

    /// Blocks of small sizes (summed in `i64`), blocks with sizes near
    /// 2^64 (summed in `i128`), unknown action codes, and totals that go
    /// below the start: the one pass gives what one action at a time gives.
    #[test]
    fn the_blocked_replay_matches_one_action_at_a_time() {
        let mut b = TraceBuilder::default();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for row in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Codes 0 to 10: the nine known actions and two unknown ones.
            b.action.push((x % 11) as u16);
            let size = match row / 4096 {
                // The third block holds sizes a block's i64 sum overflows.
                2 => u64::MAX - (x >> 40),
                _ => x >> 44,
            };
            b.size.push(size);
        }
        let n = b.action.len();
        b.addr = vec![0; n];
        b.stream = vec![0; n];
        b.time_us = vec![0; n];
        b.stack = vec![Default::default(); n];
        b.compile_context = vec![Default::default(); n];
        b.user_metadata = vec![Default::default(); n];
        let trace = TraceColumns::from(b);
        let r = Replay::of(&trace);
        assert_eq!((r.reserved, r.requested, r.peak_reserved, r.peak_requested, r.ooms), naive(&trace));
        let past_i64 = |v: i128| v > i128::from(i64::MAX) || v < i128::from(i64::MIN);
        assert!(r.ooms > 0 && (past_i64(r.reserved) || past_i64(r.peak_reserved)), "the trace misses the cases");
    }
}
