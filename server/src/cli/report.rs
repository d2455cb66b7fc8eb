//! `vramscope report FILE [-o report.html]`: one self-contained HTML file to
//! send to someone who has no vramscope server. It opens from disk with no
//! network: the dashboard (its WebAssembly, JavaScript and style sheet) and
//! the snapshot's bytes are inlined, and the page opens the snapshot in
//! local mode (the same views as the server's, answered in the page). The
//! post-mortem findings of `vramscope explain` and `vramscope leaks` are
//! written into the page as text, readable even where scripts are off.
//! `--svg PATH` also writes the main timeline chart, drawn by the
//! dashboard's own plotting code (`vramscope_frontend::plot`) natively;
//! `--png PATH` the same chart as a bitmap, its text drawn with DejaVu Sans
//! embedded in the binary. The server's `GET /api/v1/snapshots/{id}/report.html`
//! (and `chart.svg`, `chart.png`) answer the same files for a stored snapshot.
//!
//! Inlined, the JavaScript glue is imported from a blob: URL made at load
//! and the WebAssembly comes from base64 text. A page opened from a `file:`
//! URL may not start a module worker from a blob: URL, so a report reads
//! its snapshot on the page itself (`window.__vramscope_local_in_page`),
//! once, at load.

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use base64::Engine;
use clap::Args;
use vramscope_shared::analysis::leaks::LeakReport;
use vramscope_shared::analysis::oom::explain_with;
use vramscope_shared::read_snapshot_bytes;

use super::Failure;
use super::input::MemoryBudget;
use crate::http::web::dashboard_file;

/// Arguments of `vramscope report`.
#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// Snapshot file (pickle from `torch.cuda.memory._dump_snapshot`, plain, gzip or zstd).
    file: PathBuf,
    /// Where to write the HTML file (default: the snapshot's name with `.html`).
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Also write the main timeline chart (the device with the longest
    /// trace, whole trace) as an SVG file, drawn by the dashboard's own
    /// plotting code.
    #[arg(long, value_name = "PATH")]
    svg: Option<PathBuf>,
    /// Also write the same chart as a PNG image (1200×480), its labels drawn
    /// with the font embedded in the binary (no system font needed).
    #[arg(long, value_name = "PATH")]
    png: Option<PathBuf>,
    #[command(flatten)]
    budget: MemoryBudget,
}

/// The dashboard's files a report inlines.
const GLUE: &str = "vramscope_frontend.js";
const WASM: &str = "vramscope_frontend_bg.wasm";
/// The style sheets the dashboard's page links, in its order.
const STYLES: &[&str] = &["style.css", "analysis.css"];

/// Run the subcommand.
pub(crate) fn run(args: &ReportArgs) -> Result<(), Failure> {
    let path = &args.file;
    let bytes =
        std::fs::read(path).with_context(|| format!("cannot open {}", path.display())).map_err(Failure::BadInput)?;
    let snapshot = read_snapshot_bytes(&bytes, &args.budget.options())
        .map_err(|e| Failure::BadInput(anyhow!("{e} (file: {})", path.display())))?;
    let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    let modified_ms = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64);
    let html = report_html(path, &name, modified_ms, &bytes, &snapshot).map_err(Failure::Other)?;
    let charts = [(&args.svg, ChartFormat::Svg), (&args.png, ChartFormat::Png)];
    let charts: Vec<_> = charts.into_iter().filter_map(|(p, f)| p.as_ref().map(|p| (p, f))).collect();
    // One timeline window for both charts.
    let window = if charts.is_empty() {
        None
    } else {
        let analyzed = vramscope_shared::views::Analyzed::build(snapshot);
        Some(main_window(&analyzed).map_err(Failure::BadInput)?)
    };
    for (chart_path, format) in charts {
        let Some(window) = &window else { break };
        let chart = chart_bytes(window, format).map_err(Failure::Other)?;
        std::fs::write(chart_path, chart)
            .with_context(|| format!("cannot write {}", chart_path.display()))
            .map_err(Failure::Other)?;
        eprintln!("vramscope: wrote {}", chart_path.display());
    }
    let output = args.output.clone().unwrap_or_else(|| path.with_extension("html"));
    std::fs::write(&output, html)
        .with_context(|| format!("cannot write {}", output.display()))
        .map_err(Failure::Other)?;
    eprintln!("vramscope: wrote {} ({})", output.display(), super::text::bytes(file_size(&output)));
    Ok(())
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// The whole report page of a snapshot: its findings, the dashboard and
/// the file's bytes inlined. `path` names the file in the findings' text;
/// the dashboard's "export report" serves the same page.
pub(crate) fn report_html(
    path: &Path,
    name: &str,
    modified_ms: u64,
    bytes: &[u8],
    snapshot: &vramscope_shared::Snapshot,
) -> anyhow::Result<String> {
    let findings = findings(path, snapshot)?;
    render(name, modified_ms, bytes, &findings)
}

/// The text of `vramscope explain` and `vramscope leaks` for the file.
fn findings(path: &Path, snapshot: &vramscope_shared::Snapshot) -> anyhow::Result<String> {
    let mut out = Vec::new();
    let reports = explain_with(snapshot, &vramscope_shared::views::analysis::avoided_by);
    let has_trace = snapshot.devices.iter().any(|d| d.has_trace && !d.trace.is_empty());
    super::explain::write_report(&mut out, path, has_trace, &reports, 6).context("writing the OOM post-mortem")?;
    out.push(b'\n');
    super::leaks::write_report(&mut out, path, &LeakReport::build(snapshot, 10), 6)
        .context("writing the leak ranking")?;
    String::from_utf8(out).context("the findings are not UTF-8")
}

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
/// (`vramscope_frontend::plot`), in SVG text or PNG bytes. Fails when no
/// device has a trace.
pub(crate) fn main_chart(analyzed: &vramscope_shared::views::Analyzed, format: ChartFormat) -> anyhow::Result<Vec<u8>> {
    chart_bytes(&main_window(analyzed)?, format)
}

/// The chart of a timeline window, in SVG text or PNG bytes.
fn chart_bytes(window: &vramscope_shared::timeline::TimelineWindow, format: ChartFormat) -> anyhow::Result<Vec<u8>> {
    use plotters::prelude::{BitMapBackend, IntoDrawingArea, SVGBackend};

    match format {
        ChartFormat::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, CHART_SIZE).into_drawing_area();
                draw_main_chart(&root, window)?;
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
                draw_main_chart(&root, window)?;
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
fn main_window(
    analyzed: &vramscope_shared::views::Analyzed,
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
) -> anyhow::Result<()> {
    use vramscope_frontend::{layout, plot, viewport::Window};

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
    plot::draw(root, &scene).map_err(|e| anyhow!(e))?;
    Ok(())
}

/// The page: the findings, the dashboard and the snapshot inlined.
fn render(name: &str, modified_ms: u64, snapshot: &[u8], findings: &str) -> anyhow::Result<String> {
    let file = |name: &str| {
        dashboard_file(name).ok_or_else(|| {
            anyhow!(
                "this vramscope binary was built without the dashboard ({name} missing): run scripts/build-frontend, \
                 then rebuild"
            )
        })
    };
    let text = |name: &str| -> anyhow::Result<&'static str> {
        std::str::from_utf8(file(name)?).with_context(|| format!("{name} is not UTF-8"))
    };
    let b64 = base64::engine::general_purpose::STANDARD;
    Ok(format!(
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title} · vramscope report</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="vramscope {version}">
<link rel="icon" href="data:,">
<style>
{style}
.report-findings {{ margin: 1rem; }}
.report-findings pre {{ white-space: pre-wrap; font-size: 13px; }}
</style>
</head>
<body>
<noscript>This report's timelines need JavaScript and WebAssembly; the findings below are plain text.</noscript>
<div id="boot" class="boot">Loading the report…</div>
<details class="report-findings" id="report-findings" open>
<summary>Post-mortem of {title}: OOMs and likely leaks</summary>
<pre>{findings}</pre>
</details>
<script type="text/plain" id="vramscope-glue">{glue}</script>
<script type="text/plain" id="vramscope-wasm">{wasm}</script>
<script type="text/plain" id="vramscope-snapshot" data-name="{title}" data-modified="{modified_ms}">{snapshot}</script>
<script type="module">
// Everything is in this file: the glue becomes a blob: URL, the
// WebAssembly and the snapshot come from base64.
const text = (id) => document.getElementById(id).textContent;
const bytes = (b64) => Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
const boot = document.getElementById("boot");
try {{
  const wasm = text("vramscope-wasm");
  const glueUrl = URL.createObjectURL(new Blob([text("vramscope-glue")], {{ type: "text/javascript" }}));
  const glue = await import(glueUrl);
  await glue.default({{ module_or_path: bytes(wasm) }});
  // A page opened from a file: may not start a worker from a blob: URL:
  // the snapshot is read on the page.
  window.__vramscope_local_in_page = true;
  const snapshot = document.getElementById("vramscope-snapshot");
  window.__vramscope_report_file = new File([bytes(snapshot.textContent)], snapshot.dataset.name,
    {{ lastModified: Number(snapshot.dataset.modified) }});
  boot.remove();
  glue.run_dashboard();
  // The dashboard first, the findings under it.
  document.body.appendChild(document.getElementById("report-findings"));
}} catch (e) {{
  boot.className = "boot error";
  boot.textContent = "The report's dashboard failed to start: " + e;
  throw e;
}}
</script>
</body>
</html>
"#,
        title = escape_html(name),
        version = env!("CARGO_PKG_VERSION"),
        style = raw_text(&styles()?),
        findings = escape_html(findings),
        glue = raw_text(text(GLUE)?),
        wasm = b64.encode(file(WASM)?),
        snapshot = b64.encode(snapshot),
    ))
}

/// The dashboard's style sheets, one after the other.
fn styles() -> anyhow::Result<String> {
    let mut css = String::new();
    for name in STYLES {
        // Only style.css is sure to be there; the others come with the panels that use them.
        if let Some(bytes) = dashboard_file(name) {
            css.push_str(std::str::from_utf8(bytes).with_context(|| format!("{name} is not UTF-8"))?);
            css.push('\n');
        } else if *name == STYLES[0] {
            return Err(anyhow!(
                "this vramscope binary was built without the dashboard ({name} missing): run scripts/build-frontend, then rebuild"
            ));
        }
    }
    Ok(css)
}

/// Text for HTML content and attributes.
fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Script or style text that cannot end its element early: `</` is written
/// `<\/` (the same string in JavaScript, harmless in CSS comments and
/// strings), and `<!--` is broken up.
fn raw_text(s: &str) -> String {
    s.replace("</", "<\\/").replace("<!--", "<\\!--")
}

/// Text on plotters' bitmap from a font embedded in the binary.
///
/// plotters' own `ab_glyph` feature would do this through a process-wide
/// font registry, but features unify across the workspace: the dashboard's
/// native tests (which register no font) would then fail to lay out any
/// label. This wrapper keeps the font to the PNG: it measures and draws
/// text with DejaVu Sans (the `dejavu` crate's bytes, Bitstream Vera
/// licence) and passes every other primitive to the bitmap.
mod glyphs {
    use ab_glyph::{Font, FontRef, PxScale, ScaleFont, point};
    use plotters::prelude::DrawingBackend;
    use plotters_backend::{
        BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind, text_anchor::HPos,
        text_anchor::VPos,
    };

    /// A backend whose text is drawn with the embedded DejaVu Sans.
    pub(super) struct EmbeddedFont<B> {
        inner: B,
        font: FontRef<'static>,
    }

    impl<B> EmbeddedFont<B> {
        pub(super) fn new(inner: B) -> EmbeddedFont<B> {
            // The bytes are the crate's own TTF, checked by its tests and ours.
            #[allow(clippy::expect_used)]
            let font = FontRef::try_from_slice(dejavu::sans::regular()).expect("DejaVu Sans is a valid font");
            EmbeddedFont { inner, font }
        }

        /// Width and height (ascent to descent) of a line of text, in pixels.
        fn measure(&self, text: &str, size: f64) -> (f32, f32) {
            let font = self.font.as_scaled(PxScale::from(size as f32));
            let mut width = 0.0;
            let mut previous = None;
            for c in text.chars() {
                let id = font.glyph_id(c);
                if let Some(p) = previous {
                    width += font.kern(p, id);
                }
                width += font.h_advance(id);
                previous = Some(id);
            }
            (width, font.ascent() - font.descent())
        }
    }

    impl<B: DrawingBackend> DrawingBackend for EmbeddedFont<B> {
        type ErrorType = B::ErrorType;

        fn get_size(&self) -> (u32, u32) {
            self.inner.get_size()
        }
        fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<B::ErrorType>> {
            self.inner.ensure_prepared()
        }
        fn present(&mut self) -> Result<(), DrawingErrorKind<B::ErrorType>> {
            self.inner.present()
        }
        fn draw_pixel(
            &mut self,
            point: BackendCoord,
            color: BackendColor,
        ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
            self.inner.draw_pixel(point, color)
        }
        fn draw_line<S: BackendStyle>(
            &mut self,
            from: BackendCoord,
            to: BackendCoord,
            style: &S,
        ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
            self.inner.draw_line(from, to, style)
        }
        fn draw_rect<S: BackendStyle>(
            &mut self,
            upper_left: BackendCoord,
            bottom_right: BackendCoord,
            style: &S,
            fill: bool,
        ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
            self.inner.draw_rect(upper_left, bottom_right, style, fill)
        }
        fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
            &mut self,
            path: I,
            style: &S,
        ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
            self.inner.draw_path(path, style)
        }
        fn draw_circle<S: BackendStyle>(
            &mut self,
            center: BackendCoord,
            radius: u32,
            style: &S,
            fill: bool,
        ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
            self.inner.draw_circle(center, radius, style, fill)
        }
        fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
            &mut self,
            vert: I,
            style: &S,
        ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
            self.inner.fill_polygon(vert, style)
        }
        fn estimate_text_size<T: BackendTextStyle>(
            &self,
            text: &str,
            style: &T,
        ) -> Result<(u32, u32), DrawingErrorKind<B::ErrorType>> {
            let (w, h) = self.measure(text, style.size());
            Ok((w.ceil() as u32, h.ceil() as u32))
        }
        fn draw_text<T: BackendTextStyle>(
            &mut self,
            text: &str,
            style: &T,
            pos: BackendCoord,
        ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
            let colour = style.color();
            if colour.alpha == 0.0 {
                return Ok(());
            }
            let size = style.size();
            let (width, height) = self.measure(text, size);
            let anchor = style.anchor();
            let left = pos.0 as f32
                - match anchor.h_pos {
                    HPos::Left => 0.0,
                    HPos::Center => width / 2.0,
                    HPos::Right => width,
                };
            let top = pos.1 as f32
                - match anchor.v_pos {
                    VPos::Top => 0.0,
                    VPos::Center => height / 2.0,
                    VPos::Bottom => height,
                };
            let scaled = self.font.as_scaled(PxScale::from(size as f32));
            let baseline = top + scaled.ascent();
            let mut x = left;
            let mut previous = None;
            for c in text.chars() {
                let id = scaled.glyph_id(c);
                if let Some(p) = previous {
                    x += scaled.kern(p, id);
                }
                previous = Some(id);
                let glyph = id.with_scale_and_position(scaled.scale(), point(x, baseline));
                x += scaled.h_advance(id);
                let Some(outline) = self.font.outline_glyph(glyph) else { continue };
                let bounds = outline.px_bounds();
                // Coverage first, then pixels: `draw` takes a plain closure.
                let mut coverage = Vec::new();
                outline.draw(|gx, gy, c| coverage.push((gx, gy, c)));
                for (gx, gy, c) in coverage {
                    if c <= 0.0 {
                        continue;
                    }
                    let at = (bounds.min.x as i32 + gx as i32, bounds.min.y as i32 + gy as i32);
                    let alpha = colour.alpha * f64::from(c.min(1.0));
                    self.inner.draw_pixel(at, BackendColor { alpha, rgb: colour.rgb })?;
                }
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inlined_text_cannot_close_its_element() {
        assert_eq!(raw_text("a = '</script>'; <!-- x"), "a = '<\\/script>'; <\\!-- x");
        assert_eq!(escape_html("<b>\"x\" & 'y'</b>"), "&lt;b&gt;&quot;x&quot; &amp; &#39;y&#39;&lt;/b&gt;");
    }
}
