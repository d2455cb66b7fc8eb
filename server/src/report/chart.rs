//! The main chart of a snapshot as SVG or PNG, drawn by the dashboard's own
//! plotting code (`vramscope_plot::plot`) natively.

use anyhow::{Context, anyhow};

use super::glyphs;

/// Size of the main chart (SVG and PNG), in pixels.
const CHART_SIZE: (u32, u32) = (1200, 480);

/// The formats the main chart is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChartFormat {
    /// SVG text (the labels are `<text>` elements, set by the viewer's fonts).
    Svg,
    /// A PNG image; its labels are drawn with the embedded DejaVu Sans.
    Png,
}

/// The main chart of a snapshot: the timeline of the device with the
/// longest trace, whole trace, as the dashboard draws it
/// (`vramscope_plot::plot`), titled with the file's `name`, in SVG text
/// or PNG bytes. Fails when no device has a trace.
pub(crate) fn main_chart(
    analyzed: &vramscope_shared::indexed::IndexedSnapshot,
    name: &str,
    format: ChartFormat,
) -> anyhow::Result<Vec<u8>> {
    chart_bytes(&main_window(analyzed)?, name, format)
}

/// The chart of a timeline window of file `name`, in SVG text or PNG
/// bytes: a title, the axes' titles and a legend around the plot, as an
/// image file has no page around it to say what is drawn.
pub(crate) fn chart_bytes(
    window: &vramscope_shared::timeline::TimelineWindow,
    name: &str,
    format: ChartFormat,
) -> anyhow::Result<Vec<u8>> {
    let title = format!("{name}: GPU memory of device {} over its trace", window.device);
    let title = title.as_str();
    use plotters::prelude::{BitMapBackend, IntoDrawingArea, SVGBackend};

    match format {
        ChartFormat::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, CHART_SIZE).into_drawing_area();
                draw_main_chart(&root, window, title)?;
                root.present().map_err(|e| anyhow!("writing the SVG: {e}"))?;
            }
            Ok(svg.into_bytes())
        }
        ChartFormat::Png => {
            let (width, height) = CHART_SIZE;
            let mut rgb = vec![0u8; width as usize * height as usize * 3];
            {
                let bitmap = BitMapBackend::with_buffer(&mut rgb, CHART_SIZE);
                let root = glyphs::EmbeddedFont::new(bitmap).into_drawing_area();
                draw_main_chart(&root, window, title)?;
                root.present().map_err(|e| anyhow!("drawing the PNG: {e}"))?;
            }
            let mut png_bytes = Vec::new();
            let mut encoder = png::Encoder::new(&mut png_bytes, width, height);
            encoder.set_color(png::ColorType::Rgb);
            encoder.set_depth(png::BitDepth::Eight);
            let mut writer = encoder.write_header().context("encoding the PNG")?;
            writer.write_image_data(&rgb).context("encoding the PNG")?;
            writer.finish().context("encoding the PNG")?;
            Ok(png_bytes)
        }
    }
}

/// The timeline window of the main chart: the device with the longest
/// trace, one bucket per pixel of the plot area.
pub(crate) fn main_window(
    analyzed: &vramscope_shared::indexed::IndexedSnapshot,
) -> anyhow::Result<vramscope_shared::timeline::TimelineWindow> {
    use vramscope_shared::views::{TimelineParams, timeline};

    let device = analyzed
        .snapshot
        .devices
        .iter()
        .filter(|d| !d.trace.is_empty())
        .max_by_key(|d| (d.trace.len(), std::cmp::Reverse(d.device)))
        .map(|d| d.device)
        .ok_or_else(|| anyhow!("no device of this snapshot has a trace: there is no timeline to draw"))?;
    // The chart's margins and axis labels take about 100 pixels. Event
    // order, as the dashboard opens: on wall time the activity is often
    // bunched into the last fraction of the trace (oom_leak: its last 0.4 s
    // of 5.3 s), leaving most of a pasted chart empty.
    let params = TimelineParams {
        device: Some(device),
        px: Some(CHART_SIZE.0 - 100),
        axis: Some(vramscope_shared::timeline::Axis::Event),
        ..TimelineParams::default()
    };
    timeline(analyzed, &params).map_err(|e| anyhow!("timeline of device {device}: {e}"))
}

/// Draws the main chart on any plotters backend: the one drawing code for
/// the SVG and the PNG (and the dashboard's, which it calls).
fn draw_main_chart<DB: plotters::prelude::DrawingBackend>(
    root: &plotters::prelude::DrawingArea<DB, plotters::coord::Shift>,
    window: &vramscope_shared::timeline::TimelineWindow,
    title: &str,
) -> anyhow::Result<()> {
    use vramscope_plot::{layout, plot, viewport::Window};

    let bars = layout::stack(&window.allocations);
    let scene = plot::Scene {
        data: window,
        bars: &bars,
        view: Window::new(window.start, window.end),
        origin: window.start,
        highlight: None,
        marked: &[],
        cursor: None,
        y_range: None,
    };
    plot::draw_framed(root, &scene, title).map_err(|e| anyhow!(e))?;
    Ok(())
}
