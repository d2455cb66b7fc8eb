//! Typed accessors of pickle values for the schema's fields (integers,
//! strings, pairs, dicts and lists, each failing with the field's path),
//! and the bounded conversion of a free-form value into a [`PyValue`].

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

/// Convert a free-form value, bounded in depth and in nodes visited (a memo
/// "bomb" of shared lists would otherwise expand exponentially here).
pub(super) fn py_value(heap: &Heap, v: Value, path: &str) -> Result<PyValue, ReadError> {
    let mut visits = 0usize;
    let mut on_path = Vec::new();
    py_value_inner(heap, v, path, 0, &mut visits, &mut on_path)
}

/// [`py_value`] at `depth`, with the visits so far and the containers on
/// the path from the root (a container met again on it is a cycle).
fn py_value_inner(
    heap: &Heap,
    v: Value,
    path: &str,
    depth: usize,
    visits: &mut usize,
    on_path: &mut Vec<ObjId>,
) -> Result<PyValue, ReadError> {
    *visits += 1;
    if *visits > MAX_VISITS {
        return Err(ReadError::MemoryBudget {
            what: format!("{path}: a value with more than {MAX_VISITS} nodes once shared references are expanded"),
            needed: *visits as u64,
            budget: MAX_VISITS as u64,
            offset: 0,
        });
    }
    if depth > MAX_DEPTH {
        return Err(ReadError::TooDeep { path: path.to_owned(), limit: MAX_DEPTH });
    }
    let v = heap.resolve(v);
    Ok(match v.get() {
        V::None => PyValue::None,
        V::Bool(b) => PyValue::Bool(b),
        V::Int(i) => PyValue::Int(i as i128),
        V::Big(_) => match heap.as_int(v) {
            Some(Ok(i)) => PyValue::Int(i),
            _ => return Err(wrong(heap, &|| path.to_owned(), "an integer within 128 bits", v)),
        },
        V::Float(f) => PyValue::Float(heap.float_at(f)),
        V::Str(s) => PyValue::Str(heap.str(s).to_owned()),
        V::Bytes(_) | V::Row(_) | V::Stack(_) | V::Frame(_) => PyValue::Str(heap.describe(v)),
        V::Obj(id) => {
            if on_path.contains(&id) {
                return Err(ReadError::Cycle { path: path.to_owned() });
            }
            on_path.push(id);
            let out = match &heap.obj(id).kind {
                ObjKind::List(items) | ObjKind::Tuple(items) | ObjKind::Set(items) => {
                    let mut out = Vec::with_capacity(items.len());
                    for (i, item) in items.iter().enumerate() {
                        out.push(py_value_inner(heap, *item, &format!("{path}[{i}]"), depth + 1, visits, on_path)?);
                    }
                    PyValue::List(out)
                }
                ObjKind::Dict(items) => {
                    let mut out: Vec<(String, PyValue)> = Vec::with_capacity(items.len());
                    // Where each key went: a later duplicate replaces the
                    // value in O(1), not by a scan of the keys so far (a flat
                    // dict of 200,000 keys took minutes).
                    let mut slots: rustc_hash::FxHashMap<String, usize> = rustc_hash::FxHashMap::default();
                    for (k, val) in items {
                        let key = match k.get() {
                            V::Str(s) => heap.str(s).to_owned(),
                            _ => match py_value_inner(heap, *k, path, depth + 1, visits, on_path)? {
                                PyValue::Int(i) => i.to_string(),
                                other => format!("{other:?}"),
                            },
                        };
                        let value = py_value_inner(heap, *val, &format!("{path}.{key}"), depth + 1, visits, on_path)?;
                        match slots.get(&key) {
                            Some(&slot) => out[slot].1 = value,
                            None => {
                                slots.insert(key.clone(), out.len());
                                out.push((key, value));
                            }
                        }
                    }
                    PyValue::Dict(out)
                }
                ObjKind::Rows { len, .. } => PyValue::List(vec![PyValue::Str("a trace entry".into()); *len as usize]),
                ObjKind::Forward(_) | ObjKind::Free => PyValue::None,
            };
            on_path.pop();
            out
        }
    })
}
