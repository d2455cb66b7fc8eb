//! The ranking of allocator settings by reserved peak under a capacity.

use serde::{Deserialize, Serialize};

use super::parse_capacity;
use crate::analysis::capacity::tune_with_inferred_capacity;
use crate::error::ViewError;
use crate::indexed::IndexedSnapshot;
use crate::simulate::tune::{DEFAULT_GRID, TuneRow};

/// Query of the tune view.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct TuneParams {
    /// Memory each device may reserve (absent: unlimited).
    pub capacity: Option<String>,
}

/// One candidate setting's outcome with its place in the ranking.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuneCandidate {
    /// 1 for the best.
    pub rank: u32,
    /// The replay's figures, flattened into the same JSON object.
    #[serde(flatten)]
    pub outcome: TuneRow,
}

/// Every candidate setting ranked: those that fit before those that do
/// not, then by reserved peak. Over several devices each figure is the
/// largest of any device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuneAnswer {
    /// The capacity tried under.
    pub capacity_bytes: Option<u64>,
    /// Not given: inferred from the recorded OOM (the least the process had).
    #[serde(default)]
    pub capacity_inferred: bool,
    /// Where the capacity came from: `given`, `recorded` (the cap the
    /// capture recorded for the process) or `inferred`; absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_source: Option<String>,
    /// Reserved peak of the recorded settings' replay.
    pub recorded_reserved_peak_bytes: u64,
    /// Best first.
    pub rows: Vec<TuneCandidate>,
}

/// Replay the recorded settings and each of [`DEFAULT_GRID`], and rank them.
pub fn tune(a: &IndexedSnapshot, p: &TuneParams) -> Result<TuneAnswer, ViewError> {
    let capacity = parse_capacity(p.capacity.as_deref())?;
    let report = tune_with_inferred_capacity(&a.snapshot, capacity, DEFAULT_GRID)?;
    let rows: Vec<TuneCandidate> =
        report.rows.iter().enumerate().map(|(k, r)| TuneCandidate { rank: k as u32 + 1, outcome: r.clone() }).collect();
    let recorded_reserved_peak_bytes =
        rows.iter().find(|r| r.outcome.recorded).map_or(0, |r| r.outcome.peaks.reserved_peak_bytes);
    Ok(TuneAnswer {
        capacity_bytes: report.capacity_bytes,
        capacity_inferred: report.capacity_inferred,
        capacity_source: report.capacity_source.map(str::to_owned),
        recorded_reserved_peak_bytes,
        rows,
    })
}
