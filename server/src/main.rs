//! `vramscope`: the one binary. Subcommands read snapshots from the command
//! line today; `serve` and `agent` modes join them as they are built.

mod cli;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// GPU memory observatory for PyTorch: reads CUDA caching-allocator snapshots.
#[derive(Debug, Parser)]
#[command(name = "vramscope", version, about)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Summarise a snapshot: reserved, allocated, active, requested and
    /// fragmentation figures per device, recomputed from the pickle alone.
    Stats(cli::stats::StatsArgs),
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match args.command {
        Command::Stats(a) => cli::stats::run(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report(),
    }
}
