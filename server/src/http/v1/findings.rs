//! The analyses beside the timeline: what-if replays, the ranking of
//! allocator settings, OOM post-mortems, leaks, the comparison of two
//! snapshots, and the memory-budget check of CI (`vramscope check --server`). Thin wrappers over `vramscope_shared::views::findings` (the
//! same functions the dashboard runs for a local file); replays are CPU work
//! and run on blocking threads. `explain`, `leaks` and `breakdown` are
//! served by the views' generic handler (`views::answer`); `whatif` and
//! `tune`, declared like every view, are answered here instead, because the
//! server keeps their replays and rankings between requests.
//!
//! A replay of a 1.5M-entry trace takes about 150 ms, and the dashboard asks
//! for a window of the same replay at every zoom and pan, so replays are kept
//! in a small cache by `(snapshot, device, alloc_conf, capacity)`, as are tune
//! rankings by `(snapshot, capacity)`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Path, Query, RawQuery, State};
use serde::Deserialize;
use vramscope_shared::indexed::IndexedSnapshot;
use vramscope_shared::views::findings::{
    self, DiffAnswer, SimulatedDevice, TuneAnswer, TuneParams, WhatIfAnswer, WhatIfParams,
};

use vramscope_shared::analysis::check::{CheckError, check};
use vramscope_shared::api::SnapshotStatus;
use vramscope_shared::api::jobs::{CheckAnswer, CheckQuery};

use super::extract::{alloc_conf, analyzed, capacity, record};
use super::lru::Lru;
use crate::http::AppState;
use crate::http::error::{AppError, AppResult};

/// Replays kept (each holds its curves: about 20 bytes per trace entry).
const REPLAYS_KEPT: usize = 8;
/// Tune rankings kept.
const RANKINGS_KEPT: usize = 16;

/// (snapshot id, device, alloc_conf, capacity).
type ReplayKey = (String, u32, Option<String>, Option<u64>);

static REPLAYS: Lru<ReplayKey, SimulatedDevice> = Lru::new(REPLAYS_KEPT);
static RANKINGS: Lru<(String, Option<u64>), TuneAnswer> = Lru::new(RANKINGS_KEPT);

/// Where analyses wait: one queue per snapshot (a second identical request
/// finds the first one's result in the caches above instead of computing
/// it again), then one pool of `analysis_concurrency` blocking threads for
/// every snapshot. A viewer looping over new settings gets one core's
/// worth of the pool's time, not a thread per request.
pub(crate) struct AnalysisQueue {
    pool: Arc<tokio::sync::Semaphore>,
    /// Analyses running now, and the most at once (for `/metrics`).
    running: Arc<(std::sync::atomic::AtomicI64, std::sync::atomic::AtomicI64)>,
    queues: Mutex<HashMap<String, std::sync::Weak<tokio::sync::Mutex<()>>>>,
}

impl AnalysisQueue {
    pub(crate) fn new(threads: usize) -> AnalysisQueue {
        AnalysisQueue {
            pool: Arc::new(tokio::sync::Semaphore::new(threads.max(1))),
            running: Arc::default(),
            queues: Mutex::new(HashMap::new()),
        }
    }

    /// Analyses running now, and the most at once since start.
    pub(crate) fn running(&self) -> (i64, i64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.running.0.load(Relaxed), self.running.1.load(Relaxed))
    }

    fn queue(&self, snapshot: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut queues = self.queues.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(queue) = queues.get(snapshot).and_then(std::sync::Weak::upgrade) {
            return queue;
        }
        queues.retain(|_, q| q.strong_count() > 0);
        let queue = Arc::new(tokio::sync::Mutex::new(()));
        queues.insert(snapshot.to_owned(), Arc::downgrade(&queue));
        queue
    }

    /// Run CPU work about `snapshot` on a blocking thread, in its turn.
    ///
    /// The turn and the pool's slot go into the thread and are let go when
    /// the work ends: a client that hangs up stops waiting, not the work,
    /// so the slot must stay taken until the thread is free again (six
    /// predictions whose clients left after a second held six threads for
    /// 24 s beside a pool of two, issue 44).
    pub(super) async fn run<T: Send + 'static>(
        &self,
        snapshot: &str,
        work: impl FnOnce() -> AppResult<T> + Send + 'static,
    ) -> AppResult<T> {
        let turn = self.queue(snapshot).lock_owned().await;
        let slot = Arc::clone(&self.pool).acquire_owned().await.map_err(|e| AppError::Internal(e.into()))?;
        let running = Arc::clone(&self.running);
        tokio::task::spawn_blocking(move || {
            use std::sync::atomic::Ordering::Relaxed;
            let _held = (turn, slot);
            let now = running.0.fetch_add(1, Relaxed) + 1;
            running.1.fetch_max(now, Relaxed);
            let answer = work();
            running.0.fetch_sub(1, Relaxed);
            answer
        })
        .await
        .map_err(|e| AppError::Internal(anyhow::Error::from(e).context("analysis worker")))?
    }
}

/// `GET /api/v1/snapshots/{id}/whatif?alloc_conf=&capacity=&device=&axis=&start=&end=&px=`:
/// the trace replayed with other allocator settings, its curves over the
/// recorded ones; see [`findings::whatif`].
pub(crate) async fn whatif(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(p): Query<WhatIfParams>,
) -> AppResult<Json<WhatIfAnswer>> {
    // Bad settings are refused before the snapshot is even loaded.
    let conf = alloc_conf(p.alloc_conf.as_deref())?;
    let capacity = capacity(p.capacity.as_deref())?;
    let a = analyzed(&state, &id).await?;
    let device = a.device_or_first(p.device)?;
    let key: ReplayKey = (id.clone(), device, conf, capacity);
    let answer = state
        .analyses
        .run(&id, move || {
            let sim = match REPLAYS.get(&key) {
                Some(sim) => sim,
                None => {
                    let sim = Arc::new(findings::simulate_device(&a, device, key.2.as_deref(), capacity)?);
                    REPLAYS.put(key, sim.clone());
                    sim
                }
            };
            Ok(findings::whatif_window(&a, &sim, &p)?)
        })
        .await?;
    Ok(Json(answer))
}

/// `GET /api/v1/snapshots/{id}/tune?capacity=`: every candidate setting
/// replayed and ranked; see [`findings::tune`].
pub(crate) async fn tune(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(p): Query<TuneParams>,
) -> AppResult<Json<TuneAnswer>> {
    let capacity = capacity(p.capacity.as_deref())?;
    let key = (id.clone(), capacity);
    if let Some(answer) = RANKINGS.get(&key) {
        return Ok(Json(TuneAnswer::clone(&answer)));
    }
    let a = analyzed(&state, &id).await?;
    let answer = state
        .analyses
        .run(&id, move || {
            // Queued behind an identical request: its ranking is here now.
            if let Some(answer) = RANKINGS.get(&key) {
                return Ok(TuneAnswer::clone(&answer));
            }
            let answer = findings::tune(&a, &p)?;
            RANKINGS.put(key, Arc::new(answer.clone()));
            Ok(answer)
        })
        .await?;
    Ok(Json(answer))
}

/// The two snapshots of a comparison.
#[derive(Debug, Deserialize)]
pub(crate) struct CompareIds {
    /// The first (before, or one rank).
    a: Option<String>,
    /// The second (after, or another rank).
    b: Option<String>,
}

/// `GET /api/v1/compare?a=ID&b=ID&top=&align=&px=&device_a=&device_b=`: what
/// changed from A to B; see [`findings::diff`].
///
/// Not a declared view: a view answers one snapshot (`View::answer` takes
/// one `IndexedSnapshot`, mounted under `/snapshots/{id}/`), a comparison two, each
/// loaded by its own id. Its query is still read once, by
/// `vramscope_shared::views::route::compare`, here and in the browser's worker.
pub(crate) async fn compare(
    State(state): State<AppState>,
    Query(ids): Query<CompareIds>,
    RawQuery(query): RawQuery,
) -> AppResult<Json<DiffAnswer>> {
    let (Some(ida), Some(idb)) = (ids.a.filter(|s| !s.is_empty()), ids.b.filter(|s| !s.is_empty())) else {
        return Err(AppError::BadRequest("compare needs two snapshots: ?a=ID&b=ID".to_owned()));
    };
    let a: Arc<IndexedSnapshot> = analyzed(&state, &ida).await?;
    let b: Arc<IndexedSnapshot> = analyzed(&state, &idb).await?;
    // The query parsed as the browser's worker parses it for a local file.
    let query = query.unwrap_or_default();
    Ok(Json(state.analyses.run(&ida, move || Ok(vramscope_shared::views::route::compare(&a, &b, &query)?)).await?))
}

/// The verdict on `snapshot` against `baseline`, on the analysis pool.
async fn checked(
    state: &AppState,
    snapshot: crate::store::SnapshotRecord,
    baseline: Option<crate::store::SnapshotRecord>,
    q: &CheckQuery,
) -> AppResult<CheckAnswer> {
    let budget = q.budget().map_err(AppError::BadRequest)?;
    if budget.is_empty() {
        return Err(AppError::BadRequest(
            "no rule to check: give max_reserved_peak, max_allocated_peak, max_fragmentation or max_growth".to_owned(),
        ));
    }
    let top = q.top.unwrap_or(5).min(100);
    let a = analyzed(state, &snapshot.meta.id).await?;
    let b = match &baseline {
        Some(b) => Some(analyzed(state, &b.meta.id).await?),
        None => None,
    };
    let rules = budget.clone();
    let report = state
        .analyses
        .run(&snapshot.meta.id, move || {
            check(&a.snapshot, b.as_ref().map(|b| &b.snapshot), &rules, top).map_err(|e| match e {
                // The request's fault; the others are the snapshots' (no trace to replay).
                CheckError::NoBaseline => AppError::BadRequest(format!("max_growth: {e}: give ?baseline=ID")),
                other => AppError::Unprocessable(other.to_string()),
            })
        })
        .await?;
    Ok(CheckAnswer { snapshot: snapshot.meta, baseline: baseline.map(|b| b.meta), budget, report })
}

/// `GET /api/v1/snapshots/{id}/check?max_reserved_peak=&max_allocated_peak=&max_fragmentation=&max_growth=&baseline=ID&top=`:
/// the snapshot against a memory budget, and against `baseline` when
/// given; see [`check`]. 200 with `passed: false` when a rule is broken.
pub(crate) async fn check_snapshot(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<CheckQuery>,
) -> AppResult<Json<CheckAnswer>> {
    let rec = record(&state, &id).await?;
    let baseline = match q.baseline.as_deref().filter(|b| !b.is_empty()) {
        Some(b) => Some(record(&state, b).await?),
        None => None,
    };
    Ok(Json(checked(&state, rec, baseline, &q).await?))
}

/// `GET /api/v1/jobs/{job}/check?…` (the budget as for a snapshot): the
/// job's newest snapshot against its last pinned one (pins are what a team
/// keeps as a reference; retention never deletes them). Without a pinned
/// snapshot there is no baseline, and `max_growth` is refused.
pub(crate) async fn check_job(
    State(state): State<AppState>,
    Path(job): Path<String>,
    Query(q): Query<CheckQuery>,
) -> AppResult<Json<CheckAnswer>> {
    let snapshots = state.db.job_snapshots(&job).await?;
    let mut usable = snapshots.into_iter().filter(|s| s.meta.status != SnapshotStatus::Failed);
    let newest = usable.next().ok_or_else(|| AppError::NotFound(format!("job {job} (no readable snapshot)")))?;
    let baseline = usable.find(|s| s.meta.pinned);
    if baseline.is_none() && q.max_growth.is_some() {
        return Err(AppError::BadRequest(format!(
            "max_growth: job {job} has no pinned snapshot older than its newest to compare against; pin one \
             (PATCH /api/v1/snapshots/ID {{\"pinned\": true}})"
        )));
    }
    Ok(Json(checked(&state, newest, baseline, &q).await?))
}
