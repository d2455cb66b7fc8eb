//! Team review in a real browser (headless Chromium over WebDriver, against
//! a real `vramscope serve`): a comment written in a snapshot's review
//! thread about the moment the page shows, listed, kept after a reload,
//! linking back to that moment, then deleted; the pin; and the job page of a
//! three-rank job built from real corpus files, with the leaking rank
//! flagged and linked to a comparison with the median rank.
//!
//! Needs Chromium, chromedriver and the dashboard built into the binary,
//! like `tests/browser.rs`; screenshots go to `target/browser-artifacts/`.

use crate::common::browser::*;

use std::time::Duration;

use fantoccini::{Client, Locator};
use serde_json::Value;

async fn api(url: &str, path: &str) -> Value {
    reqwest::get(format!("{url}/api/v1{path}")).await.expect("get").json().await.expect("json")
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(crate::common::fixture_corpus().join(name)).expect("fixture")
}

async fn count(client: &Client, css: &str) -> usize {
    client.find_all(Locator::Css(css)).await.map(|v| v.len()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comment_pin_and_job_page_in_chromium() {
    let (_server, url) = start_server(&scratch("review-data"), &[]);
    assert_dashboard_built(&url).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "profile-review").await;
    closing(&client, async {
        review_a_snapshot(&client, &url).await;
        compare_the_ranks_of_a_job(&client, &url).await;
    })
    .await;
}

/// Comment on a moment, reload, follow the link, pin, delete.
async fn review_a_snapshot(client: &Client, url: &str) {
    let client = client.clone();
    // Not a file of the job below: the same content would be deduplicated
    // into this row.
    let id = upload_with_query(url, fixture("streams.pickle"), "name=streams.pickle").await;
    // The permalink of a moment: the instant at trace row 1200.
    client.goto(&format!("{url}/snapshots/{id}?axis=event&row=1200")).await.expect("open the snapshot");
    until(&client, 30, "the review thread", || text_of(&client, "#no-comments")).await;
    let search: Value = client.execute("return window.location.search", vec![]).await.expect("location");
    let expected_row = search.as_str().and_then(|q| q.contains("row=1200").then_some(1200));
    assert_eq!(expected_row, Some(1200), "the page keeps its moment in the URL: {search}");

    // No comment yet: no marker on the track.
    let (_, before) = until(&client, 30, "the track drawn", || colours(&client, "track", &[COMMENT])).await;
    assert_eq!(before[0], 0, "a comment marker before any comment");

    let field = client.find(Locator::Css("#comment-text")).await.expect("comment field");
    // The thread is below the analysis panels, which fill in after the
    // first timeline: click as a user would, again if they moved it.
    click_when_still(&client, &field, "the comment field").await;
    field.send_keys("The side stream frees this block late.").await.expect("type");
    let post = client.find(Locator::Css("#post-comment")).await.expect("button");
    click_when_still(&client, &post, "post").await;
    let body = until(&client, 30, "the posted comment", || text_of(&client, ".comment .body")).await;
    assert_eq!(body, "The side stream frees this block late.");
    let meta = text_of(&client, ".comment .meta").await.expect("meta");
    assert!(meta.starts_with("local · "), "author is the token's name, `local` without tokens: {meta}");
    assert!(meta.contains("at row 1,200"), "{meta}");
    // Its marker is on the track at once: the track draws the thread's
    // comments (it used to load its own copy once, so a posted comment had
    // no marker until the page was reloaded).
    until(&client, 20, "the posted comment's marker", || async {
        let (_, c) = colours(&client, "track", &[COMMENT]).await?;
        (c[0] > 10).then_some(())
    })
    .await;
    client
        .execute("document.getElementById('track').scrollIntoView({ block: 'center' })", vec![])
        .await
        .expect("scroll");
    screenshot(&client, "review-1-comment-marker").await;
    client.execute("document.getElementById('review').scrollIntoView()", vec![]).await.expect("scroll");
    screenshot(&client, "review-1-comment-posted").await;

    // Stored by the server, with the moment.
    let thread = api(url, &format!("/snapshots/{id}/comments")).await;
    assert_eq!(thread.as_array().map(Vec::len), Some(1), "{thread}");
    assert_eq!((thread[0]["author"].as_str(), thread[0]["row"].as_u64()), (Some("local"), Some(1200)));

    // Kept after a reload (of the page without a moment).
    client.goto(&format!("{url}/snapshots/{id}")).await.expect("reload");
    let again = until(&client, 30, "the comment after a reload", || text_of(&client, ".comment .body")).await;
    assert_eq!(again, body);
    // Its link opens the snapshot at its moment.
    let link = client.find(Locator::Css(".comment a.moment")).await.expect("moment link");
    let href = link.attr("href").await.expect("href").expect("has href");
    assert_eq!(href, format!("/snapshots/{id}?row=1200"));
    click_when_still(&client, &link, "the moment link").await;
    until(&client, 30, "the moment's page", || async {
        let v = client.execute("return window.location.search", vec![]).await.ok()?;
        v.as_str().filter(|q| q.contains("row=1200")).map(str::to_owned)
    })
    .await;
    until(&client, 30, "the thread on the moment's page", || text_of(&client, ".comment .body")).await;

    // Pin: the button says so, and the server keeps it.
    client.find(Locator::Css("#pin")).await.expect("pin button").click().await.expect("pin");
    until(&client, 20, "the pinned state", || async {
        text_of(&client, "#pin").await.filter(|t| t.contains("Pinned"))
    })
    .await;
    assert_eq!(api(url, &format!("/snapshots/{id}")).await["pinned"], true);
    client.execute("document.getElementById('review').scrollIntoView()", vec![]).await.expect("scroll");
    screenshot(&client, "review-2-pinned-at-the-moment").await;

    // Delete the comment: the thread is empty again, here and on the server.
    let delete = client.find(Locator::Css(".comment button.danger")).await.expect("delete button");
    click_when_still(&client, &delete, "delete").await;
    until(&client, 20, "the empty thread", || text_of(&client, "#no-comments")).await;
    assert_eq!(api(url, &format!("/snapshots/{id}/comments")).await, serde_json::json!([]));
    // And its marker is gone with it.
    until(&client, 20, "no marker left", || async {
        let (_, c) = colours(&client, "track", &[COMMENT]).await?;
        (c[0] == 0).then_some(())
    })
    .await;
}

/// Three ranks of one job from real files; the leaking one stands out.
async fn compare_the_ranks_of_a_job(client: &Client, url: &str) {
    let client = client.clone();
    let mlp = fixture("mlp_train_all.pickle");
    let rank0 = upload_with_query(url, mlp.clone(), "name=rank0.pickle&job=llama-run7&host=node-0&rank=0").await;
    // The same run, gzip-compressed as an agent may send it: another file,
    // the same figures.
    let _rank1 =
        upload_with_query(url, crate::common::gzip(&mlp), "name=rank1.pickle.gz&job=llama-run7&host=node-0&rank=1")
            .await;
    let rank2 = upload_with_query(
        url,
        fixture("oom_leak.pickle"),
        "name=rank2.pickle&job=llama-run7&host=node-1&rank=2&trigger=oom",
    )
    .await;

    // From the library, the job's name leads to the job page.
    client.goto(&format!("{url}/")).await.expect("library");
    let job_link = client
        .wait()
        .at_most(Duration::from_secs(30))
        .for_element(Locator::Css("a.job"))
        .await
        .expect("a job link in the library");
    assert_eq!(job_link.attr("href").await.expect("href").as_deref(), Some("/jobs/llama-run7"));
    job_link.click().await.expect("open the job");
    until(&client, 30, "three ranks", || async { (count(&client, "tr.member").await == 3).then_some(()) }).await;

    let flagged = client.find_all(Locator::Css("tr.diverging")).await.expect("rows");
    assert_eq!(flagged.len(), 1, "one rank diverges");
    let row = flagged[0].text().await.expect("text");
    assert!(row.starts_with("rank 2 on node-1"), "{row}");
    assert!(row.contains("diverges +2.14 GiB"), "{row}");
    assert!(row.contains("2.36 GiB"), "peak requested of oom_leak: {row}");
    let verdict = text_of(&client, "#verdict").await.expect("verdict");
    assert!(verdict.starts_with("Diverging: rank 2 on node-1 (+2.14 GiB)"), "{verdict}");
    let compare = client.find(Locator::Css("tr.diverging a.compare")).await.expect("compare link");
    assert_eq!(compare.attr("href").await.expect("href"), Some(format!("/compare/{rank2}/{rank0}")));
    // The other rows show the same figures: the same run.
    let peaks: Vec<String> = {
        let mut out = Vec::new();
        for cell in client.find_all(Locator::Css("tr.member td.peak")).await.expect("peaks") {
            out.push(cell.text().await.expect("text"));
        }
        out
    };
    assert_eq!(peaks[0], peaks[1], "{peaks:?}");
    assert_ne!(peaks[0], peaks[2], "{peaks:?}");
    screenshot(&client, "review-3-job-page").await;

    // The jobs list.
    client.goto(&format!("{url}/jobs")).await.expect("jobs");
    let listed = until(&client, 30, "the jobs list", || text_of(&client, "section.jobs tbody tr")).await;
    let listed = listed.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(listed.starts_with("llama-run7 3 3 2 1 "), "job, snapshots, ranks, hosts, OOM uploads: {listed}");
    screenshot(&client, "review-4-jobs").await;
}
