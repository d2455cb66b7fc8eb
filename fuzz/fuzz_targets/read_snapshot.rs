//! Fuzz the snapshot reader: any bytes must give a snapshot or an error,
//! never a panic, a hang or unbounded memory.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramscope_shared::index::SnapshotIndex;
use vramscope_shared::{ReadOptions, read_snapshot_bytes};

fuzz_target!(|data: &[u8]| {
    // A small budget: the fuzzer's inputs are small, and a claimed length
    // must fail on the budget, not on the fuzzer's own memory limit.
    let options = ReadOptions::with_budget(64 << 20);
    if let Ok(snapshot) = read_snapshot_bytes(data, &options) {
        let _ = snapshot.stats();
        let _ = SnapshotIndex::build(&snapshot);
    }
});
