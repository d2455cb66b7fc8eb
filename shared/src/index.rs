//! Intervals built from a trace: each allocation from `alloc` to
//! `free_completed` (with the pending window after `free_requested`), each
//! segment from `segment_alloc`/`segment_map` to `segment_free`/`segment_unmap`.
//!
//! A wrapped ring buffer (or recording started late) leaves memory whose
//! `alloc` is not in the trace. Such allocations are "ghosts": known from a
//! free in the trace or from a live block in the final segments, with no start.
//! PyTorch's viewer reconstructs them the same way; here they are explicit.

use rustc_hash::FxHashMap;

use crate::snapshot::{Action, DeviceSnapshot, Snapshot, StackId};

/// One allocation's life, in trace rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// Block address.
    pub addr: u64,
    /// Requested size in bytes.
    pub size: u64,
    /// Stack of the allocation (or of its free, for ghosts known only from a free).
    pub stack: StackId,
    /// Row of the `alloc`; `None` for a ghost allocated before the trace starts.
    pub alloc_row: Option<u32>,
    /// Row of the `free_requested`, if freed.
    pub free_requested_row: Option<u32>,
    /// Row of the `free_completed`; `None` while still alive at the end.
    pub free_completed_row: Option<u32>,
}

impl Allocation {
    /// Allocated before the trace's first entry.
    pub fn is_ghost(&self) -> bool {
        self.alloc_row.is_none()
    }

    /// Still allocated (or pending free) when the snapshot was taken.
    pub fn alive_at_end(&self) -> bool {
        self.free_completed_row.is_none()
    }
}

/// One segment's (or mapped range's) life, in trace rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentSpan {
    /// Start address.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// Row of `segment_alloc`/`segment_map`; `None` if it predates the trace.
    pub start_row: Option<u32>,
    /// Row of `segment_free`/`segment_unmap`; `None` if it lives at the end.
    pub end_row: Option<u32>,
    /// A mapped range of an expandable segment rather than a cudaMalloc.
    pub mapped: bool,
}

/// The intervals of one device.
#[derive(Clone, Debug, Default)]
pub struct DeviceIndex {
    /// CUDA device index.
    pub device: u32,
    /// Allocations, in order of their first appearance (ghosts alive from the
    /// start and never freed come last).
    pub allocations: Vec<Allocation>,
    /// Segments and mapped ranges, in order of first appearance.
    pub segments: Vec<SegmentSpan>,
}

impl DeviceIndex {
    /// Build the intervals of a device.
    pub fn build(device: &DeviceSnapshot) -> DeviceIndex {
        let trace = &device.trace;
        let mut allocations: Vec<Allocation> = Vec::new();
        let mut segments: Vec<SegmentSpan> = Vec::new();
        let mut open: FxHashMap<u64, usize> = FxHashMap::default();
        let mut open_segments: FxHashMap<u64, usize> = FxHashMap::default();
        let (addrs, sizes, stacks) = (trace.addrs(), trace.sizes(), trace.stacks());
        for i in 0..trace.len() {
            let row = i as u32;
            let (addr, size, stack) = (addrs[i], sizes[i], stacks[i]);
            match trace.action(i) {
                Action::Alloc => {
                    // An address still open means a lost free; the new alloc wins.
                    open.insert(addr, allocations.len());
                    allocations.push(Allocation {
                        addr,
                        size,
                        stack,
                        alloc_row: Some(row),
                        free_requested_row: None,
                        free_completed_row: None,
                    });
                }
                Action::FreeRequested => match open.get(&addr) {
                    Some(&k) => allocations[k].free_requested_row = Some(row),
                    None => {
                        open.insert(addr, allocations.len());
                        allocations.push(Allocation {
                            addr,
                            size,
                            stack,
                            alloc_row: None,
                            free_requested_row: Some(row),
                            free_completed_row: None,
                        });
                    }
                },
                Action::FreeCompleted => match open.remove(&addr) {
                    Some(k) => allocations[k].free_completed_row = Some(row),
                    None => allocations.push(Allocation {
                        addr,
                        size,
                        stack,
                        alloc_row: None,
                        free_requested_row: None,
                        free_completed_row: Some(row),
                    }),
                },
                action @ (Action::SegmentAlloc | Action::SegmentMap) => {
                    open_segments.insert(addr, segments.len());
                    segments.push(SegmentSpan {
                        addr,
                        size,
                        start_row: Some(row),
                        end_row: None,
                        mapped: action == Action::SegmentMap,
                    });
                }
                action @ (Action::SegmentFree | Action::SegmentUnmap) => match open_segments.remove(&addr) {
                    Some(k) => segments[k].end_row = Some(row),
                    None => segments.push(SegmentSpan {
                        addr,
                        size,
                        start_row: None,
                        end_row: Some(row),
                        mapped: action == Action::SegmentUnmap,
                    }),
                },
                Action::Snapshot | Action::Oom | Action::Other => {}
            }
        }
        // Live blocks of the final state with no open allocation were
        // allocated before the trace began and never freed within it.
        for seg in &device.segments {
            for block in seg.blocks.iter().filter(|b| b.state.is_active()) {
                if !open.contains_key(&block.address) {
                    allocations.push(Allocation {
                        addr: block.address,
                        size: block.requested_size,
                        stack: block.stack,
                        alloc_row: None,
                        free_requested_row: None,
                        free_completed_row: None,
                    });
                }
            }
            if !seg.is_expandable && !open_segments.contains_key(&seg.address) {
                segments.push(SegmentSpan {
                    addr: seg.address,
                    size: seg.total_size,
                    start_row: None,
                    end_row: None,
                    mapped: false,
                });
            }
        }
        DeviceIndex { device: device.device, allocations, segments }
    }

    /// Allocations alive before the trace's first entry.
    pub fn ghosts(&self) -> impl Iterator<Item = &Allocation> {
        self.allocations.iter().filter(|a| a.is_ghost())
    }
}

/// Intervals of every device of a snapshot.
#[derive(Clone, Debug, Default)]
pub struct SnapshotIndex {
    /// One per device, in the snapshot's device order.
    pub devices: Vec<DeviceIndex>,
}

impl SnapshotIndex {
    /// Build the intervals of every device.
    pub fn build(snapshot: &Snapshot) -> SnapshotIndex {
        SnapshotIndex { devices: snapshot.devices.iter().map(DeviceIndex::build).collect() }
    }
}
