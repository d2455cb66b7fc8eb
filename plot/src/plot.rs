//! Drawing the active memory timeline with plotters.
//!
//! The drawing is generic over plotters' [`DrawingBackend`]: in the browser
//! it goes to a `<canvas>` (plotters-canvas), in the unit tests to a
//! recording backend, so what is drawn where is tested without a browser.
//! plotters draws the frame, the axes and their labels; the data is drawn
//! in canvas pixels through [`Geometry`], the same mapping the mouse uses,
//! so a bar is hit exactly where it is seen, and everything is clipped to
//! the plot area by hand (plotters does not clip elements).
//!
//! Layers, back to front: the min–max band of each curve per bucket (the
//! range the curve swept inside that pixel column), the allocation bars,
//! each curve's `last` line (its value at the end of each bucket), then the
//! markers (OOMs, and the first event of a wrapped trace).

use plotters::coord::Shift;
use plotters::coord::combinators::BindKeyPoints;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use vramscope_shared::timeline::{Axis, Bucket, Marker, MarkerKind, Range3, TimelineWindow};

use crate::layout::{Bar, Geometry};
use crate::viewport::{ByteRange, Window};
use crate::{format, palette};

// The palette's colours in plotters' form (`palette` defines them).
const BACKGROUND: RGBColor = palette::BACKGROUND.rgb();
const RESERVED: RGBColor = palette::RESERVED.rgb();
const ACTIVE: RGBColor = palette::ACTIVE.rgb();
const ALLOCATED: RGBColor = palette::ALLOCATED.rgb();
const OOM: RGBColor = palette::OOM.rgb();
const WINDOW_START: RGBColor = palette::WINDOW_START.rgb();
const MATCH: RGBColor = palette::MATCH.rgb();
const CURSOR: RGBColor = palette::CURSOR.rgb();
const AXIS: RGBColor = palette::AXIS.rgb();
const GRID: RGBColor = palette::GRID.rgb();
const LABEL: RGBColor = palette::LABEL.rgb();

/// What to draw: a window from the API, its stacked bars, and the view,
/// which may differ from the window's own range while a new one loads (the
/// old data is then shown at the new position, clipped).
#[derive(Clone, Copy, Debug)]
pub struct Scene<'a> {
    /// The data.
    pub data: &'a TimelineWindow,
    /// The allocations of `data`, stacked ([`crate::layout::stack`]).
    pub bars: &'a [Bar],
    /// The x window to show.
    pub view: Window,
    /// x of the trace's first event: the origin of time labels.
    pub origin: i64,
    /// Index into `bars` of the bar under the mouse, drawn outlined.
    pub highlight: Option<usize>,
    /// Indexes into `bars` of search matches, outlined in [`palette::MATCH`].
    pub marked: &'a [usize],
    /// x of the instant the allocator-state panel shows: a vertical line.
    pub cursor: Option<i64>,
    /// The byte band shown when zoomed on memory; `None`: from 0 to
    /// [`Scene::y_max`].
    pub y_range: Option<ByteRange>,
}

impl Scene<'_> {
    /// The top of the y axis: the highest curve or bar in the data, plus a
    /// little headroom, at least 1.
    pub fn y_max(&self) -> u64 {
        let curves = self.data.buckets.iter().map(|b| b.reserved.max.max(b.active.max).max(b.allocated.max)).max();
        let bars = self.bars.iter().map(|b| b.y1).max();
        let top = curves.unwrap_or(0).max(bars.unwrap_or(0));
        top.saturating_add(top / 20).max(1)
    }
}

/// Space above the plot area, in pixels.
const MARGIN_TOP: u32 = 18;
/// Space below the x labels, in pixels.
const MARGIN_BOTTOM: u32 = 4;
/// Height of the x labels' row, in pixels.
const X_LABELS: u32 = 28;

/// Height of the plot area on a canvas `canvas_height` pixels tall, as
/// [`draw`] lays it out: known before the first draw, so the first query of
/// a linked memory zoom asks for the same threshold as later ones.
pub const fn plot_height(canvas_height: u32) -> u32 {
    canvas_height.saturating_sub(MARGIN_TOP + MARGIN_BOTTOM + X_LABELS)
}

/// Draw `scene` on `root` and return where the plot area went.
pub fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, scene: &Scene<'_>) -> Result<Geometry, String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("drawing the timeline failed: {e}");
    root.fill(&BACKGROUND).map_err(err)?;
    let view = scene.view;
    let y = scene.y_range.unwrap_or(ByteRange { lo: 0, hi: scene.y_max() });
    let (y_min, y_max) = (y.lo, y.hi.max(y.lo + 1));
    // Our own ticks: round steps from the trace's start (plotters counts
    // from zero, which on microseconds since the epoch gives odd labels),
    // and powers of two for bytes.
    let (x_ticks, x_step) = format::x_ticks(view.start, view.end, scene.origin, 8);
    let y_ticks = if y_min == 0 { format::byte_ticks(y_max, 6) } else { y.ticks(6) };
    let mut chart = ChartBuilder::on(root)
        .margin_top(MARGIN_TOP)
        .margin_right(16)
        .margin_left(8)
        .margin_bottom(MARGIN_BOTTOM)
        .x_label_area_size(X_LABELS)
        .y_label_area_size(72)
        .build_cartesian_2d((view.start..view.end).with_key_points(x_ticks), (y_min..y_max).with_key_points(y_ticks))
        .map_err(err)?;
    let axis = scene.data.axis;
    let x_label = |x: &i64| format::x_label(axis, *x, scene.origin, x_step);
    // Zoomed on memory far from 0, rounded labels would all read alike
    // ("50.0 MiB") and exact ones do not fit: bytes above the bottom then
    // (the status line gives the bottom).
    let relative = y_max.saturating_sub(y_min).saturating_mul(100) < y_max;
    let y_label =
        |y: &u64| if relative { format!("+{}", format::bytes(y.saturating_sub(y_min))) } else { format::bytes(*y) };
    chart
        .configure_mesh()
        .bold_line_style(GRID)
        .light_line_style(TRANSPARENT)
        .axis_style(AXIS)
        .label_style(("sans-serif", 12).into_font().color(&LABEL))
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .draw()
        .map_err(err)?;
    // The plot area in `root`'s own pixels (the ranges are the backend's:
    // they differ when `root` is a part of a larger image, as in
    // [`draw_framed`]).
    let (xs, ys) = chart.plotting_area().get_pixel_range();
    let (base_x, base_y) = root.get_base_pixel();
    let geometry = Geometry {
        left: f64::from(xs.start - base_x),
        top: f64::from(ys.start - base_y),
        width: f64::from((xs.end - xs.start).max(1)),
        height: f64::from((ys.end - ys.start).max(1)),
        window: view,
        y_min,
        y_max,
    };

    let curves: [(Curve, RGBColor); 3] =
        [(|b| b.reserved, RESERVED), (|b| b.active, ACTIVE), (|b| b.allocated, ALLOCATED)];
    let columns = columns(scene.data, &geometry);
    for (curve, colour) in curves {
        if let Some(band) = band(&columns, &geometry, curve) {
            root.draw(&Polygon::new(band, colour.mix(0.18).filled())).map_err(err)?;
        }
    }
    for (i, bar) in scene.bars.iter().enumerate() {
        let Some(rect) = bar_rect(&geometry, bar) else { continue };
        let stack = scene.data.allocations.get(bar.index).map_or(0, |a| a.stack);
        let colour = palette::BARS[stack as usize % palette::BARS.len()].rgb();
        let alpha = if scene.highlight == Some(i) { 0.95 } else { 0.6 };
        root.draw(&Rectangle::new(rect, colour.mix(alpha).filled())).map_err(err)?;
    }
    for (curve, colour) in curves {
        let line = last_line(&columns, &geometry, curve);
        if line.len() > 1 {
            root.draw(&PathElement::new(line, colour.stroke_width(2))).map_err(err)?;
        }
    }
    if let Some(rect) = scene.highlight.and_then(|i| scene.bars.get(i)).and_then(|bar| bar_rect(&geometry, bar)) {
        root.draw(&Rectangle::new(rect, BLACK.stroke_width(2))).map_err(err)?;
    }
    for rect in scene.marked.iter().filter_map(|&i| scene.bars.get(i)).filter_map(|bar| bar_rect(&geometry, bar)) {
        root.draw(&Rectangle::new(rect, MATCH.stroke_width(2))).map_err(err)?;
    }
    draw_markers(root, scene, &geometry).map_err(err)?;
    if let Some(x) = scene.cursor.filter(|&x| x >= view.start && x < view.end) {
        let x = geometry.x_px(x as f64).round() as i32;
        let (top, bottom) = (geometry.top.round() as i32, (geometry.top + geometry.height).round() as i32);
        root.draw(&PathElement::new(vec![(x, top), (x, bottom)], CURSOR.stroke_width(1))).map_err(err)?;
    }
    Ok(geometry)
}

/// Picks one curve out of a bucket.
type Curve = fn(&Bucket) -> Range3;

/// A bucket in pixels: its left and right edges on the canvas, clipped.
struct Column {
    x0: i32,
    x1: i32,
    bucket: Bucket,
}

fn columns(data: &TimelineWindow, g: &Geometry) -> Vec<Column> {
    let (lo, hi) = (g.left, g.left + g.width);
    data.buckets
        .iter()
        .filter(|b| b.x1 > g.window.start && b.x0 < g.window.end)
        .map(|b| Column {
            x0: g.x_px(b.x0 as f64).clamp(lo, hi).round() as i32,
            x1: g.x_px(b.x1 as f64).clamp(lo, hi).round() as i32,
            bucket: *b,
        })
        .collect()
}

fn y_px(g: &Geometry, y: u64) -> i32 {
    g.y_px(y.clamp(g.y_min, g.y_max)).round() as i32
}

/// The outline of a curve's min–max band: the maxima left to right, then
/// the minima back.
fn band(columns: &[Column], g: &Geometry, curve: Curve) -> Option<Vec<(i32, i32)>> {
    if columns.is_empty() {
        return None;
    }
    let mut points = Vec::with_capacity(columns.len() * 4);
    for c in columns {
        let top = y_px(g, curve(&c.bucket).max);
        points.push((c.x0, top));
        points.push((c.x1, top));
    }
    for c in columns.iter().rev() {
        let bottom = y_px(g, curve(&c.bucket).min);
        points.push((c.x1, bottom));
        points.push((c.x0, bottom));
    }
    Some(points)
}

/// A curve's value at the end of each bucket, as steps.
fn last_line(columns: &[Column], g: &Geometry, curve: Curve) -> Vec<(i32, i32)> {
    let mut points = Vec::with_capacity(columns.len() * 2);
    for c in columns {
        let y = y_px(g, curve(&c.bucket).last);
        points.push((c.x0, y));
        points.push((c.x1, y));
    }
    points
}

fn bar_rect(g: &Geometry, bar: &Bar) -> Option<[(i32, i32); 2]> {
    let (x0, y0, x1, y1) = g.bar_px(bar, 1.0)?;
    Some([(x0.round() as i32, y0.round() as i32), (x1.round() as i32, y1.round() as i32)])
}

fn draw_markers<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    scene: &Scene<'_>,
    g: &Geometry,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let (top, bottom) = (g.top.round() as i32, (g.top + g.height).round() as i32);
    for m in &scene.data.markers {
        if m.x < g.window.start || m.x >= g.window.end {
            continue;
        }
        let x = g.x_px(m.x as f64).round() as i32;
        let (colour, label) = match m.kind {
            MarkerKind::Oom if m.count > 1 => (OOM, format!("OOM ×{}", m.count)),
            MarkerKind::Oom => (OOM, "OOM".to_owned()),
            MarkerKind::WindowStart => (WINDOW_START, "trace starts: earlier history lost".to_owned()),
        };
        root.draw(&PathElement::new(vec![(x, top), (x, bottom)], colour.stroke_width(2)))?;
        // Labels sit above the plot area, beside their line: on its right,
        // or on its left in the right half, so they stay on the canvas.
        let (anchor, dx) = if f64::from(x) > g.left + g.width / 2.0 { (HPos::Right, -4) } else { (HPos::Left, 4) };
        let font = ("sans-serif", 12).into_font().color(&colour).pos(Pos::new(anchor, VPos::Top));
        root.draw(&Text::new(label, (x + dx, top - 15), font))?;
    }
    Ok(())
}

/// The legend of the timeline's colours and lines: (label, colour, is a
/// line), in the dashboard's words (`explorer::timeline`'s legend).
pub const LEGEND: [(&str, RGBColor, LegendKey); 6] = [
    ("reserved (segments from CUDA)", RESERVED, LegendKey::Curve),
    ("active (allocated + pending free)", ACTIVE, LegendKey::Curve),
    ("allocated (requested bytes)", ALLOCATED, LegendKey::Curve),
    (
        "allocations, coloured by stack; a bar across the whole chart was allocated before the trace or never freed",
        palette::BARS[0].rgb(),
        LegendKey::Bar,
    ),
    ("OOM", OOM, LegendKey::Line(MarkerKind::Oom)),
    ("trace start (earlier history lost)", WINDOW_START, LegendKey::Line(MarkerKind::WindowStart)),
];

/// How a legend entry is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LegendKey {
    /// A curve: its band, with its line on top.
    Curve,
    /// An allocation bar.
    Bar,
    /// A vertical marker line, in the legend only when the chart has one
    /// of its kind ([`has_marker`]).
    Line(MarkerKind),
}

/// Whether `markers` (a window's) hold one of `kind`: a legend names a
/// marker only when the chart shows one (the image's legend here, the
/// dashboard's beside its canvas).
pub fn has_marker(markers: &[Marker], kind: MarkerKind) -> bool {
    markers.iter().any(|m| m.kind == kind)
}

/// Height of a framed chart's title rows ([`draw_framed`]).
const FRAME_TOP: u32 = 44;
/// Height of a framed chart's x-axis title and legend rows.
const FRAME_BOTTOM: u32 = 54;

/// Draw `scene` as a chart that stands alone (an image file, not a page
/// around a canvas): `title` above, the y axis' title, the plot, the x
/// axis' title and the legend of its colours and lines under it. Returns
/// where the plot area went, in `root`'s pixels.
pub fn draw_framed<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    scene: &Scene<'_>,
    title: &str,
) -> Result<Geometry, String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("drawing the chart's frame failed: {e}");
    root.fill(&BACKGROUND).map_err(err)?;
    let (width, height) = root.dim_in_pixel();
    let (top, rest) = root.split_vertically(FRAME_TOP);
    let (body, bottom) = rest.split_vertically(height.saturating_sub(FRAME_TOP + FRAME_BOTTOM));
    let left = |size: u32, colour: &RGBColor| {
        ("sans-serif", size).into_font().color(colour).pos(Pos::new(HPos::Left, VPos::Top))
    };
    top.draw(&Text::new(title.to_owned(), (10, 4), left(16, &BLACK))).map_err(err)?;
    top.draw(&Text::new("memory (bytes, 1 GiB = 1024³)".to_owned(), (10, 27), left(12, &LABEL))).map_err(err)?;
    let geometry = draw(&body, scene)?;
    let centre = ("sans-serif", 12).into_font().color(&LABEL).pos(Pos::new(HPos::Center, VPos::Top));
    let x_title = format!("x: {}", x_axis_caption(scene.data.axis));
    let mid = (geometry.left + geometry.width / 2.0).round() as i32;
    bottom.draw(&Text::new(x_title, (mid, 2), centre)).map_err(err)?;
    // The legend, in rows: a swatch, then its label; a marker's entry only
    // when the chart has one.
    let (mut x, mut y) = (10, 20);
    for (label, colour, key) in LEGEND {
        if let LegendKey::Line(kind) = key
            && !has_marker(&scene.data.markers, kind)
        {
            continue;
        }
        let text = left(11, &LABEL);
        let (w, _) = bottom.estimate_text_size(label, &text).map_err(err)?;
        let needed = 18 + w as i32;
        if x > 10 && x + needed > width as i32 - 10 {
            (x, y) = (10, y + 16);
        }
        match key {
            LegendKey::Line(_) => bottom.draw(&Rectangle::new([(x + 6, y), (x + 8, y + 12)], colour.filled())),
            LegendKey::Bar => bottom.draw(&Rectangle::new([(x, y + 2), (x + 14, y + 11)], colour.mix(0.6).filled())),
            LegendKey::Curve => {
                bottom.draw(&Rectangle::new([(x, y + 2), (x + 14, y + 11)], colour.mix(0.3).filled())).and_then(|()| {
                    bottom.draw(&PathElement::new(vec![(x, y + 2), (x + 14, y + 2)], colour.stroke_width(2)))
                })
            }
        }
        .map_err(err)?;
        bottom.draw(&Text::new(label.to_owned(), (x + 18, y), text)).map_err(err)?;
        x += needed + 16;
    }
    Ok(Geometry { top: geometry.top + f64::from(FRAME_TOP), ..geometry })
}

/// A caption of the x axis, for the page around the canvas.
pub fn x_axis_caption(axis: Axis) -> &'static str {
    match axis {
        Axis::Time => "time since the trace's first event",
        Axis::Event => "trace events, in order",
    }
}

#[cfg(test)]
mod tests {
    use plotters_backend::BackendCoord;
    use vramscope_shared::intervals::SnapshotIntervals;
    use vramscope_shared::timeline::TimelineIndex;

    use super::*;
    use crate::layout::{hit, stack};
    use crate::recorder::{Log, Recorder};

    const RECORDER_HEIGHT: u32 = 400;

    fn oom_leak_window(axis: Axis, px: u32) -> TimelineWindow {
        let snapshot = vramscope_shared::testing::snapshot("oom_leak");
        let index = SnapshotIntervals::build(&snapshot);
        let timeline = TimelineIndex::build(&snapshot, &index);
        let (lo, hi) = timeline.extent(0, axis).expect("extent");
        timeline.query(0, axis, lo, hi, px, 2000).expect("window")
    }

    #[test]
    fn draws_curves_bars_and_the_oom_marker_where_the_mouse_finds_them() {
        let data = oom_leak_window(Axis::Event, 900);
        let bars = stack(&data.allocations);
        assert!(!bars.is_empty());
        let view = Window::new(data.start, data.end);
        let scene = Scene {
            data: &data,
            bars: &bars,
            view,
            origin: data.start,
            highlight: Some(0),
            marked: &[1],
            cursor: Some(data.start + 100),
            y_range: None,
        };
        let (geometry, recorder) = record(&scene);
        assert!(geometry.width > 800.0 && geometry.height > 300.0, "{geometry:?}");
        // The height a query uses before the first draw is the one drawn.
        assert_eq!(geometry.height, f64::from(plot_height(RECORDER_HEIGHT)), "{geometry:?}");

        // A band and a line per curve, in the curve's colour.
        for colour in [RESERVED, ACTIVE, ALLOCATED] {
            assert!(recorder.polygons.iter().any(|(c, p)| *c == colour && p.len() > 100), "{colour:?} band");
            assert!(recorder.paths.iter().any(|(c, p, _)| *c == colour && p.len() > 100), "{colour:?} line");
        }
        // Everything stays inside the canvas's plot area.
        let inside = |&(x, y): &BackendCoord| {
            f64::from(x) >= geometry.left - 1.0
                && f64::from(x) <= geometry.left + geometry.width + 1.0
                && f64::from(y) >= geometry.top - 1.0
                && f64::from(y) <= geometry.top + geometry.height + 1.0
        };
        assert!(recorder.polygons.iter().all(|(_, p)| p.iter().all(inside)));
        // The OOM marker: a red vertical line at its row, and its label.
        let oom = data.markers.iter().find(|m| m.kind == MarkerKind::Oom).expect("oom_leak has an OOM");
        let x = geometry.x_px(oom.x as f64).round() as i32;
        assert!(recorder.paths.iter().any(|(c, p, _)| *c == OOM && p.iter().all(|pt| pt.0 == x)));
        assert!(recorder.texts.iter().any(|(t, _, _)| t.starts_with("OOM")));
        // Axis labels are byte sizes and row numbers.
        assert!(
            recorder.texts.iter().any(|(t, _, _)| t.ends_with("MiB") || t.ends_with("KiB")),
            "{:?}",
            recorder.texts
        );
        // Each bar is drawn once (plus the outline of the highlighted one),
        // and the mouse at a bar's centre finds that bar.
        let filled: Vec<_> = recorder.rects.iter().filter(|r| r.1 && !(r.2.0 == 0 && r.2.1 == 0)).collect();
        assert!(filled.len() >= bars.len() / 2, "{} of {}", filled.len(), bars.len());
        let biggest = (0..bars.len()).max_by_key(|&i| bars[i].y1 - bars[i].y0).expect("a bar");
        let (x0, y0, x1, y1) = geometry.bar_px(&bars[biggest], 1.0).expect("visible");
        assert_eq!(hit(&bars, &geometry, (x0 + x1) / 2.0, (y0 + y1) / 2.0), Some(biggest));
        assert!(recorder.rects.iter().any(|r| r.0 == BLACK && !r.1), "the highlight's outline");
        assert!(recorder.rects.iter().any(|r| r.0 == MATCH && !r.1), "a search match's outline");
        let cursor = geometry.x_px((data.start + 100) as f64).round() as i32;
        assert!(recorder.paths.iter().any(|(c, p, _)| *c == CURSOR && p.iter().all(|pt| pt.0 == cursor)), "the cursor");
    }

    #[test]
    fn an_old_window_is_drawn_clipped_at_a_new_view() {
        let data = oom_leak_window(Axis::Time, 500);
        let bars = stack(&data.allocations);
        // Panned right by half a window: only the old data's right half shows.
        let half = (data.end - data.start) / 2;
        let view = Window::new(data.start + half, data.end + half);
        let scene = Scene {
            data: &data,
            bars: &bars,
            view,
            origin: data.start,
            highlight: None,
            marked: &[],
            cursor: None,
            y_range: None,
        };
        let (geometry, recorder) = record(&scene);
        let right = (geometry.left + geometry.width).round() as i32;
        let middle = geometry.x_px((data.end) as f64).round() as i32;
        for (colour, points) in &recorder.polygons {
            if [RESERVED, ACTIVE, ALLOCATED].contains(colour) {
                assert!(points.iter().all(|p| p.0 <= middle + 1 && p.0 <= right), "clipped at the data's end");
            }
        }
        assert!(recorder.texts.iter().any(|(t, _, _)| t.ends_with(" s") || t.ends_with(" ms")), "{:?}", recorder.texts);
    }

    #[test]
    fn a_marker_is_in_the_legend_only_when_the_window_has_one() {
        let marker = |kind| Marker { x: 0, row: 0, kind, count: 1 };
        assert!(!has_marker(&[], MarkerKind::Oom) && !has_marker(&[], MarkerKind::WindowStart));
        let ooms = [marker(MarkerKind::Oom), marker(MarkerKind::Oom)];
        assert!(has_marker(&ooms, MarkerKind::Oom) && !has_marker(&ooms, MarkerKind::WindowStart));
        assert!(has_marker(&[marker(MarkerKind::WindowStart)], MarkerKind::WindowStart));
    }

    #[test]
    fn a_framed_chart_has_its_title_axis_titles_and_legend_and_its_curves_inside_the_plot() {
        let data = oom_leak_window(Axis::Event, 900);
        let bars = stack(&data.allocations);
        let scene = Scene {
            data: &data,
            bars: &bars,
            view: Window::new(data.start, data.end),
            origin: data.start,
            highlight: None,
            marked: &[],
            cursor: None,
            y_range: None,
        };
        let (recorder, log) = Recorder::new((1200, 480));
        let geometry = draw_framed(&recorder.into_drawing_area(), &scene, "oom_leak.pickle").expect("draws");
        let log = log.take();
        let texts: Vec<&str> = log.texts.iter().map(|(t, _, _)| t.as_str()).collect();
        for want in ["oom_leak.pickle", "memory (bytes, 1 GiB = 1024³)", "x: trace events, in order"] {
            assert!(texts.contains(&want), "{want:?} in {texts:?}");
        }
        for (label, _, key) in LEGEND {
            // oom_leak's trace starts empty: no "trace start" marker, so no entry.
            let drawn = key != LegendKey::Line(MarkerKind::WindowStart);
            assert_eq!(texts.contains(&label), drawn, "legend entry {label:?} in {texts:?}");
        }
        // The plot sits between the title and the legend, and the curves in
        // it: the plot's pixels are the image's, not the framed part's.
        assert!(
            geometry.top >= f64::from(FRAME_TOP) && geometry.top + geometry.height <= f64::from(480 - FRAME_BOTTOM)
        );
        let inside = |&(x, y): &BackendCoord| {
            f64::from(x) >= geometry.left - 1.0
                && f64::from(x) <= geometry.left + geometry.width + 1.0
                && f64::from(y) >= geometry.top - 1.0
                && f64::from(y) <= geometry.top + geometry.height + 1.0
        };
        let curves: Vec<_> = log.polygons.iter().filter(|(c, p)| *c == RESERVED && p.len() > 100).collect();
        assert!(
            !curves.is_empty() && curves.iter().all(|(_, p)| p.iter().all(inside)),
            "the reserved band is in the plot"
        );
    }

    fn record(scene: &Scene<'_>) -> (Geometry, Log) {
        let (recorder, log) = Recorder::new((1000, RECORDER_HEIGHT));
        let geometry = draw(&recorder.into_drawing_area(), scene).expect("draws");
        (geometry, log.take())
    }
}
