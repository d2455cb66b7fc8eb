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
/// Samples stored for a source since its last retention pass past which
/// the pass runs at once: the per-source cap
/// (`store::telemetry::MAX_SAMPLES_PER_SOURCE`) holds within this many,
/// however fast an agent sends.
const RETAIN_AFTER_SAMPLES: u64 = 10_000;
/// Sources whose retention bookkeeping is kept before the idle ones go.
const RETENTION_ENTRIES: usize = 10_000;
/// Samples a live read returns at most.
const MAX_READ: i64 = 20_000;
/// Least time between two "capture now" relayed to one agent: each asks
/// every rank it serves for a snapshot, which costs the job seconds.
const CAPTURE_EVERY: std::time::Duration = std::time::Duration::from_secs(30);
/// Largest frame an agent may send: a batch of 2,000 samples, the agent's
/// most, is about 500 kB.
const MAX_AGENT_FRAME: usize = 1 << 20;
/// Longest host or job name an agent may give (a source key, which holds
/// both, is stored up to 600 bytes).
const MAX_NAME_BYTES: usize = 256;
/// Most sources one frame may name, and samples one batch may carry.
const MAX_FRAME_SOURCES: usize = 1024;
const MAX_FRAME_SAMPLES: usize = 4096;
/// Most NVML devices an agent may report, and processes per device.
const MAX_NVML_DEVICES: usize = 64;
const MAX_NVML_PROCESSES: usize = 256;
/// Sources the live list names at most (the most recently active).
const MAX_LISTED: u32 = 1000;
/// How often a connection re-reads its token: a revoked one's socket is
/// closed within this (and a batch is never stored after it).
const TOKEN_CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The agents connected to this instance.
#[derive(Default)]
pub(crate) struct LiveRegistry {
    agents: Mutex<HashMap<u64, ConnectedAgent>>,
    next: AtomicU64,
    /// Per source: when its retention pass last ran, and samples stored since.
    retention: Mutex<HashMap<String, (i64, u64)>>,
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
    let mut token_check = tokio::time::interval(TOKEN_CHECK_EVERY);
    loop {
        tokio::select! {
            _ = token_check.tick() => {
                if let Some(why) = revoked(&state, owner.as_deref()).await {
                    close(&mut socket, &why).await;
                    break;
                }
            }
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
                if let Err(why) = within_bounds(&message) {
                    // Said to the agent, logged in a bounded line, and the
                    // connection closed: nothing of the frame is kept.
                    tracing::warn!(why, "agent frame refused; closing its connection");
                    close(&mut socket, &why).await;
                    break;
                }
                if let AgentMessage::Samples { .. } = message
                    && let Some(why) = revoked(&state, owner.as_deref()).await
                {
                    close(&mut socket, &why).await;
                    break;
                }
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
            let max_sources = state.settings.telemetry_max_sources_per_token;
            let refused = state.db.insert_telemetry(owner, &sources, &samples, max_sources).await?;
            if !refused.is_empty() {
                // Acknowledged all the same: sending it again changes nothing.
                // Logged bounded: a key can be as long as a frame.
                let first: String = refused[0].chars().take(100).collect();
                tracing::warn!(
                    count = refused.len(),
                    first,
                    "telemetry refused: sources of another token, not declared in the batch, past the token's \
                     telemetry_max_sources_per_token, or with names past any real one"
                );
            }
            let now = crate::clock::now_ms();
            let due: Vec<String> = {
                let mut retention = lock(&registry.retention);
                if retention.len() > RETENTION_ENTRIES {
                    retention.retain(|_, (at, _)| now - *at < 10 * RETENTION_EVERY_MS);
                }
                // Samples per source in one pass (a frame may name 1024
                // sources and carry 4096 samples).
                let mut per_source: HashMap<&str, u64> = HashMap::new();
                for sample in &samples {
                    *per_source.entry(sample.source.as_str()).or_default() += 1;
                }
                let refused: HashSet<&str> = refused.iter().map(String::as_str).collect();
                let accepted = sources.iter().map(|s| s.key()).filter(|key| !refused.contains(key.as_str()));
                accepted
                    .filter(|key| {
                        let stored = per_source.get(key.as_str()).copied().unwrap_or(0);
                        let (at, since) = retention.entry(key.clone()).or_insert((now, 0));
                        *since += stored;
                        let due = now - *at >= RETENTION_EVERY_MS || *since >= RETAIN_AFTER_SAMPLES;
                        if due {
                            (*at, *since) = (now, 0);
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

/// Why a frame is refused: a name, list or batch past what any real agent
/// sends (each refusal closes the connection).
fn within_bounds(message: &AgentMessage) -> Result<(), String> {
    let name = |what: &str, text: &str| {
        if text.len() > MAX_NAME_BYTES {
            Err(format!("{what} of {} bytes; at most {MAX_NAME_BYTES}", text.len()))
        } else {
            Ok(())
        }
    };
    let count = |what: &str, n: usize, max: usize| {
        if n > max { Err(format!("{n} {what} in one frame; at most {max}")) } else { Ok(()) }
    };
    match message {
        AgentMessage::Hello { host, job } => {
            name("a host name", host)?;
            name("a job name", job)
        }
        AgentMessage::Ranks { sources } => {
            count("sources", sources.len(), MAX_FRAME_SOURCES)?;
            sources.iter().try_for_each(|s| name("a host name", &s.host).and_then(|()| name("a job name", &s.job)))
        }
        AgentMessage::Samples { sources, samples, .. } => {
            count("sources", sources.len(), MAX_FRAME_SOURCES)?;
            count("samples", samples.len(), MAX_FRAME_SAMPLES)
        }
        AgentMessage::Nvml { devices } => {
            count("NVML devices", devices.len(), MAX_NVML_DEVICES)?;
            devices.iter().try_for_each(|d| {
                name("a device name", &d.name)?;
                count("processes of a device", d.processes.len(), MAX_NVML_PROCESSES)
            })
        }
    }
}

/// Why the connection's token no longer stands (deleted), if so. Without
/// tokens, or when the database cannot say, the connection goes on.
async fn revoked(state: &AppState, owner: Option<&str>) -> Option<String> {
    let id = owner?;
    match state.db.get_token(id).await {
        Ok(None) => Some("the token of this connection was revoked".to_owned()),
        _ => None,
    }
}

/// Tells the agent why, in a close frame (policy violation), bounded.
async fn close(socket: &mut WebSocket, why: &str) {
    let reason: String = why.chars().take(120).collect();
    let frame = axum::extract::ws::CloseFrame { code: 1008, reason: reason.into() };
    drop(socket.send(Message::Close(Some(frame))).await);
}

async fn list(
    State(state): State<AppState>,
    Extension(registry): Extension<Arc<LiveRegistry>>,
) -> AppResult<Json<LiveList>> {
    let (records, total) = state.db.list_sources(MAX_LISTED).await?;
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
    Ok(Json(LiveList { sources, total, hosts }))
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
