//! Snapshot metadata and API tokens in SQL, through sqlx's `Any` driver: one
//! code path and one set of migrations (`server/migrations`) for SQLite (the
//! embedded default, a file in the data folder) and PostgreSQL (team mode,
//! several instances on one database).
//!
//! The `Any` driver decodes only basic types, so rows carry `i64` and
//! `String` and this module converts: tags are a JSON array in
//! `snapshots.tags` (plus one `snapshot_tags` row per tag, which the exact
//! tag filter joins on), the trigger and status enums are their lowercase
//! names. Placeholders are `$N` everywhere: PostgreSQL requires them and
//! sqlx's SQLite driver binds `$N` by number too.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyConnection, AnyPool, Connection, Row};

/// The migrations, embedded at build time; the same files serve both
/// databases.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Page size when a list request names none.
pub(crate) const DEFAULT_LIST_LIMIT: u32 = 50;
/// Largest page a list request gets, whatever it asks for.
pub(crate) const MAX_LIST_LIMIT: u32 = 500;

/// How long a SQLite connection waits for another writer's lock before it
/// gives up with "database is locked".
const SQLITE_BUSY_TIMEOUT_MS: u32 = 10_000;

/// Every column of `snapshots`, in the order [`snapshot_from_row`] reads.
pub(super) const SNAPSHOT_COLUMNS: &str = "id, sha256, blob_key, name, job, host, rank, tags, trigger_kind, \
     size_bytes, uploaded_at_ms, status, error, stats_json, pinned";

const TOKEN_COLUMNS: &str = "id, name, role, secret_hash, created_at_ms";

/// Which database a [`Db`] talks to; the SQL is the same, the connection
/// setup is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    /// A SQLite file (or `sqlite::memory:`).
    Sqlite,
    /// A PostgreSQL server.
    Postgres,
}

impl Backend {
    fn of_url(url: &str) -> Result<Backend> {
        if url.starts_with("sqlite:") {
            Ok(Backend::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Backend::Postgres)
        } else {
            bail!("unsupported database URL (expected sqlite: or postgres://): {url}")
        }
    }
}

/// What made a client upload a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Trigger {
    /// A person or script asked for it.
    Manual,
    /// The agent saw memory cross a configured threshold.
    Threshold,
    /// The agent caught an out-of-memory error.
    Oom,
}

impl Trigger {
    /// The name stored in `snapshots.trigger_kind` and used in the API.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Trigger::Manual => "manual",
            Trigger::Threshold => "threshold",
            Trigger::Oom => "oom",
        }
    }

    /// The trigger named `name`, if it is one.
    pub(crate) fn parse(name: &str) -> Option<Trigger> {
        match name {
            "manual" => Some(Trigger::Manual),
            "threshold" => Some(Trigger::Threshold),
            "oom" => Some(Trigger::Oom),
            _ => None,
        }
    }
}

/// Where a snapshot is in its life: stored, then parsed (or not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SnapshotStatus {
    /// Stored; its summary is being computed.
    Parsing,
    /// Stored and summarised (`stats_json` is set).
    Ready,
    /// Stored, but it could not be read (`error` says why).
    Failed,
}

impl SnapshotStatus {
    /// The name stored in `snapshots.status` and used in the API.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SnapshotStatus::Parsing => "parsing",
            SnapshotStatus::Ready => "ready",
            SnapshotStatus::Failed => "failed",
        }
    }

    /// The status named `name`, if it is one.
    pub(crate) fn parse(name: &str) -> Option<SnapshotStatus> {
        match name {
            "parsing" => Some(SnapshotStatus::Parsing),
            "ready" => Some(SnapshotStatus::Ready),
            "failed" => Some(SnapshotStatus::Failed),
            _ => None,
        }
    }
}

/// One row of `snapshots`. Serializes as the API shows it: without the blob
/// key (an internal detail) and without the stats (served on their own).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct SnapshotRecord {
    /// Public id: a UUID v7, so ids sort roughly by upload time.
    pub(crate) id: String,
    /// SHA-256 of the file as uploaded, lowercase hex.
    pub(crate) sha256: String,
    /// Key of the file in the blob store (shared by rows with equal sha256).
    #[serde(skip)]
    pub(crate) blob_key: String,
    /// Display name.
    pub(crate) name: String,
    /// Training job the snapshot came from, if known.
    pub(crate) job: Option<String>,
    /// Host the snapshot came from, if known.
    pub(crate) host: Option<String>,
    /// Distributed rank of the process, if known.
    pub(crate) rank: Option<i64>,
    /// Tags, without duplicates, in the order given.
    pub(crate) tags: Vec<String>,
    /// What made the client upload it.
    pub(crate) trigger: Trigger,
    /// Size of the file as uploaded.
    pub(crate) size_bytes: u64,
    /// Upload time, milliseconds since the Unix epoch.
    pub(crate) uploaded_at_ms: i64,
    /// Parsing progress.
    pub(crate) status: SnapshotStatus,
    /// Why parsing failed, when it did.
    pub(crate) error: Option<String>,
    /// The summary computed by the parser, as JSON, once ready.
    #[serde(skip)]
    pub(crate) stats_json: Option<String>,
    /// Kept by retention whatever its age (`PATCH … {"pinned": true}`).
    pub(crate) pinned: bool,
    /// While `parsing` on the instance that answers: bytes of the file
    /// read so far (of `size_bytes`). Not stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) parsed_bytes: Option<u64>,
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
#[derive(Debug, Clone, PartialEq, Serialize)]
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

/// One row of `tokens`. The secret itself is never stored, only its hash.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct TokenRecord {
    /// Short public id, the prefix of the token a client presents.
    pub(crate) id: String,
    /// What the token is for, as its creator named it.
    pub(crate) name: String,
    /// What the token may do.
    pub(crate) role: String,
    /// Argon2 hash (PHC string) of the token's secret part.
    #[serde(skip)]
    pub(crate) secret_hash: String,
    /// Creation time, milliseconds since the Unix epoch.
    pub(crate) created_at_ms: i64,
}

/// The metadata database. Cheap to clone: clones share one pool.
#[derive(Debug, Clone)]
pub(crate) struct Db {
    pub(super) pool: AnyPool,
    blob_locks: BlobLocks,
}

/// Stripes of the in-process blob locks (SQLite).
const BLOB_LOCK_STRIPES: usize = 64;
/// Connections for PostgreSQL's blob locks, apart from the main pool: a
/// lock holder then never waits for a connection that another lock holder
/// keeps (the steps under the lock use the main pool).
const BLOB_LOCK_CONNECTIONS: u32 = 8;

/// Where [`Db::lock_blob`] takes its locks.
#[derive(Debug, Clone)]
enum BlobLocks {
    /// PostgreSQL: an advisory transaction lock, seen by every instance.
    Postgres(AnyPool),
    /// SQLite serves one instance: mutexes of this process, one per stripe
    /// of blob keys.
    InProcess(std::sync::Arc<Vec<std::sync::Arc<tokio::sync::Mutex<()>>>>),
}

/// A held lock on one blob key (see [`Db::lock_blob`]). Release it with
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

/// A value bound to a placeholder of a query built at run time.
enum Arg {
    Text(String),
    Int(i64),
}

impl Db {
    /// The `sqlite:` URL of a database file at `path`, created if missing.
    pub(crate) fn sqlite_url(path: &Path) -> String {
        // sqlx percent-decodes the file name, so `%`, `?` and `#` in a path
        // must be encoded to survive.
        let mut url = String::from("sqlite://");
        for c in path.to_string_lossy().chars() {
            match c {
                '%' => url.push_str("%25"),
                '?' => url.push_str("%3F"),
                '#' => url.push_str("%23"),
                ' ' => url.push_str("%20"),
                c => url.push(c),
            }
        }
        url.push_str("?mode=rwc");
        url
    }

    /// Connects to `url` (`sqlite:…` or `postgres://…`) and brings the
    /// schema up to date.
    ///
    /// SQLite: the file is created when missing (`mode=rwc` unless the URL
    /// names a mode), switched to WAL so readers never wait for the writer,
    /// and each connection waits up to ten seconds for another writer's lock.
    /// PostgreSQL: the migrator holds an advisory lock while it runs, so
    /// instances starting together apply each migration once.
    pub(crate) async fn connect(url: &str) -> Result<Db> {
        sqlx::any::install_default_drivers();
        let backend = Backend::of_url(url)?;
        let url = match backend {
            // Each connection of the `Any` driver parses the URL anew, and
            // each parse of `:memory:` names a new, empty database.
            Backend::Sqlite if is_sqlite_memory(url) => {
                bail!("in-memory SQLite is not supported (every connection would see its own database): {url}")
            }
            Backend::Sqlite => sqlite_url_with_create(url),
            Backend::Postgres => url.to_owned(),
        };
        let redacted = redact(&url);

        // Migrations run on a connection of their own: the advisory lock is
        // per session, and closing this connection releases it even when a
        // migration fails.
        let mut conn =
            AnyConnection::connect(&url).await.with_context(|| format!("cannot connect to the database {redacted}"))?;
        if backend == Backend::Sqlite {
            // WAL is a property of the file: set once, every connection has it.
            sqlx::query("PRAGMA journal_mode = WAL")
                .execute(&mut conn)
                .await
                .with_context(|| format!("cannot switch SQLite to WAL mode: {redacted}"))?;
        }
        let migrated = MIGRATOR.run(&mut conn).await;
        let closed = conn.close().await;
        migrated.with_context(|| format!("cannot apply the migrations to {redacted}"))?;
        closed.with_context(|| format!("cannot close the migration connection to {redacted}"))?;

        let pool = AnyPoolOptions::new()
            .max_connections(if backend == Backend::Sqlite { 8 } else { 16 })
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    if backend == Backend::Sqlite {
                        sqlx::query(&format!("PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")).execute(conn).await?;
                    }
                    Ok(())
                })
            })
            .connect(&url)
            .await
            .with_context(|| format!("cannot open a connection pool to {redacted}"))?;
        let blob_locks = match backend {
            Backend::Postgres => BlobLocks::Postgres(
                AnyPoolOptions::new()
                    .max_connections(BLOB_LOCK_CONNECTIONS)
                    .min_connections(0)
                    .connect_lazy(&url)
                    .with_context(|| format!("cannot open the lock connections to {redacted}"))?,
            ),
            Backend::Sqlite => BlobLocks::InProcess(std::sync::Arc::new(
                (0..BLOB_LOCK_STRIPES).map(|_| std::sync::Arc::new(tokio::sync::Mutex::new(()))).collect(),
            )),
        };
        Ok(Db { pool, blob_locks })
    }

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
    pub(crate) async fn lock_blob(&self, blob_key: &str) -> Result<BlobLock> {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(blob_key.as_bytes());
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        let hash = i64::from_be_bytes(first);
        let held = match &self.blob_locks {
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

    #[cfg(test)]
    /// Closes every connection; later calls fail.
    pub(crate) async fn close(&self) {
        self.pool.close().await;
        if let BlobLocks::Postgres(locks) = &self.blob_locks {
            locks.close().await;
        }
    }

    /// Records a new snapshot, with its tags, in one transaction, and
    /// returns the row as stored. Fails when the id is taken.
    pub(crate) async fn insert_snapshot(&self, new: &NewSnapshot) -> Result<SnapshotRecord> {
        let record = SnapshotRecord {
            id: new.id.clone(),
            sha256: new.sha256.clone(),
            blob_key: new.blob_key.clone(),
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
            stats_json: new.stats_json.clone(),
            pinned: false,
            parsed_bytes: None,
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

    /// Marks `id` parsed, with its summary. Does nothing when the row is
    /// gone (deleted while it was parsed).
    pub(crate) async fn set_ready(&self, id: &str, stats_json: &str) -> Result<()> {
        sqlx::query("UPDATE snapshots SET status = $1, stats_json = $2, error = NULL WHERE id = $3")
            .bind(SnapshotStatus::Ready.as_str())
            .bind(stats_json)
            .bind(id)
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

    /// The secret `name` that every instance shares: made (32 random bytes)
    /// by the first instance that asks, read by the others.
    pub(crate) async fn shared_secret(&self, name: &str) -> Result<Vec<u8>> {
        let mut fresh = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut fresh);
        sqlx::query("INSERT INTO server_secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING")
            .bind(name)
            .bind(hex::encode(fresh))
            .execute(&self.pool)
            .await
            .with_context(|| format!("server_secrets insert {name}"))?;
        let value: String = sqlx::query_scalar("SELECT value FROM server_secrets WHERE name = $1")
            .bind(name)
            .fetch_one(&self.pool)
            .await
            .with_context(|| format!("server_secrets get {name}"))?;
        hex::decode(&value).with_context(|| format!("server secret {name} is not hex"))
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

    /// Stores a new token. Fails when its id is taken.
    pub(crate) async fn insert_token(&self, token: &TokenRecord) -> Result<()> {
        sqlx::query(&format!("INSERT INTO tokens ({TOKEN_COLUMNS}) VALUES ($1, $2, $3, $4, $5)"))
            .bind(token.id.as_str())
            .bind(token.name.as_str())
            .bind(token.role.as_str())
            .bind(token.secret_hash.as_str())
            .bind(token.created_at_ms)
            .execute(&self.pool)
            .await
            .with_context(|| format!("tokens insert {}", token.id))?;
        Ok(())
    }

    /// The token whose public id is `id`.
    pub(crate) async fn get_token(&self, id: &str) -> Result<Option<TokenRecord>> {
        let row = sqlx::query(&format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .with_context(|| format!("tokens get {id}"))?;
        row.as_ref().map(token_from_row).transpose()
    }

    /// Every token, oldest first.
    pub(crate) async fn list_tokens(&self) -> Result<Vec<TokenRecord>> {
        let rows = sqlx::query(&format!("SELECT {TOKEN_COLUMNS} FROM tokens ORDER BY created_at_ms, id"))
            .fetch_all(&self.pool)
            .await
            .context("tokens list")?;
        rows.iter().map(token_from_row).collect()
    }

    /// How many tokens exist (zero means the server has not been set up).
    pub(crate) async fn count_tokens(&self) -> Result<u64> {
        let count: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM tokens").fetch_one(&self.pool).await.context("tokens count")?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// Revokes the token `id`. False when there was none.
    pub(crate) async fn delete_token(&self, id: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM tokens WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await
            .with_context(|| format!("tokens delete {id}"))?;
        Ok(done.rows_affected() > 0)
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
    Ok(SnapshotRecord {
        sha256: row.try_get("sha256").with_context(|| column("sha256"))?,
        blob_key: row.try_get("blob_key").with_context(|| column("blob_key"))?,
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
        stats_json: row.try_get("stats_json").with_context(|| column("stats_json"))?,
        pinned: row.try_get::<i64, _>("pinned").with_context(|| column("pinned"))? != 0,
        parsed_bytes: None,
        id,
    })
}

fn token_from_row(row: &AnyRow) -> Result<TokenRecord> {
    let id: String = row.try_get("id").context("tokens row: id")?;
    let column = |name: &str| format!("tokens row {id}: column {name}");
    Ok(TokenRecord {
        name: row.try_get("name").with_context(|| column("name"))?,
        role: row.try_get("role").with_context(|| column("role"))?,
        secret_hash: row.try_get("secret_hash").with_context(|| column("secret_hash"))?,
        created_at_ms: row.try_get("created_at_ms").with_context(|| column("created_at_ms"))?,
        id,
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

/// Adds `mode=rwc` (create when missing) to a SQLite URL that names no mode.
fn sqlite_url_with_create(url: &str) -> String {
    if url.contains("mode=") {
        url.to_owned()
    } else if url.contains('?') {
        format!("{url}&mode=rwc")
    } else {
        format!("{url}?mode=rwc")
    }
}

fn is_sqlite_memory(url: &str) -> bool {
    url.contains(":memory:") || url.contains("mode=memory")
}

/// The URL with any password replaced, for error messages.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@').and_then(|(userinfo, host)| Some((userinfo.split_once(':')?.0, host))) {
        Some((user, host)) => format!("{scheme}://{user}:***@{host}{path}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::path::PathBuf;

    use super::*;

    /// A database of its own for one test: a SQLite file in a fresh folder,
    /// or a fresh database on the test PostgreSQL server.
    struct TestDb {
        db: Db,
        cleanup: Cleanup,
    }

    enum Cleanup {
        Folder(PathBuf),
        PostgresDatabase { admin_url: String, name: String },
    }

    fn postgres_admin_url() -> String {
        std::env::var("VRAMSCOPE_TEST_POSTGRES_URL").unwrap_or_else(|_| {
            panic!(
                "VRAMSCOPE_TEST_POSTGRES_URL is not set: the storage tests need PostgreSQL. \
                 Run ./scripts/test, or eval \"$(scripts/services start)\" before cargo test"
            )
        })
    }

    async fn admin_connection(admin_url: &str) -> sqlx::PgConnection {
        sqlx::PgConnection::connect(admin_url)
            .await
            .unwrap_or_else(|e| panic!("cannot reach the test PostgreSQL at {admin_url}: {e}"))
    }

    /// A new, empty database on the test server; returns its URL.
    async fn fresh_postgres_database(admin_url: &str, name: &str) -> String {
        let mut admin = admin_connection(admin_url).await;
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await.expect("create database");
        admin.close().await.expect("close admin connection");
        let mut url = reqwest::Url::parse(admin_url).expect("test PostgreSQL URL");
        url.set_path(&format!("/{name}"));
        url.to_string()
    }

    impl TestDb {
        async fn sqlite() -> TestDb {
            let folder = std::env::temp_dir().join(format!("vramscope-db-{}", uuid::Uuid::now_v7().simple()));
            std::fs::create_dir_all(&folder).expect("create test folder");
            let db = Db::connect(&Db::sqlite_url(&folder.join("meta data.db"))).await.expect("open SQLite");
            TestDb { db, cleanup: Cleanup::Folder(folder) }
        }

        async fn postgres() -> TestDb {
            let admin_url = postgres_admin_url();
            let name = format!("vt_{}", uuid::Uuid::now_v7().simple());
            let url = fresh_postgres_database(&admin_url, &name).await;
            let db = Db::connect(&url).await.expect("open PostgreSQL");
            TestDb { db, cleanup: Cleanup::PostgresDatabase { admin_url, name } }
        }

        async fn finish(self) {
            self.db.close().await;
            match self.cleanup {
                Cleanup::Folder(folder) => std::fs::remove_dir_all(folder).expect("remove test folder"),
                Cleanup::PostgresDatabase { admin_url, name } => {
                    let mut admin = admin_connection(&admin_url).await;
                    sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
                        .execute(&mut admin)
                        .await
                        .expect("drop test database");
                }
            }
        }
    }

    /// Runs each check on a fresh SQLite file and on a fresh PostgreSQL
    /// database: `<check>::sqlite` and `<check>::postgres`.
    macro_rules! on_both_databases {
        ($($check:ident),* $(,)?) => {$(
            mod $check {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    let t = super::TestDb::sqlite().await;
                    super::$check(&t.db).await;
                    t.finish().await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    let t = super::TestDb::postgres().await;
                    super::$check(&t.db).await;
                    t.finish().await;
                }
            }
        )*};
    }

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
        tokens_roundtrip,
    );

    /// Upload times for tests: strictly increasing, so the newest-first
    /// order is the insertion order reversed.
    fn tick() -> i64 {
        static CLOCK: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(1_700_000_000_000);
        CLOCK.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    fn new_snapshot(name: &str, sha: &str, tags: &[&str]) -> NewSnapshot {
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
        page.items.into_iter().map(|s| s.id).collect()
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

        let json = serde_json::to_value(&got).expect("serialize");
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

        db.set_ready(&first.id, r#"{"a":1}"#).await.expect("set ready");
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
        assert_eq!(db.find_ready_by_sha256(&sha).await.expect("find").map(|s| s.id), Some(first.id.clone()));

        // Several ready rows: the newest wins.
        let mut newer = record_at("zzz-newer", tick());
        newer.sha256 = sha.clone();
        newer.blob_key = first.blob_key.clone();
        db.insert_snapshot(&newer).await.expect("insert newer");
        assert_eq!(db.find_ready_by_sha256(&sha).await.expect("find").map(|s| s.id), Some(newer.id));

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
        db.set_ready("missing", "{}").await.expect("set ready");
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
        let id = |s: SnapshotRecord| s.id;
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
        let a = db.insert_snapshot(&mk("Llama warmup", Some("llama"), Some("node-1"), 1)).await.expect("insert").id;
        let b = db.insert_snapshot(&mk("step 100%", Some("llama"), Some("node-2"), 2)).await.expect("insert").id;
        let c = db.insert_snapshot(&mk("bert_eval", Some("bert"), Some("node-1"), 3)).await.expect("insert").id;
        let d = db.insert_snapshot(&mk("loose", None, None, 4)).await.expect("insert").id;
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
            seen.extend(page.items.into_iter().map(|s| s.id).filter(|id| id.starts_with("id-")));
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
        let rest: Vec<String> = rest.items.into_iter().map(|s| s.id).collect();
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
                        db.set_ready(&s.id, "{}").await.expect("concurrent update");
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

    async fn tokens_roundtrip(db: &Db) {
        assert_eq!(db.count_tokens().await.expect("count"), 0);
        let token = |id: &str, at: i64| TokenRecord {
            id: id.to_owned(),
            name: format!("token {id}"),
            role: "admin".to_owned(),
            secret_hash: "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA".to_owned(),
            created_at_ms: at,
        };
        db.insert_token(&token("k2", 20)).await.expect("insert");
        db.insert_token(&token("k1", 10)).await.expect("insert");
        assert!(db.insert_token(&token("k1", 30)).await.is_err(), "ids are unique");
        assert_eq!(db.count_tokens().await.expect("count"), 2);
        assert_eq!(db.get_token("k1").await.expect("get"), Some(token("k1", 10)));
        assert_eq!(db.get_token("k3").await.expect("get"), None);
        let ids: Vec<String> = db.list_tokens().await.expect("list").into_iter().map(|t| t.id).collect();
        assert_eq!(ids, ["k1", "k2"]);
        let json = serde_json::to_value(token("k1", 10)).expect("serialize");
        assert!(json.get("secret_hash").is_none(), "the hash is never serialized");
        assert!(db.delete_token("k1").await.expect("delete"));
        assert!(!db.delete_token("k1").await.expect("delete"));
        assert_eq!(db.count_tokens().await.expect("count"), 1);
    }

    #[tokio::test]
    async fn sqlite_reopens_with_its_data() {
        let t = TestDb::sqlite().await;
        let s = t.db.insert_snapshot(&new_snapshot("kept", &"66".repeat(32), &["t"])).await.expect("insert");
        let Cleanup::Folder(folder) = &t.cleanup else { unreachable!() };
        let again = Db::connect(&Db::sqlite_url(&folder.join("meta data.db"))).await.expect("reopen");
        assert_eq!(again.get(&s.id).await.expect("get"), Some(s));
        let mode: String =
            sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&again.pool).await.expect("journal mode");
        assert_eq!(mode, "wal");
        again.close().await;
        t.finish().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_instances_starting_together_migrate_once() {
        let admin_url = postgres_admin_url();
        let name = format!("vt_{}", uuid::Uuid::now_v7().simple());
        let url = fresh_postgres_database(&admin_url, &name).await;
        let starts = (0..6).map(|_| Db::connect(&url));
        let dbs = futures::future::join_all(starts).await;
        let dbs: Vec<Db> = dbs.into_iter().map(|db| db.expect("every instance starts")).collect();
        let applied: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations")
            .fetch_one(&dbs[0].pool)
            .await
            .expect("count migrations");
        assert_eq!(applied, MIGRATOR.iter().count() as i64);
        for db in &dbs {
            db.close().await;
        }
        TestDb { db: dbs[0].clone(), cleanup: Cleanup::PostgresDatabase { admin_url, name } }.finish().await;
    }

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
    fn urls() {
        assert_eq!(Db::sqlite_url(Path::new("/data/a b/100%?#.db")), "sqlite:///data/a%20b/100%25%3F%23.db?mode=rwc");
        assert_eq!(sqlite_url_with_create("sqlite://x.db"), "sqlite://x.db?mode=rwc");
        assert_eq!(sqlite_url_with_create("sqlite://x.db?cache=shared"), "sqlite://x.db?cache=shared&mode=rwc");
        assert_eq!(sqlite_url_with_create("sqlite://x.db?mode=ro"), "sqlite://x.db?mode=ro");
        assert_eq!(redact("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(escape_like(r"5%_\"), r"5\%\_\\");
        assert!(Backend::of_url("mysql://x").is_err());
    }

    #[tokio::test]
    async fn unusable_urls_are_refused() {
        for url in ["sqlite::memory:", "sqlite://?mode=memory", "mysql://localhost/db", "vramscope.db"] {
            let error = Db::connect(url).await.expect_err(url);
            assert!(error.to_string().contains(url), "{error:#}");
        }
    }
}
