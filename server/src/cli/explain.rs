//! `vramscope explain FILE [--json]`: the post-mortem of each OOM in a
//! snapshot's trace: request, free memory, fragmentation or exhaustion, top
//! live allocations by stack.

use std::path::PathBuf;

use clap::Args;
use vramscope_shared::cli_json::explain_json;

use super::input::{MemoryBudget, load};
use super::{Failure, finish, write_json};
use crate::report::text::oom::write_oom_report;

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

/// Run the subcommand.
pub(crate) fn run(args: &ExplainArgs) -> Result<(), Failure> {
    let snapshot = load(&args.file, args.budget)?;
    let json = explain_json(&args.file.display().to_string(), &snapshot);
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        write_json(&mut out, &json)
    } else {
        write_oom_report(&mut out, &args.file, json.has_trace, &json.ooms, args.frames)
    };
    finish(written)
}
