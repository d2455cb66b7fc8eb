//! The minimap's drawing, through a [`Painter`]: the whole trace's
//! reserved area and allocated line ([`brush::curves`]), the brush over the
//! visible window and the cursor.

use vramscope_shared::timeline::Bucket;

use crate::core::axes;
use crate::core::brush;
use crate::core::paint::{self, Ink, Painter};
use crate::core::palette;
use crate::core::panel::Aligned;
use crate::core::viewport::Window;

/// Height of the canvas.
pub const HEIGHT: f64 = 44.0;

/// The minimap of the trace `extent` at `at` (its plot area; `at.view` is
/// the brush's window): the curves of `whole` (the trace's buckets, once
/// loaded), the brush, and the cursor at `cursor`.
pub fn draw(p: &mut impl Painter, at: &Aligned, extent: Window, whole: Option<&[Bucket]>, cursor: Option<i64>) {
    let Aligned { view: v, left, width, .. } = *at;
    p.fill_rect(palette::MINIMAP_BACKGROUND, (left, 0.0, width, HEIGHT));
    if let Some(buckets) = whole {
        let [reserved, allocated] = brush::curves(buckets, extent, (left, width), HEIGHT);
        let area: Vec<_> =
            std::iter::once((left, HEIGHT)).chain(reserved).chain(std::iter::once((left + width, HEIGHT))).collect();
        p.fill_path(Ink::Translucent(palette::RESERVED, 0.25), &area);
        let line: Vec<_> = std::iter::once((left, HEIGHT)).chain(allocated).collect();
        p.stroke_path(palette::ALLOCATED, 1.0, &line);
    }
    // Whole pixels, so the outline is crisp (and findable by colour).
    let (l, r) = brush::brush_px(v, extent, width);
    let (l, r) = ((left + l).round(), (left + r).round());
    p.fill_rect(Ink::Translucent(palette::ALLOCATED, 0.15), (l, 0.0, r - l, HEIGHT));
    p.stroke_rect(palette::BRUSH, 2.0, (l + 1.0, 1.0, (r - l - 2.0).max(1.0), HEIGHT - 2.0));
    if let Some(x) = cursor {
        paint::vline(p, palette::CURSOR, axes::x_px(extent, left, width, x as f64), (0.0, HEIGHT), 1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::paint::{Op, Recorder};
    use vramscope_shared::timeline::Axis;
    use vramscope_shared::views::TimelineParams;
    use vramscope_shared::views::view::{Timeline, View};

    #[test]
    fn the_whole_trace_of_oom_leak_under_the_brush_of_its_window() {
        let a = vramscope_shared::testing::corpus("oom_leak");
        let params = TimelineParams { axis: Some(Axis::Event), px: Some(800), ..Default::default() };
        let whole = Timeline::answer(&a, &params).expect("timeline");
        let extent = Window::new(whole.start, whole.end);
        let quarter = (whole.end - whole.start) / 4;
        let view = Window::new(whole.start + quarter, whole.start + 2 * quarter);
        let at = Aligned { view, left: 62.0, width: 800.0, css_w: 900.0 };
        let mut p = Recorder::new(1.0);
        draw(&mut p, &at, extent, Some(&whole.buckets), Some(whole.start));
        assert_eq!(p.ops[0], Op::FillRect(palette::MINIMAP_BACKGROUND.into(), (62.0, 0.0, 800.0, HEIGHT)));
        let area = p.fills(Ink::Translucent(palette::RESERVED, 0.25));
        assert_eq!(area.len(), 1);
        assert_eq!((area[0].first(), area[0].last()), (Some(&(62.0, HEIGHT)), Some(&(862.0, HEIGHT))));
        let line = p.strokes(palette::ALLOCATED);
        assert_eq!(line.len(), 1);
        assert!(line[0].iter().all(|&(x, y)| (62.0..=862.0 + 1e-9).contains(&x) && (2.0..=HEIGHT).contains(&y)));
        // The brush: the window's second quarter, in whole pixels.
        let brush = p.rects(Ink::Translucent(palette::ALLOCATED, 0.15));
        assert_eq!(brush.len(), 1);
        let (l, _, w, _) = brush[0];
        assert!((l - 262.0).abs() <= 1.0 && (w - 200.0).abs() <= 2.0, "{l} {w}");
        assert!(matches!(p.ops.iter().find(|o| matches!(o, Op::StrokeRect(..))), Some(Op::StrokeRect(_, 2.0, _))));
        assert_eq!(p.strokes(palette::CURSOR), [&[(62.5, 0.0), (62.5, HEIGHT)][..]]);
        // Before the trace's buckets come: the background and the brush.
        let mut p = Recorder::new(1.0);
        draw(&mut p, &at, extent, None, None);
        assert_eq!(p.ops.len(), 3);
    }
}
