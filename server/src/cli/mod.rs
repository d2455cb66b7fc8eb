//! Command-line subcommands. Those of an analysis (`stats`, `breakdown`,
//! `explain`, `leaks`, `diff`, `simulate`, `tune`, `predict`, `check`) parse
//! their arguments, read their input, call the analysis and hand its answer
//! to `report::text` (the human text) or to [`write_json`] (`--json`); the
//! others (`serve`, `token`, `upload`, `retention`, `agent`, `mcp`,
//! `report`) print their own operational messages. Output shared by them:
//! one JSON object per run, and stdout closed early (`| head`) not being an
//! error ([`finish`]).

pub(crate) mod agent;
pub(crate) mod breakdown;
pub(crate) mod check;
pub(crate) mod diff;
pub(crate) mod explain;
pub(crate) mod input;
pub(crate) mod leaks;
pub(crate) mod mcp;
pub(crate) mod predict;
pub(crate) mod progress;
pub(crate) mod report;
pub(crate) mod retention;
pub(crate) mod serve;
pub(crate) mod simulate;
pub(crate) mod stats;
pub(crate) mod token;
pub(crate) mod upload;

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;

/// How a subcommand failed, which decides the exit code.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The input was bad (unreadable, not a snapshot, malformed): exit code 2.
    BadInput(anyhow::Error),
    /// Anything else (e.g. writing output failed): exit code 1.
    Other(anyhow::Error),
    /// `vramscope check`: a rule of the budget is broken (the verdict is
    /// already printed): exit code 1.
    CheckFailed(anyhow::Error),
}

impl Failure {
    /// Print one line to stderr and return the exit code.
    pub(crate) fn report(self) -> ExitCode {
        match self {
            Failure::BadInput(e) => {
                eprintln!("vramscope: error: {e:#}");
                ExitCode::from(2)
            }
            Failure::Other(e) => {
                eprintln!("vramscope: error: {e:#}");
                ExitCode::from(1)
            }
            Failure::CheckFailed(e) => {
                eprintln!("vramscope: check failed: {e:#}");
                ExitCode::from(1)
            }
        }
    }
}

/// Map the result of writing to stdout: a closed pipe (`| head`) is not an error.
pub(crate) fn finish(written: std::io::Result<()>) -> Result<(), Failure> {
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to stdout").map_err(Failure::Other),
    }
}

/// One JSON object and a newline.
pub(crate) fn write_json(out: &mut impl Write, value: &impl Serialize) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, value).map_err(std::io::Error::from)?;
    writeln!(out)
}
