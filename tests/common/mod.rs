//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

pub mod browser;
pub mod server;

#[path = "../../shared/tests/common/mod.rs"]
mod corpus;
pub use corpus::*;

/// `bytes` compressed by the command-line `tool` (`gzip`, `zstd`: `-c -q`,
/// fed from a thread, so a large input cannot fill the pipe while its
/// output waits).
pub fn compress(tool: &str, bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(tool)
        .args(["-c", "-q"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{tool} is needed by the tests: {e}"));
    let mut stdin = child.stdin.take().expect("stdin");
    let data = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&data).expect("write"));
    let out = child.wait_with_output().expect("compressed output");
    writer.join().expect("writer");
    assert!(out.status.success(), "{tool} failed");
    out.stdout
}

/// `bytes` gzipped (an upload as a `.pickle.gz`).
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    compress("gzip", bytes)
}

/// A realistic snapshot of about a million rows (1.1M, 70 MB) made by the
/// benches' generator (`server/benches/gen_large_snapshot.py`, seed 0):
/// more rows than the corpus holds, for what only large traces do (the
/// server's deferred index) and for a parse long enough to watch. Made
/// once and kept under the test binary's scratch space, which later runs
/// reuse.
pub fn million_row_snapshot() -> std::path::PathBuf {
    use std::sync::Mutex;
    static MADE: Mutex<()> = Mutex::new(());
    let _one_at_a_time = MADE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("generated");
    let file = dir.join("large_1100000.pickle");
    if file.is_file() {
        return file;
    }
    std::fs::create_dir_all(&dir).expect("scratch folder");
    let partial = dir.join(format!("large_1100000.pickle.{}", std::process::id()));
    let generator = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/gen_large_snapshot.py");
    let made = std::process::Command::new("python3")
        .arg(&generator)
        .arg(&partial)
        .args(["--entries", "1100000"])
        .output()
        .unwrap_or_else(|e| panic!("python3 runs {}: {e}", generator.display()));
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    std::fs::rename(&partial, &file).expect("the generated snapshot in place");
    file
}
