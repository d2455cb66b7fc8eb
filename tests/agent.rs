//! `vramscope agent` end to end on this machine: a real `vramscope serve`,
//! the real agent binary, and a real child process (`fixtures/fake_job.py`)
//! that loads the real `vramscope_capture` module through the agent's
//! sitecustomize and speaks the socket protocol. Only torch is replaced (no
//! GPU here): the fake job's allocator figures are made up and its
//! snapshots are a real snapshot fixture. The GPU runs are in `tests/gpu/`.

use std::io::{BufRead, Read};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::server::TestServer;

fn unique_dir(tag: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("agent-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

fn fake_job() -> String {
    crate::common::workspace_root().join("tests/fixtures/fake_job.py").to_string_lossy().into_owned()
}

/// A snapshot fixture's path (leaked: a handful per test run, and it lets
/// the argument lists stay plain `&str` slices).
fn fixture(name: &str) -> &'static str {
    crate::common::fixture_corpus().join(name).to_string_lossy().into_owned().leak()
}

fn host() -> String {
    nix::unistd::gethostname().expect("hostname").into_string().expect("utf-8 hostname")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

fn get(url: &str) -> Value {
    runtime().block_on(async {
        let response = reqwest::get(url).await.unwrap_or_else(|e| panic!("GET {url}: {e}"));
        assert!(response.status().is_success(), "GET {url}: {}", response.status());
        response.json::<Value>().await.expect("json")
    })
}

fn post(url: &str) -> (u16, Value) {
    runtime().block_on(async {
        let response = reqwest::Client::new().post(url).send().await.unwrap_or_else(|e| panic!("POST {url}: {e}"));
        let status = response.status().as_u16();
        (status, response.json::<Value>().await.unwrap_or(Value::Null))
    })
}

/// The agent's command line: `vramscope agent --server URL ... -- python3 fake_job.py ...`.
fn agent(server: &str, job: &str, spool: &Path, agent_args: &[&str], job_args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_vramscope"));
    command
        .args(["agent", "--server", server, "--job", job, "--interval", "200ms", "--spool-dir"])
        .arg(spool)
        .args(agent_args)
        .args(["--", "python3", &fake_job()])
        .args(job_args)
        .env_remove("PYTHONPATH")
        .stdin(Stdio::null());
    command
}

fn run(mut command: Command) -> Output {
    command.output().expect("run the agent")
}

/// Snapshots of `job`, oldest first.
fn snapshots(server: &str, job: &str) -> Vec<Value> {
    let page = get(&format!("{server}/api/v1/snapshots?job={job}&limit=500"));
    let mut items = page["items"].as_array().expect("items").clone();
    items.reverse();
    items
}

fn samples(server: &str, source: &str) -> Vec<Value> {
    get(&format!("{server}/api/v1/live/{source}"))["samples"].as_array().expect("samples").clone()
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn spool_files(spool: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(spool)
        .expect("spool")
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn the_job_runs_unchanged_and_its_snapshots_and_telemetry_reach_the_server() {
    let dir = unique_dir("basic");
    let server = TestServer::start_on(&dir.join("data"), "127.0.0.1:0", &[], &[]);
    let spool = dir.join("spool");
    let job_args = ["--seconds", "2.5", "--peak", "0.9", "--exit-code", "3", "--manual"];
    let job_args = [&job_args[..], &["--snapshot", fixture("streams.pickle")]].concat();
    let output = run(agent(&server.url, "basic", &spool, &["--threshold", "0.6"], &job_args));
    let stderr = String::from_utf8_lossy(&output.stderr);

    // The job's exit code and output come through untouched.
    assert_eq!(output.status.code(), Some(3), "stderr: {stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "fake_job: hello\n");
    assert!(stderr.contains("fake_job: to stderr\n"), "{stderr}");
    // No GPU here: the agent says so once and carries on.
    assert_eq!(stderr.matches("NVML is not available").count(), 1, "{stderr}");

    // A manual snapshot, then one pre-OOM snapshot (hysteresis: the
    // reserved curve stays above the threshold, so it fires once).
    let snaps = snapshots(&server.url, "basic");
    let triggers: Vec<&str> = snaps.iter().map(|s| s["trigger"].as_str().expect("trigger")).collect();
    assert_eq!(triggers, ["manual", "threshold"], "{snaps:?}");
    for snap in &snaps {
        assert_eq!(snap["job"], "basic");
        assert_eq!(snap["host"], host());
        assert_eq!(snap["rank"], Value::Null);
        assert_eq!(snap["status"], "ready");
        assert!(snap["tags"].as_array().expect("tags").contains(&Value::from("agent")));
    }
    let stats = get(&format!("{}/api/v1/snapshots/{}/stats", server.url, snaps[1]["id"].as_str().expect("id")));
    assert_eq!(stats["devices"][0]["trace_entries"], 1727, "the fixture's trace, parsed by the server");
    assert_eq!(spool_files(&spool), Vec::<String>::new(), "everything delivered, the spool is empty");

    // Telemetry: one source, labelled, every sample of the run in order.
    let live = get(&format!("{}/api/v1/live", server.url));
    let sources = live["sources"].as_array().expect("sources");
    assert_eq!(sources.len(), 1, "{live}");
    let source = sources[0]["source"].as_str().expect("source");
    assert!(source.starts_with(&format!("basic--{}--pid", host())), "{source}");
    assert_eq!(sources[0]["connected"], false, "the agent is gone");
    let samples = samples(&server.url, source);
    assert!(samples.len() >= 8, "{} samples in 2.5 s at 200 ms", samples.len());
    let reserved: Vec<i64> = samples.iter().map(|s| s["reserved"].as_i64().expect("reserved")).collect();
    assert!(reserved.windows(2).all(|w| w[0] <= w[1]), "reserved grows: {reserved:?}");
    assert_eq!(samples[0]["device_total"], 1i64 << 30);
    let read = get(&format!("{}/api/v1/live/{source}", server.url));
    let marker_ids: Vec<&Value> = read["snapshots"].as_array().expect("markers").iter().map(|m| &m["id"]).collect();
    assert_eq!(marker_ids, snaps.iter().map(|s| &s["id"]).collect::<Vec<_>>(), "markers link the snapshots");
}

#[test]
fn regression_a_threshold_crossed_between_two_samples_is_not_missed() {
    // Reserved memory reads 10% at every sample, but the allocator's peak
    // says it reached 97% between two of them (0.3 s in): the sample after
    // the spike sees the peak move and takes the threshold snapshot.
    let dir = unique_dir("spike");
    let server = TestServer::start_on(&dir.join("data"), "127.0.0.1:0", &[], &[]);
    let spool = dir.join("spool");
    let job_args = ["--seconds", "1.5", "--spike", "0.97", "--snapshot", fixture("streams.pickle")];
    let output = run(agent(&server.url, "spike", &spool, &["--threshold", "0.9"], &job_args));
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let snaps = snapshots(&server.url, "spike");
    let triggers: Vec<&str> = snaps.iter().map(|s| s["trigger"].as_str().expect("trigger")).collect();
    assert_eq!(triggers, ["threshold"], "one threshold snapshot for the spike: {snaps:?}");
    let live = get(&format!("{}/api/v1/live", server.url));
    let source = live["sources"][0]["source"].as_str().expect("source").to_owned();
    let reserved: Vec<i64> =
        samples(&server.url, &source).iter().map(|s| s["reserved"].as_i64().expect("reserved")).collect();
    assert!(reserved.iter().all(|&r| r == (1 << 30) / 10), "no sample saw the spike itself: {reserved:?}");
}

#[test]
fn regression_a_job_shorter_than_one_interval_registers_its_source_and_its_spike() {
    // The job starts its capture and returns before the first sample (the
    // interval is 30 s): the capture's exit handler takes a last sample,
    // which registers the source and, since the peak crossed the
    // threshold, takes the threshold snapshot on the way out.
    let dir = unique_dir("quick");
    let server = TestServer::start_on(&dir.join("data"), "127.0.0.1:0", &[], &[]);
    let spool = dir.join("spool");
    let mut command = Command::new(env!("CARGO_BIN_EXE_vramscope"));
    command
        .args(["agent", "--server", &server.url, "--job", "quick", "--interval", "30s", "--threshold", "0.9"])
        .arg("--spool-dir")
        .arg(&spool)
        .args(["--", "python3", &fake_job(), "--quick", "--spike", "0.97", "--snapshot", fixture("streams.pickle")])
        .env_remove("PYTHONPATH")
        .stdin(Stdio::null());
    let output = run(command);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let live = get(&format!("{}/api/v1/live", server.url));
    let sources = live["sources"].as_array().expect("sources");
    assert_eq!(sources.len(), 1, "the job's source is registered: {live}");
    let source = sources[0]["source"].as_str().expect("source");
    assert!(!samples(&server.url, source).is_empty(), "its last sample arrived");
    let snaps = snapshots(&server.url, "quick");
    let triggers: Vec<&str> = snaps.iter().map(|s| s["trigger"].as_str().expect("trigger")).collect();
    assert_eq!(triggers, ["threshold"], "{snaps:?}");
}

#[test]
fn two_ranks_are_labelled_and_the_leaking_one_captures_both() {
    let dir = unique_dir("ranks");
    let server = TestServer::start_on(&dir.join("data"), "127.0.0.1:0", &[], &[]);
    let spool = dir.join("spool");
    let job_args = ["--ranks", "2", "--leak-rank", "1", "--seconds", "3", "--peak", "0.95"];
    let job_args = [&job_args[..], &["--snapshot", fixture("streams.pickle")]].concat();
    let output = run(agent(&server.url, "ranks", &spool, &["--threshold", "0.5"], &job_args));
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));

    let snaps = snapshots(&server.url, "ranks");
    let mut seen: Vec<(i64, &str, bool)> = snaps
        .iter()
        .map(|s| {
            let peer = s["tags"].as_array().expect("tags").contains(&Value::from("peer-capture"));
            (s["rank"].as_i64().expect("rank"), s["trigger"].as_str().expect("trigger"), peer)
        })
        .collect();
    seen.sort();
    // Rank 1 crossed the threshold; the agent asked rank 0 for its snapshot too.
    assert_eq!(seen, [(0, "threshold", true), (1, "threshold", false)], "{snaps:?}");

    let live = get(&format!("{}/api/v1/live", server.url));
    let mut ranks: Vec<(i64, i64)> = live["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .map(|s| (s["rank"].as_i64().expect("rank"), s["world_size"].as_i64().expect("world size")))
        .collect();
    ranks.sort();
    assert_eq!(ranks, [(0, 2), (1, 2)]);
    let leak = samples(&server.url, &format!("ranks--{}--rank1", host()));
    let steady = samples(&server.url, &format!("ranks--{}--rank0", host()));
    let last = |s: &[Value]| s.last().expect("samples")["reserved"].as_i64().expect("reserved");
    assert!(last(&leak) > last(&steady), "the leaking rank's stream shows the leak");
}

#[test]
fn a_server_killed_during_the_run_loses_nothing() {
    let dir = unique_dir("killed");
    let data = dir.join("data");
    let port = free_port();
    let bind = format!("127.0.0.1:{port}");
    let server = TestServer::start_on(&data, &bind, &[], &[]);
    let url = server.url.clone();
    let spool = dir.join("spool");
    let job_args = ["--seconds", "6", "--peak", "0.9", "--manual"];
    let job_args = [&job_args[..], &["--snapshot", fixture("streams.pickle")]].concat();
    let mut command = agent(&url, "killed", &spool, &["--threshold", "0.7", "--drain-timeout", "60s"], &job_args);
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("agent");

    // Down from 1.5 s to 4.5 s: the threshold (at ~3.8 s) fires while it is down.
    std::thread::sleep(Duration::from_millis(1500));
    let _ = server.kill();
    std::thread::sleep(Duration::from_secs(3));
    let server = TestServer::start_on(&data, &bind, &[], &[]);
    let status = child.wait().expect("agent");
    let mut stderr = String::new();
    child.stderr.take().expect("stderr").read_to_string(&mut stderr).expect("stderr");
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("retrying"), "the agent noticed the outage: {stderr}");

    let triggers: Vec<String> =
        snapshots(&server.url, "killed").iter().map(|s| s["trigger"].as_str().expect("t").to_owned()).collect();
    assert_eq!(triggers, ["manual", "threshold"]);
    let live = get(&format!("{}/api/v1/live", server.url));
    let source = live["sources"][0]["source"].as_str().expect("source").to_owned();
    let times: Vec<i64> = samples(&server.url, &source).iter().map(|s| s["t_ms"].as_i64().expect("t")).collect();
    // One sample per 200 ms for 6 s, none missing across the outage.
    assert!(times.len() >= 25, "{} samples", times.len());
    let gaps: Vec<i64> = times.windows(2).map(|w| w[1] - w[0]).filter(|g| *g > 1000).collect();
    assert_eq!(gaps, Vec::<i64>::new(), "no hole in the telemetry: {times:?}");
    assert_eq!(spool_files(&spool), Vec::<String>::new());
}

#[test]
fn an_unreachable_server_leaves_the_spool_for_the_next_run() {
    let dir = unique_dir("spool");
    let spool = dir.join("spool");
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let job_args = ["--seconds", "1", "--peak", "0.2", "--manual", "--exit-code", "5"];
    let job_args = [&job_args[..], &["--snapshot", fixture("state_only.pickle")]].concat();
    let output = run(agent(&nowhere, "later", &spool, &["--drain-timeout", "1s"], &job_args));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(5), "{stderr}");
    assert!(stderr.contains("stay in"), "{stderr}");
    let files = spool_files(&spool);
    assert_eq!(files.iter().filter(|f| f.ends_with(".pickle")).count(), 1, "{files:?}");
    assert_eq!(files.iter().filter(|f| f.ends_with(".json")).count(), 1, "{files:?}");
    assert_eq!(files.iter().filter(|f| f.starts_with("telemetry-")).count(), 1, "{files:?}");

    // The next agent, with a server this time, delivers the leftovers.
    let server = TestServer::start_on(&dir.join("data"), "127.0.0.1:0", &[], &[]);
    let mut next = Command::new(env!("CARGO_BIN_EXE_vramscope"));
    next.args(["agent", "--server", &server.url, "--job", "next", "--spool-dir"])
        .arg(&spool)
        .args(["--", "python3", "-c", "pass"]);
    let output = run(next);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let snaps = snapshots(&server.url, "later");
    assert_eq!(snaps.len(), 1, "the first run's snapshot, under its own job name");
    assert_eq!(snaps[0]["trigger"], "manual");
    let live = get(&format!("{}/api/v1/live", server.url));
    let source = live["sources"][0]["source"].as_str().expect("source").to_owned();
    assert!(source.starts_with("later--"), "{source}");
    assert!(samples(&server.url, &source).len() >= 3);
    assert_eq!(spool_files(&spool), Vec::<String>::new());
}

#[test]
fn sigterm_reaches_the_job_and_its_exit_code_comes_back() {
    let dir = unique_dir("signal");
    let server = TestServer::start_on(&dir.join("data"), "127.0.0.1:0", &[], &[]);
    let job_args = ["--seconds", "60", "--peak", "0.2", "--snapshot", fixture("state_only.pickle")];
    let mut command = agent(&server.url, "signal", &dir.join("spool"), &[], &job_args);
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("agent");
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("the job's first line");
    assert_eq!(line, "fake_job: hello\n");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM)
        .expect("kill");
    let status = child.wait().expect("agent");
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).expect("rest");
    assert_eq!(rest, "fake_job: SIGTERM\n");
    assert_eq!(status.code(), Some(42));
}

#[test]
fn capture_now_from_the_dashboard_reaches_the_process() {
    let dir = unique_dir("capture");
    let server = TestServer::start_on(&dir.join("data"), "127.0.0.1:0", &[], &[]);
    let job_args = ["--seconds", "30", "--peak", "0.2", "--snapshot", fixture("state_only.pickle")];
    let mut command = agent(&server.url, "capture", &dir.join("spool"), &[], &job_args);
    let mut child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("agent");

    let mut source = String::new();
    wait_for("a connected source", Duration::from_secs(30), || {
        let live = get(&format!("{}/api/v1/live", server.url));
        let connected = live["sources"].as_array().and_then(|s| s.first()).filter(|s| s["connected"] == true);
        if let Some(s) = connected {
            source = s["source"].as_str().expect("source").to_owned();
        }
        connected.is_some()
    });
    let (status, answer) = post(&format!("{}/api/v1/live/{source}/capture", server.url));
    assert_eq!(status, 202, "{answer}");
    // Regression: "capture now" in a loop made every rank dump continuously.
    let (status, answer) = post(&format!("{}/api/v1/live/{source}/capture?all=true", server.url));
    assert_eq!((status, answer["kind"].as_str()), (429, Some("rate_limited")), "{answer}");
    wait_for("the manual snapshot", Duration::from_secs(30), || !snapshots(&server.url, "capture").is_empty());
    let snap = &snapshots(&server.url, "capture")[0];
    assert_eq!(snap["trigger"], "manual");
    assert!(snap["tags"].as_array().expect("tags").contains(&Value::from("capture-now")));

    let (status, answer) = post(&format!("{}/api/v1/live/nobody--nowhere--rank0/capture", server.url));
    assert_eq!(status, 404, "{answer}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM)
        .expect("kill");
    assert_eq!(child.wait().expect("agent").code(), Some(42));
}

#[test]
fn the_job_neither_waits_for_nor_fails_without_an_agent() {
    // The capture module alone, pointed at a socket nobody listens on: the
    // job runs to its end and its snapshot is in the spool for an agent.
    let dir = unique_dir("alone");
    let spool = dir.join("spool");
    let status = Command::new("python3")
        .arg(fake_job())
        .args(["--seconds", "1", "--manual", "--snapshot", fixture("state_only.pickle")])
        .env("PYTHONPATH", crate::common::workspace_root().join("assets/capture"))
        .env("VRAMSCOPE_AGENT_SOCKET", dir.join("nobody.sock"))
        .env("VRAMSCOPE_SPOOL_DIR", &spool)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("python3");
    assert_eq!(status.code(), Some(0));
    let files = spool_files(&spool);
    assert_eq!(files.len(), 2, "{files:?}");
    let manifest = files.iter().find(|f| f.ends_with(".json")).expect("manifest");
    let entry: Value =
        serde_json::from_str(&std::fs::read_to_string(spool.join(manifest)).expect("read")).expect("json");
    assert_eq!(entry["trigger"], "manual");
    assert_eq!(entry["file"].as_str().map(|f| spool.join(f).is_file()), Some(true));
}

#[test]
fn a_missing_command_or_bad_server_url_is_a_clear_error() {
    let output = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["agent", "--server", "localhost:1", "--", "true"])
        .output()
        .expect("agent");
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--server must start with http://"));
    let dir = unique_dir("missing");
    let output = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["agent", "--server", "http://127.0.0.1:1", "--drain-timeout", "1s", "--spool-dir"])
        .arg(dir.join("spool"))
        .args(["--", "/nonexistent/program"])
        .output()
        .expect("agent");
    assert_eq!(output.status.code(), Some(127), "as a shell says for a missing command");
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot start /nonexistent/program"));
}

#[test]
fn regression_an_agent_that_cannot_set_itself_up_still_runs_the_job_and_keeps_its_exit_code() {
    // The spool folder cannot be made (a file stands where it should be):
    // the job runs as it would without vramscope, told so once.
    let dir = unique_dir("no-setup");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("file"), "not a folder").expect("write");
    let output = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["agent", "--server", "http://127.0.0.1:1", "--spool-dir"])
        .arg(dir.join("file/spool"))
        .args(["--", "python3", "-c", "import os, sys; print('VRAMSCOPE_AGENT_SOCKET' in os.environ); sys.exit(3)"])
        .env_remove("PYTHONPATH")
        .stdin(Stdio::null())
        .output()
        .expect("agent");
    assert_eq!(output.status.code(), Some(3), "the job's own exit code");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "False\n", "the job ran without our environment");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("vramscope agent: not capturing (cannot create the spool folder")
            && stderr.contains("the job runs without vramscope"),
        "{stderr}"
    );
}
