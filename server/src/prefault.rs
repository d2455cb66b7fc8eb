//! The binary's allocator: the system's, with the fresh pages of large
//! blocks faulted in on the spare core while the reader fills them.
//!
//! Why: reading a snapshot writes its output (the trace's columns, the memo)
//! into fresh memory, a page fault per 4 KiB on first touch, and on a
//! virtual machine each fault costs microseconds of kernel time (zeroing the
//! page, charging it, mapping it): 15 to 25% of `vramscope stats` in `perf`
//! (stop 36). The reader runs on one core; the other mostly waits. So each
//! large block's fresh part (a new block, or the part a `realloc` added;
//! the first half of it) is handed to a helper thread that asks the kernel to fault it in ahead
//! (`madvise(MADV_POPULATE_WRITE)`, Linux 5.14: the pages are made present
//! and writable, their contents untouched). The reader then writes to pages
//! already there.
//!
//! It is safe whatever the helper's timing: populating never changes a
//! byte. A block freed before the helper reaches it is either unmapped (the
//! call fails and the helper moves on) or back in the heap (its pages made
//! present a little early). Nothing here allocates, so the allocator never
//! calls itself: the queue is a fixed ring behind a `Mutex`, which on Linux
//! is a futex and allocates nothing. No crate does this; it is small.
//!
//! It is off until [`start`] is called (the commands that read a file, and
//! `serve`, whose uploads are parsed and indexed), and a no-op away from
//! Linux.

// The one other place the server allows `unsafe` (beside the index file's
// map): a global allocator is an unsafe trait, and `madvise` an unsafe call.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};

/// The system allocator, plus the helper's queue of fresh ranges.
pub(crate) struct Prefaulting;

// SAFETY: every call is the system allocator's; the queue only records
// addresses, and the helper only asks the kernel to fault them in.
unsafe impl GlobalAlloc for Prefaulting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc(layout) };
        imp::fresh(p, 0, layout.size());
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc_zeroed(layout) };
        imp::fresh(p, 0, layout.size());
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        imp::fresh(p, layout.size(), new_size);
        p
    }
}

/// Start the helper thread: from now on, large blocks' fresh pages are
/// faulted in on it. Idempotent.
pub(crate) fn start() {
    imp::start();
}

#[cfg(target_os = "linux")]
mod imp {
    use std::ptr::NonNull;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Condvar, Mutex, PoisonError};

    use nix::sys::mman::{MmapAdvise, madvise};

    /// Blocks smaller than this are left alone: the system allocator hands
    /// them out from pages already in use, mostly.
    const LARGE: usize = 1 << 20;
    /// The helper faults a range in steps of this many bytes.
    const STEP: usize = 1 << 20;
    /// Ranges waiting; when full, new ones are dropped (the reader then
    /// faults those pages itself, as without the helper).
    const SLOTS: usize = 64;
    const PAGE: usize = 4096;

    static ON: AtomicBool = AtomicBool::new(false);
    static QUEUE: Mutex<Ring> = Mutex::new(Ring { ranges: [(0, 0); SLOTS], head: 0, len: 0 });
    static WAKE: Condvar = Condvar::new();

    struct Ring {
        ranges: [(usize, usize); SLOTS],
        head: usize,
        len: usize,
    }

    pub(super) fn start() {
        if ON.swap(true, Ordering::Relaxed) {
            return;
        }
        let spawned = std::thread::Builder::new().name("prefault".into()).spawn(helper);
        if spawned.is_err() {
            ON.store(false, Ordering::Relaxed);
        }
    }

    /// `p[from..to]` was just handed out and has not been written.
    #[inline]
    pub(super) fn fresh(p: *mut u8, from: usize, to: usize) {
        if to < LARGE || to <= from || p.is_null() || !ON.load(Ordering::Relaxed) {
            return;
        }
        // Whole pages only: the partial ones at the ends are shared.
        let start = (p as usize + from).next_multiple_of(PAGE);
        // Only the first half of what was added: a vector that doubled
        // fills its new half over time, and may never fill it all. Faulting
        // it all in made the peak RSS of `stats` 1.22x the file, against
        // 1.01x for half (and 0.98x without the helper); the time gained was
        // about the same (stop 37: 4% at the median of 30 alternations).
        let to = from + (to - from) / 2;
        let end = (p as usize + to) & !(PAGE - 1);
        if end <= start {
            return;
        }
        let mut ring = QUEUE.lock().unwrap_or_else(PoisonError::into_inner);
        if ring.len == SLOTS {
            return;
        }
        let at = (ring.head + ring.len) % SLOTS;
        ring.ranges[at] = (start, end);
        ring.len += 1;
        drop(ring);
        WAKE.notify_one();
    }

    fn helper() {
        loop {
            let (start, end) = {
                let mut ring = QUEUE.lock().unwrap_or_else(PoisonError::into_inner);
                while ring.len == 0 {
                    ring = WAKE.wait(ring).unwrap_or_else(PoisonError::into_inner);
                }
                let range = ring.ranges[ring.head];
                ring.head = (ring.head + 1) % SLOTS;
                ring.len -= 1;
                range
            };
            let mut at = start;
            while at < end {
                let len = STEP.min(end - at);
                let Some(addr) = NonNull::new(at as *mut std::ffi::c_void) else { break };
                // SAFETY: MADV_POPULATE_WRITE changes no byte of the range;
                // on a range no longer mapped it fails, and we stop there.
                match unsafe { madvise(addr, len, MmapAdvise::MADV_POPULATE_WRITE) } {
                    Ok(()) => at += len,
                    // A kernel before 5.14: nothing to do, ever.
                    Err(nix::errno::Errno::EINVAL) => {
                        ON.store(false, Ordering::Relaxed);
                        return;
                    }
                    Err(_) => break,
                }
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub(super) fn start() {}
    #[inline]
    pub(super) fn fresh(_: *mut u8, _: usize, _: usize) {}
}

#[cfg(test)]
mod tests {
    /// With the helper on, large blocks made, grown, shrunk and freed keep
    /// every byte written to them, whatever the helper does meanwhile (this
    /// test binary runs on the same global allocator as the CLI).
    #[test]
    fn large_blocks_keep_their_bytes_while_the_helper_faults_them_in() {
        super::start();
        super::start();
        let mut kept = Vec::new();
        for round in 0..8u64 {
            let mut v: Vec<u64> = Vec::new();
            for i in 0..(1u64 << 20) {
                v.push(i ^ round);
            }
            let zeroed = vec![0u8; 8 << 20];
            assert!(zeroed.iter().all(|&b| b == 0), "round {round}: a zeroed block is not zero");
            assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64 ^ round), "round {round}: bytes changed");
            v.truncate(1000);
            v.shrink_to_fit();
            assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64 ^ round), "round {round}: shrunk");
            kept.push(v);
        }
        drop(kept);
    }
}
