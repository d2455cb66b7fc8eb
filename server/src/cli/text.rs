//! Output shared by the subcommands: sizes for people and stacks as
//! readable frames (from `report::text`), one JSON object per run, and
//! stdout closed early (`| head`) not being an error.

use std::io::Write;

use anyhow::Context;
use serde::Serialize;

use super::Failure;
pub(crate) use crate::report::text::{bytes, count};

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
