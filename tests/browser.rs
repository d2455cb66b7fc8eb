//! The dashboard in a real browser: headless Chromium, driven over
//! WebDriver (chromedriver) by fantoccini, against a real `vramscope serve`
//! on a loopback port. It does what a person does: drops a file that is no
//! snapshot and reads why, uploads a snapshot through the file picker on a
//! throttled link (progress bar), opens it, reads the timeline's pixels,
//! points at an allocation and reads its stack, zooms (keys, wheel), pans
//! (drag), switches the axis, then renames, tags, filters and deletes; and,
//! against a server that requires tokens, enters one in the page.
//!
//! Needs Chromium and chromedriver (Debian: `chromium`, `chromium-driver`)
//! and the dashboard built into the binary (`scripts/build-frontend` before
//! the tests are compiled); `./scripts/test` provides all three. Missing,
//! they fail this test loudly: it never skips. Screenshots of each step go
//! to `target/browser-artifacts/`.

use crate::common::browser::*;

use std::process::{Command, Stdio};
use std::time::Duration;

use fantoccini::actions::{InputSource, MouseActions, PointerAction, WheelAction, WheelActions};
use fantoccini::{Client, Locator};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_open_and_explore_a_snapshot_in_chromium() {
    let (_server, url) = start_server(&scratch("data"), &[]);
    assert_dashboard_built(&url).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "profile").await;
    closing(&client, explore(&client, &url)).await;
}

/// What a person does with the dashboard, step by step.
async fn explore(client: &Client, url: &str) {
    let client = client.clone();
    // The library, empty.
    client.goto(&format!("{url}/")).await.expect("open the library");
    client
        .wait()
        .at_most(Duration::from_secs(30))
        .for_element(Locator::Css(".dropzone"))
        .await
        .expect("the app mounts");
    screenshot(&client, "1-library-empty").await;

    // A file dropped on the page that is no snapshot: the server's reason
    // shows. (WebDriver cannot drag from the desktop; the drop event carries
    // a file made in the page, as the browser's own would.)
    let drop = r#"
        const files = new DataTransfer();
        files.items.add(new File([new Uint8Array([0x80, 4, 0x4b, 0x2a, 0x2e])], "dropped.pickle"));
        document.querySelector(".dropzone").dispatchEvent(
            new DragEvent("drop", { dataTransfer: files, bubbles: true, cancelable: true }));
    "#;
    client.execute(drop, vec![]).await.expect("drop a file");
    let refused = until(&client, 30, "the refusal", || text_of(&client, ".notice.error")).await;
    assert!(
        refused.contains("uploading dropped.pickle") && refused.contains("not a PyTorch memory snapshot"),
        "{refused}"
    );

    // Upload through the page's file input, as the file picker does, on a
    // slow link so the progress bar shows.
    client.issue_cmd(Throttle { upload_bytes_per_s: Some(100_000) }).await.expect("throttle the upload");
    let fixture = crate::common::fixture_corpus().join("oom_leak.pickle");
    let input = client.find(Locator::Css("#file-input")).await.expect("file input");
    input.send_keys(&fixture.to_string_lossy()).await.expect("choose the file");
    let progress = until(&client, 20, "the upload's progress", || async {
        let text = text_of(&client, ".progress").await?;
        Some(text).filter(|t| t.contains("oom_leak.pickle: ") && !t.contains(": 0%"))
    })
    .await;
    assert!(progress.contains("% of 570 KiB"), "{progress}");
    screenshot(&client, "2-upload-progress").await;
    let link = client
        .wait()
        .at_most(Duration::from_secs(60))
        .for_element(Locator::LinkText("oom_leak.pickle"))
        .await
        .expect("the upload is listed");
    client.issue_cmd(Throttle { upload_bytes_per_s: None }).await.expect("unthrottle");
    let notice = until(&client, 10, "the upload notice", || text_of(&client, ".notice")).await;
    assert!(notice.contains("uploaded oom_leak.pickle"), "{notice}");
    screenshot(&client, "2-library-uploaded").await;

    // Open it: statistics, then the timeline drawn.
    link.click().await.expect("open the snapshot");
    let summary = until(&client, 30, "the statistics", || text_of(&client, "#stats-summary")).await;
    assert!(summary.contains("OOMS\n1") || summary.contains("OOMs\n1"), "{summary}");
    assert!(client.current_url().await.expect("url").path().starts_with("/snapshots/"));
    let pixels = timeline_drawn(&client, 30, "the timeline drawn").await;
    screenshot(&client, "3-timeline").await;
    eprintln!("{pixels:?}");
    // The curves and the OOM marker, in their own colours, and bars under them.
    assert!(pixels.reserved >= 400, "reserved line: {pixels:?}");
    assert!(pixels.allocated >= 400, "allocated line: {pixels:?}");
    assert!(pixels.active >= 5, "active line (mostly under allocated): {pixels:?}");
    assert!(pixels.oom >= 300, "the OOM marker: {pixels:?}");
    assert!(pixels.non_background > pixels.total / 10, "bars and bands fill the plot: {pixels:?}");
    let status = text_of(&client, "#timeline-status").await.expect("status");
    assert_eq!(rows_shown(&status), Some((0, 6680)), "{status}");

    // Point at allocations, low in the plot where the bars are stacked,
    // until one with recorded frames shows in the details panel (many of
    // this file's allocations have none: the page then says so).
    let (left, top, width, height) = canvas_box(&client).await;
    let mut shown = None;
    'search: for fy in [0.88, 0.84, 0.8, 0.75, 0.7] {
        for fx in [0.3, 0.5, 0.7, 0.4, 0.6, 0.2, 0.8, 0.9] {
            let (x, y) = (left + width * fx, top + height * fy);
            let mouse = MouseActions::new("mouse".to_owned()).then(PointerAction::MoveTo {
                duration: Some(Duration::from_millis(50)),
                x,
                y,
            });
            client.perform_actions(mouse).await.expect("move the mouse");
            let Some(details) = text_of(&client, "#details dl").await else { continue };
            let stack = until(&client, 20, "the allocation's stack", || async {
                if client.find(Locator::Css("#no-frames")).await.is_ok() {
                    return Some(None);
                }
                text_of(&client, "#stack").await.map(Some)
            })
            .await;
            if let Some(stack) = stack {
                shown = Some((details, stack));
                break 'search;
            }
        }
    }
    let (details, stack) = shown.expect("pointing at the stacked bars shows an allocation with frames");
    assert!(details.contains("bytes") && details.contains("0x"), "{details}");
    assert!(stack.contains("train.py:"), "the user's frames are shown: {stack}");
    let folded = client.find_all(Locator::Css("#stack details.torch-frames")).await.expect("query");
    if let Some(group) = folded.first() {
        // PyTorch's frames are folded; a click unfolds them.
        assert!(group.attr("open").await.expect("attr").is_none());
        group.find(Locator::Css("summary")).await.expect("summary").click().await.expect("unfold");
        assert!(group.attr("open").await.expect("attr").is_some());
    }
    screenshot(&client, "4-hover-details").await;

    // Zoom with the keyboard and the wheel, pan by dragging: each settles on
    // a new window fetched from the server.
    let (row0, row1) = (0, 6680);
    press(&client, '+').await;
    let zoomed = new_window(&client, (row0, row1), "a keyboard zoom").await;
    assert!(zoomed.1 - zoomed.0 < (row1 - row0) * 3 / 4, "{zoomed:?}");
    let mut wheel = WheelActions::new("wheel".to_owned());
    wheel.push(WheelAction::Scroll {
        duration: None,
        x: (left + width * 0.6) as i64,
        y: (top + height * 0.5) as i64,
        delta_x: 0,
        delta_y: -300,
    });
    client.perform_actions(wheel).await.expect("wheel");
    let wheeled = new_window(&client, zoomed, "a wheel zoom").await;
    assert!(wheeled.1 - wheeled.0 < zoomed.1 - zoomed.0, "{wheeled:?} after {zoomed:?}");
    let drag = MouseActions::new("drag".to_owned())
        .then(PointerAction::MoveTo { duration: None, x: left + width * 0.5, y: top + height * 0.3 })
        .then(PointerAction::Down { button: fantoccini::actions::MOUSE_BUTTON_LEFT })
        .then(PointerAction::MoveBy { duration: Some(Duration::from_millis(200)), x: 150.0, y: 0.0 })
        .then(PointerAction::Up { button: fantoccini::actions::MOUSE_BUTTON_LEFT });
    client.perform_actions(drag).await.expect("drag");
    let panned = new_window(&client, wheeled, "a drag").await;
    assert!(panned.0 < wheeled.0, "dragging right shows earlier rows: {panned:?} after {wheeled:?}");
    assert_eq!(panned.1 - panned.0, wheeled.1 - wheeled.0, "a pan keeps the width");
    let pixels = canvas_pixels(&client).await.expect("pixels");
    assert!(pixels.allocated >= 200 && pixels.non_background > pixels.total / 10, "zoomed: {pixels:?}");
    screenshot(&client, "5-zoomed").await;

    // Wall time: the whole trace again, labelled in seconds.
    client.find(Locator::Css("#axis-time")).await.expect("time button").click().await.expect("switch axis");
    let status = until(&client, 30, "the time axis", || async {
        let s = text_of(&client, "#timeline-status").await?;
        (s.starts_with('+') && client.find(Locator::Css("#timeline-loading")).await.is_err()).then_some(s)
    })
    .await;
    assert!(status.contains(" s ·") || status.contains(" ms ·"), "{status}");
    let pixels = canvas_pixels(&client).await.expect("pixels");
    assert!(pixels.allocated >= 100 && pixels.oom >= 300, "time axis: {pixels:?}");
    screenshot(&client, "6-time-axis").await;

    // Back to the library through the page's own link; rename, tag, filter
    // and delete there.
    client.find(Locator::LinkText("Library")).await.expect("crumb").click().await.expect("back");
    client
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::LinkText("oom_leak.pickle"))
        .await
        .expect("listed");
    client.find(Locator::Css("button[title=Rename]")).await.expect("rename button").click().await.expect("rename");
    let field = client.find(Locator::Css("input.rename")).await.expect("name field");
    field.send_keys(&format!("{}leaky run{ENTER}", BACKSPACE.repeat(40))).await.expect("type a name");
    client.wait().at_most(Duration::from_secs(20)).for_element(Locator::LinkText("leaky run")).await.expect("renamed");
    let tag = client.find(Locator::Css("input.add-tag")).await.expect("tag field");
    tag.send_keys(&format!("nightly{ENTER}")).await.expect("type a tag");
    until(&client, 20, "the new tag", || async { text_of(&client, "td.tags").await.filter(|t| t.contains("nightly")) })
        .await;
    let tag_filter = client.find(Locator::Css("#filter-tag")).await.expect("tag filter");
    tag_filter.send_keys("nightly").await.expect("filter");
    tokio::time::sleep(Duration::from_millis(800)).await;
    client.find(Locator::LinkText("leaky run")).await.expect("a matching tag keeps the row");
    tag_filter.send_keys("-none").await.expect("filter");
    let empty = until(&client, 20, "an empty result", || text_of(&client, "#empty")).await;
    assert!(empty.contains("No snapshot matches"), "{empty}");
    tag_filter.send_keys(&BACKSPACE.repeat(20)).await.expect("clear the filter");
    client.wait().at_most(Duration::from_secs(20)).for_element(Locator::LinkText("leaky run")).await.expect("listed");
    screenshot(&client, "7-library-renamed-tagged").await;
    client.find(Locator::Css("button.danger")).await.expect("delete button").click().await.expect("delete");
    client.accept_alert().await.expect("confirm the deletion");
    let empty = until(&client, 20, "the deletion", || text_of(&client, "#empty")).await;
    assert!(empty.contains("No snapshots yet"), "{empty}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_requires_tokens_gets_one_from_the_page() {
    let data = scratch("tokens");
    let created = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["token", "create", "--role", "viewer", "--name", "browser", "--data-dir"])
        .arg(&data)
        .stderr(Stdio::inherit())
        .output()
        .expect("vramscope token create");
    assert!(created.status.success());
    let token = String::from_utf8(created.stdout).expect("utf-8").trim().to_owned();
    assert!(token.starts_with("vs_"), "{token}");
    let uploader = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["token", "create", "--role", "uploader", "--name", "ci", "--data-dir"])
        .arg(&data)
        .output()
        .expect("vramscope token create");
    let uploader = String::from_utf8(uploader.stdout).expect("utf-8").trim().to_owned();
    let (_server, url) = start_server(&data, &[("VRAMSCOPE_REQUIRE_TOKENS", "true")]);
    assert_dashboard_built(&url).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "profile-tokens").await;
    closing(&client, async {
        ask_for_a_token(&client, &url, &token).await;
        download_with_a_token(&client, &url, &uploader).await;
    })
    .await;
}

/// Regression: in token mode "download" and "export report" were plain
/// links, which a browser follows without the token: 401. The page now
/// follows a signed link that works without one, for a few minutes.
async fn download_with_a_token(client: &Client, url: &str, uploader: &str) {
    let bytes = std::fs::read(crate::common::fixture_corpus().join("oom_leak.pickle")).expect("fixture");
    let answer: serde_json::Value = reqwest::Client::new()
        .post(format!("{url}/api/v1/snapshots?name=oom_leak.pickle"))
        .bearer_auth(uploader)
        .header("Content-Type", "application/octet-stream")
        .body(bytes.clone())
        .send()
        .await
        .expect("upload")
        .json()
        .await
        .expect("answer");
    let id = answer["id"].as_str().expect("id");
    client.goto(&format!("{url}/snapshots/{id}")).await.expect("open the snapshot");
    let link = client.wait().at_most(Duration::from_secs(30)).for_element(Locator::Css("#download")).await;
    let plain = link.expect("download link").attr("href").await.expect("href").expect("an href");
    let status = reqwest::get(format!("{url}{plain}")).await.expect("get").status();
    assert_eq!(status, 401, "the plain link needs a token");
    client.find(Locator::Css("#download")).await.expect("link").click().await.expect("click download");
    let signed = until(client, 30, "the signed link", || async {
        client.find(Locator::Css("#download")).await.ok()?.attr("data-signed").await.ok()?
    })
    .await;
    assert!(signed.contains("sig="), "{signed}");
    screenshot(client, "8b-token-download").await;
    let file = reqwest::get(format!("{url}{signed}")).await.expect("get the signed link");
    assert_eq!(file.status(), 200);
    assert_eq!(file.bytes().await.expect("bytes").as_ref(), bytes.as_slice(), "the file, without a token");
    let other = signed.replacen(id, "not-this-one", 1);
    assert_eq!(reqwest::get(format!("{url}{other}")).await.expect("get").status(), 401, "bound to its path");
}

/// Without a token the page says what is missing; with one, it works.
async fn ask_for_a_token(client: &Client, url: &str, token: &str) {
    let client = client.clone();
    // Without a token the page says what is missing and where to put it.
    client.goto(&format!("{url}/")).await.expect("open the library");
    let notice = until(&client, 30, "the missing-token notice", || text_of(&client, ".notice.error")).await;
    assert!(notice.contains("API token is required") && notice.contains("top right"), "{notice}");
    screenshot(&client, "8-token-required").await;
    client.find(Locator::Css(".token summary")).await.expect("token menu").click().await.expect("open");
    let field = client.find(Locator::Css(".token input")).await.expect("token field");
    field.send_keys(&format!("{token}{ENTER}")).await.expect("type the token");
    // The page reloads and asks again, with the token.
    let empty = until(&client, 30, "the library with the token", || text_of(&client, "#empty")).await;
    assert!(empty.contains("No snapshots yet"), "{empty}");
    assert!(client.find(Locator::Css(".notice.error")).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zooming_on_memory_lists_smaller_allocations() {
    let (_server, url) = start_server(&scratch("memory-zoom"), &[]);
    assert_dashboard_built(&url).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "profile-memory-zoom").await;
    closing(&client, zoom_on_memory(&client, &url)).await;
}

/// Zooming the byte axis lists smaller allocations; zoomed in on both axes,
/// the page lists every allocation alive in its window (issue 4: the
/// deepest zoom listed only the largest, and an allocation under one pixel
/// row could never appear).
async fn zoom_on_memory(client: &Client, url: &str) {
    let client = client.clone();
    let path = crate::common::fixture_corpus().join("mlp_train_all.pickle");
    let id = upload(url, &path).await;
    client.goto(&format!("{url}/snapshots/{id}")).await.expect("open the snapshot");
    let settled = || async {
        if client.find(Locator::Css("#timeline-loading")).await.is_ok() {
            return None;
        }
        text_of(&client, "#timeline-status").await.filter(|s| allocations_listed(s).is_some())
    };
    let before = until(&client, 60, "the timeline drawn", settled).await;
    let whole = rows_shown(&before).expect("event axis");
    assert!(!before.contains("memory"), "{before}");
    let (n0, _) = allocations_listed(&before).expect("count");

    // Fourteen steps in on memory (keys, 1.5x each): the status says so,
    // and more allocations are listed, down to a lower threshold (this
    // file's sizes leave a gap: the first few steps list the same ones).
    for _ in 0..14 {
        press(&client, ']').await;
    }
    let zoomed = until(&client, 30, "a memory zoom", || async {
        settled().await.filter(|s| s.contains(" · memory ") && allocations_listed(s) != Some((n0, false)))
    })
    .await;
    eprintln!("{before}\n{zoomed}");
    assert_eq!(rows_shown(&zoomed), Some(whole), "the x window stays: {zoomed}");
    let (n1, _) = allocations_listed(&zoomed).expect("count");
    assert!(n1 > n0, "more allocations appear: {before} -> {zoomed}");
    assert!(
        client.find(Locator::Css("#y-reset")).await.expect("reset").attr("disabled").await.expect("attr").is_none()
    );
    screenshot(&client, "9-memory-zoom").await;

    // The link keeps the memory zoom: opened again, the page shows the
    // same band and lists the same allocations.
    let link = client.current_url().await.expect("the page's URL");
    assert!(link.as_str().contains("mem="), "{link}");
    client.goto(link.as_str()).await.expect("open the link");
    let band = |s: &str| s.split(" · ").find(|p| p.starts_with("memory ")).map(str::to_owned);
    let reopened =
        until(&client, 60, "the linked memory zoom", || async { settled().await.filter(|s| band(s).is_some()) }).await;
    assert_eq!(band(&reopened), band(&zoomed), "{reopened}");
    assert_eq!(allocations_listed(&reopened), allocations_listed(&zoomed), "{reopened}");

    // Down to single events in time and to the narrowest byte span: every
    // allocation alive there is listed, as many as the API finds at a
    // one-byte threshold.
    for _ in 0..30 {
        press(&client, '+').await;
    }
    for _ in 0..40 {
        press(&client, ']').await;
    }
    let deepest = until(&client, 30, "the deepest zoom", || async {
        settled().await.filter(|s| s.contains("≥ 1 B shown") && rows_shown(s).is_some_and(|(a, b)| b - a <= 8))
    })
    .await;
    eprintln!("{deepest}");
    let (a, b) = rows_shown(&deepest).expect("rows");
    let (n, more) = allocations_listed(&deepest).expect("count");
    assert!(!more, "{deepest}");
    let api: serde_json::Value = reqwest::get(format!(
        "{url}/api/v1/snapshots/{id}/timeline?axis=event&start={a}&end={b}&px=100&y_span=1&py=1&max_allocations=5000"
    ))
    .await
    .expect("GET")
    .json()
    .await
    .expect("json");
    assert_eq!(api["more_allocations"], false);
    assert_eq!(Some(n), api["allocations"].as_array().map(|a| a.len() as u64), "{deepest}");
    screenshot(&client, "10-memory-zoom-deepest").await;

    // The button gives the whole byte axis back.
    client.find(Locator::Css("#y-reset")).await.expect("reset").click().await.expect("reset memory");
    let back = until(&client, 30, "the whole memory axis", || async {
        settled().await.filter(|s| !s.contains(" · memory "))
    })
    .await;
    assert_eq!(rows_shown(&back), Some((a, b)), "{back}");
}

/// The allocations the status line lists, and whether it says there are
/// more: `all N allocations ≥ X shown` or `largest N allocations shown …`.
fn allocations_listed(status: &str) -> Option<(u64, bool)> {
    let (more, rest) = match status.split_once("all ") {
        Some((_, rest)) => (false, rest),
        None => (true, status.split_once("largest ")?.1),
    };
    let n = rest.split_whitespace().next()?.parse().ok()?;
    Some((n, more))
}

#[test]
fn reads_the_status_line() {
    assert_eq!(allocations_listed("rows 0 to 9 · all 12 allocations ≥ 1 B shown"), Some((12, false)));
    assert_eq!(
        allocations_listed("rows 0 to 9 · largest 5000 allocations shown (down to 2 KiB; …)"),
        Some((5000, true))
    );
    assert_eq!(allocations_listed("rows 0 to 9 · "), None);
    assert_eq!(rows_shown("rows 1,000 to 6,680 · 1254 allocations"), Some((1000, 6680)));
    assert_eq!(rows_shown("+0 µs to +5.32 s · 3 allocations"), None);
}

/// A snapshot page's first requests go out with the page, before its
/// WebAssembly is ready, and the app takes their answers rather than
/// asking again: the record, the statistics and the timeline's first
/// window are each asked once, the window at the width the canvas has.
/// The dashboard's files come from the browser's cache on the second
/// visit, without a request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_page_s_first_requests_go_out_with_the_page() {
    let (_server, url) = start_server(&scratch("early"), &[]);
    assert_dashboard_built(&url).await;
    let id = upload(&url, &crate::common::fixture_corpus().join("oom_leak.pickle")).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "profile-early").await;
    closing(&client, async {
        for visit in ["first", "second"] {
            client.goto(&format!("{url}/snapshots/{id}")).await.expect("open the snapshot");
            timeline_drawn(&client, 30, "the timeline drawn").await;
            let seen = client
                .execute(
                    r#"const wasm = performance.getEntriesByName("vramscope-boot-wasm")[0].startTime;
                       return performance.getEntriesByType("resource").map(e => {
                           const u = new URL(e.name);
                           return [u.pathname + u.search, e.startTime < wasm, e.transferSize];
                       });"#,
                    vec![],
                )
                .await
                .expect("the page's requests");
            let seen: Vec<(String, bool, u64)> = serde_json::from_value(seen).expect("[path, before, bytes]");
            let api = format!("/api/v1/snapshots/{id}");
            let asked = |path: &str| seen.iter().filter(|(p, ..)| p == path).collect::<Vec<_>>();
            for path in [api.clone(), format!("{api}/stats?wait=10")] {
                let times = asked(&path);
                assert!(times.len() == 1 && times[0].1, "{visit} visit: {path} asked once, early: {seen:?}");
            }
            let early: Vec<_> = seen.iter().filter(|(p, ..)| p.starts_with(&format!("{api}/timeline?px="))).collect();
            assert!(early.len() == 1 && early[0].1, "{visit} visit: the first window asked once, early: {seen:?}");
            // The same window asked again with the device named would be
            // the app not taking the early answer.
            let query = early[0].0.split_once("?px=").expect("px").1;
            assert!(
                !seen.iter().any(|(p, ..)| p.starts_with(&format!("{api}/timeline?device=")) && p.ends_with(query)),
                "{visit} visit: the first window was asked again: {seen:?}"
            );
            let width = client
                .execute("return document.querySelector('.canvas-wrap').clientWidth", vec![])
                .await
                .expect("the canvas's width");
            let px: u64 = query.split('&').next().and_then(|px| px.parse().ok()).expect("px");
            assert_eq!(Some(px + 96), width.as_u64(), "{visit} visit: buckets for the plot's width");
            if visit == "second" {
                let fetched: Vec<_> =
                    seen.iter().filter(|(p, _, bytes)| p.starts_with("/static/") && *bytes > 0).collect();
                assert!(fetched.is_empty(), "the dashboard's files came from the server again: {fetched:?}");
            }
        }
    })
    .await;
}
