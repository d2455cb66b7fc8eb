//! The segment timeline ("segment split"): for each column of a window,
//! every segment alive then and how its bytes split into allocated blocks,
//! rounding waste inside them, pending frees and free (inactive) blocks.
//!
//! The answer is bounded by the screen, not the trace: a window is cut
//! into at most [`MAX_COLUMNS`] columns and each column shows the layout
//! right after its last row, rewound from the final segments
//! ([`crate::analysis::layout::Rewinder`]). One rewinder walks the columns
//! from the last to the first, starting at the device's nearest layout
//! checkpoint ([`IndexedSnapshot::rewinder`]), so a query costs the rows of its
//! window plus one layout per column; the first query of a device pays two
//! passes over the trace to build the checkpoints.
//!
//! A segment whose figures stay the same over neighbouring columns is one
//! cell spanning them ([`SegmentCell::columns`]). Most segments sit still
//! most of the time: on the corpus's `gpt_long` (140 segments, 450
//! columns) a window had 63,000 segment × column figures but 1,254 runs,
//! and the page's decoding of the 7.5 MB answer they made had cost 40 to
//! 50 ms, three frames.

use serde::{Deserialize, Serialize};

use super::state::rows_before;
use crate::analysis::layout::Layout;
use crate::error::ViewError;
use crate::indexed::IndexedSnapshot;
use crate::snapshot::BlockState;
use crate::timeline::Axis;

/// The most columns a window is cut into.
pub const MAX_COLUMNS: u32 = 600;

/// Query of the segment timeline (the same window fields as the timeline).
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct SegmentsParams {
    /// Device (default: the first).
    pub device: Option<u32>,
    /// `time` (default when the trace has times) or `event`.
    pub axis: Option<Axis>,
    /// Window start (default: the trace's first x).
    pub start: Option<i64>,
    /// Window end (default: the trace's end).
    pub end: Option<i64>,
    /// Columns (default 200, at most [`MAX_COLUMNS`]).
    pub columns: Option<u32>,
}

/// One column of a window: `[x0, x1)` and the row whose state it shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    /// First x of the column.
    pub x0: i64,
    /// First x past it.
    pub x1: i64,
    /// The state shown is right after this row; `None`: before the trace.
    pub row: Option<u32>,
}

/// A segment that appears somewhere in the window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentLane {
    /// Start address.
    pub addr: u64,
    /// Raw `cudaStream_t`.
    pub stream: u64,
    /// Small pool.
    pub small: bool,
    /// Expandable: its size is the bytes mapped at each column.
    pub expandable: bool,
    /// Largest size it had in the window.
    pub max_size: u64,
}

/// One segment over one run of columns where its figures do not change,
/// in bytes.
///
/// In JSON a cell is an array of its fields in the order below, `[column,
/// columns, segment, size, allocated, waste, pending_free, inactive,
/// blocks]`: a window has up to tens of thousands of them, and without
/// the field names the answer is a third as long and decodes in half the
/// time (the page decodes it between two frames).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "CellFields", from = "CellFields")]
pub struct SegmentCell {
    /// Index into [`SegmentsAnswer::columns`] of the run's first column.
    pub column: u32,
    /// Columns in the run: the figures hold from `column` to
    /// `column + columns - 1`.
    pub columns: u32,
    /// Index into [`SegmentsAnswer::segments`].
    pub segment: u32,
    /// Bytes reserved (mapped).
    pub size: u64,
    /// Allocated blocks, rounded sizes (waste included).
    pub allocated: u64,
    /// Of `allocated`, rounding waste (rounded minus requested).
    pub waste: u64,
    /// Pending-free blocks.
    pub pending_free: u64,
    /// Free blocks.
    pub inactive: u64,
    /// Blocks in the segment.
    pub blocks: u32,
}

/// A [`SegmentCell`] on the wire: its fields in order, as an array.
#[derive(Serialize, Deserialize)]
struct CellFields(u32, u32, u32, u64, u64, u64, u64, u64, u32);

impl From<SegmentCell> for CellFields {
    fn from(c: SegmentCell) -> Self {
        CellFields(c.column, c.columns, c.segment, c.size, c.allocated, c.waste, c.pending_free, c.inactive, c.blocks)
    }
}

impl From<CellFields> for SegmentCell {
    fn from(f: CellFields) -> Self {
        let CellFields(column, columns, segment, size, allocated, waste, pending_free, inactive, blocks) = f;
        SegmentCell { column, columns, segment, size, allocated, waste, pending_free, inactive, blocks }
    }
}

/// The segment timeline of a window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentsAnswer {
    /// Device.
    pub device: u32,
    /// x axis.
    pub axis: Axis,
    /// Window start.
    pub start: i64,
    /// Window end.
    pub end: i64,
    /// The columns, left to right.
    pub columns: Vec<Column>,
    /// The segments, by address.
    pub segments: Vec<SegmentLane>,
    /// Segment × column figures where the segment exists, a run of
    /// columns with the same figures as one cell; ordered by first column,
    /// then segment.
    pub cells: Vec<SegmentCell>,
    /// Highest reserved bytes over the columns.
    pub max_reserved: u64,
    /// Every block size is certain.
    pub exact: bool,
}

/// A window on a device's axis, resolved from the query's defaults.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    pub(crate) device: u32,
    pub(crate) axis: Axis,
    pub(crate) start: i64,
    pub(crate) end: i64,
}

/// The window asked for, with the timeline's defaults and errors.
pub(crate) fn span(
    a: &IndexedSnapshot,
    device: Option<u32>,
    axis: Option<Axis>,
    start: Option<i64>,
    end: Option<i64>,
) -> Result<Span, ViewError> {
    let device = a.device_or_first(device)?;
    let has_time = a.snapshot.device(device).is_some_and(|d| d.trace.has_time());
    let axis = axis.unwrap_or(if has_time { Axis::Time } else { Axis::Event });
    let (first, last) = a
        .timeline
        .extent(device, axis)
        .ok_or_else(|| ViewError::NotFound(format!("{axis:?} axis for device {device} (no trace, or no times)")))?;
    let (start, end) = (start.unwrap_or(first), end.unwrap_or(last));
    if end <= start {
        return Err(ViewError::BadRequest(format!("empty window: start {start} >= end {end}")));
    }
    Ok(Span { device, axis, start, end })
}

/// Cut `span` into `n` columns (fewer when the window is narrower) and call
/// `each` with every column and its layout, from the last column to the
/// first (the order a rewinder goes). Returns the columns left to right.
pub(crate) fn for_each_column(
    a: &IndexedSnapshot,
    span: Span,
    n: u32,
    mut each: impl FnMut(usize, &Column, &Layout),
) -> Result<Vec<Column>, ViewError> {
    let d = a.snapshot.device(span.device).ok_or_else(|| ViewError::NotFound(format!("device {}", span.device)))?;
    let width = (span.end - span.start) as u128;
    let n = u128::from(n.clamp(1, MAX_COLUMNS)).min(width.max(1));
    let edge = |i: u128| span.start + (width * i / n) as i64;
    let columns: Vec<Column> = (0..n)
        .map(|i| {
            let (x0, x1) = (edge(i), edge(i + 1));
            let row = rows_before(d, span.axis, x1).checked_sub(1).map(|r| r as u32);
            Column { x0, x1, row }
        })
        .collect();
    let mut rewinder = a.rewinder(span.device, columns.last().and_then(|c| c.row))?;
    let mut last: Option<(Option<u32>, Layout)> = None;
    for (i, c) in columns.iter().enumerate().rev() {
        // Neighbouring columns often show the same row: rewind once.
        if last.as_ref().is_none_or(|(row, _)| *row != c.row) {
            last = Some((c.row, rewinder.rewind_to(c.row)));
        }
        if let Some((_, layout)) = &last {
            each(i, c, layout);
        }
    }
    Ok(columns)
}

/// The segments of each column of a window and how each one is split.
pub fn segments(a: &IndexedSnapshot, p: &SegmentsParams) -> Result<SegmentsAnswer, ViewError> {
    let span = span(a, p.device, p.axis, p.start, p.end)?;
    let mut lanes: Vec<SegmentLane> = Vec::new();
    let mut lane_of = std::collections::HashMap::<u64, u32>::new();
    let mut cells = Vec::new();
    let mut exact = true;
    let mut max_reserved = 0u64;
    let columns = for_each_column(a, span, p.columns.unwrap_or(200), |i, _, layout| {
        exact &= layout.exact;
        max_reserved = max_reserved.max(layout.reserved());
        for seg in &layout.segments {
            let lane = *lane_of.entry(seg.address).or_insert_with(|| {
                lanes.push(SegmentLane {
                    addr: seg.address,
                    stream: seg.stream,
                    small: seg.small,
                    expandable: seg.expandable,
                    max_size: 0,
                });
                (lanes.len() - 1) as u32
            });
            let l = &mut lanes[lane as usize];
            l.max_size = l.max_size.max(seg.size);
            let mut cell = SegmentCell {
                column: i as u32,
                columns: 1,
                segment: lane,
                size: seg.size,
                allocated: 0,
                waste: 0,
                pending_free: 0,
                inactive: 0,
                blocks: seg.blocks.len() as u32,
            };
            for b in &seg.blocks {
                match b.state {
                    BlockState::ActivePendingFree => cell.pending_free += b.size,
                    BlockState::Inactive => cell.inactive += b.size,
                    BlockState::ActiveAllocated | BlockState::Unknown => {
                        cell.allocated += b.size;
                        cell.waste += b.size.saturating_sub(b.requested_size);
                    }
                }
            }
            cells.push(cell);
        }
    })?;
    // Lanes by address, cells left to right and bottom to top.
    let mut order: Vec<u32> = (0..lanes.len() as u32).collect();
    order.sort_by_key(|&i| lanes[i as usize].addr);
    let mut rank = vec![0u32; lanes.len()];
    for (new, &old) in order.iter().enumerate() {
        rank[old as usize] = new as u32;
    }
    for c in &mut cells {
        c.segment = rank[c.segment as usize];
    }
    cells.sort_by_key(|c| (c.column, c.segment));
    let cells = runs(cells, lanes.len());
    let segments = order.iter().map(|&i| lanes[i as usize].clone()).collect();
    Ok(SegmentsAnswer {
        device: span.device,
        axis: span.axis,
        start: span.start,
        end: span.end,
        columns,
        segments,
        cells,
        max_reserved,
        exact,
    })
}

/// `cells` (one per segment and column, ordered by column then segment)
/// with each run of neighbouring columns where a segment's figures stay the
/// same made one cell; the order is kept.
fn runs(cells: Vec<SegmentCell>, segments: usize) -> Vec<SegmentCell> {
    let same = |a: &SegmentCell, b: &SegmentCell| {
        (a.size, a.allocated, a.waste, a.pending_free, a.inactive, a.blocks)
            == (b.size, b.allocated, b.waste, b.pending_free, b.inactive, b.blocks)
    };
    let mut out: Vec<SegmentCell> = Vec::with_capacity(cells.len() / 4);
    // Per segment: its last run in `out`.
    let mut last: Vec<Option<usize>> = vec![None; segments];
    for cell in cells {
        let slot = &mut last[cell.segment as usize];
        if let Some(run) = slot.map(|i| &mut out[i])
            && run.column + run.columns == cell.column
            && same(run, &cell)
        {
            run.columns += 1;
            continue;
        }
        *slot = Some(out.len());
        out.push(cell);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{corpus, oracle};

    #[test]
    fn columns_tile_the_window_and_cells_add_up() {
        let a = corpus("oom_leak");
        let o = oracle("oom_leak");
        let answer =
            segments(&a, &SegmentsParams { axis: Some(Axis::Event), columns: Some(100), ..Default::default() })
                .expect("segments");
        assert_eq!(answer.columns.len(), 100);
        assert_eq!((answer.start, answer.end), (0, 6680));
        assert_eq!(answer.columns[0].x0, 0);
        assert_eq!(answer.columns[99].x1, 6680);
        assert!(answer.columns.windows(2).all(|w| w[0].x1 == w[1].x0));
        assert_eq!(answer.columns[99].row, Some(6679));
        for c in &answer.cells {
            assert_eq!(c.allocated + c.pending_free + c.inactive, c.size, "{c:?}");
            assert!(c.waste <= c.allocated);
        }
        // The last column is the snapshot's own state: 41 segments, and
        // reserved as PyTorch counted it; the peak is PyTorch's peak.
        let last: Vec<_> = answer.cells.iter().filter(|c| c.column + c.columns == 100).collect();
        assert_eq!(last.len(), 41);
        assert_eq!(last.iter().map(|c| c.size).sum::<u64>(), o["reserved_bytes.all.current"]);
        let allocated: u64 = last.iter().map(|c| c.allocated).sum();
        assert_eq!(allocated, o["allocated_bytes.all.current"]);
        assert!(answer.max_reserved <= o["reserved_bytes.all.peak"]);
        assert!(answer.segments.windows(2).all(|w| w[0].addr < w[1].addr));
    }

    #[test]
    fn runs_merge_only_neighbouring_columns_with_the_same_figures() {
        let cell = |column, segment, allocated| SegmentCell {
            column,
            columns: 1,
            segment,
            size: 100,
            allocated,
            waste: 0,
            pending_free: 0,
            inactive: 100 - allocated,
            blocks: 2,
        };
        // Segment 0: the same in columns 0-2, changed in 3. Segment 1: the
        // same figures in columns 0 and 2, absent from column 1.
        let cells = vec![cell(0, 0, 10), cell(0, 1, 5), cell(1, 0, 10), cell(2, 0, 10), cell(2, 1, 5), cell(3, 0, 20)];
        let merged = runs(cells, 2);
        let shape: Vec<(u32, u32, u32)> = merged.iter().map(|c| (c.column, c.columns, c.segment)).collect();
        assert_eq!(shape, [(0, 3, 0), (0, 1, 1), (2, 1, 1), (3, 1, 0)]);
        // On the wire: an array of the fields, in order, and back.
        let json = serde_json::to_string(&merged[0]).expect("json");
        assert_eq!(json, "[0,3,0,100,10,0,0,90,2]");
        assert_eq!(serde_json::from_str::<SegmentCell>(&json).expect("parses"), merged[0]);
    }

    #[test]
    fn runs_cover_each_segment_and_column_once_and_add_up_to_reserved() {
        for name in ["oom_leak", "mlp_train_all", "streams", "compiled"] {
            let a = corpus(name);
            let params = SegmentsParams { axis: Some(Axis::Event), columns: Some(300), ..Default::default() };
            let answer = segments(&a, &params).expect("segments");
            let n = answer.columns.len();
            let mut covered = vec![vec![false; answer.segments.len()]; n];
            let mut reserved = vec![0u64; n];
            for c in &answer.cells {
                assert!(c.columns >= 1 && (c.column + c.columns) as usize <= n, "{name}: {c:?}");
                for col in c.column..c.column + c.columns {
                    let seen = &mut covered[col as usize][c.segment as usize];
                    assert!(!*seen, "{name}: segment {} twice in column {col}", c.segment);
                    *seen = true;
                    reserved[col as usize] += c.size;
                }
            }
            // Every column's cells add up to its layout's reserved bytes.
            let span = span(&a, None, Some(Axis::Event), None, None).expect("span");
            let mut expected = vec![0u64; n];
            for_each_column(&a, span, 300, |i, _, layout| expected[i] = layout.reserved()).expect("columns");
            assert_eq!(reserved, expected, "{name}");
            assert!(answer.cells.len() < n * answer.segments.len(), "{name}: runs merge something");
        }
    }

    #[test]
    fn a_window_narrower_than_its_columns_gets_one_column_per_x() {
        let a = corpus("streams");
        let answer = segments(
            &a,
            &SegmentsParams {
                axis: Some(Axis::Event),
                start: Some(100),
                end: Some(110),
                columns: Some(300),
                ..Default::default()
            },
        )
        .expect("segments");
        assert_eq!(answer.columns.len(), 10);
        assert_eq!(answer.columns[0].row, Some(100));
        let bad = segments(&a, &SegmentsParams { start: Some(5), end: Some(5), ..Default::default() });
        assert!(matches!(bad, Err(ViewError::BadRequest(_))));
    }
}
