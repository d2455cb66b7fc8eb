//! The allocator's state at a trace's first entry, for a trace that does
//! not start from an empty allocator (recording began while memory was in
//! use, as in a test run after another one; or the history ring wrapped).
//!
//! The state at the first entry is the snapshot's final state less the
//! trace's effects: walking the trace backwards from the final segments,
//! an allocation is undone by freeing its block (merging it with free
//! neighbours, as the split that made it is undone), a free by carving its
//! block out of the free space again, a `segment_alloc` by removing the
//! segment, and a `segment_free` by restoring it, whole and free. A replay
//! seeded with that state then gives the peaks of the trace's window, with
//! the memory alive before it as a baseline.
//!
//! Every block's size is known from the final state or from the trace,
//! except that of a block allocated before the window and freed inside it:
//! the trace records its requested bytes only. It gets the rounded size of
//! that request, and the rest of the free space after it when the
//! allocator would not have split that rest off (below its split
//! threshold); at the start, a free rest the allocator never leaves on its
//! own (1 MiB or less in a large segment) goes back to the block before it.
//! Expandable segments and private pools (CUDA graphs) are not
//! reconstructed.

use std::collections::BTreeMap;

use super::allocator::{MIN_BLOCK_SIZE, SMALL_BUFFER, SMALL_SIZE, StartBlock, StartSegment, round_size};
use super::config::AllocatorConfig;
use crate::snapshot::{Action, BlockState, DeviceSnapshot};

/// Why the state at the first entry could not be worked out.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WindowStartError {
    /// Expandable segments map and unmap pages; not reconstructed.
    #[error("expandable segments")]
    Expandable,
    /// Segments of a private pool (a CUDA graph or a `MemPool`).
    #[error("a private memory pool")]
    PrivatePool,
    /// The trace contradicts the final state at this row.
    #[error("trace row {row} does not fit the final state ({what})")]
    Inconsistent {
        /// The trace row.
        row: usize,
        /// What did not fit.
        what: &'static str,
    },
}

/// The segments alive at the trace's first entry, with their blocks.
pub fn window_start(device: &DeviceSnapshot, config: &AllocatorConfig) -> Result<Vec<StartSegment>, WindowStartError> {
    let mut segments: BTreeMap<u64, StartSegment> = BTreeMap::new();
    for s in &device.segments {
        if s.is_expandable {
            return Err(WindowStartError::Expandable);
        }
        if s.pool_id != (0, 0) {
            return Err(WindowStartError::PrivatePool);
        }
        let blocks = s
            .blocks
            .iter()
            .map(|b| StartBlock {
                address: b.address,
                size: b.size,
                requested: if b.state == BlockState::Inactive { 0 } else { b.requested_size },
                state: b.state,
            })
            .collect();
        segments.insert(
            s.address,
            StartSegment {
                address: s.address,
                total_size: s.total_size,
                stream: s.stream,
                small: s.total_size == SMALL_BUFFER,
                blocks,
            },
        );
    }
    let trace = &device.trace;
    let streams = trace.streams();
    for row in (0..trace.len()).rev() {
        let (addr, size) = (trace.addrs()[row], trace.sizes()[row]);
        let inconsistent = |what| WindowStartError::Inconsistent { row, what };
        match trace.action(row) {
            Action::Alloc => {
                let seg = containing(&mut segments, addr).ok_or(inconsistent("no segment holds the allocation"))?;
                let i =
                    seg.blocks.iter().position(|b| b.address == addr).ok_or(inconsistent("no block at its address"))?;
                if seg.blocks[i].state == BlockState::Inactive {
                    return Err(inconsistent("its block is free"));
                }
                seg.blocks[i] = StartBlock { requested: 0, state: BlockState::Inactive, ..seg.blocks[i] };
                merge_free(&mut seg.blocks, i);
            }
            Action::FreeCompleted => {
                let seg = containing(&mut segments, addr).ok_or(inconsistent("no segment holds the freed block"))?;
                carve(seg, addr, size, config).ok_or(inconsistent("the freed block is not free space"))?;
            }
            Action::FreeRequested => {
                let seg = containing(&mut segments, addr).ok_or(inconsistent("no segment holds the freed block"))?;
                if let Some(b) =
                    seg.blocks.iter_mut().find(|b| b.address == addr && b.state == BlockState::ActivePendingFree)
                {
                    b.state = BlockState::ActiveAllocated;
                }
            }
            Action::SegmentAlloc => {
                let seg = segments.remove(&addr).ok_or(inconsistent("no such segment at the end"))?;
                if seg.blocks.iter().any(|b| b.state != BlockState::Inactive) {
                    return Err(inconsistent("the segment is in use before it was made"));
                }
            }
            Action::SegmentFree => {
                if containing(&mut segments, addr).is_some() {
                    return Err(inconsistent("a released segment overlaps a live one"));
                }
                let stream = streams.get(trace.stream[row] as usize).copied().unwrap_or(0);
                let free = StartBlock { address: addr, size, requested: 0, state: BlockState::Inactive };
                segments.insert(
                    addr,
                    StartSegment {
                        address: addr,
                        total_size: size,
                        stream,
                        small: size == SMALL_BUFFER,
                        blocks: vec![free],
                    },
                );
            }
            Action::SegmentMap | Action::SegmentUnmap => return Err(WindowStartError::Expandable),
            Action::Oom | Action::Snapshot | Action::Other => {}
        }
    }
    let mut segments: Vec<StartSegment> = segments.into_values().collect();
    for seg in &mut segments {
        absorb_unsplittable_rests(seg);
    }
    Ok(segments)
}

/// A free block the allocator never leaves on its own (1 MiB or less in a
/// large segment, under 512 bytes in a small one: `should_split` keeps such
/// a rest in the block it was cut from) belongs to the block before it: a
/// block carved for a free whose request was rounded smaller than it was.
fn absorb_unsplittable_rests(seg: &mut StartSegment) {
    let mut i = 1;
    while i < seg.blocks.len() {
        let b = seg.blocks[i];
        let too_small = if seg.small { b.size < MIN_BLOCK_SIZE } else { b.size <= SMALL_SIZE };
        if b.state == BlockState::Inactive && too_small && seg.blocks[i - 1].state != BlockState::Inactive {
            seg.blocks[i - 1].size += b.size;
            seg.blocks.remove(i);
        } else {
            i += 1;
        }
    }
}

fn containing(segments: &mut BTreeMap<u64, StartSegment>, addr: u64) -> Option<&mut StartSegment> {
    let (_, seg) = segments.range_mut(..=addr).next_back()?;
    (addr < seg.address.saturating_add(seg.total_size)).then_some(seg)
}

/// Block `i` is free: merge it with free neighbours.
fn merge_free(blocks: &mut Vec<StartBlock>, i: usize) {
    if i + 1 < blocks.len() && blocks[i + 1].state == BlockState::Inactive {
        blocks[i].size += blocks[i + 1].size;
        blocks.remove(i + 1);
    }
    if i > 0 && blocks[i - 1].state == BlockState::Inactive {
        blocks[i - 1].size += blocks[i].size;
        blocks.remove(i);
    }
}

/// Undo the free of a block at `addr` of `requested` bytes: carve it out
/// of the free block holding `addr`, pending free (its `free_requested`,
/// earlier in the trace, makes it allocated).
fn carve(seg: &mut StartSegment, addr: u64, requested: u64, config: &AllocatorConfig) -> Option<()> {
    let i = seg.blocks.iter().position(|b| b.address <= addr && addr < b.address + b.size)?;
    let free = seg.blocks[i];
    if free.state != BlockState::Inactive {
        return None;
    }
    let rounded = round_size(requested, config);
    let room = free.address + free.size - addr;
    if rounded > room {
        return None;
    }
    // The rest after the block stays a block of its own only where the
    // allocator splits (`should_split`).
    let rest = room - rounded;
    let splits = if seg.small { rest >= MIN_BLOCK_SIZE } else { rounded < config.max_split_size && rest > SMALL_SIZE };
    let size = if splits { rounded } else { room };
    let mut replaced = Vec::with_capacity(3);
    if addr > free.address {
        replaced.push(StartBlock { size: addr - free.address, ..free });
    }
    replaced.push(StartBlock { address: addr, size, requested, state: BlockState::ActivePendingFree });
    if size < room {
        replaced.push(StartBlock {
            address: addr + size,
            size: room - size,
            requested: 0,
            state: BlockState::Inactive,
        });
    }
    seg.blocks.splice(i..=i, replaced);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::{Replayer, settings_for};
    use crate::snapshot::Snapshot;
    use crate::testing::snapshot;

    /// A segment as compared: address, size, and its blocks' address, size,
    /// requested bytes and state.
    type Layout = (u64, u64, Vec<(u64, u64, u64, BlockState)>);

    /// `name`'s first device with its trace cut to rows `at..`: a recording
    /// that started with memory in use.
    fn cut(name: &str, at: usize) -> DeviceSnapshot {
        let s: Snapshot = snapshot(name);
        let mut d = s.devices.into_iter().find(|d| !d.trace.is_empty()).expect("a trace");
        let mut front = d.trace.to_builder();
        d.trace = front.split_off(at).into();
        d
    }

    /// The state the reconstruction gives at the cut equals the state a
    /// replay of the whole trace from empty reaches there, block by block,
    /// at every cut tried (the replay reproduces the recorded run exactly).
    #[test]
    fn the_state_at_a_cut_is_the_state_a_whole_replay_reaches_there() {
        for name in ["mlp_train_all", "oom_leak", "gpt_varlen", "streams", "compiled"] {
            let s = snapshot(name);
            let whole = s.devices.iter().find(|d| !d.trace.is_empty()).expect("a trace");
            let (config, _) = settings_for(&s, None).expect("settings");
            // Cuts after a whole request: the model makes a segment on the
            // allocation that needs it, where the trace has a
            // `segment_alloc` row just before, so a cut between the two is
            // not compared.
            let whole_request = |r: &usize| *r > 0 && whole.trace.action(*r - 1) != Action::SegmentAlloc;
            let len = whole.trace.len();
            for target in [1, len / 7, len / 3, len / 2, 2 * len / 3, 6 * len / 7, len - 1] {
                let at = (target..len).find(whole_request).expect("a cut");
                let mut replay = Replayer::new(whole, config.clone(), None, false).expect("from empty");
                replay.run_until(at);
                let want: Vec<Layout> = replay
                    .allocator()
                    .segments()
                    .iter()
                    .map(|g| {
                        (
                            g.address,
                            g.total_size,
                            g.blocks.iter().map(|b| (b.address, b.size, b.requested_size, b.state)).collect(),
                        )
                    })
                    .collect();
                let start = window_start(&cut(name, at), &config).expect("reconstructed");
                let got: Vec<Layout> = start
                    .iter()
                    .map(|g| {
                        (
                            g.address,
                            g.total_size,
                            g.blocks.iter().map(|b| (b.address, b.size, b.requested, b.state)).collect(),
                        )
                    })
                    .collect();
                assert_eq!(got, want, "{name} cut at row {at}");
            }
        }
    }

    /// The window's replay, seeded with that state, ends in the snapshot's
    /// final state and peaks where the whole replay peaks within the window.
    #[test]
    fn a_replay_from_the_reconstructed_start_gives_the_windows_peaks() {
        let s = snapshot("mlp_train_all");
        let whole = s.devices.iter().find(|d| !d.trace.is_empty()).expect("a trace");
        let (config, _) = settings_for(&s, None).expect("settings");
        let at = whole.trace.len() / 2;
        let mut full = Replayer::new(whole, config.clone(), None, true).expect("from empty").finish();
        let series = full.series.take().expect("series");
        let window_peak =
            series.rows.iter().zip(&series.allocated).filter(|(r, _)| **r as usize >= at).map(|(_, a)| *a).max();
        let part = cut("mlp_train_all", at);
        let windowed = Replayer::from_window_start(&part, config, None, false).expect("seeded").finish();
        assert_eq!(windowed.stats.allocated_bytes.current, full.stats.allocated_bytes.current);
        assert_eq!(windowed.stats.reserved_bytes.current, full.stats.reserved_bytes.current);
        assert_eq!(
            Some(windowed.stats.allocated_bytes.peak),
            window_peak.map(|p| p.max(windowed_start_allocated(&part)))
        );
        assert_eq!(windowed.unmatched_frees, 0, "every free finds its block");
    }

    fn windowed_start_allocated(d: &DeviceSnapshot) -> u64 {
        let (config, _) = (AllocatorConfig::default(), ());
        window_start(d, &config)
            .expect("reconstructed")
            .iter()
            .flat_map(|s| s.blocks.iter())
            .filter(|b| b.state == BlockState::ActiveAllocated)
            .map(|b| b.size)
            .sum()
    }

    #[test]
    fn a_trace_that_contradicts_the_final_state_is_refused_with_its_row() {
        let mut d = cut("mlp_train_all", 0);
        // Drop every segment: the trace's allocations have nowhere to be.
        d.segments.clear();
        let e = window_start(&d, &AllocatorConfig::default()).expect_err("no segments");
        assert!(matches!(e, WindowStartError::Inconsistent { .. }), "{e}");
    }
}
