//! The OOM post-mortem of a device, with the settings that would have
//! avoided each OOM (simulated).

use serde::{Deserialize, Serialize};

use super::device_snapshot;
use crate::analysis::avoided::avoided_by;
use crate::analysis::oom::{OomReport, explain_device};
use crate::error::ViewError;
use crate::indexed::IndexedSnapshot;
use crate::snapshot::DeviceSnapshot;

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
pub fn explain(a: &IndexedSnapshot, p: &ExplainParams) -> Result<ExplainAnswer, ViewError> {
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
