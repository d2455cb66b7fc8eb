//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

pub mod server;

use std::path::Path;

#[path = "../../shared/tests/common/mod.rs"]
mod corpus;
pub use corpus::*;

/// Start `vramscope serve` on a free loopback port over `data_dir`, with
/// extra arguments and environment; returns the process and its URL, read
/// from the server's first line (`vramscope listening on http://ADDR`).
pub fn spawn_server(data_dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .args(args)
        .envs(env.iter().copied())
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("spawn vramscope serve");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    std::io::BufReader::new(stdout).read_line(&mut line).expect("read the listening line");
    let url = line
        .trim()
        .strip_prefix("vramscope listening on ")
        .unwrap_or_else(|| panic!("unexpected first line from the server: {line:?}"))
        .to_owned();
    (child, url)
}
