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
//! Deleting a snapshot deletes its row first; the caller deletes the file
//! once [`Db::count_by_blob`] says no other row uses it.

mod blob;
mod db;
mod review;
pub(crate) mod telemetry;

pub(crate) use blob::{BlobStore, S3Settings, Staged, StagedUpload, is_not_found};
pub(crate) use db::{Cursor, Db, ListFilter, NewSnapshot, Page, SnapshotRecord, SnapshotStatus, TokenRecord, Trigger};
pub(crate) use review::{CommentRecord, JobSummary, NewComment, RetentionItem};
