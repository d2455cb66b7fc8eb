//! A streaming decoder for the pickles PyTorch writes.
//!
//! Why our own decoder: `serde-pickle` 1.2 fails on every real snapshot (PyTorch
//! shares frame lists and dicts between blocks and trace entries through the
//! pickle memo, and serde-pickle's memo handling reports `Recursive`), rejects
//! integers at or above 2^63 (GPU addresses can be there), and where it works it
//! deep-clones every memo reference, using 16-20x the file size in memory. No
//! crate on crates.io streams a pickle into a caller's model. This one keeps
//! memo references as indices (never cloned), packs values into eight bytes,
//! and lets the snapshot reader convert each trace entry into columns the moment
//! it is appended to its list, so the trace never exists as a tree.
//!
//! It executes nothing: GLOBAL, REDUCE and the other opcodes that import or call
//! Python are refused with [`crate::ReadError::ForbiddenOpcode`].

pub(crate) mod decompress;
mod heap;
mod machine;
mod memo;
pub mod opcode;
mod source;
mod value;

pub use heap::{BigInt, Heap, Obj, ObjKind};
pub use machine::{DICT_WINDOW, HIGHEST_PROTOCOL, Hooks, NoHooks, Outcome, run, run_chunks, run_slice};
pub use source::{CHUNK_HEADROOM, ChunkFeed};
pub use value::{ObjId, StrId, V, Value};
