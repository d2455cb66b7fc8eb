//! The messages of the capture path, in both of its hops.
//!
//! Job ⇄ agent: JSON lines over a Unix socket ([`JobMessage`] up,
//! [`JobCommand`] down), written by `assets/capture/vramscope_capture`.
//! Agent ⇄ server: JSON text frames over a WebSocket ([`AgentMessage`] up,
//! [`ServerMessage`] down). The agent, the server's `/agent` endpoint and
//! the dashboard's live page (which reads [`Sample`]s back from
//! `GET /api/v1/live/{source}`) all use these types.

use serde::{Deserialize, Serialize};

/// Who a process of the job is: the labels its snapshots and telemetry carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceLabels {
    /// The job's name (the agent's `--job`).
    pub job: String,
    /// Host name.
    pub host: String,
    /// Global rank (torchrun's `RANK`), when distributed.
    pub rank: Option<i64>,
    /// Rank on this host (`LOCAL_RANK`).
    pub local_rank: Option<i64>,
    /// Number of ranks (`WORLD_SIZE`).
    pub world_size: Option<i64>,
    /// Process id on the host.
    pub pid: u32,
    /// The process's CUDA allocator (`native`, `cudaMallocAsync`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// Whether its allocator history is recorded (never under
    /// `cudaMallocAsync`): without it the source streams telemetry only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<bool>,
}

impl SourceLabels {
    /// The stable name of this stream on the server:
    /// `{job}--{host}--rank{N}` (or `--pid{P}` without a rank), made of URL-safe
    /// characters only so it can sit in a path segment.
    pub fn key(&self) -> String {
        let who = match self.rank {
            Some(rank) => format!("rank{rank}"),
            None => format!("pid{}", self.pid),
        };
        format!("{}--{}--{who}", url_safe(&self.job), url_safe(&self.host))
    }
}

/// `text` with every character outside `[A-Za-z0-9._-]` replaced by `_`.
pub fn url_safe(text: &str) -> String {
    let cleaned: String =
        text.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' }).collect();
    if cleaned.is_empty() { "_".to_owned() } else { cleaned }
}

/// One telemetry point of one process on one device.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// [`SourceLabels::key`] of the process.
    pub source: String,
    /// When it was taken, milliseconds since the Unix epoch.
    pub t_ms: i64,
    /// CUDA device index, as the process sees it.
    pub device: i64,
    /// Bytes allocated through PyTorch's allocator.
    pub allocated: Option<i64>,
    /// Bytes the allocator holds from CUDA.
    pub reserved: Option<i64>,
    /// Bytes of active blocks (allocated, or freed but still in use by a stream).
    pub active: Option<i64>,
    /// The device's memory (`cudaMemGetInfo` total).
    pub device_total: Option<i64>,
    /// The device's free memory (`cudaMemGetInfo` free).
    pub device_free: Option<i64>,
    /// What the process may use: total times its memory fraction.
    pub capacity: Option<i64>,
    /// NVML: memory used on the device by every process.
    pub nvml_used: Option<i64>,
    /// NVML: memory used by this process (allocator, CUDA context, NCCL, ...).
    pub nvml_process_used: Option<i64>,
}

impl Sample {
    /// Share of reserved memory not allocated, in percent.
    pub fn fragmentation_pct(&self) -> Option<f64> {
        match (self.allocated, self.reserved) {
            (Some(a), Some(r)) if r > 0 => Some(100.0 * (r - a).max(0) as f64 / r as f64),
            _ => None,
        }
    }

    /// Memory of the process outside PyTorch's caching allocator: what NVML
    /// says the process uses minus what the allocator reserved (the CUDA
    /// context, NCCL buffers, cuBLAS workspaces, other libraries).
    pub fn outside_allocator(&self) -> Option<i64> {
        Some((self.nvml_process_used? - self.reserved?).max(0))
    }
}

/// A line from the job to the agent.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum JobMessage {
    /// First line of a connection: who the process is.
    Hello {
        /// Host name.
        host: String,
        /// Process id.
        pid: u32,
        /// `RANK`.
        rank: Option<i64>,
        /// `LOCAL_RANK`.
        local_rank: Option<i64>,
        /// `WORLD_SIZE`.
        world_size: Option<i64>,
        /// The CUDA allocator (`native`, `cudaMallocAsync`).
        #[serde(default)]
        backend: Option<String>,
        /// Whether the allocator history is recorded.
        #[serde(default)]
        history: Option<bool>,
    },
    /// One device's allocator figures.
    Sample(JobSample),
    /// A snapshot and its manifest entry are in the spool.
    Snapshot {
        /// The manifest entry's file name in the spool folder.
        manifest: String,
        /// What caused it.
        trigger: String,
    },
    /// Reserved memory crossed the threshold here: ask the other ranks too.
    Threshold {
        /// Why, in words.
        reason: String,
    },
    /// An allocation failed (the snapshot follows as a `snapshot` line).
    Oom {
        /// Device index.
        device: Option<i64>,
        /// Bytes requested.
        requested: Option<i64>,
    },
    /// Anything newer than this agent knows; ignored.
    #[serde(other)]
    Unknown,
}

/// The allocator figures of a `sample` line.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct JobSample {
    /// Milliseconds since the Unix epoch.
    pub t_ms: i64,
    /// Device index.
    pub device: i64,
    /// `allocated_bytes.all.current`.
    pub allocated: Option<i64>,
    /// `reserved_bytes.all.current`.
    pub reserved: Option<i64>,
    /// `active_bytes.all.current`.
    pub active: Option<i64>,
    /// `mem_get_info` free.
    pub free: Option<i64>,
    /// `mem_get_info` total.
    pub total: Option<i64>,
    /// Total times the per-process memory fraction.
    pub capacity: Option<i64>,
}

/// A line from the agent to the job.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum JobCommand {
    /// Take a snapshot now.
    Capture {
        /// `manual` or `threshold`.
        trigger: String,
        /// Why, in words.
        reason: String,
        /// Tags for the upload.
        tags: Vec<String>,
    },
}

/// One process's memory on a device, as NVML sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NvmlProcess {
    /// Process id.
    pub pid: u32,
    /// Bytes used, when the driver says.
    pub used: Option<i64>,
}

/// One device as NVML sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NvmlDevice {
    /// NVML index.
    pub index: u32,
    /// Product name.
    pub name: String,
    /// Total memory.
    pub total: i64,
    /// Used by all processes and the driver.
    pub used: i64,
    /// Free.
    pub free: i64,
    /// Compute processes and their memory.
    pub processes: Vec<NvmlProcess>,
}

/// A frame from the agent to the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentMessage {
    /// First frame: which agent this is.
    Hello {
        /// Host name of the agent.
        host: String,
        /// The job's name.
        job: String,
    },
    /// A batch of samples; the server answers `ack` with the same `seq` once
    /// they are stored, and the agent forgets them only then.
    Samples {
        /// Increasing per connection.
        seq: u64,
        /// Labels of every source named by a sample of the batch.
        sources: Vec<SourceLabels>,
        /// The samples.
        samples: Vec<Sample>,
    },
    /// The processes connected to the agent now (they can be asked to capture).
    Ranks {
        /// Their labels.
        sources: Vec<SourceLabels>,
    },
    /// The host's devices as NVML sees them now.
    Nvml {
        /// One entry per device.
        devices: Vec<NvmlDevice>,
    },
}

/// A frame from the server to the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMessage {
    /// The batch `seq` is stored.
    Ack {
        /// The batch's number.
        seq: u64,
    },
    /// Take a snapshot: of the process `source`, or of every process when `None`.
    Capture {
        /// A [`SourceLabels::key`], or none for all.
        source: Option<String>,
        /// Why, in words.
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_url_safe_and_name_the_rank_or_pid() {
        let mut labels = SourceLabels {
            job: "my job/1".to_owned(),
            host: "gpu-3.local".to_owned(),
            rank: Some(2),
            local_rank: Some(0),
            world_size: Some(4),
            pid: 77,
            backend: None,
            history: None,
        };
        assert_eq!(labels.key(), "my_job_1--gpu-3.local--rank2");
        labels.rank = None;
        assert_eq!(labels.key(), "my_job_1--gpu-3.local--pid77");
    }

    #[test]
    fn job_lines_parse_and_unknown_types_are_tolerated() {
        let line = r#"{"type":"sample","t_ms":5,"device":0,"allocated":1,"reserved":2,"pid":9,"ooms":0}"#;
        let JobMessage::Sample(sample) = serde_json::from_str(line).expect("sample") else { panic!("not a sample") };
        assert_eq!((sample.t_ms, sample.reserved, sample.total), (5, Some(2), None));
        let unknown: JobMessage = serde_json::from_str(r#"{"type":"from_the_future","x":1}"#).expect("unknown");
        assert_eq!(unknown, JobMessage::Unknown);
        let hello = r#"{"type":"hello","host":"h","pid":3,"rank":null,"local_rank":null,"world_size":null,"job":null}"#;
        assert!(matches!(serde_json::from_str(hello).expect("hello"), JobMessage::Hello { pid: 3, .. }));
    }

    #[test]
    fn server_frames_round_trip() {
        let frame = ServerMessage::Capture { source: None, reason: "asked".to_owned() };
        let text = serde_json::to_string(&frame).expect("encode");
        assert_eq!(serde_json::from_str::<ServerMessage>(&text).expect("decode"), frame);
    }
}
