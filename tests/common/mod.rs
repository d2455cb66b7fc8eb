//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

pub mod browser;
pub mod server;

#[path = "../../shared/tests/common/mod.rs"]
mod corpus;
pub use corpus::*;

/// `bytes` gzipped by the system's `gzip` (fed from a thread, so a large
/// input cannot fill the pipe while its output waits): an upload as
/// `torch.cuda.memory._dump_snapshot` users send a `.pickle.gz`.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("gzip").arg("-c").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("gzip");
    let mut stdin = child.stdin.take().expect("stdin");
    let data = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&data).expect("write to gzip"));
    let out = child.wait_with_output().expect("gzip output");
    writer.join().expect("writer");
    assert!(out.status.success(), "gzip failed");
    out.stdout
}
