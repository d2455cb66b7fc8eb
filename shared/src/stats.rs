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

use crate::snapshot::{Action, BlockState, CaptureContext, DeviceSnapshot, Snapshot};

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
    /// Segments at snapshot time.
    pub segments: usize,
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
    /// `oom` as an upload's trigger means when the uploader does not say
    /// (`vramscope upload`, a file opened in the browser).
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
}

impl Replay {
    fn step(&mut self, action: Action, size: u64) {
        let size = size as i128;
        match action {
            Action::SegmentAlloc | Action::SegmentMap => self.reserved += size,
            Action::SegmentFree | Action::SegmentUnmap => self.reserved -= size,
            Action::Alloc => self.requested += size,
            Action::FreeCompleted => self.requested -= size,
            _ => return,
        }
        self.peak_reserved = self.peak_reserved.max(self.reserved);
        self.peak_requested = self.peak_requested.max(self.requested);
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
        let mut replay = Replay::default();
        for i in 0..trace.len() {
            replay.step(trace.action(i), trace.sizes()[i]);
        }
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
            ooms: trace.count(Action::Oom),
            process_used_bytes: None,
            outside_allocator_bytes: None,
        }
    }
}

fn clamp(v: i128) -> u64 {
    u64::try_from(v.max(0)).unwrap_or(u64::MAX)
}
