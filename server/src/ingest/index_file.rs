//! Persisted indexes on the server: written once after a file's first
//! parse, next to the file in the blob store, and mapped on every later
//! open (after a restart, on another instance, after the cache let the
//! snapshot go) instead of parsing the pickle again.
//!
//! Where they live:
//! - a local store keeps them in its own folder, `<blobs>/indexes/<sha256>`,
//!   mapped where they lie;
//! - on S3 they are `indexes/<sha256>` in the bucket, and each instance maps
//!   a copy in `<data_dir>/index-cache/`, fetched on first use and kept
//!   under `index_cache_bytes` (oldest use first out).
//!
//! A file that cannot be used (another format version, a bad checksum, a
//! truncated download, or a good index of another snapshot: its header
//! names the SHA-256 of the file it was built from) is deleted and rebuilt
//! from the pickle, never read.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use bytes::Bytes;
use vramscope_shared::index_file::IndexFileError;
use vramscope_shared::indexed::IndexedSnapshot;
use vramscope_shared::indexed::persist::open_index;
use vramscope_shared::indexed::persist::write_index;

use crate::metrics::Metrics;
use crate::store::BlobStore;

/// Buffer of an index file's writes: small tables gather into writes of
/// this size; a column larger than it is written straight from its slice.
const WRITE_BUFFER: usize = 4 << 20;

/// Where this instance keeps and finds index files.
pub(crate) struct IndexFiles {
    blobs: BlobStore,
    /// Folder of the files this instance maps.
    folder: PathBuf,
    /// The blob store is remote: the folder is a cache of `indexes/` in it.
    remote: bool,
    /// Most bytes the cache folder keeps (remote stores only).
    cache_bytes: u64,
}

impl IndexFiles {
    /// Index files of `blobs`, mapped from its folder (local) or from
    /// `cache_dir` (remote).
    pub(crate) fn new(blobs: BlobStore, cache_dir: &Path, cache_bytes: u64) -> anyhow::Result<IndexFiles> {
        let (folder, remote) = match blobs.local_root() {
            Some(root) => (root.join("indexes"), false),
            None => (cache_dir.to_path_buf(), true),
        };
        std::fs::create_dir_all(&folder).with_context(|| format!("cannot create {}", folder.display()))?;
        // What a killed writer left (`<sha>.partial-<pid>-<uuid>`), now;
        // older ones of unknown owner after an hour.
        let cutoff = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        let abandoned = |name: &str| match name.split_once(".partial-") {
            Some((_, owner)) => {
                crate::store::left_by_dead_process(owner)
                    || std::fs::metadata(folder.join(name)).and_then(|m| m.modified()).is_ok_and(|t| t < cutoff)
            }
            None => false,
        };
        match crate::store::sweep_folder(&folder, std::time::UNIX_EPOCH, abandoned) {
            Ok(0) => {}
            Ok(removed) => tracing::info!(removed, "removed partial index files left by a process that is gone"),
            Err(e) => tracing::warn!(error = format!("{e:#}"), "could not sweep partial index files"),
        }
        Ok(IndexFiles { blobs, folder, remote, cache_bytes })
    }

    fn path_of(&self, blob_key: &str) -> PathBuf {
        self.folder.join(sha256_of(blob_key))
    }

    /// The snapshot of `blob_key` opened from its persisted index, if it
    /// has a usable one. A broken one is deleted (and logged), so that the
    /// caller's parse writes a good one.
    pub(crate) async fn open(&self, blob_key: &str, metrics: &Metrics) -> Option<IndexedSnapshot> {
        let path = self.path_of(blob_key);
        let remote_key = BlobStore::index_key_of(blob_key);
        if self.remote && !path.exists() {
            match self.blobs.get_to_file(&remote_key, &path).await {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => {
                    tracing::warn!(error = format!("{e:#}"), "could not fetch a persisted index; parsing instead");
                    return None;
                }
            }
        }
        let started = Instant::now();
        let opened = tokio::task::spawn_blocking({
            let (path, sha256) = (path.clone(), sha256_of(blob_key).to_owned());
            move || -> anyhow::Result<Option<IndexedSnapshot>> {
                let Some(bytes) = map(&path)? else { return Ok(None) };
                Ok(Some(open_index(bytes, &sha256)?))
            }
        })
        .await;
        match opened {
            Ok(Ok(Some(analyzed))) => {
                metrics.index_opens.inc();
                metrics.index_open_seconds.observe(started.elapsed().as_secs_f64());
                touch(&path);
                Some(analyzed)
            }
            Ok(Ok(None)) => None,
            Ok(Err(e)) => {
                metrics.index_rebuilds.inc();
                if matches!(e.downcast_ref::<IndexFileError>(), Some(IndexFileError::OtherSnapshot { .. })) {
                    metrics.index_other_snapshot.inc();
                    tracing::warn!(file = %path.display(), error = format!("{e:#}"), "a persisted index of another snapshot lay in this one's place; rebuilding it from the pickle");
                } else {
                    tracing::warn!(file = %path.display(), error = format!("{e:#}"), "unusable persisted index; rebuilding it from the pickle");
                }
                drop(tokio::fs::remove_file(&path).await);
                if self.remote {
                    drop(self.blobs.delete(&remote_key).await);
                }
                None
            }
            Err(e) => {
                tracing::error!(error = %e, "index open task failed");
                None
            }
        }
    }

    /// Write the index of a freshly parsed snapshot, drop the parsed
    /// snapshot, and open the file mapped: its columns are then pages of
    /// the file, and the heap never holds both. On S3 the file is also
    /// uploaded, in the background. When the file cannot be written, the
    /// parsed snapshot comes back with the error.
    pub(crate) async fn save(&self, blob_key: &str, analyzed: IndexedSnapshot) -> Result<IndexedSnapshot, NotSaved> {
        let path = self.path_of(blob_key);
        let written = tokio::task::spawn_blocking({
            let (path, sha256) = (path.clone(), sha256_of(blob_key).to_owned());
            move || -> Result<IndexedSnapshot, NotSaved> {
                if let Err(error) = write_file(&path, &sha256, &analyzed) {
                    return Err(NotSaved { error, parsed: Some(Box::new(analyzed)) });
                }
                drop(analyzed);
                let reopened = (|| {
                    let bytes = map(&path)?.with_context(|| format!("{} vanished", path.display()))?;
                    anyhow::Ok(open_index(bytes, &sha256)?)
                })();
                reopened.map_err(|error| NotSaved { error, parsed: None })
            }
        })
        .await
        .map_err(|e| NotSaved { error: anyhow::Error::from(e).context("index write task"), parsed: None })??;
        self.uploaded(blob_key, path);
        Ok(written)
    }

    /// Write the index of a snapshot served from memory meanwhile, durably
    /// (on S3 then uploaded in the background); nothing is opened. Until it
    /// returns, a crash costs only a parse at the next open: no index file
    /// is there, or a `.partial-*` one no open reads.
    pub(crate) async fn write(&self, blob_key: &str, analyzed: Arc<IndexedSnapshot>) -> anyhow::Result<()> {
        let path = self.path_of(blob_key);
        tokio::task::spawn_blocking({
            let (path, sha256) = (path.clone(), sha256_of(blob_key).to_owned());
            move || write_file(&path, &sha256, &analyzed)
        })
        .await
        .context("index write task")??;
        self.uploaded(blob_key, path);
        Ok(())
    }

    /// On S3, upload the index just written at `path`, in the background,
    /// and trim the cache folder.
    fn uploaded(&self, blob_key: &str, path: PathBuf) {
        if self.remote {
            let (blobs, key) = (self.blobs.clone(), BlobStore::index_key_of(blob_key));
            let (folder, limit) = (self.folder.clone(), self.cache_bytes);
            tokio::spawn(async move {
                if let Err(e) = blobs.put_file(&key, &path).await {
                    tracing::warn!(error = format!("{e:#}"), "could not upload a persisted index");
                }
                drop(tokio::task::spawn_blocking(move || trim_folder(&folder, limit)).await);
            });
        }
    }

    /// Forget the local copy of an index (its snapshot file was deleted;
    /// the store's copy goes with the file).
    pub(crate) async fn forget(&self, blob_key: &str) {
        if self.remote {
            drop(tokio::fs::remove_file(self.path_of(blob_key)).await);
        }
    }
}

/// Why [`IndexFiles::save`] gave no mapped snapshot.
pub(crate) struct NotSaved {
    pub(crate) error: anyhow::Error,
    /// The parsed snapshot, when the failure came before it was dropped.
    pub(crate) parsed: Option<Box<IndexedSnapshot>>,
}

/// Write the index of `analyzed` (parsed from the file whose SHA-256 is
/// `sha256`) to `path`: under a temporary name, synced, then renamed, so
/// that a reader maps a whole file or none.
fn write_file(path: &Path, sha256: &str, analyzed: &IndexedSnapshot) -> anyhow::Result<()> {
    let partial = path.with_extension(format!("partial-{}{}", crate::store::owner_tag(), uuid::Uuid::now_v7()));
    let result = (|| {
        let file = std::fs::File::create(&partial)?;
        let file = write_index(analyzed, sha256, std::io::BufWriter::with_capacity(WRITE_BUFFER, file))?
            .into_inner()
            .map_err(|e| e.into_error())?;
        file.sync_data()?;
        std::fs::rename(&partial, path)?;
        anyhow::Ok(())
    })();
    if result.is_err() {
        drop(std::fs::remove_file(&partial));
    }
    result.with_context(|| format!("writing {}", path.display()))
}

/// The SHA-256 (hex) a content-addressed key names: `snapshots/<sha256>`.
fn sha256_of(blob_key: &str) -> &str {
    blob_key.rsplit('/').next().unwrap_or(blob_key)
}

/// Map an index file read-only (`None` when there is none).
#[allow(unsafe_code)]
fn map(path: &Path) -> anyhow::Result<Option<Bytes>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot open {}", path.display())),
    };
    // SAFETY: a mapped file must not change while mapped. Index files are
    // written under another name and renamed into place whole, and never
    // written again: a rebuild or a fresh download replaces the name, and
    // the old inode lives on unchanged for its mappings. Only someone
    // truncating the file in place, by hand, could break this (SIGBUS).
    let map = unsafe { memmap2::Mmap::map(&file) }.with_context(|| format!("cannot map {}", path.display()))?;
    Ok(Some(Bytes::from_owner(map)))
}

/// Mark an index as just used, for the cache folder's trim.
fn touch(path: &Path) {
    if let Ok(file) = std::fs::File::options().append(true).open(path) {
        drop(file.set_modified(std::time::SystemTime::now()));
    }
}

/// Delete the least recently used files of a cache folder until the rest
/// fit in `limit` bytes (the newest is always kept).
fn trim_folder(folder: &Path, limit: u64) {
    let Ok(entries) = std::fs::read_dir(folder) else { return };
    let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            // Finished files only: `.partial-*` ones are being written.
            (meta.is_file() && e.path().extension().is_none())
                .then(|| (meta.modified().unwrap_or(std::time::UNIX_EPOCH), meta.len(), e.path()))
        })
        .collect();
    files.sort_by_key(|(t, _, _)| std::cmp::Reverse(*t));
    let mut kept = 0u64;
    for (i, (_, len, path)) in files.iter().enumerate() {
        kept += len;
        if i > 0 && kept > limit {
            drop(std::fs::remove_file(path));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trimming_keeps_the_newest_files_that_fit_and_never_a_partial_one() {
        let dir = std::env::temp_dir().join(format!("vramscope-trim-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).expect("dir");
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for (i, name) in ["a", "b", "c"].iter().enumerate() {
            let path = dir.join(name);
            std::fs::write(&path, vec![0u8; 100]).expect("write");
            let file = std::fs::File::options().append(true).open(&path).expect("open");
            file.set_modified(old + std::time::Duration::from_secs(60 * i as u64)).expect("mtime");
        }
        std::fs::write(dir.join("d.partial-1"), vec![0u8; 1000]).expect("write");
        trim_folder(&dir, 250);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .expect("read")
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["b", "c", "d.partial-1"], "the oldest went; a file being written stays");
        // A just-used file counts as new.
        touch(&dir.join("b"));
        trim_folder(&dir, 150);
        assert!(dir.join("b").exists() && !dir.join("c").exists());
        drop(std::fs::remove_dir_all(&dir));
    }
}
