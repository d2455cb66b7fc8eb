//! A complete upload, from its staging object to a snapshot row: the
//! labels checked, small files parsed inline (a file that is no snapshot is
//! refused before anything is committed), the dedup lookup, the commit to
//! the content-addressed key and the row under the file's lock, then the
//! index (inline parse) or the background parse.
//!
//! The parse starts before all that, as the upload begins
//! ([`Ingest::begin_upload`]): it reads the upload's bytes as they stream
//! in, and the commit takes its result instead of reading the stored file.
//!
//! The order makes a crash harmless: bytes sit in a staging object (never
//! listed) until they are complete and, for small files, parsed; the row
//! comes last. Leftover staging objects are swept at start-up.

use vramscope_shared::api::UploadAnswer;
use vramscope_shared::{Snapshot, SnapshotStats};

use super::labels::{Labels, check_labels, clean_tags};
use super::parse::{UploadParse, stats_json};
use super::{Ingest, ParseFailure};
use crate::store::{
    BlobStore, NewSnapshot, Recorded, SnapshotRecord, SnapshotStatus, Staged, StagedUpload, Trigger, record_upload,
};

/// Why an upload was not recorded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CommitError {
    /// A label or the trigger is not acceptable.
    #[error("{0}")]
    BadRequest(String),
    /// Parsed inline, the file is not a readable snapshot.
    #[error("{}", .0.message())]
    Unreadable(ParseFailure),
    /// The database or the blob store failed.
    #[error(transparent)]
    Storage(#[from] anyhow::Error),
}

/// A recorded upload: the answer, and whether a new row was made (a
/// retry of the same file and labels is answered with the existing one).
pub(crate) struct Committed {
    /// What the client is told.
    pub(crate) answer: UploadAnswer,
    /// A row was inserted (201) rather than found (200).
    pub(crate) created: bool,
}

/// A finished staging object that is discarded if the request goes away
/// before it is committed or discarded (a client that leaves during the
/// inline parse once left up to 256 MiB in staging for an hour).
struct StagedGuard {
    staged: Option<Staged>,
    blobs: BlobStore,
}

impl StagedGuard {
    fn get(&self) -> anyhow::Result<&Staged> {
        self.staged.as_ref().ok_or_else(|| anyhow::anyhow!("staged upload already taken"))
    }

    /// Remove the staging object now.
    async fn discard(mut self) -> anyhow::Result<()> {
        match self.staged.take() {
            Some(staged) => self.blobs.discard(&staged).await,
            None => Ok(()),
        }
    }

    /// The staging object is in other hands now (committed).
    fn keep(&mut self) {
        self.staged = None;
    }
}

impl Drop for StagedGuard {
    fn drop(&mut self) {
        if let Some(staged) = self.staged.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let blobs = self.blobs.clone();
            runtime.spawn(async move {
                if let Err(e) = blobs.discard(&staged).await {
                    tracing::warn!(error = format!("{e:#}"), "could not remove an abandoned staged upload");
                }
            });
        }
    }
}

impl Ingest {
    /// A new staging object for an upload, tapped by a parse of its bytes
    /// as they arrive when a parse slot is free ([`super::Parser::parse_upload`]).
    pub(crate) async fn begin_upload(&self) -> anyhow::Result<StagedUpload> {
        let mut upload = self.blobs.begin_upload().await?;
        if let Some(tap) = self.parser.parse_upload(upload.key(), self.metrics.clone()) {
            upload.tap(tap);
        }
        Ok(upload)
    }

    /// The snapshot of an upload staged at `staging_key`: its parse under
    /// way if it has one (one that could not read the upload's copy, the
    /// stored file parsed instead), else the stored file parsed.
    async fn parse_staged(&self, staging_key: &str, early: Option<UploadParse>) -> Result<Snapshot, ParseFailure> {
        if let Some(early) = early {
            match early.finish().await {
                Err(failure) if UploadParse::worth_redoing(&failure) => {
                    let error = failure.message();
                    tracing::debug!(error, "the upload's own parse did not finish; parsing the stored file");
                }
                done => return done,
            }
        }
        self.parser.parse_stored(&self.blobs, staging_key, &self.metrics).await
    }

    /// Dedup, parse (inline up to `inline_max` bytes), commit and record a
    /// complete upload.
    pub(crate) async fn commit(&self, staged: Staged, meta: Labels, inline_max: u64) -> Result<Committed, CommitError> {
        let state = self;
        // Dropped (so stopped) on every way out that does not use it.
        let early = state.parser.take_upload_parse(&staged.staging_key);
        let mut guard = StagedGuard { staged: Some(staged), blobs: state.blobs.clone() };
        // An upload that names no trigger gets the file's: `oom` when its
        // trace records one, known from the parse (here, or in the
        // background), else `manual`. The page, the CLI and the report then
        // give one file one trigger.
        let trigger_named = meta.trigger.is_some();
        let trigger_name = meta.trigger.clone().unwrap_or_else(|| "manual".to_owned());
        let Some(mut trigger) = Trigger::parse(&trigger_name) else {
            guard.discard().await?;
            return Err(CommitError::BadRequest(format!(
                "trigger must be manual, threshold or oom, not {trigger_name:?}"
            )));
        };
        if let Err(e) = check_labels(&meta) {
            guard.discard().await?;
            return Err(CommitError::BadRequest(e.0));
        }
        // A file stored and parsed already is not parsed again: `record_upload`
        // answers it (under the file's lock) as a duplicate or a new row of the
        // same file. Should that snapshot vanish meanwhile, the upload is
        // stored and parsed in the background.
        let known_record = state.db.find_ready_by_sha256(&guard.get()?.sha256).await?;
        let known = known_record.is_some();
        let known_oom = known_record.as_ref().and_then(|r| r.stats_json.as_deref()).is_some_and(stats_record_oom);
        let staged = guard.get()?.clone();
        let inline = !known && staged.size <= inline_max;
        let mut early = early.filter(|_| !known);
        let mut parsed = None;
        let stats_json = if inline {
            // Dropping this future (the client left) stops the parse, and the
            // guard removes the staged bytes.
            match state.parse_staged(&staged.staging_key, early.take()).await {
                Ok(snapshot) => {
                    let stats = snapshot.stats();
                    if !trigger_named && stats.devices.iter().any(|d| d.ooms > 0) {
                        trigger = Trigger::Oom;
                    }
                    let json = stats_json(&stats)?;
                    parsed = Some((snapshot, stats));
                    Some(json)
                }
                Err(failure) => {
                    guard.discard().await?;
                    state.metrics.upload("rejected");
                    return Err(CommitError::Unreadable(failure));
                }
            }
        } else {
            None
        };

        if !trigger_named && known_oom {
            trigger = Trigger::Oom;
        }
        let id = uuid::Uuid::now_v7().to_string();
        let name_given = meta.name.as_deref().is_some_and(|n| !n.trim().is_empty());
        let name = meta.name.filter(|n| !n.trim().is_empty()).unwrap_or_else(|| format!("snapshot-{id}"));
        let status = if inline { SnapshotStatus::Ready } else { SnapshotStatus::Parsing };
        let row = |blob_key: String| NewSnapshot {
            id: id.clone(),
            sha256: staged.sha256.clone(),
            blob_key,
            name,
            job: meta.job.filter(|s| !s.is_empty()),
            host: meta.host.filter(|s| !s.is_empty()),
            rank: meta.rank,
            tags: clean_tags(meta.tags.as_deref().unwrap_or_default().split(',')),
            trigger,
            size_bytes: staged.size,
            uploaded_at_ms: crate::clock::now_ms(),
            status,
            stats_json,
        };
        // Dedup lookup, commit and row under the file's lock: a retention run
        // or a delete on another instance cannot remove the file in between.
        // From here the staging object is record_upload's: committed, or
        // discarded as a duplicate.
        guard.keep();
        let blob_key = match record_upload(&state.db, &state.blobs, &staged, row, name_given).await? {
            Recorded::New(record) => record.blob_key,
            // The same file again: the existing row, or a new row of other
            // labels sharing its file (created).
            Recorded::Duplicate(existing) => return Ok(deduplicated(state, existing, false)),
            Recorded::Labelled(record) => return Ok(deduplicated(state, record, true)),
        };
        state.metrics.bytes_stored.inc_by(staged.size);
        state.metrics.upload("ok");
        self.index_after_commit(parsed, early, &blob_key, &id, staged.size, !trigger_named);
        let answer = UploadAnswer { id, sha256: staged.sha256, status, deduplicated: false };
        Ok(Committed { answer, created: true })
    }

    /// After a new row: index and persist a snapshot parsed inline, or
    /// start the load from the upload's own parse and parse the stored
    /// file in the background.
    fn index_after_commit(
        &self,
        parsed: Option<(Snapshot, SnapshotStats)>,
        early: Option<UploadParse>,
        blob_key: &str,
        id: &str,
        size: u64,
        infer_trigger: bool,
    ) {
        let state = self;
        let (blob_key, id) = (blob_key.to_owned(), id.to_owned());
        match parsed {
            // Index and persist it right away, off the answer's path; a view
            // asked for before that ends waits for it instead of parsing again.
            Some((snapshot, stats)) => {
                let (ingest, key) = (state.clone(), blob_key.clone());
                // Counted from now for a graceful stop (its file is written
                // behind for a large one, counted there in turn).
                let counted = state.persisting();
                let index = move || async move {
                    let indexed = ingest.index(&key, snapshot, Some(stats)).await;
                    drop(counted);
                    indexed
                };
                drop(state.cache.start(&blob_key, index));
            }
            None => {
                // The load starts from the upload's own parse before the
                // answer: a view asked for right after it joins that parse
                // instead of starting one from the stored file.
                if let Some(early) = early {
                    let (ingest, key) = (state.clone(), blob_key.clone());
                    let load = move || async move { ingest.finish_upload_parse(&key, early, size).await };
                    drop(state.cache.start(&blob_key, load));
                }
                tokio::spawn(state.clone().parse_in_background(id, blob_key, infer_trigger));
            }
        }
    }
}

/// Whether stored statistics (`stats_json`) count an OOM on any device.
pub(crate) fn stats_record_oom(stats_json: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(stats_json).is_ok_and(|v| {
        v["devices"].as_array().is_some_and(|d| d.iter().any(|d| d["ooms"].as_u64().is_some_and(|n| n > 0)))
    })
}

/// The answer to a file stored already: `record`'s row (`created`: a new
/// row of its own labels sharing the file), counted as a duplicate upload.
fn deduplicated(state: &Ingest, record: SnapshotRecord, created: bool) -> Committed {
    state.metrics.upload("duplicate");
    let meta = record.meta;
    let answer = UploadAnswer { id: meta.id, sha256: meta.sha256, status: meta.status, deduplicated: true };
    Committed { answer, created }
}
