//! The spool: snapshots waiting for the server, on disk.
//!
//! The job writes each snapshot as `<stem>.pickle` and then its manifest
//! entry `<stem>.json` (each to a temporary name first, then renamed), so a
//! manifest entry always names a complete file. Stems start with the
//! capture time in milliseconds, zero-padded, so name order is capture
//! order. The uploader sends entries oldest first and deletes both files
//! only after the server answered; a crash in between uploads the file
//! again, and the server deduplicates it by content. Files the server
//! refuses (not a snapshot) move to `rejected/` instead of blocking the queue.
//!
//! Telemetry that could not be sent before the agent exits is kept here too,
//! as `telemetry-*.jsonl`, and read back by the next agent.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Deserialize;

use vramscope_shared::api::agent::{Sample, SourceLabels};
use vramscope_shared::api::paths;

/// A manifest entry as the Python side writes it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ManifestEntry {
    /// The snapshot's file name in the spool folder.
    pub(crate) file: String,
    /// `manual`, `threshold` or `oom`.
    pub(crate) trigger: String,
    /// The job's name.
    pub(crate) job: Option<String>,
    /// Host name.
    pub(crate) host: Option<String>,
    /// Process id.
    pub(crate) pid: Option<u32>,
    /// `RANK`.
    pub(crate) rank: Option<i64>,
    /// Tags to add.
    #[serde(default)]
    pub(crate) tags: Vec<String>,
}

/// The manifest entries in the spool, oldest first.
pub(crate) fn pending(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut entries = Vec::new();
    let listing = std::fs::read_dir(dir).with_context(|| format!("cannot list the spool {}", dir.display()))?;
    for entry in listing.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".json") && !name.starts_with('.') && path.is_file() {
            entries.push(path);
        }
    }
    entries.sort();
    Ok(entries)
}

/// A snapshot [`enforce_cap`] removed from the spool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dropped {
    /// The snapshot's file name.
    pub(crate) file: String,
    /// Its trigger.
    pub(crate) trigger: String,
    /// Its size.
    pub(crate) bytes: u64,
}

/// The order snapshots are dropped in when the spool is over its cap: a
/// threshold snapshot (a warning) before a manual one, and an OOM snapshot
/// (the post-mortem) last; oldest first within each.
fn drop_rank(trigger: &str) -> u8 {
    match trigger {
        "threshold" => 0,
        "oom" => 2,
        _ => 1,
    }
}

/// Keeps the snapshots waiting in the spool within `max_bytes`: while they
/// add up to more, drops one (both files) in [`drop_rank`] order. The
/// newest snapshot is never dropped, so a single one larger than the cap
/// still reaches the server. Returns what was dropped.
pub(crate) fn enforce_cap(dir: &Path, max_bytes: u64) -> Result<Vec<Dropped>> {
    let mut waiting: Vec<(PathBuf, ManifestEntry, u64)> = Vec::new();
    for manifest in pending(dir)? {
        let Ok(entry) = read_entry(&manifest) else { continue };
        let size = std::fs::metadata(dir.join(&entry.file)).map_or(0, |m| m.len());
        waiting.push((manifest, entry, size));
    }
    let mut total: u64 = waiting.iter().map(|(_, _, size)| size).sum();
    let Some(newest) = waiting.pop() else { return Ok(Vec::new()) };
    // Stable: oldest first within a rank.
    waiting.sort_by_key(|(_, entry, _)| drop_rank(&entry.trigger));
    let mut dropped = Vec::new();
    for (manifest, entry, size) in waiting {
        if total <= max_bytes {
            break;
        }
        if entry.file.contains('/') || entry.file.starts_with('.') {
            continue;
        }
        std::fs::remove_file(&manifest).with_context(|| format!("cannot remove {}", manifest.display()))?;
        let _ = std::fs::remove_file(dir.join(&entry.file));
        total = total.saturating_sub(size);
        dropped.push(Dropped { file: entry.file, trigger: entry.trigger, bytes: size });
    }
    drop(newest);
    Ok(dropped)
}

/// Reads a manifest entry.
pub(crate) fn read_entry(path: &Path) -> Result<ManifestEntry> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("not a spool manifest entry: {}", path.display()))
}

/// Why an upload did not go through.
#[derive(Debug)]
pub(crate) enum UploadError {
    /// Worth trying again later: the server is down or failing.
    Retry(anyhow::Error),
    /// The server refused this file for good (not a snapshot, bad fields).
    Rejected(String),
}

/// Sends snapshots to a server's upload API.
#[derive(Debug, Clone)]
pub(crate) struct Uploader {
    client: reqwest::Client,
    url: String,
    token: Option<String>,
    job: String,
    /// `KEY=VALUE` labels every snapshot carries as tags (`--label`).
    labels: Vec<String>,
}

impl Uploader {
    /// An uploader to `server` (its base URL).
    pub(crate) fn new(server: &str, token: Option<String>, job: String) -> Uploader {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        let url = format!("{}{}", server.trim_end_matches('/'), paths::SNAPSHOTS.path([]));
        Uploader { client, url, token, job, labels: Vec::new() }
    }

    /// Every snapshot uploaded also carries these `KEY=VALUE` tags.
    pub(crate) fn with_labels(mut self, labels: Vec<String>) -> Uploader {
        self.labels = labels;
        self
    }

    /// Uploads the snapshot of the manifest entry at `manifest`, then deletes
    /// both files. A rejected file moves to `rejected/` with its entry.
    /// Returns the server's id of the snapshot.
    pub(crate) async fn upload(&self, dir: &Path, manifest: &Path) -> Result<String, UploadError> {
        let entry = match read_entry(manifest) {
            Ok(entry) => entry,
            Err(e) => {
                reject(dir, manifest, None, &format!("{e:#}"));
                return Err(UploadError::Rejected(format!("{e:#}")));
            }
        };
        if entry.file.contains('/') || entry.file.starts_with('.') {
            let why = format!("manifest {} names a file outside the spool: {:?}", manifest.display(), entry.file);
            reject(dir, manifest, None, &why);
            return Err(UploadError::Rejected(why));
        }
        let data = dir.join(&entry.file);
        let file = match tokio::fs::File::open(&data).await {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Another agent on the same spool got there first.
                let _ = std::fs::remove_file(manifest);
                return Err(UploadError::Rejected(format!("{} is gone", data.display())));
            }
            Err(e) => return Err(UploadError::Retry(anyhow::anyhow!("cannot open {}: {e}", data.display()))),
        };
        let size = file.metadata().await.map(|m| m.len()).unwrap_or(0);
        let job = entry.job.clone().unwrap_or_else(|| self.job.clone());
        let who = match (entry.rank, entry.pid) {
            (Some(rank), _) => format!("rank{rank}"),
            (None, Some(pid)) => format!("pid{pid}"),
            (None, None) => "job".to_owned(),
        };
        let mut tags = vec!["agent".to_owned()];
        tags.extend(entry.tags.iter().cloned());
        tags.extend(self.labels.iter().cloned());
        let mut query: Vec<(&str, String)> = vec![
            ("trigger", entry.trigger.clone()),
            ("name", format!("{job} {who} {} {}", entry.trigger, entry.file)),
            ("job", job),
            ("tags", tags.join(",")),
        ];
        if let Some(host) = &entry.host {
            query.push(("host", host.clone()));
        }
        if let Some(rank) = entry.rank {
            query.push(("rank", rank.to_string()));
        }
        let stream = tokio_util::io::ReaderStream::with_capacity(file, 1 << 20);
        let mut request = self
            .client
            .post(&self.url)
            .query(&query)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .header(reqwest::header::CONTENT_LENGTH, size)
            .body(reqwest::Body::wrap_stream(stream));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response =
            request.send().await.map_err(|e| UploadError::Retry(anyhow::anyhow!("cannot reach {}: {e}", self.url)))?;
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        if status.is_success() {
            let id = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["id"].as_str().map(str::to_owned))
                .unwrap_or_default();
            let _ = std::fs::remove_file(&data);
            let _ = std::fs::remove_file(manifest);
            return Ok(id);
        }
        let why = format!("{} answered {status} for {}: {}", self.url, data.display(), body.trim());
        // 401/403 are the token's fault, 408/429/5xx the server's state: the
        // file may go through later. Other refusals are about the file.
        if status.is_server_error() || matches!(status.as_u16(), 401 | 403 | 408 | 429) {
            Err(UploadError::Retry(anyhow::anyhow!(why)))
        } else {
            reject(dir, manifest, Some(&data), &why);
            Err(UploadError::Rejected(why))
        }
    }
}

/// Moves a manifest entry (and its file) to `rejected/`, with the reason.
fn reject(dir: &Path, manifest: &Path, data: Option<&Path>, why: &str) {
    let rejected = dir.join("rejected");
    if std::fs::create_dir_all(&rejected).is_err() {
        return;
    }
    for path in [Some(manifest), data].into_iter().flatten() {
        if let Some(name) = path.file_name() {
            let _ = std::fs::rename(path, rejected.join(name));
        }
    }
    if let Some(name) = manifest.file_name() {
        let _ = std::fs::write(rejected.join(format!("{}.why", name.to_string_lossy())), why);
    }
}

/// Exponential backoff between failed attempts: 250 ms doubling to 10 s.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    next: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(250);
    const MAX: Duration = Duration::from_secs(10);

    /// A backoff at its first step.
    pub(crate) fn new() -> Backoff {
        Backoff { next: Backoff::FIRST }
    }

    /// The wait before the next attempt; the one after is twice as long.
    pub(crate) fn step(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(Backoff::MAX);
        wait
    }

    /// Back to the first step, after a success.
    pub(crate) fn reset(&mut self) {
        self.next = Backoff::FIRST;
    }
}

/// Writes telemetry the agent could not send to `telemetry-<ms>-<pid>.jsonl`
/// (temporary name, then rename): a first line with the labels of the
/// sources, then one sample per line.
pub(crate) fn save_telemetry(dir: &Path, sources: &[SourceLabels], samples: &[Sample]) -> Result<Option<PathBuf>> {
    if samples.is_empty() {
        return Ok(None);
    }
    let mut text = serde_json::to_string(sources).context("cannot encode the telemetry sources")?;
    text.push('\n');
    for sample in samples {
        text.push_str(&serde_json::to_string(sample).context("cannot encode a telemetry sample")?);
        text.push('\n');
    }
    let name = format!("telemetry-{:013}-{}.jsonl", crate::clock::now_ms(), std::process::id());
    let path = dir.join(&name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))?;
    Ok(Some(path))
}

/// Reads and removes the telemetry files earlier agents left, oldest first:
/// their sources and samples. Lines that do not parse are skipped (a file
/// cut short by a crash).
pub(crate) fn take_saved_telemetry(dir: &Path) -> (Vec<SourceLabels>, Vec<Sample>) {
    let Ok(listing) = std::fs::read_dir(dir) else { return (Vec::new(), Vec::new()) };
    let mut files: Vec<PathBuf> = listing
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("telemetry-") && n.ends_with(".jsonl"))
        })
        .collect();
    files.sort();
    let (mut sources, mut samples) = (Vec::new(), Vec::new());
    for file in files {
        if let Ok(text) = std::fs::read_to_string(&file) {
            let mut lines = text.lines();
            if let Some(first) = lines.next() {
                sources.extend(serde_json::from_str::<Vec<SourceLabels>>(first).unwrap_or_default());
            }
            samples.extend(lines.filter_map(|line| serde_json::from_str::<Sample>(line).ok()));
            let _ = std::fs::remove_file(&file);
        }
    }
    (sources, samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("vramscope-spool-{tag}-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).expect("dir");
        dir
    }

    #[test]
    fn pending_is_in_capture_order_and_skips_temporaries() {
        let dir = temp_dir("order");
        for name in ["0000000000002-h-1-0001.json", "0000000000001-h-1-0001.json", "x.json.tmp", "a.pickle"] {
            std::fs::write(dir.join(name), "{}").expect("write");
        }
        let names: Vec<String> = pending(&dir)
            .expect("pending")
            .iter()
            .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["0000000000001-h-1-0001.json", "0000000000002-h-1-0001.json"]);
    }

    #[test]
    fn telemetry_survives_a_restart_once() {
        let dir = temp_dir("telemetry");
        let sample = Sample {
            source: "j--h--rank0".to_owned(),
            t_ms: 7,
            device: 0,
            allocated: Some(1),
            reserved: Some(2),
            active: None,
            device_total: None,
            device_free: None,
            capacity: None,
            nvml_used: None,
            nvml_process_used: None,
        };
        let labels = SourceLabels {
            job: "j".to_owned(),
            host: "h".to_owned(),
            rank: Some(0),
            local_rank: None,
            world_size: None,
            pid: 1,
            backend: None,
            history: None,
        };
        save_telemetry(&dir, std::slice::from_ref(&labels), &[sample.clone(), sample.clone()]).expect("save");
        assert_eq!(take_saved_telemetry(&dir), (vec![labels], vec![sample.clone(), sample]));
        assert!(take_saved_telemetry(&dir).1.is_empty(), "taken files are removed");
    }

    /// A spooled snapshot of `bytes` bytes.
    fn spool(dir: &Path, stem: &str, trigger: &str, bytes: usize) {
        std::fs::write(dir.join(format!("{stem}.pickle")), vec![0u8; bytes]).expect("pickle");
        let entry = serde_json::json!({ "file": format!("{stem}.pickle"), "trigger": trigger });
        std::fs::write(dir.join(format!("{stem}.json")), entry.to_string()).expect("manifest");
    }

    #[test]
    fn over_its_cap_the_spool_drops_threshold_snapshots_first_and_oom_last() {
        let dir = temp_dir("cap");
        spool(&dir, "0000000000001-h-1-0001", "oom", 400);
        spool(&dir, "0000000000002-h-1-0002", "threshold", 300);
        spool(&dir, "0000000000003-h-1-0003", "manual", 300);
        spool(&dir, "0000000000004-h-1-0004", "threshold", 300);
        spool(&dir, "0000000000005-h-1-0005", "oom", 500);
        // 1800 bytes waiting, 1000 allowed: both threshold snapshots go, then
        // the manual one; the old OOM snapshot stays.
        let dropped = enforce_cap(&dir, 1000).expect("cap");
        let files: Vec<&str> = dropped.iter().map(|d| d.file.as_str()).collect();
        assert_eq!(
            files,
            ["0000000000002-h-1-0002.pickle", "0000000000004-h-1-0004.pickle", "0000000000003-h-1-0003.pickle"]
        );
        let left: Vec<String> =
            pending(&dir).expect("pending").iter().map(|p| read_entry(p).expect("entry").file).collect();
        assert_eq!(left, ["0000000000001-h-1-0001.pickle", "0000000000005-h-1-0005.pickle"]);
        assert!(!dir.join("0000000000002-h-1-0002.pickle").exists(), "the data file goes with its entry");
        // Under the cap nothing more goes; a lone snapshot above it stays.
        assert!(enforce_cap(&dir, 1000).expect("cap").is_empty());
        let lone = temp_dir("cap-lone");
        spool(&lone, "0000000000001-h-1-0001", "threshold", 5000);
        assert!(enforce_cap(&lone, 1000).expect("cap").is_empty());
    }

    #[test]
    fn backoff_doubles_to_a_ceiling_and_resets() {
        let mut backoff = Backoff::new();
        let waits: Vec<u128> = (0..8).map(|_| backoff.step().as_millis()).collect();
        assert_eq!(waits, [250, 500, 1000, 2000, 4000, 8000, 10000, 10000]);
        backoff.reset();
        assert_eq!(backoff.step().as_millis(), 250);
    }
}
