//! Where the memory went: live memory split into parameters, gradients,
//! optimizer state, activations and other, at any trace row and over the
//! whole trace, plus the same memory by `record_function` range (stage).
//!
//! A snapshot does not label tensors, so every category is inferred, from
//! two kinds of evidence:
//!
//! - **The stack of each allocation** gives its context: module set-up
//!   (`Module._apply`/`to`/`cuda`, a module's `__init__`, `reset_parameters`,
//!   `torch.nn.init`, `load_state_dict`), an optimizer (`torch/optim/`
//!   frames; `_init_group` creates its state), the backward pass (autograd's
//!   engine thread: its C++ frames under `stacks="all"`, or no Python frame
//!   at all under `stacks="python"`, since that thread runs no Python), a
//!   module's `forward`, cuBLAS workspaces (C++ frames only), or plain code.
//! - **The allocation's lifetime** against the pass structure those contexts
//!   draw: a *backward region* is a run of backward allocations up to the
//!   next forward, set-up or optimizer allocation; an *optimizer region*
//!   likewise.
//!
//! The rules:
//!
//! | category | rule | confidence |
//! |---|---|---|
//! | parameters | allocated in module set-up | high |
//! | optimizer state | allocated in an optimizer step and alive after it | high under `_init_group`, else medium |
//! | gradients | allocated in a backward region, alive after it, and the size of a parameter | high with autograd's frames, medium from a frameless thread |
//! | activations | allocated before a backward region and alive into it, until the next backward region begins (a tensor that outlives a whole step is not an activation of it) | medium |
//! | other | the rest: temporaries, cuBLAS workspaces, what outlives a step, what has no stack | — |
//!
//! When a trace ends inside a forward pass, what that pass allocated and
//! still holds counts as activations (its backward is not in the trace).
//! Sizes are requested bytes, as `untyped_storage().nbytes()` counts them.
//!
//! Checked against the truth on an H200 (`tests/gpu/breakdown_job.py`:
//! parameters, gradients and optimizer state read from the model and the
//! optimizer beside each snapshot).

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use super::{FrameText, stack_text};
use crate::intervals::{Allocation, DeviceIntervals};
use crate::snapshot::{AnnotationStage, DeviceSnapshot, Snapshot, StackId};

/// The categories, in the order they are stacked in charts.
pub const CATEGORIES: [Category; 5] =
    [Category::Parameters, Category::Gradients, Category::OptimizerState, Category::Activations, Category::Other];

/// What a live allocation holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Model weights.
    Parameters,
    /// Parameters' gradients.
    Gradients,
    /// An optimizer's state (Adam's moments, momentum buffers).
    OptimizerState,
    /// Tensors the forward pass keeps for the backward pass.
    Activations,
    /// Temporaries, workspaces, caches, and what cannot be told.
    Other,
}

impl Category {
    /// The JSON name (`optimizer_state`).
    pub fn key(self) -> &'static str {
        match self {
            Category::Parameters => "parameters",
            Category::Gradients => "gradients",
            Category::OptimizerState => "optimizer_state",
            Category::Activations => "activations",
            Category::Other => "other",
        }
    }

    /// The name for people.
    pub fn label(self) -> &'static str {
        match self {
            Category::Parameters => "parameters",
            Category::Gradients => "gradients",
            Category::OptimizerState => "optimizer state",
            Category::Activations => "activations",
            Category::Other => "other",
        }
    }

    fn slot(self) -> usize {
        self as usize
    }
}

/// Bytes per category; the JSON object of `vramscope breakdown`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Categories {
    /// Model weights.
    pub parameters: u64,
    /// Gradients.
    pub gradients: u64,
    /// Optimizer state.
    pub optimizer_state: u64,
    /// Activations.
    pub activations: u64,
    /// Everything else.
    pub other: u64,
}

impl Categories {
    /// The bytes of one category.
    pub fn get(&self, c: Category) -> u64 {
        match c {
            Category::Parameters => self.parameters,
            Category::Gradients => self.gradients,
            Category::OptimizerState => self.optimizer_state,
            Category::Activations => self.activations,
            Category::Other => self.other,
        }
    }

    fn add(&mut self, c: Category, bytes: u64) {
        let slot = match c {
            Category::Parameters => &mut self.parameters,
            Category::Gradients => &mut self.gradients,
            Category::OptimizerState => &mut self.optimizer_state,
            Category::Activations => &mut self.activations,
            Category::Other => &mut self.other,
        };
        *slot += bytes;
    }

    /// All categories together: the live requested bytes.
    pub fn total(&self) -> u64 {
        CATEGORIES.iter().map(|&c| self.get(c)).sum()
    }
}

/// How sure a category's figure is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    /// Nothing of the category is live, or nothing could be told.
    None,
    /// Inferred from lifetimes or from a thread without frames.
    Medium,
    /// Named by the allocation's own stack.
    High,
}

/// What "other" holds, by the reason it is not one of the named categories.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OtherDetail {
    /// Freed before the backward pass, the end of their pass, or the step.
    pub temporaries: u64,
    /// cuBLAS/cuBLASLt workspaces (named only by C++ frames).
    pub workspaces: u64,
    /// Alive across more than one step: caches, buffers kept by the
    /// program, or a leak (see `vramscope leaks`).
    pub kept_across_steps: u64,
    /// No stack to tell from: allocated before the trace began, or
    /// recorded without stacks.
    pub unknown: u64,
}

/// Bytes alive at a row by the `record_function` range open when they were
/// allocated (the innermost one).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageBytes {
    /// The range's name; `(no range)` for allocations outside every range.
    pub name: String,
    /// Requested bytes alive.
    pub bytes: u64,
}

/// One device's breakdown at one row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceBreakdown {
    /// CUDA device index.
    pub device: u32,
    /// The trace row: the memory right after it (`None`: no trace, the
    /// snapshot's final state).
    pub at_row: Option<u32>,
    /// Bytes per category.
    pub categories: Categories,
    /// How sure each category is, in the same shape.
    pub confidence: CategoryConfidence,
    /// What "other" holds.
    pub other_detail: OtherDetail,
    /// Bytes by the stage that allocated them, largest first.
    pub stages: Vec<StageBytes>,
    /// Why a figure may be off, in words.
    pub notes: Vec<String>,
}

impl Confidence {
    /// Where a figure of this confidence comes from, in words (empty for
    /// [`Confidence::None`]).
    pub fn source(self) -> &'static str {
        match self {
            Confidence::High => "from stacks",
            Confidence::Medium => "inferred from lifetimes",
            Confidence::None => "",
        }
    }
}

/// A [`Confidence`] per category.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CategoryConfidence {
    /// Parameters.
    pub parameters: Confidence,
    /// Gradients.
    pub gradients: Confidence,
    /// Optimizer state.
    pub optimizer_state: Confidence,
    /// Activations.
    pub activations: Confidence,
}

impl CategoryConfidence {
    /// The confidence of one category; "other" is no claim: [`Confidence::None`].
    pub fn get(&self, c: Category) -> Confidence {
        match c {
            Category::Parameters => self.parameters,
            Category::Gradients => self.gradients,
            Category::OptimizerState => self.optimizer_state,
            Category::Activations => self.activations,
            Category::Other => Confidence::None,
        }
    }
}

/// Bytes per category at evenly spaced rows: a stacked chart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakdownSeries {
    /// The rows sampled (the memory right after each).
    pub rows: Vec<u32>,
    /// One list per category, in [`CATEGORIES`] order, one value per row.
    pub parameters: Vec<u64>,
    /// Gradients.
    pub gradients: Vec<u64>,
    /// Optimizer state.
    pub optimizer_state: Vec<u64>,
    /// Activations.
    pub activations: Vec<u64>,
    /// Other.
    pub other: Vec<u64>,
}

/// Where an allocation was made, from its stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Context {
    Setup,
    OptimizerInit,
    Optimizer,
    Backward { framed: bool },
    Forward,
    Workspace,
    Plain,
    NoFrames,
}

impl Context {
    fn of(frames: &[FrameText], frameless_is_backward: bool) -> Context {
        if frames.is_empty() {
            return if frameless_is_backward { Context::Backward { framed: false } } else { Context::NoFrames };
        }
        let any = |f: &dyn Fn(&FrameText) -> bool| frames.iter().any(f);
        if any(&|f| f.name.contains("setWorkspaceForHandle") || f.name.contains("getCUDABlasLtWorkspace")) {
            return Context::Workspace;
        }
        if any(&|f| f.filename.contains("torch/optim/")) {
            return if any(&|f| f.name == "_init_group") { Context::OptimizerInit } else { Context::Optimizer };
        }
        if any(&|f| {
            f.name.contains("torch::autograd::Engine")
                || (f.filename.ends_with("torch/autograd/__init__.py") && f.name == "backward")
                || f.name == "_engine_run_backward"
        }) {
            return Context::Backward { framed: true };
        }
        let python = frames.iter().any(FrameText::is_python);
        if !python {
            // C++ frames only, none of autograd's: a thread of a library.
            return Context::Plain;
        }
        if any(&|f| {
            let module = f.filename.ends_with("torch/nn/modules/module.py");
            (module
                && matches!(
                    f.name.as_str(),
                    "_apply"
                        | "to"
                        | "cuda"
                        | "to_empty"
                        | "load_state_dict"
                        | "_load_from_state_dict"
                        | "half"
                        | "bfloat16"
                        | "float"
                        | "double"
                ))
                || (f.filename.contains("torch/nn/modules/") && f.name == "__init__")
                || f.name == "reset_parameters"
                || f.filename.ends_with("torch/nn/init.py")
                || f.filename.ends_with("torch/nn/parameter.py")
        }) {
            return Context::Setup;
        }
        if any(&|f| {
            f.name == "forward" || (f.filename.ends_with("torch/nn/modules/module.py") && f.name == "_call_impl")
        }) {
            return Context::Forward;
        }
        Context::Plain
    }

    /// Which pass a context marks, for the regions.
    fn pass(self) -> Option<Pass> {
        match self {
            Context::Setup => Some(Pass::Setup),
            Context::OptimizerInit | Context::Optimizer => Some(Pass::Optimizer),
            Context::Backward { .. } => Some(Pass::Backward),
            Context::Forward => Some(Pass::Forward),
            Context::Workspace | Context::Plain | Context::NoFrames => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    Setup,
    Forward,
    Backward,
    Optimizer,
}

/// Row ranges `[start, end)` of consecutive allocations of one pass.
#[derive(Clone, Copy, Debug)]
struct Region {
    start: u32,
    end: u32,
}

/// Why an allocation is in "other".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OtherReason {
    Temporary,
    Workspace,
    Kept,
    Unknown,
}

/// One allocation's category over a row range `[start, end)`.
#[derive(Clone, Copy, Debug)]
struct Span {
    start: u32,
    end: u32,
    size: u64,
    category: Category,
    other: OtherReason,
    confidence: Confidence,
    stage: u32,
}

/// A device's allocations, each with its category over its life: built once,
/// then asked at any row.
#[derive(Debug)]
pub struct DeviceCategories {
    device: u32,
    rows: u32,
    spans: Vec<Span>,
    stage_names: Vec<String>,
    notes: Vec<String>,
}

/// Stage index of allocations made outside every range.
const NO_STAGE: u32 = 0;

impl DeviceCategories {
    /// Classify every allocation of a device (see the module doc).
    pub fn build(snapshot: &Snapshot, device: &DeviceSnapshot, index: &DeviceIntervals) -> DeviceCategories {
        DeviceCategories::build_with(snapshot, device, index, |_, _, _| {})
    }

    /// For each allocation of `index` (in its order), whether its memory
    /// grows with the batch: what the breakdown classes, when it is made,
    /// as activations or temporaries (parameters, gradients, optimizer
    /// state, workspaces and what is kept across steps do not).
    pub fn grows_with_batch(snapshot: &Snapshot, device: &DeviceSnapshot, index: &DeviceIntervals) -> Vec<bool> {
        let mut grows = vec![false; index.allocations.len()];
        let mut classified = vec![false; index.allocations.len()];
        DeviceCategories::build_with(snapshot, device, index, |i, category, other| {
            if !std::mem::replace(&mut classified[i], true) {
                grows[i] =
                    matches!((category, other), (Category::Activations, _) | (Category::Other, OtherReason::Temporary));
            }
        });
        grows
    }

    /// [`DeviceCategories::build`], telling `seen` each span's allocation
    /// (its index in `index`), category and reason, in order.
    fn build_with(
        snapshot: &Snapshot,
        device: &DeviceSnapshot,
        index: &DeviceIntervals,
        mut seen: impl FnMut(usize, Category, OtherReason),
    ) -> DeviceCategories {
        let rows = device.trace.len() as u32;
        let allocations = index.allocations.as_slice();
        let framed_somewhere = allocations.iter().any(|a| !snapshot.frames.stack(a.stack).is_empty());
        let mut contexts: FxHashMap<StackId, Context> = FxHashMap::default();
        let mut context = |stack: StackId| {
            *contexts.entry(stack).or_insert_with(|| Context::of(&stack_text(snapshot, stack), framed_somewhere))
        };
        let ctx: Vec<Context> = allocations.iter().map(|a| context(a.stack)).collect();

        // The pass structure: allocations of a pass in row order, runs cut
        // by another pass's allocation.
        let mut marks: Vec<(u32, Pass)> =
            allocations.iter().zip(&ctx).filter_map(|(a, c)| Some((a.alloc_row.get()?, c.pass()?))).collect();
        marks.sort_unstable_by_key(|m| m.0);
        let backward = pass_regions(&marks, Pass::Backward, rows);
        let optimizer = pass_regions(&marks, Pass::Optimizer, rows);
        let ends_in_forward = marks.last().is_some_and(|m| m.1 == Pass::Forward);
        let parameter_sizes: rustc_hash::FxHashSet<u64> =
            allocations.iter().zip(&ctx).filter(|(_, c)| **c == Context::Setup).map(|(a, _)| a.size).collect();

        let (stage_names, stages) = stages_of(snapshot, device, allocations);
        let mut spans = Vec::with_capacity(allocations.len());
        for (i, (a, &c)) in allocations.iter().zip(&ctx).enumerate() {
            let start = a.alloc_row.get().unwrap_or(0);
            let end = a.free_requested_row.get().or(a.free_completed_row.get()).map_or(u32::MAX, |r| r);
            let mut push = |start: u32, end: u32, category: Category, other: OtherReason, confidence: Confidence| {
                if start < end {
                    seen(i, category, other);
                    spans.push(Span { start, end, size: a.size, category, other, confidence, stage: stages[i] });
                }
            };
            // Regions are sorted and disjoint: binary searches, not scans
            // (a long run has thousands of steps and millions of allocations).
            let region_of = |regions: &[Region]| {
                let i = regions.partition_point(|r| r.start <= start);
                regions[..i].last().filter(|r| start < r.end).copied()
            };
            match c {
                Context::Setup => push(start, end, Category::Parameters, OtherReason::Temporary, Confidence::High),
                Context::OptimizerInit | Context::Optimizer => {
                    let region_end = region_of(&optimizer).map_or(rows, |r| r.end);
                    let confidence = if c == Context::OptimizerInit { Confidence::High } else { Confidence::Medium };
                    let outlives =
                        end > region_end && (end != u32::MAX || region_end < rows || c == Context::OptimizerInit);
                    if outlives {
                        push(start, end, Category::OptimizerState, OtherReason::Temporary, confidence);
                    } else {
                        push(start, end, Category::Other, OtherReason::Temporary, Confidence::High);
                    }
                }
                Context::Backward { framed } => {
                    let region_end = region_of(&backward).map_or(rows, |r| r.end);
                    let confidence = if framed { Confidence::High } else { Confidence::Medium };
                    if end > region_end && parameter_sizes.contains(&a.size) {
                        push(start, end, Category::Gradients, OtherReason::Temporary, confidence);
                    } else if end > region_end {
                        push(start, end, Category::Other, OtherReason::Kept, Confidence::Medium);
                    } else {
                        push(start, end, Category::Other, OtherReason::Temporary, Confidence::Medium);
                    }
                }
                Context::Forward | Context::Plain if a.alloc_row.is_some() => {
                    let i = backward.partition_point(|r| r.start <= start);
                    match (backward.get(i).map(|r| r.start), backward.get(i + 1).map(|r| r.start)) {
                        (Some(b1), b2) if end > b1 => {
                            let b2 = b2.unwrap_or(u32::MAX);
                            push(start, end.min(b2), Category::Activations, OtherReason::Temporary, Confidence::Medium);
                            push(b2, end, Category::Other, OtherReason::Kept, Confidence::Medium);
                        }
                        (None, _) if end == u32::MAX && ends_in_forward && c == Context::Forward => {
                            push(start, end, Category::Activations, OtherReason::Temporary, Confidence::Medium);
                        }
                        (None, _) if end == u32::MAX => {
                            push(start, end, Category::Other, OtherReason::Kept, Confidence::Medium)
                        }
                        _ => push(start, end, Category::Other, OtherReason::Temporary, Confidence::Medium),
                    }
                }
                Context::Workspace => push(start, end, Category::Other, OtherReason::Workspace, Confidence::High),
                Context::Forward | Context::Plain | Context::NoFrames => {
                    push(start, end, Category::Other, OtherReason::Unknown, Confidence::None)
                }
            }
        }

        let notes = category_notes(framed_somewhere, !allocations.is_empty(), !backward.is_empty(), device, rows);
        DeviceCategories { device: device.device, rows, spans, stage_names, notes }
    }

    /// The breakdown right after `row` (default: the last row).
    pub fn at(&self, row: Option<u32>) -> DeviceBreakdown {
        let at = row.unwrap_or(self.rows.saturating_sub(1)).min(self.rows.saturating_sub(1));
        let mut categories = Categories::default();
        let mut other_detail = OtherDetail::default();
        let mut best = [Confidence::None; 4];
        let mut by_stage: FxHashMap<u32, u64> = FxHashMap::default();
        for s in self.spans.iter().filter(|s| s.start <= at && at < s.end) {
            categories.add(s.category, s.size);
            *by_stage.entry(s.stage).or_default() += s.size;
            match s.category {
                Category::Other => match s.other {
                    OtherReason::Temporary => other_detail.temporaries += s.size,
                    OtherReason::Workspace => other_detail.workspaces += s.size,
                    OtherReason::Kept => other_detail.kept_across_steps += s.size,
                    OtherReason::Unknown => other_detail.unknown += s.size,
                },
                c => {
                    // The category is as sure as its least sure part that counts.
                    let slot = &mut best[c.slot()];
                    *slot = if *slot == Confidence::None { s.confidence } else { (*slot).min(s.confidence) };
                }
            }
        }
        let mut stages: Vec<StageBytes> = by_stage
            .into_iter()
            .map(|(stage, bytes)| StageBytes { name: self.stage_names[stage as usize].clone(), bytes })
            .collect();
        stages.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.name.cmp(&b.name)));
        DeviceBreakdown {
            device: self.device,
            at_row: (self.rows > 0).then_some(at),
            categories,
            confidence: CategoryConfidence {
                parameters: best[0],
                gradients: best[1],
                optimizer_state: best[2],
                activations: best[3],
            },
            other_detail,
            stages,
            notes: self.notes.clone(),
        }
    }

    /// About how much memory this holds (its spans, stage names and notes),
    /// for caches that count what they keep.
    pub fn heap_bytes(&self) -> usize {
        self.spans.capacity() * std::mem::size_of::<Span>()
            + self.stage_names.iter().map(|n| n.capacity() + std::mem::size_of::<String>()).sum::<usize>()
            + self.notes.iter().map(String::capacity).sum::<usize>()
    }

    /// Bytes per category at `px` rows spread evenly over the trace (at
    /// most one per row), for a stacked chart.
    pub fn series(&self, px: usize) -> BreakdownSeries {
        let n = self.rows as usize;
        let px = px.clamp(1, n.max(1));
        let rows: Vec<u32> =
            if n == 0 { Vec::new() } else { (0..px).map(|i| ((i * (n - 1)) / (px - 1).max(1)) as u32).collect() };
        // Each span adds its size to the samples it covers: a difference
        // array per category, two binary searches per span. No per-request
        // copy or sort of the spans (a 16M-entry trace has millions).
        let mut diff = [const { Vec::<i64>::new() }; 5];
        for d in &mut diff {
            d.resize(rows.len() + 1, 0);
        }
        for span in &self.spans {
            let first = rows.partition_point(|&r| r < span.start);
            let past = rows.partition_point(|&r| r < span.end);
            if first < past {
                let d = &mut diff[span.category.slot()];
                d[first] += span.size as i64;
                d[past] -= span.size as i64;
            }
        }
        let out = diff.map(|d| {
            d[..rows.len()]
                .iter()
                .scan(0i64, |live, delta| {
                    *live += delta;
                    Some((*live).max(0) as u64)
                })
                .collect::<Vec<u64>>()
        });
        let [parameters, gradients, optimizer_state, activations, other] = out;
        BreakdownSeries { rows, parameters, gradients, optimizer_state, activations, other }
    }
}

/// Each allocation's stage: the innermost `record_function` range of the
/// device open at its `alloc` time. Names are listed once; index 0 is
/// `(no range)`.
fn stages_of(snapshot: &Snapshot, device: &DeviceSnapshot, allocations: &[Allocation]) -> (Vec<String>, Vec<u32>) {
    let mut names = vec!["(no range)".to_owned()];
    let mut stages = vec![NO_STAGE; allocations.len()];
    let mut ranges: Vec<_> = snapshot.annotations.iter().filter(|a| a.device == device.device).collect();
    if ranges.is_empty() || !device.trace.has_time() {
        return (names, stages);
    }
    ranges.sort_by_key(|a| a.time_us);
    let times = device.trace.times_us();
    let mut order: Vec<(i64, usize)> =
        allocations.iter().enumerate().filter_map(|(i, a)| Some((times[a.alloc_row.get()? as usize], i))).collect();
    order.sort_unstable();
    let mut ids: FxHashMap<&str, u32> = FxHashMap::default();
    let mut open: Vec<u32> = Vec::new();
    let mut next = 0;
    for (time, i) in order {
        while next < ranges.len() && ranges[next].time_us <= time {
            let r = ranges[next];
            let id = *ids.entry(r.name.as_str()).or_insert_with(|| {
                names.push(r.name.clone());
                (names.len() - 1) as u32
            });
            match r.stage {
                AnnotationStage::Start => open.push(id),
                AnnotationStage::End => {
                    if let Some(k) = open.iter().rposition(|&o| o == id) {
                        open.remove(k);
                    }
                }
            }
            next += 1;
        }
        stages[i] = open.last().copied().unwrap_or(NO_STAGE);
    }
    (names, stages)
}

/// The runs of `pass`'s allocations in row order (`marks`: each
/// allocation's row and pass, sorted), each cut where another pass's
/// allocation comes; the last open run ends at `rows`.
fn pass_regions(marks: &[(u32, Pass)], pass: Pass, rows: u32) -> Vec<Region> {
    let mut out: Vec<Region> = Vec::new();
    let mut open: Option<u32> = None;
    for &(row, p) in marks {
        match (p == pass, open) {
            (true, None) => open = Some(row),
            (false, Some(start)) => {
                out.push(Region { start, end: row });
                open = None;
            }
            _ => {}
        }
    }
    if let Some(start) = open {
        out.push(Region { start, end: rows });
    }
    out
}

/// What a breakdown cannot tell, in words.
fn category_notes(framed: bool, any: bool, has_backward: bool, device: &DeviceSnapshot, rows: u32) -> Vec<String> {
    let mut notes = Vec::new();
    if !framed && any {
        notes.push(
            "no allocation has a stack (recorded with context=\"state\" or without frames): nothing can be told \
             apart, all is \"other\""
                .to_owned(),
        );
    }
    if framed && !has_backward && rows > 0 {
        notes.push(
            "no backward pass in the trace: no gradients, and activations only for a forward pass in flight".to_owned(),
        );
    }
    if !device.has_trace || rows == 0 {
        notes.push("no trace: only what the final state's blocks tell (their stacks), no lifetimes".to_owned());
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The truth recorded beside a fixture by `tests/gpu/breakdown_job.py`.
    fn truth(name: &str) -> serde_json::Value {
        let path = crate::testing::fixture_corpus().join(format!("{name}.truth.json"));
        serde_json::from_slice(&std::fs::read(&path).expect("truth file")).expect("truth json")
    }

    fn breakdown(name: &str) -> DeviceBreakdown {
        let a = crate::testing::snapshot(name);
        let d = &a.devices[0];
        DeviceCategories::build(&a, d, &crate::intervals::DeviceIntervals::build(d)).at(None)
    }

    fn within(ours: u64, truth: u64, pct: f64) -> bool {
        (ours as f64 - truth as f64).abs() <= truth as f64 * pct / 100.0
    }

    #[test]
    fn categories_match_the_truth_of_an_adamw_run_within_two_percent() {
        for name in [
            "breakdown_python_forward",
            "breakdown_python_after_step",
            "breakdown_all_forward",
            "breakdown_all_after_step",
        ] {
            let t = truth(name);
            let b = breakdown(name);
            let c = b.categories;
            for (cat, ours) in
                [("parameters", c.parameters), ("gradients", c.gradients), ("optimizer_state", c.optimizer_state)]
            {
                let want = t[cat].as_u64().expect("truth figure");
                assert!(within(ours, want, 2.0), "{name}: {cat} {ours} against the true {want}: {b:#?}");
            }
            // Activations: the rest of the requested bytes alive, less
            // cuBLAS's workspaces (measured by clearing them), which are
            // "other" here and not activations.
            let figure = |k: &str| t[k].as_u64().expect("truth figure");
            let rest = figure("memory_requested")
                - figure("parameters")
                - figure("gradients")
                - figure("optimizer_state")
                - figure("cublas_workspaces");
            assert!(within(c.activations, rest, 5.0), "{name}: activations {} against {rest}: {b:#?}", c.activations);
        }
    }
}
