//! Attacks on a real server on a loopback port. Each test asserts the
//! refusal (status and error kind) and that the server still answers
//! `/healthz` and still serves a snapshot stored before the attack.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::bombs;
use crate::common::server::{TestServer, client, create_token};
use crate::common::{self};

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(common::fixture_corpus().join(name)).expect("fixture")
}

/// Upload a real snapshot to be served after the attack; its id.
async fn victim(server: &TestServer) -> String {
    let (status, answer) = server.upload(fixture("streams.pickle"), "name=victim").await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let id = answer["id"].as_str().expect("id").to_owned();
    // Where inline parsing is off, the parse runs in the background and a view
    // asked meanwhile answers 202; wait for it to be ready.
    let rec = server.settled(&id).await;
    assert_eq!(rec["status"], "ready", "{rec}");
    id
}

/// The server is alive and still serves the victim's statistics and file.
async fn still_serves(server: &TestServer, id: &str) {
    let health = client().get(format!("{}/healthz", server.url)).send().await.expect("healthz");
    assert_eq!(health.status(), StatusCode::OK);
    let (status, stats) = server.get(&format!("/snapshots/{id}/stats")).await;
    assert_eq!(status, StatusCode::OK, "{stats}");
    assert_eq!(stats["devices"][0]["trace_entries"], 1727);
    let file = client().get(server.api(&format!("/snapshots/{id}/file"))).send().await.expect("file");
    assert_eq!(file.bytes().await.expect("bytes").as_ref(), fixture("streams.pickle").as_slice());
}

fn kind(answer: &Value) -> &str {
    answer["kind"].as_str().unwrap_or_default()
}

async fn answer(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn regression_dns_rebinding_host_cannot_delete_or_read() {
    let server = TestServer::start("rebinding", &[]);
    let id = victim(&server).await;
    let url = server.api(&format!("/snapshots/{id}"));
    let port = server.url.rsplit(':').next().expect("port");
    let (status, refusal) =
        answer(client().delete(&url).header("host", format!("evil.example:{port}")).send().await.expect("delete"))
            .await;
    assert_eq!((status, kind(&refusal)), (StatusCode::FORBIDDEN, "foreign_host"), "{refusal}");
    let (status, refusal) =
        answer(client().get(server.api("/snapshots")).header("host", "evil.example").send().await.expect("get")).await;
    assert_eq!((status, kind(&refusal)), (StatusCode::FORBIDDEN, "foreign_host"), "{refusal}");
    // The names of this server still work.
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let response = client().get(server.api("/snapshots")).header("host", host.as_str()).send().await;
        assert_eq!(response.expect("get").status(), StatusCode::OK, "{host}");
    }
    still_serves(&server, &id).await;
}

#[tokio::test]
async fn regression_cross_origin_simple_posts_are_refused() {
    let server = TestServer::start("cross-origin", &[]);
    let id = victim(&server).await;
    let comments = server.api(&format!("/snapshots/{id}/comments"));
    // What any web page can send without a preflight.
    let forged = client()
        .post(&comments)
        .header("origin", "http://evil.example")
        .header("content-type", "text/plain")
        .body(r#"{"body":"pwned"}"#)
        .send()
        .await
        .expect("post");
    let (status, refusal) = answer(forged).await;
    assert_eq!((status, kind(&refusal)), (StatusCode::FORBIDDEN, "cross_origin"), "{refusal}");
    let forged_upload = client()
        .post(server.api("/snapshots"))
        .header("origin", "null")
        .header("content-type", "application/octet-stream")
        .body(fixture("oom_leak.pickle"))
        .send()
        .await
        .expect("upload");
    assert_eq!(answer(forged_upload).await.0, StatusCode::FORBIDDEN);
    let fetch_metadata = client()
        .delete(server.api(&format!("/snapshots/{id}")))
        .header("sec-fetch-site", "cross-site")
        .send()
        .await
        .expect("delete");
    assert_eq!(answer(fetch_metadata).await.0, StatusCode::FORBIDDEN);
    // A comment as text/plain is refused even without an Origin.
    let plain = client().post(&comments).header("content-type", "text/plain").body(r#"{"body":"x"}"#).send().await;
    let (status, refusal) = answer(plain.expect("post")).await;
    assert_eq!((status, kind(&refusal)), (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"));
    // An upload as a form is refused too.
    let form = client()
        .post(server.api("/snapshots"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(fixture("oom_leak.pickle"))
        .send()
        .await
        .expect("upload");
    assert_eq!(answer(form).await.0, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // The dashboard's own requests (its Origin is the server) still work.
    let own = client().post(&comments).header("origin", server.url.as_str()).json(&json!({"body": "ok"})).send().await;
    assert_eq!(own.expect("post").status(), StatusCode::CREATED);
    let (_, listed) = server.get(&format!("/snapshots/{id}/comments")).await;
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "only the same-origin comment: {listed}");
    let (_, page) = server.get("/snapshots").await;
    assert_eq!(page["items"].as_array().map(Vec::len), Some(1), "no forged upload: {page}");
    still_serves(&server, &id).await;
}

/// Issue 44: a page of another local program (`localhost:3000`) names this
/// host but not this port: it is another origin.
#[tokio::test]
async fn regression_an_origin_on_another_local_port_is_refused() {
    let server = TestServer::start("origin-port", &[]);
    let id = victim(&server).await;
    let comments = server.api(&format!("/snapshots/{id}/comments"));
    let port = url::Url::parse(&server.url).expect("url").port().expect("port");
    for origin in
        ["http://localhost:3000".to_owned(), format!("http://127.0.0.1:{}", port + 1), "http://127.0.0.1".to_owned()]
    {
        let forged = client().post(&comments).header("origin", origin.as_str()).json(&json!({"body": "pwned"})).send();
        let (status, refusal) = answer(forged.await.expect("post")).await;
        assert_eq!((status, kind(&refusal)), (StatusCode::FORBIDDEN, "cross_origin"), "{origin}: {refusal}");
    }
    // This server under either of its names, on its port, still works.
    for origin in [format!("http://localhost:{port}"), format!("http://127.0.0.1:{port}")] {
        let host = origin.trim_start_matches("http://").to_owned();
        let own = client()
            .post(&comments)
            .header("origin", origin.as_str())
            .header("host", host)
            .json(&json!({"body": "ok"}));
        assert_eq!(own.send().await.expect("post").status(), StatusCode::CREATED, "{origin}");
    }
    still_serves(&server, &id).await;
}

/// Issue 44: media types are case-insensitive, so `Text/Plain` (what a
/// page can send without a preflight) is text, refused as every text is.
#[tokio::test]
async fn regression_a_text_media_type_in_capitals_is_refused_as_text() {
    let server = TestServer::start("text-caps", &[]);
    let id = victim(&server).await;
    for content_type in ["Text/Plain", "TEXT/PLAIN; charset=utf-8", "Application/X-WWW-Form-Urlencoded"] {
        let upload = client()
            .post(server.api("/snapshots"))
            .header("content-type", content_type)
            .body(fixture("oom_leak.pickle"));
        let (status, refusal) = answer(upload.send().await.expect("upload")).await;
        assert_eq!(
            (status, kind(&refusal)),
            (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
            "{content_type}"
        );
    }
    let comments = server.api(&format!("/snapshots/{id}/comments"));
    let plain = client().post(&comments).header("content-type", "Text/Plain").body(r#"{"body":"x"}"#).send().await;
    assert_eq!(answer(plain.expect("post")).await.0, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let json_caps = client().post(&comments).header("content-type", "Application/JSON").body(r#"{"body":"ok"}"#).send();
    assert_eq!(json_caps.await.expect("post").status(), StatusCode::CREATED, "a JSON body whatever its type's case");
    still_serves(&server, &id).await;
}

#[tokio::test]
async fn regression_agent_websocket_refuses_other_origins() {
    let server = TestServer::start("ws-origin", &[]);
    let id = victim(&server).await;
    let response = client()
        .get(server.api("/agents/ws"))
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .header("origin", "http://evil.example")
        .send()
        .await
        .expect("upgrade");
    let (status, refusal) = answer(response).await;
    assert_eq!((status, kind(&refusal)), (StatusCode::FORBIDDEN, "cross_origin"), "{refusal}");
    still_serves(&server, &id).await;
}

#[tokio::test]
async fn regression_request_bodies_and_labels_are_bounded() {
    let server = TestServer::start("bodies", &[]);
    let id = victim(&server).await;
    // Just over the 256 KiB limit: small enough that the client has
    // written it all when the server refuses it unread.
    let big = "x".repeat(300 << 10);
    let comment = client()
        .post(server.api(&format!("/snapshots/{id}/comments")))
        .json(&json!({ "body": big }))
        .send()
        .await
        .expect("post");
    let (status, refusal) = answer(comment).await;
    assert_eq!((status, kind(&refusal)), (StatusCode::PAYLOAD_TOO_LARGE, "too_large"), "{refusal}");
    let patch = client()
        .patch(server.api(&format!("/snapshots/{id}")))
        .json(&json!({ "name": big }))
        .send()
        .await
        .expect("patch");
    assert_eq!(answer(patch).await.0, StatusCode::PAYLOAD_TOO_LARGE);
    // Under the body limit but over the label limits.
    let long_name = "n".repeat(300);
    let patch = client()
        .patch(server.api(&format!("/snapshots/{id}")))
        .json(&json!({ "name": long_name }))
        .send()
        .await
        .expect("patch");
    assert_eq!(answer(patch).await.0, StatusCode::BAD_REQUEST);
    let tags: Vec<String> = (0..40).map(|i| format!("t{i}")).collect();
    let patch =
        client().patch(server.api(&format!("/snapshots/{id}"))).json(&json!({ "tags": tags })).send().await.expect("p");
    assert_eq!(answer(patch).await.0, StatusCode::BAD_REQUEST);
    let (status, _) = server.upload(fixture("oom_leak.pickle"), &format!("name={long_name}")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // A long tag of two-byte characters: the message quotes its start
    // without cutting a character in half (a panic, on a first draft).
    let tag = "é".repeat(40);
    let patch = client()
        .patch(server.api(&format!("/snapshots/{id}")))
        .json(&json!({ "tags": [tag] }))
        .send()
        .await
        .expect("p");
    let (status, refusal) = answer(patch).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refusal}");
    // A multipart text field is read in bounded chunks, not whole: past
    // 4 KiB it is refused. (The whole request stays small enough for the
    // socket's buffers: the server answers before reading the rest, and a
    // client still writing a large body would see its pipe break instead.)
    let form = reqwest::multipart::Form::new()
        .text("job", "j".repeat(8 << 10))
        .part("file", reqwest::multipart::Part::bytes(fixture("state_only.pickle")).file_name("a.pickle"));
    let response = client().post(server.api("/snapshots")).multipart(form).send().await.expect("multipart");
    let (status, refusal) = answer(response).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refusal}");
    assert!(refusal["error"].as_str().is_some_and(|e| e.contains("job")), "{refusal}");
    let (_, page) = server.get("/snapshots").await;
    assert_eq!(page["items"].as_array().map(Vec::len), Some(1), "nothing else was stored: {page}");
    assert_eq!(page["items"][0]["name"], "victim");
    still_serves(&server, &id).await;
}

#[tokio::test]
async fn regression_bomb_uploads_are_refused_within_the_servers_budget() {
    let budget = (32u64 << 20).to_string();
    let server = TestServer::start("bombs", &[("VRAMSCOPE_PARSE_MEMORY_BUDGET", budget.as_str())]);
    let id = victim(&server).await;
    let (status, refusal) = server.upload(bombs::marks(48 << 20), "name=marks").await;
    assert_eq!((status, kind(&refusal)), (StatusCode::UNPROCESSABLE_ENTITY, "memory_budget"), "{refusal}");
    let zstd = crate::common::compress("zstd", &bombs::mark_pop_pairs(48 << 20));
    let (status, refusal) = server.upload(zstd, "name=pairs.zst").await;
    assert_eq!((status, kind(&refusal)), (StatusCode::UNPROCESSABLE_ENTITY, "decompression_limit"), "{refusal}");
    // Before the fix the MARKs alone took 7.8x their 48 MB.
    let peak = server.peak_rss();
    assert!(peak < 256 << 20, "server peak RSS {} MiB", peak >> 20);
    let (_, page) = server.get("/snapshots").await;
    assert_eq!(page["items"].as_array().map(Vec::len), Some(1), "{page}");
    still_serves(&server, &id).await;
}

#[tokio::test]
async fn regression_a_slow_parse_is_stopped_and_never_resumed() {
    // A limit no parse of a 22 MB file meets, for the inline and the
    // background parse alike.
    let gpt_long = std::fs::read(common::large_corpus().join("gpt_long.pickle")).expect("gpt_long");
    let env = [("VRAMSCOPE_PARSE_TIMEOUT_SECS", "0.001")];
    let server = TestServer::start("timeout", &env);
    let (status, refusal) = server.upload(gpt_long.clone(), "name=inline").await;
    assert_eq!((status, kind(&refusal)), (StatusCode::UNPROCESSABLE_ENTITY, "parse_timeout"), "{refusal}");
    assert!(refusal["error"].as_str().is_some_and(|e| e.contains("parse_timeout_secs")), "{refusal}");
    let dir = server.kill();
    let env = [("VRAMSCOPE_PARSE_TIMEOUT_SECS", "0.001"), ("VRAMSCOPE_INLINE_PARSE_MAX_BYTES", "0")];
    let server = TestServer::start_in(&dir, &env);
    let (status, answer) = server.upload(gpt_long, "name=background").await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let id = answer["id"].as_str().expect("id").to_owned();
    let rec = server.settled(&id).await;
    assert_eq!(rec["status"], "failed", "{rec}");
    assert!(rec["error"].as_str().is_some_and(|e| e.contains("parse_timeout_secs")), "{rec}");
    let (status, refusal) = server.get(&format!("/snapshots/{id}/timeline?px=100")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refusal}");
    // A restart with a generous limit does not parse it again.
    let dir = server.kill();
    let server = TestServer::start_in(&dir, &[]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, rec) = server.get(&format!("/snapshots/{id}")).await;
    assert_eq!(rec["status"], "failed", "{rec}");
    let victim = victim(&server).await;
    still_serves(&server, &victim).await;
}

#[tokio::test]
async fn regression_one_parse_per_file_for_views_reports_and_concurrent_requests() {
    let gpt_long = std::fs::read(common::large_corpus().join("gpt_long.pickle")).expect("gpt_long");
    let server = TestServer::start("parse-once", &[("VRAMSCOPE_INLINE_PARSE_MAX_BYTES", "0")]);
    let (status, answer) = server.upload(gpt_long, "name=big").await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let id = answer["id"].as_str().expect("id").to_owned();
    // Eight views at once while the background parse runs, one of them
    // given up by its client: all share the one parse.
    let quitter =
        client().get(server.api(&format!("/snapshots/{id}/timeline?px=500"))).timeout(Duration::from_millis(50)).send();
    let path = format!("/snapshots/{id}/timeline?px=500");
    let views = (0..8).map(|_| server.get(&path));
    let (_, answers) = tokio::join!(quitter, futures::future::join_all(views));
    for (status, window) in answers {
        assert_eq!(status, StatusCode::OK, "{window}");
    }
    assert_eq!(server.settled(&id).await["status"], "ready");
    for path in ["report.html", "chart.png", "chart.svg"] {
        let response = client().get(server.api(&format!("/snapshots/{id}/{path}"))).send().await.expect(path);
        assert_eq!(response.status(), StatusCode::OK, "{path}");
    }
    assert_eq!(
        metric(&server, "parse_seconds_count", None).await,
        1,
        "one parse for the upload, the views and the exports"
    );
    // The rendered report is kept by content: asked again, the same page.
    let first = client().get(server.api(&format!("/snapshots/{id}/report.html"))).send().await.expect("report");
    let again = client().get(server.api(&format!("/snapshots/{id}/report.html"))).send().await.expect("report");
    assert_eq!(first.bytes().await.expect("page"), again.bytes().await.expect("page"));
    assert_eq!(metric(&server, "reports_rendered_total", None).await, 1, "rendered once for three requests");
    // An upload parsed inline (the default below 256 MiB): its views and
    // exports, asked for at once, do not parse again.
    let inline = TestServer::start("parse-inline", &[]);
    let (status, answer) = inline.upload(fixture("oom_leak.pickle"), "name=small").await;
    assert_eq!(status, StatusCode::CREATED);
    let small = answer["id"].as_str().expect("id").to_owned();
    assert_eq!(metric(&inline, "parse_seconds_count", None).await, 1, "parsed before the answer");
    for path in ["timeline?px=300", "report.html", "chart.png"] {
        let response = client().get(inline.api(&format!("/snapshots/{small}/{path}"))).send().await.expect(path);
        assert_eq!(response.status(), StatusCode::OK, "{path}");
    }
    assert_eq!(metric(&inline, "parse_seconds_count", None).await, 1, "served from the upload's parse");
    let (_, found) = server.get(&format!("/snapshots/{id}/search?q=py&limit=1000000000")).await;
    let total = found["total"].as_u64().expect("total");
    assert!(total > 5000, "a query matching more than a page: {total}");
    assert_eq!(found["matches"].as_array().map(Vec::len), Some(5000), "the limit is clamped");
}

#[tokio::test]
async fn regression_a_client_leaving_mid_parse_leaves_no_staged_bytes() {
    let gpt_long = std::fs::read(common::large_corpus().join("gpt_long.pickle")).expect("gpt_long");
    let server = TestServer::start("left", &[]);
    let id = victim(&server).await;
    // The body is sent in well under a second; the inline parse (debug
    // build) takes longer, and the client gives up during it.
    let gone = client()
        .post(server.api("/snapshots?name=left"))
        .header("content-type", "application/octet-stream")
        .timeout(Duration::from_millis(400))
        .body(gpt_long)
        .send()
        .await;
    assert!(gone.is_err(), "the client gave up before the answer");
    let staging = server.data_dir.join("blobs/staging");
    let mut left = usize::MAX;
    for _ in 0..100 {
        left = std::fs::read_dir(&staging).map(|d| d.count()).unwrap_or(0);
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left, 0, "staging emptied after the client left");
    still_serves(&server, &id).await;
}

#[tokio::test]
async fn regression_guessing_a_tokens_secret_costs_no_argon2_past_a_few() {
    let dir = crate::common::server::unique_dir("argon2");
    let token = create_token(&dir, "admin");
    let id = token.split('_').nth(1).expect("token id").to_owned();
    let server = TestServer::start_in(&dir, &[("VRAMSCOPE_REQUIRE_TOKENS", "true")]);
    // The holder works (and stays verified through what follows).
    let response = client().get(server.api("/snapshots")).bearer_auth(&token).send().await.expect("get");
    assert_eq!(response.status(), StatusCode::OK);
    // 40 different secrets for the real id, then one wrong token 40 times.
    let guesses = (0..40).map(|i| format!("vs_{id}_guess{i}")).chain((0..40).map(|_| format!("vs_{id}_same")));
    for guess in guesses {
        let response = client().get(server.api("/snapshots")).bearer_auth(&guess).send().await.expect("get");
        // 401 while this address may still guess, then 429.
        let status = response.status();
        assert!(status == StatusCode::UNAUTHORIZED || status == StatusCode::TOO_MANY_REQUESTS, "{status}");
    }
    // The real token still works: `metric` asserts its 200.
    let hashes = metric(&server, "token_hashes", Some(&token)).await;
    assert!(
        hashes <= 11,
        "{hashes} argon2 checks for 80 wrong tokens and one right one (10 a minute per id, then none)"
    );
    let health = client().get(format!("{}/healthz", server.url)).send().await.expect("healthz");
    assert_eq!(health.status(), StatusCode::OK);
}

/// `count` wrong secrets for `id`, each new (a secret that failed once is
/// refused from memory, with 401), each claiming to come from `forwarded`;
/// the answers.
async fn guess(server: &TestServer, id: &str, forwarded: &str, count: usize) -> Vec<reqwest::Response> {
    static GUESSES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let mut answers = Vec::new();
    for _ in 0..count {
        let i = GUESSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let response = client()
            .get(server.api("/snapshots"))
            .bearer_auth(format!("vs_{id}_wrong{i}"))
            .header("x-forwarded-for", forwarded)
            .send()
            .await
            .expect("get");
        answers.push(response);
    }
    answers
}

#[tokio::test]
async fn regression_wrong_secrets_for_a_token_id_do_not_lock_out_its_holder() {
    // A quiet holder (a CI job's uploader token, unused since start-up) and
    // a client that knows its id, both behind the team's nginx (here: the
    // loopback address, a trusted proxy, forwarding for two clients).
    let dir = crate::common::server::unique_dir("lockout");
    let token = create_token(&dir, "uploader");
    let id = token.split('_').nth(1).expect("token id").to_owned();
    let env = [("VRAMSCOPE_REQUIRE_TOKENS", "true"), ("VRAMSCOPE_TRUSTED_PROXIES", "[\"127.0.0.1\"]")];
    let server = TestServer::start_in(&dir, &env);
    let answers = guess(&server, &id, "198.51.100.66", 12).await;
    let statuses: Vec<u16> = answers.iter().map(|r| r.status().as_u16()).collect();
    assert_eq!(statuses[..10], [401; 10], "{statuses:?}");
    assert_eq!(statuses[10..], [429, 429], "the guesser is limited: {statuses:?}");
    // The holder, from its own address, was never verified before: its
    // correct secret is checked and let through.
    let response = client()
        .get(server.api("/snapshots"))
        .bearer_auth(&token)
        .header("x-forwarded-for", "198.51.100.7")
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), StatusCode::OK, "the quiet holder is not locked out");
    // So is an uploader's upload, and a request straight to the instance.
    let response = client()
        .post(server.api("/snapshots?name=after-guessing"))
        .bearer_auth(&token)
        .header("content-type", "application/octet-stream")
        .body(fixture("state_only.pickle"))
        .send()
        .await
        .expect("upload");
    assert_eq!(response.status(), StatusCode::CREATED);
    // The guesser is still limited, whatever the holder did.
    let again = guess(&server, &id, "198.51.100.66", 1).await;
    assert_eq!(again[0].status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn regression_a_guesser_rotating_ipv6_addresses_of_its_64_is_still_limited() {
    // One IPv6 host holds a whole /64: a new address per guess used to
    // start a new count each time.
    let dir = crate::common::server::unique_dir("ipv6-rotate");
    let token = create_token(&dir, "uploader");
    let id = token.split('_').nth(1).expect("token id").to_owned();
    let env = [("VRAMSCOPE_REQUIRE_TOKENS", "true"), ("VRAMSCOPE_TRUSTED_PROXIES", "[\"127.0.0.1\"]")];
    let server = TestServer::start_in(&dir, &env);
    let mut statuses = Vec::new();
    for i in 0..12 {
        let answer = guess(&server, &id, &format!("2001:db8:5:7::{:x}", i + 1), 1).await.remove(0);
        statuses.push(answer.status().as_u16());
    }
    assert_eq!(statuses[10..], [429, 429], "{statuses:?}");
    // Another /64 is another client; so is the holder.
    let other = guess(&server, &id, "2001:db8:5:8::1", 1).await.remove(0);
    assert_eq!(other.status(), StatusCode::UNAUTHORIZED);
    let holder = client()
        .get(server.api("/snapshots"))
        .bearer_auth(&token)
        .header("x-forwarded-for", "2001:db8:9::1")
        .send()
        .await
        .expect("get");
    assert_eq!(holder.status(), StatusCode::OK);
}

/// Found in review: a revoked token kept working for up to five minutes on
/// every server that had verified it, because the verified-token cache
/// answered without reading the token's record. The record is now read at
/// every request; only the argon2 check is remembered.
#[tokio::test]
async fn regression_a_revoked_token_is_refused_at_the_next_request() {
    let dir = crate::common::server::unique_dir("revoked");
    let token = create_token(&dir, "viewer");
    let id = token.split('_').nth(1).expect("token id").to_owned();
    let server = TestServer::start_in(&dir, &[("VRAMSCOPE_REQUIRE_TOKENS", "true")]);
    let get = || client().get(server.api("/snapshots")).bearer_auth(&token).send();
    assert_eq!(get().await.expect("get").status(), StatusCode::OK, "the holder before");
    assert_eq!(get().await.expect("get").status(), StatusCode::OK, "remembered as verified");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["token", "revoke", &id, "--data-dir"])
        .arg(&dir)
        .output()
        .expect("token revoke");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(get().await.expect("get").status(), StatusCode::UNAUTHORIZED, "refused at once after its revocation");
}

#[tokio::test]
async fn regression_a_client_guessing_secrets_gets_429_with_retry_after() {
    // No trusted proxies (the default): X-Forwarded-For is ignored, so a
    // guesser cannot reset its count by claiming another address each time.
    let dir = crate::common::server::unique_dir("retry-after");
    let token = create_token(&dir, "viewer");
    let id = token.split('_').nth(1).expect("token id").to_owned();
    let server = TestServer::start_in(&dir, &[("VRAMSCOPE_REQUIRE_TOKENS", "true")]);
    let mut statuses = Vec::new();
    let mut limited = None;
    for i in 0..12 {
        let answer = guess(&server, &id, &format!("203.0.113.{i}"), 1).await.remove(0);
        statuses.push(answer.status().as_u16());
        if answer.status() == StatusCode::TOO_MANY_REQUESTS {
            limited = Some(answer);
        }
    }
    assert_eq!(statuses, [401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 429, 429]);
    let limited = limited.expect("a 429");
    let retry: u64 = limited
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("Retry-After in seconds");
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    let body: serde_json::Value = limited.json().await.expect("json");
    assert_eq!(body["kind"], "rate_limited", "{body}");
    assert!(body["error"].as_str().is_some_and(|m| m.contains(&format!("{retry} s"))), "{body}");
    // A wrong secret for another id from the same address is not limited.
    let other = client().get(server.api("/snapshots")).bearer_auth("vs_0000000000_wrong").send().await.expect("get");
    assert_eq!(other.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn regression_a_snapshots_comment_thread_is_bounded() {
    // Any viewer may comment, up to 16 KiB each, and a thread is answered
    // whole: without a bound, one client grew a thread (and every answer
    // listing it) without end.
    let server = TestServer::start("comments", &[("VRAMSCOPE_MAX_COMMENTS_PER_SNAPSHOT", "3")]);
    let id = victim(&server).await;
    let post = |id: String, body: String| {
        let url = server.api(&format!("/snapshots/{id}/comments"));
        async move { client().post(url).header("content-type", "application/json").body(body).send().await.expect("post") }
    };
    let long = "x".repeat(16 * 1024);
    for _ in 0..3 {
        let response = post(id.clone(), json!({ "body": long }).to_string()).await;
        assert_eq!(response.status(), StatusCode::CREATED);
    }
    let refused = post(id.clone(), json!({ "body": "one more" }).to_string()).await;
    assert_eq!(refused.status(), StatusCode::CONFLICT);
    let body: Value = refused.json().await.expect("json");
    assert_eq!(body["kind"], "limit_reached", "{body}");
    assert!(body["error"].as_str().is_some_and(|e| e.contains("max_comments_per_snapshot")), "{body}");
    let (_, thread) = server.get(&format!("/snapshots/{id}/comments")).await;
    assert_eq!(thread.as_array().map(Vec::len), Some(3));
    // An unknown snapshot is still 404, and another snapshot takes comments.
    let missing = post("nope".to_owned(), json!({ "body": "hi" }).to_string()).await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let (status, other) = server.upload(fixture("state_only.pickle"), "name=other").await;
    assert_eq!(status, StatusCode::CREATED, "{other}");
    let other = other["id"].as_str().expect("id").to_owned();
    assert_eq!(post(other, json!({ "body": "fine" }).to_string()).await.status(), StatusCode::CREATED);
}

#[tokio::test]
async fn regression_errors_never_echo_a_long_input_back() {
    // A 50 KB query value or path segment came back whole in the error of
    // search, timeline, stacks, tune and the library's cursor.
    let server = TestServer::start("echo", &[]);
    let id = victim(&server).await;
    let big = "Z".repeat(50_000);
    for path in [
        format!("/snapshots/{id}/search?q=0x{big}"),
        format!("/snapshots/{id}/timeline?axis={big}"),
        format!("/snapshots/{id}/stacks/{big}"),
        format!("/snapshots/{id}/tune?capacity={big}"),
        format!("/snapshots?cursor={big}"),
        format!("/snapshots/{id}/whatif?capacity={big}"),
    ] {
        let response = client().get(server.api(&path)).send().await.expect("get");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{}", &path[..60]);
        let body = response.text().await.expect("body");
        assert!(body.len() < 1000, "{}: {} bytes answered", &path[..60], body.len());
        let error: Value = serde_json::from_str(&body).expect("the API's JSON error");
        assert!(error["kind"].is_string() && error["error"].is_string(), "{body}");
        assert!(error["error"].as_str().is_some_and(|e| !e.contains(&big[..400])), "{body}");
    }
}

#[tokio::test]
async fn regression_the_jobs_list_is_bounded() {
    // The agent makes each run a job of its own: the whole list came back
    // in every answer, however many runs a server had seen.
    let server = TestServer::start("jobs-limit", &[]);
    for (job, file) in [("j1", "streams.pickle"), ("j2", "state_only.pickle"), ("j3", "oom_leak.pickle")] {
        let (status, answer) = server.upload(fixture(file), &format!("job={job}")).await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let names = |v: &Value| {
        v.as_array().expect("jobs").iter().map(|j| j["job"].as_str().expect("job").to_owned()).collect::<Vec<_>>()
    };
    let (_, all) = server.get("/jobs").await;
    assert_eq!(names(&all), ["j3", "j2", "j1"]);
    let (_, two) = server.get("/jobs?limit=2").await;
    assert_eq!(names(&two), ["j3", "j2"], "the most recent first, at most the limit");
    let (_, clamped) = server.get("/jobs?limit=0").await;
    assert_eq!(names(&clamped), ["j3"], "a limit below 1 is 1");
}

#[tokio::test]
async fn regression_a_file_the_server_dies_on_is_not_parsed_at_every_start() {
    // A file that kills the server mid-parse would kill it again at every
    // start-up. Stand-in for that death: SIGKILL while the background parse
    // runs (a debug build takes about 2 s over gpt_long from the stored
    // file; an upload's own parse runs while it streams in, so the first
    // kill comes right after the answer, before its indexes are written).
    let gpt_long = std::fs::read(common::large_corpus().join("gpt_long.pickle")).expect("gpt_long");
    let env = [("VRAMSCOPE_INLINE_PARSE_MAX_BYTES", "0")];
    let server = TestServer::start("crash-loop", &env);
    let (status, answer) = server.upload(gpt_long, "name=deadly").await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let id = answer["id"].as_str().expect("id").to_owned();
    let (_, rec) = server.get(&format!("/snapshots/{id}")).await;
    assert_eq!(rec["status"], "parsing", "still parsing when killed: {rec}");
    let dir = server.kill();
    // The second start parses it once more (a deploy may have stopped the
    // first), and dies again.
    let server = TestServer::start_in(&dir, &env);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (_, rec) = server.get(&format!("/snapshots/{id}")).await;
    assert_eq!(rec["status"], "parsing", "resumed once: {rec}");
    let dir = server.kill();
    // The third start gives up on it, says why, and serves the rest.
    let server = TestServer::start_in(&dir, &env);
    let rec = server.settled(&id).await;
    assert_eq!(rec["status"], "failed", "{rec}");
    assert!(rec["error"].as_str().is_some_and(|e| e.contains("stopped 2 times")), "{rec}");
    let victim = victim(&server).await;
    still_serves(&server, &victim).await;
}

#[tokio::test]
async fn regression_analyses_take_only_settings_a_user_can_name_and_wait_in_line() {
    let server = TestServer::start("analysis-pool", &[("VRAMSCOPE_ANALYSIS_CONCURRENCY", "1")]);
    let id = victim(&server).await;
    let refused = [
        ("tune?capacity=1234567", "capacity"),
        ("whatif?capacity=1", "capacity"),
        ("whatif?capacity=99999TiB", "capacity"),
        (&*format!("whatif?alloc_conf={}", "x".repeat(600)), "alloc_conf"),
    ];
    for (query, what) in refused {
        let (status, refusal) = server.get(&format!("/snapshots/{id}/{query}")).await;
        assert_eq!((status, kind(&refusal)), (StatusCode::BAD_REQUEST, "bad_request"), "{query}: {refusal}");
        assert!(refusal["error"].as_str().is_some_and(|e| e.contains(what)), "{query}: {refusal}");
    }
    // Twelve rankings at once, each of 15 replays: they queue for the one
    // thread, and the server answers its health check and its files meanwhile.
    let paths: Vec<String> = (1..=12).map(|gib| format!("/snapshots/{id}/tune?capacity={gib}GiB")).collect();
    let storm = futures::future::join_all(paths.iter().map(|p| server.get(p)));
    let probe = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        still_serves(&server, &id).await;
    };
    let (answers, ()) = tokio::join!(storm, probe);
    for (status, ranking) in answers {
        assert_eq!(status, StatusCode::OK, "{ranking}");
    }
    // The same settings spelled two ways are one replay.
    let (a, first) = server.get(&format!("/snapshots/{id}/whatif?alloc_conf=expandable_segments:True")).await;
    let (b, second) = server.get(&format!("/snapshots/{id}/whatif?alloc_conf=%20expandable_segments:True,")).await;
    assert_eq!((a, b), (StatusCode::OK, StatusCode::OK));
    assert_eq!(first["figures"], second["figures"]);
}

#[tokio::test]
async fn regression_predictions_take_only_bounded_queries_checked_before_any_load() {
    let server = TestServer::start("predict-hostile", &[]);
    let id = victim(&server).await;
    let nine: Vec<String> = (1..=9).map(|k| format!("{id}:{k}")).collect();
    let nine = nine.join(",");
    let at33: Vec<String> = (1..=33).map(|k| k.to_string()).collect();
    let at33 = at33.join(",");
    let two = format!("{id}:4,{id}:8");
    let long_conf = "x".repeat(600);
    // Unknown ids in these queries: each is refused for its parameter
    // before any snapshot is looked up.
    let refused: [(&[(&str, &str)], &str); 8] = [
        (&[("runs", &nine), ("at", "16")], "runs"),
        (&[("runs", &two), ("at", &at33)], "at"),
        (&[("runs", "nosuch:0,other:8"), ("at", "16")], "runs"),
        (&[("runs", "nosuch:4,other:8"), ("at", "16"), ("step", "0")], "step"),
        (&[("runs", "nosuch:4,other:8"), ("largest", "true"), ("capacity", "1B")], "capacity"),
        (&[("runs", "nosuch:4,other:8")], "nothing to predict"),
        (&[("runs", "nosuch:4,other:8"), ("at", "16"), ("alloc_conf", &long_conf)], "alloc_conf"),
        (&[("runs", "nosuch:4,other:4"), ("at", "16")], "size 4"),
    ];
    for (query, what) in refused {
        let (status, refusal) = server.get_query("/predict", query).await;
        assert_eq!((status, kind(&refusal)), (StatusCode::BAD_REQUEST, "bad_request"), "{query:?}: {refusal}");
        assert!(refusal["error"].as_str().is_some_and(|e| e.contains(what)), "{query:?}: {refusal}");
    }
    let (status, missing) = server.get_query("/predict", &[("runs", "nosuch:4"), ("at", "16")]).await;
    assert_eq!((status, kind(&missing)), (StatusCode::NOT_FOUND, "not_found"), "{missing}");
    still_serves(&server, &id).await;
}

#[test]
fn regression_the_capture_module_spaces_the_snapshots_it_is_asked_for() {
    // The module the agent injects into the job: commands relayed in a
    // loop must not make the job dump continuously.
    let script = "import sys\n\
        sys.path.insert(0, sys.argv[1])\n\
        import vramscope_capture as v\n\
        limit = v.RateLimit(v.MAX_COMMANDED_DUMPS_PER_HOUR, min_gap_s=v.MIN_COMMANDED_GAP_S)\n\
        allowed = [t for t in range(0, 7200) if limit.allow(now=float(t))]\n\
        print(len(allowed), min(b - a for a, b in zip(allowed, allowed[1:])))\n";
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(common::workspace_root().join("assets/capture"))
        .output()
        .expect("python3");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let (count, gap) = text.trim().split_once(' ').expect("two numbers");
    // A request every second for two hours: at most 30 an hour, 5 s apart.
    assert_eq!(count, "60", "{text}");
    assert!(gap.parse::<u32>().expect("gap") >= 5, "{text}");
}

#[tokio::test]
async fn regression_a_client_trickling_its_headers_is_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = TestServer::start("slowloris", &[("VRAMSCOPE_HEADER_READ_TIMEOUT_SECS", "1")]);
    let id = victim(&server).await;
    let address = server.url.trim_start_matches("http://").to_owned();
    // Fifty connections that each send half a request and then wait.
    let mut held = Vec::new();
    for _ in 0..50 {
        let mut stream = tokio::net::TcpStream::connect(&address).await.expect("connect");
        stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ").await.expect("write");
        held.push(stream);
    }
    still_serves(&server, &id).await;
    for (i, mut stream) in held.into_iter().enumerate() {
        let mut buf = [0u8; 512];
        // The server closes it (after a 408 or without a word); before the
        // fix, this read waited forever.
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => continue,
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "connection {i} still open 10 s after its headers stalled");
    }
    still_serves(&server, &id).await;
}

/// A gauge or counter of the server's `/metrics` (with a token where the
/// server requires one).
async fn metric(server: &TestServer, name: &str, token: Option<&str>) -> u64 {
    server.metric(name, token).await
}

#[tokio::test]
async fn regression_the_snapshot_cache_is_bounded_in_bytes() {
    // Four parsed snapshots of any size were kept: four 1 GB files held
    // several GB. A budget of 2 MiB holds one small snapshot at a time.
    let server = TestServer::start("cache-bytes", &[("VRAMSCOPE_CACHE_BYTES", "2097152")]);
    let mut ids = Vec::new();
    for name in ["streams.pickle", "oom_leak.pickle", "mlp_train_all.pickle"] {
        let (status, answer) = server.upload(fixture(name), &format!("name={name}")).await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
        let id = answer["id"].as_str().expect("id").to_owned();
        let (status, window) = server.get(&format!("/snapshots/{id}/timeline?px=200")).await;
        assert_eq!(status, StatusCode::OK, "{window}");
        ids.push(id);
    }
    assert_eq!(metric(&server, "cached_snapshots", None).await, 1, "only the newest fits");
    // The evicted ones load again on demand.
    let (status, _) = server.get(&format!("/snapshots/{}/timeline?px=200", ids[0])).await;
    assert_eq!(status, StatusCode::OK);
    still_serves(&server, &ids[0]).await;
}

#[tokio::test]
async fn signed_links_open_one_snapshots_file_and_exports_without_a_token() {
    let dir = crate::common::server::unique_dir("links");
    let (viewer, uploader) = (create_token(&dir, "viewer"), create_token(&dir, "uploader"));
    let server = TestServer::start_in(&dir, &[("VRAMSCOPE_REQUIRE_TOKENS", "true")]);
    let bytes = fixture("oom_leak.pickle");
    let response = client()
        .post(server.api("/snapshots?name=a"))
        .bearer_auth(&uploader)
        .header("content-type", "application/octet-stream")
        .body(bytes.clone())
        .send()
        .await
        .expect("upload");
    let id = answer(response).await.1["id"].as_str().expect("id").to_owned();
    let (status, links) = answer(
        client().post(server.api(&format!("/snapshots/{id}/links"))).bearer_auth(&viewer).send().await.expect("links"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "a viewer may ask for links: {links}");
    let base = server.url.clone();
    let get = |path: String| {
        let url = format!("{base}{path}");
        async move { client().get(url).send().await.expect("get") }
    };
    let file = get(links["file"].as_str().expect("file").to_owned()).await;
    assert_eq!(file.status(), StatusCode::OK);
    assert_eq!(file.bytes().await.expect("bytes").as_ref(), bytes.as_slice());
    for what in ["report", "chart_png", "chart_svg"] {
        let response = get(links[what].as_str().expect("link").to_owned()).await;
        assert_eq!(response.status(), StatusCode::OK, "{what}");
    }
    // A signature is for its own path and time only.
    let file_link = links["file"].as_str().expect("file").to_owned();
    let moved = file_link.replacen("/file?", "/stats?", 1);
    assert_eq!(get(moved).await.status(), StatusCode::UNAUTHORIZED, "not a signable route");
    let on_report = file_link.replacen("/file?", "/report.html?", 1);
    assert_eq!(get(on_report).await.status(), StatusCode::UNAUTHORIZED, "signed for the file only");
    let later = file_link.replacen("expires=", "expires=9", 1);
    assert_eq!(get(later).await.status(), StatusCode::UNAUTHORIZED, "the expiry is signed");
    let (status, _) = server.get(&format!("/snapshots/{id}/file")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "the plain link still needs a token");
}

/// Regression: a snapshot's `vramscope_capture` key is copied into the
/// statistics the server stores per row and serves at `/stats`; a file
/// listing thousands of devices and processes made them as large.
#[tokio::test]
async fn regression_a_huge_capture_context_does_not_inflate_the_stored_statistics() {
    use crate::common::pickled::{dict, i};
    use serde_pickle::{SerOptions, Value as V};
    let process = |pid: u64| dict(vec![("pid", i(pid))]);
    let device = |d: u64| dict(vec![("device", i(d)), ("other_processes", V::List((0..300).map(process).collect()))]);
    let capture = dict(vec![("devices", V::List((0..1000).map(device).collect()))]);
    let root = dict(vec![
        ("segments", V::List(Vec::new())),
        ("device_traces", V::List(Vec::new())),
        ("vramscope_capture", capture),
    ]);
    let bytes = serde_pickle::value_to_vec(&root, SerOptions::new()).expect("pickle");
    let server = TestServer::start("capture-bomb", &[]);
    let victim = victim(&server).await;
    let (status, answer) = server.upload(bytes.clone(), "name=capture").await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let id = answer["id"].as_str().expect("id");
    let response = client().get(server.api(&format!("/snapshots/{id}/stats"))).send().await.expect("stats");
    assert_eq!(response.status(), StatusCode::OK);
    let body = response.bytes().await.expect("body");
    let stats: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(stats["capture"]["devices"].as_array().map(Vec::len), Some(64));
    assert!(body.len() < bytes.len() / 4, "{} bytes of statistics from a {}-byte file", body.len(), bytes.len());
    still_serves(&server, &victim).await;
}

/// Regression: the breakdown's categories and the pools map are built by
/// the first query of their kind and kept with the cached snapshot, but
/// the cache weighed a snapshot as it was loaded, so a few hundred MB per
/// big snapshot went uncounted in `cache_bytes`. They count once built.
#[tokio::test]
async fn regression_what_the_breakdown_and_pools_build_later_counts_in_the_cache_bytes() {
    let server = TestServer::start("cache-weight", &[]);
    let (status, answer) = server.upload(fixture("breakdown_python_after_step.pickle"), "name=weight").await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let id = answer["id"].as_str().expect("id").to_owned();
    let (status, _) = server.get(&format!("/snapshots/{id}/timeline?px=100")).await;
    assert_eq!(status, StatusCode::OK);
    let loaded = metric(&server, "cached_bytes", None).await;
    let (status, _) = server.get(&format!("/snapshots/{id}/breakdown?px=100")).await;
    assert_eq!(status, StatusCode::OK);
    let with_breakdown = metric(&server, "cached_bytes", None).await;
    // 2,000-odd allocations, 24 bytes a span.
    assert!(with_breakdown >= loaded + 40_000, "{loaded} then {with_breakdown}");
    let (status, _) = server.get(&format!("/snapshots/{id}/pools")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(metric(&server, "cached_bytes", None).await >= with_breakdown);
}

#[tokio::test]
async fn regression_a_stalled_upload_is_cut_off_and_its_staging_removed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // 1 GB declared, 4 MB sent, then nothing: twenty of these held their
    // staging for as long as the clients liked.
    let server = TestServer::start("stalled", &[("VRAMSCOPE_UPLOAD_IDLE_TIMEOUT_SECS", "1")]);
    let id = victim(&server).await;
    let address = server.url.trim_start_matches("http://").to_owned();
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut stream = tokio::net::TcpStream::connect(&address).await.expect("connect");
        let head = "POST /api/v1/snapshots HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n\
                    Content-Length: 1000000000\r\n\r\n";
        stream.write_all(head.as_bytes()).await.expect("head");
        stream.write_all(&vec![0x80u8; 4 << 20]).await.expect("some of the body");
        held.push(stream);
    }
    for (i, mut stream) in held.into_iter().enumerate() {
        let mut answer = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut answer)).await;
        assert!(closed.is_ok(), "upload {i} still open 20 s after it stalled");
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 400") && text.contains("upload_idle_timeout_secs"), "{text}");
    }
    let staging = server.data_dir.join("blobs/staging");
    assert_eq!(std::fs::read_dir(&staging).map(|d| d.count()).unwrap_or(0), 0, "staging emptied");
    still_serves(&server, &id).await;
}

#[tokio::test]
async fn regression_multipart_part_headers_are_bounded_and_never_echoed() {
    // A part whose Content-Disposition name is 16 MB passed the field limit
    // (it bounds a field's value) and was echoed back in the error; the
    // parser kept it whole and searched it again at every chunk.
    let server = TestServer::start("part-headers", &[]);
    let id = victim(&server).await;
    let form = |name: &str| {
        format!(
            "--XyZ\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\nvalue\r\n--XyZ\r\nContent-Disposition: \
             form-data; name=\"file\"; filename=\"a.pickle\"\r\n\r\nabc\r\n--XyZ--\r\n"
        )
    };
    let post = |body: String| {
        client()
            .post(server.api("/snapshots"))
            .header("content-type", "multipart/form-data; boundary=XyZ")
            .body(body)
            .send()
    };
    // 16 MB of name: refused once its first 8 KiB are seen. The server
    // answers while the client is still sending and closes the connection,
    // which can cut the answer short (a reset): a 400, or a closed
    // connection, never a read of the rest.
    match post(form(&"n".repeat(16 << 20))).await {
        Ok(response) => assert_eq!(response.status(), StatusCode::BAD_REQUEST),
        Err(e) => assert!(e.is_request() || e.is_body() || e.is_connect(), "{e}"),
    }
    // 9 KiB of name, a body the server reads whole before it answers: the
    // answer says why, and does not quote the name.
    let response = post(form(&"n".repeat(9 << 10))).await.expect("send");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let text = response.text().await.expect("text");
    assert!(text.contains("headers are longer than 8192 bytes"), "{}", &text[..text.len().min(300)]);
    assert!(text.len() < 1024, "the name is not echoed: {} bytes", text.len());
    // A field with a long but legal name, unknown: said, cut to 64 characters.
    let long = "m".repeat(4000);
    let body = format!(
        "--XyZ\r\nContent-Disposition: form-data; name=\"{long}\"\r\n\r\nv\r\n--XyZ\r\nContent-Disposition: \
         form-data; name=\"file\"; filename=\"a.pickle\"\r\n\r\nabc\r\n--XyZ--\r\n"
    );
    let response = client()
        .post(server.api("/snapshots"))
        .header("content-type", "multipart/form-data; boundary=XyZ")
        .body(body)
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let text = response.text().await.expect("text");
    assert!(text.contains("unknown form field") && text.len() < 1024, "{}", &text[..text.len().min(300)]);
    still_serves(&server, &id).await;
}

/// Every route that changes something (a route of `paths::ROUTES` or a
/// view's, asked with each write method) refuses a request without a token,
/// and refuses a viewer unless `paths::OPEN_TO_VIEWERS` declares it open:
/// a write route that forgot its role is still closed (`role::deny_by_default`).
#[tokio::test]
async fn write_routes_refuse_anonymous_and_viewers_unless_declared_open() {
    use vramscope_shared::api::paths;
    use vramscope_shared::views::view::{self, View, Visit};

    struct Routes(Vec<String>);
    impl Visit for Routes {
        fn visit<V: View>(&mut self) {
            self.0.push(paths::view_route(V::PATH));
        }
    }
    let dir = crate::common::server::unique_dir("deny-writes");
    let (viewer, uploader) = (create_token(&dir, "viewer"), create_token(&dir, "uploader"));
    let server = TestServer::start_in(&dir, &[("VRAMSCOPE_REQUIRE_TOKENS", "true")]);
    let response = client()
        .post(server.api("/snapshots?name=a"))
        .bearer_auth(&uploader)
        .header("content-type", "application/octet-stream")
        .body(fixture("streams.pickle"))
        .send()
        .await
        .expect("upload");
    let id = answer(response).await.1["id"].as_str().expect("id").to_owned();
    let mut routes = Routes(paths::ROUTES.iter().map(|r| (*r).to_owned()).collect());
    view::each(&mut routes);
    let fill = |route: &str| {
        route
            .replace("{id}", &id)
            .replace("{stack}", "0")
            .replace("{comment}", "c")
            .replace("{job}", "j")
            .replace("{source}", "s")
    };
    let mut refused_viewer = 0;
    for route in &routes.0 {
        for method in [reqwest::Method::POST, reqwest::Method::PUT, reqwest::Method::PATCH, reqwest::Method::DELETE] {
            let url = format!("{}{}", server.url, fill(route));
            let anonymous = client().request(method.clone(), &url).send().await.expect("anonymous");
            assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED, "{method} {route} without a token");
            let status =
                client().request(method.clone(), &url).bearer_auth(&viewer).send().await.expect("viewer").status();
            if paths::OPEN_TO_VIEWERS.contains(&(method.as_str(), route.as_str())) {
                assert_ne!(status, StatusCode::FORBIDDEN, "{method} {route} is declared open to viewers");
                continue;
            }
            assert!(
                status == StatusCode::FORBIDDEN || status == StatusCode::METHOD_NOT_ALLOWED,
                "{method} {route} by a viewer: {status}"
            );
            refused_viewer += usize::from(status == StatusCode::FORBIDDEN);
        }
    }
    // Upload, rename, delete, capture now: the walk reached the write routes.
    assert!(refused_viewer >= 4, "only {refused_viewer} write routes refused a viewer");
    let delete = client().delete(server.api(&format!("/snapshots/{id}"))).bearer_auth(&uploader).send().await;
    let (status, body) = answer(delete.expect("delete")).await;
    assert_eq!((status, kind(&body)), (StatusCode::FORBIDDEN, "forbidden"), "deleting needs an admin: {body}");
}

// ---- live telemetry: what one agent (or a holder of its token) can make the server hold

/// An agent's WebSocket on `server`, with `token` when given.
async fn agent_socket(
    server: &TestServer,
    token: Option<&str>,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let url = format!("{}/api/v1/agents/ws", server.url.replacen("http://", "ws://", 1));
    let mut request = url.into_client_request().expect("request");
    if let Some(token) = token {
        request.headers_mut().insert("authorization", format!("Bearer {token}").parse().expect("header"));
    }
    tokio_tungstenite::connect_async(request).await.expect("WebSocket").0
}

fn samples_frame(seq: u64, job: &str, ranks: std::ops::Range<i64>, per_source: i64, t0: i64) -> String {
    let sources: Vec<Value> = ranks
        .clone()
        .map(|r| json!({"job": job, "host": "h", "rank": r, "local_rank": r, "world_size": 1, "pid": 1}))
        .collect();
    let samples: Vec<Value> = ranks
        .flat_map(|r| {
            (0..per_source).map(
                move |k| json!({"source": format!("{job}--h--rank{r}"), "t_ms": t0 + k, "device": 0, "reserved": 1}),
            )
        })
        .collect();
    json!({"type": "samples", "seq": seq, "sources": sources, "samples": samples}).to_string()
}

/// The next text or close frame: (text, or the close code and reason).
async fn next_frame(
    socket: &mut tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
) -> Result<String, (u16, String)> {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    loop {
        match tokio::time::timeout(Duration::from_secs(30), socket.next()).await.expect("a frame within 30 s") {
            Some(Ok(Message::Text(text))) => return Ok(text.to_string()),
            Some(Ok(Message::Close(frame))) => {
                return Err(frame.map_or((1005, String::new()), |f| (u16::from(f.code), f.reason.to_string())));
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err((0, e.to_string())),
            None => return Err((1006, "closed".to_owned())),
        }
    }
}

/// Issue 44, item 7: a revoked token's open agent socket went on storing
/// batches; it is closed within a second, and nothing is stored after.
#[tokio::test]
async fn regression_a_revoked_tokens_agent_socket_is_closed() {
    use futures::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let dir = crate::common::server::unique_dir("ws-revoked");
    let token = create_token(&dir, "uploader");
    let id = token.split('_').nth(1).expect("token id").to_owned();
    let server = TestServer::start_in(&dir, &[("VRAMSCOPE_REQUIRE_TOKENS", "true")]);
    let mut socket = agent_socket(&server, Some(&token)).await;
    socket.send(Message::text(samples_frame(1, "revoked", 0..1, 3, 1000))).await.expect("send");
    assert!(next_frame(&mut socket).await.is_ok_and(|t| t.contains("ack")), "acknowledged before");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["token", "revoke", &id, "--data-dir"])
        .arg(&dir)
        .output()
        .expect("token revoke");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // A batch sent right after is not stored, and the socket is closed.
    drop(socket.send(Message::text(samples_frame(2, "revoked", 0..1, 3, 2000))).await);
    let (code, reason) = next_frame(&mut socket).await.expect_err("closed");
    assert_eq!((code, reason.as_str()), (1008, "the token of this connection was revoked"));
    let admin = create_token(&dir, "admin");
    let read = client().get(server.api("/live/revoked--h--rank0")).bearer_auth(&admin).send().await.expect("read");
    let read: Value = read.json().await.expect("JSON");
    let times: Vec<i64> =
        read["samples"].as_array().expect("samples").iter().filter_map(|s| s["t_ms"].as_i64()).collect();
    assert_eq!(times, [1000, 1001, 1002], "only the batch before the revocation");
}

/// Issue 44, items 5 and 6: a 3.9 MB job name, a hello of any length, and
/// 200,000 sources from one agent. A frame past a real agent's is refused
/// and its connection closed; a token creates at most
/// `telemetry_max_sources_per_token` sources; `/live` names at most a
/// thousand (with the total).
#[tokio::test]
async fn regression_an_agent_cannot_make_the_server_hold_unbounded_telemetry() {
    use futures::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let server = TestServer::start("ws-bounds", &[("VRAMSCOPE_TELEMETRY_MAX_SOURCES_PER_TOKEN", "1200")]);
    // Names and lists past any real agent's: refused, said in the close frame.
    for (frame, said) in [
        (
            json!({"type": "hello", "host": "h".repeat(300), "job": "j"}).to_string(),
            "a host name of 300 bytes; at most 256",
        ),
        (json!({"type": "hello", "host": "h", "job": "j".repeat(100_000)}).to_string(), "a job name of 100000 bytes"),
        (samples_frame(1, "many", 0..1025, 0, 0), "1025 sources in one frame; at most 1024"),
    ] {
        let mut socket = agent_socket(&server, None).await;
        socket.send(Message::text(frame)).await.expect("send");
        let (code, reason) = next_frame(&mut socket).await.expect_err("closed");
        assert!(code == 1008 && reason.starts_with(said), "{code} {reason:?}, expected {said:?}");
    }
    // A frame past 1 MiB is not read at all.
    let mut socket = agent_socket(&server, None).await;
    drop(
        socket.send(Message::text(json!({"type": "hello", "host": "h".repeat(2 << 20), "job": "j"}).to_string())).await,
    );
    assert!(next_frame(&mut socket).await.is_err(), "a 2 MiB frame closes the connection");
    // Sources past the token's share are refused, acknowledged all the same.
    let mut socket = agent_socket(&server, None).await;
    for (seq, first) in (0..3).map(|k| (k as u64 + 1, k * 1000)) {
        socket.send(Message::text(samples_frame(seq, "flood", first..first + 1000, 1, 1))).await.expect("send");
        assert!(next_frame(&mut socket).await.is_ok_and(|t| t.contains("ack")), "batch {seq} acknowledged");
    }
    let (_, live) = server.get("/live").await;
    let listed = live["sources"].as_array().map(Vec::len);
    assert_eq!((listed, live["total"].as_u64()), (Some(1000), Some(2000)), "at most a thousand listed, the total said");
    let (status, _) = server.get("/live/flood--h--rank2500").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "a source past the share was not created");
}

/// Issue 44, item 11: after a SIGKILL, staging files and partial index
/// files were removed only once an hour old. Those a process that is gone
/// wrote go at the next start; a live process's are kept.
#[tokio::test]
async fn regression_what_a_killed_server_left_goes_at_its_next_start() {
    use tokio::io::AsyncWriteExt;
    let dir = crate::common::server::unique_dir("killed-leftovers");
    let server = TestServer::start_in(&dir, &[]);
    let address = server.url.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address).await.expect("connect");
    let head = "POST /api/v1/snapshots HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n\
                Content-Length: 100000000\r\n\r\n";
    stream.write_all(head.as_bytes()).await.expect("head");
    stream.write_all(&vec![0x80u8; 16 << 20]).await.expect("part of the body");
    let staging = dir.join("blobs/staging");
    let staged = || std::fs::read_dir(&staging).map(|d| d.filter_map(Result::ok).count()).unwrap_or(0);
    for _ in 0..200 {
        if staged() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(staged(), 1, "the upload is staged");
    let killed = server.pid();
    server.kill();
    drop(stream);
    // A partial index of the killed process, and one of a live process (this test's).
    let indexes = dir.join("blobs/indexes");
    std::fs::create_dir_all(&indexes).expect("indexes");
    let sha = "a".repeat(64);
    std::fs::write(indexes.join(format!("{sha}.partial-{killed}-x")), vec![0u8; 1 << 20]).expect("partial");
    let live = indexes.join(format!("{sha}.partial-{}-y", std::process::id()));
    std::fs::write(&live, b"being written").expect("partial");
    let restarted = TestServer::start_in(&dir, &[]);
    assert_eq!(staged(), 0, "the killed upload's staging is gone at once");
    let mut left: Vec<String> = std::fs::read_dir(&indexes)
        .expect("indexes")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, [format!("{sha}.partial-{}-y", std::process::id())], "only the live process's partial file");
    let id = victim(&restarted).await;
    still_serves(&restarted, &id).await;
}

/// Issue 44, item 3: a client that hangs up stopped waiting for its
/// analysis, but its pool slot was let go while the thread ran on (six
/// predictions closed after a second: six busy threads beside a pool of
/// two). The slot now stays taken until the work ends: however many
/// clients hang up, no more analyses run at once than the pool has.
#[tokio::test]
async fn regression_clients_that_hang_up_cannot_run_more_analyses_than_the_pool() {
    let server = TestServer::start("hang-up", &[("VRAMSCOPE_ANALYSIS_CONCURRENCY", "1")]);
    let victim_id = victim(&server).await;
    let corpus = crate::common::large_corpus();
    let mut ids = Vec::new();
    for name in ["gpt_long.pickle", "gpt_varlen.pickle", "gpt_varlen_expandable.pickle"] {
        let id = server.upload_file(&corpus.join(name)).await;
        server.settled(&id).await;
        ids.push(id);
    }
    // Each asks for a replay of its own snapshot, and gives up at once.
    let impatient = reqwest::Client::builder().timeout(Duration::from_millis(300)).build().expect("client");
    let urls: Vec<String> = ids
        .iter()
        .enumerate()
        .flat_map(|(k, id)| {
            ["expandable_segments:True", "max_split_size_mb:64"]
                .map(|conf| server.api(&format!("/snapshots/{id}/whatif?alloc_conf={conf}&capacity={}GiB", 64 + k)))
        })
        .collect();
    let answers = futures::future::join_all(urls.iter().map(|url| impatient.get(url).send())).await;
    let gave_up = answers.iter().filter(|a| a.is_err()).count();
    assert!(gave_up >= 3, "only {gave_up} of {} clients gave up before their answer", answers.len());
    // The abandoned work runs to its end, one at a time.
    for _ in 0..1200 {
        if server.metric("analyses_running", None).await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(server.metric("analyses_running", None).await, 0, "the abandoned analyses ended");
    assert_eq!(server.metric("analyses_running_peak", None).await, 1, "never more at once than the pool's one thread");
    still_serves(&server, &victim_id).await;
}

/// The persisted index files of a server's local store, with their sizes.
fn index_sizes(server: &TestServer) -> Vec<u64> {
    let folder = server.data_dir.join("blobs/indexes");
    let entries = std::fs::read_dir(folder).map(|d| d.flatten().collect::<Vec<_>>()).unwrap_or_default();
    entries.iter().filter_map(|e| e.metadata().ok()).map(|m| m.len()).collect()
}

/// Issue 44, item 1: converting `allocator_settings` formatted a path for
/// every node, so a 2 MB file (a 100,001-byte key nested eight deep over a
/// million items) cost depth × key length × items; two such uploads held
/// the server's CPU for 100 s each while a benign upload waited. The path
/// is made only for an error now, and the converted value is bounded in
/// bytes: refused at once, with a short path, while a benign upload beside
/// them is stored.
#[tokio::test]
async fn regression_nested_settings_keys_cost_no_time_and_stall_no_upload() {
    let server = TestServer::start("settings-paths", &[("VRAMSCOPE_PARSE_TIMEOUT_SECS", "10")]);
    let id = victim(&server).await;
    let bomb = bombs::nested_settings(8, 100_001, 1_000_000);
    let (first, second, benign) = tokio::join!(
        server.upload(bomb.clone(), "name=nested-1"),
        server.upload(bomb, "name=nested-2"),
        server.upload(fixture("oom_leak.pickle"), "name=benign"),
    );
    for (status, refusal) in [first, second] {
        assert_eq!((status, kind(&refusal)), (StatusCode::UNPROCESSABLE_ENTITY, "memory_budget"), "{refusal}");
        let error = refusal["error"].as_str().unwrap_or_default();
        assert!(error.contains("allocator_settings.kkkk"), "the error names the path: {error}");
        assert!(error.len() < 1000, "the path's keys are cut: {} bytes", error.len());
    }
    assert_eq!(benign.0, StatusCode::CREATED, "{}", benign.1);
    still_serves(&server, &id).await;
}

/// Issue 44, item 1: the cancel flag was looked at only while bytes were
/// read, so `parse_timeout_secs` did not stop the conversion after them. A
/// 200 kB file whose segments share one list of 10,000 blocks converts
/// into a billion blocks; under a budget that allows gigabytes, the time
/// limit stops it (`parse_timeout`), before its memory grows.
#[tokio::test]
async fn regression_the_parse_timeout_holds_through_the_conversion() {
    let budget = (4u64 << 30).to_string();
    let env = [("VRAMSCOPE_PARSE_TIMEOUT_SECS", "1"), ("VRAMSCOPE_PARSE_MEMORY_BUDGET", budget.as_str())];
    let server = TestServer::start("conversion-timeout", &env);
    let id = victim(&server).await;
    let bomb = bombs::shared_blocks(100_000, 10_000);
    assert!(bomb.len() < 300_000, "{} bytes", bomb.len());
    let (status, refusal) = server.upload(bomb, "name=blocks").await;
    assert_eq!((status, kind(&refusal)), (StatusCode::UNPROCESSABLE_ENTITY, "parse_timeout"), "{refusal}");
    let peak = server.peak_rss();
    assert!(peak < 2 << 30, "server peak RSS {} MiB", peak >> 20);
    still_serves(&server, &id).await;
}

/// Issue 44, item 2: a string shared through the memo was copied at every
/// use, and every repeat of a top-level key made its own warning: 10 MB
/// files peaked at gigabytes past `parse_memory_budget` (one wrote a
/// 1.06 GB index of warnings), and a settings value made each
/// `/fragmentation` answer as large. Copies are charged to the budget,
/// warnings are kept once per key and bounded, and the settings shown in
/// an answer are cut.
#[tokio::test]
async fn regression_shared_strings_and_repeated_keys_stay_within_the_budget() {
    let budget = (256u64 << 20).to_string();
    let server = TestServer::start("shared-strings", &[("VRAMSCOPE_PARSE_MEMORY_BUDGET", budget.as_str())]);
    let id = victim(&server).await;
    for (name, bomb) in [
        ("strings", bombs::shared_setting_strings(256, 1_000_000)),
        ("annotations", bombs::shared_annotations(256, 1_000_000)),
    ] {
        let (status, refusal) = server.upload(bomb, &format!("name={name}")).await;
        assert_eq!((status, kind(&refusal)), (StatusCode::UNPROCESSABLE_ENTITY, "memory_budget"), "{name}: {refusal}");
    }
    // A million repeats of one 1 KB key: a snapshot (of nothing), stored
    // with one warning.
    let before = index_sizes(&server).len();
    let (status, answer) = server.upload(bombs::repeated_top_level_key(1024, 1_000_000), "name=keys").await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    // The index is written beside the answer.
    let mut sizes = index_sizes(&server);
    for _ in 0..100 {
        if sizes.len() > before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        sizes = index_sizes(&server);
    }
    assert_eq!(sizes.len(), before + 1, "its index is written");
    assert!(sizes.iter().all(|&s| s < 1 << 20), "index files of {sizes:?} bytes");
    // Settings of 3,000 copies of a 256-byte string (under the limit) on a
    // real snapshot: the panel's answer shows them cut.
    let mut file = fixture("streams.pickle");
    assert_eq!(file.pop(), Some(b'.'), "a pickle ends with STOP");
    let mut settings = bombs::unicode(b"allocator_settings");
    settings.extend_from_slice(b"}");
    settings.extend(bombs::unicode(b"x"));
    settings.extend_from_slice(b"](");
    for _ in 0..3000 {
        settings.extend(bombs::unicode(&[b's'; 256]));
    }
    settings.extend_from_slice(b"es");
    file.extend(settings);
    file.extend_from_slice(b"s.");
    let (status, answer) = server.upload(file, "name=settings").await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let with_settings = answer["id"].as_str().expect("id");
    let response =
        client().get(server.api(&format!("/snapshots/{with_settings}/fragmentation"))).send().await.expect("get");
    assert_eq!(response.status(), StatusCode::OK);
    let body = response.bytes().await.expect("body");
    let panel: Value = serde_json::from_slice(&body).expect("json");
    let raw = &panel["settings"]["raw"];
    assert_eq!(raw[0][0], "x", "{raw}");
    // 774 kB of text before: each value is cut to 512 characters.
    assert!(raw.to_string().len() < 1024, "settings of {} bytes in the answer", raw.to_string().len());
    assert!(body.len() < 256 << 10, "a {}-byte answer", body.len());
    assert!(server.peak_rss() < (256 + 256) << 20, "server peak RSS {} MiB", server.peak_rss() >> 20);
    still_serves(&server, &id).await;
}

/// A multipart body sent as `pieces`, `pause` apart (chunked: no length).
fn paced_form(pieces: Vec<Vec<u8>>, pause: Duration) -> reqwest::Body {
    use futures::StreamExt as _;
    let stream = futures::stream::iter(pieces.into_iter().enumerate()).then(move |(i, piece)| async move {
        if i > 0 {
            tokio::time::sleep(pause).await;
        }
        Ok::<_, std::io::Error>(piece)
    });
    reqwest::Body::wrap_stream(stream)
}

/// A form part's header section and value.
fn form_part(name: &str, value: &[u8]) -> Vec<u8> {
    let mut part = format!("--XyZ\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n").into_bytes();
    part.extend_from_slice(value);
    part.extend_from_slice(b"\r\n");
    part
}

/// Issue 44, item 4: the bytes before a form's first boundary were kept
/// whole and searched again at every read, counted by no limit (one
/// connection sent 425 MB in 60 s for 32.7 s of CPU), the part headers
/// were not counted in `max_upload_bytes`, and the idle limit covered a
/// whole field, so a client that never paused was told it sent nothing.
/// The preamble is bounded, every byte of the body counts, and the idle
/// limit restarts with each piece that arrives.
#[tokio::test]
async fn regression_a_forms_preamble_and_framing_are_bounded_and_the_idle_limit_restarts_on_data() {
    let env = [("VRAMSCOPE_UPLOAD_IDLE_TIMEOUT_SECS", "1"), ("VRAMSCOPE_MAX_UPLOAD_BYTES", "262144")];
    let server = TestServer::start("preamble", &env);
    let id = victim(&server).await;
    let post = |body: reqwest::Body| {
        client()
            .post(server.api("/snapshots"))
            .header("content-type", "multipart/form-data; boundary=XyZ")
            .body(body)
            .send()
    };
    // 1 MB of preamble in pieces: refused once past 8 KiB. (The answer may
    // come while the client sends, which can cut it short: a 400, or a
    // closed connection.)
    let preamble: Vec<Vec<u8>> = (0..16).map(|_| vec![b'p'; 64 << 10]).collect();
    match post(paced_form(preamble, Duration::ZERO)).await {
        Ok(response) => {
            assert_eq!(response.status(), StatusCode::BAD_REQUEST);
            let text = response.text().await.unwrap_or_default();
            assert!(text.is_empty() || text.contains("multipart_preamble_max_bytes"), "{text}");
        }
        Err(e) => assert!(e.is_request() || e.is_body() || e.is_connect(), "{e}"),
    }
    // 400 parts of 1 KB headers and a short value, then a small file: 400 kB
    // of framing, past the 256 KiB limit though the values are not.
    let padding = "p".repeat(1000);
    let mut pieces: Vec<Vec<u8>> = (0..400)
        .map(|_| {
            format!("--XyZ\r\nContent-Disposition: form-data; name=\"name\"\r\nX-Pad: {padding}\r\n\r\nn\r\n")
                .into_bytes()
        })
        .collect();
    pieces.push(form_part("file", &fixture("oom_leak.pickle")[..1000]));
    pieces.push(b"--XyZ--\r\n".to_vec());
    let response = post(paced_form(pieces, Duration::ZERO)).await.expect("send");
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // A field arriving 20 bytes every 0.25 s for 2.5 s, never silent for
    // the 1 s limit, then the file: stored.
    let mut pieces: Vec<Vec<u8>> = vec![b"--XyZ\r\nContent-Disposition: form-data; name=\"job\"\r\n\r\n".to_vec()];
    pieces.extend((0..10).map(|_| vec![b'j'; 20]));
    let mut rest = b"\r\n".to_vec();
    rest.extend(form_part("file", &fixture("fraction_oom.pickle")));
    rest.extend_from_slice(b"--XyZ--\r\n");
    pieces.push(rest);
    let response = post(paced_form(pieces, Duration::from_millis(250))).await.expect("send");
    let status = response.status();
    let answer: Value = response.json().await.unwrap_or(Value::Null);
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    still_serves(&server, &id).await;
}

/// Issue 44, item 8: a client sending a byte every 25 s is never silent
/// for the idle limit, so it held its upload, and the parse slot of its
/// upload's parse, for as long as it liked (the parse's time limit did not
/// stop a parse waiting for the client). The upload must keep an average
/// rate over a window (`upload_min_bytes_per_sec`, here a 3 s window), and
/// the parse lets go of its slot at its time limit.
#[tokio::test]
async fn regression_a_slow_drip_upload_is_cut_off_and_lets_go_of_its_parse_slot() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let env = [("VRAMSCOPE_PARSE_TIMEOUT_SECS", "1"), ("VRAMSCOPE_UPLOAD_RATE_WINDOW_SECS", "3")];
    let server = TestServer::start("drip", &env);
    let id = victim(&server).await;
    let parses = metric(&server, "parse_seconds_count", None).await;
    let address = server.url.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address).await.expect("connect");
    let head = "POST /api/v1/snapshots HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n\
                Content-Length: 1000000\r\n\r\n";
    stream.write_all(head.as_bytes()).await.expect("head");
    let file = fixture("streams.pickle");
    stream.write_all(&file[..100]).await.expect("a first piece");
    let (mut read, mut write) = stream.into_split();
    let drip = tokio::spawn(async move {
        for byte in &file[100..200] {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if write.write_all(&[*byte]).await.is_err() {
                break;
            }
        }
    });
    // The upload's parse, waiting on the client, stops at its limit.
    let mut ended = 0;
    for _ in 0..100 {
        ended = metric(&server, "parse_seconds_count", None).await - parses;
        if ended > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(ended, 1, "the drip's parse ended while its upload went on");
    let mut answer = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(30), read.read_to_end(&mut answer)).await;
    assert!(closed.is_ok(), "the drip still open 30 s on");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 400") && text.contains("upload_min_bytes_per_sec"), "{text}");
    drip.abort();
    let staging = server.data_dir.join("blobs/staging");
    assert_eq!(std::fs::read_dir(&staging).map(|d| d.count()).unwrap_or(0), 0, "staging emptied");
    still_serves(&server, &id).await;
}
