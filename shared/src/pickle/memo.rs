//! The pickle memo: slot number → value, stored in pages of a fixed size.
//!
//! Why pages and not one `Vec`: PyTorch memoizes every trace entry, its
//! fresh strings and its frames list, about 2.7 slots per entry, so a 16M-entry
//! snapshot writes 43M slots. A `Vec` grown by doubling ends at 2^26 slots
//! (537 MB) and, while it grows, holds the old buffer beside the new one
//! (805 MB at once). In the browser's WebAssembly memory, which never
//! shrinks, that moment was the worker's peak. Pages of [`PAGE`] slots are
//! never copied and waste at most one partly filled page.
//!
//! Written here rather than taken from a crate: the memo needs push, get and
//! set by slot and nothing else, a few lines over `Vec<Box<[Value]>>`; the
//! segmented-vector crates (`segvec`) are little used and unmaintained.

use super::value::Value;

/// Slots per page (512 KiB of values).
const PAGE_BITS: u32 = 16;
const PAGE: usize = 1 << PAGE_BITS;
const MASK: usize = PAGE - 1;

/// One page: an array, so an index masked to the page needs no check.
type Page = Box<[Value; PAGE]>;

/// A fresh page, every slot unset.
fn page() -> Page {
    match vec![Value::UNSET; PAGE].into_boxed_slice().try_into() {
        Ok(page) => page,
        // A vector of PAGE values is always a page.
        Err(_) => unreachable!("a page of {PAGE} slots"),
    }
}

/// The memo's slots, [`Value::UNSET`] where nothing was stored.
#[derive(Default)]
pub(super) struct Memo {
    pages: Vec<Page>,
    len: usize,
}

impl Memo {
    /// Slots in use: one past the highest slot stored.
    #[inline(always)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Store `v` in the next slot.
    #[inline(always)]
    pub(super) fn push(&mut self, v: Value) {
        if self.len >> PAGE_BITS == self.pages.len() {
            self.pages.push(page());
        }
        if let Some(page) = self.pages.get_mut(self.len >> PAGE_BITS) {
            page[self.len & MASK] = v;
        }
        self.len += 1;
    }

    /// Make slots up to `len` exist (new ones unset).
    pub(super) fn grow_to(&mut self, len: usize) {
        // Pages are created unset, so only the length and the pages move.
        while self.pages.len() < len.div_ceil(PAGE) {
            self.pages.push(page());
        }
        self.len = self.len.max(len);
    }

    /// The value in `slot`: [`Value::UNSET`] for a slot never stored,
    /// `None` past the last page. (One check on the hot path: slots past
    /// the length within the last page read as unset, as they are.)
    #[inline(always)]
    pub(super) fn get(&self, slot: usize) -> Option<Value> {
        Some(self.pages.get(slot >> PAGE_BITS)?[slot & MASK])
    }

    /// The slot itself, if it exists.
    #[inline(always)]
    pub(super) fn get_mut(&mut self, slot: usize) -> Option<&mut Value> {
        if slot >= self.len {
            return None;
        }
        Some(&mut self.pages.get_mut(slot >> PAGE_BITS)?[slot & MASK])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_across_pages_keep_their_values() {
        let mut memo = Memo::default();
        for i in 0..(2 * PAGE as u32 + 5) {
            memo.push(Value::row(i));
        }
        assert_eq!(memo.len(), 2 * PAGE + 5);
        assert_eq!(memo.get(PAGE + 1), Some(Value::row(PAGE as u32 + 1)));
        assert_eq!(memo.get(2 * PAGE + 5), Some(Value::UNSET));
        assert_eq!(memo.get(3 * PAGE), None);
        // A sparse slot far ahead: the slots between exist and are unset.
        memo.grow_to(5 * PAGE + 1);
        assert_eq!(memo.get(4 * PAGE), Some(Value::UNSET));
        *memo.get_mut(5 * PAGE).expect("grown") = Value::row(7);
        assert_eq!(memo.get(5 * PAGE), Some(Value::row(7)));
        assert_eq!(memo.get(2), Some(Value::row(2)));
        // Pushing after a sparse growth continues at its end.
        memo.push(Value::row(9));
        assert_eq!(memo.get(5 * PAGE + 1), Some(Value::row(9)));
    }
}
