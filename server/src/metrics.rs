//! Prometheus metrics, served as text at `/metrics`.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};

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
    /// Analyses running on the pool's threads now, and the most at once
    /// since start (set from the analysis queue when scraped): never more
    /// than `analysis_concurrency`, also when clients hang up.
    pub(crate) analyses_running: Gauge,
    pub(crate) analyses_running_peak: Gauge,
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
    /// Every metric, registered; the exposition lists them in this order.
    pub(crate) fn new() -> Metrics {
        let mut registry = Registry::with_prefix("vramscope");
        let r = &mut registry;
        let buckets = || exponential_buckets(0.001, 2.0, 16);
        let index_opens =
            registered(r, "index_opens", "Snapshots opened from their persisted index", Counter::default());
        let index_open_seconds =
            registered(r, "index_open_seconds", "Time to open a persisted index", Histogram::new(buckets()));
        let index_writes = registered(r, "index_writes", "Persisted indexes written", Counter::default());
        let index_rebuilds = registered(r, "index_rebuilds", "Unusable persisted indexes rebuilt", Counter::default());
        let index_other_snapshot = registered(
            r,
            "index_other_snapshot",
            "Persisted indexes of another snapshot file found in a snapshot's place, rebuilt",
            Counter::default(),
        );
        let uploads = registered(r, "uploads", "Snapshot uploads by outcome", Family::default());
        let upload_bytes = registered(r, "upload_bytes", "Bytes received in uploads", Counter::default());
        let bytes_stored = registered(r, "bytes_stored", "Bytes of new snapshot files stored", Counter::default());
        let parse_seconds =
            registered(r, "parse_seconds", "Time to parse and index a snapshot", Histogram::new(buckets()));
        let errors = registered(r, "errors", "Requests that failed, by kind", Family::default());
        let cached_snapshots = registered(r, "cached_snapshots", "Snapshots held parsed in memory", Gauge::default());
        let reports_rendered = registered(r, "reports_rendered", "Report pages rendered", Counter::default());
        let predictions_computed =
            registered(r, "predictions_computed", "Predictions computed (not from the cache)", Counter::default());
        let mcp_answers_computed =
            registered(r, "mcp_answers_computed", "MCP tool answers computed (not from the cache)", Counter::default());
        let cached_bytes =
            registered(r, "cached_bytes", "About how many bytes the cached snapshots hold", Gauge::default());
        let token_hashes =
            registered(r, "token_hashes", "Token secrets checked with argon2 since start", Gauge::default());
        let analyses_running =
            registered(r, "analyses_running", "Analyses running on the analysis pool now", Gauge::default());
        let analyses_running_peak = registered(
            r,
            "analyses_running_peak",
            "Most analyses running on the analysis pool at once since start",
            Gauge::default(),
        );
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
            analyses_running,
            analyses_running_peak,
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

/// `metric`, registered in `registry` as `name` with `help`; the handle
/// the server counts with (a clone: both share the one value).
fn registered<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_lists_every_metric_once_in_registration_order() {
        let metrics = Metrics::new();
        // A family without a label set is left out of the exposition.
        metrics.upload("ok");
        metrics.error("not_found");
        let text = metrics.render();
        let names: Vec<&str> =
            text.lines().filter_map(|l| l.strip_prefix("# HELP vramscope_")?.split(' ').next()).collect();
        assert_eq!(
            names,
            [
                "index_opens",
                "index_open_seconds",
                "index_writes",
                "index_rebuilds",
                "index_other_snapshot",
                "uploads",
                "upload_bytes",
                "bytes_stored",
                "parse_seconds",
                "errors",
                "cached_snapshots",
                "reports_rendered",
                "predictions_computed",
                "mcp_answers_computed",
                "cached_bytes",
                "token_hashes",
                "analyses_running",
                "analyses_running_peak",
            ]
        );
        assert!(text.contains("# HELP vramscope_index_other_snapshot Persisted indexes of another snapshot file found in a snapshot's place, rebuilt.\n"), "{text}");
    }
}
