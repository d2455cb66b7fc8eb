//! Abuse bench: one server under honest load and an attacker at once.
//!
//! Run with `cargo bench -p vramscope --bench abuse`. For a fixed time
//! (`VRAMSCOPE_BENCH_SECS`, default 60) against one `vramscope serve` on a
//! loopback port, with its default settings but a 512 MiB parse budget:
//!
//! * 20 uploaders send real corpus files (the small fixtures and, when the
//!   corpus is there, `gpt_varlen`), each gzipped with its own header time,
//!   so that every upload is new bytes the server stores and parses;
//! * 20 viewers ask for timelines, allocator states, segment timelines and
//!   searches of what has landed;
//! * one attacker uploads bombs in a loop: 48 MB of MARKs, 96 MB of
//!   MARK/POP_MARK pairs in a few KB of zstd, a dict of 130,000 one-pair
//!   SETITEMS;
//! * a prober asks `/healthz` every 50 ms.
//!
//! Then every landed upload is downloaded and compared with what was sent.
//! It prints the uploads that landed byte-identical, the viewers' answers,
//! the bombs refused, `/healthz` latency and the server's peak RSS. It
//! asserts nothing about time.
//!
//! `VRAMSCOPE_BENCH_BASELINE`: another `vramscope` binary (an older
//! commit's) to run the same load against instead, for a before/after.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod common;
use common::{Server, Table, baseline, corpus_dir, env_number, target_dir, workspace_root};

const UPLOADERS: usize = 20;
const VIEWERS: usize = 20;

/// What the workers counted.
#[derive(Default)]
struct Counts {
    uploads_sent: AtomicU64,
    uploads_failed: AtomicU64,
    views_ok: AtomicU64,
    /// 4xx: a view that does not apply (no trace on that device, say).
    views_refused: AtomicU64,
    /// 5xx, or no answer.
    views_failed: AtomicU64,
    bombs_sent: AtomicU64,
    bombs_refused: AtomicU64,
}

/// An upload that landed: its id and the bytes sent.
type Landed = (String, Vec<u8>);

fn repeat(unit: &[u8], times: usize) -> Vec<u8> {
    let mut out = vec![0x80, 4];
    for _ in 0..times {
        out.extend_from_slice(unit);
    }
    out.extend_from_slice(b"N.");
    out
}

fn bombs() -> Vec<(&'static str, Vec<u8>)> {
    let marks = repeat(b"(", 48 << 20);
    let pairs = repeat(b"(1", 48 << 20);
    let zstd = std::process::Command::new("zstd")
        .args(["-c", "-q"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            let mut stdin = child.stdin.take().ok_or_else(|| std::io::Error::other("stdin"))?;
            let writer = std::thread::spawn(move || stdin.write_all(&pairs));
            let out = child.wait_with_output()?;
            writer.join().map_err(|_| std::io::Error::other("writer"))??;
            Ok(out.stdout)
        })
        .unwrap_or_default();
    let mut dict = vec![0x80, 4, b'}'];
    for i in 0..130_000u32 {
        dict.extend_from_slice(b"(J");
        dict.extend_from_slice(&i.to_le_bytes());
        dict.extend_from_slice(&[b'K', 1, b'u']);
    }
    dict.push(b'.');
    let mut out = vec![("marks", marks), ("setitems", dict)];
    if !zstd.is_empty() {
        out.push(("zstd pairs", zstd));
    }
    out
}

/// The real files the uploaders send.
fn corpus_files() -> Vec<(String, Vec<u8>)> {
    let root = workspace_root();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(root.join("tests/fixtures/corpus"))
        .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "pickle")).collect())
        .unwrap_or_default();
    let corpus = corpus_dir(&root);
    paths.push(corpus.join("gpt_varlen.pickle"));
    paths.sort();
    paths
        .into_iter()
        .filter_map(|p| Some((p.file_name()?.to_string_lossy().into_owned(), std::fs::read(&p).ok()?)))
        .collect()
}

/// `bytes` gzipped with header time `mtime`: new bytes, the same snapshot.
fn gzip(bytes: &[u8], mtime: u32) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::GzBuilder::new().mtime(mtime).write(Vec::new(), flate2::Compression::fast());
    let _ = encoder.write_all(bytes);
    encoder.finish().unwrap_or_default()
}

fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let secs: u64 = env_number("VRAMSCOPE_BENCH_SECS", 60);
    let data = target_dir(&workspace_root()).join(format!("bench-abuse-{}", std::process::id()));
    let program = baseline().unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_vramscope")));
    let env = [("VRAMSCOPE_PARSE_MEMORY_BUDGET", (512u64 << 20).to_string())];
    let server = match Server::start_program(&program, &data, &env) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            println!("abuse bench: cannot start the server: {e}");
            return;
        }
    };
    let files = Arc::new(corpus_files());
    let bombs = Arc::new(bombs());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "abuse bench: {cores} cores, {secs} s, {UPLOADERS} uploaders of {} corpus files, {VIEWERS} viewers, 1 bomb \
         uploader ({} kinds), /healthz every 50 ms; server {}",
        files.len(),
        bombs.len(),
        program.display()
    );
    let client = reqwest::Client::builder().timeout(Duration::from_secs(300)).build().expect("client");
    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let landed: Arc<std::sync::Mutex<Vec<Landed>>> = Arc::default();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();

    for u in 0..UPLOADERS {
        let (client, server, files, counts, stop, landed) =
            (client.clone(), server.clone(), files.clone(), counts.clone(), stop.clone(), landed.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let (name, bytes) = &files[(u + n as usize) % files.len()];
                let body = gzip(bytes, (u as u32) << 20 | n);
                n += 1;
                counts.uploads_sent.fetch_add(1, Ordering::Relaxed);
                let response = client
                    .post(server.api(&format!("/snapshots?name={name}&job=abuse&rank={u}")))
                    .header("content-type", "application/octet-stream")
                    .body(body.clone())
                    .send()
                    .await;
                let id = match response {
                    Ok(r) if r.status().is_success() => {
                        r.json::<serde_json::Value>().await.ok().and_then(|v| v["id"].as_str().map(str::to_owned))
                    }
                    _ => None,
                };
                match id {
                    Some(id) => landed.lock().unwrap_or_else(|p| p.into_inner()).push((id, body)),
                    None => {
                        counts.uploads_failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for v in 0..VIEWERS {
        let (client, server, counts, stop, landed) =
            (client.clone(), server.clone(), counts.clone(), stop.clone(), landed.clone());
        tasks.push(tokio::spawn(async move {
            let views = ["timeline?px=1000", "state?at=100", "segments?columns=300", "search?q=py"];
            let mut n = v;
            while !stop.load(Ordering::Relaxed) {
                let id = {
                    let landed = landed.lock().unwrap_or_else(|p| p.into_inner());
                    (!landed.is_empty()).then(|| landed[n % landed.len()].0.clone())
                };
                let Some(id) = id else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let view = views[n % views.len()];
                n += 1;
                let status =
                    client.get(server.api(&format!("/snapshots/{id}/{view}"))).send().await.map(|r| r.status());
                let counter = match status {
                    Ok(s) if s.is_success() => &counts.views_ok,
                    Ok(s) if s.is_client_error() => &counts.views_refused,
                    _ => &counts.views_failed,
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    {
        let (client, server, bombs, counts, stop) =
            (client.clone(), server.clone(), bombs.clone(), counts.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let (kind, bytes) = &bombs[n % bombs.len()];
                n += 1;
                counts.bombs_sent.fetch_add(1, Ordering::Relaxed);
                let refused = client
                    .post(server.api(&format!("/snapshots?name=bomb-{kind}")))
                    .header("content-type", "application/octet-stream")
                    .body(bytes.clone())
                    .send()
                    .await
                    .is_ok_and(|r| r.status() == reqwest::StatusCode::UNPROCESSABLE_ENTITY);
                if refused {
                    counts.bombs_refused.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let prober = {
        let (client, server, stop) = (client.clone(), server.clone(), stop.clone());
        tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut failures = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                match client.get(format!("{}/healthz", server.url)).send().await {
                    Ok(r) if r.status().is_success() => latencies.push(started.elapsed()),
                    _ => failures += 1,
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (latencies, failures)
        })
    };

    tokio::time::sleep_until(deadline.into()).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = task.await;
    }
    let (mut latencies, health_failures) = prober.await.unwrap_or_default();
    latencies.sort();
    let rss = peak_rss(server.pid());

    // Every landed upload, read back.
    let landed = std::mem::take(&mut *landed.lock().unwrap_or_else(|p| p.into_inner()));
    let mut identical = 0;
    for (id, sent) in &landed {
        let back = client.get(server.api(&format!("/snapshots/{id}/file"))).send().await;
        if let Ok(r) = back
            && r.bytes().await.is_ok_and(|b| b.as_ref() == sent.as_slice())
        {
            identical += 1;
        }
    }
    let c = &counts;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let mut table = Table::new(&["what", "figure"]);
    table.row(vec![
        "uploads landed byte-identical".into(),
        format!(
            "{identical} of {} landed ({} sent, {} refused or failed)",
            landed.len(),
            get(&c.uploads_sent),
            get(&c.uploads_failed)
        ),
    ]);
    table.row(vec![
        "viewer answers".into(),
        format!(
            "{} ok ({:.0}/s), {} refused as not applicable (4xx), {} failed (5xx or no answer)",
            get(&c.views_ok),
            get(&c.views_ok) as f64 / secs as f64,
            get(&c.views_refused),
            get(&c.views_failed)
        ),
    ]);
    table.row(vec!["bombs refused (422)".into(), format!("{} of {}", get(&c.bombs_refused), get(&c.bombs_sent))]);
    table.row(vec![
        "/healthz latency".into(),
        format!(
            "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms over {} probes, {health_failures} failed",
            percentile(&latencies, 0.5).as_secs_f64() * 1e3,
            percentile(&latencies, 0.99).as_secs_f64() * 1e3,
            latencies.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
            latencies.len()
        ),
    ]);
    table.row(vec!["server peak RSS".into(), common::fmt_mb(rss)]);
    table.print();
    drop(server);
    let _ = std::fs::remove_dir_all(&data);
}
