//! The allocator state's drawing, through a [`Painter`]: each segment's bar
//! of blocks as placed by [`blocks::state_rects`], its label, and the
//! block pointed at outlined.

use vramscope_shared::views::state::AllocatorState;

use crate::core::blocks::{self, Rect};
use crate::core::paint::{Font, Painter};
use crate::core::palette;

/// Draw the bars `placed` of the state `s`, the segments' labels, and the
/// outline of `shown` (a segment and a block), when it is placed.
pub fn draw(p: &mut impl Painter, s: &AllocatorState, placed: &[Rect], shown: Option<(usize, usize)>) {
    for r in placed {
        p.fill_rect(r.fill.colour(), (r.x, r.y, r.w.max(0.5), r.h));
    }
    for (i, seg) in s.segments.iter().enumerate() {
        let y = i as f64 * (blocks::ROW_HEIGHT + blocks::ROW_GAP) + 11.0;
        p.text(Font::label(palette::LABEL), &blocks::segment_label(seg), 2.0, y);
    }
    if let Some((si, bi)) = shown
        && let Some(r) = placed.iter().find(|r| r.segment == si && r.item == bi)
    {
        p.stroke_rect(palette::CURSOR, 2.0, (r.x - 1.0, r.y - 1.0, r.w.max(1.0) + 2.0, r.h + 2.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::paint::{Op, Recorder};
    use vramscope_shared::views::state::StateParams;
    use vramscope_shared::views::view::{State, View};

    #[test]
    fn every_block_of_oom_leak_is_a_bar_under_its_segments_label() {
        let a = vramscope_shared::testing::corpus("oom_leak");
        let s = State::answer(&a, &StateParams::default()).expect("state");
        let (placed, _) = blocks::state_rects(&s, 900.0);
        assert!(!placed.is_empty());
        let shown = (placed[0].segment, placed[0].item);
        let mut p = Recorder::new(1.0);
        draw(&mut p, &s, &placed, Some(shown));
        let bars = p.ops.iter().filter(|o| matches!(o, Op::FillRect(..))).count();
        assert_eq!(bars, placed.len());
        let labels: Vec<String> = s.segments.iter().map(blocks::segment_label).collect();
        assert_eq!(p.texts(), labels.iter().map(String::as_str).collect::<Vec<_>>());
        let r = &placed[0];
        let outline = (r.x - 1.0, r.y - 1.0, r.w.max(1.0) + 2.0, r.h + 2.0);
        assert_eq!(p.ops.last(), Some(&Op::StrokeRect(palette::CURSOR.into(), 2.0, outline)));
    }
}
