//! The pickle machine's values, packed into eight bytes.
//!
//! Why packed: the memo of a real snapshot holds two to three entries per trace
//! entry (the entry's dict, its `compile_context` string, often its frames
//! list), so a 1.5M-entry trace puts ~4M values in the memo alone. A plain
//! Rust enum would be sixteen bytes a value. The layout is a 4-bit tag in
//! the low bits and a 60-bit payload above it; the memo keeps the low 32
//! bits of the values that fit in them, nearly all (see `memo`).

/// Index of an interned string in the heap's string table.
pub type StrId = u32;
/// Index of a live container in the heap's arena.
pub type ObjId = u32;

/// A packed pickle value. Copy; containers are referenced by [`ObjId`], never
/// cloned, so memo references cost nothing however often they are used.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Value(u64);

const TAG_BITS: u32 = 4;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;

const T_NONE: u64 = 0;
const T_BOOL: u64 = 1;
const T_INT: u64 = 2;
const T_BIG: u64 = 3;
const T_FLOAT: u64 = 4;
const T_STR: u64 = 5;
const T_BYTES: u64 = 6;
const T_OBJ: u64 = 7;
const T_ROW: u64 = 8;
const T_STACK: u64 = 9;
const T_FRAME: u64 = 10;
/// Marks a memo slot that was never stored (never a value on the stack).
const T_UNSET: u64 = 15;
/// The tag no value has: a memo slot's 32 bits holding an index into the
/// memo's side table of values too wide for 32 bits.
pub(super) const MEMO_WIDE: u32 = 14;
/// Bits of a memo slot's tag.
pub(super) const MEMO_TAG_BITS: u32 = TAG_BITS;

/// The largest integer stored inline; larger ones go to the heap's big-int table.
pub(crate) const INLINE_INT_MAX: i64 = (1 << 59) - 1;
/// The smallest integer stored inline.
pub(crate) const INLINE_INT_MIN: i64 = -(1 << 59);

/// The unpacked view of a [`Value`], for matching.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum V {
    /// Python `None`.
    None,
    /// Python `bool`.
    Bool(bool),
    /// An integer that fits in 60 bits.
    Int(i64),
    /// An index into the heap's table of wider integers.
    Big(u32),
    /// An index into the heap's table of floats.
    Float(u32),
    /// An interned string.
    Str(StrId),
    /// An index into the heap's table of byte strings.
    Bytes(u32),
    /// A list, tuple, dict or set in the arena.
    Obj(ObjId),
    /// A trace entry already converted into a row of the trace columns.
    Row(u32),
    /// A frames list already interned as a stack.
    Stack(u32),
    /// A frame dict already interned.
    Frame(u32),
}

impl Value {
    /// Python `None`.
    pub const NONE: Value = Value(T_NONE);
    /// An empty memo slot. Keeps the memo at eight bytes a slot, where
    /// `Option<Value>` would take sixteen.
    pub(crate) const UNSET: Value = Value(T_UNSET);

    /// The value in the memo's 32 bits a slot, when it fits: ids, rows and
    /// small non-negative integers do (a payload under 2^28). `None`: the
    /// memo keeps it in its side table, under [`MEMO_WIDE`].
    #[inline(always)]
    pub(super) fn to_memo_u32(self) -> Option<u32> {
        u32::try_from(self.0).ok()
    }

    /// The value of a memo slot's 32 bits (not [`MEMO_WIDE`]).
    #[inline(always)]
    pub(super) const fn from_memo_u32(bits: u32) -> Value {
        Value(bits as u64)
    }

    const fn pack(tag: u64, payload: u64) -> Value {
        Value((payload << TAG_BITS) | tag)
    }

    /// A boolean.
    pub fn bool(b: bool) -> Value {
        Value::pack(T_BOOL, b as u64)
    }
    /// An inline integer; the caller checks the range.
    pub(crate) fn small_int(i: i64) -> Value {
        debug_assert!((INLINE_INT_MIN..=INLINE_INT_MAX).contains(&i));
        Value(((i as u64) << TAG_BITS) | T_INT)
    }
    pub(crate) fn big(idx: u32) -> Value {
        Value::pack(T_BIG, idx as u64)
    }
    pub(crate) fn float(idx: u32) -> Value {
        Value::pack(T_FLOAT, idx as u64)
    }
    /// An interned string.
    pub fn str(id: StrId) -> Value {
        Value::pack(T_STR, id as u64)
    }
    pub(crate) fn bytes(idx: u32) -> Value {
        Value::pack(T_BYTES, idx as u64)
    }
    /// A container in the arena.
    pub fn obj(id: ObjId) -> Value {
        Value::pack(T_OBJ, id as u64)
    }
    /// A converted trace row.
    pub fn row(row: u32) -> Value {
        Value::pack(T_ROW, row as u64)
    }
    /// An interned stack.
    pub fn stack(id: u32) -> Value {
        Value::pack(T_STACK, id as u64)
    }
    /// An interned frame.
    pub fn frame(id: u32) -> Value {
        Value::pack(T_FRAME, id as u64)
    }

    /// Unpack for matching.
    #[inline(always)]
    pub fn get(self) -> V {
        let payload = self.0 >> TAG_BITS;
        match self.0 & TAG_MASK {
            T_NONE => V::None,
            T_BOOL => V::Bool(payload != 0),
            // Arithmetic shift restores the sign of inline integers.
            T_INT => V::Int((self.0 as i64) >> TAG_BITS),
            T_BIG => V::Big(payload as u32),
            T_FLOAT => V::Float(payload as u32),
            T_STR => V::Str(payload as u32),
            T_BYTES => V::Bytes(payload as u32),
            T_OBJ => V::Obj(payload as u32),
            T_ROW => V::Row(payload as u32),
            T_STACK => V::Stack(payload as u32),
            // T_UNSET never leaves the memo (memo_get refuses it).
            _ => V::Frame(payload as u32),
        }
    }

    /// The payload of a value of kind `tag`: one compare, where matching
    /// on [`Value::get`] compiles to a decode of every kind (the trace
    /// entry fast path asks this several times per entry).
    #[inline(always)]
    const fn payload_if(self, tag: u64) -> Option<u32> {
        if self.0 & TAG_MASK == tag { Some((self.0 >> TAG_BITS) as u32) } else { None }
    }

    /// The container id, if this is one.
    #[inline(always)]
    pub fn as_obj(self) -> Option<ObjId> {
        self.payload_if(T_OBJ)
    }

    /// The interned string, if this is one.
    #[inline(always)]
    pub fn as_str(self) -> Option<StrId> {
        self.payload_if(T_STR)
    }

    /// The interned frame, if this is one.
    #[inline(always)]
    pub fn as_frame(self) -> Option<u32> {
        self.payload_if(T_FRAME)
    }

    /// The interned stack, if this is one.
    #[inline(always)]
    pub fn as_stack(self) -> Option<u32> {
        self.payload_if(T_STACK)
    }

    /// Whether this is Python `None`.
    #[inline(always)]
    pub fn is_none(self) -> bool {
        self.0 == T_NONE
    }
}

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_and_unpacks_every_kind() {
        for i in [0, 1, -1, 42, INLINE_INT_MAX, INLINE_INT_MIN, 1_796_216_288_159_390] {
            assert_eq!(Value::small_int(i).get(), V::Int(i));
        }
        assert_eq!(Value::bool(true).get(), V::Bool(true));
        assert_eq!(Value::NONE.get(), V::None);
        assert_eq!(Value::str(u32::MAX).get(), V::Str(u32::MAX));
        assert_eq!(Value::obj(7).get(), V::Obj(7));
        assert_eq!(Value::row(9).get(), V::Row(9));
        assert_eq!(Value::stack(3).get(), V::Stack(3));
        assert_eq!(Value::frame(5).get(), V::Frame(5));
        assert_eq!(std::mem::size_of::<Value>(), 8);
    }

    #[test]
    fn kind_accessors_agree_with_get() {
        let all = [
            Value::NONE,
            Value::bool(false),
            Value::small_int(3),
            Value::small_int(-1),
            Value::str(4),
            Value::obj(5),
            Value::row(6),
            Value::stack(7),
            Value::frame(8),
            Value::UNSET,
        ];
        for v in all {
            let unset = v == Value::UNSET;
            assert_eq!(v.as_obj(), if let (V::Obj(id), false) = (v.get(), unset) { Some(id) } else { None });
            assert_eq!(v.as_str(), if let (V::Str(id), false) = (v.get(), unset) { Some(id) } else { None });
            assert_eq!(v.as_stack(), if let (V::Stack(id), false) = (v.get(), unset) { Some(id) } else { None });
            assert_eq!(v.as_frame(), if let (V::Frame(id), false) = (v.get(), unset) { Some(id) } else { None });
            assert_eq!(v.is_none(), v.get() == V::None);
        }
    }
}
