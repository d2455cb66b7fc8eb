//! Sizes for people and stacks as readable frames: the text of the CLI's
//! reports and of the findings a report page carries.

use std::io::Write;

use humansize::{BINARY, format_size};
use vramscope_shared::analysis::{FrameText, readable_frames, stack_label};

/// Bytes for people.
pub(crate) fn bytes(n: u64) -> String {
    format_size(n, BINARY)
}

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
