//! The snapshot model and its reader.

pub mod frames;
pub mod model;
pub(crate) mod read;
mod sniff;
pub mod trace;

pub use frames::{EMPTY_STACK, Frame, FrameId, FrameTable, StackId, StrId, Strings};
pub use model::{
    AllocatorSettings, Annotation, AnnotationStage, Block, BlockState, CaptureContext, CaptureDevice, Compression,
    DeviceSnapshot, FormatVersion, Fraction, HistoryEntry, ProcessMemory, PyValue, Segment, SegmentType, Snapshot,
};
pub use read::{
    DEFAULT_MAX_EXPANSION, ReadOptions, read_snapshot, read_snapshot_bytes, read_snapshot_bytes_with,
    read_snapshot_chunks,
};
pub use trace::{Action, TraceColumns, TraceEntry};
