//! Intervals built from a trace: each allocation from `alloc` to
//! `free_completed` (with the pending window after `free_requested`), each
//! segment from `segment_alloc`/`segment_map` to `segment_free`/`segment_unmap`.
//!
//! A wrapped ring buffer (or recording started late) leaves memory whose
//! `alloc` is not in the trace. Such allocations are "ghosts": known from a
//! free in the trace or from a live block in the final segments, with no start.
//! PyTorch's viewer reconstructs them the same way; here they are explicit.

use rustc_hash::FxHashMap;

use crate::column::Column;
use crate::index_file::{ColumnRef, IndexFileError, Reader, Writer};
use crate::snapshot::{Action, DeviceSnapshot, Snapshot, StackId};

/// A trace row, or none: an `Option<u32>` with `u32::MAX` for `None`, so
/// that allocations are plain numbers an index file can hold.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
pub struct OptRow(u32);

impl OptRow {
    /// No row.
    pub const NONE: OptRow = OptRow(u32::MAX);

    /// Row `r` (`u32::MAX` is no row).
    pub fn some(r: u32) -> OptRow {
        OptRow(r)
    }

    /// The row, if any.
    #[inline]
    pub fn get(self) -> Option<u32> {
        (self.0 != u32::MAX).then_some(self.0)
    }

    /// Whether there is no row.
    pub fn is_none(self) -> bool {
        self.0 == u32::MAX
    }

    /// Whether there is a row.
    pub fn is_some(self) -> bool {
        !self.is_none()
    }
}

impl From<Option<u32>> for OptRow {
    fn from(r: Option<u32>) -> OptRow {
        r.map_or(OptRow::NONE, OptRow)
    }
}

impl std::fmt::Debug for OptRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// One allocation's life, in trace rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub struct Allocation {
    /// Block address.
    pub addr: u64,
    /// Requested size in bytes.
    pub size: u64,
    /// Stack of the allocation (or of its free, for ghosts known only from a free).
    pub stack: StackId,
    /// Row of the `alloc`; none for a ghost allocated before the trace starts.
    pub alloc_row: OptRow,
    /// Row of the `free_requested`, if freed.
    pub free_requested_row: OptRow,
    /// Row of the `free_completed`; none while still alive at the end.
    pub free_completed_row: OptRow,
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
pub struct DeviceIntervals {
    /// CUDA device index.
    pub device: u32,
    /// Allocations, in order of their first appearance (ghosts alive from the
    /// start and never freed come last).
    pub allocations: Column<Allocation>,
    /// Segments and mapped ranges, in order of first appearance.
    pub segments: Vec<SegmentSpan>,
}

impl DeviceIntervals {
    /// Build the intervals of a device.
    pub fn build(device: &DeviceSnapshot) -> DeviceIntervals {
        let trace = &device.trace;
        // One allocation per `alloc` row, plus the few ghosts: sized up
        // front, since doubling a 170 MB list holds 400 MB at once.
        let allocs = (0..trace.len()).filter(|&i| trace.action(i) == Action::Alloc).count();
        let mut allocations: Vec<Allocation> = Vec::with_capacity(allocs);
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
                        alloc_row: OptRow::some(row),
                        free_requested_row: OptRow::NONE,
                        free_completed_row: OptRow::NONE,
                    });
                }
                Action::FreeRequested => match open.get(&addr) {
                    Some(&k) => allocations[k].free_requested_row = OptRow::some(row),
                    None => {
                        open.insert(addr, allocations.len());
                        allocations.push(Allocation {
                            addr,
                            size,
                            stack,
                            alloc_row: OptRow::NONE,
                            free_requested_row: OptRow::some(row),
                            free_completed_row: OptRow::NONE,
                        });
                    }
                },
                Action::FreeCompleted => match open.remove(&addr) {
                    Some(k) => allocations[k].free_completed_row = OptRow::some(row),
                    None => allocations.push(Allocation {
                        addr,
                        size,
                        stack,
                        alloc_row: OptRow::NONE,
                        free_requested_row: OptRow::NONE,
                        free_completed_row: OptRow::some(row),
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
                        alloc_row: OptRow::NONE,
                        free_requested_row: OptRow::NONE,
                        free_completed_row: OptRow::NONE,
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
        DeviceIntervals { device: device.device, allocations: allocations.into(), segments }
    }

    /// Allocations alive before the trace's first entry.
    pub fn ghosts(&self) -> impl Iterator<Item = &Allocation> {
        self.allocations.iter().filter(|a| a.is_ghost())
    }
}

/// Intervals of every device of a snapshot.
#[derive(Clone, Debug, Default)]
pub struct SnapshotIntervals {
    /// One per device, in the snapshot's device order.
    pub devices: Vec<DeviceIntervals>,
}

impl SnapshotIntervals {
    /// Build the intervals of every device.
    pub fn build(snapshot: &Snapshot) -> SnapshotIntervals {
        SnapshotIntervals { devices: snapshot.devices.iter().map(DeviceIntervals::build).collect() }
    }
}

/// "No row" in an index file's row columns.
const NO_ROW: u32 = u32::MAX;

/// Where a device's intervals lie in an index file.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct DeviceIndexHeader {
    device: u32,
    /// The allocations as they are in memory (`Allocation` is plain numbers).
    allocations: ColumnRef,
    /// Segments: addr, size, start and end rows, mapped (0 or 1).
    seg_addr: ColumnRef,
    seg_size: ColumnRef,
    seg_rows: ColumnRef,
    seg_mapped: ColumnRef,
}

impl SnapshotIntervals {
    /// Write the intervals to an index file.
    pub(crate) fn save<W: std::io::Write>(&self, w: &mut Writer<W>) -> std::io::Result<Vec<DeviceIndexHeader>> {
        let row = |r: Option<u32>| r.unwrap_or(NO_ROW);
        let mut out = Vec::new();
        for d in &self.devices {
            let s = &d.segments;
            out.push(DeviceIndexHeader {
                device: d.device,
                allocations: w.column(&d.allocations)?,
                seg_addr: w.column(&s.iter().map(|s| s.addr).collect::<Vec<_>>())?,
                seg_size: w.column(&s.iter().map(|s| s.size).collect::<Vec<_>>())?,
                seg_rows: w.column(&s.iter().map(|s| [row(s.start_row), row(s.end_row)]).collect::<Vec<_>>())?,
                seg_mapped: w.column(&s.iter().map(|s| u8::from(s.mapped)).collect::<Vec<_>>())?,
            });
        }
        Ok(out)
    }

    /// Read the intervals of an index file: the allocations in place, the
    /// (few) segments copied.
    pub(crate) fn load(r: &Reader, headers: &[DeviceIndexHeader]) -> Result<SnapshotIntervals, IndexFileError> {
        let row = |r: u32| (r != NO_ROW).then_some(r);
        let mut devices = Vec::with_capacity(headers.len());
        for h in headers {
            let allocations = r.column::<Allocation>(&h.allocations)?;
            let addr = r.column::<u64>(&h.seg_addr)?;
            let n = addr.len();
            let size = r.column_of::<u64>(&h.seg_size, n)?;
            let rows = r.column_of::<[u32; 2]>(&h.seg_rows, n)?;
            let mapped = r.column_of::<u8>(&h.seg_mapped, n)?;
            let segments = (0..n)
                .map(|i| SegmentSpan {
                    addr: addr[i],
                    size: size[i],
                    start_row: row(rows[i][0]),
                    end_row: row(rows[i][1]),
                    mapped: mapped[i] != 0,
                })
                .collect();
            devices.push(DeviceIntervals { device: h.device, allocations, segments });
        }
        Ok(SnapshotIntervals { devices })
    }
}
