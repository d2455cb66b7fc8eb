//! `vramscope report`: one self-contained HTML file. The real binary writes
//! it for a real snapshot; headless Chromium opens it from disk (`file:`)
//! with the network off and draws the timeline (pixels) from the inlined
//! snapshot, in a Web Worker, with the post-mortem findings as text. Bad
//! input is refused with exit code 2 and nothing written.
//!
//! Needs Chromium, chromedriver and the dashboard built into the binary,
//! like `tests/browser.rs`; missing, they fail loudly.

#[path = "common/browser.rs"]
mod browser;
mod common;

use browser::*;

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
    let html = dir.join("oom_leak.html");
    let fixture = common::fixture_corpus().join("oom_leak.pickle");
    let svg = dir.join("oom_leak.svg");
    let out = vramscope(&[
        "report",
        &fixture.to_string_lossy(),
        "-o",
        &html.to_string_lossy(),
        "--svg",
        &svg.to_string_lossy(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
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
    let pixels = until(&client, 60, "the report's timeline drawn", || async {
        let p = canvas_pixels(&client).await?;
        (p.allocated > 0 && client.find(Locator::Css("#timeline-loading")).await.is_err()).then_some(p)
    })
    .await;
    screenshot(&client, "report-1-timeline").await;
    assert!(pixels.reserved >= 400 && pixels.allocated >= 400 && pixels.oom >= 300, "{pixels:?}");
    let findings = text_of(&client, "#report-findings").await.expect("findings");
    assert!(findings.contains("oom_leak.pickle"), "{findings}");
    assert!(findings.to_lowercase().contains("oom"), "{findings}");
}
