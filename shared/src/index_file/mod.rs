//! The persisted index: everything the views need of an [`IndexedSnapshot`]
//! snapshot, in one file written after the first parse, so that opening
//! the snapshot again (after a restart, on another server, after the cache
//! let it go) maps a file instead of parsing the pickle.
//!
//! # Layout
//!
//! ```text
//! 0        "VSINDEX\0"  magic
//! 8        u32          format version (FORMAT_VERSION)
//! 12       u32          0 (reserved)
//! 64…      columns      each little-endian, starting on a 64-byte boundary
//! H        JSON header  the structure: scalars, small tables, and a
//!                       ColumnRef (offset, length, xxh3) for every column
//! end-32   u64 H, u64 header length, u64 xxh3 of the header, "VSEND\0\0\0"
//! ```
//!
//! Columns are plain arrays of numbers, so a reader views them in place
//! ([`Column::from_bytes`]): opening a file costs the header and one
//! checksum pass, never a copy of the trace. Every column's checksum is
//! verified when it is opened, and every offset is checked against the
//! file, so a truncated, corrupted or foreign file is an error (the server
//! then rebuilds it from the pickle), never a wrong answer or a panic.
//!
//! Why a format of our own rather than a crate's: see ARCHITECTURE.md
//! ("The persisted index"). In short, what must be persisted is a dozen
//! structures of plain-number columns; Arrow IPC would flatten each into
//! record batches of one schema per file, and rkyv's zero-copy types would
//! replace the types every view is written against. `bytemuck` (casts) and
//! `xxhash-rust` (checksums) do the parts a crate does well.
//!
//! [`IndexedSnapshot`]: crate::indexed::IndexedSnapshot
//!
//! This module is the format alone (columns, checksums, the header);
//! [`crate::indexed::persist`] writes and opens an [`IndexedSnapshot`] with it.

use std::io::{self, Write};

use bytemuck::Pod;
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use thiserror::Error;
use xxhash_rust::xxh3::{Xxh3, xxh3_64};

use crate::column::Column;

/// The version this build writes and reads. Bump it whenever what is
/// written changes; a file of another version is rebuilt, never read.
/// 2: pinned host memory (`host`) and the capture's `cuda_total_bytes`.
/// 3: the SHA-256 of the snapshot file the index belongs to.
pub const FORMAT_VERSION: u32 = 3;

const MAGIC: &[u8; 8] = b"VSINDEX\0";
const END_MAGIC: &[u8; 8] = b"VSEND\0\0\0";
const ALIGN: u64 = 64;
const PRELUDE: u64 = 64;
const TRAILER: u64 = 32;

/// Where a column lies in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnRef {
    /// Byte offset from the start of the file.
    pub offset: u64,
    /// Length in bytes.
    pub bytes: u64,
    /// xxh3-64 of those bytes.
    pub xxh3: u64,
}

/// Why an index file cannot be used. Each names what was wrong and where;
/// [`IndexFileError::kind`] is stable.
#[derive(Debug, Error)]
pub enum IndexFileError {
    /// Not an index file at all.
    #[error("not a vramscope index file (bad magic at byte {offset})")]
    NotAnIndex {
        /// Where the magic was expected.
        offset: u64,
    },
    /// Written by another version of the format.
    #[error("index format version {found}, this build reads {FORMAT_VERSION}")]
    Version {
        /// The file's version.
        found: u32,
    },
    /// Offsets, lengths or checksums do not add up.
    #[error("corrupt index file: {what} (at byte {offset})")]
    Corrupt {
        /// What was wrong.
        what: String,
        /// The byte offset concerned.
        offset: u64,
    },
    /// The header does not describe an index of this version.
    #[error("corrupt index header: {0}")]
    Header(String),
    /// A good index, of another snapshot file (copied or renamed over
    /// this one's).
    #[error("the index belongs to the snapshot file with SHA-256 {found}, not to {expected}")]
    OtherSnapshot {
        /// The SHA-256 its header records.
        found: String,
        /// The SHA-256 of the file it was opened for.
        expected: String,
    },
    /// Writing failed.
    #[error("writing the index: {0}")]
    Io(#[from] io::Error),
}

impl IndexFileError {
    /// A stable name for the kind of error.
    pub fn kind(&self) -> &'static str {
        match self {
            IndexFileError::NotAnIndex { .. } => "index_not_an_index",
            IndexFileError::Version { .. } => "index_version",
            IndexFileError::Corrupt { .. } | IndexFileError::Header(_) => "index_corrupt",
            IndexFileError::OtherSnapshot { .. } => "index_other_snapshot",
            IndexFileError::Io(_) => "io",
        }
    }

    fn corrupt(what: impl Into<String>, offset: u64) -> IndexFileError {
        IndexFileError::Corrupt { what: what.into(), offset }
    }
}

/// Writes an index file: columns first, as they come, then the header.
pub struct Writer<W: Write> {
    out: W,
    pos: u64,
}

impl<W: Write> Writer<W> {
    /// Start a file on `out` (written front to back, never sought).
    pub fn new(mut out: W) -> io::Result<Writer<W>> {
        let mut prelude = [0u8; PRELUDE as usize];
        prelude[..8].copy_from_slice(MAGIC);
        prelude[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.write_all(&prelude)?;
        Ok(Writer { out, pos: PRELUDE })
    }

    /// Append a column.
    pub fn column<T: Pod>(&mut self, values: &[T]) -> io::Result<ColumnRef> {
        self.raw(bytemuck::cast_slice(values))
    }

    fn raw(&mut self, bytes: &[u8]) -> io::Result<ColumnRef> {
        let pad = self.pos.next_multiple_of(ALIGN) - self.pos;
        self.out.write_all(&[0u8; ALIGN as usize][..pad as usize])?;
        self.pos += pad;
        let offset = self.pos;
        // Hashing and writing in 1 MiB pieces keeps the piece in cache for both.
        let mut hasher = Xxh3::new();
        for piece in bytes.chunks(1 << 20) {
            hasher.update(piece);
            self.out.write_all(piece)?;
        }
        self.pos += bytes.len() as u64;
        Ok(ColumnRef { offset, bytes: bytes.len() as u64, xxh3: hasher.digest() })
    }

    /// Write the header and the trailer; returns the output.
    pub fn finish<H: Serialize>(mut self, header: &H) -> io::Result<W> {
        let json = serde_json::to_vec(header).map_err(io::Error::other)?;
        let at = self.pos;
        self.out.write_all(&json)?;
        let mut trailer = [0u8; TRAILER as usize];
        trailer[..8].copy_from_slice(&at.to_le_bytes());
        trailer[8..16].copy_from_slice(&(json.len() as u64).to_le_bytes());
        trailer[16..24].copy_from_slice(&xxh3_64(&json).to_le_bytes());
        trailer[24..].copy_from_slice(END_MAGIC);
        self.out.write_all(&trailer)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Reads an index file held in (or mapped into) memory.
pub struct Reader {
    bytes: Bytes,
}

impl Reader {
    /// Check the file's frame (magic, version, trailer, header checksum)
    /// and parse its header.
    pub fn open<H: DeserializeOwned>(bytes: Bytes) -> Result<(Reader, H), IndexFileError> {
        let len = bytes.len() as u64;
        if len < PRELUDE + TRAILER || &bytes[..8] != MAGIC {
            return Err(IndexFileError::NotAnIndex { offset: 0 });
        }
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or_default());
        let version = u32::from_le_bytes(bytes[8..12].try_into().unwrap_or_default());
        if version != FORMAT_VERSION {
            return Err(IndexFileError::Version { found: version });
        }
        let t = (len - TRAILER) as usize;
        if &bytes[t + 24..] != END_MAGIC {
            return Err(IndexFileError::corrupt("no trailer (a truncated file?)", len - 8));
        }
        let (at, header_len, sum) = (word(t), word(t + 8), word(t + 16));
        if at < PRELUDE || at.checked_add(header_len) != Some(len - TRAILER) {
            return Err(IndexFileError::corrupt(
                format!("header at {at}, {header_len} bytes, in a {len}-byte file"),
                t as u64,
            ));
        }
        let json = &bytes[at as usize..t];
        if xxh3_64(json) != sum {
            return Err(IndexFileError::corrupt("header checksum mismatch", at));
        }
        let header = serde_json::from_slice(json).map_err(|e| IndexFileError::Header(e.to_string()))?;
        Ok((Reader { bytes }, header))
    }

    /// The column at `r`, viewed in place, its checksum verified.
    pub fn column<T: Pod>(&self, r: &ColumnRef) -> Result<Column<T>, IndexFileError> {
        let len = self.bytes.len() as u64;
        let end = r.offset.checked_add(r.bytes).filter(|&e| e <= len && r.offset >= PRELUDE);
        let Some(end) = end else {
            return Err(IndexFileError::corrupt(format!("column of {} bytes past the end ({len})", r.bytes), r.offset));
        };
        let bytes = self.bytes.slice(r.offset as usize..end as usize);
        if xxh3_64(&bytes) != r.xxh3 {
            return Err(IndexFileError::corrupt("column checksum mismatch", r.offset));
        }
        Column::from_bytes(bytes).map_err(|e| IndexFileError::corrupt(e.to_string(), r.offset))
    }

    /// A column that must hold exactly `n` elements (a trace column of `n` rows).
    pub fn column_of<T: Pod>(&self, r: &ColumnRef, n: usize) -> Result<Column<T>, IndexFileError> {
        let col = self.column::<T>(r)?;
        if col.len() != n {
            return Err(IndexFileError::corrupt(format!("column of {} elements, expected {n}", col.len()), r.offset));
        }
        Ok(col)
    }
}

/// Reject a header whose numbers contradict each other (an index into a
/// table past its end). Views index these tables without further checks.
pub(crate) fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), IndexFileError> {
    if ok { Ok(()) } else { Err(IndexFileError::Header(what())) }
}
