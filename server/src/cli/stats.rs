//! `vramscope stats FILE [--json]`.

use std::path::PathBuf;

use clap::Args;

use super::input::{MemoryBudget, load};
use super::{Failure, finish, write_json};
use crate::report::text::stats::write_summary;

/// Arguments of `vramscope stats`.
#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    /// Snapshot file (pickle from `torch.cuda.memory._dump_snapshot`, plain, gzip or zstd).
    file: PathBuf,
    /// Print one JSON object instead of the human summary.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    budget: MemoryBudget,
}

/// Run the subcommand.
pub(crate) fn run(args: &StatsArgs) -> Result<(), Failure> {
    let snapshot = load(&args.file, args.budget)?;
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        write_json(&mut out, &vramscope_shared::cli_json::stats_json(&args.file.display().to_string(), &snapshot))
    } else {
        let stats = snapshot.stats();
        write_summary(&mut out, &args.file, &snapshot, &stats.devices, stats.host.as_ref())
    };
    finish(written)
}
