//! What would make it fit: under one capacity, the largest size that fits
//! (and whether the sizes asked for fit) with each allocator setting
//! `vramscope tune` tries ([`DEFAULT_GRID`]), ranked.
//!
//! One model is built (matching and fitting the runs once); each setting is
//! a replay of its program, never a formula. The settings predicted with by
//! default (the recorded ones, or those given) come first and are the
//! baseline. Each other setting's search starts from the baseline's answer
//! ([`search`]'s hint): settings move the answer by a few sizes, and a
//! bisection over the whole range would cost five or six rounds each.
//!
//! Ranked by the largest size that fits (larger first; with `--at` only,
//! the largest size asked for that fits), then by the reserved peak at
//! that size (lower first); ties keep the grid's order.

use serde::{Deserialize, Serialize};

use super::search::{self, ReplayMany};
use super::{Model, PredictError, PredictOptions, PredictReport, Run, predict_with_model};
use crate::simulate::tune::{DEFAULT_GRID, trade_offs};
use crate::simulate::{AllocatorConfig, settings_for};

/// One setting's outcome under the capacity.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SettingOutcome {
    /// The settings, in `PYTORCH_CUDA_ALLOC_CONF`'s syntax (`""`: PyTorch's
    /// defaults).
    pub alloc_conf: String,
    /// These are the settings the prediction was made with (the recorded
    /// ones, or `--alloc-conf`): the baseline the others are compared with.
    pub baseline: bool,
    /// The largest size that fits with these settings (`--largest`);
    /// `null` when not asked or when even the smallest size runs out.
    pub largest_fitting_size: Option<u64>,
    /// The reserved peak at the size this setting is ranked by: its
    /// largest fitting size, else (`--at` only) the largest size asked for
    /// that fits; `null` when none fits.
    pub reserved_peak_bytes: Option<u64>,
    /// Each size asked for (`--at`), with these settings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub at: Vec<SettingAt>,
    /// What the settings trade away, in words.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trade_offs: Vec<String>,
}

/// One size asked for, with one setting.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SettingAt {
    /// The size.
    pub size: u64,
    /// It fits under the capacity.
    pub fits: bool,
    /// Its reserved peak (up to where it runs out, when it does).
    pub reserved_peak_bytes: u64,
}

/// The settings under which a size asked for fits.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SettingsFitting {
    /// The size.
    pub size: u64,
    /// The settings under which it fits, best ranked first; empty when none.
    pub alloc_confs: Vec<String>,
}

/// `vramscope predict --settings --json`: the prediction with the baseline
/// settings, and every setting's outcome. Fields are only ever added.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SettingsReport {
    /// The prediction with the baseline settings (its fields at the top
    /// level of the JSON object).
    #[serde(flatten)]
    pub prediction: PredictReport,
    /// Every setting tried, best first.
    pub by_setting: Vec<SettingOutcome>,
    /// For each size asked for (`--at`), the settings that make it fit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub settings_fitting_at: Vec<SettingsFitting>,
}

/// Told before each setting is replayed: how many are done, how many in
/// all, and the one starting.
pub type Progress<'p> = &'p mut dyn FnMut(usize, usize, &str);

/// Predict with the baseline settings, then with each of `grid` (usually
/// [`DEFAULT_GRID`]) under the same capacity, and rank them.
pub fn predict_by_setting(
    runs: &[Run<'_>],
    options: &PredictOptions,
    grid: &[&str],
    replay_many: ReplayMany<'_>,
    progress: Progress<'_>,
) -> Result<SettingsReport, PredictError> {
    if options.at.is_empty() && !options.largest {
        return Err(PredictError::NothingAsked);
    }
    if let Some(conf) = &options.alloc_conf {
        AllocatorConfig::parse(conf)?;
    }
    let model = Model::build(runs, options.device)?;
    let (base, _) = settings_for(model.reference.snapshot, options.alloc_conf.as_deref())?;
    // The other settings first, so that one refused is said before any replay.
    let mut others: Vec<(&str, AllocatorConfig)> = Vec::new();
    for conf in grid {
        let config = AllocatorConfig::parse(conf)?;
        if !same_behaviour(&config, &base) && !others.iter().any(|(_, c)| same_behaviour(c, &config)) {
            others.push((conf, config));
        }
    }
    let total = others.len() + 1;
    progress(0, total, "the baseline settings");
    let prediction = predict_with_model(&model, options, replay_many)?;
    let capacity = prediction.capacity_bytes.ok_or(PredictError::SettingsNeedCapacity)?;

    let asked = options.at.len();
    let baseline_at: Vec<SettingAt> = prediction.predictions[..asked].iter().map(|p| at_of(p.size, p)).collect();
    let baseline_largest = prediction.largest_fitting_size;
    let baseline_peak = baseline_largest
        .and_then(|n| prediction.predictions[asked..].iter().find(|p| p.size == n && !p.oom))
        .map(|p| p.reserved_peak_bytes);
    let mut by_setting = vec![outcome(
        prediction.alloc_conf.clone(),
        true,
        baseline_largest,
        baseline_peak,
        baseline_at,
        trade_offs(&base, true),
    )];
    for (done, (conf, config)) in others.iter().enumerate() {
        progress(done + 1, total, conf);
        let at: Vec<SettingAt> =
            replay_many(&model, &options.at, config, Some(capacity)).iter().map(|p| at_of(p.size, p)).collect();
        let (largest, peak) = if options.largest {
            let found = search::largest(&model, config, capacity, options.step, baseline_largest, replay_many);
            let peak = found.largest.as_ref().map(|p| p.reserved_peak_bytes);
            (found.largest.map(|p| p.size), peak)
        } else {
            (None, None)
        };
        by_setting.push(outcome((*conf).to_owned(), false, largest, peak, at, trade_offs(config, true)));
    }
    progress(total, total, "");
    by_setting.sort_by_key(|o| {
        let ranked_by = o.largest_fitting_size.or_else(|| o.at.iter().filter(|a| a.fits).map(|a| a.size).max());
        (std::cmp::Reverse(ranked_by), o.reserved_peak_bytes.unwrap_or(u64::MAX))
    });
    let settings_fitting_at = options
        .at
        .iter()
        .enumerate()
        .map(|(i, &size)| SettingsFitting {
            size,
            alloc_confs: by_setting.iter().filter(|o| o.at[i].fits).map(|o| o.alloc_conf.clone()).collect(),
        })
        .collect();
    Ok(SettingsReport { prediction, by_setting, settings_fitting_at })
}

fn at_of(size: u64, p: &super::SizePrediction) -> SettingAt {
    SettingAt { size, fits: !p.oom, reserved_peak_bytes: p.reserved_peak_bytes }
}

fn outcome(
    alloc_conf: String,
    baseline: bool,
    largest_fitting_size: Option<u64>,
    largest_peak: Option<u64>,
    at: Vec<SettingAt>,
    trade_offs: Vec<String>,
) -> SettingOutcome {
    // Without --largest, ranked (and its peak said) by the largest size asked for that fits.
    let reserved_peak_bytes = match largest_fitting_size {
        Some(_) => largest_peak,
        None => at.iter().filter(|a| a.fits).max_by_key(|a| a.size).map(|a| a.reserved_peak_bytes),
    };
    SettingOutcome { alloc_conf, baseline, largest_fitting_size, reserved_peak_bytes, at, trade_offs }
}

/// The same allocator behaviour under one given capacity: the memory
/// fraction (the capacity is already chosen) and options the model does
/// not use make no difference.
fn same_behaviour(a: &AllocatorConfig, b: &AllocatorConfig) -> bool {
    let plain = |c: &AllocatorConfig| AllocatorConfig { memory_fraction: None, not_modelled: Vec::new(), ..c.clone() };
    plain(a) == plain(b)
}

/// The settings compared by default: those `vramscope tune` tries.
pub fn default_grid() -> &'static [&'static str] {
    DEFAULT_GRID
}
