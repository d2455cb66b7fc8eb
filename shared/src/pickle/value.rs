//! The pickle machine's values, packed into eight bytes.
//!
//! Why packed: the memo of a real snapshot holds two to three entries per trace
//! entry (the entry's dict, its `compile_context` string, often its frames
//! list), so a 1.5M-entry trace puts ~4M values in the memo alone. At eight
//! bytes each that is 32 MB; a plain Rust enum would be sixteen bytes and
//! double it, which breaks the "peak RSS under 1.5x the file size" target.
//! The layout is a 4-bit tag in the low bits and a 60-bit payload above it.

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

    /// The value as the memo stores it: unset is zero, so a fresh page of
    /// the memo is zeroed memory, which an allocator may hand out without
    /// writing it.
    #[cfg(any(target_arch = "wasm32", test))]
    #[inline(always)]
    pub(super) const fn to_memo_bits(self) -> u64 {
        self.0 ^ T_UNSET
    }

    /// The value of memo bits (see [`Value::to_memo_bits`]).
    #[cfg(any(target_arch = "wasm32", test))]
    #[inline(always)]
    pub(super) const fn from_memo_bits(bits: u64) -> Value {
        Value(bits ^ T_UNSET)
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

    /// The container id, if this is one.
    #[inline]
    pub fn as_obj(self) -> Option<ObjId> {
        match self.get() {
            V::Obj(id) => Some(id),
            _ => None,
        }
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
}
