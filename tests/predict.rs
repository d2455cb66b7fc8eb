//! `GET /api/v1/predict` on a real server: two real snapshots of one job
//! at two sizes, uploaded, answer what `vramscope predict --json` answers
//! for the same files; a repeat is answered from the kept answers. The
//! refusals of hostile queries are in `hostile/http.rs`.

use std::path::PathBuf;
use std::process::Command;

use reqwest::StatusCode;
use serde_json::Value;

use crate::common::server::TestServer;

/// Two runs of one small transformer, batch 4 and batch 6 (H200,
/// `tests/gpu`), each under 1.5 MB.
pub(crate) fn predict_fixture(name: &str) -> PathBuf {
    crate::common::workspace_root().join("tests/fixtures/predict").join(name)
}

/// The report with the runs' names blanked: the CLI names a run by its
/// file, the server by its snapshot id.
fn without_names(mut report: Value) -> Value {
    for list in ["runs", "unmatched"] {
        if let Some(items) = report[list].as_array_mut() {
            for item in items {
                for key in ["name", "run"] {
                    if item.get(key).is_some() {
                        item[key] = Value::Null;
                    }
                }
            }
        }
    }
    report
}

#[tokio::test]
async fn a_prediction_over_two_uploaded_snapshots_is_the_command_lines() {
    let server = TestServer::start("predict", &[]);
    let (small, large) = (predict_fixture("transformer_4.pickle"), predict_fixture("transformer_6.pickle"));
    let a = server.upload_file(&small).await;
    let b = server.upload_file(&large).await;
    let runs = format!("{a}:4,{b}:6");
    let query = [("runs", runs.as_str()), ("at", "8,16"), ("largest", "true"), ("capacity", "2GiB")];
    let (status, answer) = server.get_query("/predict", &query).await;
    assert_eq!(status, StatusCode::OK, "{answer}");

    let out = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .arg("predict")
        .arg(format!("{}=4", small.display()))
        .arg(format!("{}=6", large.display()))
        .args(["--at", "8,16", "--largest", "--capacity", "2GiB", "--json"])
        .output()
        .expect("run vramscope predict");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let cli: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");

    // Runs are named by their snapshot ids, largest size first.
    let names: Vec<&str> = answer["runs"].as_array().expect("runs").iter().filter_map(|r| r["name"].as_str()).collect();
    assert_eq!(names, vec![b.as_str(), a.as_str()]);
    assert_eq!(without_names(answer.clone()), without_names(cli));
    assert_eq!(answer["predictions"][0]["size"], 8);
    assert_eq!(answer["capacity_bytes"], 2u64 << 30);
    assert!(answer["largest_fitting_size"].as_u64().is_some_and(|n| n >= 6), "{}", answer["largest_fitting_size"]);
}

#[tokio::test]
async fn a_repeat_is_answered_from_the_kept_predictions() {
    let server = TestServer::start("predict-cache", &[]);
    let id = server.upload_file(&crate::common::fixture_corpus().join("mlp_train_all.pickle")).await;
    // The same file under two labels: a constant (and valid) input.
    let (status, again) = server
        .upload(
            std::fs::read(crate::common::fixture_corpus().join("mlp_train_all.pickle")).expect("fixture"),
            "name=again",
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{again}");
    let other = again["id"].as_str().expect("id").to_owned();
    assert_ne!(id, other);
    let runs = format!("{id}:4,{other}:8");
    assert_eq!(server.metric("predictions_computed_total", None).await, 0);
    let (status, first) = server.get_query("/predict", &[("runs", &runs), ("at", "16,32"), ("capacity", "4GiB")]).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(server.metric("predictions_computed_total", None).await, 1);
    // The same query spelled otherwise (spaces, the capacity in MiB).
    let spelled = format!(" {id}:4 , {other}:8");
    let (status, second) =
        server.get_query("/predict", &[("runs", &spelled), ("at", "16, 32"), ("capacity", "4096MiB")]).await;
    assert_eq!(status, StatusCode::OK, "{second}");
    assert_eq!(second, first);
    assert_eq!(server.metric("predictions_computed_total", None).await, 1, "the repeat was not computed again");
    // Constant between two identical runs.
    let peaks: Vec<u64> = first["predictions"]
        .as_array()
        .expect("predictions")
        .iter()
        .filter_map(|p| p["reserved_peak_bytes"].as_u64())
        .collect();
    assert_eq!(peaks.len(), 2);
    assert_eq!(peaks[0], peaks[1]);
}

/// Issue 44, item 23: "96 × 324.00 MiB in attention_384.pickle" read as 96
/// allocations of 324 MiB each, where the JSON says 339,739,488 bytes in all.
#[test]
fn regression_allocations_not_in_every_run_are_counted_with_their_total() {
    let dir = crate::common::workspace_root().join("tests/fixtures/predict");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .current_dir(&dir)
        .args(["predict", "attention_128.pickle=128", "attention_256.pickle=256", "attention_384.pickle=384"])
        .args(["--at", "512"])
        .output()
        .expect("predict");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("  96 allocations, 324.00 MiB in all, in attention_384.pickle"), "{text}");
    let json = std::process::Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .current_dir(&dir)
        .args(["predict", "attention_128.pickle=128", "attention_256.pickle=256", "attention_384.pickle=384"])
        .args(["--at", "512", "--json"])
        .output()
        .expect("predict");
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    let u = &v["unmatched"][0];
    assert_eq!((u["count"].as_u64(), u["bytes"].as_u64()), (Some(96), Some(339_739_488)), "{u}");
}

fn predict_attention(extra: &[&str]) -> std::process::Output {
    let dir = crate::common::workspace_root().join("tests/fixtures/predict");
    std::process::Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .current_dir(&dir)
        .args(["predict", "attention_128.pickle=128", "attention_256.pickle=256", "attention_384.pickle=384"])
        .args(extra)
        .output()
        .expect("predict")
}

/// Issue 43, item 3: `--settings` under 6 GiB ranks garbage collection at
/// 0.6 with max_split_size_mb:256 first (sequence 2432, where the defaults
/// fit 2304), in the JSON's `by_setting` and in the table, which says what
/// to try and what it trades away.
#[test]
fn settings_rank_what_would_make_it_fit() {
    let out = predict_attention(&["--largest", "--capacity", "6GiB", "--step", "64", "--settings", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["largest_fitting_size"], 2304);
    let by = v["by_setting"].as_array().expect("by_setting");
    assert_eq!(by[0]["alloc_conf"], "garbage_collection_threshold:0.6,max_split_size_mb:256");
    assert_eq!(by[0]["largest_fitting_size"], 2432);
    assert!(by[0]["reserved_peak_bytes"].as_u64().is_some_and(|b| b <= 6 << 30), "{}", by[0]);
    let baseline: Vec<&Value> = by.iter().filter(|o| o["baseline"] == true).collect();
    assert_eq!(baseline.len(), 1);
    assert_eq!(
        (baseline[0]["alloc_conf"].as_str(), baseline[0]["largest_fitting_size"].as_u64()),
        (Some(""), Some(2304))
    );

    let out = predict_attention(&["--largest", "--capacity", "6GiB", "--step", "64", "--settings"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("by allocator setting, under 6 GiB (best first):"), "{text}");
    assert!(
        text.contains("try: PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.6,max_split_size_mb:256"),
        "{text}"
    );
    assert!(text.contains("trade-off: garbage_collection_threshold"), "{text}");

    let out = predict_attention(&["--at", "2432", "--capacity", "6GiB", "--settings"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("size 2432: fits with garbage_collection_threshold:0.6,max_split_size_mb:256\n"), "{text}");
    // No capacity, none recorded: nothing to fit under.
    let out = predict_attention(&["--at", "2432", "--settings"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs a capacity"));
}

/// Issue 43, item 4: `--gpu` takes the card's capacity, its source said;
/// names are matched forgivingly, and an unknown one lists the known.
#[test]
fn a_gpu_by_name_gives_its_capacity() {
    let out = predict_attention(&["--largest", "--step", "64", "--gpu", "nvidia h200", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["capacity_bytes"], 150_109_880_320u64 - 789_381_120);
    assert_eq!(v["capacity_source"], "gpu:H200");
    assert!(v["notes"].as_array().expect("notes").iter().any(|n| n.as_str().is_some_and(|n| n.contains("(measured;"))));
    let out = predict_attention(&["--largest", "--gpu", "A100"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--gpu \"A100\": no card of that name; known: H100-80GB, H200, A100-40GB, A100-80GB"),
        "{err}"
    );
    let out = predict_attention(&["--largest", "--gpu", "h200", "--capacity", "8GiB"]);
    assert_eq!(out.status.code(), Some(2), "--gpu and --capacity both given");
}
