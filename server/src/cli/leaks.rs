//! `vramscope leaks FILE [--json] [--top N] [--frames N]`: live allocations
//! grouped by stack, ranked by how steadily they grew over the trace.

use std::path::PathBuf;

use clap::Args;
use serde::Serialize;
use vramscope_shared::analysis::leaks::{DeviceLeaks, LeakReport};

use super::Failure;
use super::input::{MemoryBudget, load};
use super::text::{finish, write_json};
use crate::report::findings::write_leak_report;

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

/// The JSON object of `vramscope leaks --json`.
#[derive(Serialize)]
struct LeaksJson<'a> {
    file: String,
    devices: &'a [DeviceLeaks],
}

/// Run the subcommand.
pub(crate) fn run(args: &LeaksArgs) -> Result<(), Failure> {
    let snapshot = load(&args.file, args.budget)?;
    let report = LeakReport::build(&snapshot, args.top);
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        let json = LeaksJson { file: args.file.display().to_string(), devices: &report.devices };
        write_json(&mut out, &json)
    } else {
        write_leak_report(&mut out, &args.file, &report, args.frames)
    };
    finish(written)
}
