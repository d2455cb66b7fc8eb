//! Live telemetry: agents stream samples in over a WebSocket
//! (`GET /api/v1/agents/ws`, uploader role), the live page reads them
//! (`GET /api/v1/live`, `GET /api/v1/live/{source}`), and "capture now"
//! (`POST /api/v1/live/{source}/capture`) is relayed to the agent that
//! serves the source, over its WebSocket.
//!
//! Each batch is stored before it is acknowledged, so an agent that loses
//! its connection sends the unacknowledged batches again; the table's key
//! makes a batch stored twice land once.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use tokio::sync::mpsc;

use crate::auth::Role;
use crate::http::AppState;
use crate::http::error::{AppError, AppResult};
use crate::http::role::{RequireRole, Uploader};
use crate::store::telemetry::SourceRecord;
use crate::store::{ListFilter, SnapshotRecord};
use vramscope_shared::api::agent::{AgentMessage, NvmlDevice, ServerMessage};
use vramscope_shared::api::live::{CaptureParams, Host, LiveList, LiveRead, Marker, ReadParams, Source};
use vramscope_shared::api::paths;

/// How often (per source) the retention pass runs while samples arrive.
const RETENTION_EVERY_MS: i64 = 60_000;
/// Samples a live read returns at most.
const MAX_READ: i64 = 20_000;
/// Least time between two "capture now" relayed to one agent: each asks
/// every rank it serves for a snapshot, which costs the job seconds.
const CAPTURE_EVERY: std::time::Duration = std::time::Duration::from_secs(30);
/// Largest frame an agent may send (a batch of samples is a few kB).
const MAX_AGENT_FRAME: usize = 4 << 20;

/// The agents connected to this instance.
#[derive(Default)]
pub(crate) struct LiveRegistry {
    agents: Mutex<HashMap<u64, ConnectedAgent>>,
    next: AtomicU64,
    last_retention: Mutex<HashMap<String, i64>>,
}

/// When an agent last relayed a capture (per connection).
struct LastCapture(Option<std::time::Instant>);

struct ConnectedAgent {
    host: String,
    job: String,
    sources: HashSet<String>,
    nvml: Vec<NvmlDevice>,
    commands: mpsc::UnboundedSender<ServerMessage>,
    last_capture: LastCapture,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The routes of this module, with their registry of connected agents.
/// Outside the request timeout: a WebSocket lasts as long as the job.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route(paths::AGENT_SOCKET.route(), get(agent_socket))
        .route(paths::LIVE.route(), get(list))
        .route(paths::LIVE_SOURCE.route(), get(read))
        .route(paths::LIVE_CAPTURE.route(), post(capture))
        .layer(Extension(Arc::new(LiveRegistry::default())))
}

async fn agent_socket(
    uploader: RequireRole<Uploader>,
    State(state): State<AppState>,
    Extension(registry): Extension<Arc<LiveRegistry>>,
    upgrade: WebSocketUpgrade,
) -> AppResult<Response> {
    let owner = uploader.identity().token_id;
    Ok(upgrade.max_message_size(MAX_AGENT_FRAME).on_upgrade(move |socket| serve_agent(socket, state, registry, owner)))
}

async fn serve_agent(mut socket: WebSocket, state: AppState, registry: Arc<LiveRegistry>, owner: Option<String>) {
    let id = registry.next.fetch_add(1, Ordering::Relaxed);
    let (tx, mut rx) = mpsc::unbounded_channel();
    lock(&registry.agents).insert(
        id,
        ConnectedAgent {
            host: String::new(),
            job: String::new(),
            sources: HashSet::new(),
            nvml: Vec::new(),
            commands: tx,
            last_capture: LastCapture(None),
        },
    );
    loop {
        tokio::select! {
            command = rx.recv() => {
                let Some(command) = command else { break };
                let Ok(text) = serde_json::to_string(&command) else { continue };
                if socket.send(Message::text(text)).await.is_err() {
                    break;
                }
            }
            frame = socket.recv() => {
                let text = match frame {
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                    Some(Ok(_)) => continue,
                };
                let message = match serde_json::from_str::<AgentMessage>(text.as_str()) {
                    Ok(m) => m,
                    Err(e) => {
                        tracing::warn!(error = %e, "agent sent a frame that does not parse");
                        continue;
                    }
                };
                match handle(&state, &registry, id, owner.as_deref(), message).await {
                    Ok(Some(reply)) => {
                        let Ok(text) = serde_json::to_string(&reply) else { continue };
                        if socket.send(Message::text(text)).await.is_err() {
                            break;
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        // Not acknowledged: the agent sends the batch again.
                        tracing::error!(error = format!("{e:#}"), "cannot store telemetry");
                    }
                }
            }
        }
    }
    lock(&registry.agents).remove(&id);
}

async fn handle(
    state: &AppState,
    registry: &LiveRegistry,
    id: u64,
    owner: Option<&str>,
    message: AgentMessage,
) -> anyhow::Result<Option<ServerMessage>> {
    match message {
        AgentMessage::Hello { host, job } => {
            if let Some(agent) = lock(&registry.agents).get_mut(&id) {
                agent.host = host;
                agent.job = job;
            }
            Ok(None)
        }
        AgentMessage::Ranks { sources } => {
            if let Some(agent) = lock(&registry.agents).get_mut(&id) {
                agent.sources = sources.iter().map(|s| s.key()).collect();
            }
            Ok(None)
        }
        AgentMessage::Nvml { devices } => {
            if let Some(agent) = lock(&registry.agents).get_mut(&id) {
                agent.nvml = devices;
            }
            Ok(None)
        }
        AgentMessage::Samples { seq, sources, samples } => {
            let refused = state.db.insert_telemetry(owner, &sources, &samples).await?;
            if !refused.is_empty() {
                // Acknowledged all the same: sending it again changes nothing.
                tracing::warn!(?refused, "telemetry refused: sources of another token, or not declared in the batch");
            }
            let now = crate::clock::now_ms();
            let due: Vec<String> = {
                let mut last = lock(&registry.last_retention);
                sources
                    .iter()
                    .map(|s| s.key())
                    .filter(|key| {
                        let entry = last.entry(key.clone()).or_insert(0);
                        let due = now - *entry >= RETENTION_EVERY_MS;
                        if due {
                            *entry = now;
                        }
                        due
                    })
                    .collect()
            };
            for key in due {
                state.db.retain_samples(&key).await?;
            }
            Ok(Some(ServerMessage::Ack { seq }))
        }
    }
}

async fn list(
    State(state): State<AppState>,
    Extension(registry): Extension<Arc<LiveRegistry>>,
) -> AppResult<Json<LiveList>> {
    let records = state.db.list_sources().await?;
    let (connected, hosts) = {
        let agents = lock(&registry.agents);
        let connected: HashSet<String> = agents.values().flat_map(|a| a.sources.iter().cloned()).collect();
        let hosts = agents
            .values()
            .map(|a| Host { host: a.host.clone(), job: a.job.clone(), devices: a.nvml.clone() })
            .collect();
        (connected, hosts)
    };
    let sources = records
        .into_iter()
        .map(|record| Source { connected: connected.contains(&record.info.source), ..record.info })
        .collect();
    Ok(Json(LiveList { sources, hosts }))
}

async fn read(
    State(state): State<AppState>,
    Extension(registry): Extension<Arc<LiveRegistry>>,
    Path(source): Path<String>,
    Query(params): Query<ReadParams>,
) -> AppResult<Json<LiveRead>> {
    let record =
        state.db.get_source(&source).await?.ok_or_else(|| AppError::NotFound(format!("live source {source}")))?;
    let limit = params.limit.unwrap_or(MAX_READ).clamp(1, MAX_READ);
    let samples = state.db.samples(&source, params.since_ms.unwrap_or(i64::MIN), limit).await?;
    let snapshots = markers(&state, &record).await?;
    let (connected, devices) = {
        let agents = lock(&registry.agents);
        let serving = agents.values().find(|a| a.sources.contains(&source));
        let host = agents.values().find(|a| a.host == record.info.host && !a.nvml.is_empty());
        (serving.is_some(), host.map(|a| a.nvml.clone()).unwrap_or_default())
    };
    Ok(Json(LiveRead { source: Source { connected, ..record.info }, samples, snapshots, devices }))
}

/// The snapshots uploaded with the source's job, host and rank.
async fn markers(state: &AppState, record: &SourceRecord) -> AppResult<Vec<Marker>> {
    let filter = ListFilter {
        job: Some(record.info.job.clone()),
        host: Some(record.info.host.clone()),
        // The list caps this at its largest page.
        limit: Some(u32::MAX),
        ..ListFilter::default()
    };
    let page = state.db.list(&filter).await?;
    let mine = |s: &SnapshotRecord| s.rank == record.info.rank;
    let mut markers: Vec<Marker> = page
        .items
        .iter()
        .filter(|s| mine(s))
        .map(|s| Marker {
            id: s.id.clone(),
            name: s.name.clone(),
            trigger: s.trigger,
            uploaded_at_ms: s.uploaded_at_ms,
        })
        .collect();
    markers.sort_by_key(|m| m.uploaded_at_ms);
    Ok(markers)
}

async fn capture(
    uploader: RequireRole<Uploader>,
    State(state): State<AppState>,
    Extension(registry): Extension<Arc<LiveRegistry>>,
    Path(source): Path<String>,
    Query(params): Query<CaptureParams>,
) -> AppResult<(StatusCode, Json<serde_json::Value>)> {
    let identity = uploader.identity();
    // A source's job is its token's: another uploader may not make it dump.
    let record = state.db.get_source(&source).await?;
    if let Some(record) = &record
        && record.owner_token.is_some()
        && record.owner_token != identity.token_id
        && identity.role < Role::Admin
    {
        return Err(AppError::Forbidden(Role::Admin.as_str()));
    }
    let mut agents = lock(&registry.agents);
    let Some(agent) = agents.values_mut().find(|a| a.sources.contains(&source)) else {
        return Err(AppError::NotFound(format!(
            "no connected agent serves {source} (the job ended, or its agent is reconnecting)"
        )));
    };
    if let Some(at) = agent.last_capture.0
        && at.elapsed() < CAPTURE_EVERY
    {
        let wait = (CAPTURE_EVERY - at.elapsed()).as_secs() + 1;
        return Err(AppError::TooManyRequests(format!(
            "a capture was relayed to this job's agent {} s ago; the next one can be asked for in {wait} s",
            at.elapsed().as_secs()
        )));
    }
    agent.last_capture.0 = Some(std::time::Instant::now());
    let command = ServerMessage::Capture {
        source: if params.all { None } else { Some(source.clone()) },
        reason: format!("capture now, asked by {} from the dashboard", identity.name),
    };
    agent
        .commands
        .send(command)
        .map_err(|_| AppError::NotFound(format!("the agent serving {source} just disconnected")))?;
    Ok((StatusCode::ACCEPTED, Json(serde_json::json!({ "source": source, "all": params.all, "host": agent.host }))))
}
