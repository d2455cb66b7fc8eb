//! The corpus for tests, in one place: where the files are, and a file read
//! and indexed by name. Built for this crate's own unit tests and, through
//! the `testing` feature, for the tests of the other crates (it reads
//! files, which the library itself never does).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::analyzed::Analyzed;
use crate::{ReadOptions, Snapshot, read_snapshot};

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the package has a parent").to_path_buf()
}

/// Small real snapshots copied into the repository (under 1.5 MB each).
pub fn fixture_corpus() -> PathBuf {
    workspace_root().join("tests/fixtures/corpus")
}

/// The runs recorded on an H200 for `vramscope predict`, with the real runs'
/// outcomes (`truth.json`), from `tests/gpu/predict_job.py`.
pub fn fixture_predict() -> PathBuf {
    workspace_root().join("tests/fixtures/predict")
}

/// The full corpus beside the checkout: `$VRAMSCOPE_CORPUS`, default
/// `../shared/corpus`. Panics (fails the test loudly) when it is missing:
/// the large files are part of the test suite, not optional extras.
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

/// The corpus file `file` (`oom_leak.pickle`): the repository's copy when
/// there is one, else the full corpus's.
pub fn corpus_path(file: &str) -> PathBuf {
    let small = fixture_corpus().join(file);
    if small.is_file() { small } else { large_corpus().join(file) }
}

/// The bytes of the corpus file `file` (`oom_leak.pickle`).
pub fn corpus_bytes(file: &str) -> Vec<u8> {
    let path = corpus_path(file);
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The corpus snapshot `name` (`oom_leak`), read with default options.
pub fn snapshot(name: &str) -> Snapshot {
    let path = corpus_path(&format!("{name}.pickle"));
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    read_snapshot(std::io::BufReader::new(file), &ReadOptions::default())
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The corpus snapshot `name` (`oom_leak`), read and indexed.
pub fn corpus(name: &str) -> Analyzed {
    Analyzed::build(snapshot(name))
}

/// `torch.cuda.memory_stats()` of the corpus snapshot `name`, as `u64`s.
pub fn oracle(name: &str) -> HashMap<String, u64> {
    let path = corpus_path(&format!("{name}.stats.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let json: serde_json::Value = serde_json::from_str(&text).expect("json");
    json["memory_stats"]
        .as_object()
        .expect("memory_stats")
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.as_u64()?)))
        .collect()
}

/// Read a snapshot with the trace entry fast path off: every entry built as
/// a dict by the pickle machine and converted from it, the reference the
/// fast path must match exactly.
pub fn read_snapshot_generic<R: std::io::Read>(input: R, options: &ReadOptions) -> Result<Snapshot, crate::ReadError> {
    crate::snapshot::read::read_with(input, options, true)
}
