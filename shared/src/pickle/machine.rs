//! The pickle virtual machine: runs the opcodes of protocols 2 to 5 over a
//! [`Heap`], with a hook that lets the caller convert list items as they are
//! appended (how trace entries become columns without ever existing as a tree).

use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::heap::{EmptyKind, Heap, ObjKind};
use super::opcode::{
    ADDITEMS, APPEND, APPENDS, BINBYTES, BINBYTES8, BINFLOAT, BINGET, BININT, BININT1, BININT2, BINPUT, BINSTRING,
    BINUNICODE, BINUNICODE8, BYTEARRAY8, DICT, DUP, EMPTY_DICT, EMPTY_LIST, EMPTY_SET, EMPTY_TUPLE, FLOAT, FRAME,
    FROZENSET, GET, INT, LIST, LONG, LONG_BINGET, LONG_BINPUT, LONG1, LONG4, MARK, MEMOIZE, NEWFALSE, NEWTRUE,
    NEXT_BUFFER, NONE, POP, POP_MARK, PROTO, PUT, READONLY_BUFFER, SETITEM, SETITEMS, SHORT_BINBYTES, SHORT_BINSTRING,
    SHORT_BINUNICODE, STOP, STRING, TUPLE, TUPLE1, TUPLE3, UNICODE, forbidden,
};
use super::source::{Backing, ChunkFeed, Chunked, Held, Source, Streamed};
use super::value::Value;
use crate::error::ReadError;

/// Called by the machine as it builds the object graph.
pub trait Hooks {
    /// An item is about to be appended to a list. Return the value to store
    /// instead (the item itself, or what it was converted to). Rows (items
    /// a hook already converted) that continue a list of rows are appended
    /// without this call.
    fn on_append(&mut self, heap: &mut Heap, item: Value, offset: u64) -> Result<Value, ReadError>;

    /// A dict just received its items (SETITEMS with fewer than a full batch
    /// of 1000, so the pickler wrote it whole). Return a value to replace the
    /// dict on the stack, or `None` to leave it.
    fn on_dict_complete(&mut self, heap: &mut Heap, dict: Value, offset: u64) -> Result<Option<Value>, ReadError>;

    /// The machine just read an EMPTY_DICT opcode at `offset`; `bytes` are
    /// the buffered bytes after it (at least [`DICT_WINDOW`] unless the
    /// stream ends sooner). A hook may decode the whole dict from them
    /// itself, through the SETITEMS that completes it, doing to `heap` what
    /// the machine and [`Hooks::on_dict_complete`] would have done (memo
    /// slots, strings, budget): it returns how many bytes it consumed and
    /// the value to push. `None` (the default) leaves the dict to the
    /// machine, and then the hook must have changed nothing.
    #[inline]
    fn on_empty_dict(
        &mut self,
        _heap: &mut Heap,
        _bytes: &[u8],
        _offset: u64,
    ) -> Result<Option<(usize, Value)>, ReadError> {
        Ok(None)
    }
}

/// Bytes buffered for [`Hooks::on_empty_dict`]: far more than a trace
/// entry takes (60 to 300 bytes).
pub const DICT_WINDOW: usize = 4096;
// A chunk's headroom holds what a dict's window leaves unread at the
// chunk's end, so entries read across chunk ends are never copied whole.
const _: () = assert!(super::source::CHUNK_HEADROOM >= DICT_WINDOW);

/// Hooks that change nothing.
pub struct NoHooks;

impl Hooks for NoHooks {
    fn on_append(&mut self, _heap: &mut Heap, item: Value, _offset: u64) -> Result<Value, ReadError> {
        Ok(item)
    }

    fn on_dict_complete(&mut self, _heap: &mut Heap, _dict: Value, _offset: u64) -> Result<Option<Value>, ReadError> {
        Ok(None)
    }
}

/// Python's pickler writes SETITEMS/APPENDS in batches of this many items.
const PICKLER_BATCH: usize = 1000;

/// The newest pickle protocol this reader knows.
pub const HIGHEST_PROTOCOL: u8 = 5;

struct Machine<'a, B, H> {
    src: Source<B>,
    heap: &'a mut Heap,
    hooks: &'a mut H,
    stack: Vec<Value>,
    marks: Vec<usize>,
    protocol: Option<u8>,
    /// The last UTF-8 string read and its id. PyTorch writes a fresh
    /// `compile_context` string into every trace entry; this skips hashing it.
    last_string: (Vec<u8>, Option<u32>),
}

/// What running a pickle produced.
pub struct Outcome {
    /// The pickled object.
    pub root: Value,
    /// The protocol from the PROTO opcode (`None` for protocol 0/1 streams).
    pub protocol: Option<u8>,
    /// Bytes of pickle consumed.
    pub bytes: u64,
}

/// Run a pickle stream to its STOP opcode.
pub fn run<R: Read, H: Hooks>(input: R, heap: &mut Heap, hooks: &mut H) -> Result<Outcome, ReadError> {
    run_source(Source::new(Streamed::new(input)), heap, hooks)
}

/// Run a pickle held in memory to its STOP opcode, reading it in place.
/// Every 256 KiB it looks at `cancel` (failing with
/// [`ReadError::Cancelled`] once set) and calls `consumed` with the offset
/// below which it will read no byte again: for progress, or to let go of
/// the bytes already read.
pub fn run_slice<H: Hooks>(
    bytes: &[u8],
    cancel: Option<Arc<AtomicBool>>,
    consumed: impl FnMut(u64),
    heap: &mut Heap,
    hooks: &mut H,
) -> Result<Outcome, ReadError> {
    run_source(Source::new(Held::new(bytes, cancel, consumed)), heap, hooks)
}

/// Run a pickle that arrives in owned chunks to its STOP opcode, reading
/// each chunk in place. It looks at `cancel` before each chunk.
pub fn run_chunks<F: ChunkFeed, H: Hooks>(
    feed: F,
    cancel: Option<Arc<AtomicBool>>,
    heap: &mut Heap,
    hooks: &mut H,
) -> Result<Outcome, ReadError> {
    run_source(Source::new(Chunked::new(feed, cancel)), heap, hooks)
}

fn run_source<B: Backing, H: Hooks>(src: Source<B>, heap: &mut Heap, hooks: &mut H) -> Result<Outcome, ReadError> {
    let mut m = Machine {
        src,
        heap,
        hooks,
        stack: Vec::new(),
        marks: Vec::new(),
        protocol: None,
        last_string: (Vec::new(), None),
    };
    let root = m.run()?;
    Ok(Outcome { root, protocol: m.protocol, bytes: m.src.offset() })
}

/// The error for a byte that names no opcode the machine runs.
fn refused(op: u8, at: u64) -> ReadError {
    match op {
        NEXT_BUFFER | READONLY_BUFFER => ReadError::UnknownOpcode {
            opcode: op,
            offset: at,
            hint: ": out-of-band buffers (protocol 5 NEXT_BUFFER/READONLY_BUFFER) never occur in snapshots",
        },
        STRING | UNICODE => ReadError::UnknownOpcode {
            opcode: op,
            offset: at,
            hint: ": protocol 0 text strings are not supported; snapshots are written with protocol 2 or newer",
        },
        _ => match forbidden(op) {
            Some(name) => ReadError::ForbiddenOpcode { opcode: op, name, offset: at },
            None => ReadError::UnknownOpcode { opcode: op, offset: at, hint: "" },
        },
    }
}

fn negative_length(at: u64, opcode: &str) -> ReadError {
    ReadError::BadPickle { offset: at, message: format!("{opcode} with a negative length") }
}

/// Decode a little-endian two's-complement integer of any width (LONG1/LONG4).
fn decode_long(heap: &mut Heap, bytes: &[u8], at: u64) -> Result<Value, ReadError> {
    if bytes.is_empty() {
        return Ok(Value::small_int(0));
    }
    // Fast path: addresses and times fit in eight bytes.
    if bytes.len() <= 8 {
        let negative = bytes[bytes.len() - 1] & 0x80 != 0;
        let mut buf = if negative { [0xff; 8] } else { [0; 8] };
        buf[..bytes.len()].copy_from_slice(bytes);
        return heap.int(i64::from_le_bytes(buf) as i128, at);
    }
    let negative = bytes[bytes.len() - 1] & 0x80 != 0;
    let fill = if negative { 0xff } else { 0x00 };
    // Drop redundant sign-extension bytes: a value padded to 20 bytes is still
    // a small number.
    let mut len = bytes.len();
    while len > 1 && bytes[len - 1] == fill && (bytes[len - 2] & 0x80 != 0) == negative {
        len -= 1;
    }
    if len > 16 {
        return heap.too_wide_int(bytes.len() as u32, at);
    }
    let mut buf = [fill; 16];
    buf[..len].copy_from_slice(&bytes[..len]);
    heap.int(i128::from_le_bytes(buf), at)
}

impl<B: Backing, H: Hooks> Machine<'_, B, H> {
    #[inline]
    fn push(&mut self, v: Value) -> Result<(), ReadError> {
        if self.stack.len() == self.stack.capacity() {
            let grow = self.stack.capacity().max(64) as u64 * 8;
            let offset = self.src.offset();
            self.heap.charge(grow, || "the pickle stack".to_owned(), offset)?;
            self.stack.reserve(self.stack.capacity().max(64));
        }
        self.stack.push(v);
        Ok(())
    }

    /// MARK: every mark is charged to the budget like a stack slot (a file
    /// of nothing but MARKs once took 7.8 times its size uncounted).
    #[inline]
    fn push_mark(&mut self, at: u64) -> Result<(), ReadError> {
        if self.marks.len() == self.marks.capacity() {
            let grow = self.marks.capacity().max(64) as u64 * std::mem::size_of::<usize>() as u64;
            self.heap.charge(grow, || "the pickle's marks".to_owned(), at)?;
            self.marks.reserve(self.marks.capacity().max(64));
        }
        self.marks.push(self.stack.len());
        Ok(())
    }

    #[inline]
    fn pop(&mut self, at: u64) -> Result<Value, ReadError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(underflow(at));
        }
        self.stack.pop().ok_or_else(|| underflow(at))
    }

    #[inline]
    fn top(&self, at: u64) -> Result<Value, ReadError> {
        self.stack.last().copied().ok_or_else(|| underflow(at))
    }

    fn pop_mark(&mut self, at: u64) -> Result<usize, ReadError> {
        self.marks.pop().ok_or_else(|| ReadError::BadPickle {
            offset: at,
            message: "an opcode that needs a MARK found none".to_owned(),
        })
    }

    /// The container just below a MARK (the target of APPENDS / SETITEMS).
    fn target_below(&self, mark: usize, at: u64) -> Result<Value, ReadError> {
        if mark == 0 {
            return Err(underflow(at));
        }
        Ok(self.stack[mark - 1])
    }

    fn target_obj(&self, v: Value, at: u64, op: &str) -> Result<u32, ReadError> {
        v.as_obj().ok_or_else(|| ReadError::BadPickle {
            offset: at,
            message: format!("{op} on {}, which is not a container", self.heap.describe(v)),
        })
    }

    fn string(&mut self, len: u64, at: u64, latin1: bool) -> Result<Value, ReadError> {
        let len = self.claim(len, at, "a string")?;
        let bytes = self.src.take(len, "reading a string")?;
        if !latin1
            && let (last, Some(id)) = &self.last_string
            && last.as_slice() == bytes
        {
            return Ok(Value::str(*id));
        }
        let id = if latin1 {
            let s: String = bytes.iter().map(|&b| b as char).collect();
            self.heap.intern(&s, at)?
        } else {
            let s = std::str::from_utf8(bytes).map_err(|e| ReadError::BadPickle {
                offset: at,
                message: format!("string is not valid UTF-8 ({e})"),
            })?;
            let id = self.heap.intern(s, at)?;
            if len <= 64 {
                self.last_string.0.clear();
                self.last_string.0.extend_from_slice(bytes);
                self.last_string.1 = Some(id);
            }
            id
        };
        if len > 1 << 20 {
            self.src.shrink();
        }
        Ok(Value::str(id))
    }

    fn byte_string(&mut self, len: u64, at: u64) -> Result<Value, ReadError> {
        let len = self.claim(len, at, "a byte string")?;
        let bytes: Box<[u8]> = self.src.take(len, "reading a byte string")?.into();
        self.src.shrink();
        self.heap.charge(len as u64, || format!("a byte string of {len} bytes"), at)?;
        Ok(self.heap.bytes(bytes))
    }

    /// Check a length read from the stream against the budget before
    /// reading that many bytes. Twice the length must fit: the value passes
    /// through the input buffer (given back after it) before it is kept.
    fn claim(&mut self, len: u64, at: u64, what: &str) -> Result<usize, ReadError> {
        if len.saturating_mul(2) > self.heap.budget_left() {
            return Err(ReadError::MemoryBudget {
                what: format!("{what} claiming {len} bytes"),
                needed: self.heap.charged().saturating_add(len),
                budget: self.heap.budget(),
                offset: at,
            });
        }
        usize::try_from(len)
            .map_err(|_| ReadError::BadPickle { offset: at, message: format!("length {len} too large") })
    }

    fn text_int(&mut self, at: u64, context: &'static str) -> Result<i128, ReadError> {
        let line = self.src.line(context)?;
        let text = String::from_utf8_lossy(&line);
        let t = text.trim().trim_end_matches('L');
        t.parse::<i128>()
            .map_err(|_| ReadError::BadPickle { offset: at, message: format!("bad integer {t:?} in {context}") })
    }

    #[inline]
    fn new_empty(&mut self, kind: EmptyKind, at: u64) -> Result<(), ReadError> {
        let v = self.heap.alloc_empty(kind, at)?;
        self.push(v)
    }

    fn new_container(&mut self, kind: ObjKind, at: u64) -> Result<(), ReadError> {
        let v = self.heap.alloc(kind, at)?;
        self.push(v)
    }

    fn items_from_mark(&mut self, at: u64) -> Result<Vec<Value>, ReadError> {
        let mark = self.pop_mark(at)?;
        Ok(self.stack.split_off(mark))
    }

    fn append(&mut self, list: Value, items: &[Value], at: u64) -> Result<(), ReadError> {
        let id = self.target_obj(list, at, "APPEND")?;
        let mut rest = items;
        loop {
            // Runs of rows (trace entries already converted) go in at once.
            rest = &rest[self.heap.push_rows(id, rest)..];
            let Some((&item, tail)) = rest.split_first() else { return Ok(()) };
            let item = self.hooks.on_append(self.heap, item, at)?;
            self.heap.push_item(id, item, at)?;
            rest = tail;
        }
    }

    fn run(&mut self) -> Result<Value, ReadError> {
        loop {
            let at = self.src.offset();
            let Some(op) = self.src.next_u8()? else {
                return Err(ReadError::Truncated { offset: at, context: "expecting the next opcode (no STOP yet)" });
            };
            if op == STOP {
                return self
                    .pop(at)
                    .map_err(|_| ReadError::BadPickle { offset: at, message: "STOP with an empty stack".to_owned() });
            }
            self.step(op, at)?;
        }
    }

    /// Execute one opcode (any but STOP) read at `at`. One flat match, so
    /// the compiler keeps a single jump table; each arm is a line.
    #[inline(always)]
    fn step(&mut self, op: u8, at: u64) -> Result<(), ReadError> {
        match op {
            PROTO => self.proto(at),
            // A length hint for buffered readers; we buffer anyway.
            FRAME => self.src.le::<8>("reading FRAME").map(drop),
            MARK => self.push_mark(at),
            POP => self.pop_one(at),
            POP_MARK => self.pop_mark(at).map(|mark| self.stack.truncate(mark)),
            DUP => self.dup(at),
            // Integers and other scalars.
            BININT => self.int_le::<4>("reading BININT", |b| i32::from_le_bytes(b) as i64),
            BININT1 => self.int_le::<1>("reading BININT1", |b| b[0] as i64),
            BININT2 => self.int_le::<2>("reading BININT2", |b| u16::from_le_bytes(b) as i64),
            LONG1 => self.long1(at),
            LONG4 => self.long4(at),
            INT => self.text_int_or_bool(at),
            LONG => self.text_long(at),
            NONE => self.push(Value::NONE),
            NEWTRUE => self.push(Value::bool(true)),
            NEWFALSE => self.push(Value::bool(false)),
            BINFLOAT => self.binfloat(at),
            FLOAT => self.text_float(at),
            // Strings and bytes.
            SHORT_BINUNICODE => self.sized_string::<1>(at, "reading SHORT_BINUNICODE", false),
            BINUNICODE => self.sized_string::<4>(at, "reading BINUNICODE", false),
            BINUNICODE8 => self.sized_string::<8>(at, "reading BINUNICODE8", false),
            SHORT_BINSTRING => self.sized_string::<1>(at, "reading SHORT_BINSTRING", true),
            BINSTRING => self.binstring(at),
            SHORT_BINBYTES => self.sized_bytes::<1>(at, "reading SHORT_BINBYTES"),
            BINBYTES => self.sized_bytes::<4>(at, "reading BINBYTES"),
            BINBYTES8 | BYTEARRAY8 => self.sized_bytes::<8>(at, "reading BINBYTES8"),
            // Containers.
            EMPTY_LIST => self.new_empty(EmptyKind::List, at),
            EMPTY_TUPLE => self.new_empty(EmptyKind::Tuple, at),
            EMPTY_DICT => self.empty_dict(at),
            EMPTY_SET => self.new_empty(EmptyKind::Set, at),
            LIST => self.list_from_mark(at),
            TUPLE => self.collection_from_mark(at, "a tuple", ObjKind::Tuple),
            TUPLE1..=TUPLE3 => self.short_tuple((op - TUPLE1 + 1) as usize, at),
            DICT => self.dict_from_mark(at),
            FROZENSET => self.collection_from_mark(at, "a frozenset", ObjKind::Set),
            APPEND => self.append_one(at),
            APPENDS => self.appends(at),
            SETITEM => self.set_item(at),
            SETITEMS => self.set_items_from_mark(at),
            ADDITEMS => self.add_items(at),
            // Memo.
            MEMOIZE => self.memo_put(self.heap.memo_len(), at),
            BINPUT => self.length_le::<1>("reading BINPUT").and_then(|slot| self.memo_put(slot, at)),
            LONG_BINPUT => self.length_le::<4>("reading LONG_BINPUT").and_then(|slot| self.memo_put(slot, at)),
            PUT => self.text_slot(at, "reading PUT").and_then(|slot| self.memo_put(slot, at)),
            BINGET => self.length_le::<1>("reading BINGET").and_then(|slot| self.memo_get(slot, at)),
            LONG_BINGET => self.length_le::<4>("reading LONG_BINGET").and_then(|slot| self.memo_get(slot, at)),
            GET => self.text_slot(at, "reading GET").and_then(|slot| self.memo_get(slot, at)),
            _ => Err(refused(op, at)),
        }
    }

    fn proto(&mut self, at: u64) -> Result<(), ReadError> {
        let p = self.src.u8("reading PROTO")?;
        if p > HIGHEST_PROTOCOL {
            return Err(ReadError::UnknownOpcode { opcode: PROTO, offset: at, hint: ": pickle protocol newer than 5" });
        }
        self.protocol = Some(p);
        Ok(())
    }

    /// POP: the top item, or, with nothing above the last mark, the mark.
    fn pop_one(&mut self, at: u64) -> Result<(), ReadError> {
        if self.stack.len() > self.marks.last().copied().unwrap_or(0) {
            self.stack.pop();
            Ok(())
        } else {
            self.pop_mark(at).map(drop)
        }
    }

    fn dup(&mut self, at: u64) -> Result<(), ReadError> {
        let v = self.top(at)?;
        self.heap.add_ref(v);
        self.push(v)
    }

    /// BININT, BININT1, BININT2: `N` little-endian bytes, decoded by `decode`.
    #[inline]
    fn int_le<const N: usize>(&mut self, context: &'static str, decode: fn([u8; N]) -> i64) -> Result<(), ReadError> {
        let v = decode(self.src.le::<N>(context)?);
        self.push(Value::small_int(v))
    }

    fn long1(&mut self, at: u64) -> Result<(), ReadError> {
        let n = self.src.u8("reading LONG1")? as usize;
        let bytes = self.src.take(n, "reading LONG1")?;
        let v = decode_long(self.heap, bytes, at)?;
        self.push(v)
    }

    fn long4(&mut self, at: u64) -> Result<(), ReadError> {
        let n = i32::from_le_bytes(self.src.le::<4>("reading LONG4")?);
        let n = u64::try_from(n).map_err(|_| negative_length(at, "LONG4"))?;
        let n = self.claim(n, at, "a LONG4 integer")?;
        let bytes = self.src.take(n, "reading LONG4")?;
        let v = decode_long(self.heap, bytes, at)?;
        self.src.shrink();
        self.push(v)
    }

    /// INT (protocol 0), where `01` and `00` are True and False.
    fn text_int_or_bool(&mut self, at: u64) -> Result<(), ReadError> {
        let line = self.src.line("reading INT")?;
        let v = match line.as_slice() {
            b"01" => Value::bool(true),
            b"00" => Value::bool(false),
            _ => {
                let t = String::from_utf8_lossy(&line);
                let i = t
                    .trim()
                    .parse::<i128>()
                    .map_err(|_| ReadError::BadPickle { offset: at, message: format!("bad INT {t:?}") })?;
                self.heap.int(i, at)?
            }
        };
        self.push(v)
    }

    fn text_long(&mut self, at: u64) -> Result<(), ReadError> {
        let i = self.text_int(at, "reading LONG")?;
        let v = self.heap.int(i, at)?;
        self.push(v)
    }

    fn binfloat(&mut self, at: u64) -> Result<(), ReadError> {
        let f = f64::from_be_bytes(self.src.le::<8>("reading BINFLOAT")?);
        let v = self.heap.float(f, at)?;
        self.push(v)
    }

    fn text_float(&mut self, at: u64) -> Result<(), ReadError> {
        let line = self.src.line("reading FLOAT")?;
        let t = String::from_utf8_lossy(&line);
        let f = t
            .trim()
            .parse::<f64>()
            .map_err(|_| ReadError::BadPickle { offset: at, message: format!("bad FLOAT {t:?}") })?;
        let v = self.heap.float(f, at)?;
        self.push(v)
    }

    /// A little-endian unsigned length or memo slot of `N` bytes (1, 4 or 8).
    #[inline]
    fn length_le<const N: usize>(&mut self, context: &'static str) -> Result<u64, ReadError> {
        let bytes = self.src.le::<N>(context)?;
        let mut wide = [0u8; 8];
        wide[..N].copy_from_slice(&bytes);
        Ok(u64::from_le_bytes(wide))
    }

    /// A string with an `N`-byte length; `latin1` for protocol 0/1 byte strings.
    #[inline]
    fn sized_string<const N: usize>(&mut self, at: u64, context: &'static str, latin1: bool) -> Result<(), ReadError> {
        let n = self.length_le::<N>(context)?;
        let v = self.string(n, at, latin1)?;
        self.push(v)
    }

    /// BINSTRING: a Latin-1 string whose four-byte length is signed.
    fn binstring(&mut self, at: u64) -> Result<(), ReadError> {
        let n = i32::from_le_bytes(self.src.le::<4>("reading BINSTRING")?);
        let n = u64::try_from(n).map_err(|_| negative_length(at, "BINSTRING"))?;
        let v = self.string(n, at, true)?;
        self.push(v)
    }

    fn sized_bytes<const N: usize>(&mut self, at: u64, context: &'static str) -> Result<(), ReadError> {
        let n = self.length_le::<N>(context)?;
        let v = self.byte_string(n, at)?;
        self.push(v)
    }

    /// EMPTY_DICT: offered to the hooks first, which may decode the whole
    /// dict from the buffered bytes (a trace entry's fast path).
    #[inline]
    fn empty_dict(&mut self, at: u64) -> Result<(), ReadError> {
        let bytes = self.src.window(DICT_WINDOW)?;
        match self.hooks.on_empty_dict(self.heap, bytes, at)? {
            Some((consumed, v)) => {
                self.src.advance(consumed);
                self.push(v)
            }
            None => self.new_empty(EmptyKind::Dict, at),
        }
    }

    /// Run `fill` on a new container and the items above the last mark, in
    /// place on the stack (no uncounted copy of a long run of items), then
    /// drop those items and the mark, and push the container.
    fn build_from_mark(
        &mut self,
        kind: ObjKind,
        at: u64,
        fill: fn(&mut Self, Value, &[Value], u64) -> Result<(), ReadError>,
    ) -> Result<(), ReadError> {
        let mark = self.pop_mark(at)?;
        let v = self.heap.alloc(kind, at)?;
        self.fill_below(mark, v, at, fill)?;
        self.push(v)
    }

    /// Run `fill` on `target` and the items above `mark`, then drop them.
    #[inline]
    fn fill_below(
        &mut self,
        mark: usize,
        target: Value,
        at: u64,
        fill: fn(&mut Self, Value, &[Value], u64) -> Result<(), ReadError>,
    ) -> Result<(), ReadError> {
        let stack = std::mem::take(&mut self.stack);
        let result = fill(self, target, &stack[mark..], at);
        self.stack = stack;
        self.stack.truncate(mark);
        result
    }

    fn list_from_mark(&mut self, at: u64) -> Result<(), ReadError> {
        self.build_from_mark(ObjKind::List(Vec::new()), at, Self::append)
    }

    fn dict_from_mark(&mut self, at: u64) -> Result<(), ReadError> {
        self.build_from_mark(ObjKind::Dict(Vec::new()), at, Self::set_items)
    }

    /// TUPLE and FROZENSET: the items above the last mark, charged and moved.
    fn collection_from_mark(
        &mut self,
        at: u64,
        what: &'static str,
        kind: fn(Vec<Value>) -> ObjKind,
    ) -> Result<(), ReadError> {
        let items = self.items_from_mark(at)?;
        self.heap.charge(items.len() as u64 * 8, || what.into(), at)?;
        self.new_container(kind(items), at)
    }

    /// TUPLE1, TUPLE3: the top `n` items, none of them below the mark.
    fn short_tuple(&mut self, n: usize, at: u64) -> Result<(), ReadError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() < floor + n {
            return Err(underflow(at));
        }
        let items = self.stack.split_off(self.stack.len() - n);
        self.new_container(ObjKind::Tuple(items), at)
    }

    fn append_one(&mut self, at: u64) -> Result<(), ReadError> {
        let item = self.pop(at)?;
        let list = self.top(at)?;
        self.append(list, &[item], at)
    }

    /// APPENDS comes once per 1000 trace entries: the items are appended
    /// in place, with no Vec per batch.
    fn appends(&mut self, at: u64) -> Result<(), ReadError> {
        let mark = self.pop_mark(at)?;
        let list = self.target_below(mark, at)?;
        self.fill_below(mark, list, at, Self::append)
    }

    fn set_item(&mut self, at: u64) -> Result<(), ReadError> {
        let value = self.pop(at)?;
        let key = self.pop(at)?;
        let dict = self.top(at)?;
        self.set_items(dict, &[key, value], at)
    }

    fn set_items_from_mark(&mut self, at: u64) -> Result<(), ReadError> {
        let mark = self.pop_mark(at)?;
        let dict = self.target_below(mark, at)?;
        let pairs = (self.stack.len() - mark) / 2;
        self.fill_below(mark, dict, at, Self::set_items)?;
        // A dict written in one short batch is complete: let the hooks
        // convert it now, while it has a single holder, rather than when it
        // is appended (after up to 1000 later entries may have fetched its
        // parts from the memo).
        if pairs < PICKLER_BATCH
            && let Some(replacement) = self.hooks.on_dict_complete(self.heap, dict, at)?
        {
            self.stack[mark - 1] = replacement;
        }
        Ok(())
    }

    fn add_items(&mut self, at: u64) -> Result<(), ReadError> {
        let mark = self.pop_mark(at)?;
        let set = self.target_below(mark, at)?;
        let items = self.stack.split_off(mark);
        let id = self.target_obj(set, at, "ADDITEMS")?;
        for item in items {
            self.heap.push_item(id, item, at)?;
        }
        Ok(())
    }

    /// A memo slot number written as a decimal line (PUT, GET).
    fn text_slot(&mut self, at: u64, context: &'static str) -> Result<u64, ReadError> {
        let slot = self.text_int(at, context)?;
        Ok(u64::try_from(slot).unwrap_or(u64::MAX))
    }

    #[inline]
    fn memo_put(&mut self, slot: u64, at: u64) -> Result<(), ReadError> {
        let v = self.top(at)?;
        self.heap.memo_put(slot, v, at)
    }

    #[inline]
    fn memo_get(&mut self, slot: u64, at: u64) -> Result<(), ReadError> {
        let v = self.heap.memo_get(slot, at)?;
        self.push(v)
    }

    fn set_items(&mut self, dict: Value, items: &[Value], at: u64) -> Result<(), ReadError> {
        if !items.len().is_multiple_of(2) {
            return Err(ReadError::BadPickle { offset: at, message: "SETITEMS with an odd number of items".into() });
        }
        let id = self.target_obj(dict, at, "SETITEMS")?;
        self.heap.extend_dict(id, items, at)
    }
}

fn underflow(at: u64) -> ReadError {
    ReadError::BadPickle {
        offset: at,
        message: "stack underflow (an opcode needs more values than the stack holds)".into(),
    }
}
