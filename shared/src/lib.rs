//! vramscope's shared crate: the PyTorch memory-snapshot model, its reader,
//! timelines and analysis. Compiles for native targets and wasm32; does no I/O
//! beyond reading from a caller's [`std::io::Read`] and writing to a
//! caller's [`std::io::Write`].

#![forbid(unsafe_code)]

pub mod analysis;
pub mod analyzed;
pub mod answers;
pub mod api;
pub mod column;
pub mod error;
pub mod index;
pub mod index_file;
pub mod pickle;
pub mod pools;
pub mod predict;
pub mod simulate;
pub mod snapshot;
pub mod stats;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod timeline;
pub mod views;

pub use error::ReadError;
pub use snapshot::{DEFAULT_MAX_EXPANSION, ReadOptions, Snapshot, read_snapshot, read_snapshot_bytes};
pub use stats::{DeviceStats, SnapshotStats, StatsReport};
