//! Where the server keeps what it is given: metadata in SQL ([`Db`]:
//! SQLite embedded, PostgreSQL for a team) and snapshot files in an object
//! store ([`BlobStore`]: a local folder or S3).
//!
//! Files are content-addressed (`snapshots/<sha256>`) for two reasons.
//! Deduplication: an agent that uploads the same snapshot twice, or ranks
//! that dump identical files, cost one file, and rows share it through
//! `blob_key`. Atomic commit: an upload streams into `staging/` and only a
//! complete, hashed file is moved to its final key, after which the row is
//! inserted; a crash at any point leaves at most a staging leftover (swept at
//! startup) or an unreferenced file, never a row pointing at half a file.
//!
//! Deleting a snapshot deletes its row first; [`delete_blob_if_unused`]
//! then deletes the file once [`Db::count_by_blob`] says no other row uses
//! it. That check and an upload's commit of the same content
//! ([`record_upload`]) hold the file's lock ([`Db::lock_blob`]), so a file
//! an upload has just committed is never deleted under it, whichever
//! instances do the two.

mod blob;
mod db;
mod direct;
mod lock;
mod review;
mod snapshots;
pub(crate) mod telemetry;
mod tokens;

pub(crate) use blob::{
    BlobStore, S3Settings, Staged, StagedUpload, Tap, Tapped, is_not_found, left_by_dead_process, owner_tag,
    sweep_folder,
};
pub(crate) use db::Db;
pub(crate) use review::{JobSummary, NewComment, RetentionItem};
pub(crate) use snapshots::{Cursor, ListFilter, NewSnapshot, SnapshotRecord, SnapshotStatus, Trigger};
pub(crate) use tokens::TokenRecord;

/// What [`record_upload`] did.
#[derive(Debug)]
pub(crate) enum Recorded {
    /// The file was committed and this row inserted.
    New(SnapshotRecord),
    /// A parsed snapshot of the same content and labels exists: the staged
    /// file was dropped and this is that snapshot (an upload sent again).
    Duplicate(SnapshotRecord),
    /// A parsed snapshot of the same content exists under other labels (a
    /// job, host, rank, trigger, tags or given name of its own): the staged
    /// file was dropped, and this new row shares that file and its
    /// statistics, so the uploader's labels are not lost.
    Labelled(SnapshotRecord),
}

/// Whether a new row would say nothing the existing one does not: the
/// same job, host, rank, trigger and tags, and the same name when the
/// upload gave one.
fn same_labels(existing: &SnapshotRecord, new: &NewSnapshot, name_given: bool) -> bool {
    existing.job == new.job
        && existing.host == new.host
        && existing.rank == new.rank
        && existing.trigger == new.trigger
        && existing.tags == new.tags
        && (!name_given || existing.name == new.name)
}

/// Commits a staged upload and inserts its row (`row` is given the blob
/// key), unless a parsed snapshot of the same content exists (then see
/// [`Recorded`]), all under the file's lock so no deleter removes the file
/// in between. `name_given`: the upload named itself (a default name is
/// not a label of its own).
pub(crate) async fn record_upload(
    db: &Db,
    blobs: &BlobStore,
    staged: &Staged,
    row: impl FnOnce(String) -> NewSnapshot,
    name_given: bool,
) -> anyhow::Result<Recorded> {
    let lock = db.lock_blob(&BlobStore::key_of(&staged.sha256)).await?;
    if let Some(existing) = db.find_ready_by_sha256(&staged.sha256).await? {
        blobs.discard(staged).await?;
        let mut new = row(existing.blob_key.clone());
        let recorded = if same_labels(&existing, &new, name_given) {
            Recorded::Duplicate(existing)
        } else {
            new.status = SnapshotStatus::Ready;
            new.stats_json = existing.stats_json.clone();
            new.size_bytes = existing.size_bytes;
            Recorded::Labelled(db.insert_snapshot(&new).await?)
        };
        lock.release().await?;
        return Ok(recorded);
    }
    let blob_key = blobs.commit(staged).await?;
    let record = db.insert_snapshot(&row(blob_key)).await?;
    lock.release().await?;
    Ok(Recorded::New(record))
}

/// Deletes the file at `blob_key` when no row uses it (its rows are
/// deleted first), under the file's lock. Returns whether it was deleted.
pub(crate) async fn delete_blob_if_unused(db: &Db, blobs: &BlobStore, blob_key: &str) -> anyhow::Result<bool> {
    let lock = db.lock_blob(blob_key).await?;
    let unused = db.count_by_blob(blob_key).await? == 0;
    if unused {
        blobs.delete(blob_key).await?;
    }
    lock.release().await?;
    Ok(unused)
}
