//! The JSON of the live pages (`/api/v1/live`, `/api/v1/live/{source}`):
//! the telemetry a capture agent streams ([`Sample`], the agent protocol's
//! own shape) and what the server knows of each process and host.

use serde::Deserialize;

/// One telemetry point, as `GET /api/v1/live/{source}` sends it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Sample {
    /// Milliseconds since the Unix epoch.
    pub t_ms: i64,
    /// CUDA device index.
    pub device: i64,
    /// Allocated through PyTorch.
    pub allocated: Option<i64>,
    /// Reserved by PyTorch's allocator.
    pub reserved: Option<i64>,
    /// What the process may use.
    pub capacity: Option<i64>,
    /// The device's total memory.
    pub device_total: Option<i64>,
    /// NVML: used by this process (context, NCCL and allocator).
    pub nvml_process_used: Option<i64>,
    /// NVML: used on the device by everyone.
    pub nvml_used: Option<i64>,
}

impl Sample {
    /// Share of reserved memory not allocated, in percent.
    pub fn fragmentation_pct(&self) -> Option<f64> {
        match (self.allocated, self.reserved) {
            (Some(a), Some(r)) if r > 0 => Some(100.0 * (r - a).max(0) as f64 / r as f64),
            _ => None,
        }
    }
}

/// A snapshot of the source: a marker on the charts.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Marker {
    /// Snapshot id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// `manual`, `threshold` or `oom`.
    pub trigger: String,
    /// When it reached the server.
    pub uploaded_at_ms: i64,
}

/// A process that streamed telemetry.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Source {
    /// Its key (`{job}--{host}--rank{N}`).
    pub source: String,
    /// Job.
    pub job: String,
    /// Host.
    pub host: String,
    /// Global rank.
    pub rank: Option<i64>,
    /// Rank on the host.
    pub local_rank: Option<i64>,
    /// Ranks in the job.
    pub world_size: Option<i64>,
    /// Process id.
    pub pid: i64,
    /// First sample.
    pub first_ms: i64,
    /// Latest sample.
    pub last_ms: i64,
    /// An agent serving it is connected.
    pub connected: bool,
}

/// One process on a device, as NVML sees it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct NvmlProcess {
    /// Process id.
    pub pid: u32,
    /// Bytes used.
    pub used: Option<i64>,
}

/// One device of a host, as NVML sees it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct NvmlDevice {
    /// NVML index.
    pub index: u32,
    /// Product name.
    pub name: String,
    /// Total memory.
    pub total: i64,
    /// Used.
    pub used: i64,
    /// Compute processes.
    pub processes: Vec<NvmlProcess>,
}

/// A connected agent's host.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Host {
    /// Host name.
    pub host: String,
    /// Job the agent runs.
    pub job: String,
    /// Its devices.
    pub devices: Vec<NvmlDevice>,
}

/// `GET /api/v1/live`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct LiveList {
    /// Every source, most recent first.
    pub sources: Vec<Source>,
    /// Connected agents' hosts.
    pub hosts: Vec<Host>,
}

/// `GET /api/v1/live/{source}`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct LiveRead {
    /// The source.
    pub source: Source,
    /// Samples after `since_ms`, oldest first.
    pub samples: Vec<Sample>,
    /// Its snapshots.
    pub snapshots: Vec<Marker>,
    /// NVML's view of its host.
    pub devices: Vec<NvmlDevice>,
}
