//! OOM post-mortem: the allocator's state at each `oom` entry of a trace,
//! and why the request failed.
//!
//! The state is the final layout rewound to the `oom` row ([`super::layout`]):
//! reserved, allocated, free bytes, the largest free block, the top live
//! allocations by stack. The figures match PyTorch's own OOM message:
//! "Tried to allocate X" is the segment the allocator asked CUDA for
//! ([`allocation_size`] of the entry's size), "reserved by PyTorch but
//! unallocated" is reserved minus allocated at that moment.
//!
//! The cause, judged on the pool (small or large) and stream the request
//! needed:
//! - **fragmentation**: the cache held more free bytes than the request,
//!   but no free block was large enough;
//! - **exhaustion**: even all free cached bytes together were too few: the
//!   program needed more memory than the device (or the process's cap) gave.
//!
//! What the process could reserve at most is bracketed by the trace: at
//! least the highest reserved bytes before the OOM (every one of those
//! reservations succeeded), less than the reserved bytes at the OOM plus the
//! segment that failed ([`OomReport::capacity_bytes_range`]).
//!
//! Which allocator setting would have avoided the OOM is a question for the
//! allocator simulator: [`OomReport::avoided_by`] stays `None` until a caller
//! fills it, e.g. through [`super::avoided::explain_replayed`], for the settings
//! [`OomReport::candidate_settings`] lists: replay the trace with a setting,
//! no memory limit, and hand its reserved peak to [`SettingVerdict::judge`].

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use super::layout::{Layout, Rewinder, SMALL_SIZE, allocation_size};
use super::{FrameText, stack_text};
use crate::snapshot::{Action, BlockState, DeviceSnapshot, Snapshot, StackId};

/// Live allocations in the top-by-stack list of a report.
pub const TOP_STACKS: usize = 10;

/// Why the request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OomCause {
    /// Enough free bytes in the cache, in pieces each too small.
    Fragmentation,
    /// Not enough free bytes in the cache, even all together.
    Exhaustion,
    /// A free block large enough existed, yet the request failed: the
    /// layout was estimated wrongly, or a rule the analysis does not model
    /// (`max_split_size`, a private pool) excluded it.
    Unexplained,
}

/// What capped the device memory the process could get.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// The device had less free memory than the allocator asked for.
    DeviceMemory,
    /// The device had enough free memory: a per-process cap stopped the
    /// allocator (`torch.cuda.set_per_process_memory_fraction`), somewhere in
    /// [`OomReport::capacity_bytes_range`].
    ProcessCap,
    /// The `oom` entry has no `device_free`.
    Unknown,
}

/// A free block at the OOM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreeBlock {
    /// Start address.
    pub address: u64,
    /// Bytes.
    pub size: u64,
    /// Start address of its segment.
    pub segment: u64,
}

/// Live allocations of one stack at the OOM.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveStack {
    /// The stack, innermost frame first.
    pub frames: Vec<FrameText>,
    /// Block bytes (rounded sizes), the memory they occupy.
    pub bytes: u64,
    /// Requested bytes.
    pub requested_bytes: u64,
    /// Allocations.
    pub count: u64,
}

/// Whether a setting avoids the OOM, given the capacity the trace brackets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "verdict")]
pub enum Avoidance {
    /// Its replay reserves no more than the process is known to have had.
    Yes,
    /// Its replay reserves more than the process is known to have had, less
    /// than it is known not to have had: it avoids the OOM if the process
    /// could reserve `bytes`.
    IfCapacityAtLeast {
        /// The replay's reserved peak.
        bytes: u64,
    },
    /// Its replay reserves at least what failed.
    No,
}

/// What the allocator simulator says about one setting.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingVerdict {
    /// The setting, as `PYTORCH_CUDA_ALLOC_CONF` text (`expandable_segments:True`).
    pub setting: String,
    /// Highest reserved bytes of the trace replayed with the setting and no
    /// memory limit.
    pub reserved_peak_bytes: u64,
    /// Whether that fits the capacity.
    pub avoids: Avoidance,
    /// Anything the simulator wants said.
    pub note: Option<String>,
}

impl SettingVerdict {
    /// The verdict for a setting whose replay (no memory limit) reserved at
    /// most `reserved_peak_bytes`, against the recorded cap when there is
    /// one, else the capacity the report brackets.
    pub fn judge(report: &OomReport, setting: impl Into<String>, reserved_peak_bytes: u64) -> SettingVerdict {
        let (known, failed) = report.capacity_bytes_range;
        let avoids = if let Some(cap) = report.recorded_capacity_bytes {
            if reserved_peak_bytes <= cap { Avoidance::Yes } else { Avoidance::No }
        } else if reserved_peak_bytes <= known {
            Avoidance::Yes
        } else if reserved_peak_bytes < failed {
            Avoidance::IfCapacityAtLeast { bytes: reserved_peak_bytes }
        } else {
            Avoidance::No
        };
        SettingVerdict { setting: setting.into(), reserved_peak_bytes, avoids, note: None }
    }
}

/// The post-mortem of one `oom` entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OomReport {
    /// CUDA device index.
    pub device: u32,
    /// Row of the `oom` entry in the device's trace.
    pub row: u32,
    /// Rows in the trace.
    pub trace_entries: u32,
    /// `time_us` of the entry, if the trace records times.
    pub time_us: Option<i64>,
    /// Microseconds from the trace's first entry to the OOM.
    pub since_trace_start_us: Option<i64>,
    /// Raw `cudaStream_t` of the request.
    pub stream: u64,
    /// The entry's size: the request, rounded to a block size.
    pub request_bytes: u64,
    /// The segment the allocator tried to get from CUDA for it: the figure
    /// of PyTorch's "Tried to allocate" message.
    pub segment_request_bytes: u64,
    /// The request goes to the small pool (up to 1 MiB).
    pub small_pool: bool,
    /// Stack of the failing request (often empty: the OOM entry is recorded
    /// with the context of the allocation that failed only where PyTorch has it).
    pub frames: Vec<FrameText>,
    /// `device_free` of the entry: free memory on the whole device, from
    /// `cudaMemGetInfo` (other processes and non-PyTorch memory included).
    pub device_free_bytes: Option<u64>,
    /// What capped memory: the device, or a per-process cap.
    pub limit: Limit,
    /// What the process could reserve lies in `[min, max)`: at least the
    /// highest reserved bytes up to the OOM, less than the reserved bytes at
    /// the OOM plus the segment that failed. Under [`Limit::ProcessCap`]
    /// this brackets the cap.
    pub capacity_bytes_range: (u64, u64),
    /// The cap the capture recorded for the process on this device (its
    /// memory fraction of the device's memory), when the snapshot has one:
    /// the exact figure `capacity_bytes_range` brackets, which the
    /// settings' verdicts are judged against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_capacity_bytes: Option<u64>,
    /// Highest reserved bytes from the trace's start to the OOM.
    pub reserved_peak_bytes: u64,
    /// Bytes reserved from CUDA at the OOM.
    pub reserved_bytes: u64,
    /// Bytes in allocated blocks (rounded sizes).
    pub allocated_bytes: u64,
    /// Bytes in blocks freed by the program but waiting for stream events.
    pub pending_free_bytes: u64,
    /// Requested bytes of allocated blocks.
    pub requested_bytes: u64,
    /// Reserved minus allocated: PyTorch's "reserved by PyTorch but unallocated".
    pub reserved_unallocated_bytes: u64,
    /// Bytes of free (inactive) blocks, all pools and streams.
    pub free_bytes: u64,
    /// Free blocks.
    pub free_blocks: u64,
    /// The largest free block, any pool or stream.
    pub largest_free_block: Option<FreeBlock>,
    /// Free bytes the request could have used: same pool and stream.
    pub usable_free_bytes: u64,
    /// Free blocks the request could have used.
    pub usable_free_blocks: u64,
    /// The largest free block the request could have used.
    pub largest_usable_free_block: Option<FreeBlock>,
    /// Why it failed.
    pub cause: OomCause,
    /// Cached segments the allocator released (`segment_free`/`segment_unmap`)
    /// right before the OOM, retrying after emptying its cache.
    pub released_segments: u32,
    /// Their bytes.
    pub released_bytes: u64,
    /// The layout at the OOM is exact (see [`Layout::exact`]); otherwise
    /// sizes of blocks freed after it are estimated.
    pub exact: bool,
    /// Trace entries after the OOM that were undone to rebuild the state.
    pub entries_after: u32,
    /// Live allocations by stack, the most bytes first.
    pub top_stacks: Vec<LiveStack>,
    /// Stacks with live allocations in all.
    pub live_stacks: u32,
    /// Allocator settings the simulator says would have avoided the OOM
    /// (and those it says would not); `None`: not simulated.
    pub avoided_by: Option<Vec<SettingVerdict>>,
}

impl OomReport {
    /// `PYTORCH_CUDA_ALLOC_CONF` settings worth replaying for this OOM, for
    /// the simulator: against fragmentation, expandable segments (free pages
    /// remapped into one range) and a split limit; against exhaustion none
    /// (the memory was simply not there), so none are listed.
    pub fn candidate_settings(&self) -> Vec<String> {
        match self.cause {
            OomCause::Exhaustion => Vec::new(),
            OomCause::Fragmentation | OomCause::Unexplained => vec![
                "expandable_segments:True".to_owned(),
                "max_split_size_mb:128".to_owned(),
                "garbage_collection_threshold:0.8".to_owned(),
            ],
        }
    }

    /// The settings that avoid the OOM in simulation, surely or given enough
    /// capacity ([`Avoidance::IfCapacityAtLeast`]); `None`: not simulated.
    pub fn avoiding_settings(&self) -> Option<Vec<&str>> {
        self.avoided_by
            .as_ref()
            .map(|v| v.iter().filter(|s| s.avoids != Avoidance::No).map(|s| s.setting.as_str()).collect())
    }
}

/// Post-mortems of every `oom` entry of a snapshot, all devices, in trace order.
pub fn explain(snapshot: &Snapshot) -> Vec<OomReport> {
    snapshot.devices.iter().flat_map(|d| explain_device(snapshot, d)).collect()
}

/// Post-mortems of the `oom` entries of one device, in trace order.
pub fn explain_device(snapshot: &Snapshot, device: &DeviceSnapshot) -> Vec<OomReport> {
    let trace = &device.trace;
    let rows: Vec<u32> = (0..trace.len()).filter(|&i| trace.action(i) == Action::Oom).map(|i| i as u32).collect();
    let mut rewinder = Rewinder::new(snapshot, device);
    // Rewinding goes backwards: the last OOM first.
    let mut reports: Vec<OomReport> =
        rows.iter().rev().map(|&row| report(snapshot, device, row, &rewinder.rewind_to(Some(row)))).collect();
    reports.reverse();
    reports
}

/// The highest reserved bytes from the trace's start to `row`, walking
/// back from `reserved` at the OOM.
fn reserved_peak_before(trace: &crate::snapshot::TraceColumns, row: u32, reserved: u64) -> u64 {
    let mut at: i128 = reserved as i128;
    let mut peak = at;
    for i in (0..row as usize).rev() {
        let (reserve, _) = trace.action(i).byte_effect();
        if reserve == 0 {
            continue;
        }
        at -= i128::from(reserve) * trace.sizes()[i] as i128;
        peak = peak.max(at);
    }
    u64::try_from(peak).unwrap_or(u64::MAX)
}

/// The allocator's last resort before an OOM, released every unused cached
/// segment: the run of releases just before `row` (segments, bytes).
fn released_just_before(trace: &crate::snapshot::TraceColumns, row: u32) -> (u32, u64) {
    let mut released = (0, 0);
    for i in (0..row as usize).rev() {
        match trace.action(i) {
            Action::SegmentFree | Action::SegmentUnmap => {
                released.0 += 1;
                released.1 += trace.sizes()[i];
            }
            _ => break,
        }
    }
    released
}

/// The stacks holding the most allocated bytes at the OOM (at most
/// `TOP_STACKS`), and how many stacks hold any.
fn top_live_stacks(snapshot: &Snapshot, layout: &Layout) -> (Vec<LiveStack>, u32) {
    let mut by_stack: FxHashMap<StackId, (u64, u64, u64)> = FxHashMap::default();
    for (_, b) in layout.blocks().filter(|(_, b)| b.state == BlockState::ActiveAllocated) {
        let e = by_stack.entry(b.stack).or_default();
        e.0 += b.size;
        e.1 += b.requested_size;
        e.2 += 1;
    }
    let live_stacks = by_stack.len() as u32;
    let mut top: Vec<(StackId, (u64, u64, u64))> = by_stack.into_iter().collect();
    top.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.0.cmp(&b.0)));
    top.truncate(TOP_STACKS);
    let top_stacks = top
        .into_iter()
        .map(|(stack, (bytes, requested_bytes, count))| LiveStack {
            frames: stack_text(snapshot, stack),
            bytes,
            requested_bytes,
            count,
        })
        .collect();
    (top_stacks, live_stacks)
}

fn report(snapshot: &Snapshot, device: &DeviceSnapshot, row: u32, layout: &Layout) -> OomReport {
    let trace = &device.trace;
    let entry = trace.entry(row as usize);
    let stream = trace.streams().get(entry.stream as usize).copied().unwrap_or(0);
    let request = entry.size;
    let segment_request = allocation_size(request);
    let small_pool = request <= SMALL_SIZE;
    let device_free = trace.device_free(row);

    let reserved = layout.reserved();
    let allocated = layout.bytes(BlockState::ActiveAllocated);
    let pending = layout.bytes(BlockState::ActivePendingFree);
    let requested =
        layout.blocks().filter(|(_, b)| b.state == BlockState::ActiveAllocated).map(|(_, b)| b.requested_size).sum();

    let free = || layout.blocks().filter(|(_, b)| b.state == BlockState::Inactive);
    let as_free = |(s, b): (&super::layout::LayoutSegment, &super::layout::LayoutBlock)| FreeBlock {
        address: b.address,
        size: b.size,
        segment: s.address,
    };
    let largest = |it: &mut dyn Iterator<Item = FreeBlock>| it.max_by_key(|f| (f.size, std::cmp::Reverse(f.address)));
    let usable = || free().filter(|(s, _)| s.small == small_pool && s.stream == stream);
    let free_bytes = free().map(|(_, b)| b.size).sum();
    let usable_free_bytes: u64 = usable().map(|(_, b)| b.size).sum();
    let largest_free_block = largest(&mut free().map(as_free));
    let largest_usable_free_block = largest(&mut usable().map(as_free));

    let cause = if largest_usable_free_block.is_some_and(|b| b.size >= request) {
        OomCause::Unexplained
    } else if usable_free_bytes >= request {
        OomCause::Fragmentation
    } else {
        OomCause::Exhaustion
    };
    let limit = match device_free {
        None => Limit::Unknown,
        Some(f) if f >= segment_request => Limit::ProcessCap,
        Some(_) => Limit::DeviceMemory,
    };
    let reserved_peak = reserved_peak_before(trace, row, reserved);
    let failed = reserved.saturating_add(segment_request);
    let capacity_bytes_range = (reserved_peak.min(failed), failed);
    let (released_segments, released_bytes) = released_just_before(trace, row);
    let (top_stacks, live_stacks) = top_live_stacks(snapshot, layout);

    let first_time = trace.times_us().first().copied();
    OomReport {
        device: device.device,
        row,
        trace_entries: trace.len() as u32,
        time_us: trace.has_time().then_some(entry.time_us),
        since_trace_start_us: first_time.filter(|_| trace.has_time()).map(|t| entry.time_us - t),
        stream,
        request_bytes: request,
        segment_request_bytes: segment_request,
        small_pool,
        frames: stack_text(snapshot, entry.stack),
        device_free_bytes: device_free,
        limit,
        capacity_bytes_range,
        recorded_capacity_bytes: snapshot
            .recorded_capacity(device.device)
            .or_else(|| crate::simulate::fraction_capacity(snapshot, device.device)),
        reserved_peak_bytes: reserved_peak,
        reserved_bytes: reserved,
        allocated_bytes: allocated,
        pending_free_bytes: pending,
        requested_bytes: requested,
        reserved_unallocated_bytes: reserved.saturating_sub(allocated),
        free_bytes,
        free_blocks: free().count() as u64,
        largest_free_block,
        usable_free_bytes,
        usable_free_blocks: usable().count() as u64,
        largest_usable_free_block,
        cause,
        released_segments,
        released_bytes,
        exact: layout.exact,
        entries_after: layout.undone,
        top_stacks,
        live_stacks,
        avoided_by: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::testing::Build;
    use crate::snapshot::BlockState::{ActiveAllocated as A, Inactive as F};

    const M: u64 = 1 << 20;

    #[test]
    fn free_bytes_in_pieces_too_small_are_fragmentation() {
        let mut b = Build::new();
        let s = b.stack(&[("/srv/jobs/t.py", 9, "step")]);
        b.oom(14 * M, 0);
        // Large pool: 20 MiB free in 8 and 12 MiB pieces; the small pool's
        // free 1.5 MiB cannot serve a large request.
        b.segment(
            0x1000_0000,
            false,
            &[(10 * M, A, 10 * M, s), (8 * M, F, 0, 0), (10 * M, A, 10 * M, s), (12 * M, F, 0, 0)],
        );
        b.segment(0x2000_0000, true, &[(M / 2, A, 100, s), (3 * M / 2, F, 0, 0)]);
        let snapshot = b.finish();
        let r = &explain(&snapshot)[0];
        assert_eq!(
            (r.reserved_bytes, r.allocated_bytes, r.reserved_unallocated_bytes),
            (42 * M, 20 * M + M / 2, 43 * M / 2)
        );
        assert_eq!((r.free_bytes, r.free_blocks), (43 * M / 2, 3));
        assert_eq!((r.usable_free_bytes, r.usable_free_blocks), (20 * M, 2));
        assert_eq!(r.largest_usable_free_block.map(|f| (f.address, f.size)), Some((0x1000_0000 + 28 * M, 12 * M)));
        assert_eq!(r.cause, OomCause::Fragmentation);
        assert_eq!(r.limit, Limit::DeviceMemory);
        assert_eq!(r.segment_request_bytes, 14 * M);
        assert!(r.exact && r.entries_after == 0);
        assert_eq!((r.top_stacks.len(), r.top_stacks[0].bytes, r.top_stacks[0].count), (1, 20 * M + M / 2, 3));
        assert!(!r.candidate_settings().is_empty());
    }

    #[test]
    fn too_few_free_bytes_are_exhaustion_and_a_free_device_means_a_cap() {
        let mut b = Build::new();
        b.event(Action::SegmentAlloc, 0x1000_0000, 20 * M, 0);
        b.event(Action::SegmentFree, 0x3000_0000, 20 * M, 0);
        b.oom(30 * M, 80 << 30);
        b.segment(0x1000_0000, false, &[(12 * M, A, 12 * M, 0), (8 * M, F, 0, 0)]);
        let snapshot = b.finish();
        let r = &explain(&snapshot)[0];
        assert_eq!(r.cause, OomCause::Exhaustion);
        assert_eq!(r.limit, Limit::ProcessCap);
        // 40 MiB were reserved before the cached segment was released.
        assert_eq!((r.capacity_bytes_range, r.reserved_peak_bytes), ((40 * M, 50 * M), 40 * M));
        let verdict = |peak| SettingVerdict::judge(r, "x", peak).avoids;
        assert_eq!(verdict(40 * M), Avoidance::Yes);
        assert_eq!(verdict(45 * M), Avoidance::IfCapacityAtLeast { bytes: 45 * M });
        assert_eq!(verdict(50 * M), Avoidance::No);
        assert_eq!((r.released_segments, r.released_bytes), (1, 20 * M));
        assert!(r.candidate_settings().is_empty());
    }
}
