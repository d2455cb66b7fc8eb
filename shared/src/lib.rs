//! vramscope's shared crate: the PyTorch memory-snapshot model, its reader,
//! timelines and analysis. Compiles for native targets and wasm32; does no I/O
//! beyond reading from a caller's [`std::io::Read`] and writing to a
//! caller's [`std::io::Write`].
//!
//! # Layers
//!
//! Each module names only those before it in this order (a test,
//! `layers.rs`, keeps it; within a folder, no two files name each other):
//!
//! ```text
//! error, column → index_file → pickle → snapshot → stats → intervals → pools
//!   → timeline → simulate → analysis → indexed → predict → views → api
//!   → cli_json (→ testing, the corpus for tests)
//! ```
//!
//! - [`error`] the crate's errors and [`column`] the immutable arrays
//!   stand at the bottom; [`index_file`] is the persisted index's plain
//!   format (columns, checksums, a header).
//! - [`pickle`] is the pickle machine; [`snapshot`] the model and the
//!   reader's hooks; [`stats`] PyTorch's counters; [`intervals`] the allocations and segments as intervals;
//!   [`pools`] which pool each trace row belongs to; [`timeline`] the
//!   level-of-detail windows.
//! - [`simulate`] is the caching allocator's model; [`analysis`] the
//!   answers built on the model, its intervals and the simulator.
//! - [`indexed`] assembles a snapshot with its indexes (and writes and
//!   opens it as an index file); [`predict`] replays runs at sizes never
//!   run; [`views`] answers the dashboard's questions of an
//!   [`indexed::IndexedSnapshot`].
//! - [`api`] is the wire types, some of which embed analyses' reports;
//!   [`cli_json`] the command line's `--json` objects.

#![forbid(unsafe_code)]

pub mod analysis;
pub mod api;
pub mod cli_json;
pub mod column;
pub mod error;
pub mod index_file;
pub mod indexed;
pub mod intervals;
#[cfg(test)]
mod layers;
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
pub use snapshot::{
    DEFAULT_MAX_EXPANSION, ReadOptions, Snapshot, read_snapshot, read_snapshot_bytes, read_snapshot_bytes_with,
    read_snapshot_chunks,
};
pub use stats::{DeviceStats, SnapshotStats, StatsReport};
