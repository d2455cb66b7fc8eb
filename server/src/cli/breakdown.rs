//! `vramscope breakdown FILE [--device N] [--at ROW] [--json]`: live memory
//! split into parameters, gradients, optimizer state, activations and
//! other, and by the `record_function` range that allocated it.

use std::path::PathBuf;

use anyhow::anyhow;
use clap::Args;
use vramscope_shared::cli_json::breakdown_json;
use vramscope_shared::error::ViewError;
use vramscope_shared::indexed::IndexedSnapshot;

use super::input::{MemoryBudget, load};
use super::{Failure, finish, write_json};
use crate::report::text::breakdown::write_device;

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
    let analyzed = IndexedSnapshot::build(snapshot);
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
