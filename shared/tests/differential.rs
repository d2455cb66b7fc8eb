//! Differential tests against `serde-pickle`, an independent implementation:
//! it writes random snapshots that we read, and it reads the synthetic files
//! (those it can: it fails on memo-shared containers and on ints >= 2^63).

mod common;

use serde_pickle::{DeOptions, HashableValue as K, SerOptions, Value};
use vramscope_shared::snapshot::{Action, BlockState};
use vramscope_shared::{ReadOptions, read_snapshot_bytes};

use common::pickled::{dict, i, large_segment, s};

/// A small deterministic PRNG (xorshift64*), so failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn frames(rng: &mut Rng) -> Value {
    let depth = rng.below(4) as usize;
    Value::List(
        (0..depth)
            .map(|d| {
                dict(vec![
                    ("filename", s(&format!("/srv/jobs/file{}.py", rng.below(3)))),
                    ("line", i(10 + rng.below(50))),
                    ("name", s(["forward", "backward", "step", "<module>"][d % 4])),
                ])
            })
            .collect(),
    )
}

/// Expected segments: (address, total size, [(block size, state)]).
type ExpectedSegments = Vec<(u64, u64, Vec<(u64, &'static str)>)>;
/// Expected trace rows: (action, address, size).
type ExpectedTrace = Vec<(&'static str, u64, u64)>;

/// A random snapshot in today's format, as serde-pickle values, plus what we
/// expect to read back.
fn random_snapshot(rng: &mut Rng) -> (Value, ExpectedSegments, ExpectedTrace) {
    let mut segments = Vec::new();
    let mut expected_segments = Vec::new();
    let mut addr = 0x7f00_0000_0000u64;
    for _ in 0..1 + rng.below(6) {
        let mut blocks = Vec::new();
        let mut expected_blocks = Vec::new();
        let mut total = 0;
        let mut block_addr = addr;
        for _ in 0..1 + rng.below(5) {
            let size = 512 * (1 + rng.below(4096));
            let state = ["active_allocated", "inactive", "active_pending_free"][rng.below(3) as usize];
            blocks.push(dict(vec![
                ("address", i(block_addr)),
                ("size", i(size)),
                ("requested_size", i(size - rng.below(512))),
                ("state", s(state)),
                ("frames", frames(rng)),
            ]));
            expected_blocks.push((size, state));
            block_addr += size;
            total += size;
        }
        segments.push(large_segment(addr, total, blocks));
        expected_segments.push((addr, total, expected_blocks));
        addr += total + 0x10_0000;
    }
    let mut trace = Vec::new();
    let mut expected_trace = Vec::new();
    let actions = ["alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "snapshot"];
    for k in 0..rng.below(300) {
        let action = actions[rng.below(actions.len() as u64) as usize];
        let (a, size) = (0x7f00_0000_0000 + 512 * rng.below(1 << 20), rng.below(1 << 30));
        trace.push(dict(vec![
            ("action", s(action)),
            ("addr", i(a)),
            ("size", i(size)),
            ("stream", i(0)),
            ("time_us", i(1_796_216_288_159_390 + k)),
            ("frames", frames(rng)),
            ("compile_context", s("N/A")),
            ("user_metadata", s("")),
        ]));
        expected_trace.push((action, a, size));
    }
    let snapshot = dict(vec![
        ("segments", Value::List(segments)),
        ("device_traces", Value::List(vec![Value::List(trace)])),
        (
            "allocator_settings",
            dict(vec![("expandable_segments", Value::Bool(false)), ("max_split_size", Value::I64(-1))]),
        ),
        ("external_annotations", Value::List(vec![])),
    ]);
    (snapshot, expected_segments, expected_trace)
}

#[test]
fn random_snapshots_written_by_serde_pickle_read_back_exactly() {
    let mut rng = Rng(0x5eed);
    for round in 0..200 {
        let (value, segments, trace) = random_snapshot(&mut rng);
        for proto2 in [false, true] {
            let options = if proto2 { SerOptions::new().proto_v2() } else { SerOptions::new() };
            let bytes = serde_pickle::value_to_vec(&value, options).expect("serde-pickle writes");
            let snap = read_snapshot_bytes(&bytes, &ReadOptions::default())
                .unwrap_or_else(|e| panic!("round {round} (proto2={proto2}): {e}"));
            let device = &snap.devices[0];
            assert_eq!(device.segments.len(), segments.len(), "round {round}");
            for (seg, (addr, total, blocks)) in device.segments.iter().zip(&segments) {
                assert_eq!((seg.address, seg.total_size), (*addr, *total), "round {round}");
                for (block, (size, state)) in seg.blocks.iter().zip(blocks) {
                    let ours = match block.state {
                        BlockState::ActiveAllocated => "active_allocated",
                        BlockState::ActivePendingFree => "active_pending_free",
                        BlockState::Inactive => "inactive",
                        BlockState::Unknown => "unknown",
                    };
                    assert_eq!((block.size, ours), (*size, *state), "round {round}");
                }
            }
            assert_eq!(device.trace.len(), trace.len(), "round {round}");
            for (row, (action, addr, size)) in trace.iter().enumerate() {
                assert_eq!(device.trace.action(row).name(), *action);
                assert_eq!(device.trace.addrs()[row], *addr);
                assert_eq!(device.trace.sizes()[row], *size);
            }
        }
    }
}

/// serde-pickle as a second reader of the synthetic files it can handle.
#[test]
fn serde_pickle_agrees_on_the_files_it_can_read() {
    let dir = common::synthetic_dir();
    let manifest = common::json(&dir.join("manifest.json"));
    let mut compared = 0;
    for entry in manifest.as_array().expect("list") {
        let file = entry["file"].as_str().expect("file");
        if !entry["expect_error"].is_null() || entry["compression"] != "none" {
            continue;
        }
        let bytes = std::fs::read(dir.join(file)).expect("read");
        let Ok(theirs) = serde_pickle::value_from_slice(&bytes, DeOptions::new()) else { continue };
        let ours = read_snapshot_bytes(&bytes, &ReadOptions::default()).expect("we read what serde-pickle reads");
        let segments = match &theirs {
            Value::List(l) => l.clone(),
            Value::Dict(d) => match d.get(&K::String("segments".into())) {
                Some(Value::List(l)) => l.clone(),
                _ => panic!("{file}: no segments"),
            },
            _ => panic!("{file}: unexpected root"),
        };
        let total: i64 = segments
            .iter()
            .map(|seg| match seg {
                Value::Dict(d) => match d.get(&K::String("total_size".into())) {
                    Some(Value::I64(n)) => *n,
                    _ => panic!("{file}: total_size"),
                },
                _ => panic!("{file}: segment"),
            })
            .sum();
        let our_total: u64 = ours.devices.iter().flat_map(|d| &d.segments).map(|s| s.total_size).sum();
        let our_segments: usize = ours.devices.iter().map(|d| d.segments.len()).sum();
        assert_eq!((our_segments, our_total), (segments.len(), total as u64), "{file}");
        if let Value::Dict(d) = &theirs
            && let Some(Value::List(traces)) = d.get(&K::String("device_traces".into()))
        {
            for (dev, t) in traces.iter().enumerate() {
                let Value::List(t) = t else { panic!("{file}: trace") };
                let ours_len = ours.device(dev as u32).map_or(0, |d| d.trace.len());
                assert_eq!(ours_len, t.len(), "{file}: device {dev} trace");
            }
        }
        compared += 1;
    }
    // Files with memo-shared containers fail in serde-pickle; the `nomemo`
    // variants (Pickler.fast) are the ones it reads.
    assert!(compared >= 3, "serde-pickle read only {compared} of the synthetic files");
}

#[test]
fn serde_pickle_fails_on_real_snapshots_and_we_do_not() {
    // The reason this crate has its own decoder (see shared/src/pickle/mod.rs).
    let bytes = std::fs::read(common::fixture_corpus().join("streams.pickle")).expect("read");
    assert!(serde_pickle::value_from_slice(&bytes, DeOptions::new()).is_err());
    let ours = read_snapshot_bytes(&bytes, &ReadOptions::default()).expect("we read it");
    assert_eq!(ours.devices[0].trace.count(Action::Alloc), 600);
}
