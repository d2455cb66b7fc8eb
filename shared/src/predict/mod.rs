//! Will it fit? Memory at sizes never run, from a few small runs of the same
//! job, through the caching allocator's model.
//!
//! The inputs are snapshots of one program recorded at different values of
//! one integer knob (batch size, sequence length, image side). A prediction
//! is made in four steps:
//!
//! 1. **Program.** Each run's trace becomes its requests: allocations, their
//!    frees, and `empty_cache()` calls ([`program`]); what the allocator did
//!    on its own (segments, addresses) is left for the model to re-derive.
//! 2. **Match.** The allocations of every run are matched to those of the
//!    run with the largest knob (the reference), by position and stack: the
//!    sequences of stacks are aligned (Myers' diff), so an allocation that
//!    exists at some sizes only (control flow that depends on the size) is
//!    named, not silently matched to a neighbour.
//! 3. **Fit.** Each matched allocation's requested size is the polynomial of
//!    the knob of the lowest degree through every run ([`fit`]): constant,
//!    linear with two runs, up to quadratic with three. It reproduces every
//!    run to the byte; rounding is the allocator model's job.
//! 4. **Replay.** The reference's program, with each size evaluated at the
//!    target, is replayed through [`CachingAllocator`]: the recorded (or
//!    given) settings, and a capacity honoured the way PyTorch does (free
//!    the cache and retry before failing). Peaks, and whether and where it
//!    runs out: the reference's row and stack, and the cause.
//!
//! The largest size that fits is found by replaying candidates
//! ([`search`]), never by a formula: fit is not monotonic in the size (a
//! size can run out where a larger one fits, when the allocator's cache
//! happens to hold the right blocks).
//!
//! With one run, what the breakdown classes as activations and temporaries
//! is scaled by the knob's ratio, and the rest (parameters, gradients,
//! optimizer state, workspaces) stays: a rougher answer, said so.
//!
//! CUDA graphs' private pools are not modelled here: every request goes to
//! the default pool, and the answer says so when a run used one.

mod fit;
pub mod gpus;
mod matching;
mod program;
pub mod search;
pub mod settings;

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use self::fit::Fit;
use self::program::{Op, Program};
use crate::analysis::breakdown::DeviceCategories;
use crate::analysis::oom::OomCause;
use crate::analysis::{FrameText, stack_text};
use crate::intervals::DeviceIntervals;
use crate::simulate::{AllocatorConfig, CachingAllocator, ConfigError, SimError, round_size, settings_for};
use crate::snapshot::{DeviceSnapshot, Snapshot};
use crate::stats::DeviceStats;

/// One recorded run of the job.
#[derive(Clone, Copy, Debug)]
pub struct Run<'a> {
    /// How the run is named in answers (its file name, or a snapshot id).
    pub name: &'a str,
    /// The knob's value in this run.
    pub size: u64,
    /// The run's snapshot, recorded from the start of the program.
    pub snapshot: &'a Snapshot,
}

/// What to predict.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PredictOptions {
    /// Sizes to predict.
    pub at: Vec<u64>,
    /// Find the largest size that fits under the capacity.
    pub largest: bool,
    /// Memory the process may reserve on the device; default: the recorded
    /// `per_process_memory_fraction` of the device's total, else, for
    /// `largest`, the device's total memory when a run records it.
    pub capacity: Option<u64>,
    /// `PYTORCH_CUDA_ALLOC_CONF` to predict with (default: the reference
    /// run's recorded settings).
    pub alloc_conf: Option<String>,
    /// CUDA device (default: the first device with a trace).
    pub device: Option<u32>,
    /// Step of the largest-size search (default 1: every integer size).
    pub step: Option<u64>,
}

/// Why no prediction could be made.
#[derive(Debug, Error, PartialEq)]
pub enum PredictError {
    /// No runs given.
    #[error("no runs: give at least one recorded snapshot with its size, FILE=SIZE")]
    NoRuns,
    /// A size of 0.
    #[error("{run}: the size must be a positive integer, not 0")]
    ZeroSize {
        /// The run.
        run: String,
    },
    /// Two runs at one size.
    #[error("{first} and {second} are both labelled size {size}: each run needs a size of its own")]
    SameSize {
        /// One run.
        first: String,
        /// The other.
        second: String,
        /// Their size.
        size: u64,
    },
    /// Nothing to predict.
    #[error("nothing to predict: give sizes to predict (--at 64,128) or ask for the largest that fits (--largest)")]
    NothingAsked,
    /// A run lacks the device, or its trace.
    #[error(
        "{run}: device {device} has no trace (record with torch.cuda.memory._record_memory_history(max_entries=…) \
         before the model is created)"
    )]
    NoTrace {
        /// The run.
        run: String,
        /// CUDA device index.
        device: u32,
    },
    /// No device has a trace in the reference run.
    #[error("{run}: no device has a trace (record with torch.cuda.memory._record_memory_history())")]
    NoDevice {
        /// The run.
        run: String,
    },
    /// A run's ring buffer wrapped: the program cannot be matched whole.
    #[error(
        "{run}: the trace of device {device} does not start from an empty allocator (the history ring kept only \
         its last {entries} entries, or recording started late), so the program cannot be matched whole; record \
         from the start of the program with torch.cuda.memory._record_memory_history(max_entries={suggested}) or \
         more"
    )]
    TraceWrapped {
        /// The run.
        run: String,
        /// CUDA device index.
        device: u32,
        /// Entries the trace holds.
        entries: usize,
        /// `max_entries` to record with.
        suggested: u64,
    },
    /// `--largest` without a capacity, and none recorded.
    #[error(
        "the largest size that fits needs a capacity: give one (--capacity 80GiB); the runs record neither a \
         per_process_memory_fraction nor the device's total memory"
    )]
    NoCapacity,
    /// The allocator settings given could not be understood.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The allocator model refused the settings.
    #[error(transparent)]
    Simulate(SimError),
    /// Settings compared without a capacity: every setting fits.
    #[error(
        "comparing allocator settings needs a capacity to fit under: give one (--capacity 40GiB or --gpu NAME); \
         the runs record no per_process_memory_fraction"
    )]
    SettingsNeedCapacity,
}

impl PredictError {
    /// A stable name for the error, for JSON answers.
    pub fn kind(&self) -> &'static str {
        match self {
            PredictError::NoRuns => "no_runs",
            PredictError::ZeroSize { .. } => "zero_size",
            PredictError::SameSize { .. } => "same_size",
            PredictError::NothingAsked => "nothing_asked",
            PredictError::NoTrace { .. } => "no_trace",
            PredictError::NoDevice { .. } => "no_device",
            PredictError::TraceWrapped { .. } => "trace_wrapped",
            PredictError::NoCapacity => "no_capacity",
            PredictError::Config(_) => "bad_settings",
            PredictError::Simulate(_) => "simulate",
            PredictError::SettingsNeedCapacity => "settings_need_capacity",
        }
    }
}

impl From<SimError> for PredictError {
    fn from(e: SimError) -> Self {
        match e {
            SimError::Config(c) => PredictError::Config(c),
            other => PredictError::Simulate(other),
        }
    }
}

/// The prediction at one size.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SizePrediction {
    /// The knob's value.
    pub size: u64,
    /// CUDA device index.
    pub device: u32,
    /// Highest reserved bytes (`max_memory_reserved()`), up to the OOM if
    /// it runs out.
    pub reserved_peak_bytes: u64,
    /// Highest allocated bytes (`max_memory_allocated()`), likewise.
    pub allocated_peak_bytes: u64,
    /// Highest requested (unrounded) bytes, likewise.
    pub requested_peak_bytes: u64,
    /// It runs out of memory.
    pub oom: bool,
    /// The request that runs out: its row in the reference run's file.
    pub oom_row: Option<u32>,
    /// Why it runs out: `fragmentation` (enough memory in all, not in one
    /// piece) or `exhaustion`.
    pub cause: Option<OomCause>,
    /// The bytes that request asks for at this size.
    pub oom_requested_bytes: Option<u64>,
    /// The request's stack (innermost first, library frames folded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub oom_stack: Vec<String>,
    /// Allocations retried after freeing the cache (`num_alloc_retries`).
    pub alloc_retries: u64,
    /// Library workspaces that did not fit and were done without (the run
    /// goes on, as cuDNN's fallback does; PyTorch counts them in
    /// `num_ooms`).
    #[serde(default)]
    pub survived_ooms: u64,
}

/// One run as the answer names it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RunSummary {
    /// Its name.
    pub name: String,
    /// Its size.
    pub size: u64,
    /// Allocations in its program.
    pub allocations: usize,
    /// Of them, matched to the reference run.
    pub matched: usize,
    /// Its recorded reserved peak.
    pub reserved_peak_bytes: Option<u64>,
}

/// Allocations with one stack that exist in some runs only.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Unmatched {
    /// The run they are in.
    pub run: String,
    /// How many.
    pub count: usize,
    /// Their requested bytes, added up.
    pub bytes: u64,
    /// Their stack (innermost first, library frames folded).
    pub stack: Vec<String>,
}

/// A size that fails below one that fits.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Dip {
    /// Runs out of memory.
    pub fails: u64,
    /// The next larger size tried, which fits.
    pub fits: u64,
}

/// The answer of `vramscope predict --json`. Fields are only ever added.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PredictReport {
    /// One per size asked for (`--at`), then the largest that fits and the
    /// first size above it that does not (`--largest`).
    pub predictions: Vec<SizePrediction>,
    /// The largest size that fits under the capacity (`--largest`); `null`
    /// when not asked, or when even the smallest size runs out.
    pub largest_fitting_size: Option<u64>,
    /// Allocations matched in every run, over the most any run has.
    pub matched_fraction: f64,
    /// `"linear"` (two runs, or sizes at most linear), `"quadratic"`,
    /// `"polynomial"` (four runs or more, a degree above 2), or
    /// `"one-run"`.
    pub fit: String,
    /// What to know about the answer.
    pub notes: Vec<String>,
    /// CUDA device index.
    pub device: u32,
    /// The capacity predicted under.
    pub capacity_bytes: Option<u64>,
    /// Where it came from: `given`, `per_process_memory_fraction` or
    /// `device_total`.
    pub capacity_source: Option<String>,
    /// The settings string predicted with.
    pub alloc_conf: String,
    /// `high` (matched runs), `low` (one run).
    pub confidence: String,
    /// The runs, largest size first (the first is the reference).
    pub runs: Vec<RunSummary>,
    /// Allocations found in some runs only, by stack, most first.
    pub unmatched: Vec<Unmatched>,
    /// The search's step.
    pub step: Option<u64>,
    /// Every size the search replayed, with whether it fits.
    pub searched: Vec<(u64, bool)>,
    /// Sizes that run out below a size that fits.
    pub non_monotonic: Vec<Dip>,
    /// Matched allocations by the degree of their fit (0 constant, 1
    /// linear, 2 quadratic, ...).
    pub fit_degrees: Vec<usize>,
}

/// The matched program of the reference run, ready to be replayed at any
/// size.
#[derive(Debug)]
pub struct Model<'a> {
    reference: Run<'a>,
    device: u32,
    program: Program,
    /// One per distinct fit; `fit_of[allocation]` indexes it.
    fits: Vec<Fit>,
    fit_of: Vec<u32>,
    /// A failure of this allocation is survived (a library workspace: the
    /// library falls back to a plan that needs less).
    tolerant: Vec<bool>,
    one_run: bool,
    /// Allocations that follow no polynomial of the size (library workspaces).
    workspaces: usize,
    /// The largest recorded size.
    largest_recorded: u64,
    matched_fraction: f64,
    fit_degrees: Vec<usize>,
    runs: Vec<RunSummary>,
    unmatched: Vec<Unmatched>,
    notes: Vec<String>,
}

/// The largest request a fitted size may stand for.
const MAX_REQUEST_BYTES: u64 = 1 << 50;

impl<'a> Model<'a> {
    /// Match the runs and fit every allocation's size.
    pub fn build(runs: &[Run<'a>], device: Option<u32>) -> Result<Model<'a>, PredictError> {
        let (runs, device, devices, stats) = checked_runs(runs, device)?;
        let programs: Vec<Program> = runs.iter().zip(&devices).map(|(r, d)| Program::of(r.snapshot, d)).collect();
        let reference = runs[0];
        let matching = matching::match_runs(&runs, &programs, &stats);
        let one_run = runs.len() == 1;
        let scales = one_run.then(|| scaled_allocations(reference, devices[0], &programs[0]));
        let knobs: Vec<u64> = runs.iter().map(|r| r.size).collect();
        let fitted = fit_sizes(&matching, &knobs, scales.as_deref(), &programs[0].freed_before_the_next_allocation());
        let n = programs[0].allocations.len();
        let most = matching.runs.iter().map(|r| r.allocations).max().unwrap_or(0);
        let matched_count = matching.matched_in_all.iter().filter(|m| **m).count();
        let matched_fraction = if one_run || most == 0 { 1.0 } else { matched_count as f64 / most as f64 };
        let workspaces = fitted.workspaces;
        let survived = fitted.tolerant.iter().filter(|t| **t).count();
        let mut notes = Vec::new();
        if workspaces > 0 {
            notes.push(format!(
                "{workspaces} allocations of the reference run follow no polynomial of the size across the runs \
                 (library workspaces chosen per shape, as cuDNN's): each on a line where its sizes in every run lie \
                 on one, else in proportion to the size; under a capacity a failed one is survived, as cuDNN falls \
                 back to a plan with a smaller workspace, where it is scratch freed before the next allocation \
                 ({survived} of them; one that others are made beside, as an RNN's reserve space, runs out)"
            ));
        }
        if let Some(scales) = &scales {
            let scaled = scales.iter().filter(|s| **s).count();
            notes.push(format!(
                "one run: {scaled} of {n} allocations (what the breakdown classes as activations and temporaries) \
                 are scaled by the size's ratio, the rest (parameters, gradients, optimizer state, workspaces) stays; \
                 lower confidence: record a second size for an exact fit"
            ));
        } else if runs.len() == 2 {
            notes.push(
                "two runs show at most linear growth: a size that grows faster (attention scores in the sequence \
                 length) is under-predicted; record a third size to see it"
                    .to_owned(),
            );
        }
        let partly = n - matched_count - workspaces;
        if partly > 0 && !one_run {
            notes.push(format!(
                "{partly} of the reference run's {n} allocations are in some runs only: fitted through the runs \
                 that have them (see the allocations not in every run)"
            ));
        }
        notes.extend(recording_notes(&runs, &programs));
        Ok(Model {
            reference,
            device,
            program: programs.into_iter().next().unwrap_or_default(),
            fits: fitted.fits,
            fit_of: fitted.fit_of,
            tolerant: fitted.tolerant,
            one_run,
            workspaces,
            largest_recorded: knobs.iter().copied().max().unwrap_or(0),
            matched_fraction,
            fit_degrees: fitted.degrees,
            runs: matching.runs,
            unmatched: matching.unmatched,
            notes,
        })
    }

    /// The CUDA device predicted.
    pub fn device(&self) -> u32 {
        self.device
    }

    /// Events of the program replayed at each size.
    pub fn events(&self) -> u64 {
        self.program.events.len() as u64
    }

    /// The recorded sizes, largest first.
    pub fn recorded_sizes(&self) -> Vec<u64> {
        self.runs.iter().map(|r| r.size).collect()
    }

    /// Every allocation's requested bytes at `size`, and how many were
    /// clamped at 0 or computed approximately.
    fn sizes_at(&self, size: u64) -> (Vec<u64>, usize, usize) {
        let values: Vec<fit::Value> = self.fits.iter().map(|f| f.at(size)).collect();
        let clamped = self.fit_of.iter().filter(|&&f| values[f as usize].clamped).count();
        let approximate = self.fit_of.iter().filter(|&&f| values[f as usize].approximate).count();
        // No request is larger than a GPU (the model refuses over 2^50
        // bytes anyway); the bound keeps sums of them from overflowing.
        let bytes = self.fit_of.iter().map(|&f| values[f as usize].bytes.min(MAX_REQUEST_BYTES)).collect();
        (bytes, clamped, approximate)
    }

    /// The highest sum of live rounded requests at `size`: a floor under
    /// any allocator's reserved peak, found without replaying (a size whose
    /// floor is over the capacity runs out for sure). Library workspaces,
    /// which the replay may do without, are left out of it.
    pub fn floor_bytes(&self, size: u64, config: &AllocatorConfig) -> u64 {
        let (sizes, ..) = self.sizes_at(size);
        let (mut live, mut peak) = (0u64, 0u64);
        for e in self.program.events.iter().filter(|e| !self.tolerant[e.allocation as usize]) {
            let s = sizes[e.allocation as usize];
            match e.op {
                Op::Alloc => {
                    live = live.saturating_add(round_size(s, config));
                    peak = peak.max(live);
                }
                Op::FreeCompleted => live = live.saturating_sub(round_size(s, config)),
                Op::FreeRequested | Op::EmptyCache => {}
            }
        }
        peak
    }

    /// Replay the program at `size` through the allocator model.
    pub fn replay(&self, size: u64, config: &AllocatorConfig, capacity: Option<u64>) -> SizePrediction {
        let (sizes, ..) = self.sizes_at(size);
        let allocations = &self.program.allocations;
        let mut allocator = CachingAllocator::new(config.clone(), capacity);
        let mut live: Vec<Option<crate::simulate::Allocation>> = vec![None; allocations.len()];
        let mut failed = None;
        let mut survived = 0;
        for e in &self.program.events {
            let a = e.allocation as usize;
            match e.op {
                Op::Alloc => match allocator.malloc(sizes[a], allocations[a].stream) {
                    Ok(block) => live[a] = Some(block),
                    Err(_) if self.tolerant[a] => survived += 1,
                    Err(oom) => {
                        failed = Some((a, oom));
                        break;
                    }
                },
                Op::FreeRequested => {
                    if let Some(block) = live[a] {
                        allocator.request_free(block);
                    }
                }
                Op::FreeCompleted => {
                    if let Some(block) = live[a].take() {
                        allocator.complete_free(block);
                    }
                }
                Op::EmptyCache => allocator.release_cached_blocks(),
            }
        }
        let stats = allocator.stats();
        let (oom_row, cause, oom_requested_bytes, oom_stack) = match failed {
            Some((a, oom)) => {
                let allocated = stats.allocated_bytes.current;
                // Enough memory in all (the capacity less what is allocated),
                // yet no piece of it large enough: fragmentation.
                let cause = match capacity {
                    Some(c) if allocated.saturating_add(oom.rounded_bytes) <= c => OomCause::Fragmentation,
                    _ => OomCause::Exhaustion,
                };
                let stack = stack_text(self.reference.snapshot, allocations[a].stack);
                (Some(allocations[a].row), Some(cause), Some(oom.requested_bytes), shown_frames(&stack))
            }
            None => (None, None, None, Vec::new()),
        };
        SizePrediction {
            size,
            device: self.device,
            reserved_peak_bytes: stats.reserved_bytes.peak,
            allocated_peak_bytes: stats.allocated_bytes.peak,
            requested_peak_bytes: stats.requested_bytes.peak,
            oom: failed.is_some(),
            oom_row,
            cause,
            oom_requested_bytes,
            oom_stack,
            alloc_retries: stats.num_alloc_retries,
            survived_ooms: survived,
        }
    }
}

/// The runs' traces of one device, after the checks every prediction
/// needs: sizes positive and distinct (sorted largest first: the first is
/// the reference), a trace on the device in every run, none wrapped.
type CheckedRuns<'a> = (Vec<Run<'a>>, u32, Vec<&'a DeviceSnapshot>, Vec<DeviceStats>);

fn checked_runs<'a>(runs: &[Run<'a>], device: Option<u32>) -> Result<CheckedRuns<'a>, PredictError> {
    let mut runs = runs.to_vec();
    if runs.is_empty() {
        return Err(PredictError::NoRuns);
    }
    if let Some(r) = runs.iter().find(|r| r.size == 0) {
        return Err(PredictError::ZeroSize { run: r.name.to_owned() });
    }
    runs.sort_by_key(|r| std::cmp::Reverse(r.size));
    if let Some(w) = runs.windows(2).find(|w| w[0].size == w[1].size) {
        return Err(PredictError::SameSize {
            first: w[1].name.to_owned(),
            second: w[0].name.to_owned(),
            size: w[0].size,
        });
    }
    let reference = runs[0];
    let device = match device {
        Some(d) => d,
        None => reference
            .snapshot
            .devices
            .iter()
            .find(|d| !d.trace.is_empty())
            .map(|d| d.device)
            .ok_or_else(|| PredictError::NoDevice { run: reference.name.to_owned() })?,
    };
    let devices: Vec<&DeviceSnapshot> = runs
        .iter()
        .map(|r| {
            let d = r.snapshot.device(device).filter(|d| !d.trace.is_empty());
            d.ok_or_else(|| PredictError::NoTrace { run: r.name.to_owned(), device })
        })
        .collect::<Result<_, _>>()?;
    let stats: Vec<DeviceStats> = devices.iter().map(|d| DeviceStats::of(d)).collect();
    let longest_whole = runs.iter().zip(&stats).filter(|(_, s)| !s.trace_wrapped).map(|(_, s)| s.trace_entries).max();
    if let Some((r, s)) = runs.iter().zip(&stats).find(|(_, s)| s.trace_wrapped) {
        let wanted = (4 * s.trace_entries).max(2 * longest_whole.unwrap_or(0)) as u64;
        return Err(PredictError::TraceWrapped {
            run: r.name.to_owned(),
            device,
            entries: s.trace_entries,
            suggested: round_up_to_leading_digit(wanted.max(100_000)),
        });
    }
    Ok((runs, device, devices, stats))
}

/// The fits of a matching: one per distinct fit, and which each allocation
/// follows.
struct Fitted {
    fits: Vec<Fit>,
    fit_of: Vec<u32>,
    /// Matched allocations by the degree of their fit.
    degrees: Vec<usize>,
    /// Library workspaces chosen per shape: a failure is survived.
    tolerant: Vec<bool>,
    /// Allocations taken for library workspaces (paired by place, or in
    /// the reference only), survived or not.
    workspaces: usize,
}

/// Each reference allocation's size as a function of the knob: the exact
/// polynomial through the runs that have it; a library workspace (paired by
/// place, or in the reference only) on a line where its sizes in every run
/// lie on one, else in proportion to the knob; with one run (`scales`),
/// what grows with the batch in proportion, the rest constant. `scratch`:
/// the reference's allocations freed before its next allocation.
fn fit_sizes(m: &matching::Matching, knobs: &[u64], scales: Option<&[bool]>, scratch: &[bool]) -> Fitted {
    let reference = knobs[0];
    let one_run = knobs.len() == 1;
    let mut ids: FxHashMap<Fit, u32> = FxHashMap::default();
    let mut out = Fitted {
        fits: Vec::new(),
        fit_of: Vec::with_capacity(m.sizes.len()),
        degrees: Vec::new(),
        tolerant: Vec::new(),
        workspaces: 0,
    };
    for (a, row) in m.sizes.iter().enumerate() {
        let known: Vec<(u64, u64)> = knobs.iter().zip(row).filter_map(|(&x, s)| Some((x, (*s)?))).collect();
        let in_proportion = vec![(0, 0), (reference, row[0].unwrap_or(0))];
        let workspace = !one_run && (m.loose[a] || row[1..].iter().all(Option::is_none));
        let points = match scales {
            Some(scales) if scales[a] => in_proportion,
            Some(_) => known,
            None if workspace => {
                if known.len() == knobs.len() && known.len() > 2 && Fit::through(&known).degree() <= 1 {
                    known
                } else {
                    in_proportion
                }
            }
            None => known,
        };
        let fit = Fit::through(&points);
        if m.matched_in_all[a] && !one_run {
            let d = fit.degree();
            if out.degrees.len() <= d {
                out.degrees.resize(d + 1, 0);
            }
            out.degrees[d] += 1;
        }
        let next = out.fits.len() as u32;
        let id = *ids.entry(fit.clone()).or_insert_with(|| {
            out.fits.push(fit);
            next
        });
        out.fit_of.push(id);
        out.workspaces += usize::from(workspace);
        // A failure is survived only for scratch freed before anything else
        // is allocated (a convolution's workspace: cuDNN tries the next
        // plan). A workspace-like allocation that others are made beside
        // holds state the rest of the step needs (cuDNN's RNN reserve
        // space, made during its forward workspace and kept for the
        // backward): without it the step cannot go on, so its failure runs
        // out of memory (the H100's LSTM at 1792 under 2 GiB did, where the
        // model had survived it).
        out.tolerant.push(workspace && scratch[a]);
    }
    out
}

/// What the runs' recordings say that the answer should: failed requests,
/// lost frees, CUDA graph pools, differing settings.
fn recording_notes(runs: &[Run<'_>], programs: &[Program]) -> Vec<String> {
    let mut notes = Vec::new();
    for (run, p) in runs.iter().zip(programs) {
        if p.recorded_ooms > 0 {
            let requests = if p.recorded_ooms == 1 { "request" } else { "requests" };
            notes.push(format!(
                "{}: {} {requests} ran out of memory in the recorded run; left out",
                run.name, p.recorded_ooms
            ));
        }
        if p.unmatched_frees > 0 {
            let frees =
                if p.unmatched_frees == 1 { "free of an unknown address is" } else { "frees of unknown addresses are" };
            notes.push(format!("{}: {} {frees} left out", run.name, p.unmatched_frees));
        }
    }
    if programs.iter().any(|p| p.private_pools) {
        notes.push(
            "a run used a CUDA graph's private pool: predictions send every request to the default pool".to_owned(),
        );
    }
    let confs: Vec<Option<&str>> =
        runs.iter().map(|r| r.snapshot.allocator_settings.as_ref().and_then(|s| s.alloc_conf.as_deref())).collect();
    if confs.windows(2).any(|w| w[0] != w[1]) {
        notes.push(format!(
            "the runs were recorded with different allocator settings; predicting with {}'s",
            runs[0].name
        ));
    }
    notes
}

/// Predict: build the model, replay at each size asked for, and search for
/// the largest that fits. `replay_many` replays a batch of sizes (in
/// parallel where the caller can; [`replay_sequentially`] otherwise).
pub fn predict(
    runs: &[Run<'_>],
    options: &PredictOptions,
    replay_many: search::ReplayMany<'_>,
) -> Result<PredictReport, PredictError> {
    if options.at.is_empty() && !options.largest {
        return Err(PredictError::NothingAsked);
    }
    if let Some(conf) = &options.alloc_conf {
        AllocatorConfig::parse(conf)?;
    }
    let model = Model::build(runs, options.device)?;
    predict_with_model(&model, options, replay_many)
}

/// [`predict`] with the model built already (the settings' comparison
/// reuses it).
fn predict_with_model(
    model: &Model<'_>,
    options: &PredictOptions,
    replay_many: search::ReplayMany<'_>,
) -> Result<PredictReport, PredictError> {
    let reference = model.reference.snapshot;
    let (config, alloc_conf) = settings_for(reference, options.alloc_conf.as_deref())?;
    let mut notes = model.notes.clone();
    notes.extend(config.not_modelled.iter().map(|s| format!("setting not modelled (PyTorch's default used): {s}")));
    let cuda_total = reference
        .capture
        .as_ref()
        .and_then(|c| c.devices.iter().find(|d| d.device == model.device))
        .and_then(|d| d.cuda_total_bytes);
    let (capacity, capacity_source) = match (options.capacity, config.capacity_for(cuda_total)) {
        (Some(c), _) => (Some(c), Some("given")),
        (None, Some(c)) => (Some(c), Some("per_process_memory_fraction")),
        (None, None) if options.largest => match cuda_total {
            Some(total) => {
                notes.push(
                    "capacity: the device's whole memory as CUDA reports it; the CUDA context and other libraries \
                     take some of it, so give --capacity for a tighter answer"
                        .to_owned(),
                );
                (Some(total), Some("device_total"))
            }
            None => return Err(PredictError::NoCapacity),
        },
        (None, None) => (None, None),
    };

    let mut predictions = replay_many(model, &options.at, &config, capacity);
    let (mut step, mut searched, mut non_monotonic, mut largest_fitting_size) = (None, Vec::new(), Vec::new(), None);
    if options.largest
        && let Some(cap) = capacity
    {
        let found = search::largest(model, &config, cap, options.step, None, replay_many);
        notes.extend(found.notes);
        step = Some(found.step);
        searched = found.tried.iter().map(|p| (p.size, !p.oom)).collect();
        non_monotonic = found.dips;
        largest_fitting_size = found.largest.as_ref().map(|p| p.size);
        predictions.extend(found.largest);
        predictions.extend(found.first_failure);
    }
    for p in &predictions {
        let (_, clamped, approximate) = model.sizes_at(p.size);
        if clamped > 0 {
            notes.push(format!(
                "size {}: {clamped} allocations shrink with the size and were extrapolated below 0 bytes (taken as 0)",
                p.size
            ));
        }
        if approximate > 0 {
            notes.push(format!("size {}: {approximate} sizes computed in floating point (overflow)", p.size));
        }
    }
    // A library picks its plan per shape: a workspace whose sizes lie on a
    // line across the records may leave it at a size far beyond them (on an
    // H100, cuDNN's LSTM workspace grew 352 KiB a step from 64 to 192 and
    // 256 KiB a step at 768 and 1536), and nothing in the records shows it.
    let farthest = largest_fitting_size.or_else(|| options.at.iter().copied().max());
    if let Some(size) = farthest.filter(|s| model.workspaces > 0 && *s > 2 * model.largest_recorded) {
        notes.push(format!(
            "size {size} is over twice the largest recorded ({}): the {} library workspaces may follow another plan \
             there, which the records cannot show; to be sure, record a run at {size}",
            model.largest_recorded, model.workspaces
        ));
    }
    let max_degree = model.fit_degrees.len().saturating_sub(1);
    Ok(PredictReport {
        predictions,
        largest_fitting_size,
        matched_fraction: model.matched_fraction,
        fit: if model.one_run {
            "one-run"
        } else {
            match max_degree {
                0 | 1 => "linear",
                2 => "quadratic",
                _ => "polynomial",
            }
        }
        .to_owned(),
        notes,
        device: model.device,
        capacity_bytes: capacity,
        capacity_source: capacity_source.map(str::to_owned),
        alloc_conf,
        confidence: if model.one_run { "low" } else { "high" }.to_owned(),
        runs: model.runs.clone(),
        unmatched: model.unmatched.clone(),
        step,
        searched,
        non_monotonic,
        fit_degrees: model.fit_degrees.clone(),
    })
}

/// Replay sizes one after the other (the browser, and tests).
pub fn replay_sequentially(
    model: &Model<'_>,
    sizes: &[u64],
    config: &AllocatorConfig,
    capacity: Option<u64>,
) -> Vec<SizePrediction> {
    sizes.iter().map(|&s| model.replay(s, config, capacity)).collect()
}

/// Replay sizes on every core, a share of the sizes each (native only: the
/// browser has no threads here).
#[cfg(not(target_arch = "wasm32"))]
pub fn replay_in_parallel(
    model: &Model<'_>,
    sizes: &[u64],
    config: &AllocatorConfig,
    capacity: Option<u64>,
) -> Vec<SizePrediction> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(sizes.len());
    if threads <= 1 {
        return replay_sequentially(model, sizes, config, capacity);
    }
    let mut out: Vec<Option<SizePrediction>> = vec![None; sizes.len()];
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    // Interleaved, so that sizes of one cost spread evenly.
                    (t..sizes.len())
                        .step_by(threads)
                        .map(|i| (i, model.replay(sizes[i], config, capacity)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for w in workers {
            // A replay does not panic; if one did, its sizes are replayed here.
            for (i, p) in w.join().unwrap_or_default() {
                out[i] = Some(p);
            }
        }
    });
    out.into_iter().zip(sizes).map(|(p, &s)| p.unwrap_or_else(|| model.replay(s, config, capacity))).collect()
}

/// Up to eight frames worth reading, innermost first.
pub(crate) fn shown_frames(stack: &[FrameText]) -> Vec<String> {
    stack.iter().filter(|f| !f.is_noise()).take(8).map(FrameText::display).collect()
}

/// Which allocations of a single run grow with the size: what the breakdown
/// classes as activations or temporaries.
fn scaled_allocations(run: Run<'_>, device: &DeviceSnapshot, program: &Program) -> Vec<bool> {
    let index = DeviceIntervals::build(device);
    let grows = DeviceCategories::grows_with_batch(run.snapshot, device, &index);
    // The index lists allocations by their alloc row; the program too.
    let by_row: FxHashMap<u32, bool> =
        index.allocations.as_slice().iter().zip(&grows).filter_map(|(a, g)| Some((a.alloc_row.get()?, *g))).collect();
    program.allocations.iter().map(|a| by_row.get(&a.row).copied().unwrap_or(false)).collect()
}

/// `n` rounded up to one significant digit (4_123_456 → 5_000_000).
fn round_up_to_leading_digit(n: u64) -> u64 {
    let mut unit = 1u64;
    while n / unit >= 10 {
        unit *= 10;
    }
    n.div_ceil(unit) * unit
}

#[cfg(test)]
mod tests;
