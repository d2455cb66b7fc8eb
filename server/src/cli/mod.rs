//! Command-line subcommands.

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
pub(crate) mod text;
pub(crate) mod token;
pub(crate) mod upload;

use std::process::ExitCode;

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
