//! From pickle to [`Snapshot`]: the schema of every snapshot generation.
//!
//! Trace entries are converted while the pickle machine runs: decoded
//! straight from the opcodes into the columns when they have the usual shape
//! (see `entry`), else converted from the machine's dict when it completes
//! (see [`Reader::on_dict_complete`]); everything else (segments, blocks,
//! settings, annotations) is small and converted after the machine stops.

mod entry;

use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use rustc_hash::{FxHashMap, FxHashSet};

use super::frames::{EMPTY_STACK, Frame, FrameId, FrameTable, StackId, StrId, Strings};
use super::model::{
    AllocatorSettings, Annotation, AnnotationStage, Block, BlockState, CaptureContext, CaptureDevice, DeviceSnapshot,
    FormatVersion, Fraction, HistoryEntry, ProcessMemory, PyValue, Segment, SegmentType, Snapshot,
};
use super::trace::{Action, TraceBuilder, TraceColumns};
use crate::error::ReadError;
use crate::pickle::decompress;
use crate::pickle::{self, Heap, Hooks, ObjId, ObjKind, V, Value};

/// Limits for reading untrusted input.
#[derive(Clone, Debug)]
pub struct ReadOptions {
    /// Upper bound, in bytes, on what the reader holds while parsing
    /// (containers, strings, memo, marks, numbers, trace columns). Reading
    /// fails with [`ReadError::MemoryBudget`] rather than pass it.
    pub memory_budget: u64,
    /// Most bytes of pickle a gzip or zstd stream may give per compressed
    /// byte (past a first 16 MiB); `None` for no limit. Real snapshots
    /// compress 4 to 20 times; a bomb of repeated opcodes, thousands of times.
    /// Fails with [`ReadError::DecompressionLimit`].
    pub max_expansion: Option<u32>,
    /// Set it (from any thread) to stop the reader at its next read of
    /// input, every 256 KiB at most: it fails with [`ReadError::Cancelled`].
    /// Parsing costs time in proportion to the input (every opcode is
    /// amortised O(1)), so this bounds a parse's CPU time too.
    pub cancel: Option<Arc<AtomicBool>>,
}

/// The default most pickle bytes per compressed byte.
pub const DEFAULT_MAX_EXPANSION: u32 = 200;

impl Default for ReadOptions {
    fn default() -> Self {
        // A real snapshot needs about its own size; 8 GiB covers multi-GB
        // files while keeping a hostile one from taking the machine. The
        // server sets its own budget from its upload limit and memory.
        ReadOptions { memory_budget: 8 << 30, max_expansion: Some(DEFAULT_MAX_EXPANSION), cancel: None }
    }
}

impl ReadOptions {
    /// The defaults with another memory budget.
    pub fn with_budget(memory_budget: u64) -> ReadOptions {
        ReadOptions { memory_budget, ..ReadOptions::default() }
    }
}

/// Read a snapshot from a stream (plain, gzip or zstd pickle).
pub fn read_snapshot<R: Read>(input: R, options: &ReadOptions) -> Result<Snapshot, ReadError> {
    read_with(input, options, false)
}

/// [`read_snapshot`] with the trace entry fast path off when `generic_only`:
/// every entry built as a dict by the machine, then converted (the
/// reference the fast path is checked against).
pub(crate) fn read_with<R: Read>(input: R, options: &ReadOptions, generic_only: bool) -> Result<Snapshot, ReadError> {
    let limits = decompress::StreamLimits { max_expansion: options.max_expansion, cancel: options.cancel.clone() };
    let (decoded, compression) = decompress::open(input, limits)?;
    let mut heap = Heap::new(options.memory_budget);
    for word in WORDS {
        heap.intern(word, 0)?;
    }
    heap.watch_key(Value::str(ACTION));
    let mut reader = Reader { generic_only, ..Reader::default() };
    let outcome = pickle::run(decoded, &mut heap, &mut reader)?;
    let mut snapshot = reader.build(&mut heap, outcome.root)?;
    snapshot.protocol = outcome.protocol;
    snapshot.compression = compression;
    Ok(snapshot)
}

/// Read a snapshot held in memory.
pub fn read_snapshot_bytes(bytes: &[u8], options: &ReadOptions) -> Result<Snapshot, ReadError> {
    read_snapshot(bytes, options)
}

// Strings interned before parsing, so that they have fixed ids and the hot
// path compares keys as integers.
macro_rules! words {
    ($($name:ident = $text:literal),* $(,)?) => {
        #[allow(non_camel_case_types, clippy::upper_case_acronyms, dead_code)]
        #[repr(u32)]
        enum Word { $($name),* }
        const WORDS: &[&str] = &[$($text),*];
        $(#[allow(dead_code)] const $name: StrId = Word::$name as StrId;)*
    };
}

words! {
    EMPTY = "",
    ACTION = "action", ADDR = "addr", SIZE = "size", STREAM = "stream", TIME_US = "time_us",
    FRAMES = "frames", COMPILE_CONTEXT = "compile_context", USER_METADATA = "user_metadata",
    POOL_ID = "pool_id", DEVICE_FREE = "device_free",
    DEVICE = "device", ADDRESS = "address", TOTAL_SIZE = "total_size", ALLOCATED_SIZE = "allocated_size",
    ACTIVE_SIZE = "active_size", REQUESTED_SIZE = "requested_size", SEGMENT_TYPE = "segment_type",
    SEGMENT_POOL_ID = "segment_pool_id", IS_EXPANDABLE = "is_expandable", BLOCKS = "blocks",
    STATE = "state", HISTORY = "history", REAL_SIZE = "real_size",
    FILENAME = "filename", LINE = "line", NAME = "name",
    SEGMENTS = "segments", DEVICE_TRACES = "device_traces", ALLOCATOR_SETTINGS = "allocator_settings",
    EXTERNAL_ANNOTATIONS = "external_annotations", STAGE = "stage",
    A_ALLOC = "alloc", A_FREE_REQUESTED = "free_requested", A_FREE_COMPLETED = "free_completed",
    A_SEGMENT_ALLOC = "segment_alloc", A_SEGMENT_FREE = "segment_free", A_SEGMENT_MAP = "segment_map",
    A_SEGMENT_UNMAP = "segment_unmap", A_SNAPSHOT = "snapshot", A_OOM = "oom",
    ACTIVE_ALLOCATED = "active_allocated", ACTIVE_PENDING_FREE = "active_pending_free", INACTIVE = "inactive",
    LARGE = "large", SMALL = "small", START = "START", END = "END",
    VRAMSCOPE_CAPTURE = "vramscope_capture", HOST_SEGMENTS = "host_segments", HOST_TRACES = "host_traces",
}

/// Bytes charged to the budget per trace row (the columns' width).
const ROW_COST: u64 = 41;
/// Deepest nesting accepted in free-form values (allocator settings).
const MAX_DEPTH: usize = 32;
/// Most nodes visited when converting one free-form value.
const MAX_VISITS: usize = 1 << 20;

/// The snapshot reader: pickle hooks plus the schema conversion.
#[derive(Default)]
struct Reader {
    trace: TraceBuilder,
    frames: FrameTable,
    stream_index: FxHashMap<u64, u32>,
    entry_items: Vec<(Value, Value)>,
    stack_frames: Vec<FrameId>,
    unknown_entry_keys: FxHashSet<StrId>,
    warnings: Vec<String>,
    /// The fast path's buffers.
    fast: entry::Scratch,
    /// Leave every entry to the machine (the fast path's reference).
    generic_only: bool,
    /// The last stream seen and its index: entries come in long runs on
    /// one stream.
    last_stream: Option<(u64, u32)>,
}

/// The fields of one trace row, as read.
struct RowFields {
    action: StrId,
    addr: u64,
    size: u64,
    stream: u64,
    time_us: Option<i64>,
    stack: StackId,
    compile_context: StrId,
    user_metadata: StrId,
}

impl Hooks for Reader {
    /// Convert a trace entry (a dict with an `action` key) into a row of the
    /// trace columns as soon as it is complete and held by the stack alone:
    /// its slot is freed and the memo names the row, so the trace never
    /// exists as a tree. Its frames list is converted with it, while the next
    /// entry that shares the list has not fetched it yet.
    fn on_dict_complete(&mut self, heap: &mut Heap, dict: Value, offset: u64) -> Result<Option<Value>, ReadError> {
        let V::Obj(id) = dict.get() else { return Ok(None) };
        if !heap.has_single_holder(id) {
            return Ok(None);
        }
        self.convert_if_entry(heap, id, offset)
    }

    /// A trace entry of the usual shape, decoded from its opcodes into a
    /// row with no dict built (see `entry`).
    #[inline]
    fn on_empty_dict(
        &mut self,
        heap: &mut Heap,
        bytes: &[u8],
        offset: u64,
    ) -> Result<Option<(usize, Value)>, ReadError> {
        if self.generic_only {
            return Ok(None);
        }
        let Some(scanned) = entry::scan(heap, &mut self.fast, bytes) else { return Ok(None) };
        let row = self.commit(heap, &scanned, bytes, offset)?;
        Ok(Some((scanned.len, row)))
    }

    /// Entries not converted when completed (a dict with several holders,
    /// or built some other way) are converted when appended to their list.
    #[inline]
    fn on_append(&mut self, heap: &mut Heap, item: Value, offset: u64) -> Result<Value, ReadError> {
        let item = heap.resolve(item);
        let V::Obj(id) = item.get() else { return Ok(item) };
        Ok(self.convert_if_entry(heap, id, offset)?.unwrap_or(item))
    }
}

/// The rows of one device's trace list.
enum DeviceRows {
    /// Consecutive rows (the list was stored as a range).
    Range(std::ops::Range<u32>),
    /// Any other order.
    Scattered(Vec<u32>),
}

impl DeviceRows {
    fn len(&self) -> usize {
        match self {
            DeviceRows::Range(r) => r.len(),
            DeviceRows::Scattered(v) => v.len(),
        }
    }
}

/// Builds a field path for an error message only when one is needed.
type PathFn<'a> = &'a dyn Fn() -> String;

fn wrong(heap: &Heap, path: PathFn<'_>, expected: &'static str, v: Value) -> ReadError {
    ReadError::WrongType { path: path(), expected, found: heap.describe(v) }
}

fn as_u64(heap: &Heap, v: Value, path: PathFn<'_>) -> Result<u64, ReadError> {
    match heap.as_int(v) {
        Some(Ok(i)) => u64::try_from(i).map_err(|_| wrong(heap, path, "a non-negative integer below 2^64", v)),
        _ => Err(wrong(heap, path, "a non-negative integer", v)),
    }
}

fn as_i64(heap: &Heap, v: Value, path: PathFn<'_>) -> Result<i64, ReadError> {
    match heap.as_int(v) {
        Some(Ok(i)) => i64::try_from(i).map_err(|_| wrong(heap, path, "an integer within 64 bits", v)),
        _ => Err(wrong(heap, path, "an integer", v)),
    }
}

fn as_str(heap: &Heap, v: Value, path: PathFn<'_>) -> Result<StrId, ReadError> {
    match v.get() {
        V::Str(s) => Ok(s),
        _ => Err(wrong(heap, path, "a string", v)),
    }
}

fn as_bool(heap: &Heap, v: Value, path: PathFn<'_>) -> Result<bool, ReadError> {
    match heap.as_int(v) {
        Some(Ok(i)) => Ok(i != 0),
        _ => Err(wrong(heap, path, "a bool", v)),
    }
}

fn as_pair(heap: &Heap, v: Value, path: PathFn<'_>) -> Result<(i64, i64), ReadError> {
    if let V::Obj(id) = v.get()
        && let ObjKind::Tuple(items) | ObjKind::List(items) = &heap.obj(id).kind
        && items.len() == 2
    {
        return Ok((as_i64(heap, items[0], path)?, as_i64(heap, items[1], path)?));
    }
    Err(wrong(heap, path, "a pair of integers", v))
}

/// The items of a dict (after forwarding), or a type error.
fn dict_items(heap: &Heap, v: Value, path: PathFn<'_>) -> Result<Vec<(Value, Value)>, ReadError> {
    let v = heap.resolve(v);
    if let V::Obj(id) = v.get()
        && let ObjKind::Dict(items) = &heap.obj(id).kind
    {
        return Ok(items.clone());
    }
    Err(wrong(heap, path, "a dict", v))
}

/// The items of a list or tuple, or a type error.
fn list_items(heap: &Heap, v: Value, path: PathFn<'_>) -> Result<Vec<Value>, ReadError> {
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
fn get(items: &[(Value, Value)], key: StrId) -> Option<Value> {
    let key = Value::str(key);
    items.iter().rev().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

impl Reader {
    #[inline]
    fn convert_if_entry(&mut self, heap: &mut Heap, id: ObjId, offset: u64) -> Result<Option<Value>, ReadError> {
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
                        self.warnings.push(format!(
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

    /// Append row `row` (the next one) to the columns.
    #[inline]
    fn push_row(&mut self, row: u32, f: RowFields) -> u32 {
        let code = if (A_ALLOC..=A_OOM).contains(&f.action) {
            (f.action - A_ALLOC) as u16
        } else {
            self.trace.other_actions.push((row, f.action));
            Action::KNOWN.len() as u16
        };
        let stream_idx = match self.last_stream {
            Some((stream, idx)) if stream == f.stream => idx,
            _ => {
                let next_stream = self.stream_index.len() as u32;
                let idx = *self.stream_index.entry(f.stream).or_insert(next_stream);
                if idx == next_stream {
                    self.trace.streams.push(f.stream);
                }
                self.last_stream = Some((f.stream, idx));
                idx
            }
        };
        let t = &mut self.trace;
        t.has_time |= f.time_us.is_some();
        t.action.push(code);
        t.addr.push(f.addr);
        t.size.push(f.size);
        t.stream.push(stream_idx);
        t.time_us.push(f.time_us.unwrap_or(0));
        t.stack.push(f.stack);
        t.compile_context.push(f.compile_context);
        t.user_metadata.push(f.user_metadata);
        row
    }

    /// Intern a frames list as a stack. Shared lists are converted once and
    /// then found already converted (a forward), so memo sharing costs nothing.
    fn stack_of(&mut self, heap: &mut Heap, v: Value, path: PathFn<'_>) -> Result<StackId, ReadError> {
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

    /// Convert the parsed root into the model.
    fn build(mut self, heap: &mut Heap, root: Value) -> Result<Snapshot, ReadError> {
        let root = heap.resolve(root);
        let (segments_value, top) = match root.get() {
            V::Obj(id) => match &heap.obj(id).kind {
                ObjKind::List(_) | ObjKind::Rows { .. } => (root, None),
                ObjKind::Dict(items) => {
                    let items = items.clone();
                    let Some(segments) = get(&items, SEGMENTS) else {
                        let keys: Vec<String> = items.iter().take(8).map(|(k, _)| heap.describe(*k)).collect();
                        return Err(ReadError::NotASnapshot(format!(
                            "the top-level dict has no 'segments' key (its keys: {})",
                            keys.join(", ")
                        )));
                    };
                    (segments, Some(items))
                }
                _ => return Err(not_a_snapshot(heap, root)),
            },
            _ => return Err(not_a_snapshot(heap, root)),
        };

        let mut saw_history = false;
        let segment_items = list_items(heap, segments_value, &|| "segments".to_owned())?;
        let mut by_device: Vec<(u32, Segment)> = Vec::with_capacity(segment_items.len());
        for (i, seg) in segment_items.into_iter().enumerate() {
            let (device, segment, history) = self.segment(heap, seg, "segments", i)?;
            saw_history |= history;
            by_device.push((device, segment));
        }

        let mut device_rows: Vec<DeviceRows> = Vec::new();
        let mut settings = None;
        let mut annotations = Vec::new();
        let mut capture = None;
        let mut host_segments: Option<Vec<Segment>> = None;
        let mut host_rows: Option<DeviceRows> = None;
        let mut format = if top.is_none() { FormatVersion::V1_13 } else { FormatVersion::V2_1 };
        if let Some(top) = &top {
            if let Some(traces) = get(top, DEVICE_TRACES) {
                device_rows = self.device_traces(heap, traces)?;
            }
            if let Some(s) = get(top, ALLOCATOR_SETTINGS) {
                settings = Some(allocator_settings(heap, s)?);
                format = FormatVersion::V2_3;
            }
            if let Some(a) = get(top, EXTERNAL_ANNOTATIONS) {
                annotations = external_annotations(heap, a)?;
                format = FormatVersion::V2_5;
            }
            if let Some(c) = get(top, VRAMSCOPE_CAPTURE) {
                capture = capture_context(heap, c, &mut self.warnings);
            }
            if let Some(h) = get(top, HOST_SEGMENTS) {
                let items = list_items(heap, h, &|| "host_segments".to_owned())?;
                let mut segments = Vec::with_capacity(items.len());
                for (i, seg) in items.into_iter().enumerate() {
                    segments.push(self.segment(heap, seg, "host_segments", i)?.1);
                }
                host_segments = Some(segments);
            }
            if let Some(t) = get(top, HOST_TRACES) {
                host_rows = Some(self.host_traces(heap, t)?);
            }
            for (k, _) in top {
                if let V::Str(key) = k.get()
                    && !matches!(
                        key,
                        SEGMENTS
                            | DEVICE_TRACES
                            | ALLOCATOR_SETTINGS
                            | EXTERNAL_ANNOTATIONS
                            | VRAMSCOPE_CAPTURE
                            | HOST_SEGMENTS
                            | HOST_TRACES
                    )
                {
                    self.warnings.push(format!("unknown top-level key {:?} ignored", heap.str(key)));
                }
            }
        }
        if saw_history && format <= FormatVersion::V2_1 && top.is_some() {
            format = FormatVersion::V2_0;
        }

        let has_host_trace = host_rows.is_some();
        let (devices, host_trace) = self.assemble_devices(by_device, device_rows, host_rows);
        let host = (host_segments.is_some() || has_host_trace).then(|| {
            let mut segments = host_segments.unwrap_or_default();
            segments.sort_by_key(|s| s.address);
            DeviceSnapshot { device: 0, segments, trace: host_trace.unwrap_or_default(), has_trace: has_host_trace }
        });
        Ok(Snapshot {
            format,
            protocol: None,
            compression: super::model::Compression::None,
            strings: Strings::new(heap.take_strings()),
            frames: self.frames,
            devices,
            allocator_settings: settings,
            annotations,
            capture,
            host,
            warnings: self.warnings,
        })
    }

    /// One segment dict; returns (device, segment, whether blocks used `history`).
    fn segment(
        &mut self,
        heap: &mut Heap,
        v: Value,
        list: &'static str,
        i: usize,
    ) -> Result<(u32, Segment, bool), ReadError> {
        let base = || format!("{list}[{i}]");
        let items = dict_items(heap, v, &base)?;
        let path_of = |f: &'static str| move || format!("{list}[{i}].{f}");
        let req = |key: StrId, f: &'static str| {
            get(&items, key).ok_or_else(|| ReadError::WrongType {
                path: format!("{list}[{i}].{f}"),
                expected: "a value (required field missing)",
                found: "nothing".into(),
            })
        };
        let opt_u64 = |heap: &Heap, key: StrId, f: &'static str| -> Result<Option<u64>, ReadError> {
            get(&items, key).map(|v| as_u64(heap, v, &path_of(f))).transpose()
        };
        let address = as_u64(heap, req(ADDRESS, "address")?, &path_of("address"))?;
        let total_size = as_u64(heap, req(TOTAL_SIZE, "total_size")?, &path_of("total_size"))?;
        let device = match get(&items, DEVICE) {
            Some(d) => u32::try_from(as_u64(heap, d, &path_of("device"))?)
                .map_err(|_| wrong(heap, &path_of("device"), "a device index", d))?,
            None => 0,
        };
        let stream = opt_u64(heap, STREAM, "stream")?.unwrap_or(0);
        let segment_type = match get(&items, SEGMENT_TYPE).map(|v| v.get()) {
            Some(V::Str(LARGE)) => SegmentType::Large,
            Some(V::Str(SMALL)) => SegmentType::Small,
            _ => SegmentType::Unknown,
        };
        let pool_id = match get(&items, SEGMENT_POOL_ID) {
            Some(p) => as_pair(heap, p, &path_of("segment_pool_id"))?,
            None => (0, 0),
        };
        let is_expandable = match get(&items, IS_EXPANDABLE) {
            Some(b) => as_bool(heap, b, &path_of("is_expandable"))?,
            None => false,
        };
        let stack = match get(&items, FRAMES) {
            Some(f) => self.stack_of(heap, f, &path_of("frames"))?,
            None => EMPTY_STACK,
        };
        let block_values = list_items(heap, req(BLOCKS, "blocks")?, &path_of("blocks"))?;
        let mut blocks = Vec::with_capacity(block_values.len());
        let mut next_address = address;
        let mut saw_history = false;
        for (j, b) in block_values.into_iter().enumerate() {
            let (block, history) = self.block(heap, b, list, i, j, next_address)?;
            saw_history |= history;
            next_address = block.address.saturating_add(block.size);
            blocks.push(block);
        }
        let sum =
            |f: fn(&Block) -> bool, size: fn(&Block) -> u64| blocks.iter().filter(|b| f(b)).map(size).sum::<u64>();
        let allocated_size = match opt_u64(heap, ALLOCATED_SIZE, "allocated_size")? {
            Some(v) => v,
            None => sum(|b| b.state == BlockState::ActiveAllocated, |b| b.size),
        };
        let active_size = match opt_u64(heap, ACTIVE_SIZE, "active_size")? {
            Some(v) => v,
            None => sum(|b| b.state.is_active(), |b| b.size),
        };
        let requested_size = match opt_u64(heap, REQUESTED_SIZE, "requested_size")? {
            Some(v) => v,
            None => sum(|b| b.state.is_active(), |b| b.requested_size),
        };
        let segment = Segment {
            address,
            total_size,
            allocated_size,
            active_size,
            requested_size,
            stream,
            segment_type,
            pool_id,
            is_expandable,
            stack,
            blocks,
        };
        Ok((device, segment, saw_history))
    }

    fn block(
        &mut self,
        heap: &mut Heap,
        v: Value,
        list: &'static str,
        i: usize,
        j: usize,
        implied_address: u64,
    ) -> Result<(Block, bool), ReadError> {
        let base = || format!("{list}[{i}].blocks[{j}]");
        let items = dict_items(heap, v, &base)?;
        let path_of = |f: &'static str| move || format!("{list}[{i}].blocks[{j}].{f}");
        let size_v = get(&items, SIZE).ok_or_else(|| ReadError::WrongType {
            path: format!("{list}[{i}].blocks[{j}].size"),
            expected: "a value (required field missing)",
            found: "nothing".into(),
        })?;
        let size = as_u64(heap, size_v, &path_of("size"))?;
        let address = match get(&items, ADDRESS) {
            Some(a) => as_u64(heap, a, &path_of("address"))?,
            None => implied_address,
        };
        let requested_size = match get(&items, REQUESTED_SIZE) {
            Some(r) => as_u64(heap, r, &path_of("requested_size"))?,
            None => size,
        };
        let state = match get(&items, STATE) {
            Some(s) => match as_str(heap, s, &path_of("state"))? {
                ACTIVE_ALLOCATED => BlockState::ActiveAllocated,
                ACTIVE_PENDING_FREE => BlockState::ActivePendingFree,
                INACTIVE => BlockState::Inactive,
                _ => BlockState::Unknown,
            },
            None => BlockState::Unknown,
        };
        let mut stack = match get(&items, FRAMES) {
            Some(f) => self.stack_of(heap, f, &path_of("frames"))?,
            None => EMPTY_STACK,
        };
        let mut history = Vec::new();
        let saw_history = get(&items, HISTORY).is_some() && get(&items, ADDRESS).is_none();
        if let Some(h) = get(&items, HISTORY) {
            let entries = list_items(heap, h, &path_of("history"))?;
            for (k, e) in entries.into_iter().enumerate() {
                let hpath = move |f: &'static str| move || format!("{list}[{i}].blocks[{j}].history[{k}].{f}");
                let fields = dict_items(heap, e, &|| format!("{list}[{i}].blocks[{j}].history[{k}]"))?;
                let addr = match get(&fields, ADDR) {
                    Some(a) => as_u64(heap, a, &hpath("addr"))?,
                    None => address,
                };
                let real_size = match get(&fields, REAL_SIZE) {
                    Some(r) => as_u64(heap, r, &hpath("real_size"))?,
                    None => size,
                };
                let hstack = match get(&fields, FRAMES) {
                    Some(f) => self.stack_of(heap, f, &hpath("frames"))?,
                    None => EMPTY_STACK,
                };
                history.push(HistoryEntry { addr, real_size, stack: hstack });
            }
            // 1.13/2.0 blocks keep their allocation's stack in the history,
            // newest entry first.
            if stack == EMPTY_STACK
                && let Some(newest) = history.first()
            {
                stack = newest.stack;
            }
        }
        Ok((Block { address, size, requested_size, state, stack, history }, saw_history))
    }

    /// `device_traces`: one list of rows per device index.
    fn device_traces(&mut self, heap: &mut Heap, v: Value) -> Result<Vec<DeviceRows>, ReadError> {
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
    fn host_traces(&mut self, heap: &mut Heap, v: Value) -> Result<DeviceRows, ReadError> {
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

    /// The devices, and the host's trace when `host_rows` is given.
    fn assemble_devices(
        &mut self,
        segments: Vec<(u32, Segment)>,
        mut rows: Vec<DeviceRows>,
        host_rows: Option<DeviceRows>,
    ) -> (Vec<DeviceSnapshot>, Option<TraceColumns>) {
        let mut ids: Vec<u32> = segments.iter().map(|(d, _)| *d).collect();
        ids.extend(rows.iter().enumerate().filter(|(_, r)| r.len() > 0).map(|(d, _)| d as u32));
        ids.sort_unstable();
        ids.dedup();
        // The host's rows follow the devices' in the column store (its keys
        // come last in PyTorch's dict): split off like one more device.
        let has_host = host_rows.is_some();
        rows.extend(host_rows);

        // Fast path: device lists hold consecutive, ascending rows covering
        // the whole column store (always so for real files): split, no copy.
        let mut expected = 0u32;
        let contiguous = rows.iter().all(|r| match r {
            DeviceRows::Range(range) => {
                let ok = range.start == expected || range.is_empty();
                expected += range.len() as u32;
                ok
            }
            DeviceRows::Scattered(list) => list.is_empty(),
        }) && expected as usize == self.trace.len();
        let mut traces: Vec<TraceBuilder> = if contiguous {
            let mut parts = Vec::with_capacity(rows.len());
            for r in rows.iter().rev() {
                let at = self.trace.len() - r.len();
                parts.push(if at == 0 { std::mem::take(&mut self.trace) } else { self.trace.split_off(at) });
            }
            parts.reverse();
            parts
        } else {
            rows.iter()
                .map(|r| match r {
                    DeviceRows::Range(range) => self.trace.gather(&range.clone().collect::<Vec<_>>()),
                    DeviceRows::Scattered(list) => self.trace.gather(list),
                })
                .collect()
        };
        self.trace = TraceBuilder::default();
        let mut traces: Vec<TraceColumns> = traces.drain(..).map(TraceColumns::from).collect();
        let host_trace = if has_host { traces.pop() } else { None };

        let mut by_device: FxHashMap<u32, Vec<Segment>> = FxHashMap::default();
        for (d, s) in segments {
            by_device.entry(d).or_default().push(s);
        }
        let devices = ids
            .into_iter()
            .map(|device| {
                let mut segments = by_device.remove(&device).unwrap_or_default();
                segments.sort_by_key(|s| s.address);
                let has_trace = (device as usize) < traces.len();
                let trace = traces.get_mut(device as usize).map(std::mem::take).unwrap_or_default();
                DeviceSnapshot { device, segments, trace, has_trace }
            })
            .collect();
        (devices, host_trace)
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

fn str_or_none(heap: &Heap, v: Value, path: PathFn<'_>) -> Result<StrId, ReadError> {
    match v.get() {
        V::None => Ok(EMPTY),
        _ => as_str(heap, v, path),
    }
}

fn not_a_snapshot(heap: &Heap, root: Value) -> ReadError {
    ReadError::NotASnapshot(format!(
        "the pickle holds {}, not a dict with 'segments' or a list of segments",
        heap.describe(root)
    ))
}

fn allocator_settings(heap: &Heap, v: Value) -> Result<AllocatorSettings, ReadError> {
    let PyValue::Dict(raw) = py_value(heap, v, "allocator_settings")? else {
        return Err(wrong(heap, &|| "allocator_settings".to_owned(), "a dict", v));
    };
    let mut s = AllocatorSettings::default();
    for (key, value) in &raw {
        match (key.as_str(), value) {
            ("PYTORCH_CUDA_ALLOC_CONF", PyValue::Str(c)) => s.alloc_conf = Some(c.clone()),
            ("max_split_size", PyValue::Int(i)) => s.max_split_size = u64::try_from(*i).ok(),
            ("expandable_segments", PyValue::Bool(b)) => s.expandable_segments = *b,
            ("garbage_collection_threshold", PyValue::Float(f)) => s.garbage_collection_threshold = *f,
            ("garbage_collection_threshold", PyValue::Int(i)) => s.garbage_collection_threshold = *i as f64,
            ("roundup_power2_divisions", PyValue::Dict(d)) => {
                s.roundup_power2_divisions = d
                    .iter()
                    .filter_map(|(k, v)| match (k.parse::<u64>(), v) {
                        (Ok(mib), PyValue::Int(n)) => Some((mib, u64::try_from(*n).unwrap_or(0))),
                        _ => None,
                    })
                    .collect();
                s.roundup_power2_divisions.sort_unstable();
            }
            _ => {}
        }
    }
    s.raw = raw;
    Ok(s)
}

/// Most devices and processes per device kept from `vramscope_capture`:
/// far above any real host, and what bounds the statistics a file makes
/// the server store and serve.
const MAX_CAPTURE_DEVICES: usize = 64;
const MAX_CAPTURE_PROCESSES: usize = 256;
/// Longest text kept from it (versions, backend, settings).
const MAX_CAPTURE_TEXT: usize = 4096;

/// `vramscope_capture`, written by our capture module. Read leniently: a
/// value of another shape is a warning, never a failed read (the snapshot
/// itself is PyTorch's and stands without it). Lists past their limits are
/// cut, with a warning; a text past its limit is left out.
fn capture_context(heap: &Heap, v: Value, warnings: &mut Vec<String>) -> Option<CaptureContext> {
    let value = match py_value(heap, v, "vramscope_capture") {
        Ok(value) => value,
        Err(e) => {
            warnings.push(format!("vramscope_capture ignored: {e}"));
            return None;
        }
    };
    let PyValue::Dict(fields) = value else {
        warnings.push("vramscope_capture ignored: not a dict".to_owned());
        return None;
    };
    let mut cut = false;
    let text = |v: &PyValue| match v {
        PyValue::Str(s) if s.len() <= MAX_CAPTURE_TEXT => Some(s.clone()),
        _ => None,
    };
    let bytes = |v: &PyValue| match v {
        PyValue::Int(i) => u64::try_from(*i).ok(),
        _ => None,
    };
    // A memory fraction: a finite number in (0, 1]; anything else is left out.
    let fraction = |v: &PyValue| match v {
        PyValue::Float(f) if f.is_finite() && *f > 0.0 && *f <= 1.0 => Some(*f),
        PyValue::Int(1) => Some(1.0),
        _ => None,
    };
    let field = |d: &[(String, PyValue)], name: &str| d.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let mut capture = CaptureContext {
        torch_version: field(&fields, "torch_version").as_ref().and_then(text),
        backend: field(&fields, "backend").as_ref().and_then(text),
        alloc_conf: field(&fields, "alloc_conf").as_ref().and_then(text),
        alloc_conf_var: field(&fields, "alloc_conf_var").as_ref().and_then(text),
        pid: field(&fields, "pid").as_ref().and_then(bytes).and_then(|p| u32::try_from(p).ok()),
        devices: Vec::new(),
    };
    if let Some(PyValue::List(devices)) = field(&fields, "devices") {
        cut |= devices.len() > MAX_CAPTURE_DEVICES;
        for d in devices.into_iter().take(MAX_CAPTURE_DEVICES) {
            let PyValue::Dict(d) = d else { continue };
            let Some(device) = field(&d, "device").as_ref().and_then(bytes).and_then(|i| u32::try_from(i).ok()) else {
                continue;
            };
            let other_processes = match field(&d, "other_processes") {
                Some(PyValue::List(list)) => {
                    cut |= list.len() > MAX_CAPTURE_PROCESSES;
                    list.iter()
                        .take(MAX_CAPTURE_PROCESSES)
                        .filter_map(|p| match p {
                            PyValue::Dict(p) => Some(ProcessMemory {
                                pid: field(p, "pid").as_ref().and_then(bytes).and_then(|i| u32::try_from(i).ok())?,
                                used_bytes: field(p, "used_bytes").as_ref().and_then(bytes),
                            }),
                            _ => None,
                        })
                        .collect()
                }
                _ => Vec::new(),
            };
            capture.devices.push(CaptureDevice {
                device,
                process_used_bytes: field(&d, "process_used_bytes").as_ref().and_then(bytes),
                device_used_bytes: field(&d, "device_used_bytes").as_ref().and_then(bytes),
                device_total_bytes: field(&d, "device_total_bytes").as_ref().and_then(bytes),
                cuda_total_bytes: field(&d, "cuda_total_bytes").as_ref().and_then(bytes),
                memory_fraction: field(&d, "memory_fraction").as_ref().and_then(fraction).map(Fraction),
                capacity_bytes: field(&d, "capacity_bytes").as_ref().and_then(bytes).filter(|&c| c > 0),
                other_processes,
            });
        }
    }
    if cut {
        warnings.push(format!(
            "vramscope_capture: kept the first {MAX_CAPTURE_DEVICES} devices and {MAX_CAPTURE_PROCESSES} processes \
             per device"
        ));
    }
    Some(capture)
}

fn external_annotations(heap: &Heap, v: Value) -> Result<Vec<Annotation>, ReadError> {
    let items = list_items(heap, v, &|| "external_annotations".to_owned())?;
    let mut out = Vec::with_capacity(items.len());
    for (i, a) in items.into_iter().enumerate() {
        let base = || format!("external_annotations[{i}]");
        let fields = dict_items(heap, a, &base)?;
        let path_of = |f: &'static str| move || format!("external_annotations[{i}].{f}");
        let stage = match get(&fields, STAGE).map(|v| v.get()) {
            Some(V::Str(START)) => AnnotationStage::Start,
            Some(V::Str(END)) => AnnotationStage::End,
            _ => {
                let found = get(&fields, STAGE).map_or("nothing".to_owned(), |v| heap.describe(v));
                return Err(ReadError::WrongType { path: path_of("stage")(), expected: "\"START\" or \"END\"", found });
            }
        };
        let name = match get(&fields, NAME) {
            Some(n) => heap.str(as_str(heap, n, &path_of("name"))?).to_owned(),
            None => String::new(),
        };
        let device = match get(&fields, DEVICE) {
            Some(d) => as_u64(heap, d, &path_of("device"))? as u32,
            None => 0,
        };
        let time_us = match get(&fields, TIME_US) {
            Some(t) => as_i64(heap, t, &path_of("time_us"))?,
            None => 0,
        };
        out.push(Annotation { device, stage, name, time_us });
    }
    Ok(out)
}

/// Convert a free-form value, bounded in depth and in nodes visited (a memo
/// "bomb" of shared lists would otherwise expand exponentially here).
fn py_value(heap: &Heap, v: Value, path: &str) -> Result<PyValue, ReadError> {
    let mut visits = 0usize;
    let mut on_path = Vec::new();
    py_value_inner(heap, v, path, 0, &mut visits, &mut on_path)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_words_get_fixed_ids() {
        let mut heap = Heap::new(1 << 20);
        for w in WORDS {
            heap.intern(w, 0).expect("budget");
        }
        assert_eq!(heap.lookup_str("action"), Some(ACTION));
        assert_eq!(heap.lookup_str("oom"), Some(A_OOM));
        assert_eq!(heap.lookup_str("END"), Some(END));
        // Action codes are word offsets from "alloc": keep the two lists in step.
        for (i, (name, _)) in Action::KNOWN.iter().enumerate() {
            assert_eq!(heap.lookup_str(name), Some(A_ALLOC + i as u32));
        }
    }
}
