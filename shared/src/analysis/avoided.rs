//! Which allocator settings would have avoided an OOM: each setting an OOM
//! report suggests ([`OomReport::candidate_settings`]), replayed by the
//! allocator simulator and judged against what the OOM says about the
//! memory cap ([`SettingVerdict::judge`]).

use super::oom::{Avoidance, OomReport, SettingVerdict, explain};
use crate::simulate::{Replayer, settings_for};
use crate::snapshot::Snapshot;

/// [`explain`], with each report's [`OomReport::avoided_by`] filled by
/// [`avoided_by`].
pub fn explain_replayed(snapshot: &Snapshot) -> Vec<OomReport> {
    let mut reports = explain(snapshot);
    for r in &mut reports {
        r.avoided_by = avoided_by(snapshot, r);
    }
    reports
}

/// Replay the OOM's device with each setting its report suggests and judge
/// the reserved peak against what the OOM says about the memory cap.
/// Garbage collection acts only under a cap, so those settings are replayed
/// under the largest cap consistent with the OOM (just below the
/// reservation that failed) and judged by whether that replay still fails.
/// `None` when the trace cannot be replayed (a wrapped ring buffer).
pub fn avoided_by(snapshot: &Snapshot, report: &OomReport) -> Option<Vec<SettingVerdict>> {
    let (_, failed) = report.capacity_bytes_range;
    let device = snapshot.device(report.device)?;
    let recorded = settings_for(snapshot, None).ok()?.0;
    let mut verdicts = Vec::new();
    for setting in report.candidate_settings() {
        let needs_cap = setting.starts_with("garbage_collection_threshold");
        // Under the recorded cap when the capture has one; else the largest
        // the OOM allows.
        let capacity = needs_cap.then(|| report.recorded_capacity_bytes.unwrap_or(failed.saturating_sub(1)));
        let (config, _) = settings_for(snapshot, Some(&setting)).ok()?;
        let same = config == recorded;
        // The question is whether the setting serves the request that
        // failed, so the replay grants it.
        let sim = Replayer::new(device, config, capacity, false)
            .ok()?
            .recorded_settings(same)
            .grant_recorded_ooms(true)
            .finish();
        let mut verdict = SettingVerdict::judge(report, setting, sim.stats.reserved_bytes.peak);
        if let Some(cap) = capacity {
            let gib = cap as f64 / f64::from(1u32 << 30);
            if report.recorded_capacity_bytes.is_some() {
                verdict.avoids = if sim.oom.is_none() { Avoidance::Yes } else { Avoidance::No };
                verdict.note = Some(format!("replayed under the recorded {gib:.2} GiB cap (GC acts only under a cap)"));
            } else {
                verdict.avoids =
                    if sim.oom.is_none() { Avoidance::IfCapacityAtLeast { bytes: cap } } else { Avoidance::No };
                verdict.note = Some(format!(
                    "replayed under a {gib:.2} GiB cap, just below the reservation that failed (GC acts only under a cap)"
                ));
            }
        }
        verdicts.push(verdict);
    }
    Some(verdicts)
}
