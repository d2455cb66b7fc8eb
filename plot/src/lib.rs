//! The timeline's drawing, one crate for its two users: the dashboard
//! (`frontend/`, on a `<canvas>` in wasm32) and `vramscope report`'s SVG
//! and PNG charts (`server/src/report/chart.rs`, natively). Pure: generic
//! over plotters' backends, no browser and no I/O, so both draw the same
//! pixels from the same code, and it is unit-tested natively (`cargo test
//! -p vramscope-plot`) on a recording backend.
//!
//! - [`format`]: the figures shown (sizes, addresses, the x axis' labels);
//! - [`palette`]: the one set of colours;
//! - [`viewport`]: the visible window and its zoom and pan;
//! - [`layout`]: where allocations sit on the plot, and hit-testing;
//! - [`plot`]: the drawing itself, on a page's canvas or framed as an image;
//! - `recorder` (feature `testing`): a backend that records what is drawn.

pub mod format;
pub mod layout;
pub mod palette;
pub mod plot;
#[cfg(any(test, feature = "testing"))]
pub mod recorder;
pub mod viewport;

#[cfg(test)]
mod tests {
    /// Within the crate, no two files name each other (`tools/layers`
    /// reads the use trees and paths; test code is no part of the graph).
    #[test]
    fn no_files_loop() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let graph = vramscope_layers::graph(&src).expect("the sources parse");
        assert!(!graph.arrows(&src).is_empty(), "no references between modules read");
        let loops: Vec<String> = graph.loops().iter().map(ToString::to_string).collect();
        assert!(loops.is_empty(), "files that import each other:\n{}", loops.join("\n"));
        let globs = &graph.globs;
        assert!(globs.is_empty(), "globs hide what a file names; name the items:\n{}", globs.join("\n"));
    }
}
