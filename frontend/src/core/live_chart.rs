//! The live page's two charts, drawn with plotters and generic over the
//! backend so they are tested natively: memory (allocated, reserved,
//! NVML's figure for the process, the capacity, and the band between
//! reserved and NVML's figure: the process's memory outside PyTorch's
//! caching allocator) and fragmentation (the share of reserved memory not
//! allocated), over the seconds before the latest sample, with a marker
//! where each snapshot of the process was uploaded.
//!
//! Not [`crate::core::chart`]'s bucketed curves: these are a few thousand
//! samples drawn as lines on a labelled mesh (plotters' `ChartBuilder`),
//! as the page has always shown them.

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::core::model::live::{Marker, Sample};
use crate::core::palette;

// The palette's colours in plotters' form (`palette` defines them).
const ALLOCATED: RGBColor = palette::ALLOCATED.rgb();
const RESERVED: RGBColor = palette::RESERVED.rgb();
const NVML: RGBColor = palette::NVML.rgb();
const CAPACITY: RGBColor = palette::CAPACITY.rgb();
const FRAGMENTATION: RGBColor = palette::FRAGMENTATION.rgb();
const MARKER: RGBColor = palette::SNAPSHOT_MARKER.rgb();
const OUTSIDE: RGBColor = palette::OUTSIDE_ALLOCATOR.rgb();

/// The band of memory outside the caching allocator: for each sample with
/// both figures, (seconds before the newest, reserved GiB, NVML GiB).
pub fn outside_band(samples: &[Sample]) -> Vec<(f64, f64, f64)> {
    let Some(newest) = samples.last().map(|s| s.t_ms) else { return Vec::new() };
    let gib = |b: i64| b as f64 / (1u64 << 30) as f64;
    samples
        .iter()
        .filter_map(|s| {
            let (reserved, used) = (s.reserved?, s.nvml_process_used?);
            Some(((s.t_ms - newest) as f64 / 1000.0, gib(reserved), gib(used.max(reserved))))
        })
        .collect()
}

/// Which chart to draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chart {
    /// Bytes: allocated, reserved, NVML process used, capacity.
    Memory,
    /// Percent of reserved not allocated.
    Fragmentation,
}

/// A chart's line: its name, its colour, its points.
pub type Line = (&'static str, RGBColor, Vec<(f64, f64)>);

/// The lines of `chart`: (name, colour, points as (seconds before the
/// newest sample, value)).
pub fn lines(chart: Chart, samples: &[Sample]) -> Vec<Line> {
    let Some(newest) = samples.last().map(|s| s.t_ms) else { return Vec::new() };
    let x = |s: &Sample| (s.t_ms - newest) as f64 / 1000.0;
    let line = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<(f64, f64)> {
        samples.iter().filter_map(|s| f(s).map(|v| (x(s), v))).collect()
    };
    let gib = |v: Option<i64>| v.map(|b| b as f64 / (1u64 << 30) as f64);
    let all = match chart {
        Chart::Memory => vec![
            ("reserved", RESERVED, line(&|s| gib(s.reserved))),
            ("allocated", ALLOCATED, line(&|s| gib(s.allocated))),
            ("NVML (process)", NVML, line(&|s| gib(s.nvml_process_used))),
            ("capacity", CAPACITY, line(&|s| gib(s.capacity))),
        ],
        Chart::Fragmentation => vec![("fragmentation", FRAGMENTATION, line(&|s| s.fragmentation_pct()))],
    };
    all.into_iter().filter(|(_, _, points)| !points.is_empty()).collect()
}

/// Draws `chart` of `samples` with a vertical line at each marker.
pub fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: Chart,
    samples: &[Sample],
    markers: &[Marker],
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("drawing the {chart:?} chart failed: {e:?}");
    root.fill(&WHITE).map_err(err)?;
    let series = lines(chart, samples);
    let (Some(first), Some(newest)) = (samples.first(), samples.last()) else {
        return Ok(());
    };
    let x0 = ((first.t_ms - newest.t_ms) as f64 / 1000.0).min(-1.0);
    let y_max = series.iter().flat_map(|(_, _, p)| p.iter().map(|(_, y)| *y)).fold(0.0_f64, f64::max);
    let y_max = match chart {
        Chart::Memory => (y_max * 1.1).max(0.001),
        Chart::Fragmentation => 100.0,
    };
    let y_label = match chart {
        Chart::Memory => "GiB",
        Chart::Fragmentation => "% of reserved",
    };
    let mut ctx = ChartBuilder::on(root)
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(56)
        .build_cartesian_2d(x0..0.0, 0.0..y_max)
        .map_err(err)?;
    ctx.configure_mesh()
        .x_desc("seconds before the latest sample")
        .y_desc(y_label)
        .x_labels(8)
        .y_labels(6)
        .draw()
        .map_err(err)?;
    for marker in markers {
        let x = (marker.uploaded_at_ms - newest.t_ms) as f64 / 1000.0;
        if x >= x0 && x <= 0.0 {
            ctx.draw_series(std::iter::once(PathElement::new(vec![(x, 0.0), (x, y_max)], MARKER.stroke_width(2))))
                .map_err(err)?;
        }
    }
    let band = if chart == Chart::Memory { outside_band(samples) } else { Vec::new() };
    if band.len() >= 2 {
        // Upper edge forward, lower edge back: one polygon.
        let outline: Vec<(f64, f64)> =
            band.iter().map(|(x, _, up)| (*x, *up)).chain(band.iter().rev().map(|(x, low, _)| (*x, *low))).collect();
        ctx.draw_series(std::iter::once(Polygon::new(outline, OUTSIDE.mix(0.6).filled())))
            .map_err(err)?
            .label("outside the caching allocator")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 16, y + 5)], OUTSIDE.mix(0.6).filled()));
    }
    for (name, colour, points) in series {
        ctx.draw_series(LineSeries::new(points, colour.stroke_width(2)))
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2)));
    }
    ctx.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(err)?;
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use vramscope_plot::recorder::Recorder;

    /// A sample at `t_ms` with a 1 GiB capacity and no NVML figures (the
    /// live page's tests take it too).
    pub(crate) fn sample(t_ms: i64, allocated: i64, reserved: i64) -> Sample {
        Sample {
            t_ms,
            allocated: Some(allocated),
            reserved: Some(reserved),
            capacity: Some(1 << 30),
            ..Sample::default()
        }
    }

    #[test]
    fn lines_are_in_seconds_before_the_newest_and_skip_missing_figures() {
        let samples = vec![sample(1000, 1 << 29, 1 << 30), sample(3000, 1 << 30, 1 << 30)];
        let memory = lines(Chart::Memory, &samples);
        let names: Vec<&str> = memory.iter().map(|(n, _, _)| *n).collect();
        assert_eq!(names, ["reserved", "allocated", "capacity"], "no NVML figures, no NVML line");
        assert_eq!(memory[1].2, vec![(-2.0, 0.5), (0.0, 1.0)]);
        let fragmentation = lines(Chart::Fragmentation, &samples);
        assert_eq!(fragmentation[0].2, vec![(-2.0, 50.0), (0.0, 0.0)]);
    }

    #[test]
    fn charts_draw_each_line_and_the_snapshot_markers() {
        let samples: Vec<Sample> = (0..50).map(|i| sample(i * 1000, i << 20, 64 << 20)).collect();
        let marker = |t| Marker {
            id: "x".to_owned(),
            name: "n".to_owned(),
            trigger: crate::core::model::Trigger::Threshold,
            uploaded_at_ms: t,
        };
        let (recorder, log) = Recorder::new((800, 260));
        draw(&recorder.into_drawing_area(), Chart::Memory, &samples, &[marker(25_000), marker(99_000)])
            .expect("memory chart");
        // Each path drawn: its colour and its number of points.
        let drawn: Vec<(RGBColor, usize)> = log.borrow().paths.iter().map(|(c, p, _)| (*c, p.len())).collect();
        // One marker inside the window (the other is after the newest sample).
        assert_eq!(drawn.iter().filter(|(c, n)| *c == MARKER && *n == 2).count(), 1);
        for colour in [RESERVED, ALLOCATED, CAPACITY] {
            assert!(drawn.iter().any(|(c, n)| *c == colour && *n == 50), "{colour:?} line of 50 points");
        }
        assert!(!drawn.iter().any(|(c, n)| *c == NVML && *n == 50), "no NVML figures, no NVML line");
        assert!(log.borrow().polygons.is_empty(), "no NVML figures, no band");
    }

    #[test]
    fn memory_outside_the_allocator_is_a_band_between_reserved_and_nvml() {
        // 64 MiB reserved, NVML sees 600 MiB for the process: 536 MiB outside.
        let samples: Vec<Sample> = (0..10)
            .map(|i| Sample { nvml_process_used: Some(600 << 20), ..sample(i * 1000, 32 << 20, 64 << 20) })
            .collect();
        let band = outside_band(&samples);
        assert_eq!(band.len(), 10);
        assert_eq!(band[9], (0.0, 0.0625, 600.0 / 1024.0));
        let (recorder, log) = Recorder::new((800, 260));
        draw(&recorder.into_drawing_area(), Chart::Memory, &samples, &[]).expect("memory chart");
        let polygons = &log.borrow().polygons;
        // The band, and its swatch in the legend.
        assert!(polygons.iter().any(|(_, points)| points.len() == 20), "one polygon over the 10 samples, both edges");
    }
}
