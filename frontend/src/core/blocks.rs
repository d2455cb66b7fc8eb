//! Where the allocator's blocks go on screen: the allocator-state panel
//! (every segment a bar of its blocks) and the segment timeline (segments
//! stacked per column, each split into allocated, waste, pending-free and
//! free bytes). Pure geometry, natively tested; the canvases draw the
//! rectangles. The number of rectangles is bounded by the pixels, not by
//! the blocks: neighbours that fall in one pixel column merge.

use vramscope_shared::views::segments::{SegmentCell, SegmentsAnswer};
use vramscope_shared::views::state::{AllocatorState, BlockKind, Figures, StateSegment};

use crate::core::format;
use crate::core::model::Instant;
use crate::core::palette::{self, Colour};
use crate::core::viewport::Window;

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

impl Fill {
    /// Its colour in the palette (segment timeline, allocator state).
    pub const fn colour(self) -> Colour {
        match self {
            Fill::Allocated => palette::ALLOCATED,
            Fill::Waste => palette::WASTE,
            Fill::PendingFree => palette::PENDING,
            Fill::Inactive => palette::INACTIVE,
            Fill::LargestFree => palette::LARGEST_FREE,
        }
    }
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

/// Where a segment timeline's figures go on a plot `width` × `height` at
/// `left`: per column, the segments stacked bottom-up by address, each as
/// tall as its bytes (the top is the highest reserved of the window).
struct ColumnLayout<'a> {
    answer: &'a SegmentsAnswer,
    left: f64,
    col_w: f64,
    height: f64,
    scale: f64,
}

impl<'a> ColumnLayout<'a> {
    fn new(answer: &'a SegmentsAnswer, left: f64, width: f64, height: f64) -> Self {
        let col_w = width / answer.columns.len().max(1) as f64;
        let scale = height / answer.max_reserved.max(1) as f64;
        ColumnLayout { answer, left, col_w, height, scale }
    }

    /// Calls `each(column, x, cell, bottom, top)` for every segment of
    /// every column, bottom-up, columns left to right. The answer's cells
    /// are runs of columns ordered by first column: one pass keeps the
    /// run each segment is in.
    fn walk(&self, mut each: impl FnMut(usize, f64, &SegmentCell, f64, f64)) {
        let mut current: Vec<Option<&SegmentCell>> = vec![None; self.answer.segments.len()];
        let mut next = self.answer.cells.iter().peekable();
        for column in 0..self.answer.columns.len() {
            while let Some(cell) = next.next_if(|c| c.column as usize <= column) {
                if let Some(slot) = current.get_mut(cell.segment as usize) {
                    *slot = Some(cell);
                }
            }
            let x = self.left + column as f64 * self.col_w;
            let mut bottom = self.height;
            for slot in &mut current {
                let Some(cell) = *slot else { continue };
                if (cell.column + cell.columns.max(1)) as usize <= column {
                    *slot = None;
                    continue;
                }
                let top = bottom - cell.size as f64 * self.scale;
                each(column, x, cell, bottom, top);
                bottom = top;
            }
        }
    }
}

/// The parts of a cell, bottom-up: requested bytes, rounding waste,
/// pending frees, free bytes.
fn parts(cell: &SegmentCell) -> [(u64, Fill); 4] {
    let waste = cell.waste.min(cell.allocated);
    [
        (cell.allocated - waste, Fill::Allocated),
        (waste, Fill::Waste),
        (cell.pending_free, Fill::PendingFree),
        (cell.inactive, Fill::Inactive),
    ]
}

/// Add `r` to `out`, or widen the shape `open` when `r` continues it (the
/// same place and height, touching it on the right).
fn extend(out: &mut Vec<Rect>, open: &mut Option<usize>, r: Rect) {
    if let Some(last) = open.and_then(|i| out.get_mut(i))
        && last.y == r.y
        && last.h == r.h
        && (last.x + last.w - r.x).abs() < 1e-6
    {
        last.w += r.w;
        return;
    }
    *open = Some(out.len());
    out.push(r);
}

/// The parts of a segment timeline as rectangles (see [`ColumnLayout`]),
/// for outlines and tests; the timeline itself is drawn as pixels
/// ([`segment_raster`]). Each rectangle spans the neighbouring columns
/// where it keeps its place and height (`item` is its first column). A
/// segment under a pixel tall is one sliver in its main colour.
pub fn segment_shapes(answer: &SegmentsAnswer, left: f64, width: f64, height: f64) -> Vec<Rect> {
    let layout = ColumnLayout::new(answer, left, width, height);
    let mut shapes = Vec::new();
    // Per segment: the shape of each fill that the next column may widen.
    let mut open = vec![[None::<usize>; 5]; answer.segments.len()];
    layout.walk(|column, x, cell, bottom, top| {
        let segment = cell.segment as usize;
        let Some(open) = open.get_mut(segment) else { return };
        let rect = |y: f64, h: f64, fill: Fill| Rect { x, y, w: layout.col_w, h, fill, segment, item: column };
        let parts = parts(cell);
        if bottom - top < 1.0 {
            let fill = parts.iter().max_by_key(|(b, _)| *b).map_or(Fill::Inactive, |(_, f)| *f);
            extend(&mut shapes, &mut open[fill as usize], rect(top, bottom - top, fill));
        } else {
            let mut y = bottom;
            for (bytes, fill) in parts {
                let h = bytes as f64 * layout.scale;
                if h > 0.0 {
                    extend(&mut shapes, &mut open[fill as usize], rect(y - h, h, fill));
                    y -= h;
                }
            }
        }
    });
    shapes
}

/// Device pixels, RGBA, row by row: a drawing for one `putImageData`.
#[derive(Debug)]
pub struct Raster {
    /// Pixels across.
    pub width: usize,
    /// Pixels down.
    pub height: usize,
    /// `width × height × 4` bytes.
    pub rgba: Vec<u8>,
}

/// The segment timeline as device pixels: the columns placed as
/// [`segment_shapes`] places them (plot `width` × `height` CSS pixels at
/// `left`), cut to the CSS range `clip` (left, width) at `dpr` device
/// pixels per CSS pixel. Each pixel takes the colour of the part covering
/// its centre, and a segment at least 3 pixels tall has its top row
/// lightened, to part it from the next.
///
/// Pixels, not shapes: a wide window of a large trace is tens of thousands
/// of shapes, and filling them as canvas paths took 13 to 23 ms a draw; this
/// costs one pass over columns × segments and one write per pixel.
pub fn segment_raster(
    answer: &SegmentsAnswer,
    (left, width, height): (f64, f64, f64),
    (clip_left, clip_width): (f64, f64),
    dpr: f64,
    colour: impl Fn(Fill) -> [u8; 3],
) -> Raster {
    let dpr = if dpr.is_finite() && dpr > 0.0 { dpr } else { 1.0 };
    let w = (clip_width * dpr).round().max(0.0) as usize;
    let h = (height * dpr).round().max(0.0) as usize;
    let mut rgba = vec![0u8; w * h * 4];
    let layout = ColumnLayout::new(answer, left, width, height);
    // The device pixel columns of each data column (they come in order).
    let mut spans = vec![(usize::MAX, 0usize); answer.columns.len()];
    for px in 0..w {
        let x = clip_left + (px as f64 + 0.5) / dpr;
        let c = ((x - left) / layout.col_w).floor();
        if c >= 0.0 && (c as usize) < spans.len() {
            let span = &mut spans[c as usize];
            span.0 = span.0.min(px);
            span.1 = px + 1;
        }
    }
    let mut strip = vec![0u8; h * 4];
    let mut flush = |column: usize, strip: &mut Vec<u8>| {
        let (p0, p1) = spans[column];
        for px in p0..p1.min(w) {
            for row in 0..h {
                let at = (row * w + px) * 4;
                rgba[at..at + 4].copy_from_slice(&strip[row * 4..row * 4 + 4]);
            }
        }
        strip.fill(0);
    };
    // Rows whose centres lie in [y0, y1) (CSS pixels from the plot's top).
    let rows = |y0: f64, y1: f64| {
        let first = (y0 * dpr - 0.5).ceil().max(0.0) as usize;
        let end = ((y1 * dpr - 0.5).ceil().max(0.0) as usize).min(h);
        first..end.max(first)
    };
    let paint = |strip: &mut Vec<u8>, rows: std::ops::Range<usize>, [r, g, b]: [u8; 3]| {
        for row in rows {
            strip[row * 4..row * 4 + 4].copy_from_slice(&[r, g, b, 255]);
        }
    };
    let mut current = None;
    layout.walk(|column, _, cell, bottom, top| {
        if current != Some(column) {
            if let Some(done) = current {
                flush(done, &mut strip);
            }
            current = Some(column);
        }
        let mut y = bottom;
        for (bytes, fill) in parts(cell) {
            let part = bytes as f64 * layout.scale;
            if part > 0.0 {
                paint(&mut strip, rows(y - part, y), colour(fill));
                y -= part;
            }
        }
        if (bottom - top) * dpr >= 3.0 {
            let row = rows(top, bottom).start;
            if let Some(px) = strip.get_mut(row * 4..row * 4 + 3) {
                for c in px {
                    *c = (u16::from(*c) + (255 - u16::from(*c)) * 3 / 5) as u8;
                }
            }
        }
    });
    if let Some(done) = current {
        flush(done, &mut strip);
    }
    Raster { width: w, height: h, rgba }
}

/// The column under a point of the segment timeline drawn by
/// [`segment_shapes`] with the same plot, and the cell of the segment there.
pub fn segment_hit(
    answer: &SegmentsAnswer,
    left: f64,
    width: f64,
    height: f64,
    x: f64,
    y: f64,
) -> Option<(usize, SegmentCell)> {
    let layout = ColumnLayout::new(answer, left, width, height);
    let wanted = ((x - left) / layout.col_w).floor();
    if !(0.0..answer.columns.len() as f64).contains(&wanted) {
        return None;
    }
    let wanted = wanted as usize;
    let mut found = None;
    layout.walk(|column, _, cell, bottom, top| {
        // At least a pixel tall, as drawn.
        if column == wanted && y < bottom && y >= top.min(bottom - 1.0) && found.is_none() {
            found = Some((column, *cell));
        }
    });
    found
}

/// Where the pointer's pixel `px` of a plot `(left, width)` now showing
/// `now` falls on the segment timeline's image, drawn for `then`: the
/// rectangles are where the image was drawn (as is without both windows).
pub fn px_on_image(then: Option<Window>, now: Option<Window>, (left, width): (f64, f64), px: f64) -> f64 {
    match (then, now) {
        (Some(then), Some(now)) if width > 0.0 => {
            let x = now.start as f64 + (px - left) / width * now.width() as f64;
            left + (x - then.start as f64) / then.width().max(1) as f64 * width
        }
        _ => px,
    }
}

/// What the segment timeline says of `cell`, in column `column` of
/// `answer` (the segment, its pool and stream, the moment, its bytes split
/// as drawn), and the instant a click there moves the cursor to.
pub fn segment_hover(answer: &SegmentsAnswer, column: usize, cell: &SegmentCell) -> Option<(String, Instant)> {
    let lane = answer.segments.get(cell.segment as usize)?;
    let col = answer.columns.get(column)?;
    let row = col.row.map_or("before the trace".to_owned(), |r| format!("after row {}", format::grouped(u64::from(r))));
    let text = format!(
        "segment {} ({}{}, stream {}) {row}: {} reserved · {} allocated ({} rounding waste) · {} pending free · {} free · {} blocks",
        format::hex(lane.addr),
        if lane.small { "small pool" } else { "large pool" },
        if lane.expandable { ", expandable: mapped range" } else { "" },
        format::hex(lane.stream),
        format::bytes(cell.size),
        format::bytes(cell.allocated),
        format::bytes(cell.waste),
        format::bytes(cell.pending_free),
        format::bytes(cell.inactive),
        cell.blocks,
    );
    let at = match col.row {
        Some(r) => Instant::Row(r),
        None => Instant::X(answer.axis, col.x0 - 1),
    };
    Some((text, at))
}

/// The allocator-state panel's heading: the instant (row, and time where
/// the trace has times) of how many rows, and whether sizes are estimates.
pub fn state_heading(s: &AllocatorState) -> String {
    let at = match (s.row, s.time_us) {
        (None, _) => "before the trace's first event".to_owned(),
        (Some(r), Some(t)) => format!("after row {} ({})", format::grouped(u64::from(r)), format::clock_us(t)),
        (Some(r), None) => format!("after row {}", format::grouped(u64::from(r))),
    };
    let estimate =
        if s.exact { "" } else { " · some block sizes are estimates (the trace does not reach back to its start)" };
    format!("Allocator state {at} of {}{estimate}", format::grouped(u64::from(s.rows)))
}

/// A segment's label left of its bar: address, size, and "exp" when
/// expandable.
pub fn segment_label(seg: &StateSegment) -> String {
    format!("{} {}{}", format::hex(seg.addr), format::bytes(seg.size), if seg.expandable { " exp" } else { "" })
}

/// What the allocator-state panel says of block `block` of segment
/// `segment`: its sizes, its kind (the largest free block named) and its
/// segment.
pub fn block_text(s: &AllocatorState, (segment, block): (usize, usize)) -> Option<String> {
    let seg = s.segments.get(segment)?;
    let b = seg.blocks.get(block)?;
    let kind = match b.kind {
        BlockKind::Allocated => "allocated",
        BlockKind::PendingFree => "pending free (waiting for another stream)",
        BlockKind::Inactive if Some(b.addr) == s.figures.largest_free_addr => "free: the largest free block",
        BlockKind::Inactive => "free (inactive)",
    };
    let sizes = match b.kind {
        BlockKind::Inactive => format::bytes(b.size),
        _ => format!(
            "{} rounded, {} requested ({} rounding waste)",
            format::bytes(b.size),
            format::bytes(b.requested),
            format::bytes(b.size.saturating_sub(b.requested))
        ),
    };
    Some(format!(
        "block {} · {sizes} · {kind} · in segment {} ({}, {}, stream {})",
        format::hex(b.addr),
        format::hex(seg.addr),
        format::pool(seg.pool),
        if seg.small { "small blocks" } else { "large blocks" },
        format::hex(seg.stream)
    ))
}

/// The instant's figures as the panel's cards: label, value and note.
pub fn state_cards(f: &Figures) -> Vec<(&'static str, String, String)> {
    let largest = match f.largest_free_addr {
        Some(a) => format!("at {}", format::hex(a)),
        None => "no free block".to_owned(),
    };
    vec![
        ("reserved", format::bytes(f.reserved), format::count(f.segments, "segment", "segments")),
        ("allocated", format::bytes(f.allocated), format!("{} requested", format::bytes(f.requested))),
        ("rounding waste", format::bytes(f.waste), "rounded minus requested".to_owned()),
        ("pending free", format::bytes(f.pending_free), String::new()),
        ("free (inactive)", format::bytes(f.inactive), format::count(f.free_blocks, "block", "blocks")),
        ("inactive split", format::bytes(f.inactive_split), "free bytes in split segments".to_owned()),
        ("largest free block", format::bytes(f.largest_free), largest),
        ("fragmentation", format::percent(f.fragmentation), "1 − largest free / free".to_owned()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramscope_shared::views::segments::{Column, SegmentCell, SegmentLane};
    use vramscope_shared::views::state::{Figures, StateBlock, StateSegment};

    #[test]
    fn each_fill_has_its_palette_colour() {
        assert_eq!(Fill::LargestFree.colour(), palette::LARGEST_FREE);
        assert_eq!(Fill::Waste.colour(), palette::WASTE);
        assert_eq!(Fill::Allocated.colour(), palette::ALLOCATED);
    }

    fn block(addr: u64, size: u64, requested: u64, kind: BlockKind) -> StateBlock {
        StateBlock { addr, size, requested, kind, stack: 0 }
    }

    /// A 100-byte segment's cell over `columns` columns from `column`:
    /// its allocated (with `waste`), pending-free and free bytes.
    fn cell(
        column: u32,
        columns: u32,
        segment: u32,
        [allocated, waste, pending_free, inactive]: [u64; 4],
    ) -> SegmentCell {
        SegmentCell { column, columns, segment, size: 100, allocated, waste, pending_free, inactive, blocks: 1 }
    }

    /// Two columns (rows 0 and 1), segments at 0 and 1000, 200 bytes at
    /// the top.
    fn two_columns(cells: Vec<SegmentCell>) -> SegmentsAnswer {
        let lane = |addr| SegmentLane { addr, stream: 0, small: false, expandable: false, max_size: 100 };
        SegmentsAnswer {
            device: 0,
            axis: crate::core::model::Axis::Event,
            start: 0,
            end: 2,
            columns: vec![Column { x0: 0, x1: 1, row: Some(0) }, Column { x0: 1, x1: 2, row: Some(1) }],
            segments: vec![lane(0), lane(1000)],
            cells,
            max_reserved: 200,
            exact: true,
        }
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
                StateSegment {
                    addr: 0,
                    size: 20 * mib,
                    stream: 0,
                    small: false,
                    pool: (0, 0),
                    expandable: false,
                    blocks,
                },
                StateSegment {
                    addr: 1 << 40,
                    size: 2 * mib,
                    stream: 0,
                    small: true,
                    pool: (0, 0),
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
        let answer = two_columns(vec![
            cell(0, 1, 0, [50, 10, 0, 50]),
            cell(1, 1, 0, [100, 0, 0, 0]),
            cell(1, 1, 1, [0, 0, 20, 80]),
        ]);
        // (segment, column) of a hit.
        let at = |(column, cell): (usize, SegmentCell)| (cell.segment as usize, column);
        let shapes = segment_shapes(&answer, 10.0, 200.0, 100.0);
        // Column 0: 40 requested + 10 waste + 50 free bytes = half the height.
        let col0: Vec<_> = shapes.iter().filter(|r| r.item == 0).collect();
        assert_eq!(col0.iter().map(|r| r.fill).collect::<Vec<_>>(), [Fill::Allocated, Fill::Waste, Fill::Inactive]);
        assert!((col0.iter().map(|r| r.h).sum::<f64>() - 50.0).abs() < 1e-9);
        assert!((col0[0].y - 80.0).abs() < 1e-9 && col0[0].x == 10.0 && col0[0].w == 100.0);
        // Column 1: both segments, the second above the first, full height.
        let top = shapes.iter().filter(|r| r.item == 1).map(|r| r.y).fold(f64::MAX, f64::min);
        assert!(top.abs() < 1e-9, "{top}");
        assert_eq!(segment_hit(&answer, 10.0, 200.0, 100.0, 150.0, 20.0).map(at), Some((1, 1)));
        assert_eq!(segment_hit(&answer, 10.0, 200.0, 100.0, 150.0, 80.0).map(at), Some((0, 1)));
        assert_eq!(segment_hit(&answer, 10.0, 200.0, 100.0, 50.0, 10.0).map(at), None);
        assert_eq!(segment_hit(&answer, 10.0, 200.0, 100.0, 5.0, 80.0).map(at), None, "left of the plot");

        // The lower segment the same in both columns, as one run: one
        // shape two columns wide.
        let same = two_columns(vec![cell(0, 2, 0, [100, 0, 0, 0]), cell(1, 1, 1, [0, 0, 20, 80])]);
        let merged = segment_shapes(&same, 10.0, 200.0, 100.0);
        assert_eq!(merged.len(), 3, "{merged:?}");
        assert!((merged[0].w - 200.0).abs() < 1e-9 && merged[0].x == 10.0);
        assert_eq!(segment_hit(&same, 10.0, 200.0, 100.0, 150.0, 80.0), Some((1, same.cells[0])), "inside a run");
    }

    #[test]
    fn the_raster_colours_each_pixel_by_the_part_at_its_centre() {
        // Two columns of 50 px over a 100 px plot, 200 bytes tall: column 0
        // holds segment 0 (half allocated, half free), column 1 both.
        let answer = two_columns(vec![cell(0, 2, 0, [50, 0, 0, 50]), cell(1, 1, 1, [0, 0, 100, 0])]);
        let colour = |f: Fill| [f as u8 + 1, 0, 0];
        // Clipped to CSS 10..110 at a ratio of 2: 200 × 200 device pixels.
        let raster = segment_raster(&answer, (10.0, 100.0, 100.0), (10.0, 100.0), 2.0, colour);
        assert_eq!((raster.width, raster.height, raster.rgba.len()), (200, 200, 200 * 200 * 4));
        let at = |x: usize, y: usize| {
            let i = (y * raster.width + x) * 4;
            (raster.rgba[i], raster.rgba[i + 3])
        };
        let code = |f: Fill| f as u8 + 1;
        // Column 0: allocated at the bottom, free above it, nothing on top.
        assert_eq!(at(50, 199), (code(Fill::Allocated), 255));
        assert_eq!(at(50, 160), (code(Fill::Allocated), 255));
        assert_eq!(at(50, 120), (code(Fill::Inactive), 255));
        assert_eq!(at(50, 50), (0, 0), "above the segments: transparent");
        // Its top row (y = 100 CSS px... row 100) is lightened.
        assert!(at(50, 100).0 > code(Fill::Inactive), "{:?}", at(50, 100));
        // Column 1: the same segment (one run), the pending one above it.
        assert_eq!(at(150, 199), (code(Fill::Allocated), 255));
        assert_eq!(at(150, 50), (code(Fill::PendingFree), 255));
        // Clipped: a range left of the columns is transparent.
        let shifted = segment_raster(&answer, (60.0, 100.0, 100.0), (10.0, 100.0), 1.0, colour);
        assert_eq!(shifted.rgba[(99 * shifted.width + 20) * 4 + 3], 0);
        assert_eq!(shifted.rgba[(99 * shifted.width + 60) * 4], code(Fill::Allocated));
    }

    #[test]
    fn a_segment_under_a_pixel_is_one_sliver_that_can_be_pointed_at() {
        // 100 bytes of 100,000 over 100 px: a tenth of a pixel.
        let tiny = cell(0, 1, 0, [100, 0, 0, 0]);
        let answer = SegmentsAnswer { max_reserved: 100_000, ..two_columns(vec![tiny]) };
        let shapes = segment_shapes(&answer, 0.0, 100.0, 100.0);
        assert_eq!(shapes.len(), 1);
        assert_eq!(shapes[0].fill, Fill::Allocated);
        assert_eq!(segment_hit(&answer, 0.0, 100.0, 100.0, 25.0, 99.5), Some((0, tiny)));
    }

    #[test]
    fn a_hovered_segment_cell_is_named_with_its_moment_and_figures() {
        let answer = two_columns(vec![cell(1, 1, 1, [60, 4, 10, 30])]);
        let (text, at) = segment_hover(&answer, 1, &answer.cells[0]).expect("a cell of a column");
        assert_eq!(
            text,
            "segment 0x3e8 (large pool, stream 0x0) after row 1: 100 B reserved · 60 B allocated (4 B rounding waste) \
             · 10 B pending free · 30 B free · 1 blocks"
        );
        assert_eq!(at, Instant::Row(1));
        // Before the trace, the x just before the column.
        let mut before = answer.clone();
        before.columns[1].row = None;
        assert_eq!(segment_hover(&before, 1, &before.cells[0]).map(|(_, at)| at), Some(Instant::X(before.axis, 0)));
        assert!(segment_hover(&answer, 7, &answer.cells[0]).is_none());
    }

    #[test]
    fn the_pointer_is_mapped_onto_the_image_of_the_window_drawn() {
        let plot = (50.0, 100.0);
        // The window moved on by half its width since the image was drawn.
        let then = Window::new(0, 100);
        let now = Window::new(50, 150);
        assert_eq!(px_on_image(Some(then), Some(now), plot, 50.0), 100.0);
        assert_eq!(px_on_image(None, Some(now), plot, 70.0), 70.0);
        assert_eq!(px_on_image(Some(then), Some(now), (50.0, 0.0), 70.0), 70.0);
    }

    #[test]
    fn the_state_panel_names_its_instant_blocks_and_figures() {
        let segment = StateSegment {
            addr: 0x1000,
            size: 4096,
            stream: 0,
            small: true,
            pool: (0, 0),
            expandable: true,
            blocks: vec![block(0x1000, 1024, 1000, BlockKind::Allocated), block(0x1400, 3072, 0, BlockKind::Inactive)],
        };
        let mut state = AllocatorState {
            device: 0,
            row: Some(1234),
            time_us: None,
            rows: 5000,
            segments: vec![segment],
            figures: Figures { largest_free_addr: Some(0x1400), largest_free: 3072, ..Figures::default() },
            exact: false,
        };
        assert_eq!(
            state_heading(&state),
            "Allocator state after row 1,234 of 5,000 · some block sizes are estimates (the trace does not reach back to its start)"
        );
        state.row = None;
        state.exact = true;
        assert_eq!(state_heading(&state), "Allocator state before the trace's first event of 5,000");
        assert_eq!(segment_label(&state.segments[0]), "0x1000 4.00 KiB exp");
        let text = block_text(&state, (0, 0)).expect("a block");
        assert!(
            text.starts_with("block 0x1000 · 1.00 KiB rounded, 1000 B requested (24 B rounding waste) · allocated"),
            "{text}"
        );
        let text = block_text(&state, (0, 1)).expect("a block");
        assert!(text.contains("3.00 KiB · free: the largest free block · in segment 0x1000"), "{text}");
        assert_eq!(block_text(&state, (0, 2)), None);
        let cards = state_cards(&state.figures);
        assert_eq!(cards.len(), 8);
        assert_eq!(cards[6], ("largest free block", "3.00 KiB".to_owned(), "at 0x1400".to_owned()));
    }
}
