//! Leak ranking, OOM post-mortem and snapshot comparison, on the real corpus
//! (against what PyTorch itself said) and on small snapshots written here
//! with `serde-pickle`, where every figure is known by construction.

mod common;

use std::collections::BTreeMap;

use serde_pickle::{SerOptions, Value};
use vramscope_shared::analysis::diff::{Change, SnapshotDiff};
use vramscope_shared::analysis::layout::{Rewinder, layout_after};
use vramscope_shared::analysis::leaks::{LeakReport, Pattern};
use vramscope_shared::analysis::oom::{Avoidance, Limit, OomCause, SettingVerdict, explain};
use vramscope_shared::analysis::steps::StepSource;
use vramscope_shared::analysis::{FrameText, stack_label};
use vramscope_shared::snapshot::BlockState;
use vramscope_shared::{ReadOptions, Snapshot, read_snapshot_bytes};

use common::pickled::{dict, i, large_segment, s};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// PyTorch's `format_size`, as its OOM message prints sizes.
fn torch_size(n: u64) -> String {
    let n = n as f64;
    if n <= 1024.0 {
        format!("{n} bytes")
    } else if n <= 1048576.0 {
        format!("{:.2} KiB", n / 1024.0)
    } else if n <= 1073741824.0 {
        format!("{:.2} MiB", n / 1048576.0)
    } else {
        format!("{:.2} GiB", n / 1073741824.0)
    }
}

fn has_frame(frames: &[FrameText], filename: &str, line: i64, name: &str) -> bool {
    frames.iter().any(|f| f.filename == filename && f.line == line && f.name == name)
}

// ---- the corpus -------------------------------------------------------------

/// `oom_leak` appends `(loss, out)` to a list every step: `out = m(x)` is
/// `/srv/jobs/train.py:96`, the loss `:97`. The logits from line 96 must
/// rank first, growing in every completed step; parameters and the
/// activations of the step that hit the OOM must not count as growth.
#[test]
fn oom_leak_ranks_the_kept_outputs_first() {
    let snapshot = common::read(&common::fixture_corpus().join("oom_leak.pickle"));
    let report = LeakReport::build(&snapshot, 10);
    let d = &report.devices[0];
    // No numbered steps in this run: the optimizer's own ranges cut it.
    assert_eq!(d.steps.source, StepSource::OptimizerSteps);
    assert_eq!(d.steps.steps.len(), 12, "11 optimizer steps and the step that failed");
    assert_eq!(d.steps.last_step, 11, "the failing step is in progress, not a tail");
    assert_eq!(d.completed_steps, 10);

    let top = &d.candidates[0];
    assert!(has_frame(&top.frames, "/srv/jobs/train.py", 96, "run"), "{:?}", top.frames);
    assert!(top.frames[0].filename.ends_with("torch/nn/modules/linear.py"), "allocated by the model's last Linear");
    assert_eq!(top.pattern, Pattern::Growing);
    assert_eq!(top.steps_with_growth, 10);
    assert_eq!(top.live_count, 12, "one output per step, the failing step's included");
    assert_eq!(top.retained_by_step.iter().filter(|&&b| b > 0).count(), 12);
    assert_eq!(stack_label(&top.frames), "linear.py:134 forward < /srv/jobs/train.py:96 run");

    // The losses: 4 bytes a step, growing too, ranked next.
    let second = &d.candidates[1];
    assert!(has_frame(&second.frames, "/srv/jobs/train.py", 97, "run"));
    assert_eq!(second.pattern, Pattern::Growing);
    assert_eq!(second.growth_bytes_per_step, 4);
    assert_eq!(d.growing_stacks, 2);
    // Everything else alive at the end is the failing step's work in flight
    // or setup.
    for c in &d.candidates[2..] {
        assert!(matches!(c.pattern, Pattern::LastStep | Pattern::Setup), "{c:?}");
    }
    // Live bytes are the requested bytes of every live allocation.
    let alive: u64 = snapshot.devices[0]
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == BlockState::ActiveAllocated)
        .map(|b| b.requested_size)
        .sum();
    assert_eq!(d.live_bytes, alive);
}

#[test]
fn runs_without_a_leak_have_no_growing_stack() {
    let dir = common::large_corpus();
    for name in ["gpt_varlen", "gpt_varlen_expandable"] {
        let snapshot = common::read(&dir.join(format!("{name}.pickle")));
        let d = &LeakReport::build(&snapshot, 5).devices[0];
        assert_eq!(d.steps.source, StepSource::Numbered { prefix: "step".into() }, "{name}");
        assert_eq!(d.steps.steps.len(), 40, "{name}: step0..step39; nothing after the last end");
        assert_eq!(d.growing_stacks, 0, "{name}: {:?}", d.candidates[0]);
        assert_eq!(d.growth_bytes_per_step, 0, "{name}");
        // Optimizer state is created in the first step: steady state.
        assert!(d.candidates.iter().any(
            |c| c.pattern == Pattern::Setup && c.frames.iter().any(|f| f.filename.ends_with("torch/optim/adam.py"))
        ));
    }
    let small = common::read(&common::fixture_corpus().join("mlp_train_all.pickle"));
    let d = &LeakReport::build(&small, 5).devices[0];
    assert_eq!(d.steps.source, StepSource::OptimizerSteps);
    assert!(d.steps.is_tail(d.steps.steps.len() - 1), "zero_grad after the last optimizer step is a tail");
    assert_eq!(d.growing_stacks, 0);
}

/// `streams` keeps every seventh tensor `b` in a list: a leak by design.
#[test]
fn streams_run_keeps_a_list_and_it_shows() {
    let snapshot = common::read(&common::fixture_corpus().join("streams.pickle"));
    let d = &LeakReport::build(&snapshot, 5).devices[0];
    assert_eq!(d.steps.source, StepSource::EvenParts);
    assert_eq!(d.candidates[0].pattern, Pattern::Growing);
    assert_eq!(d.candidates[0].live_count, 43, "300 iterations, every 7th kept");
}

/// PyTorch's message for the OOM: "Tried to allocate 292.00 MiB. GPU 0 has
/// a total capacity of 139.80 GiB of which 136.36 GiB is free. … Of the
/// allocated memory 2.36 GiB is allocated by PyTorch, and 348.89 MiB is
/// reserved by PyTorch but unallocated."
#[test]
fn oom_leak_post_mortem_reproduces_pytorchs_message() {
    let dir = common::fixture_corpus();
    let snapshot = common::read(&dir.join("oom_leak.pickle"));
    let oracle = common::json(&dir.join("oom_leak.stats.json"));
    let message = oracle["oom_message"].as_str().expect("oom_message");
    let reports = explain(&snapshot);
    assert_eq!(reports.len(), 1);
    let r = &reports[0];
    assert_eq!((r.row, r.trace_entries), (6677, 6680));
    assert_eq!(r.request_bytes, 305_920_000);
    assert_eq!(r.segment_request_bytes, 306_184_192);
    let figures = [
        format!("Tried to allocate {}", torch_size(r.segment_request_bytes)),
        format!("of which {} is free", torch_size(r.device_free_bytes.expect("device_free"))),
        format!("{} is allocated by PyTorch", torch_size(r.allocated_bytes)),
        format!("{} is reserved by PyTorch but unallocated", torch_size(r.reserved_unallocated_bytes)),
    ];
    for figure in &figures {
        assert!(message.contains(figure.as_str()), "{figure:?} not in {message:?}");
    }
    assert!(figures[3].starts_with("348.89 MiB"));
    let stat = |key: &str| oracle["memory_stats"][key].as_u64().unwrap_or_else(|| panic!("oracle lacks {key}"));
    // The allocated peak came two entries before the OOM; a 4-byte tensor
    // (a 512-byte block) was freed in between. Nothing was reserved or
    // released after the OOM, and the free blocks then are the free blocks
    // of split segments at the end (the block freed after the OOM had a
    // segment of its own, now wholly free and not split).
    assert_eq!(r.allocated_bytes, oracle["max_memory_allocated"].as_u64().expect("peak") - 512);
    assert_eq!(r.reserved_bytes, stat("reserved_bytes.all.current"));
    assert_eq!(r.free_bytes, stat("inactive_split_bytes.all.current"));
    assert_eq!(r.free_blocks, stat("inactive_split.all.current"));
    assert_eq!(r.reserved_unallocated_bytes, 365_841_408);
    assert!(r.exact, "the two entries after the OOM free a whole segment's block: no guess");
    assert_eq!(r.entries_after, 2);

    // Enough free bytes, no block large enough: fragmentation.
    assert_eq!(r.cause, OomCause::Fragmentation);
    let largest = r.largest_usable_free_block.expect("a free block").size;
    assert!(largest < r.request_bytes && r.usable_free_bytes >= r.request_bytes);
    assert_eq!(largest, 73_662_464);
    // 136 GiB free on the card: the 2% memory fraction stopped it. The
    // allocator had reserved 2.71 GiB before (then released 12 MiB) and
    // failed to reach 2.99 GiB: the cap (2.80 GiB) lies in between.
    assert_eq!(r.limit, Limit::ProcessCap);
    assert_eq!(r.reserved_peak_bytes, oracle["max_memory_reserved"].as_u64().expect("reserved peak"));
    let total = oracle["mem_get_info"][1].as_u64().expect("total") as f64;
    let (lo, hi) = r.capacity_bytes_range;
    assert_eq!((lo, hi), (r.reserved_peak_bytes, r.reserved_bytes + r.segment_request_bytes));
    assert!((lo as f64) <= 0.02 * total && 0.02 * total < hi as f64);
    assert!(message.contains(&format!("{} allowed", torch_size((0.02 * total) as u64))));
    assert_eq!((r.released_segments, r.released_bytes), (6, 12 * MIB), "the retry emptied six small segments");

    // The largest live stack at the OOM: the kept outputs.
    assert!(has_frame(&r.top_stacks[0].frames, "/srv/jobs/train.py", 96, "run"));
    assert!(r.candidate_settings().iter().any(|s| s == "expandable_segments:True"));
    assert_eq!(r.avoided_by, None, "not simulated");

    // Verdicts judged on reserved peaks the allocator simulator gives for
    // this trace replayed without a limit.
    let peaks = [("expandable_segments:True", 2_940_207_104), ("max_split_size_mb:128", 3_386_900_480)];
    let mut filled = reports.clone();
    filled[0].avoided_by =
        Some(peaks.iter().map(|&(setting, peak)| SettingVerdict::judge(&filled[0], setting, peak)).collect());
    let verdicts = filled[0].avoided_by.as_ref().expect("filled");
    assert_eq!(verdicts[0].avoids, Avoidance::IfCapacityAtLeast { bytes: 2_940_207_104 });
    assert_eq!(verdicts[1].avoids, Avoidance::No);
    assert_eq!(filled[0].avoiding_settings(), Some(vec!["expandable_segments:True"]));
}

#[test]
fn snapshots_without_an_oom_have_nothing_to_explain() {
    for name in ["mlp_train_all", "state_only", "ring_overflow"] {
        let snapshot = common::read(&common::fixture_corpus().join(format!("{name}.pickle")));
        assert!(explain(&snapshot).is_empty(), "{name}");
    }
}

/// Rewinding the final layout over a whole trace that starts from an empty
/// allocator must end empty, with every entry fitting the layout.
#[test]
fn rewinding_a_whole_trace_empties_the_allocator() {
    let small = common::fixture_corpus();
    let large = common::large_corpus();
    let files = [
        small.join("mlp_train_all.pickle"),
        small.join("oom_leak.pickle"),
        small.join("streams.pickle"),
        small.join("compiled.pickle"),
        large.join("gpt_varlen.pickle"),
        large.join("gpt_varlen_expandable.pickle"),
    ];
    for path in &files {
        let snapshot = common::read(path);
        let device = &snapshot.devices[0];
        let layout = layout_after(&snapshot, device, None);
        assert_eq!(layout.mismatches, 0, "{}", path.display());
        assert_eq!(layout.reserved(), 0, "{}", path.display());
        assert_eq!(layout.undone as usize, device.trace.len());
        // Halfway, the reserved bytes agree with the segment events replayed forwards.
        let half = device.trace.len() / 2;
        let mut reserved: i128 = 0;
        for i in 0..=half {
            let size = device.trace.sizes()[i] as i128;
            match device.trace.action(i).name() {
                "segment_alloc" | "segment_map" => reserved += size,
                "segment_free" | "segment_unmap" => reserved -= size,
                _ => {}
            }
        }
        let mut rewinder = Rewinder::new(&snapshot, device);
        let mid = rewinder.rewind_to(Some(half as u32));
        assert_eq!(mid.reserved() as i128, reserved, "{}", path.display());
        assert_eq!(mid.mismatches, 0);
        // Blocks tile their segments wherever no gap was unmapped.
        for seg in mid.segments.iter().filter(|s| !s.expandable) {
            let mut at = seg.address;
            for b in &seg.blocks {
                assert_eq!(b.address, at, "{}: blocks tile segment {:#x}", path.display(), seg.address);
                at += b.size;
            }
        }
    }
    // A wrapped trace rewinds to the state at its first entry, not to zero.
    let snapshot = common::read(&small.join("ring_overflow.pickle"));
    let layout = layout_after(&snapshot, &snapshot.devices[0], None);
    assert_eq!(layout.mismatches, 0);
    assert!(layout.reserved() > 0);
}

/// Block sizes depend on the allocator's rounding and splitting, which the
/// trace does not record; the rewound layouts recover them: their highest
/// allocated bytes are PyTorch's `allocated_bytes.all.peak`, to the byte.
#[test]
fn rewound_layouts_reach_pytorchs_allocated_peak() {
    let small = common::fixture_corpus();
    let large = common::large_corpus();
    let files = [
        (&small, "mlp_train_all"),
        (&small, "oom_leak"),
        (&small, "streams"),
        (&small, "compiled"),
        (&large, "gpt_varlen"),
        (&large, "gpt_varlen_expandable"),
    ];
    for (dir, name) in files {
        let snapshot = common::read(&dir.join(format!("{name}.pickle")));
        let oracle = common::json(&dir.join(format!("{name}.stats.json")));
        let device = &snapshot.devices[0];
        let mut rewinder = Rewinder::new(&snapshot, device);
        let mut peak = 0;
        for row in (0..device.trace.len() as u32).rev() {
            let layout = rewinder.rewind_to(Some(row));
            assert!(layout.exact, "{name}: row {row}");
            peak = peak.max(layout.bytes(BlockState::ActiveAllocated));
        }
        assert_eq!(peak, oracle["memory_stats"]["allocated_bytes.all.peak"].as_u64().expect("peak"), "{name}");
    }
}

#[test]
fn same_workload_under_two_allocators_differs_only_in_the_allocator() {
    let dir = common::large_corpus();
    let a = common::read(&dir.join("gpt_varlen.pickle"));
    let b = common::read(&dir.join("gpt_varlen_expandable.pickle"));
    let diff = SnapshotDiff::build(&a, &b, 20);
    let d = &diff.devices[0];
    assert_eq!(d.changed_stacks, 0, "the program holds the same tensors: {:?}", d.stacks.first());
    assert_eq!(d.unchanged_stacks, 10);
    let (sa, sb) = (d.stats_a.as_ref().expect("a"), d.stats_b.as_ref().expect("b"));
    assert_eq!(sa.requested_bytes, sb.requested_bytes);
    assert_eq!(sa.requested_peak_bytes, sb.requested_peak_bytes);
    assert_eq!((sa.reserved_peak_bytes, sb.reserved_peak_bytes), (Some(4232052736), Some(3443523584)));
    assert!(!diff.is_empty(), "the figures differ");
}

#[test]
fn a_snapshot_compared_with_itself_has_an_empty_diff() {
    let path = common::fixture_corpus().join("mlp_train_all.pickle");
    let (a, b) = (common::read(&path), common::read(&path));
    let diff = SnapshotDiff::build(&a, &b, 20);
    assert!(diff.is_empty());
    assert_eq!(diff.devices[0].changed_stacks, 0);
    assert_eq!(diff.devices[0].unchanged_bytes, diff.devices[0].stats_a.as_ref().expect("a").requested_bytes);
}

// ---- snapshots written here ---------------------------------------------------

/// A stack, innermost frame first: `(file, line, function)`.
type Stack = &'static [(&'static str, u64, &'static str)];

fn frames(stack: Stack) -> Value {
    Value::List(stack.iter().map(|&(f, l, n)| dict(vec![("filename", s(f)), ("line", i(l)), ("name", s(n))])).collect())
}

/// A one-device snapshot built event by event: one large segment at
/// `BASE`, allocations placed by a bump pointer (never reused), so the
/// final blocks follow from the events.
#[derive(Default)]
struct Writer {
    trace: Vec<Value>,
    annotations: Vec<Value>,
    /// Live blocks: address → (size, stack).
    live: BTreeMap<u64, (u64, Stack)>,
    /// Final blocks of the segment written without a trace (diff inputs).
    extra_blocks: Vec<(u64, &'static str, Stack)>,
    next: u64,
    time: u64,
}

const BASE: u64 = 0x7f00_0000_0000;
const SEGMENT: u64 = 1 << 30;
const T0: u64 = 1_796_216_288_000_000;

impl Writer {
    fn tick(&mut self) -> u64 {
        self.time += 10;
        T0 + self.time
    }
    fn entry(&mut self, action: &str, addr: u64, size: u64, stack: Stack) {
        let t = self.tick();
        self.trace.push(dict(vec![
            ("action", s(action)),
            ("addr", i(addr)),
            ("size", i(size)),
            ("stream", i(0)),
            ("time_us", i(t)),
            ("frames", frames(stack)),
        ]));
    }
    fn start(&mut self) {
        self.entry("segment_alloc", BASE, SEGMENT, &[]);
    }
    fn alloc(&mut self, size: u64, stack: Stack) -> u64 {
        let addr = BASE + self.next;
        self.next += size.div_ceil(512) * 512;
        self.entry("alloc", addr, size, stack);
        self.live.insert(addr, (size, stack));
        addr
    }
    fn free(&mut self, addr: u64) {
        let (size, stack) = self.live.remove(&addr).expect("live");
        self.entry("free_requested", addr, size, stack);
        self.entry("free_completed", addr, size, stack);
    }
    fn annotate(&mut self, stage: &str, name: &str) {
        let t = self.tick();
        self.annotations.push(dict(vec![("device", i(0)), ("stage", s(stage)), ("name", s(name)), ("time_us", i(t))]));
    }
    /// The snapshot: the segment tiled by live blocks and free gaps.
    fn finish(self) -> Snapshot {
        let mut blocks = Vec::new();
        let mut at = BASE;
        let mut block = |addr: u64, size: u64, requested: u64, state: &str, stack: Stack| {
            blocks.push(dict(vec![
                ("address", i(addr)),
                ("size", i(size)),
                ("requested_size", i(requested)),
                ("state", s(state)),
                ("frames", frames(stack)),
            ]));
        };
        let mut finals: Vec<(u64, u64, u64, &str, Stack)> = self
            .live
            .iter()
            .map(|(&a, &(size, stack))| (a, size.div_ceil(512) * 512, size, "active_allocated", stack))
            .collect();
        let mut extra_at = BASE + SEGMENT / 2;
        for &(size, state, stack) in &self.extra_blocks {
            finals.push((extra_at, size, size, state, stack));
            extra_at += size;
        }
        finals.sort_by_key(|f| f.0);
        for (addr, size, requested, state, stack) in finals {
            if addr > at {
                block(at, addr - at, 0, "inactive", &[]);
            }
            block(addr, size, requested, state, stack);
            at = addr + size;
        }
        if at < BASE + SEGMENT {
            block(at, BASE + SEGMENT - at, 0, "inactive", &[]);
        }
        let segment = large_segment(BASE, SEGMENT, blocks);
        let value = dict(vec![
            ("segments", Value::List(vec![segment])),
            ("device_traces", Value::List(vec![Value::List(self.trace)])),
            (
                "allocator_settings",
                dict(vec![("expandable_segments", Value::Bool(false)), ("max_split_size", Value::I64(-1))]),
            ),
            ("external_annotations", Value::List(self.annotations)),
        ]);
        let bytes = serde_pickle::value_to_vec(&value, SerOptions::new()).expect("serde-pickle writes");
        read_snapshot_bytes(&bytes, &ReadOptions::default()).expect("we read what serde-pickle writes")
    }
}

const PARAMS: Stack = &[("/srv/lib/torch/nn/modules/linear.py", 50, "__init__"), ("/srv/jobs/t.py", 5, "main")];
const OPT_STATE: Stack = &[("/srv/lib/torch/optim/adam.py", 178, "_init_group"), ("/srv/jobs/t.py", 20, "main")];
const ACTIVATION: Stack = &[("/srv/lib/torch/nn/functional.py", 1700, "relu"), ("/srv/jobs/t.py", 15, "main")];
const KEPT: Stack = &[("/srv/lib/torch/nn/modules/linear.py", 134, "forward"), ("/srv/jobs/t.py", 16, "main")];
const LAST_OUT: Stack = &[("/srv/lib/torch/nn/functional.py", 3504, "cross_entropy"), ("/srv/jobs/t.py", 17, "main")];
const CACHE: Stack = &[("/srv/jobs/t.py", 30, "build_cache")];

/// Eight `step{k}` ranges: parameters before, optimizer state in the first
/// step, a tensor kept every step, a cache built once in step 4, the last
/// step's outputs alive at the end.
fn training_run() -> Snapshot {
    let mut w = Writer::default();
    w.start();
    for _ in 0..4 {
        w.alloc(4 * MIB, PARAMS);
    }
    for k in 0..8 {
        w.annotate("START", &format!("step{k}"));
        let act = w.alloc(8 * MIB, ACTIVATION);
        w.alloc(MIB, KEPT);
        if k == 0 {
            w.alloc(2 * MIB, OPT_STATE);
        }
        if k == 4 {
            w.alloc(16 * MIB, CACHE);
        }
        if k == 7 {
            w.alloc(3 * MIB, LAST_OUT);
        }
        w.free(act);
        w.annotate("END", &format!("step{k}"));
    }
    w.finish()
}

#[test]
fn synthetic_leak_ranks_first_and_setup_is_steady_state() {
    let snapshot = training_run();
    let d = &LeakReport::build(&snapshot, 10).devices[0];
    assert_eq!(d.steps.source, StepSource::Numbered { prefix: "step".into() });
    let names: Vec<&str> = d.steps.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["step0", "step1", "step2", "step3", "step4", "step5", "step6", "step7"]);
    assert_eq!(d.completed_steps, 6, "step1..step6");
    let by_label = |stack: Stack| {
        d.candidates.iter().find(|c| c.frames.first().is_some_and(|f| f.line == stack[0].1 as i64)).expect("listed")
    };
    let kept = &d.candidates[0];
    assert_eq!(kept.frames[1].line, 16, "the kept tensor ranks first");
    assert_eq!((kept.pattern, kept.growth_bytes_per_step, kept.steps_with_growth), (Pattern::Growing, MIB, 6));
    assert_eq!((kept.live_bytes, kept.live_count), (8 * MIB, 8));
    assert_eq!(kept.retained_by_step, vec![MIB; 8]);
    assert_eq!(kept.score, MIB);
    let cache = by_label(CACHE);
    assert_eq!(cache.pattern, Pattern::Sporadic);
    assert_eq!(cache.score, 16 * MIB / 6 / 6, "once in six steps weighs a sixth");
    assert_eq!(d.candidates[1].frames, cache.frames, "the cache ranks second");
    assert_eq!(by_label(PARAMS).pattern, Pattern::Setup);
    assert_eq!(by_label(OPT_STATE).pattern, Pattern::Setup);
    assert_eq!(by_label(LAST_OUT).pattern, Pattern::LastStep);
    assert!(d.candidates.iter().all(|c| c.frames[0].line != ACTIVATION[0].1 as i64), "freed: not live");
    assert_eq!(d.growing_stacks, 1);
    assert_eq!(d.growth_bytes_per_step, MIB + 16 * MIB / 6);
}

impl Writer {
    fn oom(&mut self, size: u64, device_free: u64) {
        let t = self.tick();
        self.trace.push(dict(vec![
            ("action", s("oom")),
            ("device_free", i(device_free)),
            ("size", i(size)),
            ("stream", i(0)),
            ("time_us", i(t)),
            ("frames", frames(LAST_OUT)),
        ]));
    }
}

#[test]
fn synthetic_ooms_from_fragmentation_and_from_exhaustion() {
    // A full 1 GiB segment with two 100 MiB holes: 150 MiB fails for want of
    // a large enough block, 250 MiB for want of bytes. Then the program
    // frees one more block, so the layout at the OOMs must be rewound.
    let mut w = Writer::default();
    w.start();
    let mut holes = Vec::new();
    for _ in 0..4 {
        holes.push(w.alloc(100 * MIB, ACTIVATION));
        w.alloc(100 * MIB, KEPT);
    }
    w.alloc(SEGMENT - 800 * MIB, PARAMS);
    w.free(holes[0]);
    w.free(holes[2]);
    w.oom(150 * MIB, 10 * MIB);
    w.oom(250 * MIB, 10 * GIB);
    w.free(holes[1]);
    let snapshot = w.finish();
    let reports = explain(&snapshot);
    assert_eq!(reports.len(), 2);
    let (frag, full) = (&reports[0], &reports[1]);
    for r in &reports {
        assert!(r.exact, "the freed block lies between allocated ones: its size is certain");
        assert_eq!(r.allocated_bytes, SEGMENT - 200 * MIB);
        assert_eq!((r.free_bytes, r.free_blocks), (200 * MIB, 2));
        assert_eq!(r.largest_usable_free_block.map(|b| b.size), Some(100 * MIB));
        assert_eq!(r.top_stacks[0].bytes, 400 * MIB);
        assert!(has_frame(&r.frames, "/srv/jobs/t.py", 17, "main"), "the failing request's stack");
    }
    assert_eq!((frag.entries_after, full.entries_after), (3, 2));
    assert_eq!(frag.cause, OomCause::Fragmentation);
    assert_eq!(frag.limit, Limit::DeviceMemory);
    assert_eq!(full.cause, OomCause::Exhaustion);
    assert_eq!(full.limit, Limit::ProcessCap);
    assert!(full.candidate_settings().is_empty(), "no setting conjures memory");
}

const GROWS: Stack = &[("/srv/lib/torch/nn/functional.py", 10, "linear"), ("/srv/jobs/t.py", 40, "forward")];
const GOES: Stack = &[("/srv/jobs/t.py", 50, "old_buffer")];
const COMES: Stack = &[("/srv/jobs/t.py", 60, "new_buffer")];
const STAYS: Stack = &[("/srv/lib/torch/optim/adam.py", 178, "_init_group"), ("/srv/jobs/t.py", 70, "step")];
const MOVES_A: Stack = &[("/srv/lib/torch/optim/adam.py", 182, "_init_group"), ("/srv/jobs/t.py", 80, "step")];
const MOVES_B: Stack = &[("/srv/lib/torch/optim/adam.py", 182, "_init_group"), ("/srv/jobs/t.py", 83, "step")];

fn final_state(blocks: Vec<(u64, &'static str, Stack)>) -> Snapshot {
    Writer { extra_blocks: blocks, ..Writer::default() }.finish()
}

#[test]
fn synthetic_pair_grows_vanishes_appears() {
    let a = final_state(vec![
        (MIB, "active_allocated", GROWS),
        (2 * MIB, "active_allocated", GOES),
        (4 * MIB, "active_allocated", STAYS),
        (MIB, "active_allocated", MOVES_A),
        (8 * MIB, "active_pending_free", COMES),
    ]);
    let b = final_state(vec![
        (MIB, "active_allocated", GROWS),
        (MIB, "active_allocated", GROWS),
        (3 * MIB, "active_allocated", COMES),
        (4 * MIB, "active_allocated", STAYS),
        (2 * MIB, "active_allocated", MOVES_B),
        (8 * MIB, "inactive", GOES),
    ]);
    let diff = SnapshotDiff::build(&a, &b, 10);
    let d = &diff.devices[0];
    assert_eq!((d.grew, d.shrank, d.appeared, d.vanished), (2, 0, 1, 1));
    assert_eq!((d.unchanged_stacks, d.unchanged_bytes), (1, 4 * MIB));
    assert_eq!(d.total_delta, (MIB + 3 * MIB + MIB) as i64 - (2 * MIB) as i64);
    let row = |line: i64| d.stacks.iter().find(|r| r.frames.iter().any(|f| f.line == line)).expect("row");
    let grows = row(40);
    assert_eq!((grows.change, grows.bytes_a, grows.bytes_b, grows.count_b), (Change::Grew, MIB, 2 * MIB, 2));
    assert_eq!(row(50).change, Change::Vanished, "pending-free and free blocks are not live");
    assert_eq!((row(60).change, row(60).delta), (Change::Appeared, 3 * MIB as i64));
    let moved = row(80);
    assert_eq!(moved.change, Change::Grew);
    assert_eq!(moved.frames_b.as_ref().map(|f| f[1].line), Some(83), "matched though the program's line moved");
    // Largest change first.
    assert_eq!(d.stacks[0].frames[0].line, 60);
    // And back: every change reverses.
    let back = SnapshotDiff::build(&b, &a, 10);
    let bd = &back.devices[0];
    assert_eq!((bd.grew, bd.shrank, bd.appeared, bd.vanished), (0, 2, 1, 1));
    assert_eq!(bd.total_delta, -d.total_delta);
}
