//! The crate's layers, as a test: which top-level module may name which.
//! The order is stated in `lib.rs`'s doc and ARCHITECTURE.md; this keeps
//! it, reading every `use` tree and path with `syn` (`tools/layers`).

use std::path::Path;

/// The layers, bottom up: a module names only those before it. Test code
/// (`#[cfg(test)]`) is no part of the graph: a unit test may use a view.
const LAYERS: &[&str] = &[
    "error",
    "column",
    "index_file",
    "pickle",
    "snapshot",
    "stats",
    "intervals",
    "pools",
    "timeline",
    "simulate",
    "analysis",
    "indexed",
    "predict",
    "views",
    "api",
    "cli_json",
    "testing",
];

#[test]
fn imports_point_down_the_layers_and_no_files_or_folders_loop() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = vramscope_layers::graph(&src).expect("the sources parse");
    let arrows = graph.arrows(&src).len();
    assert!(arrows > 300, "only {arrows} references between modules read");
    let wrong = graph.against_order(&src, LAYERS);
    assert!(wrong.is_empty(), "imports against the layers (see lib.rs):\n{}", wrong.join("\n"));
    let globs = &graph.globs;
    assert!(globs.is_empty(), "globs hide what a file names; name the items:\n{}", globs.join("\n"));
    let loops: Vec<String> = graph.loops().iter().map(ToString::to_string).collect();
    assert!(loops.is_empty(), "files or folders that import each other:\n{}", loops.join("\n"));
}
