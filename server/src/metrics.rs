//! Prometheus metrics, served as text at `/metrics`.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Label for outcomes (`ok`, `duplicate`, `rejected`, `too_large`, `failed`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct Outcome {
    pub(crate) outcome: String,
}

/// The server's metrics.
pub(crate) struct Metrics {
    registry: Registry,
    /// Uploads by outcome.
    pub(crate) uploads: Family<Outcome, Counter>,
    /// Bytes received in uploads.
    pub(crate) upload_bytes: Counter,
    /// Bytes of new snapshot files stored by this instance (after dedup).
    pub(crate) bytes_stored: Counter<u64, AtomicU64>,
    /// Seconds to parse and index a snapshot.
    pub(crate) parse_seconds: Histogram,
    /// Requests that ended in an error, by kind.
    pub(crate) errors: Family<Outcome, Counter>,
    /// Snapshots held parsed in memory.
    pub(crate) cached_snapshots: Gauge,
    /// Report pages rendered (not served from the kept ones).
    pub(crate) reports_rendered: Counter,
    /// Predictions computed (`GET /api/v1/predict` not answered from the kept ones).
    pub(crate) predictions_computed: Counter,
    /// MCP tool answers computed at `/api/v1/mcp` (not answered from the kept ones).
    pub(crate) mcp_answers_computed: Counter,
    /// About how many bytes the cached snapshots hold (set when scraped).
    pub(crate) cached_bytes: Gauge,
    /// Token secrets checked with argon2 (set from `Auth` when scraped).
    pub(crate) token_hashes: Gauge,
    /// Snapshots opened from their persisted index (no parse).
    pub(crate) index_opens: Counter,
    /// Seconds to open a persisted index.
    pub(crate) index_open_seconds: Histogram,
    /// Persisted indexes written after a parse.
    pub(crate) index_writes: Counter,
    /// Persisted indexes found unusable (old version, corrupt) and rebuilt.
    pub(crate) index_rebuilds: Counter,
    /// Of those, indexes of another snapshot file found in this one's place.
    pub(crate) index_other_snapshot: Counter,
}

impl Metrics {
    pub(crate) fn new() -> Metrics {
        let mut registry = Registry::with_prefix("vramscope");
        let uploads = Family::<Outcome, Counter>::default();
        let upload_bytes = Counter::default();
        let bytes_stored = Counter::<u64, AtomicU64>::default();
        let parse_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        let errors = Family::<Outcome, Counter>::default();
        let cached_snapshots = Gauge::default();
        let token_hashes = Gauge::default();
        let cached_bytes = Gauge::default();
        let reports_rendered = Counter::default();
        let predictions_computed = Counter::default();
        let mcp_answers_computed = Counter::default();
        let index_opens = Counter::default();
        let index_open_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        let index_writes = Counter::default();
        let index_rebuilds = Counter::default();
        let index_other_snapshot = Counter::default();
        registry.register("index_opens", "Snapshots opened from their persisted index", index_opens.clone());
        registry.register("index_open_seconds", "Time to open a persisted index", index_open_seconds.clone());
        registry.register("index_writes", "Persisted indexes written", index_writes.clone());
        registry.register("index_rebuilds", "Unusable persisted indexes rebuilt", index_rebuilds.clone());
        registry.register(
            "index_other_snapshot",
            "Persisted indexes of another snapshot file found in a snapshot's place, rebuilt",
            index_other_snapshot.clone(),
        );
        registry.register("uploads", "Snapshot uploads by outcome", uploads.clone());
        registry.register("upload_bytes", "Bytes received in uploads", upload_bytes.clone());
        registry.register("bytes_stored", "Bytes of new snapshot files stored", bytes_stored.clone());
        registry.register("parse_seconds", "Time to parse and index a snapshot", parse_seconds.clone());
        registry.register("errors", "Requests that failed, by kind", errors.clone());
        registry.register("cached_snapshots", "Snapshots held parsed in memory", cached_snapshots.clone());
        registry.register("reports_rendered", "Report pages rendered", reports_rendered.clone());
        registry.register(
            "predictions_computed",
            "Predictions computed (not from the cache)",
            predictions_computed.clone(),
        );
        registry.register(
            "mcp_answers_computed",
            "MCP tool answers computed (not from the cache)",
            mcp_answers_computed.clone(),
        );
        registry.register("cached_bytes", "About how many bytes the cached snapshots hold", cached_bytes.clone());
        registry.register("token_hashes", "Token secrets checked with argon2 since start", token_hashes.clone());
        Metrics {
            registry,
            uploads,
            upload_bytes,
            bytes_stored,
            parse_seconds,
            errors,
            cached_snapshots,
            reports_rendered,
            predictions_computed,
            mcp_answers_computed,
            cached_bytes,
            token_hashes,
            index_opens,
            index_open_seconds,
            index_writes,
            index_rebuilds,
            index_other_snapshot,
        }
    }

    /// Count an upload outcome.
    pub(crate) fn upload(&self, outcome: &str) {
        self.uploads.get_or_create(&Outcome { outcome: outcome.to_owned() }).inc();
    }

    /// Count an error by kind.
    pub(crate) fn error(&self, kind: &str) {
        self.errors.get_or_create(&Outcome { outcome: kind.to_owned() }).inc();
    }

    /// The Prometheus text exposition.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.push_str("# metrics encoding failed\n");
        }
        out
    }
}
