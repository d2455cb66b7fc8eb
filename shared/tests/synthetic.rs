//! Synthetic snapshots of every format generation, pickle protocol and
//! compression, plus hostile files, written by `tests/fixtures/synthetic.py`
//! (Python's own pickler) with the expected figures computed in Python.

mod common;

use std::collections::HashSet;

use vramscope_shared::snapshot::{Compression, EMPTY_STACK};
use vramscope_shared::{ReadError, ReadOptions, read_snapshot};

fn open(name: &str) -> std::io::BufReader<std::fs::File> {
    let path = common::synthetic_dir().join(name);
    std::io::BufReader::new(std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

#[test]
fn every_synthetic_file_reads_as_python_says() {
    let dir = common::synthetic_dir();
    let manifest = common::json(&dir.join("manifest.json"));
    let entries = manifest.as_array().expect("manifest is a list");
    assert!(entries.len() >= 40, "the generator wrote {} files", entries.len());
    let mut checked_formats = HashSet::new();
    for entry in entries {
        let file = entry["file"].as_str().expect("file");
        let result = read_snapshot(open(file), &ReadOptions::default());
        if let Some(kind) = entry["expect_error"].as_str() {
            match result {
                Ok(_) => panic!("{file}: read without error, expected {kind}"),
                Err(e) => {
                    assert_eq!(e.kind(), kind, "{file}: {e}");
                    assert!(!e.to_string().is_empty());
                }
            }
            continue;
        }
        let snapshot = result.unwrap_or_else(|e| panic!("{file}: {e}"));
        let expected_format = match entry["format_version"].as_str().expect("format_version") {
            "current" => "2.5",
            other => other,
        };
        assert_eq!(snapshot.format.as_str(), expected_format, "{file}: format");
        checked_formats.insert(expected_format);
        if let Some(p) = entry["protocol"].as_u64() {
            assert_eq!(snapshot.protocol, Some(p as u8), "{file}: protocol");
        }
        let compression = match snapshot.compression {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
        };
        assert_eq!(compression, entry["compression"].as_str().expect("compression"), "{file}");

        let stats = serde_json::to_value(snapshot.stats().devices).expect("serialize");
        let expected = entry["devices"].as_array().expect("devices");
        assert_eq!(stats.as_array().map(Vec::len), Some(expected.len()), "{file}: device count");
        for (ours, theirs) in stats.as_array().into_iter().flatten().zip(expected) {
            for (key, value) in theirs.as_object().expect("device object") {
                assert_eq!(&ours[key], value, "{file}: device {} {key}", theirs["device"]);
            }
        }

        if let Some(n) = entry["distinct_stacks"].as_u64() {
            let mut stacks = HashSet::new();
            for device in &snapshot.devices {
                stacks.extend(device.segments.iter().flat_map(|s| &s.blocks).map(|b| b.stack));
                stacks.extend(device.trace.stacks().iter().copied());
            }
            stacks.remove(&EMPTY_STACK);
            let frames: HashSet<_> = stacks.iter().flat_map(|&s| snapshot.frames.stack(s)).collect();
            assert_eq!(stacks.len() as u64, n, "{file}: distinct stacks");
            assert_eq!(frames.len() as u64, entry["distinct_frames"].as_u64().expect("frames"), "{file}: frames");
        }
    }
    for format in ["1.13", "2.0", "2.1", "2.5"] {
        assert!(checked_formats.contains(format), "no synthetic file of format {format}");
    }
}

#[test]
fn every_protocol_reads_the_same() {
    let reference = read_snapshot(open("current.p4.pickle"), &ReadOptions::default()).expect("p4");
    for file in
        ["current.p2.pickle", "current.p3.pickle", "current.p5.pickle", "current.p4.pickle.gz", "current.p4.pickle.zst"]
    {
        let other = read_snapshot(open(file), &ReadOptions::default()).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(other.stats(), reference.stats(), "{file}");
        for (a, b) in other.devices.iter().zip(&reference.devices) {
            assert_eq!(a.trace.len(), b.trace.len());
            assert_eq!(a.trace.addrs(), b.trace.addrs(), "{file}");
            assert_eq!(a.trace.sizes(), b.trace.sizes(), "{file}");
            assert_eq!(a.trace.times_us(), b.trace.times_us(), "{file}");
        }
    }
}

#[test]
fn unknown_actions_oom_and_pool_ids_are_kept() {
    let snapshot = read_snapshot(open("current.p4.pickle"), &ReadOptions::default()).expect("read");
    let mut others = 0;
    let mut ooms = 0;
    let mut pools = 0;
    for device in &snapshot.devices {
        let t = &device.trace;
        for row in 0..t.len() {
            let r = row as u32;
            match t.action(row) {
                vramscope_shared::snapshot::Action::Other => {
                    let name = t.other_action_name(r).expect("name kept");
                    assert!(!snapshot.strings.get(name).is_empty());
                    others += 1;
                }
                vramscope_shared::snapshot::Action::Oom => {
                    assert!(t.device_free(r).is_some());
                    ooms += 1;
                }
                _ => {}
            }
            pools += t.pool_id(r).is_some() as usize;
        }
    }
    assert!(others > 0, "unknown future actions are kept, not dropped");
    assert!(ooms > 0);
    assert!(pools > 0);
}

#[test]
fn addresses_above_two_to_the_63_are_exact() {
    let snapshot = read_snapshot(open("big_addresses.p4.pickle"), &ReadOptions::default()).expect("read");
    let max = snapshot.devices.iter().flat_map(|d| &d.segments).map(|s| s.address).max().expect("segments");
    assert!(max >= 1 << 63, "largest segment address {max:#x}");
    let trace_max = snapshot.devices.iter().flat_map(|d| d.trace.addrs()).max().copied().unwrap_or(0);
    assert!(trace_max >= 1 << 63);
}

#[test]
fn the_memory_budget_is_enforced() {
    let err = read_snapshot(open("current.p4.pickle"), &ReadOptions::with_budget(64 * 1024))
        .expect_err("64 KiB is too little for this file");
    assert!(matches!(err, ReadError::MemoryBudget { .. }), "{err}");
    assert!(err.to_string().contains("budget"));
}

#[test]
fn a_memo_bomb_in_an_ignored_key_costs_nothing() {
    let started = std::time::Instant::now();
    let snapshot = read_snapshot(open("memo_bomb_unused.pickle"), &ReadOptions::default()).expect("read");
    assert!(!snapshot.devices.is_empty());
    assert!(snapshot.warnings.iter().any(|w| w.contains("junk")), "{:?}", snapshot.warnings);
    // 2^60 clones would never finish; sharing takes microseconds. A generous
    // bound that only a cloning reader could miss (not a performance target).
    assert!(started.elapsed().as_secs() < 30);
}

#[test]
fn the_capture_modules_context_is_read_beside_the_snapshot() {
    let snapshot = read_snapshot(open("captured.p4.pickle"), &ReadOptions::default()).expect("read");
    let capture = snapshot.capture.as_ref().expect("vramscope_capture read");
    assert_eq!(capture.alloc_conf.as_deref(), Some("expandable_segments:True"));
    assert_eq!(capture.alloc_conf_var.as_deref(), Some("PYTORCH_ALLOC_CONF"));
    assert_eq!((capture.backend.as_deref(), capture.pid), (Some("native"), Some(4242)));
    assert_eq!(capture.devices.len(), 2);
    assert_eq!(capture.devices[0].other_processes[0].pid, 99);
    assert!(snapshot.warnings.iter().all(|w| !w.contains("vramscope_capture")), "{:?}", snapshot.warnings);
    // A snapshot taken otherwise has none.
    let plain = read_snapshot(open("current.p4.pickle"), &ReadOptions::default()).expect("read");
    assert!(plain.capture.is_none());
    assert!(plain.stats().devices.iter().all(|d| d.outside_allocator_bytes.is_none()));
}

/// Regression: the capture context is copied into the statistics every
/// server stores and serves; a file with a million processes in it made
/// them as large. (Past a million nodes the whole key is ignored: the
/// reader's bound on free-form values.)
#[test]
fn regression_a_huge_capture_context_is_cut_to_its_limits() {
    use common::pickled::{dict, i, s};
    use serde_pickle::{SerOptions, Value as V};
    let process = |pid: u64| dict(vec![("pid", i(pid))]);
    let device = |d: u64| dict(vec![("device", i(d)), ("other_processes", V::List((0..300).map(process).collect()))]);
    let capture =
        dict(vec![("torch_version", s(&"9".repeat(100_000))), ("devices", V::List((0..200).map(device).collect()))]);
    let root = dict(vec![
        ("segments", V::List(Vec::new())),
        ("device_traces", V::List(Vec::new())),
        ("vramscope_capture", capture),
    ]);
    let bytes = serde_pickle::value_to_vec(&root, SerOptions::new()).expect("pickle");
    let snapshot = vramscope_shared::read_snapshot_bytes(&bytes, &ReadOptions::default()).expect("reads");
    let capture = snapshot.capture.as_ref().expect("capture read");
    assert_eq!(capture.devices.len(), 64);
    assert!(capture.devices.iter().all(|d| d.other_processes.len() == 256));
    assert_eq!(capture.torch_version, None, "a text past any real version is left out");
    assert!(snapshot.warnings.iter().any(|w| w.contains("kept the first 64 devices")), "{:?}", snapshot.warnings);
}

/// Pinned host memory (`host_segments`, `host_traces`; PyTorch 2.14) used
/// to be ignored with an "unknown top-level key" warning. It is read,
/// counted like a device, kept in the persisted index, and has a timeline
/// of its own. (Shaped after PyTorch's source: no real capture yet.)
#[test]
fn regression_pinned_host_memory_is_read_counted_and_kept_in_the_index() {
    let dir = common::synthetic_dir();
    let manifest = common::json(&dir.join("manifest.json"));
    let entry = manifest
        .as_array()
        .expect("list")
        .iter()
        .find(|e| e["file"] == "host_pinned.p4.pickle")
        .expect("the host file is in the manifest");
    let want = |k: &str| entry["host"][k].as_u64().unwrap_or_else(|| panic!("manifest host.{k}"));
    let snapshot = read_snapshot(open("host_pinned.p4.pickle"), &ReadOptions::default()).expect("read");
    assert!(snapshot.warnings.iter().all(|w| !w.contains("host_")), "{:?}", snapshot.warnings);
    let stats = snapshot.stats();
    let host = stats.host.as_ref().expect("host figures");
    assert_eq!(host.segments as u64, want("segments"));
    assert_eq!(host.trace_entries as u64, want("trace_entries"));
    assert_eq!(host.reserved_bytes, want("reserved_bytes"));
    assert_eq!(host.allocated_bytes, want("allocated_bytes"));
    assert_eq!(host.requested_bytes, want("requested_bytes"));
    assert_eq!(host.reserved_peak_bytes, Some(want("reserved_peak_bytes")));
    assert_eq!(host.requested_peak_bytes, Some(want("requested_peak_bytes")));
    // The devices read as before: the host's rows are not a device's.
    let plain = read_snapshot(open("current.p4.pickle"), &ReadOptions::default()).expect("read");
    assert_eq!(stats.devices, plain.stats().devices);
    assert!(plain.host.is_none() && plain.stats().host.is_none());

    // Its own timeline, ending at the final figures and peaking where the
    // trace did.
    let analyzed = vramscope_shared::indexed::IndexedSnapshot::build(snapshot);
    let p = vramscope_shared::views::host::HostParams { px: Some(4000) };
    let view = vramscope_shared::views::host::host(&analyzed, &p).expect("host view");
    assert_eq!(view.rows.len() as u64, want("trace_entries"), "one point per row when px allows");
    assert_eq!(view.reserved.last().copied(), Some(want("reserved_bytes")));
    assert_eq!(view.requested.last().copied(), Some(want("requested_bytes")));
    assert_eq!(view.reserved.iter().max().copied(), Some(want("reserved_peak_bytes")));
    assert_eq!(view.requested.iter().max().copied(), Some(want("requested_peak_bytes")));

    // The persisted index keeps it.
    let bytes = vramscope_shared::indexed::persist::write_index(&analyzed, "ab", Vec::new()).expect("write");
    let reopened = vramscope_shared::indexed::persist::open_index(bytes.into(), "ab").expect("open");
    assert_eq!(reopened.snapshot.stats().host, analyzed.snapshot.stats().host);
    let again = vramscope_shared::views::host::host(&reopened, &p).expect("host view");
    assert_eq!(again, view);
    // And a snapshot without host memory answers 404 for it.
    let none = vramscope_shared::indexed::IndexedSnapshot::build(plain);
    assert!(matches!(
        vramscope_shared::views::host::host(&none, &p),
        Err(vramscope_shared::error::ViewError::NotFound(_))
    ));
}

/// The fast path learns the bytes of an entry's key references and matches
/// later entries against them. A PUT that gives one of those memo slots
/// another key in between must end that trust: the entry after it is read
/// as the generic path reads it (its `stream`, not an `addr`).
#[test]
fn a_key_slot_written_again_is_not_matched_by_the_learned_keys() {
    use vramscope_shared::testing::read_snapshot_generic;
    const PROTO: u8 = 0x80;
    const EMPTY_DICT: u8 = b'}';
    const EMPTY_LIST: u8 = b']';
    const MEMOIZE: u8 = 0x94;
    const MARK: u8 = b'(';
    const SETITEMS: u8 = b'u';
    const APPENDS: u8 = b'e';
    const APPEND: u8 = b'a';
    const BINGET: u8 = b'h';
    const BINPUT: u8 = b'q';
    const BININT1: u8 = b'K';
    const POP: u8 = b'0';
    const STOP: u8 = b'.';
    fn text(out: &mut Vec<u8>, s: &str) {
        out.extend([0x8c, s.len() as u8]);
        out.extend(s.as_bytes());
    }
    let mut p = vec![PROTO, 4, EMPTY_DICT, MEMOIZE, MARK]; // memo 0: the root
    text(&mut p, "segments");
    p.extend([MEMOIZE, EMPTY_LIST, MEMOIZE]); // 1, 2
    text(&mut p, "device_traces");
    p.extend([MEMOIZE, EMPTY_LIST, MEMOIZE, EMPTY_LIST, MEMOIZE, MARK]); // 3, 4, 5
    // Entry 1, keys written out: memo 6 the dict, 7 'action', 8 'alloc', 9 'addr', 10 'size'.
    p.extend([EMPTY_DICT, MEMOIZE, MARK]);
    for (key, value) in [("action", None), ("addr", Some(16u8)), ("size", Some(32))] {
        text(&mut p, key);
        p.push(MEMOIZE);
        match value {
            None => {
                text(&mut p, "alloc");
                p.push(MEMOIZE);
            }
            Some(v) => p.extend([BININT1, v]),
        }
    }
    p.push(SETITEMS);
    // Entry 2 (memo 11): the same keys through the memo; the fast path learns them.
    p.extend([
        EMPTY_DICT, MEMOIZE, MARK, BINGET, 7, BINGET, 8, BINGET, 9, BININT1, 48, BINGET, 10, BININT1, 64, SETITEMS,
    ]);
    // Slot 9 now names 'stream'.
    text(&mut p, "stream");
    p.extend([BINPUT, 9, POP]);
    // Entry 3 (memo 12): the same bytes as entry 2, but slot 9 is 'stream'.
    p.extend([
        EMPTY_DICT, MEMOIZE, MARK, BINGET, 7, BINGET, 8, BINGET, 9, BININT1, 5, BINGET, 10, BININT1, 80, SETITEMS,
    ]);
    p.extend([APPENDS, APPEND, SETITEMS, STOP]);

    let options = ReadOptions::default();
    let fast = vramscope_shared::read_snapshot_bytes(&p, &options).expect("reads");
    let generic = read_snapshot_generic(p.as_slice(), &options).expect("reads");
    assert_eq!(format!("{fast:?}"), format!("{generic:?}"));
    let trace = &fast.devices[0].trace;
    assert_eq!(trace.len(), 3);
    let (second, third) = (trace.entry(1), trace.entry(2));
    assert_eq!((second.addr, second.size), (48, 64));
    // Entry 3: no addr, stream 5.
    assert_eq!((third.addr, third.size), (0, 80));
    assert_eq!(trace.streams()[third.stream as usize], 5);
}
