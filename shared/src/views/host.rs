//! Pinned host memory (`host_segments`/`host_traces`, PyTorch 2.14 with
//! `record_host=True`): its figures and its own timeline, reserved and
//! requested bytes over the host trace's rows.
//!
//! Shaped after PyTorch's source (the host allocator records segments and
//! trace entries like a device's); no real capture has been checked yet.

use serde::{Deserialize, Serialize};

use crate::error::ViewError;
use crate::indexed::IndexedSnapshot;
use crate::stats::DeviceStats;
use crate::timeline::MAX_PX;

/// Query of the host view.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct HostParams {
    /// Points of the timeline (default 1000, at most [`MAX_PX`]).
    pub px: Option<u32>,
}

/// The pinned host memory of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostAnswer {
    /// Its figures, counted like a device's.
    pub stats: DeviceStats,
    /// Rows of the host trace sampled (the memory right after each).
    pub rows: Vec<u32>,
    /// Their times (µs since the epoch), when the trace has times.
    pub time_us: Vec<i64>,
    /// Bytes pinned from CUDA (`cudaHostAlloc`) at each row.
    pub reserved: Vec<u64>,
    /// Bytes the program asked for and holds at each row.
    pub requested: Vec<u64>,
}

/// The host's figures and timeline; 404 when the snapshot has none.
pub fn host(a: &IndexedSnapshot, p: &HostParams) -> Result<HostAnswer, ViewError> {
    let host = a.snapshot.host.as_ref().ok_or_else(|| {
        ViewError::NotFound(
            "pinned host memory in this snapshot (recorded by PyTorch 2.14+ with record_host=True)".into(),
        )
    })?;
    let stats = DeviceStats::of(host);
    let trace = &host.trace;
    let n = trace.len();
    let px = (p.px.unwrap_or(1000).clamp(1, MAX_PX) as usize).min(n.max(1));
    let rows: Vec<u32> =
        if n == 0 { Vec::new() } else { (0..px).map(|i| ((i * (n - 1)) / (px - 1).max(1)) as u32).collect() };
    // The state before the first row: the final state minus the trace's net effect.
    let (mut reserved, mut requested) = (stats.reserved_bytes as i128, stats.requested_bytes as i128);
    for i in 0..n {
        let size = trace.sizes()[i] as i128;
        let (reserve, request) = trace.action(i).byte_effect();
        reserved -= i128::from(reserve) * size;
        requested -= i128::from(request) * size;
    }
    let mut out = HostAnswer {
        stats,
        rows: Vec::with_capacity(rows.len()),
        time_us: Vec::new(),
        reserved: Vec::with_capacity(rows.len()),
        requested: Vec::with_capacity(rows.len()),
    };
    let mut next = 0usize;
    for &row in &rows {
        while next <= row as usize {
            let size = trace.sizes()[next] as i128;
            let (reserve, request) = trace.action(next).byte_effect();
            reserved += i128::from(reserve) * size;
            requested += i128::from(request) * size;
            next += 1;
        }
        out.rows.push(row);
        out.reserved.push(reserved.max(0) as u64);
        out.requested.push(requested.max(0) as u64);
        if trace.has_time() {
            out.time_us.push(trace.times_us()[row as usize]);
        }
    }
    Ok(out)
}
