//! A training job's ranks side by side (`/api/v1/jobs`).

use serde::{Deserialize, Serialize};

use super::snapshots::{SnapshotStatus, Trigger};

/// One job of `GET /api/v1/jobs`: its snapshots counted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSummary {
    /// The job name given at upload (`?job=`).
    pub job: String,
    /// Snapshots of the job.
    pub snapshots: u64,
    /// Distinct ranks among them.
    pub ranks: u64,
    /// Distinct hosts among them.
    pub hosts: u64,
    /// Newest upload, milliseconds since the Unix epoch.
    pub last_upload_ms: i64,
    /// Snapshots uploaded because of an out-of-memory error (`trigger=oom`).
    pub oom_snapshots: u64,
}

/// One rank (or host) of a job: its latest snapshot and figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Member {
    /// Distributed rank, if the uploads named one.
    pub rank: Option<i64>,
    /// Host, if the uploads named one.
    pub host: Option<String>,
    /// Snapshots of this rank and host in the job.
    pub snapshots: u64,
    /// The snapshot shown: the newest parsed one (the newest at all when none is).
    pub snapshot_id: String,
    /// Its name.
    pub name: String,
    /// Its upload time, ms since the epoch.
    pub uploaded_at_ms: i64,
    /// Its parsing status.
    pub status: SnapshotStatus,
    /// What made the client upload it.
    pub trigger: Trigger,
    /// Peak of requested bytes over the trace (what the program held:
    /// allocated bytes before the allocator's rounding); the current
    /// figure when the snapshot has no trace.
    pub peak_requested_bytes: Option<u64>,
    /// Peak of reserved bytes over the trace (or current).
    pub peak_reserved_bytes: Option<u64>,
    /// Reserved bytes at snapshot time.
    pub reserved_bytes: Option<u64>,
    /// Share of reserved bytes lying free inside split segments at snapshot
    /// time (memory the cache holds but cannot hand back or reuse for large
    /// requests): the inactive-split share.
    pub fragmentation: Option<f64>,
    /// Out-of-memory events in its trace.
    pub ooms: Option<u64>,
    /// Its peak diverges from the other ranks' (see [`JobReport::rule`]).
    pub diverges: bool,
    /// How far above the median of the others its peak is, when it diverges.
    pub excess_bytes: Option<u64>,
    /// For a diverging rank: the snapshot of the rank nearest the median, to
    /// compare with (`/compare/{snapshot_id}/{compare_with}`).
    pub compare_with: Option<String>,
}

/// `GET /api/v1/jobs/{job}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobReport {
    /// The job.
    pub job: String,
    /// All its snapshots.
    pub snapshots: u64,
    /// One entry per rank and host, by rank then host.
    pub members: Vec<Member>,
    /// Median of the members' requested peaks.
    pub median_peak_requested_bytes: Option<u64>,
    /// The divergence rule, in words.
    pub rule: String,
}

/// The query of `GET /api/v1/jobs/{job}/check` and
/// `GET /api/v1/snapshots/{id}/check`: the budget, as `vramscope check`'s
/// options spell it (sizes like `12GiB`, percentages as numbers).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckQuery {
    /// `--max-reserved-peak`, e.g. `12GiB`.
    pub max_reserved_peak: Option<String>,
    /// `--max-allocated-peak`.
    pub max_allocated_peak: Option<String>,
    /// `--max-fragmentation`, in percent.
    pub max_fragmentation: Option<f64>,
    /// `--max-growth`, in percent, against the baseline.
    pub max_growth: Option<f64>,
    /// Stacks that grew to list per device (default 5).
    pub top: Option<usize>,
    /// `…/snapshots/{id}/check` only: the baseline snapshot's id.
    pub baseline: Option<String>,
}

impl CheckQuery {
    /// The budget this query asks for; the error names the bad field.
    pub fn budget(&self) -> Result<crate::analysis::check::CheckBudget, String> {
        let size = |field: &str, text: &Option<String>| {
            text.as_deref().map(|t| crate::simulate::parse_size(t).map_err(|e| format!("{field}: {e}"))).transpose()
        };
        let pct = |field: &str, v: Option<f64>| match v {
            Some(p) if !p.is_finite() || p < 0.0 => Err(format!("{field}: {p} is not a percentage (0 or more)")),
            other => Ok(other),
        };
        Ok(crate::analysis::check::CheckBudget {
            max_reserved_peak_bytes: size("max_reserved_peak", &self.max_reserved_peak)?,
            max_allocated_peak_bytes: size("max_allocated_peak", &self.max_allocated_peak)?,
            max_fragmentation_pct: pct("max_fragmentation", self.max_fragmentation)?,
            max_growth_pct: pct("max_growth", self.max_growth)?,
        })
    }
}

/// The answer of the `check` routes: the verdict on a stored snapshot,
/// with the snapshot and baseline it compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckAnswer {
    /// The checked snapshot (for a job: its newest).
    pub snapshot: super::SnapshotMeta,
    /// The baseline (for a job: its newest pinned snapshot other than the
    /// checked one), if there is one.
    pub baseline: Option<super::SnapshotMeta>,
    /// The budget checked.
    pub budget: crate::analysis::check::CheckBudget,
    /// The verdict.
    #[serde(flatten)]
    pub report: crate::analysis::check::CheckReport,
}
