//! What the agent's tasks share: the connected processes of the job, the
//! telemetry on its way to the server, the latest NVML reading.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{Notify, mpsc};

use vramscope_shared::api::agent::{JobCommand, NvmlDevice, Sample, SourceLabels};

/// Samples held in memory while the server is away; beyond this the oldest
/// are written to the spool (see `Hub::overflow`).
pub(crate) const PENDING_LIMIT: usize = 200_000;

/// A process of the job connected to the agent's socket.
#[derive(Debug)]
pub(crate) struct RankConn {
    /// Its labels, once it said hello.
    pub(crate) labels: Option<SourceLabels>,
    /// Lines to it.
    pub(crate) commands: mpsc::UnboundedSender<JobCommand>,
}

/// Telemetry not yet stored by the server.
#[derive(Debug, Default)]
pub(crate) struct TelemetryQueue {
    /// Not sent yet, oldest first.
    pub(crate) pending: VecDeque<Sample>,
    /// Sent in batch `seq`, not yet acknowledged.
    pub(crate) inflight: BTreeMap<u64, Vec<Sample>>,
    /// Labels of every source seen, by key.
    pub(crate) sources: HashMap<String, SourceLabels>,
}

impl TelemetryQueue {
    /// Nothing left to deliver.
    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty() && self.inflight.is_empty()
    }

    /// Puts every unacknowledged batch back in front of the pending samples,
    /// in order (after a lost connection).
    pub(crate) fn requeue_inflight(&mut self) {
        let inflight = std::mem::take(&mut self.inflight);
        for batch in inflight.into_values().rev() {
            for sample in batch.into_iter().rev() {
                self.pending.push_front(sample);
            }
        }
    }

    /// The labels of every source seen.
    pub(crate) fn sources_list(&self) -> Vec<SourceLabels> {
        self.sources.values().cloned().collect()
    }

    /// Everything not delivered, oldest first (at exit).
    pub(crate) fn drain_all(&mut self) -> Vec<Sample> {
        self.requeue_inflight();
        self.pending.drain(..).collect()
    }
}

/// State shared by the agent's tasks.
#[derive(Debug, Default)]
pub(crate) struct Hub {
    /// Connected processes, by connection number.
    pub(crate) ranks: Mutex<HashMap<u64, RankConn>>,
    next_conn: AtomicU64,
    /// Telemetry on its way.
    pub(crate) telemetry: Mutex<TelemetryQueue>,
    /// The latest NVML reading (empty without NVML).
    pub(crate) nvml: Mutex<Vec<NvmlDevice>>,
    /// A snapshot was spooled: the uploader looks now.
    pub(crate) spooled: Notify,
    /// The set of connected processes changed: the uplink tells the server.
    pub(crate) ranks_changed: Notify,
}

impl Hub {
    /// Registers a new connection and returns its number.
    pub(crate) fn connect(&self, commands: mpsc::UnboundedSender<JobCommand>) -> u64 {
        let id = self.next_conn.fetch_add(1, Ordering::Relaxed);
        lock(&self.ranks).insert(id, RankConn { labels: None, commands });
        id
    }

    /// Records who connection `id` is.
    pub(crate) fn identify(&self, id: u64, labels: SourceLabels) {
        lock(&self.telemetry).sources.insert(labels.key(), labels.clone());
        if let Some(conn) = lock(&self.ranks).get_mut(&id) {
            conn.labels = Some(labels);
        }
        self.ranks_changed.notify_one();
    }

    /// Forgets connection `id`.
    pub(crate) fn disconnect(&self, id: u64) {
        lock(&self.ranks).remove(&id);
        self.ranks_changed.notify_one();
    }

    /// Labels of every identified connection.
    pub(crate) fn connected(&self) -> Vec<SourceLabels> {
        let mut sources: Vec<SourceLabels> = lock(&self.ranks).values().filter_map(|c| c.labels.clone()).collect();
        sources.sort_by_key(|s| (s.rank, s.pid));
        sources
    }

    /// Number of open connections.
    pub(crate) fn connection_count(&self) -> usize {
        lock(&self.ranks).len()
    }

    /// Sends `command` to the process whose key is `source` (every process
    /// when `None`), except connection `except`; returns how many got it.
    pub(crate) fn send(&self, source: Option<&str>, except: Option<u64>, command: &JobCommand) -> usize {
        let ranks = lock(&self.ranks);
        let mut sent = 0;
        for (id, conn) in ranks.iter() {
            if Some(*id) == except {
                continue;
            }
            let matches = match (source, &conn.labels) {
                (None, _) => true,
                (Some(key), Some(labels)) => labels.key() == key,
                (Some(_), None) => false,
            };
            if matches && conn.commands.send(command.clone()).is_ok() {
                sent += 1;
            }
        }
        sent
    }

    /// Queues a sample for the server. Returns the samples pushed out of
    /// memory when the queue is over [`PENDING_LIMIT`] (the caller spools them).
    pub(crate) fn push_sample(&self, sample: Sample) -> Vec<Sample> {
        let mut queue = lock(&self.telemetry);
        queue.pending.push_back(sample);
        if queue.pending.len() > PENDING_LIMIT {
            let spill = queue.pending.len() - PENDING_LIMIT / 2;
            return queue.pending.drain(..spill).collect();
        }
        Vec::new()
    }
}

/// Locks `mutex`, recovering the data if a panicking holder poisoned it
/// (the agent's state stays usable; the job must not suffer for our bug).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_ms: i64) -> Sample {
        Sample {
            source: "s".to_owned(),
            t_ms,
            device: 0,
            allocated: None,
            reserved: None,
            active: None,
            device_total: None,
            device_free: None,
            capacity: None,
            nvml_used: None,
            nvml_process_used: None,
        }
    }

    #[test]
    fn requeued_batches_keep_their_order_ahead_of_newer_samples() {
        let mut queue = TelemetryQueue::default();
        queue.inflight.insert(1, vec![sample(1), sample(2)]);
        queue.inflight.insert(2, vec![sample(3)]);
        queue.pending.push_back(sample(4));
        let times: Vec<i64> = queue.drain_all().iter().map(|s| s.t_ms).collect();
        assert_eq!(times, [1, 2, 3, 4]);
        assert!(queue.is_empty());
    }

    #[test]
    fn commands_reach_one_source_or_all_but_the_sender() {
        let hub = Hub::default();
        let mut receivers = Vec::new();
        let mut ids = Vec::new();
        for rank in 0..3 {
            let (tx, rx) = mpsc::unbounded_channel();
            let id = hub.connect(tx);
            let labels = SourceLabels {
                job: "j".to_owned(),
                host: "h".to_owned(),
                rank: Some(rank),
                local_rank: Some(rank),
                world_size: Some(3),
                pid: 10 + rank as u32,
                backend: None,
                history: None,
            };
            hub.identify(id, labels);
            receivers.push(rx);
            ids.push(id);
        }
        let command = JobCommand::Capture { trigger: "manual".to_owned(), reason: String::new(), tags: Vec::new() };
        assert_eq!(hub.send(Some("j--h--rank1"), None, &command), 1);
        assert_eq!(hub.send(None, Some(ids[0]), &command), 2);
        let got: Vec<usize> =
            receivers.iter_mut().map(|rx| std::iter::from_fn(|| rx.try_recv().ok()).count()).collect();
        assert_eq!(got, [0, 2, 1]);
        assert_eq!(hub.connected().len(), 3);
    }

    #[test]
    fn an_overfull_queue_hands_back_its_oldest_half() {
        let hub = Hub::default();
        let mut spilled = Vec::new();
        for t in 0..=PENDING_LIMIT as i64 {
            spilled.extend(hub.push_sample(sample(t)));
        }
        assert_eq!(spilled.len(), PENDING_LIMIT / 2 + 1);
        assert_eq!(spilled[0].t_ms, 0);
        assert_eq!(lock(&hub.telemetry).pending.front().map(|s| s.t_ms), Some(PENDING_LIMIT as i64 / 2 + 1));
    }
}
