//! A memory budget for CI: rules on a snapshot's peaks and fragmentation,
//! and on its growth against a baseline snapshot, each with its figures,
//! plus the stacks that grew most against the baseline (the matching of
//! [`super::diff`]). `vramscope check`, the server's `check` routes and
//! the MCP `check` tool all answer with [`CheckReport`].
//!
//! The figures are the ones the other commands print:
//! - reserved peak: `vramscope stats`'s `reserved_peak_bytes`
//!   (PyTorch's `reserved_bytes.all.peak`, replayed from the trace);
//! - allocated peak: the allocator model's replay with the recorded settings
//!   (`vramscope simulate`'s `allocated_peak_bytes`, PyTorch's
//!   `allocated_bytes.all.peak`: rounded block sizes, which the trace alone
//!   does not give);
//! - fragmentation: memory cached but not in use (reserved minus allocated)
//!   as a percentage of reserved at the snapshot's end, as `stats` prints it;
//! - growth: the reserved and requested peaks against the baseline's, per
//!   device paired as `vramscope diff` pairs them.

use serde::{Deserialize, Serialize};

use super::diff::{SnapshotDiff, StackDelta};
use crate::simulate::{Replayer, SimError, settings_for};
use crate::snapshot::Snapshot;
use crate::stats::DeviceStats;

/// The limits to check; a `None` is not checked.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckBudget {
    /// Most bytes any device may reserve at its peak.
    pub max_reserved_peak_bytes: Option<u64>,
    /// Most bytes any device may have allocated at its peak.
    pub max_allocated_peak_bytes: Option<u64>,
    /// Most cached-but-unused memory at the end, in percent of reserved.
    pub max_fragmentation_pct: Option<f64>,
    /// Most growth of the reserved or requested peak against the baseline,
    /// in percent (needs a baseline).
    pub max_growth_pct: Option<f64>,
}

impl CheckBudget {
    /// No rule at all.
    pub fn is_empty(&self) -> bool {
        self.max_reserved_peak_bytes.is_none()
            && self.max_allocated_peak_bytes.is_none()
            && self.max_fragmentation_pct.is_none()
            && self.max_growth_pct.is_none()
    }
}

/// Which rule an outcome is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// `--max-reserved-peak`.
    MaxReservedPeak,
    /// `--max-allocated-peak`.
    MaxAllocatedPeak,
    /// `--max-fragmentation`.
    MaxFragmentation,
    /// `--max-growth`, on the reserved peak.
    MaxGrowthReservedPeak,
    /// `--max-growth`, on the requested peak (what the program asked for).
    MaxGrowthRequestedPeak,
}

impl Rule {
    /// The rule as its command-line option names it.
    pub fn option(self) -> &'static str {
        match self {
            Rule::MaxReservedPeak => "--max-reserved-peak",
            Rule::MaxAllocatedPeak => "--max-allocated-peak",
            Rule::MaxFragmentation => "--max-fragmentation",
            Rule::MaxGrowthReservedPeak => "--max-growth (reserved peak)",
            Rule::MaxGrowthRequestedPeak => "--max-growth (requested peak)",
        }
    }
}

/// One rule on one device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuleOutcome {
    /// The rule.
    pub rule: Rule,
    /// The device of the checked snapshot.
    pub device: u32,
    /// The rule holds.
    pub passed: bool,
    /// The limit in bytes (peak rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<u64>,
    /// The limit in percent (fragmentation and growth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_pct: Option<f64>,
    /// The checked snapshot's figure in bytes: the peak, or for
    /// fragmentation the cached-but-unused bytes.
    pub bytes: u64,
    /// The baseline's figure (growth rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_bytes: Option<u64>,
    /// The figure in percent: fragmentation, or growth against the baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pct: Option<f64>,
    /// The peak covers only the trace's window (the ring buffer wrapped).
    #[serde(default)]
    pub window_only: bool,
}

/// The stacks that grew most on one pair of devices.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GrownStacks {
    /// The baseline's device.
    pub baseline_device: Option<u32>,
    /// The checked snapshot's device.
    pub device: Option<u32>,
    /// Live requested bytes at the end, checked minus baseline, all stacks.
    pub total_delta: i64,
    /// Stacks whose live bytes grew (or appeared), the largest first.
    pub stacks: Vec<StackDelta>,
}

/// The verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckReport {
    /// Every rule holds.
    pub passed: bool,
    /// Rules broken.
    pub failures: u32,
    /// Every rule on every device, in the order checked.
    pub rules: Vec<RuleOutcome>,
    /// Against the baseline (when there is one): the stacks that grew most.
    pub grown: Vec<GrownStacks>,
}

/// Why a snapshot cannot be checked.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// A peak rule on a device without a trace.
    #[error(
        "{what}: device {device} has no trace, so its peak is unknown; record with \
         torch.cuda.memory._record_memory_history() before the snapshot"
    )]
    NoTrace {
        /// The checked snapshot or the baseline.
        what: &'static str,
        /// The device.
        device: u32,
    },
    /// The allocated peak needs a replay, which failed.
    #[error("the allocated peak needs a replay of the trace: {0}")]
    Replay(#[from] SimError),
    /// A growth rule without a baseline.
    #[error("--max-growth needs a baseline snapshot to compare against")]
    NoBaseline,
    /// No device at all.
    #[error("the snapshot has no device with segments or a trace")]
    NoDevice,
}

fn pct_of(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 * 100.0 / whole as f64 }
}

/// A peak, or why there is none.
fn peak(what: &'static str, d: &DeviceStats, p: Option<u64>) -> Result<u64, CheckError> {
    p.ok_or(CheckError::NoTrace { what, device: d.device })
}

/// Check `snapshot` against `budget`, and against `baseline` when given;
/// `top` stacks that grew are kept per device.
pub fn check(
    snapshot: &Snapshot,
    baseline: Option<&Snapshot>,
    budget: &CheckBudget,
    top: usize,
) -> Result<CheckReport, CheckError> {
    let stats = snapshot.stats();
    if stats.devices.is_empty() {
        return Err(CheckError::NoDevice);
    }
    let mut rules = Vec::new();
    let outcome = |rule, d: &DeviceStats, passed, bytes| RuleOutcome {
        rule,
        device: d.device,
        passed,
        limit_bytes: None,
        limit_pct: None,
        bytes,
        baseline_bytes: None,
        pct: None,
        window_only: false,
    };
    if let Some(limit) = budget.max_reserved_peak_bytes {
        for d in &stats.devices {
            let p = peak("the snapshot", d, d.reserved_peak_bytes)?;
            rules.push(RuleOutcome {
                limit_bytes: Some(limit),
                window_only: d.peak_is_window_only,
                ..outcome(Rule::MaxReservedPeak, d, p <= limit, p)
            });
        }
    }
    if let Some(limit) = budget.max_allocated_peak_bytes {
        // The recorded settings replayed from the state at the trace's first
        // entry: memory in use before the window (a previous test's cuBLAS
        // workspaces) is a baseline, not a reason to refuse.
        let (config, _) = settings_for(snapshot, None)?;
        for d in &stats.devices {
            // A device without a trace has nothing replayed.
            peak("the snapshot", d, d.reserved_peak_bytes)?;
            let Some(device) = snapshot.device(d.device) else { continue };
            let p =
                Replayer::from_window_start(device, config.clone(), None, false)?.finish().stats.allocated_bytes.peak;
            rules.push(RuleOutcome {
                limit_bytes: Some(limit),
                window_only: d.peak_is_window_only,
                ..outcome(Rule::MaxAllocatedPeak, d, p <= limit, p)
            });
        }
    }
    if let Some(limit) = budget.max_fragmentation_pct {
        for d in &stats.devices {
            let pct = pct_of(d.reserved_unallocated_bytes, d.reserved_bytes);
            rules.push(RuleOutcome {
                limit_pct: Some(limit),
                pct: Some(pct),
                ..outcome(Rule::MaxFragmentation, d, pct <= limit, d.reserved_unallocated_bytes)
            });
        }
    }
    let mut grown = Vec::new();
    if let Some(base) = baseline {
        let diff = SnapshotDiff::build(base, snapshot, usize::MAX);
        for pair in &diff.devices {
            let stacks: Vec<StackDelta> = pair.stacks.iter().filter(|s| s.delta > 0).take(top).cloned().collect();
            grown.push(GrownStacks {
                baseline_device: pair.device_a,
                device: pair.device_b,
                total_delta: pair.total_delta,
                stacks,
            });
            let (Some(limit), Some(old), Some(new)) = (budget.max_growth_pct, &pair.stats_a, &pair.stats_b) else {
                continue;
            };
            for (rule, o, n) in [
                (Rule::MaxGrowthReservedPeak, old.reserved_peak_bytes, new.reserved_peak_bytes),
                (Rule::MaxGrowthRequestedPeak, old.requested_peak_bytes, new.requested_peak_bytes),
            ] {
                let o = peak("the baseline", old, o)?;
                let n = peak("the snapshot", new, n)?;
                let growth = if o == 0 {
                    if n == 0 { 0.0 } else { f64::INFINITY }
                } else {
                    (n as f64 - o as f64) * 100.0 / o as f64
                };
                rules.push(RuleOutcome {
                    limit_pct: Some(limit),
                    baseline_bytes: Some(o),
                    // JSON has no infinity: a peak from nothing is reported as null.
                    pct: growth.is_finite().then_some(growth),
                    window_only: new.peak_is_window_only || old.peak_is_window_only,
                    ..outcome(rule, new, growth <= limit, n)
                });
            }
        }
    } else if budget.max_growth_pct.is_some() {
        return Err(CheckError::NoBaseline);
    }
    let failures = rules.iter().filter(|r| !r.passed).count() as u32;
    Ok(CheckReport { passed: failures == 0, failures, rules, grown })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::snapshot;

    #[test]
    fn a_budget_under_the_peak_fails_and_names_the_figures() {
        let snap = snapshot("oom_leak");
        let peak = snap.stats().devices[0].reserved_peak_bytes.expect("oom_leak has a trace");
        let over = CheckBudget { max_reserved_peak_bytes: Some(peak - 1), ..CheckBudget::default() };
        let report = check(&snap, None, &over, 5).expect("checkable");
        assert!(!report.passed);
        assert_eq!(report.failures, 1);
        assert_eq!(report.rules[0].rule, Rule::MaxReservedPeak);
        assert_eq!(report.rules[0].bytes, peak);
        let at = CheckBudget { max_reserved_peak_bytes: Some(peak), ..CheckBudget::default() };
        assert!(check(&snap, None, &at, 5).expect("checkable").passed);
    }

    #[test]
    fn the_same_snapshot_as_baseline_has_no_growth() {
        let snap = snapshot("oom_leak");
        let budget = CheckBudget { max_growth_pct: Some(0.0), ..CheckBudget::default() };
        let report = check(&snap, Some(&snap), &budget, 5).expect("checkable");
        assert!(report.passed, "{report:?}");
        assert_eq!(report.rules.len(), 2);
        assert!(report.rules.iter().all(|r| r.pct == Some(0.0)));
        assert!(report.grown.iter().all(|g| g.stacks.is_empty()));
    }

    #[test]
    fn growth_without_a_baseline_is_refused() {
        let snap = snapshot("oom_leak");
        let budget = CheckBudget { max_growth_pct: Some(5.0), ..CheckBudget::default() };
        assert!(matches!(check(&snap, None, &budget, 5), Err(CheckError::NoBaseline)));
    }
}
