//! The HTTP API and the dashboard's files: [`app`] (in `router`) builds
//! the router over the state every handler shares, [`AppState`].

mod authorize;
pub(crate) mod error;
mod guard;
mod listen;
pub(crate) mod role;

mod router;
mod v1;
pub(crate) mod web;

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use crate::auth::{Auth, LinkSigner};
use crate::ingest::{IndexFiles, Ingest, Parser, Parts as IngestParts, SnapshotCache};
use crate::metrics::Metrics;
use crate::settings::Settings;
use crate::store::{BlobStore, Db};
pub(crate) use listen::serve;
pub(crate) use router::app;

/// Shared state of the server: cheap to clone.
#[derive(Clone)]
pub(crate) struct AppState(Arc<Inner>);

/// What the handlers share.
pub(crate) struct Inner {
    pub(crate) settings: Settings,
    pub(crate) db: Db,
    pub(crate) blobs: BlobStore,
    pub(crate) auth: Auth,
    pub(crate) metrics: Arc<Metrics>,
    /// Parsing, indexing and the cache of analyzed snapshots.
    pub(crate) ingest: Ingest,
    /// Where the analysis routes wait for a thread.
    pub(crate) analyses: v1::AnalysisQueue,
    /// Signs the dashboard's download links.
    pub(crate) links: LinkSigner,
    /// `trusted_proxies`, read.
    pub(crate) proxies: Vec<ipnet::IpNet>,
}

impl Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl AppState {
    /// `link_key`: the key of signed links, shared by every instance
    /// (`Db::shared_secret`).
    pub(crate) fn new(settings: Settings, db: Db, blobs: BlobStore, link_key: Vec<u8>) -> anyhow::Result<AppState> {
        let auth = Auth::new(db.clone(), settings.tokens_required());
        let cache = SnapshotCache::new(settings.cache_entries, settings.cache_budget());
        let parser = Parser::new(
            settings.read_options(),
            Duration::from_secs_f64(settings.parse_timeout_secs),
            settings.parse_concurrency,
        );
        let analyses = v1::AnalysisQueue::new(settings.analysis_concurrency);
        let links = LinkSigner::new(link_key);
        let proxies = settings.trusted_proxies()?;
        let indexes =
            IndexFiles::new(blobs.clone(), &settings.data_dir.join("index-cache"), settings.index_cache_bytes)?;
        let metrics = Arc::new(Metrics::new());
        let ingest = Ingest::new(IngestParts {
            persisting: tokio::sync::watch::Sender::new(0),
            db: db.clone(),
            blobs: blobs.clone(),
            parser,
            indexes,
            cache,
            metrics: Arc::clone(&metrics),
            settled: tokio::sync::Notify::new(),
        });
        Ok(AppState(Arc::new(Inner { settings, db, blobs, auth, metrics, ingest, analyses, links, proxies })))
    }
}

#[cfg(test)]
mod tests {
    //! The router driven in process with `oneshot` (no socket), over a real
    //! SQLite database and a real local blob folder.

    use axum::body::Body;
    use axum::http::{Request, StatusCode, header};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;
    use axum::Router;

    async fn test_app(tag: &str) -> Router {
        let dir = std::env::temp_dir().join(format!("vramscope-oneshot-{tag}-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let settings = Settings { data_dir: dir, ..Settings::default() };
        let (db, blobs) = settings.open_stores().await.expect("stores");
        let key = db.shared_secret("link_key").await.expect("link key");
        app(AppState::new(settings, db, blobs, key).expect("state"))
    }

    async fn json(response: axum::response::Response) -> serde_json::Value {
        let bytes = response.into_body().collect().await.expect("body").to_bytes();
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null)
    }

    use vramscope_shared::testing::corpus_bytes as fixture;

    #[tokio::test]
    async fn healthz_answers_without_a_token() {
        let response =
            test_app("health").await.oneshot(Request::get("/healthz").body(Body::empty()).expect("req")).await;
        let response = response.expect("response");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(json(response).await["status"], "ok");
    }

    #[tokio::test]
    async fn upload_then_stats_in_process() {
        let app = test_app("upload").await;
        let request = Request::post("/api/v1/snapshots?name=streams.pickle&rank=1")
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .body(Body::from(fixture("streams.pickle")))
            .expect("request");
        let response = app.clone().oneshot(request).await.expect("response");
        assert_eq!(response.status(), StatusCode::CREATED);
        let id = json(response).await["id"].as_str().expect("id").to_owned();
        let request = Request::get(format!("/api/v1/snapshots/{id}/stats")).body(Body::empty()).expect("request");
        let stats = json(app.clone().oneshot(request).await.expect("response")).await;
        assert_eq!(stats["devices"][0]["trace_entries"], 1727);
        assert_eq!(stats["file"], "streams.pickle");
    }

    #[tokio::test]
    async fn unknown_ids_bad_cursors_and_bad_triggers_are_client_errors() {
        let app = test_app("errors").await;
        let get = |uri: &str| Request::get(uri).body(Body::empty()).expect("request");
        let response = app.clone().oneshot(get("/api/v1/snapshots/nope/stats")).await.expect("response");
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert_eq!(json(response).await["kind"], "not_found");
        let response = app.clone().oneshot(get("/api/v1/snapshots?cursor=garbage")).await.expect("response");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let request = Request::post("/api/v1/snapshots?trigger=sometimes")
            .body(Body::from(fixture("state_only.pickle")))
            .expect("r");
        let response = app.clone().oneshot(request).await.expect("response");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let request = Request::get("/api/v1/snapshots?limit=1").body(Body::empty()).expect("request");
        let page = json(app.oneshot(request).await.expect("response")).await;
        assert_eq!(page["items"], serde_json::json!([]), "the refused upload left no row");
    }
}
