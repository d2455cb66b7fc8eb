//! Helpers of the suites that read snapshots: where the corpus is, reading
//! a file, the synthetic files. Shared by `shared/tests/` and, through a
//! `#[path]` module, by the server's `tests/common`.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};

use vramscope_shared::{ReadOptions, Snapshot, read_snapshot};

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the package has a parent").to_path_buf()
}

/// Small real snapshots copied into the repository (under 1.5 MB each).
pub fn fixture_corpus() -> PathBuf {
    workspace_root().join("tests/fixtures/corpus")
}

/// The full corpus beside the checkout: `$VRAMSCOPE_CORPUS`, default `../shared/corpus`.
/// Panics (fails the test loudly) when it is missing: the large files are
/// part of the test suite, not optional extras.
pub fn large_corpus() -> PathBuf {
    let dir = std::env::var_os("VRAMSCOPE_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("../shared/corpus"));
    assert!(
        dir.join("gpt_long.pickle").is_file(),
        "the snapshot corpus is missing: expected gpt_long.pickle in {} (set VRAMSCOPE_CORPUS to the folder holding \
         the corpus)",
        dir.display()
    );
    dir
}

/// Read a snapshot file with default options.
pub fn read(path: &Path) -> Snapshot {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    read_snapshot(std::io::BufReader::new(file), &ReadOptions::default())
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Parse a JSON file.
pub fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

/// Run `python3 tests/fixtures/synthetic.py` once per test binary and
/// return the folder it wrote.
pub fn synthetic_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("synthetic");
        let script = workspace_root().join("tests/fixtures/synthetic.py");
        let status = std::process::Command::new("python3")
            .arg(&script)
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("python3 is needed to write the synthetic snapshots");
        assert!(status.success(), "{} failed", script.display());
        out
    })
    .clone()
}
