//! `vramscope check FILE [--max-reserved-peak SIZE] [--max-allocated-peak SIZE]
//! [--max-fragmentation PCT] [--baseline OLD --max-growth PCT] [--json]
//! [--junit OUT.xml]`, or `--server URL --job NAME` for a job's newest stored
//! snapshot against its last pinned one: a memory budget that fails a
//! build. Exit 0 when every rule holds, 1 when one is broken, 2 on bad input.

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use clap::Args;
use vramscope_shared::analysis::check::{CheckBudget, CheckReport};
use vramscope_shared::api::jobs::{CheckAnswer, CheckQuery};
use vramscope_shared::api::paths;
use vramscope_shared::cli_json::check_json;
use vramscope_shared::simulate::parse_size;

use super::input::{MemoryBudget, load};
use super::{Failure, finish, write_json};
use crate::report::junit::{junit, junit_error};
use crate::report::text::check::write_verdict;
use crate::report::text::count;

/// Arguments of `vramscope check`.
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// Snapshot file to check (not with --server); - reads it from stdin.
    #[arg(required_unless_present = "server", conflicts_with = "server")]
    file: Option<PathBuf>,
    /// Most bytes any device may reserve at its peak, e.g. 12GiB.
    #[arg(long, value_name = "SIZE", value_parser = size)]
    max_reserved_peak: Option<u64>,
    /// Most bytes any device may have allocated at its peak (rounded block
    /// sizes, from a replay of the trace with the recorded settings).
    #[arg(long, value_name = "SIZE", value_parser = size)]
    max_allocated_peak: Option<u64>,
    /// Most memory cached but not in use at the end (reserved minus
    /// allocated), in percent of reserved (0 to 100).
    #[arg(long, value_name = "PCT", value_parser = share_of_reserved)]
    max_fragmentation: Option<f64>,
    /// Snapshot to compare against (e.g. the main branch's run).
    #[arg(long, value_name = "OLD_FILE", conflicts_with = "server")]
    baseline: Option<PathBuf>,
    /// Most growth of the reserved or requested peak against the baseline, in percent.
    #[arg(long, value_name = "PCT", value_parser = percent)]
    max_growth: Option<f64>,
    /// Stacks that grew to name per device.
    #[arg(long, default_value_t = 5)]
    top: usize,
    /// Print one JSON object instead of the verdict's text.
    #[arg(long)]
    json: bool,
    /// Also write the verdict as a JUnit XML report (one test case per rule and device).
    #[arg(long, value_name = "OUT.xml")]
    junit: Option<PathBuf>,
    /// Check a stored snapshot on this server instead of a file. (Not read
    /// from VRAMSCOPE_SERVER: a CI job that uploads with it still checks files.)
    #[arg(long, requires = "job")]
    server: Option<String>,
    /// With --server: the job whose newest snapshot is checked against its last pinned one.
    #[arg(long, requires = "server")]
    job: Option<String>,
    /// API token (needed unless the server runs loopback-only).
    #[arg(long, env = "VRAMSCOPE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// With --server: how long the server may send nothing before the check
    /// gives up with exit 2 (e.g. 30s, 10m); a CI job never waits for ever.
    #[arg(long, default_value = "300s", value_parser = crate::agent::parse_duration, requires = "server")]
    timeout: std::time::Duration,
    #[command(flatten)]
    budget: MemoryBudget,
}

fn size(text: &str) -> Result<u64, String> {
    parse_size(text).map_err(|e| e.to_string())
}

/// A percentage of reserved memory: 0 to 100.
fn share_of_reserved(text: &str) -> Result<f64, String> {
    match percent(text)? {
        p if p <= 100.0 => Ok(p),
        p => Err(format!("{p}% of reserved memory cannot be cached but not in use: give 0 to 100")),
    }
}

fn percent(text: &str) -> Result<f64, String> {
    let number = text.trim().trim_end_matches('%');
    match number.parse::<f64>() {
        Ok(p) if p.is_finite() && p >= 0.0 => Ok(p),
        _ => Err(format!("{text:?} is not a percentage (a number, 0 or more, e.g. 5 or 12.5%)")),
    }
}

/// Run the subcommand. Exit 1 means a broken rule and nothing else: a file
/// that cannot be read or written, or a server that cannot be reached, is 2.
pub(crate) fn run(args: &CheckArgs) -> Result<(), Failure> {
    let (started, started_ms) = (std::time::Instant::now(), crate::clock::now_ms());
    let result = match verdict(args, started, started_ms) {
        Err(Failure::Other(e)) => Err(Failure::BadInput(e)),
        other => other,
    };
    // No verdict: the report says why, for a CI step that reads it always.
    if let (Err(Failure::BadInput(e)), Some(path)) = (&result, &args.junit) {
        let name = args.file.as_ref().map_or_else(|| "vramscope check".to_owned(), |f| f.display().to_string());
        let xml = junit_error(&name, &format!("{e:#}"), started.elapsed().as_secs_f64(), started_ms);
        let _ = write_report(path, &xml);
    }
    result
}

/// Write a report, making its folder.
fn write_report(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create the folder of the JUnit report {}", parent.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("cannot write the JUnit report {}", path.display()))
}

fn verdict(args: &CheckArgs, started: std::time::Instant, started_ms: i64) -> Result<(), Failure> {
    if args.baseline.is_some() && args.max_growth.is_none() {
        return Err(Failure::BadInput(anyhow!(
            "--baseline is compared by --max-growth: give the most growth allowed against it, e.g. --max-growth 5"
        )));
    }
    let budget = CheckBudget {
        max_reserved_peak_bytes: args.max_reserved_peak,
        max_allocated_peak_bytes: args.max_allocated_peak,
        max_fragmentation_pct: args.max_fragmentation,
        max_growth_pct: args.max_growth,
    };
    if budget.is_empty() {
        return Err(Failure::BadInput(anyhow!(
            "no rule to check: give --max-reserved-peak, --max-allocated-peak, --max-fragmentation or --max-growth"
        )));
    }
    let (name, baseline_name, report, json) = match (&args.file, &args.server, &args.job) {
        (Some(file), _, _) => local(args, file, &budget)?,
        (None, Some(server), Some(job)) => remote(args, server, job)?,
        _ => return Err(Failure::BadInput(anyhow!("give a snapshot FILE, or --server URL and --job NAME"))),
    };
    if let Some(path) = &args.junit {
        write_report(path, &junit(&name, &report, started.elapsed().as_secs_f64(), started_ms))
            .map_err(Failure::Other)?;
    }
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        write_json(&mut out, &json)
    } else {
        write_verdict(&mut out, &name, baseline_name.as_deref(), &report)
    };
    finish(written)?;
    if report.passed {
        Ok(())
    } else {
        Err(Failure::CheckFailed(anyhow!(
            "{} of {} broken by {name}",
            report.failures,
            count(report.rules.len() as u64, "rule", "rules")
        )))
    }
}

type Checked = (String, Option<String>, CheckReport, serde_json::Value);

fn local(args: &CheckArgs, file: &Path, budget: &CheckBudget) -> Result<Checked, Failure> {
    let snapshot = load(file, args.budget)?;
    let baseline = args.baseline.as_deref().map(|b| load(b, args.budget).map(|s| (b.display().to_string(), s)));
    let baseline = baseline.transpose()?;
    let name = file.display().to_string();
    let json = check_json(&name, &snapshot, baseline.as_ref().map(|(n, s)| (n.as_str(), s)), budget, args.top)
        .map_err(|e| Failure::BadInput(anyhow!("{e} (file: {name})")))?;
    let value = serde_json::to_value(&json).context("the verdict as JSON").map_err(Failure::Other)?;
    Ok((name, json.baseline, json.report, value))
}

fn remote(args: &CheckArgs, server: &str, job: &str) -> Result<Checked, Failure> {
    let query = CheckQuery {
        max_reserved_peak: args.max_reserved_peak.map(|b| b.to_string()),
        max_allocated_peak: args.max_allocated_peak.map(|b| b.to_string()),
        max_fragmentation: args.max_fragmentation,
        max_growth: args.max_growth,
        top: Some(args.top),
        baseline: None,
    };
    let url = format!("{}{}", server.trim_end_matches('/'), paths::JOB_CHECK.path([job]));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Other(anyhow!("cannot start the async runtime: {e}")))?;
    let (status, body) = runtime
        .block_on(async {
            let client = reqwest::Client::builder()
                .connect_timeout(args.timeout.min(std::time::Duration::from_secs(30)))
                .read_timeout(args.timeout)
                .build()
                .context("the HTTP client")?;
            let mut request = client.get(&url).query(&query);
            if let Some(token) = &args.token {
                request = request.bearer_auth(token);
            }
            let silent = || format!("{url} sent nothing for {} s (--timeout)", args.timeout.as_secs_f64());
            let response = request.send().await.map_err(|e| {
                if e.is_timeout() {
                    anyhow!(silent())
                } else {
                    anyhow::Error::from(e).context(format!("cannot reach {url}"))
                }
            })?;
            let status = response.status();
            let body = response.text().await.with_context(|| format!("reading the answer of {url}"))?;
            anyhow::Ok((status, body))
        })
        .map_err(Failure::Other)?;
    if !status.is_success() {
        let message = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
            .unwrap_or(body);
        let error = anyhow!("the server could not check job {job:?} ({status}): {message}");
        return Err(if status.is_client_error() { Failure::BadInput(error) } else { Failure::Other(error) });
    }
    let answer: CheckAnswer =
        serde_json::from_str(&body).with_context(|| format!("the answer of {url}")).map_err(Failure::Other)?;
    let value = serde_json::from_str(&body).with_context(|| format!("the answer of {url}")).map_err(Failure::Other)?;
    let name = format!("{} (job {job}, snapshot {})", answer.snapshot.name, answer.snapshot.id);
    let baseline = answer.baseline.as_ref().map(|b| format!("{} (snapshot {}, pinned)", b.name, b.id));
    Ok((name, baseline, answer.report, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_take_a_sign_and_refuse_nonsense() {
        assert_eq!(percent("5"), Ok(5.0));
        assert_eq!(percent("12.5%"), Ok(12.5));
        assert!(percent("-1").is_err());
        assert!(percent("lots").is_err());
    }
}
