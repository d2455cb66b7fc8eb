//! `vramscope predict FILE=SIZE [FILE=SIZE ...] (--at N[,N...] | --largest)`:
//! memory at sizes never run, from a few small runs of the same job, through
//! the caching allocator's model (`vramscope_shared::predict`). With
//! `--settings`, the same under each allocator setting `tune` tries: what
//! would make it fit. With `--gpu NAME`, the capacity is that card's.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use vramscope_shared::Snapshot;
use vramscope_shared::predict::gpus::{self, Gpu};
use vramscope_shared::predict::settings::{default_grid, predict_by_setting};
use vramscope_shared::predict::{PredictOptions, PredictReport, Run, predict, replay_in_parallel};
use vramscope_shared::simulate::{AllocatorConfig, parse_size};

use super::input::{MemoryBudget, load};
use super::{Failure, finish, write_json};
use crate::report::text::bytes;
use crate::report::text::predict::{write_report, write_settings_report};

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
    #[arg(long, value_name = "SIZE", value_parser = capacity, conflicts_with = "gpu")]
    capacity: Option<u64>,
    /// The capacity of a GPU by name: its memory as CUDA reports it, less
    /// what the CUDA context and libraries take outside the allocator
    /// (H100-80GB, H200, A100-40GB, A100-80GB, A10G, L4, L40S, RTX 4090,
    /// T4; case, spaces and dashes do not matter). Figures and their
    /// sources: docs/gpu-capacities.md.
    #[arg(long, value_name = "NAME")]
    gpu: Option<String>,
    /// Also predict under each allocator setting `vramscope tune` tries
    /// (expandable segments, max_split_size_mb, garbage collection,
    /// roundup divisions), ranked: with --largest, the largest size that
    /// fits with each; with --at, which settings make each size fit. Needs
    /// a capacity (--capacity, --gpu, or one the runs record).
    #[arg(long)]
    settings: bool,
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
    let gpu: Option<&Gpu> = match &args.gpu {
        Some(name) => Some(gpus::find(name).map_err(|e| Failure::BadInput(anyhow!(e)))?),
        None => None,
    };
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
        capacity: args.capacity.or(gpu.map(Gpu::capacity_bytes)),
        alloc_conf: args.alloc_conf.clone(),
        device: args.device,
        step: args.step,
    };
    let mut out = std::io::stdout().lock();
    let written = if args.settings {
        let bar = SettingsProgress::new();
        let mut progress = |done: usize, total: usize, conf: &str| bar.update(done, total, conf);
        let mut report = predict_by_setting(&runs, &options, default_grid(), &replay_in_parallel, &mut progress)
            .map_err(|e| Failure::BadInput(anyhow!(e)))?;
        bar.finish();
        if let Some(g) = gpu {
            name_gpu(&mut report.prediction, g);
        }
        if args.json { write_json(&mut out, &report) } else { write_settings_report(&mut out, &report) }
    } else {
        let mut report = predict(&runs, &options, &replay_in_parallel).map_err(|e| Failure::BadInput(anyhow!(e)))?;
        if let Some(g) = gpu {
            name_gpu(&mut report, g);
        }
        if args.json { write_json(&mut out, &report) } else { write_report(&mut out, &report) }
    };
    finish(written)
}

/// The capacity's source is the card, and a note says what it is made of.
fn name_gpu(report: &mut PredictReport, g: &Gpu) {
    report.capacity_source = Some(format!("gpu:{}", g.name));
    let kind = if g.measured { "measured" } else { "estimated" };
    report.notes.push(format!(
        "capacity: the {}'s {} as CUDA reports it, less {} the CUDA context and libraries take outside the allocator \
         ({kind}; docs/gpu-capacities.md)",
        g.name,
        bytes(g.cuda_total_bytes),
        bytes(g.overhead_bytes)
    ));
}

/// How long the settings' replays run before progress is shown: a quick
/// comparison prints nothing.
const PROGRESS_AFTER: Duration = Duration::from_secs(1);

/// A bar on stderr for `--settings`, one step per setting, drawn once the
/// comparison has run for [`PROGRESS_AFTER`].
struct SettingsProgress {
    bar: ProgressBar,
    started: Instant,
}

impl SettingsProgress {
    fn new() -> SettingsProgress {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        let style = ProgressStyle::with_template("settings [{bar:30}] {pos}/{len} ({elapsed}) {msg}")
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        SettingsProgress { bar, started: Instant::now() }
    }

    fn update(&self, done: usize, total: usize, conf: &str) {
        self.bar.set_length(total as u64);
        self.bar.set_position(done as u64);
        self.bar.set_message(if conf.is_empty() { "(PyTorch defaults)".to_owned() } else { conf.to_owned() });
        if self.bar.is_hidden() && self.started.elapsed() > PROGRESS_AFTER {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
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
