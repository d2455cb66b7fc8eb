//! `vramscope agent`: runs a PyTorch job with the capture module injected and
//! carries its snapshots and telemetry to a server.
//!
//! ```text
//!  job process(es) ──unix socket (JSON lines)──► agent ──HTTP upload──► server
//!    │ snapshot files ──► spool dir ─────────────►  │   ──WebSocket───►  (telemetry, capture now)
//!    ◄──────────────── "capture" ──────────────────┘   NVML ◄── libnvidia-ml (run-time)
//! ```
//!
//! The job is never held up by the server: the Python side writes snapshots
//! to the spool and sends only small lines, and everything the agent does
//! with the server happens in its own tasks, with retries and backoff. When
//! the job ends the agent delivers what is left (up to `--drain-timeout`),
//! keeps anything undelivered on disk for the next run, and exits with the
//! job's exit code.

mod capture_module;
mod hub;
mod job;
mod nvml;
mod spool;
mod uplink;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::signal::unix::{SignalKind, signal};

use hub::{Hub, lock};
use spool::{Backoff, UploadError, Uploader};
use vramscope_shared::api::agent::{self as protocol, JobCommand};

/// What `vramscope agent` was asked to do.
#[derive(Debug, Clone)]
pub(crate) struct AgentConfig {
    /// The server's base URL.
    pub(crate) server: String,
    /// API token (uploader role).
    pub(crate) token: Option<String>,
    /// Fraction of capacity that triggers a pre-OOM snapshot.
    pub(crate) threshold: f64,
    /// Allocator history ring size.
    pub(crate) max_entries: u64,
    /// What the history records: `auto`, or PyTorch's `context` (`all`,
    /// `alloc` or `state`).
    pub(crate) context: &'static str,
    /// Sampling interval.
    pub(crate) interval: Duration,
    /// Threshold snapshots per process per hour, at most.
    pub(crate) max_dumps_per_hour: u32,
    /// The job's name on the server.
    pub(crate) job: String,
    /// `KEY=VALUE` tags on every snapshot (`--label batch=8`).
    pub(crate) labels: Vec<String>,
    /// Where snapshots wait for the server.
    pub(crate) spool_dir: PathBuf,
    /// Most bytes of snapshots kept waiting in the spool.
    pub(crate) spool_max_bytes: u64,
    /// How long to keep delivering after the job ended.
    pub(crate) drain_timeout: Duration,
    /// The job's command line.
    pub(crate) command: Vec<OsString>,
}

/// Runs the job under the agent; returns the exit code to exit with: the
/// job's, or 128 + the signal that killed it, as a shell reports it.
///
/// Only the agent's arguments can stop the job from starting (it is told
/// before anything runs). Where the agent cannot set itself up (the spool
/// or private folder, the socket), the job runs all the same, without
/// capture, and one line on stderr says why.
pub(crate) async fn run(config: AgentConfig) -> Result<u8> {
    let ws_url = uplink::ws_url(&config.server)?;
    let Some((program, args)) = config.command.split_first() else {
        anyhow::bail!("no command to run: vramscope agent --server URL -- python train.py ...")
    };
    let (private, listener) = match prepare(&config) {
        Ok(prepared) => prepared,
        Err(e) => {
            eprintln!("vramscope agent: not capturing ({e:#}); the job runs without vramscope");
            return Ok(tokio::task::block_in_place(|| run_uncaptured(&config.command)));
        }
    };
    let socket_path = private.socket_path();
    let host = host_name();

    let hub = Arc::new(Hub::default());
    let (sources, samples) = spool::take_saved_telemetry(&config.spool_dir);
    {
        let mut queue = lock(&hub.telemetry);
        queue.sources.extend(sources.into_iter().map(|s| (s.key(), s)));
        queue.pending.extend(samples);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let accept = tokio::spawn(job::accept(listener, hub.clone(), config.job.clone(), config.spool_dir.clone()));
    let uploader =
        Uploader::new(&config.server, config.token.clone(), config.job.clone()).with_labels(config.labels.clone());
    let uploads = tokio::spawn(upload_loop(
        uploader,
        config.spool_dir.clone(),
        config.spool_max_bytes,
        hub.clone(),
        stop.clone(),
    ));
    let link = uplink::Uplink {
        url: ws_url,
        token: config.token.clone(),
        host: host.clone(),
        job: config.job.clone(),
        flush_every: config.interval.min(Duration::from_secs(1)),
    };
    let telemetry = tokio::spawn(link.run(hub.clone(), stop.clone()));
    let nvml = tokio::spawn(nvml_loop(hub.clone(), config.interval));

    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .env("PYTHONPATH", capture_module::python_path_with(&private.python_path(), std::env::var_os("PYTHONPATH")))
        .env("VRAMSCOPE_AGENT_SOCKET", &socket_path)
        .env("VRAMSCOPE_SPOOL_DIR", &config.spool_dir)
        .env("VRAMSCOPE_THRESHOLD", config.threshold.to_string())
        .env("VRAMSCOPE_MAX_ENTRIES", config.max_entries.to_string())
        .env("VRAMSCOPE_CONTEXT", config.context)
        .env("VRAMSCOPE_INTERVAL_S", config.interval.as_secs_f64().to_string())
        .env("VRAMSCOPE_MAX_DUMPS_PER_HOUR", config.max_dumps_per_hour.to_string())
        .env("VRAMSCOPE_JOB", &config.job);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("vramscope agent: cannot start {}: {e}", program.to_string_lossy());
            return Ok(if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 });
        }
    };
    let status = wait_forwarding_signals(&mut child, &hub).await?;

    // The job is over: deliver what is left, then keep the rest on disk.
    stop.store(true, Ordering::Relaxed);
    hub.spooled.notify_one();
    let drained = tokio::time::timeout(config.drain_timeout, async {
        let _ = uploads.await;
        let _ = telemetry.await;
    })
    .await
    .is_ok();
    accept.abort();
    nvml.abort();
    if !drained {
        let (sources, left) = {
            let mut queue = lock(&hub.telemetry);
            (queue.sources.values().cloned().collect::<Vec<_>>(), queue.drain_all())
        };
        if let Err(e) = spool::save_telemetry(&config.spool_dir, &sources, &left) {
            eprintln!("vramscope agent: {e:#}");
        }
        let snapshots = spool::pending(&config.spool_dir).map(|p| p.len()).unwrap_or(0);
        eprintln!(
            "vramscope agent: the server did not take everything within {:?}: {snapshots} snapshot(s) and {} \
             telemetry sample(s) stay in {}; the next agent run sends them",
            config.drain_timeout,
            left.len(),
            config.spool_dir.display()
        );
    }
    drop(private);
    Ok(exit_code(status))
}

/// The spool folder, the private folder with the capture module, and the
/// socket the job's processes report to.
fn prepare(config: &AgentConfig) -> Result<(capture_module::PrivateDir, tokio::net::UnixListener)> {
    std::fs::create_dir_all(&config.spool_dir)
        .with_context(|| format!("cannot create the spool folder {}", config.spool_dir.display()))?;
    let private = capture_module::PrivateDir::create()?;
    let socket_path = private.socket_path();
    let listener = tokio::net::UnixListener::bind(&socket_path)
        .with_context(|| format!("cannot listen on {}", socket_path.display()))?;
    Ok((private, listener))
}

/// Runs the job as it would run without vramscope (no capture module, no
/// environment of ours) and returns its exit code as a shell reports it:
/// where the agent cannot set itself up, the job still runs.
pub(crate) fn run_uncaptured(command: &[OsString]) -> u8 {
    let Some((program, args)) = command.split_first() else { return 2 };
    match std::process::Command::new(program).args(args).status() {
        Ok(status) => exit_code(status),
        Err(e) => {
            eprintln!("vramscope agent: cannot start {}: {e}", program.to_string_lossy());
            if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 }
        }
    }
}

/// Waits for the child, forwarding SIGTERM, SIGHUP, SIGQUIT and SIGUSR2 to
/// it, and SIGINT unless it came from the terminal (Ctrl-C reaches the job
/// through the terminal's process group already; a second one would cut its
/// clean-up short). SIGUSR1 asks every process of the job for a snapshot.
async fn wait_forwarding_signals(child: &mut tokio::process::Child, hub: &Hub) -> Result<std::process::ExitStatus> {
    use nix::sys::signal::Signal;
    use std::io::IsTerminal;
    let pid = child.id().map(|id| nix::unistd::Pid::from_raw(id as i32));
    let handlers = (|| -> std::io::Result<_> {
        Ok((
            signal(SignalKind::interrupt())?,
            signal(SignalKind::terminate())?,
            signal(SignalKind::hangup())?,
            signal(SignalKind::quit())?,
            signal(SignalKind::user_defined1())?,
            signal(SignalKind::user_defined2())?,
        ))
    })();
    let (mut sigint, mut sigterm, mut sighup, mut sigquit, mut sigusr1, mut sigusr2) = match handlers {
        Ok(handlers) => handlers,
        Err(e) => {
            // The job is running: it is waited for, whatever we cannot do.
            eprintln!("vramscope agent: signals are not forwarded to the job ({e})");
            return child.wait().await.context("cannot wait for the job");
        }
    };
    let interactive = std::io::stdin().is_terminal();
    let forward = |sig: Signal| {
        if let Some(pid) = pid {
            let _ = nix::sys::signal::kill(pid, sig);
        }
    };
    loop {
        tokio::select! {
            status = child.wait() => return status.context("cannot wait for the job"),
            _ = sigint.recv() => if !interactive { forward(Signal::SIGINT) },
            _ = sigterm.recv() => forward(Signal::SIGTERM),
            _ = sighup.recv() => forward(Signal::SIGHUP),
            _ = sigquit.recv() => forward(Signal::SIGQUIT),
            _ = sigusr2.recv() => forward(Signal::SIGUSR2),
            _ = sigusr1.recv() => {
                let command = JobCommand::Capture {
                    trigger: "manual".to_owned(),
                    reason: "SIGUSR1 to the agent".to_owned(),
                    tags: vec!["signal".to_owned()],
                };
                hub.send(None, None, &command);
            }
        }
    }
}

/// The code a shell would report for `status`.
fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(255),
        (None, None) => 1,
    }
}

/// Uploads spooled snapshots in order, with backoff while the server fails;
/// returns once stopped with the spool empty.
async fn upload_loop(uploader: Uploader, dir: PathBuf, max_bytes: u64, hub: Arc<Hub>, stop: Arc<AtomicBool>) {
    let mut backoff = Backoff::new();
    let mut warned = false;
    loop {
        match spool::enforce_cap(&dir, max_bytes) {
            Ok(dropped) => {
                for d in dropped {
                    eprintln!(
                        "vramscope agent: the spool is over its cap (--spool-max-bytes {max_bytes}): dropped the {} \
                         snapshot {} ({} bytes) before the server got it",
                        d.trigger, d.file, d.bytes
                    );
                }
            }
            Err(e) => eprintln!("vramscope agent: cannot keep the spool under its cap: {e:#}"),
        }
        // Files left by a job that died before it could tell us are found
        // by the scan as well, not only those announced on the socket.
        let entries = spool::pending(&dir).unwrap_or_default();
        if entries.is_empty() {
            if stop.load(Ordering::Relaxed) && hub.connection_count() == 0 {
                return;
            }
            tokio::select! {
                _ = hub.spooled.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            continue;
        }
        for entry in entries {
            match uploader.upload(&dir, &entry).await {
                Ok(_) => {
                    backoff.reset();
                    warned = false;
                }
                Err(UploadError::Rejected(why)) => eprintln!("vramscope agent: snapshot not accepted: {why}"),
                Err(UploadError::Retry(e)) => {
                    if !warned {
                        eprintln!("vramscope agent: upload failed ({e:#}); the snapshot stays spooled, retrying");
                        warned = true;
                    }
                    tokio::time::sleep(backoff.step()).await;
                    break;
                }
            }
        }
    }
}

/// Reads NVML every `interval` into the hub; says once if NVML is missing.
async fn nvml_loop(hub: Arc<Hub>, interval: Duration) {
    let reader = match tokio::task::spawn_blocking(nvml::NvmlReader::open).await {
        Ok(Ok(reader)) => Arc::new(reader),
        Ok(Err(message)) => {
            eprintln!("vramscope agent: {message}");
            return;
        }
        Err(_) => return,
    };
    let mut tick = tokio::time::interval(interval);
    loop {
        tick.tick().await;
        let reader = reader.clone();
        if let Ok(devices) = tokio::task::spawn_blocking(move || reader.read()).await {
            *lock(&hub.nvml) = devices;
        }
    }
}

/// This host's name, for labels.
fn host_name() -> String {
    nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "localhost".to_owned())
}

/// The default spool folder: `$XDG_CACHE_HOME/vramscope/spool`, else
/// `~/.cache/vramscope/spool`, else under the temporary folder.
pub(crate) fn default_spool_dir() -> PathBuf {
    if let Some(cache) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return Path::new(&cache).join("vramscope/spool");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return Path::new(&home).join(".cache/vramscope/spool");
    }
    std::env::temp_dir().join("vramscope-spool")
}

/// Parses `1s`, `500ms`, `2m`, `0.5s` or a plain number of seconds.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, scale) = if let Some(n) = text.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = text.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (text, 1.0)
    };
    let value: f64 =
        number.trim().parse().map_err(|_| format!("not a duration (expected e.g. 1s, 500ms, 2m): {text:?}"))?;
    if !value.is_finite() || value <= 0.0 {
        return Err(format!("a duration must be positive: {text:?}"));
    }
    Ok(Duration::from_secs_f64(value * scale))
}

/// The default job name: the script (or program) and the start time.
pub(crate) fn default_job_name(command: &[OsString]) -> String {
    let script = command
        .iter()
        .map(|a| a.to_string_lossy())
        .find(|a| a.ends_with(".py"))
        .or_else(|| command.first().map(|a| a.to_string_lossy()))
        .unwrap_or_default();
    let stem = Path::new(script.as_ref()).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    format!("{}-{}", protocol::url_safe(&stem), crate::clock::now_ms() / 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("0s").is_err());
    }

    #[test]
    fn job_names_come_from_the_script() {
        let command: Vec<OsString> = ["torchrun", "--nproc-per-node", "2", "train.py"].map(OsString::from).to_vec();
        assert!(default_job_name(&command).starts_with("train-"));
        assert!(default_job_name(&[OsString::from("/usr/bin/my job")]).starts_with("my_job-"));
    }

    #[test]
    fn exit_codes_match_the_shell() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(exit_code(std::process::ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(std::process::ExitStatus::from_raw(15)), 143);
    }
}
