//! `vramscope diff`'s report as text: two snapshots' devices side by side
//! (reserved, allocated, requested, their peaks, free memory, segments) and
//! live memory by stack that grew, shrank, appeared or vanished from A to B.

use std::io::Write;
use std::path::Path;

use vramscope_shared::analysis::diff::{Change, SnapshotDiff};
use vramscope_shared::analysis::stack_label;

use super::bytes;

/// A change in bytes with its sign: "+1.50 MiB", "-512 B", "0 B".
fn signed(delta: i64) -> String {
    match delta {
        0 => "0 B".to_owned(),
        d if d > 0 => format!("+{}", bytes(d.unsigned_abs())),
        d => format!("-{}", bytes(d.unsigned_abs())),
    }
}

/// The diff of snapshots `a` and `b`: each pair of devices' figures side by
/// side, then live memory by stack that grew, shrank, appeared or vanished.
pub(crate) fn write_report(out: &mut impl Write, a: &Path, b: &Path, diff: &SnapshotDiff) -> std::io::Result<()> {
    writeln!(out, "A: {}", a.display())?;
    writeln!(out, "B: {}", b.display())?;
    for d in &diff.devices {
        writeln!(out)?;
        let name = |dev: Option<u32>| dev.map_or("(none)".to_owned(), |n| format!("device {n}"));
        writeln!(out, "A {} vs B {}", name(d.device_a), name(d.device_b))?;
        let row = |out: &mut dyn Write, label: &str, x: Option<u64>, y: Option<u64>| -> std::io::Result<()> {
            let cell = |v: Option<u64>| v.map_or("-".to_owned(), bytes);
            let delta = match (x, y) {
                (Some(x), Some(y)) => signed(y as i64 - x as i64),
                _ => String::new(),
            };
            writeln!(out, "  {label:<18} {:>12} {:>12} {:>13}", cell(x), cell(y), delta)
        };
        writeln!(out, "  {:<18} {:>12} {:>12} {:>13}", "", "A", "B", "B - A")?;
        let (sa, sb) = (d.stats_a.as_ref(), d.stats_b.as_ref());
        row(out, "reserved", sa.map(|s| s.reserved_bytes), sb.map(|s| s.reserved_bytes))?;
        row(out, "reserved peak", sa.and_then(|s| s.reserved_peak_bytes), sb.and_then(|s| s.reserved_peak_bytes))?;
        row(out, "allocated", sa.map(|s| s.allocated_bytes), sb.map(|s| s.allocated_bytes))?;
        row(out, "requested", sa.map(|s| s.requested_bytes), sb.map(|s| s.requested_bytes))?;
        row(out, "requested peak", sa.and_then(|s| s.requested_peak_bytes), sb.and_then(|s| s.requested_peak_bytes))?;
        row(
            out,
            "cached, not in use",
            sa.map(|s| s.reserved_unallocated_bytes),
            sb.map(|s| s.reserved_unallocated_bytes),
        )?;
        row(out, "largest free block", sa.map(|s| s.largest_free_block_bytes), sb.map(|s| s.largest_free_block_bytes))?;
        writeln!(
            out,
            "  {:<18} {:>12} {:>12}",
            "segments",
            sa.map_or("-".to_owned(), |s| s.segments.to_string()),
            sb.map_or("-".to_owned(), |s| s.segments.to_string())
        )?;
        if d.changed_stacks == 0 {
            writeln!(
                out,
                "  live memory by stack: no change ({} stacks, {} in both)",
                d.unchanged_stacks,
                bytes(d.unchanged_bytes)
            )?;
            continue;
        }
        writeln!(
            out,
            "  live memory by stack: {} grew, {} shrank, {} appeared, {} vanished, {} unchanged ({}); net {}",
            d.grew,
            d.shrank,
            d.appeared,
            d.vanished,
            d.unchanged_stacks,
            bytes(d.unchanged_bytes),
            signed(d.total_delta)
        )?;
        writeln!(out, "  {:>13} {:>12} {:>12}  {:<9} stack", "B - A", "A", "B", "change")?;
        for s in &d.stacks {
            let change = match s.change {
                Change::Grew => "grew",
                Change::Shrank => "shrank",
                Change::Appeared => "appeared",
                Change::Vanished => "vanished",
            };
            let moved = match &s.frames_b {
                Some(b) => format!(" (in B: {})", stack_label(b)),
                None => String::new(),
            };
            writeln!(
                out,
                "  {:>13} {:>12} {:>12}  {change:<9} {}{moved}",
                signed(s.delta),
                bytes(s.bytes_a),
                bytes(s.bytes_b),
                stack_label(&s.frames)
            )?;
        }
        if (d.changed_stacks as usize) > d.stacks.len() {
            writeln!(out, "  … {} more changed stacks (--top)", d.changed_stacks as usize - d.stacks.len())?;
        }
    }
    writeln!(out)?;
    writeln!(out, "stack bytes: requested bytes of allocations alive at the end, stacks matched by their frames' text")
}
