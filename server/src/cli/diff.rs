//! `vramscope diff A B [--json]`: live memory by stack that grew, shrank,
//! appeared or vanished from A to B, and the devices' figures side by side.

use std::path::PathBuf;

use clap::Args;
use vramscope_shared::analysis::diff::SnapshotDiff;
use vramscope_shared::cli_json::diff_json;

use super::input::{MemoryBudget, load};
use super::{Failure, finish, write_json};
use crate::report::text::diff::write_report;

/// Arguments of `vramscope diff`.
#[derive(Debug, Args)]
pub(crate) struct DiffArgs {
    /// The first snapshot (before, or one rank).
    a: PathBuf,
    /// The second snapshot (after, or another rank).
    b: PathBuf,
    /// Print one JSON object instead of the human report.
    #[arg(long)]
    json: bool,
    /// Stacks to list per device, the largest changes first.
    #[arg(long, default_value_t = 20)]
    top: usize,
    // Applies to each file.
    #[command(flatten)]
    budget: MemoryBudget,
}

/// Run the subcommand.
pub(crate) fn run(args: &DiffArgs) -> Result<(), Failure> {
    let a = load(&args.a, args.budget)?;
    let b = load(&args.b, args.budget)?;
    let json = diff_json(&args.a.display().to_string(), &a, &args.b.display().to_string(), &b, args.top);
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        write_json(&mut out, &json)
    } else {
        write_report(&mut out, &args.a, &args.b, &SnapshotDiff { devices: json.devices })
    };
    finish(written)
}
