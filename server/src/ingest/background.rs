//! Parses that run after their upload's answer: a large upload's, and those
//! a stopped server left `parsing`, resumed at start-up (at most
//! [`PARSE_ATTEMPTS`] times, so a file that kills the server is not parsed
//! at every start). A file that is not a snapshot, or whose parse ran out of
//! time, is marked failed with the reason and its bytes removed.

use super::Ingest;
use super::parse::stats_json;

/// Background parses a snapshot gets before it is given up (each start-up
/// that finds it still `parsing` counts one).
const PARSE_ATTEMPTS: i64 = 2;

impl Ingest {
    /// Parse snapshot `id` (file `blob_key`) and record the outcome. It
    /// goes through the cache, so a view asked for meanwhile joins this
    /// parse instead of starting its own (an upload's commit starts the
    /// load first, from the parse that ran while the upload streamed in).
    ///
    /// `trigger_from_file`: the upload named no trigger, so one whose
    /// trace records an OOM becomes `oom` once parsed.
    pub(crate) async fn parse_in_background(self, id: String, blob_key: String, trigger_from_file: bool) {
        if let Err(e) = self.db.begin_parse(&id).await {
            tracing::error!(snapshot = id, error = format!("{e:#}"), "could not count the parse; not starting it");
            return;
        }
        let result = match self.load(&blob_key).await {
            Ok(analyzed) => match stats_json(analyzed.stats()) {
                Ok(json) => {
                    let oom = trigger_from_file && super::commit::stats_record_oom(&json);
                    self.db.set_ready(&id, &json, oom).await
                }
                Err(_) => self.db.set_failed(&id, "could not serialize the statistics").await,
            },
            Err(failure) if failure.is_the_files_fault() => {
                self.give_up(&id, &blob_key, &failure.message()).await;
                Ok(())
            }
            Err(failure) => {
                tracing::error!(snapshot = id, error = failure.message(), "background parse could not read the file");
                Ok(())
            }
        };
        if let Err(e) = result {
            tracing::error!(snapshot = id, error = format!("{e:#}"), "could not record the parse result");
        }
        self.settled.notify_waiters();
    }

    /// Marks a snapshot failed, saying why, and removes its bytes unless a
    /// ready snapshot shares them.
    pub(crate) async fn give_up(&self, id: &str, blob_key: &str, why: &str) {
        self.cache.remove(blob_key);
        self.indexes.forget(blob_key).await;
        if let Err(e) = self.db.set_failed(id, why).await {
            tracing::error!(snapshot = id, error = format!("{e:#}"), "could not mark a snapshot failed");
        }
        self.settled.notify_waiters();
        if let Err(e) = self.remove_bad_bytes(blob_key).await {
            tracing::warn!(error = format!("{e:#}"), "could not remove the bytes of a bad upload");
        }
    }

    /// Removes the file of an upload that failed to parse unless a ready row
    /// shares it, under the file's lock: an upload of the same bytes on
    /// another instance must not see the file vanish between its commit and
    /// its row.
    async fn remove_bad_bytes(&self, blob_key: &str) -> anyhow::Result<()> {
        let lock = self.db.lock_blob(blob_key).await?;
        if self.db.count_ready_by_blob(blob_key).await? == 0 {
            self.blobs.delete(blob_key).await?;
        }
        lock.release().await
    }

    /// At start-up: parse again each snapshot a stopped server left
    /// `parsing`, or give it up once it has had its [`PARSE_ATTEMPTS`].
    pub(crate) async fn resume_parsing(&self) {
        let rows = match self.db.unfinished_parses().await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = format!("{e:#}"), "could not list unfinished parses");
                return;
            }
        };
        for (id, blob_key, attempts) in rows {
            if attempts >= PARSE_ATTEMPTS {
                let why = format!(
                    "the server stopped {attempts} times while parsing this file, so it is not parsed again \
                     (upload it again to retry)"
                );
                tracing::warn!(snapshot = id, attempts, "not resuming a parse that was interrupted again and again");
                self.give_up(&id, &blob_key, &why).await;
            } else {
                // After a restart whether the trigger was named is not known: kept.
                tokio::spawn(self.clone().parse_in_background(id, blob_key, false));
            }
        }
    }
}
