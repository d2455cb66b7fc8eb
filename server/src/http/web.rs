//! The dashboard's pages and files (embedded by `crate::assets`). Without
//! a built dashboard the server logs a warning and answers the pages with
//! one saying how to build it.
//!
//! Routes: the page at `/` and at `/snapshots/{id}` (the app routes in the
//! browser), the files at `/static/v/{build}/{name}` (`worker.js`, the Web
//! Worker that reads local files, among them). The page is revalidated on
//! each load (`no-cache` with a content-hash ETag) and names its files
//! under this build's folder, which the browser keeps for good
//! (`immutable`): a returning page asks for nothing but itself, and a new
//! binary's page names another folder, so it is never mixed with an old
//! one's files. `/static/{name}` answers the same files, revalidated, for
//! links from before the folders.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::AppState;
use crate::assets::{self, Asset};

/// Shown instead of the dashboard when it was not built.
const NOT_BUILT: &str = r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>vramscope: dashboard not built</title>
<style>body{font:15px/1.5 system-ui,sans-serif;margin:3rem;max-width:44rem;color:#1f2328}
code{background:#f6f8fa;padding:.1rem .3rem;border-radius:4px}</style></head>
<body><h1>The dashboard was not built into this binary</h1>
<p>This vramscope server was compiled without its web dashboard. Build it, then rebuild the server:</p>
<pre><code>./scripts/build-frontend
cargo build --release -p vramscope</code></pre>
<p>or run <code>./scripts/run</code>, which does both and starts the server.</p>
<p>The API works regardless: <a href="/api/v1/snapshots">/api/v1/snapshots</a>.</p>
</body></html>
"#;

/// How long a browser may keep a file of a build's folder: a year, the
/// longest HTTP caches honour, and never revalidated.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// `asset`'s bytes, or 304 when the client's copy has its ETag; revalidated
/// on every load unless `immutable`.
fn respond(asset: &Asset, headers: &HeaderMap, immutable: bool) -> Response {
    let cached = headers.get(header::IF_NONE_MATCH).is_some_and(|tags| {
        tags.to_str().is_ok_and(|t| t.split(',').any(|t| t.trim().trim_start_matches("W/") == asset.etag))
    });
    let mut response = if cached { StatusCode::NOT_MODIFIED.into_response() } else { asset.bytes.into_response() };
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(if immutable { IMMUTABLE } else { "no-cache" }));
    isolate(h);
    if let Ok(etag) = HeaderValue::from_str(&asset.etag) {
        h.insert(header::ETAG, etag);
    }
    response
}

/// Makes the dashboard cross-origin isolated: its pages may then share
/// memory between threads (`SharedArrayBuffer`), which the local file
/// worker uses to read a file ahead of its parse (`worker.js`). The page
/// loads nothing from another origin, so nothing breaks.
fn isolate(h: &mut HeaderMap) {
    h.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
    h.insert("cross-origin-embedder-policy", HeaderValue::from_static("require-corp"));
    h.insert("cross-origin-resource-policy", HeaderValue::from_static("same-origin"));
}

pub(super) fn routes() -> Router<AppState> {
    if !assets::dashboard_built() {
        tracing::warn!(
            "the web dashboard was not built into this binary: / shows how to build it (run scripts/build-frontend, \
             then rebuild); the API is unaffected"
        );
    }
    Router::new()
        .route("/", get(index))
        .route("/snapshots/{id}", get(index))
        .route("/live", get(index))
        .route("/live/{source}", get(index))
        .route("/compare/{a}/{b}", get(index))
        .route("/jobs", get(index))
        .route("/jobs/{job}", get(index))
        .route("/static/{*name}", get(asset))
        .route("/static/v/{build}/{*name}", get(versioned_asset))
}

/// The app's page, for every route the app handles in the browser.
async fn index(headers: HeaderMap) -> Response {
    match assets::page() {
        Some(page) => respond(page, &headers, false),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-cache")],
            NOT_BUILT,
        )
            .into_response(),
    }
}

async fn asset(Path(name): Path<String>, headers: HeaderMap) -> Response {
    match assets::asset(&name) {
        Some(file) => respond(file, &headers, false),
        None => (StatusCode::NOT_FOUND, format!("no such file: /static/{name}")).into_response(),
    }
}

/// A file of build `build`'s folder. Another build's folder is not
/// answered with this build's files: a page of an older binary, still open
/// in a tab, would mix them (its module with a newer worker); it is told
/// to reload instead.
async fn versioned_asset(Path((build, name)): Path<(String, String)>, headers: HeaderMap) -> Response {
    if build != assets::build_id() {
        return (
            StatusCode::NOT_FOUND,
            format!(
                "/static/v/{build}/{name} is a file of another build of the dashboard (this server runs {}): reload \
                 the page",
                assets::build_id()
            ),
        )
            .into_response();
    }
    match assets::asset(&name) {
        Some(file) => respond(file, &headers, true),
        None => (StatusCode::NOT_FOUND, format!("no such file: /static/v/{build}/{name}")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_revalidate() {
        let asset = Asset::new("a.js", b"console.log(1)");
        let mut headers = HeaderMap::new();
        assert_eq!(respond(&asset, &headers, false).status(), StatusCode::OK);
        headers.insert(header::IF_NONE_MATCH, HeaderValue::from_str(&asset.etag).expect("etag"));
        let response = respond(&asset, &headers, false);
        assert_eq!(response.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "text/javascript; charset=utf-8");
        headers.insert(header::IF_NONE_MATCH, HeaderValue::from_static("\"other\""));
        assert_eq!(respond(&asset, &headers, false).status(), StatusCode::OK);
    }

    #[test]
    fn files_are_served_cross_origin_isolated() {
        // The local file worker shares memory with its reader only on an
        // isolated page, and a worker's script must carry the same policy.
        let response = respond(&Asset::new("worker.js", b"0"), &HeaderMap::new(), true);
        assert_eq!(response.headers()["cross-origin-opener-policy"], "same-origin");
        assert_eq!(response.headers()["cross-origin-embedder-policy"], "require-corp");
        assert_eq!(response.headers()["cross-origin-resource-policy"], "same-origin");
    }

    #[test]
    fn the_page_is_served_or_the_build_hint() {
        // Either way `/` answers with HTML, never an empty page.
        let response = futures::executor::block_on(index(HeaderMap::new()));
        assert_eq!(response.headers()[header::CONTENT_TYPE], "text/html; charset=utf-8");
        let expected = if assets::dashboard_built() { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
        assert_eq!(response.status(), expected);
    }
}
