//! Interned strings, frames and stacks.
//!
//! A real 1.5M-entry trace has a few hundred distinct frames and a few
//! thousand distinct stacks; each is stored once and named by a 32-bit id.

use indexmap::IndexSet;
use rustc_hash::{FxBuildHasher, FxHashMap};

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
    stack_ids: FxHashMap<Box<[FrameId]>, StackId>,
}

impl Default for FrameTable {
    fn default() -> Self {
        let mut t = FrameTable {
            frames: Vec::new(),
            frame_ids: FxHashMap::default(),
            stack_starts: vec![0],
            stack_frames: Vec::new(),
            stack_ids: FxHashMap::default(),
        };
        let empty = t.intern_stack(&[]);
        debug_assert_eq!(empty, EMPTY_STACK);
        t
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
        if let Some(&id) = self.stack_ids.get(frames) {
            return id;
        }
        let id = (self.stack_starts.len() - 1) as StackId;
        self.stack_frames.extend_from_slice(frames);
        self.stack_starts.push(self.stack_frames.len() as u32);
        self.stack_ids.insert(frames.into(), id);
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
