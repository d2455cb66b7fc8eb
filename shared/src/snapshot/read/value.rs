//! Typed accessors of pickle values for the schema's fields (integers,
//! strings, pairs, dicts and lists, each failing with the field's path),
//! and the bounded conversion of a free-form value into a [`PyValue`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::words::EMPTY;
use crate::error::ReadError;
use crate::pickle::{Heap, ObjId, ObjKind, V, Value};
use crate::snapshot::frames::StrId;
use crate::snapshot::model::PyValue;

/// Deepest nesting accepted in free-form values (allocator settings).
const MAX_DEPTH: usize = 32;
/// Most nodes visited when converting one free-form value.
const MAX_VISITS: usize = 1 << 20;

/// Builds a field path for an error message only when one is needed.
pub(super) type PathFn<'a> = &'a dyn Fn() -> String;

/// The type error for `v` at `path`, which was not `expected`.
pub(super) fn wrong(heap: &Heap, path: PathFn<'_>, expected: &'static str, v: Value) -> ReadError {
    ReadError::WrongType { path: path(), expected, found: heap.describe(v) }
}

/// A non-negative integer within 64 bits.
pub(super) fn as_u64(heap: &Heap, v: Value, path: PathFn<'_>) -> Result<u64, ReadError> {
    match heap.as_int(v) {
        Some(Ok(i)) => u64::try_from(i).map_err(|_| wrong(heap, path, "a non-negative integer below 2^64", v)),
        _ => Err(wrong(heap, path, "a non-negative integer", v)),
    }
}

/// An integer within 64 bits.
pub(super) fn as_i64(heap: &Heap, v: Value, path: PathFn<'_>) -> Result<i64, ReadError> {
    match heap.as_int(v) {
        Some(Ok(i)) => i64::try_from(i).map_err(|_| wrong(heap, path, "an integer within 64 bits", v)),
        _ => Err(wrong(heap, path, "an integer", v)),
    }
}

/// An interned string.
pub(super) fn as_str(heap: &Heap, v: Value, path: PathFn<'_>) -> Result<StrId, ReadError> {
    match v.get() {
        V::Str(s) => Ok(s),
        _ => Err(wrong(heap, path, "a string", v)),
    }
}

/// A bool; an integer reads as one (non-zero is true).
pub(super) fn as_bool(heap: &Heap, v: Value, path: PathFn<'_>) -> Result<bool, ReadError> {
    match heap.as_int(v) {
        Some(Ok(i)) => Ok(i != 0),
        _ => Err(wrong(heap, path, "a bool", v)),
    }
}

/// A pair of integers, as a tuple or a list.
pub(super) fn as_pair(heap: &Heap, v: Value, path: PathFn<'_>) -> Result<(i64, i64), ReadError> {
    if let V::Obj(id) = v.get()
        && let ObjKind::Tuple(items) | ObjKind::List(items) = &heap.obj(id).kind
        && items.len() == 2
    {
        return Ok((as_i64(heap, items[0], path)?, as_i64(heap, items[1], path)?));
    }
    Err(wrong(heap, path, "a pair of integers", v))
}

/// The items of a dict (after forwarding), or a type error.
pub(super) fn dict_items(heap: &Heap, v: Value, path: PathFn<'_>) -> Result<Vec<(Value, Value)>, ReadError> {
    let v = heap.resolve(v);
    if let V::Obj(id) = v.get()
        && let ObjKind::Dict(items) = &heap.obj(id).kind
    {
        return Ok(items.clone());
    }
    Err(wrong(heap, path, "a dict", v))
}

/// The items of a list or tuple, or a type error.
pub(super) fn list_items(heap: &Heap, v: Value, path: PathFn<'_>) -> Result<Vec<Value>, ReadError> {
    let v = heap.resolve(v);
    if let V::Obj(id) = v.get() {
        match &heap.obj(id).kind {
            ObjKind::List(items) | ObjKind::Tuple(items) => return Ok(items.clone()),
            ObjKind::Rows { start, len } => return Ok((*start..start + len).map(Value::row).collect()),
            _ => {}
        }
    }
    Err(wrong(heap, path, "a list", v))
}

/// Look a key up; the last write wins, as in Python.
pub(super) fn get(items: &[(Value, Value)], key: StrId) -> Option<Value> {
    let key = Value::str(key);
    items.iter().rev().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

/// A string, or `None` read as the empty string.
pub(super) fn str_or_none(heap: &Heap, v: Value, path: PathFn<'_>) -> Result<StrId, ReadError> {
    match v.get() {
        V::None => Ok(EMPTY),
        _ => as_str(heap, v, path),
    }
}

/// Most bytes `allocator_settings` may take once converted (its nodes,
/// keys and strings, each shared string counted at every place it is
/// used): it is kept whole, stored and served, and real ones take a few
/// hundred. Every conversion is also bounded by what is left of the
/// reader's memory budget.
pub(super) const MAX_SETTINGS_BYTES: u64 = 1 << 20;
/// Longest key quoted in a path of an error.
const QUOTED_KEY: usize = 40;
/// Nodes converted between two looks at the cancel flag.
const CANCEL_EVERY: usize = 4096;

/// What stops a conversion after the machine has run: the caller's cancel
/// flag (a time limit, or nobody waiting), and the byte to name when it does.
#[derive(Clone, Default)]
pub(super) struct Stop {
    /// Set from another thread to stop the read.
    pub(super) cancel: Option<Arc<AtomicBool>>,
    /// Bytes of pickle read (the machine has finished).
    pub(super) offset: u64,
}

impl Stop {
    /// Fails with [`ReadError::Cancelled`] once the flag is set.
    pub(super) fn check(&self) -> Result<(), ReadError> {
        match &self.cancel {
            Some(c) if c.load(Ordering::Relaxed) => Err(ReadError::Cancelled { offset: self.offset }),
            _ => Ok(()),
        }
    }
}

/// Where a node sits in a free-form value, kept as links on the stack and
/// made into text only for an error: formatting it for every node cost
/// depth × key length × items (a 4.9 MB file of 100 kB keys took 100 s).
#[derive(Clone, Copy)]
enum At<'p> {
    Root(&'p str),
    Key(&'p At<'p>, &'p str),
    Index(&'p At<'p>, usize),
}

impl At<'_> {
    /// The path as text (`allocator_settings.x[3]`), each key cut to
    /// [`QUOTED_KEY`] characters.
    fn render(&self) -> String {
        let mut links = vec![self];
        while let At::Key(up, _) | At::Index(up, _) = links[links.len() - 1] {
            links.push(up);
        }
        let mut out = String::new();
        for link in links.iter().rev() {
            match link {
                At::Root(root) => out.push_str(root),
                At::Key(_, key) => match key.char_indices().nth(QUOTED_KEY) {
                    Some((cut, _)) => out.push_str(&format!(".{}…({} bytes)", &key[..cut], key.len())),
                    None => out.push_str(&format!(".{key}")),
                },
                At::Index(_, i) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    }
}

/// A dict key as its entry is found again: an interned string by its id
/// (no hashing of its text, however long), any other key by its text.
#[derive(Hash, PartialEq, Eq)]
enum Slot {
    Id(StrId),
    Text(String),
}

/// Convert a free-form value, bounded in depth, in nodes visited (a memo
/// "bomb" of shared lists would otherwise expand exponentially here), in
/// bytes (`max_bytes` and the budget left on `heap`: a string shared a
/// million times through the memo is a million copies here), and stopped
/// by `stop`.
pub(super) fn py_value(heap: &Heap, v: Value, path: &str, max_bytes: u64, stop: &Stop) -> Result<PyValue, ReadError> {
    let mut convert =
        Convert { heap, stop, visits: 0, bytes: 0, limit: max_bytes.min(heap.budget_left()), on_path: Vec::new() };
    convert.value(v, &At::Root(path), 0)
}

/// One conversion's state: the visits and bytes so far and the containers
/// on the path from the root (a container met again on it is a cycle).
struct Convert<'h, 's> {
    heap: &'h Heap,
    stop: &'s Stop,
    visits: usize,
    bytes: u64,
    limit: u64,
    on_path: Vec<ObjId>,
}

impl<'h> Convert<'h, '_> {
    /// Count `bytes` more of converted value at `at`, or fail past the limit.
    fn charge(&mut self, bytes: u64, at: &At<'_>) -> Result<(), ReadError> {
        self.bytes = self.bytes.saturating_add(bytes);
        if self.bytes > self.limit {
            return Err(ReadError::MemoryBudget {
                what: format!(
                    "{}: a value taking more than {} bytes once converted (shared strings counted at each use)",
                    at.render(),
                    self.limit
                ),
                needed: self.bytes,
                budget: self.limit,
                offset: self.stop.offset,
            });
        }
        Ok(())
    }

    /// Convert `v`, found at `at`, `depth` containers down.
    fn value(&mut self, v: Value, at: &At<'_>, depth: usize) -> Result<PyValue, ReadError> {
        let heap = self.heap;
        self.visits += 1;
        if self.visits > MAX_VISITS {
            return Err(ReadError::MemoryBudget {
                what: format!(
                    "{}: a value with more than {MAX_VISITS} nodes once shared references are expanded",
                    at.render()
                ),
                needed: self.visits as u64,
                budget: MAX_VISITS as u64,
                offset: self.stop.offset,
            });
        }
        if self.visits.is_multiple_of(CANCEL_EVERY) {
            self.stop.check()?;
        }
        if depth > MAX_DEPTH {
            return Err(ReadError::TooDeep { path: at.render(), limit: MAX_DEPTH });
        }
        self.charge(NODE, at)?;
        let v = heap.resolve(v);
        Ok(match v.get() {
            V::None => PyValue::None,
            V::Bool(b) => PyValue::Bool(b),
            V::Int(i) => PyValue::Int(i as i128),
            V::Big(_) => match heap.as_int(v) {
                Some(Ok(i)) => PyValue::Int(i),
                _ => return Err(wrong(heap, &|| at.render(), "an integer within 128 bits", v)),
            },
            V::Float(f) => PyValue::Float(heap.float_at(f)),
            V::Str(s) => {
                let text = heap.str(s);
                self.charge(text.len() as u64, at)?;
                PyValue::Str(text.to_owned())
            }
            V::Bytes(_) | V::Row(_) | V::Stack(_) | V::Frame(_) => {
                let text = heap.describe(v);
                self.charge(text.len() as u64, at)?;
                PyValue::Str(text)
            }
            V::Obj(id) => {
                if self.on_path.contains(&id) {
                    return Err(ReadError::Cycle { path: at.render() });
                }
                self.on_path.push(id);
                let out = self.container(id, at, depth)?;
                self.on_path.pop();
                out
            }
        })
    }

    /// Convert the container `id`, found at `at`.
    fn container(&mut self, id: ObjId, at: &At<'_>, depth: usize) -> Result<PyValue, ReadError> {
        let heap = self.heap;
        Ok(match &heap.obj(id).kind {
            ObjKind::List(items) | ObjKind::Tuple(items) | ObjKind::Set(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    out.push(self.value(*item, &At::Index(at, i), depth + 1)?);
                }
                PyValue::List(out)
            }
            ObjKind::Dict(items) => {
                let mut out: Vec<(String, PyValue)> = Vec::with_capacity(items.len());
                // Where each key went: a later duplicate replaces the value
                // in O(1), not by a scan of the keys so far (a flat dict of
                // 200,000 keys took minutes).
                let mut slots: rustc_hash::FxHashMap<Slot, usize> = rustc_hash::FxHashMap::default();
                for (k, val) in items {
                    let (slot, key): (Slot, std::borrow::Cow<'h, str>) = match k.get() {
                        V::Str(s) => (Slot::Id(s), heap.str(s).into()),
                        _ => {
                            let text = match self.value(*k, at, depth + 1)? {
                                PyValue::Int(i) => i.to_string(),
                                other => format!("{other:?}"),
                            };
                            (Slot::Text(text.clone()), text.into())
                        }
                    };
                    let value = self.value(*val, &At::Key(at, &key), depth + 1)?;
                    match slots.get(&slot) {
                        Some(&index) => out[index].1 = value,
                        None => {
                            self.charge((key.len() + KEY) as u64, at)?;
                            slots.insert(slot, out.len());
                            out.push((key.into_owned(), value));
                        }
                    }
                }
                PyValue::Dict(out)
            }
            ObjKind::Rows { len, .. } => {
                const ENTRY: &str = "a trace entry";
                self.charge(u64::from(*len).saturating_mul(NODE + ENTRY.len() as u64), at)?;
                PyValue::List(vec![PyValue::Str(ENTRY.into()); *len as usize])
            }
            ObjKind::Forward(_) | ObjKind::Free => PyValue::None,
        })
    }
}

/// Bytes charged per converted node, and per dict key beside its text.
const NODE: u64 = std::mem::size_of::<PyValue>() as u64;
const KEY: usize = std::mem::size_of::<String>() * 2;
