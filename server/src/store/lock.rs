//! Locks on content-addressed files, seen by every instance: what keeps
//! the deletion of a file no row uses from racing an upload that commits the
//! same content (see `Db::lock_blob`, which takes them here).

use anyhow::{Context, Result};
use sqlx::AnyPool;
use sqlx::any::AnyPoolOptions;

/// Stripes of the in-process blob locks (SQLite).
const BLOB_LOCK_STRIPES: usize = 64;
/// Connections for PostgreSQL's blob locks, apart from the main pool: a
/// lock holder then never waits for a connection that another lock holder
/// keeps (the steps under the lock use the main pool).
const BLOB_LOCK_CONNECTIONS: u32 = 8;

/// Where `Db::lock_blob` takes its locks.
#[derive(Debug, Clone)]
pub(super) enum BlobLocks {
    /// PostgreSQL: an advisory transaction lock, seen by every instance.
    Postgres(AnyPool),
    /// SQLite serves one instance: mutexes of this process, one per stripe
    /// of blob keys.
    InProcess(std::sync::Arc<Vec<std::sync::Arc<tokio::sync::Mutex<()>>>>),
}

/// A held lock on one blob key (see [`BlobLocks::lock`]). Release it with
/// [`BlobLock::release`]; dropped unreleased (an error path), it is
/// released in the background.
#[must_use = "the lock is held until released"]
pub(crate) struct BlobLock {
    held: Option<HeldLock>,
}

enum HeldLock {
    Postgres(sqlx::Transaction<'static, sqlx::Any>),
    // Held, never read: dropping it unlocks.
    InProcess(#[allow(dead_code)] tokio::sync::OwnedMutexGuard<()>),
}

impl BlobLock {
    /// Releases the lock (PostgreSQL: ends its transaction).
    pub(crate) async fn release(mut self) -> Result<()> {
        match self.held.take() {
            Some(HeldLock::Postgres(tx)) => tx.commit().await.context("releasing a blob lock"),
            Some(HeldLock::InProcess(_)) | None => Ok(()),
        }
    }
}

impl Drop for BlobLock {
    fn drop(&mut self) {
        // A transaction dropped unfinished keeps its lock until the
        // connection's next use: end it now.
        if let Some(HeldLock::Postgres(tx)) = self.held.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                if let Err(e) = tx.rollback().await {
                    tracing::warn!(error = %e, "could not release a blob lock");
                }
            });
        }
    }
}

impl BlobLocks {
    /// Advisory locks of the PostgreSQL database at `url`, on connections
    /// of their own (`redacted` names it in errors).
    pub(super) fn postgres(url: &str, redacted: &str) -> Result<BlobLocks> {
        Ok(BlobLocks::Postgres(
            AnyPoolOptions::new()
                .max_connections(BLOB_LOCK_CONNECTIONS)
                .min_connections(0)
                .connect_lazy(url)
                .with_context(|| format!("cannot open the lock connections to {redacted}"))?,
        ))
    }

    /// Mutexes of this process (SQLite serves one instance).
    pub(super) fn in_process() -> BlobLocks {
        BlobLocks::InProcess(std::sync::Arc::new(
            (0..BLOB_LOCK_STRIPES).map(|_| std::sync::Arc::new(tokio::sync::Mutex::new(()))).collect(),
        ))
    }

    #[cfg(test)]
    /// Closes the lock connections (PostgreSQL).
    pub(super) async fn close(&self) {
        if let BlobLocks::Postgres(locks) = self {
            locks.close().await;
        }
    }
}

impl BlobLocks {
    /// Locks the content-addressed file `blob_key` against the other steps
    /// that decide its fate, in every instance: deleting it once no row uses
    /// it (count, then delete) and committing an upload of the same content
    /// (dedup lookup, commit, row insert). Without it a deleter could count
    /// zero rows, an uploader commit onto the same key and insert its row,
    /// and the deleter then remove the file that row needs.
    ///
    /// PostgreSQL: `pg_advisory_xact_lock` on a 64-bit hash of the key, held
    /// by a transaction on a connection of its own. SQLite (one instance):
    /// an in-process mutex.
    pub(super) async fn lock(&self, blob_key: &str) -> Result<BlobLock> {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(blob_key.as_bytes());
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        let hash = i64::from_be_bytes(first);
        let held = match self {
            BlobLocks::Postgres(locks) => {
                let mut tx = locks.begin().await.context("blob lock: cannot begin a transaction")?;
                // The function returns `void`, which the `Any` driver cannot
                // decode: count the row instead.
                sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM (SELECT pg_advisory_xact_lock($1)) AS locked")
                    .bind(hash)
                    .fetch_one(&mut *tx)
                    .await
                    .with_context(|| format!("cannot lock {blob_key}"))?;
                HeldLock::Postgres(tx)
            }
            BlobLocks::InProcess(stripes) => {
                let stripe = usize::try_from(hash.unsigned_abs() % stripes.len() as u64).unwrap_or(0);
                HeldLock::InProcess(stripes[stripe].clone().lock_owned().await)
            }
        };
        Ok(BlobLock { held: Some(held) })
    }
}

#[cfg(test)]
mod tests {
    use super::super::db::Db;
    use super::super::db::testing::{Cleanup, TestDb};
    use super::super::snapshots::testing::new_snapshot;
    use crate::store::{NewSnapshot, SnapshotStatus};

    /// A file of `content`, staged as an upload.
    async fn stage(blobs: &crate::store::BlobStore, content: &'static [u8]) -> crate::store::Staged {
        let mut upload = blobs.begin_upload().await.expect("begin upload");
        upload.write(bytes::Bytes::from_static(content)).await.expect("write");
        upload.finish().await.expect("finish")
    }

    /// Regression: a deleter (retention or DELETE, on one instance) counted
    /// no row for a file and deleted it, while an upload of the same content
    /// (on another instance) committed onto the same key and inserted its
    /// row in between: the new row pointed at a deleted file. Both
    /// interleavings, each with one side's real code and the other side's
    /// steps held open under the lock.
    async fn blob_lock_keeps_a_file_an_upload_commits(deleter: Db, uploader: Db) {
        use crate::store::{BlobStore, Recorded, S3Settings, delete_blob_if_unused, record_upload};
        const CONTENT: &[u8] = b"the same snapshot bytes, uploaded twice";
        let folder = std::env::temp_dir().join(format!("vramscope-blobs-{}", uuid::Uuid::now_v7().simple()));
        let blobs = BlobStore::from_url(&folder.to_string_lossy(), &S3Settings::default()).expect("open folder");
        let ready = |key: String, sha: &str| NewSnapshot {
            blob_key: key,
            status: SnapshotStatus::Ready,
            ..new_snapshot("same content", sha, &[])
        };

        // A first upload, then its row deleted: the file waits for the deleter's check.
        let staged = stage(&blobs, CONTENT).await;
        let sha = staged.sha256.clone();
        let Recorded::New(first) =
            record_upload(&uploader, &blobs, &staged, |k| ready(k, &sha), true).await.expect("upload")
        else {
            panic!("first upload deduplicated")
        };
        let key = first.blob_key.clone();
        deleter.delete(&first.id).await.expect("delete row");

        // 1. The deleter has counted zero rows, under the lock; the real
        // upload must wait for it, then commit the file anew.
        let lock = deleter.lock_blob(&key).await.expect("lock");
        assert_eq!(deleter.count_by_blob(&key).await.expect("count"), 0);
        let staged = stage(&blobs, CONTENT).await;
        let upload = {
            let (uploader, blobs, sha) = (uploader.clone(), blobs.clone(), sha.clone());
            tokio::spawn(async move { record_upload(&uploader, &blobs, &staged, |k| ready(k, &sha), true).await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(!upload.is_finished(), "the upload committed while a deleter held the file's lock");
        blobs.delete(&key).await.expect("the deleter deletes the unused file");
        lock.release().await.expect("release");
        let Recorded::New(second) = upload.await.expect("join").expect("upload") else {
            panic!("deduplicated against a deleted row")
        };
        assert_eq!(blobs.get_bytes(&second.blob_key).await.expect("the file is there").as_ref(), CONTENT);

        // 2. An upload has committed the file but not inserted its row yet,
        // under the lock; the real deleter must wait, then keep the file.
        deleter.delete(&second.id).await.expect("delete row");
        let staged = stage(&blobs, CONTENT).await;
        let lock = uploader.lock_blob(&key).await.expect("lock");
        assert_eq!(blobs.commit(&staged).await.expect("commit"), key);
        let delete = {
            let (deleter, blobs, key) = (deleter.clone(), blobs.clone(), key.clone());
            tokio::spawn(async move { delete_blob_if_unused(&deleter, &blobs, &key).await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(!delete.is_finished(), "the deleter counted rows while an upload held the file's lock");
        uploader.insert_snapshot(&ready(key.clone(), &sha)).await.expect("insert row");
        lock.release().await.expect("release");
        assert!(!delete.await.expect("join").expect("delete if unused"), "a used file was deleted");
        assert_eq!(blobs.get_bytes(&key).await.expect("the file is there").as_ref(), CONTENT);
        std::fs::remove_dir_all(folder).expect("remove blob folder");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_blob_lock_keeps_a_file_an_upload_commits() {
        let t = TestDb::sqlite().await;
        // One instance serves a SQLite file: both sides share its locks.
        blob_lock_keeps_a_file_an_upload_commits(t.db.clone(), t.db.clone()).await;
        t.finish().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_blob_lock_keeps_a_file_an_upload_commits() {
        let t = TestDb::postgres().await;
        let Cleanup::PostgresDatabase { admin_url, name } = &t.cleanup else { unreachable!() };
        let mut url = reqwest::Url::parse(admin_url).expect("test PostgreSQL URL");
        url.set_path(&format!("/{name}"));
        // Two instances: two connections pools on one database.
        let other = Db::connect(url.as_str()).await.expect("second instance");
        blob_lock_keeps_a_file_an_upload_commits(t.db.clone(), other.clone()).await;
        other.close().await;
        t.finish().await;
    }
}
