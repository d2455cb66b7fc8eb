//! The analysis routes of `vramscope serve`, run as a real process on a
//! loopback port with real corpus snapshots uploaded to it: what-if
//! replays, tune, OOM post-mortems, leaks and comparisons, and the errors a
//! bad query gets.

use std::path::PathBuf;

use reqwest::StatusCode;
use serde_json::Value;

use crate::common::server::TestServer;

fn fixture(name: &str) -> PathBuf {
    crate::common::fixture_corpus().join(name)
}

fn u64_of(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn has_frame(frames: &Value, file: &str, line: i64, name: &str) -> bool {
    frames.as_array().is_some_and(|fs| {
        fs.iter().any(|f| f["filename"] == file && f["line"].as_i64() == Some(line) && f["name"] == name)
    })
}

#[tokio::test]
async fn whatif_with_expandable_segments_predicts_the_real_run_on_gpt_varlen() {
    let server = TestServer::start("whatif", &[]);
    let dir = crate::common::large_corpus();
    let id = server.upload_file(&dir.join("gpt_varlen.pickle")).await;
    let real = crate::common::json(&dir.join("gpt_varlen_expandable.stats.json"));
    let real_peak = u64_of(&real["memory_stats"]["reserved_bytes.all.peak"]);
    assert_eq!(real_peak, 3_443_523_584);

    let path = format!("/snapshots/{id}/whatif");
    let (status, w) = server.get_query(&path, &[("alloc_conf", "expandable_segments:True"), ("px", "800")]).await;
    assert_eq!(status, StatusCode::OK, "{w}");
    let peak = u64_of(&w["figures"]["reserved_peak_bytes"]);
    let off = (peak as f64 - real_peak as f64).abs() / real_peak as f64;
    assert!(off <= 0.02, "simulated {peak} vs real {real_peak}");
    assert_eq!(peak, real_peak, "the simulator replays it to the byte");
    assert_eq!(w["settings"], "given");
    assert_eq!(w["alloc_conf"], "expandable_segments:True");

    // One simulated bucket per recorded one, at most one per pixel, and the
    // buckets see the peak.
    let recorded = w["recorded"]["buckets"].as_array().expect("buckets");
    let simulated = w["simulated"].as_array().expect("simulated");
    assert_eq!(recorded.len(), simulated.len());
    assert!(!simulated.is_empty() && simulated.len() <= 800);
    let top = simulated.iter().map(|b| u64_of(&b["reserved"]["max"])).max().expect("buckets");
    assert_eq!(top, peak);
    // The recorded run (default settings) reserved more.
    assert!(u64_of(&w["recorded_reserved_peak_bytes"]) > peak);

    // A zoomed window of the same replay (cached): same figures, buckets
    // inside the window.
    let (start, end) = (w["recorded"]["start"].as_i64().expect("start"), w["recorded"]["end"].as_i64().expect("end"));
    let (s, e) = ((start + (end - start) / 3).to_string(), (end - (end - start) / 3).to_string());
    let query = [("alloc_conf", "expandable_segments:True"), ("px", "300"), ("start", &s), ("end", &e)];
    let (status, z) = server.get_query(&path, &query).await;
    assert_eq!(status, StatusCode::OK, "{z}");
    assert_eq!(z["figures"], w["figures"]);
    assert!(z["simulated"].as_array().expect("simulated").len() <= 300);
    assert_eq!(z["recorded"]["start"].as_i64().map(|x| x.to_string()), Some(s));

    // Under a capacity below the peak it runs out, and says where.
    let cap = (peak / 2).to_string();
    let (status, c) = server.get_query(&path, &[("alloc_conf", "expandable_segments:True"), ("capacity", &cap)]).await;
    assert_eq!(status, StatusCode::OK, "{c}");
    assert!(u64_of(&c["oom"]["row"]) > 0, "{}", c["oom"]);
    assert!(u64_of(&c["figures"]["reserved_peak_bytes"]) <= peak / 2);
}

#[tokio::test]
async fn explain_and_leaks_on_oom_leak() {
    let server = TestServer::start("explain", &[]);
    let id = server.upload_file(&fixture("oom_leak.pickle")).await;
    let oracle = crate::common::json(&fixture("oom_leak.stats.json"));

    let (status, e) = server.get_query(&format!("/snapshots/{id}/explain"), &[]).await;
    assert_eq!(status, StatusCode::OK, "{e}");
    assert_eq!(e["has_trace"], true);
    let ooms = e["ooms"].as_array().expect("ooms");
    assert_eq!(ooms.len(), 1);
    let r = &ooms[0];
    assert_eq!((u64_of(&r["row"]), u64_of(&r["trace_entries"])), (6677, 6680));
    assert_eq!(u64_of(&r["request_bytes"]), 305_920_000);
    assert_eq!(u64_of(&r["segment_request_bytes"]), 306_184_192);
    assert_eq!(u64_of(&r["reserved_unallocated_bytes"]), 365_841_408);
    assert_eq!(u64_of(&r["largest_usable_free_block"]["size"]), 73_662_464);
    assert_eq!(r["cause"], "fragmentation");
    assert_eq!(r["limit"], "process_cap");
    assert!(u64_of(&r["device_free_bytes"]) > 0);
    assert_eq!(u64_of(&r["reserved_peak_bytes"]), u64_of(&oracle["max_memory_reserved"]));
    assert!(has_frame(&r["top_stacks"][0]["frames"], "/srv/jobs/train.py", 96, "run"), "{}", r["top_stacks"][0]);
    // The simulator's verdicts, one per suggested setting.
    let verdicts = r["avoided_by"].as_array().expect("simulated");
    assert!(verdicts.iter().any(|v| v["setting"] == "expandable_segments:True"), "{verdicts:?}");
    assert!(verdicts.iter().all(|v| v["reserved_peak_bytes"].as_u64().is_some() && v["avoids"]["verdict"].is_string()));

    let (status, l) = server.get_query(&format!("/snapshots/{id}/leaks"), &[("top", "5")]).await;
    assert_eq!(status, StatusCode::OK, "{l}");
    let d = &l["devices"][0];
    assert_eq!(d["leaks"]["candidates"].as_array().map(Vec::len), Some(5));
    let first = &d["leaks"]["candidates"][0];
    assert_eq!(u64_of(&first["rank"]), 1);
    assert!(has_frame(&first["frames"], "/srv/jobs/train.py", 96, "run"), "the kept losses' outputs: {first}");
    assert_eq!(first["pattern"], "growing");
    assert_eq!(u64_of(&first["steps_with_growth"]), 10);
    assert_eq!(d["step_source"], "ends of Optimizer.step ranges");
    assert_eq!(d["leaks"]["steps"]["steps"].as_array().map(Vec::len), Some(12));
}

/// Found: a what-if of a snapshot that ran out, without a capacity,
/// honoured the recorded OOM whatever the settings (every setting "ran
/// out" where the run did), and the dashboard's panel could not say which
/// setting avoids it. It now replays under the least the process had, says
/// so, and each setting's OOM is the model's own.
#[tokio::test]
async fn regression_a_whatif_of_a_snapshot_that_ran_out_replays_under_the_inferred_capacity() {
    let server = TestServer::start("whatif-inferred", &[]);
    let id = server.upload_file(&fixture("oom_leak.pickle")).await;
    let (_, e) = server.get_query(&format!("/snapshots/{id}/explain"), &[]).await;
    let least = u64_of(&e["ooms"][0]["capacity_bytes_range"][0]);
    let whatif = format!("/snapshots/{id}/whatif");
    let (status, recorded) = server.get_query(&whatif, &[("px", "50")]).await;
    assert_eq!(status, StatusCode::OK, "{recorded}");
    assert_eq!(
        (u64_of(&recorded["capacity_bytes"]), recorded["capacity_inferred"].clone()),
        (least, Value::Bool(true))
    );
    // The recorded settings under it fail at the recorded row, by the
    // model's own decision.
    assert_eq!(u64_of(&recorded["oom"]["row"]), 6677, "{}", recorded["oom"]);
    // A setting that needs less memory gets further before failing: the
    // recorded failure is not carried into its row.
    let (_, expandable) = server.get_query(&whatif, &[("px", "50"), ("alloc_conf", "expandable_segments:True")]).await;
    assert_eq!(expandable["capacity_inferred"], true);
    assert!(
        u64_of(&expandable["figures"]["reserved_peak_bytes"]) < u64_of(&recorded["figures"]["reserved_peak_bytes"]),
        "{}",
        expandable["figures"]
    );
    // A capacity given is the one used.
    let (_, given) = server.get_query(&whatif, &[("px", "50"), ("capacity", "64GiB")]).await;
    assert_eq!((u64_of(&given["capacity_bytes"]), given["capacity_inferred"].clone()), (64 << 30, Value::Bool(false)));
    assert!(given["oom"].is_null(), "64 GiB is enough: {}", given["oom"]);
}

#[tokio::test]
async fn tune_ranks_the_settings_under_a_capacity() {
    let server = TestServer::start("tune", &[]);
    let id = server.upload_file(&fixture("oom_leak.pickle")).await;
    let (status, t) = server.get_query(&format!("/snapshots/{id}/tune"), &[("capacity", "1GiB")]).await;
    assert_eq!(status, StatusCode::OK, "{t}");
    assert_eq!(u64_of(&t["capacity_bytes"]), 1 << 30);
    let rows = t["rows"].as_array().expect("rows");
    assert!(rows.len() > 5);
    assert_eq!(rows.iter().filter(|r| r["recorded"] == true).count(), 1);
    // Fitting first by reserved peak; those that run out after, the later
    // the better (their peaks are cut short: issue 44).
    let key = |r: &Value| match r["oom"]["row"].as_u64() {
        None => (0, u64_of(&r["reserved_peak_bytes"])),
        Some(row) => (1, u64::MAX - row),
    };
    assert!(rows.windows(2).all(|w| key(&w[0]) <= key(&w[1])), "ranked: fitting first, then by reserved peak");
    // A candidate that runs out says where, as the simulator's own record.
    let failing = rows.iter().find(|r| !r["oom"].is_null()).expect("a 1 GiB cap is too little for some setting");
    assert!(u64_of(&failing["oom"]["requested_bytes"]) > 0, "{}", failing["oom"]);
    assert_eq!(
        rows.iter().map(|r| u64_of(&r["rank"])).collect::<Vec<_>>(),
        (1..=rows.len() as u64).collect::<Vec<_>>()
    );
    // The same again comes from the cache, identical.
    let (_, again) = server.get_query(&format!("/snapshots/{id}/tune"), &[("capacity", "1GiB")]).await;
    assert_eq!(again, t);
}

#[tokio::test]
async fn compare_two_snapshots_before_and_after_a_change() {
    let server = TestServer::start("compare", &[]);
    let dir = crate::common::large_corpus();
    let a = server.upload_file(&dir.join("gpt_varlen.pickle")).await;
    let b = server.upload_file(&dir.join("gpt_varlen_expandable.pickle")).await;
    for align in ["event", "step"] {
        let (status, d) = server.get_query("/compare", &[("a", &a), ("b", &b), ("align", align), ("px", "400")]).await;
        assert_eq!(status, StatusCode::OK, "{d}");
        assert_eq!(d["identical"], false);
        let dev = &d["devices"][0];
        let sa = u64_of(&dev["stats_a"]["reserved_peak_bytes"]);
        let sb = u64_of(&dev["stats_b"]["reserved_peak_bytes"]);
        assert_eq!(sb, 3_443_523_584, "B is the expandable run");
        assert!(sa > sb);
        let t = &d["timelines"];
        assert_eq!(t["align"], align);
        let y_max = u64_of(&t["y_max"]);
        assert_eq!(y_max, sa.max(sb), "one y scale: the higher reserved peak");
        for side in ["a", "b"] {
            let buckets = t[side]["buckets"].as_array().expect("buckets");
            assert!(!buckets.is_empty() && buckets.len() <= 800, "{align} {side}: {}", buckets.len());
            let x_end = t["x_end"].as_f64().expect("x_end");
            assert!(buckets.iter().all(|k| k["x1"].as_f64().is_some_and(|x| x <= x_end + 1e-9)));
        }
    }

    // Two ranks of one job are two snapshots too; a snapshot against itself
    // is identical.
    let leak = server.upload_file(&fixture("oom_leak.pickle")).await;
    let (status, same) = server.get_query("/compare", &[("a", &leak), ("b", &leak)]).await;
    assert_eq!(status, StatusCode::OK, "{same}");
    assert_eq!(same["identical"], true);
    assert_eq!(same["devices"][0]["changed_stacks"], 0);
    let streams = server.upload_file(&fixture("streams.pickle")).await;
    let (status, other) = server.get_query("/compare", &[("a", &leak), ("b", &streams), ("top", "3")]).await;
    assert_eq!(status, StatusCode::OK, "{other}");
    let dev = &other["devices"][0];
    assert!(dev["stacks"].as_array().is_some_and(|s| s.len() == 3));
    assert_eq!(
        u64_of(&dev["vanished"]) + u64_of(&dev["appeared"]) + u64_of(&dev["grew"]) + u64_of(&dev["shrank"]),
        u64_of(&dev["changed_stacks"])
    );
}

#[tokio::test]
async fn bad_queries_are_refused_with_the_reason_and_unknown_ids_are_404() {
    let server = TestServer::start("errors", &[]);
    let id = server.upload_file(&fixture("streams.pickle")).await;
    let whatif = format!("/snapshots/{id}/whatif");
    for (conf, says) in [
        ("max_split_size_mb:8", "max_split_size_mb"),
        ("no_such_option:1", "no_such_option"),
        ("expandable_segments:yes", "expandable_segments"),
    ] {
        let (status, body) = server.get_query(&whatif, &[("alloc_conf", conf)]).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{conf}: {body}");
        let message = body["error"].as_str().expect("error");
        assert!(message.contains(says), "{conf}: {message}");
    }
    let (status, body) = server.get_query(&whatif, &[("capacity", "80G")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["error"].as_str().is_some_and(|m| m.contains("capacity")), "{body}");
    let (status, body) = server.get_query(&whatif, &[("device", "7")]).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    // A snapshot without a trace cannot be replayed: said, not crashed.
    let state_only = server.upload_file(&fixture("state_only.pickle")).await;
    let (status, body) = server.get_query(&format!("/snapshots/{state_only}/whatif"), &[]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["error"].as_str().is_some_and(|m| m.contains("no trace")), "{body}");

    let missing = "0190ffff-ffff-7fff-bfff-ffffffffffff";
    for view in ["whatif", "explain", "leaks", "tune"] {
        let (status, body) = server.get_query(&format!("/snapshots/{missing}/{view}"), &[]).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{view}: {body}");
    }
    let (status, _) = server.get_query("/compare", &[("a", &id), ("b", missing)]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = server.get_query("/compare", &[("a", &id)]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["error"].as_str().is_some_and(|m| m.contains("b=")), "{body}");
}

#[tokio::test]
async fn breakdown_route_answers_what_the_cli_prints_and_a_series_for_the_chart() {
    let server = TestServer::start("breakdown", &[]);
    let file = fixture("breakdown_python_after_step.pickle");
    let id = server.upload_file(&file).await;
    let (status, answer) =
        server.get_query(&format!("/snapshots/{id}/breakdown"), &[("at", "3000"), ("px", "64")]).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["breakdown", "--json", "--at", "3000"])
        .arg(&file)
        .output()
        .expect("run");
    let cli: Value = serde_json::from_slice(&out.stdout).expect("json");
    let mut api = answer["devices"][0].clone();
    assert_eq!(api["series"]["rows"].as_array().map(Vec::len), Some(64), "{api}");
    api.as_object_mut().expect("object").remove("series");
    assert_eq!(api, cli["devices"][0]);
    let (status, bad) = server.get_query(&format!("/snapshots/{id}/breakdown"), &[("at", "99999999")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
}
