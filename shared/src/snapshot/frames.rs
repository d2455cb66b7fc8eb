//! Interned strings, frames and stacks.
//!
//! A real 1.5M-entry trace has a few hundred distinct frames and a few
//! thousand distinct stacks; each is stored once and named by a 32-bit id.

use indexmap::IndexSet;
use rustc_hash::{FxBuildHasher, FxHashMap};

use crate::index_file::{ColumnRef, IndexFileError, Reader, Writer, check};

/// Id of a string in [`Strings`].
pub type StrId = u32;
/// Id of a frame in [`FrameTable`].
pub type FrameId = u32;
/// Id of a stack (a sequence of frames, innermost first) in [`FrameTable`].
/// [`EMPTY_STACK`] is the stack with no frames.
pub type StackId = u32;

/// The stack with no frames (history recorded without context, or `state` only).
pub const EMPTY_STACK: StackId = 0;

/// The snapshot's string table.
#[derive(Debug, Default)]
pub struct Strings(IndexSet<Box<str>, FxBuildHasher>);

impl Strings {
    /// Wrap a table built by the pickle heap.
    pub(crate) fn new(set: IndexSet<Box<str>, FxBuildHasher>) -> Self {
        Strings(set)
    }

    /// The text of a string id (empty for an unknown id).
    pub fn get(&self, id: StrId) -> &str {
        self.0.get_index(id as usize).map(|s| &**s).unwrap_or("")
    }

    /// The id of a string, if the snapshot has it.
    pub fn find(&self, s: &str) -> Option<StrId> {
        self.0.get_index_of(s).map(|i| i as StrId)
    }

    /// Number of distinct strings.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// One Python or C++ frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Source file.
    pub filename: StrId,
    /// Line number (0 when unknown).
    pub line: i64,
    /// Function name.
    pub name: StrId,
}

/// Interned frames and stacks.
#[derive(Debug)]
pub struct FrameTable {
    frames: Vec<Frame>,
    frame_ids: FxHashMap<Frame, FrameId>,
    /// `stack_starts[s]..stack_starts[s + 1]` indexes `stack_frames`.
    stack_starts: Vec<u32>,
    stack_frames: Vec<FrameId>,
    /// Stacks by the hash of their frames: the newest stack of that hash;
    /// `same_hash[s]` the one before it (`NO_STACK` ends the chain). The
    /// frames are compared where they are stored, in `stack_frames`, with
    /// no boxed copy of each stack as a key.
    stack_ids: FxHashMap<u64, StackId>,
    same_hash: Vec<StackId>,
}

/// The end of a chain of stacks of one hash.
const NO_STACK: StackId = StackId::MAX;

/// The hash a stack is filed under.
#[inline]
fn stack_hash(frames: &[FrameId]) -> u64 {
    use std::hash::BuildHasher;
    FxBuildHasher.hash_one(frames)
}

impl Default for FrameTable {
    fn default() -> Self {
        // Stack 0 is the empty one (`stack_starts` 0..0), interned here
        // once: `intern_stack` answers it without a lookup.
        FrameTable {
            frames: Vec::new(),
            frame_ids: FxHashMap::default(),
            stack_starts: vec![0, 0],
            stack_frames: Vec::new(),
            stack_ids: FxHashMap::default(),
            same_hash: vec![NO_STACK],
        }
    }
}

impl FrameTable {
    /// Intern a frame.
    pub fn intern_frame(&mut self, frame: Frame) -> FrameId {
        if let Some(&id) = self.frame_ids.get(&frame) {
            return id;
        }
        let id = self.frames.len() as FrameId;
        self.frames.push(frame);
        self.frame_ids.insert(frame, id);
        id
    }

    /// Intern a stack given as frame ids, innermost first.
    pub fn intern_stack(&mut self, frames: &[FrameId]) -> StackId {
        if frames.is_empty() {
            // Interned first, by `default`: entries with no Python frames
            // (allocations from C++) need no hash.
            return EMPTY_STACK;
        }
        let hash = stack_hash(frames);
        let head = self.stack_ids.get(&hash).copied().unwrap_or(NO_STACK);
        let mut at = head;
        while at != NO_STACK {
            if self.stack(at) == frames {
                return at;
            }
            at = self.same_hash[at as usize];
        }
        let id = (self.stack_starts.len() - 1) as StackId;
        self.stack_frames.extend_from_slice(frames);
        self.stack_starts.push(self.stack_frames.len() as u32);
        self.stack_ids.insert(hash, id);
        self.same_hash.push(head);
        id
    }

    /// The frames of a stack, innermost first (empty for an unknown id).
    pub fn stack(&self, id: StackId) -> &[FrameId] {
        let i = id as usize;
        match (self.stack_starts.get(i), self.stack_starts.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.stack_frames[a as usize..b as usize],
            _ => &[],
        }
    }

    /// A frame by id.
    pub fn frame(&self, id: FrameId) -> Option<&Frame> {
        self.frames.get(id as usize)
    }

    /// Number of distinct frames.
    pub fn frame_count(&self) -> usize {
        self.frames.len()
    }

    /// Number of distinct stacks, the empty one included.
    pub fn stack_count(&self) -> usize {
        self.stack_starts.len() - 1
    }
}

/// Where the string and frame tables lie in an index file.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct TablesHeader {
    /// The strings' UTF-8, one after another.
    text: ColumnRef,
    /// `ends[i]`: where string `i` ends in `text`.
    ends: ColumnRef,
    frame_files: ColumnRef,
    frame_lines: ColumnRef,
    frame_names: ColumnRef,
    stack_starts: ColumnRef,
    stack_frames: ColumnRef,
}

/// Write the string and frame tables to an index file.
pub(crate) fn save_tables<W: std::io::Write>(
    strings: &Strings,
    frames: &FrameTable,
    w: &mut Writer<W>,
) -> std::io::Result<TablesHeader> {
    let mut text = Vec::new();
    let mut ends = Vec::with_capacity(strings.len());
    for s in &strings.0 {
        text.extend_from_slice(s.as_bytes());
        ends.push(text.len() as u64);
    }
    Ok(TablesHeader {
        text: w.column(&text)?,
        ends: w.column(&ends)?,
        frame_files: w.column(&frames.frames.iter().map(|f| f.filename).collect::<Vec<_>>())?,
        frame_lines: w.column(&frames.frames.iter().map(|f| f.line).collect::<Vec<_>>())?,
        frame_names: w.column(&frames.frames.iter().map(|f| f.name).collect::<Vec<_>>())?,
        stack_starts: w.column(&frames.stack_starts)?,
        stack_frames: w.column(&frames.stack_frames)?,
    })
}

/// Read the string and frame tables of an index file (rebuilt in memory:
/// they are small, and interning needs their hash maps).
pub(crate) fn load_tables(r: &Reader, h: &TablesHeader) -> Result<(Strings, FrameTable), IndexFileError> {
    let text = r.column::<u8>(&h.text)?;
    let ends = r.column::<u64>(&h.ends)?;
    let mut set = IndexSet::with_capacity_and_hasher(ends.len(), FxBuildHasher);
    let mut start = 0usize;
    for &end in ends.iter() {
        let end = usize::try_from(end).unwrap_or(usize::MAX);
        let piece = text.get(start..end).and_then(|b| std::str::from_utf8(b).ok());
        let Some(piece) = piece else {
            return Err(IndexFileError::Header(format!("string {} is not UTF-8 within the text column", set.len())));
        };
        set.insert(Box::from(piece));
        start = end;
    }
    check(set.len() == ends.len(), || "the string table holds a string twice".to_owned())?;
    let strings = Strings(set);
    let files = r.column::<StrId>(&h.frame_files)?;
    let lines = r.column_of::<i64>(&h.frame_lines, files.len())?;
    let names = r.column_of::<StrId>(&h.frame_names, files.len())?;
    let starts = r.column::<u32>(&h.stack_starts)?;
    let stack_frames = r.column::<FrameId>(&h.stack_frames)?;
    let n_strings = strings.len() as u32;
    check(files.iter().chain(names.iter()).all(|&s| s < n_strings), || "a frame names a missing string".to_owned())?;
    check(
        // Stack 0 is the empty one: `intern_stack` answers it unlooked.
        starts.first() == Some(&0)
            && starts.get(1) == Some(&0)
            && starts.windows(2).all(|w| w[0] <= w[1])
            && starts.last().is_some_and(|&e| e as usize == stack_frames.len()),
        || "stack offsets out of order".to_owned(),
    )?;
    check(stack_frames.iter().all(|&f| (f as usize) < files.len()), || "a stack names a missing frame".to_owned())?;
    let mut table = FrameTable {
        frames: Vec::with_capacity(files.len()),
        frame_ids: FxHashMap::default(),
        stack_starts: starts.to_vec(),
        stack_frames: stack_frames.to_vec(),
        stack_ids: FxHashMap::default(),
        same_hash: Vec::with_capacity(starts.len().saturating_sub(1)),
    };
    for i in 0..files.len() {
        let frame = Frame { filename: files[i], line: lines[i], name: names[i] };
        table.frame_ids.insert(frame, i as FrameId);
        table.frames.push(frame);
    }
    for s in 0..table.stack_count() {
        let hash = stack_hash(table.stack(s as StackId));
        let head = table.stack_ids.insert(hash, s as StackId).unwrap_or(NO_STACK);
        table.same_hash.push(head);
    }
    Ok((strings, table))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_frames_and_stacks_are_stored_once() {
        let mut t = FrameTable::default();
        let a = t.intern_frame(Frame { filename: 1, line: 10, name: 2 });
        let b = t.intern_frame(Frame { filename: 1, line: 11, name: 2 });
        assert_eq!(a, t.intern_frame(Frame { filename: 1, line: 10, name: 2 }));
        let s1 = t.intern_stack(&[a, b]);
        let s2 = t.intern_stack(&[a, b]);
        let s3 = t.intern_stack(&[b, a]);
        assert_eq!(s1, s2);
        assert_ne!(s1, s3);
        assert_eq!(t.stack(s1), &[a, b]);
        assert_eq!(t.stack(EMPTY_STACK), &[] as &[FrameId]);
        assert_eq!((t.frame_count(), t.stack_count()), (2, 3));
    }
}
