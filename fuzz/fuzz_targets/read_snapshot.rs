//! Fuzz the snapshot reader: any bytes must give a snapshot or an error,
//! never a panic, a hang or unbounded memory; and the same one read in
//! place and read in chunks (as the CLI's read-ahead hands a file over).
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramscope_shared::intervals::SnapshotIntervals;
use vramscope_shared::testing::SliceFeed;
use vramscope_shared::{ReadOptions, read_snapshot_bytes, read_snapshot_chunks};

fuzz_target!(|data: &[u8]| {
    // A small budget: the fuzzer's inputs are small, and a claimed length
    // must fail on the budget, not on the fuzzer's own memory limit.
    let options = ReadOptions::with_budget(64 << 20);
    let in_place = read_snapshot_bytes(data, &options);
    // Chunk sizes from the input's length: small ones, so values cross
    // chunk ends, and some past the headroom.
    let sizes = [1 + data.len() % 7, 4097, 3, 1 + data.len() % 5000];
    let chunked = read_snapshot_chunks(SliceFeed::new(data.to_vec(), &sizes), &options);
    match (&in_place, &chunked) {
        (Ok(a), Ok(b)) => assert!(format!("{a:?}") == format!("{b:?}"), "read in chunks, the model differs"),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        (a, b) => panic!("in place {:?}, in chunks {:?}", a.as_ref().err(), b.as_ref().err()),
    }
    if let Ok(snapshot) = in_place {
        let _ = snapshot.stats();
        let _ = SnapshotIntervals::build(&snapshot);
    }
});
