//! The pickle memo: slot number → value. Natively one `Vec`; in the
//! browser's WebAssembly, pages of a fixed size.
//!
//! PyTorch memoizes every trace entry, its fresh strings and its frames
//! list, about 2.7 slots per entry, so a 16M-entry snapshot writes 43M
//! slots. A `Vec` grown by doubling ends at 2^26 slots (537 MB):
//! - natively that costs nothing: a large buffer grows by moving its pages
//!   (`mremap`), not copying them, and capacity never written is never
//!   resident. One `Vec` is also the fastest to read (the pages' extra
//!   indirection made `vramscope stats` 5% slower);
//! - WebAssembly's memory has neither: a grown buffer is copied, the old
//!   and new ones are held at once (805 MB), and the memory never shrinks.
//!   That moment was the worker's peak. Pages of 64Ki slots are never
//!   copied and waste at most one partly filled page.
//!
//! Both answer the same four calls; the tests run both.
//!
//! A slot is 32 bits, not a whole eight-byte [`Value`]: what the memo holds
//! (containers, strings, rows, stacks, frames) are ids that fit, and the
//! rare value that does not (a wide integer, a memoized float's index past
//! 2^28) goes to a side table that the slot points into. Half the memory
//! of eight bytes a slot, which is half the fresh pages the reader touches
//! for the memo, and half its part of the browser's peak.
//!
//! Written here rather than taken from a crate: the memo needs push, get and
//! set by slot and nothing else, a few lines over `Vec<Box<[u64; N]>>`; the
//! segmented-vector crates (`segvec`) are little used and unmaintained.

#[cfg(any(target_arch = "wasm32", test))]
pub(super) use paged::Paged;

/// The memo of this target.
#[cfg(not(target_arch = "wasm32"))]
pub(super) type Memo = Flat;
/// The memo of this target.
#[cfg(target_arch = "wasm32")]
pub(super) type Memo = Paged;

use super::value::{MEMO_TAG_BITS, MEMO_WIDE, Value};

/// Most values the side table holds: its index fills a slot's payload.
const WIDE_MAX: usize = 1 << (32 - MEMO_TAG_BITS);

/// The values too wide for a slot's 32 bits.
#[derive(Default)]
struct Wide {
    values: Vec<Value>,
}

impl Wide {
    /// The 32 bits that stand for `v` in a slot that held `held`: the value
    /// itself, or an index here (the slot's old entry reused, so a slot
    /// written again and again takes one entry). `None` when the table is
    /// full.
    #[inline(always)]
    fn encode(&mut self, v: Value, held: Option<u32>) -> Option<u32> {
        if let Some(bits) = v.to_memo_u32() {
            return Some(bits);
        }
        if let Some(bits) = held.filter(|&b| b & TAG_MASK == MEMO_WIDE)
            && let Some(entry) = self.values.get_mut((bits >> MEMO_TAG_BITS) as usize)
        {
            *entry = v;
            return Some(bits);
        }
        if self.values.len() >= WIDE_MAX {
            return None;
        }
        self.values.push(v);
        Some((((self.values.len() - 1) as u32) << MEMO_TAG_BITS) | MEMO_WIDE)
    }

    /// The value a slot's 32 bits stand for.
    #[inline(always)]
    fn decode(&self, bits: u32) -> Value {
        if bits & TAG_MASK == MEMO_WIDE {
            // An index this table gave out: always present.
            self.values.get((bits >> MEMO_TAG_BITS) as usize).copied().unwrap_or(Value::UNSET)
        } else {
            Value::from_memo_u32(bits)
        }
    }
}

const TAG_MASK: u32 = (1 << MEMO_TAG_BITS) - 1;

/// The memo as one vector of 32-bit slots, [`Value::UNSET`] where nothing
/// was stored.
#[cfg(any(not(target_arch = "wasm32"), test))]
#[derive(Default)]
pub(super) struct Flat {
    slots: Vec<u32>,
    wide: Wide,
}

#[cfg(any(not(target_arch = "wasm32"), test))]
impl Flat {
    /// Slots in use: one past the highest slot stored.
    #[inline(always)]
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Store `v` in the next slot; false (nothing stored) when the side
    /// table of wide values is full.
    #[inline(always)]
    pub(super) fn push(&mut self, v: Value) -> bool {
        match self.wide.encode(v, None) {
            Some(bits) => {
                self.slots.push(bits);
                true
            }
            None => false,
        }
    }

    /// Make slots up to `len` exist (new ones unset).
    pub(super) fn grow_to(&mut self, len: usize) {
        if len > self.slots.len() {
            self.slots.resize(len, unset_bits());
        }
    }

    /// The value in `slot` ([`Value::UNSET`] if never stored), or `None`.
    #[inline(always)]
    pub(super) fn get(&self, slot: usize) -> Option<Value> {
        Some(self.wide.decode(*self.slots.get(slot)?))
    }

    /// Store `v` in `slot` if the slot exists (below [`Flat::len`]); false
    /// when the side table of wide values is full.
    #[inline(always)]
    pub(super) fn set(&mut self, slot: usize, v: Value) -> bool {
        let Some(held) = self.slots.get_mut(slot) else { return true };
        match self.wide.encode(v, Some(*held)) {
            Some(bits) => {
                *held = bits;
                true
            }
            None => false,
        }
    }
}

/// An unset slot's bits.
#[inline(always)]
fn unset_bits() -> u32 {
    // UNSET always fits.
    Value::UNSET.to_memo_u32().unwrap_or(u32::MAX)
}

#[cfg(any(target_arch = "wasm32", test))]
mod paged {
    use super::{Value, Wide, unset_bits};

    /// Slots per page (256 KiB of slots).
    pub(super) const PAGE_BITS: u32 = 16;
    pub(super) const PAGE: usize = 1 << PAGE_BITS;
    const MASK: usize = PAGE - 1;

    /// One page: an array, so an index masked to the page needs no check.
    /// A slot holds its bits XOR an unset slot's, so unset is zero and a
    /// fresh page is zeroed memory, which an allocator may hand out without
    /// writing it (not measured in the browser).
    type Page = Box<[u32; PAGE]>;

    fn page() -> Page {
        match vec![0u32; PAGE].into_boxed_slice().try_into() {
            Ok(page) => page,
            // A vector of PAGE slots is always a page.
            Err(_) => unreachable!("a page of {PAGE} slots"),
        }
    }

    /// The memo in pages, [`Value::UNSET`] where nothing was stored.
    #[derive(Default)]
    pub(in crate::pickle) struct Paged {
        pages: Vec<Page>,
        len: usize,
        pub(super) wide: Wide,
    }

    impl Paged {
        /// Slots in use: one past the highest slot stored.
        #[inline(always)]
        pub(in crate::pickle) fn len(&self) -> usize {
            self.len
        }

        /// Store `v` in the next slot; false (nothing stored) when the side
        /// table of wide values is full.
        #[inline(always)]
        pub(in crate::pickle) fn push(&mut self, v: Value) -> bool {
            let Some(bits) = self.wide.encode(v, None) else { return false };
            if self.len >> PAGE_BITS == self.pages.len() {
                self.pages.push(page());
            }
            if let Some(page) = self.pages.get_mut(self.len >> PAGE_BITS) {
                page[self.len & MASK] = bits ^ unset_bits();
            }
            self.len += 1;
            true
        }

        /// Make slots up to `len` exist (new ones unset).
        pub(in crate::pickle) fn grow_to(&mut self, len: usize) {
            // Pages are created unset, so only the length and the pages move.
            while self.pages.len() < len.div_ceil(PAGE) {
                self.pages.push(page());
            }
            self.len = self.len.max(len);
        }

        /// The value in `slot`: [`Value::UNSET`] for a slot never stored,
        /// `None` past the last page. (One check on the hot path: slots
        /// past the length within the last page read as unset, as they are.)
        #[inline(always)]
        pub(in crate::pickle) fn get(&self, slot: usize) -> Option<Value> {
            let bits = self.pages.get(slot >> PAGE_BITS)?[slot & MASK] ^ unset_bits();
            Some(self.wide.decode(bits))
        }

        /// Store `v` in `slot` if the slot exists (below [`Paged::len`]);
        /// false when the side table of wide values is full.
        #[inline(always)]
        pub(in crate::pickle) fn set(&mut self, slot: usize, v: Value) -> bool {
            if slot >= self.len {
                return true;
            }
            let Some(page) = self.pages.get_mut(slot >> PAGE_BITS) else { return true };
            let held = page[slot & MASK] ^ unset_bits();
            match self.wide.encode(v, Some(held)) {
                Some(bits) => {
                    page[slot & MASK] = bits ^ unset_bits();
                    true
                }
                None => false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::paged::PAGE;
    use super::*;

    /// Both layouts, through the same steps.
    macro_rules! check {
        ($memo:expr) => {{
            let mut memo = $memo;
            for i in 0..(2 * PAGE as u32 + 5) {
                memo.push(Value::row(i));
            }
            assert_eq!(memo.len(), 2 * PAGE + 5);
            assert_eq!(memo.get(PAGE + 1), Some(Value::row(PAGE as u32 + 1)));
            // Past the length: unset or absent, never a value.
            assert!(matches!(memo.get(2 * PAGE + 5), None | Some(Value::UNSET)));
            assert_eq!(memo.get(3 * PAGE), None);
            // A sparse slot far ahead: the slots between exist and are unset.
            memo.grow_to(5 * PAGE + 1);
            assert_eq!(memo.get(4 * PAGE), Some(Value::UNSET));
            memo.set(5 * PAGE, Value::row(7));
            assert_eq!(memo.get(5 * PAGE), Some(Value::row(7)));
            assert_eq!(memo.get(2), Some(Value::row(2)));
            // Setting past the length changes nothing.
            memo.set(6 * PAGE, Value::row(8));
            assert!(matches!(memo.get(6 * PAGE), None | Some(Value::UNSET)));
            // Pushing after a sparse growth continues at its end.
            memo.push(Value::row(9));
            assert_eq!(memo.get(5 * PAGE + 1), Some(Value::row(9)));
            // Values too wide for a slot's 32 bits: kept aside, read back
            // whole, and a slot written again reuses its entry.
            let wide = [Value::small_int(-1), Value::small_int(1 << 40), Value::obj(u32::MAX), Value::str(1 << 28)];
            for v in wide {
                assert!(memo.push(v));
            }
            for (i, v) in wide.into_iter().enumerate() {
                assert_eq!(memo.get(5 * PAGE + 2 + i), Some(v));
            }
            assert!(memo.set(5 * PAGE + 2, Value::small_int(-7)));
            assert_eq!(memo.get(5 * PAGE + 2), Some(Value::small_int(-7)));
            assert!(memo.set(5 * PAGE + 2, Value::row(3)));
            assert_eq!(memo.get(5 * PAGE + 2), Some(Value::row(3)));
            assert_eq!(memo.wide.values.len(), wide.len());
            // The largest value that fits stays in its slot.
            assert!(memo.push(Value::small_int((1 << 28) - 1)));
            assert_eq!(memo.get(5 * PAGE + 6), Some(Value::small_int((1 << 28) - 1)));
            assert_eq!(memo.wide.values.len(), wide.len());
        }};
    }

    #[test]
    fn slots_keep_their_values_in_both_layouts() {
        check!(Flat::default());
        check!(Paged::default());
    }
}
