//! The JSON objects of the command line's `--json`, one function per
//! subcommand, so that `vramscope check` and the `vramscope mcp` tools answer
//! with exactly what `vramscope stats|explain|leaks|diff|simulate|tune
//! --json` print. `file` is how the caller names the snapshot (a path, or a
//! stored snapshot's name).

use serde::Serialize;

use crate::analysis::avoided::explain_replayed;
use crate::analysis::capacity::{simulate_with_inferred_capacity, tune_with_inferred_capacity};
use crate::analysis::check::{CheckBudget, CheckError, CheckReport, check};
use crate::analysis::diff::{DeviceDiff, SnapshotDiff};
use crate::analysis::leaks::{DeviceLeaks, LeakReport};
use crate::analysis::oom::OomReport;
use crate::simulate::tune::{DEFAULT_GRID, TuneReport};
use crate::simulate::{SimError, SimulateOptions, SimulationReport};
use crate::snapshot::Snapshot;
use crate::stats::StatsReport;

/// `vramscope stats --json`.
pub fn stats_json(file: &str, snapshot: &Snapshot) -> StatsReport {
    snapshot.stats().report(file)
}

/// The JSON object of `vramscope explain --json`.
#[derive(Clone, Debug, Serialize)]
pub struct ExplainJson {
    /// The snapshot.
    pub file: String,
    /// Whether any device has a trace (without one, an OOM leaves no entry).
    pub has_trace: bool,
    /// One post-mortem per `oom` entry.
    pub ooms: Vec<OomReport>,
}

/// `vramscope explain --json`: each OOM's post-mortem, with the settings
/// that would have avoided it.
pub fn explain_json(file: &str, snapshot: &Snapshot) -> ExplainJson {
    ExplainJson {
        file: file.to_owned(),
        has_trace: snapshot.devices.iter().any(|d| d.has_trace && !d.trace.is_empty()),
        ooms: explain_replayed(snapshot),
    }
}

/// The JSON object of `vramscope leaks --json`.
#[derive(Clone, Debug, Serialize)]
pub struct LeaksJson {
    /// The snapshot.
    pub file: String,
    /// The ranking per device.
    pub devices: Vec<DeviceLeaks>,
}

/// `vramscope leaks --json`: the `top` likeliest leaks per device.
pub fn leaks_json(file: &str, snapshot: &Snapshot, top: usize) -> LeaksJson {
    LeaksJson { file: file.to_owned(), devices: LeakReport::build(snapshot, top).devices }
}

/// The JSON object of `vramscope breakdown --json`.
#[derive(Clone, Debug, Serialize)]
pub struct BreakdownJson {
    /// The snapshot.
    pub file: String,
    /// One breakdown per device asked for.
    pub devices: Vec<crate::views::findings::DeviceBreakdownAnswer>,
}

/// `vramscope breakdown --json`: live memory by category and stage at a row
/// (the end by default) of each device asked for.
pub fn breakdown_json(
    file: &str,
    analyzed: &crate::indexed::IndexedSnapshot,
    device: Option<u32>,
    at: Option<u32>,
) -> Result<BreakdownJson, crate::error::ViewError> {
    let params = crate::views::findings::BreakdownParams { device, at, px: None };
    let answer = crate::views::findings::breakdown(analyzed, &params)?;
    Ok(BreakdownJson { file: file.to_owned(), devices: answer.devices })
}

/// The JSON object of `vramscope diff --json`.
#[derive(Clone, Debug, Serialize)]
pub struct DiffJson {
    /// The first snapshot.
    pub file_a: String,
    /// The second snapshot.
    pub file_b: String,
    /// No stack changed and the figures agree.
    pub identical: bool,
    /// Paired devices.
    pub devices: Vec<DeviceDiff>,
}

/// `vramscope diff --json`: what changed from `a` to `b`, `top` stacks per device.
pub fn diff_json(file_a: &str, a: &Snapshot, file_b: &str, b: &Snapshot, top: usize) -> DiffJson {
    let diff = SnapshotDiff::build(a, b, top);
    DiffJson { file_a: file_a.to_owned(), file_b: file_b.to_owned(), identical: diff.is_empty(), devices: diff.devices }
}

/// `vramscope simulate --json`.
/// A snapshot that ran out replays under the least the process had unless
/// a capacity is given ([`simulate_with_inferred_capacity`]).
pub fn simulate_json(snapshot: &Snapshot, options: &SimulateOptions) -> Result<SimulationReport, SimError> {
    Ok(simulate_with_inferred_capacity(snapshot, options)?.report())
}

/// The JSON object of `vramscope tune --json`.
#[derive(Clone, Debug, Serialize)]
pub struct TuneJson {
    /// The snapshot.
    pub file: String,
    /// The ranking.
    #[serde(flatten)]
    pub report: TuneReport,
}

/// `vramscope tune --json`: the default grid of settings, ranked.
pub fn tune_json(file: &str, snapshot: &Snapshot, capacity: Option<u64>) -> Result<TuneJson, SimError> {
    Ok(TuneJson { file: file.to_owned(), report: tune_with_inferred_capacity(snapshot, capacity, DEFAULT_GRID)? })
}

/// The JSON object of `vramscope check --json`.
#[derive(Clone, Debug, Serialize)]
pub struct CheckJson {
    /// The checked snapshot.
    pub file: String,
    /// The baseline, if any.
    pub baseline: Option<String>,
    /// The budget checked.
    pub budget: CheckBudget,
    /// The verdict.
    #[serde(flatten)]
    pub report: CheckReport,
}

/// `vramscope check --json`: `snapshot` against `budget` (and `baseline`).
pub fn check_json(
    file: &str,
    snapshot: &Snapshot,
    baseline: Option<(&str, &Snapshot)>,
    budget: &CheckBudget,
    top: usize,
) -> Result<CheckJson, CheckError> {
    let report = check(snapshot, baseline.map(|b| b.1), budget, top)?;
    Ok(CheckJson { file: file.to_owned(), baseline: baseline.map(|b| b.0.to_owned()), budget: budget.clone(), report })
}
