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
