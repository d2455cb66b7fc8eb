//! The analysis panels in a real browser: headless Chromium over WebDriver
//! against a real `vramscope serve`, with real corpus snapshots. Opens
//! `oom_leak`, reads the OOM post-mortem's figures and its top stack, runs
//! a what-if replay and finds the simulated curves' colours in its canvas,
//! ranks the settings and tries one, reads the leak ranking, then opens the
//! comparison of two snapshots from the snapshot page and finds both
//! timelines drawn, by event order and by step.
//!
//! Needs what `tests/browser.rs` needs (Chromium, chromedriver, the
//! dashboard built into the binary). Screenshots go to
//! `target/browser-artifacts/analysis-*.png`.

use crate::common::browser::*;

use std::time::Duration;

use fantoccini::{Client, Locator};
use serde_json::{Value, json};

/// Simulated reserved and allocated (plot/src/palette.rs).
const SIM_RESERVED: [u8; 3] = [130, 80, 223];
const SIM_ALLOCATED: [u8; 3] = [26, 127, 55];
/// Recorded reserved and allocated (plot/src/palette.rs).
const REC_RESERVED: [u8; 3] = [87, 96, 106];
const REC_ALLOCATED: [u8; 3] = [9, 105, 218];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oom_whatif_leaks_and_compare_in_chromium() {
    let (_server, url) = start_server(&scratch("analysis-data"), &[]);
    assert_dashboard_built(&url).await;
    let leak = upload(&url, &crate::common::fixture_corpus().join("oom_leak.pickle")).await;
    let other = upload(&url, &crate::common::fixture_corpus().join("mlp_train_all.pickle")).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "analysis-profile").await;
    closing(&client, explore(&client, &url, &leak, &other)).await;
}

/// Pixels of canvas `id` having exactly each of `colours`, and the canvas's
/// pixel count; `None` while it is missing or blank.
async fn pixels(client: &Client, id: &str, colours: &[[u8; 3]]) -> Option<(Vec<u64>, u64)> {
    let script = r#"
        const c = document.getElementById(arguments[0]);
        if (!c || c.width === 0) return null;
        const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
        const want = arguments[1];
        const counts = new Array(want.length).fill(0);
        for (let i = 0; i < d.length; i += 4) {
            for (let k = 0; k < want.length; k++) {
                if (d[i] === want[k][0] && d[i + 1] === want[k][1] && d[i + 2] === want[k][2]) counts[k]++;
            }
        }
        return { total: d.length / 4, counts };
    "#;
    let answer = client.execute(script, vec![json!(id), json!(colours)]).await.ok()?;
    let counts: Vec<u64> = answer["counts"].as_array()?.iter().filter_map(Value::as_u64).collect();
    Some((counts, answer["total"].as_u64()?))
}

async fn explore(client: &Client, url: &str, leak: &str, other: &str) {
    let client = client.clone();
    client.goto(&format!("{url}/snapshots/{leak}")).await.expect("open oom_leak");

    // The OOM post-mortem: PyTorch's figures, the cause, the top stack.
    let oom = until(&client, 60, "the OOM panel", || async {
        let t = text_of(&client, "#oom-panel").await?;
        t.contains("fragmentation").then_some(t)
    })
    .await;
    for figure in ["292 MiB", "349 MiB", "70.2 MiB", "out of memory at trace event 6,677 of 6,680"] {
        assert!(oom.contains(figure), "{figure:?} not in the OOM panel: {oom}");
    }
    let top = text_of(&client, "#oom-stacks tbody tr").await.expect("top stack row");
    assert!(top.contains("/srv/jobs/train.py:96 run"), "{top}");
    // Its frames are open for the first stack, and list the program's line.
    let frames = text_of(&client, "#oom-stacks tbody tr details ol").await.expect("frames");
    assert!(frames.contains("/srv/jobs/train.py:96 run"), "{frames}");
    let avoided = until(&client, 30, "the simulator's verdict", || text_of(&client, "#oom-avoided")).await;
    assert!(avoided.contains("expandable_segments:True") || avoided.starts_with("No simulated"), "{avoided}");
    scroll_to(&client, "#oom-panel").await;
    screenshot(&client, "analysis-1-oom").await;

    // What-if: expandable segments under a 1 GiB cap (oom_leak needs about
    // 2.7 GiB): the simulated curves drawn over the recorded ones, and the
    // simulated OOM.
    scroll_to(&client, "#whatif").await;
    let capacity = client.find(Locator::Css("#whatif-capacity")).await.expect("capacity input");
    capacity.send_keys("1GiB").await.expect("type a capacity");
    client.find(Locator::Css("#whatif-run")).await.expect("simulate").click().await.expect("click simulate");
    let (counts, total) = until(&client, 60, "the simulated curves", || async {
        let (c, t) =
            pixels(&client, "whatif-canvas", &[SIM_RESERVED, SIM_ALLOCATED, REC_RESERVED, REC_ALLOCATED]).await?;
        (c[0] > 100 && c[1] > 100).then_some((c, t))
    })
    .await;
    eprintln!("what-if canvas: {counts:?} of {total}");
    scroll_to(&client, "#whatif").await;
    screenshot(&client, "analysis-2-whatif").await;
    assert!(counts[2] > 100 && counts[3] > 100, "the recorded curves are drawn too: {counts:?}");
    let figures = text_of(&client, "#whatif-figures").await.expect("figures");
    assert!(figures.contains("out of memory\nat event") || figures.contains("at event"), "{figures}");
    let settings = text_of(&client, "#whatif-settings").await.expect("settings line");
    assert!(settings.contains("expandable_segments:True") && settings.contains("capacity 1.00 GiB"), "{settings}");

    // Rank the settings, then try the best row.
    client.find(Locator::Css("#tune-run")).await.expect("rank").click().await.expect("click rank");
    let table = until(&client, 120, "the ranking", || text_of(&client, "#tune-table tbody")).await;
    assert!(table.contains("(recorded)"), "{table}");
    let first = client.find(Locator::Css("#tune-table tbody tr")).await.expect("first row");
    let conf = first.find(Locator::Css("code")).await.expect("settings cell").text().await.expect("text");
    first.find(Locator::Css("button.try")).await.expect("try").click().await.expect("click try");
    let want = conf.trim_end_matches(" (recorded)").to_owned();
    let tried = until(&client, 60, "the tried row replayed", || async {
        let s = text_of(&client, "#whatif-settings").await?;
        s.contains(&format!("Replayed with {want} ")).then_some(s)
    })
    .await;
    eprintln!("tried: {tried}");
    scroll_to(&client, "#tune-table").await;
    screenshot(&client, "analysis-3-tune").await;

    // Leaks: the kept losses' outputs first.
    let leaks = until(&client, 30, "the leak ranking", || text_of(&client, "#leaks-table tbody tr")).await;
    assert!(leaks.contains("train.py:96 run") && leaks.contains("growing"), "{leaks}");
    let (drawn, _) = until(&client, 30, "the growth chart", || async {
        let (c, t) = pixels(&client, "leaks-canvas", &[[207, 34, 46]]).await?;
        (c[0] > 50).then_some((c, t))
    })
    .await;
    eprintln!("leaks canvas: {drawn:?}");
    scroll_to(&client, "#leaks-panel").await;
    screenshot(&client, "analysis-4-leaks").await;

    // Compare with the other snapshot, picked on this page.
    scroll_to(&client, "#compare-picker").await;
    let select =
        until(&client, 30, "the snapshot picker", || async { client.find(Locator::Css("#compare-with")).await.ok() })
            .await;
    select.select_by_value(other).await.expect("pick the other snapshot");
    let link = client.find(Locator::Css("#compare-link")).await.expect("compare link");
    click_when_still(&client, &link, "the compare link").await;
    until(&client, 30, "the compare page", || async {
        let u = client.current_url().await.ok()?;
        (u.path() == format!("/compare/{leak}/{other}")).then_some(())
    })
    .await;
    for align in ["event", "step"] {
        if align == "step" {
            client.find(Locator::Css("#align-step")).await.expect("step").click().await.expect("click step");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        for side in ["compare-a", "compare-b"] {
            let (c, _) = until(&client, 60, &format!("{side} drawn by {align}"), || async {
                let (c, t) = pixels(&client, side, &[REC_RESERVED, REC_ALLOCATED]).await?;
                (c[0] > 50 && c[1] > 20).then_some((c, t))
            })
            .await;
            eprintln!("{side} ({align}): {c:?}");
        }
        if align == "step" {
            // A line between steps: oom_leak has 12.
            until(&client, 30, "the step boundaries", || async {
                let (c, _) = pixels(&client, "compare-a", &[[130, 80, 223]]).await?;
                (c[0] > 11 * 100).then_some(())
            })
            .await;
        }
        screenshot(&client, &format!("analysis-5-compare-{align}")).await;
    }
    let stacks = text_of(&client, "#compare-stacks").await.expect("stack changes");
    assert!(stacks.contains("vanished") && stacks.contains("appeared"), "{stacks}");

    // The comparison page reloads at its own address.
    client.refresh().await.expect("reload");
    until(&client, 60, "the compare page after a reload", || async {
        let (c, _) = pixels(&client, "compare-b", &[REC_RESERVED]).await?;
        (c[0] > 50).then_some(())
    })
    .await;
}

/// The `oom_leak` page showed "largest free block 292 MiB" in its cards and
/// "largest free block 70.2 MiB" in the OOM post-mortem, without a word on
/// why they differ: one is the snapshot's end, the other the OOM. Each now
/// names its moment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_largest_free_block_figures_name_their_moment() {
    let (_server, url) = start_server(&scratch("analysis-moment-data"), &[]);
    assert_dashboard_built(&url).await;
    let leak = upload(&url, &crate::common::fixture_corpus().join("oom_leak.pickle")).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "analysis-moment-profile").await;
    closing(&client, async {
        client.goto(&format!("{url}/snapshots/{leak}")).await.expect("open oom_leak");
        // Card labels are upper case by CSS: compare in lower case.
        let card = |scope: &'static str| {
            let client = client.clone();
            async move {
                let script = "return [...document.querySelectorAll(arguments[0] + ' .card')]\
                    .map((c) => c.textContent.toLowerCase()).find((t) => t.includes('largest free block')) || null;";
                client.execute(script, vec![json!(scope)]).await.ok()?.as_str().map(str::to_owned)
            }
        };
        let end = until(&client, 60, "the card at the end", || card("#stats-summary")).await;
        assert!(end.contains("at the end") && end.contains("292 mib"), "{end}");
        let at_oom = until(&client, 60, "the post-mortem's card", || card("#oom-panel")).await;
        assert!(at_oom.contains("at the oom") && at_oom.contains("70.2 mib"), "{at_oom}");
        let said = text_of(&client, "#oom-moment").await.expect("the post-mortem says its moment");
        assert!(said.contains("at the OOM") && said.contains("snapshot's end"), "{said}");
        scroll_to(&client, "#oom-panel").await;
        screenshot(&client, "analysis-moment").await;
    })
    .await;
}

/// The compare page's figures listed "largest free block" with no moment,
/// while the snapshot page says "largest free block at the end" of the same
/// figure: the row now names its moment as the card does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_compare_largest_free_block_names_its_moment() {
    let (_server, url) = start_server(&scratch("analysis-compare-moment-data"), &[]);
    assert_dashboard_built(&url).await;
    let leak = upload(&url, &crate::common::fixture_corpus().join("oom_leak.pickle")).await;
    let other = upload(&url, &crate::common::fixture_corpus().join("mlp_train_all.pickle")).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "analysis-compare-moment-profile").await;
    closing(&client, async {
        client.goto(&format!("{url}/compare/{leak}/{other}")).await.expect("open the comparison");
        let script = "return [...document.querySelectorAll('.compare-figures th')]\
            .map((c) => c.textContent).filter((t) => t.includes('largest free block'));";
        let labels = until(&client, 60, "the figures' table", || async {
            let v = client.execute(script, vec![]).await.ok()?;
            let labels: Vec<String> = serde_json::from_value(v).ok()?;
            (!labels.is_empty()).then_some(labels)
        })
        .await;
        assert!(labels.iter().all(|l| l == "largest free block at the end"), "{labels:?}");
        scroll_to(&client, ".compare-figures").await;
        screenshot(&client, "analysis-compare-moment").await;
    })
    .await;
}
