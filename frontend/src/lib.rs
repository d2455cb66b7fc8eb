//! vramscope's browser side. For now it exposes the snapshot reader to
//! JavaScript, so a page can summarise a local file without uploading it;
//! the leptos dashboard grows here (see ARCHITECTURE.md).

use vramscope_shared::{ReadOptions, read_snapshot_bytes};
use wasm_bindgen::prelude::*;

/// Memory budget for files opened in the browser: a tab has a few GB at most.
const BROWSER_MEMORY_BUDGET: u64 = 2 << 30;

/// Read a snapshot (plain, gzip or zstd pickle) and return the same JSON
/// object as `vramscope stats --json`, without the `file` field.
#[wasm_bindgen]
pub fn snapshot_stats_json(bytes: &[u8]) -> Result<String, JsError> {
    stats_json(bytes).map_err(|e| JsError::new(&e))
}

/// The platform-independent part of [`snapshot_stats_json`], testable natively.
pub fn stats_json(bytes: &[u8]) -> Result<String, String> {
    let snapshot =
        read_snapshot_bytes(bytes, &ReadOptions { memory_budget: BROWSER_MEMORY_BUDGET }).map_err(|e| e.to_string())?;
    serde_json::to_string(&snapshot.stats()).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarises_a_real_snapshot_and_reports_bad_input() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/corpus/streams.pickle");
        let bytes = std::fs::read(path).expect("fixture");
        let json: serde_json::Value = serde_json::from_str(&stats_json(&bytes).expect("reads")).expect("json");
        assert_eq!(json["devices"][0]["trace_entries"], 1727);
        let err = stats_json(b"\x80\x04K*.").expect_err("an int is no snapshot");
        assert!(err.contains("not a PyTorch memory snapshot"), "{err}");
    }
}
