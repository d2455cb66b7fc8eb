//! The dashboard's files, embedded in the binary so that one file deploys it
//! all and the browser fetches nothing from the internet.
//!
//! `scripts/build-frontend` writes them to `frontend/dist/` (the leptos app
//! compiled to WebAssembly, its JavaScript glue, the page and the style
//! sheet); `include_dir!` embeds whatever is there when this crate compiles.
//! A checkout that never built the dashboard holds only the folder's
//! `.gitkeep`: the server still compiles and runs, logs a warning, and
//! answers the dashboard's pages with one saying how to build it.
//!
//! Routes: the page at `/` and at `/snapshots/{id}` (the app routes in the
//! browser), the files at `/static/{name}` (`worker.js`, the Web Worker
//! that reads local files, among them). Files are revalidated on each
//! load (`no-cache` with a content-hash ETag), so a new binary's dashboard
//! is never mixed with an old cached one.

use std::collections::HashMap;
use std::sync::LazyLock;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use include_dir::{Dir, include_dir};
use sha2::{Digest, Sha256};

use super::AppState;

/// `frontend/dist/` as it was when the server was compiled.
static DIST: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../frontend/dist");

/// The embedded files by path (`snippets/…/inline0.js` for files in
/// folders, which wasm-bindgen writes for crates with JavaScript snippets),
/// with their type and ETag. Dot files (the placeholder) are left out.
static ASSETS: LazyLock<HashMap<&'static str, Asset>> = LazyLock::new(|| {
    let mut assets = HashMap::new();
    collect(&DIST, &mut assets);
    assets
});

fn collect(dir: &'static Dir<'static>, assets: &mut HashMap<&'static str, Asset>) {
    for entry in dir.entries() {
        if let Some(sub) = entry.as_dir() {
            collect(sub, assets);
        } else if let Some(file) = entry.as_file()
            && let Some(name) = file.path().to_str()
            && !file.path().file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with('.'))
        {
            assets.insert(name, Asset::new(name, file.contents()));
        }
    }
}

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

/// One embedded file.
struct Asset {
    bytes: &'static [u8],
    content_type: &'static str,
    etag: HeaderValue,
}

impl Asset {
    fn new(name: &str, bytes: &'static [u8]) -> Asset {
        let digest = Sha256::digest(bytes);
        let etag = HeaderValue::from_str(&format!("\"{}\"", hex::encode(&digest[..12])))
            .unwrap_or_else(|_| HeaderValue::from_static("\"0\""));
        Asset { bytes, content_type: content_type(name), etag }
    }

    fn respond(&self, headers: &HeaderMap) -> Response {
        let cached = headers.get(header::IF_NONE_MATCH).is_some_and(|tags| {
            tags.to_str().is_ok_and(|t| t.split(',').any(|t| t.trim().trim_start_matches("W/") == self.etag))
        });
        let mut response = if cached { StatusCode::NOT_MODIFIED.into_response() } else { self.bytes.into_response() };
        let h = response.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(self.content_type));
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        h.insert(header::ETAG, self.etag.clone());
        response
    }
}

/// The types of the files build-frontend writes (and a few more).
fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("wasm") => "application/wasm",
        Some("css") => "text/css; charset=utf-8",
        Some("json" | "map") => "application/json",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        _ => "application/octet-stream",
    }
}

/// An embedded dashboard file by name (`worker.js`, `style.css`, ...), for
/// `vramscope report`, which inlines them into one HTML file.
pub(crate) fn dashboard_file(name: &str) -> Option<&'static [u8]> {
    ASSETS.get(name).map(|a| a.bytes)
}

/// Whether the dashboard was built into this binary.
fn dashboard_built() -> bool {
    ASSETS.contains_key("index.html")
}

pub(super) fn routes() -> Router<AppState> {
    if !dashboard_built() {
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
}

/// The app's page, for every route the app handles in the browser.
async fn index(headers: HeaderMap) -> Response {
    match ASSETS.get("index.html") {
        Some(page) => page.respond(&headers),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-cache")],
            NOT_BUILT,
        )
            .into_response(),
    }
}

async fn asset(Path(name): Path<String>, headers: HeaderMap) -> Response {
    match ASSETS.get(name.as_str()) {
        Some(file) => file.respond(&headers),
        None => (StatusCode::NOT_FOUND, format!("no such file: /static/{name}")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_of_the_dashboards_files() {
        assert_eq!(content_type("vramscope_frontend_bg.wasm"), "application/wasm");
        assert_eq!(content_type("vramscope_frontend.js"), "text/javascript; charset=utf-8");
        assert_eq!(content_type("style.css"), "text/css; charset=utf-8");
        assert_eq!(content_type("index.html"), "text/html; charset=utf-8");
        assert_eq!(content_type("LICENSE"), "application/octet-stream");
    }

    #[test]
    fn etags_revalidate() {
        let asset = Asset::new("a.js", b"console.log(1)");
        let mut headers = HeaderMap::new();
        assert_eq!(asset.respond(&headers).status(), StatusCode::OK);
        headers.insert(header::IF_NONE_MATCH, asset.etag.clone());
        let response = asset.respond(&headers);
        assert_eq!(response.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "text/javascript; charset=utf-8");
        headers.insert(header::IF_NONE_MATCH, HeaderValue::from_static("\"other\""));
        assert_eq!(asset.respond(&headers).status(), StatusCode::OK);
    }

    #[test]
    fn the_page_is_served_or_the_build_hint() {
        // Either way `/` answers with HTML, never an empty page.
        let response = futures::executor::block_on(index(HeaderMap::new()));
        assert_eq!(response.headers()[header::CONTENT_TYPE], "text/html; charset=utf-8");
        let expected = if dashboard_built() { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
        assert_eq!(response.status(), expected);
        if dashboard_built() {
            // What the page loads is embedded, with the types browsers insist on.
            let page = std::str::from_utf8(ASSETS["index.html"].bytes).expect("utf-8");
            for name in ["vramscope_frontend.js", "vramscope_frontend_bg.wasm", "style.css", "worker.js"] {
                assert!(ASSETS.contains_key(name), "{name} is embedded");
            }
            assert!(page.contains("/static/vramscope_frontend.js") && page.contains("/static/style.css"));
            assert_eq!(ASSETS["vramscope_frontend_bg.wasm"].content_type, "application/wasm");
            // Module workers load only with a JavaScript type.
            assert_eq!(ASSETS["worker.js"].content_type, "text/javascript; charset=utf-8");
            assert!(!ASSETS.contains_key(".gitkeep"));
        }
    }
}
