//! The typed snapshot model: what `torch.cuda.memory._snapshot()` holds, with
//! strings and stacks interned and the trace stored as columns.

use serde::{Deserialize, Serialize};

use super::frames::{FrameTable, StackId, Strings};
use super::trace::TraceColumns;

/// A whole snapshot file, read.
#[derive(Debug)]
pub struct Snapshot {
    /// Which generation of PyTorch's format the file has.
    pub format: FormatVersion,
    /// The pickle protocol (2 to 5; `None` for a protocol 0/1 stream).
    pub protocol: Option<u8>,
    /// How the file was compressed.
    pub compression: Compression,
    /// Every string the snapshot names (file names, function names, metadata).
    pub strings: Strings,
    /// Interned frames and stacks.
    pub frames: FrameTable,
    /// One entry per device that has segments or a trace, sorted by device.
    pub devices: Vec<DeviceSnapshot>,
    /// `allocator_settings` (PyTorch 2.3+), if present.
    pub allocator_settings: Option<AllocatorSettings>,
    /// `external_annotations` (record_function ranges, PyTorch 2.5+).
    pub annotations: Vec<Annotation>,
    /// What vramscope's capture module recorded beside the snapshot
    /// (`vramscope_capture`): NVML's view of the process at capture time
    /// and the job's settings. `None` for snapshots taken otherwise.
    pub capture: Option<CaptureContext>,
    /// Pinned host memory (`host_segments`, `host_traces`: PyTorch 2.14 with
    /// `_record_memory_history(..., record_host=True)`), in the shape of a
    /// device (its `device` is 0 and names nothing). `None` when the file
    /// has neither key. Read after PyTorch's source; no real capture has
    /// been checked yet.
    pub host: Option<DeviceSnapshot>,
    /// Things the reader noticed but could not represent (unknown top-level
    /// keys, unknown trace-entry keys), each said once.
    pub warnings: Vec<String>,
}

/// The generation of the snapshot format, named by the earliest PyTorch
/// version that writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum FormatVersion {
    /// PyTorch 1.13: a bare list of segments; blocks without addresses.
    #[serde(rename = "1.13")]
    V1_13,
    /// PyTorch 2.0: `{segments, device_traces}`, blocks carry `history`.
    #[serde(rename = "2.0")]
    V2_0,
    /// PyTorch 2.1/2.2: blocks carry `address` and `frames`.
    #[serde(rename = "2.1")]
    V2_1,
    /// PyTorch 2.3/2.4: adds `allocator_settings`.
    #[serde(rename = "2.3")]
    V2_3,
    /// PyTorch 2.5 and later: adds `external_annotations`.
    #[serde(rename = "2.5")]
    V2_5,
}

impl FormatVersion {
    /// The version string used in JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            FormatVersion::V1_13 => "1.13",
            FormatVersion::V2_0 => "2.0",
            FormatVersion::V2_1 => "2.1",
            FormatVersion::V2_3 => "2.3",
            FormatVersion::V2_5 => "2.5",
        }
    }
}

/// Compression detected from the file's magic bytes (declared beside the
/// decompressors, in the pickle layer).
pub use crate::pickle::decompress::Compression;

/// One device's memory at snapshot time and its trace.
#[derive(Debug)]
pub struct DeviceSnapshot {
    /// CUDA device index.
    pub device: u32,
    /// Segments (cudaMalloc'd or expandable ranges) at snapshot time, by address.
    pub segments: Vec<Segment>,
    /// The device's trace (empty when history was not recorded).
    pub trace: TraceColumns,
    /// Whether the file had a trace list for this device at all.
    pub has_trace: bool,
}

/// A segment: one cudaMalloc (or one expandable reservation's mapped range).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Segment {
    /// Start address.
    pub address: u64,
    /// Bytes reserved from CUDA.
    pub total_size: u64,
    /// Bytes in `active_allocated` blocks, as PyTorch reported.
    pub allocated_size: u64,
    /// Bytes in `active_*` blocks, as PyTorch reported.
    pub active_size: u64,
    /// Requested (unrounded) bytes of live blocks, as PyTorch reported.
    pub requested_size: u64,
    /// Raw `cudaStream_t` the segment belongs to.
    pub stream: u64,
    /// Pool the segment was allocated for.
    pub segment_type: SegmentType,
    /// `(0, 0)` for the default pool; anything else is a private pool (CUDA graphs, MemPool).
    pub pool_id: (i64, i64),
    /// An expandable segment (`expandable_segments:True`).
    pub is_expandable: bool,
    /// Stack of the cudaMalloc that created it (empty if not recorded).
    pub stack: StackId,
    /// Blocks tiling the segment in address order.
    pub blocks: Vec<Block>,
}

/// More bytes than any device's memory (256 TiB, the 48 bits of address
/// a GPU's memory takes): a bound on sizes that nothing else bounds.
pub const MAX_DEVICE_BYTES: u64 = 1 << 48;

impl Segment {
    /// Why the segment's sizes contradict each other, if they do: its end
    /// past the address space, a block outside it or overlapping the one
    /// before, blocks that do not end where it ends, a live block asking
    /// for more than it holds, or a sum over its blocks larger than the
    /// segment. Every real capture satisfies these;
    /// a persisted index whose header breaks one was forged or corrupted
    /// (its checksums can be recomputed by whoever can write the file).
    pub fn inconsistency(&self) -> Option<String> {
        let Some(end) = self.address.checked_add(self.total_size) else {
            return Some(format!("{} bytes at {:#x} run past the address space", self.total_size, self.address));
        };
        let mut next = self.address;
        for (j, b) in self.blocks.iter().enumerate() {
            let block_end = b.address.checked_add(b.size).filter(|&e| b.address >= next && e <= end);
            let Some(block_end) = block_end else {
                return Some(format!(
                    "block {j} ({} bytes at {:#x}) is not inside the segment after the block before it (which ends at {next:#x})",
                    b.size, b.address
                ));
            };
            // A free block keeps the request of its last allocation, which
            // may have been a larger block's before a split: bounded only by
            // what any device could hold.
            let most = if b.state.is_active() { b.size } else { MAX_DEVICE_BYTES };
            if b.requested_size > most {
                return Some(format!("block {j} requests {} of its {} bytes", b.requested_size, b.size));
            }
            next = block_end;
        }
        if !self.blocks.is_empty() && next != end {
            return Some(format!("its blocks end at {next:#x}, the segment at {end:#x}"));
        }
        for (name, value) in [
            ("allocated_size", self.allocated_size),
            ("active_size", self.active_size),
            ("requested_size", self.requested_size),
        ] {
            if value > self.total_size {
                return Some(format!("{name} {value} is larger than the segment's {} bytes", self.total_size));
            }
        }
        None
    }
}

/// Which pool a segment serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SegmentType {
    /// Requests over 1 MiB.
    Large,
    /// Requests up to 1 MiB (2 MiB segments).
    Small,
    /// Not recorded or an unknown value.
    Unknown,
}

/// A block inside a segment.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Block {
    /// Start address (derived by tiling for 1.13/2.0 files that lack it).
    pub address: u64,
    /// Rounded size the allocator reserved for it.
    pub size: u64,
    /// Size the program asked for (equals `size` where the file lacks it).
    pub requested_size: u64,
    /// Allocation state.
    pub state: BlockState,
    /// Stack of the allocation (empty if not recorded).
    pub stack: StackId,
    /// PyTorch 2.0 per-block history (`history` key), oldest first.
    pub history: Vec<HistoryEntry>,
}

impl Block {
    /// Bytes lost to rounding: size minus requested size.
    pub fn internal_waste(&self) -> u64 {
        if self.state == BlockState::ActiveAllocated { self.size.saturating_sub(self.requested_size) } else { 0 }
    }
}

/// The state of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockState {
    /// Allocated and in use.
    ActiveAllocated,
    /// Freed by the program, waiting for stream events (`record_stream`).
    ActivePendingFree,
    /// Free, cached by the allocator.
    Inactive,
    /// A state string this reader does not know.
    Unknown,
}

impl BlockState {
    /// Counted in `active_bytes`.
    pub fn is_active(self) -> bool {
        matches!(self, BlockState::ActiveAllocated | BlockState::ActivePendingFree)
    }
}

/// One entry of a PyTorch 2.0 block's `history`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// Address of the allocation.
    pub addr: u64,
    /// Requested size (`real_size`).
    pub real_size: u64,
    /// Stack of the allocation.
    pub stack: StackId,
}

/// What the capture module (`assets/capture/vramscope_capture`) adds to a
/// snapshot it takes, under the top-level key `vramscope_capture`. PyTorch's
/// own viewer ignores the key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureContext {
    /// `torch.__version__` of the job.
    pub torch_version: Option<String>,
    /// `torch.cuda.get_allocator_backend()`: `native` or `cudaMallocAsync`.
    pub backend: Option<String>,
    /// The allocator settings the job ran with, as its environment gave them.
    pub alloc_conf: Option<String>,
    /// Which variable held them: `PYTORCH_ALLOC_CONF` (the current name) or
    /// `PYTORCH_CUDA_ALLOC_CONF`.
    pub alloc_conf_var: Option<String>,
    /// Process id of the job's process.
    pub pid: Option<u32>,
    /// Per CUDA device of the process: NVML's figures at capture time.
    pub devices: Vec<CaptureDevice>,
}

/// One device as NVML saw it when the snapshot was captured.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureDevice {
    /// CUDA device index, as the process (and the snapshot) numbers it.
    pub device: u32,
    /// Memory this process used on the device: the caching allocator's
    /// reserved memory plus everything outside it (the CUDA context, NCCL
    /// buffers, cuBLAS workspaces, other libraries).
    pub process_used_bytes: Option<u64>,
    /// Memory used on the device by every process and the driver.
    pub device_used_bytes: Option<u64>,
    /// The device's memory, as NVML counts it.
    pub device_total_bytes: Option<u64>,
    /// The device's memory as CUDA reports it to the process
    /// (`torch.cuda.get_device_properties(d).total_memory`, a little under
    /// NVML's): what `per_process_memory_fraction` is a fraction of.
    #[serde(default)]
    pub cuda_total_bytes: Option<u64>,
    /// `torch.cuda.get_per_process_memory_fraction(d)` when the capture
    /// read it (PyTorch 2.11 has the getter; older ones: the fraction the
    /// job set, seen by the capture module), in (0, 1].
    #[serde(default)]
    pub memory_fraction: Option<Fraction>,
    /// The cap that fraction puts on the process's allocator (the fraction
    /// of `cuda_total_bytes`), when below 1: what a replay of this snapshot
    /// runs under when no capacity is given.
    #[serde(default)]
    pub capacity_bytes: Option<u64>,
    /// The other processes on the device and their memory.
    pub other_processes: Vec<ProcessMemory>,
}

/// A fraction, compared by its bits so that the types holding it stay
/// `Eq` (the reader keeps only finite ones in (0, 1]).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Fraction(pub f64);

impl PartialEq for Fraction {
    fn eq(&self, other: &Fraction) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Fraction {}

/// A process's memory on a device.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessMemory {
    /// Process id.
    pub pid: u32,
    /// Bytes it used, when the driver says.
    pub used_bytes: Option<u64>,
}

/// `allocator_settings`: the typed fields the analysis needs, plus every key as written.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AllocatorSettings {
    /// The raw `PYTORCH_CUDA_ALLOC_CONF` string.
    pub alloc_conf: Option<String>,
    /// `max_split_size` in bytes; `None` when unlimited (-1).
    pub max_split_size: Option<u64>,
    /// `expandable_segments`.
    pub expandable_segments: bool,
    /// `garbage_collection_threshold`.
    pub garbage_collection_threshold: f64,
    /// `roundup_power2_divisions` as (interval start in MiB, divisions), by interval.
    pub roundup_power2_divisions: Vec<(u64, u64)>,
    /// Every key as written, in file order.
    pub raw: Vec<(String, PyValue)>,
}

/// A plain Python value, for the parts of a snapshot with no fixed schema.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum PyValue {
    /// `None`.
    None,
    /// `bool`.
    Bool(bool),
    /// `int` (up to 128 bits).
    Int(i128),
    /// `float`.
    Float(f64),
    /// `str`.
    Str(String),
    /// `list`, `tuple` or `set`.
    List(Vec<PyValue>),
    /// `dict` with keys as text.
    Dict(Vec<(String, PyValue)>),
}

/// An `external_annotations` entry: one end of a `record_function` range.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Annotation {
    /// Device the annotation was recorded on.
    pub device: u32,
    /// `START` or `END`.
    pub stage: AnnotationStage,
    /// The range's name (e.g. `step12`, `Optimizer.step#AdamW.step`).
    pub name: String,
    /// Time in microseconds since the epoch.
    pub time_us: i64,
}

/// Which end of a range an annotation marks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum AnnotationStage {
    /// The range opens.
    Start,
    /// The range closes.
    End,
}

impl Snapshot {
    /// The cap the capture recorded for device `device`: the process's
    /// memory fraction of the device's memory
    /// ([`CaptureDevice::capacity_bytes`]), when below 1. The one answer to
    /// "which cap did the capture record"; the cap the recorded settings'
    /// `per_process_memory_fraction` implies is the simulator's
    /// `fraction_capacity`.
    pub fn recorded_capacity(&self, device: u32) -> Option<u64> {
        self.capture.as_ref()?.devices.iter().find(|d| d.device == device)?.capacity_bytes
    }

    /// The device with this index, if the snapshot has it.
    pub fn device(&self, device: u32) -> Option<&DeviceSnapshot> {
        self.devices.iter().find(|d| d.device == device)
    }
}
