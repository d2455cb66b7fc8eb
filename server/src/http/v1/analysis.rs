//! The analyses beside the timeline: what-if replays, the ranking of
//! allocator settings, OOM post-mortems, leaks, and the comparison of two
//! snapshots. Thin wrappers over `vramscope_shared::views::analysis` (the
//! same functions the dashboard runs for a local file); replays are CPU work
//! and run on blocking threads.
//!
//! A replay of a 1.5M-entry trace takes about 150 ms, and the dashboard asks
//! for a window of the same replay at every zoom and pan, so replays are kept
//! in a small cache by `(snapshot, device, alloc_conf, capacity)`, as are tune
//! rankings by `(snapshot, capacity)`.

use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use vramscope_shared::views::Analyzed;
use vramscope_shared::views::analysis::{
    self, DiffAnswer, DiffParams, ExplainAnswer, ExplainParams, LeaksAnswer, LeaksParams, SimulatedDevice, TuneAnswer,
    TuneParams, WhatIfAnswer, WhatIfParams,
};

use super::views::analyzed;
use crate::http::AppState;
use crate::http::error::{AppError, AppResult};

/// Replays kept (each holds its curves: about 20 bytes per trace entry).
const REPLAYS_KEPT: usize = 8;
/// Tune rankings kept.
const RANKINGS_KEPT: usize = 16;

/// A small least-recently-used map; the most recently used entry last.
struct Lru<K, V> {
    capacity: usize,
    entries: Mutex<Vec<(K, Arc<V>)>>,
}

impl<K: PartialEq, V> Lru<K, V> {
    const fn new(capacity: usize) -> Lru<K, V> {
        Lru { capacity, entries: Mutex::new(Vec::new()) }
    }

    fn get(&self, key: &K) -> Option<Arc<V>> {
        let mut entries = self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let i = entries.iter().position(|(k, _)| k == key)?;
        let entry = entries.remove(i);
        let value = entry.1.clone();
        entries.push(entry);
        Some(value)
    }

    fn put(&self, key: K, value: Arc<V>) {
        let mut entries = self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        entries.retain(|(k, _)| k != &key);
        entries.push((key, value));
        if entries.len() > self.capacity {
            entries.remove(0);
        }
    }
}

/// (snapshot id, device, alloc_conf, capacity).
type ReplayKey = (String, u32, Option<String>, Option<u64>);

static REPLAYS: Lru<ReplayKey, SimulatedDevice> = Lru::new(REPLAYS_KEPT);
static RANKINGS: Lru<(String, Option<u64>), TuneAnswer> = Lru::new(RANKINGS_KEPT);

/// Run CPU work on a blocking thread.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> AppResult<T> + Send + 'static) -> AppResult<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| AppError::Internal(anyhow::Error::from(e).context("analysis worker")))?
}

/// `GET /api/v1/snapshots/{id}/whatif?alloc_conf=&capacity=&device=&axis=&start=&end=&px=`:
/// the trace replayed with other allocator settings, its curves over the
/// recorded ones; see [`analysis::whatif`].
pub(crate) async fn whatif(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(p): Query<WhatIfParams>,
) -> AppResult<Json<WhatIfAnswer>> {
    // Bad settings are refused before the snapshot is even loaded.
    analysis::check_alloc_conf(p.alloc_conf.as_deref())?;
    let capacity = analysis::parse_capacity(p.capacity.as_deref())?;
    let a = analyzed(&state, &id).await?;
    let device = a.device_or_first(p.device)?;
    let key: ReplayKey = (id, device, p.alloc_conf.clone(), capacity);
    let answer = blocking(move || {
        let sim = match REPLAYS.get(&key) {
            Some(sim) => sim,
            None => {
                let sim = Arc::new(analysis::simulate_device(&a, device, p.alloc_conf.as_deref(), capacity)?);
                REPLAYS.put(key, sim.clone());
                sim
            }
        };
        Ok(analysis::whatif_window(&a, &sim, &p)?)
    })
    .await?;
    Ok(Json(answer))
}

/// `GET /api/v1/snapshots/{id}/tune?capacity=`: every candidate setting
/// replayed and ranked; see [`analysis::tune`].
pub(crate) async fn tune(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(p): Query<TuneParams>,
) -> AppResult<Json<TuneAnswer>> {
    let capacity = analysis::parse_capacity(p.capacity.as_deref())?;
    let key = (id.clone(), capacity);
    if let Some(answer) = RANKINGS.get(&key) {
        return Ok(Json(TuneAnswer::clone(&answer)));
    }
    let a = analyzed(&state, &id).await?;
    let answer = blocking(move || Ok(analysis::tune(&a, &p)?)).await?;
    RANKINGS.put(key, Arc::new(answer.clone()));
    Ok(Json(answer))
}

/// `GET /api/v1/snapshots/{id}/explain?device=&simulate=`: the post-mortem
/// of each OOM; see [`analysis::explain`].
pub(crate) async fn explain(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(p): Query<ExplainParams>,
) -> AppResult<Json<ExplainAnswer>> {
    let a = analyzed(&state, &id).await?;
    Ok(Json(blocking(move || Ok(analysis::explain(&a, &p)?)).await?))
}

/// `GET /api/v1/snapshots/{id}/leaks?device=&top=`: live allocations by
/// stack, ranked by growth; see [`analysis::leaks`].
pub(crate) async fn leaks(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(p): Query<LeaksParams>,
) -> AppResult<Json<LeaksAnswer>> {
    let a = analyzed(&state, &id).await?;
    Ok(Json(blocking(move || Ok(analysis::leaks(&a, &p)?)).await?))
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
/// changed from A to B; see [`analysis::diff`].
pub(crate) async fn compare(
    State(state): State<AppState>,
    Query(ids): Query<CompareIds>,
    Query(p): Query<DiffParams>,
) -> AppResult<Json<DiffAnswer>> {
    let (Some(ida), Some(idb)) = (ids.a.filter(|s| !s.is_empty()), ids.b.filter(|s| !s.is_empty())) else {
        return Err(AppError::BadRequest("compare needs two snapshots: ?a=ID&b=ID".to_owned()));
    };
    let a: Arc<Analyzed> = analyzed(&state, &ida).await?;
    let b: Arc<Analyzed> = analyzed(&state, &idb).await?;
    Ok(Json(blocking(move || Ok(analysis::diff(&a, &b, &p)?)).await?))
}
