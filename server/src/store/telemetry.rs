//! Live telemetry from capture agents (migration `0002_telemetry.sql`):
//! the processes that reported (`telemetry_sources`) and their samples
//! (`telemetry_samples`). Same rules as `db.rs`: `$N` placeholders, `i64`
//! and `String` columns, one SQL for SQLite and PostgreSQL.

use anyhow::{Context, Result};
use sqlx::Row;
use sqlx::any::AnyRow;

use super::Db;
use vramscope_shared::api::agent::{Sample, SourceLabels};
use vramscope_shared::api::live::Source;

const SOURCE_COLUMNS: &str =
    "source, job, host, rank, local_rank, world_size, pid, first_ms, last_ms, owner_token, backend, history";
const SAMPLE_COLUMNS: &str = "source, device, t_ms, allocated, reserved, active, device_total, device_free, \
     capacity, nvml_used, nvml_process_used";

/// Samples older than this (behind a source's newest) are thinned to one
/// per [`THIN_WINDOW_MS`] per device.
pub(crate) const THIN_AFTER_MS: i64 = 3_600_000;
/// The window older samples are thinned to.
pub(crate) const THIN_WINDOW_MS: i64 = 10_000;
/// Samples kept per source at most (newest first): a day of 1 s samples
/// on one device, or thinned history for much longer.
pub(crate) const MAX_SAMPLES_PER_SOURCE: i64 = 100_000;

/// Longest source key (`{job}--{host}--rank{N}`) stored, in bytes.
const MAX_SOURCE_KEY_BYTES: usize = 600;

/// Longest allocator backend name stored (`native`, `cudaMallocAsync`).
const MAX_BACKEND_BYTES: usize = 64;

/// One row of `telemetry_sources`: the process as the API shows it, and
/// the token whose agent created it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SourceRecord {
    /// What the API shows (`connected` is false: the store cannot know).
    pub(crate) info: Source,
    /// The id of the token whose agent created it (`None` without tokens).
    pub(crate) owner_token: Option<String>,
}

impl Db {
    /// Stores a batch of the agent of token `owner`: upserts its sources,
    /// inserts its samples (a sample already stored is skipped), in one
    /// transaction. Returns the sources refused: those another token's
    /// agent created, and samples naming a source the batch does not
    /// declare; their samples are not stored.
    ///
    /// A token's agents create at most `max_sources` sources: past it, a
    /// batch's new sources are refused (its known ones are stored).
    pub(crate) async fn insert_telemetry(
        &self,
        owner: Option<&str>,
        sources: &[SourceLabels],
        samples: &[Sample],
        max_sources: u64,
    ) -> Result<Vec<String>> {
        let mut refused: Vec<String> = Vec::new();
        let mut tx = self.pool.begin().await.context("telemetry insert: cannot begin")?;
        let owned: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM telemetry_sources WHERE owner_token IS NOT DISTINCT FROM $1")
                .bind(owner)
                .fetch_one(&mut *tx)
                .await
                .context("telemetry insert: count the token's sources")?;
        let full = u64::try_from(owned).unwrap_or(0) >= max_sources;
        for labels in sources {
            let key = labels.key();
            // A job, host or backend name past any real one: not stored.
            if key.len() > MAX_SOURCE_KEY_BYTES || labels.backend.as_ref().is_some_and(|b| b.len() > MAX_BACKEND_BYTES)
            {
                refused.push(key);
                continue;
            }
            if full {
                let known: Option<i64> = sqlx::query_scalar("SELECT 1 FROM telemetry_sources WHERE source = $1")
                    .bind(key.as_str())
                    .fetch_optional(&mut *tx)
                    .await
                    .with_context(|| format!("telemetry_sources get {key}"))?;
                if known.is_none() {
                    refused.push(key);
                    continue;
                }
            }
            let times = samples.iter().filter(|s| s.source == key).map(|s| s.t_ms);
            let (first, last) = times.fold((i64::MAX, i64::MIN), |(a, b), t| (a.min(t), b.max(t)));
            if first > last {
                continue;
            }
            // The update applies only to the owner's own source: for
            // another token's, nothing changes and the batch's samples of it
            // are refused.
            let upserted = sqlx::query(&format!(
                "INSERT INTO telemetry_sources ({SOURCE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, \
                 $12) ON CONFLICT (source) DO UPDATE SET pid = excluded.pid, \
                 backend = COALESCE(excluded.backend, telemetry_sources.backend), \
                 history = COALESCE(excluded.history, telemetry_sources.history), \
                 first_ms = CASE WHEN excluded.first_ms < telemetry_sources.first_ms \
                     THEN excluded.first_ms ELSE telemetry_sources.first_ms END, \
                 last_ms = CASE WHEN excluded.last_ms > telemetry_sources.last_ms \
                     THEN excluded.last_ms ELSE telemetry_sources.last_ms END \
                 WHERE telemetry_sources.owner_token IS NOT DISTINCT FROM excluded.owner_token"
            ))
            .bind(key.as_str())
            .bind(labels.job.as_str())
            .bind(labels.host.as_str())
            .bind(labels.rank)
            .bind(labels.local_rank)
            .bind(labels.world_size)
            .bind(i64::from(labels.pid))
            .bind(first)
            .bind(last)
            .bind(owner)
            .bind(labels.backend.as_deref())
            .bind(labels.history.map(i64::from))
            .execute(&mut *tx)
            .await
            .with_context(|| format!("telemetry_sources upsert {key}"))?;
            if upserted.rows_affected() == 0 {
                refused.push(key);
            }
        }
        let declared: std::collections::HashSet<String> = sources.iter().map(SourceLabels::key).collect();
        for s in samples {
            if !declared.contains(&s.source) || refused.contains(&s.source) {
                if !refused.contains(&s.source) {
                    refused.push(s.source.clone());
                }
                continue;
            }
            sqlx::query(&format!(
                "INSERT INTO telemetry_samples ({SAMPLE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
                 ON CONFLICT (source, device, t_ms) DO NOTHING"
            ))
            .bind(s.source.as_str())
            .bind(s.device)
            .bind(s.t_ms)
            .bind(s.allocated)
            .bind(s.reserved)
            .bind(s.active)
            .bind(s.device_total)
            .bind(s.device_free)
            .bind(s.capacity)
            .bind(s.nvml_used)
            .bind(s.nvml_process_used)
            .execute(&mut *tx)
            .await
            .with_context(|| format!("telemetry_samples insert {} at {}", s.source, s.t_ms))?;
        }
        tx.commit().await.context("telemetry insert: cannot commit")?;
        Ok(refused)
    }

    /// Deletes the sources whose newest sample is older than `cutoff_ms`,
    /// with their samples: a job that ended weeks ago is not live.
    pub(crate) async fn expire_sources(&self, cutoff_ms: i64) -> Result<u64> {
        let mut tx = self.pool.begin().await.context("telemetry expiry: cannot begin")?;
        sqlx::query(
            "DELETE FROM telemetry_samples WHERE source IN (SELECT source FROM telemetry_sources WHERE last_ms < $1)",
        )
        .bind(cutoff_ms)
        .execute(&mut *tx)
        .await
        .context("telemetry expiry: samples")?;
        let sources = sqlx::query("DELETE FROM telemetry_sources WHERE last_ms < $1")
            .bind(cutoff_ms)
            .execute(&mut *tx)
            .await
            .context("telemetry expiry: sources")?;
        tx.commit().await.context("telemetry expiry: cannot commit")?;
        Ok(sources.rows_affected())
    }

    /// The `limit` most recently active sources, and how many there are.
    pub(crate) async fn list_sources(&self, limit: u32) -> Result<(Vec<SourceRecord>, u64)> {
        let rows = sqlx::query(&format!(
            "SELECT {SOURCE_COLUMNS} FROM telemetry_sources ORDER BY last_ms DESC, source LIMIT $1"
        ))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .context("telemetry_sources list")?;
        let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM telemetry_sources")
            .fetch_one(&self.pool)
            .await
            .context("telemetry_sources count")?;
        Ok((rows.iter().map(source_from_row).collect::<Result<_>>()?, u64::try_from(total).unwrap_or(0)))
    }

    /// The source named `source`.
    pub(crate) async fn get_source(&self, source: &str) -> Result<Option<SourceRecord>> {
        let row = sqlx::query(&format!("SELECT {SOURCE_COLUMNS} FROM telemetry_sources WHERE source = $1"))
            .bind(source)
            .fetch_optional(&self.pool)
            .await
            .with_context(|| format!("telemetry_sources get {source}"))?;
        row.as_ref().map(source_from_row).transpose()
    }

    /// Samples of `source` after `since_ms`, oldest first, at most `limit`
    /// (the newest ones when there are more; with several devices, the
    /// highest-numbered device's fill the limit first).
    pub(crate) async fn samples(&self, source: &str, since_ms: i64, limit: i64) -> Result<Vec<Sample>> {
        let rows = sqlx::query(&format!(
            "SELECT {SAMPLE_COLUMNS} FROM telemetry_samples WHERE source = $1 AND t_ms > $2 \
             ORDER BY device DESC, t_ms DESC LIMIT $3"
        ))
        .bind(source)
        .bind(since_ms)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .with_context(|| format!("telemetry_samples of {source}"))?;
        // The key's order (source, device, t_ms) read backwards: no sort in
        // the database (SQLite would spill a large one to a temporary file).
        let mut samples = rows.iter().map(sample_from_row).collect::<Result<Vec<_>>>()?;
        samples.sort_by_key(|s| (s.t_ms, s.device));
        Ok(samples)
    }

    /// Keeps `source`'s samples bounded: those more than [`THIN_AFTER_MS`]
    /// behind its newest are thinned to the first of each
    /// [`THIN_WINDOW_MS`] window per device, and beyond
    /// [`MAX_SAMPLES_PER_SOURCE`] the oldest go. Returns how many were removed.
    pub(crate) async fn retain_samples(&self, source: &str) -> Result<u64> {
        let newest: Option<i64> = sqlx::query_scalar("SELECT MAX(t_ms) FROM telemetry_samples WHERE source = $1")
            .bind(source)
            .fetch_one(&self.pool)
            .await
            .with_context(|| format!("telemetry retention of {source}: newest"))?;
        let Some(newest) = newest else { return Ok(0) };
        let cutoff = newest - THIN_AFTER_MS;
        let thinned = sqlx::query(
            "DELETE FROM telemetry_samples WHERE source = $1 AND t_ms < $2 AND t_ms NOT IN \
             (SELECT MIN(t_ms) FROM telemetry_samples WHERE source = $1 AND t_ms < $2 \
              GROUP BY device, t_ms / $3)",
        )
        .bind(source)
        .bind(cutoff)
        .bind(THIN_WINDOW_MS)
        .execute(&self.pool)
        .await
        .with_context(|| format!("telemetry retention of {source}: thinning"))?;
        let capped = sqlx::query(
            "DELETE FROM telemetry_samples WHERE source = $1 AND t_ms < \
             (SELECT t_ms FROM telemetry_samples WHERE source = $1 ORDER BY t_ms DESC LIMIT 1 OFFSET $2)",
        )
        .bind(source)
        .bind(MAX_SAMPLES_PER_SOURCE)
        .execute(&self.pool)
        .await
        .with_context(|| format!("telemetry retention of {source}: cap"))?;
        Ok(thinned.rows_affected() + capped.rows_affected())
    }
}

fn source_from_row(row: &AnyRow) -> Result<SourceRecord> {
    let source: String = row.try_get("source").context("telemetry_sources row: source")?;
    let column = |name: &str| format!("telemetry_sources row {source}: column {name}");
    let owner_token = row.try_get("owner_token").with_context(|| column("owner_token"))?;
    Ok(SourceRecord {
        info: Source {
            job: row.try_get("job").with_context(|| column("job"))?,
            host: row.try_get("host").with_context(|| column("host"))?,
            rank: row.try_get("rank").with_context(|| column("rank"))?,
            local_rank: row.try_get("local_rank").with_context(|| column("local_rank"))?,
            world_size: row.try_get("world_size").with_context(|| column("world_size"))?,
            pid: row.try_get("pid").with_context(|| column("pid"))?,
            first_ms: row.try_get("first_ms").with_context(|| column("first_ms"))?,
            last_ms: row.try_get("last_ms").with_context(|| column("last_ms"))?,
            connected: false,
            backend: row.try_get("backend").with_context(|| column("backend"))?,
            history: row.try_get::<Option<i64>, _>("history").with_context(|| column("history"))?.map(|h| h != 0),
            source,
        },
        owner_token,
    })
}

fn sample_from_row(row: &AnyRow) -> Result<Sample> {
    let source: String = row.try_get("source").context("telemetry_samples row: source")?;
    let column = |name: &str| format!("telemetry_samples row of {source}: column {name}");
    let get = |name: &str| -> Result<Option<i64>> { row.try_get(name).with_context(|| column(name)) };
    Ok(Sample {
        t_ms: row.try_get("t_ms").with_context(|| column("t_ms"))?,
        device: row.try_get("device").with_context(|| column("device"))?,
        allocated: get("allocated")?,
        reserved: get("reserved")?,
        active: get("active")?,
        device_total: get("device_total")?,
        device_free: get("device_free")?,
        capacity: get("capacity")?,
        nvml_used: get("nvml_used")?,
        nvml_process_used: get("nvml_process_used")?,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn db(tag: &str) -> Db {
        let dir = std::env::temp_dir().join(format!("vramscope-telemetry-{tag}-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).expect("dir");
        Db::connect(&Db::sqlite_url(&dir.join("db.sqlite"))).await.expect("db")
    }

    fn labels(rank: i64) -> SourceLabels {
        SourceLabels {
            job: "j".to_owned(),
            host: "h".to_owned(),
            rank: Some(rank),
            local_rank: Some(rank),
            world_size: Some(2),
            pid: 100,
            backend: None,
            history: None,
        }
    }

    fn sample(source: &str, t_ms: i64, reserved: i64) -> Sample {
        Sample {
            source: source.to_owned(),
            t_ms,
            device: 0,
            allocated: Some(reserved / 2),
            reserved: Some(reserved),
            active: None,
            device_total: Some(1000),
            device_free: Some(500),
            capacity: Some(1000),
            nvml_used: None,
            nvml_process_used: Some(7),
        }
    }

    /// Regression: any agent could write samples under another job's
    /// source name. Sources now belong to their creator's token.
    #[tokio::test]
    async fn regression_a_source_belongs_to_the_token_that_created_it() {
        let db = db("owner").await;
        let key = labels(0).key();
        let refused =
            db.insert_telemetry(Some("alice"), &[labels(0)], &[sample(&key, 1, 10)], 1 << 20).await.expect("insert");
        assert!(refused.is_empty());
        let refused =
            db.insert_telemetry(Some("mallory"), &[labels(0)], &[sample(&key, 2, 20)], 1 << 20).await.expect("insert");
        assert_eq!(refused, std::slice::from_ref(&key));
        let undeclared =
            db.insert_telemetry(Some("mallory"), &[], &[sample(&key, 3, 30)], 1 << 20).await.expect("insert");
        assert_eq!(undeclared, std::slice::from_ref(&key), "a sample must name a source of its own batch");
        let huge = SourceLabels { job: "j".repeat(1000), ..labels(0) };
        let refused = db
            .insert_telemetry(None, std::slice::from_ref(&huge), &[sample(&huge.key(), 1, 1)], 1 << 20)
            .await
            .expect("insert");
        assert_eq!(refused, [huge.key()], "a key past any real job name");
        assert_eq!(db.get_source(&huge.key()).await.expect("get"), None);
        // Nor a backend name past any real one.
        let odd = SourceLabels { backend: Some("b".repeat(65)), ..labels(1) };
        let refused = db
            .insert_telemetry(None, std::slice::from_ref(&odd), &[sample(&odd.key(), 1, 1)], 1 << 20)
            .await
            .expect("insert");
        assert_eq!(refused, [odd.key()], "a backend name past any real one");
        let kept: Vec<i64> = db.samples(&key, -1, 100).await.expect("samples").iter().map(|s| s.t_ms).collect();
        assert_eq!(kept, [1]);
        assert_eq!(db.get_source(&key).await.expect("get").and_then(|s| s.owner_token).as_deref(), Some("alice"));
        assert_eq!(db.expire_sources(2).await.expect("expire"), 1);
        assert_eq!(db.get_source(&key).await.expect("get"), None);
        assert!(db.samples(&key, -1, 100).await.expect("samples").is_empty());
    }

    #[tokio::test]
    async fn regression_a_token_creates_at_most_its_share_of_sources() {
        let db = db("cap").await;
        let source = |rank: i64| SourceLabels { job: "flood".to_owned(), ..labels(rank) };
        for rank in 0..3 {
            let key = source(rank).key();
            let refused =
                db.insert_telemetry(Some("t"), &[source(rank)], &[sample(&key, 1, 1)], 2).await.expect("insert");
            assert_eq!(refused.is_empty(), rank < 2, "rank {rank}: {refused:?}");
        }
        // A source it already has still takes samples; another token has its own share.
        let known = source(1).key();
        assert!(
            db.insert_telemetry(Some("t"), &[source(1)], &[sample(&known, 2, 1)], 2).await.expect("known").is_empty()
        );
        let other = SourceLabels { job: "other".to_owned(), ..labels(0) };
        let key = other.key();
        assert!(db.insert_telemetry(Some("u"), &[other], &[sample(&key, 1, 1)], 2).await.expect("other").is_empty());
        assert_eq!(db.list_sources(10).await.expect("list").1, 3);
    }

    #[tokio::test]
    async fn batches_sent_twice_land_once_and_sources_track_their_span() {
        let db = db("dedup").await;
        let key = labels(0).key();
        let batch = vec![sample(&key, 10, 100), sample(&key, 20, 200)];
        db.insert_telemetry(None, &[labels(0)], &batch, 1 << 20).await.expect("insert");
        db.insert_telemetry(None, &[labels(0)], &batch, 1 << 20).await.expect("insert again");
        db.insert_telemetry(None, &[labels(0)], &[sample(&key, 5, 50)], 1 << 20).await.expect("older");
        let stored = db.samples(&key, 0, 100).await.expect("samples");
        assert_eq!(stored.iter().map(|s| s.t_ms).collect::<Vec<_>>(), [5, 10, 20]);
        assert_eq!(stored[2], batch[1]);
        let source = db.get_source(&key).await.expect("get").expect("source");
        assert_eq!((source.info.first_ms, source.info.last_ms, source.info.rank), (5, 20, Some(0)));
        assert_eq!(db.samples(&key, 10, 100).await.expect("since").len(), 1);
        assert_eq!(db.samples(&key, 0, 2).await.expect("limit").iter().map(|s| s.t_ms).collect::<Vec<_>>(), [10, 20]);
    }

    #[tokio::test]
    async fn retention_thins_old_samples_and_keeps_recent_ones() {
        let db = db("retention").await;
        let key = labels(1).key();
        // Two hours of one sample per second: the first hour thins to one per 10 s.
        let samples: Vec<Sample> = (0..7200).map(|s| sample(&key, s * 1000, s)).collect();
        db.insert_telemetry(None, &[labels(1)], &samples, 1 << 20).await.expect("insert");
        let removed = db.retain_samples(&key).await.expect("retain");
        let kept = db.samples(&key, -1, 1_000_000).await.expect("samples");
        assert_eq!(removed as usize + kept.len(), 7200);
        let newest = 7199 * 1000;
        let old: Vec<i64> = kept.iter().map(|s| s.t_ms).filter(|t| *t < newest - THIN_AFTER_MS).collect();
        assert_eq!(old.len() as i64, (newest - THIN_AFTER_MS + THIN_WINDOW_MS - 1) / THIN_WINDOW_MS);
        assert!(old.iter().all(|t| t % THIN_WINDOW_MS == 0));
        assert_eq!(kept.iter().filter(|s| s.t_ms >= newest - THIN_AFTER_MS).count(), 3601);
        assert_eq!(db.retain_samples(&key).await.expect("again"), 0, "retention is idempotent");
    }
}
