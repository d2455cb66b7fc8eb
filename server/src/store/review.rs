//! What a team adds to stored snapshots: comments, pins, the job view's
//! rows and what the retention policy needs (migration
//! `0003_review.sql`). Same rules as `db.rs`: `$N` placeholders, `i64` and
//! `String` columns only, one SQL for SQLite and PostgreSQL.

use anyhow::{Context, Result};
use sqlx::Row;
use sqlx::any::AnyRow;

use super::snapshots::{SNAPSHOT_COLUMNS, snapshot_from_row};
use super::{Db, SnapshotRecord};
pub(crate) use vramscope_shared::api::jobs::JobSummary;
use vramscope_shared::api::review::Comment;

const COMMENT_COLUMNS: &str = "id, author, body, created_ms, trace_row, time_us, addr, author_token";

/// The comments that keep a snapshot from retention: those of an uploader or
/// an admin (or from before roles were recorded). Used inside a subquery
/// over `comments c`.
const PROTECTING_COMMENT: &str = "(c.author_role IS NULL OR c.author_role <> 'viewer')";

/// One row of `comments`: the comment as the API shows it, and who may
/// delete it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommentRecord {
    /// What the API shows.
    pub(crate) comment: Comment,
    /// The id of the token that wrote it (`None` without tokens, or for a
    /// comment older than this field): who may delete it.
    pub(crate) author_token: Option<String>,
}

/// A comment to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewComment {
    /// The comment (its id chosen by the caller, its text already checked).
    pub(crate) comment: Comment,
    /// The writer's token id (`None` without tokens).
    pub(crate) author_token: Option<String>,
    /// The writer's role (`viewer`, `uploader`, `admin`): a viewer's comment
    /// does not keep the snapshot from retention.
    pub(crate) author_role: String,
}

/// What the retention policy needs to know of one stored snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RetentionItem {
    /// Snapshot id.
    pub(crate) id: String,
    /// Display name, for the dry-run's list.
    pub(crate) name: String,
    /// The file (shared by identical uploads).
    pub(crate) blob_key: String,
    /// Size of the file.
    pub(crate) size_bytes: u64,
    /// Upload time, milliseconds since the Unix epoch.
    pub(crate) uploaded_at_ms: i64,
    /// Pinned by a user.
    pub(crate) pinned: bool,
    /// Comments in its review thread.
    pub(crate) comments: u64,
}

fn comment_from_row(row: &AnyRow) -> Result<CommentRecord> {
    let id: String = row.try_get("id").context("comments row: id")?;
    let column = |name: &str| format!("comments row {id}: column {name}");
    let trace_row: Option<i64> = row.try_get("trace_row").with_context(|| column("trace_row"))?;
    let row_index = trace_row
        .map(|r| u32::try_from(r).with_context(|| format!("comments row {id}: trace_row {r} out of range")))
        .transpose()?;
    let addr: Option<String> = row.try_get("addr").with_context(|| column("addr"))?;
    let addr = addr
        .map(|a| a.parse::<u64>().with_context(|| format!("comments row {id}: addr {a:?} is not a decimal u64")))
        .transpose()?;
    let author_token = row.try_get("author_token").with_context(|| column("author_token"))?;
    Ok(CommentRecord {
        comment: Comment {
            author: row.try_get("author").with_context(|| column("author"))?,
            body: row.try_get("body").with_context(|| column("body"))?,
            created_ms: row.try_get("created_ms").with_context(|| column("created_ms"))?,
            row: row_index,
            time_us: row.try_get("time_us").with_context(|| column("time_us"))?,
            addr,
            id,
        },
        author_token,
    })
}

fn count(row: &AnyRow, name: &str, job: &str) -> Result<u64> {
    let n: i64 = row.try_get(name).with_context(|| format!("jobs row {job}: column {name}"))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

impl Db {
    /// Adds a comment to snapshot `snapshot_id`. `None` when there is no
    /// such snapshot (checked in the same statement, so a snapshot deleted
    /// meanwhile gets no orphan comment).
    pub(crate) async fn insert_comment(
        &self,
        snapshot_id: &str,
        new: &NewComment,
        limit: u64,
    ) -> Result<Option<CommentRecord>> {
        // The count is checked in the statement itself, so instances
        // inserting at once overshoot by at most one each.
        let done = sqlx::query(
            "INSERT INTO comments (id, snapshot_id, author, body, created_ms, trace_row, time_us, addr, \
             author_token, author_role) \
             SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10 WHERE EXISTS (SELECT 1 FROM snapshots WHERE id = $2) \
             AND (SELECT COUNT(*) FROM comments WHERE snapshot_id = $2) < $11",
        )
        .bind(new.comment.id.as_str())
        .bind(snapshot_id)
        .bind(new.comment.author.as_str())
        .bind(new.comment.body.as_str())
        .bind(new.comment.created_ms)
        .bind(new.comment.row.map(i64::from))
        .bind(new.comment.time_us)
        .bind(new.comment.addr.map(|a| a.to_string()))
        .bind(new.author_token.as_deref())
        .bind(new.author_role.as_str())
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .execute(&self.pool)
        .await
        .with_context(|| format!("comments insert on snapshot {snapshot_id}"))?;
        if done.rows_affected() == 0 {
            return Ok(None);
        }
        Ok(Some(CommentRecord { comment: new.comment.clone(), author_token: new.author_token.clone() }))
    }

    /// How many comments `snapshot_id` has.
    pub(crate) async fn count_comments(&self, snapshot_id: &str) -> Result<u64> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM comments WHERE snapshot_id = $1")
            .bind(snapshot_id)
            .fetch_one(&self.pool)
            .await
            .with_context(|| format!("comments count of snapshot {snapshot_id}"))?;
        Ok(u64::try_from(row.try_get::<i64, _>("n")?).unwrap_or(0))
    }

    /// The review thread of `snapshot_id`, oldest first.
    pub(crate) async fn list_comments(&self, snapshot_id: &str) -> Result<Vec<CommentRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {COMMENT_COLUMNS} FROM comments WHERE snapshot_id = $1 ORDER BY created_ms, id"
        ))
        .bind(snapshot_id)
        .fetch_all(&self.pool)
        .await
        .with_context(|| format!("comments list of snapshot {snapshot_id}"))?;
        rows.iter().map(comment_from_row).collect()
    }

    /// Comment `comment_id` of `snapshot_id`, if there is one.
    pub(crate) async fn get_comment(&self, snapshot_id: &str, comment_id: &str) -> Result<Option<CommentRecord>> {
        let row = sqlx::query(&format!("SELECT {COMMENT_COLUMNS} FROM comments WHERE snapshot_id = $1 AND id = $2"))
            .bind(snapshot_id)
            .bind(comment_id)
            .fetch_optional(&self.pool)
            .await
            .with_context(|| format!("comments get {comment_id} of snapshot {snapshot_id}"))?;
        row.as_ref().map(comment_from_row).transpose()
    }

    /// Deletes a comment. False when there was none.
    pub(crate) async fn delete_comment(&self, snapshot_id: &str, comment_id: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM comments WHERE snapshot_id = $1 AND id = $2")
            .bind(snapshot_id)
            .bind(comment_id)
            .execute(&self.pool)
            .await
            .with_context(|| format!("comments delete {comment_id} of snapshot {snapshot_id}"))?;
        Ok(done.rows_affected() > 0)
    }

    /// Pins or unpins `id`. False when there is no such snapshot.
    pub(crate) async fn set_pinned(&self, id: &str, pinned: bool) -> Result<bool> {
        let done = sqlx::query("UPDATE snapshots SET pinned = $1 WHERE id = $2")
            .bind(i64::from(pinned))
            .bind(id)
            .execute(&self.pool)
            .await
            .with_context(|| format!("snapshots set pinned of {id}"))?;
        Ok(done.rows_affected() > 0)
    }

    /// The `limit` jobs most recently uploaded to, with their counts, the
    /// most recent first.
    pub(crate) async fn list_jobs(&self, limit: u64) -> Result<Vec<JobSummary>> {
        let rows = sqlx::query(
            "SELECT job, COUNT(*) AS snapshots, COUNT(DISTINCT rank) AS ranks, COUNT(DISTINCT host) AS hosts, \
             MAX(uploaded_at_ms) AS last_upload_ms, \
             SUM(CASE WHEN trigger_kind = 'oom' THEN 1 ELSE 0 END) AS oom_snapshots \
             FROM snapshots WHERE job IS NOT NULL GROUP BY job ORDER BY MAX(uploaded_at_ms) DESC, job LIMIT $1",
        )
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .context("jobs list")?;
        rows.iter()
            .map(|row| {
                let job: String = row.try_get("job").context("jobs row: job")?;
                Ok(JobSummary {
                    snapshots: count(row, "snapshots", &job)?,
                    ranks: count(row, "ranks", &job)?,
                    hosts: count(row, "hosts", &job)?,
                    last_upload_ms: row.try_get("last_upload_ms").with_context(|| format!("jobs row {job}"))?,
                    oom_snapshots: count(row, "oom_snapshots", &job)?,
                    job,
                })
            })
            .collect()
    }

    /// Every snapshot of `job`, newest first, with its stats.
    pub(crate) async fn job_snapshots(&self, job: &str) -> Result<Vec<SnapshotRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE job = $1 ORDER BY uploaded_at_ms DESC, id DESC"
        ))
        .bind(job)
        .fetch_all(&self.pool)
        .await
        .with_context(|| format!("snapshots of job {job}"))?;
        rows.iter().map(snapshot_from_row).collect()
    }

    /// Every snapshot with what retention weighs, oldest first.
    pub(crate) async fn retention_inventory(&self) -> Result<Vec<RetentionItem>> {
        let rows = sqlx::query(&format!(
            // A failed upload's bytes were removed with its parse: it
            // holds no storage, so junk uploads cannot push real
            // snapshots out under the byte limit.
            "SELECT s.id, s.name, s.blob_key, \
                 CASE WHEN s.status = 'failed' THEN 0 ELSE s.size_bytes END AS size_bytes, \
                 s.uploaded_at_ms, s.pinned, \
                 (SELECT COUNT(*) FROM comments c WHERE c.snapshot_id = s.id AND {PROTECTING_COMMENT}) AS comments \
                 FROM snapshots s ORDER BY s.uploaded_at_ms, s.id"
        ))
        .fetch_all(&self.pool)
        .await
        .context("retention inventory")?;
        rows.iter()
            .map(|row| {
                let id: String = row.try_get("id").context("retention row: id")?;
                let column = |name: &str| format!("retention row {id}: column {name}");
                let size: i64 = row.try_get("size_bytes").with_context(|| column("size_bytes"))?;
                let pinned: i64 = row.try_get("pinned").with_context(|| column("pinned"))?;
                let comments: i64 = row.try_get("comments").with_context(|| column("comments"))?;
                Ok(RetentionItem {
                    name: row.try_get("name").with_context(|| column("name"))?,
                    blob_key: row.try_get("blob_key").with_context(|| column("blob_key"))?,
                    size_bytes: u64::try_from(size).unwrap_or(0),
                    uploaded_at_ms: row.try_get("uploaded_at_ms").with_context(|| column("uploaded_at_ms"))?,
                    pinned: pinned != 0,
                    comments: u64::try_from(comments).unwrap_or(0),
                    id,
                })
            })
            .collect()
    }

    /// Deletes `id` only if it is neither pinned nor commented at this
    /// moment (one statement: a pin or comment added since the policy chose
    /// it, from any instance, saves it). Returns the deleted row.
    pub(crate) async fn delete_unprotected(&self, id: &str) -> Result<Option<SnapshotRecord>> {
        let row = sqlx::query(&format!(
            "DELETE FROM snapshots WHERE id = $1 AND pinned = 0 \
             AND NOT EXISTS (SELECT 1 FROM comments c WHERE c.snapshot_id = $1 AND {PROTECTING_COMMENT}) \
             RETURNING {SNAPSHOT_COLUMNS}"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .with_context(|| format!("retention delete of snapshot {id}"))?;
        row.as_ref().map(snapshot_from_row).transpose()
    }
}

#[cfg(test)]
mod tests {
    //! On a real SQLite file; the PostgreSQL path runs in `tests/team.rs`
    //! through two server instances.

    use super::*;
    use crate::store::{NewSnapshot, SnapshotStatus, Trigger};

    async fn sqlite() -> (Db, std::path::PathBuf) {
        let folder = std::env::temp_dir().join(format!("vramscope-review-{}", uuid::Uuid::now_v7().simple()));
        std::fs::create_dir_all(&folder).expect("create test folder");
        let db = Db::connect(&Db::sqlite_url(&folder.join("review.db"))).await.expect("open SQLite");
        (db, folder)
    }

    fn snapshot(id: &str, job: Option<&str>, rank: Option<i64>, at: i64, trigger: Trigger) -> NewSnapshot {
        NewSnapshot {
            id: id.to_owned(),
            sha256: "ab".repeat(32),
            blob_key: format!("snapshots/{}", "ab".repeat(32)),
            name: format!("{id}.pickle"),
            job: job.map(str::to_owned),
            host: Some(format!("node-{}", rank.unwrap_or(0) / 2)),
            rank,
            tags: vec![],
            trigger,
            size_bytes: 100,
            uploaded_at_ms: at,
            status: SnapshotStatus::Ready,
            stats_json: None,
        }
    }

    fn comment(id: &str, at: i64) -> NewComment {
        NewComment {
            comment: Comment {
                id: id.to_owned(),
                author: "alice".to_owned(),
                body: format!("note {id}"),
                created_ms: at,
                row: Some(7),
                time_us: None,
                addr: Some(u64::MAX - 1),
            },
            author_token: Some("a1b2c3".to_owned()),
            author_role: "uploader".to_owned(),
        }
    }

    /// Regression: one viewer's comment kept a snapshot from retention
    /// forever, and a failed upload's size counted against the byte limit
    /// though its bytes were gone.
    #[tokio::test]
    async fn regression_viewer_comments_and_failed_uploads_do_not_sway_retention() {
        let (db, folder) = sqlite().await;
        db.insert_snapshot(&snapshot("s1", None, None, 1, Trigger::Manual)).await.expect("insert");
        db.insert_snapshot(&snapshot("junk", None, None, 2, Trigger::Manual)).await.expect("insert");
        db.set_failed("junk", "not a snapshot").await.expect("fail");
        let viewer = NewComment { author_role: "viewer".to_owned(), ..comment("v1", 5) };
        db.insert_comment("s1", &viewer, 1000).await.expect("insert").expect("stored");
        let inventory = db.retention_inventory().await.expect("inventory");
        let seen: Vec<_> = inventory.iter().map(|i| (i.id.as_str(), i.comments, i.size_bytes)).collect();
        assert_eq!(seen, [("s1", 0, 100), ("junk", 0, 0)]);
        assert_eq!(db.delete_unprotected("s1").await.expect("delete").map(|r| r.meta.id).as_deref(), Some("s1"));
        db.close().await;
        std::fs::remove_dir_all(folder).expect("cleanup");
    }

    #[tokio::test]
    async fn comments_pins_and_conditional_delete() {
        let (db, folder) = sqlite().await;
        db.insert_snapshot(&snapshot("s1", None, None, 1, Trigger::Manual)).await.expect("insert");
        db.insert_snapshot(&snapshot("s2", None, None, 2, Trigger::Manual)).await.expect("insert");

        assert_eq!(db.insert_comment("missing", &comment("c0", 1), 1000).await.expect("insert"), None);
        let second = db.insert_comment("s1", &comment("c2", 20), 1000).await.expect("insert").expect("stored");
        db.insert_comment("s1", &comment("c1", 10), 1000).await.expect("insert").expect("stored");
        let thread = db.list_comments("s1").await.expect("list");
        assert_eq!(thread.iter().map(|c| c.comment.id.as_str()).collect::<Vec<_>>(), ["c1", "c2"], "oldest first");
        assert_eq!(thread[1], second);
        assert_eq!(thread[0].comment.addr, Some(u64::MAX - 1), "addresses above 2^63 survive");
        assert_eq!(db.get_comment("s2", "c1").await.expect("get"), None, "a comment belongs to one snapshot");

        // Commented or pinned: the retention delete refuses; plain: it deletes.
        assert_eq!(db.delete_unprotected("s1").await.expect("delete"), None);
        assert!(db.set_pinned("s2", true).await.expect("pin"));
        assert!(!db.set_pinned("missing", true).await.expect("pin"));
        assert!(db.get("s2").await.expect("get").expect("row").pinned);
        assert_eq!(db.delete_unprotected("s2").await.expect("delete"), None);
        let inventory = db.retention_inventory().await.expect("inventory");
        assert_eq!(
            inventory.iter().map(|i| (i.id.as_str(), i.pinned, i.comments)).collect::<Vec<_>>(),
            [("s1", false, 2), ("s2", true, 0)]
        );
        assert!(db.set_pinned("s2", false).await.expect("unpin"));
        assert_eq!(db.delete_unprotected("s2").await.expect("delete").map(|r| r.meta.id).as_deref(), Some("s2"));

        assert!(db.delete_comment("s1", "c1").await.expect("delete"));
        assert!(!db.delete_comment("s1", "c1").await.expect("delete again"));
        assert!(db.delete_comment("s1", "c2").await.expect("delete"));
        assert_eq!(db.delete_unprotected("s1").await.expect("delete").map(|r| r.meta.id).as_deref(), Some("s1"));
        db.close().await;
        std::fs::remove_dir_all(folder).expect("cleanup");
    }

    #[tokio::test]
    async fn jobs_are_counted_per_job() {
        let (db, folder) = sqlite().await;
        for (id, job, rank, at, trigger) in [
            ("a0", Some("llama"), Some(0), 10, Trigger::Manual),
            ("a1", Some("llama"), Some(1), 30, Trigger::Oom),
            ("a1b", Some("llama"), Some(1), 20, Trigger::Manual),
            ("b0", Some("bert"), Some(0), 40, Trigger::Manual),
            ("loose", None, None, 50, Trigger::Oom),
        ] {
            db.insert_snapshot(&snapshot(id, job, rank, at, trigger)).await.expect("insert");
        }
        let newest = db.list_jobs(1).await.expect("jobs");
        assert_eq!(newest.iter().map(|j| j.job.as_str()).collect::<Vec<_>>(), ["bert"], "the most recent first");
        let jobs = db.list_jobs(100).await.expect("jobs");
        assert_eq!(
            jobs,
            [
                JobSummary {
                    job: "bert".into(),
                    snapshots: 1,
                    ranks: 1,
                    hosts: 1,
                    last_upload_ms: 40,
                    oom_snapshots: 0
                },
                JobSummary {
                    job: "llama".into(),
                    snapshots: 3,
                    ranks: 2,
                    hosts: 1,
                    last_upload_ms: 30,
                    oom_snapshots: 1
                },
            ]
        );
        let llama: Vec<String> = db.job_snapshots("llama").await.expect("job").into_iter().map(|s| s.meta.id).collect();
        assert_eq!(llama, ["a1", "a1b", "a0"], "newest first");
        assert!(db.job_snapshots("none").await.expect("job").is_empty());
        db.close().await;
        std::fs::remove_dir_all(folder).expect("cleanup");
    }
}
