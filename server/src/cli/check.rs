//! `vramscope check FILE [--max-reserved-peak SIZE] [--max-allocated-peak SIZE]
//! [--max-fragmentation PCT] [--baseline OLD --max-growth PCT] [--json]
//! [--junit OUT.xml]`, or `--server URL --job NAME` for a job's newest stored
//! snapshot against its last pinned one: a memory budget that fails a
//! build. Exit 0 when every rule holds, 1 when one is broken, 2 on bad input.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use clap::Args;
use vramscope_shared::analysis::check::{CheckBudget, CheckReport, Rule, RuleOutcome};
use vramscope_shared::analysis::stack_label;
use vramscope_shared::answers::check_json;
use vramscope_shared::api::jobs::{CheckAnswer, CheckQuery};
use vramscope_shared::simulate::parse_size;

use super::Failure;
use super::input::{MemoryBudget, load};
use super::text::{bytes, finish, write_json};

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
    match verdict(args) {
        Err(Failure::Other(e)) => Err(Failure::BadInput(e)),
        other => other,
    }
}

fn verdict(args: &CheckArgs) -> Result<(), Failure> {
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
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create the folder of the JUnit report {}", parent.display()))
                .map_err(Failure::Other)?;
        }
        std::fs::write(path, junit(&name, &report))
            .with_context(|| format!("cannot write the JUnit report {}", path.display()))
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
        Err(Failure::CheckFailed(anyhow!("{} of {} rules broken by {name}", report.failures, report.rules.len())))
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
    let url = format!("{}/api/v1/jobs/{}/check", server.trim_end_matches('/'), url_segment(job));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Other(anyhow!("cannot start the async runtime: {e}")))?;
    let (status, body) = runtime
        .block_on(async {
            let mut request = reqwest::Client::new().get(&url).query(&query);
            if let Some(token) = &args.token {
                request = request.bearer_auth(token);
            }
            let response = request.send().await.with_context(|| format!("cannot reach {url}"))?;
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

/// A job name as one URL path segment.
fn url_segment(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect::<String>().replace('+', "%20")
}

/// One line about one rule: its figures against its limit.
pub(crate) fn describe(r: &RuleOutcome) -> String {
    let window = if r.window_only { " (within the trace window)" } else { "" };
    let limit_bytes = r.limit_bytes.map_or_else(String::new, bytes);
    let limit_pct = r.limit_pct.map_or_else(String::new, |p| format!("{p}%"));
    match r.rule {
        Rule::MaxReservedPeak => {
            format!("device {}: reserved peak {}{window}, limit {limit_bytes}", r.device, bytes(r.bytes))
        }
        Rule::MaxAllocatedPeak => {
            format!("device {}: allocated peak {}{window}, limit {limit_bytes}", r.device, bytes(r.bytes))
        }
        Rule::MaxFragmentation => format!(
            "device {}: {} cached but not in use at the end, {:.1}% of reserved, limit {limit_pct}",
            r.device,
            bytes(r.bytes),
            r.pct.unwrap_or(0.0)
        ),
        Rule::MaxGrowthReservedPeak | Rule::MaxGrowthRequestedPeak => {
            let what = if r.rule == Rule::MaxGrowthReservedPeak { "reserved" } else { "requested" };
            let growth = r.pct.map_or_else(|| "from nothing".to_owned(), |p| format!("{p:+.1}%"));
            format!(
                "device {}: {what} peak {} against {} in the baseline{window}, {growth}, limit +{limit_pct}",
                r.device,
                bytes(r.bytes),
                r.baseline_bytes.map_or_else(|| "-".to_owned(), bytes)
            )
        }
    }
}

fn signed(delta: i64) -> String {
    if delta >= 0 { format!("+{}", bytes(delta.unsigned_abs())) } else { format!("-{}", bytes(delta.unsigned_abs())) }
}

fn write_verdict(
    out: &mut impl Write,
    name: &str,
    baseline: Option<&str>,
    report: &CheckReport,
) -> std::io::Result<()> {
    let verdict = if report.passed { "PASS" } else { "FAIL" };
    writeln!(out, "{name}: {verdict}, {} of {} rules broken", report.failures, report.rules.len())?;
    if let Some(b) = baseline {
        writeln!(out, "baseline: {b}")?;
    }
    for r in &report.rules {
        writeln!(out, "  {:<4}  {:<30} {}", if r.passed { "ok" } else { "FAIL" }, r.rule.option(), describe(r))?;
    }
    for g in &report.grown {
        if g.stacks.is_empty() {
            continue;
        }
        let dev = |d: Option<u32>| d.map_or("-".to_owned(), |d| d.to_string());
        writeln!(
            out,
            "stacks that grew most against the baseline (device {} vs baseline device {}; all stacks {}):",
            dev(g.device),
            dev(g.baseline_device),
            signed(g.total_delta)
        )?;
        for s in &g.stacks {
            writeln!(out, "  {:>12}  {}", signed(s.delta), stack_label(&s.frames))?;
        }
    }
    Ok(())
}

/// XML text with its five special characters escaped.
fn xml(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&apos;")
}

/// The verdict as JUnit XML, which CI systems show as test results.
/// Written by hand: one suite of flat test cases is a few lines, where a
/// JUnit crate (quick-junit) would add an XML writer and a date library to
/// every build.
fn junit(name: &str, report: &CheckReport) -> String {
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    s += &format!(
        "<testsuites name=\"vramscope check\" tests=\"{}\" failures=\"{}\">\n  <testsuite name=\"{}\" tests=\"{}\" \
         failures=\"{}\">\n",
        report.rules.len(),
        report.failures,
        xml(name),
        report.rules.len(),
        report.failures
    );
    for r in &report.rules {
        let case = format!("{} device {}", r.rule.option(), r.device);
        s += &format!("    <testcase classname=\"vramscope.check\" name=\"{}\">", xml(&case));
        if r.passed {
            s += "</testcase>\n";
        } else {
            s += &format!("\n      <failure message=\"{}\"/>\n    </testcase>\n", xml(&describe(r)));
        }
    }
    s += "  </testsuite>\n</testsuites>\n";
    s
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

    #[test]
    fn junit_escapes_names_and_counts_failures() {
        let report = CheckReport {
            passed: false,
            failures: 1,
            rules: vec![RuleOutcome {
                rule: Rule::MaxReservedPeak,
                device: 0,
                passed: false,
                limit_bytes: Some(1 << 30),
                limit_pct: None,
                bytes: 2 << 30,
                baseline_bytes: None,
                pct: None,
                window_only: false,
            }],
            grown: vec![],
        };
        let x = junit("a<b>&\"c\".pickle", &report);
        assert!(x.contains("name=\"a&lt;b&gt;&amp;&quot;c&quot;.pickle\""), "{x}");
        assert!(x.contains("tests=\"1\" failures=\"1\""), "{x}");
        assert!(x.contains("<failure message=\"device 0: reserved peak 2 GiB, limit 1 GiB\"/>"), "{x}");
    }
}
