//! Trace entries that the fast path (`entry`) left to the machine, converted
//! from their completed dicts into rows, and the `device_traces` and
//! `host_traces` lists read as the rows they hold.

use super::value::{as_i64, as_pair, as_str, as_u64, list_items, str_or_none, wrong};
use super::words::{
    ACTION, ADDR, COMPILE_CONTEXT, DEVICE_FREE, EMPTY, FRAMES, POOL_ID, SIZE, STREAM, TIME_US, USER_METADATA,
};
use super::{ROW_COST, Reader, RowFields};
use crate::error::ReadError;
use crate::pickle::{Heap, ObjId, ObjKind, V, Value};
use crate::snapshot::frames::EMPTY_STACK;

/// The rows of one device's trace list.
pub(super) enum DeviceRows {
    /// Consecutive rows (the list was stored as a range).
    Range(std::ops::Range<u32>),
    /// Any other order.
    Scattered(Vec<u32>),
}

impl DeviceRows {
    /// How many rows.
    pub(super) fn len(&self) -> usize {
        match self {
            DeviceRows::Range(r) => r.len(),
            DeviceRows::Scattered(v) => v.len(),
        }
    }
}

impl Reader {
    /// Convert `id` into a row if it is a trace entry (a dict with an
    /// `action` key): the dict becomes the row in the heap.
    #[inline]
    pub(super) fn convert_if_entry(
        &mut self,
        heap: &mut Heap,
        id: ObjId,
        offset: u64,
    ) -> Result<Option<Value>, ReadError> {
        let obj = heap.obj(id);
        // O(1): a scan of the items here made short SETITEMS batches into
        // one big dict quadratic.
        let ObjKind::Dict(items) = &obj.kind else { return Ok(None) };
        if !obj.has_watched_key() {
            return Ok(None);
        }
        self.entry_items.clear();
        self.entry_items.extend_from_slice(items);
        heap.charge(ROW_COST, || "the trace columns".to_owned(), offset)?;
        let row = self.convert_entry(heap, id)?;
        heap.convert(id, Value::row(row));
        Ok(Some(Value::row(row)))
    }

    /// The row of the trace entry dict `id`, whose items are in `entry_items`.
    fn convert_entry(&mut self, heap: &mut Heap, id: ObjId) -> Result<u32, ReadError> {
        let row = self.trace.action.len() as u32;
        let at = heap.obj(id).offset;
        let mut action = None;
        let (mut addr, mut size, mut stream, mut time_us) = (0u64, 0u64, 0u64, None);
        let (mut stack, mut compile_context, mut user_metadata) = (EMPTY_STACK, EMPTY, EMPTY);
        for i in 0..self.entry_items.len() {
            let (k, v) = self.entry_items[i];
            let V::Str(key) = k.get() else { continue };
            let path = || format!("trace entry (dict at byte {at}).{}", heap.str(key));
            match key {
                ACTION => action = Some(as_str(heap, v, &path)?),
                ADDR => addr = as_u64(heap, v, &path)?,
                SIZE => size = as_u64(heap, v, &path)?,
                STREAM => stream = as_u64(heap, v, &path)?,
                TIME_US => time_us = Some(as_i64(heap, v, &path)?),
                FRAMES => {
                    let path = || format!("trace entry (dict at byte {at}).frames");
                    stack = self.stack_of(heap, v, &path)?;
                }
                COMPILE_CONTEXT => compile_context = str_or_none(heap, v, &path)?,
                USER_METADATA => user_metadata = str_or_none(heap, v, &path)?,
                DEVICE_FREE => {
                    let free = as_u64(heap, v, &path)?;
                    self.trace.device_free.push((row, free));
                }
                POOL_ID => {
                    let pool = as_pair(heap, v, &path)?;
                    self.trace.pool_id.push((row, pool));
                }
                other => {
                    if self.unknown_entry_keys.insert(other) {
                        self.warn(format!(
                            "trace entries carry an unknown key {:?} (kept out of the model)",
                            heap.str(other)
                        ));
                    }
                }
            }
        }
        let Some(action) = action else {
            return Err(ReadError::WrongType {
                path: format!("trace entry (dict at byte {at}).action"),
                expected: "a string",
                found: "nothing".into(),
            });
        };
        let fields = RowFields { action, addr, size, stream, time_us, stack, compile_context, user_metadata };
        Ok(self.push_row(row, fields))
    }

    /// `device_traces`: one list of rows per device index.
    pub(super) fn device_traces(&mut self, heap: &mut Heap, v: Value) -> Result<Vec<DeviceRows>, ReadError> {
        let lists = list_items(heap, v, &|| "device_traces".to_owned())?;
        let mut out = Vec::with_capacity(lists.len());
        for (d, list) in lists.into_iter().enumerate() {
            // The usual case: a range of consecutive rows, nothing to copy.
            if let V::Obj(id) = heap.resolve(list).get()
                && let ObjKind::Rows { start, len } = heap.obj(id).kind
            {
                out.push(DeviceRows::Range(start..start + len));
                continue;
            }
            let items = list_items(heap, list, &|| format!("device_traces[{d}]"))?;
            out.push(DeviceRows::Scattered(rows_of(heap, items, &|k| format!("device_traces[{d}][{k}]"))?));
        }
        Ok(out)
    }

    /// `host_traces` (pinned host memory, PyTorch 2.14): one list of trace
    /// entries; a list holding one such list (shaped like `device_traces`)
    /// is read too, since no real capture has been seen yet.
    pub(super) fn host_traces(&mut self, heap: &mut Heap, v: Value) -> Result<DeviceRows, ReadError> {
        let items = list_items(heap, v, &|| "host_traces".to_owned())?;
        let nested = items.len() == 1
            && matches!(heap.resolve(items[0]).get(), V::Obj(id) if matches!(heap.obj(id).kind, ObjKind::List(_) | ObjKind::Rows { .. }));
        if nested || items.is_empty() {
            let mut lists = self.device_traces(heap, v)?;
            return Ok(lists.pop().unwrap_or(DeviceRows::Scattered(Vec::new())));
        }
        if let V::Obj(id) = heap.resolve(v).get()
            && let ObjKind::Rows { start, len } = heap.obj(id).kind
        {
            return Ok(DeviceRows::Range(start..start + len));
        }
        Ok(DeviceRows::Scattered(rows_of(heap, items, &|k| format!("host_traces[{k}]"))?))
    }
}

/// The trace rows of a list's items; `path(k)` names item `k` in errors.
fn rows_of(heap: &Heap, items: Vec<Value>, path: &dyn Fn(usize) -> String) -> Result<Vec<u32>, ReadError> {
    let mut rows = Vec::with_capacity(items.len());
    for (k, item) in items.into_iter().enumerate() {
        match heap.resolve(item).get() {
            V::Row(r) => rows.push(r),
            _ => return Err(wrong(heap, &|| path(k), "a trace entry dict with an 'action' key", item)),
        }
    }
    Ok(rows)
}
