//! The agent's end of the local socket: one task per process of the job.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

use super::hub::{Hub, lock};
use super::nvml::figures_for;
use super::spool;
use vramscope_shared::api::agent::{JobCommand, JobMessage, JobSample, Sample, SourceLabels};

/// A line longer than this ends the connection (the protocol's lines are small).
const MAX_LINE: usize = 1 << 20;

/// Accepts the job's processes on `listener` until the task is dropped.
pub(crate) async fn accept(listener: UnixListener, hub: Arc<Hub>, job: String, spool_dir: PathBuf) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let (hub, job, spool_dir) = (hub.clone(), job.clone(), spool_dir.clone());
                tokio::spawn(async move { serve(stream, hub, job, spool_dir).await });
            }
            Err(e) => {
                eprintln!("vramscope agent: the local socket failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }
    }
}

async fn serve(stream: UnixStream, hub: Arc<Hub>, job: String, spool_dir: PathBuf) {
    let (read, mut write) = stream.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<JobCommand>();
    let id = hub.connect(tx);
    let writer = tokio::spawn(async move {
        while let Some(command) = rx.recv().await {
            let Ok(mut line) = serde_json::to_vec(&command) else { continue };
            line.push(b'\n');
            if write.write_all(&line).await.is_err() {
                break;
            }
        }
    });
    let mut reader = BufReader::new(read);
    let mut labels: Option<SourceLabels> = None;
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader).take(MAX_LINE as u64).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) if line.last() != Some(&b'\n') && line.len() >= MAX_LINE => break,
            Ok(_) => {}
        }
        let Ok(message) = serde_json::from_slice::<JobMessage>(&line) else { continue };
        handle(&hub, id, &job, &spool_dir, &mut labels, message);
    }
    hub.disconnect(id);
    writer.abort();
}

fn handle(
    hub: &Hub,
    id: u64,
    job: &str,
    spool_dir: &std::path::Path,
    labels: &mut Option<SourceLabels>,
    message: JobMessage,
) {
    match message {
        JobMessage::Hello { host, pid, rank, local_rank, world_size, backend, history } => {
            let who = SourceLabels { job: job.to_owned(), host, rank, local_rank, world_size, pid, backend, history };
            hub.identify(id, who.clone());
            *labels = Some(who);
        }
        JobMessage::Sample(sample) => {
            let Some(who) = labels.as_ref() else { return };
            let (nvml_used, nvml_process_used) = figures_for(&lock(&hub.nvml), who.pid);
            let spill = hub.push_sample(to_sample(who, sample, nvml_used, nvml_process_used));
            if !spill.is_empty()
                && let Err(e) = spool::save_telemetry(spool_dir, &lock(&hub.telemetry).sources_list(), &spill)
            {
                eprintln!("vramscope agent: {e:#}");
            }
        }
        JobMessage::Snapshot { .. } => hub.spooled.notify_one(),
        JobMessage::Threshold { reason } => {
            // Capture every rank together: the others' state at the moment
            // one of them nears its limit is what a comparison needs.
            let from = labels.as_ref().map_or_else(|| "a process".to_owned(), describe);
            let command = JobCommand::Capture {
                trigger: "threshold".to_owned(),
                reason: format!("{from} crossed the threshold: {reason}"),
                tags: vec!["peer-capture".to_owned()],
            };
            hub.send(None, Some(id), &command);
        }
        JobMessage::Oom { .. } | JobMessage::Unknown => {}
    }
}

fn describe(labels: &SourceLabels) -> String {
    match labels.rank {
        Some(rank) => format!("rank {rank}"),
        None => format!("pid {}", labels.pid),
    }
}

fn to_sample(who: &SourceLabels, s: JobSample, nvml_used: Option<i64>, nvml_process_used: Option<i64>) -> Sample {
    Sample {
        source: who.key(),
        t_ms: s.t_ms,
        device: s.device,
        allocated: s.allocated,
        reserved: s.reserved,
        active: s.active,
        device_total: s.total,
        device_free: s.free,
        capacity: s.capacity,
        nvml_used,
        nvml_process_used,
    }
}
