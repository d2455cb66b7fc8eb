//! `vramscope predict FILE=SIZE [FILE=SIZE ...] (--at N[,N...] | --largest)`:
//! memory at sizes never run, from a few small runs of the same job, through
//! the caching allocator's model (`vramscope_shared::predict`).

use std::io::Write;
use std::path::PathBuf;

use anyhow::anyhow;
use clap::Args;
use vramscope_shared::Snapshot;
use vramscope_shared::predict::{PredictOptions, PredictReport, Run, SizePrediction, predict, replay_in_parallel};
use vramscope_shared::simulate::{AllocatorConfig, parse_size};

use super::Failure;
use super::input::{MemoryBudget, load};
use super::text::{bytes, finish, write_json};

/// Arguments of `vramscope predict`.
#[derive(Debug, Args)]
pub(crate) struct PredictArgs {
    /// Recorded runs of one job at different sizes of one integer knob
    /// (batch size, sequence length, ...), each labelled with its size:
    /// run_b8.pickle=8 run_b16.pickle=16. Record each from the start of the
    /// program (torch.cuda.memory._record_memory_history before the model
    /// is made), with the same number of steps.
    #[arg(required = true, value_name = "FILE=SIZE", value_parser = run_arg)]
    runs: Vec<(PathBuf, u64)>,
    /// Sizes to predict, e.g. 64,128.
    #[arg(long, value_name = "N[,N...]", value_delimiter = ',', required_unless_present = "largest")]
    at: Vec<u64>,
    /// Find the largest size that fits under the capacity, by replaying
    /// candidates (not by a formula: fit is not monotonic).
    #[arg(long)]
    largest: bool,
    /// Memory the process may reserve on the GPU, e.g. 80GiB (default: the
    /// recorded per_process_memory_fraction of the GPU, else, for
    /// --largest, the GPU's whole memory when the runs record it).
    #[arg(long, value_name = "SIZE", value_parser = capacity)]
    capacity: Option<u64>,
    /// PYTORCH_CUDA_ALLOC_CONF to predict with (default: the settings the
    /// largest run was recorded with).
    #[arg(long, value_name = "CONF")]
    alloc_conf: Option<String>,
    /// CUDA device (default: the first with a trace).
    #[arg(long)]
    device: Option<u32>,
    /// Step of the --largest search, e.g. 8 for a knob that must be a
    /// multiple of 8 (default 1: every integer size is searched; the answer
    /// names the step it used).
    #[arg(long, value_name = "N")]
    step: Option<u64>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    budget: MemoryBudget,
}

fn capacity(text: &str) -> Result<u64, String> {
    match parse_size(text).map_err(|e| e.to_string())? {
        0 => Err("the capacity must be more than 0 bytes".to_owned()),
        n => Ok(n),
    }
}

/// `FILE=SIZE`, split at the last `=` (a path may hold one).
fn run_arg(text: &str) -> Result<(PathBuf, u64), String> {
    let (file, size) = text
        .rsplit_once('=')
        .ok_or_else(|| format!("{text:?}: expected FILE=SIZE, the run's file and its size, e.g. run_b8.pickle=8"))?;
    let size: u64 = size.trim().parse().map_err(|_| {
        format!("{text:?}: the size after '=' must be a positive integer (the knob's value in that run), not {size:?}")
    })?;
    if file.is_empty() {
        return Err(format!("{text:?}: no file before '='"));
    }
    Ok((PathBuf::from(file), size))
}

/// Run `vramscope predict`.
pub(crate) fn run(args: &PredictArgs) -> Result<(), Failure> {
    if let Some(conf) = &args.alloc_conf {
        AllocatorConfig::parse(conf).map_err(|e| Failure::BadInput(anyhow!(e)))?;
    }
    if args.step == Some(0) {
        return Err(Failure::BadInput(anyhow!("--step must be a positive integer")));
    }
    // The files are read side by side, a thread each.
    let snapshots: Vec<Snapshot> = std::thread::scope(|scope| {
        let readers: Vec<_> = args.runs.iter().map(|(path, _)| scope.spawn(move || load(path, args.budget))).collect();
        readers
            .into_iter()
            .map(|r| r.join().unwrap_or_else(|_| Err(Failure::Other(anyhow!("a reader thread panicked")))))
            .collect::<Result<Vec<_>, _>>()
    })?;
    let names: Vec<String> = args.runs.iter().map(|(p, _)| p.display().to_string()).collect();
    let runs: Vec<Run<'_>> = args
        .runs
        .iter()
        .zip(&snapshots)
        .zip(&names)
        .map(|(((_, size), snapshot), name)| Run { name, size: *size, snapshot })
        .collect();
    let options = PredictOptions {
        at: args.at.clone(),
        largest: args.largest,
        capacity: args.capacity,
        alloc_conf: args.alloc_conf.clone(),
        device: args.device,
        step: args.step,
    };
    let report = predict(&runs, &options, &replay_in_parallel).map_err(|e| Failure::BadInput(anyhow!(e)))?;
    let mut out = std::io::stdout().lock();
    let written = if args.json { write_json(&mut out, &report) } else { write_report(&mut out, &report) };
    finish(written)
}

fn write_report(out: &mut impl Write, r: &PredictReport) -> std::io::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_arguments_are_file_equals_size() {
        assert_eq!(run_arg("a=b.pickle=8"), Ok((PathBuf::from("a=b.pickle"), 8)));
        assert!(run_arg("run.pickle").expect_err("refused").contains("expected FILE=SIZE"));
        assert!(run_arg("run.pickle=eight").expect_err("refused").contains("positive integer"));
        assert!(run_arg("=8").expect_err("refused").contains("no file"));
    }
}
