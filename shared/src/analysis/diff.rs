//! Comparing two snapshots: live memory by stack at the end of each, and
//! the devices' figures side by side. For two ranks of one job, or for one
//! job before and after a change.
//!
//! Stacks are matched by their frames' text (filename, line, function), since
//! ids differ between files. Stacks left unmatched on both sides are then
//! paired when they agree on everything but the program's line numbers (an
//! edit to the program moves them), then on everything but any line
//! number, wherever that pairing is one to one.
//!
//! A stack's bytes are the requested bytes of its allocated blocks at the
//! end: what the program holds, comparable across allocator settings (block
//! sizes, also reported, depend on the allocator's rounding and splitting).
//!
//! Devices are paired by index; two single-device files (two ranks, each on
//! its own GPU) are paired whatever their indexes.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use super::{FrameText, stack_text};
use crate::snapshot::{BlockState, DeviceSnapshot, Snapshot};
use crate::stats::DeviceStats;

/// How a stack's memory changed from A to B.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Live in both, more in B.
    Grew,
    /// Live in both, less in B.
    Shrank,
    /// Live only in B.
    Appeared,
    /// Live only in A.
    Vanished,
}

/// One stack in a comparison.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackDelta {
    /// The stack as in A (as in B when only B has it), innermost frame first.
    pub frames: Vec<FrameText>,
    /// The change.
    pub change: Change,
    /// Requested bytes live at the end of A.
    pub bytes_a: u64,
    /// Requested bytes live at the end of B.
    pub bytes_b: u64,
    /// `bytes_b - bytes_a`.
    pub delta: i64,
    /// Allocations live at the end of A.
    pub count_a: u64,
    /// Allocations live at the end of B.
    pub count_b: u64,
    /// Block bytes (rounded) in A.
    pub block_bytes_a: u64,
    /// Block bytes (rounded) in B.
    pub block_bytes_b: u64,
    /// Matched only when ignoring line numbers: B's stack, whose lines differ.
    pub frames_b: Option<Vec<FrameText>>,
}

/// The comparison of one device of A with one device of B.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceDiff {
    /// The device in A (`None`: only B has it).
    pub device_a: Option<u32>,
    /// The device in B (`None`: only A has it).
    pub device_b: Option<u32>,
    /// A's figures.
    pub stats_a: Option<DeviceStats>,
    /// B's figures.
    pub stats_b: Option<DeviceStats>,
    /// Stacks whose live bytes differ, the largest change first (at most the
    /// `top` asked for).
    pub stacks: Vec<StackDelta>,
    /// Stacks that differ, in all.
    pub changed_stacks: u32,
    /// Stacks per kind of change: grew, shrank, appeared, vanished.
    pub grew: u32,
    /// See `grew`.
    pub shrank: u32,
    /// See `grew`.
    pub appeared: u32,
    /// See `grew`.
    pub vanished: u32,
    /// Stacks live in both with the same bytes.
    pub unchanged_stacks: u32,
    /// Their bytes.
    pub unchanged_bytes: u64,
    /// Sum of all stacks' deltas: B's live requested bytes minus A's.
    pub total_delta: i64,
}

/// The comparison of two snapshots.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SnapshotDiff {
    /// Paired devices.
    pub devices: Vec<DeviceDiff>,
}

impl SnapshotDiff {
    /// Compare `a` with `b`, keeping the `top` largest stack changes per device.
    pub fn build(a: &Snapshot, b: &Snapshot, top: usize) -> SnapshotDiff {
        let pairs: Vec<(Option<&DeviceSnapshot>, Option<&DeviceSnapshot>)> =
            if a.devices.len() == 1 && b.devices.len() == 1 {
                vec![(a.devices.first(), b.devices.first())]
            } else {
                let mut ids: Vec<u32> = a.devices.iter().chain(&b.devices).map(|d| d.device).collect();
                ids.sort_unstable();
                ids.dedup();
                ids.into_iter().map(|id| (a.device(id), b.device(id))).collect()
            };
        SnapshotDiff { devices: pairs.into_iter().map(|(da, db)| DeviceDiff::build(a, da, b, db, top)).collect() }
    }

    /// No device has a changed stack, and their figures agree.
    pub fn is_empty(&self) -> bool {
        self.devices.iter().all(|d| d.changed_stacks == 0 && d.stats_a == d.stats_b)
    }
}

/// Live memory of one stack: (requested bytes, count, block bytes).
#[derive(Clone, Copy, Default)]
struct Live {
    bytes: u64,
    count: u64,
    block_bytes: u64,
}

fn live_by_stack(snapshot: &Snapshot, device: Option<&DeviceSnapshot>) -> BTreeMap<Vec<FrameText>, Live> {
    let mut by_id: FxHashMap<u32, Live> = FxHashMap::default();
    for block in device.iter().flat_map(|d| &d.segments).flat_map(|s| &s.blocks) {
        if block.state == BlockState::ActiveAllocated {
            let e = by_id.entry(block.stack).or_default();
            e.bytes += block.requested_size;
            e.count += 1;
            e.block_bytes += block.size;
        }
    }
    let mut out: BTreeMap<Vec<FrameText>, Live> = BTreeMap::new();
    for (id, live) in by_id {
        // Different ids may not share text (they are interned), but be safe.
        let e = out.entry(stack_text(snapshot, id)).or_default();
        e.bytes += live.bytes;
        e.count += live.count;
        e.block_bytes += live.block_bytes;
    }
    out
}

/// A frame's (filename, line, function) with the line possibly left out (0).
type LooseFrame<'a> = (&'a str, i64, &'a str);

/// A stack's text with some line numbers left out.
type LooseKey = fn(&[FrameText]) -> Vec<LooseFrame<'_>>;

/// Stacks by loose key; `None` for a key two stacks share.
type LooseIndex<'a> = FxHashMap<Vec<LooseFrame<'a>>, Option<Vec<FrameText>>>;

/// Line numbers of the program's own frames left out: an edit to the
/// program moves them, while library lines stay put (and tell apart two
/// stacks that differ only there, like two lines of one optimizer function).
fn user_lines_ignored(frames: &[FrameText]) -> Vec<LooseFrame<'_>> {
    frames.iter().map(|f| (f.filename.as_str(), if f.is_user_code() { 0 } else { f.line }, f.name.as_str())).collect()
}

/// Every line number left out.
fn all_lines_ignored(frames: &[FrameText]) -> Vec<LooseFrame<'_>> {
    frames.iter().map(|f| (f.filename.as_str(), 0, f.name.as_str())).collect()
}

/// Each stack by its loose key; `None` for a key two stacks share.
fn loose_index(side: &BTreeMap<Vec<FrameText>, Live>, key: LooseKey) -> LooseIndex<'_> {
    let mut m = LooseIndex::default();
    for k in side.keys() {
        m.entry(key(k)).and_modify(|v| *v = None).or_insert_with(|| Some(k.clone()));
    }
    m
}

/// Pairs of stacks, one from each side, whose loose keys are equal and
/// unique on both sides.
fn loose_pairs(
    a: &BTreeMap<Vec<FrameText>, Live>,
    b: &BTreeMap<Vec<FrameText>, Live>,
    key: LooseKey,
) -> Vec<(Vec<FrameText>, Vec<FrameText>)> {
    let (ia, ib) = (loose_index(a, key), loose_index(b, key));
    let mut pairs: Vec<(Vec<FrameText>, Vec<FrameText>)> =
        ia.iter().filter_map(|(k, ka)| Some((ka.clone()?, ib.get(k)?.clone()?))).collect();
    pairs.sort();
    pairs
}

impl DeviceDiff {
    /// Compare one device of A with one of B (either may be missing).
    pub fn build(
        a: &Snapshot,
        da: Option<&DeviceSnapshot>,
        b: &Snapshot,
        db: Option<&DeviceSnapshot>,
        top: usize,
    ) -> DeviceDiff {
        let mut live_a = live_by_stack(a, da);
        let mut live_b = live_by_stack(b, db);
        let mut rows: Vec<StackDelta> = Vec::new();
        let mut unchanged_stacks = 0;
        let mut unchanged_bytes = 0;
        let mut push =
            |frames: Vec<FrameText>, la: Option<Live>, lb: Option<Live>, frames_b: Option<Vec<FrameText>>| {
                let (x, y) = (la.unwrap_or_default(), lb.unwrap_or_default());
                let change = match (la, lb) {
                    (None, _) => Change::Appeared,
                    (_, None) => Change::Vanished,
                    _ if y.bytes > x.bytes => Change::Grew,
                    _ if y.bytes < x.bytes => Change::Shrank,
                    _ => {
                        unchanged_stacks += 1;
                        unchanged_bytes += x.bytes;
                        return;
                    }
                };
                rows.push(StackDelta {
                    frames,
                    change,
                    bytes_a: x.bytes,
                    bytes_b: y.bytes,
                    delta: y.bytes as i64 - x.bytes as i64,
                    count_a: x.count,
                    count_b: y.count,
                    block_bytes_a: x.block_bytes,
                    block_bytes_b: y.block_bytes,
                    frames_b,
                });
            };

        // Exact matches.
        let shared: Vec<Vec<FrameText>> = live_a.keys().filter(|k| live_b.contains_key(*k)).cloned().collect();
        for key in shared {
            let (la, lb) = (live_a.remove(&key), live_b.remove(&key));
            push(key, la, lb, None);
        }
        // Then one-to-one matches ignoring the program's line numbers, then
        // all line numbers.
        for key in [user_lines_ignored as LooseKey, all_lines_ignored] {
            for (ka, kb) in loose_pairs(&live_a, &live_b, key) {
                let (la, lb) = (live_a.remove(&ka), live_b.remove(&kb));
                push(ka, la, lb, Some(kb));
            }
        }
        for (k, l) in std::mem::take(&mut live_a) {
            push(k, Some(l), None, None);
        }
        for (k, l) in std::mem::take(&mut live_b) {
            push(k, None, Some(l), None);
        }

        rows.sort_by(|x, y| y.delta.unsigned_abs().cmp(&x.delta.unsigned_abs()).then_with(|| x.frames.cmp(&y.frames)));
        let count = |c: Change| rows.iter().filter(|r| r.change == c).count() as u32;
        let (grew, shrank, appeared, vanished) =
            (count(Change::Grew), count(Change::Shrank), count(Change::Appeared), count(Change::Vanished));
        let total_delta = rows.iter().map(|r| r.delta).sum();
        let changed_stacks = rows.len() as u32;
        rows.truncate(top);
        DeviceDiff {
            device_a: da.map(|d| d.device),
            device_b: db.map(|d| d.device),
            stats_a: da.map(DeviceStats::of),
            stats_b: db.map(DeviceStats::of),
            stacks: rows,
            changed_stacks,
            grew,
            shrank,
            appeared,
            vanished,
            unchanged_stacks,
            unchanged_bytes,
            total_delta,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(frames: &[(&str, i64, &str)]) -> Vec<FrameText> {
        frames.iter().map(|&(f, l, n)| FrameText { filename: f.into(), line: l, name: n.into() }).collect()
    }

    #[test]
    fn loose_matching_pairs_only_one_to_one() {
        let adam = "/usr/lib/python3.12/site-packages/torch/optim/adam.py";
        let live = |keys: Vec<Vec<FrameText>>| keys.into_iter().map(|k| (k, Live::default())).collect();
        // Two optimizer stacks that differ only in the library's line, and
        // the program's line moved from 83 to 165 between A and B.
        let a = live(vec![
            stack(&[(adam, 178, "_init_group"), ("/srv/jobs/train.py", 83, "run")]),
            stack(&[(adam, 182, "_init_group"), ("/srv/jobs/train.py", 83, "run")]),
        ]);
        let b = live(vec![
            stack(&[(adam, 178, "_init_group"), ("/srv/jobs/train.py", 165, "run")]),
            stack(&[(adam, 182, "_init_group"), ("/srv/jobs/train.py", 165, "run")]),
        ]);
        let pairs = loose_pairs(&a, &b, user_lines_ignored);
        assert_eq!(pairs.len(), 2);
        for (ka, kb) in &pairs {
            assert_eq!((ka[0].line, ka[1].line, kb[1].line), (kb[0].line, 83, 165));
        }
        // Ignoring every line, the two are ambiguous: no pair.
        assert!(loose_pairs(&a, &b, all_lines_ignored).is_empty());
    }
}
