//! The axes of the small canvases, drawn through a [`Painter`]: bytes up
//! the left of a chart ([`byte_axis`]), rows or time under it ([`x_axis`]),
//! and the x mapping the panels share with the main timeline's plot area.

use vramscope_shared::timeline::Axis;

use crate::core::format;
use crate::core::paint::{self, Align, Baseline, Font, Painter};
use crate::core::palette;
use crate::core::viewport::Window;

/// Width of the byte labels left of a small chart's plot ([`byte_axis`]).
pub const BYTE_AXIS_WIDTH: f64 = 62.0;
/// Height of the x labels under a small chart's plot ([`x_axis`]).
pub const ROW_AXIS_HEIGHT: f64 = 18.0;

/// Where x lands in a plot area `left`..`left + width` showing `view`.
pub fn x_px(view: Window, left: f64, width: f64, x: f64) -> f64 {
    left + view.fraction_of(x) * width
}

/// The x under a pixel of that plot area.
pub fn x_at(view: Window, left: f64, width: f64, px: f64) -> i64 {
    (view.start as f64 + (px - left) / width.max(1.0) * view.width() as f64).floor() as i64
}

/// A y axis of bytes from 0 to `top`, its plot from `plot_top` down to
/// `plot_bottom`, at `left` (its labels right-aligned left of it): the
/// line, a tick and label per round size, and faint grid lines across
/// `width`.
pub fn byte_axis(
    p: &mut impl Painter,
    top: u64,
    (left, width): (f64, f64),
    (plot_top, plot_bottom): (f64, f64),
    ticks: u32,
) {
    let y = |b: u64| plot_bottom - b as f64 / top.max(1) as f64 * (plot_bottom - plot_top);
    let font = Font::tick(palette::LABEL, Align::Right, Baseline::Middle);
    for b in format::byte_ticks(top, ticks) {
        let at = y(b).round() + 0.5;
        p.fill_rect(palette::GRID, (left, at, width, 1.0));
        p.text(font, &format::bytes(b), left - 4.0, at.clamp(plot_top + 4.0, plot_bottom - 4.0));
    }
    paint::vline(p, palette::AXIS, left - 1.0, (plot_top, plot_bottom), 1.0);
}

/// An x axis under a plot: where it goes and what it shows.
#[derive(Clone, Copy, Debug)]
pub struct XAxis<'a> {
    /// The axis.
    pub axis: Axis,
    /// The window the plot shows.
    pub view: Window,
    /// The trace's start (x labels count from it).
    pub origin: i64,
    /// The plot's left, in CSS pixels.
    pub left: f64,
    /// The plot's width.
    pub width: f64,
    /// Where the axis' line goes; its labels are below.
    pub y: f64,
    /// Said left of the plot (short: the y labels' column is its room).
    pub title: &'a str,
}

impl XAxis<'_> {
    /// The trace's rows `0..=last`, on a plot `left`..`left + width`
    /// whose axis line is at `y`, titled "row".
    pub fn rows(last: u32, (left, width): (f64, f64), y: f64) -> XAxis<'static> {
        let view = Window::new(0, i64::from(last.max(1)));
        XAxis { axis: Axis::Event, view, origin: 0, left, width, y, title: "row" }
    }
}

/// An x axis under a plot, `left`..`left + width` showing `view` on
/// `axis` (x = `origin` is the trace's start), its line at `y` and its
/// labels below: ticks at round numbers, and `title` left of the plot.
pub fn x_axis(p: &mut impl Painter, a: &XAxis<'_>) {
    let XAxis { axis, view, origin, left, width, y, title } = *a;
    p.fill_rect(palette::AXIS, (left, y.round(), width, 1.0));
    let (ticks, step) = format::x_ticks(view.start, view.end, origin, (width / 110.0).clamp(2.0, 10.0) as u32);
    let font = Font::tick(palette::LABEL, Align::Center, Baseline::Top);
    for t in ticks {
        let x = x_px(view, left, width, t as f64);
        paint::vline(p, palette::AXIS, x, (y, y + 3.0), 1.0);
        let label = format::x_label(axis, t, origin, step);
        p.text(font, &label, x.clamp(left + 14.0, left + width - 14.0), y + 4.0);
    }
    p.text(font.aligned(Align::Left), title, 2.0, y + 4.0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::paint::{Op, Recorder};

    #[test]
    fn a_byte_axis_has_a_grid_line_and_a_label_per_tick_and_its_line() {
        let mut p = Recorder::new(1.0);
        byte_axis(&mut p, 4 << 30, (62.0, 800.0), (8.0, 162.0), 4);
        let grid = p.rects(palette::GRID);
        assert!(grid.len() >= 2, "{:?}", p.ops);
        assert!(grid.iter().all(|&(x, y, w, h)| x == 62.0 && w == 800.0 && h == 1.0 && y.fract() == 0.5));
        assert_eq!(p.texts().len(), grid.len());
        assert!(p.texts().contains(&"0 B") || p.texts().iter().any(|t| t.starts_with('0')), "{:?}", p.texts());
        assert_eq!(p.strokes(palette::AXIS), [&[(61.5, 8.0), (61.5, 162.0)][..]]);
    }

    #[test]
    fn an_x_axis_labels_its_ticks_under_the_line_and_says_its_title_left() {
        let mut p = Recorder::new(1.0);
        x_axis(&mut p, &XAxis::rows(999, (62.0, 700.0), 162.0));
        assert_eq!(p.ops[0], Op::FillRect(palette::AXIS.into(), (62.0, 162.0, 700.0, 1.0)));
        let texts = p.texts();
        assert_eq!(texts.last(), Some(&"row"));
        assert_eq!(texts.len() - 1, p.strokes(palette::AXIS).len(), "one tick per label");
        assert!(texts.len() >= 3, "{texts:?}");
    }
}
