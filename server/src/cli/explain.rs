//! `vramscope explain FILE [--json]`: the post-mortem of each OOM in a
//! snapshot's trace: request, free memory, fragmentation or exhaustion, top
//! live allocations by stack.

use std::path::PathBuf;

use clap::Args;
use serde::Serialize;
use vramscope_shared::analysis::oom::{OomReport, explain_with};
use vramscope_shared::views::analysis::avoided_by;

use super::Failure;
use super::input::{MemoryBudget, load};
use super::text::{finish, write_json};
use crate::report::findings::write_oom_report;

/// Arguments of `vramscope explain`.
#[derive(Debug, Args)]
pub(crate) struct ExplainArgs {
    /// Snapshot file (pickle from `torch.cuda.memory._dump_snapshot`, plain, gzip or zstd).
    file: PathBuf,
    /// Print one JSON object instead of the human report.
    #[arg(long)]
    json: bool,
    /// Frames to print for the largest live stack (human report).
    #[arg(long, default_value_t = 6)]
    frames: usize,
    #[command(flatten)]
    budget: MemoryBudget,
}

/// The JSON object of `vramscope explain --json`.
#[derive(Serialize)]
struct ExplainJson<'a> {
    file: String,
    /// Whether any device has a trace (without one, an OOM leaves no entry).
    has_trace: bool,
    ooms: &'a [OomReport],
}

/// Run the subcommand.
pub(crate) fn run(args: &ExplainArgs) -> Result<(), Failure> {
    let snapshot = load(&args.file, args.budget)?;
    let reports = explain_with(&snapshot, &avoided_by);
    let has_trace = snapshot.devices.iter().any(|d| d.has_trace && !d.trace.is_empty());
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        write_json(&mut out, &ExplainJson { file: args.file.display().to_string(), has_trace, ooms: &reports })
    } else {
        write_oom_report(&mut out, &args.file, has_trace, &reports, args.frames)
    };
    finish(written)
}
