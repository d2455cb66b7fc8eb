//! Where the allocator's blocks go on screen: the allocator-state panel
//! (every segment a bar of its blocks) and the segment timeline (segments
//! stacked per column, each split into allocated, waste, pending-free and
//! free bytes). Pure geometry, natively tested; the canvases draw the
//! rectangles. The number of rectangles is bounded by the pixels, not by
//! the blocks: neighbours that fall in one pixel column merge.

use vramscope_shared::views::segments::SegmentsAnswer;
use vramscope_shared::views::state::{AllocatorState, BlockKind};

/// What a rectangle shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// Requested bytes of an allocated block.
    Allocated,
    /// Rounding waste of an allocated block (rounded minus requested).
    Waste,
    /// A pending-free block.
    PendingFree,
    /// A free block.
    Inactive,
    /// The largest free block of the instant.
    LargestFree,
}

/// An axis-aligned rectangle in CSS pixels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rect {
    /// Left.
    pub x: f64,
    /// Top.
    pub y: f64,
    /// Width.
    pub w: f64,
    /// Height.
    pub h: f64,
    /// What it shows.
    pub fill: Fill,
    /// Segment index.
    pub segment: usize,
    /// Block index (state panel) or column index (segment timeline).
    pub item: usize,
}

impl Rect {
    fn contains(&self, x: f64, y: f64) -> bool {
        x >= self.x && x < self.x + self.w.max(1.0) && y >= self.y && y < self.y + self.h
    }
}

/// Height of a segment's bar in the state panel.
pub const ROW_HEIGHT: f64 = 14.0;
/// Space between bars.
pub const ROW_GAP: f64 = 6.0;
/// Left margin for the segment labels.
pub const LABEL_WIDTH: f64 = 150.0;

/// The state panel: one bar per segment, its length proportional to the
/// segment's span (largest segment = full width), blocks placed by address.
/// Returns the rectangles and the total height.
pub fn state_rects(state: &AllocatorState, width: f64) -> (Vec<Rect>, f64) {
    let plot = (width - LABEL_WIDTH - 8.0).max(50.0);
    let span = |s: &vramscope_shared::views::state::StateSegment| {
        s.blocks.last().map_or(s.size, |b| (b.addr + b.size).saturating_sub(s.addr)).max(s.size).max(1)
    };
    let widest = state.segments.iter().map(span).max().unwrap_or(1) as f64;
    let largest = state.figures.largest_free_addr;
    let mut rects = Vec::new();
    for (si, seg) in state.segments.iter().enumerate() {
        let y = si as f64 * (ROW_HEIGHT + ROW_GAP);
        let scale = plot / widest;
        let push = |x0: f64, x1: f64, fill: Fill, bi: usize, rects: &mut Vec<Rect>| {
            let (x0, x1) = (LABEL_WIDTH + x0 * scale, LABEL_WIDTH + x1 * scale);
            // Merge with the previous rectangle when both sit in one pixel column.
            if let Some(last) = rects.last_mut().filter(|r: &&mut Rect| r.segment == si && r.y == y)
                && x1 - x0 < 1.0
                && (last.x + last.w).floor() >= x0.floor()
                && last.w < 1.0
            {
                last.w = (x1 - last.x).max(last.w);
                return;
            }
            rects.push(Rect { x: x0, y, w: x1 - x0, h: ROW_HEIGHT, fill, segment: si, item: bi });
        };
        for (bi, b) in seg.blocks.iter().enumerate() {
            let x0 = b.addr.saturating_sub(seg.addr) as f64;
            let x1 = x0 + b.size as f64;
            match b.kind {
                BlockKind::Allocated => {
                    let used = x0 + b.requested.min(b.size) as f64;
                    push(x0, used, Fill::Allocated, bi, &mut rects);
                    if used < x1 {
                        push(used, x1, Fill::Waste, bi, &mut rects);
                    }
                }
                BlockKind::PendingFree => push(x0, x1, Fill::PendingFree, bi, &mut rects),
                BlockKind::Inactive if Some(b.addr) == largest => push(x0, x1, Fill::LargestFree, bi, &mut rects),
                BlockKind::Inactive => push(x0, x1, Fill::Inactive, bi, &mut rects),
            }
        }
    }
    let height = state.segments.len() as f64 * (ROW_HEIGHT + ROW_GAP);
    (rects, height.max(ROW_HEIGHT))
}

/// The block (segment index, block index) under a point of the state panel.
pub fn state_hit(rects: &[Rect], x: f64, y: f64) -> Option<(usize, usize)> {
    rects.iter().rev().find(|r| r.contains(x, y)).map(|r| (r.segment, r.item))
}

/// The segment timeline: per column, the segments stacked bottom-up by
/// address, each as tall as its bytes (the top is the highest reserved of
/// the window), split into its parts. `left`/`width` are the plot's
/// horizontal extent, `height` its height.
pub fn segment_rects(answer: &SegmentsAnswer, left: f64, width: f64, height: f64) -> Vec<Rect> {
    let columns = answer.columns.len().max(1) as f64;
    let col_w = width / columns;
    let scale = height / answer.max_reserved.max(1) as f64;
    let mut rects = Vec::new();
    let mut bottom = height;
    let mut column = usize::MAX;
    for cell in &answer.cells {
        let c = cell.column as usize;
        if c != column {
            column = c;
            bottom = height;
        }
        let x = left + c as f64 * col_w;
        let parts = [
            (cell.allocated - cell.waste.min(cell.allocated), Fill::Allocated),
            (cell.waste.min(cell.allocated), Fill::Waste),
            (cell.pending_free, Fill::PendingFree),
            (cell.inactive, Fill::Inactive),
        ];
        let top_of_cell = bottom - cell.size as f64 * scale;
        if bottom - top_of_cell < 1.0 {
            // Under a pixel: one sliver in its main colour.
            let fill = parts.iter().max_by_key(|(b, _)| *b).map_or(Fill::Inactive, |(_, f)| *f);
            rects.push(Rect {
                x,
                y: top_of_cell,
                w: col_w,
                h: bottom - top_of_cell,
                fill,
                segment: cell.segment as usize,
                item: c,
            });
        } else {
            let mut y = bottom;
            for (bytes, fill) in parts {
                let h = bytes as f64 * scale;
                if h <= 0.0 {
                    continue;
                }
                rects.push(Rect { x, y: y - h, w: col_w, h, fill, segment: cell.segment as usize, item: c });
                y -= h;
            }
        }
        bottom = top_of_cell;
    }
    rects
}

/// The rectangles to draw for `rects` (as [`segment_rects`] gives them,
/// column by column): a segment part that stays the same over neighbouring
/// columns becomes one wide rectangle. Steady stretches of a trace then
/// cost one shape instead of one per column.
pub fn merge_runs(rects: &[Rect]) -> Vec<Rect> {
    let mut out: Vec<Rect> = Vec::with_capacity(rects.len() / 4);
    let mut open = std::collections::HashMap::<(usize, u8, u64, u64), usize>::new();
    for r in rects {
        let key = (r.segment, r.fill as u8, r.y.to_bits(), r.h.to_bits());
        match open.get(&key).copied() {
            Some(i) if (out[i].x + out[i].w - r.x).abs() < 1e-6 => out[i].w += r.w,
            _ => {
                open.insert(key, out.len());
                out.push(*r);
            }
        }
    }
    out
}

/// The (segment, column) under a point of the segment timeline.
pub fn segment_hit(rects: &[Rect], x: f64, y: f64) -> Option<(usize, usize)> {
    rects.iter().find(|r| r.contains(x, y)).map(|r| (r.segment, r.item))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramscope_shared::views::segments::{Column, SegmentCell, SegmentLane};
    use vramscope_shared::views::state::{Figures, StateBlock, StateSegment};

    fn block(addr: u64, size: u64, requested: u64, kind: BlockKind) -> StateBlock {
        StateBlock { addr, size, requested, kind, stack: 0 }
    }

    #[test]
    fn state_bars_place_blocks_by_address_and_merge_slivers() {
        let mib = 1 << 20;
        let mut blocks = vec![block(0, 2 * mib, 2 * mib - 512 * 1024, BlockKind::Allocated)];
        // 1000 tiny blocks: far fewer rectangles than blocks.
        for i in 0..1000 {
            blocks.push(block(2 * mib + i * 512, 512, 512, BlockKind::Allocated));
        }
        let tail = 2 * mib + 1000 * 512;
        blocks.push(block(tail, 20 * mib - tail, 0, BlockKind::Inactive));
        let state = AllocatorState {
            device: 0,
            row: Some(5),
            time_us: None,
            rows: 10,
            segments: vec![
                StateSegment { addr: 0, size: 20 * mib, stream: 0, small: false, expandable: false, blocks },
                StateSegment {
                    addr: 1 << 40,
                    size: 2 * mib,
                    stream: 0,
                    small: true,
                    expandable: false,
                    blocks: vec![block(1 << 40, 2 * mib, 0, BlockKind::PendingFree)],
                },
            ],
            figures: Figures { largest_free_addr: Some(tail), ..Figures::default() },
            exact: true,
        };
        let (rects, height) = state_rects(&state, LABEL_WIDTH + 8.0 + 1000.0);
        assert_eq!(height, 2.0 * (ROW_HEIGHT + ROW_GAP));
        // 1000 px for 20 MiB: the first block's requested part is 75 px,
        // its waste 25 px, the largest free block marked.
        assert!((rects[0].w - 75.0).abs() < 1e-9 && rects[0].fill == Fill::Allocated);
        assert_eq!(rects[1].fill, Fill::Waste);
        assert!((rects[1].w - 25.0).abs() < 1e-9);
        assert!(rects.len() < 40, "{} rectangles for 1003 blocks", rects.len());
        assert!(rects.iter().any(|r| r.fill == Fill::LargestFree && r.segment == 0));
        // The second segment is a tenth of the first.
        let second: Vec<_> = rects.iter().filter(|r| r.segment == 1).collect();
        assert_eq!(second.len(), 1);
        assert!((second[0].w - 100.0).abs() < 1e-9 && second[0].fill == Fill::PendingFree);
        assert_eq!(state_hit(&rects, LABEL_WIDTH + 10.0, 3.0), Some((0, 0)));
        assert_eq!(state_hit(&rects, LABEL_WIDTH + 50.0, ROW_HEIGHT + ROW_GAP + 3.0), Some((1, 0)));
        assert_eq!(state_hit(&rects, 5.0, 3.0), None);
    }

    #[test]
    fn segment_columns_stack_to_the_reserved_bytes() {
        let lane = |addr| SegmentLane { addr, stream: 0, small: false, expandable: false, max_size: 100 };
        let cell = |column, segment, size, allocated, waste, pending_free, inactive| SegmentCell {
            column,
            segment,
            size,
            allocated,
            waste,
            pending_free,
            inactive,
            blocks: 1,
        };
        let answer = SegmentsAnswer {
            device: 0,
            axis: crate::model::Axis::Event,
            start: 0,
            end: 2,
            columns: vec![Column { x0: 0, x1: 1, row: Some(0) }, Column { x0: 1, x1: 2, row: Some(1) }],
            segments: vec![lane(0), lane(1000)],
            cells: vec![cell(0, 0, 100, 50, 10, 0, 50), cell(1, 0, 100, 100, 0, 0, 0), cell(1, 1, 100, 0, 0, 20, 80)],
            max_reserved: 200,
            exact: true,
        };
        let rects = segment_rects(&answer, 10.0, 200.0, 100.0);
        // Column 0: 40 requested + 10 waste + 50 free bytes = half the height.
        let col0: Vec<_> = rects.iter().filter(|r| r.item == 0).collect();
        assert_eq!(col0.iter().map(|r| r.fill).collect::<Vec<_>>(), [Fill::Allocated, Fill::Waste, Fill::Inactive]);
        assert!((col0.iter().map(|r| r.h).sum::<f64>() - 50.0).abs() < 1e-9);
        assert!((col0[0].y - 80.0).abs() < 1e-9 && col0[0].x == 10.0 && col0[0].w == 100.0);
        // Column 1: both segments, the second above the first, full height.
        let top = rects.iter().filter(|r| r.item == 1).map(|r| r.y).fold(f64::MAX, f64::min);
        assert!(top.abs() < 1e-9, "{top}");
        assert_eq!(segment_hit(&rects, 150.0, 20.0), Some((1, 1)));
        assert_eq!(segment_hit(&rects, 150.0, 80.0), Some((0, 1)));
        assert_eq!(segment_hit(&rects, 50.0, 10.0), None);
        // Column 1's lower segment is one rectangle; the same in column 0
        // would merge with it.
        let mut same = answer.clone();
        same.cells = vec![cell(0, 0, 100, 100, 0, 0, 0), cell(1, 0, 100, 100, 0, 0, 0), cell(1, 1, 100, 0, 0, 20, 80)];
        let merged = merge_runs(&segment_rects(&same, 10.0, 200.0, 100.0));
        assert_eq!(merged.len(), 3, "{merged:?}");
        assert!((merged[0].w - 200.0).abs() < 1e-9 && merged[0].x == 10.0);
        assert_eq!(merge_runs(&rects).len(), rects.len(), "nothing to merge where parts differ");
    }
}
