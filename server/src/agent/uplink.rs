//! The agent's WebSocket to the server: telemetry up (acknowledged batch by
//! batch, resent after a reconnect), "capture now" down.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use super::hub::{Hub, lock};
use super::spool::Backoff;
use vramscope_shared::api::agent::{AgentMessage, JobCommand, ServerMessage, SourceLabels};
use vramscope_shared::api::paths;

/// Samples per batch.
const BATCH: usize = 2000;
/// Batches sent and not yet acknowledged, at most.
const WINDOW: usize = 8;

/// Where and how to connect.
#[derive(Debug, Clone)]
pub(crate) struct Uplink {
    /// `ws://` or `wss://` URL of the agents' socket ([`paths::AGENT_SOCKET`]).
    pub(crate) url: String,
    /// Bearer token.
    pub(crate) token: Option<String>,
    /// Host name for the hello.
    pub(crate) host: String,
    /// Job name for the hello.
    pub(crate) job: String,
    /// How often to send what has accumulated.
    pub(crate) flush_every: Duration,
}

/// The WebSocket URL of a server's agent endpoint.
pub(crate) fn ws_url(server: &str) -> anyhow::Result<String> {
    let base = server.trim_end_matches('/');
    let rest = if let Some(rest) = base.strip_prefix("http://") {
        format!("ws://{rest}")
    } else if let Some(rest) = base.strip_prefix("https://") {
        format!("wss://{rest}")
    } else {
        anyhow::bail!("--server must start with http:// or https://: {server}")
    };
    Ok(format!("{rest}{}", paths::AGENT_SOCKET.path([])))
}

impl Uplink {
    /// Keeps a connection up until `stop` is set and nothing is left to send.
    /// Never returns an error: a failed connection is retried with backoff.
    pub(crate) async fn run(self, hub: Arc<Hub>, stop: Arc<AtomicBool>) {
        let mut backoff = Backoff::new();
        let mut warned = false;
        loop {
            if stop.load(Ordering::Relaxed) && lock(&hub.telemetry).is_empty() {
                return;
            }
            let started = tokio::time::Instant::now();
            match self.session(&hub, &stop).await {
                Ok(()) => return,
                Err(e) => {
                    lock(&hub.telemetry).requeue_inflight();
                    // A session that lasted was a working link: the next
                    // outage starts its backoff (and its warning) afresh.
                    if started.elapsed() > Duration::from_secs(5) {
                        backoff.reset();
                        warned = false;
                    }
                    if !warned {
                        eprintln!("vramscope agent: telemetry link down ({e:#}); retrying, nothing is dropped");
                        warned = true;
                    }
                    tokio::time::sleep(backoff.step()).await;
                }
            }
        }
    }

    /// One connection: returns Ok when stopped with everything delivered.
    async fn session(&self, hub: &Hub, stop: &AtomicBool) -> anyhow::Result<()> {
        let mut request = self.url.as_str().into_client_request()?;
        if let Some(token) = &self.token {
            request.headers_mut().insert("authorization", format!("Bearer {token}").parse()?);
        }
        let (socket, _) = tokio::time::timeout(Duration::from_secs(10), tokio_tungstenite::connect_async(request))
            .await
            .map_err(|_| anyhow::anyhow!("connecting to {} timed out", self.url))?
            .map_err(|e| anyhow::anyhow!("cannot connect to {}: {e}", self.url))?;
        let (mut sink, mut stream) = socket.split();
        let hello = AgentMessage::Hello { host: self.host.clone(), job: self.job.clone() };
        sink.send(text(&hello)?).await?;
        sink.send(text(&AgentMessage::Ranks { sources: hub.connected() })?).await?;
        let mut seq: u64 = 0;
        let mut last_nvml = Vec::new();
        let mut tick = tokio::time::interval(self.flush_every);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let nvml = lock(&hub.nvml).clone();
                    if !nvml.is_empty() && nvml != last_nvml {
                        sink.send(text(&AgentMessage::Nvml { devices: nvml.clone() })?).await?;
                        last_nvml = nvml;
                    }
                    while let Some(batch) = next_batch(hub, &mut seq) {
                        sink.send(text(&batch)?).await?;
                    }
                    if stop.load(Ordering::Relaxed) && lock(&hub.telemetry).is_empty() {
                        let _ = sink.send(Message::Close(None)).await;
                        return Ok(());
                    }
                }
                _ = hub.ranks_changed.notified() => {
                    sink.send(text(&AgentMessage::Ranks { sources: hub.connected() })?).await?;
                }
                frame = stream.next() => {
                    match frame {
                        Some(Ok(Message::Text(body))) => match serde_json::from_str::<ServerMessage>(&body) {
                            Ok(ServerMessage::Ack { seq }) => { lock(&hub.telemetry).inflight.remove(&seq); }
                            Ok(ServerMessage::Capture { source, reason }) => {
                                let command = JobCommand::Capture {
                                    trigger: "manual".to_owned(),
                                    reason,
                                    tags: vec!["capture-now".to_owned()],
                                };
                                hub.send(source.as_deref(), None, &command);
                            }
                            Err(_) => {}
                        },
                        Some(Ok(Message::Close(_))) | None => anyhow::bail!("the server closed the connection"),
                        Some(Err(e)) => anyhow::bail!("connection broke: {e}"),
                        Some(Ok(_)) => {}
                    }
                }
            }
        }
    }
}

/// The next batch to send, if the window has room and samples wait.
fn next_batch(hub: &Hub, seq: &mut u64) -> Option<AgentMessage> {
    let mut queue = lock(&hub.telemetry);
    if queue.pending.is_empty() || queue.inflight.len() >= WINDOW {
        return None;
    }
    let take = queue.pending.len().min(BATCH);
    let samples: Vec<_> = queue.pending.drain(..take).collect();
    let mut keys: Vec<&str> = samples.iter().map(|s| s.source.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    let sources: Vec<SourceLabels> = keys.iter().filter_map(|k| queue.sources.get(*k).cloned()).collect();
    *seq += 1;
    queue.inflight.insert(*seq, samples.clone());
    Some(AgentMessage::Samples { seq: *seq, sources, samples })
}

fn text(message: &AgentMessage) -> anyhow::Result<Message> {
    Ok(Message::text(serde_json::to_string(message)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ws_urls_follow_the_server_scheme() {
        assert_eq!(ws_url("http://h:8080/").expect("http"), "ws://h:8080/api/v1/agents/ws");
        assert_eq!(ws_url("https://h").expect("https"), "wss://h/api/v1/agents/ws");
        assert!(ws_url("h:8080").is_err());
    }
}
