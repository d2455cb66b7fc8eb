//! Issue 44's new-user findings about the dashboard, each in headless
//! Chromium against a real `vramscope serve` with real corpus files: the
//! OOM post-mortem's and the pools tab's free and unused figures name what
//! they count; the what-if chart's OOM labels; the leaks chart's legend;
//! one date format and counts in words on the library, jobs and comments;
//! an upload of three files listed as each is stored and named in full;
//! files opened without uploading marked as such on their snapshot and
//! compare pages.
//!
//! Needs what `tests/browser.rs` needs (Chromium, chromedriver, the
//! dashboard built into the binary). Screenshots go to
//! `target/browser-artifacts/newcomer-*.png`.

use crate::common::browser::*;

use std::time::Duration;

use fantoccini::Locator;
use serde_json::{Value, json};

/// A date as every page writes it: `2026-12-07 20:45`.
fn is_date_time(text: &str) -> bool {
    let b = text.trim().as_bytes();
    let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    b.len() == 16
        && [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15].into_iter().all(digit)
        && (b[4], b[7], b[10], b[13]) == (b'-', b'-', b' ', b':')
}

/// `oom_leak`'s post-mortem said "349 MiB free in 32 blocks" on its card
/// and "the pool held 348 MiB free … in 22 pieces" under it (every pool,
/// then the request's own large pool, neither said); its pools tab said
/// "reserved, unused 643 MiB" where the cards say "cached, not in use
/// 641 MiB" (reserved less requested bytes, then less whole blocks). Each
/// figure now names what it counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_free_and_unused_figures_name_what_they_count() {
    let (_server, url) = start_server(&scratch("newcomer-figures"), &[]);
    assert_dashboard_built(&url).await;
    let id = upload_with_query(&url, crate::common::corpus_bytes("oom_leak.pickle"), "name=oom_leak.pickle").await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "newcomer-figures-profile").await;
    closing(&client, async {
        client.goto(&format!("{url}/snapshots/{id}")).await.expect("open oom_leak");
        let oom = until(&client, 60, "the OOM panel", || async {
            let t = text_of(&client, "#oom-panel").await?;
            t.contains("fragmentation").then_some(t)
        })
        .await;
        for said in [
            "usable by the request (large pool, its stream); 349 MiB free in 32 blocks in all pools and streams",
            "The large pool (on the request's stream) held 348 MiB free",
            "in 22 pieces, the largest 70.2 MiB",
        ] {
            assert!(oom.contains(said), "{said:?} not in the post-mortem: {oom}");
        }
        scroll_to(&client, "#oom-panel").await;
        screenshot(&client, "newcomer-1-oom-figures").await;

        let cards = text_of(&client, "#stats-summary").await.expect("the cards").to_lowercase();
        assert!(cards.contains("cached, not in use\n641 mib"), "{cards}");
        client.goto(&format!("{url}/snapshots/{id}?tab=pools")).await.expect("the pools tab");
        let table = until(&client, 60, "the pools table", || text_of(&client, "#pools-table")).await;
        assert!(table.contains("reserved, not requested") && table.contains("allocated (requested)"), "{table}");
        assert!(table.contains("643 MiB"), "reserved less requested: {table}");
        let counts = text_of(&client, "#pools-counts").await.expect("what the figures count");
        assert!(counts.contains("rounding waste") && counts.contains("cached, not in use"), "{counts}");
        scroll_to(&client, "#pools-panel").await;
        screenshot(&client, "newcomer-2-pools-figures").await;
    })
    .await;
}

/// The what-if chart drew "simulated OOM" over "recorded OOM" where the
/// replay runs out where the recording did: `oom_leak` replayed with its
/// own settings under the capacity inferred from its OOM. The layout is
/// checked natively (`pages::findings::whatif`'s test of the same name,
/// which fails with the labels on one row); here the page runs that replay
/// and draws the markers, for the screenshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_whatif_oom_labels_do_not_overlap() {
    let (_server, url) = start_server(&scratch("newcomer-whatif"), &[]);
    assert_dashboard_built(&url).await;
    let id = upload_with_query(&url, crate::common::corpus_bytes("oom_leak.pickle"), "name=oom_leak.pickle").await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "newcomer-whatif-profile").await;
    closing(&client, async {
        client.goto(&format!("{url}/snapshots/{id}")).await.expect("open oom_leak");
        let conf = client
            .wait()
            .at_most(Duration::from_secs(60))
            .for_element(Locator::Css("#whatif-conf"))
            .await
            .expect("settings input");
        scroll_to(&client, "#whatif").await;
        // The recorded settings (none), the capacity left to the inference.
        // Typed away as a user does (a WebDriver clear fires no input event).
        conf.send_keys(&BACKSPACE.repeat(40)).await.expect("clear the settings");
        client.find(Locator::Css("#whatif-run")).await.expect("simulate").click().await.expect("click simulate");
        let settings = until(&client, 60, "the replay", || async {
            let s = text_of(&client, "#whatif-settings").await?;
            s.contains("(PyTorch defaults)").then_some(s)
        })
        .await;
        assert!(settings.contains("inferred from the recorded OOM"), "{settings}");
        let figures = text_of(&client, "#whatif-figures").await.expect("figures");
        assert!(figures.contains("at event 6,677"), "the replay runs out where the recording did: {figures}");
        until(&client, 60, "the OOM markers", || async {
            let (_, c) = colours(&client, "whatif-canvas", &[OOM]).await?;
            (c[0] > 100).then_some(())
        })
        .await;
        scroll_to(&client, "#whatif").await;
        screenshot(&client, "newcomer-3-whatif-labels").await;
    })
    .await;
}

/// The leaks chart of `gpt_varlen` drew 3 lines for its 5 stacks, with no
/// legend. The legend (right of the plot) shows every stack's colour; the
/// "(same as #k)" wording and the dashes are checked natively
/// (`pages::findings::leaks`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_leaks_chart_has_a_legend() {
    let (_server, url) = start_server(&scratch("newcomer-leaks"), &[]);
    assert_dashboard_built(&url).await;
    let id = upload(&url, &crate::common::large_corpus().join("gpt_varlen.pickle")).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "newcomer-leaks-profile").await;
    closing(&client, async {
        client.goto(&format!("{url}/snapshots/{id}")).await.expect("open gpt_varlen");
        // The five series colours (plot/src/palette.rs SERIES), in rank order.
        let series: [[u8; 3]; 5] = [[207, 34, 46], [9, 105, 218], [219, 109, 40], [26, 127, 55], [130, 80, 223]];
        let counts = until(&client, 120, "the leaks chart with every stack's colour", || async {
            let (_, c) = colours(&client, "leaks-canvas", &series).await?;
            c.iter().all(|&n| n > 20).then_some(c)
        })
        .await;
        eprintln!("leaks canvas: {counts:?}");
        scroll_to(&client, "#leaks-panel").await;
        screenshot(&client, "newcomer-4-leaks-legend").await;
    })
    .await;
}

/// The library wrote dates in the browser's locale, jobs and comments in a
/// hard-coded en-GB one; `/jobs` said "Ranks 0" for a job uploaded without
/// a rank where its page said "1 ranks". One format everywhere
/// (`2026-12-07 20:45`), and the counts agree, in words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_dates_and_counts_read_alike() {
    let (_server, url) = start_server(&scratch("newcomer-dates"), &[]);
    assert_dashboard_built(&url).await;
    let id =
        upload_with_query(&url, crate::common::corpus_bytes("streams.pickle"), "name=solo.pickle&job=solo-run").await;
    let comment = reqwest::Client::new()
        .post(format!("{url}/api/v1/snapshots/{id}/comments"))
        .json(&json!({ "body": "A first look." }))
        .send()
        .await
        .expect("comment");
    assert!(comment.status().is_success(), "{}", comment.status());
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "newcomer-dates-profile").await;
    closing(&client, async {
        client.goto(&format!("{url}/")).await.expect("the library");
        until(&client, 30, "the library's row", || text_of(&client, "table.snapshots tbody tr")).await;
        let script = "return [...document.querySelectorAll('table.snapshots tbody tr td')].map((c) => c.textContent);";
        let cells: Vec<String> =
            serde_json::from_value(client.execute(script, vec![]).await.expect("cells")).expect("strings");
        // Name, job, host, rank, trigger, status, size, uploaded, …
        assert!(is_date_time(&cells[7]), "not as 2026-12-07 20:45: {cells:?}");
        screenshot(&client, "newcomer-5-library-date").await;

        client.goto(&format!("{url}/jobs")).await.expect("the jobs");
        until(&client, 30, "the jobs list", || text_of(&client, "table.snapshots tbody tr")).await;
        let script = "return [...document.querySelectorAll('table.snapshots tbody tr td')].map((c) => c.textContent);";
        let cells: Vec<String> =
            serde_json::from_value(client.execute(script, vec![]).await.expect("cells")).expect("strings");
        // Job, snapshots, ranks, hosts, OOM uploads, last upload.
        assert_eq!(cells[0], "solo-run", "{cells:?}");
        assert_eq!(cells[2], "—", "no rank given: {cells:?}");
        assert!(is_date_time(&cells[5]), "{cells:?}");
        screenshot(&client, "newcomer-6-jobs").await;

        client.goto(&format!("{url}/jobs/solo-run")).await.expect("the job");
        let facts = until(&client, 30, "the job's facts", || text_of(&client, "#job-facts")).await;
        assert!(facts.starts_with("1 snapshot · no rank given · "), "{facts}");
        screenshot(&client, "newcomer-7-job").await;

        client.goto(&format!("{url}/snapshots/{id}")).await.expect("the snapshot");
        let date = until(&client, 60, "the comment's date", || text_of(&client, ".comment .meta > span")).await;
        assert!(is_date_time(&date), "{date}");
        client.execute("document.getElementById('review').scrollIntoView()", vec![]).await.expect("scroll");
        screenshot(&client, "newcomer-7b-comment-date").await;
    })
    .await;
}

/// Dropping three files showed "No snapshots yet" while two were stored
/// (the list was asked for after the last) and a notice naming only the
/// last file. With the upload slowed down, the page is sampled every
/// animation frame: while the k-th file goes up, the k - 1 before it are
/// listed; the notice ends naming all three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_multi_file_upload_lists_each_file_as_stored() {
    let (_server, url) = start_server(&scratch("newcomer-upload"), &[]);
    assert_dashboard_built(&url).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "newcomer-upload-profile").await;
    closing(&client, async {
        client.goto(&format!("{url}/")).await.expect("the library");
        let input = client
            .wait()
            .at_most(Duration::from_secs(30))
            .for_element(Locator::Css("#file-input"))
            .await
            .expect("the file picker");
        until(&client, 30, "the empty library", || text_of(&client, "#empty")).await;
        client
            .execute(
                "window.__samples = []; const sample = () => { \
                   const p = document.querySelector('.dropzone:not(.local) .progress span'); \
                   window.__samples.push({ progress: p ? p.textContent : null, \
                     rows: document.querySelectorAll('table.snapshots tbody tr').length, \
                     empty: !!document.getElementById('empty') }); \
                   requestAnimationFrame(sample); }; requestAnimationFrame(sample);",
                vec![],
            )
            .await
            .expect("sample the page");
        client.issue_cmd(Throttle { upload_bytes_per_s: Some(200_000) }).await.expect("throttle the upload");
        let names = ["streams.pickle", "mlp_train_all.pickle", "compiled.pickle"];
        let paths: Vec<String> =
            names.iter().map(|n| crate::common::fixture_corpus().join(n).to_string_lossy().into_owned()).collect();
        input.send_keys(&paths.join("\n")).await.expect("choose three files");
        let notice = until(&client, 120, "the final notice", || async {
            let t = text_of(&client, ".notice").await?;
            t.starts_with("3 files stored").then_some(t)
        })
        .await;
        client.issue_cmd(Throttle { upload_bytes_per_s: None }).await.expect("unthrottle");
        assert!(
            notice.starts_with("3 files stored: streams.pickle, mlp_train_all.pickle, compiled.pickle"),
            "{notice}"
        );
        screenshot(&client, "newcomer-8-three-files").await;
        let samples: Vec<Value> =
            serde_json::from_value(client.execute("return window.__samples", vec![]).await.expect("samples"))
                .expect("a list");
        for (k, name) in names.iter().enumerate().skip(1) {
            let going_up: Vec<&Value> = samples
                .iter()
                .filter(|s| s["progress"].as_str().is_some_and(|p| p.starts_with(&format!("{name} ({} of 3)", k + 1))))
                .collect();
            assert!(!going_up.is_empty(), "{name} was never seen going up");
            for s in going_up {
                assert!(s["rows"].as_u64() >= Some(k as u64) && s["empty"] == json!(false), "{name}: {s}");
            }
        }
        let rows = client.find_all(Locator::Css("table.snapshots tbody tr")).await.expect("rows").len();
        assert_eq!(rows, 3);
    })
    .await;
}

/// A file opened without uploading looked like a stored one on its page
/// and in a comparison. Both now carry the badge "local file, not
/// uploaded"; a stored snapshot's do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_local_files_are_marked_local() {
    let (_server, url) = start_server(&scratch("newcomer-local"), &[]);
    assert_dashboard_built(&url).await;
    let stored =
        upload_with_query(&url, crate::common::corpus_bytes("mlp_train_all.pickle"), "name=mlp_train_all.pickle").await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "newcomer-local-profile").await;
    closing(&client, async {
        client.goto(&format!("{url}/snapshots/{stored}")).await.expect("the stored snapshot");
        until(&client, 30, "the stored snapshot's title", || text_of(&client, "h1")).await;
        assert!(client.find(Locator::Css(".badge.local")).await.is_err(), "a stored snapshot is not local");

        client.goto(&format!("{url}/")).await.expect("the library");
        let input = client
            .wait()
            .at_most(Duration::from_secs(30))
            .for_element(Locator::Css("#local-file-input"))
            .await
            .expect("the local-file picker");
        let file = crate::common::fixture_corpus().join("streams.pickle");
        input.send_keys(&file.to_string_lossy()).await.expect("open the file");
        let path = until(&client, 60, "the local page", || async {
            let path = client.current_url().await.ok()?.path().to_owned();
            path.starts_with("/snapshots/local-").then_some(path)
        })
        .await;
        let badge = until(&client, 30, "the badge", || text_of(&client, ".title-row .badge.local")).await;
        assert_eq!(badge, "local file, not uploaded");
        assert_eq!(text_of(&client, "h1").await.as_deref(), Some("streams.pickle"), "the title is the name alone");
        screenshot(&client, "newcomer-9-local-badge").await;

        // Through the page's compare picker: a page load would close the file.
        let local = path.trim_start_matches("/snapshots/");
        let option = format!("#compare-with option[value='{stored}']");
        let select = until(&client, 60, "the compare picker listing the stored snapshot", || async {
            client.find(Locator::Css(&option)).await.ok()?;
            client.find(Locator::Css("#compare-with")).await.ok()
        })
        .await;
        select.select_by_value(&stored).await.expect("pick the stored snapshot");
        let want = format!("/compare/{local}/{stored}");
        let link = until(&client, 30, "the compare link pointing at the pick", || async {
            let link = client.find(Locator::Css("#compare-link")).await.ok()?;
            let href = link.attr("href").await.ok()??;
            href.ends_with(&want).then_some(link)
        })
        .await;
        click_when_still(&client, &link, "the compare link").await;
        let title = until(&client, 60, "the comparison's title", || async {
            let t = text_of(&client, "h1").await?;
            t.contains("mlp_train_all.pickle").then_some(t)
        })
        .await;
        let badges = client.find_all(Locator::Css("h1 .badge.local")).await.expect("badges").len();
        assert_eq!(badges, 1, "A is local, B is stored: {title}");
        assert!(title.starts_with("A: streams.pickle local file, not uploaded"), "{title}");
        until(&client, 60, "the comparison", || text_of(&client, "#compare-stacks")).await;
        screenshot(&client, "newcomer-10-local-compare").await;
    })
    .await;
}
