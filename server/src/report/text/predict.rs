//! `vramscope predict`'s answer as text: memory at sizes never run (each
//! size's peaks, where it runs out), the largest size that fits, and with
//! `--settings` the allocator settings ranked by what fits.

use std::io::Write;

use vramscope_shared::predict::settings::SettingsReport;
use vramscope_shared::predict::{PredictReport, SizePrediction};

use super::bytes;

/// Settings by their string, or "(PyTorch defaults)" for none.
fn conf_name(conf: &str) -> &str {
    if conf.is_empty() { "(PyTorch defaults)" } else { conf }
}

/// `vramscope predict --settings`: the prediction, then each allocator
/// setting ranked by what fits under the capacity, what makes each size
/// fit, and the best setting to try with its trade-offs.
pub(crate) fn write_settings_report(out: &mut impl Write, r: &SettingsReport) -> std::io::Result<()> {
    write_report(out, &r.prediction)?;
    writeln!(out)?;
    let capacity = r.prediction.capacity_bytes.map_or_else(|| "?".to_owned(), bytes);
    writeln!(out, "by allocator setting, under {capacity} (best first):")?;
    let largest = r.prediction.step.is_some();
    let width = r.by_setting.iter().map(|o| conf_name(&o.alloc_conf).chars().count()).max().unwrap_or(0).max(7);
    // Columns: the largest size that fits and its peak (--largest), then
    // each size asked for, with its peak or "runs out".
    let mut header = format!("  {:<width$}", "setting");
    if largest {
        header.push_str(&format!("  {:>8}  {:>14}", "largest", "reserved peak"));
    }
    for f in &r.settings_fitting_at {
        header.push_str(&format!("  {:>14}", format!("at {}", f.size)));
    }
    writeln!(out, "{header}")?;
    for o in &r.by_setting {
        let mut line = format!("  {:<width$}", conf_name(&o.alloc_conf));
        if largest {
            let size = o.largest_fitting_size.map_or_else(|| "none".to_owned(), |n| n.to_string());
            let peak = o.reserved_peak_bytes.map_or_else(|| "-".to_owned(), bytes);
            line.push_str(&format!("  {size:>8}  {peak:>14}"));
        }
        for a in &o.at {
            let cell = if a.fits { bytes(a.reserved_peak_bytes) } else { "runs out".to_owned() };
            line.push_str(&format!("  {cell:>14}"));
        }
        if o.baseline {
            line.push_str("  (predicted with)");
        }
        writeln!(out, "{line}")?;
    }
    for f in &r.settings_fitting_at {
        let fits_already =
            r.by_setting.iter().find(|o| o.baseline).and_then(|o| o.at.iter().find(|a| a.size == f.size));
        match (fits_already.is_some_and(|a| a.fits), f.alloc_confs.is_empty()) {
            (true, _) => writeln!(out, "size {}: fits with the settings predicted with", f.size)?,
            (false, true) => writeln!(out, "size {}: runs out with every setting tried", f.size)?,
            (false, false) => {
                let names: Vec<&str> = f.alloc_confs.iter().map(|c| conf_name(c)).collect();
                writeln!(out, "size {}: fits with {}", f.size, names.join("; "))?;
            }
        }
    }
    if let Some(best) = r.by_setting.first().filter(|o| !o.baseline) {
        writeln!(out)?;
        writeln!(out, "try: PYTORCH_CUDA_ALLOC_CONF={}", best.alloc_conf)?;
        for t in &best.trade_offs {
            writeln!(out, "  trade-off: {t}")?;
        }
    }
    Ok(())
}

/// The prediction: the runs and the fit, the capacity, one line per size
/// (peaks, and where it runs out), the largest size that fits
/// (`--largest`), the notes and the allocations not in every run.
pub(crate) fn write_report(out: &mut impl Write, r: &PredictReport) -> std::io::Result<()> {
    let sizes: Vec<String> = r.runs.iter().map(|run| run.size.to_string()).collect();
    writeln!(
        out,
        "device {}: {} run{} (sizes {}), {:.1}% of allocations matched, fit {}",
        r.device,
        r.runs.len(),
        if r.runs.len() == 1 { "" } else { "s" },
        sizes.join(", "),
        r.matched_fraction * 100.0,
        r.fit
    )?;
    let capacity = match (r.capacity_bytes, r.capacity_source.as_deref()) {
        (Some(c), Some("per_process_memory_fraction")) => format!("{} (the recorded memory fraction)", bytes(c)),
        (Some(c), Some("device_total")) => format!("{} (the whole GPU)", bytes(c)),
        (Some(c), Some(source)) if source.starts_with("gpu:") => {
            format!("{} ({}: the card less its CUDA context and libraries)", bytes(c), &source[4..])
        }
        (Some(c), _) => bytes(c),
        (None, _) => "unlimited".to_owned(),
    };
    let conf = if r.alloc_conf.is_empty() { "(PyTorch defaults)" } else { &r.alloc_conf };
    writeln!(out, "capacity {capacity}; settings {conf}")?;
    writeln!(out)?;
    writeln!(out, "{:>10}  {:>14}  {:>14}  fits", "size", "reserved peak", "allocated peak")?;
    for p in &r.predictions {
        write_prediction(out, p)?;
    }
    if let Some(step) = r.step {
        writeln!(out)?;
        match r.largest_fitting_size {
            Some(n) => {
                let next = r.predictions.iter().filter(|p| p.oom && p.size > n).map(|p| p.size).min();
                write!(out, "largest size that fits: {n} (step {step})")?;
                match next {
                    Some(next) => writeln!(out, "; {next} runs out")?,
                    None => writeln!(out)?,
                }
            }
            None => writeln!(out, "no size fits (step {step}): even the smallest runs out")?,
        }
        for d in &r.non_monotonic {
            writeln!(out, "not monotonic: {} runs out of memory while {} fits", d.fails, d.fits)?;
        }
    }
    if !r.notes.is_empty() {
        writeln!(out)?;
        // The dips have their lines above.
        for n in r.notes.iter().filter(|n| !n.starts_with("not monotonic:")) {
            writeln!(out, "note: {n}")?;
        }
    }
    if !r.unmatched.is_empty() {
        writeln!(out)?;
        writeln!(out, "allocations not in every run (by stack):")?;
        for u in r.unmatched.iter().take(5) {
            // Said as a total: "96 × 324 MiB" read as 96 allocations of 324 MiB each (issue 44).
            let allocations = if u.count == 1 { "allocation" } else { "allocations" };
            writeln!(out, "  {} {allocations}, {} in all, in {}", u.count, bytes(u.bytes), u.run)?;
            if u.stack.is_empty() {
                writeln!(out, "      (no Python frames: autograd's backward pass, or a library's own allocation)")?;
            }
            for f in u.stack.iter().take(3) {
                writeln!(out, "      {f}")?;
            }
        }
    }
    Ok(())
}

/// One size's line of the table, and the stack of its OOM.
fn write_prediction(out: &mut impl Write, p: &SizePrediction) -> std::io::Result<()> {
    let verdict = match (p.oom, p.cause) {
        (false, _) => "yes".to_owned(),
        (true, cause) => format!(
            "no: out of memory at row {} ({}), {} requested",
            p.oom_row.map_or_else(|| "?".to_owned(), |r| r.to_string()),
            cause.map_or("unknown", |c| match c {
                vramscope_shared::analysis::oom::OomCause::Fragmentation => "fragmentation",
                vramscope_shared::analysis::oom::OomCause::Exhaustion => "exhaustion",
                vramscope_shared::analysis::oom::OomCause::Unexplained => "unexplained",
            }),
            bytes(p.oom_requested_bytes.unwrap_or(0))
        ),
    };
    let peak = |n: u64| if p.oom { format!("≥ {}", bytes(n)) } else { bytes(n) };
    writeln!(
        out,
        "{:>10}  {:>14}  {:>14}  {verdict}",
        p.size,
        peak(p.reserved_peak_bytes),
        peak(p.allocated_peak_bytes)
    )?;
    for f in p.oom_stack.iter().take(3) {
        writeln!(out, "{:>44}{f}", "")?;
    }
    Ok(())
}
