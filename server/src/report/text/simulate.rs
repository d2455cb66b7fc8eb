//! `vramscope simulate`'s replay and `vramscope tune`'s table as text: a
//! trace replayed through the model of PyTorch's caching allocator, with
//! one setting or with each of the grid's, against the recorded run.

use std::io::Write;
use std::path::Path;

use vramscope_shared::Snapshot;
use vramscope_shared::simulate::Simulation;
use vramscope_shared::simulate::tune::TuneReport;

use super::{bytes, count};

/// Settings by their string, or "(PyTorch defaults)" for none.
fn conf_label(conf: &str) -> &str {
    if conf.is_empty() { "(PyTorch defaults)" } else { conf }
}

/// `now` against `before` in percent, signed, one decimal: "+12.5%"; "-"
/// against nothing.
fn change(now: u64, before: u64) -> String {
    if before == 0 { "-".to_owned() } else { format!("{:+.1}%", (now as f64 - before as f64) * 100.0 / before as f64) }
}

/// `vramscope simulate`: the settings and capacity the trace of `snap`
/// (read from `path`) was replayed under, then per device the replay's
/// peaks against the recorded run, its device calls, and where it ran out.
pub(crate) fn write_simulation(
    out: &mut impl Write,
    path: &Path,
    snap: &Snapshot,
    sim: &Simulation,
) -> std::io::Result<()> {
    let source = if sim.recorded_settings { "recorded settings" } else { "given settings" };
    write!(out, "{}: replayed with {source} {}", path.display(), conf_label(&sim.alloc_conf))?;
    match (sim.capacity, sim.capacity_from_fraction) {
        (Some(c), false) if sim.capacity_recorded => writeln!(
            out,
            ", capacity {} per device: the cap the process ran under (its memory fraction, recorded by the \
             capture; --capacity for another)",
            bytes(c)
        )?,
        (Some(c), false) if sim.capacity_inferred => writeln!(
            out,
            ", capacity {} per device: the least the process had when it ran out (inferred from the recorded \
             OOM; --capacity for another)",
            bytes(c)
        )?,
        (Some(c), false) => writeln!(out, ", capacity {} per device", bytes(c))?,
        (Some(c), true) => writeln!(
            out,
            ", capacity {} ({c} bytes: per_process_memory_fraction of the device's total memory)",
            bytes(c)
        )?,
        (None, _) => writeln!(out, ", unlimited memory")?,
    }
    for option in &sim.config.not_modelled {
        writeln!(
            out,
            "note: the recorded setting {option:?} is not modelled; the replay uses PyTorch's default for it"
        )?;
    }
    let recorded = snap.stats();
    for d in &sim.devices {
        let s = &d.stats;
        let entries = snap.device(d.device).map_or(0, |dev| dev.trace.len());
        writeln!(out)?;
        writeln!(out, "device {}: {} of {} trace entries replayed", d.device, d.rows_replayed, entries)?;
        let recorded_peak =
            recorded.devices.iter().find(|r| r.device == d.device).and_then(|r| r.reserved_peak_bytes).unwrap_or(0);
        writeln!(
            out,
            "  reserved peak        {:>12}   (recorded run: {}, {})",
            bytes(s.reserved_bytes.peak),
            bytes(recorded_peak),
            change(s.reserved_bytes.peak, recorded_peak)
        )?;
        writeln!(
            out,
            "  allocated peak       {:>12}   (requested peak {})",
            bytes(s.allocated_bytes.peak),
            bytes(s.requested_bytes.peak)
        )?;
        writeln!(out, "  inactive split peak  {:>12}", bytes(s.inactive_split_bytes.peak))?;
        writeln!(
            out,
            "  reserved at the end  {:>12}   in {} segments",
            bytes(s.reserved_bytes.current),
            d.segments.len()
        )?;
        writeln!(
            out,
            "  device calls         {:>12}   cudaMalloc/map, {} cudaFree/unmap, {}",
            s.num_device_alloc,
            s.num_device_free,
            count(s.num_alloc_retries, "retry", "retries")
        )?;
        match &d.oom {
            None => writeln!(out, "  out of memory        {:>12}", "no")?,
            Some(o) => {
                // When, from the trace's first entry (its times are µs since the epoch).
                let start = snap.device(d.device).and_then(|dev| dev.trace.times_us().first().copied());
                let when = match start.filter(|_| o.time_us > 0) {
                    Some(t0) => format!(", {:.3} s into the trace", (o.time_us - t0) as f64 / 1e6),
                    None => String::new(),
                };
                writeln!(
                    out,
                    "  out of memory        at trace entry {}{when}: {} requested, a {} segment did not fit with {} \
                     reserved{}",
                    o.row,
                    bytes(o.requested_bytes),
                    bytes(o.allocation_bytes),
                    bytes(o.reserved_bytes),
                    match (o.recorded, sim.capacity) {
                        (true, None) => {
                            "\n                       the recorded run ran out of memory here (its trace has an oom \
                             entry); without --capacity the replay cannot know the memory it had, so it keeps that \
                             failure: --capacity SIZE replays under a cap, --grant-recorded-ooms serves the request"
                        }
                        (true, Some(_)) => " (the recorded run failed there too)",
                        (false, _) => "; the replay stops there",
                    }
                )?
            }
        }
        if d.unmatched_frees > 0 {
            writeln!(out, "  note: {} frees had no matching allocation in the trace", d.unmatched_frees)?;
        }
    }
    Ok(())
}

/// `vramscope tune`: the settings tried, ranked (peaks against the recorded
/// settings, device calls, where each runs out), then what the columns mean
/// and each setting's trade-offs.
pub(crate) fn write_tune(
    out: &mut impl Write,
    path: &Path,
    snap: &Snapshot,
    report: &TuneReport,
) -> std::io::Result<()> {
    let entries: usize = snap.devices.iter().map(|d| d.trace.len()).sum();
    write!(out, "{}: {} allocator settings replayed over {entries} trace entries", path.display(), report.rows.len())?;
    match report.capacity_bytes {
        Some(c) if report.capacity_source == Some("recorded") => writeln!(
            out,
            ", capacity {} per device: the cap the process ran under (its memory fraction, recorded by the \
             capture; --capacity for another)",
            bytes(c)
        )?,
        Some(c) if report.capacity_inferred => writeln!(
            out,
            ", capacity {} per device: the least the process had when it ran out (inferred from the recorded \
             OOM; --capacity for another)",
            bytes(c)
        )?,
        Some(c) => writeln!(out, ", capacity {} per device", bytes(c))?,
        None => writeln!(out, ", unlimited memory")?,
    }
    // Only whole replays are compared: a peak of one cut short by its OOM
    // says nothing against a run that went on.
    let baseline = report.rows.iter().find(|r| r.recorded && r.oom.is_none()).map(|r| r.peaks.reserved_peak_bytes);
    writeln!(out)?;
    writeln!(
        out,
        "{:>4}  {:>12}  {:>11}  {:>12}  {:>14}  {:>12}  {:>13}  settings",
        "rank", "reserved", "vs recorded", "allocated", "inactive split", "device calls", "runs out"
    )?;
    for (i, r) in report.rows.iter().enumerate() {
        let (versus, runs_out) = match (r.oom, baseline) {
            (Some(oom), _) => ("cut short".to_owned(), format!("at row {}", oom.row)),
            (None, Some(b)) => (change(r.peaks.reserved_peak_bytes, b), "no".to_owned()),
            (None, None) => ("-".to_owned(), "no".to_owned()),
        };
        writeln!(
            out,
            "{:>4}  {:>12}  {:>11}  {:>12}  {:>14}  {:>12}  {:>13}  {}{}",
            i + 1,
            bytes(r.peaks.reserved_peak_bytes),
            versus,
            bytes(r.peaks.allocated_peak_bytes),
            bytes(r.peaks.inactive_split_peak_bytes),
            r.peaks.device_allocs + r.peaks.device_frees,
            runs_out,
            conf_label(&r.alloc_conf),
            if r.recorded { "  <- recorded" } else { "" }
        )?;
    }
    writeln!(out)?;
    // The trace's own requested peak (what the program asked for), not a
    // replay's, which may have stopped short of it.
    let requested_peak = snap.stats().devices.iter().filter_map(|d| d.requested_peak_bytes).max().unwrap_or(0);
    writeln!(
        out,
        "reserved, allocated, inactive split: peaks; allocated above the requested peak ({}) is rounding and unsplit \
         blocks; device calls: cudaMalloc/cudaFree and page map/unmap.",
        bytes(requested_peak)
    )?;
    if report.rows.iter().any(|r| r.oom.is_some()) {
        writeln!(
            out,
            "A setting that runs out ranks below every one that fits, and among those that run out the later the \
             better: their peaks are only up to the row where they ran out (cut short), not comparable with a whole run."
        )?;
    }
    let mut notes: Vec<&str> = Vec::new();
    for note in report.rows.iter().flat_map(|r| r.trade_offs.iter()) {
        if !notes.contains(&note.as_str()) {
            notes.push(note);
        }
    }
    for note in notes {
        writeln!(out, "- {note}")?;
    }
    Ok(())
}
