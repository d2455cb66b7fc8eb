//! Ingestion against a real server: a file is parsed once, its index is
//! persisted beside it and mapped by every later open, a broken index is
//! rebuilt, and a parse under way reports how far it is.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

use crate::common::server::{TestServer, client};
use crate::common::{fixture_corpus, large_corpus};

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixture_corpus().join(name)).expect("fixture")
}

/// The persisted index files of a server's local store.
fn index_files(data_dir: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(data_dir.join("blobs/indexes")) {
        Ok(entries) => entries.filter_map(Result::ok).map(|e| e.path()).collect(),
        Err(_) => Vec::new(),
    }
}

/// Upload a fixture, wait for it, and read the views a dashboard opens with.
async fn upload_and_view(server: &TestServer, name: &str) -> (String, Vec<Value>) {
    let (status, answer) = server.upload(fixture(name), "name=ingest").await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let id = answer["id"].as_str().expect("id").to_owned();
    assert_eq!(server.settled(&id).await["status"], "ready");
    (id.clone(), views(server, &id).await)
}

async fn views(server: &TestServer, id: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for path in ["timeline?px=500", "timeline?px=300&axis=event", "blocks?at=100", "state?at=200", "segments?px=300"] {
        let (status, answer) = server.get(&format!("/snapshots/{id}/{path}")).await;
        assert_eq!(status, StatusCode::OK, "{path}: {answer}");
        out.push(answer);
    }
    out
}

#[tokio::test]
async fn a_restarted_server_opens_the_persisted_index_without_parsing() {
    let server = TestServer::start("index-restart", &[]);
    let (id, before) = upload_and_view(&server, "oom_leak.pickle").await;
    assert_eq!(server.metric("index_writes_total", None).await, 1);
    assert_eq!(index_files(&server.data_dir).len(), 1, "one index beside the one file");

    let restarted = TestServer::start_in(&server.kill(), &[]);
    assert_eq!(views(&restarted, &id).await, before, "the index answers as the parse did");
    assert_eq!(restarted.metric("parse_seconds_count", None).await, 0, "nothing parsed after the restart");
    assert_eq!(restarted.metric("index_opens_total", None).await, 1);
    // The report export comes from the index too.
    let report = client().get(restarted.api(&format!("/snapshots/{id}/report.html"))).send().await.expect("report");
    assert_eq!(report.status(), StatusCode::OK);
    assert_eq!(restarted.metric("parse_seconds_count", None).await, 0, "the report did not parse the pickle");
}

#[tokio::test]
async fn regression_a_corrupt_or_old_index_is_rebuilt_from_the_pickle_never_trusted() {
    let server = TestServer::start("index-corrupt", &[]);
    let (id, before) = upload_and_view(&server, "ring_overflow.pickle").await;
    let dir = server.kill();
    let [file] = index_files(&dir).try_into().expect("one index file");

    // A flipped byte in the middle of the columns.
    let mut bytes = std::fs::read(&file).expect("index");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&file, &bytes).expect("write");
    let server = TestServer::start_in(&dir, &[]);
    assert_eq!(views(&server, &id).await, before, "rebuilt, not trusted");
    assert_eq!(server.metric("index_rebuilds_total", None).await, 1);
    assert_eq!(server.metric("parse_seconds_count", None).await, 1, "parsed again from the pickle");
    assert_eq!(server.metric("index_writes_total", None).await, 1, "and written again");

    // Another format version (an older server's file) is rebuilt the same way.
    let dir = server.kill();
    let mut bytes = std::fs::read(&file).expect("index");
    bytes[8..12].copy_from_slice(&0u32.to_le_bytes());
    std::fs::write(&file, &bytes).expect("write");
    let server = TestServer::start_in(&dir, &[]);
    assert_eq!(views(&server, &id).await, before);
    assert_eq!(server.metric("index_rebuilds_total", None).await, 1);

    // The rewritten file is good: the next start opens it.
    let server = TestServer::start_in(&server.kill(), &[]);
    assert_eq!(views(&server, &id).await, before);
    assert_eq!(server.metric("index_opens_total", None).await, 1);
    assert_eq!(server.metric("parse_seconds_count", None).await, 0);
}

#[tokio::test]
async fn regression_an_index_copied_over_another_snapshots_is_rebuilt() {
    // Two snapshots, each with its good index; B's index copied over A's
    // (a restore from the wrong backup, a hand-made copy) used to be served
    // for A's /segments and /timeline after a restart.
    let server = TestServer::start("index-other", &[]);
    let (a, before) = upload_and_view(&server, "oom_leak.pickle").await;
    let (b, _) = upload_and_view(&server, "streams.pickle").await;
    let sha_a = server.get(&format!("/snapshots/{a}")).await.1["sha256"].as_str().expect("sha256").to_owned();
    let sha_b = server.get(&format!("/snapshots/{b}")).await.1["sha256"].as_str().expect("sha256").to_owned();
    assert_ne!(sha_a, sha_b);
    let dir = server.kill();
    let indexes = dir.join("blobs/indexes");
    std::fs::copy(indexes.join(&sha_b), indexes.join(&sha_a)).expect("copy B's index over A's");

    let server = TestServer::start_in(&dir, &[]);
    assert_eq!(views(&server, &a).await, before, "A's own answers, not B's");
    assert_eq!(server.metric("index_other_snapshot_total", None).await, 1);
    assert_eq!(server.metric("index_rebuilds_total", None).await, 1);
    assert_eq!(server.metric("parse_seconds_count", None).await, 1, "A parsed again from its pickle");
    assert_eq!(server.metric("index_writes_total", None).await, 1, "and its index written again");
    // The rebuilt index is A's: the next start opens it without parsing.
    let server = TestServer::start_in(&server.kill(), &[]);
    assert_eq!(views(&server, &a).await, before);
    assert_eq!(server.metric("index_opens_total", None).await, 1);
    assert_eq!(server.metric("parse_seconds_count", None).await, 0);
}

#[tokio::test]
async fn deleting_the_last_snapshot_of_a_file_deletes_its_index() {
    let server = TestServer::start("index-delete", &[]);
    let (id, _) = upload_and_view(&server, "streams.pickle").await;
    assert_eq!(index_files(&server.data_dir).len(), 1);
    let deleted = client().delete(server.api(&format!("/snapshots/{id}"))).send().await.expect("delete");
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    assert_eq!(index_files(&server.data_dir), Vec::<PathBuf>::new(), "no derived data left behind");
}

#[tokio::test]
async fn a_parse_under_way_reports_the_bytes_read() {
    // Parsed in the background (never inline) by a debug build: seconds.
    let server = TestServer::start("index-progress", &[("VRAMSCOPE_INLINE_PARSE_MAX_BYTES", "0")]);
    let bytes = std::fs::read(large_corpus().join("gpt_long.pickle")).expect("gpt_long");
    let size = bytes.len() as u64;
    let (status, answer) = server.upload(bytes, "name=progress").await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let id = answer["id"].as_str().expect("id").to_owned();
    let mut seen = Vec::new();
    loop {
        let (_, rec) = server.get(&format!("/snapshots/{id}")).await;
        if rec["status"] != "parsing" {
            assert_eq!(rec["status"], "ready", "{rec}");
            assert!(rec.get("parsed_bytes").is_none(), "no progress once ready: {rec}");
            break;
        }
        if let Some(read) = rec["parsed_bytes"].as_u64() {
            seen.push(read);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!seen.is_empty(), "the parse of a 22 MB file was never seen under way");
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "progress goes forward: {seen:?}");
    assert!(seen.iter().all(|&read| read <= size), "{seen:?} of {size}");
    // The library lists it the same way.
    let (_, page) = server.get("/snapshots").await;
    assert_eq!(page["items"][0]["status"], "ready");
}

#[tokio::test]
async fn regression_an_index_whose_file_is_gone_is_swept_at_start_up() {
    // An index upload that finished after its file was deleted (S3) left an
    // index no file names; the start-up sweep only listed snapshot files.
    let server = TestServer::start("index-orphan", &[]);
    let (id, before) = upload_and_view(&server, "streams.pickle").await;
    let dir = server.kill();
    let [kept] = index_files(&dir).try_into().expect("one index file");
    let folder = kept.parent().expect("indexes/").to_path_buf();
    let (old_orphan, new_orphan) = (folder.join("a".repeat(64)), folder.join("b".repeat(64)));
    std::fs::write(&old_orphan, b"left behind").expect("write");
    std::fs::write(&new_orphan, b"maybe being written").expect("write");
    let two_hours_ago = std::time::SystemTime::now() - Duration::from_secs(7200);
    for file in [&old_orphan, &kept] {
        let f = std::fs::File::options().append(true).open(file).expect("open");
        f.set_modified(two_hours_ago).expect("mtime");
    }
    let server = TestServer::start_in(&dir, &[]);
    // The sweep runs before the server listens.
    assert!(!old_orphan.exists(), "an old index with no file is removed");
    assert!(new_orphan.exists(), "a recent one is left alone (its file may be on its way)");
    assert!(kept.exists(), "an index whose file exists stays, however old");
    assert_eq!(views(&server, &id).await, before);
    assert_eq!(server.metric("parse_seconds_count", None).await, 0);
}

/// Regression: a snapshot above the report's inline limit (256 MiB by
/// default) had no report at all ("download the file and run vramscope
/// report"). Its report is now made from the index alone (the findings and
/// the main chart): the file is not read, so it may even be gone.
#[tokio::test]
async fn regression_a_report_too_large_to_inline_is_made_from_the_index_without_reading_the_file() {
    let server = TestServer::start("report-from-index", &[("VRAMSCOPE_REPORT_INLINE_MAX_BYTES", "1024")]);
    let (status, answer) = server.upload(fixture("oom_leak.pickle"), "name=big.pickle").await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let id = answer["id"].as_str().expect("id").to_owned();
    assert_eq!(server.settled(&id).await["status"], "ready");
    // The file itself goes; only the index is left to make the report from.
    let sha = answer["sha256"].as_str().expect("sha256");
    let file = server.data_dir.join("blobs/snapshots").join(sha);
    std::fs::remove_file(&file).unwrap_or_else(|e| panic!("remove {}: {e}", file.display()));
    let response = reqwest::get(server.api(&format!("/snapshots/{id}/report.html"))).await.expect("GET");
    assert_eq!(response.status(), StatusCode::OK);
    let page = response.text().await.expect("page");
    assert!(page.contains("id=\"report-index-only\"") && page.contains("<svg"), "{}", &page[..page.len().min(400)]);
    assert!(page.contains("Post-mortem of big.pickle") && page.contains("OOM"), "the findings are in the page");
    assert!(!page.contains("vramscope-wasm") && !page.contains("<script"), "no dashboard, no file inlined");
    assert_eq!(server.metric("parse_seconds_count", None).await, 1, "parsed once, at upload");
}

/// A snapshot of more than a million rows is served before its allocation
/// index is built (windows asked meanwhile scan the intervals for their
/// largest allocations: here the first, in the debug build) and its index
/// file is written behind: its windows answer the same right after it is
/// ready, once the file is written, and from that file after a restart.
/// The file: [`crate::common::million_row_snapshot`].
#[tokio::test]
async fn a_snapshot_of_a_million_rows_answers_the_same_before_and_after_its_index_is_built() {
    let file = crate::common::million_row_snapshot();
    let server = TestServer::start("index-deferred", &[]);
    let id = server.upload_file(&file).await;
    loop {
        let (status, answer) = server.get(&format!("/snapshots/{id}/stats?wait=10")).await;
        match status {
            StatusCode::OK => break,
            StatusCode::ACCEPTED => {}
            other => panic!("{other}: {answer}"),
        }
    }
    let first = large_windows(&server, &id).await;
    assert!(first[0]["allocations"].as_array().is_some_and(|a| a.len() > 100), "allocations shown");
    assert_eq!(first[3]["more_allocations"], true, "five of more shown");
    for _ in 0..600 {
        if !index_files(&server.data_dir).is_empty() && server.metric("index_writes_total", None).await == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(server.metric("index_writes_total", None).await, 1, "the index file written behind");
    assert_eq!(large_windows(&server, &id).await, first, "the windows, once the index is built and written");
    let restarted = TestServer::start_in(&server.kill(), &[]);
    assert_eq!(large_windows(&restarted, &id).await, first, "the windows from the index file");
    assert_eq!(restarted.metric("parse_seconds_count", None).await, 0, "nothing parsed after the restart");
}

/// The windows of a large snapshot that [`a_snapshot_of_a_million_rows_answers_the_same_before_and_after_its_index_is_built`] compares.
async fn large_windows(server: &TestServer, id: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for path in [
        "timeline?px=2000",
        "timeline?px=2000&axis=event",
        "timeline?px=700&axis=event&start=400000&end=400900",
        "timeline?px=300&axis=event&start=1000&end=900000&max_allocations=5",
        "timeline?px=50&axis=event&start=-10&end=20",
    ] {
        let (status, answer) = server.get(&format!("/snapshots/{id}/{path}")).await;
        assert_eq!(status, StatusCode::OK, "{path}: {answer}");
        out.push(answer);
    }
    out
}

/// Issue 44, item 31: a graceful stop within seconds of a large upload
/// dropped the index being built and written behind its answer, and the
/// next start parsed the file again. The stop now waits for it
/// (`shutdown_index_wait_secs`, saying so in the log): after SIGTERM right
/// after the upload, the index file is there and the restarted server
/// opens the snapshot without parsing. The file:
/// [`crate::common::million_row_snapshot`].
#[tokio::test]
async fn regression_a_graceful_stop_right_after_a_large_upload_keeps_its_index() {
    let file = crate::common::million_row_snapshot();
    let server = TestServer::start("index-sigterm", &[]);
    let id = server.upload_file(&file).await;
    let stopped = std::process::Command::new("kill").args(["-TERM", &server.pid().to_string()]).status();
    assert!(stopped.expect("kill").success());
    let dir = server.wait_for_exit(Duration::from_secs(300));
    assert_eq!(index_files(&dir).len(), 1, "the index file written before the server stopped");
    let restarted = TestServer::start_in(&dir, &[]);
    let (status, answer) = restarted.get(&format!("/snapshots/{id}/timeline?px=300")).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(restarted.metric("index_opens_total", None).await, 1, "opened from its index");
    assert_eq!(restarted.metric("parse_seconds_count", None).await, 0, "nothing parsed after the restart");
}
