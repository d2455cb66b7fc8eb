//! The library: stored snapshots, their pages, uploads and signed links.

use serde::{Deserialize, Serialize};

/// What made a client upload a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trigger {
    /// A person or script asked for it.
    Manual,
    /// The agent saw memory cross a configured threshold.
    Threshold,
    /// The agent caught an out-of-memory error.
    Oom,
}

impl Trigger {
    /// The name stored in the database and used in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Manual => "manual",
            Trigger::Threshold => "threshold",
            Trigger::Oom => "oom",
        }
    }

    /// The trigger named `name`, if it is one.
    pub fn parse(name: &str) -> Option<Trigger> {
        match name {
            "manual" => Some(Trigger::Manual),
            "threshold" => Some(Trigger::Threshold),
            "oom" => Some(Trigger::Oom),
            _ => None,
        }
    }
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a snapshot is in its life: stored, then parsed (or not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SnapshotStatus {
    /// Stored; its summary is being computed.
    Parsing,
    /// Stored and summarised.
    Ready,
    /// Stored, but it could not be read (`error` says why).
    Failed,
}

impl SnapshotStatus {
    /// The name stored in the database and used in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotStatus::Parsing => "parsing",
            SnapshotStatus::Ready => "ready",
            SnapshotStatus::Failed => "failed",
        }
    }

    /// The status named `name`, if it is one.
    pub fn parse(name: &str) -> Option<SnapshotStatus> {
        match name {
            "parsing" => Some(SnapshotStatus::Parsing),
            "ready" => Some(SnapshotStatus::Ready),
            "failed" => Some(SnapshotStatus::Failed),
            _ => None,
        }
    }
}

impl std::fmt::Display for SnapshotStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stored snapshot, as `GET /api/v1/snapshots` lists it and
/// `GET /api/v1/snapshots/{id}` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotMeta {
    /// Public id: a UUID v7, so ids sort roughly by upload time.
    pub id: String,
    /// SHA-256 of the file as uploaded, lowercase hex.
    pub sha256: String,
    /// Display name.
    pub name: String,
    /// Training job the snapshot came from, if known.
    pub job: Option<String>,
    /// Host the snapshot came from, if known.
    pub host: Option<String>,
    /// Distributed rank of the process, if known.
    pub rank: Option<i64>,
    /// Tags, without duplicates, in the order given.
    #[serde(default)]
    pub tags: Vec<String>,
    /// What made the client upload it.
    pub trigger: Trigger,
    /// Size of the file as uploaded.
    pub size_bytes: u64,
    /// Upload time, milliseconds since the Unix epoch.
    pub uploaded_at_ms: i64,
    /// Parsing progress.
    pub status: SnapshotStatus,
    /// Why parsing failed, when it did.
    pub error: Option<String>,
    /// Kept by retention whatever its age (`PATCH … {"pinned": true}`).
    #[serde(default)]
    pub pinned: bool,
    /// While `parsing` on the instance that answers: bytes of the file
    /// read so far (of `size_bytes`). Not stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parsed_bytes: Option<u64>,
}

/// One page of a list, newest first (`GET /api/v1/snapshots`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page<T> {
    /// The items of this page.
    pub items: Vec<T>,
    /// Pass as `cursor` for the next page; `None` on the last one. Opaque.
    pub next_cursor: Option<String>,
}

/// The answer to an upload (`POST /api/v1/snapshots`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadAnswer {
    /// The snapshot's id (an earlier one's when deduplicated).
    pub id: String,
    /// SHA-256 of the file, lowercase hex.
    pub sha256: String,
    /// `ready` (parsed), or `parsing` (a large file, parsed in the background).
    pub status: SnapshotStatus,
    /// The same bytes with the same labels were uploaded before; `id` is
    /// that snapshot.
    #[serde(default)]
    pub deduplicated: bool,
}

/// The answer of `POST /api/v1/snapshots/{id}/links`: the snapshot's file
/// and exports as links that work without a token for a few minutes, for
/// plain download links in token mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedLinks {
    /// The pickle as uploaded.
    pub file: String,
    /// The self-contained HTML report.
    pub report: String,
    /// The memory chart as SVG.
    pub chart_svg: String,
    /// The memory chart as PNG.
    pub chart_png: String,
    /// Until when they work, milliseconds since the Unix epoch.
    pub expires_ms: i64,
}

/// Query of `GET /api/v1/snapshots`: the filters (each exact but `q`) and
/// the page. `C` is the cursor: the server reads it into its own type,
/// clients hand back the `next_cursor` string of the previous [`Page`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListParams<C = String> {
    /// Exact job.
    pub job: Option<String>,
    /// Exact host.
    pub host: Option<String>,
    /// One tag.
    pub tag: Option<String>,
    /// Free text over the name, job, host and tags.
    pub q: Option<String>,
    /// Most items of the page.
    pub limit: Option<u32>,
    /// Where the page starts: the previous page's `next_cursor`.
    pub cursor: Option<C>,
    /// Only pinned (or only unpinned) snapshots.
    pub pinned: Option<bool>,
}

/// Query of `GET /api/v1/snapshots/{id}/stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatsParams {
    /// While the server still parses the file, hold the answer this many
    /// seconds (at most [`STATS_WAIT_MAX_S`]) for the parse to end, instead
    /// of answering 202 at once: a page waiting on a large upload is told
    /// the moment it is ready, without polling.
    pub wait: Option<u32>,
}

/// The longest [`StatsParams::wait`] honoured, in seconds.
pub const STATS_WAIT_MAX_S: u32 = 10;
