//! The OOM post-mortem as text: `vramscope explain`'s report of each OOM
//! (the request, free memory, the cause, the settings that avoid it, the
//! live allocations by stack), printed by that command and written into a
//! report page.

use std::io::Write;

use vramscope_shared::analysis::oom::{Avoidance, Limit, OomCause, OomReport};
use vramscope_shared::analysis::stack_label;

use super::{bytes, write_frames};

/// Every OOM of the trace of `path`, explained; or why there is none.
pub(crate) fn write_oom_report(
    out: &mut impl Write,
    path: &std::path::Path,
    has_trace: bool,
    reports: &[OomReport],
    depth: usize,
) -> std::io::Result<()> {
    if reports.is_empty() {
        return if has_trace {
            writeln!(out, "{}: no OOM in the trace", path.display())
        } else {
            writeln!(out, "{}: no trace recorded, so no OOM entry to explain", path.display())
        };
    }
    for (k, r) in reports.iter().enumerate() {
        if k > 0 {
            writeln!(out)?;
        }
        write_one(out, path, r, depth)?;
    }
    Ok(())
}

fn write_one(out: &mut impl Write, path: &std::path::Path, r: &OomReport, depth: usize) -> std::io::Result<()> {
    let when = r.since_trace_start_us.map_or(String::new(), |us| format!(", {:.3} s into the trace", us as f64 / 1e6));
    writeln!(
        out,
        "{}, device {}: out of memory at trace entry {} of {}{when}",
        path.display(),
        r.device,
        r.row,
        r.trace_entries
    )?;
    let pool = if r.small_pool { "small" } else { "large" };
    writeln!(
        out,
        "  request                {:>12}   ({} B, {pool} pool); the allocator asked CUDA for a {} segment, \
         the figure PyTorch's message gives",
        bytes(r.request_bytes),
        r.request_bytes,
        bytes(r.segment_request_bytes)
    )?;
    if !r.frames.is_empty() {
        writeln!(out, "  requested at           {}", stack_label(&r.frames))?;
    }
    let (known, failed) = r.capacity_bytes_range;
    match (r.device_free_bytes, r.limit) {
        (Some(free), Limit::ProcessCap) => writeln!(
            out,
            "  device free            {:>12}   more than requested: a cap stopped the process \
             (set_per_process_memory_fraction), not the GPU; the cap lies between {} (reserved before) and {}",
            bytes(free),
            bytes(known),
            bytes(failed)
        )?,
        (Some(free), _) => {
            writeln!(out, "  device free            {:>12}   less than requested: the GPU was full", bytes(free))?
        }
        (None, _) => writeln!(out, "  device free                 unknown")?,
    }
    if let Some(cap) = r.recorded_capacity_bytes {
        writeln!(
            out,
            "  recorded cap           {:>12}   the process's memory fraction of the device, recorded by the \
             capture: the settings below are judged against it",
            bytes(cap)
        )?;
    }
    writeln!(out, "  reserved               {:>12}", bytes(r.reserved_bytes))?;
    writeln!(out, "  allocated              {:>12}", bytes(r.allocated_bytes))?;
    if r.pending_free_bytes > 0 {
        writeln!(
            out,
            "  pending free           {:>12}   (freed, waiting for stream events)",
            bytes(r.pending_free_bytes)
        )?;
    }
    writeln!(
        out,
        "  reserved, unallocated  {:>12}   (PyTorch's \"reserved by PyTorch but unallocated\")",
        bytes(r.reserved_unallocated_bytes)
    )?;
    let largest = r.largest_usable_free_block.map_or(0, |b| b.size);
    writeln!(
        out,
        "  largest free block     {:>12}   usable by the request (same pool and stream); {} free in {} blocks in all",
        bytes(largest),
        bytes(r.free_bytes),
        r.free_blocks
    )?;
    if r.released_segments > 0 {
        writeln!(
            out,
            "  before failing, the allocator released {} cached segments ({}) and retried",
            r.released_segments,
            bytes(r.released_bytes)
        )?;
    }
    write_cause(out, r, pool, largest)?;
    writeln!(
        out,
        "  state at the OOM: {} (the snapshot's layout with the {} entries after the OOM undone)",
        if r.exact { "exact" } else { "estimated: sizes of blocks freed after the OOM are guesses" },
        r.entries_after
    )?;
    write_avoidance(out, r)?;
    writeln!(out, "  live allocations by stack (top {} of {} stacks):", r.top_stacks.len(), r.live_stacks)?;
    for (k, s) in r.top_stacks.iter().enumerate() {
        writeln!(out, "    {:>12}  {:>5} allocs  {}", bytes(s.bytes), s.count, stack_label(&s.frames))?;
        if k == 0 {
            write_frames(out, &s.frames, depth, "                                ")?;
        }
    }
    Ok(())
}

/// Why it ran out, in words: fragmentation, exhaustion, or unexplained.
fn write_cause(out: &mut impl Write, r: &OomReport, pool: &str, largest: u64) -> std::io::Result<()> {
    match r.cause {
        OomCause::Fragmentation => writeln!(
            out,
            "  cause: FRAGMENTATION: the {pool} pool held {} free, more than the {} requested, but in {} pieces, \
             the largest {}",
            bytes(r.usable_free_bytes),
            bytes(r.request_bytes),
            r.usable_free_blocks,
            bytes(largest)
        )?,
        OomCause::Exhaustion => writeln!(
            out,
            "  cause: EXHAUSTION: only {} free in the {pool} pool for a {} request; live allocations filled the \
             memory {}",
            bytes(r.usable_free_bytes),
            bytes(r.request_bytes),
            if r.limit == Limit::ProcessCap { "the cap allowed" } else { "the GPU had" }
        )?,
        OomCause::Unexplained => writeln!(
            out,
            "  cause: UNEXPLAINED: a free block of {} could have served the {} request (an estimated layout, or \
             an allocator rule not modelled here)",
            bytes(largest),
            bytes(r.request_bytes)
        )?,
    }
    Ok(())
}

/// Which allocator settings would have avoided it: simulated, or worth trying.
fn write_avoidance(out: &mut impl Write, r: &OomReport) -> std::io::Result<()> {
    match (&r.avoided_by, r.candidate_settings()) {
        (Some(verdicts), _) => {
            let said: Vec<String> = verdicts
                .iter()
                .filter_map(|v| match v.avoids {
                    Avoidance::Yes => Some(v.setting.clone()),
                    Avoidance::IfCapacityAtLeast { bytes: need } => {
                        Some(format!("{} (if the process could reserve {})", v.setting, bytes(need)))
                    }
                    Avoidance::No => None,
                })
                .collect();
            if said.is_empty() {
                writeln!(out, "  avoided by: no simulated setting avoids it")?;
            } else {
                writeln!(out, "  avoided by (simulated): {}", said.join(", "))?;
            }
        }
        (None, candidates) if candidates.is_empty() => {
            writeln!(out, "  avoided by: no allocator setting; the program needs less memory (or a larger cap)")?
        }
        (None, candidates) => {
            writeln!(out, "  avoided by: not simulated; settings worth trying: {}", candidates.join(", "))?
        }
    }
    Ok(())
}
