//! A snapshot with its indexes ([`IndexedSnapshot`]), the one thing every view
//! and analysis answers from, and its persistence in an index file
//! ([`persist`]: written after the first parse, opened instead of parsing
//! again). It stands above the indexes and analyses it assembles and below
//! the views; [`crate::index_file`] is the plain file format it writes.

pub mod persist;

use std::sync::OnceLock;

use crate::Snapshot;
use crate::analysis::breakdown::DeviceCategories;
use crate::analysis::layout::{Checkpoints, Rewinder};
use crate::error::ViewError;
use crate::intervals::{DeviceIntervals, SnapshotIntervals};
use crate::pools::PoolMap;
use crate::stats::SnapshotStats;
use crate::timeline::{self, TimelineIndex};

/// A snapshot with its indexes, ready for timeline and state queries.
#[derive(Debug)]
pub struct IndexedSnapshot {
    /// The model.
    pub snapshot: Snapshot,
    /// Allocation and segment intervals.
    pub index: SnapshotIntervals,
    /// Level-of-detail curves.
    pub timeline: TimelineIndex,
    /// Per device, layout checkpoints for the state and segment views,
    /// built by the first query that rewinds the device.
    checkpoints: Vec<(u32, OnceLock<Checkpoints>)>,
    /// Per device, each allocation's category over its life, built by the
    /// first breakdown query of the device.
    categories: Vec<(u32, OnceLock<DeviceCategories>)>,
    /// Per device, the memory pool of each trace row, built by the first
    /// query that needs it (one pass over the trace, none for a run that
    /// used no private pool).
    pools: Vec<(u32, OnceLock<PoolMap>)>,
    /// PyTorch's counters recomputed from the snapshot ([`Snapshot::stats`]):
    /// built beside the indexes of a large trace, else by the first ask.
    stats: OnceLock<SnapshotStats>,
    /// Opened from a persisted index: the big columns view its file.
    from_index: bool,
}

/// Rows between two layout checkpoints: a query undoes at most this many
/// rows more than its own window (a few milliseconds), and a 1.5M-entry
/// trace keeps 23 copies of its layout.
const CHECKPOINT_ROWS: usize = 1 << 16;

impl IndexedSnapshot {
    /// About how much memory this holds: the trace columns, intervals,
    /// level-of-detail tables and checkpoints all grow with the trace rows.
    /// An estimate, for caches that hold several: measured as the growth
    /// of the server's RSS over uploading and viewing `gpt_long` (40 MB for
    /// 255,577 rows, parse leftovers included).
    ///
    /// Opened from a persisted index, the trace and timeline columns view
    /// the file (pages the operating system keeps or drops), so what counts
    /// is the heap: the interval lists, the tables and the final segments.
    ///
    /// What the first queries of a kind build later (the breakdown's
    /// categories, the pools map) counts once built: a cache that asks
    /// again sees it.
    pub fn approx_bytes(&self) -> u64 {
        const PER_ROW: u64 = 160;
        let rows: u64 = self.snapshot.devices.iter().map(|d| d.trace.len() as u64).sum();
        let blocks: u64 = self.snapshot.devices.iter().flat_map(|d| &d.segments).map(|s| s.blocks.len() as u64).sum();
        let built: usize =
            self.categories.iter().filter_map(|(_, c)| c.get()).map(DeviceCategories::heap_bytes).sum::<usize>()
                + self.pools.iter().filter_map(|(_, p)| p.get()).map(PoolMap::heap_bytes).sum::<usize>();
        if !self.from_index {
            return (1 << 20) + rows * PER_ROW + blocks * 64 + built as u64;
        }
        let intervals: usize =
            self.index.devices.iter().map(|d| d.allocations.heap_bytes() + d.segments.len() * 40).sum();
        (1 << 20) + intervals as u64 + self.timeline.heap_bytes() as u64 + blocks * 64 + built as u64
    }

    /// Whether this was opened from a persisted index rather than parsed.
    pub fn is_from_index(&self) -> bool {
        self.from_index
    }

    /// Build the indexes of a parsed snapshot (CPU work: tens of ms per
    /// million trace entries). The statistics wait for their first ask.
    pub fn build(snapshot: Snapshot) -> IndexedSnapshot {
        let (index, timeline) = TimelineIndex::build_with_intervals(&snapshot);
        IndexedSnapshot::from_parts(snapshot, index, timeline, false)
    }

    /// [`IndexedSnapshot::build`] without the timeline's allocation indexes,
    /// nearly half of the build: the same answers, the first windows found
    /// by a scan of the intervals until [`IndexedSnapshot::build_allocation_indexes`]
    /// runs. For a caller on one thread (the browser's worker) whose first
    /// answer is awaited, which builds them once it has answered.
    pub fn build_deferred(snapshot: Snapshot) -> IndexedSnapshot {
        let (index, timeline) = TimelineIndex::build_with_intervals_deferred(&snapshot);
        IndexedSnapshot::from_parts(snapshot, index, timeline, false)
    }

    /// Whether the timeline's allocation indexes are built (always, but
    /// after [`IndexedSnapshot::build_deferred`] and its kin until
    /// [`IndexedSnapshot::build_allocation_indexes`]).
    pub fn allocation_indexes_built(&self) -> bool {
        self.timeline.allocation_indexes_built()
    }

    /// [`IndexedSnapshot::build`] for a caller that needs the statistics as well
    /// (a server stores them when a snapshot becomes ready): `known` when
    /// they were computed already, else computed beside the indexes of a
    /// large trace, whose build leaves a core idle for part of its time.
    pub fn build_with_stats(snapshot: Snapshot, known: Option<SnapshotStats>) -> IndexedSnapshot {
        IndexedSnapshot::build_parts(snapshot, known, false)
    }

    /// [`IndexedSnapshot::build_with_stats`] without the timeline's allocation
    /// indexes, nearly half of a large trace's build: the caller builds them
    /// with [`IndexedSnapshot::build_allocation_indexes`] after its first answers,
    /// which meanwhile find a window's largest allocations by a scan (see
    /// [`TimelineIndex::build_with_intervals_deferred`]). Writing the
    /// index file builds them too.
    pub fn build_with_stats_deferred(snapshot: Snapshot, known: Option<SnapshotStats>) -> IndexedSnapshot {
        IndexedSnapshot::build_parts(snapshot, known, true)
    }

    fn build_parts(snapshot: Snapshot, known: Option<SnapshotStats>, defer: bool) -> IndexedSnapshot {
        let rows: usize = snapshot.devices.iter().map(|d| d.trace.len()).sum();
        let build = || {
            if defer {
                TimelineIndex::build_with_intervals_deferred(&snapshot)
            } else {
                TimelineIndex::build_with_intervals(&snapshot)
            }
        };
        let ((index, timeline), stats) = match known {
            Some(stats) => (build(), Some(stats)),
            None if rows >= timeline::PARALLEL_BUILD_ROWS => {
                let (built, stats) = timeline::beside(build, || snapshot.stats());
                (built, Some(stats))
            }
            None => (build(), None),
        };
        let analyzed = IndexedSnapshot::from_parts(snapshot, index, timeline, false);
        if let Some(stats) = stats {
            let _ = analyzed.stats.set(stats);
        }
        analyzed
    }

    /// Build what [`IndexedSnapshot::build_with_stats_deferred`] left: the
    /// timeline's allocation indexes (nothing when they are built).
    pub fn build_allocation_indexes(&self) {
        self.timeline.build_allocation_indexes();
    }

    /// PyTorch's counters recomputed from the snapshot, as
    /// [`Snapshot::stats`] answers them, computed once.
    pub fn stats(&self) -> &SnapshotStats {
        self.stats.get_or_init(|| self.snapshot.stats())
    }

    /// Assemble built or loaded parts.
    pub(crate) fn from_parts(
        snapshot: Snapshot,
        index: SnapshotIntervals,
        timeline: TimelineIndex,
        from_index: bool,
    ) -> IndexedSnapshot {
        let checkpoints = snapshot.devices.iter().map(|d| (d.device, OnceLock::new())).collect();
        let categories = snapshot.devices.iter().map(|d| (d.device, OnceLock::new())).collect();
        let pools = snapshot.devices.iter().map(|d| (d.device, OnceLock::new())).collect();
        IndexedSnapshot {
            snapshot,
            index,
            timeline,
            checkpoints,
            categories,
            pools,
            stats: OnceLock::new(),
            from_index,
        }
    }

    /// The device asked for, or the first one when none was.
    pub fn device_or_first(&self, device: Option<u32>) -> Result<u32, ViewError> {
        match device {
            Some(d) if self.snapshot.device(d).is_some() => Ok(d),
            Some(d) => Err(ViewError::NotFound(format!("device {d}"))),
            None => self
                .snapshot
                .devices
                .first()
                .map(|d| d.device)
                .ok_or_else(|| ViewError::NotFound("any device".to_owned())),
        }
    }

    /// A layout rewinder of `device` standing at or just after `row` (`None`:
    /// the trace's start), ready to rewind to `row` and then to earlier
    /// rows. The first call for a device builds its checkpoints.
    pub fn rewinder(&self, device: u32, row: Option<u32>) -> Result<Rewinder<'_>, ViewError> {
        let d = self.snapshot.device(device).ok_or_else(|| ViewError::NotFound(format!("device {device}")))?;
        let cell = self
            .checkpoints
            .iter()
            .find(|(id, _)| *id == device)
            .map(|(_, c)| c)
            .ok_or_else(|| ViewError::NotFound(format!("device {device}")))?;
        let checkpoints = cell.get_or_init(|| Rewinder::new(&self.snapshot, d).checkpoints(CHECKPOINT_ROWS));
        Ok(Rewinder::from_checkpoints(&self.snapshot, d, checkpoints, row))
    }

    /// The memory pool of each trace row of `device` (CUDA graphs' private
    /// pools), inferred once.
    pub fn pool_map(&self, device: u32) -> Result<&PoolMap, ViewError> {
        let d = self.snapshot.device(device).ok_or_else(|| ViewError::NotFound(format!("device {device}")))?;
        let cell = self
            .pools
            .iter()
            .find(|(id, _)| *id == device)
            .map(|(_, c)| c)
            .ok_or_else(|| ViewError::NotFound(format!("device {device}")))?;
        Ok(cell.get_or_init(|| PoolMap::of(d)))
    }

    /// Build every device's layout checkpoints now (they are otherwise
    /// built by the first query that needs them).
    pub fn build_layout_checkpoints(&self) {
        for d in &self.snapshot.devices {
            let _ = self.rewinder(d.device, None);
        }
    }

    /// The categories of a device's allocations
    /// ([`crate::analysis::breakdown`]); the first call for a device builds them.
    pub fn categories(&self, device: u32) -> Result<&DeviceCategories, ViewError> {
        let d = self.snapshot.device(device).ok_or_else(|| ViewError::NotFound(format!("device {device}")))?;
        let index = self.device_index(device)?;
        let cell = self
            .categories
            .iter()
            .find(|(id, _)| *id == device)
            .map(|(_, c)| c)
            .ok_or_else(|| ViewError::NotFound(format!("device {device}")))?;
        Ok(cell.get_or_init(|| DeviceCategories::build(&self.snapshot, d, index)))
    }

    /// The interval index of a device.
    pub fn device_index(&self, device: u32) -> Result<&DeviceIntervals, ViewError> {
        self.index
            .devices
            .iter()
            .find(|d| d.device == device)
            .ok_or_else(|| ViewError::NotFound(format!("device {device}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The statistics built beside the indexes of a large trace (gpt_long:
    /// 255,577 rows) are the snapshot's own, as is the lazy copy of a small
    /// one's.
    #[test]
    fn the_statistics_built_beside_the_indexes_are_the_snapshots() {
        for name in ["gpt_long", "oom_leak"] {
            let snapshot = crate::testing::snapshot(name);
            let expected = serde_json::to_string(&snapshot.stats().report("")).expect("json");
            let analyzed = IndexedSnapshot::build_with_stats(snapshot, None);
            assert_eq!(analyzed.stats.get().is_some(), name == "gpt_long", "{name}: built beside the indexes");
            assert_eq!(serde_json::to_string(&analyzed.stats().report("")).expect("json"), expected, "{name}");
        }
    }
}
