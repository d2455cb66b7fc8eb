//! `vramscope check`'s verdict as text: PASS or FAIL, each rule of the
//! budget per device with its figures against its limit, and the stacks
//! that grew against the baseline. (The same verdict as JUnit XML is
//! `report::junit`.)

use std::io::Write;

use vramscope_shared::analysis::check::{CheckReport, Rule, RuleOutcome};
use vramscope_shared::analysis::stack_label;

use super::{bytes, count};

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

/// A change in bytes with its sign, "+" for none: "+1.50 MiB", "-512 B",
/// "+0 B".
pub(crate) fn signed(delta: i64) -> String {
    if delta >= 0 { format!("+{}", bytes(delta.unsigned_abs())) } else { format!("-{}", bytes(delta.unsigned_abs())) }
}

/// The verdict on `name` (against `baseline`, when there is one): PASS or
/// FAIL and how many rules broke, each rule per device with its figures,
/// and the stacks that grew most against the baseline.
pub(crate) fn write_verdict(
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
        count(report.rules.len() as u64, "rule", "rules")
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
