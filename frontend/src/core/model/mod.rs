//! The JSON the dashboard reads from the server's API (`/api/v1`), all in
//! this folder. Timeline windows, statistics and the views' answers are the
//! shared crate's own types, re-exported here, so both sides agree by
//! construction; the records below and in the submodules ([`live`],
//! [`review`], [`jobs`]) mirror the server's answers field by field (the
//! server keeps its types private to its crate), and are what a shared API
//! crate would replace.

use serde::Deserialize;

pub mod jobs;
pub mod live;
pub mod review;

pub use vramscope_shared::StatsReport;
pub use vramscope_shared::timeline::{Axis, Marker, MarkerKind, TimelineWindow, VisibleAllocation};
pub use vramscope_shared::views::annotations::{AnnotationRange, AnnotationsAnswer};
pub use vramscope_shared::views::entry::EntryAnswer;
pub use vramscope_shared::views::fragmentation::{FragmentationAnswer, SettingsView};
pub use vramscope_shared::views::search::{SearchAnswer, SearchKind, SearchMatch};
pub use vramscope_shared::views::segments::SegmentsAnswer;
pub use vramscope_shared::views::state::{AllocatorState, BlockKind, Figures};

/// The instant the allocator-state panel is asked for: a trace row, or an
/// x of an axis (a click on a timeline), which the server resolves to the
/// last row at or before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Instant {
    /// Right after this row.
    Row(u32),
    /// At this x of this axis.
    X(Axis, i64),
}

/// A review comment, as far as the timeline's markers need it
/// (`GET /api/v1/snapshots/{id}/comments`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct CommentMark {
    /// Comment id.
    pub id: serde_json::Value,
    /// Who wrote it.
    #[serde(default)]
    pub author: String,
    /// The text.
    #[serde(default)]
    pub body: String,
    /// The trace row it is about, if any.
    #[serde(default)]
    pub row: Option<u32>,
    /// The time it is about, if any.
    #[serde(default)]
    pub time_us: Option<i64>,
    /// The address it is about, if any.
    #[serde(default)]
    pub addr: Option<u64>,
}

/// A stored snapshot, as `GET /api/v1/snapshots` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct SnapshotMeta {
    /// Public id (a UUID v7).
    pub id: String,
    /// SHA-256 of the file, lowercase hex.
    pub sha256: String,
    /// Display name.
    pub name: String,
    /// Training job, if known.
    #[serde(default)]
    pub job: Option<String>,
    /// Host, if known.
    #[serde(default)]
    pub host: Option<String>,
    /// Distributed rank, if known.
    #[serde(default)]
    pub rank: Option<i64>,
    /// Tags, in the order given.
    #[serde(default)]
    pub tags: Vec<String>,
    /// `manual`, `threshold` or `oom`.
    pub trigger: String,
    /// Size of the file as uploaded.
    pub size_bytes: u64,
    /// Upload time, milliseconds since the Unix epoch.
    pub uploaded_at_ms: i64,
    /// `parsing`, `ready` or `failed`.
    pub status: String,
    /// Why parsing failed.
    #[serde(default)]
    pub error: Option<String>,
    /// While parsing: bytes of the file read so far.
    #[serde(default)]
    pub parsed_bytes: Option<u64>,
}

/// One page of the snapshot list, newest first.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Page {
    /// The snapshots.
    pub items: Vec<SnapshotMeta>,
    /// Pass as `cursor` for the next page; `None` on the last one.
    #[serde(default)]
    pub next_cursor: Option<String>,
}

/// The answer to an upload.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct UploadAnswer {
    /// The snapshot's id (an earlier one's when deduplicated).
    pub id: String,
    /// `ready`, or `parsing` for a large file.
    pub status: String,
    /// The same bytes were uploaded before.
    #[serde(default)]
    pub deduplicated: bool,
}

/// One frame of an allocation's stack, innermost first.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Frame {
    /// Source file.
    pub filename: String,
    /// Line number.
    pub line: i64,
    /// Function name.
    pub name: String,
}

/// The body of an API error: `{"error": "...", "kind": "..."}`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct ErrorBody {
    /// What went wrong, for people.
    pub error: String,
    /// A stable name for programs.
    #[serde(default)]
    pub kind: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_servers_answers() {
        let page: Page = serde_json::from_str(
            r#"{"items":[{"id":"0190","sha256":"ab","name":"oom_leak.pickle","job":null,"host":"h1","rank":3,
            "tags":["a","b"],"trigger":"oom","size_bytes":1234,"uploaded_at_ms":1700000000000,"status":"ready",
            "error":null}],"next_cursor":"1700000000000_0190"}"#,
        )
        .expect("page");
        assert_eq!(page.items[0].tags, ["a", "b"]);
        assert_eq!(page.items[0].rank, Some(3));
        assert_eq!(page.next_cursor.as_deref(), Some("1700000000000_0190"));
        let frames: Vec<Frame> =
            serde_json::from_str(r#"[{"filename":"train.py","line":12,"name":"step"}]"#).expect("frames");
        assert_eq!(frames[0].line, 12);
        let err: ErrorBody =
            serde_json::from_str(r#"{"error":"not found: snapshot x","kind":"not_found"}"#).expect("error");
        assert_eq!(err.kind, "not_found");
        let up: UploadAnswer =
            serde_json::from_str(r#"{"id":"x","sha256":"y","status":"ready","deduplicated":true}"#).expect("upload");
        assert!(up.deduplicated);
        let marks: Vec<CommentMark> = serde_json::from_str(
            r#"[{"id":7,"author":"ana","body":"leak here","created_ms":1,"row":120,"time_us":null,"addr":null},
            {"id":"8","author":"bo","body":"general","created_ms":2,"row":null,"time_us":null,"addr":null}]"#,
        )
        .expect("comments");
        assert_eq!(marks[0].row, Some(120));
        assert_eq!(marks[1].row, None);
    }
}
