//! `vramscope breakdown FILE [--device N] [--at ROW] [--json]`: live memory
//! split into parameters, gradients, optimizer state, activations and
//! other, and by the `record_function` range that allocated it.

use std::io::Write;
use std::path::PathBuf;

use anyhow::anyhow;
use clap::Args;
use vramscope_shared::analysis::breakdown::{CATEGORIES, DeviceBreakdown};
use vramscope_shared::analyzed::Analyzed;
use vramscope_shared::answers::breakdown_json;
use vramscope_shared::error::ViewError;

use super::Failure;
use super::input::{MemoryBudget, load};
use super::text::{finish, write_json};
use crate::report::text::bytes;

/// Arguments of `vramscope breakdown`.
#[derive(Debug, Args)]
pub(crate) struct BreakdownArgs {
    /// Snapshot file (pickle from `torch.cuda.memory._dump_snapshot`, plain, gzip or zstd).
    file: PathBuf,
    /// Only this CUDA device (default: every device).
    #[arg(long)]
    device: Option<u32>,
    /// The memory right after this trace row (default: the last row, the
    /// snapshot's moment).
    #[arg(long)]
    at: Option<u32>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Stages (record_function ranges) to list per device.
    #[arg(long, default_value_t = 8)]
    stages: usize,
    #[command(flatten)]
    budget: MemoryBudget,
}

/// Run the subcommand.
pub(crate) fn run(args: &BreakdownArgs) -> Result<(), Failure> {
    let snapshot = load(&args.file, args.budget)?;
    let analyzed = Analyzed::build(snapshot);
    let file = args.file.display().to_string();
    let answer = breakdown_json(&file, &analyzed, args.device, args.at).map_err(|e| {
        let what = match &e {
            ViewError::NotFound(_) => format!("{}: {e}", args.file.display()),
            ViewError::BadRequest(m) => format!("{}: {m}", args.file.display()),
        };
        Failure::BadInput(anyhow!(what))
    })?;
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        write_json(&mut out, &answer)
    } else {
        answer.devices.iter().try_for_each(|d| write_device(&mut out, &args.file, &d.breakdown, args.stages))
    };
    finish(written)
}

fn write_device(
    out: &mut impl Write,
    file: &std::path::Path,
    b: &DeviceBreakdown,
    stages: usize,
) -> std::io::Result<()> {
    let at = b.at_row.map_or_else(|| "no trace: the final state".to_owned(), |r| format!("right after row {r}"));
    writeln!(out, "{}, device {} ({at})", file.display(), b.device)?;
    let total = b.categories.total();
    for c in CATEGORIES {
        let n = b.categories.get(c);
        let pct = if total > 0 { n as f64 * 100.0 / total as f64 } else { 0.0 };
        let how = b.confidence.get(c).source();
        let line = format!("  {:<16} {:>11} {:>5.1}%  {how}", c.label(), bytes(n), pct);
        writeln!(out, "{}", line.trim_end())?;
    }
    let o = &b.other_detail;
    writeln!(
        out,
        "    other: temporaries {}, cuBLAS workspaces {}, kept across steps {}, no stack {}",
        bytes(o.temporaries),
        bytes(o.workspaces),
        bytes(o.kept_across_steps),
        bytes(o.unknown)
    )?;
    writeln!(out, "  {:<16} {:>11}  (requested bytes alive)", "total", bytes(total))?;
    if b.stages.len() > 1 || b.stages.first().is_some_and(|s| s.name != "(no range)") {
        writeln!(out, "  by the record_function range that allocated it:")?;
        for s in b.stages.iter().take(stages) {
            writeln!(out, "    {:>11}  {}", bytes(s.bytes), s.name)?;
        }
        if b.stages.len() > stages {
            writeln!(out, "    … {} more ranges (--stages N)", b.stages.len() - stages)?;
        }
    }
    for note in &b.notes {
        writeln!(out, "  note: {note}")?;
    }
    writeln!(out, "  Categories are inferred from stacks and lifetimes; see `vramscope breakdown --help`.")?;
    writeln!(out)
}
