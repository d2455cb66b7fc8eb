//! The trace entry fast path: one trace entry decoded straight from the
//! opcode stream into a row of the columns, with no container, no stack slot
//! and no generic value per field.
//!
//! After the first few, a trace entry is always the same opcodes:
//! `EMPTY_DICT MEMOIZE MARK`, then pairs of a memoized key (`BINGET`) and a
//! value (an integer, a memoized or fresh string, a memoized frames list or
//! a new one whose items are memoized frames), then `SETITEMS`. [`scan`]
//! reads that shape and nothing else, changing nothing; [`Reader::commit`]
//! then does to the heap what the machine and the generic conversion would
//! have done: the same strings interned in the same order, the same memo
//! slots holding the same converted values, the same row. Anything else (a
//! fresh key, a new frame dict, a wide integer, a repeated or unknown key, a
//! value of the wrong type, the end of the buffered bytes) makes [`scan`]
//! give up, and the machine reads the entry the generic way, with its checks
//! and its error messages.

use super::words::{ACTION, ADDR, COMPILE_CONTEXT, EMPTY, FRAMES, SIZE, STREAM, TIME_US, USER_METADATA};
use super::{ROW_COST, Reader};
use crate::error::ReadError;
use crate::pickle::opcode::{
    APPEND, APPENDS, BINGET, BININT, BININT1, BININT2, BINUNICODE, EMPTY_LIST, FRAME, LONG_BINGET, LONG1, MARK,
    MEMOIZE, NONE, SETITEMS, SHORT_BINUNICODE,
};
use crate::pickle::{Heap, ObjId, Value};
use crate::snapshot::frames::{EMPTY_STACK, FrameId, StackId, StrId};

/// The longest fresh string taken on the fast path.
const MAX_FRESH_STR: usize = 4096;
/// Most fresh strings in one entry (action, compile_context, user_metadata).
const MAX_FRESH: usize = 3;

/// The machine's inline integer range: wider integers take the generic
/// path, which keeps them in its side table.
const INLINE_MAX: i64 = (1 << 59) - 1;
const INLINE_MIN: i64 = -(1 << 59);

/// A string field's value.
#[derive(Clone, Copy)]
enum StrRef {
    /// Already interned.
    Id(StrId),
    /// The `i`-th fresh string of the entry.
    Fresh(u8),
}

/// What a memo slot written by the entry will hold, in slot order.
#[derive(Clone, Copy)]
enum Put {
    /// The entry itself: its row.
    Entry,
    /// A fresh string.
    Str(u8),
    /// The new frames list: its stack.
    Frames,
}

/// The frames field.
#[derive(Clone, Copy)]
enum Stack {
    /// A stack already interned (a memoized list, converted).
    Known(StackId),
    /// A new list: the frames gathered in [`Scratch::frames`].
    New,
}

/// The scan's reusable buffers and its one cache.
#[derive(Default)]
pub(super) struct Scratch {
    frames: Vec<FrameId>,
    /// Containers fetched from the memo (forwards): one more holder each
    /// at commit, as the machine's memo GET counts them.
    fetched: Vec<ObjId>,
    puts: Vec<Put>,
    /// Byte ranges of the fresh strings in the scanned bytes, in stream
    /// order, with their id when already known.
    fresh: Vec<(usize, usize, Option<StrId>)>,
    /// The last fresh string interned and its id: PyTorch writes a new
    /// `'N/A'` object into every entry's `compile_context`, so this spares
    /// validating and hashing it each time.
    last_fresh: Vec<u8>,
    last_fresh_id: Option<StrId>,
    /// The keys of the last entry read, to match the next ones against.
    template: Template,
    /// The keys of this entry read the long way (after the template's).
    learned: Vec<TemplateKey>,
}

/// One key of a [`Template`]: the bytes of its memo reference (`BINGET n`
/// or `LONG_BINGET n`) as a little-endian word under `mask`, and the key.
#[derive(Clone, Copy)]
struct TemplateKey {
    bytes: u64,
    mask: u64,
    len: u8,
    key: StrId,
}

/// PyTorch writes every trace entry's keys in the same order, each a
/// memo reference to the same slot: the same bytes, entry after entry.
/// Matching those bytes spares decoding the reference, fetching the slot
/// and checking what it holds, about a tenth of the fast path. Trusted only
/// while no memo slot has been overwritten since it was learned
/// ([`Heap::memo_epoch`]); anything else takes the long way.
#[derive(Default)]
struct Template {
    keys: Vec<TemplateKey>,
    epoch: u64,
}

/// An entry read by [`scan`], not yet applied.
pub(super) struct Scanned {
    /// Bytes consumed after the EMPTY_DICT opcode, SETITEMS included.
    pub(super) len: usize,
    action: StrRef,
    addr: u64,
    size: u64,
    stream: u64,
    time_us: Option<i64>,
    stack: Stack,
    compile_context: StrRef,
    user_metadata: StrRef,
}

/// A cursor over the buffered bytes: every read is `None` past their end,
/// which gives the entry back to the machine.
struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    #[inline(always)]
    fn u8(&mut self) -> Option<u8> {
        let v = *self.b.get(self.pos)?;
        self.pos += 1;
        Some(v)
    }

    #[inline(always)]
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.b.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }

    #[inline(always)]
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    /// The next eight bytes as a little-endian word, if there are eight.
    #[inline(always)]
    fn word(&self) -> Option<u64> {
        let eight = self.b.get(self.pos..self.pos.checked_add(8)?)?;
        Some(u64::from_le_bytes(eight.try_into().ok()?))
    }

    /// The next opcode, past any FRAME (a length hint, ignored by the
    /// machine too).
    #[inline(always)]
    fn op(&mut self) -> Option<u8> {
        loop {
            let op = self.u8()?;
            if op != FRAME {
                return Some(op);
            }
            self.take(8)?;
        }
    }

    /// The next opcode, left in place (FRAMEs before it are passed).
    #[inline(always)]
    fn peek_op(&mut self) -> Option<u8> {
        loop {
            let op = *self.b.get(self.pos)?;
            if op != FRAME {
                return Some(op);
            }
            self.pos += 1;
            self.take(8)?;
        }
    }

    /// The slot of a BINGET or LONG_BINGET.
    #[inline(always)]
    fn memo_ref(&mut self, op: u8) -> Option<u64> {
        match op {
            BINGET => self.u8().map(u64::from),
            LONG_BINGET => self.array::<4>().map(|b| u32::from_le_bytes(b) as u64),
            _ => None,
        }
    }

    /// An integer opcode's value, within the machine's inline range.
    #[inline(always)]
    fn int(&mut self, op: u8) -> Option<i64> {
        match op {
            BININT1 => self.u8().map(i64::from),
            BININT2 => self.array::<2>().map(|b| u16::from_le_bytes(b) as i64),
            BININT => self.array::<4>().map(|b| i32::from_le_bytes(b) as i64),
            LONG1 => {
                let n = self.u8()? as usize;
                if n > 8 {
                    return None;
                }
                if n == 0 {
                    return Some(0);
                }
                // Load eight bytes at once where the window has them (a
                // copy of `n` bytes was a call to memcpy and a stalled load)
                // and keep the low `n`, sign-extended.
                let raw = match self.b.get(self.pos..self.pos + 8) {
                    Some(eight) => u64::from_le_bytes(eight.try_into().ok()?),
                    None => {
                        let mut buf = [0u8; 8];
                        buf[..n].copy_from_slice(self.b.get(self.pos..self.pos + n)?);
                        u64::from_le_bytes(buf)
                    }
                };
                self.take(n)?;
                let shift = 64 - 8 * n as u32;
                let v = ((raw << shift) as i64) >> shift;
                (INLINE_MIN..=INLINE_MAX).contains(&v).then_some(v)
            }
            _ => None,
        }
    }

    /// A non-negative integer (a negative one is the generic path's error).
    #[inline(always)]
    fn unsigned(&mut self, op: u8) -> Option<u64> {
        u64::try_from(self.int(op)?).ok()
    }
}

/// A memo slot written before this entry began, through forwards.
#[inline(always)]
fn fetch(heap: &Heap, scratch: &mut Scratch, slot: u64, first_new: u64) -> Option<Value> {
    if slot >= first_new {
        // Written by this entry itself: the generic path takes it.
        return None;
    }
    let v = heap.memo_peek(slot)?;
    if let Some(id) = v.as_obj() {
        scratch.fetched.push(id);
        return Some(heap.resolve(v));
    }
    Some(v)
}

/// A string field: memoized, fresh, or (where `none_ok`) None.
#[inline(always)]
fn string(
    heap: &Heap,
    scratch: &mut Scratch,
    c: &mut Cursor<'_>,
    op: u8,
    first_new: u64,
    none_ok: bool,
) -> Option<StrRef> {
    match op {
        BINGET | LONG_BINGET => {
            let v = fetch(heap, scratch, c.memo_ref(op)?, first_new)?;
            match v.as_str() {
                Some(s) => Some(StrRef::Id(s)),
                None if none_ok && v.is_none() => Some(StrRef::Id(EMPTY)),
                None => None,
            }
        }
        NONE if none_ok => Some(StrRef::Id(EMPTY)),
        SHORT_BINUNICODE | BINUNICODE => {
            let n = match op {
                SHORT_BINUNICODE => c.u8()? as usize,
                _ => u32::from_le_bytes(c.array::<4>()?) as usize,
            };
            // The machine's claim: twice the length must fit in the budget.
            if n > MAX_FRESH_STR || (2 * n) as u64 > heap.budget_left() || scratch.fresh.len() == MAX_FRESH {
                return None;
            }
            let start = c.pos;
            let bytes = c.take(n)?;
            let known = if same_bytes(bytes, &scratch.last_fresh) { scratch.last_fresh_id } else { None };
            if known.is_none() && std::str::from_utf8(bytes).is_err() {
                return None;
            }
            let i = scratch.fresh.len() as u8;
            scratch.fresh.push((start, start + n, known));
            if c.peek_op()? == MEMOIZE {
                c.pos += 1;
                scratch.puts.push(Put::Str(i));
            }
            Some(StrRef::Fresh(i))
        }
        _ => None,
    }
}

/// Whether two byte strings are equal. The fresh strings compared here are
/// mostly three bytes (`'N/A'`): a call to `memcmp` for each was 2.5% of
/// `vramscope stats`, so short ones are compared inline, without an early
/// exit that the compiler would turn back into that call.
#[inline(always)]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    if a.len() > 16 {
        return a == b;
    }
    a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// One item of a new frames list: a memoized frame, already interned.
#[inline(always)]
fn frame(heap: &Heap, scratch: &mut Scratch, slot: u64, first_new: u64) -> Option<()> {
    if slot >= first_new {
        return None;
    }
    let v = heap.memo_peek(slot)?;
    // Interned frames are the usual case: no container, no holder to count.
    let f = match v.as_frame() {
        Some(f) => f,
        None => fetch(heap, scratch, slot, first_new)?.as_frame()?,
    };
    scratch.frames.push(f);
    Some(())
}

/// The frames field: a memoized list already converted, None, or a new
/// list of memoized frames.
#[inline(always)]
fn frames(heap: &Heap, scratch: &mut Scratch, c: &mut Cursor<'_>, op: u8, first_new: u64) -> Option<Stack> {
    match op {
        BINGET | LONG_BINGET => {
            let v = fetch(heap, scratch, c.memo_ref(op)?, first_new)?;
            match v.as_stack() {
                Some(s) => Some(Stack::Known(s)),
                None if v.is_none() => Some(Stack::Known(EMPTY_STACK)),
                None => None,
            }
        }
        NONE => Some(Stack::Known(EMPTY_STACK)),
        EMPTY_LIST => {
            if c.peek_op()? == MEMOIZE {
                c.pos += 1;
                scratch.puts.push(Put::Frames);
            }
            // Items come as `MARK item... APPENDS` batches of up to 1000,
            // a last single one as `item APPEND`.
            loop {
                match c.peek_op()? {
                    MARK => {
                        c.pos += 1;
                        loop {
                            let op = c.op()?;
                            if op == APPENDS {
                                break;
                            }
                            let slot = c.memo_ref(op)?;
                            frame(heap, scratch, slot, first_new)?;
                        }
                    }
                    op @ (BINGET | LONG_BINGET) => {
                        let at = c.pos;
                        c.pos += 1;
                        let slot = c.memo_ref(op)?;
                        if c.peek_op()? != APPEND {
                            // The next key: the list ended.
                            c.pos = at;
                            break;
                        }
                        c.pos += 1;
                        frame(heap, scratch, slot, first_new)?;
                    }
                    _ => break,
                }
            }
            Some(Stack::New)
        }
        _ => None,
    }
}

/// Read one trace entry from `b`, the bytes after its EMPTY_DICT opcode.
/// `None`: not the usual shape; nothing was changed.
#[inline]
pub(super) fn scan(heap: &Heap, scratch: &mut Scratch, b: &[u8]) -> Option<Scanned> {
    let mut c = Cursor { b, pos: 0 };
    // `EMPTY_DICT MEMOIZE MARK`: the entry's own memo slot comes first.
    if c.op()? != MEMOIZE || c.op()? != MARK {
        return None;
    }
    scratch.frames.clear();
    scratch.fetched.clear();
    scratch.puts.clear();
    scratch.fresh.clear();
    scratch.puts.push(Put::Entry);
    let first_new = heap.memo_len();
    let mut s = Scanned {
        len: 0,
        action: StrRef::Id(EMPTY),
        addr: 0,
        size: 0,
        stream: 0,
        time_us: None,
        stack: Stack::Known(EMPTY_STACK),
        compile_context: StrRef::Id(EMPTY),
        user_metadata: StrRef::Id(EMPTY),
    };
    let mut seen = 0u32;
    // Keys matched against the template so far; `None` once one was not.
    let mut matched = (scratch.template.epoch == heap.memo_epoch()).then_some(0usize);
    let mut learnable = true;
    scratch.learned.clear();
    loop {
        let key = match matched.and_then(|k| Some((k, scratch.template.keys.get(k)?))) {
            Some((k, t)) if c.word().is_some_and(|w| w & t.mask == t.bytes) => {
                // Checked when learned: a schema key, none twice.
                c.pos += t.len as usize;
                matched = Some(k + 1);
                seen |= 1u32 << (t.key - ACTION);
                t.key
            }
            _ => {
                let start = c.pos;
                let op = c.op()?;
                if op == SETITEMS {
                    break;
                }
                if let Some(k) = matched {
                    // Off the template: the rest of the keys the long way.
                    scratch.learned.extend_from_slice(&scratch.template.keys[..k]);
                    matched = None;
                }
                let slot = c.memo_ref(op)?;
                let key = fetch(heap, scratch, slot, first_new)?.as_str()?;
                // Learnable: a string held by the slot itself (no forward
                // whose holders the commit counts), referenced with no
                // FRAME in between.
                let direct = heap.memo_peek(slot).and_then(|v| v.as_str()).is_some();
                match c.b.get(start..c.pos).filter(|r| direct && r.len() <= 5) {
                    Some(r) => {
                        let mut word = [0u8; 8];
                        word[..r.len()].copy_from_slice(r);
                        let mask = u64::MAX >> (64 - 8 * r.len() as u32);
                        scratch.learned.push(TemplateKey {
                            bytes: u64::from_le_bytes(word),
                            mask,
                            len: r.len() as u8,
                            key,
                        });
                    }
                    None => learnable = false,
                }
                // One bit per key handled here; an unknown or repeated key
                // (or `pool_id`, `device_free`) goes the generic way.
                if !(ACTION..=USER_METADATA).contains(&key) {
                    return None;
                }
                let bit = 1u32 << (key - ACTION);
                if seen & bit != 0 {
                    return None;
                }
                seen |= bit;
                key
            }
        };
        let op = c.op()?;
        match key {
            ACTION => s.action = string(heap, scratch, &mut c, op, first_new, false)?,
            ADDR => s.addr = c.unsigned(op)?,
            SIZE => s.size = c.unsigned(op)?,
            STREAM => s.stream = c.unsigned(op)?,
            TIME_US => s.time_us = Some(c.int(op)?),
            FRAMES => s.stack = frames(heap, scratch, &mut c, op, first_new)?,
            COMPILE_CONTEXT => s.compile_context = string(heap, scratch, &mut c, op, first_new, true)?,
            _ => s.user_metadata = string(heap, scratch, &mut c, op, first_new, true)?,
        }
    }
    if seen & 1 == 0 {
        // No action: not a trace entry (or a broken one); the machine decides.
        return None;
    }
    let template = &mut scratch.template;
    match matched {
        Some(k) if k == template.keys.len() => {}
        // Fewer keys than the template: keep the ones this entry had.
        Some(k) => template.keys.truncate(k),
        None if learnable => {
            std::mem::swap(&mut template.keys, &mut scratch.learned);
            template.epoch = heap.memo_epoch();
        }
        None => template.keys.clear(),
    }
    s.len = c.pos;
    Some(s)
}

impl Reader {
    /// Apply a scanned entry (`b`: the bytes it was scanned from): intern
    /// its fresh strings and its stack, fill the memo slots it wrote, and
    /// append its row. Returns the value that stands for it (its row).
    pub(super) fn commit(&mut self, heap: &mut Heap, s: &Scanned, b: &[u8], at: u64) -> Result<Value, ReadError> {
        let mut ids = [EMPTY; MAX_FRESH];
        for (i, &(start, end, known)) in self.fast.fresh.iter().enumerate() {
            ids[i] = match known {
                Some(id) => id,
                None => {
                    let bytes = &b[start..end];
                    let text = std::str::from_utf8(bytes).map_err(|e| ReadError::BadPickle {
                        offset: at,
                        message: format!("string is not valid UTF-8 ({e})"),
                    })?;
                    let id = heap.intern(text, at)?;
                    self.fast.last_fresh.clear();
                    self.fast.last_fresh.extend_from_slice(bytes);
                    self.fast.last_fresh_id = Some(id);
                    id
                }
            };
        }
        let resolve = |r: StrRef| match r {
            StrRef::Id(id) => id,
            StrRef::Fresh(i) => ids[i as usize],
        };
        let stack = match s.stack {
            Stack::Known(id) => id,
            Stack::New => self.frames.intern_stack(&self.fast.frames),
        };
        for &id in &self.fast.fetched {
            heap.add_ref(Value::obj(id));
        }
        let row = self.trace.action.len() as u32;
        let first = heap.memo_len();
        for (k, put) in self.fast.puts.iter().enumerate() {
            let v = match *put {
                Put::Entry => Value::row(row),
                Put::Str(i) => Value::str(ids[i as usize]),
                Put::Frames => Value::stack(stack),
            };
            heap.memo_put(first + k as u64, v, at)?;
        }
        heap.charge(ROW_COST, || "the trace columns".to_owned(), at)?;
        let fields = super::RowFields {
            action: resolve(s.action),
            addr: s.addr,
            size: s.size,
            stream: s.stream,
            time_us: s.time_us,
            stack,
            compile_context: resolve(s.compile_context),
            user_metadata: resolve(s.user_metadata),
        };
        Ok(Value::row(self.push_row(row, fields)))
    }
}
