//! Output shared by the subcommands: sizes for people, one JSON object per
//! run, stacks as readable frames, and stdout closed early (`| head`) not
//! being an error.

use std::io::Write;

use anyhow::Context;
use humansize::{BINARY, format_size};
use serde::Serialize;
use vramscope_shared::analysis::{FrameText, readable_frames, stack_label};

use super::Failure;

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

/// Bytes for people.
pub(crate) fn bytes(n: u64) -> String {
    format_size(n, BINARY)
}

/// Up to `depth` readable frames of a stack, one per line, after `indent`.
pub(crate) fn write_frames(
    out: &mut impl Write,
    frames: &[FrameText],
    depth: usize,
    indent: &str,
) -> std::io::Result<()> {
    let readable = readable_frames(frames);
    if readable.is_empty() || depth == 0 {
        return writeln!(out, "{indent}{}", stack_label(frames));
    }
    for f in readable.iter().take(depth) {
        writeln!(out, "{indent}{}", f.display())?;
    }
    if readable.len() > depth {
        writeln!(out, "{indent}… {} more frames", readable.len() - depth)?;
    }
    Ok(())
}
