//! `vramscope report FILE [-o report.html]`: the self-contained HTML page
//! of a snapshot (see `crate::report`). `--svg PATH` also writes the main
//! timeline chart; `--png PATH` the same chart as a bitmap.

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use clap::Args;
use vramscope_shared::read_snapshot_bytes;

use super::Failure;
use super::input::MemoryBudget;
use crate::report::chart::{ChartFormat, chart_bytes, main_window};
use crate::report::report_html;

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
    let html = report_html(&name, modified_ms, &bytes, &snapshot).map_err(Failure::Other)?;
    let charts = [(&args.svg, ChartFormat::Svg), (&args.png, ChartFormat::Png)];
    let charts: Vec<_> = charts.into_iter().filter_map(|(p, f)| p.as_ref().map(|p| (p, f))).collect();
    // One timeline window for both charts.
    let window = if charts.is_empty() {
        None
    } else {
        let analyzed = vramscope_shared::indexed::IndexedSnapshot::build(snapshot);
        Some(main_window(&analyzed).map_err(Failure::BadInput)?)
    };
    for (chart_path, format) in charts {
        let Some(window) = &window else { break };
        let chart = chart_bytes(window, &name, format).map_err(Failure::Other)?;
        std::fs::write(chart_path, chart)
            .with_context(|| format!("cannot write {}", chart_path.display()))
            .map_err(Failure::Other)?;
        eprintln!("vramscope: wrote {}", chart_path.display());
    }
    let output = args.output.clone().unwrap_or_else(|| path.with_extension("html"));
    std::fs::write(&output, html)
        .with_context(|| format!("cannot write {}", output.display()))
        .map_err(Failure::Other)?;
    eprintln!("vramscope: wrote {} ({})", output.display(), crate::report::text::bytes(file_size(&output)));
    Ok(())
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}
