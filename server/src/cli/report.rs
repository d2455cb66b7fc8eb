//! `vramscope report FILE [-o report.html]`: one self-contained HTML file to
//! send to someone who has no vramscope server. It opens from disk with no
//! network: the dashboard (its WebAssembly, JavaScript and style sheet) and
//! the snapshot's bytes are inlined, and the page opens the snapshot in
//! local mode (the same views as the server's, answered in the page). The
//! post-mortem findings of `vramscope explain` and `vramscope leaks` are
//! written into the page as text, readable even where scripts are off.
//! `--svg PATH` also writes the main timeline chart, drawn by the
//! dashboard's own plotting code (`vramscope_frontend::plot`) natively.
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
use vramscope_shared::{ReadOptions, read_snapshot_bytes};

use super::Failure;
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
    /// Most memory the reader may use, in bytes (guards against hostile files).
    #[arg(long, default_value_t = ReadOptions::default().memory_budget)]
    memory_budget: u64,
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
    let snapshot = read_snapshot_bytes(&bytes, &ReadOptions { memory_budget: args.memory_budget })
        .map_err(|e| Failure::BadInput(anyhow!("{e} (file: {})", path.display())))?;
    let findings = findings(path, &snapshot).map_err(Failure::Other)?;
    let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    let modified_ms = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64);
    let html = render(&name, modified_ms, &bytes, &findings).map_err(Failure::Other)?;
    if let Some(svg_path) = &args.svg {
        let svg = timeline_svg(snapshot).map_err(Failure::BadInput)?;
        std::fs::write(svg_path, svg)
            .with_context(|| format!("cannot write {}", svg_path.display()))
            .map_err(Failure::Other)?;
        eprintln!("vramscope: wrote {}", svg_path.display());
    }
    let output = args.output.clone().unwrap_or_else(|| path.with_extension("html"));
    std::fs::write(&output, html)
        .with_context(|| format!("cannot write {}", output.display()))
        .map_err(Failure::Other)?;
    eprintln!("vramscope: wrote {} ({})", output.display(), super::leaks::bytes(file_size(&output)));
    Ok(())
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// The text of `vramscope explain` and `vramscope leaks` for the file.
fn findings(path: &Path, snapshot: &vramscope_shared::Snapshot) -> anyhow::Result<String> {
    let mut out = Vec::new();
    let reports = explain_with(snapshot, &super::explain::what_if);
    let has_trace = snapshot.devices.iter().any(|d| d.has_trace && !d.trace.is_empty());
    super::explain::write_report(&mut out, path, has_trace, &reports, 6).context("writing the OOM post-mortem")?;
    out.push(b'\n');
    super::leaks::write_report(&mut out, path, &LeakReport::build(snapshot, 10), 6)
        .context("writing the leak ranking")?;
    String::from_utf8(out).context("the findings are not UTF-8")
}

/// Size of the SVG chart, in pixels.
const SVG_SIZE: (u32, u32) = (1200, 480);

/// The timeline chart of the device with the longest trace, as the
/// dashboard draws it (`vramscope_frontend::plot`), in SVG.
fn timeline_svg(snapshot: vramscope_shared::Snapshot) -> anyhow::Result<String> {
    use plotters::prelude::{IntoDrawingArea, SVGBackend};
    use vramscope_frontend::{layout, plot, viewport::Window};
    use vramscope_shared::views::{Analyzed, TimelineParams, timeline};

    let device = snapshot
        .devices
        .iter()
        .filter(|d| !d.trace.is_empty())
        .max_by_key(|d| (d.trace.len(), std::cmp::Reverse(d.device)))
        .map(|d| d.device)
        .ok_or_else(|| anyhow!("no device of this snapshot has a trace: there is no timeline to draw"))?;
    let analyzed = Analyzed::build(snapshot);
    // One bucket per pixel of the plot area (the chart's margins and axis
    // labels take about 100 of them).
    let params = TimelineParams { device: Some(device), px: Some(SVG_SIZE.0 - 100), ..TimelineParams::default() };
    let window = timeline(&analyzed, &params).map_err(|e| anyhow!("timeline of device {device}: {e}"))?;
    let bars = layout::stack(&window.allocations);
    let scene = plot::Scene {
        data: &window,
        bars: &bars,
        view: Window::new(window.start, window.end),
        origin: window.start,
        highlight: None,
        marked: &[],
        cursor: None,
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SVG_SIZE).into_drawing_area();
        plot::draw(&root, &scene).map_err(|e| anyhow!(e))?;
        root.present().map_err(|e| anyhow!("writing the SVG: {e}"))?;
    }
    Ok(svg)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inlined_text_cannot_close_its_element() {
        assert_eq!(raw_text("a = '</script>'; <!-- x"), "a = '<\\/script>'; <\\!-- x");
        assert_eq!(escape_html("<b>\"x\" & 'y'</b>"), "&lt;b&gt;&quot;x&quot; &amp; &#39;y&#39;&lt;/b&gt;");
    }
}
