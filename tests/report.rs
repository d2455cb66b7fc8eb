//! `vramscope report`: one self-contained HTML file. The real binary writes
//! it for a real snapshot; headless Chromium opens it from disk (`file:`)
//! with the network off and draws the timeline (pixels) from the inlined
//! snapshot, in a Web Worker, with the post-mortem findings as text. Bad
//! input is refused with exit code 2 and nothing written.
//!
//! Needs Chromium, chromedriver and the dashboard built into the binary,
//! like `tests/browser.rs`; missing, they fail loudly.

use crate::common::browser::*;

use std::process::Command;

use axum::http::Method;
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, Locator};
use url::Url;

/// Chromium's network emulation, offline.
#[derive(Debug)]
struct Offline;

impl WebDriverCompatibleCommand for Offline {
    fn endpoint(&self, base: &Url, session: Option<&str>) -> Result<Url, url::ParseError> {
        base.join(&format!("session/{}/chromium/network_conditions", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &Url) -> (Method, Option<String>) {
        let conditions = serde_json::json!({ "network_conditions": {
            "offline": true, "latency": 0, "download_throughput": 0, "upload_throughput": 0,
        }});
        (Method::POST, Some(conditions.to_string()))
    }
}

fn vramscope(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

/// `vramscope report` on the corpus's `oom_leak.pickle`, written into `dir`
/// as `oom_leak.html`, with the charts of `charts` (`("--svg", path)`,
/// `("--png", path)`); returns the HTML file's path once it succeeded.
fn report_oom_leak(dir: &std::path::Path, charts: &[(&str, &std::path::Path)]) -> std::path::PathBuf {
    let html = dir.join("oom_leak.html");
    let fixture = crate::common::fixture_corpus().join("oom_leak.pickle");
    let mut args = vec!["report".to_owned(), fixture.to_string_lossy().into_owned(), "-o".to_owned()];
    args.push(html.to_string_lossy().into_owned());
    for (flag, path) in charts {
        args.extend([(*flag).to_owned(), path.to_string_lossy().into_owned()]);
    }
    let out = vramscope(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    html
}

#[test]
fn report_refuses_what_is_no_snapshot() {
    let dir = scratch("report-bad");
    let bad = dir.join("notes.pickle");
    std::fs::write(&bad, b"\x80\x04K*.").expect("write");
    let out_path = dir.join("notes.html");
    let out = vramscope(&["report", &bad.to_string_lossy(), "-o", &out_path.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not a PyTorch memory snapshot") && stderr.contains("notes.pickle"), "{stderr}");
    assert!(!out_path.exists(), "nothing is written for bad input");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_opens_from_disk_with_the_network_off() {
    let dir = scratch("report");
    let svg = dir.join("oom_leak.svg");
    let html = report_oom_leak(&dir, &[("--svg", &svg)]);
    // The chart drawn natively by the dashboard's plot code: the curves in
    // their colours and the OOM marker's label.
    let chart = std::fs::read_to_string(&svg).expect("the SVG");
    assert!(chart.starts_with("<svg") && chart.contains("</svg>"), "{}", &chart[..chart.len().min(200)]);
    for (what, [r, g, b]) in [("reserved", RESERVED), ("allocated", ALLOCATED), ("oom", OOM)] {
        let colour = format!("#{r:02X}{g:02X}{b:02X}");
        assert!(chart.to_uppercase().matches(&colour).count() >= 2, "{what} ({colour}) is drawn");
    }
    assert!(chart.contains(">\nOOM\n</text>"), "the OOM marker is labelled");
    let page = std::fs::read_to_string(&html).expect("the report");
    // Self-contained: nothing fetched from a server or the internet.
    assert!(!page.contains("src=\"http") && !page.contains("href=\"http") && !page.contains("/static/"));
    assert!(page.contains("out of memory") || page.contains("OOM"), "findings are in the page");

    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "report-profile").await;
    closing(&client, open_report(&client, &html)).await;
}

async fn open_report(client: &Client, html: &std::path::Path) {
    let client = client.clone();
    client.issue_cmd(Offline).await.expect("network off");
    let url = Url::from_file_path(html).expect("file URL");
    client.goto(url.as_str()).await.expect("open the report");
    let summary = until(&client, 60, "the report's statistics", || text_of(&client, "#stats-summary")).await;
    assert!(summary.contains("OOMS\n1") || summary.contains("OOMs\n1"), "{summary}");
    let pixels = timeline_drawn(&client, 60, "the report's timeline drawn").await;
    screenshot(&client, "report-1-timeline").await;
    assert!(pixels.reserved >= 400 && pixels.allocated >= 400 && pixels.oom >= 300, "{pixels:?}");
    let findings = text_of(&client, "#report-findings").await.expect("findings");
    assert!(findings.contains("oom_leak.pickle"), "{findings}");
    assert!(findings.to_lowercase().contains("oom"), "{findings}");
}

/// A decoded PNG: width, height and RGB pixels.
struct Image {
    width: u32,
    height: u32,
    rgb: Vec<[u8; 3]>,
}

fn decode_png(bytes: &[u8]) -> Image {
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes)).read_info().expect("a PNG header");
    let mut buffer = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut buffer).expect("a PNG frame");
    assert_eq!((frame.color_type, frame.bit_depth), (png::ColorType::Rgb, png::BitDepth::Eight));
    let rgb = buffer[..frame.buffer_size()].chunks_exact(3).map(|p| [p[0], p[1], p[2]]).collect();
    Image { width: frame.width, height: frame.height, rgb }
}

/// The main chart of `oom_leak` as a PNG: the curves in their colours, the
/// OOM marker, and the axis labels' glyphs (drawn with the embedded font,
/// anti-aliased, so in many shades).
fn assert_oom_leak_chart(image: &Image) {
    assert_eq!((image.width, image.height), (1200, 480));
    let count = |colour: [u8; 3]| image.rgb.iter().filter(|p| **p == colour).count();
    let (reserved, allocated, oom) = (count(RESERVED), count(ALLOCATED), count(OOM));
    assert!(
        reserved >= 400 && allocated >= 2000 && oom >= 200,
        "reserved {reserved}, allocated {allocated}, oom {oom}"
    );
    // Left of the plot area there is nothing but the byte labels' text.
    let labels: Vec<[u8; 3]> = (0..image.height as usize)
        .flat_map(|y| (0..60).map(move |x| (x, y)))
        .map(|(x, y)| image.rgb[y * image.width as usize + x])
        .filter(|p| *p != [255, 255, 255])
        .collect();
    let shades: std::collections::HashSet<[u8; 3]> = labels.iter().copied().collect();
    assert!(labels.len() >= 300, "the byte labels are drawn: {} text pixels", labels.len());
    assert!(shades.len() >= 8, "glyphs are anti-aliased: {} shades", shades.len());
}

#[test]
fn png_chart_is_drawn_with_the_embedded_font() {
    let dir = scratch("report-png");
    let png_path = dir.join("oom_leak.png");
    let html = report_oom_leak(&dir, &[("--png", &png_path)]);
    assert!(html.exists(), "the HTML report is still written");
    assert_oom_leak_chart(&decode_png(&std::fs::read(&png_path).expect("the PNG")));
}

/// The dashboard's "export report": the server answers the same page and
/// charts for a stored snapshot, from the same code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_exports_the_same_report() {
    let dir = scratch("report-server");
    let server = crate::common::server::TestServer::start_in(&dir, &[]);
    let url = server.url.clone();
    let client = reqwest::Client::new();
    let fixture = crate::common::fixture_corpus().join("oom_leak.pickle");
    let bytes = std::fs::read(&fixture).expect("fixture");
    let id = upload(&url, &fixture).await;
    let get = |what: &str| client.get(format!("{url}/api/v1/snapshots/{id}/{what}")).send();

    let response = get("report.html").await.expect("report");
    assert_eq!(response.status(), 200);
    let header = |r: &reqwest::Response, name: &str| {
        r.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
    };
    assert_eq!(header(&response, "content-type"), "text/html; charset=utf-8");
    assert_eq!(header(&response, "content-disposition"), "attachment; filename=\"oom_leak.html\"");
    let page = response.text().await.expect("page");
    // The report of `vramscope report`: dashboard and snapshot inlined, findings as text.
    assert!(!page.contains("src=\"http") && !page.contains("href=\"http") && !page.contains("/static/"));
    assert!(page.contains("id=\"vramscope-wasm\"") && page.contains("data-name=\"oom_leak.pickle\""));
    use base64::Engine;
    let inlined = base64::engine::general_purpose::STANDARD.encode(&bytes);
    assert!(page.contains(&inlined), "the snapshot's bytes are inlined");
    assert!(page.contains("Post-mortem of oom_leak.pickle") && page.contains("OOM"), "findings in the page");
    // Opened from disk with the network off, it draws like the CLI's.
    let html = dir.join("exported.html");
    std::fs::write(&html, &page).expect("save the export");
    let (_driver, driver_url) = start_chromedriver();
    let browser = connect(&driver_url, "report-export-profile").await;
    closing(&browser, open_report(&browser, &html)).await;

    let response = get("chart.png").await.expect("png");
    assert_eq!((response.status().as_u16(), header(&response, "content-type")), (200, "image/png".to_owned()));
    assert_oom_leak_chart(&decode_png(&response.bytes().await.expect("bytes")));
    let response = get("chart.svg").await.expect("svg");
    assert_eq!(header(&response, "content-type"), "image/svg+xml");
    let svg = response.text().await.expect("svg");
    assert!(svg.starts_with("<svg") && svg.contains(">\nOOM\n</text>"), "{}", &svg[..svg.len().min(200)]);
    let missing = client.get(format!("{url}/api/v1/snapshots/nope/report.html")).send().await.expect("404");
    assert_eq!(missing.status(), 404);
    drop(server);
}

/// The offline report showed the server's parts (Library, Jobs, API token,
/// an empty compare picker, a comments notice), logged two CORS errors
/// (`file:///api/v1/snapshots`) and embedded the absolute path of the file
/// given on the command line. It now shows only what works offline, asks
/// nothing of any network, and names the file by its base name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_offline_report_shows_only_what_works_offline() {
    let dir = scratch("report-offline");
    let input = dir.join("inputs-here").join("oom_leak.pickle");
    std::fs::create_dir_all(input.parent().expect("a folder")).expect("mkdir");
    std::fs::copy(crate::common::fixture_corpus().join("oom_leak.pickle"), &input).expect("copy the fixture");
    let html = dir.join("oom_leak.html");
    let out = vramscope(&["report", &input.to_string_lossy(), "-o", &html.to_string_lossy()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page = std::fs::read_to_string(&html).expect("the report");
    let folder = input.parent().expect("a folder").to_string_lossy().into_owned();
    assert!(!page.contains(&folder), "the input's folder ({folder}) is in the page");
    assert!(!page.contains("inputs-here"), "the input's folder is in the page");
    assert!(page.contains("oom_leak.pickle"), "the file is named by its base name");

    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "report-offline-profile").await;
    closing(&client, async {
        let url = Url::from_file_path(&html).expect("file URL");
        client.goto(url.as_str()).await.expect("open the report");
        timeline_drawn(&client, 60, "the report's timeline drawn").await;
        // The analysis panels have loaded (the compare picker lived there).
        until(&client, 60, "the OOM post-mortem", || text_of(&client, "#oom-panel")).await;
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        screenshot(&client, "report-offline").await;
        let body = text_of(&client, "body").await.expect("the page");
        for server_only in ["Library", "Jobs", "API token", "Compare with another snapshot", "Comments and pins"] {
            assert!(!body.contains(server_only), "{server_only:?} shown offline");
        }
        for css in ["#compare-picker", "#review-local", "#review", ".token", ".crumbs"] {
            assert!(client.find(Locator::Css(css)).await.is_err(), "{css} shown offline");
        }
        let requests = client
            .execute(
                "return performance.getEntriesByType('resource').map((e) => e.name)\
                 .filter((n) => !n.startsWith('blob:') && !n.startsWith('data:'));",
                vec![],
            )
            .await
            .expect("resource timing");
        assert_eq!(requests, serde_json::json!([]), "requests from the report");
        let errors: Vec<String> = browser_log(&client)
            .await
            .into_iter()
            .filter(|line| line.starts_with("SEVERE") || line.contains("CORS") || line.contains("file:///api"))
            .collect();
        assert!(errors.is_empty(), "console errors: {errors:#?}");
    })
    .await;
}

/// The `--svg`/`--png` chart had no title, no axis titles and no legend: an
/// image file has no page around it to say what its colours and lines are.
#[test]
fn regression_the_chart_file_says_what_it_draws() {
    let dir = scratch("report-chart-legend");
    let (svg_path, png_path) = (dir.join("oom_leak.svg"), dir.join("oom_leak.png"));
    report_oom_leak(&dir, &[("--svg", &svg_path), ("--png", &png_path)]);
    let svg = std::fs::read_to_string(&svg_path).expect("the SVG");
    let texts: Vec<&str> = svg.split("<text").filter_map(|t| t.split('>').nth(1)?.split("</text").next()).collect();
    let has = |want: &str| texts.iter().any(|t| t.trim() == want);
    assert!(has("oom_leak.pickle: GPU memory of device 0 over its trace"), "the title: {texts:?}");
    assert!(has("memory (bytes, 1 GiB = 1024³)"), "the y axis' title: {texts:?}");
    assert!(has("x: trace events, in order"), "the x axis' title: {texts:?}");
    for label in
        ["reserved (segments from CUDA)", "active (allocated + pending free)", "allocated (requested bytes)", "OOM"]
    {
        assert!(has(label), "legend entry {label:?}: {texts:?}");
    }
    // Markers the chart does not have are not in its legend.
    assert!(!has("trace start (earlier history lost)"), "oom_leak's trace starts empty: {texts:?}");
    assert!(texts.iter().any(|t| t.contains("before the trace or never freed")), "the bars' entry: {texts:?}");
    // The PNG: the title's glyphs above the plot, the legend's swatches under it.
    let image = decode_png(&std::fs::read(&png_path).expect("the PNG"));
    let row_pixels = |ys: std::ops::Range<u32>, want: &dyn Fn([u8; 3]) -> bool| {
        ys.flat_map(|y| (0..image.width).map(move |x| (x, y)))
            .filter(|&(x, y)| want(image.rgb[(y * image.width + x) as usize]))
            .count()
    };
    let dark = |p: [u8; 3]| p.iter().all(|&c| c < 100);
    assert!(row_pixels(0..24, &dark) > 200, "the title is drawn");
    let (h, legend) = (image.height, |p: [u8; 3]| p == RESERVED || p == ALLOCATED || p == OOM);
    assert!(row_pixels(h - 40..h, &legend) > 20, "the legend's swatches are drawn");
}
