//! Telemetry read back (`/api/v1/live`): the processes that streamed it,
//! their samples, and the NVML view of connected agents' hosts.

use serde::{Deserialize, Serialize};

use super::agent::{NvmlDevice, Sample};
use super::snapshots::Trigger;

/// A process that sent telemetry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    /// `{job}--{host}--rank{N}` (or `--pid{P}`): see
    /// [`SourceLabels::key`](super::agent::SourceLabels::key).
    pub source: String,
    /// The job.
    pub job: String,
    /// The host.
    pub host: String,
    /// Global rank.
    pub rank: Option<i64>,
    /// Rank on the host.
    pub local_rank: Option<i64>,
    /// Number of ranks.
    pub world_size: Option<i64>,
    /// Process id.
    pub pid: i64,
    /// First sample, milliseconds since the Unix epoch.
    pub first_ms: i64,
    /// Latest sample.
    pub last_ms: i64,
    /// An agent serving it is connected now (so "capture now" can reach it).
    #[serde(default)]
    pub connected: bool,
    /// The process's CUDA allocator (`native`, `cudaMallocAsync`), when known.
    #[serde(default)]
    pub backend: Option<String>,
    /// Whether its allocator history is recorded: `false` under a backend
    /// without one (cudaMallocAsync), which streams telemetry but takes no
    /// snapshots.
    #[serde(default)]
    pub history: Option<bool>,
}

/// A connected agent's host and its NVML view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// Host name.
    pub host: String,
    /// The job the agent runs.
    pub job: String,
    /// Its devices.
    pub devices: Vec<NvmlDevice>,
}

/// `GET /api/v1/live`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveList {
    /// The most recently active sources, most recent first (at most a
    /// thousand: `total` says how many there are).
    pub sources: Vec<Source>,
    /// How many sources the server keeps.
    #[serde(default)]
    pub total: u64,
    /// Connected agents' hosts.
    pub hosts: Vec<Host>,
}

/// A snapshot taken of a source: a marker on its charts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    /// Snapshot id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// What made it.
    pub trigger: Trigger,
    /// When it reached the server, ms since the epoch.
    pub uploaded_at_ms: i64,
}

/// `GET /api/v1/live/{source}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveRead {
    /// The source.
    pub source: Source,
    /// Its samples, oldest first.
    pub samples: Vec<Sample>,
    /// Snapshots uploaded with its job, host and rank, oldest first.
    pub snapshots: Vec<Marker>,
    /// NVML's view of the source's host, from a connected agent.
    #[serde(default)]
    pub devices: Vec<NvmlDevice>,
}

/// Query of `GET /api/v1/live/{source}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadParams {
    /// Only samples after this time (ms since the epoch); all by default.
    pub since_ms: Option<i64>,
    /// At most this many samples (the newest), default and ceiling 20000.
    pub limit: Option<i64>,
}

/// Query of `POST /api/v1/live/{source}/capture`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureParams {
    /// Ask every process the agent serves, not only this one.
    #[serde(default)]
    pub all: bool,
}
