//! `vramscope simulate FILE [--alloc-conf CONF] [--capacity SIZE] [--json]`
//! and `vramscope tune FILE [--capacity SIZE] [--json]`: replay a trace
//! through the model of PyTorch's caching allocator, with the recorded
//! settings or others.

use std::path::{Path, PathBuf};

use anyhow::anyhow;
use clap::Args;
use vramscope_shared::analysis::capacity::simulate_with_inferred_capacity;
use vramscope_shared::cli_json::tune_json;
use vramscope_shared::simulate::{AllocatorConfig, SimulateOptions, parse_size};

use super::input::{MemoryBudget, load};
use super::{Failure, finish, write_json};
use crate::report::text::simulate::{write_simulation, write_tune};

/// Arguments of `vramscope simulate`.
#[derive(Debug, Args)]
pub(crate) struct SimulateArgs {
    /// Snapshot file with a trace (`torch.cuda.memory._record_memory_history`).
    file: PathBuf,
    /// PYTORCH_CUDA_ALLOC_CONF to replay with, e.g.
    /// "max_split_size_mb:512,expandable_segments:True" (default: the
    /// settings the snapshot was recorded with).
    #[arg(long, value_name = "CONF")]
    alloc_conf: Option<String>,
    /// Memory each GPU may reserve, e.g. 80GiB or 500MB (default: unlimited; for a snapshot that ran out, the
    /// least the process had then).
    #[arg(long, value_name = "SIZE", value_parser = capacity)]
    capacity: Option<u64>,
    /// Serve the requests that ran out of memory in the recorded run, as if
    /// there had been memory for them (what if there had been more memory).
    /// By default, without --capacity, they fail in the replay too, so that
    /// it reproduces the recorded run.
    #[arg(long)]
    grant_recorded_ooms: bool,
    /// Print one JSON object instead of the human summary.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    budget: MemoryBudget,
}

/// Arguments of `vramscope tune`.
#[derive(Debug, Args)]
pub(crate) struct TuneArgs {
    /// Snapshot file with a trace (`torch.cuda.memory._record_memory_history`).
    file: PathBuf,
    /// Memory each GPU may reserve, e.g. 80GiB or 500MB (default: unlimited; for a snapshot that ran out, the
    /// least the process had then).
    #[arg(long, value_name = "SIZE", value_parser = capacity)]
    capacity: Option<u64>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    budget: MemoryBudget,
}

fn capacity(text: &str) -> Result<u64, String> {
    parse_size(text).map_err(|e| e.to_string())
}

fn bad_input(e: impl std::fmt::Display, path: &Path) -> Failure {
    Failure::BadInput(anyhow!("{e} (file: {})", path.display()))
}

/// Run `vramscope simulate`.
pub(crate) fn run(args: &SimulateArgs) -> Result<(), Failure> {
    // Refuse bad settings before spending time on the file.
    if let Some(conf) = &args.alloc_conf {
        AllocatorConfig::parse(conf).map_err(|e| Failure::BadInput(anyhow!(e)))?;
    }
    let snapshot = load(&args.file, args.budget)?;
    let options = SimulateOptions {
        alloc_conf: args.alloc_conf.clone(),
        capacity: args.capacity,
        record_series: false,
        grant_recorded_ooms: args.grant_recorded_ooms,
    };
    let sim = simulate_with_inferred_capacity(&snapshot, &options).map_err(|e| bad_input(e, &args.file))?;
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        // The report `vramscope_shared::cli_json::simulate_json` gives the MCP tool.
        write_json(&mut out, &sim.report())
    } else {
        write_simulation(&mut out, &args.file, &snapshot, &sim)
    };
    finish(written)
}

/// Run `vramscope tune`.
pub(crate) fn run_tune(args: &TuneArgs) -> Result<(), Failure> {
    let snapshot = load(&args.file, args.budget)?;
    let json =
        tune_json(&args.file.display().to_string(), &snapshot, args.capacity).map_err(|e| bad_input(e, &args.file))?;
    let mut out = std::io::stdout().lock();
    let written =
        if args.json { write_json(&mut out, &json) } else { write_tune(&mut out, &args.file, &snapshot, &json.report) };
    finish(written)
}
