//! `vramscope leaks FILE [--json] [--top N] [--frames N]`: live allocations
//! grouped by stack, ranked by how steadily they grew over the trace.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use serde::Serialize;
use vramscope_shared::analysis::leaks::{DeviceLeaks, LeakReport, Pattern};

use super::Failure;
use super::input::{MemoryBudget, load};
use super::text::{bytes, finish, write_frames, write_json};

/// Arguments of `vramscope leaks`.
#[derive(Debug, Args)]
pub(crate) struct LeaksArgs {
    /// Snapshot file (pickle from `torch.cuda.memory._dump_snapshot`, plain, gzip or zstd).
    file: PathBuf,
    /// Print one JSON object instead of the human report.
    #[arg(long)]
    json: bool,
    /// Stacks to list per device.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Frames to print per stack (human report).
    #[arg(long, default_value_t = 6)]
    frames: usize,
    #[command(flatten)]
    budget: MemoryBudget,
}

/// The JSON object of `vramscope leaks --json`.
#[derive(Serialize)]
struct LeaksJson<'a> {
    file: String,
    devices: &'a [DeviceLeaks],
}

/// Run the subcommand.
pub(crate) fn run(args: &LeaksArgs) -> Result<(), Failure> {
    let snapshot = load(&args.file, args.budget)?;
    let report = LeakReport::build(&snapshot, args.top);
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        let json = LeaksJson { file: args.file.display().to_string(), devices: &report.devices };
        write_json(&mut out, &json)
    } else {
        write_report(&mut out, &args.file, &report, args.frames)
    };
    finish(written)
}

fn pattern_text(p: Pattern) -> &'static str {
    match p {
        Pattern::Growing => "growing",
        Pattern::Sporadic => "sporadic",
        Pattern::Setup => "setup",
        Pattern::LastStep => "last step",
    }
}

pub(super) fn write_report(
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
