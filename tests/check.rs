//! `vramscope check` as CI runs it: exit codes, the verdict's text, JSON
//! and JUnit, a baseline's grown stacks, the server's `check` routes with a
//! pinned baseline, and the Python package's `recorded_memory`
//! (`python/vramscope`, what the pytest plugin records with) run by plain
//! `python3` with a fake `torch` (`tests/fixtures/fake_torch`) writing a
//! real corpus snapshot.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::server::{TestServer, client, unique_dir};

fn vramscope() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vramscope"))
}

fn corpus(name: &str) -> PathBuf {
    crate::common::fixture_corpus().join(name)
}

fn run(args: &[&str], files: &[&Path]) -> Output {
    let mut cmd = vramscope();
    cmd.arg("check");
    for f in files {
        cmd.arg(f);
    }
    cmd.args(args).output().expect("run vramscope check")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// oom_leak's reserved peak, from `vramscope stats --json`.
fn reserved_peak(file: &Path) -> u64 {
    let out = vramscope().args(["stats", "--json"]).arg(file).output().expect("stats");
    let v: Value = serde_json::from_slice(&out.stdout).expect("stats JSON");
    v["devices"][0]["reserved_peak_bytes"].as_u64().expect("a peak")
}

#[test]
fn a_budget_over_the_peak_passes_and_one_under_it_fails_naming_the_figures() {
    let file = corpus("oom_leak.pickle");
    let peak = reserved_peak(&file);
    // VRAMSCOPE_SERVER (set for `vramscope upload` in CI) does not turn a file's check into a server's.
    let ok = vramscope()
        .arg("check")
        .arg(&file)
        .args(["--max-reserved-peak", &peak.to_string()])
        .env("VRAMSCOPE_SERVER", "http://127.0.0.1:9")
        .output()
        .expect("run vramscope check");
    assert_eq!(ok.status.code(), Some(0), "{}{}", text(&ok.stdout), text(&ok.stderr));
    assert!(text(&ok.stdout).contains(": PASS, 0 of 1 rule broken"), "{}", text(&ok.stdout));

    let under = run(&["--max-reserved-peak", &(peak - 1).to_string(), "--max-fragmentation", "99"], &[&file]);
    assert_eq!(under.status.code(), Some(1), "{}", text(&under.stderr));
    let out = text(&under.stdout);
    assert!(out.contains("FAIL, 1 of 2 rules broken"), "{out}");
    assert!(out.contains("FAIL  --max-reserved-peak"), "{out}");
    assert!(out.contains("reserved peak 2.71 GiB"), "{out}");
    assert!(out.contains("ok    --max-fragmentation"), "{out}");
    assert!(text(&under.stderr).contains("check failed: 1 of 2 rules broken"), "{}", text(&under.stderr));
}

#[test]
fn json_and_junit_carry_the_same_verdict() {
    let file = corpus("oom_leak.pickle");
    let dir = unique_dir("check-junit");
    let junit = dir.join("memory.xml");
    let out = run(
        &[
            "--max-allocated-peak",
            "1GiB",
            "--max-fragmentation",
            "50",
            "--json",
            "--junit",
            junit.to_str().expect("utf-8"),
        ],
        &[&file],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["file"], file.display().to_string());
    assert_eq!(v["passed"], false);
    assert_eq!(v["failures"], 1);
    assert_eq!(v["budget"]["max_allocated_peak_bytes"], 1u64 << 30);
    let rules = v["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), 2);
    assert_eq!(rules[0]["rule"], "max_allocated_peak");
    assert_eq!(rules[0]["passed"], false);
    // The replay's allocated peak, as `vramscope simulate --json` gives it.
    let sim = vramscope().args(["simulate", "--json"]).arg(&file).output().expect("simulate");
    let sim: Value = serde_json::from_slice(&sim.stdout).expect("simulate JSON");
    assert_eq!(rules[0]["bytes"], sim["devices"][0]["allocated_peak_bytes"]);
    assert_eq!(rules[1]["rule"], "max_fragmentation");
    assert_eq!(rules[1]["passed"], true);

    let xml = std::fs::read_to_string(&junit).expect("the JUnit file");
    assert!(xml.contains("<testsuites name=\"vramscope check\" tests=\"2\" failures=\"1\" errors=\"0\""), "{xml}");
    assert!(
        xml.contains(
            "name=\"--max-allocated-peak device 0\" time=\"0\">\n      <failure type=\"--max-allocated-peak\" \
             message=\"device 0: allocated peak"
        ),
        "{xml}"
    );
    assert!(xml.contains("name=\"--max-fragmentation device 0\" time=\"0\"></testcase>"), "{xml}");
    // As a CI system reads it: a real JUnit parser.
    let parsed = junit_parsed(&junit);
    assert_eq!(parsed["tests"], 2, "{parsed}");
    assert_eq!(parsed["failures"], 1, "{parsed}");
    assert!(parsed["failure_texts"][0].as_str().expect("text").contains("allocated peak"), "{parsed}");
    assert!(parsed["timestamp"].as_str().expect("timestamp").starts_with("20"), "{parsed}");
}

/// The report as `junitparser` (a JUnit library of Python's) reads it:
/// tests, failures, errors, the suite's timestamp and time, and each
/// failure's type and text.
fn junit_parsed(path: &Path) -> Value {
    const READ: &str = "import json, sys\n\
        from junitparser import JUnitXml, Failure, Error\n\
        xml = JUnitXml.fromfile(sys.argv[1])\n\
        suite = next(iter(xml))\n\
        results = [r for case in suite for r in case.result]\n\
        print(json.dumps({'tests': suite.tests, 'failures': suite.failures, 'errors': suite.errors,\n\
            'time': suite.time, 'timestamp': suite.timestamp,\n\
            'failure_types': [r.type for r in results if isinstance(r, Failure)],\n\
            'failure_texts': [r.text for r in results if isinstance(r, Failure)],\n\
            'error_texts': [r.text for r in results if isinstance(r, Error)]}))\n";
    let out = Command::new("python3").args(["-c", READ]).arg(path).output().expect("python3");
    assert!(out.status.success(), "junitparser: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[test]
fn regression_junit_failures_carry_their_rule_the_figures_and_the_stacks_that_grew() {
    let base = corpus("mlp_train_all.pickle");
    let file = corpus("oom_leak.pickle");
    let dir = unique_dir("check-junit-stacks");
    let junit = dir.join("memory.xml");
    let out = run(
        &["--baseline", base.to_str().expect("utf-8"), "--max-growth", "10", "--junit", junit.to_str().expect("utf-8")],
        &[&file],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let parsed = junit_parsed(&junit);
    assert!(parsed["failures"].as_u64().expect("failures") >= 1, "{parsed}");
    assert!(parsed["failure_types"][0].as_str().expect("type").starts_with("--max-growth"), "{parsed}");
    let failure = parsed["failure_texts"][0].as_str().expect("text");
    assert!(failure.contains("stacks that grew most against the baseline"), "{failure}");
    assert!(failure.contains("linear.py:134 forward"), "{failure}");
    assert!(parsed["time"].as_f64().is_some(), "{parsed}");

    // No verdict (not a snapshot): exit 2, and the report says why.
    let bad = dir.join("notes.pickle");
    std::fs::write(&bad, b"not a pickle").expect("write");
    let report = dir.join("error.xml");
    let out = run(&["--max-reserved-peak", "1GiB", "--junit", report.to_str().expect("utf-8")], &[&bad]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let parsed = junit_parsed(&report);
    assert_eq!((parsed["tests"].as_u64(), parsed["errors"].as_u64()), (Some(1), Some(1)), "{parsed}");
    assert!(parsed["error_texts"][0].as_str().expect("text").contains("notes.pickle"), "{parsed}");
}

#[test]
fn growth_against_a_baseline_names_the_stacks_that_grew_as_diff_matches_them() {
    let base = corpus("mlp_train_all.pickle");
    let file = corpus("oom_leak.pickle");
    let out = run(&["--baseline", base.to_str().expect("utf-8"), "--max-growth", "10", "--json"], &[&file]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["baseline"], base.display().to_string());
    let rules = v["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), 2, "{v}");
    assert_eq!(rules[0]["rule"], "max_growth_reserved_peak");
    assert_eq!(rules[0]["baseline_bytes"], reserved_peak(&base));
    assert_eq!(rules[0]["bytes"], reserved_peak(&file));
    // The grown stacks are `vramscope diff`'s, largest growth first.
    let diff = vramscope().args(["diff", "--json"]).arg(&base).arg(&file).output().expect("diff");
    let diff: Value = serde_json::from_slice(&diff.stdout).expect("diff JSON");
    let grew: Vec<&Value> = diff["devices"][0]["stacks"]
        .as_array()
        .expect("stacks")
        .iter()
        .filter(|s| s["delta"].as_i64().expect("delta") > 0)
        .take(5)
        .collect();
    let grown = v["grown"][0]["stacks"].as_array().expect("grown");
    assert_eq!(grown.len(), 5);
    assert_eq!(grown.iter().collect::<Vec<_>>(), grew);
    assert_eq!(v["grown"][0]["total_delta"], diff["devices"][0]["total_delta"]);

    let human = run(&["--baseline", base.to_str().expect("utf-8"), "--max-growth", "10"], &[&file]);
    let out = text(&human.stdout);
    assert!(out.contains("FAIL  --max-growth (reserved peak)"), "{out}");
    assert!(out.contains("stacks that grew most against the baseline"), "{out}");
    assert!(out.contains("linear.py:134 forward"), "{out}");

    // The same file as its own baseline: no growth, no stack grew.
    let same = run(&["--baseline", file.to_str().expect("utf-8"), "--max-growth", "0"], &[&file]);
    assert_eq!(same.status.code(), Some(0), "{}", text(&same.stdout));
}

#[test]
fn bad_input_exits_2_with_one_line() {
    let file = corpus("oom_leak.pickle");
    let dir = unique_dir("check-bad");
    let not_a_snapshot = dir.join("notes.pickle");
    std::fs::write(&not_a_snapshot, b"not a pickle").expect("write");
    for (args, files, says) in [
        (vec!["--max-reserved-peak", "1GiB"], vec![not_a_snapshot.as_path()], "notes.pickle"),
        (vec!["--max-growth", "5"], vec![file.as_path()], "--max-growth needs a baseline"),
        (vec![], vec![file.as_path()], "no rule to check"),
        (vec!["--max-reserved-peak", "12G"], vec![file.as_path()], "ambiguous unit"),
        (vec!["--max-fragmentation", "lots"], vec![file.as_path()], "not a percentage"),
    ] {
        let out = run(&args, &files);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    // A snapshot without a trace has no peak to check.
    let out = run(&["--max-reserved-peak", "1GiB"], &[&corpus("state_only.pickle")]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("has no trace"), "{}", text(&out.stderr));
}

#[tokio::test]
async fn a_jobs_newest_snapshot_is_checked_against_its_last_pinned_one() {
    let server = TestServer::start("check-job", &[]);
    let upload = |file: &'static str| {
        let server = &server;
        async move {
            let bytes = std::fs::read(corpus(file)).expect("read");
            let (status, answer) = server.upload(bytes, &format!("job=ci&name={file}")).await;
            assert!(status.is_success(), "{answer}");
            answer["id"].as_str().expect("id").to_owned()
        }
    };
    let old = upload("mlp_train_all.pickle").await;
    // No pinned snapshot yet: growth has nothing to compare against.
    let _ = upload("compiled.pickle").await;
    let (status, answer) = server.get_query("/jobs/ci/check", &[("max_growth", "10")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(answer["error"].as_str().expect("error").contains("no pinned snapshot"), "{answer}");
    let cli = vramscope()
        .args(["check", "--server", &server.url, "--job", "ci", "--max-growth", "10"])
        .output()
        .expect("check --server");
    assert_eq!(cli.status.code(), Some(2), "{}", text(&cli.stderr));

    let pin = client().patch(server.api(&format!("/snapshots/{old}"))).json(&json!({ "pinned": true })).send().await;
    assert!(pin.expect("pin").status().is_success());
    let new = upload("oom_leak.pickle").await;

    let (status, answer) =
        server.get_query("/jobs/ci/check", &[("max_growth", "10"), ("max_reserved_peak", "4GiB")]).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["snapshot"]["id"], new);
    assert_eq!(answer["baseline"]["id"], old);
    assert_eq!(answer["passed"], false);
    assert_eq!(answer["failures"], 2);
    assert_eq!(answer["rules"][0]["rule"], "max_reserved_peak");
    assert_eq!(answer["rules"][0]["passed"], true);
    assert_eq!(answer["rules"][1]["baseline_bytes"], reserved_peak(&corpus("mlp_train_all.pickle")));

    // The same verdict as the file against the file.
    let local = run(
        &[
            "--baseline",
            corpus("mlp_train_all.pickle").to_str().expect("utf-8"),
            "--max-growth",
            "10",
            "--max-reserved-peak",
            "4GiB",
            "--json",
        ],
        &[&corpus("oom_leak.pickle")],
    );
    let local: Value = serde_json::from_slice(&local.stdout).expect("JSON");
    assert_eq!(local["rules"], answer["rules"]);
    assert_eq!(local["grown"], answer["grown"]);

    let cli = vramscope()
        .args(["check", "--server", &server.url, "--job", "ci", "--max-growth", "10"])
        .output()
        .expect("check --server");
    assert_eq!(cli.status.code(), Some(1), "{}", text(&cli.stderr));
    let out = text(&cli.stdout);
    assert!(out.contains(&format!("oom_leak.pickle (job ci, snapshot {new}): FAIL, 2 of 2 rules broken")), "{out}");
    assert!(out.contains(&format!("baseline: mlp_train_all.pickle (snapshot {old}, pinned)")), "{out}");

    // One snapshot against another by id, and an unknown job.
    let (status, answer) = server
        .get_query(&format!("/snapshots/{new}/check"), &[("baseline", old.as_str()), ("max_fragmentation", "50")])
        .await;
    assert_eq!((status, &answer["passed"]), (StatusCode::OK, &json!(true)), "{answer}");
    let (status, answer) = server.get_query(&format!("/snapshots/{new}/check"), &[("max_growth", "5")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let (status, _) = server.get_query("/jobs/nope/check", &[("max_fragmentation", "50")]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, answer) = server.get_query("/jobs/ci/check", &[("max_reserved_peak", "12G")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
}

/// The Python package's `recorded_memory` (`python/vramscope`, which the
/// pytest plugin records with), run by plain `python3` with the fake `torch`
/// on `PYTHONPATH`; its snapshot then checked as the documented CI step does.
#[test]
fn the_documented_fixture_writes_a_snapshot_that_check_reads() {
    let root = crate::common::workspace_root();
    let dir = unique_dir("check-fixture");
    let log = dir.join("torch.log");
    let python_path = format!("{}:{}", root.join("tests/fixtures/fake_torch").display(), root.join("python").display());
    let script = r#"
import sys
from vramscope import recorded_memory

with recorded_memory(sys.argv[1] + "/memory-snapshots/test_step.pickle") as path:
    assert path.name == "test_step.pickle"
try:
    with recorded_memory(sys.argv[1] + "/memory-snapshots/test_oom.pickle"):
        raise RuntimeError("CUDA out of memory")
except RuntimeError as e:
    print("raised:", e)
from vramscope import snapshot_name
assert "torch" in sys.modules  # imported by recorded_memory, not by the package
assert snapshot_name("test_step") == "test_step.pickle"
assert snapshot_name("test_step", {"batch": 4}) == "test_step.batch-4.pickle"
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&dir)
        .env("PYTHONPATH", &python_path)
        .env("FAKE_TORCH_LOG", &log)
        .env("FAKE_TORCH_SNAPSHOT", corpus("oom_leak.pickle"))
        .output()
        .expect("python3");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "raised: CUDA out of memory\n");
    let calls = std::fs::read_to_string(&log).expect("the fake torch's log");
    // The first recording probes which context "auto" records (this fake
    // torch has no autograd, so the probe cannot tell: `alloc`, said once).
    let probe = "record enabled=all max_entries=64\nrecord stop\n";
    let one = "synchronize\nempty_cache\nrecord enabled=all max_entries=1000000\nsynchronize\n";
    assert_eq!(
        calls,
        format!(
            "synchronize\n{probe}empty_cache\nrecord enabled=all max_entries=1000000\nsynchronize\n\
             dump test_step.pickle\nrecord stop\n{one}dump test_oom.pickle\nrecord stop\n"
        )
    );
    assert!(
        text(&out.stderr).contains("frees are recorded without their stacks (context 'alloc')"),
        "{}",
        text(&out.stderr)
    );

    // The CI step of docs/ci-memory-gate.md.
    let snapshot = dir.join("memory-snapshots/test_step.pickle");
    let junit = dir.join("memory.xml");
    let ok = vramscope()
        .arg("check")
        .arg(&snapshot)
        .args(["--max-reserved-peak", "3GiB", "--junit"])
        .arg(&junit)
        .output()
        .expect("check");
    assert_eq!(ok.status.code(), Some(0), "{}{}", text(&ok.stdout), text(&ok.stderr));
    assert!(std::fs::read_to_string(&junit).expect("junit").contains("failures=\"0\""));
    let over = vramscope()
        .arg("check")
        .arg(dir.join("memory-snapshots/test_oom.pickle"))
        .args(["--max-reserved-peak", "2GiB"])
        .output()
        .expect("check");
    assert_eq!(over.status.code(), Some(1), "{}", text(&over.stderr));
}

#[test]
fn regression_junit_into_a_missing_folder_and_an_unreachable_server_are_not_broken_rules() {
    let file = corpus("oom_leak.pickle");
    let peak = reserved_peak(&file);
    // A passing budget with its JUnit report in a folder that does not exist
    // yet: the folder is made, the report written, exit 0 (it printed only
    // the write error and exited 1).
    let dir = unique_dir("check-junit-folder");
    let report = dir.join("reports/memory/check.xml");
    let out = run(&["--max-reserved-peak", &peak.to_string(), "--junit", report.to_str().expect("utf-8")], &[&file]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(std::fs::read_to_string(&report).expect("the report").contains("<testsuite"));
    // A report that cannot be written (its folder is a file) is 2, not 1.
    let blocked = dir.join("file");
    std::fs::write(&blocked, b"").expect("write");
    let out = run(&["--max-reserved-peak", "1B", "--junit", blocked.join("x.xml").to_str().expect("utf-8")], &[&file]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    // A server that cannot be reached is 2 (it was 1, "a rule is broken").
    let out = vramscope()
        .args(["check", "--server", "http://127.0.0.1:9", "--job", "ci", "--max-reserved-peak", "1GiB"])
        .output()
        .expect("check --server");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("cannot reach"), "{}", text(&out.stderr));
}

#[test]
fn regression_small_inputs_of_check_are_refused_or_read() {
    let file = corpus("oom_leak.pickle");
    // --max-fragmentation over 100 % of reserved cannot be.
    let out = run(&["--max-fragmentation", "150"], &[&file]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("give 0 to 100"), "{}", text(&out.stderr));
    // --baseline without --max-growth says what is missing.
    let out = run(&["--baseline", file.to_str().expect("utf-8"), "--max-reserved-peak", "1GiB"], &[&file]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--baseline is compared by --max-growth"), "{}", text(&out.stderr));
    // `check -` reads the snapshot from stdin, with the same verdict.
    let peak = reserved_peak(&file);
    let mut child = vramscope()
        .args(["check", "-", "--json", "--max-reserved-peak", &peak.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(&std::fs::read(&file).expect("read")).expect("write stdin");
    }
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let verdict: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(verdict["passed"], true, "{verdict}");
}

/// Found on the H200: in a pytest run, the second GPU test's snapshot
/// started with the first test's cuBLAS workspaces alive, its trace "did
/// not start from an empty allocator", and `--max-allocated-peak` exited 2.
/// Memory in use before the trace is now a baseline: the replay starts from
/// the state at the trace's first entry (the final state less the trace's
/// effects). `ring_overflow` starts mid-run with 40 MiB alive; its window's
/// allocated peak is PyTorch's `allocated_bytes.all.peak`.
#[test]
fn regression_check_takes_memory_in_use_before_the_trace_as_a_baseline() {
    let file = corpus("ring_overflow.pickle");
    let oracle: Value =
        serde_json::from_slice(&std::fs::read(corpus("ring_overflow.stats.json")).expect("oracle")).expect("JSON");
    let peak = oracle["memory_stats"]["allocated_bytes.all.peak"].as_u64().expect("peak");
    let out = run(&["--max-allocated-peak", "80GiB", "--json"], &[&file]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let rule = &report["rules"][0];
    assert_eq!(rule["bytes"].as_u64(), Some(peak), "{rule}");
    assert_eq!(rule["window_only"], true, "{rule}");
    // Under the baseline plus the window's peak, the rule is broken: exit 1, not 2.
    let out = run(&["--max-allocated-peak", "39MiB"], &[&file]);
    assert_eq!(out.status.code(), Some(1), "{}{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stdout).contains("within the trace window"), "{}", text(&out.stdout));
}

/// The same on the GPU (`tests/gpu/check_fixture_job.py`, an H100): the
/// second test of a pytest run, with a model built at import alive before
/// its recording. The replayed allocated peak of its window is the test's
/// own `torch.cuda.max_memory_allocated()`, to the byte.
#[test]
fn regression_the_second_test_of_a_pytest_run_passes_with_its_true_allocated_peak() {
    let file = corpus("pytest_second_test.pickle");
    let truth: Value =
        serde_json::from_slice(&std::fs::read(corpus("pytest_second_test.truth.json")).expect("truth")).expect("JSON");
    let out = run(&["--max-allocated-peak", "80GiB", "--json"], &[&file]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let rule = &report["rules"][0];
    assert_eq!(rule["bytes"], truth["max_memory_allocated"], "{rule}");
    assert_eq!(rule["window_only"], true, "{rule}");
}

#[test]
fn regression_check_against_a_server_that_never_answers_exits_2_after_its_timeout() {
    // A server that takes the connection and says nothing held a CI job's
    // gate until the CI system killed it: now --timeout (300 s by default)
    // ends it as an infrastructure error.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    // Detached: it holds the connection past the check's timeout.
    let _holder = std::thread::spawn(move || {
        let (socket, _) = listener.accept().expect("accept");
        std::thread::sleep(std::time::Duration::from_secs(20));
        drop(socket);
    });
    let out = vramscope()
        .args(["check", "--server", &url, "--job", "ci", "--max-reserved-peak", "1GiB", "--timeout", "2s"])
        .output()
        .expect("check --server");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("sent nothing for 2 s (--timeout)"), "{}", text(&out.stderr));
}

/// Issue 44, item 30: "1 of 1 rules broken", "1 retries": counts agree
/// with their nouns.
#[test]
fn regression_counts_agree_with_their_nouns() {
    let file = corpus("oom_leak.pickle");
    let one = vramscope().arg("check").arg(&file).args(["--max-reserved-peak", "1GiB"]).output().expect("check");
    assert!(text(&one.stdout).contains("FAIL, 1 of 1 rule broken"), "{}", text(&one.stdout));
    let sim = vramscope().arg("simulate").arg(&file).output().expect("simulate");
    let out = text(&sim.stdout);
    let calls = out.lines().find(|l| l.contains("device calls")).unwrap_or_else(|| panic!("{out}"));
    assert!(calls.ends_with(" retry") || calls.ends_with(" retries"), "{calls}");
    assert!(!calls.ends_with(" 1 retries"), "{calls}");
}
