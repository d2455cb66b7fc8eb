//! The segment timeline's drawing, through a [`Painter`]: its columns as
//! device pixels ([`blocks::segment_raster`]) with expandable segments'
//! mapped ranges outlined ([`draw_columns`], the image kept between real
//! draws), and over them the cursor, the x axis and the labels
//! ([`draw_overlay`]).

use vramscope_shared::timeline::Axis;
use vramscope_shared::views::segments::SegmentsAnswer;

use crate::core::axes::{self, ROW_AXIS_HEIGHT, XAxis};
use crate::core::blocks;
use crate::core::format;
use crate::core::paint::{self, Font, Painter, Rect};
use crate::core::palette;
use crate::core::panel::Aligned;
use crate::core::viewport::Window;

/// Height of the canvas.
pub const HEIGHT: f64 = 188.0;
/// Top of the x axis' band, under the plot.
pub const AXIS_TOP: f64 = HEIGHT - ROW_AXIS_HEIGHT;
/// Top of the plot: the labels' band is above it.
pub const PLOT_TOP: f64 = 14.0;

/// Where the columns of `d` go when placed at `view` in the plot area
/// `(left, width)`: the plot's left, width and height for
/// [`blocks::segment_shapes`], under the labels' band.
pub fn placement(d: &SegmentsAnswer, view: Window, (left, width): (f64, f64)) -> (f64, f64, f64) {
    let x0 = axes::x_px(view, left, width, d.start as f64);
    let x1 = axes::x_px(view, left, width, d.end as f64);
    (x0, x1 - x0, AXIS_TOP - PLOT_TOP - 4.0)
}

/// Draw the columns of `d` placed at `view` into the plot area `(left,
/// width)`: as pixels ([`blocks::segment_raster`]), then the outlines of
/// expandable segments' mapped ranges.
pub fn draw_columns(p: &mut impl Painter, d: &SegmentsAnswer, view: Window, (left, width): (f64, f64)) {
    let placed = placement(d, view, (left, width));
    let dpr = p.ratio();
    let raster = blocks::segment_raster(d, placed, (left, width), dpr, |fill| fill.colour().bytes());
    // In device pixels: the image is put as it is, unscaled.
    p.image(&raster, (left * dpr).round(), (PLOT_TOP * dpr).round());
    if !d.segments.iter().any(|s| s.expandable) {
        return;
    }
    let (x, w, h) = placed;
    let outlines: Vec<Rect> = blocks::segment_shapes(d, x, w, h)
        .iter()
        .filter(|r| d.segments.get(r.segment).is_some_and(|s| s.expandable))
        .map(|r| (r.x + 0.5, r.y + PLOT_TOP + 0.5, r.w, r.h))
        .collect();
    p.clip((left, 0.0, width, AXIS_TOP));
    p.stroke_rects(palette::COMMENT, 1.0, &outlines);
    p.unclip();
}

/// Over the image: the cursor at `cursor` (when in the window), the x axis
/// (the main timeline's, counted from `origin`, drawn fresh over its band:
/// a moved image stretches the old labels with it) and the labels.
pub fn draw_overlay(p: &mut impl Painter, d: &SegmentsAnswer, at: &Aligned, cursor: Option<i64>, origin: i64) {
    let Aligned { view: v, left, width, css_w } = *at;
    if let Some(x) = at.visible(cursor) {
        paint::vline(p, palette::CURSOR, axes::x_px(v, left, width, x as f64), (0.0, AXIS_TOP), 1.0);
    }
    p.fill_rect(palette::BACKGROUND, (0.0, AXIS_TOP, css_w, HEIGHT - AXIS_TOP));
    let title = match d.axis {
        Axis::Event => "row",
        Axis::Time => "time",
    };
    axes::x_axis(p, &XAxis { axis: d.axis, view: v, origin, left, width, y: AXIS_TOP, title });
    let label = Font::label(palette::LABEL);
    p.text(label, &format!("{} peak", format::bytes(d.max_reserved)), 4.0, 24.0);
    p.text(label, &format!("{} segments", d.segments.len()), 4.0, 38.0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::paint::{Op, Recorder};
    use vramscope_shared::views::segments::SegmentsParams;
    use vramscope_shared::views::view::{Segments, View};

    fn answer(name: &str) -> SegmentsAnswer {
        let a = vramscope_shared::testing::corpus(name);
        let p = SegmentsParams { axis: Some(Axis::Event), columns: Some(200), ..Default::default() };
        Segments::answer(&a, &p).expect("segments")
    }

    #[test]
    fn the_columns_are_one_image_of_the_plot_in_device_pixels() {
        let d = answer("oom_leak");
        let view = Window::new(d.start, d.end);
        let mut p = Recorder::new(2.0);
        draw_columns(&mut p, &d, view, (62.0, 800.0));
        assert_eq!(
            p.ops,
            [Op::Image(
                1600,
                blocks::segment_raster(&d, placement(&d, view, (62.0, 800.0)), (62.0, 800.0), 2.0, |f| f
                    .colour()
                    .bytes())
                .height,
                (124.0, 28.0)
            )]
        );
    }

    #[test]
    fn expandable_segments_are_outlined_inside_the_plot() {
        let d = answer("gpt_varlen_expandable");
        assert!(d.segments.iter().any(|s| s.expandable));
        let mut p = Recorder::new(1.0);
        draw_columns(&mut p, &d, Window::new(d.start, d.end), (62.0, 800.0));
        assert!(matches!(p.ops[0], Op::Image(800, _, (62.0, 14.0))));
        assert_eq!(p.ops[1], Op::Clip((62.0, 0.0, 800.0, AXIS_TOP)));
        let Op::StrokeRects(colour, 1.0, rects) = &p.ops[2] else { panic!("{:?}", p.ops[2]) };
        assert_eq!(*colour, palette::COMMENT.into());
        assert!(!rects.is_empty());
        assert!(rects.iter().all(|&(x, y, _, h)| x.fract() == 0.5 || x >= 62.0 && y >= PLOT_TOP && y + h <= AXIS_TOP));
        assert_eq!(p.ops[3], Op::Unclip);
    }

    #[test]
    fn the_overlay_names_the_peak_and_the_segments_over_the_axis() {
        let d = answer("oom_leak");
        let at = Aligned { view: Window::new(d.start, d.end), left: 62.0, width: 800.0, css_w: 900.0 };
        let mut p = Recorder::new(1.0);
        draw_overlay(&mut p, &d, &at, Some(d.start), d.start);
        let cursor = p.strokes(palette::CURSOR);
        assert_eq!(cursor, [&[(62.5, 0.0), (62.5, AXIS_TOP)][..]]);
        assert_eq!(p.rects(palette::BACKGROUND), [(0.0, AXIS_TOP, 900.0, ROW_AXIS_HEIGHT)]);
        let texts = p.texts();
        assert_eq!(
            texts[texts.len() - 2..],
            [format!("{} peak", format::bytes(d.max_reserved)), format!("{} segments", d.segments.len())]
        );
        assert!(texts.contains(&"row"));
        // A cursor outside the window is not drawn.
        let mut p = Recorder::new(1.0);
        draw_overlay(&mut p, &d, &at, Some(d.end), d.start);
        assert!(p.strokes(palette::CURSOR).is_empty());
    }
}
