//! `vramscope simulate FILE [--alloc-conf CONF] [--capacity SIZE] [--json]`
//! and `vramscope tune FILE [--capacity SIZE] [--json]`: replay a trace
//! through the model of PyTorch's caching allocator, with the recorded
//! settings or others.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use clap::Args;
use vramscope_shared::Snapshot;
use vramscope_shared::analysis::capacity::simulate_with_inferred_capacity;
use vramscope_shared::answers::tune_json;
use vramscope_shared::simulate::tune::TuneReport;
use vramscope_shared::simulate::{AllocatorConfig, SimulateOptions, Simulation, parse_size};

use super::Failure;
use super::input::{MemoryBudget, load};
use super::text::bytes;

/// Arguments of `vramscope simulate`.
#[derive(Debug, Args)]
pub(crate) struct SimulateArgs {
    /// Snapshot file with a trace (`torch.cuda.memory._record_memory_history`).
    file: PathBuf,
    /// PYTORCH_CUDA_ALLOC_CONF to replay with, e.g.
    /// "max_split_size_mb:512,expandable_segments:True" (default: the
    /// settings the snapshot was recorded with).
    #[arg(long, value_name = "CONF")]
    alloc_conf: Option<String>,
    /// Memory each GPU may reserve, e.g. 80GiB or 500MB (default: unlimited; for a snapshot that ran out, the
    /// least the process had then).
    #[arg(long, value_name = "SIZE", value_parser = capacity)]
    capacity: Option<u64>,
    /// Serve the requests that ran out of memory in the recorded run, as if
    /// there had been memory for them (what if there had been more memory).
    /// By default, without --capacity, they fail in the replay too, so that
    /// it reproduces the recorded run.
    #[arg(long)]
    grant_recorded_ooms: bool,
    /// Print one JSON object instead of the human summary.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    budget: MemoryBudget,
}

/// Arguments of `vramscope tune`.
#[derive(Debug, Args)]
pub(crate) struct TuneArgs {
    /// Snapshot file with a trace (`torch.cuda.memory._record_memory_history`).
    file: PathBuf,
    /// Memory each GPU may reserve, e.g. 80GiB or 500MB (default: unlimited; for a snapshot that ran out, the
    /// least the process had then).
    #[arg(long, value_name = "SIZE", value_parser = capacity)]
    capacity: Option<u64>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    budget: MemoryBudget,
}

fn capacity(text: &str) -> Result<u64, String> {
    parse_size(text).map_err(|e| e.to_string())
}

fn bad_input(e: impl std::fmt::Display, path: &Path) -> Failure {
    Failure::BadInput(anyhow!("{e} (file: {})", path.display()))
}

fn finish(written: std::io::Result<()>) -> Result<(), Failure> {
    match written {
        // `vramscope simulate F | head` closes the pipe early: not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to stdout").map_err(Failure::Other),
    }
}

/// Run `vramscope simulate`.
pub(crate) fn run(args: &SimulateArgs) -> Result<(), Failure> {
    // Refuse bad settings before spending time on the file.
    if let Some(conf) = &args.alloc_conf {
        AllocatorConfig::parse(conf).map_err(|e| Failure::BadInput(anyhow!(e)))?;
    }
    let snapshot = load(&args.file, args.budget)?;
    let options = SimulateOptions {
        alloc_conf: args.alloc_conf.clone(),
        capacity: args.capacity,
        record_series: false,
        grant_recorded_ooms: args.grant_recorded_ooms,
    };
    let sim = simulate_with_inferred_capacity(&snapshot, &options).map_err(|e| bad_input(e, &args.file))?;
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        // The report `vramscope_shared::answers::simulate_json` gives the MCP tool.
        serde_json::to_writer(&mut out, &sim.report()).map_err(std::io::Error::from).and_then(|()| writeln!(out))
    } else {
        write_simulation(&mut out, &args.file, &snapshot, &sim)
    };
    finish(written)
}

/// Run `vramscope tune`.
pub(crate) fn run_tune(args: &TuneArgs) -> Result<(), Failure> {
    let snapshot = load(&args.file, args.budget)?;
    let json =
        tune_json(&args.file.display().to_string(), &snapshot, args.capacity).map_err(|e| bad_input(e, &args.file))?;
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        serde_json::to_writer(&mut out, &json).map_err(std::io::Error::from).and_then(|()| writeln!(out))
    } else {
        write_tune(&mut out, &args.file, &snapshot, &json.report)
    };
    finish(written)
}

fn conf_label(conf: &str) -> &str {
    if conf.is_empty() { "(PyTorch defaults)" } else { conf }
}

fn change(now: u64, before: u64) -> String {
    if before == 0 { "-".to_owned() } else { format!("{:+.1}%", (now as f64 - before as f64) * 100.0 / before as f64) }
}

fn write_simulation(out: &mut impl Write, path: &Path, snap: &Snapshot, sim: &Simulation) -> std::io::Result<()> {
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
            super::text::count(s.num_alloc_retries, "retry", "retries")
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

fn write_tune(out: &mut impl Write, path: &Path, snap: &Snapshot, report: &TuneReport) -> std::io::Result<()> {
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
