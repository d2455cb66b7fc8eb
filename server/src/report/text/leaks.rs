//! The leak ranking as text: `vramscope leaks`' stacks of the allocations
//! alive at the end, likely leaks first, printed by that command and written
//! into a report page.

use std::io::Write;

use vramscope_shared::analysis::leaks::{LeakReport, Pattern};

use super::{bytes, write_frames};

/// A stack's pattern of growth, as the table's last column says it.
fn pattern_text(p: Pattern) -> &'static str {
    match p {
        Pattern::Growing => "growing",
        Pattern::Sporadic => "sporadic",
        Pattern::Setup => "setup",
        Pattern::LastStep => "last step",
    }
}

/// The stacks of allocations alive at the end, likely leaks first.
pub(crate) fn write_leak_report(
    out: &mut impl Write,
    path: &std::path::Path,
    report: &LeakReport,
    depth: usize,
) -> std::io::Result<()> {
    if report.devices.is_empty() {
        writeln!(out, "{}: no device has segments or a trace", path.display())?;
    }
    for d in &report.devices {
        writeln!(
            out,
            "{}, device {}: {} allocations alive at the end ({} requested) from {} stacks",
            path.display(),
            d.device,
            d.live_count,
            bytes(d.live_bytes),
            d.stacks
        )?;
        if d.no_trace {
            writeln!(out, "no trace: nothing is known about when they were allocated")?;
        } else {
            writeln!(
                out,
                "{} steps ({}); {} completed steps in between, retaining {} per step",
                d.steps.steps.len(),
                d.step_source_text(),
                d.completed_steps,
                bytes(d.growth_bytes_per_step)
            )?;
            match d.growing_stacks {
                0 => writeln!(out, "no stack keeps memory step after step")?,
                1 => writeln!(out, "1 stack keeps memory step after step: a likely leak")?,
                n => writeln!(out, "{n} stacks keep memory step after step: likely leaks")?,
            }
        }
        writeln!(out)?;
        writeln!(out, "{:>3}  {:>12}  {:>7}  {:>12}  {:>7}  pattern", "#", "growth/step", "steps", "live", "allocs")?;
        for c in &d.candidates {
            writeln!(
                out,
                "{:>3}  {:>12}  {:>7}  {:>12}  {:>7}  {}",
                c.rank,
                bytes(c.growth_bytes_per_step),
                format!("{}/{}", c.steps_with_growth, d.completed_steps),
                bytes(c.live_bytes),
                c.live_count,
                pattern_text(c.pattern)
            )?;
            write_frames(out, &c.frames, depth, "       ")?;
        }
        if (d.stacks as usize) > d.candidates.len() {
            writeln!(out, "     … {} more stacks (--top)", d.stacks as usize - d.candidates.len())?;
        }
        writeln!(out)?;
    }
    writeln!(
        out,
        "growth/step: bytes still alive at the end allocated per completed step (the first and last steps set aside); \
         ranked by growth/step weighted by the share of steps that retained any"
    )
}
