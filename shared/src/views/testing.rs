//! Corpus files and their oracles for the views' unit tests.

use super::Analyzed;
use crate::{ReadOptions, read_snapshot_bytes};

/// A corpus file (the small ones are copied in `tests/fixtures/corpus`),
/// read and indexed.
pub(crate) fn corpus(name: &str) -> Analyzed {
    let path = format!("{}/../tests/fixtures/corpus/{name}.pickle", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    Analyzed::build(read_snapshot_bytes(&bytes, &ReadOptions::default()).expect("reads"))
}

/// `torch.cuda.memory_stats()` of a corpus file, as `u64`s.
pub(crate) fn oracle(name: &str) -> std::collections::HashMap<String, u64> {
    let path = format!("{}/../tests/fixtures/corpus/{name}.stats.json", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let json: serde_json::Value = serde_json::from_str(&text).expect("json");
    json["memory_stats"]
        .as_object()
        .expect("memory_stats")
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.as_u64()?)))
        .collect()
}
