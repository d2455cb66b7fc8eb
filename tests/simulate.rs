//! `vramscope simulate` and `vramscope tune` as a user runs them: the JSON
//! shapes, the human summaries, exit code 2 on bad input. The allocator
//! model itself is checked against the corpus in `shared/tests/simulate.rs`.

use std::process::Command;

fn vramscope() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vramscope"))
}

#[test]
fn cli_simulate_json_has_the_documented_shape() {
    let file = crate::common::fixture_corpus().join("oom_leak.pickle");
    let out = vramscope().args(["simulate", "--json", "--capacity", "3002197606"]).arg(&file).output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["alloc_conf"], "");
    let d = &v["devices"][0];
    assert_eq!(d["device"], 0);
    assert_eq!(d["reserved_peak_bytes"], 2915041280u64);
    assert_eq!(d["allocated_peak_bytes"], 2536617472u64);
    assert_eq!(d["final_reserved_bytes"], 2902458368u64);
    assert_eq!(d["inactive_split_peak_bytes"], 406704128u64);
    assert_eq!(d["oom"]["requested_bytes"], 305920000u64);
    assert!(d["oom"]["time_us"].as_i64().is_some());

    let file = crate::common::fixture_corpus().join("streams.pickle");
    let out = vramscope()
        .args([
            "simulate",
            "--json",
            "--alloc-conf",
            "max_split_size_mb:512,expandable_segments:True",
            "--capacity",
            "80GiB",
        ])
        .arg(&file)
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["alloc_conf"], "max_split_size_mb:512,expandable_segments:True");
    assert!(v["devices"][0]["oom"].is_null());

    let out = vramscope().args(["simulate"]).arg(&file).output().expect("run");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("reserved peak") && text.contains("170 MiB"), "{text}");
}

#[test]
fn cli_simulate_refuses_bad_input_with_exit_code_2() {
    let file = crate::common::fixture_corpus().join("streams.pickle");
    let out = vramscope().args(["simulate", "--alloc-conf", "max_split_size_mb:1"]).arg(&file).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("max_split_size_mb") && err.contains("at least 20"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");

    let out = vramscope().args(["simulate", "--capacity", "80G"]).arg(&file).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ambiguous unit"));

    let wrapped = crate::common::fixture_corpus().join("ring_overflow.pickle");
    let out = vramscope().args(["simulate"]).arg(&wrapped).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ring buffer wrapped") && err.contains("ring_overflow.pickle"), "{err}");
}

#[test]
fn cli_tune_ranks_settings_by_reserved_peak() {
    let file = crate::common::fixture_corpus().join("compiled.pickle");
    let out = vramscope().args(["tune", "--json"]).arg(&file).output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let rows = v["rows"].as_array().expect("rows");
    assert!(rows.len() >= 10);
    let peaks: Vec<u64> = rows.iter().map(|r| r["reserved_peak_bytes"].as_u64().expect("peak")).collect();
    assert!(peaks.windows(2).all(|w| w[0] <= w[1]), "ranked: {peaks:?}");
    let recorded: Vec<_> = rows.iter().filter(|r| r["recorded"] == true).collect();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0]["reserved_peak_bytes"], 253755392u64);

    let out = vramscope().args(["tune"]).arg(&file).output().expect("run");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("rank") && text.contains("expandable_segments:True") && text.contains("<- recorded"),
        "{text}"
    );
}

#[test]
fn regression_tune_of_a_snapshot_that_ran_out_replays_under_the_cap_explain_infers() {
    // Without --capacity, tune honoured the recorded OOM in every row ("OOM
    // yes" for all 13): its table could not say which setting avoids it.
    let file = crate::common::fixture_corpus().join("oom_leak.pickle");
    let explain = vramscope().args(["explain", "--json"]).arg(&file).output().expect("explain");
    let explain: serde_json::Value = serde_json::from_slice(&explain.stdout).expect("explain JSON");
    let least = explain["ooms"][0]["capacity_bytes_range"][0].as_u64().expect("the cap's lower bound");
    let out = vramscope().args(["tune", "--json"]).arg(&file).output().expect("tune");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["capacity_bytes"].as_u64(), Some(least));
    assert_eq!(v["capacity_inferred"], true);
    let rows = v["rows"].as_array().expect("rows");
    let recorded = rows.iter().find(|r| r["recorded"] == true).expect("the recorded row");
    let recorded_row = recorded["oom"]["row"].as_u64().expect("the recorded settings run out, as they did");
    // oom_leak leaks until it runs out, so under the least memory it had no
    // setting fits; but each row is now a replay under that memory, not the
    // recorded failure carried over: some settings run out sooner, on a
    // request the recorded run served.
    let sooner: Vec<&serde_json::Value> =
        rows.iter().filter(|r| r["oom"]["row"].as_u64().is_some_and(|row| row < recorded_row)).collect();
    assert!(!sooner.is_empty(), "{v}");
    assert!(sooner.iter().all(|r| r["oom"]["recorded"] == false), "{v}");
    let text = vramscope().args(["tune"]).arg(&file).output().expect("tune");
    assert!(String::from_utf8_lossy(&text.stdout).contains("inferred from the recorded OOM"));
}

#[test]
fn regression_simulate_says_in_words_why_a_recorded_oom_stays_and_when_it_was() {
    // It said "unlimited memory" and then "out of memory … (time_us
    // 1796216267168571)", an epoch time, with no word of why.
    let file = crate::common::fixture_corpus().join("oom_leak.pickle");
    let out = vramscope().arg("simulate").arg(&file).output().expect("simulate");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("time_us"), "{text}");
    assert!(text.contains(" s into the trace"), "{text}");
    // Without --capacity it replays under the least the process had (see
    // the next test), and its own failure meets the recorded one.
    assert!(text.contains("the least the process had when it ran out"), "{text}");
    assert!(text.contains("(the recorded run failed there too)"), "{text}");
}

/// Found: `simulate` (and the what-if) of a snapshot that ran out, without
/// `--capacity`, replayed with unlimited memory and kept the recorded OOM
/// whatever the settings, so a setting's replay could not say whether it
/// avoids it. Like `tune`, it now replays under the least the process had.
#[test]
fn regression_simulate_of_a_snapshot_that_ran_out_replays_under_the_inferred_capacity() {
    let file = crate::common::fixture_corpus().join("oom_leak.pickle");
    let json = |args: &[&str]| -> serde_json::Value {
        let out = vramscope().arg("simulate").arg(&file).args(args).arg("--json").output().expect("simulate");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let explain = vramscope().arg("explain").arg(&file).arg("--json").output().expect("explain");
    let explain: serde_json::Value = serde_json::from_slice(&explain.stdout).expect("JSON");
    let least = explain["ooms"][0]["capacity_bytes_range"][0].as_u64().expect("range");
    let inferred = json(&[]);
    assert_eq!(
        (inferred["capacity_bytes"].as_u64(), &inferred["capacity_source"]),
        (Some(least), &serde_json::json!("inferred"))
    );
    assert_eq!(inferred["devices"][0]["oom"]["trace_row"], 6677);
    let other = json(&["--alloc-conf", "expandable_segments:True"]);
    assert_eq!(other["capacity_source"], "inferred");
    assert!(
        other["devices"][0]["reserved_peak_bytes"].as_u64() < inferred["devices"][0]["reserved_peak_bytes"].as_u64()
    );
    let given = json(&["--capacity", "64GiB"]);
    assert_eq!((given["capacity_source"].as_str(), given["devices"][0]["oom"].is_null()), (Some("given"), true));
    let granted = json(&["--grant-recorded-ooms"]);
    assert!(granted["capacity_bytes"].is_null() && granted["capacity_source"].is_null(), "{granted}");
}

#[test]
fn regression_a_cap_the_capture_recorded_is_the_default_capacity_before_the_inferred_one() {
    // oom_leak with the capture context the agent now writes: the process's
    // memory fraction and the cap it implies (here 4 GiB).
    let source = crate::common::fixture_corpus().join("oom_leak.pickle");
    let dir = std::env::temp_dir().join(format!("vramscope-recorded-cap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let capped = dir.join("oom_leak_capped.pickle");
    let script = "import pickle, sys\n\
                  d = pickle.load(open(sys.argv[1], 'rb'))\n\
                  total = 80 << 30\n\
                  d['vramscope_capture'] = {'torch_version': '2.11.0', 'devices': [{'device': 0, \
                  'cuda_total_bytes': total, 'memory_fraction': 0.05, 'capacity_bytes': int(total * 0.05)}]}\n\
                  pickle.dump(d, open(sys.argv[2], 'wb'), protocol=4)\n";
    let made = Command::new("python3").args(["-c", script]).arg(&source).arg(&capped).status().expect("python3");
    assert!(made.success());
    let cap = (80u64 << 30) / 20;
    let json = |args: &[&str]| {
        let out = vramscope().args(args).arg("--json").arg(&capped).output().expect("run");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("JSON")
    };
    for command in ["simulate", "tune"] {
        let recorded = json(&[command]);
        assert_eq!(recorded["capacity_bytes"], cap, "{command}: {recorded}");
        assert_eq!(recorded["capacity_source"], "recorded", "{command}");
        let given = json(&[command, "--capacity", "8GiB"]);
        assert_eq!((given["capacity_bytes"].as_u64(), &given["capacity_source"]), (Some(8 << 30), &"given".into()));
    }
    // Without the recorded cap, the capacity inferred from the OOM.
    let out = vramscope().args(["tune", "--json"]).arg(&source).output().expect("run");
    let plain: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(plain["capacity_source"], "inferred", "{plain}");
    // explain names the recorded cap beside the bracket it infers.
    let explained = json(&["explain"]).to_string();
    assert!(explained.contains(&format!("\"recorded_capacity_bytes\":{cap}")), "{explained}");
    let text = vramscope().arg("explain").arg(&capped).output().expect("run");
    assert!(String::from_utf8_lossy(&text.stdout).contains("recorded cap"), "{text:?}");
    // The text says where the capacity came from.
    let text = vramscope().arg("tune").arg(&capped).output().expect("run");
    assert!(String::from_utf8_lossy(&text.stdout).contains("recorded by the capture"), "{text:?}");
    drop(std::fs::remove_dir_all(&dir));
}

/// The capture context the agent writes, from a real run (`agent_capped`,
/// `tests/gpu/agent_gaps_job.py` on an H100): simulate and tune take the
/// recorded cap without --capacity.
#[test]
fn regression_a_real_agent_capture_gives_its_recorded_cap() {
    let file = crate::common::fixture_corpus().join("agent_capped.pickle");
    for command in ["simulate", "tune"] {
        let out = vramscope().args([command, "--json"]).arg(&file).output().expect("run");
        assert!(out.status.success(), "{command}: {}", String::from_utf8_lossy(&out.stderr));
        let answer: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(answer["capacity_bytes"], 1_700_349_870u64, "{command}: {answer}");
        assert_eq!(answer["capacity_source"], "recorded", "{command}");
    }
}
