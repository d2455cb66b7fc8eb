//! Memory by category (parameters, gradients, optimizer state,
//! activations, other) and by stage, at a row and over the trace; see
//! [`crate::analysis::breakdown`].

use serde::{Deserialize, Serialize};

use crate::analysis::breakdown::{BreakdownSeries, DeviceBreakdown};
use crate::error::ViewError;
use crate::indexed::IndexedSnapshot;
use crate::timeline::MAX_PX;

/// Query of the breakdown view.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct BreakdownParams {
    /// Device (default: every device).
    pub device: Option<u32>,
    /// Trace row: the memory right after it (default: the last row).
    pub at: Option<u32>,
    /// Also answer the categories at this many rows spread over the trace,
    /// for a stacked chart (at most [`MAX_PX`]).
    pub px: Option<u32>,
}

/// One device's breakdown, and its series when asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceBreakdownAnswer {
    /// The breakdown at the row.
    #[serde(flatten)]
    pub breakdown: DeviceBreakdown,
    /// The categories over the trace (`px` given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub series: Option<BreakdownSeries>,
}

/// The breakdown of a snapshot: `vramscope breakdown --json` without `file`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakdownAnswer {
    /// One per device.
    pub devices: Vec<DeviceBreakdownAnswer>,
}

/// Live memory by category at `at` on each device asked for. A row past a
/// device's trace is refused, naming the trace's length.
pub fn breakdown(a: &IndexedSnapshot, p: &BreakdownParams) -> Result<BreakdownAnswer, ViewError> {
    let devices: Vec<u32> = match p.device {
        Some(d) => vec![a.device_or_first(Some(d))?],
        None => a.snapshot.devices.iter().map(|d| d.device).collect(),
    };
    let mut out = Vec::with_capacity(devices.len());
    for device in devices {
        let rows = a.snapshot.device(device).map_or(0, |d| d.trace.len());
        if let Some(at) = p.at
            && at as usize >= rows
        {
            return Err(ViewError::BadRequest(format!(
                "row {at} is past the end of device {device}'s trace ({rows} rows: 0 to {})",
                rows.saturating_sub(1)
            )));
        }
        let categories = a.categories(device)?;
        let series = p.px.map(|px| categories.series((px as usize).min(MAX_PX as usize)));
        out.push(DeviceBreakdownAnswer { breakdown: categories.at(p.at), series });
    }
    Ok(BreakdownAnswer { devices: out })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_series_ends_at_the_breakdown_of_the_last_row() {
        let a = crate::testing::corpus("breakdown_python_after_step");
        let p = BreakdownParams { px: Some(300), ..Default::default() };
        let answer = breakdown(&a, &p).expect("breakdown");
        let d = &answer.devices[0];
        let series = d.series.as_ref().expect("series asked for");
        assert_eq!(series.rows.len(), 300);
        let last = series.rows.len() - 1;
        assert_eq!(series.rows[last], d.breakdown.at_row.expect("a trace"));
        let c = d.breakdown.categories;
        assert_eq!(
            [series.parameters[last], series.gradients[last], series.optimizer_state[last], series.activations[last]],
            [c.parameters, c.gradients, c.optimizer_state, c.activations]
        );
        // Gradients exist only after the first backward pass began.
        assert_eq!(series.gradients[0], 0);
        // Every sample is the breakdown at its row.
        let categories = a.categories(0).expect("device 0");
        for i in [0, 37, 150, 299] {
            let c = categories.at(Some(series.rows[i])).categories;
            let sampled = [
                series.parameters[i],
                series.gradients[i],
                series.optimizer_state[i],
                series.activations[i],
                series.other[i],
            ];
            assert_eq!(
                sampled,
                [c.parameters, c.gradients, c.optimizer_state, c.activations, c.other],
                "row {}",
                series.rows[i]
            );
        }
        let past = breakdown(&a, &BreakdownParams { at: Some(1 << 30), ..Default::default() });
        assert!(matches!(past, Err(ViewError::BadRequest(m)) if m.contains("past the end")));
    }
}
