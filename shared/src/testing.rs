//! The corpus for tests, in one place: where the files are, and a file read
//! and indexed by name. Built for this crate's own unit tests and, through
//! the `testing` feature, for the tests of the other crates (it reads
//! files, which the library itself never does).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::indexed::IndexedSnapshot;
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
pub fn corpus(name: &str) -> IndexedSnapshot {
    IndexedSnapshot::build(snapshot(name))
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

/// Bytes handed over as a [`ChunkFeed`](crate::pickle::ChunkFeed) would
/// hand a file: in chunks of the sizes in `sizes` (cycled), each after the
/// headroom, with a count of the chunks out (handed over, not given back).
pub struct SliceFeed {
    bytes: Vec<u8>,
    at: usize,
    sizes: Vec<usize>,
    handed: usize,
    out: usize,
    /// The most chunks out at once.
    pub most_out: usize,
}

impl SliceFeed {
    /// A feed of `bytes` in chunks of `sizes` (cycled; none zero).
    pub fn new(bytes: Vec<u8>, sizes: &[usize]) -> SliceFeed {
        assert!(!sizes.is_empty() && !sizes.contains(&0), "chunk sizes {sizes:?}");
        SliceFeed { bytes, at: 0, sizes: sizes.to_vec(), handed: 0, out: 0, most_out: 0 }
    }
}

impl crate::pickle::ChunkFeed for SliceFeed {
    fn next_chunk(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        if self.at == self.bytes.len() {
            return Ok(None);
        }
        let n = self.sizes[self.handed % self.sizes.len()].min(self.bytes.len() - self.at);
        self.handed += 1;
        self.out += 1;
        self.most_out = self.most_out.max(self.out);
        // The headroom's bytes are garbage the reader must not read.
        let mut chunk = vec![0xEE; crate::pickle::CHUNK_HEADROOM];
        chunk.extend_from_slice(&self.bytes[self.at..self.at + n]);
        self.at += n;
        Ok(Some(chunk))
    }

    fn recycle(&mut self, chunk: Vec<u8>) {
        assert!(chunk.capacity() > 0, "an empty buffer given back");
        self.out -= 1;
    }
}
