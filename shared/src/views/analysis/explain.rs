//! The OOM post-mortem of a device, with the settings that would have
//! avoided each OOM (simulated).

use serde::{Deserialize, Serialize};

use super::device_snapshot;
use crate::analysis::oom::{Avoidance, OomReport, SettingVerdict, explain_device};
use crate::analyzed::Analyzed;
use crate::error::ViewError;
use crate::simulate::{Replayer, settings_for};
use crate::snapshot::{DeviceSnapshot, Snapshot};

/// Query of the explain view.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct ExplainParams {
    /// Device (default: every device).
    pub device: Option<u32>,
    /// Replay the suggested settings to say which would have avoided each
    /// OOM (default true; a few replays of the trace).
    pub simulate: Option<bool>,
}

/// The OOM post-mortems of a snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExplainAnswer {
    /// Whether any device has a trace (without one an OOM leaves no entry).
    pub has_trace: bool,
    /// One per `oom` entry, in trace order.
    pub ooms: Vec<OomReport>,
}

/// Post-mortems of the `oom` entries, each with the settings the simulator
/// says would have avoided it.
pub fn explain(a: &Analyzed, p: &ExplainParams) -> Result<ExplainAnswer, ViewError> {
    let devices: Vec<&DeviceSnapshot> = match p.device {
        Some(d) => vec![device_snapshot(a, d)?],
        None => a.snapshot.devices.iter().collect(),
    };
    let has_trace = devices.iter().any(|d| d.has_trace && !d.trace.is_empty());
    let mut ooms: Vec<OomReport> = devices.iter().flat_map(|d| explain_device(&a.snapshot, d)).collect();
    if p.simulate.unwrap_or(true) {
        for r in &mut ooms {
            r.avoided_by = avoided_by(&a.snapshot, r);
        }
    }
    Ok(ExplainAnswer { has_trace, ooms })
}

/// Replay the OOM's device with each setting its report suggests and judge
/// the reserved peak against what the OOM says about the memory cap.
/// Garbage collection acts only under a cap, so those settings are replayed
/// under the largest cap consistent with the OOM (just below the
/// reservation that failed) and judged by whether that replay still fails.
/// `None` when the trace cannot be replayed (a wrapped ring buffer). Fits
/// [`crate::analysis::oom::explain_with`] as its `what_if`.
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
