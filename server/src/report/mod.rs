//! The report: one self-contained HTML file of a snapshot, to send to
//! someone who has no vramscope server (`vramscope report`, and the
//! server's `GET /api/v1/snapshots/{id}/report.html`). It opens from disk with no
//! network: the dashboard (its WebAssembly, JavaScript and style sheet) and
//! the snapshot's bytes are inlined, and the page opens the snapshot in
//! local mode (the same views as the server's, answered in the page). The
//! post-mortem findings of `vramscope explain` and `vramscope leaks` are
//! written into the page as text, readable even where scripts are off.
//! [`chart`] draws the main timeline chart as SVG or PNG (its text drawn
//! with the font of [`glyphs`]); [`text`] writes the findings' text, as the
//! CLI prints it, and the text of every other analysis the CLI prints;
//! [`junit`] writes `vramscope check`'s verdict as JUnit XML.
//!
//! Inlined, the JavaScript glue is imported from a blob: URL made at load
//! and the WebAssembly comes from base64 text. A page opened from a `file:`
//! URL may not start a module worker from a blob: URL, so a report reads
//! its snapshot on the page itself (`window.__vramscope_local_in_page`),
//! once, at load.

pub(crate) mod chart;
mod glyphs;
pub(crate) mod junit;
pub(crate) mod text;

use std::path::Path;

use anyhow::{Context, anyhow};
use base64::Engine;
use vramscope_shared::analysis::avoided::explain_replayed;
use vramscope_shared::analysis::leaks::LeakReport;

use crate::assets::dashboard_file;
pub(crate) use chart::{ChartFormat, main_chart};

/// The dashboard's files a report inlines.
const GLUE: &str = "vramscope_frontend.js";
const WASM: &str = "vramscope_frontend_bg.wasm";
/// The style sheets the dashboard's page links, in its order.
const STYLES: &[&str] = &["style.css", "analysis.css"];

/// The whole report page of a snapshot: its findings, the dashboard and
/// the file's bytes inlined. `name` (the file's base name) names it
/// everywhere in the page: a report is sent to others, and the path it was
/// made from on this machine is none of their business. The dashboard's
/// "export report" serves the same page.
pub(crate) fn report_html(
    name: &str,
    modified_ms: u64,
    bytes: &[u8],
    snapshot: &vramscope_shared::Snapshot,
) -> anyhow::Result<String> {
    let findings = findings(Path::new(name), snapshot)?;
    render(name, modified_ms, bytes, &findings)
}

/// The report of a snapshot too large to inline, from its index alone: the
/// findings, the main chart as SVG, and where to get the rest. No script,
/// no dashboard, no file bytes.
pub(crate) fn index_report_html(
    name: &str,
    size: u64,
    limit: u64,
    analyzed: &vramscope_shared::indexed::IndexedSnapshot,
) -> anyhow::Result<String> {
    let findings = findings(Path::new(name), &analyzed.snapshot)?;
    // A snapshot with no trace has no chart; the findings say why.
    let chart = main_chart(analyzed, name, ChartFormat::Svg)
        .ok()
        .and_then(|svg| String::from_utf8(svg).ok())
        .unwrap_or_default();
    Ok(format!(
        r#"{head}
<body>
<section class="report-findings" id="report-index-only">
<h1>{title}</h1>
<p class="notice">This snapshot is {size} bytes, more than a report page inlines ({limit} bytes), so this page
holds what the server's index of it gives: the main timeline chart and the post-mortem. The timelines are
on the server that made this page, or run &quot;vramscope report&quot; on the file.</p>
<div class="report-chart" id="report-chart">{chart}</div>
<details open id="report-findings">
<summary>Post-mortem of {title}: OOMs and likely leaks</summary>
<pre>{findings}</pre>
</details>
</section>
</body>
</html>
"#,
        head = head(name, ".report-chart svg { max-width: 100%; height: auto; }")?,
        title = escape_html(name),
        findings = escape_html(&findings),
    ))
}

/// The start of a report page up to `</head>`: its title, the dashboard's
/// style sheets inlined and the findings' style, plus `extra_css`.
fn head(name: &str, extra_css: &str) -> anyhow::Result<String> {
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
{extra_css}
</style>
</head>"#,
        title = escape_html(name),
        version = env!("CARGO_PKG_VERSION"),
        style = raw_text(&styles()?),
    ))
}

/// The text of `vramscope explain` and `vramscope leaks` for the file.
fn findings(path: &Path, snapshot: &vramscope_shared::Snapshot) -> anyhow::Result<String> {
    let mut out = Vec::new();
    let reports = explain_replayed(snapshot);
    let has_trace = snapshot.devices.iter().any(|d| d.has_trace && !d.trace.is_empty());
    text::oom::write_oom_report(&mut out, path, has_trace, &reports, 6).context("writing the OOM post-mortem")?;
    out.push(b'\n');
    text::leaks::write_leak_report(&mut out, path, &LeakReport::build(snapshot, 10), 6)
        .context("writing the leak ranking")?;
    String::from_utf8(out).context("the findings are not UTF-8")
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
        r#"{head}
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
        head = head(name, "")?,
        title = escape_html(name),
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
