//! The human text of every analysis, as the CLI prints it (`--json` aside)
//! and as a report page carries its findings: one file per analysis, each
//! writing the answer it is handed. This file holds what they share: sizes
//! for people, counts with their noun, stacks as readable frames.
//!
//! - [`oom`]: `vramscope explain`'s OOM post-mortems (and a report page's).
//! - [`leaks`]: `vramscope leaks`' ranking of live stacks (and a report page's).
//! - [`stats`]: `vramscope stats`' summary of a snapshot.
//! - [`breakdown`]: `vramscope breakdown`'s memory by category and stage.
//! - [`diff`]: `vramscope diff`'s two snapshots side by side.
//! - [`simulate`]: `vramscope simulate`'s replay and `vramscope tune`'s table.
//! - [`predict`]: `vramscope predict`'s sizes, the largest that fits, and the
//!   settings' ranking (`--settings`).
//! - [`check`]: `vramscope check`'s verdict (its JUnit XML is
//!   `report::junit`).

pub(crate) mod breakdown;
pub(crate) mod check;
pub(crate) mod diff;
pub(crate) mod leaks;
pub(crate) mod oom;
pub(crate) mod predict;
pub(crate) mod simulate;
pub(crate) mod stats;

use std::io::Write;

use vramscope_shared::analysis::{FrameText, readable_frames, stack_label};

/// Bytes for people, as every command prints them: the project's one byte
/// formatter, in its command-line style (`6 GiB`, `640.89 MiB`).
pub(crate) use vramscope_plot::format::bytes_text as bytes;

/// `n` and its noun, singular or plural: "1 retry", "2 retries".
pub(crate) fn count(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
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
        writeln!(out, "{indent}… {} more", count((readable.len() - depth) as u64, "frame", "frames"))?;
    }
    Ok(())
}
