//! Where the pickle machine keeps what it builds: an arena of containers,
//! interned strings, side tables for the rare wide values, the memo, and the
//! memory budget that bounds all of them.

use indexmap::IndexSet;
use rustc_hash::FxBuildHasher;

use super::memo::Memo;
use super::value::{INLINE_INT_MAX, INLINE_INT_MIN, ObjId, StrId, V, Value};
use crate::error::ReadError;

/// An integer wider than the 60 bits a [`Value`] holds inline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BigInt {
    /// Fits in 128 bits (addresses at or above 2^63 land here).
    I128(i128),
    /// Wider than 128 bits; kept only as its width, since no snapshot field
    /// can hold it. Reading it as a number is an error.
    TooWide {
        /// Width of the encoding in bytes.
        bytes: u32,
    },
}

/// A container in the arena.
#[derive(Debug)]
pub enum ObjKind {
    /// A Python list.
    List(Vec<Value>),
    /// A Python tuple.
    Tuple(Vec<Value>),
    /// A Python dict, as (key, value) pairs in insertion order. A repeated key
    /// is not deduplicated on insert; lookups scan from the end so the last
    /// write wins, as in Python.
    Dict(Vec<(Value, Value)>),
    /// A Python set or frozenset.
    Set(Vec<Value>),
    /// A list holding only the consecutive trace rows `start..start + len`,
    /// as device trace lists do: a range instead of eight bytes a row.
    Rows {
        /// First row.
        start: u32,
        /// Number of rows.
        len: u32,
    },
    /// A container already converted (to a trace row, stack or frame) that
    /// other holders still reference.
    Forward(Value),
    /// A freed slot, waiting for reuse.
    Free,
}

/// Which empty container an EMPTY_* opcode makes.
#[derive(Clone, Copy, Debug)]
pub enum EmptyKind {
    /// EMPTY_LIST.
    List,
    /// EMPTY_TUPLE.
    Tuple,
    /// EMPTY_DICT.
    Dict,
    /// EMPTY_SET.
    Set,
}

/// A container with its bookkeeping.
#[derive(Debug)]
pub struct Obj {
    /// What the container holds.
    pub kind: ObjKind,
    /// Byte offset of the opcode that created it, for error messages.
    pub offset: u64,
    /// The memo slot that refers to it, if any (the memo is not counted in `refs`).
    memo_slot: u32,
    /// Holders besides the memo: stack slots and containers. Only ever
    /// incremented (on memo GET and DUP), so it overestimates; an object with
    /// `refs == 1` is certainly held by one place only.
    refs: u32,
    /// A dict that received the heap's watched key (see [`Heap::watch_key`]).
    has_watched_key: bool,
}

impl Obj {
    /// Whether this dict ever received the watched key: an O(1) answer to
    /// "is this a trace entry?", asked on every SETITEMS and APPEND.
    #[inline]
    pub fn has_watched_key(&self) -> bool {
        self.has_watched_key
    }
}

const NO_MEMO: u32 = u32::MAX;
/// How many emptied buffers of each kind to keep for reuse.
const SPARE_BUFFERS: usize = 256;
/// Rough per-object cost used by the budget: the `Obj` itself plus allocator overhead.
const OBJ_COST: u64 = 64;
/// Budget cost of a wide integer and of a float: their side-table slot,
/// doubled for the table's growth.
const BIG_COST: u64 = 2 * std::mem::size_of::<BigInt>() as u64;
const FLOAT_COST: u64 = 2 * std::mem::size_of::<f64>() as u64;

/// The pickle machine's heap.
pub struct Heap {
    objs: Vec<Obj>,
    free: Vec<ObjId>,
    strings: IndexSet<Box<str>, FxBuildHasher>,
    bigs: Vec<BigInt>,
    floats: Vec<f64>,
    byte_strings: Vec<Box<[u8]>>,
    memo: Memo,
    /// Emptied item buffers kept for reuse: a trace has millions of small
    /// dicts and lists, and recycling their buffers saves a malloc/free each.
    spare_pairs: Vec<Vec<(Value, Value)>>,
    spare_items: Vec<Vec<Value>>,
    charged: u64,
    budget: u64,
    watched_key: Option<Value>,
    /// Counts the times a memo slot that held a value was given another:
    /// a caller that remembers what slots hold (the trace entry fast path's
    /// keys) trusts it only while this is unchanged.
    memo_epoch: u64,
}

impl Heap {
    /// An empty heap that refuses to grow past `budget` bytes (approximately
    /// accounted: containers, strings, memo and stack).
    pub fn new(budget: u64) -> Heap {
        Heap {
            objs: Vec::new(),
            free: Vec::new(),
            strings: IndexSet::default(),
            bigs: Vec::new(),
            floats: Vec::new(),
            byte_strings: Vec::new(),
            memo: Memo::default(),
            memo_epoch: 0,
            spare_pairs: Vec::new(),
            spare_items: Vec::new(),
            charged: 0,
            budget,
            watched_key: None,
        }
    }

    /// Remember, for every dict, whether it received this key. The snapshot
    /// reader watches `action`, the key of a trace entry: looking for it by
    /// scanning a dict's items on each SETITEMS made one dict of 200,000
    /// items written in short batches cost seconds (quadratic).
    pub fn watch_key(&mut self, key: Value) {
        self.watched_key = Some(key);
    }

    /// Account for `bytes` more memory, or fail if that passes the budget.
    #[inline]
    pub fn charge(&mut self, bytes: u64, what: impl FnOnce() -> String, offset: u64) -> Result<(), ReadError> {
        let needed = self.charged.saturating_add(bytes);
        if needed > self.budget {
            return Err(self.over_budget(what(), needed, offset));
        }
        self.charged = needed;
        Ok(())
    }

    #[cold]
    fn over_budget(&self, what: String, needed: u64, offset: u64) -> ReadError {
        ReadError::MemoryBudget { what, needed, budget: self.budget, offset }
    }

    fn release(&mut self, bytes: u64) {
        self.charged = self.charged.saturating_sub(bytes);
    }

    /// The budget in bytes.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Bytes still free under the budget.
    pub fn budget_left(&self) -> u64 {
        self.budget.saturating_sub(self.charged)
    }

    /// Bytes currently accounted to the budget.
    pub fn charged(&self) -> u64 {
        self.charged
    }

    /// Intern a string, returning its id.
    pub fn intern(&mut self, s: &str, offset: u64) -> Result<StrId, ReadError> {
        if let Some(id) = self.strings.get_index_of(s) {
            return Ok(id as StrId);
        }
        self.charge(s.len() as u64 + 32, || format!("a string of {} bytes", s.len()), offset)?;
        let (id, _) = self.strings.insert_full(s.into());
        Ok(id as StrId)
    }

    /// The id of a string already interned, without interning it.
    pub fn lookup_str(&self, s: &str) -> Option<StrId> {
        self.strings.get_index_of(s).map(|i| i as StrId)
    }

    /// The text of an interned string.
    pub fn str(&self, id: StrId) -> &str {
        self.strings.get_index(id as usize).map(|s| &**s).unwrap_or("")
    }

    /// Take the string table out of the heap (after parsing).
    pub fn take_strings(&mut self) -> IndexSet<Box<str>, FxBuildHasher> {
        std::mem::take(&mut self.strings)
    }

    /// Make an integer value, inline when it fits; a wider one is kept in a
    /// side table, charged to the budget.
    #[inline]
    pub fn int(&mut self, i: i128, offset: u64) -> Result<Value, ReadError> {
        if (INLINE_INT_MIN as i128..=INLINE_INT_MAX as i128).contains(&i) {
            Ok(Value::small_int(i as i64))
        } else {
            self.big(BigInt::I128(i), offset)
        }
    }

    /// Make a value for an integer too wide for 128 bits.
    pub fn too_wide_int(&mut self, bytes: u32, offset: u64) -> Result<Value, ReadError> {
        self.big(BigInt::TooWide { bytes }, offset)
    }

    fn big(&mut self, big: BigInt, offset: u64) -> Result<Value, ReadError> {
        self.charge(BIG_COST, || "an integer wider than 60 bits".to_owned(), offset)?;
        self.bigs.push(big);
        Ok(Value::big(self.bigs.len() as u32 - 1))
    }

    /// The integer behind a value, if it is one (`bool` counts, as in Python).
    pub fn as_int(&self, v: Value) -> Option<Result<i128, u32>> {
        match v.get() {
            V::Int(i) => Some(Ok(i as i128)),
            V::Bool(b) => Some(Ok(b as i128)),
            V::Big(idx) => match self.bigs.get(idx as usize) {
                Some(BigInt::I128(i)) => Some(Ok(*i)),
                Some(BigInt::TooWide { bytes }) => Some(Err(*bytes)),
                None => None,
            },
            _ => None,
        }
    }

    /// Make a float value (kept in a side table, charged to the budget).
    pub fn float(&mut self, f: f64, offset: u64) -> Result<Value, ReadError> {
        self.charge(FLOAT_COST, || "a float".to_owned(), offset)?;
        self.floats.push(f);
        Ok(Value::float(self.floats.len() as u32 - 1))
    }

    /// The float behind a value index.
    pub fn float_at(&self, idx: u32) -> f64 {
        self.floats.get(idx as usize).copied().unwrap_or(f64::NAN)
    }

    /// Store a byte string.
    pub fn bytes(&mut self, b: Box<[u8]>) -> Value {
        self.byte_strings.push(b);
        Value::bytes(self.byte_strings.len() as u32 - 1)
    }

    /// The length of a stored byte string.
    pub fn bytes_len(&self, idx: u32) -> usize {
        self.byte_strings.get(idx as usize).map_or(0, |b| b.len())
    }

    /// Allocate a container; the caller's stack slot is its one holder.
    pub fn alloc(&mut self, kind: ObjKind, offset: u64) -> Result<Value, ReadError> {
        self.charge(OBJ_COST, || "a container".to_owned(), offset)?;
        Ok(self.place(kind, offset))
    }

    /// Allocate an empty list, dict, tuple or set (the EMPTY_* opcodes, one
    /// or two per trace entry), reusing a spare item buffer when there is one.
    #[inline]
    pub fn alloc_empty(&mut self, kind: EmptyKind, offset: u64) -> Result<Value, ReadError> {
        let (kind, items_cost) = match kind {
            EmptyKind::Dict => match self.spare_pairs.pop() {
                Some(spare) => {
                    let cost = spare.capacity() as u64 * 16;
                    (ObjKind::Dict(spare), cost)
                }
                None => (ObjKind::Dict(Vec::new()), 0),
            },
            EmptyKind::List => match self.spare_items.pop() {
                Some(spare) => {
                    let cost = spare.capacity() as u64 * 8;
                    (ObjKind::List(spare), cost)
                }
                None => (ObjKind::List(Vec::new()), 0),
            },
            EmptyKind::Tuple => (ObjKind::Tuple(Vec::new()), 0),
            EmptyKind::Set => (ObjKind::Set(Vec::new()), 0),
        };
        self.charge(OBJ_COST + items_cost, || "a container".to_owned(), offset)?;
        Ok(self.place(kind, offset))
    }

    #[inline]
    fn place(&mut self, kind: ObjKind, offset: u64) -> Value {
        let id = match self.free.pop() {
            Some(id) => {
                let slot = &mut self.objs[id as usize];
                slot.kind = kind;
                slot.offset = offset;
                slot.memo_slot = NO_MEMO;
                slot.refs = 1;
                slot.has_watched_key = false;
                id
            }
            None => {
                self.objs.push(Obj { kind, offset, memo_slot: NO_MEMO, refs: 1, has_watched_key: false });
                self.objs.len() as ObjId - 1
            }
        };
        Value::obj(id)
    }

    /// The container behind an id.
    #[inline]
    pub fn obj(&self, id: ObjId) -> &Obj {
        &self.objs[id as usize]
    }

    /// The container behind an id, mutably.
    #[inline]
    pub fn obj_mut(&mut self, id: ObjId) -> &mut Obj {
        &mut self.objs[id as usize]
    }

    /// Follow forwarding: a converted container stands for its conversion.
    #[inline]
    pub fn resolve(&self, v: Value) -> Value {
        match v.get() {
            V::Obj(id) => match self.objs[id as usize].kind {
                ObjKind::Forward(to) => to,
                _ => v,
            },
            _ => v,
        }
    }

    /// Whether a container has a single holder (besides the memo).
    #[inline]
    pub fn has_single_holder(&self, id: ObjId) -> bool {
        self.objs[id as usize].refs <= 1
    }

    /// A container was duplicated (memo GET, DUP): one more holder.
    #[inline]
    pub fn add_ref(&mut self, v: Value) {
        if let V::Obj(id) = v.get() {
            let o = &mut self.objs[id as usize];
            o.refs = o.refs.saturating_add(1);
        }
    }

    /// Replace a container by what it was converted to. When its one holder
    /// is the one consuming it, the slot is freed and the memo (which may still
    /// name it) is pointed at the conversion; otherwise it stays as a forward.
    pub fn convert(&mut self, id: ObjId, to: Value) {
        let o = &mut self.objs[id as usize];
        let items = match &o.kind {
            ObjKind::List(v) | ObjKind::Tuple(v) | ObjKind::Set(v) => v.capacity() as u64 * 8,
            ObjKind::Dict(v) => v.capacity() as u64 * 16,
            ObjKind::Rows { .. } | ObjKind::Forward(_) | ObjKind::Free => 0,
        };
        let old = std::mem::replace(&mut o.kind, ObjKind::Forward(to));
        match old {
            ObjKind::Dict(mut v) if self.spare_pairs.len() < SPARE_BUFFERS && v.capacity() <= 64 => {
                v.clear();
                self.spare_pairs.push(v);
            }
            ObjKind::List(mut v) if self.spare_items.len() < SPARE_BUFFERS && v.capacity() <= 64 => {
                v.clear();
                self.spare_items.push(v);
            }
            _ => {}
        }
        let o = &self.objs[id as usize];
        let memo_slot = o.memo_slot as usize;
        // Free the slot when nothing else can reach the container: the memo
        // slot that named it now names the conversion (unless a PUT gave the
        // slot another value since, which stays). If the memo cannot take
        // the conversion (its side table full), the container stays as a
        // forward.
        let freed = o.refs <= 1
            && (o.memo_slot == NO_MEMO
                || self.memo.get(memo_slot) != Some(Value::obj(id))
                || self.memo.set(memo_slot, to));
        if freed {
            let o = &mut self.objs[id as usize];
            o.kind = ObjKind::Free;
            o.memo_slot = NO_MEMO;
            self.free.push(id);
            self.release(items + OBJ_COST);
        } else {
            self.release(items);
        }
    }

    /// Append the longest run at the start of `items` that continues a
    /// list of consecutive rows (a [`ObjKind::Rows`], or an empty list);
    /// returns how many were appended. A device's trace list takes its
    /// rows here a batch at a time, one compare per row.
    #[inline]
    pub fn push_rows(&mut self, id: ObjId, items: &[Value]) -> usize {
        let Some(o) = self.objs.get_mut(id as usize) else { return 0 };
        let (start, len) = match &o.kind {
            ObjKind::Rows { start, len } => (*start, *len),
            ObjKind::List(v) if v.is_empty() => match items.first().map(|v| v.get()) {
                Some(V::Row(first)) => (first, 0),
                _ => return 0,
            },
            _ => return 0,
        };
        // The row after the list's last, while one exists (no wrap past u32::MAX).
        let mut next = start.checked_add(len);
        let room = (u32::MAX - len) as usize;
        let mut taken = 0usize;
        for &item in items {
            match next {
                Some(n) if taken < room && item == Value::row(n) => {
                    taken += 1;
                    next = n.checked_add(1);
                }
                _ => break,
            }
        }
        if taken > 0 {
            o.kind = ObjKind::Rows { start, len: len + taken as u32 };
        }
        taken
    }

    /// Push onto a container's item list with budget accounting.
    #[inline]
    pub fn push_item(&mut self, id: ObjId, item: Value, offset: u64) -> Result<(), ReadError> {
        // The next row of a list of rows, or a first row: kept as a range.
        if self.push_rows(id, std::slice::from_ref(&item)) == 1 {
            return Ok(());
        }
        if let ObjKind::Rows { start, len } = self.objs[id as usize].kind {
            // Anything but the next row: fall back to a plain list.
            self.charge(len as u64 * 8, || "a list's items".to_owned(), offset)?;
            self.objs[id as usize].kind = ObjKind::List((start..start + len).map(Value::row).collect());
        }
        let o = &mut self.objs[id as usize];
        match &mut o.kind {
            ObjKind::List(v) | ObjKind::Set(v) => {
                if v.len() == v.capacity() {
                    let grow = (v.capacity().max(4)) as u64 * 8;
                    self.charge(grow, || "a list's items".to_owned(), offset)?;
                    if let ObjKind::List(v) | ObjKind::Set(v) = &mut self.objs[id as usize].kind {
                        v.reserve(v.capacity().max(4));
                        v.push(item);
                    }
                } else {
                    v.push(item);
                }
                Ok(())
            }
            _ => Err(ReadError::BadPickle {
                offset,
                message: format!("APPEND to a {} (only lists and sets take items)", kind_name(&o.kind)),
            }),
        }
    }

    /// Add (key, value) pairs to a dict (SETITEMS), reserving once.
    #[inline]
    pub fn extend_dict(&mut self, id: ObjId, pairs: &[Value], offset: u64) -> Result<(), ReadError> {
        for key in pairs.iter().step_by(2) {
            if let V::Obj(k) = key.get()
                && !matches!(self.objs[k as usize].kind, ObjKind::Tuple(_) | ObjKind::Forward(_))
            {
                return Err(ReadError::BadPickle {
                    offset,
                    message: format!("unhashable dict key: {}", self.describe(*key)),
                });
            }
        }
        let n = pairs.len() / 2;
        let ObjKind::Dict(v) = &mut self.objs[id as usize].kind else {
            let kind = kind_name(&self.objs[id as usize].kind);
            return Err(ReadError::BadPickle {
                offset,
                message: format!("SETITEMS on a {kind} (only dicts take items)"),
            });
        };
        if v.capacity() - v.len() < n {
            let grow = (n.max(v.capacity())) as u64 * 16;
            self.charge(grow, || "a dict's items".to_owned(), offset)?;
            if let ObjKind::Dict(v) = &mut self.objs[id as usize].kind {
                v.reserve(n.max(v.capacity()));
            }
        }
        if let ObjKind::Dict(v) = &mut self.objs[id as usize].kind {
            v.extend(pairs.chunks_exact(2).map(|p| (p[0], p[1])));
        }
        if let Some(watched) = self.watched_key
            && pairs.iter().step_by(2).any(|k| *k == watched)
        {
            self.objs[id as usize].has_watched_key = true;
        }
        Ok(())
    }

    /// Store a value in the memo.
    #[inline]
    pub fn memo_put(&mut self, slot: u64, v: Value, offset: u64) -> Result<(), ReadError> {
        // The usual case (MEMOIZE, and sequential PUTs): the next slot,
        // holding no container.
        if slot == self.memo.len() as u64 && !matches!(v.get(), V::Obj(_)) && slot < u32::MAX as u64 - 1 {
            self.charge(8, || format!("memo slot {slot}"), offset)?;
            return if self.memo.push(v) { Ok(()) } else { Err(wide_memo_full(offset)) };
        }
        // Memo indices are sequential in every pickler; allow sparse ones only
        // within the budget (a claimed index of 2^32 must not allocate 32 GB).
        let slot_usize = usize::try_from(slot)
            .ok()
            .filter(|s| *s < u32::MAX as usize - 1)
            .ok_or_else(|| ReadError::BadPickle { offset, message: format!("memo index {slot} is out of range") })?;
        if slot_usize >= self.memo.len() {
            let grow = (slot_usize + 1 - self.memo.len()) as u64 * 8;
            self.charge(grow, || format!("memo slot {slot}"), offset)?;
            self.memo.grow_to(slot_usize + 1);
        } else if self.memo.get(slot_usize) != Some(Value::UNSET) {
            self.memo_epoch += 1;
        }
        if let V::Obj(id) = v.get() {
            let o = &mut self.objs[id as usize];
            if o.memo_slot == NO_MEMO {
                o.memo_slot = slot_usize as u32;
            } else {
                // Named by two memo slots: count the second as a holder so
                // the object is never freed under the other slot.
                o.refs = o.refs.saturating_add(1);
            }
        }
        if self.memo.set(slot_usize, v) { Ok(()) } else { Err(wide_memo_full(offset)) }
    }

    /// What a memo slot holds, without counting a new holder: for a
    /// caller that decodes opcodes itself and counts holders when it commits.
    #[inline]
    pub fn memo_peek(&self, slot: u64) -> Option<Value> {
        let v = self.memo.get(usize::try_from(slot).ok()?)?;
        (v != Value::UNSET).then_some(v)
    }

    /// Changes whenever a memo slot that held a value is given another (a
    /// PUT over a used slot); appending slots leaves it.
    #[inline]
    pub fn memo_epoch(&self) -> u64 {
        self.memo_epoch
    }

    /// The number of memo slots in use (the next MEMOIZE index).
    pub fn memo_len(&self) -> u64 {
        self.memo.len() as u64
    }

    /// Fetch a value from the memo and count the new holder.
    #[inline]
    pub fn memo_get(&mut self, slot: u64, offset: u64) -> Result<Value, ReadError> {
        match usize::try_from(slot).ok().and_then(|s| self.memo.get(s)) {
            Some(v) if v != Value::UNSET => {
                self.add_ref(v);
                Ok(v)
            }
            _ => Err(memo_miss(slot, offset)),
        }
    }

    /// A short description of a value's type, for error messages.
    pub fn describe(&self, v: Value) -> String {
        match self.resolve(v).get() {
            V::None => "None".into(),
            V::Bool(b) => format!("bool {}", if b { "True" } else { "False" }),
            V::Int(i) => format!("int {i}"),
            V::Big(_) => match self.as_int(v) {
                Some(Ok(i)) => format!("int {i}"),
                _ => "an int wider than 128 bits".into(),
            },
            V::Float(i) => format!("float {}", self.float_at(i)),
            V::Str(s) => {
                let text = self.str(s);
                let short: String = text.chars().take(40).collect();
                format!("str {short:?}")
            }
            V::Bytes(i) => format!("bytes of length {}", self.bytes_len(i)),
            V::Obj(id) => kind_name(&self.obj(id).kind).into(),
            V::Row(_) => "a trace entry".into(),
            V::Stack(_) => "a list of frames".into(),
            V::Frame(_) => "a frame dict".into(),
        }
    }
}

/// The memo's side table of values too wide for a slot is full.
#[cold]
fn wide_memo_full(offset: u64) -> ReadError {
    ReadError::BadPickle {
        offset,
        message: "more than 2^28 memo slots hold values too wide for 32 bits (integers, or ids past 2^28)".to_owned(),
    }
}

#[cold]
fn memo_miss(slot: u64, offset: u64) -> ReadError {
    ReadError::BadPickle { offset, message: format!("memo GET of index {slot}, which was never stored") }
}

fn kind_name(kind: &ObjKind) -> &'static str {
    match kind {
        ObjKind::List(_) | ObjKind::Rows { .. } => "list",
        ObjKind::Tuple(_) => "tuple",
        ObjKind::Dict(_) => "dict",
        ObjKind::Set(_) => "set",
        ObjKind::Forward(_) => "converted container",
        ObjKind::Free => "freed container",
    }
}
