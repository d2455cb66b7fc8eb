//! The JSON of the jobs pages (`/api/v1/jobs`, `/api/v1/jobs/{job}`): a
//! job's ranks side by side, as the server aggregates them.

use serde::Deserialize;

/// One job of `GET /api/v1/jobs`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct JobSummary {
    /// The job's name.
    pub job: String,
    /// Its snapshots.
    pub snapshots: u64,
    /// Distinct ranks.
    pub ranks: u64,
    /// Distinct hosts.
    pub hosts: u64,
    /// Newest upload, ms since the Unix epoch.
    pub last_upload_ms: i64,
    /// Snapshots uploaded on an OOM.
    pub oom_snapshots: u64,
}

/// One rank of `GET /api/v1/jobs/{job}`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Member {
    /// Rank, if named at upload.
    #[serde(default)]
    pub rank: Option<i64>,
    /// Host, if named at upload.
    #[serde(default)]
    pub host: Option<String>,
    /// Snapshots of this rank.
    pub snapshots: u64,
    /// The snapshot shown.
    pub snapshot_id: String,
    /// Its name.
    pub name: String,
    /// `parsing`, `ready` or `failed`.
    pub status: String,
    /// `manual`, `threshold` or `oom`.
    pub trigger: String,
    /// Peak of requested bytes.
    #[serde(default)]
    pub peak_requested_bytes: Option<u64>,
    /// Peak of reserved bytes.
    #[serde(default)]
    pub peak_reserved_bytes: Option<u64>,
    /// Inactive-split share of reserved bytes at snapshot time.
    #[serde(default)]
    pub fragmentation: Option<f64>,
    /// OOMs in the trace.
    #[serde(default)]
    pub ooms: Option<u64>,
    /// Flagged by the divergence rule.
    pub diverges: bool,
    /// Bytes above the others' median.
    #[serde(default)]
    pub excess_bytes: Option<u64>,
    /// Snapshot to compare with.
    #[serde(default)]
    pub compare_with: Option<String>,
}

/// `GET /api/v1/jobs/{job}`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct JobReport {
    /// The job.
    pub job: String,
    /// All its snapshots.
    pub snapshots: u64,
    /// Its ranks.
    pub members: Vec<Member>,
    /// The median peak.
    #[serde(default)]
    pub median_peak_requested_bytes: Option<u64>,
    /// The divergence rule, in words.
    pub rule: String,
}
