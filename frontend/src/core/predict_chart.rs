//! The "Will it fit?" chart: the predicted reserved peak at each size
//! searched (a line through squares, red where the size runs out), the
//! recorded runs' peaks (triangles), the capacity (a horizontal line), the
//! largest size that fits (a vertical line with its label), and the sizes
//! that run out below one that fits (rings). Drawn with plotters, generic
//! over the backend so the drawing is tested natively; a legend names each.

use plotters::coord::Shift;
use plotters::coord::combinators::BindKeyPoints;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::predict::Outcome;
use crate::core::{format, palette};

const AXIS: RGBColor = palette::AXIS.rgb();
const GRID: RGBColor = palette::GRID.rgb();
const LABEL: RGBColor = palette::LABEL.rgb();
/// Predicted peaks of sizes that fit.
pub const PREDICTED: RGBColor = palette::SIM_RESERVED.rgb();
/// Predicted peaks of sizes that run out (up to the failure).
pub const RUNS_OUT: RGBColor = palette::SIM_OOM.rgb();
/// The recorded runs' peaks.
pub const RECORDED: RGBColor = palette::RECORDED_RUN.rgb();
/// The capacity.
pub const CAPACITY: RGBColor = palette::PREDICT_CAPACITY.rgb();
/// The largest size that fits.
pub const LARGEST: RGBColor = palette::LARGEST_FIT.rgb();
/// Sizes that run out below one that fits.
pub const DIP: RGBColor = palette::DIP.rgb();

/// Half the side of a point's square, pixels.
const POINT: i32 = 4;

/// The x axis' title: `size (batch)`.
pub fn x_title(key: &str) -> String {
    format!("size ({key})")
}

/// The y axis' title.
pub const Y_TITLE: &str = "reserved peak (bytes)";

/// How a legend entry's swatch is drawn: as the chart draws its item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Swatch {
    /// A filled square (a predicted size).
    Square,
    /// A triangle (a recorded run).
    Triangle,
    /// A horizontal line (the capacity).
    Line,
    /// A vertical line (the largest size that fits).
    Upright,
    /// A ring (a dip).
    Ring,
}

/// The legend's entries, in order: colour, swatch and words.
pub fn legend(outcome: &Outcome) -> Vec<(RGBColor, Swatch, String)> {
    let r = &outcome.report;
    let mut entries = vec![(PREDICTED, Swatch::Square, "predicted reserved peak: fits".to_owned())];
    if outcome.points.iter().any(|p| p.oom) {
        entries.push((RUNS_OUT, Swatch::Square, "runs out of memory (peak until it fails)".to_owned()));
    }
    if r.runs.iter().any(|run| run.reserved_peak_bytes.is_some()) {
        entries.push((RECORDED, Swatch::Triangle, "recorded run".to_owned()));
    }
    if let Some(c) = r.capacity_bytes {
        entries.push((CAPACITY, Swatch::Line, format!("capacity {}", format::bytes(c))));
    }
    if let Some(n) = r.largest_fitting_size {
        entries.push((LARGEST, Swatch::Upright, format!("largest that fits: {n}")));
    }
    if !r.non_monotonic.is_empty() {
        entries.push((DIP, Swatch::Ring, "runs out below a size that fits".to_owned()));
    }
    entries
}

/// The x range: every size drawn, with a margin of a twentieth each side.
pub fn x_range(outcome: &Outcome) -> (f64, f64) {
    let sizes = outcome.points.iter().map(|p| p.size).chain(outcome.report.runs.iter().map(|r| r.size));
    let (lo, hi) = sizes.fold((u64::MAX, 0), |(lo, hi), s| (lo.min(s), hi.max(s)));
    if lo > hi {
        return (0.0, 1.0);
    }
    let pad = ((hi - lo) as f64 / 20.0).max(1.0);
    ((lo as f64 - pad).max(0.0), hi as f64 + pad)
}

/// The y axis' top: the highest peak or the capacity, with headroom for the legend.
pub fn y_max(outcome: &Outcome) -> u64 {
    let peaks = outcome.points.iter().map(|p| p.reserved_peak_bytes);
    let recorded = outcome.report.runs.iter().filter_map(|r| r.reserved_peak_bytes);
    let top = peaks.chain(recorded).chain(outcome.report.capacity_bytes).max().unwrap_or(0);
    top.saturating_add(top / 4).max(1)
}

/// Draw the chart on `root`.
pub fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, outcome: &Outcome) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("drawing the chart failed: {e}");
    root.fill(&WHITE).map_err(err)?;
    let (x0, x1) = x_range(outcome);
    let top = y_max(outcome);
    let mut chart = ChartBuilder::on(root)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(84)
        .build_cartesian_2d(x0..x1, (0u64..top).with_key_points(format::byte_ticks(top, 5)))
        .map_err(err)?;
    let x_fmt = |x: &f64| format!("{x:.0}");
    let y_fmt = |y: &u64| format::bytes(*y);
    chart
        .configure_mesh()
        .bold_line_style(GRID)
        .light_line_style(TRANSPARENT)
        .axis_style(AXIS)
        .x_labels(8)
        .x_desc(x_title(&outcome.key))
        .y_desc(Y_TITLE)
        .label_style(("sans-serif", 12).into_font().color(&LABEL))
        .axis_desc_style(("sans-serif", 13).into_font().color(&LABEL))
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .draw()
        .map_err(err)?;
    let r = &outcome.report;
    if let Some(c) = r.capacity_bytes {
        chart.draw_series(LineSeries::new([(x0, c), (x1, c)], CAPACITY.stroke_width(2))).map_err(err)?;
    }
    if let Some(n) = r.largest_fitting_size {
        let x = n as f64;
        chart.draw_series(LineSeries::new([(x, 0), (x, top)], LARGEST.stroke_width(2))).map_err(err)?;
        let at = chart.backend_coord(&(x, top));
        let font = ("sans-serif", 13).into_font().color(&LARGEST).pos(Pos::new(HPos::Left, VPos::Top));
        root.draw(&Text::new(format!("largest that fits: {n}"), (at.0 + 4, at.1 + 4), font)).map_err(err)?;
    }
    let line: Vec<(f64, u64)> = outcome.points.iter().map(|p| (p.size as f64, p.reserved_peak_bytes)).collect();
    chart.draw_series(LineSeries::new(line, PREDICTED.stroke_width(2))).map_err(err)?;
    for p in &outcome.points {
        let (x, y) = chart.backend_coord(&(p.size as f64, p.reserved_peak_bytes));
        let colour = if p.oom { RUNS_OUT } else { PREDICTED };
        root.draw(&Rectangle::new([(x - POINT, y - POINT), (x + POINT, y + POINT)], colour.filled())).map_err(err)?;
        if r.non_monotonic.iter().any(|d| d.fails == p.size) {
            let ring = [(x - POINT - 4, y - POINT - 4), (x + POINT + 4, y + POINT + 4)];
            root.draw(&Rectangle::new(ring, DIP.stroke_width(2))).map_err(err)?;
        }
    }
    for run in &r.runs {
        let Some(peak) = run.reserved_peak_bytes else { continue };
        let (x, y) = chart.backend_coord(&(run.size as f64, peak));
        let triangle = vec![(x, y - 9), (x - 7, y + 6), (x + 7, y + 6)];
        root.draw(&Polygon::new(triangle, RECORDED.filled())).map_err(err)?;
    }
    let (xs, ys) = chart.plotting_area().get_pixel_range();
    // Bottom right: the peaks grow with the size, so that corner is the
    // one the curve leaves free.
    draw_legend(root, &legend(outcome), (xs.end - 8, ys.end - 8)).map_err(err)?;
    Ok(())
}

/// The legend, a swatch and its words a line each, its bottom-right corner
/// at `(right, bottom)`.
fn draw_legend<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    entries: &[(RGBColor, Swatch, String)],
    (right, bottom): (i32, i32),
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let width = 26 + 7 * entries.iter().map(|(_, _, t)| t.chars().count()).max().unwrap_or(0) as i32;
    let height = 16 * entries.len() as i32 + 8;
    let (left, top) = (right - width, bottom - height);
    root.draw(&Rectangle::new([(left, top), (right, bottom)], WHITE.filled()))?;
    root.draw(&Rectangle::new([(left, top), (right, bottom)], GRID.stroke_width(1)))?;
    for (k, (colour, swatch, text)) in entries.iter().enumerate() {
        let (x, y) = (left + 13, top + 12 + 16 * k as i32);
        match swatch {
            Swatch::Square => {
                root.draw(&Rectangle::new([(x - POINT, y - POINT), (x + POINT, y + POINT)], colour.filled()))?
            }
            Swatch::Triangle => {
                root.draw(&Polygon::new(vec![(x, y - 6), (x - 5, y + 4), (x + 5, y + 4)], colour.filled()))?
            }
            Swatch::Line => root.draw(&PathElement::new(vec![(x - 8, y), (x + 8, y)], colour.stroke_width(2)))?,
            Swatch::Upright => root.draw(&PathElement::new(vec![(x, y - 6), (x, y + 6)], colour.stroke_width(2)))?,
            Swatch::Ring => root.draw(&Rectangle::new([(x - 6, y - 6), (x + 6, y + 6)], colour.stroke_width(2)))?,
        }
        let font = ("sans-serif", 12).into_font().color(&LABEL).pos(Pos::new(HPos::Left, VPos::Center));
        root.draw(&Text::new(text.clone(), (x + 13, y), font))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use vramscope_shared::predict::{Dip, RunSummary};

    use super::*;
    use crate::core::predict::tests::{prediction, report};
    use vramscope_plot::recorder::Recorder;

    fn outcome() -> Outcome {
        let mut r = report(
            vec![prediction(24, 3 << 30, false), prediction(28, 5 << 30, true)],
            vec![(8, true), (16, true), (32, false), (24, true), (28, false)],
        );
        r.largest_fitting_size = Some(24);
        r.non_monotonic = vec![Dip { fails: 20, fits: 24 }];
        r.runs = vec![
            RunSummary { name: "b".into(), size: 8, allocations: 9, matched: 9, reserved_peak_bytes: Some(1 << 30) },
            RunSummary { name: "a".into(), size: 4, allocations: 9, matched: 9, reserved_peak_bytes: Some(1 << 29) },
        ];
        let curve = report(
            vec![prediction(8, 1 << 30, false), prediction(20, 5 << 30, true), prediction(32, 6 << 30, true)],
            vec![],
        );
        Outcome::new(r, Some(curve), "batch")
    }

    #[test]
    fn every_part_is_drawn_in_its_colour_and_named() {
        let o = outcome();
        let (backend, log) = Recorder::new((800, 400));
        draw(&backend.into_drawing_area(), &o).expect("draws");
        let log = log.borrow();
        let texts: Vec<&str> = log.texts.iter().map(|(t, _, _)| t.as_str()).collect();
        for title in ["size (batch)", Y_TITLE, "largest that fits: 24", "capacity 4.00 GiB", "recorded run"] {
            assert!(texts.contains(&title), "{title} missing from {texts:?}");
        }
        assert!(texts.contains(&"runs out below a size that fits"));
        // The legend's box (white, not the whole canvas): its swatches are
        // left out of the counts below.
        let legend_box = log
            .rects
            .iter()
            .rev()
            .find(|(c, filled, a, b)| *c == WHITE && *filled && (b.0 - a.0) < 800)
            .map(|r| (r.2, r.3))
            .expect("a legend");
        let plotted = |p: &(i32, i32)| {
            !(legend_box.0.0..=legend_box.1.0).contains(&p.0) || !(legend_box.0.1..=legend_box.1.1).contains(&p.1)
        };
        // The capacity: one horizontal line across the plot.
        let capacity: Vec<_> =
            log.paths.iter().filter(|(c, p, _)| *c == CAPACITY && p.len() == 2 && p.iter().all(plotted)).collect();
        assert_eq!(capacity.len(), 1);
        assert_eq!(capacity[0].1[0].1, capacity[0].1[1].1, "horizontal");
        // The largest size: a vertical line.
        let largest: Vec<_> =
            log.paths.iter().filter(|(c, p, _)| *c == LARGEST && p.len() == 2 && p.iter().all(plotted)).collect();
        assert_eq!(largest.len(), 1);
        assert_eq!(largest[0].1[0].0, largest[0].1[1].0, "vertical");
        // The curve through the five sizes with a peak.
        assert!(log.paths.iter().any(|(c, p, _)| *c == PREDICTED && p.len() == 5));
        // Filled squares: 2 that fit, 3 that run out, each with its swatch in the legend.
        let centres = |colour| {
            log.rects
                .iter()
                .filter(move |(c, f, a, b)| *c == colour && *f && b.0 - a.0 == 2 * POINT && plotted(a))
                .map(|r| r.2.1 + POINT)
        };
        assert_eq!(centres(PREDICTED).count(), 2);
        assert_eq!(centres(RUNS_OUT).count(), 3);
        let swatches = |colour| log.rects.iter().filter(|(c, _, a, _)| *c == colour && !plotted(a)).count();
        assert_eq!((swatches(PREDICTED), swatches(RUNS_OUT), swatches(DIP)), (1, 1, 1));
        // The dip at 20: a ring; the recorded runs: two triangles.
        assert_eq!(log.rects.iter().filter(|(c, filled, a, _)| *c == DIP && !*filled && plotted(a)).count(), 1);
        assert_eq!(log.polygons.iter().filter(|(c, p)| *c == RECORDED && p.len() == 3 && plotted(&p[0])).count(), 2);
        // The capacity line runs between the peaks that fit and those that run out.
        let y_cap = capacity[0].1[0].1;
        assert!(centres(PREDICTED).all(|y| y > y_cap), "fits: below the capacity line (larger y)");
        assert!(centres(RUNS_OUT).all(|y| y < y_cap), "runs out: above it");
    }

    #[test]
    fn ranges_and_legend() {
        let o = outcome();
        let (lo, hi) = x_range(&o);
        assert!((lo - 2.6).abs() < 1e-9 && (hi - 33.4).abs() < 1e-9, "{lo} {hi}");
        assert_eq!(y_max(&o), (6u64 << 30) + (6u64 << 30) / 4);
        let names: Vec<String> = legend(&o).into_iter().map(|(_, _, t)| t).collect();
        assert_eq!(names.len(), 6, "{names:?}");
        assert_eq!(x_title("seq"), "size (seq)");
    }
}
