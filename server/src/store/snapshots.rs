//! Stored snapshots: rows of `snapshots` (and `snapshot_tags`, which the
//! exact tag filter joins on), their list in keyset pages, and the
//! bookkeeping of background parses.
//!
//! The `Any` driver decodes only basic types: tags are a JSON array in
//! `snapshots.tags`, the trigger and status are their lowercase names.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::str::FromStr;

use anyhow::{Context, Result};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sqlx::Row;
use sqlx::any::AnyRow;
pub(crate) use vramscope_shared::api::{SnapshotMeta, SnapshotStatus, Trigger};

use super::db::{Arg, Db};

/// Page size when a list request names none.
pub(crate) const DEFAULT_LIST_LIMIT: u32 = 50;
/// Largest page a list request gets, whatever it asks for.
pub(crate) const MAX_LIST_LIMIT: u32 = 500;

/// Every column of `snapshots`, in the order [`snapshot_from_row`] reads.
pub(super) const SNAPSHOT_COLUMNS: &str = "id, sha256, blob_key, name, job, host, rank, tags, trigger_kind, \
     size_bytes, uploaded_at_ms, status, error, stats_json, pinned";

/// One row of `snapshots`: the snapshot as the API shows it
/// ([`SnapshotMeta`], which it dereferences to) and the two columns the API
/// does not show.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SnapshotRecord {
    /// What the API shows.
    pub(crate) meta: SnapshotMeta,
    /// Key of the file in the blob store (shared by rows with equal sha256).
    pub(crate) blob_key: String,
    /// The summary computed by the parser, as JSON, once ready (served on
    /// its own, by `/stats`).
    pub(crate) stats_json: Option<String>,
}

// A row *is* its API record plus two internal columns: reading `rec.name`
// through the record keeps the handlers as plain as the API they serve.
impl Deref for SnapshotRecord {
    type Target = SnapshotMeta;

    fn deref(&self) -> &SnapshotMeta {
        &self.meta
    }
}

impl DerefMut for SnapshotRecord {
    fn deref_mut(&mut self) -> &mut SnapshotMeta {
        &mut self.meta
    }
}

/// A snapshot to record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NewSnapshot {
    /// Public id, chosen by the caller: a UUID v7 (`Uuid::now_v7()`), so ids
    /// sort roughly by upload time.
    pub(crate) id: String,
    /// SHA-256 of the file, lowercase hex.
    pub(crate) sha256: String,
    /// Key of the committed file in the blob store.
    pub(crate) blob_key: String,
    /// Display name.
    pub(crate) name: String,
    /// Training job, if known.
    pub(crate) job: Option<String>,
    /// Host, if known.
    pub(crate) host: Option<String>,
    /// Distributed rank, if known.
    pub(crate) rank: Option<i64>,
    /// Tags; duplicates are dropped.
    pub(crate) tags: Vec<String>,
    /// What made the client upload it.
    pub(crate) trigger: Trigger,
    /// Size of the file.
    pub(crate) size_bytes: u64,
    /// Upload time, milliseconds since the Unix epoch.
    pub(crate) uploaded_at_ms: i64,
    /// Initial status: `Parsing` for a new file, or `Ready` when the stats
    /// are copied from an earlier upload of the same content.
    pub(crate) status: SnapshotStatus,
    /// Stats, when the status is `Ready` from the start.
    pub(crate) stats_json: Option<String>,
}

/// Filters of a list request; every field is optional.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ListFilter {
    /// Only this job (exact).
    pub(crate) job: Option<String>,
    /// Only this host (exact).
    pub(crate) host: Option<String>,
    /// Only snapshots carrying this tag (exact, case-sensitive).
    pub(crate) tag: Option<String>,
    /// Case-insensitive (ASCII) substring of the name, job or host.
    pub(crate) q: Option<String>,
    /// Page size: [`DEFAULT_LIST_LIMIT`] when absent, at most
    /// [`MAX_LIST_LIMIT`], at least 1.
    pub(crate) limit: Option<u32>,
    /// Where the previous page ended.
    pub(crate) cursor: Option<Cursor>,
    /// Only pinned (`true`) or only unpinned (`false`) snapshots.
    pub(crate) pinned: Option<bool>,
}

/// One page of a list, newest first.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Page {
    /// The snapshots of this page.
    pub(crate) items: Vec<SnapshotRecord>,
    /// Where the next page starts; `None` on the last page.
    pub(crate) next_cursor: Option<Cursor>,
}

/// A position in the newest-first order: the last item of a page. Keyset
/// pagination on `(uploaded_at_ms, id)` gives stable pages while others
/// insert: later uploads sort before the cursor and never shift the pages
/// after it. Opaque to clients; its text form is `{uploaded_at_ms}_{id}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cursor {
    uploaded_at_ms: i64,
    id: String,
}

impl Cursor {
    fn after(record: &SnapshotRecord) -> Cursor {
        Cursor { uploaded_at_ms: record.uploaded_at_ms, id: record.id.clone() }
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.uploaded_at_ms, self.id)
    }
}

/// A cursor string that no list response produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InvalidCursor(String);

impl fmt::Display for InvalidCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid cursor (pass next_cursor of a previous page): {:?}", self.0)
    }
}

impl std::error::Error for InvalidCursor {}

impl FromStr for Cursor {
    type Err = InvalidCursor;

    fn from_str(text: &str) -> Result<Cursor, InvalidCursor> {
        let invalid = || InvalidCursor(text.to_owned());
        let (ms, id) = text.split_once('_').ok_or_else(invalid)?;
        let uploaded_at_ms = ms.parse().map_err(|_| invalid())?;
        if id.is_empty() {
            return Err(invalid());
        }
        Ok(Cursor { uploaded_at_ms, id: id.to_owned() })
    }
}

impl Serialize for Cursor {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cursor {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Cursor, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl Db {
    /// Records a new snapshot, with its tags, in one transaction, and
    /// returns the row as stored. Fails when the id is taken.
    pub(crate) async fn insert_snapshot(&self, new: &NewSnapshot) -> Result<SnapshotRecord> {
        let record = SnapshotRecord {
            meta: SnapshotMeta {
                id: new.id.clone(),
                sha256: new.sha256.clone(),
                name: new.name.clone(),
                job: new.job.clone(),
                host: new.host.clone(),
                rank: new.rank,
                tags: unique(&new.tags),
                trigger: new.trigger,
                size_bytes: new.size_bytes,
                uploaded_at_ms: new.uploaded_at_ms,
                status: new.status,
                error: None,
                pinned: false,
                parsed_bytes: None,
            },
            blob_key: new.blob_key.clone(),
            stats_json: new.stats_json.clone(),
        };
        let id = &record.id;
        let size = i64::try_from(record.size_bytes)
            .with_context(|| format!("snapshots insert {id}: size {} too large", record.size_bytes))?;
        let tags_json = serde_json::to_string(&record.tags)
            .with_context(|| format!("snapshots insert {id}: cannot encode tags"))?;
        let mut tx = self.pool.begin().await.context("snapshots insert: cannot begin")?;
        sqlx::query(&format!(
            "INSERT INTO snapshots ({SNAPSHOT_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
        ))
        .bind(id.as_str())
        .bind(record.sha256.as_str())
        .bind(record.blob_key.as_str())
        .bind(record.name.as_str())
        .bind(record.job.as_deref())
        .bind(record.host.as_deref())
        .bind(record.rank)
        .bind(tags_json)
        .bind(record.trigger.as_str())
        .bind(size)
        .bind(record.uploaded_at_ms)
        .bind(record.status.as_str())
        .bind(record.error.as_deref())
        .bind(record.stats_json.as_deref())
        .bind(i64::from(record.pinned))
        .execute(&mut *tx)
        .await
        .with_context(|| format!("snapshots insert {id}"))?;
        insert_tags(&mut tx, id, &record.tags).await?;
        tx.commit().await.with_context(|| format!("snapshots insert {id}: commit"))?;
        Ok(record)
    }

    /// The snapshot `id`, if there is one.
    pub(crate) async fn get(&self, id: &str) -> Result<Option<SnapshotRecord>> {
        let row = sqlx::query(&format!("SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .with_context(|| format!("snapshots get {id}"))?;
        row.as_ref().map(snapshot_from_row).transpose()
    }

    /// The newest parsed snapshot whose file has this SHA-256: an upload of
    /// the same content can share its blob and copy its stats.
    pub(crate) async fn find_ready_by_sha256(&self, sha256: &str) -> Result<Option<SnapshotRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE sha256 = $1 AND status = $2 \
             ORDER BY uploaded_at_ms DESC, id DESC LIMIT 1"
        ))
        .bind(sha256)
        .bind(SnapshotStatus::Ready.as_str())
        .fetch_optional(&self.pool)
        .await
        .with_context(|| format!("snapshots find by sha256 {sha256}"))?;
        row.as_ref().map(snapshot_from_row).transpose()
    }

    /// One page of snapshots matching `filter`, newest first.
    pub(crate) async fn list(&self, filter: &ListFilter) -> Result<Page> {
        let limit = filter.limit.unwrap_or(DEFAULT_LIST_LIMIT).clamp(1, MAX_LIST_LIMIT);
        let mut conditions: Vec<String> = Vec::new();
        let mut args: Vec<Arg> = Vec::new();
        // Each push returns the placeholder of the value it bound.
        let mut bind = |arg: Arg| {
            args.push(arg);
            format!("${}", args.len())
        };
        if let Some(job) = &filter.job {
            conditions.push(format!("job = {}", bind(Arg::Text(job.clone()))));
        }
        if let Some(host) = &filter.host {
            conditions.push(format!("host = {}", bind(Arg::Text(host.clone()))));
        }
        if let Some(tag) = &filter.tag {
            let p = bind(Arg::Text(tag.clone()));
            conditions.push(format!(
                "EXISTS (SELECT 1 FROM snapshot_tags t \
                 WHERE t.snapshot_id = snapshots.id AND t.tag = {p})"
            ));
        }
        if let Some(q) = filter.q.as_deref().filter(|q| !q.is_empty()) {
            // ASCII case folding only: SQLite's LOWER() folds nothing else.
            let p = bind(Arg::Text(format!("%{}%", escape_like(&q.to_ascii_lowercase()))));
            conditions.push(format!(
                "(LOWER(name) LIKE {p} ESCAPE '\\' OR LOWER(job) LIKE {p} ESCAPE '\\' \
                 OR LOWER(host) LIKE {p} ESCAPE '\\')"
            ));
        }
        if let Some(pinned) = filter.pinned {
            conditions.push(format!("pinned = {}", bind(Arg::Int(i64::from(pinned)))));
        }
        if let Some(cursor) = &filter.cursor {
            let at = bind(Arg::Int(cursor.uploaded_at_ms));
            let id = bind(Arg::Text(cursor.id.clone()));
            conditions.push(format!("(uploaded_at_ms < {at} OR (uploaded_at_ms = {at} AND id < {id}))"));
        }
        // One row more than the page tells whether another page follows.
        let limit_placeholder = bind(Arg::Int(i64::from(limit) + 1));

        let mut sql = format!("SELECT {SNAPSHOT_COLUMNS} FROM snapshots");
        if !conditions.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&conditions.join(" AND "));
        }
        sql.push_str(&format!(" ORDER BY uploaded_at_ms DESC, id DESC LIMIT {limit_placeholder}"));

        let mut query = sqlx::query(&sql);
        for arg in args {
            query = match arg {
                Arg::Text(text) => query.bind(text),
                Arg::Int(n) => query.bind(n),
            };
        }
        let rows = query.fetch_all(&self.pool).await.context("snapshots list")?;
        let mut items = rows.iter().map(snapshot_from_row).collect::<Result<Vec<_>>>()?;
        let next_cursor = if items.len() > limit as usize {
            items.truncate(limit as usize);
            items.last().map(Cursor::after)
        } else {
            None
        };
        Ok(Page { items, next_cursor })
    }

    /// Renames and/or retags `id`; `None` leaves a field as it is. Returns
    /// the updated row, or `None` when there is no such snapshot.
    pub(crate) async fn update_meta(
        &self,
        id: &str,
        name: Option<String>,
        tags: Option<Vec<String>>,
    ) -> Result<Option<SnapshotRecord>> {
        let mut tx = self.pool.begin().await.context("snapshots update: cannot begin")?;
        if let Some(name) = name {
            let done = sqlx::query("UPDATE snapshots SET name = $1 WHERE id = $2")
                .bind(name)
                .bind(id)
                .execute(&mut *tx)
                .await
                .with_context(|| format!("snapshots update name of {id}"))?;
            if done.rows_affected() == 0 {
                return Ok(None);
            }
        }
        if let Some(tags) = tags {
            let unique = unique(&tags);
            let tags_json = serde_json::to_string(&unique)
                .with_context(|| format!("snapshots update tags of {id}: cannot encode"))?;
            let done = sqlx::query("UPDATE snapshots SET tags = $1 WHERE id = $2")
                .bind(tags_json)
                .bind(id)
                .execute(&mut *tx)
                .await
                .with_context(|| format!("snapshots update tags of {id}"))?;
            if done.rows_affected() == 0 {
                return Ok(None);
            }
            sqlx::query("DELETE FROM snapshot_tags WHERE snapshot_id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await
                .with_context(|| format!("snapshot_tags delete of {id}"))?;
            insert_tags(&mut tx, id, &unique).await?;
        }
        let row = sqlx::query(&format!("SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE id = $1"))
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .with_context(|| format!("snapshots update {id}: read back"))?;
        tx.commit().await.with_context(|| format!("snapshots update {id}: commit"))?;
        row.as_ref().map(snapshot_from_row).transpose()
    }

    /// Marks `id` parsed, with its summary; `oom`: its trigger becomes
    /// `oom` where it is `manual` (an upload that named none, whose file
    /// records an OOM), in the same update, so nobody reads the row ready
    /// with its trigger still to change. Does nothing when the row is gone
    /// (deleted while it was parsed).
    pub(crate) async fn set_ready(&self, id: &str, stats_json: &str, oom: bool) -> Result<()> {
        let (from, to) = if oom { (Trigger::Manual, Trigger::Oom) } else { (Trigger::Manual, Trigger::Manual) };
        sqlx::query(
            "UPDATE snapshots SET status = $1, stats_json = $2, error = NULL, \
             trigger_kind = CASE WHEN trigger_kind = $4 THEN $5 ELSE trigger_kind END WHERE id = $3",
        )
        .bind(SnapshotStatus::Ready.as_str())
        .bind(stats_json)
        .bind(id)
        .bind(from.as_str())
        .bind(to.as_str())
        .execute(&self.pool)
        .await
        .with_context(|| format!("snapshots set ready {id}"))?;
        Ok(())
    }

    /// Marks `id` unreadable, saying why. Does nothing when the row is gone.
    pub(crate) async fn set_failed(&self, id: &str, error: &str) -> Result<()> {
        sqlx::query("UPDATE snapshots SET status = $1, error = $2, stats_json = NULL WHERE id = $3")
            .bind(SnapshotStatus::Failed.as_str())
            .bind(error)
            .bind(id)
            .execute(&self.pool)
            .await
            .with_context(|| format!("snapshots set failed {id}"))?;
        Ok(())
    }

    /// Deletes `id` and its tags, returning the row that was (its
    /// `blob_key` tells the caller which file may now be unreferenced).
    pub(crate) async fn delete(&self, id: &str) -> Result<Option<SnapshotRecord>> {
        // RETURNING (SQLite 3.35+, PostgreSQL) makes read-and-delete one
        // statement, so two instances deleting at once cannot both get it.
        let row = sqlx::query(&format!("DELETE FROM snapshots WHERE id = $1 RETURNING {SNAPSHOT_COLUMNS}"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .with_context(|| format!("snapshots delete {id}"))?;
        row.as_ref().map(snapshot_from_row).transpose()
    }

    /// Counts one more background parse started for `id`.
    pub(crate) async fn begin_parse(&self, id: &str) -> Result<()> {
        sqlx::query("UPDATE snapshots SET parse_attempts = parse_attempts + 1 WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await
            .with_context(|| format!("snapshots begin parse {id}"))?;
        Ok(())
    }

    /// Snapshots still `parsing`, oldest first, with the background parses
    /// started for each: (id, blob key, attempts).
    pub(crate) async fn unfinished_parses(&self) -> Result<Vec<(String, String, i64)>> {
        let rows = sqlx::query(
            "SELECT id, blob_key, parse_attempts FROM snapshots WHERE status = $1 ORDER BY uploaded_at_ms, id",
        )
        .bind(SnapshotStatus::Parsing.as_str())
        .fetch_all(&self.pool)
        .await
        .context("snapshots list unfinished parses")?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get("id").context("unfinished parse: id")?,
                    row.try_get("blob_key").context("unfinished parse: blob_key")?,
                    row.try_get("parse_attempts").context("unfinished parse: parse_attempts")?,
                ))
            })
            .collect()
    }

    /// How many `ready` snapshots use the file at `blob_key`: when a parse
    /// fails and none does, the file is of no use.
    pub(crate) async fn count_ready_by_blob(&self, blob_key: &str) -> Result<u64> {
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM snapshots WHERE blob_key = $1 AND status = $2")
            .bind(blob_key)
            .bind(SnapshotStatus::Ready.as_str())
            .fetch_one(&self.pool)
            .await
            .with_context(|| format!("snapshots count ready by blob {blob_key}"))?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// How many snapshots use the file at `blob_key`.
    pub(crate) async fn count_by_blob(&self, blob_key: &str) -> Result<u64> {
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM snapshots WHERE blob_key = $1")
            .bind(blob_key)
            .fetch_one(&self.pool)
            .await
            .with_context(|| format!("snapshots count by blob {blob_key}"))?;
        Ok(u64::try_from(count).unwrap_or(0))
    }
}

async fn insert_tags(tx: &mut sqlx::Transaction<'_, sqlx::Any>, id: &str, tags: &[String]) -> Result<()> {
    for tag in tags {
        sqlx::query("INSERT INTO snapshot_tags (snapshot_id, tag) VALUES ($1, $2)")
            .bind(id)
            .bind(tag.as_str())
            .execute(&mut **tx)
            .await
            .with_context(|| format!("snapshot_tags insert {tag:?} for {id}"))?;
    }
    Ok(())
}

/// `tags` without repeats, in their first order.
fn unique(tags: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(tags.len());
    for tag in tags {
        if !out.contains(tag) {
            out.push(tag.clone());
        }
    }
    out
}

pub(super) fn snapshot_from_row(row: &AnyRow) -> Result<SnapshotRecord> {
    let id: String = row.try_get("id").context("snapshots row: id")?;
    let column = |name: &str| format!("snapshots row {id}: column {name}");
    let tags_json: String = row.try_get("tags").with_context(|| column("tags"))?;
    let tags = serde_json::from_str(&tags_json)
        .with_context(|| format!("snapshots row {id}: tags are not a JSON array of strings: {tags_json}"))?;
    let trigger_name: String = row.try_get("trigger_kind").with_context(|| column("trigger_kind"))?;
    let trigger = Trigger::parse(&trigger_name)
        .with_context(|| format!("snapshots row {id}: unknown trigger_kind {trigger_name:?}"))?;
    let status_name: String = row.try_get("status").with_context(|| column("status"))?;
    let status = SnapshotStatus::parse(&status_name)
        .with_context(|| format!("snapshots row {id}: unknown status {status_name:?}"))?;
    let size: i64 = row.try_get("size_bytes").with_context(|| column("size_bytes"))?;
    let size_bytes = u64::try_from(size).with_context(|| format!("snapshots row {id}: negative size_bytes {size}"))?;
    let blob_key = row.try_get("blob_key").with_context(|| column("blob_key"))?;
    let stats_json = row.try_get("stats_json").with_context(|| column("stats_json"))?;
    Ok(SnapshotRecord {
        meta: SnapshotMeta {
            sha256: row.try_get("sha256").with_context(|| column("sha256"))?,
            name: row.try_get("name").with_context(|| column("name"))?,
            job: row.try_get("job").with_context(|| column("job"))?,
            host: row.try_get("host").with_context(|| column("host"))?,
            rank: row.try_get("rank").with_context(|| column("rank"))?,
            tags,
            trigger,
            size_bytes,
            uploaded_at_ms: row.try_get("uploaded_at_ms").with_context(|| column("uploaded_at_ms"))?,
            status,
            error: row.try_get("error").with_context(|| column("error"))?,
            pinned: row.try_get::<i64, _>("pinned").with_context(|| column("pinned"))? != 0,
            parsed_bytes: None,
            id,
        },
        blob_key,
        stats_json,
    })
}

/// Escapes LIKE's wildcards so `q` matches literally (with `ESCAPE '\'`).
fn escape_like(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '\\' | '%' | '_') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
pub(super) mod testing {
    //! Rows to insert in storage tests.

    use super::*;

    /// Upload times for tests: strictly increasing, so the newest-first
    /// order is the insertion order reversed.
    pub(crate) fn tick() -> i64 {
        static CLOCK: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(1_700_000_000_000);
        CLOCK.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// A new `parsing` snapshot named `name` of the file `sha`.
    pub(crate) fn new_snapshot(name: &str, sha: &str, tags: &[&str]) -> NewSnapshot {
        NewSnapshot {
            id: uuid::Uuid::now_v7().to_string(),
            uploaded_at_ms: tick(),
            sha256: sha.to_owned(),
            blob_key: format!("snapshots/{sha}"),
            name: name.to_owned(),
            job: None,
            host: None,
            rank: None,
            tags: tags.iter().map(|t| t.to_string()).collect(),
            trigger: Trigger::Manual,
            size_bytes: 10,
            status: SnapshotStatus::Parsing,
            stats_json: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::super::db::testing::on_both_databases;
    use super::testing::{new_snapshot, tick};
    use super::*;

    on_both_databases!(
        insert_get_roundtrip,
        status_changes_and_dedup_lookup,
        update_meta_renames_and_retags,
        delete_returns_the_row_and_frees_the_blob,
        tag_filter_is_exact,
        job_host_and_search_filters,
        pagination_is_stable_under_concurrent_inserts,
        limit_is_clamped,
        concurrent_writers_all_succeed,
    );

    /// A row with a chosen id and time, for ordering tests.
    fn record_at(id: &str, uploaded_at_ms: i64) -> NewSnapshot {
        NewSnapshot {
            id: id.to_owned(),
            sha256: "aa".repeat(32),
            blob_key: format!("snapshots/{}", "aa".repeat(32)),
            name: format!("run {id}"),
            job: None,
            host: None,
            rank: None,
            tags: Vec::new(),
            trigger: Trigger::Manual,
            size_bytes: 1,
            uploaded_at_ms,
            status: SnapshotStatus::Ready,
            stats_json: Some("{}".to_owned()),
        }
    }

    async fn all_ids(db: &Db, filter: ListFilter) -> Vec<String> {
        let page = db.list(&ListFilter { limit: Some(MAX_LIST_LIMIT), ..filter }).await.expect("list");
        assert!(page.next_cursor.is_none(), "test lists fit one page");
        page.items.into_iter().map(|s| s.meta.id).collect()
    }

    async fn tag_rows(db: &Db, id: &str) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM snapshot_tags WHERE snapshot_id = $1")
            .bind(id)
            .fetch_one(&db.pool)
            .await
            .expect("count tag rows")
    }

    async fn insert_get_roundtrip(db: &Db) {
        let new = NewSnapshot {
            job: Some("llama-70b".into()),
            host: Some("node-07".into()),
            rank: Some(3),
            trigger: Trigger::Oom,
            size_bytes: 5_000_000_000,
            stats_json: Some(r#"{"peak":1}"#.into()),
            ..new_snapshot("step 1200", &"ab".repeat(32), &["prod", "fsdp", "prod"])
        };
        let inserted = db.insert_snapshot(&new).await.expect("insert");
        assert_eq!(inserted.tags, ["prod", "fsdp"], "duplicate tags are dropped");
        assert_eq!((inserted.id.as_str(), inserted.uploaded_at_ms), (new.id.as_str(), new.uploaded_at_ms));
        let got = db.get(&inserted.id).await.expect("get").expect("row exists");
        assert_eq!(got, inserted);
        assert_eq!(got.size_bytes, 5_000_000_000);
        assert_eq!(got.rank, Some(3));
        assert_eq!(got.stats_json.as_deref(), Some(r#"{"peak":1}"#));

        // Nulls survive the round trip as well.
        let bare = db.insert_snapshot(&new_snapshot("bare", &"cd".repeat(32), &[])).await.expect("insert");
        assert_eq!(db.get(&bare.id).await.expect("get"), Some(bare.clone()));
        assert_eq!(bare.job, None);
        assert_eq!(bare.rank, None);

        let json = serde_json::to_value(&got.meta).expect("serialize");
        let keys: HashSet<&str> = json.as_object().expect("object").keys().map(String::as_str).collect();
        let expected: HashSet<&str> = [
            "id",
            "sha256",
            "name",
            "job",
            "host",
            "rank",
            "tags",
            "trigger",
            "size_bytes",
            "uploaded_at_ms",
            "status",
            "error",
            "pinned",
        ]
        .into();
        assert_eq!(keys, expected);
        assert_eq!(json["trigger"], "oom");
        assert_eq!(json["status"], "parsing");

        assert_eq!(db.get("no-such-id").await.expect("get"), None);

        // A taken id fails whole: no second row, no stray tag rows.
        let again = NewSnapshot { tags: vec!["other".into()], ..new.clone() };
        assert!(db.insert_snapshot(&again).await.is_err(), "ids are unique");
        assert_eq!(tag_rows(db, &new.id).await, 2);
        assert!(all_ids(db, ListFilter { tag: Some("other".into()), ..Default::default() }).await.is_empty());
    }

    async fn status_changes_and_dedup_lookup(db: &Db) {
        let sha = "ef".repeat(32);
        assert_eq!(db.find_ready_by_sha256(&sha).await.expect("find"), None);
        let first = db.insert_snapshot(&new_snapshot("first", &sha, &[])).await.expect("insert");
        assert_eq!(db.find_ready_by_sha256(&sha).await.expect("find"), None, "still parsing");

        db.set_ready(&first.id, r#"{"a":1}"#, false).await.expect("set ready");
        let ready = db.find_ready_by_sha256(&sha).await.expect("find").expect("found");
        assert_eq!(ready.id, first.id);
        assert_eq!(ready.status, SnapshotStatus::Ready);
        assert_eq!(ready.stats_json.as_deref(), Some(r#"{"a":1}"#));

        let second = db.insert_snapshot(&new_snapshot("second", &sha, &[])).await.expect("insert");
        db.set_failed(&second.id, "truncated at byte 12").await.expect("set failed");
        let failed = db.get(&second.id).await.expect("get").expect("row");
        assert_eq!(failed.status, SnapshotStatus::Failed);
        assert_eq!(failed.error.as_deref(), Some("truncated at byte 12"));
        assert_eq!(failed.stats_json, None);
        // A failed row is no candidate for dedup: the ready one still is.
        assert_eq!(db.find_ready_by_sha256(&sha).await.expect("find").map(|s| s.meta.id), Some(first.id.clone()));

        // Several ready rows: the newest wins.
        let mut newer = record_at("zzz-newer", tick());
        newer.sha256 = sha.clone();
        newer.blob_key = first.blob_key.clone();
        db.insert_snapshot(&newer).await.expect("insert newer");
        assert_eq!(db.find_ready_by_sha256(&sha).await.expect("find").map(|s| s.meta.id), Some(newer.id));

        // Parse bookkeeping: what is left to parse, what a failed parse frees.
        let third = db.insert_snapshot(&new_snapshot("third", &"f0".repeat(32), &[])).await.expect("insert");
        let parsing = db.unfinished_parses().await.expect("list parsing");
        assert_eq!(parsing, [(third.id.clone(), third.blob_key.clone(), 0)]);
        db.begin_parse(&third.id).await.expect("begin");
        db.begin_parse(&third.id).await.expect("begin again");
        assert_eq!(db.unfinished_parses().await.expect("list parsing")[0].2, 2, "attempts are counted");
        assert_eq!(db.count_ready_by_blob(&first.blob_key).await.expect("count"), 2);
        assert_eq!(db.count_by_blob(&first.blob_key).await.expect("count"), 3);
        assert_eq!(db.count_ready_by_blob(&third.blob_key).await.expect("count"), 0);

        // A row deleted while it was parsed: nothing to mark, no error.
        db.set_ready("missing", "{}", false).await.expect("set ready");
        db.set_failed("missing", "x").await.expect("set failed");
        assert_eq!(db.get("missing").await.expect("get"), None);
    }

    async fn update_meta_renames_and_retags(db: &Db) {
        let s = db.insert_snapshot(&new_snapshot("old", &"11".repeat(32), &["a", "b"])).await.expect("insert");

        let renamed = db.update_meta(&s.id, Some("new".into()), None).await.expect("update").expect("row");
        assert_eq!(renamed.name, "new");
        assert_eq!(renamed.tags, ["a", "b"]);

        let retagged =
            db.update_meta(&s.id, None, Some(vec!["c".into(), "a".into(), "c".into()])).await.expect("update");
        let retagged = retagged.expect("row");
        assert_eq!(retagged.name, "new");
        assert_eq!(retagged.tags, ["c", "a"]);
        assert_eq!(tag_rows(db, &s.id).await, 2);
        assert!(all_ids(db, ListFilter { tag: Some("b".into()), ..Default::default() }).await.is_empty());
        assert_eq!(all_ids(db, ListFilter { tag: Some("c".into()), ..Default::default() }).await, [s.id.as_str()]);

        let both = db.update_meta(&s.id, Some("both".into()), Some(vec![])).await.expect("update").expect("row");
        assert_eq!((both.name.as_str(), both.tags.len()), ("both", 0));
        assert_eq!(tag_rows(db, &s.id).await, 0);

        let unchanged = db.update_meta(&s.id, None, None).await.expect("update").expect("row");
        assert_eq!(unchanged, both);

        assert_eq!(db.update_meta("missing", Some("x".into()), None).await.expect("update"), None);
        assert_eq!(db.update_meta("missing", None, Some(vec!["x".into()])).await.expect("update"), None);
        assert_eq!(db.update_meta("missing", None, None).await.expect("update"), None);
        // The failed update of a missing row left no tag rows behind.
        assert_eq!(tag_rows(db, "missing").await, 0);
    }

    async fn delete_returns_the_row_and_frees_the_blob(db: &Db) {
        let sha = "22".repeat(32);
        let a = db.insert_snapshot(&new_snapshot("a", &sha, &["x", "y"])).await.expect("insert");
        let b = db.insert_snapshot(&new_snapshot("b", &sha, &[])).await.expect("insert");
        assert_eq!(db.count_by_blob(&a.blob_key).await.expect("count"), 2);

        let deleted = db.delete(&a.id).await.expect("delete").expect("row");
        assert_eq!(deleted, a);
        assert_eq!(tag_rows(db, &a.id).await, 0, "tag rows go with the snapshot");
        assert_eq!(db.get(&a.id).await.expect("get"), None);
        assert_eq!(db.count_by_blob(&a.blob_key).await.expect("count"), 1);
        assert_eq!(db.delete(&a.id).await.expect("delete again"), None);

        db.delete(&b.id).await.expect("delete").expect("row");
        assert_eq!(db.count_by_blob(&b.blob_key).await.expect("count"), 0);
    }

    async fn tag_filter_is_exact(db: &Db) {
        let id = |s: SnapshotRecord| s.meta.id;
        let gpu = id(db.insert_snapshot(&new_snapshot("1", &"31".repeat(32), &["gpu"])).await.expect("insert"));
        let near = id(db
            .insert_snapshot(&new_snapshot("2", &"32".repeat(32), &["gpu-1", "GPU", "my gpu"]))
            .await
            .expect("insert"));
        let odd = id(db
            .insert_snapshot(&new_snapshot("3", &"33".repeat(32), &["a\",\"gpu", "50%_off", "x\\y"]))
            .await
            .expect("insert"));
        let by_tag = |tag: &str| ListFilter { tag: Some(tag.to_owned()), ..Default::default() };

        assert_eq!(all_ids(db, by_tag("gpu")).await, [gpu.as_str()]);
        assert_eq!(all_ids(db, by_tag("GPU")).await, [near.as_str()]);
        assert_eq!(all_ids(db, by_tag("a\",\"gpu")).await, [odd.as_str()]);
        assert_eq!(all_ids(db, by_tag("50%_off")).await, [odd.as_str()]);
        assert_eq!(all_ids(db, by_tag("x\\y")).await, [odd]);
        for no_match in ["gp", "gpu%", "g_u", "%", "a", "", "50"] {
            assert!(all_ids(db, by_tag(no_match)).await.is_empty(), "tag {no_match:?} matched");
        }
    }

    async fn job_host_and_search_filters(db: &Db) {
        let mk = |name: &str, job: Option<&str>, host: Option<&str>, n: u8| NewSnapshot {
            job: job.map(str::to_owned),
            host: host.map(str::to_owned),
            ..new_snapshot(name, &format!("{n:02x}").repeat(32), &["t"])
        };
        let a =
            db.insert_snapshot(&mk("Llama warmup", Some("llama"), Some("node-1"), 1)).await.expect("insert").meta.id;
        let b = db.insert_snapshot(&mk("step 100%", Some("llama"), Some("node-2"), 2)).await.expect("insert").meta.id;
        let c = db.insert_snapshot(&mk("bert_eval", Some("bert"), Some("node-1"), 3)).await.expect("insert").meta.id;
        let d = db.insert_snapshot(&mk("loose", None, None, 4)).await.expect("insert").meta.id;
        let (a, b, c, d) = (a.as_str(), b.as_str(), c.as_str(), d.as_str());
        let f = |job: Option<&str>, host: Option<&str>, q: Option<&str>| ListFilter {
            job: job.map(str::to_owned),
            host: host.map(str::to_owned),
            q: q.map(str::to_owned),
            ..Default::default()
        };
        // Newest first.
        assert_eq!(all_ids(db, f(None, None, None)).await, [d, c, b, a]);
        assert_eq!(all_ids(db, f(Some("llama"), None, None)).await, [b, a]);
        assert_eq!(all_ids(db, f(Some("llam"), None, None)).await, Vec::<String>::new());
        assert_eq!(all_ids(db, f(None, Some("node-1"), None)).await, [c, a]);
        assert_eq!(all_ids(db, f(Some("llama"), Some("node-1"), None)).await, [a]);
        // q: case-insensitive substring of name, job or host.
        assert_eq!(all_ids(db, f(None, None, Some("LLAMA"))).await, [b, a]);
        assert_eq!(all_ids(db, f(None, None, Some("warm"))).await, [a]);
        assert_eq!(all_ids(db, f(None, None, Some("ode-2"))).await, [b]);
        assert_eq!(all_ids(db, f(None, None, Some("oos"))).await, [d]);
        // LIKE's wildcards in q are literal characters.
        assert_eq!(all_ids(db, f(None, None, Some("%"))).await, [b]);
        assert_eq!(all_ids(db, f(None, None, Some("_"))).await, [c]);
        assert_eq!(all_ids(db, f(None, None, Some(""))).await.len(), 4, "empty q filters nothing");
        assert_eq!(all_ids(db, f(Some("bert"), None, Some("llama"))).await, Vec::<String>::new());
    }

    async fn pagination_is_stable_under_concurrent_inserts(db: &Db) {
        // 40 rows, three per millisecond, so pages split ties on the id.
        let mut expected = Vec::new();
        for i in 0..40_i64 {
            let rec = record_at(&format!("id-{i:03}"), 1_000 + i / 3);
            db.insert_snapshot(&rec).await.expect("insert");
            expected.push(rec.id);
        }
        expected.reverse();

        // New uploads land while the pages are read.
        let writer = {
            let db = db.clone();
            tokio::spawn(async move {
                for i in 0..30 {
                    db.insert_snapshot(&new_snapshot(&format!("new {i}"), &"44".repeat(32), &[]))
                        .await
                        .expect("concurrent insert");
                    tokio::task::yield_now().await;
                }
            })
        };

        let mut seen = Vec::new();
        let mut cursor = None;
        let mut pages = 0;
        loop {
            let filter = ListFilter { limit: Some(7), cursor: cursor.clone(), ..Default::default() };
            let page = db.list(&filter).await.expect("list");
            // New uploads are newer than the old rows, so they can show up
            // only before them; skip them to compare with the old rows.
            seen.extend(page.items.into_iter().map(|s| s.meta.id).filter(|id| id.starts_with("id-")));
            pages += 1;
            let Some(next) = page.next_cursor else { break };
            // The cursor survives its text form, as clients send it back.
            cursor = Some(next.to_string().parse().expect("cursor parses"));
            if pages == 2 {
                // Make sure some inserts happened between pages.
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
        writer.await.expect("writer task");
        assert_eq!(seen, expected, "every old row once, in order");

        // A cursor from the middle still gives the same rest after the inserts.
        let middle = "id-020";
        let rest = db
            .list(&ListFilter {
                limit: Some(100),
                cursor: Some(Cursor { uploaded_at_ms: 1_000 + 20 / 3, id: middle.into() }),
                ..Default::default()
            })
            .await
            .expect("list");
        let rest: Vec<String> = rest.items.into_iter().map(|s| s.meta.id).collect();
        let position = expected.iter().position(|id| id == middle).expect("in list");
        assert_eq!(rest, expected[position + 1..]);
    }

    async fn limit_is_clamped(db: &Db) {
        for i in 0..3 {
            db.insert_snapshot(&record_at(&format!("r{i}"), i)).await.expect("insert");
        }
        let page = db.list(&ListFilter { limit: Some(0), ..Default::default() }).await.expect("list");
        assert_eq!(page.items.len(), 1);
        assert_eq!(page.next_cursor.map(|c| c.to_string()).as_deref(), Some("2_r2"));
        let page = db.list(&ListFilter { limit: Some(3), ..Default::default() }).await.expect("list");
        assert_eq!((page.items.len(), page.next_cursor), (3, None), "an exact fit has no next page");
        let page = db.list(&ListFilter { limit: Some(u32::MAX), ..Default::default() }).await.expect("list");
        assert_eq!(page.items.len(), 3);
        let empty = db.list(&ListFilter { tag: Some("none".into()), ..Default::default() }).await.expect("list");
        assert_eq!(empty, Page { items: vec![], next_cursor: None });
    }

    async fn concurrent_writers_all_succeed(db: &Db) {
        let tasks: Vec<_> = (0..6)
            .map(|w| {
                let db = db.clone();
                tokio::spawn(async move {
                    for i in 0..15 {
                        let new = new_snapshot(&format!("w{w} {i}"), &"55".repeat(32), &["x", "y"]);
                        let s = db.insert_snapshot(&new).await.expect("concurrent insert");
                        db.set_ready(&s.id, "{}", false).await.expect("concurrent update");
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("writer task");
        }
        assert_eq!(all_ids(db, ListFilter { tag: Some("y".into()), ..Default::default() }).await.len(), 90);
        assert_eq!(db.count_by_blob(&format!("snapshots/{}", "55".repeat(32))).await.expect("count"), 90);
    }

    #[test]
    fn cursor_text_form() {
        let cursor: Cursor = "1700000000123_0190-ab_c".parse().expect("parses");
        assert_eq!(cursor, Cursor { uploaded_at_ms: 1_700_000_000_123, id: "0190-ab_c".into() });
        assert_eq!(cursor.to_string(), "1700000000123_0190-ab_c");
        assert_eq!(serde_json::to_string(&cursor).expect("serialize"), r#""1700000000123_0190-ab_c""#);
        let back: Cursor = serde_json::from_str(r#""5_x""#).expect("deserialize");
        assert_eq!(back, Cursor { uploaded_at_ms: 5, id: "x".into() });
        for bad in ["", "_", "12_", "x_12", "12", "1.5_a"] {
            assert!(bad.parse::<Cursor>().is_err(), "{bad:?} parsed");
        }
        assert!(serde_json::from_str::<Cursor>(r#""nope""#).is_err());
    }

    #[test]
    fn like_wildcards_are_escaped() {
        assert_eq!(escape_like(r"5%_\"), r"5\%\_\\");
    }
}
