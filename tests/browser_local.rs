//! A file opened in the browser without uploading it (local mode), in real
//! headless Chromium against a real `vramscope serve`: the library's
//! "Open a local file" picker reads the file in a Web Worker with the same
//! reader as the server, the snapshot page shows its statistics and draws
//! its timeline (pixels), zooms, and the server never receives the file.
//! A file that is no snapshot shows the reader's reason; a reload of a
//! local page says the file is gone and links back to the library.
//!
//! Needs Chromium, chromedriver and the dashboard built into the binary,
//! like `tests/browser.rs`; missing, they fail loudly.

use crate::common::browser::*;

use std::time::Duration;

use fantoccini::{Client, Locator};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_a_local_file_without_uploading_it() {
    let (_server, url) = start_server(&scratch("local-data"), &[]);
    assert_dashboard_built(&url).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "local-profile").await;
    closing(&client, open_locally(&client, &url)).await;
}

/// How many snapshots the server holds.
async fn server_count(url: &str) -> usize {
    let list: serde_json::Value =
        reqwest::get(format!("{url}/api/v1/snapshots")).await.expect("list").json().await.expect("json");
    list["items"].as_array().expect("items").len()
}

/// A local file's "download" link pointed at the server, which never saw
/// the file (404): it must give the file itself, byte for byte, and the
/// server-only "export report" must not be offered.
async fn regression_local_download_offers_the_file(client: &Client, fixture: &std::path::Path) {
    let link = client.find(Locator::Css(".facts #download")).await.expect("a download link");
    let href = link.attr("href").await.expect("href").unwrap_or_default();
    assert!(href.starts_with("blob:"), "the local file's own bytes, not the server's: {href}");
    let fetched = client
        .execute_async(
            "const done = arguments[arguments.length - 1]; \
             fetch(arguments[0]).then((r) => r.arrayBuffer()).then((b) => done(b.byteLength), (e) => done(String(e)));",
            vec![serde_json::json!(href)],
        )
        .await
        .expect("fetch the link");
    let size = std::fs::metadata(fixture).expect("the fixture").len();
    assert_eq!(fetched.as_u64(), Some(size), "{fetched}");
    assert!(client.find(Locator::Css("#export-report")).await.is_err(), "no server report for a local file");
}

/// A local file's page asked the server for `/api/v1/snapshots/local-1`
/// and its comments (the review thread's own client bypassed the worker),
/// and showed "loading the comments: not found: snapshot local-1" on every
/// open. The page says comments need an upload instead, and the browser
/// fetched nothing from the server about a `local-` id.
async fn regression_a_local_page_asks_the_server_nothing_about_its_id(client: &Client) {
    let note = until(client, 30, "the note in place of comments", || text_of(client, "#review-local")).await;
    assert!(note.contains("upload this file"), "{note}");
    assert!(client.find(Locator::Css("#review")).await.is_err(), "no review thread for a local file");
    let fetched = client
        .execute(
            "return performance.getEntriesByType('resource').map((e) => e.name).filter((n) => n.includes('/api/v1/snapshots/local-'));",
            vec![],
        )
        .await
        .expect("resource timing");
    assert_eq!(fetched, serde_json::json!([]), "the server was asked about a local id");
    let body = text_of(client, "body").await.unwrap_or_default();
    assert!(!body.contains("not found: snapshot local-"), "{body}");
}

async fn open_locally(client: &Client, url: &str) {
    let client = client.clone();
    client.goto(&format!("{url}/")).await.expect("open the library");
    let input = local_picker(&client).await;

    // A file that is no snapshot: the reader's reason, in the page.
    let not_a_snapshot = scratch("local-files").join("notes.pickle");
    std::fs::write(&not_a_snapshot, b"\x80\x04K*.").expect("write the file");
    input.send_keys(&not_a_snapshot.to_string_lossy()).await.expect("choose the file");
    let refused = until(&client, 30, "the reader's refusal", || text_of(&client, ".notice.error")).await;
    assert!(refused.contains("opening notes.pickle") && refused.contains("not a PyTorch memory snapshot"), "{refused}");
    screenshot(&client, "local-1-refused").await;

    // A real snapshot: opened at /snapshots/local-<n>, drawn.
    let fixture = crate::common::fixture_corpus().join("oom_leak.pickle");
    let input = client.find(Locator::Css("#local-file-input")).await.expect("file input");
    input.send_keys(&fixture.to_string_lossy()).await.expect("choose the snapshot");
    let path = until(&client, 30, "the local snapshot page", || async {
        let path = client.current_url().await.ok()?.path().to_owned();
        path.starts_with("/snapshots/local-").then_some(path)
    })
    .await;
    let summary = until(&client, 30, "the statistics", || text_of(&client, "#stats-summary")).await;
    assert!(summary.contains("OOMS\n1") || summary.contains("OOMs\n1"), "{summary}");
    let title = text_of(&client, "h1").await.expect("title");
    assert_eq!(title, "oom_leak.pickle");
    let facts = text_of(&client, ".facts").await.expect("facts");
    assert!(facts.contains("trigger oom") && facts.contains("570 KiB"), "{facts}");
    regression_local_download_offers_the_file(&client, &fixture).await;
    regression_a_local_page_asks_the_server_nothing_about_its_id(&client).await;
    let pixels = timeline_drawn(&client, 30, "the local timeline drawn").await;
    screenshot(&client, "local-2-timeline").await;
    // The same curves as the uploaded file shows in tests/browser.rs.
    assert!(pixels.reserved >= 400 && pixels.allocated >= 400 && pixels.oom >= 300, "{pixels:?}");
    assert!(pixels.non_background > pixels.total / 10, "{pixels:?}");
    let status = text_of(&client, "#timeline-status").await.expect("status");
    assert_eq!(rows_shown(&status), Some((0, 6680)), "{status}");

    // Zooming asks the worker for a narrower window.
    press(&client, '+').await;
    let zoomed = new_window(&client, (0, 6680), "a zoom of the local file").await;
    assert!(zoomed.1 - zoomed.0 < 6680 * 3 / 4, "{zoomed:?}");
    let pixels = canvas_pixels(&client).await.expect("pixels");
    assert!(pixels.allocated >= 200, "zoomed: {pixels:?}");

    // Nothing reached the server.
    assert_eq!(server_count(url).await, 0, "a local file is never uploaded");

    // A reload cannot bring the file back: the page says so, with the way
    // back to the library.
    client.refresh().await.expect("reload");
    let gone = until(&client, 30, "the reload message", || text_of(&client, ".notice.error")).await;
    assert!(gone.contains("without uploading") && gone.contains("open the file again from the library"), "{gone}");
    assert!(path.starts_with("/snapshots/local-"));
    screenshot(&client, "local-3-reloaded").await;
    client.find(Locator::LinkText("Library")).await.expect("crumb").click().await.expect("back");
    client
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("#local-file-input"))
        .await
        .expect("back in the library");
}

/// Compare from a local file's page landed on `/compare/local-1/<id>` and
/// showed "comparing the snapshots: not found: snapshot local-1", empty
/// charts and a 404: the server was asked about a file it never saw. A
/// local file now compares in the tab (its worker reads the other side):
/// with an uploaded snapshot (whose file the page fetches) and with another
/// local file; the server is never asked for a comparison.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_compare_from_a_local_file_page() {
    let (_server, url) = start_server(&scratch("local-compare-data"), &[]);
    assert_dashboard_built(&url).await;
    let uploaded = upload(&url, &crate::common::fixture_corpus().join("mlp_train_all.pickle")).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "local-compare-profile").await;
    closing(&client, compare_locally(&client, &url, &uploaded)).await;
}

/// Open `name` from the corpus through the library's local-file picker
/// (reached in the page, so earlier local files stay open); its page's path.
async fn open_in_tab(client: &Client, name: &str) -> String {
    let input = local_picker(client).await;
    let before = client.current_url().await.expect("url").path().to_owned();
    let fixture = crate::common::fixture_corpus().join(name);
    input.send_keys(&fixture.to_string_lossy()).await.expect("choose the snapshot");
    until(client, 60, &format!("{name}'s local page"), || async {
        let path = client.current_url().await.ok()?.path().to_owned();
        (path.starts_with("/snapshots/local-") && path != before).then_some(path)
    })
    .await
}

/// Pick `other` in the snapshot page's compare picker and follow the link;
/// waits for the comparison's stack table and both charts.
///
/// The picker lists this tab's local files at once and the library's
/// snapshots when the server answers: waiting for any option and picking
/// the uploaded one failed when the library's list came later (CI, stop 35).
async fn compare_with(client: &Client, other: &str, expect_path: &str) {
    let option = format!("#compare-with option[value='{other}']");
    let select = until(client, 60, "the compare picker listing the other snapshot", || async {
        client.find(Locator::Css(&option)).await.ok()?;
        client.find(Locator::Css("#compare-with")).await.ok()
    })
    .await;
    select.select_by_value(other).await.expect("pick the other snapshot");
    // The link follows the pick through the page's reactive update: click
    // it once it points at the pair, not at the pick before.
    let link = until(client, 30, "the compare link pointing at the pick", || async {
        let link = client.find(Locator::Css("#compare-link")).await.ok()?;
        let href = link.attr("href").await.ok()??;
        href.ends_with(expect_path).then_some(link)
    })
    .await;
    click_when_still(client, &link, "the compare link").await;
    until(client, 30, "the compare page", || async {
        let u = client.current_url().await.ok()?;
        (u.path() == expect_path).then_some(())
    })
    .await;
    let stacks = until(client, 60, "the stack changes", || async {
        if let Some(e) = text_of(client, ".notice.error").await {
            panic!("the comparison failed: {e}");
        }
        text_of(client, "#compare-stacks").await
    })
    .await;
    assert!(stacks.contains("appeared") || stacks.contains("vanished"), "{stacks}");
    for side in ["compare-a", "compare-b"] {
        let script = "const c = document.getElementById(arguments[0]); if (!c || !c.width) return 0; \
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0; \
            for (let i = 0; i < d.length; i += 4) if (d[i] < 200 || d[i + 1] < 200 || d[i + 2] < 200) n++; return n;";
        until(client, 30, &format!("{side} drawn"), || async {
            let n = client.execute(script, vec![serde_json::json!(side)]).await.ok()?.as_u64()?;
            (n > 500).then_some(())
        })
        .await;
    }
}

async fn compare_locally(client: &Client, url: &str, uploaded: &str) {
    let client = client.clone();
    client.goto(&format!("{url}/")).await.expect("open the library");
    let first = open_in_tab(&client, "oom_leak.pickle").await;
    client.find(Locator::LinkText("Library")).await.expect("crumb").click().await.expect("back");
    let second = open_in_tab(&client, "streams.pickle").await;
    let (first_id, second_id) = (first.trim_start_matches("/snapshots/"), second.trim_start_matches("/snapshots/"));

    // With the uploaded snapshot: computed in this tab from its file.
    compare_with(&client, uploaded, &format!("/compare/{second_id}/{uploaded}")).await;
    let title = text_of(&client, "h1").await.expect("title");
    assert!(title.contains("streams.pickle") && title.contains("mlp_train_all.pickle"), "{title}");
    screenshot(&client, "local-compare-1-uploaded").await;

    // With the other local file, back on the second file's page.
    client.find(Locator::LinkText("streams.pickle")).await.expect("A's link").click().await.expect("to A");
    compare_with(&client, first_id, &format!("/compare/{second_id}/{first_id}")).await;
    let title = text_of(&client, "h1").await.expect("title");
    assert!(title.contains("streams.pickle") && title.contains("oom_leak.pickle"), "{title}");
    screenshot(&client, "local-compare-2-local").await;

    let asked = client
        .execute(
            "return performance.getEntriesByType('resource').map((e) => e.name)\
             .filter((n) => n.includes('/api/v1/compare') || n.includes('/api/v1/snapshots/local-'));",
            vec![],
        )
        .await
        .expect("resource timing");
    assert_eq!(asked, serde_json::json!([]), "the server was asked about a local file");
}

/// A local file larger than the worker's read-ahead ring (the corpus's
/// 22 MB `gpt_long.pickle`: six 4 MiB slices through four slots) is read by
/// a second worker while the first parses, on the cross-origin isolated
/// page, and reads as the uploaded file does: the same statistics, the
/// same rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_local_file_is_read_ahead_and_reads_as_uploaded() {
    let (_server, url) = start_server(&scratch("local-ahead-data"), &[]);
    assert_dashboard_built(&url).await;
    let file = crate::common::large_corpus().join("gpt_long.pickle");
    let uploaded = upload(&url, &file).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "local-ahead-profile").await;
    closing(&client, read_ahead_as_uploaded(&client, &url, &uploaded, &file)).await;
}

/// The statistics and the timeline's rows of the snapshot page shown now.
async fn summary_and_rows(client: &Client, what: &str) -> (String, (i64, i64)) {
    let summary = until(client, 60, &format!("{what}'s statistics"), || text_of(client, "#stats-summary")).await;
    let rows = until(client, 60, &format!("{what}'s timeline"), || async {
        rows_shown(&text_of(client, "#timeline-status").await?)
    })
    .await;
    (summary, rows)
}

async fn read_ahead_as_uploaded(client: &Client, url: &str, uploaded: &str, file: &std::path::Path) {
    let client = client.clone();
    client.goto(&format!("{url}/snapshots/{uploaded}")).await.expect("open the uploaded file");
    let (server_summary, server_rows) = summary_and_rows(&client, "the uploaded file").await;

    client.goto(&format!("{url}/")).await.expect("open the library");
    let isolated = client.execute("return self.crossOriginIsolated === true", vec![]).await.expect("isolation");
    assert_eq!(isolated, serde_json::json!(true), "the dashboard is served cross-origin isolated");
    local_picker(&client).await.send_keys(&file.to_string_lossy()).await.expect("choose the snapshot");
    until(&client, 60, "the local snapshot page", || async {
        let path = client.current_url().await.ok()?.path().to_owned();
        path.starts_with("/snapshots/local-").then_some(())
    })
    .await;
    let (summary, rows) = summary_and_rows(&client, "the local file").await;
    assert_eq!(summary, server_summary);
    assert_eq!(rows, server_rows);
    let open = client
        .execute("return (window.__vramscope_local_open || []).slice(-1)[0] ?? null", vec![])
        .await
        .expect("the worker's timing");
    assert_eq!(open["read_ahead"], serde_json::json!(true), "read by the reader worker: {open}");
    screenshot(&client, "local-4-read-ahead").await;
}

/// The library's "Open a local file" input, once the page shows it.
async fn local_picker(client: &Client) -> fantoccini::elements::Element {
    client
        .wait()
        .at_most(Duration::from_secs(30))
        .for_element(Locator::Css("#local-file-input"))
        .await
        .expect("the local-file picker")
}
