//! `vramscope`: the one binary.
//!
//! - Reading a file: `stats`, `explain`, `leaks`, `diff`, `simulate`,
//!   `tune` and `report` (the self-contained HTML page).
//! - The server: `serve` (upload portal, library, JSON API, the embedded
//!   dashboard), `upload`, `token`, `retention`.
//! - The capture agent: `agent -- python train.py`.
//! - In the loop: `check` (a memory budget for CI) and `mcp` (a Model
//!   Context Protocol server for coding assistants).
//!
//! Modules, in their layers (ARCHITECTURE.md; `layers.rs` keeps the rule):
//! `cli/` (one per subcommand) over `http/` (the router and handlers) and
//! `agent/`; below `http`: `ingest/` (upload commit, parse once, persisted
//! index, cache), `report/`, `auth.rs`, `retention.rs`, `metrics.rs`,
//! `assets.rs`, `settings.rs`, `mcp/` (the assistants' tools, over
//! `vramscope_shared` alone); below them `store/` (database and blob store).

mod agent;
mod assets;
mod auth;
mod cli;
mod clock;
mod http;
mod ingest;
#[cfg(test)]
mod layers;
mod machine;
mod mcp;
mod metrics;
mod prefault;
mod report;
mod retention;
mod settings;
mod store;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The system allocator, with large blocks' fresh pages faulted in on a
/// spare core once a command reading a file turns it on (`prefault`).
#[global_allocator]
static ALLOCATOR: prefault::Prefaulting = prefault::Prefaulting;

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
    /// Run the server: upload portal, storage, JSON API and dashboard.
    Serve(cli::serve::ServeArgs),
    /// Upload a snapshot to a server.
    Upload(cli::upload::UploadArgs),
    /// Create or list API tokens.
    Token(cli::token::TokenArgs),
    /// Explain each OOM in a snapshot's trace: the request, free memory,
    /// fragmentation or exhaustion, top live allocations.
    Explain(cli::explain::ExplainArgs),
    /// Rank the stacks of allocations alive at the end by how steadily they
    /// grew: likely leaks first.
    Leaks(cli::leaks::LeaksArgs),
    /// Split live memory into parameters, gradients, optimizer state,
    /// activations and other, at the snapshot's moment or any trace row, and
    /// by the record_function range that allocated it. Categories are
    /// inferred from each allocation's stack (module set-up, optimizer,
    /// autograd's backward thread, forward) and its lifetime; the output
    /// says how sure each figure is.
    Breakdown(cli::breakdown::BreakdownArgs),
    /// Compare two snapshots: memory by stack that grew, shrank, appeared or
    /// vanished, and the figures side by side.
    Diff(cli::diff::DiffArgs),
    /// Replay the trace through a model of PyTorch's caching allocator, with
    /// the recorded settings or others (--alloc-conf), optionally under a
    /// memory capacity: peaks, fragmentation, and where it would run out.
    Simulate(cli::simulate::SimulateArgs),
    /// Replay the trace under a grid of allocator settings and rank them by
    /// reserved peak, with their trade-offs.
    Tune(cli::simulate::TuneArgs),
    /// Will it fit? Predict memory at sizes never run (batch size, sequence
    /// length), from a few small recorded runs of the same job, through the
    /// caching allocator's model: peaks, where it runs out, and the largest
    /// size that fits under a capacity.
    Predict(cli::predict::PredictArgs),
    /// Apply the retention policy once (keep N days / N bytes; never
    /// pinned or commented snapshots), or show with --dry-run what it would
    /// delete and why.
    Retention(cli::retention::RetentionArgs),
    /// Run a PyTorch job with snapshot capture (OOM, threshold, on request)
    /// and live telemetry sent to a server: `vramscope agent --server URL -- python train.py`.
    Agent(cli::agent::AgentArgs),
    /// Write one self-contained HTML file (no network needed to open it):
    /// the snapshot's timelines in the dashboard, inlined, and its OOM
    /// post-mortem and likely leaks as text.
    Report(cli::report::ReportArgs),
    /// Check a snapshot against a memory budget (peaks, fragmentation,
    /// growth against a baseline) and fail the build when a rule is broken:
    /// exit 0 when every rule holds, 1 when one is broken, 2 on bad input.
    Check(cli::check::CheckArgs),
    /// Serve snapshots to coding assistants: a Model Context Protocol
    /// server over stdio (its help lists the tools, from their table).
    #[command(about = cli::mcp::about(), long_about = cli::mcp::long_about())]
    Mcp(cli::mcp::McpArgs),
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,tower_http=info,sqlx=warn"));
    // Logs go to stderr; stdout carries the commands' output. One JSON object
    // per line with VRAMSCOPE_LOG_FORMAT=json, for log collectors.
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = if std::env::var("VRAMSCOPE_LOG_FORMAT").is_ok_and(|f| f == "json") {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

fn runtime() -> Result<tokio::runtime::Runtime, cli::Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| cli::Failure::Other(anyhow::anyhow!("cannot start the async runtime: {e}")))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match args.command {
        Command::Agent(a) => return cli::agent::run(a),
        Command::Stats(a) => cli::stats::run(&a),
        Command::Serve(a) => {
            init_tracing();
            runtime().and_then(|rt| rt.block_on(cli::serve::run(&a)).map_err(cli::Failure::Other))
        }
        Command::Upload(a) => runtime().and_then(|rt| rt.block_on(cli::upload::run(&a))),
        Command::Explain(a) => cli::explain::run(&a),
        Command::Report(a) => cli::report::run(&a),
        Command::Leaks(a) => cli::leaks::run(&a),
        Command::Breakdown(a) => cli::breakdown::run(&a),
        Command::Diff(a) => cli::diff::run(&a),
        Command::Check(a) => cli::check::run(&a),
        Command::Mcp(a) => cli::mcp::run(&a),
        Command::Simulate(a) => cli::simulate::run(&a),
        Command::Tune(a) => cli::simulate::run_tune(&a),
        Command::Predict(a) => cli::predict::run(&a),
        Command::Retention(a) => {
            runtime().and_then(|rt| rt.block_on(cli::retention::run(&a)).map_err(cli::Failure::Other))
        }
        Command::Token(a) => runtime().and_then(|rt| rt.block_on(cli::token::run(&a)).map_err(cli::Failure::Other)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report(),
    }
}
