//! Snapshot files in an object store: a local folder (the embedded default)
//! or an S3 bucket (team mode), both through the `object_store` crate.
//!
//! Layout, relative to the folder or to the bucket's prefix:
//!
//! - `staging/<uuid-v7>`: an upload in progress or not yet committed. Never
//!   served and never named by a database row; [`BlobStore::clean_staging`]
//!   removes what crashed uploads left.
//! - `snapshots/<sha256>`: committed files, named by their content.
//! - `indexes/<sha256>`: the persisted index of `snapshots/<sha256>`
//!   (`ingest::index_file`), written after its first parse and deleted
//!   with it.
//!
//! An upload streams into a staging object in parts of [`PART_SIZE`] bytes
//! with at most [`PARTS_IN_FLIGHT`] parts uploading at once, hashing as it
//! goes; then [`BlobStore::commit`] moves it under its hash. A file is
//! therefore complete whenever its final key exists, and identical uploads
//! share one file.
//!
//! An upload may also be tapped ([`StagedUpload::tap`]): each piece written
//! is handed on, uncopied, to a reader on another task (the parse that runs
//! while the upload streams), and [`Tapped::End`] after the last. The tap
//! never decides what is stored: a reader that goes away only stops the
//! copies.

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::prefix::PrefixStore;
use object_store::{GetOptions, GetRange, ObjectStore, WriteMultipart};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::direct::DirectFile;

/// Size of one uploaded part. S3 needs at least 5 MiB for every part but the
/// last; bigger parts mean fewer requests but more memory per upload.
pub(crate) const PART_SIZE: usize = 8 * 1024 * 1024;

/// Parts of one upload sent at the same time. With the part being filled,
/// an upload holds at most `PARTS_IN_FLIGHT + 1` parts in memory (24 MiB).
pub(crate) const PARTS_IN_FLIGHT: usize = 2;

const STAGING_DIR: &str = "staging";
const SNAPSHOTS_DIR: &str = "snapshots";
const INDEXES_DIR: &str = "indexes";

/// How to reach an S3-compatible store. Every field falls back to the
/// standard `AWS_*` environment variables (`AWS_ENDPOINT`, `AWS_REGION`,
/// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_ALLOW_HTTP`, ...).
#[derive(Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub(crate) struct S3Settings {
    /// Endpoint URL of a non-AWS store (MinIO, Ceph, moto), e.g.
    /// `http://127.0.0.1:9000`. Requests use path-style addressing.
    pub(crate) endpoint: Option<String>,
    /// Region of the bucket (`us-east-1` when unset everywhere).
    pub(crate) region: Option<String>,
    /// Access key id.
    pub(crate) access_key_id: Option<String>,
    /// Secret access key.
    pub(crate) secret_access_key: Option<String>,
    /// Allow plain `http://` endpoints. Loopback endpoints are always
    /// allowed.
    pub(crate) allow_http: bool,
}

impl fmt::Debug for S3Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Settings")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &self.secret_access_key.as_ref().map(|_| "***"))
            .field("allow_http", &self.allow_http)
            .finish()
    }
}

/// Where snapshot files live. Cheap to clone: clones share one client.
#[derive(Debug, Clone)]
pub(crate) struct BlobStore {
    store: Arc<dyn ObjectStore>,
    /// The folder, for a local store: crashed local uploads leave files
    /// that `object_store` does not list, so the sweep reads the folder.
    local_root: Option<PathBuf>,
    /// The URL it was opened with, for messages.
    location: String,
}

/// What a tapped upload hands on: its pieces in order, then `End` once it
/// is complete. A channel that closes without `End` is an upload that
/// stopped (aborted, dropped, refused).
#[derive(Debug)]
pub(crate) enum Tapped {
    /// The next bytes of the upload.
    Bytes(Bytes),
    /// Nothing follows: the upload is whole.
    End,
}

/// The sending end of a tap: bounded, so a slow reader holds the upload
/// back rather than letting the copies pile up in memory.
pub(crate) type Tap = tokio::sync::mpsc::Sender<Tapped>;

/// An upload being written to a staging object. Dropping it without
/// [`finish`](Self::finish) or [`abort`](Self::abort) aborts it in the
/// background (a client that disconnects leaves nothing behind).
pub(crate) struct StagedUpload {
    key: String,
    writer: Option<Writer>,
    hasher: Sha256,
    size: u64,
    /// The store, to remove the object when its completion outlives the caller.
    blobs: BlobStore,
    /// Where the bytes are also handed on, if anywhere.
    tap: Option<Tap>,
}

/// Where a staged upload's bytes go.
enum Writer {
    /// Through `object_store`: to S3 in parts.
    Parts(WriteMultipart),
    /// A local folder's file, written around the page cache
    /// ([`super::direct`]).
    Local(DirectFile),
}

/// A complete upload in staging, ready for [`BlobStore::commit`] or
/// [`BlobStore::discard`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Staged {
    /// Key of the staging object.
    pub(crate) staging_key: String,
    /// SHA-256 of the content, lowercase hex.
    pub(crate) sha256: String,
    /// Size of the content in bytes.
    pub(crate) size: u64,
}

impl BlobStore {
    /// Opens the store at `url`: a folder path or `file:///…` URL (the
    /// folder is created when missing), or `s3://bucket/optional/prefix`
    /// configured by `s3`. Reaches no server: a wrong bucket or credentials
    /// show at the first request (the startup [`clean_staging`](Self::clean_staging)).
    pub(crate) fn from_url(url: &str, s3: &S3Settings) -> Result<BlobStore> {
        if let Some(rest) = url.strip_prefix("s3://") {
            return open_s3(url, rest, s3);
        }
        let root = if url.starts_with("file:") {
            reqwest::Url::parse(url)
                .ok()
                .and_then(|u| u.to_file_path().ok())
                .with_context(|| format!("not a local file URL: {url}"))?
        } else if url.contains("://") {
            bail!("unsupported blob store (expected a folder, file:///… or s3://bucket/prefix): {url}")
        } else {
            PathBuf::from(url)
        };
        std::fs::create_dir_all(&root).with_context(|| format!("cannot create the blob folder {}", root.display()))?;
        let fs = LocalFileSystem::new_with_prefix(&root)
            .with_context(|| format!("cannot open the blob folder {}", root.display()))?;
        Ok(BlobStore { store: Arc::new(fs), local_root: Some(root), location: url.to_owned() })
    }

    /// Starts an upload into a new staging object.
    pub(crate) async fn begin_upload(&self) -> Result<StagedUpload> {
        let key = format!("{STAGING_DIR}/{}{}", owner_tag(), uuid::Uuid::now_v7());
        let writer = match &self.local_root {
            // The key's path in the folder, as `object_store` maps it (a
            // uuid needs no escaping).
            Some(root) => {
                let folder = root.join(STAGING_DIR);
                tokio::fs::create_dir_all(&folder)
                    .await
                    .with_context(|| format!("cannot create {}", folder.display()))?;
                let path = root.join(&key);
                Writer::Local(
                    DirectFile::create(path.clone())
                        .await
                        .with_context(|| format!("cannot start upload {}", path.display()))?,
                )
            }
            None => {
                let upload = self
                    .store
                    .put_multipart(&ObjectPath::from(key.as_str()))
                    .await
                    .with_context(|| format!("cannot start upload {key} in {}", self.location))?;
                Writer::Parts(WriteMultipart::new_with_chunk_size(upload, PART_SIZE))
            }
        };
        Ok(StagedUpload { key, writer: Some(writer), hasher: Sha256::new(), size: 0, blobs: self.clone(), tap: None })
    }

    /// The content-addressed key of a file whose SHA-256 is `sha256`.
    pub(crate) fn key_of(sha256: &str) -> String {
        format!("{SNAPSHOTS_DIR}/{sha256}")
    }

    /// Moves a staged upload to its content-addressed key
    /// `snapshots/<sha256>` and returns that key. When the key exists (the
    /// same content was uploaded before), the staging object is deleted
    /// instead: the existing file is the same bytes.
    pub(crate) async fn commit(&self, staged: &Staged) -> Result<String> {
        let sha = &staged.sha256;
        if sha.len() != 64 || !sha.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            bail!("cannot commit {}: {sha:?} is not a SHA-256 in lowercase hex", staged.staging_key);
        }
        let final_key = BlobStore::key_of(sha);
        let final_path = ObjectPath::from(final_key.as_str());
        match self.store.head(&final_path).await {
            Ok(_) => {
                self.discard(staged).await?;
                return Ok(final_key);
            }
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e).with_context(|| format!("cannot check {final_key} in {}", self.location)),
        }
        // Two instances committing the same content at once both rename;
        // either result is the same bytes. A local rename is atomic; on S3
        // it is a server-side copy (at most 5 GiB) and a delete.
        self.store
            .rename(&ObjectPath::from(staged.staging_key.as_str()), &final_path)
            .await
            .with_context(|| format!("cannot move {} to {final_key} in {}", staged.staging_key, self.location))?;
        Ok(final_key)
    }

    /// Deletes a staged upload that will not be committed.
    pub(crate) async fn discard(&self, staged: &Staged) -> Result<()> {
        self.delete(&staged.staging_key).await
    }

    /// Reads `range` of the file at `key` (all of it for `None`), returning
    /// the file's total size and a stream of its bytes. A range reaching
    /// past the end is cut at the end; one starting at or past the end is
    /// an error.
    pub(crate) async fn get_range(
        &self,
        key: &str,
        range: Option<Range<u64>>,
    ) -> Result<(u64, BoxStream<'static, std::io::Result<Bytes>>)> {
        let options = GetOptions { range: range.clone().map(GetRange::from), ..Default::default() };
        let result = self
            .store
            .get_opts(&ObjectPath::from(key), options)
            .await
            .with_context(|| format!("cannot read {key} (range {range:?}) from {}", self.location))?;
        let total = result.meta.size;
        Ok((total, result.into_stream().map_err(std::io::Error::other).boxed()))
    }

    /// The whole file at `key`, in memory: for the report export, which
    /// inlines the file anyway (elsewhere a snapshot is streamed with
    /// [`get_range`](Self::get_range)).
    pub(crate) async fn get_bytes(&self, key: &str) -> Result<Bytes> {
        let read = async { self.store.get(&ObjectPath::from(key)).await?.bytes().await };
        read.await.with_context(|| format!("cannot read {key} from {}", self.location))
    }

    /// The folder of a local store (`None` on S3).
    pub(crate) fn local_root(&self) -> Option<&std::path::Path> {
        self.local_root.as_deref()
    }

    /// The key of the persisted index of the snapshot file at `key`.
    pub(crate) fn index_key_of(key: &str) -> String {
        format!("{INDEXES_DIR}/{}", key.rsplit('/').next().unwrap_or(key))
    }

    /// Uploads the local file at `path` to `key`, in parts as uploads go
    /// (at most [`PARTS_IN_FLIGHT`] parts in memory).
    pub(crate) async fn put_file(&self, key: &str, path: &std::path::Path) -> Result<()> {
        use tokio::io::AsyncReadExt;
        let upload =
            self.store.put_multipart(&ObjectPath::from(key)).await.with_context(|| format!("cannot start {key}"))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut file = tokio::fs::File::open(path).await.with_context(|| format!("cannot open {}", path.display()))?;
        loop {
            let mut part = vec![0u8; PART_SIZE];
            let mut filled = 0;
            while filled < PART_SIZE {
                let n = file.read(&mut part[filled..]).await.with_context(|| format!("reading {}", path.display()))?;
                if n == 0 {
                    break;
                }
                filled += n;
            }
            if filled == 0 {
                break;
            }
            part.truncate(filled);
            if let Err(e) = writer.wait_for_capacity(PARTS_IN_FLIGHT).await {
                drop(writer.abort().await);
                return Err(e).with_context(|| format!("cannot upload a part of {key}"));
            }
            writer.put(Bytes::from(part));
        }
        writer.finish().await.with_context(|| format!("cannot complete {key} in {}", self.location))?;
        Ok(())
    }

    /// Downloads `key` into the local file at `path` (written whole or
    /// not at all). `Ok(false)` when there is no such file.
    pub(crate) async fn get_to_file(&self, key: &str, path: &std::path::Path) -> Result<bool> {
        use tokio::io::AsyncWriteExt;
        let mut stream = match self.store.get(&ObjectPath::from(key)).await {
            Ok(result) => result.into_stream(),
            Err(object_store::Error::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(e).with_context(|| format!("cannot read {key} from {}", self.location)),
        };
        let partial = path.with_extension("partial");
        let mut out =
            tokio::fs::File::create(&partial).await.with_context(|| format!("cannot create {}", partial.display()))?;
        let copied = async {
            while let Some(chunk) = stream.next().await {
                out.write_all(&chunk.with_context(|| format!("reading {key}"))?).await?;
            }
            out.flush().await?;
            tokio::fs::rename(&partial, path).await?;
            anyhow::Ok(())
        };
        if let Err(e) = copied.await {
            drop(tokio::fs::remove_file(&partial).await);
            return Err(e).with_context(|| format!("cannot download {key} to {}", path.display()));
        }
        Ok(true)
    }

    /// Deletes the file at `key` (and, for a snapshot file, its persisted
    /// index); deleting a missing file succeeds.
    pub(crate) async fn delete(&self, key: &str) -> Result<()> {
        if key.starts_with(SNAPSHOTS_DIR) {
            self.delete_one(&BlobStore::index_key_of(key)).await?;
        }
        self.delete_one(key).await
    }

    async fn delete_one(&self, key: &str) -> Result<()> {
        match self.store.delete(&ObjectPath::from(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e).with_context(|| format!("cannot delete {key} from {}", self.location)),
        }
    }

    #[cfg(test)]
    /// Size of the file at `key`, or `None` when there is none.
    pub(crate) async fn size(&self, key: &str) -> Result<Option<u64>> {
        match self.store.head(&ObjectPath::from(key)).await {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e).with_context(|| format!("cannot look up {key} in {}", self.location)),
        }
    }

    /// Removes staging objects not written to for `older_than`: what
    /// crashed or abandoned uploads left. Returns how many it removed.
    ///
    /// Run at startup, with a margin longer than any upload may stall
    /// (an hour, say), since another instance may be uploading now. On S3
    /// an upload that never completed is not an object at all: its parts
    /// are dropped by aborting it, or by the bucket's
    /// `AbortIncompleteMultipartUpload` lifecycle rule after a crash.
    ///
    /// In a local folder, a file left by a process that is gone (its name
    /// starts with the writer's pid, [`owner_tag`]: a server killed with
    /// SIGKILL mid-upload) goes whatever its age.
    pub(crate) async fn clean_staging(&self, older_than: Duration) -> Result<usize> {
        let cutoff = SystemTime::now().checked_sub(older_than).unwrap_or(SystemTime::UNIX_EPOCH);
        if let Some(root) = &self.local_root {
            let folder = root.join(STAGING_DIR);
            return tokio::task::spawn_blocking(move || {
                sweep_folder(&folder, cutoff, |name| left_by_dead_process(name))
            })
            .await
            .context("staging sweep task failed")?;
        }
        let old = self.listed_before(STAGING_DIR, older_than).await?;
        for meta in &old {
            self.delete(meta.location.as_ref()).await?;
        }
        Ok(old.len())
    }

    /// The objects under `dir` last modified before `older_than` ago.
    async fn listed_before(&self, dir: &str, older_than: Duration) -> Result<Vec<object_store::ObjectMeta>> {
        let cutoff = SystemTime::now().checked_sub(older_than).unwrap_or(SystemTime::UNIX_EPOCH);
        let cutoff_ms = cutoff.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis());
        let mut old = Vec::new();
        let mut listing = self.store.list(Some(&ObjectPath::from(dir)));
        while let Some(meta) = listing.next().await {
            let meta = meta.with_context(|| format!("cannot list {dir}/ in {}", self.location))?;
            if u128::try_from(meta.last_modified.timestamp_millis()).unwrap_or(0) < cutoff_ms {
                old.push(meta);
            }
        }
        Ok(old)
    }

    /// Persisted indexes last modified before `older_than` ago whose
    /// snapshot file is gone: left by an index upload that finished after
    /// its file was deleted. The start-up sweep removes them.
    pub(crate) async fn orphan_indexes(&self, older_than: Duration) -> Result<Vec<String>> {
        let mut orphans = Vec::new();
        for meta in self.listed_before(INDEXES_DIR, older_than).await? {
            let key = meta.location.to_string();
            let file = BlobStore::key_of(key.rsplit('/').next().unwrap_or_default());
            match self.store.head(&ObjectPath::from(file.as_str())).await {
                Ok(_) => {}
                Err(object_store::Error::NotFound { .. }) => orphans.push(key),
                Err(e) => return Err(e).with_context(|| format!("cannot look up {file} in {}", self.location)),
            }
        }
        Ok(orphans)
    }

    /// Committed files last modified before `older_than` ago, as (key, size).
    /// The start-up sweep removes those no database row names: left by a
    /// crash between commit and insert, or by a delete racing an identical
    /// upload on another instance. The age margin keeps the sweep away from
    /// uploads in flight.
    pub(crate) async fn committed_before(&self, older_than: Duration) -> Result<Vec<(String, u64)>> {
        let old = self.listed_before(SNAPSHOTS_DIR, older_than).await?;
        Ok(old.into_iter().map(|meta| (meta.location.to_string(), meta.size)).collect())
    }
}

impl StagedUpload {
    /// Bytes written so far.
    #[cfg(test)]
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// The staging object's key.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// Hand every piece written from now on to `tap` too, then
    /// [`Tapped::End`] when [`finish`](Self::finish) completes the upload.
    pub(crate) fn tap(&mut self, tap: Tap) {
        self.tap = Some(tap);
    }

    /// Appends `bytes`, waiting while [`PARTS_IN_FLIGHT`] parts are still
    /// uploading (back pressure on the client instead of memory growth),
    /// or while the tap's reader is behind.
    pub(crate) async fn write(&mut self, mut bytes: Bytes) -> Result<()> {
        if self.writer.is_none() {
            bail!("upload {} is already closed", self.key);
        }
        self.hasher.update(&bytes);
        self.size += bytes.len() as u64;
        // A reference to the same bytes, not a copy. A reader gone (its parse
        // ended or failed) only ends the copies.
        if let Some(tap) = &self.tap
            && tap.send(Tapped::Bytes(bytes.clone())).await.is_err()
        {
            self.tap = None;
        }
        let key = &self.key;
        match self.writer.as_mut().with_context(|| format!("upload {key} is already closed"))? {
            // Pieces of at most one part, so each put starts at most one part
            // upload and the wait below bounds what is in flight.
            Writer::Parts(writer) => {
                while !bytes.is_empty() {
                    writer
                        .wait_for_capacity(PARTS_IN_FLIGHT)
                        .await
                        .with_context(|| format!("cannot upload a part of {key}"))?;
                    writer.put(bytes.split_to(bytes.len().min(PART_SIZE)));
                }
            }
            Writer::Local(file) => file.write(&bytes).await.with_context(|| format!("cannot write {key}"))?,
        }
        Ok(())
    }

    /// Uploads what is buffered and completes the staging object.
    ///
    /// The completion runs on a task of its own. A caller that goes away
    /// meanwhile (the client left) once left the finished file in staging:
    /// the local store renames it on a blocking thread that outlives a
    /// dropped future. Now the task runs to its end and, finding nobody to
    /// hand the object to, removes it.
    pub(crate) async fn finish(mut self) -> Result<Staged> {
        let writer = self.writer.take().with_context(|| format!("upload {} is already closed", self.key))?;
        if let Some(tap) = self.tap.take() {
            // Every byte was sent: the reader may take the upload as whole.
            drop(tap.send(Tapped::End).await);
        }
        let staged = Staged {
            staging_key: std::mem::take(&mut self.key),
            sha256: hex::encode(std::mem::take(&mut self.hasher).finalize()),
            size: self.size,
        };
        let blobs = self.blobs.clone();
        let (hand_over, received) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let key = staged.staging_key.clone();
            let done = match writer {
                Writer::Parts(writer) => writer.finish().await.map(drop).map_err(anyhow::Error::from),
                Writer::Local(file) => file.finish().await.map_err(anyhow::Error::from),
            };
            let done = done.with_context(|| format!("cannot complete upload {key}")).map(|()| staged);
            if let Err(Ok(abandoned)) = hand_over.send(done)
                && let Err(e) = blobs.discard(&abandoned).await
            {
                tracing::warn!(error = format!("{e:#}"), "could not remove an abandoned staged upload");
            }
        });
        received.await.context("the upload's completion task ended without an answer")?
    }

    /// Cancels the upload and removes the parts already written.
    pub(crate) async fn abort(mut self) -> Result<()> {
        let key = &self.key;
        match self.writer.take() {
            Some(writer) => writer.abort().await.with_context(|| format!("cannot abort upload {key}")),
            None => Ok(()),
        }
    }
}

impl Writer {
    /// Stops the upload and removes what was written.
    async fn abort(self) -> Result<()> {
        match self {
            Writer::Parts(writer) => Ok(writer.abort().await?),
            Writer::Local(file) => Ok(file.abort().await?),
        }
    }
}

impl Drop for StagedUpload {
    fn drop(&mut self) {
        match self.writer.take() {
            // Removes its file itself.
            Some(Writer::Local(file)) => drop(file),
            Some(Writer::Parts(writer)) => {
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    let key = std::mem::take(&mut self.key);
                    runtime.spawn(async move {
                        if let Err(e) = Writer::Parts(writer).abort().await {
                            tracing::warn!("cannot abort abandoned upload {key}: {e}");
                        }
                    });
                }
            }
            None => {}
        }
    }
}

impl fmt::Debug for StagedUpload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StagedUpload").field("key", &self.key).field("size", &self.size).finish_non_exhaustive()
    }
}

/// True when `error` (from this module) means the file does not exist, so
/// the caller can answer 404 rather than 500.
pub(crate) fn is_not_found(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| matches!(cause.downcast_ref(), Some(object_store::Error::NotFound { .. })))
}

fn open_s3(url: &str, bucket_and_prefix: &str, s3: &S3Settings) -> Result<BlobStore> {
    let (bucket, prefix) = bucket_and_prefix.split_once('/').unwrap_or((bucket_and_prefix, ""));
    let prefix = prefix.trim_matches('/');
    if bucket.is_empty() {
        bail!("no bucket in the blob store URL (expected s3://bucket/prefix): {url}");
    }
    let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket).with_virtual_hosted_style_request(false);
    if let Some(endpoint) = &s3.endpoint {
        builder = builder.with_endpoint(endpoint);
    }
    if let Some(region) = &s3.region {
        builder = builder.with_region(region);
    }
    if let Some(key) = &s3.access_key_id {
        builder = builder.with_access_key_id(key);
    }
    if let Some(secret) = &s3.secret_access_key {
        builder = builder.with_secret_access_key(secret);
    }
    if s3.allow_http || s3.endpoint.as_deref().is_some_and(is_loopback_http) {
        builder = builder.with_allow_http(true);
    }
    let client = builder.build().with_context(|| format!("cannot configure the S3 client for {url}"))?;
    let store: Arc<dyn ObjectStore> =
        if prefix.is_empty() { Arc::new(client) } else { Arc::new(PrefixStore::new(client, prefix)) };
    Ok(BlobStore { store, local_root: None, location: url.to_owned() })
}

fn is_loopback_http(endpoint: &str) -> bool {
    let Some(rest) = endpoint.strip_prefix("http://") else { return false };
    let host = rest.split(['/', '?']).next().unwrap_or_default();
    let host = match host.rsplit_once(':') {
        Some((h, port)) if !h.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    };
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Removes the files in `folder` last modified before `cutoff`. Crashed
/// local uploads leave `<key>#<n>` part files, which `object_store` never
/// lists, so this reads the folder itself.
/// The start of the name of a file this process writes while it works on
/// it (`<pid>-`): [`left_by_dead_process`] tells, after a crash, which ones
/// no live process owns. (A pid is reused only after the process is gone,
/// and then the file is at worst kept until it is old.)
pub(crate) fn owner_tag() -> String {
    format!("{}-", std::process::id())
}

/// Whether `name` (a file name made with [`owner_tag`]) was written by a
/// process that no longer exists. Names without a pid, and this process's
/// own, are not.
pub(crate) fn left_by_dead_process(name: &str) -> bool {
    let Some(pid) = name.split_once('-').and_then(|(pid, _)| pid.parse::<i32>().ok()) else { return false };
    if pid <= 0 || u32::try_from(pid).is_ok_and(|p| p == std::process::id()) {
        return false;
    }
    matches!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None), Err(nix::errno::Errno::ESRCH))
}

/// Removes the files of `folder` last modified before `cutoff`, or whose
/// name `abandoned` says no live process owns.
pub(crate) fn sweep_folder(
    folder: &std::path::Path,
    cutoff: SystemTime,
    abandoned: impl Fn(&str) -> bool,
) -> Result<usize> {
    let entries = match std::fs::read_dir(folder) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", folder.display())),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot list {}", folder.display()))?;
        let path = entry.path();
        let meta = entry.metadata().with_context(|| format!("cannot stat {}", path.display()))?;
        if !meta.is_file() {
            continue;
        }
        let modified = meta.modified().with_context(|| format!("cannot stat {}", path.display()))?;
        if modified < cutoff || abandoned(&entry.file_name().to_string_lossy()) {
            match std::fs::remove_file(&path) {
                Ok(()) => removed += 1,
                // Its upload finished or aborted meanwhile.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| format!("cannot remove {}", path.display())),
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store of its own for one test: a fresh folder, or a fresh bucket on
    /// the test S3 endpoint (under a prefix, as teams configure it).
    struct TestStore {
        blobs: BlobStore,
        /// The bucket's URL on the test endpoint, for raw S3 checks.
        bucket_url: Option<String>,
    }

    fn s3_endpoint() -> String {
        std::env::var("VRAMSCOPE_TEST_S3_ENDPOINT").unwrap_or_else(|_| {
            panic!(
                "VRAMSCOPE_TEST_S3_ENDPOINT is not set: the storage tests need an S3 endpoint (moto_server). \
                 Run ./scripts/test, or eval \"$(scripts/services start)\" before cargo test"
            )
        })
    }

    fn test_s3_settings(endpoint: &str) -> S3Settings {
        S3Settings {
            endpoint: Some(endpoint.to_owned()),
            region: Some("us-east-1".to_owned()),
            access_key_id: Some("test".to_owned()),
            secret_access_key: Some("test".to_owned()),
            allow_http: false,
        }
    }

    impl TestStore {
        fn local() -> TestStore {
            let folder = std::env::temp_dir().join(format!("vramscope-blob-{}", uuid::Uuid::now_v7().simple()));
            let blobs = BlobStore::from_url(&folder.to_string_lossy(), &S3Settings::default()).expect("open folder");
            TestStore { blobs, bucket_url: None }
        }

        async fn s3() -> TestStore {
            let endpoint = s3_endpoint();
            let bucket = format!("vt-{}", uuid::Uuid::now_v7().simple());
            let bucket_url = format!("{endpoint}/{bucket}");
            // moto accepts an unsigned CreateBucket; object_store cannot create buckets.
            let created = reqwest::Client::new().put(&bucket_url).send().await;
            let created = created.unwrap_or_else(|e| panic!("cannot reach the test S3 endpoint {endpoint}: {e}"));
            assert!(created.status().is_success(), "create bucket {bucket}: {}", created.status());
            let blobs = BlobStore::from_url(&format!("s3://{bucket}/team/a/"), &test_s3_settings(&endpoint))
                .expect("open bucket");
            TestStore { blobs, bucket_url: Some(bucket_url) }
        }

        /// Every listed key, sorted.
        async fn keys(&self) -> Vec<String> {
            let listing = self.blobs.store.list(None).map_ok(|meta| meta.location.to_string());
            let mut keys: Vec<String> = listing.try_collect().await.expect("list");
            keys.sort();
            keys
        }

        /// Files in the local staging folder, part files included.
        fn local_staging_files(&self) -> Vec<String> {
            let Some(root) = &self.blobs.local_root else { return Vec::new() };
            match std::fs::read_dir(root.join(STAGING_DIR)) {
                Ok(entries) => entries.map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect(),
                Err(_) => Vec::new(),
            }
        }

        /// Multipart uploads the S3 endpoint still holds open.
        async fn open_multipart_uploads(&self) -> usize {
            let Some(bucket_url) = &self.bucket_url else { return 0 };
            let listing = reqwest::get(format!("{bucket_url}?uploads")).await.expect("list multipart uploads");
            assert!(listing.status().is_success(), "list multipart uploads: {}", listing.status());
            listing.text().await.expect("listing body").matches("<Upload>").count()
        }

        /// Nothing in staging: no object, no local part file, no open upload.
        async fn staging_is_empty(&self) -> bool {
            let staged = self.keys().await.iter().any(|k| k.starts_with("staging/"));
            !staged && self.local_staging_files().is_empty() && self.open_multipart_uploads().await == 0
        }

        fn finish(self) {
            if let Some(root) = &self.blobs.local_root {
                std::fs::remove_dir_all(root).expect("remove test folder");
            }
        }
    }

    /// Runs each check on a fresh folder and on a fresh S3 bucket:
    /// `<check>::local` and `<check>::s3`.
    macro_rules! on_both_stores {
        ($($check:ident),* $(,)?) => {$(
            mod $check {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn local() {
                    let t = super::TestStore::local();
                    super::$check(&t).await;
                    t.finish();
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn s3() {
                    let t = super::TestStore::s3().await;
                    super::$check(&t).await;
                    t.finish();
                }
            }
        )*};
    }

    on_both_stores!(
        streaming_upload_hashes_and_commits,
        identical_uploads_share_one_file,
        range_reads_return_exact_bytes,
        abort_and_drop_leave_nothing,
        clean_staging_removes_leftovers,
        empty_upload,
        missing_keys,
        indexes_go_with_their_file_and_orphans_are_found,
        regression_a_completion_dropped_midway_leaves_nothing_in_staging,
        a_tap_sees_every_byte_then_the_end_and_never_an_end_that_did_not_come,
    );

    /// Deterministic bytes that do not compress or repeat.
    fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
        let mut state = seed | 1;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 24) as u8
            })
            .collect()
    }

    /// Streams `content` in `chunk`-byte writes and finishes the upload.
    async fn upload(blobs: &BlobStore, content: &[u8], chunk: usize) -> Staged {
        let mut upload = blobs.begin_upload().await.expect("begin");
        for piece in content.chunks(chunk) {
            upload.write(Bytes::copy_from_slice(piece)).await.expect("write");
        }
        assert_eq!(upload.size(), content.len() as u64);
        upload.finish().await.expect("finish")
    }

    async fn read_all(stream: BoxStream<'static, std::io::Result<Bytes>>) -> Vec<u8> {
        let pieces: Vec<Bytes> = stream.try_collect().await.expect("read stream");
        pieces.concat()
    }

    const MB: usize = 1_000_000;

    async fn streaming_upload_hashes_and_commits(t: &TestStore) {
        let content = pseudo_random(20 * MB, 1);
        let staged = upload(&t.blobs, &content, MB).await;
        assert_eq!(staged.sha256, hex::encode(Sha256::digest(&content)));
        assert_eq!(staged.size, content.len() as u64);
        assert!(staged.staging_key.starts_with("staging/"));
        assert_eq!(t.keys().await, [staged.staging_key.as_str()], "only the staging object exists");
        assert_eq!(t.blobs.size(&staged.staging_key).await.expect("size"), Some(staged.size));

        let key = t.blobs.commit(&staged).await.expect("commit");
        assert_eq!(key, format!("snapshots/{}", staged.sha256));
        assert_eq!(t.keys().await, [key.as_str()], "the staging object moved");
        assert!(t.staging_is_empty().await);
        assert_eq!(t.blobs.size(&key).await.expect("size"), Some(content.len() as u64));
        assert!(t.blobs.get_bytes(&key).await.expect("read back") == content, "content differs");

        // Writes of odd sizes, some larger than a part, hash the same.
        let odd = upload(&t.blobs, &content, 9_437_185).await;
        assert_eq!(odd.sha256, staged.sha256);
        t.blobs.discard(&odd).await.expect("discard");
        assert_eq!(t.keys().await, [key]);
    }

    /// The parse that runs while an upload streams reads the upload's bytes
    /// through its tap: all of them, in order, then `End`; an upload that
    /// stops closes the tap without `End` (never read as a short file); a
    /// reader that goes away does not stop the upload.
    async fn a_tap_sees_every_byte_then_the_end_and_never_an_end_that_did_not_come(t: &TestStore) {
        async fn drain(mut pieces: tokio::sync::mpsc::Receiver<Tapped>) -> (Vec<u8>, bool) {
            let mut seen = Vec::new();
            while let Some(piece) = pieces.recv().await {
                match piece {
                    Tapped::Bytes(b) => seen.extend_from_slice(&b),
                    Tapped::End => return (seen, true),
                }
            }
            (seen, false)
        }
        let content = pseudo_random(10 * MB + 3, 5);
        let (tap, pieces) = tokio::sync::mpsc::channel(4);
        let reader = tokio::spawn(drain(pieces));
        let mut upload = t.blobs.begin_upload().await.expect("begin");
        upload.tap(tap);
        for chunk in content.chunks(MB / 3) {
            upload.write(Bytes::copy_from_slice(chunk)).await.expect("write");
        }
        let staged = upload.finish().await.expect("finish");
        assert_eq!(reader.await.expect("reader"), (content.clone(), true), "every byte, then the end");
        t.blobs.discard(&staged).await.expect("discard");

        // Aborted halfway: the tap closes without an end.
        let (tap, pieces) = tokio::sync::mpsc::channel(4);
        let reader = tokio::spawn(drain(pieces));
        let mut upload = t.blobs.begin_upload().await.expect("begin");
        upload.tap(tap);
        upload.write(Bytes::copy_from_slice(&content[..MB])).await.expect("write");
        upload.abort().await.expect("abort");
        assert_eq!(reader.await.expect("reader"), (content[..MB].to_vec(), false));

        // The reader gone: the upload goes on, whole.
        let (tap, pieces) = tokio::sync::mpsc::channel(1);
        drop(pieces);
        let mut upload = t.blobs.begin_upload().await.expect("begin");
        upload.tap(tap);
        for chunk in content.chunks(MB) {
            upload.write(Bytes::copy_from_slice(chunk)).await.expect("write");
        }
        let staged = upload.finish().await.expect("finish");
        assert_eq!(staged.sha256, hex::encode(Sha256::digest(&content)));
        t.blobs.discard(&staged).await.expect("discard");
        assert!(t.staging_is_empty().await);
    }

    /// Seen as a flaky server test under load: a client that left while
    /// its upload was being completed left the finished file in staging,
    /// because the local store's rename runs on a blocking thread that
    /// outlives the dropped future. Each poll count drops the completion at
    /// another point; staging must end up empty every time.
    async fn regression_a_completion_dropped_midway_leaves_nothing_in_staging(t: &TestStore) {
        let content = pseudo_random(3 * MB, 7);
        for polls in 0..12 {
            let mut upload = t.blobs.begin_upload().await.expect("begin");
            upload.write(Bytes::copy_from_slice(&content)).await.expect("write");
            let mut finishing = Box::pin(upload.finish());
            let mut finished = None;
            for _ in 0..polls {
                if let std::task::Poll::Ready(done) = futures::poll!(finishing.as_mut()) {
                    finished = Some(done.expect("finish"));
                    break;
                }
                tokio::task::yield_now().await;
            }
            drop(finishing);
            if let Some(staged) = finished {
                // Completed before the drop: the caller owns it and removes it.
                t.blobs.discard(&staged).await.expect("discard");
            }
            let mut empty = false;
            for _ in 0..100 {
                empty = t.staging_is_empty().await;
                if empty {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            assert!(empty, "dropped after {polls} polls: staging holds {:?}", t.keys().await);
        }
    }

    async fn identical_uploads_share_one_file(t: &TestStore) {
        let content = pseudo_random(3 * MB, 2);
        let first = upload(&t.blobs, &content, 64 * 1024).await;
        let second = upload(&t.blobs, &content, MB).await;
        assert_ne!(first.staging_key, second.staging_key);
        assert_eq!(first.sha256, second.sha256);
        let key = t.blobs.commit(&first).await.expect("commit first");
        assert_eq!(t.blobs.commit(&second).await.expect("commit second"), key);
        assert_eq!(t.keys().await, [key.as_str()], "one file, no staging leftovers");

        // Committing twice at once (two instances) also ends with one file.
        let (a, b) = (upload(&t.blobs, b"same", 4).await, upload(&t.blobs, b"same", 2).await);
        let (ka, kb) = tokio::join!(t.blobs.commit(&a), t.blobs.commit(&b));
        assert_eq!(ka.expect("commit a"), kb.expect("commit b"));
        assert_eq!(t.keys().await.len(), 2);
        assert_eq!(t.blobs.get_bytes(&format!("snapshots/{}", a.sha256)).await.expect("read"), &b"same"[..]);
        assert!(t.staging_is_empty().await);

        let bad = Staged { staging_key: a.staging_key.clone(), sha256: "../escape".into(), size: 4 };
        assert!(t.blobs.commit(&bad).await.is_err(), "only a hex SHA-256 names a file");
        assert!(t.blobs.get_bytes(&key).await.expect("read") == content);
    }

    async fn range_reads_return_exact_bytes(t: &TestStore) {
        let content = pseudo_random(PART_SIZE + 3 * MB, 3);
        let key = t.blobs.commit(&upload(&t.blobs, &content, MB).await).await.expect("commit");
        let total = content.len() as u64;
        let boundary = PART_SIZE as u64;
        for range in [0..1, 5..17, boundary - 100..boundary + 100, total - 10..total, 0..total] {
            let (size, stream) = t.blobs.get_range(&key, Some(range.clone())).await.expect("range read");
            assert_eq!(size, total);
            let got = read_all(stream).await;
            assert!(got == content[range.start as usize..range.end as usize], "range {range:?} differs");
        }
        let (size, stream) = t.blobs.get_range(&key, None).await.expect("whole read");
        assert_eq!(size, total);
        assert!(read_all(stream).await == content);

        // Past the end: cut at the end; starting past the end: an error.
        let (_, stream) = t.blobs.get_range(&key, Some(total - 4..total + 100)).await.expect("range read");
        assert_eq!(read_all(stream).await, &content[content.len() - 4..]);
        assert!(t.blobs.get_range(&key, Some(total..total + 1)).await.is_err());
    }

    async fn abort_and_drop_leave_nothing(t: &TestStore) {
        // Past one part, so S3 holds an open multipart upload with a part.
        let content = pseudo_random(PART_SIZE + MB, 4);
        let mut aborted = t.blobs.begin_upload().await.expect("begin");
        aborted.write(Bytes::from(content.clone())).await.expect("write");
        assert!(!t.staging_is_empty().await, "an upload in progress is visible to the check");
        aborted.abort().await.expect("abort");
        assert!(t.staging_is_empty().await, "abort leaves nothing");

        // A client that disconnects drops the upload; it aborts in the background.
        let mut dropped = t.blobs.begin_upload().await.expect("begin");
        dropped.write(Bytes::from(content)).await.expect("write");
        drop(dropped);
        let mut empty = false;
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            empty = t.staging_is_empty().await;
            if empty {
                break;
            }
        }
        assert!(empty, "a dropped upload leaves nothing");
        assert!(t.keys().await.is_empty());
    }

    async fn clean_staging_removes_leftovers(t: &TestStore) {
        let kept = t.blobs.commit(&upload(&t.blobs, b"committed", 3).await).await.expect("commit");
        // A crash between finish and commit leaves a staging object.
        let finished = upload(&t.blobs, b"never committed", 5).await;
        // A crash mid-upload: the upload is neither finished nor aborted.
        let mut crashed = t.blobs.begin_upload().await.expect("begin");
        crashed.write(Bytes::from_static(b"half a file")).await.expect("write");
        std::mem::forget(crashed);
        tokio::time::sleep(Duration::from_millis(50)).await;

        assert_eq!(t.blobs.clean_staging(Duration::from_secs(3600)).await.expect("sweep"), 0, "all are recent");
        assert!(t.keys().await.contains(&finished.staging_key));

        let removed = t.blobs.clean_staging(Duration::ZERO).await.expect("sweep");
        assert_eq!(t.keys().await, [kept.as_str()], "staging is gone, the snapshot stays");
        if t.blobs.local_root.is_some() {
            // The finished object and the crashed upload's part file.
            assert_eq!(removed, 2);
            assert!(t.local_staging_files().is_empty());
        } else {
            // On S3 the crashed upload is an open multipart upload, not an
            // object: the bucket's lifecycle rule reaps it.
            assert_eq!(removed, 1);
        }
        assert_eq!(t.blobs.get_bytes(&kept).await.expect("read"), &b"committed"[..]);
    }

    async fn empty_upload(t: &TestStore) {
        let staged = upload(&t.blobs, b"", 1).await;
        assert_eq!(staged.size, 0);
        assert_eq!(staged.sha256, hex::encode(Sha256::digest(b"")));
        let key = t.blobs.commit(&staged).await.expect("commit");
        assert_eq!(t.blobs.size(&key).await.expect("size"), Some(0));
        assert!(t.blobs.get_bytes(&key).await.expect("read").is_empty());
    }

    async fn indexes_go_with_their_file_and_orphans_are_found(t: &TestStore) {
        let stored = t.blobs.commit(&upload(&t.blobs, b"a snapshot", 4).await).await.expect("commit");
        let index = BlobStore::index_key_of(&stored);
        let orphan = BlobStore::index_key_of(&BlobStore::key_of(&"c".repeat(64)));
        let local = std::env::temp_dir().join(format!("vramscope-index-{}", uuid::Uuid::now_v7()));
        let content = pseudo_random(3 * PART_SIZE / 2, 7);
        std::fs::write(&local, &content).expect("write");
        for key in [&index, &orphan] {
            t.blobs.put_file(key, &local).await.expect("put the index");
        }
        // Fetched back whole, into a file.
        let back = local.with_extension("back");
        assert!(t.blobs.get_to_file(&index, &back).await.expect("get"));
        assert_eq!(std::fs::read(&back).expect("read"), content);
        assert!(!t.blobs.get_to_file(&format!("{index}-missing"), &back).await.expect("missing is not an error"));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(t.blobs.orphan_indexes(Duration::ZERO).await.expect("list"), std::slice::from_ref(&orphan));
        assert_eq!(t.blobs.orphan_indexes(Duration::from_secs(3600)).await.expect("list"), Vec::<String>::new());
        // Deleting the file deletes its index.
        t.blobs.delete(&stored).await.expect("delete");
        assert_eq!(t.blobs.size(&index).await.expect("size"), None);
        t.blobs.delete(&orphan).await.expect("delete");
        drop(std::fs::remove_file(&local));
        drop(std::fs::remove_file(&back));
    }

    async fn missing_keys(t: &TestStore) {
        let key = format!("snapshots/{}", "0".repeat(64));
        assert_eq!(t.blobs.size(&key).await.expect("size"), None);
        let error = t.blobs.get_bytes(&key).await.expect_err("missing file");
        assert!(is_not_found(&error), "{error:#}");
        let error = t.blobs.get_range(&key, Some(0..1)).await.err().expect("missing file");
        assert!(is_not_found(&error), "{error:#}");
        t.blobs.delete(&key).await.expect("deleting a missing file succeeds");

        let stored = t.blobs.commit(&upload(&t.blobs, b"x", 1).await).await.expect("commit");
        t.blobs.delete(&stored).await.expect("delete");
        assert_eq!(t.blobs.size(&stored).await.expect("size"), None);
    }

    #[test]
    fn urls_and_settings() {
        assert!(is_loopback_http("http://127.0.0.1:50009"));
        assert!(is_loopback_http("http://localhost/"));
        assert!(is_loopback_http("http://[::1]:9000"));
        assert!(is_loopback_http("http://127.0.0.2"));
        assert!(!is_loopback_http("https://127.0.0.1"));
        assert!(!is_loopback_http("http://127.0.0.1.example.com"));
        assert!(!is_loopback_http("http://minio.internal:9000"));

        let none = S3Settings::default();
        assert!(BlobStore::from_url("gs://bucket", &none).is_err());
        assert!(BlobStore::from_url("s3:///prefix", &none).is_err());
        assert!(BlobStore::from_url("s3://bucket/prefix", &test_s3_settings("http://127.0.0.1:1")).is_ok());

        let folder = std::env::temp_dir().join(format!("vramscope-blob-{}", uuid::Uuid::now_v7().simple()));
        let url = format!("file://{}", folder.display());
        let local = BlobStore::from_url(&url, &none).expect("file URL");
        assert_eq!(local.local_root.as_deref(), Some(folder.as_path()));
        assert!(folder.is_dir(), "the folder is created");
        std::fs::remove_dir_all(&folder).expect("cleanup");

        let settings = S3Settings { secret_access_key: Some("hunter2".into()), ..S3Settings::default() };
        let debug = format!("{settings:?}");
        assert!(!debug.contains("hunter2") && debug.contains("secret_access_key: Some(\"***\")"), "{debug}");
    }
}
