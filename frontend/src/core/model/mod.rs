//! The JSON the dashboard reads from the server's API (`/api/v1`), all in
//! this folder, and all of it the shared crate's own types, re-exported: the
//! API's records (`vramscope_shared::api`), timeline windows, statistics and
//! the views' answers. The server serialises the same types, so both sides
//! agree by construction.

pub mod jobs;
pub mod live;
pub mod review;

pub use vramscope_shared::StatsReport;
pub use vramscope_shared::analysis::breakdown::{BreakdownSeries, CATEGORIES, DeviceBreakdown};
pub use vramscope_shared::api::{ErrorBody, SnapshotMeta, SnapshotStatus, Trigger, UploadAnswer};
pub use vramscope_shared::timeline::{Axis, Marker, MarkerKind, TimelineWindow, VisibleAllocation};
pub use vramscope_shared::views::annotations::{AnnotationRange, AnnotationsAnswer};
pub use vramscope_shared::views::entry::EntryAnswer;
pub use vramscope_shared::views::findings::BreakdownAnswer;
pub use vramscope_shared::views::fragmentation::{FragmentationAnswer, SettingsView};
pub use vramscope_shared::views::pools::{BandPoint, PoolBand, PoolsAnswer};
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

/// One page of the snapshot list, newest first.
pub type Page = vramscope_shared::api::Page<SnapshotMeta>;

/// One frame of an allocation's stack, innermost first.
pub type Frame = vramscope_shared::views::FrameJson;

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
        let marks: Vec<review::Comment> = serde_json::from_str(
            r#"[{"id":"7","author":"ana","body":"leak here","created_ms":1,"row":120,"time_us":null,"addr":null},
            {"id":"8","author":"bo","body":"general","created_ms":2,"row":null,"time_us":null,"addr":null}]"#,
        )
        .expect("comments");
        assert_eq!(marks[0].row, Some(120));
        assert_eq!(marks[1].row, None);
    }
}
