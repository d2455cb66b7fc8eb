//! `GET /api/v1/predict`: will it fit? The query names stored snapshots of
//! one job with their sizes; the answer is a
//! [`PredictReport`](crate::predict::PredictReport), the same object as
//! `vramscope predict --json`.

use serde::{Deserialize, Serialize};

pub use crate::predict::{Dip, PredictReport, RunSummary, SizePrediction, Unmatched};

/// Most runs in one prediction.
pub const MAX_RUNS: usize = 8;
/// Most sizes asked for at once.
pub const MAX_AT: usize = 32;
/// The largest size a query may name (a knob, not a byte count).
pub const MAX_SIZE: u64 = 1 << 32;

/// The query of `GET /api/v1/predict`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PredictQuery {
    /// `ID:SIZE,ID:SIZE`: the recorded runs and their sizes.
    pub runs: String,
    /// `N,N`: sizes to predict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// Find the largest size that fits under the capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub largest: Option<bool>,
    /// Memory the process may reserve (`80GiB`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<String>,
    /// Step of the largest-size search.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// `PYTORCH_CUDA_ALLOC_CONF` to predict with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alloc_conf: Option<String>,
    /// CUDA device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
}

impl PredictQuery {
    /// The runs as `(snapshot id, size)`, checked: at least one, at most
    /// [`MAX_RUNS`], sizes from 1 to [`MAX_SIZE`].
    pub fn runs(&self) -> Result<Vec<(String, u64)>, String> {
        parse_runs(
            &self.runs,
            RunForm { separator: ':', form: "ID:SIZE", what: "a snapshot id", example: "12:8,13:16" },
        )
    }

    /// The sizes to predict, checked: at most [`MAX_AT`], each from 1 to
    /// [`MAX_SIZE`].
    pub fn at(&self) -> Result<Vec<u64>, String> {
        let at = parse_sizes(self.at.as_deref().unwrap_or_default())?;
        if at.is_empty() && self.largest != Some(true) {
            return Err("nothing to predict: give at=N,N or largest=true".to_owned());
        }
        Ok(at)
    }

    /// The search's step, checked.
    pub fn step(&self) -> Result<Option<u64>, String> {
        match self.step {
            Some(0) => Err("step: a positive integer".to_owned()),
            Some(s) if s > MAX_SIZE => Err(format!("step: at most {MAX_SIZE}")),
            other => Ok(other),
        }
    }
}

/// How a list of runs is written: `ID:SIZE` in the HTTP query,
/// `FILE=SIZE` for the MCP tool (a path may hold a `:`).
#[derive(Clone, Copy, Debug)]
pub struct RunForm {
    /// Between a run and its size (the last one counts).
    pub separator: char,
    /// The form, for messages (`ID:SIZE`).
    pub form: &'static str,
    /// What names a run, for messages (`a snapshot id`).
    pub what: &'static str,
    /// An example list.
    pub example: &'static str,
}

/// Comma-separated runs with their sizes, checked: at least one, at most
/// [`MAX_RUNS`], sizes from 1 to [`MAX_SIZE`].
pub fn parse_runs(text: &str, f: RunForm) -> Result<Vec<(String, u64)>, String> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, size) = part.rsplit_once(f.separator).ok_or_else(|| {
            format!("runs: each run is {} ({} and its size), e.g. runs={}", f.form, f.what, f.example)
        })?;
        let size = parse_knob("runs", size)?;
        if name.is_empty() {
            return Err(format!("runs: a run has no {} before '{}'", f.what.trim_start_matches("a "), f.separator));
        }
        out.push((name.to_owned(), size));
        if out.len() > MAX_RUNS {
            return Err(format!("runs: more than {MAX_RUNS}"));
        }
    }
    if out.is_empty() {
        return Err(format!("runs: give at least one run, {}", f.form));
    }
    Ok(out)
}

/// Comma-separated sizes to predict, checked: at most [`MAX_AT`], each from
/// 1 to [`MAX_SIZE`].
pub fn parse_sizes(text: &str) -> Result<Vec<u64>, String> {
    let at: Vec<u64> = text
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| parse_knob("at", p))
        .collect::<Result<_, _>>()?;
    if at.len() > MAX_AT {
        return Err(format!("at: more than {MAX_AT} sizes"));
    }
    Ok(at)
}

fn parse_knob(what: &str, text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(n) if (1..=MAX_SIZE).contains(&n) => Ok(n),
        _ => Err(format!("{what}: {text:?} is not a size from 1 to {MAX_SIZE}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_and_sizes_are_checked() {
        let q = PredictQuery { runs: "a:8, b:16".into(), at: Some("64,128".into()), ..Default::default() };
        assert_eq!(q.runs(), Ok(vec![("a".to_owned(), 8), ("b".to_owned(), 16)]));
        assert_eq!(q.at(), Ok(vec![64, 128]));
        let bad = |runs: &str| PredictQuery { runs: runs.into(), ..Default::default() }.runs().expect_err("refused");
        assert!(bad("a").contains("ID:SIZE"));
        assert!(bad("a:0").contains("from 1"));
        assert!(bad(":8").contains("no snapshot id"));
        assert!(bad("").contains("at least one"));
        assert!(bad(&(0..9).map(|i| format!("s{i}:{}", i + 1)).collect::<Vec<_>>().join(",")).contains("more than 8"));
        let nothing = PredictQuery { runs: "a:8".into(), ..Default::default() };
        assert!(nothing.at().expect_err("refused").contains("nothing to predict"));
    }
}
