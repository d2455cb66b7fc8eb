//! `vramscope leaks FILE [--json] [--top N] [--frames N]`: live allocations
//! grouped by stack, ranked by how steadily they grew over the trace.

use std::path::PathBuf;

use clap::Args;
use vramscope_shared::analysis::leaks::LeakReport;
use vramscope_shared::cli_json::leaks_json;

use super::input::{MemoryBudget, load};
use super::{Failure, finish, write_json};
use crate::report::text::leaks::write_leak_report;

/// Arguments of `vramscope leaks`.
#[derive(Debug, Args)]
pub(crate) struct LeaksArgs {
    /// Snapshot file (pickle from `torch.cuda.memory._dump_snapshot`, plain, gzip or zstd).
    file: PathBuf,
    /// Print one JSON object instead of the human report.
    #[arg(long)]
    json: bool,
    /// Stacks to list per device.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Frames to print per stack (human report).
    #[arg(long, default_value_t = 6)]
    frames: usize,
    #[command(flatten)]
    budget: MemoryBudget,
}

/// Run the subcommand.
pub(crate) fn run(args: &LeaksArgs) -> Result<(), Failure> {
    let snapshot = load(&args.file, args.budget)?;
    let json = leaks_json(&args.file.display().to_string(), &snapshot, args.top);
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        write_json(&mut out, &json)
    } else {
        write_leak_report(&mut out, &args.file, &LeakReport { devices: json.devices }, args.frames)
    };
    finish(written)
}
