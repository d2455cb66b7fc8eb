//! vramscope's browser side: the dashboard (a leptos app, compiled to
//! WebAssembly and embedded in the server binary) and the snapshot reader
//! exposed to JavaScript, so a page can summarise a local file without
//! uploading it.
//!
//! The crate is split so that most of it is tested natively by
//! `cargo test --workspace`: the API's JSON shapes ([`model`]), the figures
//! shown ([`format`]), the visible window and its zoom and pan
//! ([`viewport`]), where allocations sit on the plot and which one the mouse
//! is over ([`layout`]), stack frames grouped for display ([`frames`]) and
//! the drawing itself, which is generic over plotters' backends ([`plot`]).
//! Only the components, the HTTP calls and the canvas need a browser; they
//! live in the `wasm32`-only modules: the pages (`app`, `library`,
//! `snapshot`, `job`, `live`, `review`, the `analysis/` panels), the
//! explorer of one device (`explorer` with `timeline`, `segments`, `state`,
//! `fragmentation`, `search`, `track`, `minimap`), and the transports
//! (`api`, the server's; `local`, the worker that answers for a file opened
//! without uploading it).

pub mod core;

// The report command (`server/src/cli/report.rs`) draws its chart with the
// dashboard's own plotting code, under these paths.
pub use crate::core::{layout, plot, viewport};

// The browser's services: HTTP, the local-file worker, canvas, frames.
mod infra;
// leptos's `#[component]` gives each component a `pub` props struct, which
// `unreachable_pub` flags in these crate-private modules.
#[cfg(target_arch = "wasm32")]
#[allow(unreachable_pub)]
mod app;
#[cfg(target_arch = "wasm32")]
#[allow(unreachable_pub)]
mod components;
#[cfg(target_arch = "wasm32")]
#[allow(unreachable_pub)]
mod explorer;
#[allow(unreachable_pub)]
mod pages;

use vramscope_shared::{ReadOptions, read_snapshot_bytes};
use wasm_bindgen::prelude::*;

/// Read a snapshot (plain, gzip or zstd pickle) and return the same JSON
/// object as `vramscope stats --json`, without the `file` field.
#[wasm_bindgen]
pub fn snapshot_stats_json(bytes: &[u8]) -> Result<String, JsError> {
    stats_json(bytes).map_err(|e| JsError::new(&e))
}

/// The platform-independent part of [`snapshot_stats_json`], testable natively.
pub fn stats_json(bytes: &[u8]) -> Result<String, String> {
    let snapshot = read_snapshot_bytes(bytes, &ReadOptions::with_budget(infra::local::BROWSER_MEMORY_BUDGET))
        .map_err(|e| e.to_string())?;
    serde_json::to_string(&snapshot.stats()).map_err(|e| e.to_string())
}

/// Start the dashboard: mount the leptos app on the page's `<body>`. The
/// page (frontend/index.html) calls it once the module is initialised.
#[cfg(target_arch = "wasm32")]
#[wasm_bindgen]
pub fn run_dashboard() {
    console_error_panic_hook::set_once();
    leptos::mount::mount_to_body(app::App);
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
