//! From pickle to [`Snapshot`]: the schema of every snapshot generation.
//!
//! Trace entries are converted while the pickle machine runs: decoded
//! straight from the opcodes into the columns when they have the usual shape
//! (see `entry`), else converted from the machine's dict when it completes
//! (see [`Reader::on_dict_complete`] and `traces`); everything else
//! (`segments`, `settings`, `annotations`) is small and converted after the
//! machine stops, when `assemble` reads the top level.
//!
//! This file holds the entry points, their options and the [`Reader`] with
//! its pickle hooks and the row sink both trace paths share. Its modules,
//! bottom up: `words` (the schema's keys, interned first), `value` (typed
//! accessors of pickle values), `stacks` (frames lists to interned stacks),
//! then `entry`, `traces`, `segments`, `settings`, `annotations`, and
//! `assemble` on top.

mod annotations;
mod assemble;
mod entry;
mod segments;
mod settings;
mod stacks;
mod traces;
mod value;
mod words;

use super::sniff;
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use rustc_hash::{FxHashMap, FxHashSet};

use super::frames::{FrameId, FrameTable, StackId, StrId};
use super::model::Snapshot;
use super::trace::{Action, TraceBuilder};
use crate::error::ReadError;
use crate::pickle::decompress::{self, Compression};
use crate::pickle::{self, CHUNK_HEADROOM, ChunkFeed, Heap, Hooks, V, Value};
use words::{A_ALLOC, A_OOM, ACTION, WORDS};

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
    let head = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let tapped = HeadTap { inner: decoded, head: std::rc::Rc::clone(&head) };
    let read = read_pickle(options, generic_only, compression, |heap, reader| pickle::run(tapped, heap, reader));
    let what = match compression {
        Compression::Gzip => "a gzip file whose content is ",
        Compression::Zstd => "a zstd file whose content is ",
        Compression::None => "",
    };
    said_first(read, &head.borrow(), what)
}

/// Most bytes of a stream's start kept to say what a file that is no
/// pickle looks like.
const HEAD_BYTES: usize = 64;

/// A stream whose first [`HEAD_BYTES`] are kept as they pass.
struct HeadTap<R> {
    inner: R,
    head: std::rc::Rc<std::cell::RefCell<Vec<u8>>>,
}

impl<R: Read> Read for HeadTap<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let mut head = self.head.borrow_mut();
        let room = HEAD_BYTES.saturating_sub(head.len()).min(n);
        head.extend_from_slice(&buf[..room]);
        Ok(n)
    }
}

/// A failed read of a stream that does not start like a pickle: says
/// first what it looks like (`prefix` names its compression).
fn said_first(read: Result<Snapshot, ReadError>, head: &[u8], prefix: &str) -> Result<Snapshot, ReadError> {
    match read {
        Err(cause) if !sniff::starts_like_a_pickle(head) && !matches!(cause, ReadError::Cancelled { .. }) => {
            let head = &head[..head.len().min(HEAD_BYTES)];
            Err(ReadError::Unrecognized {
                looks_like: format!("{prefix}{}", sniff::looks_like(head)),
                cause: Box::new(cause),
            })
        }
        other => other,
    }
}

/// Read a snapshot held in memory. A plain pickle is read in place, with no
/// copy; a compressed one streams through its decoder.
pub fn read_snapshot_bytes(bytes: &[u8], options: &ReadOptions) -> Result<Snapshot, ReadError> {
    read_snapshot_bytes_with(bytes, options, |_| {})
}

/// [`read_snapshot_bytes`], calling `consumed(offset)` every 256 KiB or so
/// of `bytes` read, with the offset below which the reader reads nothing
/// again: for a progress bar, or to let go of a mapped file's pages already
/// read.
pub fn read_snapshot_bytes_with(
    bytes: &[u8],
    options: &ReadOptions,
    consumed: impl FnMut(u64),
) -> Result<Snapshot, ReadError> {
    match decompress::detect(bytes) {
        Compression::None => said_first(
            read_pickle(options, false, Compression::None, |heap, reader| {
                pickle::run_slice(bytes, options.cancel.clone(), consumed, heap, reader)
            }),
            bytes,
            "",
        ),
        _ => read_with(Reporting { bytes, pos: 0, consumed }, options, false),
    }
}

/// Read a snapshot that arrives in owned chunks (a reading thread's
/// buffers, see [`ChunkFeed`]). A plain pickle is read in the chunks where
/// they lie, with no copy; a compressed one streams through its decoder.
pub fn read_snapshot_chunks<F: ChunkFeed>(mut feed: F, options: &ReadOptions) -> Result<Snapshot, ReadError> {
    let io = |e| crate::error::map_io_error(e, 0);
    let mut first = feed.next_chunk().map_err(io)?;
    // Enough bytes to tell the compression by: the longest magic is four.
    while let Some(chunk) = first.as_mut().filter(|c| c.len() < CHUNK_HEADROOM + 4) {
        let Some(more) = feed.next_chunk().map_err(io)? else { break };
        chunk.extend_from_slice(more.get(CHUNK_HEADROOM..).unwrap_or_default());
        feed.recycle(more);
    }
    let head = first.as_deref().and_then(|c| c.get(CHUNK_HEADROOM..)).unwrap_or_default();
    let compression = decompress::detect(head);
    let start = head[..head.len().min(HEAD_BYTES)].to_vec();
    // The first answer goes back in front of the others.
    let feed = FirstAgain { first: Some(first), feed };
    match compression {
        Compression::None => said_first(
            read_pickle(options, false, Compression::None, |heap, reader| {
                pickle::run_chunks(feed, options.cancel.clone(), heap, reader)
            }),
            &start,
            "",
        ),
        _ => read_with(FeedReader { feed, chunk: Vec::new(), pos: 0 }, options, false),
    }
}

/// A feed with its first answer, taken to look at, put back in front.
struct FirstAgain<F> {
    first: Option<Option<Vec<u8>>>,
    feed: F,
}

impl<F: ChunkFeed> ChunkFeed for FirstAgain<F> {
    fn next_chunk(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        match self.first.take() {
            Some(first) => Ok(first),
            None => self.feed.next_chunk(),
        }
    }

    fn recycle(&mut self, chunk: Vec<u8>) {
        self.feed.recycle(chunk);
    }
}

/// A feed read as a stream, copying: for a compressed file, whose decoder
/// reads from a [`Read`].
struct FeedReader<F> {
    feed: F,
    chunk: Vec<u8>,
    pos: usize,
}

impl<F: ChunkFeed> Read for FeedReader<F> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.pos >= self.chunk.len() {
            let Some(next) = self.feed.next_chunk()? else { return Ok(0) };
            let spent = std::mem::replace(&mut self.chunk, next);
            if spent.capacity() > 0 {
                self.feed.recycle(spent);
            }
            self.pos = CHUNK_HEADROOM;
        }
        let n = buf.len().min(self.chunk.len() - self.pos);
        buf[..n].copy_from_slice(&self.chunk[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// Run the machine (`run`) with a fresh heap and reader, then build the
/// snapshot from what it produced.
fn read_pickle(
    options: &ReadOptions,
    generic_only: bool,
    compression: Compression,
    run: impl FnOnce(&mut Heap, &mut Reader) -> Result<pickle::Outcome, ReadError>,
) -> Result<Snapshot, ReadError> {
    let mut heap = Heap::new(options.memory_budget);
    for word in WORDS {
        heap.intern(word, 0)?;
    }
    heap.watch_key(Value::str(ACTION));
    let stop = value::Stop { cancel: options.cancel.clone(), offset: 0 };
    let mut reader = Reader { generic_only, stop, ..Reader::default() };
    let outcome = run(&mut heap, &mut reader)?;
    // The conversion after the machine is bounded by the same flag.
    reader.stop.offset = outcome.bytes;
    let mut snapshot = reader.build(&mut heap, outcome.root)?;
    snapshot.protocol = outcome.protocol;
    snapshot.compression = compression;
    Ok(snapshot)
}

/// A compressed file held in memory, read as a stream that reports how far
/// it has been read.
struct Reporting<'a, F> {
    bytes: &'a [u8],
    pos: usize,
    consumed: F,
}

impl<F: FnMut(u64)> Read for Reporting<'_, F> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.bytes.len() - self.pos);
        buf[..n].copy_from_slice(&self.bytes[self.pos..self.pos + n]);
        self.pos += n;
        (self.consumed)(self.pos as u64);
        Ok(n)
    }
}

/// Bytes charged to the budget per trace row (the columns' width).
const ROW_COST: u64 = 41;

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
    /// The caller's cancel flag, for the conversion after the machine.
    stop: value::Stop,
    /// Warnings past [`MAX_WARNINGS`], counted and left out.
    warnings_left_out: usize,
}

/// Most warnings a read keeps: they are stored with the snapshot and served.
const MAX_WARNINGS: usize = 64;
/// Longest warning kept, in characters (a quoted key may be long).
const MAX_WARNING_CHARS: usize = 300;

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

impl Reader {
    /// Keep a warning, cut to [`MAX_WARNING_CHARS`]; past [`MAX_WARNINGS`]
    /// only counted.
    fn warn(&mut self, text: String) {
        if self.warnings.len() >= MAX_WARNINGS {
            self.warnings_left_out += 1;
            return;
        }
        let text = match text.char_indices().nth(MAX_WARNING_CHARS) {
            Some((cut, _)) => format!("{}… ({} bytes)", &text[..cut], text.len()),
            None => text,
        };
        self.warnings.push(text);
    }

    /// The warnings kept, with a last one saying how many were left out.
    fn take_warnings(&mut self) -> Vec<String> {
        let mut warnings = std::mem::take(&mut self.warnings);
        if self.warnings_left_out > 0 {
            warnings.push(format!("{} more warnings left out", self.warnings_left_out));
        }
        warnings
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
}
