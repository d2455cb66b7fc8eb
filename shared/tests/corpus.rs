//! Every real snapshot of the corpus against its oracle: the numbers
//! `torch.cuda.memory_stats()` gave in the same process at snapshot time.

mod common;

use std::path::Path;

use vramscope_shared::intervals::SnapshotIntervals;
use vramscope_shared::snapshot::{Action, BlockState, EMPTY_STACK};

/// Check one corpus file against its `.stats.json`.
fn check(dir: &Path, name: &str) {
    let snapshot = common::read(&dir.join(format!("{name}.pickle")));
    let oracle = common::json(&dir.join(format!("{name}.stats.json")));
    let stat = |key: &str| oracle["memory_stats"][key].as_u64().unwrap_or_else(|| panic!("{name}: oracle lacks {key}"));
    let stats = snapshot.stats();
    assert_eq!(stats.devices.len(), 1, "{name}: one device");
    let d = &stats.devices[0];
    assert_eq!(d.segments as u64, oracle["n_segments"].as_u64().expect("n_segments"), "{name}: segments");
    assert_eq!(d.trace_entries as u64, oracle["n_trace"].as_u64().expect("n_trace"), "{name}: trace entries");
    assert_eq!(d.reserved_bytes, stat("reserved_bytes.all.current"), "{name}: reserved");
    assert_eq!(d.allocated_bytes, stat("allocated_bytes.all.current"), "{name}: allocated");
    assert_eq!(d.active_bytes, stat("active_bytes.all.current"), "{name}: active");
    assert_eq!(d.requested_bytes, stat("requested_bytes.all.current"), "{name}: requested");
    assert_eq!(d.inactive_split_bytes, stat("inactive_split_bytes.all.current"), "{name}: inactive split");
    assert_eq!(d.ooms as u64, stat("num_ooms"), "{name}: ooms");
    assert_eq!(
        (d.segments - d.expandable_segments) as u64,
        stat("segment.all.current"),
        "{name}: PyTorch counts the segments that are not expandable"
    );
    match (d.trace_entries, d.trace_wrapped) {
        (0, _) => {
            assert_eq!(d.reserved_peak_bytes, None, "{name}: no trace, no peak");
            assert_eq!(d.requested_peak_bytes, None, "{name}: no trace, no peak");
        }
        (_, false) => {
            assert_eq!(d.reserved_peak_bytes, Some(stat("reserved_bytes.all.peak")), "{name}: reserved peak");
            assert_eq!(d.requested_peak_bytes, Some(stat("requested_bytes.all.peak")), "{name}: requested peak");
            assert!(!d.peak_is_window_only);
        }
        (_, true) => {
            // Only the window's peak is known; it cannot exceed the true one.
            assert!(d.peak_is_window_only);
            assert!(d.reserved_peak_bytes.expect("peak") <= stat("reserved_bytes.all.peak"));
            assert!(d.requested_peak_bytes.expect("peak") <= stat("requested_bytes.all.peak"));
        }
    }
    // The per-segment figures PyTorch wrote agree with the blocks.
    for seg in &snapshot.devices[0].segments {
        let allocated: u64 = seg.blocks.iter().filter(|b| b.state == BlockState::ActiveAllocated).map(|b| b.size).sum();
        assert_eq!(seg.allocated_size, allocated, "{name}: segment at {:#x}", seg.address);
        let tiled: u64 = seg.blocks.iter().map(|b| b.size).sum();
        assert_eq!(seg.total_size, tiled, "{name}: blocks tile the segment at {:#x}", seg.address);
    }
}

#[test]
fn small_corpus_matches_pytorch_counters() {
    for name in ["compiled", "mlp_train_all", "oom_leak", "ring_overflow", "state_only", "streams"] {
        check(&common::fixture_corpus(), name);
    }
}

/// The CUDA graph runs of `tests/gpu/graph_pools_job.py`: private pools'
/// segments and blocks count in PyTorch's figures like the default pool's.
#[test]
fn graph_runs_match_pytorch_counters() {
    for name in ["graph_manual", "graph_compiled", "graph_shared_pool", "graph_release"] {
        check(&common::fixture_corpus(), name);
    }
}

#[test]
fn large_corpus_matches_pytorch_counters() {
    let dir = common::large_corpus();
    for name in ["gpt_long", "gpt_varlen", "gpt_varlen_expandable"] {
        check(&dir, name);
    }
}

#[test]
fn ring_overflow_is_marked_wrapped_and_its_ghosts_found() {
    let snapshot = common::read(&common::fixture_corpus().join("ring_overflow.pickle"));
    let stats = snapshot.stats();
    assert!(stats.devices[0].trace_wrapped);
    let index = SnapshotIntervals::build(&snapshot);
    let device = &index.devices[0];
    // The window opens on an alloc, so every freed allocation has its start;
    // the segments cudaMalloc'd before the window are the ghosts here.
    assert!(device.segments.iter().any(|s| s.start_row.is_none()), "segments from before the window");
    let alive: u64 = device.allocations.iter().filter(|a| a.alive_at_end()).map(|a| a.size).sum();
    assert_eq!(alive, stats.devices[0].requested_bytes);
}

#[test]
fn unwrapped_traces_have_no_ghosts_and_end_in_the_final_state() {
    for name in ["mlp_train_all", "oom_leak", "streams", "compiled", "graph_manual", "graph_release"] {
        let snapshot = common::read(&common::fixture_corpus().join(format!("{name}.pickle")));
        let index = SnapshotIntervals::build(&snapshot);
        let device = &index.devices[0];
        assert_eq!(device.ghosts().count(), 0, "{name}");
        let alive: u64 = device.allocations.iter().filter(|a| a.alive_at_end()).map(|a| a.size).sum();
        assert_eq!(alive, snapshot.stats().devices[0].requested_bytes, "{name}: live requested bytes");
        let reserved: u64 = device.segments.iter().filter(|s| s.end_row.is_none()).map(|s| s.size).sum();
        assert_eq!(reserved, snapshot.stats().devices[0].reserved_bytes, "{name}: live segments");
    }
}

#[test]
fn streams_keeps_pending_frees_apart() {
    let snapshot = common::read(&common::fixture_corpus().join("streams.pickle"));
    let index = SnapshotIntervals::build(&snapshot);
    let pending = index.devices[0]
        .allocations
        .iter()
        .filter(|a| a.free_requested_row.is_some() && a.free_completed_row.is_none())
        .count();
    let blocks = snapshot.devices[0]
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == BlockState::ActivePendingFree)
        .count();
    assert_eq!(pending, blocks, "one pending allocation per active_pending_free block");
    assert!(pending > 0);
    assert!(snapshot.devices[0].trace.streams().len() >= 2, "the side stream is seen");
}

#[test]
fn oom_entry_carries_device_free() {
    let snapshot = common::read(&common::fixture_corpus().join("oom_leak.pickle"));
    let trace = &snapshot.devices[0].trace;
    let row = (0..trace.len()).find(|&i| trace.action(i) == Action::Oom).expect("an oom entry");
    assert!(row + 3 >= trace.len(), "the oom is among the last entries");
    assert!(trace.device_free(row as u32).expect("device_free") > 0);
    // PyTorch's message says "Tried to allocate 292.00 MiB": the request,
    // rounded up to the allocator's 2 MiB granularity.
    assert_eq!(trace.sizes()[row].div_ceil(2 << 20) * (2 << 20), 292 << 20);
    assert!(!snapshot.annotations.is_empty(), "record_function annotations are read");
}

#[test]
fn frames_and_stacks_are_interned() {
    let dir = common::large_corpus();
    let snapshot = common::read(&dir.join("gpt_long.pickle"));
    let trace = &snapshot.devices[0].trace;
    assert_eq!(trace.len(), 255_577);
    // A quarter-million entries share a few hundred frames.
    assert!(snapshot.frames.frame_count() < 1_000, "{} frames", snapshot.frames.frame_count());
    assert!(snapshot.frames.stack_count() < 10_000, "{} stacks", snapshot.frames.stack_count());
    // Allocations made by autograd's C++ thread carry no Python frames.
    let without = trace.stacks().iter().filter(|&&s| s == EMPTY_STACK).count();
    assert_eq!(without, 48_911 + 53_710 * 2 + 10, "entries without frames, as Python's pickle reads them");
    let first = snapshot.frames.stack(trace.stacks()[0]);
    let frame = snapshot.frames.frame(first[0]).expect("frame");
    assert!(snapshot.strings.get(frame.filename).ends_with(".py"));
}

#[test]
fn expandable_segments_are_read_as_such() {
    let snapshot = common::read(&common::large_corpus().join("gpt_varlen_expandable.pickle"));
    let device = &snapshot.devices[0];
    assert!(device.segments.iter().all(|s| s.is_expandable));
    assert!(snapshot.allocator_settings.as_ref().expect("settings").expandable_segments);
    assert!(device.trace.count(Action::SegmentMap) > 0);
}

/// The trace entry fast path (entries decoded straight from the opcodes)
/// against the machine's generic path (a dict per entry, then converted),
/// and a file read in place (`read_snapshot_bytes`) against the same file
/// streamed (`read_snapshot` over a reader), on every real and synthetic
/// file: the same model to the last string id, frame, stack and warning,
/// or the same error.
#[test]
fn the_entry_fast_path_reads_every_file_exactly_as_the_generic_path() {
    use vramscope_shared::ReadOptions;
    use vramscope_shared::testing::{SliceFeed, fixture_corpus, large_corpus, read_snapshot_generic};
    let mut files = Vec::new();
    for dir in [fixture_corpus(), large_corpus(), common::synthetic_dir()] {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("directory entry").path();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if name.contains(".pickle") && !name.ends_with(".json") {
                files.push(path);
            }
        }
    }
    assert!(files.len() > 20, "only {} files found", files.len());
    let options = ReadOptions::default();
    for path in files {
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let fast = vramscope_shared::read_snapshot_bytes(&bytes, &options).map(|s| format!("{s:?}"));
        let generic = read_snapshot_generic(bytes.as_slice(), &options).map(|s| format!("{s:?}"));
        let streamed =
            vramscope_shared::read_snapshot(std::io::BufReader::with_capacity(4096, bytes.as_slice()), &options)
                .map(|s| format!("{s:?}"));
        // Chunks of uneven sizes, some shorter than a value, some longer
        // than the headroom: the CLI's read-ahead hands a file over so.
        let feed = SliceFeed::new(bytes.clone(), &[1, 4095, 5000, 65536, 3, 1 << 20]);
        let chunked = vramscope_shared::read_snapshot_chunks(feed, &options).map(|s| format!("{s:?}"));
        match (&fast, chunked) {
            (Ok(f), Ok(c)) => {
                assert!(*f == c, "{}: the model read in chunks differs from the one read in place", path.display())
            }
            (Err(f), Err(c)) => assert_eq!(f.to_string(), c.to_string(), "{}", path.display()),
            (f, c) => panic!("{}: in place {:?} against in chunks {:?}", path.display(), f.as_ref().err(), c.err()),
        }
        match (&fast, streamed) {
            (Ok(f), Ok(s)) => {
                assert!(*f == s, "{}: the model read in place differs from the streamed one", path.display())
            }
            (Err(f), Err(s)) => assert_eq!(f.to_string(), s.to_string(), "{}", path.display()),
            (f, s) => panic!("{}: in place {:?} against streamed {:?}", path.display(), f.as_ref().err(), s.err()),
        }
        match (fast, generic) {
            (Ok(f), Ok(g)) => assert!(f == g, "{}: the fast path's model differs", path.display()),
            (Err(f), Err(g)) => assert_eq!(f.to_string(), g.to_string(), "{}", path.display()),
            (f, g) => panic!("{}: fast {:?} against generic {:?}", path.display(), f.err(), g.err()),
        }
    }
}

/// A file read in place reports how far it has read (for the CLI's progress
/// and its release of pages already read), in order, up to its end; stops
/// at once when cancelled; and fails on a truncated copy at the same byte,
/// with the same message, as the same bytes streamed.
#[test]
fn a_file_read_in_place_reports_progress_stops_when_cancelled_and_fails_where_streamed() {
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use vramscope_shared::{ReadError, ReadOptions, read_snapshot, read_snapshot_bytes, read_snapshot_bytes_with};
    let path = vramscope_shared::testing::fixture_corpus().join("ring_overflow.pickle");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(bytes.len() > 3 * (256 << 10), "{} is too small to cross a step", path.display());

    let mut offsets = Vec::new();
    read_snapshot_bytes_with(&bytes, &ReadOptions::default(), |at| offsets.push(at)).expect("reads");
    assert!(offsets.len() >= bytes.len() / (256 << 10), "{} reports for {} bytes", offsets.len(), bytes.len());
    assert!(offsets.windows(2).all(|w| w[0] <= w[1]), "offsets go back: {offsets:?}");
    assert!(offsets.last().is_some_and(|&l| l as usize <= bytes.len() && l as usize + (256 << 10) >= bytes.len()));

    let cancelled = ReadOptions { cancel: Some(Arc::new(AtomicBool::new(true))), ..ReadOptions::default() };
    match read_snapshot_bytes(&bytes, &cancelled) {
        Err(ReadError::Cancelled { offset }) => assert_eq!(offset, 0),
        other => panic!("a cancelled read gave {:?}", other.map(|_| ())),
    }

    for cut in [1, 100, bytes.len() / 3, bytes.len() - 1] {
        let part = &bytes[..cut];
        let in_place = read_snapshot_bytes(part, &ReadOptions::default()).map(|_| ()).expect_err("truncated");
        let streamed = read_snapshot(part, &ReadOptions::default()).map(|_| ()).expect_err("truncated");
        assert_eq!(in_place.to_string(), streamed.to_string(), "cut at {cut}");
        assert_eq!(in_place.kind(), streamed.kind(), "cut at {cut}");
        let feed = vramscope_shared::testing::SliceFeed::new(part.to_vec(), &[4097, 1, 65536]);
        let chunked = vramscope_shared::read_snapshot_chunks(feed, &ReadOptions::default()).map(|_| ());
        let chunked = chunked.expect_err("truncated");
        assert_eq!(chunked.to_string(), streamed.to_string(), "cut at {cut}, in chunks");
    }
}
