//! `vramscope explain`, `leaks` and `diff` as a user runs them. The analyses
//! themselves are checked on the corpus and on written snapshots in
//! `shared/tests/analysis.rs`.

use std::process::Command;

fn vramscope() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vramscope"))
}

// ---- the command line ----------------------------------------------------------

#[test]
fn cli_explain_prints_pytorchs_figures_and_the_cause() {
    let file = crate::common::fixture_corpus().join("oom_leak.pickle");
    let out = vramscope().arg("explain").arg(&file).output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in ["292 MiB segment", "348.89 MiB", "136.36 GiB", "FRAGMENTATION", "/srv/jobs/train.py:96 run", "exact"]
    {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
    let out = vramscope().args(["explain", "--json"]).arg(&file).output().expect("run");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["ooms"][0]["cause"], "fragmentation");
    assert_eq!(v["ooms"][0]["reserved_unallocated_bytes"], 365_841_408u64);
    // The simulator judges the suggested settings: expandable segments fit
    // in 2.74 GiB, inside the range the OOM allows for the cap.
    let verdicts = v["ooms"][0]["avoided_by"].as_array().expect("simulated verdicts");
    let expandable = verdicts.iter().find(|x| x["setting"] == "expandable_segments:True").expect("expandable");
    assert_eq!(expandable["avoids"]["verdict"], "if_capacity_at_least");
    assert!(verdicts.iter().any(|x| x["setting"] == "max_split_size_mb:128" && x["avoids"]["verdict"] == "no"));

    let quiet = crate::common::fixture_corpus().join("mlp_train_all.pickle");
    let out = vramscope().arg("explain").arg(&quiet).output().expect("run");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("no OOM in the trace"));
}

#[test]
fn cli_leaks_names_the_leaking_line_first() {
    let file = crate::common::fixture_corpus().join("oom_leak.pickle");
    let out = vramscope().args(["leaks", "--top", "3"]).arg(&file).output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.find("/srv/jobs/train.py:96 run").expect("the kept outputs");
    let second = text.find("/srv/jobs/train.py:97 run").expect("the kept losses");
    assert!(first < second, "{text}");
    assert!(text.contains("growing"), "{text}");
    let out = vramscope().args(["leaks", "--json"]).arg(&file).output().expect("run");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["devices"][0]["candidates"][0]["pattern"], "growing");
}

#[test]
fn cli_diff_of_a_file_with_itself_is_identical_and_bad_input_exits_2() {
    let file = crate::common::fixture_corpus().join("mlp_train_all.pickle");
    let out = vramscope().args(["diff", "--json"]).arg(&file).arg(&file).output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["identical"], true);
    let out = vramscope().arg("diff").arg(&file).arg(&file).output().expect("run");
    assert!(String::from_utf8_lossy(&out.stdout).contains("no change"));
    for command in ["diff", "explain", "leaks"] {
        let mut cmd = vramscope();
        cmd.arg(command).arg("no/such/file.pickle");
        if command == "diff" {
            cmd.arg(&file);
        }
        let out = cmd.output().expect("run");
        assert_eq!(out.status.code(), Some(2), "{command}");
        assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1, "{command}: one line");
    }
}

/// What `alloc` costs: the capture's `auto` context records `alloc` (no
/// stack at a free) where recording the stacks of frees would break the
/// job (issue 42). On each real capture, a copy without the frees' stacks
/// gets the same leak ranking, OOM post-mortem, breakdown and statistics.
#[test]
fn regression_frees_recorded_without_stacks_leave_the_analyses_unchanged() {
    let dir = std::env::temp_dir().join(format!("vramscope-alloc-context-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let strip = crate::common::workspace_root().join("tests/fixtures/strip_free_stacks.py");
    for name in ["mlp_train_all", "oom_leak", "streams", "compiled", "ring_overflow"] {
        let full = crate::common::fixture_corpus().join(format!("{name}.pickle"));
        let alloc = dir.join(format!("{name}.alloc.pickle"));
        let out = Command::new("python3").arg(&strip).arg(&full).arg(&alloc).output().expect("python3");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let stripped: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().expect("a count");
        assert!(stripped > 100, "{name}: only {stripped} frees had stacks to strip");
        for command in ["leaks", "explain", "breakdown", "stats"] {
            let answer = |file: &std::path::Path| {
                let out = vramscope().args([command, "--json"]).arg(file).output().expect("run");
                assert!(out.status.success(), "{command} {name}: {}", String::from_utf8_lossy(&out.stderr));
                let mut v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
                v.as_object_mut().expect("an object").remove("file");
                v
            };
            assert_eq!(answer(&full), answer(&alloc), "{command} {name}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}
