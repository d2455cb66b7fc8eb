//! The leak ranking: stacks whose live memory grows step after step.

use serde::{Deserialize, Serialize};

use super::{MAX_TOP, device_snapshot};
use crate::analysis::leaks::DeviceLeaks;
use crate::error::ViewError;
use crate::indexed::IndexedSnapshot;
use crate::snapshot::DeviceSnapshot;

/// Query of the leaks view.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct LeaksParams {
    /// Device (default: every device with segments or a trace).
    pub device: Option<u32>,
    /// Stacks to list per device (default 20, at most [`MAX_TOP`]).
    pub top: Option<usize>,
}

/// One device's leak ranking, with where its steps came from in words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceLeaksAnswer {
    /// Where the step boundaries came from, for people.
    pub step_source: String,
    /// The ranking.
    pub leaks: DeviceLeaks,
}

/// The leak ranking of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaksAnswer {
    /// One per device.
    pub devices: Vec<DeviceLeaksAnswer>,
}

/// Allocations alive at the end, grouped by stack and ranked by how
/// steadily they grew (see [`crate::analysis::leaks`]).
pub fn leaks(a: &IndexedSnapshot, p: &LeaksParams) -> Result<LeaksAnswer, ViewError> {
    let top = p.top.unwrap_or(20).min(MAX_TOP);
    let devices: Vec<&DeviceSnapshot> = match p.device {
        Some(d) => vec![device_snapshot(a, d)?],
        None => a.snapshot.devices.iter().collect(),
    };
    let mut out = Vec::with_capacity(devices.len());
    for d in devices {
        let leaks = DeviceLeaks::build(&a.snapshot, d, a.device_index(d.device)?, top);
        out.push(DeviceLeaksAnswer { step_source: leaks.step_source_text(), leaks });
    }
    Ok(LeaksAnswer { devices: out })
}
