//! The dashboard's files, embedded in the binary so that one file deploys it
//! all and the browser fetches nothing from the internet. `http::web`
//! serves them; `vramscope report` inlines them into one HTML file.
//!
//! `scripts/build-frontend` writes them to `frontend/dist/` (the leptos app
//! compiled to WebAssembly, its JavaScript glue, the page and the style
//! sheet); `include_dir!` embeds whatever is there when this crate compiles.
//! A checkout that never built the dashboard holds only the folder's
//! `.gitkeep`: the server still compiles and runs, and says how to build it.

use std::collections::HashMap;
use std::sync::LazyLock;

use include_dir::{Dir, include_dir};
use sha2::{Digest, Sha256};

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

/// One embedded file.
pub(crate) struct Asset {
    /// Its bytes.
    pub(crate) bytes: &'static [u8],
    /// Its media type.
    pub(crate) content_type: &'static str,
    /// A strong ETag of its content, quotes included.
    pub(crate) etag: String,
}

impl Asset {
    /// The file `name` of `bytes`.
    pub(crate) fn new(name: &str, bytes: &'static [u8]) -> Asset {
        let digest = Sha256::digest(bytes);
        Asset { bytes, content_type: content_type(name), etag: format!("\"{}\"", hex::encode(&digest[..12])) }
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
pub(crate) fn dashboard_built() -> bool {
    ASSETS.contains_key("index.html")
}

/// Where the page finds the dashboard's files: under a folder named after
/// this build (`/static/v/{BUILD}/`), so that the browser may keep them
/// for good (`immutable`) and never ask again, and the WebAssembly it
/// compiled once is taken from its code cache. A new binary's page names
/// another folder, so it is never mixed with an old one's files.
const VERSIONED_PREFIX: &str = "/static/v/";

/// This build of the dashboard: a hash of every embedded file's name and
/// content, 16 hex digits.
pub(crate) fn build_id() -> &'static str {
    static BUILD: LazyLock<String> = LazyLock::new(|| {
        let mut names: Vec<&&str> = ASSETS.keys().collect();
        names.sort();
        let mut hash = Sha256::new();
        for name in names {
            hash.update(name.as_bytes());
            hash.update(ASSETS[*name].etag.as_bytes());
        }
        hex::encode(&hash.finalize()[..8])
    });
    &BUILD
}

/// `index.html` as served: every `/static/` it names moved under this
/// build's folder ([`VERSIONED_PREFIX`]); `None` without a dashboard.
pub(crate) fn page() -> Option<&'static Asset> {
    static TEXT: LazyLock<Option<String>> = LazyLock::new(|| {
        let raw = std::str::from_utf8(ASSETS.get("index.html")?.bytes).ok()?;
        Some(raw.replace("/static/", &format!("{VERSIONED_PREFIX}{}/", build_id())))
    });
    static PAGE: LazyLock<Option<Asset>> =
        LazyLock::new(|| TEXT.as_deref().map(|text| Asset::new("index.html", text.as_bytes())));
    PAGE.as_ref()
}

/// The embedded file `name` (`index.html`, `worker.js`, `snippets/…`).
pub(crate) fn asset(name: &str) -> Option<&'static Asset> {
    ASSETS.get(name)
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
    fn what_the_page_loads_is_embedded_with_its_type() {
        if !dashboard_built() {
            return;
        }
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
