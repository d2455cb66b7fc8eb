//! vramscope's browser side: the dashboard (a leptos app, compiled to
//! WebAssembly and embedded in the server binary) and the snapshot reader
//! exposed to JavaScript, so a page can summarise a local file without
//! uploading it.
//!
//! The dashboard is in layers; a module imports only from the layers below
//! its own (a test below checks it):
//!
//! - [`core`]: pure, built and unit-tested natively (`cargo test -p
//!   vramscope-frontend`): the API's JSON (`model/`, shared types
//!   re-exported), the figures shown (`format`), the visible window and its
//!   zoom (`viewport`), where allocations sit on the plot (`layout`), the
//!   timeline's drawing (`plot`) and the one `palette` (these five are the
//!   `vramscope-plot` crate's, which `vramscope report` draws with too), the
//!   analysis charts (`chart`, generic over plotters' backends, with `hidpi`
//!   scaling), the small canvases' drawing through one `Painter` (`paint`,
//!   with a recorder for the tests, and `axes`; `segments_chart`,
//!   `fragmentation`, `track`, `minimap_chart`, `state_chart`,
//!   `pools_chart`, `breakdown_chart`, `host_chart`), the live page's
//!   charts (`live_chart`), the segment and state geometry (`blocks`), the
//!   minimap's brush (`brush`), a canvas panel's width and paint guard (`panel`),
//!   "Will it fit?"'s form and chart (`predict`, `predict_chart`), stack
//!   frames grouped (`frames`), the view in the URL (`permalink`) and
//!   query strings (`url`).
//! - `infra`: the browser's services: the one HTTP client (`api`, with the
//!   token, handing `local-` ids to the worker), "latest request wins"
//!   (`latest`), the Web Worker that answers for a file opened without
//!   uploading it (`local`, whose pure half is built natively too), 2D
//!   canvases (`canvas`: their setup and the browser's `Painter`), redraws coalesced into animation frames
//!   (`redraw`), draw timings (`draws`), timers and dates (`clock`).
//! - `components`: reusable leptos components (the notice bar, stacks).
//! - `explorer`: the views of one device sharing one `DeviceContext`: the
//!   timeline (`timeline/`: fetch, input, details), its minimap and track,
//!   the segment timeline, the allocator state, fragmentation and search.
//! - `pages`: one per route: the library, a snapshot (with the analysis
//!   panels and the review thread), compare, jobs, live, and a report
//!   file's page; their pure parts are built natively, for their tests.
//! - `app`: the shell (top bar, routes).
//!
//! Only `core`, `pages`' pure parts and `infra::local`'s are built natively;
//! everything that needs a browser is `wasm32`-only.

pub mod core;

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
        let bytes = vramscope_shared::testing::corpus_bytes("streams.pickle");
        let json: serde_json::Value = serde_json::from_str(&stats_json(&bytes).expect("reads")).expect("json");
        assert_eq!(json["devices"][0]["trace_entries"], 1727);
        let err = stats_json(b"\x80\x04K*.").expect_err("an int is no snapshot");
        assert!(err.contains("not a PyTorch memory snapshot"), "{err}");
    }

    /// The layers, bottom up: a module names only those below its own
    /// (`app.rs`, the router, stands above them all; test code is no part
    /// of the graph; `tools/layers` reads the use trees and paths).
    const LAYERS: [&str; 6] = ["core", "infra", "components", "explorer", "pages", "app"];

    #[test]
    fn imports_point_down_the_layers_only_and_no_files_or_folders_loop() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let graph = vramscope_layers::graph(&src).expect("the sources parse");
        let arrows = graph.arrows(&src).len();
        assert!(arrows > 100, "only {arrows} references between layers read");
        let wrong = graph.against_order(&src, &LAYERS);
        assert!(wrong.is_empty(), "imports pointing up the layers:\n{}", wrong.join("\n"));
        let loops: Vec<String> = graph.loops().iter().map(ToString::to_string).collect();
        assert!(loops.is_empty(), "files or folders that import each other:\n{}", loops.join("\n"));
        let globs = &graph.globs;
        assert!(globs.is_empty(), "globs hide what a file names; name the items:\n{}", globs.join("\n"));
    }
}
