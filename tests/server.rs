//! `vramscope serve` run as a real process on a loopback port, driven over
//! HTTP: uploads, storage, the API, authentication, crashes, team mode.
//!
//! Team-mode tests need PostgreSQL and an S3 endpoint; `./scripts/test`
//! starts both (scripts/services) and exports their addresses.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::server::{TestServer, client, create_token, unique_dir};
use reqwest::StatusCode;
use serde_json::Value;

async fn get_json(url: &str) -> (StatusCode, Value) {
    let response = client().get(url).send().await.expect("get");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn corpus_file(name: &str) -> Vec<u8> {
    std::fs::read(crate::common::fixture_corpus().join(name)).expect("fixture")
}

/// Snapshot files under the blob folder (not the database, nor the
/// persisted indexes derived from them: tests/ingest counts those).
fn stored_files(data_dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = entry.path();
            if p.file_name().is_some_and(|n| n == "indexes") {
                continue;
            }
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&data_dir.join("blobs"), &mut out);
    out
}

#[tokio::test]
async fn upload_then_read_back_stats_file_and_timeline() {
    let server = TestServer::start("basic", &[]);
    let bytes = corpus_file("oom_leak.pickle");
    let (status, answer) = server
        .upload(bytes.clone(), "name=oom_leak.pickle&job=train&host=gpu7&rank=3&tags=leak,nightly&trigger=oom")
        .await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let id = answer["id"].as_str().expect("id").to_owned();
    assert_eq!(answer["status"], "ready");

    // The same JSON as `vramscope stats --json`.
    let (status, stats) = get_json(&server.api(&format!("/snapshots/{id}/stats"))).await;
    assert_eq!(status, StatusCode::OK);
    let cli = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["stats", "--json"])
        .arg(crate::common::fixture_corpus().join("oom_leak.pickle"))
        .output()
        .expect("cli");
    let cli: Value = serde_json::from_slice(&cli.stdout).expect("cli json");
    assert_eq!(stats["devices"], cli["devices"]);
    assert_eq!(stats["file"], "oom_leak.pickle");

    // Metadata.
    let (_, rec) = get_json(&server.api(&format!("/snapshots/{id}"))).await;
    assert_eq!(
        (rec["job"].as_str(), rec["host"].as_str(), rec["rank"].as_i64()),
        (Some("train"), Some("gpu7"), Some(3))
    );
    assert_eq!(rec["tags"], serde_json::json!(["leak", "nightly"]));
    assert_eq!(rec["trigger"], "oom");

    // The original bytes, whole and by range.
    let whole = client().get(server.api(&format!("/snapshots/{id}/file"))).send().await.expect("file");
    assert_eq!(whole.status(), StatusCode::OK);
    assert_eq!(whole.bytes().await.expect("bytes").as_ref(), bytes.as_slice());
    let part = client()
        .get(server.api(&format!("/snapshots/{id}/file")))
        .header("range", "bytes=100-199")
        .send()
        .await
        .expect("range");
    assert_eq!(part.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(part.headers()["content-range"], format!("bytes 100-199/{}", bytes.len()).as_str());
    assert_eq!(part.bytes().await.expect("bytes").as_ref(), &bytes[100..200]);

    // Timeline: bounded by px, whatever the trace.
    let (status, window) = get_json(&server.api(&format!("/snapshots/{id}/timeline?px=200&axis=event"))).await;
    assert_eq!(status, StatusCode::OK, "{window}");
    assert!(window["buckets"].as_array().expect("buckets").len() <= 200);
    assert!(window["markers"].as_array().expect("markers").iter().any(|m| m["kind"] == "oom"));
    let top = &window["allocations"][0];
    let (status, frames) = get_json(&server.api(&format!("/snapshots/{id}/stacks/{}", top["stack"]))).await;
    assert_eq!(status, StatusCode::OK);
    assert!(frames.as_array().is_some());

    // Allocator state at a row.
    let (status, state) = get_json(&server.api(&format!("/snapshots/{id}/blocks?at=100"))).await;
    assert_eq!(status, StatusCode::OK, "{state}");
    assert!(!state["segments"].as_array().expect("segments").is_empty());

    // Health and metrics.
    let (status, _) = get_json(&format!("{}/healthz", server.url)).await;
    assert_eq!(status, StatusCode::OK);
    let metrics =
        client().get(format!("{}/metrics", server.url)).send().await.expect("metrics").text().await.expect("text");
    assert!(metrics.contains("vramscope_uploads_total{outcome=\"ok\"} 1"), "{metrics}");
}

#[tokio::test]
async fn twenty_concurrent_uploads_read_back_identical() {
    let server = TestServer::start("concurrent", &[]);
    let names = [
        "compiled.pickle",
        "mlp_train_all.pickle",
        "oom_leak.pickle",
        "ring_overflow.pickle",
        "state_only.pickle",
        "streams.pickle",
    ];
    let mut tasks = Vec::new();
    for i in 0..20 {
        let name = names[i % names.len()];
        // Make every upload distinct (gzip of the file with a different mtime
        // byte), so that dedup does not merge them; the reader sees through gzip.
        let mut bytes = crate::common::gzip(&corpus_file(name));
        bytes[4] = i as u8;
        let url = server.api(&format!("/snapshots?name={name}-{i}"));
        tasks.push(tokio::spawn(async move {
            let response = client().post(url).body(bytes.clone()).send().await.expect("upload");
            let status = response.status();
            let answer: Value = response.json().await.expect("json");
            (status, answer, bytes)
        }));
    }
    for task in tasks {
        let (status, answer, bytes) = task.await.expect("task");
        assert_eq!(status, StatusCode::CREATED, "{answer}");
        let id = answer["id"].as_str().expect("id");
        let back = client().get(server.api(&format!("/snapshots/{id}/file"))).send().await.expect("get");
        assert_eq!(back.bytes().await.expect("bytes").as_ref(), bytes.as_slice());
    }
    let (_, page) = get_json(&server.api("/snapshots?limit=100")).await;
    assert_eq!(page["items"].as_array().expect("items").len(), 20);
}

#[tokio::test]
async fn identical_uploads_are_stored_once() {
    let server = TestServer::start("dedup", &[]);
    let bytes = corpus_file("streams.pickle");
    let (first, a) = server.upload(bytes.clone(), "name=a&job=j&rank=0").await;
    // Sent again (a retry): the same snapshot.
    let (second, again) = server.upload(bytes.clone(), "name=a&job=j&rank=0").await;
    assert_eq!((first, second), (StatusCode::CREATED, StatusCode::OK));
    assert_eq!(a["id"], again["id"]);
    assert_eq!(again["deduplicated"], true);
    // Regression: the same bytes from another rank kept only the first
    // upload's labels. Now they get a row of their own, sharing the file.
    let (third, b) = server.upload(bytes, "name=b&job=j&rank=1").await;
    assert_eq!(third, StatusCode::CREATED, "{b}");
    assert_ne!(a["id"], b["id"]);
    assert_eq!((b["deduplicated"].clone(), b["status"].clone()), (Value::from(true), Value::from("ready")));
    let (_, rec) = get_json(&server.api(&format!("/snapshots/{}", b["id"].as_str().expect("id")))).await;
    assert_eq!((rec["name"].as_str(), rec["rank"].as_i64()), (Some("b"), Some(1)), "{rec}");
    let (status, stats) = get_json(&server.api(&format!("/snapshots/{}/stats", b["id"].as_str().expect("id")))).await;
    assert_eq!((status, stats["devices"][0]["trace_entries"].as_u64()), (StatusCode::OK, Some(1727)));
    assert_eq!(stored_files(&server.data_dir).len(), 1, "one file for the three uploads");
}

#[tokio::test]
async fn bad_uploads_are_rejected_and_nothing_is_stored() {
    let server = TestServer::start("hostile", &[]);
    let dir = crate::common::synthetic_dir();
    for (file, kind) in [
        ("truncated_half.pickle", "truncated"),
        ("global_reduce.pickle", "forbidden_opcode"),
        ("not_a_snapshot_int.pickle", "not_a_snapshot"),
        ("huge_length.pickle", "memory_budget"),
        ("gzip_garbage.pickle.gz", "bad_compression"),
    ] {
        let bytes = std::fs::read(dir.join(file)).expect("synthetic file");
        let (status, answer) = server.upload(bytes, &format!("name={file}")).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{file}: {answer}");
        assert_eq!(answer["kind"], kind, "{file}: {answer}");
        assert!(answer["error"].as_str().is_some_and(|e| !e.is_empty()));
    }
    let (status, _) = server.upload(Vec::new(), "name=empty").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (_, page) = get_json(&server.api("/snapshots")).await;
    assert_eq!(page["items"], serde_json::json!([]));
    assert_eq!(stored_files(&server.data_dir), Vec::<PathBuf>::new());
}

#[tokio::test]
async fn uploads_over_the_limit_get_413() {
    let dir = unique_dir("limit");
    let server = TestServer::start_in(&dir, &[("VRAMSCOPE_MAX_UPLOAD_BYTES", "100000")]);
    let (status, answer) = server.upload(corpus_file("streams.pickle"), "name=big").await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{answer}");
    assert!(stored_files(&server.data_dir).is_empty());
}

#[tokio::test]
async fn list_filters_paginates_renames_tags_and_deletes() {
    let server = TestServer::start("list", &[]);
    let files = ["compiled.pickle", "mlp_train_all.pickle", "streams.pickle", "state_only.pickle"];
    let mut ids = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let job = if i % 2 == 0 { "alpha" } else { "beta" };
        let (status, a) =
            server.upload(corpus_file(f), &format!("name={f}&job={job}&host=h{i}&tags=t{i},common")).await;
        assert_eq!(status, StatusCode::CREATED);
        ids.push(a["id"].as_str().expect("id").to_owned());
    }
    let (_, page) = get_json(&server.api("/snapshots?job=alpha")).await;
    assert_eq!(page["items"].as_array().map(Vec::len), Some(2));
    let (_, page) = get_json(&server.api("/snapshots?tag=t1")).await;
    assert_eq!(page["items"][0]["id"], ids[1]);
    let (_, page) = get_json(&server.api("/snapshots?q=stream")).await;
    assert_eq!(page["items"][0]["name"], "streams.pickle");

    // Pages of two, newest first, covering everything once.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let url = match &cursor {
            Some(c) => server.api(&format!("/snapshots?limit=2&cursor={c}")),
            None => server.api("/snapshots?limit=2"),
        };
        let (_, page) = get_json(&url).await;
        for item in page["items"].as_array().expect("items") {
            seen.push(item["id"].as_str().expect("id").to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    let mut newest_first = ids.clone();
    newest_first.reverse();
    assert_eq!(seen, newest_first);

    let response = client()
        .patch(server.api(&format!("/snapshots/{}", ids[0])))
        .json(&serde_json::json!({ "name": "renamed", "tags": ["x", "y", "x"] }))
        .send()
        .await
        .expect("patch");
    assert_eq!(response.status(), StatusCode::OK);
    let rec: Value = response.json().await.expect("json");
    assert_eq!((rec["name"].as_str(), rec["tags"].clone()), (Some("renamed"), serde_json::json!(["x", "y"])));

    let response = client().delete(server.api(&format!("/snapshots/{}", ids[0]))).send().await.expect("delete");
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let (status, _) = get_json(&server.api(&format!("/snapshots/{}", ids[0]))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(stored_files(&server.data_dir).len(), 3);
}

#[tokio::test]
async fn tokens_are_required_off_loopback_mode_and_roles_are_enforced() {
    let dir = unique_dir("auth");
    // Without any token the server refuses to start in token mode.
    let refused = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["serve", "--bind", "0.0.0.0:0", "--data-dir"])
        .arg(&dir)
        .output()
        .expect("serve");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("without API tokens"));

    let token = |role: &str| create_token(&dir, role);
    let (viewer, uploader, admin) = (token("viewer"), token("uploader"), token("admin"));
    let server = TestServer::start_in(&dir, &[("VRAMSCOPE_REQUIRE_TOKENS", "true")]);

    let (status, _) = get_json(&format!("{}/healthz", server.url)).await;
    assert_eq!(status, StatusCode::OK, "healthz needs no token");
    let status = client().get(server.api("/snapshots")).send().await.expect("get").status();
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let status = client().get(server.api("/snapshots")).bearer_auth("vs_nope_nope").send().await.expect("get").status();
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let forged = format!("{}x", &viewer);
    let status = client().get(server.api("/snapshots")).bearer_auth(forged).send().await.expect("get").status();
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let bytes = corpus_file("streams.pickle");
    let status = client()
        .post(server.api("/snapshots"))
        .bearer_auth(&viewer)
        .body(bytes.clone())
        .send()
        .await
        .expect("post")
        .status();
    assert_eq!(status, StatusCode::FORBIDDEN);
    let response =
        client().post(server.api("/snapshots")).bearer_auth(&uploader).body(bytes).send().await.expect("post");
    assert_eq!(response.status(), StatusCode::CREATED);
    let id = response.json::<Value>().await.expect("json")["id"].as_str().expect("id").to_owned();
    let status = client()
        .get(server.api(&format!("/snapshots/{id}/stats")))
        .bearer_auth(&viewer)
        .send()
        .await
        .expect("get")
        .status();
    assert_eq!(status, StatusCode::OK);
    let status = client()
        .delete(server.api(&format!("/snapshots/{id}")))
        .bearer_auth(&uploader)
        .send()
        .await
        .expect("del")
        .status();
    assert_eq!(status, StatusCode::FORBIDDEN);
    let status = client()
        .delete(server.api(&format!("/snapshots/{id}")))
        .bearer_auth(&admin)
        .send()
        .await
        .expect("del")
        .status();
    assert_eq!(status, StatusCode::NO_CONTENT);

    // CORS stays closed: no allow-origin header for a foreign origin.
    let response = client()
        .get(server.api("/snapshots"))
        .bearer_auth(&viewer)
        .header("origin", "http://evil.example")
        .send()
        .await
        .expect("get");
    assert!(response.headers().get("access-control-allow-origin").is_none());
}

#[tokio::test]
async fn a_killed_server_restarts_with_nothing_lost() {
    let dir = unique_dir("crash");
    let server = TestServer::start_in(&dir, &[]);
    let mut kept = Vec::new();
    for f in ["compiled.pickle", "streams.pickle", "oom_leak.pickle"] {
        let bytes = corpus_file(f);
        let (status, a) = server.upload(bytes.clone(), &format!("name={f}")).await;
        assert_eq!(status, StatusCode::CREATED);
        kept.push((a["id"].as_str().expect("id").to_owned(), bytes));
    }
    // Start an upload and kill the server (SIGKILL) in the middle of it.
    let url = server.api("/snapshots?name=cut");
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
    let body = reqwest::Body::wrap_stream(tokio_stream_from(rx));
    let half = corpus_file("ring_overflow.pickle");
    tx.send(Ok(half[..half.len() / 2].to_vec())).await.expect("send");
    let pending = tokio::spawn(async move { client().post(url).body(body).send().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.kill();
    drop(tx);
    let _ = pending.await;

    let server = TestServer::start_in(&dir, &[]);
    let (_, page) = get_json(&server.api("/snapshots")).await;
    assert_eq!(page["items"].as_array().map(Vec::len), Some(3), "{page}");
    for (id, bytes) in &kept {
        let back = client().get(server.api(&format!("/snapshots/{id}/file"))).send().await.expect("get");
        assert_eq!(back.bytes().await.expect("bytes").as_ref(), bytes.as_slice());
        let (status, _) = get_json(&server.api(&format!("/snapshots/{id}/stats"))).await;
        assert_eq!(status, StatusCode::OK);
    }
}

/// A stream over an mpsc receiver (for a request body that can be cut).
fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Result<Vec<u8>, std::io::Error>>,
) -> impl futures::Stream<Item = Result<Vec<u8>, std::io::Error>> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// Team mode: two instances on one PostgreSQL and one S3 bucket.
#[tokio::test]
async fn two_instances_share_postgres_and_s3() {
    let pg = std::env::var("VRAMSCOPE_TEST_POSTGRES_URL")
        .expect("VRAMSCOPE_TEST_POSTGRES_URL is not set: run ./scripts/test, which starts PostgreSQL and an S3 server");
    let s3 = std::env::var("VRAMSCOPE_TEST_S3_ENDPOINT")
        .expect("VRAMSCOPE_TEST_S3_ENDPOINT is not set: run ./scripts/test, which starts PostgreSQL and an S3 server");
    // A fresh database and bucket for this test.
    let suffix = uuid::Uuid::now_v7().simple().to_string();
    let database = format!("vt_server_{}", &suffix[suffix.len() - 12..]);
    let admin =
        Command::new("psql").args([&pg, "-q", "-c", &format!("CREATE DATABASE {database}")]).output().expect("psql");
    assert!(admin.status.success(), "{}", String::from_utf8_lossy(&admin.stderr));
    let db_url = format!("{}/{database}", pg.rsplit_once('/').expect("url").0);
    let bucket = format!("vt-{}", &suffix[suffix.len() - 12..]);
    let created = client().put(format!("{s3}/{bucket}")).send().await.expect("create bucket");
    assert!(created.status().is_success(), "bucket: {}", created.status());

    let env = [
        ("VRAMSCOPE_S3__ENDPOINT", s3.clone()),
        ("VRAMSCOPE_S3__REGION", "us-east-1".to_owned()),
        ("VRAMSCOPE_S3__ACCESS_KEY_ID", "test".to_owned()),
        ("VRAMSCOPE_S3__SECRET_ACCESS_KEY", "test".to_owned()),
        ("VRAMSCOPE_S3__ALLOW_HTTP", "true".to_owned()),
    ];
    let store = format!("s3://{bucket}/snapshots");
    let args = ["--database-url", db_url.as_str(), "--blob-store", store.as_str()];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let a = TestServer::start_with(&unique_dir("team-a"), &args, &env);
    let b = TestServer::start_with(&unique_dir("team-b"), &args, &env);

    let bytes = corpus_file("oom_leak.pickle");
    let (status, answer) = a.upload(bytes.clone(), "name=from-a&job=team").await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let id = answer["id"].as_str().expect("id");
    let (_, page) = get_json(&b.api("/snapshots?job=team")).await;
    assert_eq!(page["items"][0]["id"], id);
    let back = client().get(b.api(&format!("/snapshots/{id}/file"))).send().await.expect("get");
    assert_eq!(back.bytes().await.expect("bytes").as_ref(), bytes.as_slice());
    // A parsed the file and put its index in the bucket beside it (in the
    // background, after answering); B opens the snapshot from that index.
    let sha = answer["sha256"].as_str().expect("sha256");
    let index_url = format!("{s3}/{bucket}/snapshots/indexes/{sha}");
    let mut stored = false;
    for _ in 0..300 {
        if client().head(&index_url).send().await.expect("head").status().is_success() {
            stored = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(stored, "A never stored the index at {index_url}");
    let (status, window) = get_json(&b.api(&format!("/snapshots/{id}/timeline?px=100"))).await;
    assert_eq!(status, StatusCode::OK, "{window}");
    let (_, from_a) = get_json(&a.api(&format!("/snapshots/{id}/timeline?px=100"))).await;
    assert_eq!(window, from_a, "B answers from A's index as A does");
    assert_eq!(b.metric("parse_seconds_count", None).await, 0, "B parsed nothing");
    assert_eq!(b.metric("index_opens_total", None).await, 1, "B opened A's index");
    assert!(b.data_dir.join("index-cache").join(sha).is_file(), "B keeps its copy in data_dir/index-cache");
    // Same content and labels through the other instance (a retry): one
    // object, one row.
    let (status, again) = b.upload(bytes.clone(), "name=from-a&job=team").await;
    assert_eq!((status, again["id"].as_str()), (StatusCode::OK, Some(id)));
    // Under another name: a row of its own, on the same object.
    let (status, other) = b.upload(bytes, "name=from-b&job=team").await;
    assert_eq!(status, StatusCode::CREATED, "{other}");
    assert_ne!(other["id"].as_str(), Some(id));
    let (_, page) = get_json(&a.api("/snapshots?job=team")).await;
    assert_eq!(page["items"].as_array().map(Vec::len), Some(2), "{page}");
    assert_eq!(other["deduplicated"], true, "stored once (objects are named by content)");
    assert_eq!(page["items"][0]["sha256"], page["items"][1]["sha256"]);
}

#[tokio::test]
async fn multipart_and_gzip_uploads_and_compressed_answers() {
    let server = TestServer::start("forms", &[]);
    let bytes = corpus_file("mlp_train_all.pickle");
    let form = reqwest::multipart::Form::new()
        .text("job", "forms")
        .text("rank", "2")
        .text("tags", "a, b")
        .part("file", reqwest::multipart::Part::bytes(bytes.clone()).file_name("mlp.pickle"));
    let response = client().post(server.api("/snapshots")).multipart(form).send().await.expect("multipart");
    assert_eq!(response.status(), StatusCode::CREATED);
    let id = response.json::<Value>().await.expect("json")["id"].as_str().expect("id").to_owned();
    let (_, rec) = get_json(&server.api(&format!("/snapshots/{id}"))).await;
    assert_eq!((rec["name"].as_str(), rec["rank"].as_i64()), (Some("mlp.pickle"), Some(2)));
    assert_eq!(rec["tags"], serde_json::json!(["a", "b"]));

    // A gzip-encoded body is stored as sent; the reader sees through gzip.
    let gz = crate::common::gzip(&corpus_file("streams.pickle"));
    let response = client()
        .post(server.api("/snapshots?name=gz"))
        .header("content-encoding", "gzip")
        .body(gz.clone())
        .send()
        .await
        .expect("gzip upload");
    assert_eq!(response.status(), StatusCode::CREATED);
    let gz_id = response.json::<Value>().await.expect("json")["id"].as_str().expect("id").to_owned();
    let (_, stats) = get_json(&server.api(&format!("/snapshots/{gz_id}/stats"))).await;
    assert_eq!(stats["devices"][0]["trace_entries"], 1727);

    // Answers are compressed for clients that accept it.
    let raw = reqwest::Client::builder().no_gzip().build().expect("client");
    let response = raw
        .get(server.api(&format!("/snapshots/{id}/timeline?px=1000&axis=event")))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .expect("timeline");
    assert_eq!(response.headers().get("content-encoding").map(|v| v.to_str().unwrap_or("")), Some("gzip"));
}

#[tokio::test]
async fn large_uploads_parse_in_the_background_and_bad_ones_are_dropped() {
    let dir = unique_dir("background");
    let server = TestServer::start_in(&dir, &[("VRAMSCOPE_INLINE_PARSE_MAX_BYTES", "1000")]);
    let (status, answer) = server.upload(corpus_file("compiled.pickle"), "name=big").await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    assert_eq!(answer["status"], "parsing");
    let id = answer["id"].as_str().expect("id").to_owned();
    let mut ready = false;
    for _ in 0..100 {
        let (status, _) = get_json(&server.api(&format!("/snapshots/{id}/stats"))).await;
        if status == StatusCode::OK {
            ready = true;
            break;
        }
        assert_eq!(status, StatusCode::ACCEPTED);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready, "the background parse finished");

    // Over the inline limit, a truncated file is accepted first, then marked
    // failed with the reader's error, and its bytes are removed.
    let truncated = corpus_file("oom_leak.pickle");
    let (status, answer) = server.upload(truncated[..truncated.len() / 2].to_vec(), "name=cut").await;
    assert_eq!(status, StatusCode::CREATED);
    let bad = answer["id"].as_str().expect("id").to_owned();
    let mut failed = Value::Null;
    for _ in 0..100 {
        let (_, rec) = get_json(&server.api(&format!("/snapshots/{bad}"))).await;
        if rec["status"] == "failed" {
            failed = rec;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(failed["error"].as_str().is_some_and(|e| e.contains("truncated")), "{failed}");
    let (status, answer) = get_json(&server.api(&format!("/snapshots/{bad}/stats"))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(stored_files(&server.data_dir).len(), 1, "only the good file is kept");
}

/// `stats?wait=S` holds a parsing snapshot's answer until its parse ends:
/// one request gets the statistics of a file still parsing when it was
/// asked, and the refusal of one whose parse fails. A page waiting on a
/// 1 GB upload polled every 400 ms, 0.2 s late on average.
#[tokio::test]
async fn stats_wait_answers_when_the_background_parse_ends() {
    let dir = unique_dir("stats-wait");
    let server = TestServer::start_in(&dir, &[("VRAMSCOPE_INLINE_PARSE_MAX_BYTES", "0")]);
    let gpt_long = std::fs::read(crate::common::large_corpus().join("gpt_long.pickle")).expect("gpt_long");
    let (status, answer) = server.upload(gpt_long, "name=waited").await;
    assert_eq!((status, &answer["status"]), (StatusCode::CREATED, &Value::from("parsing")), "{answer}");
    let id = answer["id"].as_str().expect("id").to_owned();
    let (status, stats) = get_json(&server.api(&format!("/snapshots/{id}/stats?wait=10"))).await;
    assert_eq!(status, StatusCode::OK, "one waiting request gets the statistics: {stats}");
    assert_eq!(stats["file"], "waited");
    assert!(stats["devices"][0]["trace_entries"].as_u64().is_some_and(|n| n > 0), "{stats}");

    let truncated = corpus_file("oom_leak.pickle");
    let (status, answer) = server.upload(truncated[..truncated.len() / 2].to_vec(), "name=cut").await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let bad = answer["id"].as_str().expect("id").to_owned();
    let (status, refusal) = get_json(&server.api(&format!("/snapshots/{bad}/stats?wait=10"))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "one waiting request gets the refusal: {refusal}");
    assert!(refusal["error"].as_str().is_some_and(|e| e.contains("truncated")), "{refusal}");

    // What the wait cannot be.
    for query in ["wait=soon", "wait=-1", "wait=1&poll=2"] {
        let (status, refusal) = get_json(&server.api(&format!("/snapshots/{id}/stats?{query}"))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {refusal}");
    }
}

#[tokio::test]
async fn the_upload_command_sends_a_file() {
    let server = TestServer::start("cli", &[]);
    let file = crate::common::fixture_corpus().join("ring_overflow.pickle");
    let out = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["upload", "--server", &server.url, "--job", "cli-job", "--trigger", "threshold"])
        .arg(&file)
        .output()
        .expect("upload");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let answer: Value = serde_json::from_slice(&out.stdout).expect("json answer");
    let (_, rec) = get_json(&server.api(&format!("/snapshots/{}", answer["id"].as_str().expect("id")))).await;
    assert_eq!((rec["job"].as_str(), rec["trigger"].as_str()), (Some("cli-job"), Some("threshold")));
    assert_eq!(rec["name"], "ring_overflow.pickle");

    // A bad file: exit code 2 and the server's reason.
    let bad = crate::common::synthetic_dir().join("global_reduce.pickle");
    let out = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["upload", "--server", &server.url])
        .arg(&bad)
        .output()
        .expect("upload");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("GLOBAL"));
}

#[tokio::test]
async fn regression_a_tokenless_loopback_server_takes_a_request_that_carries_a_token() {
    // A user with VRAMSCOPE_TOKEN exported for a team's server got 401 from
    // a local one for any Bearer token.
    let server = TestServer::start("bearer-local", &[]);
    let response =
        client().get(server.api("/snapshots")).bearer_auth("vs_someid_not-a-secret-here").send().await.expect("get");
    assert_eq!(response.status(), StatusCode::OK);
    let file = crate::common::fixture_corpus().join("mlp_train_all.pickle");
    let out = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["upload", "--server", &server.url, "--token", "vs_someid_not-a-secret-here"])
        .arg(&file)
        .output()
        .expect("upload");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The page for people, on stderr; stdout stays the JSON.
    let answer: Value = serde_json::from_slice(&out.stdout).expect("json answer");
    let page = format!("snapshot page: {}/snapshots/{}", server.url, answer["id"].as_str().expect("id"));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&page), "{}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test]
async fn regression_upload_takes_the_trigger_from_the_file() {
    // `--trigger` defaulted to "manual", even for a file that records an OOM.
    let server = TestServer::start("upload-trigger", &[]);
    let upload = |name: &str, extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_vramscope"))
            .args(["upload", "--server", &server.url])
            .args(extra)
            .arg(crate::common::fixture_corpus().join(name))
            .output()
            .expect("upload");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let answer: Value = serde_json::from_slice(&out.stdout).expect("json answer");
        answer["id"].as_str().expect("id").to_owned()
    };
    for (file, extra, want) in [
        ("oom_leak.pickle", &[][..], "oom"),
        ("mlp_train_all.pickle", &[][..], "manual"),
        // Said on the command line, the trigger is what was said.
        ("fraction_oom.pickle", &["--trigger", "threshold"][..], "threshold"),
    ] {
        let id = upload(file, extra);
        let (_, rec) = get_json(&server.api(&format!("/snapshots/{id}"))).await;
        assert_eq!(rec["trigger"], want, "{file} {extra:?}");
    }
}

#[tokio::test]
async fn regression_upload_refused_for_its_token_says_why_and_exits_2() {
    let dir = unique_dir("upload-401");
    // Token mode starts only once a token exists.
    let _ = create_token(&dir, "uploader");
    let server = TestServer::start_in(&dir, &[("VRAMSCOPE_REQUIRE_TOKENS", "true")]);
    let file = crate::common::fixture_corpus().join("mlp_train_all.pickle");
    let out = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["upload", "--server", &server.url, "--token", "vs_someid_wrong"])
        .arg(&file)
        .output()
        .expect("upload");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("401") && err.contains("a valid API token is required"), "{err}");
}

/// Issue 44, item 20: `oom_leak.pickle` uploaded through the page got the
/// trigger `manual`, through the CLI `oom` (the CLI parsed the file itself
/// to guess). The server gives a file that names no trigger its own: `oom`
/// when its trace records one, whether it parses it inline or in the
/// background; the CLI says so when the bytes were there already.
#[tokio::test]
async fn regression_one_file_gets_one_trigger_from_the_page_and_the_cli() {
    for (tag, env) in
        [("trigger-inline", vec![]), ("trigger-background", vec![("VRAMSCOPE_INLINE_PARSE_MAX_BYTES", "1000")])]
    {
        let server = TestServer::start(tag, &env);
        let bytes = corpus_file("oom_leak.pickle");
        let form = reqwest::multipart::Form::new()
            .part("file", reqwest::multipart::Part::bytes(bytes.clone()).file_name("oom_leak.pickle"));
        let page = client().post(server.api("/snapshots")).multipart(form).send().await.expect("multipart");
        assert_eq!(page.status(), StatusCode::CREATED, "{tag}");
        let page: Value = page.json().await.expect("JSON");
        let id = page["id"].as_str().expect("id").to_owned();
        server.settled(&id).await;
        let (_, record) = server.get(&format!("/snapshots/{id}")).await;
        assert_eq!(record["trigger"], "oom", "{tag}: the page's upload");
        // The CLI, with other labels (a new row of the same file), and again.
        let path = crate::common::fixture_corpus().join("oom_leak.pickle");
        for time in 0..2 {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_vramscope"))
                .args(["upload", "--server", &server.url, "--job", "cli"])
                .arg(&path)
                .output()
                .expect("upload");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let answer: Value = serde_json::from_slice(&out.stdout).expect("JSON");
            let cli_id = answer["id"].as_str().expect("id").to_owned();
            server.settled(&cli_id).await;
            let (_, record) = server.get(&format!("/snapshots/{cli_id}")).await;
            assert_eq!(record["trigger"], "oom", "{tag}: the CLI's upload {time}");
            let stderr = String::from_utf8_lossy(&out.stderr);
            let said = if time == 0 { "the server had this file already: a new snapshot" } else { "already stored:" };
            assert!(stderr.contains(said), "{tag} {time}: {stderr}");
        }
        // A trigger that is named stands.
        let named = client()
            .post(server.api("/snapshots"))
            .query(&[("trigger", "manual"), ("job", "named")])
            .header("content-type", "application/octet-stream")
            .body(bytes)
            .send()
            .await
            .expect("upload");
        let named: Value = named.json().await.expect("JSON");
        let (_, record) = server.get(&format!("/snapshots/{}", named["id"].as_str().expect("id"))).await;
        assert_eq!(record["trigger"], "manual", "{tag}: named");
    }
}

/// The page names the dashboard's files under its build's folder, which a
/// browser keeps for good (a returning page then asks for nothing but
/// itself, and its WebAssembly comes from the code cache); another build's
/// folder is refused with the reason, and the old paths still answer,
/// revalidated on every load.
#[tokio::test]
async fn the_dashboard_s_files_are_kept_for_good_under_their_build_s_folder() {
    let server = TestServer::start("static", &[]);
    let page = client().get(format!("{}/snapshots/x", server.url)).send().await.expect("get the page");
    assert_eq!(page.headers()["cache-control"], "no-cache");
    let page = page.text().await.expect("the page");
    let at = page.find("/static/v/").expect("the page names a build's folder") + "/static/v/".len();
    let build = &page[at..at + 16];
    assert!(build.chars().all(|c| c.is_ascii_hexdigit()), "build id {build:?}");
    assert_eq!(page.matches("/static/").count(), page.matches(&format!("/static/v/{build}/")).count(), "{page}");
    assert!(page.contains(&format!("__vramscope_worker_url = \"/static/v/{build}/worker.js\"")), "{page}");
    for name in ["vramscope_frontend.js", "vramscope_frontend_bg.wasm", "worker.js", "style.css"] {
        let response = client().get(format!("{}/static/v/{build}/{name}", server.url)).send().await.expect("get");
        assert_eq!(response.status(), StatusCode::OK, "{name}");
        assert_eq!(response.headers()["cache-control"], "public, max-age=31536000, immutable", "{name}");
        assert_eq!(response.headers()["cross-origin-embedder-policy"], "require-corp", "{name}");
    }
    let other = client().get(format!("{}/static/v/0123456789abcdef/worker.js", server.url)).send().await.expect("get");
    assert_eq!(other.status(), StatusCode::NOT_FOUND);
    assert!(other.text().await.expect("body").contains("another build of the dashboard"));
    let old = client().get(format!("{}/static/worker.js", server.url)).send().await.expect("get");
    assert_eq!(old.status(), StatusCode::OK);
    assert_eq!(old.headers()["cache-control"], "no-cache");
}
