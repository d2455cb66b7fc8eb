//! `vramscope agent --server URL -- python train.py ...`: run a job with
//! snapshot capture and live telemetry (see `crate::agent`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::agent::{AgentConfig, default_job_name, default_spool_dir, parse_duration};

/// Arguments of `vramscope agent`.
#[derive(Debug, clap::Args)]
pub(crate) struct AgentArgs {
    /// Server URL, e.g. http://127.0.0.1:8080.
    #[arg(long, env = "VRAMSCOPE_SERVER", hide_env_values = true)]
    server: String,
    /// API token with the uploader role (needed unless the server runs loopback-only).
    #[arg(long, env = "VRAMSCOPE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Take a pre-OOM snapshot when reserved memory reaches this fraction of
    /// the memory the process may use.
    #[arg(long, default_value_t = 0.9, value_parser = parse_fraction)]
    threshold: f64,
    /// Entries of allocator history kept (a ring buffer). A snapshot's cost
    /// to the job grows with it (about 0.15 s at 100,000 entries, 1.7 s at
    /// 1,000,000 on an H200 host).
    #[arg(long, default_value_t = 100_000)]
    max_entries: u64,
    /// What the history records of each event (PyTorch's `context`): `all`
    /// keeps the Python stack of every allocation and free; `alloc` of
    /// allocations only; `state` only of the blocks alive when a snapshot
    /// is taken (the trace keeps no stacks). The default, `auto`, is `all`
    /// where the job's torch and Python record the stacks of frees safely
    /// and `alloc` where they do not (PyTorch 2.11 on Python < 3.13: a free
    /// recorded inside backward there turns the exception non-reentrant
    /// checkpointing raises into a SystemError; the job probes it once at
    /// start and says so). `alloc` and `all` give the same leak ranking and
    /// OOM post-mortem; `alloc` costs the job less per event, `state` least.
    /// `vramscope`'s agent-overhead bench prints the cost of each on your GPU.
    #[arg(long, value_enum, default_value_t = Context::Auto)]
    context: Context,
    /// How often the job samples its memory (e.g. 1s, 500ms).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    interval: Duration,
    /// Threshold snapshots per process per hour, at most.
    #[arg(long, default_value_t = 4)]
    max_dumps_per_hour: u32,
    /// The job's name on the server (default: the script's name and the
    /// start time); at most 256 bytes, as the server takes.
    #[arg(long, value_parser = parse_job)]
    job: Option<String>,
    /// A label every snapshot of the run carries, KEY=VALUE (a tag on the
    /// server, filterable): --label batch=8 --label seq=2048. `vramscope
    /// predict` and the job page's "Will it fit?" read sizes from them.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    labels: Vec<String>,
    /// Where snapshots wait until the server has them (default:
    /// ~/.cache/vramscope/spool).
    #[arg(long, env = "VRAMSCOPE_SPOOL_DIR", hide_env_values = true)]
    spool_dir: Option<PathBuf>,
    /// Most bytes of snapshots kept waiting in the spool (e.g. 20GiB). Over
    /// it, the oldest threshold snapshots are dropped first and OOM snapshots
    /// last, each said on stderr; the newest is always kept.
    #[arg(long, default_value = "20GiB", value_parser = parse_bytes)]
    spool_max_bytes: u64,
    /// After the job ends, how long to keep trying to deliver what is left
    /// before leaving it in the spool for the next run.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    drain_timeout: Duration,
    /// The job's command line, after `--`.
    #[arg(last = true, required = true, num_args = 1..)]
    command: Vec<OsString>,
}

/// `--context`: what the allocator history records of each event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Context {
    /// `all` where the job records the stacks of frees safely, else `alloc`.
    Auto,
    /// Stacks of allocations and frees.
    All,
    /// Stacks of allocations.
    Alloc,
    /// Stacks of the blocks alive at a snapshot only.
    State,
}

impl Context {
    /// The capture module's name for it (PyTorch's, and `auto`).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Context::Auto => "auto",
            Context::All => "all",
            Context::Alloc => "alloc",
            Context::State => "state",
        }
    }
}

fn parse_bytes(text: &str) -> Result<u64, String> {
    vramscope_shared::simulate::parse_size(text).map_err(|e| format!("{e} (e.g. 20GiB)"))
}

/// Most `--label`s (a snapshot carries at most 32 tags, the agent's own
/// among them).
const MAX_LABELS: usize = 16;

/// `KEY=VALUE`: a key of letters, digits, `_`, `-` or `.`, a value without
/// a comma (tags are comma-separated), 64 bytes at most in all (a tag's
/// limit).
fn parse_label(text: &str) -> Result<String, String> {
    let (key, value) = text.split_once('=').ok_or_else(|| format!("{text:?}: expected KEY=VALUE, e.g. batch=8"))?;
    if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c)) {
        return Err(format!("{text:?}: the key must be letters, digits, '_', '-' or '.', e.g. batch=8"));
    }
    if value.is_empty() || value.contains(',') {
        return Err(format!("{text:?}: the value must be non-empty and without a comma"));
    }
    if text.len() > 64 {
        return Err(format!("{text:?}: longer than 64 bytes"));
    }
    Ok(text.to_owned())
}

/// The server refuses an agent whose job name is longer (it closes the
/// connection): said here, before the job runs.
fn parse_job(text: &str) -> Result<String, String> {
    if text.len() > 256 {
        return Err(format!("a job name of {} bytes; at most 256", text.len()));
    }
    Ok(text.to_owned())
}

fn parse_fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 1.0 => Ok(v),
        _ => Err(format!("expected a fraction in (0, 1], e.g. 0.9: {text:?}")),
    }
}

/// Runs the job under the agent and returns its exit code (1 when the
/// agent's arguments are wrong, said on stderr before anything runs).
pub(crate) fn run(args: AgentArgs) -> ExitCode {
    let job = args.job.unwrap_or_else(|| default_job_name(&args.command));
    if args.labels.len() > MAX_LABELS {
        eprintln!("vramscope agent: error: --label: {} of them, at most {MAX_LABELS}", args.labels.len());
        return ExitCode::from(2);
    }
    let config = AgentConfig {
        server: args.server,
        token: args.token,
        threshold: args.threshold,
        max_entries: args.max_entries,
        context: args.context.as_str(),
        interval: args.interval,
        max_dumps_per_hour: args.max_dumps_per_hour,
        job,
        labels: args.labels,
        spool_dir: args.spool_dir.unwrap_or_else(default_spool_dir),
        spool_max_bytes: args.spool_max_bytes,
        drain_timeout: args.drain_timeout,
        command: args.command,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!(
                "vramscope agent: not capturing (cannot start the async runtime: {e}); the job runs without vramscope"
            );
            return ExitCode::from(crate::agent::run_uncaptured(&config.command));
        }
    };
    match runtime.block_on(crate::agent::run(config)) {
        Ok(code) => {
            // Tasks still blocked on the network must not hold the exit.
            runtime.shutdown_background();
            ExitCode::from(code)
        }
        Err(e) => {
            eprintln!("vramscope agent: error: {e:#}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_label;

    #[test]
    fn labels_are_key_equals_value() {
        assert_eq!(parse_label("batch=8"), Ok("batch=8".to_owned()));
        assert!(parse_label("batch").expect_err("refused").contains("KEY=VALUE"));
        assert!(parse_label("=8").expect_err("refused").contains("key"));
        assert!(parse_label("a b=8").expect_err("refused").contains("key"));
        assert!(parse_label("batch=8,9").expect_err("refused").contains("comma"));
        assert!(parse_label(&format!("k={}", "9".repeat(70))).expect_err("refused").contains("64 bytes"));
    }
}
