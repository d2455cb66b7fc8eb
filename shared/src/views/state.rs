//! The allocator's state at one instant: every segment with all of its
//! blocks (allocated, pending free, and the free ones between them),
//! requested against rounded sizes, and the fragmentation figures of that
//! instant. Rebuilt by rewinding the final layout
//! ([`crate::analysis::layout::Rewinder`]), so free blocks inside segments
//! are real, not inferred from the allocations alone.

use serde::{Deserialize, Serialize};

use crate::analysis::layout::Layout;
use crate::error::ViewError;
use crate::indexed::IndexedSnapshot;
use crate::snapshot::{BlockState, DeviceSnapshot};
use crate::timeline::Axis;

/// Query of the state view.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct StateParams {
    /// Device (default: the first).
    pub device: Option<u32>,
    /// Trace row: the state right after it. Default: the end of the trace.
    pub at: Option<u32>,
    /// Instead of `at`: the state at this x of `axis` (after the last row at
    /// or before it); before the first row, the state before the trace.
    pub x: Option<i64>,
    /// Axis of `x` (default `event`).
    pub axis: Option<Axis>,
}

/// What a block holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockKind {
    /// Handed out and in use.
    Allocated,
    /// Freed by the program, waiting for other streams' events.
    PendingFree,
    /// Free, cached by the allocator.
    Inactive,
}

impl BlockKind {
    fn of(state: BlockState) -> BlockKind {
        match state {
            BlockState::ActiveAllocated | BlockState::Unknown => BlockKind::Allocated,
            BlockState::ActivePendingFree => BlockKind::PendingFree,
            BlockState::Inactive => BlockKind::Inactive,
        }
    }
}

/// One block of a segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateBlock {
    /// Start address.
    pub addr: u64,
    /// Bytes of the block (the rounded size).
    pub size: u64,
    /// Bytes the program asked for (0 for free blocks).
    pub requested: u64,
    /// What it holds.
    pub kind: BlockKind,
    /// Interned stack of its allocation (0: none).
    pub stack: u32,
}

/// One segment with its blocks in address order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateSegment {
    /// Start address (lowest mapped byte of an expandable segment).
    pub addr: u64,
    /// Bytes reserved (mapped).
    pub size: u64,
    /// Raw `cudaStream_t` it serves.
    pub stream: u64,
    /// Serves the small pool (requests up to 1 MiB).
    pub small: bool,
    /// The memory pool it belongs to: `[0, 0]` the default pool, else a
    /// private pool (a CUDA graph's); see [`crate::pools`].
    pub pool: (i64, i64),
    /// An expandable segment: its blocks are mapped ranges, and gaps between
    /// them are unmapped address space.
    pub expandable: bool,
    /// Blocks by address.
    pub blocks: Vec<StateBlock>,
}

/// Fragmentation figures of one layout, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// Reserved from CUDA.
    pub reserved: u64,
    /// Allocated blocks, rounded sizes (PyTorch's `allocated_bytes`).
    pub allocated: u64,
    /// Requested bytes of active blocks (PyTorch's `requested_bytes`).
    pub requested: u64,
    /// Allocated and pending-free blocks (`active_bytes`).
    pub active: u64,
    /// Pending-free blocks.
    pub pending_free: u64,
    /// Free blocks (cached, not in use).
    pub inactive: u64,
    /// Free blocks of split, non-expandable segments (`inactive_split_bytes`).
    pub inactive_split: u64,
    /// Rounding waste: rounded minus requested, over allocated blocks.
    pub waste: u64,
    /// The largest free block.
    pub largest_free: u64,
    /// Its address, if there is a free block.
    pub largest_free_addr: Option<u64>,
    /// Number of free blocks.
    pub free_blocks: u64,
    /// Number of segments.
    pub segments: u64,
    /// `1 - largest_free / inactive`: 0 when all free bytes are one block.
    pub fragmentation: f64,
}

impl Figures {
    /// The figures of a rewound layout.
    pub fn of(layout: &Layout) -> Figures {
        let mut f = Figures { segments: layout.segments.len() as u64, ..Figures::default() };
        for seg in &layout.segments {
            f.reserved += seg.size;
            let split = seg.blocks.len() > 1 && !seg.expandable;
            for b in &seg.blocks {
                match BlockKind::of(b.state) {
                    BlockKind::Allocated => {
                        f.allocated += b.size;
                        f.requested += b.requested_size;
                        f.waste += b.size.saturating_sub(b.requested_size);
                    }
                    BlockKind::PendingFree => {
                        f.pending_free += b.size;
                        f.requested += b.requested_size;
                    }
                    BlockKind::Inactive => {
                        f.inactive += b.size;
                        f.free_blocks += 1;
                        if split {
                            f.inactive_split += b.size;
                        }
                        if b.size > f.largest_free {
                            f.largest_free = b.size;
                            f.largest_free_addr = Some(b.address);
                        }
                    }
                }
            }
        }
        f.active = f.allocated + f.pending_free;
        f.fragmentation = if f.inactive == 0 { 0.0 } else { 1.0 - f.largest_free as f64 / f.inactive as f64 };
        f
    }
}

/// The allocator's state after a row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocatorState {
    /// Device.
    pub device: u32,
    /// The state is right after this row; `None` before the first row.
    pub row: Option<u32>,
    /// Time of that row, where the trace has times.
    pub time_us: Option<i64>,
    /// Rows in the device's trace.
    pub rows: u32,
    /// Segments by address.
    pub segments: Vec<StateSegment>,
    /// The instant's figures.
    pub figures: Figures,
    /// Every block size is certain (see [`Layout::exact`]).
    pub exact: bool,
}

/// The device's trace and the row `p` asks for (`None`: before the trace).
pub(crate) fn resolve_row(
    device: &DeviceSnapshot,
    at: Option<u32>,
    x: Option<i64>,
    axis: Option<Axis>,
) -> Result<Option<u32>, ViewError> {
    let rows = device.trace.len();
    if let Some(r) = at {
        if r as usize >= rows {
            return Err(ViewError::BadRequest(format!("row {r} is past the trace's {rows} entries")));
        }
        return Ok(Some(r));
    }
    match (x, axis.unwrap_or(Axis::Event)) {
        (None, _) => Ok(rows.checked_sub(1).map(|r| r as u32)),
        (Some(x), axis) => {
            if axis == Axis::Time && !device.trace.has_time() {
                return Err(ViewError::NotFound(format!("time axis for device {} (no times)", device.device)));
            }
            Ok(rows_before(device, axis, x.saturating_add(1)).checked_sub(1).map(|r| r as u32))
        }
    }
}

/// How many rows lie before `x` on `axis` (rows whose x is `< x`).
/// Times are non-decreasing in real files, which the binary search needs.
pub(crate) fn rows_before(device: &DeviceSnapshot, axis: Axis, x: i64) -> usize {
    let rows = device.trace.len();
    match axis {
        Axis::Event => usize::try_from(x.max(0)).unwrap_or(usize::MAX).min(rows),
        Axis::Time => device.trace.times_us().partition_point(|&t| t < x),
    }
}

/// Segments and every block right after trace row `at` (or at `x`).
pub fn state(a: &IndexedSnapshot, p: &StateParams) -> Result<AllocatorState, ViewError> {
    let device = a.device_or_first(p.device)?;
    let d = a.snapshot.device(device).ok_or_else(|| ViewError::NotFound(format!("device {device}")))?;
    let row = resolve_row(d, p.at, p.x, p.axis)?;
    let layout = a.rewinder(device, row)?.rewind_to(row);
    let pools = a.pool_map(device)?;
    let figures = Figures::of(&layout);
    let segments = layout
        .segments
        .iter()
        .map(|s| StateSegment {
            addr: s.address,
            size: s.size,
            stream: s.stream,
            small: s.small,
            pool: pools.segment_pool(s.address, row),
            expandable: s.expandable,
            blocks: s
                .blocks
                .iter()
                .map(|b| StateBlock {
                    addr: b.address,
                    size: b.size,
                    requested: b.requested_size,
                    kind: BlockKind::of(b.state),
                    stack: b.stack,
                })
                .collect(),
        })
        .collect();
    Ok(AllocatorState {
        device,
        row,
        time_us: row.filter(|_| d.trace.has_time()).and_then(|r| d.trace.times_us().get(r as usize).copied()),
        rows: u32::try_from(d.trace.len()).unwrap_or(u32::MAX),
        segments,
        figures,
        exact: layout.exact,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{corpus, oracle};

    #[test]
    fn the_state_at_the_end_has_pytorchs_figures() {
        for name in ["streams", "oom_leak", "mlp_train_all", "compiled"] {
            let a = corpus(name);
            let o = oracle(name);
            let s = state(&a, &StateParams::default()).expect("state at the end");
            let f = s.figures;
            assert_eq!(f.reserved, o["reserved_bytes.all.current"], "{name} reserved");
            assert_eq!(f.allocated, o["allocated_bytes.all.current"], "{name} allocated");
            assert_eq!(f.active, o["active_bytes.all.current"], "{name} active");
            assert_eq!(f.requested, o["requested_bytes.all.current"], "{name} requested");
            assert_eq!(f.inactive_split, o["inactive_split_bytes.all.current"], "{name} inactive split");
            // Free blocks fill every segment's bytes the active ones leave.
            assert_eq!(f.inactive, f.reserved - f.active, "{name}");
            let largest = s.segments.iter().flat_map(|g| &g.blocks).filter(|b| b.kind == BlockKind::Inactive);
            assert_eq!(largest.map(|b| b.size).max().unwrap_or(0), f.largest_free, "{name}");
            for seg in &s.segments {
                assert_eq!(seg.blocks.iter().map(|b| b.size).sum::<u64>(), seg.size, "{name}: blocks tile");
            }
        }
    }

    #[test]
    fn segments_say_their_pool_and_graph_runs_keep_pytorchs_figures() {
        for name in ["graph_manual", "graph_shared_pool"] {
            let a = corpus(name);
            let o = oracle(name);
            let s = state(&a, &StateParams::default()).expect("state at the end");
            assert_eq!(s.figures.reserved, o["reserved_bytes.all.current"], "{name} reserved");
            assert_eq!(s.figures.allocated, o["allocated_bytes.all.current"], "{name} allocated");
            let d = a.snapshot.device(0).expect("device 0");
            // At the end, each segment's pool is the one the snapshot records.
            for seg in &s.segments {
                let recorded = d.segments.iter().find(|r| r.address == seg.addr).expect("a recorded segment");
                assert_eq!(seg.pool, recorded.pool_id, "{name} segment {:#x}", seg.addr);
            }
            assert!(s.segments.iter().any(|seg| seg.pool != (0, 0)), "{name}: a graph pool");
            // Before the trace nothing was reserved, in any pool.
            let before = state(&a, &StateParams { x: Some(-1), ..Default::default() }).expect("before");
            assert!(before.segments.is_empty());
        }
    }

    #[test]
    fn stepping_a_row_changes_the_state_by_that_entry() {
        let a = corpus("oom_leak");
        // Before the trace the allocator of this run held nothing.
        let before = state(&a, &StateParams { x: Some(-1), ..Default::default() }).expect("before");
        assert_eq!(before.row, None);
        let d = a.snapshot.device(0).expect("device 0");
        // The first alloc of the trace: one step adds its requested bytes.
        let first = (0..d.trace.len()).find(|&i| d.trace.action(i) == crate::snapshot::Action::Alloc).expect("alloc");
        let r = first as u32;
        let at = state(&a, &StateParams { at: Some(r), ..Default::default() }).expect("at");
        let prev = if r == 0 {
            before
        } else {
            state(&a, &StateParams { at: Some(r - 1), ..Default::default() }).expect("prev")
        };
        assert_eq!(at.figures.requested - prev.figures.requested, d.trace.sizes()[first]);
        let block =
            at.segments.iter().flat_map(|g| &g.blocks).find(|b| b.addr == d.trace.addrs()[first]).expect("block");
        assert_eq!(block.kind, BlockKind::Allocated);
        assert!(block.size >= block.requested && block.size % 512 == 0, "{block:?}");
        // The same instant asked by x on the event axis.
        let by_x = state(&a, &StateParams { x: Some(i64::from(r)), ..Default::default() }).expect("by x");
        assert_eq!(by_x.row, Some(r));
        assert!(matches!(
            state(&a, &StateParams { at: Some(1 << 30), ..Default::default() }),
            Err(ViewError::BadRequest(_))
        ));
    }
}
