//! The analysis panels' charts (what-if, leaks, compare): curves given as per-pixel buckets (the
//! `min`/`max`/`last` of each bucket, as the API answers them) drawn with
//! plotters over a plain x range, generic over the backend so the drawing
//! is tested natively. Every shape is bounded by the buckets, so by the
//! plot's pixel width, never by the trace.

use plotters::coord::Shift;
use plotters::coord::combinators::BindKeyPoints;
use plotters::prelude::*;
use vramscope_shared::timeline::Range3;

use crate::core::{format, palette};

// The palette's colours in plotters' form (`palette` defines them).
const AXIS: RGBColor = palette::AXIS.rgb();
const GRID: RGBColor = palette::GRID.rgb();
const LABEL: RGBColor = palette::LABEL.rgb();

/// One bucket of a curve, x in the chart's units.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Column {
    /// Left edge.
    pub x0: f64,
    /// Right edge.
    pub x1: f64,
    /// The curve over the bucket.
    pub range: Range3,
}

/// A curve to draw.
#[derive(Clone, Debug, PartialEq)]
pub struct Curve {
    /// Its buckets, left to right.
    pub columns: Vec<Column>,
    /// Its colour.
    pub colour: RGBColor,
    /// Fill the min–max band under the `last` line.
    pub band: bool,
    /// Line width in pixels.
    pub width: u32,
    /// Its entry in the legend drawn right of the plot; empty: none.
    pub label: String,
    /// Drawn dashed, so that a curve drawn earlier under it shows through
    /// the gaps (two stacks retaining the same bytes step after step).
    pub dashed: bool,
}

/// A vertical line with a label.
#[derive(Clone, Debug, PartialEq)]
pub struct Marker {
    /// Where.
    pub x: f64,
    /// Its colour.
    pub colour: RGBColor,
    /// Its label, drawn above the plot.
    pub label: String,
}

/// What to draw.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    /// The x range shown.
    pub x_range: (f64, f64),
    /// The y axis' top; [`y_top`] of the curves when several charts share it.
    pub y_max: u64,
    /// Back to front.
    pub curves: Vec<Curve>,
    /// Drawn last.
    pub markers: Vec<Marker>,
}

/// A y axis' top for curves reaching `max`: a little headroom, at least 1.
pub fn y_top(max: u64) -> u64 {
    max.saturating_add(max / 20).max(1)
}

/// Where the plot area went on the canvas.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Area {
    /// Left edge, pixels.
    pub left: f64,
    /// Top edge.
    pub top: f64,
    /// Width.
    pub width: f64,
    /// Height.
    pub height: f64,
}

impl Area {
    /// x in pixels of `x` on the range, clamped to the plot.
    pub fn x_px(&self, range: (f64, f64), x: f64) -> i32 {
        let span = (range.1 - range.0).max(f64::MIN_POSITIVE);
        let px = self.left + (x - range.0) / span * self.width;
        px.clamp(self.left, self.left + self.width).round() as i32
    }

    /// y in pixels of `y` on `0..=y_max`, clamped to the plot.
    pub fn y_px(&self, y_max: u64, y: u64) -> i32 {
        let share = y.min(y_max) as f64 / y_max.max(1) as f64;
        (self.top + self.height * (1.0 - share)).round() as i32
    }
}

/// The step line of a curve's `last` values, in pixels, for the buckets
/// inside the x range.
pub fn line_points(curve: &Curve, area: &Area, range: (f64, f64), y_max: u64) -> Vec<(i32, i32)> {
    let mut points = Vec::with_capacity(curve.columns.len() * 2);
    for c in curve.columns.iter().filter(|c| c.x1 > range.0 && c.x0 < range.1) {
        let y = area.y_px(y_max, c.range.last);
        points.push((area.x_px(range, c.x0), y));
        points.push((area.x_px(range, c.x1), y));
    }
    points
}

/// The outline of a curve's min–max band: maxima left to right, minima back.
pub fn band_points(curve: &Curve, area: &Area, range: (f64, f64), y_max: u64) -> Vec<(i32, i32)> {
    let visible: Vec<&Column> = curve.columns.iter().filter(|c| c.x1 > range.0 && c.x0 < range.1).collect();
    let mut points = Vec::with_capacity(visible.len() * 4);
    for c in &visible {
        let top = area.y_px(y_max, c.range.max);
        points.push((area.x_px(range, c.x0), top));
        points.push((area.x_px(range, c.x1), top));
    }
    for c in visible.iter().rev() {
        let bottom = area.y_px(y_max, c.range.min);
        points.push((area.x_px(range, c.x1), bottom));
        points.push((area.x_px(range, c.x0), bottom));
    }
    points
}

/// Draw a curve's line through `points`, solid or dashed.
fn stroke<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    points: Vec<(i32, i32)>,
    curve: &Curve,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let style = curve.colour.stroke_width(curve.width);
    if curve.dashed {
        root.draw(&plotters::element::DashedPathElement::new(points, DASH.0, DASH.1, style))
    } else {
        root.draw(&PathElement::new(points, style))
    }
}

/// Space above the plot for one row of marker labels, pixels.
const MARGIN_TOP: i32 = 18;
/// Height of a row of marker labels (12 px text).
const LABEL_ROW: i32 = 14;
/// A generous width of one character of the 12 px labels: sans-serif
/// averages under 7 px, so labels laid out by it never touch.
const LABEL_CHAR: i32 = 7;
/// Left margin and y label area: the plot's left edge.
const PLOT_LEFT: i32 = 8 + 72;
/// Right margin.
const MARGIN_RIGHT: i32 = 16;
/// The legend's sample line, and the gap between it and its text.
const LEGEND_SAMPLE: i32 = 22;
/// Height of a legend entry.
const LEGEND_ROW: i32 = 16;
/// A dash and the gap after it, pixels.
const DASH: (u32, u32) = (6, 4);

/// Width of the legend of `curves` right of the plot (0 when none is
/// labelled).
fn legend_width(curves: &[Curve]) -> i32 {
    let widest = curves.iter().map(|c| c.label.chars().count() as i32).max().unwrap_or(0);
    if widest == 0 { 0 } else { 12 + LEGEND_SAMPLE + 6 + widest * LABEL_CHAR }
}

/// Where a marker at pixel `x` puts its label on a plot from `left`,
/// `width` wide: right of the line in the plot's left half, left of it in
/// the right half; its extent `(from, to)` in pixels.
pub fn label_span(x: i32, label: &str, left: f64, width: f64) -> (i32, i32) {
    let w = label.chars().count() as i32 * LABEL_CHAR;
    if f64::from(x) > left + width / 2.0 { (x - 4 - w, x - 4) } else { (x + 4, x + 4 + w) }
}

/// The row (0 nearest the plot) of each label, given their extents: each
/// goes in the first row where it overlaps no label already placed, so
/// two markers close together ("simulated OOM" beside "recorded OOM")
/// stack instead of drawing over each other.
pub fn label_rows(spans: &[(i32, i32)]) -> Vec<usize> {
    let mut rows: Vec<Vec<(i32, i32)>> = Vec::new();
    spans
        .iter()
        .map(|&(a, b)| {
            // An empty label (a bare line) takes no room.
            if a >= b {
                return 0;
            }
            let free = rows.iter().position(|row| row.iter().all(|&(c, d)| b + 4 <= c || d + 4 <= a));
            let k = free.unwrap_or_else(|| {
                rows.push(Vec::new());
                rows.len() - 1
            });
            rows[k].push((a, b));
            k
        })
        .collect()
}

/// Draw `chart` on `root`, x labels by `x_label`; returns the plot area.
pub fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: &Chart,
    x_label: &dyn Fn(f64) -> String,
) -> Result<Area, String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("drawing the chart failed: {e}");
    root.fill(&WHITE).map_err(err)?;
    let (x0, x1) = chart.x_range;
    let x1 = if x1 > x0 { x1 } else { x0 + 1.0 };
    let range = (x0, x1);
    let y_max = chart.y_max.max(1);
    // The markers' labels are laid out before the plot, whose x extent does
    // not depend on the top margin: as many rows above it as they need.
    let markers: Vec<&Marker> = chart.markers.iter().filter(|m| m.x >= x0 && m.x <= x1).collect();
    let margin_right = MARGIN_RIGHT + legend_width(&chart.curves);
    let plot_width = (f64::from(root.dim_in_pixel().0 as i32 - PLOT_LEFT - margin_right)).max(1.0);
    let guess = Area { left: f64::from(PLOT_LEFT), top: 0.0, width: plot_width, height: 1.0 };
    let spans: Vec<(i32, i32)> =
        markers.iter().map(|m| label_span(guess.x_px(range, m.x), &m.label, guess.left, guess.width)).collect();
    let rows = label_rows(&spans);
    let label_rows = rows.iter().max().map_or(1, |r| r + 1) as i32;
    let mut builder = ChartBuilder::on(root)
        .margin_top(MARGIN_TOP + LABEL_ROW * (label_rows - 1))
        .margin_right(margin_right)
        .margin_left(8)
        .margin_bottom(4)
        .x_label_area_size(24)
        .y_label_area_size(72)
        .build_cartesian_2d(x0..x1, (0u64..y_max).with_key_points(format::byte_ticks(y_max, 5)))
        .map_err(err)?;
    let y_label = |y: &u64| format::bytes(*y);
    let x_fmt = |x: &f64| x_label(*x);
    builder
        .configure_mesh()
        .bold_line_style(GRID)
        .light_line_style(TRANSPARENT)
        .axis_style(AXIS)
        .x_labels(7)
        .label_style(("sans-serif", 12).into_font().color(&LABEL))
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_label)
        .draw()
        .map_err(err)?;
    let (xs, ys) = builder.plotting_area().get_pixel_range();
    let area = Area {
        left: f64::from(xs.start),
        top: f64::from(ys.start),
        width: f64::from((xs.end - xs.start).max(1)),
        height: f64::from((ys.end - ys.start).max(1)),
    };
    for curve in chart.curves.iter().filter(|c| c.band) {
        let band = band_points(curve, &area, range, y_max);
        if band.len() > 2 {
            root.draw(&Polygon::new(band, curve.colour.mix(0.15).filled())).map_err(err)?;
        }
    }
    for curve in &chart.curves {
        let line = line_points(curve, &area, range, y_max);
        if line.len() > 1 {
            stroke(root, line, curve).map_err(err)?;
        }
    }
    // The legend, right of the plot: each labelled curve's line and name.
    let legend_x = (area.left + area.width).round() as i32 + 12;
    for (k, curve) in chart.curves.iter().filter(|c| !c.label.is_empty()).enumerate() {
        let y = area.top.round() as i32 + 6 + LEGEND_ROW * k as i32;
        stroke(root, vec![(legend_x, y), (legend_x + LEGEND_SAMPLE, y)], curve).map_err(err)?;
        let pos = plotters::style::text_anchor::Pos::new(
            plotters::style::text_anchor::HPos::Left,
            plotters::style::text_anchor::VPos::Center,
        );
        let font = ("sans-serif", 12).into_font().color(&LABEL).pos(pos);
        root.draw(&Text::new(curve.label.clone(), (legend_x + LEGEND_SAMPLE + 6, y), font)).map_err(err)?;
    }
    let (top, bottom) = (area.top.round() as i32, (area.top + area.height).round() as i32);
    for (m, row) in markers.iter().zip(rows) {
        let x = area.x_px(range, m.x);
        root.draw(&PathElement::new(vec![(x, top), (x, bottom)], m.colour.stroke_width(2))).map_err(err)?;
        // Anchored at the line's side, as `label_span` measured it.
        let right_half = f64::from(x) > area.left + area.width / 2.0;
        let (anchor, dx) = if right_half {
            (plotters::style::text_anchor::HPos::Right, -4)
        } else {
            (plotters::style::text_anchor::HPos::Left, 4)
        };
        let pos = plotters::style::text_anchor::Pos::new(anchor, plotters::style::text_anchor::VPos::Top);
        let font = ("sans-serif", 12).into_font().color(&m.colour).pos(pos);
        let y = top - 15 - LABEL_ROW * row as i32;
        root.draw(&Text::new(m.label.clone(), (x + dx, y), font)).map_err(err)?;
    }
    Ok(area)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(min: u64, max: u64, last: u64) -> Range3 {
        Range3 { min, max, last }
    }

    #[test]
    fn pixels_are_clamped_to_the_plot_and_lines_follow_the_buckets() {
        let area = Area { left: 10.0, top: 0.0, width: 100.0, height: 50.0 };
        assert_eq!(area.x_px((0.0, 10.0), 5.0), 60);
        assert_eq!(area.x_px((0.0, 10.0), -3.0), 10);
        assert_eq!(area.x_px((0.0, 10.0), 30.0), 110);
        assert_eq!(area.y_px(100, 100), 0);
        assert_eq!(area.y_px(100, 0), 50);
        assert_eq!(area.y_px(100, 1000), 0, "clamped at the top");
        let curve = Curve {
            columns: vec![
                Column { x0: 0.0, x1: 5.0, range: r(0, 100, 50) },
                Column { x0: 5.0, x1: 10.0, range: r(50, 50, 50) },
                Column { x0: 10.0, x1: 15.0, range: r(0, 0, 0) },
            ],
            colour: palette::SIM_RESERVED.rgb(),
            band: true,
            width: 2,
            label: String::new(),
            dashed: false,
        };
        let line = line_points(&curve, &area, (0.0, 10.0), 100);
        assert_eq!(line, vec![(10, 25), (60, 25), (60, 25), (110, 25)], "the bucket past the range is left out");
        let band = band_points(&curve, &area, (0.0, 10.0), 100);
        assert_eq!(band.len(), 8);
        assert_eq!(band[0], (10, 0));
        assert_eq!(band[7], (10, 50));
        assert_eq!(y_top(100), 105);
        assert_eq!(y_top(0), 1);
    }
}
