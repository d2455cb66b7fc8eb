//! `vramscope serve`: the backend teams self-host.

use anyhow::Context;
use tokio::net::TcpListener;

use crate::http::{AppState, app};
use crate::settings::{EXAMPLE_CONFIG, Settings, SettingsArgs};
use crate::store::{BlobStore, Db};

/// Arguments of `vramscope serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    settings: SettingsArgs,
    /// Print the example configuration file and exit.
    #[arg(long)]
    print_config: bool,
}

/// Staging objects older than this at start-up are leftovers of uploads cut
/// off by a crash.
const STALE_STAGING: std::time::Duration = std::time::Duration::from_secs(3600);

/// Run the server until Ctrl-C or SIGTERM.
pub(crate) async fn run(args: &ServeArgs) -> anyhow::Result<()> {
    if args.print_config {
        print!("{EXAMPLE_CONFIG}");
        return Ok(());
    }
    // An upload is parsed and indexed into fresh memory while the other
    // core receives it: the helper faults in large blocks' pages ahead
    // (the 1 GB bench, upload -> first timeline: 2.91 s against 3.00 s
    // without, mean of 5 alternated runs; peak RSS 1.37x against 1.36x).
    crate::prefault::start();
    let settings = Settings::load(&args.settings)?;
    let (db, blobs) = settings.open_stores().await?;
    if settings.tokens_required() && db.count_tokens().await? == 0 {
        anyhow::bail!(
            "refusing to listen on {} without API tokens: anyone who can reach it could read and delete \
             snapshots. Create one first with `vramscope token create --role admin` (same --data-dir / \
             --database-url), or bind to 127.0.0.1",
            settings.bind
        );
    }
    if let Err(e) = blobs.clean_staging(STALE_STAGING).await {
        tracing::warn!(error = format!("{e:#}"), "could not sweep old staging uploads");
    }
    if let Err(e) = sweep_orphans(&db, &blobs, STALE_STAGING).await {
        tracing::warn!(error = format!("{e:#}"), "could not sweep unreferenced snapshot files");
    }
    let listener =
        TcpListener::bind(settings.bind).await.with_context(|| format!("cannot listen on {}", settings.bind))?;
    let address = listener.local_addr().context("listener address")?;
    let link_key = db.shared_secret("link_key").await.context("cannot read the key of signed links")?;
    let state = AppState::new(settings, db, blobs, link_key)?;
    state.ingest.resume_parsing().await;
    crate::retention::spawn_periodic(state.ingest.clone(), &state.settings);
    spawn_housekeeping(state.clone());
    tracing::info!(%address, tokens = state.auth.required(), "vramscope serving");
    // Tests and scripts read this line to find the port when binding to :0.
    println!("vramscope listening on http://{address}");
    let header_timeout = std::time::Duration::from_secs_f64(state.settings.header_read_timeout_secs);
    let (ingest, index_wait) = (state.ingest.clone(), state.settings.shutdown_index_wait_secs);
    crate::http::serve(listener, app(state), header_timeout, shutdown_signal()).await.context("server failed")?;
    ingest.finish_persisting(std::time::Duration::from_secs_f64(index_wait)).await;
    Ok(())
}

/// Housekeeping while serving, every quarter of [`STALE_STAGING`]:
/// - staging objects untouched for [`STALE_STAGING`] are removed (not only
///   at start-up: an instance that runs for weeks must not keep what a
///   crashed upload left; an upload in flight writes to its object, so its
///   time stays recent);
/// - live-telemetry sources silent for `telemetry_keep_days` are deleted
///   with their samples.
fn spawn_housekeeping(state: AppState) {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(STALE_STAGING / 4);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match state.blobs.clean_staging(STALE_STAGING).await {
                Ok(0) => {}
                Ok(removed) => tracing::info!(removed, "removed staging objects left by interrupted uploads"),
                Err(e) => tracing::warn!(error = format!("{e:#}"), "could not sweep old staging uploads"),
            }
            let keep_ms =
                i64::try_from(state.settings.telemetry_keep_days.saturating_mul(86_400_000)).unwrap_or(i64::MAX);
            match state.db.expire_sources(crate::clock::now_ms().saturating_sub(keep_ms)).await {
                Ok(0) => {}
                Ok(removed) => tracing::info!(removed, "deleted live-telemetry sources silent for too long"),
                Err(e) => tracing::warn!(error = format!("{e:#}"), "could not expire telemetry sources"),
            }
        }
    });
}

/// Remove committed files that no row names (see `BlobStore::committed_before`).
async fn sweep_orphans(db: &Db, blobs: &BlobStore, older_than: std::time::Duration) -> anyhow::Result<()> {
    for (key, size) in blobs.committed_before(older_than).await? {
        // Under the file's lock: an instance committing an upload of the
        // same bytes right now names it in a row before releasing the lock.
        if crate::store::delete_blob_if_unused(db, blobs, &key).await? {
            tracing::info!(key, size, "removed a snapshot file no row names");
        }
    }
    for key in blobs.orphan_indexes(older_than).await? {
        blobs.delete(&key).await?;
        tracing::info!(key, "removed a persisted index whose snapshot file is gone");
    }
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{NewSnapshot, SnapshotStatus, Trigger};

    /// Regression for the crash window between committing a file and
    /// inserting its row: the file must not stay forever.
    #[tokio::test]
    async fn regression_files_without_rows_are_swept() {
        let dir = std::env::temp_dir().join(format!("vramscope-sweep-{}", uuid::Uuid::now_v7()));
        let settings = Settings { data_dir: dir, ..Settings::default() };
        let (db, blobs) = settings.open_stores().await.expect("stores");
        let mut keys = Vec::new();
        for content in [&b"orphan"[..], &b"kept"[..]] {
            let mut upload = blobs.begin_upload().await.expect("begin");
            upload.write(bytes::Bytes::copy_from_slice(content)).await.expect("write");
            let staged = upload.finish().await.expect("finish");
            keys.push((blobs.commit(&staged).await.expect("commit"), staged));
        }
        let (kept_key, kept) = &keys[1];
        db.insert_snapshot(&NewSnapshot {
            id: "kept".into(),
            sha256: kept.sha256.clone(),
            blob_key: kept_key.clone(),
            name: "kept".into(),
            job: None,
            host: None,
            rank: None,
            tags: vec![],
            trigger: Trigger::Manual,
            size_bytes: kept.size,
            uploaded_at_ms: crate::clock::now_ms(),
            status: SnapshotStatus::Ready,
            stats_json: None,
        })
        .await
        .expect("insert");
        // File times have millisecond resolution: step past them.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        sweep_orphans(&db, &blobs, std::time::Duration::ZERO).await.expect("sweep");
        let left: Vec<String> = blobs
            .committed_before(std::time::Duration::ZERO)
            .await
            .expect("list")
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(left, vec![kept_key.clone()]);
    }
}
