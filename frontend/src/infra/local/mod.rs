//! Local mode: a snapshot opened in the browser without uploading it.
//!
//! The file never leaves the machine. A module Web Worker (`worker.js`)
//! loads this same WebAssembly module, reads the file there with the
//! `shared` reader, builds the indexes and keeps them; the page stays
//! responsive meanwhile. The snapshot then opens as the ordinary snapshot
//! page at `/snapshots/local-<n>`: `infra::api`'s one request helper hands
//! every request for a `local-` id to [`respond`], which asks the worker,
//! and the worker answers with `shared::views::route::answer`, the code
//! behind the server's own URLs. Nothing else in the page knows.
//!
//! Two programs use this module, each in a file of its own: the worker's
//! exports (`worker.rs`: `local_open`, `local_answer`, `local_compare`)
//! and the page's side (`page.rs`: [`open`], [`respond`], the worker
//! sessions). What both share is here: local ids and requests, reading a
//! file and answering from it, built natively for its tests. A page
//! reloaded at a `local-` address has lost its worker, and says so.

// Natively only the pure parts are built, for their tests.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use std::io::Read;

use serde_json::json;
use vramscope_shared::error::ViewError;
use vramscope_shared::indexed::IndexedSnapshot;
use vramscope_shared::views::route;
use vramscope_shared::{ReadOptions, Snapshot, read_snapshot, read_snapshot_bytes, read_snapshot_bytes_with};

/// Memory budget for files read in the browser: a tab has a few GB at most.
pub(crate) const BROWSER_MEMORY_BUDGET: u64 = 2 << 30;

/// Ids of local snapshots start with this; the server's are UUIDs.
pub(crate) const LOCAL_PREFIX: &str = "local-";

/// Whether a snapshot id names a file opened in this tab (answered by its
/// worker), not one the server holds.
pub(crate) fn is_local(id: &str) -> bool {
    id.starts_with(LOCAL_PREFIX)
}

/// A request for a local snapshot: its id, the route after the id (empty
/// for the record itself) and the query string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LocalRequest {
    /// `local-<n>`.
    pub(crate) id: String,
    /// `timeline`, `stacks/3`, `stats`, or empty for the record.
    pub(crate) route: String,
    /// Without the `?`.
    pub(crate) query: String,
}

/// The local request behind a URL (absolute or not), if it names a local
/// snapshot; `None` for everything the server answers.
pub(crate) fn local_request(url: &str) -> Option<LocalRequest> {
    // Where the API's snapshot routes begin in a request's URL.
    let (_, rest) = url.split_once(vramscope_shared::api::paths::SNAPSHOT.prefix())?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let path = path.split('#').next().unwrap_or_default();
    let (id, route) = path.split_once('/').unwrap_or((path, ""));
    id.starts_with(LOCAL_PREFIX).then(|| LocalRequest {
        id: id.to_owned(),
        route: route.trim_end_matches('/').to_owned(),
        query: query.split('#').next().unwrap_or_default().to_owned(),
    })
}

/// What the page says at a `local-` address whose file is not open (the
/// page was reloaded, or opened in another tab).
pub(crate) fn not_open_message(id: &str) -> String {
    format!(
        "{id} was a file opened in a browser tab without uploading it. Its contents stay in the tab that opened \
         it and are gone after a reload: open the file again from the library."
    )
}

/// A snapshot read in the worker, with what its record shows.
#[derive(Debug)]
pub(crate) struct Opened {
    /// The snapshot and its indexes.
    pub(crate) analyzed: IndexedSnapshot,
    /// The record, shaped like the server's `GET /api/v1/snapshots/{id}`.
    pub(crate) meta: serde_json::Value,
}

/// Read a file's bytes into an [`Opened`] snapshot, in place, calling
/// `progress` with the bytes read so far now and then. Errors are the
/// reader's (the caller names the file).
pub(crate) fn open_bytes(
    bytes: &[u8],
    id: &str,
    name: &str,
    modified_ms: f64,
    progress: impl FnMut(u64),
) -> Result<Opened, String> {
    let len = bytes.len() as u64;
    let mut steps = Steps { next_report: PROGRESS_STEP, progress };
    let options = ReadOptions::with_budget(BROWSER_MEMORY_BUDGET);
    let snapshot = read_snapshot_bytes_with(bytes, &options, |at| steps.reached(at)).map_err(|e| e.to_string())?;
    // All read: what follows is building the indexes.
    (steps.progress)(len);
    Ok(opened(snapshot, len, id, name, modified_ms, false))
}

/// [`open_bytes`] over a `Read` of `len` bytes: the worker reads the file
/// a slice at a time, so its bytes are never all in memory at once. The
/// timeline's allocation indexes are left for [`Opened::finish_indexes`]:
/// the worker builds them once its first answers are sent, beside the
/// page drawing them (see `IndexedSnapshot::build_deferred`).
pub(crate) fn open_reader(
    input: impl Read,
    len: u64,
    id: &str,
    name: &str,
    modified_ms: f64,
    progress: impl FnMut(u64),
) -> Result<Opened, String> {
    let mut counted = Counted { rest: input, read: 0, steps: Steps { next_report: PROGRESS_STEP, progress } };
    let options = ReadOptions::with_budget(BROWSER_MEMORY_BUDGET);
    let snapshot = read_snapshot(&mut counted, &options).map_err(|e| e.to_string())?;
    // All read: what follows is building the indexes.
    (counted.steps.progress)(len);
    Ok(opened(snapshot, len, id, name, modified_ms, true))
}

/// The snapshot with its indexes (`defer`: all but the timeline's
/// allocation indexes), and its record shaped like the server's.
fn opened(snapshot: Snapshot, len: u64, id: &str, name: &str, modified_ms: f64, defer: bool) -> Opened {
    let meta = json!({
        "id": id,
        "sha256": "",
        "name": name,
        "job": null,
        "host": null,
        "rank": null,
        "tags": [],
        "trigger": trigger_of(&snapshot),
        "size_bytes": len,
        "uploaded_at_ms": modified_ms as i64,
        "status": "ready",
        "error": null,
        "local": true,
    });
    let analyzed = if defer { IndexedSnapshot::build_deferred(snapshot) } else { IndexedSnapshot::build(snapshot) };
    Opened { analyzed, meta }
}

/// `oom` when a trace recorded an out-of-memory event, else `manual`: what
/// an upload would have been tagged with had it said.
fn trigger_of(snapshot: &Snapshot) -> &'static str {
    if snapshot.records_oom() { "oom" } else { "manual" }
}

impl Opened {
    /// Build what [`open_reader`] left (the timeline's allocation indexes);
    /// answers whether there was anything to build. Answers are the same
    /// before and after: until then a window's largest allocations are
    /// found by a scan.
    pub(crate) fn finish_indexes(&self) -> bool {
        if self.analyzed.allocation_indexes_built() {
            return false;
        }
        self.analyzed.build_allocation_indexes();
        true
    }

    /// The JSON the server would answer for `route?query` of this snapshot.
    pub(crate) fn answer(&self, route: &str, query: &str) -> Result<String, ViewError> {
        let name = self.meta["name"].as_str().unwrap_or_default();
        match route {
            "" => Ok(self.meta.to_string()),
            "stats" => Ok(serde_json::to_string(&self.analyzed.snapshot.stats().report(name))
                .map_err(|e| ViewError::BadRequest(e.to_string()))?),
            "file" => Err(ViewError::NotFound(format!("server copy of {name}: it was opened locally, not uploaded"))),
            _ => route::answer(&self.analyzed, route, query),
        }
    }
}

impl Opened {
    /// The comparison of this snapshot with `other` (this one is A when
    /// `self_is_a`, else B) for the query of `GET /api/v1/compare`: the
    /// server's answer, computed here (see `route::compare`).
    pub(crate) fn compare(&self, other: &IndexedSnapshot, self_is_a: bool, query: &str) -> Result<String, ViewError> {
        let (a, b) = if self_is_a { (&self.analyzed, other) } else { (other, &self.analyzed) };
        serde_json::to_string(&route::compare(a, b, query)?).map_err(|e| ViewError::BadRequest(e.to_string()))
    }
}

/// Read the other snapshot of a comparison (an uploaded snapshot's file,
/// or another local file), naming it in the error.
pub(crate) fn read_other(bytes: &[u8], other_id: &str) -> Result<IndexedSnapshot, ViewError> {
    let options = ReadOptions::with_budget(BROWSER_MEMORY_BUDGET);
    let snapshot = read_snapshot_bytes(bytes, &options)
        .map_err(|e| ViewError::BadRequest(format!("reading snapshot {other_id} to compare: {e}")))?;
    Ok(IndexedSnapshot::build(snapshot))
}

/// Bytes between two progress reports.
const PROGRESS_STEP: u64 = 4 << 20;

/// Progress reports, one per [`PROGRESS_STEP`] bytes at most.
struct Steps<F: FnMut(u64)> {
    next_report: u64,
    progress: F,
}

impl<F: FnMut(u64)> Steps<F> {
    fn reached(&mut self, read: u64) {
        if read >= self.next_report {
            (self.progress)(read);
            self.next_report = read + PROGRESS_STEP;
        }
    }
}

/// A `Read` over the file's bytes that reports how far the reader got.
struct Counted<R: Read, F: FnMut(u64)> {
    rest: R,
    read: u64,
    steps: Steps<F>,
}

impl<R: Read, F: FnMut(u64)> Read for Counted<R, F> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.rest.read(buf)?;
        self.read += n as u64;
        self.steps.reached(self.read);
        Ok(n)
    }
}

/// HTTP status the server would answer for a view error.
fn status_of(e: &ViewError) -> u16 {
    match e {
        ViewError::NotFound(_) => 404,
        ViewError::BadRequest(_) => 400,
    }
}

#[cfg(target_arch = "wasm32")]
#[allow(unreachable_pub)]
mod worker;

#[cfg(target_arch = "wasm32")]
pub(crate) use page::{
    OpenProgress, OtherBytes, compare, file_url, holds_other, in_report, open, opened_files, respond,
};

#[cfg(target_arch = "wasm32")]
mod page;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_ids_are_answered_here() {
        let r =
            local_request("http://127.0.0.1:8080/api/v1/snapshots/local-3/timeline?device=0&px=900").expect("local");
        assert_eq!(r, LocalRequest { id: "local-3".into(), route: "timeline".into(), query: "device=0&px=900".into() });
        assert!(is_local("local-3") && !is_local("01a23d5b-9791-7525-b19d-5fb2571ac7ea"));
        let meta = local_request("/api/v1/snapshots/local-12").expect("local");
        assert_eq!((meta.id.as_str(), meta.route.as_str(), meta.query.as_str()), ("local-12", "", ""));
        assert_eq!(local_request("/api/v1/snapshots/local-1/stacks/7").expect("local").route, "stacks/7");
        assert_eq!(local_request("/api/v1/snapshots/0190f1e2-aaaa/timeline?px=3"), None);
        assert_eq!(local_request("/api/v1/snapshots?limit=100"), None);
    }

    #[test]
    fn a_local_file_answers_like_the_server() {
        let bytes = vramscope_shared::testing::corpus_bytes("oom_leak.pickle");
        let mut reports = Vec::new();
        let opened =
            open_bytes(&bytes, "local-1", "oom_leak.pickle", 1.7e12, |read| reports.push(read)).expect("reads");
        assert_eq!(reports, [bytes.len() as u64], "one report, at the end: the file is under 4 MiB");
        let meta: serde_json::Value = serde_json::from_str(&opened.answer("", "").expect("meta")).expect("json");
        assert_eq!(meta["trigger"], "oom");
        assert_eq!(meta["size_bytes"], bytes.len());
        assert_eq!(meta["status"], "ready");
        let stats: serde_json::Value = serde_json::from_str(&opened.answer("stats", "").expect("stats")).expect("json");
        assert_eq!(stats["file"], "oom_leak.pickle");
        let window = opened.answer("timeline", "px=300&axis=event").expect("timeline");
        assert!(window.contains("\"buckets\""), "{}", &window[..window.len().min(200)]);
        assert!(matches!(opened.answer("file", ""), Err(ViewError::NotFound(_))));
        assert_eq!(status_of(&opened.answer("timeline", "px=x").expect_err("bad query")), 400);
        // Compared with another file, either way round, as the server would.
        let other_bytes = vramscope_shared::testing::corpus_bytes("streams.pickle");
        let other = read_other(&other_bytes, "0190-uploaded").expect("the other snapshot");
        let q = "a=local-1&b=0190-uploaded&px=40";
        let server = route::compare(&opened.analyzed, &other, q).expect("diff");
        assert_eq!(opened.compare(&other, true, q).expect("compared"), serde_json::to_string(&server).expect("json"));
        let reversed = route::compare(&other, &opened.analyzed, q).expect("diff");
        assert_eq!(
            opened.compare(&other, false, q).expect("compared"),
            serde_json::to_string(&reversed).expect("json")
        );
        let bad = read_other(b"\x80\x04K*.", "0190-x").expect_err("no snapshot");
        assert!(bad.to_string().contains("0190-x"), "{bad}");
        let err = open_bytes(b"\x80\x04K*.", "local-2", "int.pickle", 0.0, |_| {}).expect_err("no snapshot");
        assert!(err.contains("not a PyTorch memory snapshot"), "{err}");
    }

    /// The worker's file leaves the allocation indexes for later: its
    /// timeline windows are the same to the byte before they are built (a
    /// scan), after, and as a file read whole.
    #[test]
    fn the_deferred_indexes_change_no_answer() {
        let bytes = vramscope_shared::testing::corpus_bytes("oom_leak.pickle");
        let whole = open_bytes(&bytes, "local-1", "oom_leak.pickle", 0.0, |_| {}).expect("reads");
        let read = open_reader(&bytes[..], bytes.len() as u64, "local-1", "oom_leak.pickle", 0.0, |_| {});
        let deferred = read.expect("reads");
        let queries = [
            "px=300&axis=event&max_allocations=2000",
            "px=57&axis=event&start=100&end=900&max_allocations=20",
            "px=900&y_span=1048576&py=300",
        ];
        let answers = |o: &Opened| -> Vec<String> {
            queries.iter().map(|q| o.answer("timeline", q).expect("timeline")).collect()
        };
        let before = answers(&deferred);
        assert!(deferred.finish_indexes(), "left for later");
        assert!(!deferred.finish_indexes(), "built once");
        assert_eq!(before, answers(&whole));
        assert_eq!(answers(&deferred), answers(&whole));
        assert!(!whole.finish_indexes(), "a file read whole is built at once");
    }
}
