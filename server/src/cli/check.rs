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
use vramscope_shared::api::paths;
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
            super::text::count(report.rules.len() as u64, "rule", "rules")
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
    writeln!(
        out,
        "{name}: {verdict}, {} of {} broken",
        report.failures,
        super::text::count(report.rules.len() as u64, "rule", "rules")
    )?;
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

/// The verdict as JUnit XML, which CI systems show as test results: one
/// test case per rule and device; a broken rule's `<failure>` carries its
/// rule as `type`, its figures as `message`, and as text the figures and
/// the stacks that grew against the baseline. `seconds` is the check's
/// time, `started_ms` its start (for `timestamp`).
/// Written by hand: one suite of flat test cases is a few lines, where a
/// JUnit crate (quick-junit) would add an XML writer and a date library to
/// every build.
fn junit(name: &str, report: &CheckReport, seconds: f64, started_ms: i64) -> String {
    let mut grown = String::new();
    for g in report.grown.iter().filter(|g| !g.stacks.is_empty()) {
        grown += &format!("stacks that grew most against the baseline (all stacks {}):\n", signed(g.total_delta));
        for st in &g.stacks {
            grown += &format!("  {:>12}  {}\n", signed(st.delta), stack_label(&st.frames));
        }
    }
    let mut s = suite_head(name, report.rules.len(), report.failures as usize, 0, seconds, started_ms);
    for r in &report.rules {
        let case = format!("{} device {}", r.rule.option(), r.device);
        s += &format!("    <testcase classname=\"vramscope.check\" name=\"{}\" time=\"0\">", xml(&case));
        if r.passed {
            s += "</testcase>\n";
        } else {
            let text = format!("{}\n{grown}", describe(r));
            s += &format!(
                "\n      <failure type=\"{}\" message=\"{}\">{}</failure>\n    </testcase>\n",
                xml(r.rule.option()),
                xml(&describe(r)),
                xml(&text)
            );
        }
    }
    s + "  </testsuite>\n</testsuites>\n"
}

/// A JUnit report of a check that could not be made (exit 2): one test case
/// in error, so that a CI step reading the report (`if: always()`) shows why.
fn junit_error(name: &str, error: &str, seconds: f64, started_ms: i64) -> String {
    let mut s = suite_head(name, 1, 0, 1, seconds, started_ms);
    s += &format!(
        "    <testcase classname=\"vramscope.check\" name=\"check\" time=\"0\">\n      <error type=\"input\" \
         message=\"{}\">{}</error>\n    </testcase>\n",
        xml(error),
        xml(error)
    );
    s + "  </testsuite>\n</testsuites>\n"
}

fn suite_head(name: &str, tests: usize, failures: usize, errors: usize, seconds: f64, started_ms: i64) -> String {
    let (time, stamp) = (format!("{seconds:.3}"), timestamp(started_ms));
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"vramscope check\" tests=\"{tests}\" \
         failures=\"{failures}\" errors=\"{errors}\" time=\"{time}\">\n  <testsuite name=\"{}\" tests=\"{tests}\" \
         failures=\"{failures}\" errors=\"{errors}\" time=\"{time}\" timestamp=\"{stamp}\">\n",
        xml(name)
    )
}

/// `ms` since the epoch as JUnit's `timestamp`, UTC: `2026-12-04T18:22:34`
/// (days to a civil date by Howard Hinnant's algorithm: a few lines where a
/// date crate would be a dependency of every build).
fn timestamp(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}", rest / 3600, rest % 3600 / 60, rest % 60)
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
        let x = junit("a<b>&\"c\".pickle", &report, 0.25, 1_796_408_554_000);
        assert!(x.contains("name=\"a&lt;b&gt;&amp;&quot;c&quot;.pickle\""), "{x}");
        assert!(x.contains("tests=\"1\" failures=\"1\" errors=\"0\" time=\"0.250\""), "{x}");
        assert!(x.contains("timestamp=\"2026-12-04T18:22:34\""), "{x}");
        assert!(
            x.contains("<failure type=\"--max-reserved-peak\" message=\"device 0: reserved peak 2 GiB, limit 1 GiB\">"),
            "{x}"
        );
        assert_eq!(timestamp(0), "1970-01-01T00:00:00");
        assert_eq!(timestamp(951_782_400_000), "2000-02-29T00:00:00");
    }
}
