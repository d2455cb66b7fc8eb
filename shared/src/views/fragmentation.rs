//! Fragmentation over time: for each column of a window, reserved against
//! allocated bytes, free bytes stuck in split segments (inactive split),
//! rounding waste (rounded minus requested) and the largest free block;
//! with the allocator settings the snapshot recorded
//! (`PYTORCH_CUDA_ALLOC_CONF`), which decide most of it.

use serde::{Deserialize, Serialize};

use super::segments::{Column, for_each_column, span};
use super::state::Figures;
use crate::error::ViewError;
use crate::indexed::IndexedSnapshot;
use crate::snapshot::PyValue;
use crate::timeline::Axis;

/// Query of the fragmentation view (the same window fields as the timeline).
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct FragmentationParams {
    /// Device (default: the first).
    pub device: Option<u32>,
    /// `time` (default when the trace has times) or `event`.
    pub axis: Option<Axis>,
    /// Window start (default: the trace's first x).
    pub start: Option<i64>,
    /// Window end (default: the trace's end).
    pub end: Option<i64>,
    /// Columns (default 200).
    pub columns: Option<u32>,
}

/// The figures of one column.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FragmentationColumn {
    /// The column.
    pub column: Column,
    /// Its figures.
    pub figures: Figures,
}

/// The allocator settings, as recorded in the snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SettingsView {
    /// The snapshot recorded `allocator_settings` (PyTorch 2.1+).
    pub recorded: bool,
    /// The `PYTORCH_CUDA_ALLOC_CONF` string, when set.
    pub alloc_conf: Option<String>,
    /// `max_split_size` in bytes; `None`: unlimited.
    pub max_split_size: Option<u64>,
    /// `expandable_segments`.
    pub expandable_segments: bool,
    /// `garbage_collection_threshold` (0: off).
    pub garbage_collection_threshold: f64,
    /// Every key as written, with its value as text, in file order.
    pub raw: Vec<(String, String)>,
}

/// Fragmentation figures over a window, and the settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FragmentationAnswer {
    /// Device.
    pub device: u32,
    /// x axis.
    pub axis: Axis,
    /// Window start.
    pub start: i64,
    /// Window end.
    pub end: i64,
    /// The columns, left to right.
    pub columns: Vec<FragmentationColumn>,
    /// The column where free bytes stuck in split segments peak.
    pub worst: Option<FragmentationColumn>,
    /// The allocator settings.
    pub settings: SettingsView,
    /// Every block size is certain.
    pub exact: bool,
}

/// Most keys of the recorded settings shown, and the longest key or value
/// text: every answer of the panel carries them (PyTorch writes a dozen
/// short ones; a hostile file made each answer 258 MB).
const MAX_RAW_KEYS: usize = 64;
const MAX_RAW_CHARS: usize = 512;

/// `text` cut to [`MAX_RAW_CHARS`] characters, saying so.
fn cut(text: String) -> String {
    match text.char_indices().nth(MAX_RAW_CHARS) {
        Some((at, _)) => format!("{}… ({} bytes)", &text[..at], text.len()),
        None => text,
    }
}

fn text_of(v: &PyValue) -> String {
    match v {
        PyValue::None => "None".to_owned(),
        PyValue::Bool(b) => if *b { "True" } else { "False" }.to_owned(),
        PyValue::Int(i) => i.to_string(),
        PyValue::Float(f) => f.to_string(),
        PyValue::Str(s) => s.clone(),
        PyValue::List(items) => format!("[{}]", items.iter().map(text_of).collect::<Vec<_>>().join(", ")),
        PyValue::Dict(items) => {
            format!("{{{}}}", items.iter().map(|(k, v)| format!("{k}: {}", text_of(v))).collect::<Vec<_>>().join(", "))
        }
    }
}

/// The snapshot's allocator settings for display.
pub fn settings(a: &IndexedSnapshot) -> SettingsView {
    match &a.snapshot.allocator_settings {
        None => SettingsView::default(),
        Some(s) => SettingsView {
            recorded: true,
            alloc_conf: s.alloc_conf.clone().filter(|c| !c.is_empty()),
            max_split_size: s.max_split_size,
            expandable_segments: s.expandable_segments,
            garbage_collection_threshold: s.garbage_collection_threshold,
            raw: s.raw.iter().take(MAX_RAW_KEYS).map(|(k, v)| (cut(k.clone()), cut(text_of(v)))).collect(),
        },
    }
}

/// Reserved, allocated, inactive split and waste per column of a window.
pub fn fragmentation(a: &IndexedSnapshot, p: &FragmentationParams) -> Result<FragmentationAnswer, ViewError> {
    let span = span(a, p.device, p.axis, p.start, p.end)?;
    let mut figures = Vec::new();
    let mut exact = true;
    let columns = for_each_column(a, span, p.columns.unwrap_or(200), |i, _, layout| {
        exact &= layout.exact;
        figures.push((i, Figures::of(layout)));
    })?;
    figures.sort_by_key(|(i, _)| *i);
    let columns: Vec<FragmentationColumn> =
        figures.into_iter().map(|(i, figures)| FragmentationColumn { column: columns[i], figures }).collect();
    let worst = columns.iter().copied().max_by_key(|c| (c.figures.inactive_split, std::cmp::Reverse(c.column.x0)));
    Ok(FragmentationAnswer {
        device: span.device,
        axis: span.axis,
        start: span.start,
        end: span.end,
        columns,
        worst,
        settings: settings(a),
        exact,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{corpus, oracle};

    #[test]
    fn the_last_column_is_pytorchs_state_and_settings_show() {
        for name in ["oom_leak", "streams"] {
            let a = corpus(name);
            let o = oracle(name);
            let answer = fragmentation(&a, &FragmentationParams { columns: Some(50), ..Default::default() })
                .expect("fragmentation");
            let last = answer.columns.last().expect("columns").figures;
            assert_eq!(last.reserved, o["reserved_bytes.all.current"], "{name}");
            assert_eq!(last.allocated, o["allocated_bytes.all.current"], "{name}");
            assert_eq!(last.inactive_split, o["inactive_split_bytes.all.current"], "{name}");
            assert!(answer.columns.iter().all(|c| c.figures.allocated <= o["allocated_bytes.all.peak"]), "{name}");
            assert!(answer.columns.iter().all(|c| c.figures.reserved <= o["reserved_bytes.all.peak"]), "{name}");
            let worst = answer.worst.expect("worst");
            assert!(answer.columns.iter().all(|c| c.figures.inactive_split <= worst.figures.inactive_split));
            assert!(answer.settings.recorded, "{name}: PyTorch 2.11 records its settings");
            assert!(!answer.settings.raw.is_empty(), "{name}");
        }
    }
}
