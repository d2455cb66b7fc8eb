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

use super::value::Value;

/// The memo as one vector, [`Value::UNSET`] where nothing was stored.
#[cfg(any(not(target_arch = "wasm32"), test))]
#[derive(Default)]
pub(super) struct Flat {
    slots: Vec<Value>,
}

#[cfg(any(not(target_arch = "wasm32"), test))]
impl Flat {
    /// Slots in use: one past the highest slot stored.
    #[inline(always)]
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Store `v` in the next slot.
    #[inline(always)]
    pub(super) fn push(&mut self, v: Value) {
        self.slots.push(v);
    }

    /// Make slots up to `len` exist (new ones unset).
    pub(super) fn grow_to(&mut self, len: usize) {
        if len > self.slots.len() {
            self.slots.resize(len, Value::UNSET);
        }
    }

    /// The value in `slot` ([`Value::UNSET`] if never stored), or `None`.
    #[inline(always)]
    pub(super) fn get(&self, slot: usize) -> Option<Value> {
        self.slots.get(slot).copied()
    }

    /// Store `v` in `slot` if the slot exists (below [`Flat::len`]).
    #[inline(always)]
    pub(super) fn set(&mut self, slot: usize, v: Value) {
        if let Some(held) = self.slots.get_mut(slot) {
            *held = v;
        }
    }
}

#[cfg(any(target_arch = "wasm32", test))]
mod paged {
    use super::Value;

    /// Slots per page (512 KiB of values).
    pub(super) const PAGE_BITS: u32 = 16;
    pub(super) const PAGE: usize = 1 << PAGE_BITS;
    const MASK: usize = PAGE - 1;

    /// One page: an array, so an index masked to the page needs no check.
    /// It holds [`Value::to_memo_bits`], where unset is zero.
    type Page = Box<[u64; PAGE]>;

    /// A fresh page, every slot unset: zeroed memory (`alloc_zeroed`), which
    /// an allocator may hand out without writing it (not measured in the
    /// browser).
    fn page() -> Page {
        match vec![0u64; PAGE].into_boxed_slice().try_into() {
            Ok(page) => page,
            // A vector of PAGE values is always a page.
            Err(_) => unreachable!("a page of {PAGE} slots"),
        }
    }

    /// The memo in pages, [`Value::UNSET`] where nothing was stored.
    #[derive(Default)]
    pub(in crate::pickle) struct Paged {
        pages: Vec<Page>,
        len: usize,
    }

    impl Paged {
        /// Slots in use: one past the highest slot stored.
        #[inline(always)]
        pub(in crate::pickle) fn len(&self) -> usize {
            self.len
        }

        /// Store `v` in the next slot.
        #[inline(always)]
        pub(in crate::pickle) fn push(&mut self, v: Value) {
            if self.len >> PAGE_BITS == self.pages.len() {
                self.pages.push(page());
            }
            if let Some(page) = self.pages.get_mut(self.len >> PAGE_BITS) {
                page[self.len & MASK] = v.to_memo_bits();
            }
            self.len += 1;
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
            Some(Value::from_memo_bits(self.pages.get(slot >> PAGE_BITS)?[slot & MASK]))
        }

        /// Store `v` in `slot` if the slot exists (below [`Paged::len`]).
        #[inline(always)]
        pub(in crate::pickle) fn set(&mut self, slot: usize, v: Value) {
            if slot < self.len
                && let Some(page) = self.pages.get_mut(slot >> PAGE_BITS)
            {
                page[slot & MASK] = v.to_memo_bits();
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
        }};
    }

    #[test]
    fn slots_keep_their_values_in_both_layouts() {
        check!(Flat::default());
        check!(Paged::default());
    }
}
