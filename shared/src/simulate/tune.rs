//! Trying a grid of allocator settings on one trace and ranking them by
//! reserved peak, with what each costs.

use serde::{Deserialize, Serialize};

use super::{AllocatorConfig, SimError, SimOom, SimulateOptions, Simulation, simulate};
use crate::snapshot::Snapshot;

/// The settings `vramscope tune` tries, besides the recorded ones.
pub const DEFAULT_GRID: &[&str] = &[
    "",
    "expandable_segments:True",
    "max_split_size_mb:64",
    "max_split_size_mb:128",
    "max_split_size_mb:256",
    "max_split_size_mb:512",
    "roundup_power2_divisions:2",
    "roundup_power2_divisions:4",
    "roundup_power2_divisions:8",
    "roundup_power2_divisions:[256:1,512:2,>:4]",
    "max_split_size_mb:256,roundup_power2_divisions:4",
    "max_split_size_mb:512,max_non_split_rounding_mb:64",
    "expandable_segments:True,roundup_power2_divisions:4",
    "garbage_collection_threshold:0.8",
    "garbage_collection_threshold:0.6,max_split_size_mb:256",
];

/// One candidate's outcome. Over several devices, each figure is the
/// largest of any device (memory is limited per device).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TuneRow {
    /// The settings (`""` = PyTorch's defaults).
    pub alloc_conf: String,
    /// These are the settings the snapshot was recorded with.
    pub recorded: bool,
    /// Peaks and counts, each the largest of any device's.
    #[serde(flatten)]
    pub peaks: super::ReplayPeaks,
    /// Where it ran out of memory under the capacity, if it did.
    pub oom: Option<SimOom>,
    /// What the settings trade away, in words.
    pub trade_offs: Vec<String>,
}

/// All candidates, best first: those that fit the capacity before those
/// that do not; those that fit by reserved peak, then allocated peak, then
/// device calls; those that run out by how far they got (later is better:
/// their peaks are of a replay cut short, never compared with whole ones).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TuneReport {
    /// The capacity tried under.
    pub capacity_bytes: Option<u64>,
    /// It was not given: the least the process had when it ran out,
    /// inferred from the recorded OOM.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub capacity_inferred: bool,
    /// Where the capacity came from: `"given"`, `"recorded"` (the cap the
    /// capture recorded: the process's memory fraction of the device) or
    /// `"inferred"` (from the recorded OOM); absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_source: Option<&'static str>,
    /// Ranked candidates.
    pub rows: Vec<TuneRow>,
}

/// Replay the snapshot with its recorded settings and with each of `grid`,
/// and rank them.
pub fn tune(snapshot: &Snapshot, capacity: Option<u64>, grid: &[&str]) -> Result<TuneReport, SimError> {
    let recorded = simulate(
        snapshot,
        &SimulateOptions { alloc_conf: None, capacity, record_series: false, grant_recorded_ooms: false },
    )?;
    let mut rows = vec![row(&recorded, true)];
    for conf in grid {
        let options = SimulateOptions {
            alloc_conf: Some((*conf).to_owned()),
            capacity,
            record_series: false,
            grant_recorded_ooms: false,
        };
        let sim = simulate(snapshot, &options)?;
        if sim.config == recorded.config {
            continue;
        }
        rows.push(row(&sim, false));
    }
    rows.sort_by_key(|r| {
        let cut_at = r.oom.map(|o| std::cmp::Reverse(o.row));
        (cut_at, r.peaks.reserved_peak_bytes, r.peaks.allocated_peak_bytes, r.peaks.device_allocs)
    });
    Ok(TuneReport {
        capacity_bytes: capacity,
        capacity_inferred: false,
        capacity_source: capacity.map(|_| "given"),
        rows,
    })
}

fn row(sim: &Simulation, recorded: bool) -> TuneRow {
    TuneRow {
        alloc_conf: sim.alloc_conf.clone(),
        recorded,
        peaks: super::ReplayPeaks::max_over(sim.devices.iter().map(|d| super::ReplayPeaks::of(&d.stats))),
        oom: sim.devices.iter().find_map(|d| d.oom),
        trade_offs: trade_offs(&sim.config, sim.capacity.is_some()),
    }
}

/// What settings trade away, in words (`capped`: replayed under a
/// capacity, without which garbage collection does nothing).
pub fn trade_offs(c: &AllocatorConfig, capped: bool) -> Vec<String> {
    let mut trade_offs = Vec::new();
    if c.expandable_segments {
        trade_offs.push("expandable_segments: page map/unmap calls are slower than cudaMalloc; memory cannot be shared over CUDA IPC");
    }
    if c.max_split_size != u64::MAX {
        trade_offs.push(
            "max_split_size_mb: blocks that large are never split, so large requests may need segments of their own",
        );
    }
    if c.roundup_power2_divisions.iter().any(|&n| n > 1) {
        trade_offs
            .push("roundup_power2_divisions: sizes rounded up to power-of-two steps: more rounding waste, more reuse");
    }
    if c.garbage_collection_threshold > 0.0 {
        trade_offs.push(if capped {
            "garbage_collection_threshold: frees old cached segments above threshold x capacity: more cudaMalloc/cudaFree"
        } else {
            "garbage_collection_threshold: acts only under a memory limit (give --capacity)"
        });
    }
    trade_offs.into_iter().map(str::to_owned).collect()
}
