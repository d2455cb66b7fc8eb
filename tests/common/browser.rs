//! The browser harness shared by the end-to-end tests: a real `vramscope
//! serve` on a loopback port, chromedriver, headless Chromium driven by
//! fantoccini, screenshots in `target/browser-artifacts/`, and helpers to
//! wait, read the canvas's pixels and press keys.
//!
//! Used by the `browser*` suites (`use crate::common::browser::*`). Needs
//! Chromium and chromedriver (Debian: `chromium`,
//! `chromium-driver`) and the dashboard built into the binary
//! (`scripts/build-frontend` before the tests are compiled); missing, they
//! fail loudly: these tests never skip.

use std::net::TcpListener;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::http::Method;
use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use futures::FutureExt;
use serde_json::{Value, json};
use url::Url;

use crate::common::server::TestServer;

/// Curve colours of the plot (plot/src/palette.rs), as the canvas holds them.
pub const RESERVED: [u8; 3] = [87, 96, 106];
pub const ACTIVE: [u8; 3] = [219, 109, 40];
pub const ALLOCATED: [u8; 3] = [9, 105, 218];
pub const OOM: [u8; 3] = [207, 34, 46];

/// WebDriver's codes of the Enter and Backspace keys.
pub const ENTER: &str = "\u{E007}";
pub const BACKSPACE: &str = "\u{E003}";

pub const SETUP_HINT: &str = "run ./scripts/test, which installs chromium and chromium-driver and builds the dashboard";

/// A child process, killed when dropped.
pub struct Process(pub Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn artifacts() -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("target/tmp has a parent").join("browser-artifacts");
    std::fs::create_dir_all(&dir).expect("artifacts folder");
    dir
}

pub fn scratch(tag: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("browser-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

/// `vramscope serve` on a free loopback port over `data`, with extra
/// environment; returns it and its URL.
pub fn start_server(data: &Path, env: &[(&str, &str)]) -> (TestServer, String) {
    let server = TestServer::start_in(data, env);
    let url = server.url.clone();
    (server, url)
}

/// The first of `names` found as a file, or on `PATH`.
pub fn find_program(env: &str, names: &[&str]) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        return PathBuf::from(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in names {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!("none of {names:?} is installed (or set {env}): {SETUP_HINT}");
}

/// chromedriver on a free loopback port; returns it and its URL.
pub fn start_chromedriver() -> (Process, String) {
    let driver = find_program("VRAMSCOPE_CHROMEDRIVER", &["chromedriver"]);
    let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
    let child = Command::new(&driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}: {SETUP_HINT}", driver.display()));
    let process = Process(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not listen on port {port} within 20 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    (process, format!("http://127.0.0.1:{port}"))
}

/// Headless Chromium through chromedriver at `driver`, with its own
/// `profile` folder, at a device pixel ratio of 1.
pub async fn connect(driver: &str, profile: &str) -> Client {
    connect_scaled(driver, profile, 1).await
}

/// Like [`connect`], at a device pixel ratio of `scale` (HiDPI tests).
pub async fn connect_scaled(driver: &str, profile: &str, scale: u32) -> Client {
    let browser = find_program("VRAMSCOPE_CHROMIUM", &["chromium", "chromium-browser", "google-chrome"]);
    let profile = scratch(profile);
    let capabilities = json!({
        // The console and network errors, for `browser_log`.
        "goog:loggingPrefs": { "browser": "ALL" },
        "goog:chromeOptions": {
            "binary": browser,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1400,1500", format!("--force-device-scale-factor={scale}"),
                format!("--user-data-dir={}", profile.display()),
            ],
        }
    });
    let Value::Object(capabilities) = capabilities else { unreachable!("a JSON object") };
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(driver)
        .await
        .unwrap_or_else(|e| panic!("chromedriver at {driver} could not start Chromium: {e}: {SETUP_HINT}"))
}

/// chromedriver's browser log (console messages, failed requests) since
/// the last call.
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(&self, base: &Url, session: Option<&str>) -> Result<Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &Url) -> (Method, Option<String>) {
        (Method::POST, Some(json!({ "type": "browser" }).to_string()))
    }
}

/// The browser's console messages and failed requests since the last
/// call, as "LEVEL message" lines.
pub async fn browser_log(client: &Client) -> Vec<String> {
    let log = client.issue_cmd(BrowserLog).await.expect("chromedriver's browser log");
    log.as_array()
        .map(|entries| {
            entries
                .iter()
                .map(|e| format!("{} {}", e["level"].as_str().unwrap_or("?"), e["message"].as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default()
}

/// The track's comment markers (`palette::COMMENT`).
pub const COMMENT: [u8; 3] = [130, 80, 223];

/// Pixels of a canvas (backing store) in each colour, and how many are not
/// transparent or white.
pub async fn colours(client: &Client, canvas: &str, want: &[[u8; 3]]) -> Option<(u64, Vec<u64>)> {
    let script = r#"
        const c = document.getElementById(arguments[0]);
        if (!c || c.width === 0 || c.height === 0) return null;
        const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
        const want = arguments[1];
        const counts = new Array(want.length).fill(0);
        let painted = 0;
        for (let i = 0; i < d.length; i += 4) {
            if (d[i + 3] === 0) continue;
            if (d[i] !== 255 || d[i + 1] !== 255 || d[i + 2] !== 255) painted++;
            for (let k = 0; k < want.length; k++) {
                if (Math.abs(d[i] - want[k][0]) <= 2 && Math.abs(d[i + 1] - want[k][1]) <= 2
                    && Math.abs(d[i + 2] - want[k][2]) <= 2 && d[i + 3] === 255) counts[k]++;
            }
        }
        return { painted, counts };
    "#;
    let answer = client.execute(script, vec![json!(canvas), json!(want)]).await.ok()?;
    let counts = answer["counts"].as_array()?.iter().filter_map(Value::as_u64).collect();
    Some((answer["painted"].as_u64()?, counts))
}

pub async fn screenshot(client: &Client, name: &str) {
    let png = client.screenshot().await.expect("screenshot");
    let path = artifacts().join(format!("{name}.png"));
    std::fs::write(&path, png).expect("write the screenshot");
    eprintln!("screenshot: {}", path.display());
}

/// Poll `check` every 200 ms until it answers `Some`; after `secs`, take a
/// screenshot (`failed-….png`) and fail.
pub async fn until<T, F, Fut>(client: &Client, secs: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if Instant::now() > deadline {
            screenshot(client, &format!("failed-{}", what.replace(' ', "-"))).await;
            // Where the page was and what it said: all a CI log keeps of it.
            let at = client.current_url().await.map_or_else(|e| format!("(no url: {e})"), |u| u.to_string());
            let notices = match client.find_all(Locator::Css(".notice")).await {
                Ok(found) => {
                    let mut texts = Vec::new();
                    for n in found {
                        texts.push(n.text().await.unwrap_or_default());
                    }
                    texts.join(" | ")
                }
                Err(e) => format!("(notices unreadable: {e})"),
            };
            panic!("timed out after {secs} s waiting for {what}, at {at}; notices on the page: [{notices}]");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Click `element` (`what`, for the failure) as a user would: a panel
/// above it that fills in as its answer comes (the analyses wait for the
/// page's first timeline) may move it between WebDriver's scroll and its
/// click, which WebDriver reports as an intercepted click. Scroll it to
/// the middle and click again, for up to 10 s; any other error fails.
pub async fn click_when_still(client: &Client, element: &fantoccini::elements::Element, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let script = "arguments[0].scrollIntoView({block: 'center'});";
        let arg = serde_json::to_value(element).expect("element reference");
        client.execute(script, vec![arg]).await.unwrap_or_else(|e| panic!("scroll to {what}: {e}"));
        match element.click().await {
            Ok(()) => return,
            Err(fantoccini::error::CmdError::Standard(e))
                if e.error == fantoccini::error::ErrorStatus::ElementClickIntercepted && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => panic!("click {what}: {e:?}"),
        }
    }
}

pub async fn text_of(client: &Client, css: &str) -> Option<String> {
    client.find(Locator::Css(css)).await.ok()?.text().await.ok()
}

/// Pixels of the timeline canvas by colour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pixels {
    pub total: u64,
    pub non_background: u64,
    pub reserved: u64,
    pub active: u64,
    pub allocated: u64,
    pub oom: u64,
}

/// Wait up to `secs` for the timeline to be drawn (curves on its canvas,
/// nothing loading), saying `what` if it never is; its pixels.
pub async fn timeline_drawn(client: &Client, secs: u64, what: &str) -> Pixels {
    until(client, secs, what, || async {
        let p = canvas_pixels(client).await?;
        (p.allocated > 0 && client.find(Locator::Css("#timeline-loading")).await.is_err()).then_some(p)
    })
    .await
}

pub async fn canvas_pixels(client: &Client) -> Option<Pixels> {
    let script = r#"
        const c = document.getElementById("timeline");
        if (!c) return null;
        const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
        const want = arguments[0];
        const counts = new Array(want.length).fill(0);
        let other = 0;
        for (let i = 0; i < d.length; i += 4) {
            if (d[i] !== 255 || d[i + 1] !== 255 || d[i + 2] !== 255) other++;
            for (let k = 0; k < want.length; k++) {
                if (d[i] === want[k][0] && d[i + 1] === want[k][1] && d[i + 2] === want[k][2]) counts[k]++;
            }
        }
        return { total: d.length / 4, other, counts };
    "#;
    let answer = client.execute(script, vec![json!([RESERVED, ACTIVE, ALLOCATED, OOM])]).await.ok()?;
    let counts: Vec<u64> = answer["counts"].as_array()?.iter().filter_map(Value::as_u64).collect();
    Some(Pixels {
        total: answer["total"].as_u64()?,
        non_background: answer["other"].as_u64()?,
        reserved: *counts.first()?,
        active: *counts.get(1)?,
        allocated: *counts.get(2)?,
        oom: *counts.get(3)?,
    })
}

/// The canvas's box in the viewport: left, top, width, height.
pub async fn canvas_box(client: &Client) -> (f64, f64, f64, f64) {
    let r = client
        .execute(
            "const r = document.getElementById('timeline').getBoundingClientRect(); return [r.left, r.top, r.width, r.height];",
            vec![],
        )
        .await
        .expect("canvas box");
    let v: Vec<f64> = r.as_array().expect("array").iter().filter_map(Value::as_f64).collect();
    (v[0], v[1], v[2], v[3])
}

/// The window the status line shows on the event axis: `rows A to B · …`.
pub fn rows_shown(status: &str) -> Option<(i64, i64)> {
    let rest = status.strip_prefix("rows ")?;
    let (a, rest) = rest.split_once(" to ")?;
    let b = rest.split_whitespace().next()?;
    let num = |s: &str| s.replace(',', "").parse::<i64>().ok();
    Some((num(a)?, num(b)?))
}

/// Wait for the timeline to settle on a window other than `before`.
pub async fn new_window(client: &Client, before: (i64, i64), what: &str) -> (i64, i64) {
    until(client, 30, what, || async {
        if client.find(Locator::Css("#timeline-loading")).await.is_ok() {
            return None;
        }
        let now = rows_shown(&text_of(client, "#timeline-status").await?)?;
        (now != before).then_some(now)
    })
    .await
}

/// Chromium's network emulation (a chromedriver extension command): an
/// upload speed in bytes per second, or `None` to end the emulation.
#[derive(Debug)]
pub struct Throttle {
    pub upload_bytes_per_s: Option<u64>,
}

impl WebDriverCompatibleCommand for Throttle {
    fn endpoint(&self, base: &Url, session: Option<&str>) -> Result<Url, url::ParseError> {
        base.join(&format!("session/{}/chromium/network_conditions", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &Url) -> (Method, Option<String>) {
        match self.upload_bytes_per_s {
            Some(rate) => {
                let conditions = json!({ "network_conditions": {
                    "offline": false, "latency": 0, "download_throughput": 100_000_000, "upload_throughput": rate,
                }});
                (Method::POST, Some(conditions.to_string()))
            }
            None => (Method::DELETE, None),
        }
    }
}

/// Run `steps`, then end the browser session whatever happened: a failed
/// step must not leave Chromium running once chromedriver is killed.
pub async fn closing(client: &Client, steps: impl std::future::Future<Output = ()>) {
    let outcome = AssertUnwindSafe(steps).catch_unwind().await;
    let closed = client.clone().close().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    closed.expect("close the browser");
}

/// Uploads the file at `path` through the API (named after the file) and
/// returns the stored snapshot's id: the browser tests' common first step.
pub async fn upload(url: &str, path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let name = path.file_name().expect("a file name").to_string_lossy().into_owned();
    let answer: Value = reqwest::Client::new()
        .post(format!("{url}/api/v1/snapshots?name={name}"))
        .header("Content-Type", "application/octet-stream")
        .body(bytes)
        .send()
        .await
        .expect("upload")
        .json()
        .await
        .expect("upload answer");
    answer["id"].as_str().unwrap_or_else(|| panic!("upload of {name}: no id in {answer}")).to_owned()
}

/// Uploads `bytes` with the query `query` (labels, tags, a name) and
/// returns the stored snapshot's id, asserting the server created it.
pub async fn upload_with_query(url: &str, bytes: Vec<u8>, query: &str) -> String {
    let response = reqwest::Client::new()
        .post(format!("{url}/api/v1/snapshots?{query}"))
        .header("Content-Type", "application/octet-stream")
        .body(bytes)
        .send()
        .await
        .expect("upload");
    assert_eq!(response.status(), 201, "upload {query}");
    let answer: Value = response.json().await.expect("json");
    answer["id"].as_str().expect("id").to_owned()
}

/// Scrolls the first element matching `css` to the top of the window and
/// lets the page settle (a panel draws when it comes into view).
pub async fn scroll_to(client: &Client, css: &str) {
    let script = "const e = document.querySelector(arguments[0]); if (e) e.scrollIntoView({block: 'start'});";
    client.execute(script, vec![serde_json::json!(css)]).await.expect("scroll");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
}

pub async fn assert_dashboard_built(url: &str) {
    let page = reqwest::get(format!("{url}/")).await.expect("GET /");
    assert_eq!(
        page.status(),
        200,
        "the dashboard is not built into this vramscope binary (scripts/build-frontend must run before cargo \
         test): {SETUP_HINT}"
    );
}

pub async fn press(client: &Client, key: char) {
    let keys =
        KeyActions::new("keyboard".to_owned()).then(KeyAction::Down { value: key }).then(KeyAction::Up { value: key });
    client.perform_actions(keys).await.expect("key press");
}
