//! Team mode as `docs/team-setup.md` sets it up, run for real: the
//! configuration file is read from that page (with this test's own
//! PostgreSQL database, S3 bucket on moto, and endpoint substituted), the
//! tokens are made with `vramscope token create`, two instances serve, and a
//! third runs the retention policy. Then: uploads through one instance are
//! read through the other, a comment posted on A is listed by B with its
//! author, authorship rules hold, pins and comments protect snapshots from
//! retention, and the job page flags the leaking rank.
//!
//! Needs PostgreSQL and an S3 endpoint: `./scripts/test` starts both
//! (`scripts/services`) and exports their addresses. The page's load
//! balancer runs too: Debian's nginx (`/usr/sbin/nginx`, run as this user
//! with its files in a temp folder) from the page's configuration, in front
//! of the two instances; the other steps alternate between the instances.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::server::{TestServer, client};

/// One instance of the team: a server with the documented configuration.
fn start_instance(data_dir: &Path, config: &Path, env: &[(&str, String)]) -> TestServer {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    TestServer::start_with(data_dir, &["--config", &config.to_string_lossy()], &env)
}

fn scratch(tag: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("team-{tag}-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// The ```toml block of docs/team-setup.md with this test's services.
fn config_from_the_docs(db_url: &str, bucket: &str, s3: &str) -> String {
    let page = std::fs::read_to_string(crate::common::workspace_root().join("docs/team-setup.md"))
        .expect("docs/team-setup.md");
    let block = page.split("```toml\n").nth(1).and_then(|rest| rest.split("```").next()).expect("a toml block");
    let replaced = block
        .replace("postgres://vramscope@db.internal:5432/vramscope", db_url)
        .replace("s3://vramscope-snapshots/team", &format!("s3://{bucket}/team"))
        .replace("https://s3.internal", s3);
    // Every value the test relies on is really in the documented file.
    for (documented, ours) in [("db.internal", db_url), ("vramscope-snapshots", bucket), ("s3.internal", s3)] {
        assert!(block.contains(documented) && replaced.contains(ours), "docs/team-setup.md changed: {documented}");
    }
    replaced
}

/// `vramscope ARGS` with `env`; its stdout, or a failure with its stderr.
fn vramscope(args: &[&str], env: &[(&str, String)]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stderr(Stdio::piped())
        .output()
        .expect("run vramscope");
    assert!(out.status.success(), "vramscope {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8")
}

async fn send(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let response = request.send().await.expect("request");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn upload(instance: &TestServer, token: &str, bytes: Vec<u8>, query: &str) -> String {
    let request = client().post(instance.api(&format!("/snapshots?{query}"))).bearer_auth(token).body(bytes);
    let (status, answer) = send(request).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    answer["id"].as_str().expect("id").to_owned()
}

/// Keys of the objects in `bucket` (moto answers ListObjectsV2 in XML).
async fn bucket_keys(s3: &str, bucket: &str) -> Vec<String> {
    let xml = client().get(format!("{s3}/{bucket}?list-type=2")).send().await.expect("list").text().await.expect("xml");
    xml.split("<Key>").skip(1).filter_map(|rest| rest.split("</Key>").next()).map(str::to_owned).collect()
}

/// Keys of the snapshot files in `bucket` (not their persisted indexes).
async fn snapshot_keys(s3: &str, bucket: &str) -> Vec<String> {
    bucket_keys(s3, bucket).await.into_iter().filter(|k| k.contains("/snapshots/")).collect()
}

/// nginx in front of the instances, configured from the ```nginx block of
/// docs/team-setup.md (same upstream and proxy settings, loopback ports,
/// plain HTTP instead of TLS, its files in `dir`), killed when dropped.
struct LoadBalancer {
    child: Child,
    url: String,
    access_log: PathBuf,
}

impl Drop for LoadBalancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Debian's nginx binary (package nginx-light or nginx).
const NGINX: &str = "/usr/sbin/nginx";

impl LoadBalancer {
    fn start(dir: &Path, upstreams: [&TestServer; 2]) -> LoadBalancer {
        assert!(
            Path::new(NGINX).exists(),
            "{NGINX} is missing: the team test runs the documented load balancer (apt-get install nginx-light; \
             .ci/run installs it)"
        );
        let page = std::fs::read_to_string(crate::common::workspace_root().join("docs/team-setup.md"))
            .expect("docs/team-setup.md");
        let block = page.split("```nginx\n").nth(1).and_then(|rest| rest.split("```").next()).expect("an nginx block");
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("free port").local_addr().expect("addr").port();
        let address = |i: &TestServer| i.url.trim_start_matches("http://").to_owned();
        let documented = ["server 10.0.0.11:8080", "server 10.0.0.12:8080", "listen 443 ssl;", "ssl_certificate"];
        for text in documented {
            assert!(block.contains(text), "docs/team-setup.md changed: its nginx block lacks {text:?}");
        }
        let server_block: String = block
            .replace("server 10.0.0.11:8080", &format!("server {}", address(upstreams[0])))
            .replace("server 10.0.0.12:8080", &format!("server {}", address(upstreams[1])))
            .replace("listen 443 ssl;", &format!("listen 127.0.0.1:{port};"))
            .lines()
            .filter(|line| !line.contains("ssl_certificate"))
            .map(|line| format!("    {line}\n"))
            .collect();
        let d = dir.display();
        // As root, workers would run as nobody and could not write the temp folders.
        let root = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(2) == Some("0")))
            .unwrap_or(false);
        // One process (`master_process off`): killing the child stops nginx
        // entirely. With a master and a worker, the killed master left its
        // worker running, holding the output pipe of `cargo test | tee` in
        // scripts/test, so CI waited on it forever. Its messages go to
        // error.log (`-e`), none to the test's output.
        let config = format!(
            "daemon off;\nmaster_process off;\n{user}worker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 256; }}\n\
             http {{\n    log_format upstream '$upstream_addr $request_method $uri $status';\n    \
             access_log {d}/access.log upstream;\n    client_body_temp_path {d}/client_body;\n    \
             proxy_temp_path {d}/proxy;\n    fastcgi_temp_path {d}/fastcgi;\n    uwsgi_temp_path {d}/uwsgi;\n    \
             scgi_temp_path {d}/scgi;\n{server_block}}}\n",
            user = if root { "user root;\n" } else { "" },
        );
        let config_path = dir.join("nginx.conf");
        std::fs::write(&config_path, config).expect("write nginx.conf");
        let child = Command::new(NGINX)
            .arg("-p")
            .arg(dir)
            .arg("-e")
            .arg(dir.join("error.log"))
            .arg("-c")
            .arg(&config_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {NGINX}: {e}"));
        LoadBalancer { child, url: format!("http://127.0.0.1:{port}"), access_log: dir.join("access.log") }
    }

    fn api(&self, path: &str) -> String {
        format!("{}/api/v1{path}", self.url)
    }

    /// Waits for nginx to answer `/healthz` through an instance.
    async fn wait_ready(&mut self, dir: &Path) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
                panic!("nginx exited ({status}): {log}");
            }
            if let Ok(response) = client().get(format!("{}/healthz", self.url)).send().await
                && response.status() == StatusCode::OK
            {
                return;
            }
            assert!(Instant::now() < deadline, "nginx did not answer within 20 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `(upstream address, method, path, status)` of each proxied request.
    fn requests(&self) -> Vec<(String, String, String, u16)> {
        let log = std::fs::read_to_string(&self.access_log).unwrap_or_default();
        log.lines()
            .filter_map(|line| {
                let mut parts = line.split(' ');
                let (upstream, method, path, status) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
                Some((upstream.to_owned(), method.to_owned(), path.to_owned(), status.parse().ok()?))
            })
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_review_jobs_and_retention() {
    let pg = std::env::var("VRAMSCOPE_TEST_POSTGRES_URL")
        .expect("VRAMSCOPE_TEST_POSTGRES_URL is not set: run ./scripts/test, which starts PostgreSQL and an S3 server");
    let s3 = std::env::var("VRAMSCOPE_TEST_S3_ENDPOINT")
        .expect("VRAMSCOPE_TEST_S3_ENDPOINT is not set: run ./scripts/test, which starts PostgreSQL and an S3 server");
    let suffix = uuid::Uuid::now_v7().simple().to_string();
    let suffix = &suffix[suffix.len() - 12..];
    let database = format!("vt_team_{suffix}");
    let created = Command::new("psql").args([&pg, "-q", "-c", &format!("CREATE DATABASE {database}")]).output();
    let created = created.expect("psql");
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let db_url = format!("{}/{database}", pg.rsplit_once('/').expect("url").0);
    let bucket = format!("vt-team-{suffix}");
    let made = client().put(format!("{s3}/{bucket}")).send().await.expect("create bucket");
    assert!(made.status().is_success(), "bucket: {}", made.status());

    // Step 2: the documented file; secrets in the environment.
    let dir = scratch("config");
    let config = dir.join("team.toml");
    std::fs::write(&config, config_from_the_docs(&db_url, &bucket, &s3)).expect("write the config");
    let config_arg = config.to_string_lossy().into_owned();
    let env = vec![
        ("VRAMSCOPE_S3__ACCESS_KEY_ID", "test".to_owned()),
        ("VRAMSCOPE_S3__SECRET_ACCESS_KEY", "test".to_owned()),
        // moto speaks plain HTTP; a real bucket would not.
        ("VRAMSCOPE_S3__ALLOW_HTTP", "true".to_owned()),
    ];

    // Step 3: tokens, once, in the shared database.
    let token = |role: &str, name: &str| {
        let printed = vramscope(&["token", "create", "--config", &config_arg, "--role", role, "--name", name], &env);
        printed.trim().to_owned()
    };
    let ops = token("admin", "ops");
    let agents = token("uploader", "training-agents");
    let alice = token("viewer", "alice");
    let bob = token("viewer", "bob");

    // Step 4: two instances with the same file. The file's retention limits
    // (90 days, 500 GiB) delete nothing of today's small uploads.
    let a = start_instance(&scratch("a"), &config, &env);
    let b = start_instance(&scratch("b"), &config, &env);
    for instance in [&a, &b] {
        let (status, health) = send(client().get(format!("{}/healthz", instance.url))).await;
        assert_eq!((status, health["status"].as_str()), (StatusCode::OK, Some("ok")));
        let (status, _) = send(client().get(instance.api("/snapshots"))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "tokens are required");
    }

    // Step 6: a job of three ranks. Rank 0 through `vramscope upload` (A),
    // the same run gzip-compressed as rank 1 (B), the leaking run as rank 2 (A).
    let mlp = std::fs::read(crate::common::fixture_corpus().join("mlp_train_all.pickle")).expect("fixture");
    let rank0_file = dir.join("mlp_train_all.pickle");
    std::fs::write(&rank0_file, &mlp).expect("write");
    let answer = vramscope(
        &[
            "upload",
            &rank0_file.to_string_lossy(),
            "--server",
            &a.url,
            "--job",
            "llama-run7",
            "--host",
            "node-0",
            "--rank",
            "0",
        ],
        &[("VRAMSCOPE_TOKEN", agents.clone())],
    );
    let rank0: Value = serde_json::from_str(&answer).expect("upload answers JSON");
    let rank0 = rank0["id"].as_str().expect("id").to_owned();
    let rank1 =
        upload(&b, &agents, crate::common::gzip(&mlp), "name=rank1.pickle.gz&job=llama-run7&host=node-0&rank=1").await;
    let leak = std::fs::read(crate::common::fixture_corpus().join("oom_leak.pickle")).expect("fixture");
    let rank2 = upload(&a, &agents, leak, "name=rank2.pickle&job=llama-run7&host=node-1&rank=2&trigger=oom").await;
    let loose = std::fs::read(crate::common::fixture_corpus().join("streams.pickle")).expect("fixture");
    let loose = upload(&b, &agents, loose, "name=loose.pickle").await;

    // The job page, from the instance that did not take rank 2's upload.
    let (status, jobs) = send(client().get(b.api("/jobs")).bearer_auth(&alice)).await;
    assert_eq!(status, StatusCode::OK, "{jobs}");
    assert_eq!(
        (jobs[0]["job"].as_str(), jobs[0]["snapshots"].as_u64(), jobs[0]["ranks"].as_u64()),
        (Some("llama-run7"), Some(3), Some(3))
    );
    assert_eq!((jobs[0]["hosts"].as_u64(), jobs[0]["oom_snapshots"].as_u64()), (Some(2), Some(1)));
    assert_eq!(jobs.as_array().map(Vec::len), Some(1), "snapshots without a job are no job");
    let (status, job) = send(client().get(b.api("/jobs/llama-run7")).bearer_auth(&alice)).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    let members = job["members"].as_array().expect("members");
    let ranks: Vec<i64> = members.iter().filter_map(|m| m["rank"].as_i64()).collect();
    assert_eq!(ranks, [0, 1, 2]);
    let flagged: Vec<i64> =
        members.iter().filter(|m| m["diverges"] == true).filter_map(|m| m["rank"].as_i64()).collect();
    assert_eq!(flagged, [2], "{job}");
    // Figures from the corpus oracles (requested_bytes.all.peak).
    assert_eq!(members[0]["peak_requested_bytes"], 237_080_580);
    assert_eq!(members[1]["peak_requested_bytes"], 237_080_580, "gzip changes the file, not the figures");
    assert_eq!(members[2]["peak_requested_bytes"], 2_534_204_568u64);
    assert_eq!(members[2]["excess_bytes"], 2_534_204_568u64 - 237_080_580);
    assert_eq!(members[2]["ooms"], 1);
    assert_eq!(members[2]["compare_with"].as_str(), Some(rank0.as_str()), "nearest the median, rank order");
    assert_eq!(members[2]["snapshot_id"].as_str(), Some(rank2.as_str()));
    let (status, _) = send(client().get(b.api("/jobs/no-such-job")).bearer_auth(&alice)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Review: a viewer comments through A, on a moment and an allocation;
    // B lists it, with the token's name as the author.
    let comment = json!({ "body": "rank 1 looks like rank 0", "row": 1200, "time_us": 1_700_000_000_123_456i64,
                          "addr": 139_637_976_727_552u64 });
    let (status, posted) =
        send(client().post(a.api(&format!("/snapshots/{rank1}/comments"))).bearer_auth(&alice).json(&comment)).await;
    assert_eq!(status, StatusCode::CREATED, "{posted}");
    assert_eq!(posted["author"], "alice");
    let (status, thread) = send(client().get(b.api(&format!("/snapshots/{rank1}/comments"))).bearer_auth(&bob)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(thread.as_array().map(Vec::len), Some(1), "{thread}");
    assert_eq!(thread[0]["id"], posted["id"]);
    assert_eq!(
        (thread[0]["author"].as_str(), thread[0]["body"].as_str(), thread[0]["row"].as_u64()),
        (Some("alice"), Some("rank 1 looks like rank 0"), Some(1200))
    );
    assert_eq!(thread[0]["time_us"], 1_700_000_000_123_456i64);
    assert_eq!(thread[0]["addr"], 139_637_976_727_552u64);
    assert!(thread[0]["created_ms"].as_i64().is_some_and(|ms| ms > 1_700_000_000_000));

    // Step 5: the documented load balancer in front of A and B. An agent
    // uploads through it, people list and read through it, and nginx's log
    // shows the requests landing on both instances.
    let lb_dir = scratch("nginx");
    let mut lb = LoadBalancer::start(&lb_dir, [&a, &b]);
    lb.wait_ready(&lb_dir).await;
    let (status, _) = send(client().get(lb.api("/snapshots"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "tokens are required through the load balancer too");
    let compiled = std::fs::read(crate::common::fixture_corpus().join("compiled.pickle")).expect("fixture");
    let request = client().post(lb.api("/snapshots?name=via-lb.pickle&job=lb-run")).bearer_auth(&agents);
    let (status, answer) = send(request.body(compiled.clone())).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let via_lb = answer["id"].as_str().expect("id").to_owned();
    for _ in 0..3 {
        let (status, page) = send(client().get(lb.api("/snapshots?job=lb-run")).bearer_auth(&alice)).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(page["items"][0]["id"].as_str(), Some(via_lb.as_str()), "{page}");
        let (status, stats) = send(client().get(lb.api(&format!("/snapshots/{via_lb}/stats"))).bearer_auth(&bob)).await;
        assert_eq!(status, StatusCode::OK, "{stats}");
        let file = client().get(lb.api(&format!("/snapshots/{via_lb}/file"))).bearer_auth(&alice).send().await;
        assert_eq!(file.expect("file").bytes().await.expect("bytes").as_ref(), compiled.as_slice(), "byte for byte");
        let (_, thread) = send(client().get(lb.api(&format!("/snapshots/{rank1}/comments"))).bearer_auth(&bob)).await;
        assert_eq!(thread[0]["author"], "alice", "{thread}");
    }
    // An agent's WebSocket, upgraded through nginx.
    {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let ws_url = format!("{}/api/v1/agents/ws", lb.url.replacen("http://", "ws://", 1));
        let mut request = ws_url.into_client_request().expect("WebSocket request");
        let bearer = format!("Bearer {agents}").parse().expect("header");
        request.headers_mut().insert("authorization", bearer);
        let (mut socket, response) = tokio_tungstenite::connect_async(request).await.expect("WebSocket through nginx");
        assert_eq!(response.status().as_u16(), 101);
        socket.close(None).await.expect("close the WebSocket");
    }
    // nginx logs a WebSocket once it has closed.
    let deadline = Instant::now() + Duration::from_secs(10);
    let requests = loop {
        let requests = lb.requests();
        if requests.iter().any(|(_, _, path, _)| path == "/api/v1/agents/ws") || Instant::now() > deadline {
            break requests;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let api: Vec<_> = requests.iter().filter(|(_, _, path, _)| path.starts_with("/api/v1/snapshots")).collect();
    assert!(requests.iter().any(|(_, _, path, status)| path == "/api/v1/agents/ws" && *status == 101), "{requests:?}");
    assert_eq!(api.len(), 1 + 1 + 3 * 4, "{requests:?}");
    assert!(api.iter().skip(1).all(|(_, _, _, status)| *status == 200 || *status == 201), "{requests:?}");
    for instance in [&a, &b] {
        let address = instance.url.trim_start_matches("http://");
        assert!(api.iter().any(|(upstream, ..)| upstream == address), "no request reached {address}: {requests:?}");
    }
    // Its file is not the others': out of the retention figures below.
    let (status, _) = send(client().delete(lb.api(&format!("/snapshots/{via_lb}"))).bearer_auth(&ops)).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    drop(lb);

    // Bad comments are refused with a reason.
    for (body, why) in [(json!({ "body": "  " }), "must not be empty"), (json!({ "text": "x" }), "comment body")] {
        let request = client().post(a.api(&format!("/snapshots/{rank1}/comments"))).bearer_auth(&alice).json(&body);
        let (status, error) = send(request).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
        assert!(error["error"].as_str().is_some_and(|e| e.contains(why)), "{error}");
    }
    let (status, _) = send(client().post(a.api("/snapshots/nope/comments")).bearer_auth(&alice).json(&comment)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Authorship: bob (a viewer) may not delete alice's comment; bob's own
    // he may; an admin may delete anyone's.
    let cid = posted["id"].as_str().expect("comment id");
    let (status, _) =
        send(client().delete(b.api(&format!("/snapshots/{rank1}/comments/{cid}"))).bearer_auth(&bob)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let request = client().post(b.api(&format!("/snapshots/{loose}/comments"))).bearer_auth(&bob);
    let (status, own) = send(request.json(&json!({ "body": "mine" }))).await;
    assert_eq!(status, StatusCode::CREATED);
    let own_id = own["id"].as_str().expect("id");
    let (status, _) =
        send(client().delete(a.api(&format!("/snapshots/{loose}/comments/{own_id}"))).bearer_auth(&bob)).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, left) = send(client().get(a.api(&format!("/snapshots/{loose}/comments"))).bearer_auth(&bob)).await;
    assert_eq!(left, json!([]));
    let request = client().post(a.api(&format!("/snapshots/{loose}/comments"))).bearer_auth(&bob);
    let (_, other) = send(request.json(&json!({ "body": "to be moderated" }))).await;
    let other_id = other["id"].as_str().expect("id");
    let (status, _) =
        send(client().delete(b.api(&format!("/snapshots/{loose}/comments/{other_id}"))).bearer_auth(&ops)).await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    // Pins: uploaders pin, viewers may not; the list filters on them.
    let pin = json!({ "pinned": true });
    let (status, _) = send(client().patch(a.api(&format!("/snapshots/{rank0}"))).bearer_auth(&alice).json(&pin)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, pinned) =
        send(client().patch(a.api(&format!("/snapshots/{rank0}"))).bearer_auth(&agents).json(&pin)).await;
    assert_eq!((status, &pinned["pinned"]), (StatusCode::OK, &json!(true)), "{pinned}");
    let (_, page) = send(client().get(b.api("/snapshots?pinned=true")).bearer_auth(&alice)).await;
    let ids: Vec<&str> = page["items"].as_array().expect("items").iter().filter_map(|s| s["id"].as_str()).collect();
    assert_eq!(ids, [rank0.as_str()]);

    // Retention, previewed: everything but the pinned and the commented
    // snapshot would go under a 1-byte budget; nothing is deleted yet.
    let sha_of = |bytes: &[u8]| {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(bytes))
    };
    let keys_before = snapshot_keys(&s3, &bucket).await;
    assert_eq!(keys_before.len(), 4, "{keys_before:?}");
    // Regression: one viewer's comment kept a snapshot from retention for
    // ever. Alice's (a viewer's) does not; an uploader's does.
    let dry = vramscope(&["retention", "--config", &config_arg, "--dry-run", "--max-bytes", "1"], &env);
    assert!(dry.contains("would delete 3 snapshot(s)") && dry.contains(&rank1), "{dry}");
    let keep = json!({ "body": "keep: the reference run of this job" });
    let (status, kept) =
        send(client().post(b.api(&format!("/snapshots/{rank1}/comments"))).bearer_auth(&agents).json(&keep)).await;
    assert_eq!(status, StatusCode::CREATED, "{kept}");
    let dry = vramscope(&["retention", "--config", &config_arg, "--dry-run", "--max-bytes", "1"], &env);
    assert!(dry.contains("would delete 2 snapshot(s)"), "{dry}");
    assert!(dry.contains(&rank2) && dry.contains(&loose), "{dry}");
    assert!(dry.contains("over retention_max_bytes = 1 B"), "{dry}");
    assert!(dry.contains(&format!("{rank0}  mlp_train_all.pickle  pinned")), "{dry}");
    assert!(dry.contains(&format!("{rank1}  rank1.pickle.gz  1 comment")), "{dry}");
    let (_, page) = send(client().get(a.api("/snapshots")).bearer_auth(&alice)).await;
    assert_eq!(page["items"].as_array().map(Vec::len), Some(4), "a dry run deletes nothing");

    // A third instance with a policy (as the environment sets it) applies it
    // for all: A and B see the deletions, the protected two stay.
    let mut policy_env = env.clone();
    policy_env.push(("VRAMSCOPE_RETENTION_MAX_BYTES", "1".to_owned()));
    policy_env.push(("VRAMSCOPE_RETENTION_INTERVAL_SECS", "1".to_owned()));
    let c = start_instance(&scratch("c"), &config, &policy_env);
    let deadline = Instant::now() + Duration::from_secs(30);
    let remaining = loop {
        let (_, page) = send(client().get(b.api("/snapshots")).bearer_auth(&alice)).await;
        let mut ids: Vec<String> = page["items"]
            .as_array()
            .expect("items")
            .iter()
            .filter_map(|s| s["id"].as_str().map(str::to_owned))
            .collect();
        ids.sort();
        if ids.len() == 2 || Instant::now() > deadline {
            break ids;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut expected = vec![rank0.clone(), rank1.clone()];
    expected.sort();
    assert_eq!(remaining, expected, "the pinned and the commented snapshot survive, nothing else");
    for gone in [&rank2, &loose] {
        let (status, _) = send(client().get(a.api(&format!("/snapshots/{gone}"))).bearer_auth(&alice)).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    // Their files left the bucket; the survivors' stayed, byte for byte.
    let keys_after = bucket_keys(&s3, &bucket).await;
    let leak_sha = sha_of(&std::fs::read(crate::common::fixture_corpus().join("oom_leak.pickle")).expect("fixture"));
    // Neither the file nor its persisted index (indexes/<sha256>) is left.
    assert!(!keys_after.iter().any(|k| k.contains(&leak_sha)), "{keys_after:?}");
    assert!(keys_after.iter().any(|k| k.contains(&sha_of(&mlp))), "{keys_after:?}");
    assert_eq!(snapshot_keys(&s3, &bucket).await.len(), 2, "{keys_after:?}");
    let back = client().get(a.api(&format!("/snapshots/{rank0}/file"))).bearer_auth(&alice).send().await;
    assert_eq!(back.expect("file").bytes().await.expect("bytes").as_ref(), mlp.as_slice());
    // The comment still answers from either instance, and from C.
    let (_, thread) = send(client().get(c.api(&format!("/snapshots/{rank1}/comments"))).bearer_auth(&alice)).await;
    assert_eq!(thread[0]["body"], "rank 1 looks like rank 0");
    // Unpinned, rank 0 goes at the next run.
    let unpin = json!({ "pinned": false });
    let (status, _) =
        send(client().patch(b.api(&format!("/snapshots/{rank0}"))).bearer_auth(&agents).json(&unpin)).await;
    assert_eq!(status, StatusCode::OK);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, _) = send(client().get(a.api(&format!("/snapshots/{rank0}"))).bearer_auth(&alice)).await;
        if status == StatusCode::NOT_FOUND {
            break;
        }
        assert!(Instant::now() < deadline, "the unpinned snapshot was not deleted within 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, _) = send(client().get(a.api(&format!("/snapshots/{rank1}"))).bearer_auth(&alice)).await;
    assert_eq!(status, StatusCode::OK, "the commented one stays");

    // A parse on another instance: D parses an upload in the background,
    // and B, asked to hold the statistics until it ends, is woken by none
    // of its own parses: it reads the shared row again every second.
    drop(c);
    let mut parse_env = env.clone();
    parse_env.push(("VRAMSCOPE_INLINE_PARSE_MAX_BYTES", "0".to_owned()));
    let d = start_instance(&scratch("d"), &config, &parse_env);
    let gpt_long = std::fs::read(crate::common::large_corpus().join("gpt_long.pickle")).expect("gpt_long");
    let parsed_on_d = upload(&d, &agents, gpt_long, "name=gpt_long.pickle").await;
    let waited = client().get(b.api(&format!("/snapshots/{parsed_on_d}/stats?wait=10"))).bearer_auth(&alice);
    let (status, stats) = send(waited).await;
    assert_eq!(
        (status, &stats["file"]),
        (StatusCode::OK, &json!("gpt_long.pickle")),
        "B waited for D's parse: {stats}"
    );
}

/// No Docker engine runs here, so the image is not built; this keeps the
/// `Dockerfile` true to what the suite does run: the toolchain of the
/// workspace, `scripts/build-frontend` and the locked release build, the
/// health route, a non-root user, the data volume, and a `.dockerignore`
/// that keeps the test targets cargo needs to load the manifest.
#[test]
fn dockerfile_runs_the_commands_the_suite_runs() {
    let root = crate::common::workspace_root();
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).expect("Dockerfile");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let rust_version = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .expect("rust-version in the workspace manifest");
    assert!(dockerfile.contains(&format!("FROM rust:{rust_version}-bookworm AS build")), "builder toolchain");
    let runs: Vec<&str> = dockerfile.lines().filter(|l| l.starts_with("RUN ")).collect();
    assert!(runs.contains(&"RUN ./scripts/build-frontend"), "{runs:?}");
    assert!(runs.iter().any(|r| r.starts_with("RUN cargo build --release --locked -p vramscope")), "{runs:?}");
    let script = root.join("scripts/build-frontend");
    use std::os::unix::fs::PermissionsExt;
    assert!(script.metadata().expect("scripts/build-frontend").permissions().mode() & 0o111 != 0, "executable");
    let ci = std::fs::read_to_string(root.join(".ci/run")).expect(".ci/run");
    assert!(ci.contains("./scripts/test"), ".ci/run runs the test script");
    let test_script = std::fs::read_to_string(root.join("scripts/test")).expect("scripts/test");
    assert!(test_script.contains("build-frontend"), "scripts/test builds the dashboard the same way");

    for needed in [
        "FROM debian:bookworm-slim",
        "USER vramscope",
        "VOLUME /data",
        "EXPOSE 8080",
        "VRAMSCOPE_BIND=0.0.0.0:8080",
        "http://127.0.0.1:8080/healthz",
        r#"ENTRYPOINT ["vramscope", "serve"]"#,
    ] {
        assert!(dockerfile.contains(needed), "Dockerfile lacks {needed:?}");
    }
    let ignore = std::fs::read_to_string(root.join(".dockerignore")).expect(".dockerignore");
    let ignored: Vec<&str> = ignore.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).collect();
    assert!(ignored.contains(&"target/"), "{ignored:?}");
    for kept in ["tests/", "server/", "shared/", "frontend/", "scripts/", "assets/"] {
        let whole = |i: &&str| *i == kept || *i == kept.trim_end_matches('/') || *i == format!("{kept}*");
        assert!(!ignored.iter().any(whole), "{kept} must reach the build: {ignored:?}");
    }
}

/// One person's server (SQLite and a folder): `vramscope retention` run
/// beside it applies the policy once, says what it did, keeps the pinned
/// snapshot, and removes the deleted one's file; without a policy it
/// refuses with a sentence saying what to set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_command_on_a_single_server() {
    let data = scratch("single");
    let data_arg = data.to_string_lossy().into_owned();
    let server = TestServer::start_in(&data, &[]);
    // Loopback without tokens: no Authorization header at all.
    let post = |file: &str, name: &str| {
        let bytes = std::fs::read(crate::common::fixture_corpus().join(file)).expect("fixture");
        client().post(server.api(&format!("/snapshots?name={name}"))).body(bytes)
    };
    let (_, keep) = send(post("streams.pickle", "keep")).await;
    let (_, drop) = send(post("compiled.pickle", "drop")).await;
    let (keep, drop) = (keep["id"].as_str().expect("id").to_owned(), drop["id"].as_str().expect("id").to_owned());
    let (status, _) =
        send(client().patch(server.api(&format!("/snapshots/{keep}"))).json(&json!({ "pinned": true }))).await;
    assert_eq!(status, StatusCode::OK);
    let files = || -> Vec<String> {
        let dir = data.join("blobs/snapshots");
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        names.sort();
        names
    };
    assert_eq!(files().len(), 2, "{:?}", files());

    let refused = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["retention", "--data-dir", &data_arg])
        .output()
        .expect("run vramscope retention");
    assert_eq!(refused.status.code(), Some(1));
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("no retention policy: set retention_days or retention_max_bytes"), "{why}");

    let done = vramscope(&["retention", "--data-dir", &data_arg, "--max-bytes", "1", "--json"], &[]);
    let done: Value = serde_json::from_str(&done).expect("--json prints one object");
    assert_eq!(done["applied"]["deleted"], json!([drop]));
    assert_eq!(done["plan"]["spared"][0]["reason"], "pinned");
    assert_eq!(done["plan"]["still_over_budget"], true, "the pinned file alone is over 1 byte");
    let (status, _) = send(client().get(server.api(&format!("/snapshots/{drop}")))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = send(client().get(server.api(&format!("/snapshots/{keep}")))).await;
    assert_eq!(status, StatusCode::OK);
    let streams = std::fs::read(crate::common::fixture_corpus().join("streams.pickle")).expect("fixture");
    use sha2::Digest;
    assert_eq!(files(), [hex::encode(sha2::Sha256::digest(&streams))], "only the kept snapshot's file is left");
}
