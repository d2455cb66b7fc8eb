//! Frames lists and frame dicts converted into the interned stacks and
//! frames of the [`FrameTable`](crate::snapshot::frames::FrameTable), for
//! trace entries, segments, blocks and block histories alike.

use super::Reader;
use super::value::{PathFn, as_i64, as_str, as_u64, wrong};
use super::words::{EMPTY, FILENAME, LINE, NAME};
use crate::error::ReadError;
use crate::pickle::{Heap, ObjKind, V, Value};
use crate::snapshot::frames::{EMPTY_STACK, Frame, FrameId, StackId};

impl Reader {
    /// Intern a frames list as a stack. Shared lists are converted once and
    /// then found already converted (a forward), so memo sharing costs nothing.
    pub(super) fn stack_of(&mut self, heap: &mut Heap, v: Value, path: PathFn<'_>) -> Result<StackId, ReadError> {
        let v = heap.resolve(v);
        let list = match v.get() {
            V::Stack(s) => return Ok(s),
            V::None => return Ok(EMPTY_STACK),
            V::Obj(id) if matches!(heap.obj(id).kind, ObjKind::List(_) | ObjKind::Tuple(_)) => id,
            _ => return Err(wrong(heap, path, "a list of frame dicts", v)),
        };
        self.stack_frames.clear();
        // Index instead of iterating: converting a frame mutates the heap.
        let item_at = |heap: &Heap, j: usize| match &heap.obj(list).kind {
            ObjKind::List(items) | ObjKind::Tuple(items) => items.get(j).copied(),
            _ => None,
        };
        let mut j = 0;
        while let Some(item) = item_at(heap, j) {
            let frame_path = || format!("{}[{j}]", path());
            let frame = self.frame_of(heap, item, &frame_path)?;
            self.stack_frames.push(frame);
            j += 1;
        }
        let stack = self.frames.intern_stack(&self.stack_frames);
        heap.convert(list, Value::stack(stack));
        Ok(stack)
    }

    /// Intern a frame dict as a frame, converted in place like a stack.
    fn frame_of(&mut self, heap: &mut Heap, v: Value, path: PathFn<'_>) -> Result<FrameId, ReadError> {
        let v = heap.resolve(v);
        let dict = match v.get() {
            V::Frame(f) => return Ok(f),
            V::Obj(id) if matches!(heap.obj(id).kind, ObjKind::Dict(_)) => id,
            _ => return Err(wrong(heap, path, "a frame dict {filename, line, name}", v)),
        };
        let mut frame = Frame { filename: EMPTY, line: 0, name: EMPTY };
        if let ObjKind::Dict(items) = &heap.obj(dict).kind {
            for &(k, v) in items {
                let field = |name: &str| format!("{}.{name}", path());
                match k.get() {
                    V::Str(FILENAME) => frame.filename = as_str(heap, v, &|| field("filename"))?,
                    V::Str(NAME) => frame.name = as_str(heap, v, &|| field("name"))?,
                    // C++ frames can carry line -1 written as an unsigned 2^64-1.
                    V::Str(LINE) => {
                        frame.line = as_u64(heap, v, &|| field("line"))
                            .map(|l| l as i64)
                            .or_else(|_| as_i64(heap, v, &|| field("line")))?
                    }
                    _ => {} // fx_node_* and other annotations: not modelled yet.
                }
            }
        }
        let id = self.frames.intern_frame(frame);
        heap.convert(dict, Value::frame(id));
        Ok(id)
    }
}
