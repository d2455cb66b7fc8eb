//! The `vramscope` command line, run as a user would.

use std::process::Command;

fn vramscope() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vramscope"))
}

#[test]
fn stats_json_has_the_documented_shape() {
    let file = crate::common::fixture_corpus().join("oom_leak.pickle");
    let out = vramscope().args(["stats", "--json"]).arg(&file).output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["file"], file.display().to_string());
    assert_eq!(v["format_version"], "2.5");
    let d = &v["devices"][0];
    for key in [
        "device",
        "segments",
        "trace_entries",
        "trace_wrapped",
        "reserved_bytes",
        "allocated_bytes",
        "active_bytes",
        "requested_bytes",
        "inactive_split_bytes",
        "reserved_peak_bytes",
        "requested_peak_bytes",
        "peak_is_window_only",
        "largest_free_block_bytes",
        "ooms",
    ] {
        assert!(!d[key].is_null(), "missing {key} in {d}");
    }
    assert_eq!(d["ooms"], 1);
    assert_eq!(d["reserved_bytes"], 2902458368u64);
}

#[test]
fn stats_prints_a_human_summary() {
    let file = crate::common::fixture_corpus().join("ring_overflow.pickle");
    let out = vramscope().arg("stats").arg(&file).output().expect("run");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("device 0: 3 segments, 20000 trace entries"), "{text}");
    assert!(text.contains("ring buffer wrapped"), "{text}");
    assert!(text.contains("within the trace window"), "{text}");
    assert!(out.stderr.is_empty(), "a fast read shows no progress bar");
}

#[test]
fn bad_input_exits_2_with_one_line_naming_the_file() {
    let dir = crate::common::synthetic_dir();
    for name in ["truncated_half.pickle", "global_reduce.pickle", "not_a_snapshot_int.pickle", "no/such/file"] {
        let path = dir.join(name);
        let out = vramscope().arg("stats").arg(&path).output().expect("run");
        assert_eq!(out.status.code(), Some(2), "{name}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{name}: {err}");
        assert!(err.contains(&path.display().to_string()), "{name}: {err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn state_only_snapshot_has_unknown_peaks() {
    let file = crate::common::fixture_corpus().join("state_only.pickle");
    let out = vramscope().args(["stats", "--json"]).arg(&file).output().expect("run");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(v["devices"][0]["reserved_peak_bytes"].is_null());
    assert_eq!(v["devices"][0]["trace_entries"], 0);
}

/// Regression: `vramscope stats F | head -1` printed "Broken pipe" and failed.
#[test]
fn regression_stats_into_a_closed_pipe_exits_quietly() {
    let file = crate::common::fixture_corpus().join("oom_leak.pickle");
    let mut child = vramscope()
        .arg("stats")
        .arg(&file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // Hang up before the summary is written (reading the file takes longer
    // than this), as `head` does once it has its lines.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn breakdown_json_keeps_its_interface_and_matches_the_truth_recorded_beside_the_file() {
    let file = crate::common::fixture_corpus().join("breakdown_all_after_step.pickle");
    let truth: serde_json::Value = serde_json::from_slice(
        &std::fs::read(crate::common::fixture_corpus().join("breakdown_all_after_step.truth.json")).expect("truth"),
    )
    .expect("truth json");
    let out = vramscope().args(["breakdown", "--json"]).arg(&file).output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["file"], file.display().to_string());
    let d = &v["devices"][0];
    assert_eq!(d["device"], 0);
    assert!(d["at_row"].is_u64(), "{d}");
    assert!(d["stages"].is_array(), "{d}");
    for key in ["parameters", "gradients", "optimizer_state"] {
        let (ours, want) = (d["categories"][key].as_f64().expect(key), truth[key].as_f64().expect(key));
        assert!((ours - want).abs() <= want * 0.02, "{key}: {ours} against the true {want}");
    }
    for key in ["activations", "other"] {
        assert!(d["categories"][key].is_u64(), "{key} in {d}");
    }
    // The human table names every category and says how sure it is.
    let out = vramscope().arg("breakdown").arg(&file).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    for word in ["parameters", "gradients", "optimizer state", "activations", "other", "from stacks", "Optimizer.step"]
    {
        assert!(text.contains(word), "{word} missing from:\n{text}");
    }
    // A row past the trace is bad input, named.
    let out = vramscope().args(["breakdown", "--at", "4000000000"]).arg(&file).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("past the end"));
}

#[test]
fn regression_upload_to_a_server_that_never_answers_gives_up_after_its_timeout() {
    // A server that takes the file and says nothing held `vramscope upload`
    // (a CI step) for ever: --timeout (600 s by default) ends it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    // Detached: it reads the upload, answers nothing, and holds on.
    let _holder = std::thread::spawn(move || {
        use std::io::Read;
        let (mut socket, _) = listener.accept().expect("accept");
        let mut sink = [0u8; 1 << 16];
        let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::time::Instant::now() < until {
            if matches!(socket.read(&mut sink), Ok(0) | Err(_)) {
                break;
            }
        }
    });
    let file = crate::common::fixture_corpus().join("state_only.pickle");
    let out = vramscope()
        .args(["upload", "--server", &url, "--timeout", "2s"])
        .arg(&file)
        .env_remove("VRAMSCOPE_TOKEN")
        .output()
        .expect("upload");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("sent nothing for 2 s (--timeout)"), "{stderr}");
}

/// The CLI reads a file in its read-ahead thread's 1 MiB chunks, in place:
/// a value longer than a chunk (here a 3 MiB string) spans several and is
/// read whole, and a claimed length past the file fails on the budget at
/// the byte that claims it, not on a buffer of that size.
#[test]
fn a_value_longer_than_the_read_ahead_chunks_is_read_whole() {
    let dir = crate::common::server::unique_dir("cli-long-value");
    let long = dir.join("long_string.pickle");
    let mut bytes = b"\x80\x04\x8d".to_vec();
    bytes.extend_from_slice(&(3u64 << 20).to_le_bytes());
    bytes.extend(std::iter::repeat_n(b'x', 3 << 20));
    bytes.push(b'.');
    std::fs::write(&long, &bytes).expect("write");
    let out = vramscope().args(["stats", "--json"]).arg(&long).output().expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not a PyTorch memory snapshot: the pickle holds str \"xxxx"), "{err}");

    let claimed = dir.join("claimed.pickle");
    let mut bytes = b"\x80\x04\x8d".to_vec();
    bytes.extend_from_slice(&10_000_000_000u64.to_le_bytes());
    bytes.extend(std::iter::repeat_n(b'x', 3 << 20));
    std::fs::write(&claimed, &bytes).expect("write");
    let out = vramscope().args(["stats", "--json"]).arg(&claimed).output().expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("memory budget exceeded at byte 2"), "{err}");
}

/// Issue 44: `agent --help` and `mcp --help` showed `[env: VRAMSCOPE_SERVER=]`
/// with a stray `=` when the variable was unset (clap prints the current
/// value after it). Every command's help names its variables bare.
#[test]
fn regression_help_names_environment_variables_without_a_stray_equals_sign() {
    let top = vramscope().arg("--help").output().expect("help");
    let text = String::from_utf8_lossy(&top.stdout).into_owned();
    let commands: Vec<String> = text
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() >= 10, "{commands:?}");
    let mut named = 0;
    for command in &commands {
        let out = vramscope().args([command.as_str(), "--help"]).env("VRAMSCOPE_SERVER", "").output().expect("help");
        let help = String::from_utf8_lossy(&out.stdout);
        for line in help.lines().filter(|l| l.contains("[env: ")) {
            named += 1;
            assert!(!line.contains("=]"), "{command} --help: {line}");
        }
    }
    assert!(named >= 4, "only {named} environment variables named");
}

/// Issue 44, item 24: a README renamed `.pickle` said "unknown or
/// unsupported pickle opcode 0x23", a text file "memo GET of index 101", a
/// `torch.save` checkpoint something that read like an attack, random gzip
/// never said gzip. What the file looks like comes first; the kind stays
/// the reader's.
#[test]
fn regression_a_file_that_is_no_pickle_is_said_to_be_what_it_looks_like() {
    let dir = std::env::temp_dir().join(format!("vramscope-not-a-pickle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let mut zip = b"PK\x03\x04".to_vec();
    zip.extend_from_slice(&[0u8; 200]);
    let gzipped_noise =
        crate::common::gzip(&(0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect::<Vec<_>>());
    let cases: [(&str, Vec<u8>, &str); 5] = [
        (
            "readme.pickle",
            b"# vramscope\n\nA self-hosted GPU memory observatory".to_vec(),
            "a text file (it starts with \"# vramscope  A self-hosted",
        ),
        ("model.pt", zip, "a ZIP archive, which is what torch.save writes"),
        (
            "noise.pickle.gz",
            gzipped_noise,
            "a gzip file whose content is binary data that is not a pickle (it starts with bytes",
        ),
        ("empty.pickle", Vec::new(), "an empty file"),
        ("notes.json", br#"{"segments": []}"#.to_vec(), "a JSON or other text file"),
    ];
    for (name, bytes, said) in cases {
        let path = dir.join(name);
        std::fs::write(&path, &bytes).expect("write");
        let out = vramscope().args(["stats"]).arg(&path).output().expect("run");
        assert_eq!(out.status.code(), Some(2), "{name}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with(&format!("vramscope: error: not a memory snapshot: {said}")), "{name}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        let json = vramscope().args(["stats", "--json"]).arg(&path).output().expect("run");
        assert_eq!(json.status.code(), Some(2));
    }
    // A real snapshot, plain and gzipped, is read as before.
    let real = crate::common::fixture_corpus().join("mlp_train_all.pickle");
    assert!(vramscope().arg("stats").arg(&real).output().expect("run").status.success());
    std::fs::remove_dir_all(&dir).ok();
}
