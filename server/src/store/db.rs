//! The connection to the metadata database, through sqlx's `Any` driver:
//! one code path and one set of migrations (`server/migrations`) for SQLite
//! (the embedded default, a file in the data folder) and PostgreSQL (team
//! mode, several instances on one database). The tables' code lives beside
//! this module, one file per concept: `snapshots`, `tokens`, `review`,
//! `telemetry`, and the blob locks (`lock`).
//!
//! The `Any` driver decodes only basic types, so rows carry `i64` and
//! `String` and this module converts: tags are a JSON array in
//! `snapshots.tags` (plus one `snapshot_tags` row per tag, which the exact
//! tag filter joins on), the trigger and status enums are their lowercase
//! names. Placeholders are `$N` everywhere: PostgreSQL requires them and
//! sqlx's SQLite driver binds `$N` by number too.

use std::path::Path;

use anyhow::{Context, Result, bail};
use sqlx::any::AnyPoolOptions;
use sqlx::{AnyConnection, AnyPool, Connection};

use super::lock::{BlobLock, BlobLocks};

/// The migrations, embedded at build time; the same files serve both
/// databases.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// How long a SQLite connection waits for another writer's lock before it
/// gives up with "database is locked".
const SQLITE_BUSY_TIMEOUT_MS: u32 = 10_000;

/// Which database a [`Db`] talks to; the SQL is the same, the connection
/// setup is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Backend {
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

/// The metadata database. Cheap to clone: clones share one pool.
#[derive(Debug, Clone)]
pub(crate) struct Db {
    pub(super) pool: AnyPool,
    pub(super) blob_locks: BlobLocks,
}

/// A value bound to a placeholder of a query built at run time.
pub(super) enum Arg {
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
            Backend::Postgres => BlobLocks::postgres(&url, &redacted)?,
            Backend::Sqlite => BlobLocks::in_process(),
        };
        Ok(Db { pool, blob_locks })
    }

    #[cfg(test)]
    /// Closes every connection; later calls fail.
    pub(crate) async fn close(&self) {
        self.pool.close().await;
        self.blob_locks.close().await;
    }

    /// Locks the content-addressed file `blob_key` against the other steps
    /// that decide its fate, in every instance (see [`BlobLocks::lock`]):
    /// deleting it once no row uses it and committing an upload of the
    /// same content.
    pub(crate) async fn lock_blob(&self, blob_key: &str) -> Result<BlobLock> {
        self.blob_locks.lock(blob_key).await
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
pub(super) mod testing {
    //! A fresh database for each storage test, on both backends.

    use std::path::PathBuf;

    use sqlx::Connection;

    use super::Db;

    /// A database of its own for one test: a SQLite file in a fresh folder,
    /// or a fresh database on the test PostgreSQL server.
    pub(crate) struct TestDb {
        pub(crate) db: Db,
        pub(crate) cleanup: Cleanup,
    }

    pub(crate) enum Cleanup {
        Folder(PathBuf),
        PostgresDatabase { admin_url: String, name: String },
    }

    pub(crate) fn postgres_admin_url() -> String {
        std::env::var("VRAMSCOPE_TEST_POSTGRES_URL").unwrap_or_else(|_| {
            panic!(
                "VRAMSCOPE_TEST_POSTGRES_URL is not set: the storage tests need PostgreSQL. \
                 Run ./scripts/test, or eval \"$(scripts/services start)\" before cargo test"
            )
        })
    }

    pub(crate) async fn admin_connection(admin_url: &str) -> sqlx::PgConnection {
        sqlx::PgConnection::connect(admin_url)
            .await
            .unwrap_or_else(|e| panic!("cannot reach the test PostgreSQL at {admin_url}: {e}"))
    }

    /// A new, empty database on the test server; returns its URL.
    pub(crate) async fn fresh_postgres_database(admin_url: &str, name: &str) -> String {
        let mut admin = admin_connection(admin_url).await;
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await.expect("create database");
        admin.close().await.expect("close admin connection");
        let mut url = reqwest::Url::parse(admin_url).expect("test PostgreSQL URL");
        url.set_path(&format!("/{name}"));
        url.to_string()
    }

    impl TestDb {
        pub(crate) async fn sqlite() -> TestDb {
            let folder = std::env::temp_dir().join(format!("vramscope-db-{}", uuid::Uuid::now_v7().simple()));
            std::fs::create_dir_all(&folder).expect("create test folder");
            let db = Db::connect(&Db::sqlite_url(&folder.join("meta data.db"))).await.expect("open SQLite");
            TestDb { db, cleanup: Cleanup::Folder(folder) }
        }

        pub(crate) async fn postgres() -> TestDb {
            let admin_url = postgres_admin_url();
            let name = format!("vt_{}", uuid::Uuid::now_v7().simple());
            let url = fresh_postgres_database(&admin_url, &name).await;
            let db = Db::connect(&url).await.expect("open PostgreSQL");
            TestDb { db, cleanup: Cleanup::PostgresDatabase { admin_url, name } }
        }

        pub(crate) async fn finish(self) {
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
                    let t = $crate::store::db::testing::TestDb::sqlite().await;
                    super::$check(&t.db).await;
                    t.finish().await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    let t = $crate::store::db::testing::TestDb::postgres().await;
                    super::$check(&t.db).await;
                    t.finish().await;
                }
            }
        )*};
    }
    pub(crate) use on_both_databases;
}

#[cfg(test)]
mod tests {
    use super::testing::{Cleanup, TestDb, fresh_postgres_database, postgres_admin_url};
    use super::*;

    #[tokio::test]
    async fn sqlite_reopens_with_its_data() {
        let t = TestDb::sqlite().await;
        let s =
            t.db.insert_snapshot(&crate::store::snapshots::testing::new_snapshot("kept", &"66".repeat(32), &["t"]))
                .await
                .expect("insert");
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

    #[test]
    fn urls() {
        assert_eq!(Db::sqlite_url(Path::new("/data/a b/100%?#.db")), "sqlite:///data/a%20b/100%25%3F%23.db?mode=rwc");
        assert_eq!(sqlite_url_with_create("sqlite://x.db"), "sqlite://x.db?mode=rwc");
        assert_eq!(sqlite_url_with_create("sqlite://x.db?cache=shared"), "sqlite://x.db?cache=shared&mode=rwc");
        assert_eq!(sqlite_url_with_create("sqlite://x.db?mode=ro"), "sqlite://x.db?mode=ro");
        assert_eq!(redact("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
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
