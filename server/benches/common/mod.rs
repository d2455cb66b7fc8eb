//! Helpers the benchmarks share: where the workspace is, the server they
//! start, figures formatting and the aligned table they print.
#![allow(dead_code)]

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::header::{ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE};
use serde_json::Value;
use tokio_util::io::ReaderStream;

/// Trace entries of the generated large snapshot.
pub(crate) const LARGE_ENTRIES: u64 = 1_500_000;
/// File name of the generated large snapshot.
pub(crate) const LARGE_NAME: &str = "large_1500k.pickle";

pub(crate) fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// The corpus folder: `VRAMSCOPE_CORPUS`, else `../shared/corpus` beside
/// the workspace root (whether it exists is the caller's question).
pub(crate) fn corpus_dir(root: &Path) -> PathBuf {
    env_path("VRAMSCOPE_CORPUS").unwrap_or_else(|| root.join("../shared/corpus"))
}

/// A number from the environment variable `name`, else `default`.
pub(crate) fn env_number<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The Python that runs the reference side: `VRAMSCOPE_BENCH_PYTHON`, else `python3`.
pub(crate) fn python() -> String {
    std::env::var("VRAMSCOPE_BENCH_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// A path from the environment variable `name`, if set.
pub(crate) fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).map(PathBuf::from)
}

/// Whether the environment variable `name` is set (to anything).
pub(crate) fn env_flag(name: &str) -> bool {
    std::env::var_os(name).is_some()
}

/// Another `vramscope` binary to measure beside this one (an older
/// commit's build): `VRAMSCOPE_BENCH_BASELINE`, if set.
pub(crate) fn baseline() -> Option<PathBuf> {
    env_path("VRAMSCOPE_BENCH_BASELINE")
}

pub(crate) fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() { dir } else { root.join(dir) }
        }
        None => root.join("target"),
    }
}

pub(crate) fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

pub(crate) fn pass(ok: bool) -> &'static str {
    if ok { "PASS" } else { "MISS" }
}

pub(crate) fn fmt_secs(d: Option<Duration>) -> String {
    match d {
        Some(d) if d.as_secs_f64() >= 1.0 => format!("{:.2} s", d.as_secs_f64()),
        Some(d) if d.as_secs_f64() >= 1e-3 => format!("{:.1} ms", d.as_secs_f64() * 1e3),
        Some(d) => format!("{:.1} µs", d.as_secs_f64() * 1e6),
        None => "-".to_owned(),
    }
}

pub(crate) fn fmt_mb(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "-".to_owned(), |b| format!("{:.1} MB", b as f64 / 1e6))
}

pub(crate) fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or_else(|| "-".to_owned(), |r| format!("{r:.2}x"))
}

pub(crate) struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(header: &[&str]) -> Self {
        Self { rows: vec![header.iter().map(|s| (*s).to_owned()).collect()] }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub(crate) fn print(&self) {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..cols)
            .map(|c| self.rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0))
            .collect();
        for (i, row) in self.rows.iter().enumerate() {
            let line: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(c, s)| {
                    let pad = widths[c].saturating_sub(s.chars().count());
                    // text columns left-aligned, figures right-aligned
                    if c < 2 || c == cols - 1 {
                        format!("{s}{}", " ".repeat(pad))
                    } else {
                        format!("{}{s}", " ".repeat(pad))
                    }
                })
                .collect();
            println!("{}", line.join("  ").trim_end());
            if i == 0 {
                let total: usize = widths.iter().sum::<usize>() + 2 * cols.saturating_sub(1);
                println!("{}", "-".repeat(total));
            }
        }
    }
}

/// The large generated snapshot both benches read, in `dir`; generated with
/// `gen_large_snapshot.py` when absent.
pub(crate) fn ensure_large(dir: &Path, python: &str) -> Result<PathBuf, String> {
    ensure_generated(dir, LARGE_NAME, LARGE_ENTRIES, python)
}

/// `dir/name`, a snapshot of `entries` trace entries generated (seed 0) by
/// `gen_large_snapshot.py` when absent.
pub(crate) fn ensure_generated(dir: &Path, name: &str, entries: u64, python: &str) -> Result<PathBuf, String> {
    ensure_generated_with(dir, name, python, &["--entries", &entries.to_string()])
}

/// `dir/name`, generated (seed 0) by `gen_large_snapshot.py` with `args`
/// when absent.
pub(crate) fn ensure_generated_with(dir: &Path, name: &str, python: &str, args: &[&str]) -> Result<PathBuf, String> {
    let path = dir.join(name);
    if path.is_file() {
        return Ok(path);
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/gen_large_snapshot.py");
    println!("generating {} ({}) with {} ...", path.display(), args.join(" "), script.display());
    let status = Command::new(python)
        .arg(&script)
        .arg(&path)
        .args(args)
        .args(["--seed", "0"])
        .status()
        .map_err(|e| format!("run {python}: {e}"))?;
    if !status.success() || !path.is_file() {
        return Err(format!("{} failed ({status})", script.display()));
    }
    Ok(path)
}

/// A client that decodes nothing: feature unification turns on reqwest's
/// decoders (object_store wants them), and without `no_*` every request
/// would ask for gzip and undo it, hiding the bytes on the wire.
pub(crate) fn raw_client(timeout: Duration) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder().timeout(timeout).no_gzip().no_brotli().no_deflate().no_zstd().build()
}

/// Reads the file once so that every timed run finds it in the page cache.
pub(crate) fn warm_page_cache(path: &Path) {
    if let Ok(mut f) = File::open(path) {
        let _ = std::io::copy(&mut f, &mut std::io::sink());
    }
}

/// A `vramscope serve` process, killed when dropped.
pub(crate) struct Server {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub(crate) url: String,
}

impl Server {
    /// Start one on a loopback port with `data_dir` and the extra
    /// environment `env`; answers once it listens.
    pub(crate) fn start(data_dir: &Path, env: &[(&str, String)]) -> Result<Server, String> {
        Server::start_program(Path::new(env!("CARGO_BIN_EXE_vramscope")), data_dir, env)
    }

    /// The same with another `vramscope` binary (a baseline build).
    pub(crate) fn start_program(program: &Path, data_dir: &Path, env: &[(&str, String)]) -> Result<Server, String> {
        Server::start_on(program, data_dir, env, "127.0.0.1:0")
    }

    /// The same on address `bind`.
    fn start_on(program: &Path, data_dir: &Path, env: &[(&str, String)], bind: &str) -> Result<Server, String> {
        std::fs::create_dir_all(data_dir).map_err(|e| format!("create {}: {e}", data_dir.display()))?;
        let mut command = Command::new(program);
        command
            .args(["serve", "--bind", bind, "--data-dir"])
            .arg(data_dir)
            .env("RUST_LOG", "warn")
            .env_remove("VRAMSCOPE_INLINE_PARSE_MAX_BYTES")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().map_err(|e| format!("spawn vramscope serve: {e}"))?;
        let stdout = child.stdout.take();
        // From here on the guard kills the child on every way out.
        let mut server = Server { child, url: String::new() };
        let mut reader = BufReader::new(stdout.ok_or("no stdout from vramscope serve")?);
        let mut line = String::new();
        reader.read_line(&mut line).map_err(|e| format!("read the server's first line: {e}"))?;
        server.url = line
            .trim()
            .strip_prefix("vramscope listening on ")
            .ok_or_else(|| format!("unexpected first line from the server: {line:?}"))?
            .to_owned();
        // Keep draining stdout so that the server never blocks on a full pipe.
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        });
        Ok(server)
    }

    /// Stop it, then start `program` on `data_dir` with `env` in its place,
    /// on the same port: the old one goes first, as two servers on one
    /// folder would share its database. The same port is the same origin,
    /// so a browser still holds the dashboard's files from before, as a
    /// user's does when their server restarts (on a new port every file
    /// was fetched again, and the "cold" first draws paid for it).
    pub(crate) fn restart(&mut self, program: &Path, data_dir: &Path, env: &[(&str, String)]) -> Result<(), String> {
        let bind = self.url.strip_prefix("http://").unwrap_or("127.0.0.1:0").to_owned();
        let _ = self.child.kill();
        let _ = self.child.wait();
        *self = Server::start_on(program, data_dir, env, &bind)?;
        Ok(())
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The URL of an API path (`/snapshots`).
    pub(crate) fn api(&self, path: &str) -> String {
        format!("{}/api/v1{path}", self.url)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// HTTP against a server, and the figures of its process

/// Read size of a client's upload stream.
pub(crate) const STREAM_CHUNK: usize = 1 << 20;

/// Streams the file as the body of a POST; returns the time from the first
/// byte sent to the whole answer, the status and the JSON answer.
pub(crate) async fn upload_file(
    client: &reqwest::Client,
    url: &str,
    path: &Path,
) -> Result<(Duration, u16, Value), String> {
    let file = tokio::fs::File::open(path).await.map_err(|e| format!("open {}: {e}", path.display()))?;
    let len = file.metadata().await.map_err(|e| format!("stat {}: {e}", path.display()))?.len();
    let body = reqwest::Body::wrap_stream(ReaderStream::with_capacity(file, STREAM_CHUNK));
    let start = Instant::now();
    let response = client
        .post(url)
        .header(CONTENT_TYPE, "application/octet-stream")
        .header(CONTENT_LENGTH, len)
        .body(body)
        .send()
        .await
        .map_err(|e| format!("upload {}: {e}", path.display()))?;
    let status = response.status().as_u16();
    let bytes = response.bytes().await.map_err(|e| format!("upload answer: {e}"))?;
    let took = start.elapsed();
    Ok((took, status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
}

/// `(start, end)` of a whole-trace window.
pub(crate) fn extent(window: &Value) -> Result<(i64, i64), String> {
    match (window["start"].as_i64(), window["end"].as_i64()) {
        (Some(s), Some(e)) if e > s => Ok((s, e)),
        _ => Err(format!("timeline answer without a start and end: {}", window["start"])),
    }
}

pub(crate) async fn get(
    client: &reqwest::Client,
    url: &str,
    accept_encoding: Option<&str>,
) -> Result<(u16, Option<String>, Vec<u8>), String> {
    let mut request = client.get(url);
    if let Some(accept) = accept_encoding {
        // The client decodes nothing (see `main`): the body comes back as
        // sent, compressed, and its length is the bytes on the wire.
        request = request.header(ACCEPT_ENCODING, accept);
    }
    let response = request.send().await.map_err(|e| format!("GET {url}: {e}"))?;
    let status = response.status().as_u16();
    let encoding = response.headers().get(CONTENT_ENCODING).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body = response.bytes().await.map_err(|e| format!("GET {url}: {e}"))?;
    Ok((status, encoding, body.to_vec()))
}

pub(crate) async fn get_json(client: &reqwest::Client, url: &str) -> Result<(Duration, Value), String> {
    let start = Instant::now();
    let (status, _, body) = get(client, url, None).await?;
    let took = start.elapsed();
    let value: Value = serde_json::from_slice(&body).map_err(|e| format!("GET {url}: not JSON: {e}"))?;
    if status != 200 {
        return Err(format!("GET {url}: {status} {value}"));
    }
    Ok((took, value))
}

#[derive(Default)]
pub(crate) struct Latencies(pub(crate) Vec<Duration>);

impl Latencies {
    /// Nearest-rank quantile.
    pub(crate) fn quantile(&self, q: f64) -> Option<Duration> {
        let mut d = self.0.clone();
        d.sort();
        let rank = ((q * d.len() as f64).ceil() as usize).clamp(1, d.len().max(1));
        d.get(rank - 1).copied()
    }

    pub(crate) fn max(&self) -> Option<Duration> {
        self.0.iter().max().copied()
    }

    /// "p50 … / p90 … / p99 … / max … ms".
    pub(crate) fn summary(&self) -> String {
        format!(
            "p50 {} / p90 {} / p99 {} / max {} ms",
            ms(self.quantile(0.5)),
            ms(self.quantile(0.9)),
            ms(self.quantile(0.99)),
            ms(self.max())
        )
    }
}

/// A field of `/proc/<pid>/status` given in kB (`VmRSS`, `VmHWM`), in bytes.
pub(crate) fn proc_status_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse::<u64>().ok())
        .map(|kib| kib * 1024)
}

/// Removes its paths when dropped, on every way out of `main`.
pub(crate) struct Cleanup(pub(crate) Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = if p.is_dir() { std::fs::remove_dir_all(p) } else { std::fs::remove_file(p) };
        }
    }
}

/// The 1-minute load average: other work on the machine skews the figures.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// SplitMix64: a seeded generator, enough for positions and filler bytes.
pub(crate) struct SplitMix(pub(crate) u64);

impl SplitMix {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub(crate) fn ms(d: Option<Duration>) -> String {
    d.map_or_else(|| "-".to_owned(), |d| format!("{:.2}", d.as_secs_f64() * 1e3))
}

pub(crate) fn fmt_ms(d: Option<Duration>) -> String {
    d.map_or_else(|| "-".to_owned(), |d| format!("{:.2} ms", d.as_secs_f64() * 1e3))
}

pub(crate) fn fmt_kb(bytes: Option<usize>) -> String {
    bytes.map_or_else(|| "-".to_owned(), |b| format!("{:.1} kB", b as f64 / 1e3))
}

pub(crate) fn median_len(sizes: &[usize]) -> Option<usize> {
    let mut s = sizes.to_vec();
    s.sort_unstable();
    s.get(s.len() / 2).copied()
}
