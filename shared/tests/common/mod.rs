//! Helpers of the suites that read snapshots: where the corpus is, reading
//! a file, the synthetic files. Shared by `shared/tests/` and, through a
//! `#[path]` module, by the server's `tests/common`.
#![allow(dead_code, unreachable_pub, unused_imports)]

use std::path::{Path, PathBuf};

use vramscope_shared::{ReadOptions, Snapshot, read_snapshot};

pub use vramscope_shared::testing::{corpus_bytes, fixture_corpus, fixture_predict, large_corpus, workspace_root};

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

/// Snapshot values written with `serde-pickle`, for suites that build their
/// own files: a string, an integer, a dict with text keys, and a large
/// segment of the current format holding `blocks`.
pub mod pickled {
    use std::collections::BTreeMap;

    use serde_pickle::{HashableValue as K, Value};

    /// A `str`.
    pub fn s(text: &str) -> Value {
        Value::String(text.to_owned())
    }

    /// An `int`.
    pub fn i(v: u64) -> Value {
        Value::I64(v as i64)
    }

    /// A `dict` with text keys.
    pub fn dict(pairs: Vec<(&str, Value)>) -> Value {
        Value::Dict(pairs.into_iter().map(|(k, v)| (K::String(k.to_owned()), v)).collect::<BTreeMap<_, _>>())
    }

    /// A large segment of device 0 at `address`, `total` bytes, on the
    /// default stream and pool (the size fields PyTorch recomputes are 0).
    pub fn large_segment(address: u64, total: u64, blocks: Vec<Value>) -> Value {
        dict(vec![
            ("device", i(0)),
            ("address", i(address)),
            ("total_size", i(total)),
            ("allocated_size", i(0)),
            ("active_size", i(0)),
            ("requested_size", i(0)),
            ("stream", i(0)),
            ("segment_type", s("large")),
            ("segment_pool_id", Value::Tuple(vec![i(0), i(0)])),
            ("is_expandable", Value::Bool(false)),
            ("frames", Value::List(vec![])),
            ("blocks", Value::List(blocks)),
        ])
    }
}
