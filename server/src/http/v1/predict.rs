//! `GET /api/v1/predict?runs=ID:SIZE,ID:SIZE&at=N,N&largest=true&capacity=&step=&alloc_conf=&device=`:
//! will it fit? Stored snapshots of one job recorded at a few sizes of one
//! knob, replayed through the allocator model at sizes never run; the
//! answer is [`PredictReport`], the same object as `vramscope predict
//! --json` (each run named by its snapshot id).
//!
//! The query is checked whole before any snapshot is loaded. The work runs
//! on the analysis pool, and answers are kept by their normalised query, so
//! a repeat (the dashboard's button pressed twice) is not replayed again.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use vramscope_shared::api::predict::PredictQuery;
use vramscope_shared::indexed::IndexedSnapshot;
use vramscope_shared::predict::{PredictError, PredictOptions, PredictReport, Run, predict as predict_runs};

use super::extract::{alloc_conf, analyzed, capacity};
use super::lru::Lru;
use crate::http::AppState;
use crate::http::error::{AppError, AppResult};

/// Predictions kept (each a few kilobytes of JSON).
const PREDICTIONS_KEPT: usize = 32;

/// A query in one spelling: sizes parsed, the capacity in bytes, the
/// settings trimmed. Two queries that differ only in spelling are one key.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PredictKey {
    runs: Vec<(String, u64)>,
    at: Vec<u64>,
    largest: bool,
    capacity: Option<u64>,
    step: Option<u64>,
    alloc_conf: Option<String>,
    device: Option<u32>,
}

impl PredictKey {
    /// The query checked; every refusal names its parameter.
    fn checked(q: &PredictQuery) -> AppResult<PredictKey> {
        let runs = q.runs().map_err(AppError::BadRequest)?;
        for (k, (first, size)) in runs.iter().enumerate() {
            if let Some((second, _)) = runs[k + 1..].iter().find(|(_, s)| s == size) {
                return Err(AppError::BadRequest(format!(
                    "runs: {first} and {second} are both labelled size {size}: each run needs a size of its own"
                )));
            }
        }
        Ok(PredictKey {
            runs,
            at: q.at().map_err(AppError::BadRequest)?,
            largest: q.largest == Some(true),
            capacity: capacity(q.capacity.as_deref())?,
            step: q.step().map_err(AppError::BadRequest)?,
            alloc_conf: alloc_conf(q.alloc_conf.as_deref())?,
            device: q.device,
        })
    }

    /// The analysis queue it waits in: identical queries wait one behind
    /// the other, so the second finds the first's answer kept.
    fn queue(&self) -> String {
        format!("predict:{self:?}")
    }

    fn options(&self) -> PredictOptions {
        PredictOptions {
            at: self.at.clone(),
            largest: self.largest,
            capacity: self.capacity,
            alloc_conf: self.alloc_conf.clone(),
            device: self.device,
            step: self.step,
        }
    }
}

static PREDICTIONS: Lru<PredictKey, PredictReport> = Lru::new(PREDICTIONS_KEPT);

/// A prediction's refusal: the request's fault is a 400, the snapshots'
/// (no trace, a wrapped ring, settings the model refuses) a 422 with the
/// error's kind.
fn refusal(e: PredictError) -> AppError {
    match e {
        PredictError::NothingAsked
        | PredictError::SameSize { .. }
        | PredictError::ZeroSize { .. }
        | PredictError::NoCapacity
        | PredictError::NoRuns => AppError::BadRequest(e.to_string()),
        other => AppError::Unanswerable { kind: other.kind(), message: other.to_string() },
    }
}

/// `GET /api/v1/predict`: see the module doc.
pub(crate) async fn predict(
    State(state): State<AppState>,
    Query(q): Query<PredictQuery>,
) -> AppResult<Json<PredictReport>> {
    let key = PredictKey::checked(&q)?;
    if let Some(answer) = PREDICTIONS.get(&key) {
        return Ok(Json(PredictReport::clone(&answer)));
    }
    let mut snapshots: Vec<Arc<IndexedSnapshot>> = Vec::with_capacity(key.runs.len());
    for (id, _) in &key.runs {
        snapshots.push(analyzed(&state, id).await?);
    }
    let counted = state.clone();
    let answer = state
        .analyses
        .run(&key.queue(), move || {
            // Queued behind an identical request: its answer is here now.
            if let Some(answer) = PREDICTIONS.get(&key) {
                return Ok(PredictReport::clone(&answer));
            }
            let runs: Vec<Run<'_>> = key
                .runs
                .iter()
                .zip(&snapshots)
                .map(|((id, size), a)| Run { name: id, size: *size, snapshot: &a.snapshot })
                .collect();
            // Sequentially: this closure already holds one of the pool's
            // `analysis_concurrency` threads, the bound on the server's CPU
            // for analyses; `replay_in_parallel` would take every core for
            // one request and starve the others behind the pool's back.
            let report = predict_runs(&runs, &key.options(), &vramscope_shared::predict::replay_sequentially)
                .map_err(refusal)?;
            counted.metrics.predictions_computed.inc();
            PREDICTIONS.put(key, Arc::new(report.clone()));
            Ok(report)
        })
        .await?;
    Ok(Json(answer))
}
