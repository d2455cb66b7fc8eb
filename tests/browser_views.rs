//! The snapshot page's views in a real browser (headless Chromium driven by
//! fantoccini, against a real `vramscope serve`): the segment timeline
//! drawn, a click on the timeline opening the allocator state at that
//! instant, arrow keys stepping it row by row, search by frame text and by
//! address with match counts, the fragmentation panel with the allocator
//! settings, the minimap's brush dragged, comment markers and the
//! annotations track, a permalink opened in a fresh tab showing the same
//! view, and HiDPI backing stores at a device pixel ratio of 2. Pixels are
//! read from the canvases, not only the DOM; screenshots of each step go to
//! `target/browser-artifacts/views-*.png`.
//!
//! Needs what `tests/browser.rs` needs (Chromium, chromedriver, the
//! dashboard built into the binary) and `gpt_varlen.pickle` from the corpus
//! folder (`VRAMSCOPE_CORPUS`) for the annotations track.

use crate::common::browser::*;

use std::time::Duration;

use fantoccini::actions::{InputSource, MouseActions, PointerAction};
use fantoccini::{Client, Locator};
use serde_json::{Value, json};

/// Canvas colours of the views (plot/src/palette.rs).
const SEG_ALLOCATED: [u8; 3] = [9, 105, 218];
const SEG_INACTIVE: [u8; 3] = [208, 215, 222];
const LARGEST_FREE: [u8; 3] = [26, 127, 55];
const MATCH: [u8; 3] = [191, 135, 0];
const ANNOTATION: [u8; 3] = [221, 244, 255];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_state_search_fragmentation_minimap_and_permalinks_in_chromium() {
    let (_server, url) = start_server(&scratch("views"), &[]);
    assert_dashboard_built(&url).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "profile-views").await;
    closing(&client, explore(&client, &url)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canvases_are_sharp_at_a_device_pixel_ratio_of_two() {
    let (_server, url) = start_server(&scratch("views-hidpi"), &[]);
    assert_dashboard_built(&url).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect_scaled(&driver_url, "profile-views-hidpi", 2).await;
    closing(&client, hidpi(&client, &url)).await;
}

async fn api(url: &str, path: &str) -> Value {
    reqwest::get(format!("{url}{path}")).await.expect("GET").json().await.expect("json")
}

/// The first pixel of `colour`, top down, in the pixel column `across`
/// (0 to 1) of a canvas: CSS pixels from its top-left corner.
async fn first_pixel(client: &Client, canvas: &str, colour: [u8; 3], across: f64) -> Option<(f64, f64)> {
    let script = r#"
        const c = document.getElementById(arguments[0]);
        const [want, across] = [arguments[1], arguments[2]];
        const x = Math.floor(c.width * across);
        const d = c.getContext("2d").getImageData(x, 0, 1, c.height).data;
        const scale = c.width / c.getBoundingClientRect().width;
        for (let y = 0; y < c.height; y++) {
            const i = y * 4;
            if (Math.abs(d[i] - want[0]) <= 2 && Math.abs(d[i + 1] - want[1]) <= 2 && Math.abs(d[i + 2] - want[2]) <= 2) {
                return [x / scale, y / scale + 0.5];
            }
        }
        return null;
    "#;
    let answer = client.execute(script, vec![json!(canvas), json!(colour), json!(across)]).await.ok()?;
    let v: Vec<f64> = answer.as_array()?.iter().filter_map(Value::as_f64).collect();
    Some((*v.first()?, *v.get(1)?))
}

/// An element's box in the viewport: left, top, width, height.
async fn box_of(client: &Client, id: &str) -> (f64, f64, f64, f64) {
    let r = client
        .execute(
            "const r = document.getElementById(arguments[0]).getBoundingClientRect(); return [r.left, r.top, r.width, r.height];",
            vec![json!(id)],
        )
        .await
        .expect("box");
    let v: Vec<f64> = r.as_array().expect("array").iter().filter_map(Value::as_f64).collect();
    (v[0], v[1], v[2], v[3])
}

async fn scroll_to(client: &Client, id: &str) {
    client
        .execute("document.getElementById(arguments[0]).scrollIntoView({block: 'start'})", vec![json!(id)])
        .await
        .expect("scroll");
    tokio::time::sleep(Duration::from_millis(300)).await;
}

async fn click_at(client: &Client, x: f64, y: f64) {
    let click = MouseActions::new("mouse".to_owned())
        .then(PointerAction::MoveTo { duration: None, x, y })
        .then(PointerAction::Down { button: fantoccini::actions::MOUSE_BUTTON_LEFT })
        .then(PointerAction::Up { button: fantoccini::actions::MOUSE_BUTTON_LEFT });
    client.perform_actions(click).await.expect("click");
}

/// The row in the state panel's heading: `Allocator state after row 1,234 …`.
fn heading_row(heading: &str) -> Option<u32> {
    let rest = heading.split("after row ").nth(1)?;
    rest.split(|c: char| !(c.is_ascii_digit() || c == ',')).next()?.replace(',', "").parse().ok()
}

/// The number a count line starts with: `37 matches · …`.
fn leading_count(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.replace(',', "").parse().ok()
}

/// Wait until the state panel shows a row other than `not`.
async fn state_row(client: &Client, not: Option<u32>, what: &str) -> (u32, String) {
    until(client, 30, what, || async {
        let heading = text_of(client, "#state-heading").await?;
        let row = heading_row(&heading)?;
        let figures = text_of(client, "#state-figures").await?;
        (Some(row) != not).then_some((row, figures))
    })
    .await
}

async fn explore(client: &Client, url: &str) {
    let client = client.clone();
    let id = upload(url, &crate::common::fixture_corpus().join("oom_leak.pickle")).await;
    // A comment on row 3000, for its marker on the track.
    let posted = reqwest::Client::new()
        .post(format!("{url}/api/v1/snapshots/{id}/comments"))
        .json(&json!({"body": "the loop starts keeping outputs here", "row": 3000}))
        .send()
        .await
        .expect("post a comment");
    assert!(posted.status().is_success(), "comment: {}", posted.status());

    client.goto(&format!("{url}/snapshots/{id}")).await.expect("open the snapshot");
    // The timeline and the segment timeline, drawn.
    timeline_drawn(&client, 60, "the timeline drawn").await;
    let (painted, seg) = until(&client, 60, "the segment timeline drawn", || async {
        let (painted, c) = colours(&client, "segments", &[SEG_ALLOCATED, SEG_INACTIVE]).await?;
        (c[0] > 500).then_some((painted, c))
    })
    .await;
    eprintln!("segments: painted {painted}, allocated/free {seg:?}");
    assert!(seg[1] > 100, "free blocks show in the segment split: {seg:?}");
    // Rounding waste is real here but a sliver beside 2 MiB blocks: the
    // answer behind the drawing carries it.
    let answer = api(url, &format!("/api/v1/snapshots/{id}/segments?axis=event&columns=100")).await;
    // A cell is `[column, columns, segment, size, allocated, waste, …]`.
    let waste: u64 = answer["cells"].as_array().expect("cells").iter().filter_map(|c| c[5].as_u64()).sum();
    assert!(waste > 0, "rounding waste in the segment split");
    // Pointing at an allocated part names its segment and figures (the
    // answer's cells are runs of columns: the pointer's column is inside
    // one), and a click there moves the allocator state to that column.
    scroll_to(&client, "segments").await;
    let (x, y) = first_pixel(&client, "segments", SEG_ALLOCATED, 0.3).await.expect("an allocated part 30% across");
    let (left, top, _, _) = box_of(&client, "segments").await;
    let hover =
        MouseActions::new("mouse".to_owned()).then(PointerAction::MoveTo { duration: None, x: left + x, y: top + y });
    client.perform_actions(hover).await.expect("hover the segment timeline");
    let said = until(&client, 10, "the segment's figures", || async {
        text_of(&client, "#segments-hover").await.filter(|t| t.starts_with("segment 0x"))
    })
    .await;
    eprintln!("segment hover: {said}");
    assert!(said.contains(" allocated (") && said.contains(" blocks"), "{said}");
    let hovered_row = heading_row(&said).expect("the column's row");
    click_at(&client, left + x, top + y).await;
    until(&client, 30, "the state at the segment clicked", || async {
        let heading = text_of(&client, "#state-heading").await?;
        (heading_row(&heading)? == hovered_row).then_some(())
    })
    .await;
    scroll_to(&client, "timeline").await;
    // The comment's marker, and the benchmark's draw timings.
    let (_, marks) = until(&client, 20, "the comment marker", || async {
        let (p, c) = colours(&client, "track", &[COMMENT]).await?;
        (c[0] > 10).then_some((p, c))
    })
    .await;
    assert!(marks[0] > 10, "{marks:?}");
    let draws = client
        .execute(
            "return [(window.__vramscope_draws || []).filter(d => d.kind === 'timeline').length, typeof window.__vramscope_first_draw, (window.__vramscope_draws || []).every(d => d.ms >= 0 && d.at > 0)]",
            vec![],
        )
        .await
        .expect("draws");
    assert!(draws[0].as_u64().unwrap_or(0) >= 1 && draws[1] == "number" && draws[2] == true, "{draws}");
    screenshot(&client, "views-1-segments").await;

    // A click on the timeline opens the allocator state at that instant.
    let (left, top, width, height) = canvas_box(&client).await;
    click_at(&client, left + width * 0.6, top + height * 0.1).await;
    let (row, figures) = state_row(&client, Some(hovered_row), "the state at the click").await;
    assert!(row > 2000 && row < 6680, "60% across the event axis: row {row}");
    let upper = figures.to_uppercase();
    assert!(upper.contains("LARGEST FREE BLOCK") && upper.contains("FRAGMENTATION"), "{figures}");
    let (_, blocks) = until(&client, 20, "the state's blocks drawn", || async {
        let (p, c) = colours(&client, "state-canvas", &[SEG_ALLOCATED, SEG_INACTIVE, LARGEST_FREE]).await?;
        (c[0] > 100).then_some((p, c))
    })
    .await;
    assert!(blocks[2] > 0, "the largest free block is marked: {blocks:?}");
    // The state's figures agree with the API's at that row.
    let state = api(url, &format!("/api/v1/snapshots/{id}/state?at={row}")).await;
    let largest = state["figures"]["largest_free"].as_u64().expect("largest free");
    assert!(largest > 0);
    scroll_to(&client, "state-panel").await;
    screenshot(&client, "views-2-state").await;

    // Arrow keys step the instant row by row; the figures follow.
    let mut seen = vec![figures.clone()];
    let mut at = row;
    for _ in 0..3 {
        press(&client, '\u{E014}').await; // ArrowRight
        let (next, figures) = state_row(&client, Some(at), "a step right").await;
        assert_eq!(next, at + 1);
        at = next;
        seen.push(figures);
    }
    assert!(seen.windows(2).any(|w| w[0] != w[1]), "some step changes the figures: {seen:?}");
    press(&client, '\u{E012}').await; // ArrowLeft
    let (back, _) = state_row(&client, Some(at), "a step left").await;
    assert_eq!(back, row + 2);
    let link = client.current_url().await.expect("url").to_string();
    assert!(link.contains(&format!("row={}", row + 2)), "the URL holds the cursor: {link}");

    // Search by frame text: the count is the API's; matches are ticked.
    let by_text = api(url, &format!("/api/v1/snapshots/{id}/search?q=train.py")).await;
    let expected = by_text["total"].as_u64().expect("total");
    assert!(expected > 0);
    let search = client.find(Locator::Css("#search")).await.expect("search box");
    search.send_keys("train.py").await.expect("type");
    let count = until(&client, 20, "the frame-text count", || async {
        let t = text_of(&client, "#search-count").await?;
        (leading_count(&t) == Some(expected)).then_some(t)
    })
    .await;
    assert!(count.contains("frame"), "{count}");
    let (_, ticks) = until(&client, 20, "the match ticks", || async {
        let (p, c) = colours(&client, "track", &[MATCH]).await?;
        (c[0] > 0).then_some((p, c))
    })
    .await;
    assert!(ticks[0] > 0);
    screenshot(&client, "views-3-search-text").await;
    // By address: inside the first match's block.
    let first = &by_text["matches"][0];
    let addr = first["addr"].as_u64().expect("addr");
    search.send_keys(&BACKSPACE.repeat(20)).await.expect("clear");
    search.send_keys(&format!("0x{:x}", addr + 16)).await.expect("type an address");
    let listed = until(&client, 20, "the address matches", || async {
        let t = text_of(&client, "#search-count").await?;
        let list = text_of(&client, "#search-results").await?;
        (t.contains("address") && list.contains(&format!("0x{addr:x}"))).then_some((t, list))
    })
    .await;
    assert!(leading_count(&listed.0).is_some_and(|n| n >= 1), "{listed:?}");
    // Selecting a match moves the cursor to its allocation's row.
    let button = client.find(Locator::Css("#search-results button")).await.expect("a match");
    let label = button.text().await.expect("label");
    button.click().await.expect("select");
    if let Some(r) = label.split("row ").nth(1).and_then(|r| r.replace(',', "").trim().parse::<u32>().ok())
        && r != back
    {
        let (now, _) = state_row(&client, Some(back), "the cursor at the match").await;
        assert_eq!(now, r, "{label}");
    }
    scroll_to(&client, "segments").await;
    screenshot(&client, "views-4-search-address").await;

    // Zoom in, then drag the minimap's brush: the window moves.
    press(&client, '+').await;
    let zoomed = new_window(&client, (0, 6680), "a zoom").await;
    press(&client, '+').await;
    let zoomed = new_window(&client, zoomed, "a second zoom").await;
    client
        .execute("document.getElementById('minimap').scrollIntoView({block: 'center'})", vec![])
        .await
        .expect("scroll to the minimap");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (ml, mt, mw, mh) = box_of(&client, "minimap").await;
    let centre = (zoomed.0 + zoomed.1) as f64 / 2.0 / 6680.0;
    // Find the brush on the minimap by its outline colour.
    let brush = client
        .execute(
            r#"const c = document.getElementById('minimap'); const ctx = c.getContext('2d');
               const y = Math.floor(c.height / 2); const d = ctx.getImageData(0, y, c.width, 1).data;
               let lo = -1, hi = -1;
               for (let x = 0; x < c.width; x++) { const i = 4 * x;
                 if (d[i] === 5 && d[i+1] === 80 && d[i+2] === 174) { if (lo < 0) lo = x; hi = x; } }
               return [lo / (c.width / c.clientWidth), hi / (c.width / c.clientWidth)];"#,
            vec![],
        )
        .await
        .expect("brush");
    let (b0, b1) = (brush[0].as_f64().expect("lo"), brush[1].as_f64().expect("hi"));
    assert!(b0 >= 0.0 && b1 > b0, "the brush is drawn: {brush}");
    let grab = ml + (b0 + b1) / 2.0;
    eprintln!("brush {b0}..{b1} of {mw}, window centre at {centre:.2} of the trace");
    let drag = MouseActions::new("drag".to_owned())
        .then(PointerAction::MoveTo { duration: None, x: grab, y: mt + mh / 2.0 })
        .then(PointerAction::Down { button: fantoccini::actions::MOUSE_BUTTON_LEFT })
        .then(PointerAction::MoveBy { duration: Some(Duration::from_millis(200)), x: 120.0, y: 0.0 })
        .then(PointerAction::Up { button: fantoccini::actions::MOUSE_BUTTON_LEFT });
    client.perform_actions(drag).await.expect("drag the brush");
    let dragged = new_window(&client, zoomed, "the brush dragged").await;
    assert!(dragged.0 > zoomed.0, "dragging the brush right shows later rows: {dragged:?} after {zoomed:?}");
    assert_eq!(dragged.1 - dragged.0, zoomed.1 - zoomed.0, "the brush keeps the width");
    screenshot(&client, "views-5-minimap-dragged").await;
    // Draw times so far, per canvas (printed, not asserted: speed is the
    // benchmark's business).
    let times = client
        .execute(
            r#"const by = {}; for (const d of window.__vramscope_draws) (by[d.kind] = by[d.kind] || []).push(d.ms);
               const out = {}; for (const k in by) { const v = by[k].sort((a, b) => a - b);
                 out[k] = { draws: v.length, median_ms: v[Math.floor(v.length / 2)], max_ms: v[v.length - 1] }; }
               return out;"#,
            vec![],
        )
        .await
        .expect("draw times");
    eprintln!("draw times (oom_leak, 1400 px window): {times}");
    // Regression: every draw is recorded (the array was once copied on
    // each push, keeping only the first).
    assert!(times["timeline"]["draws"].as_u64().unwrap_or(0) >= 4, "{times}");
    for kind in ["segments", "track", "minimap", "state"] {
        assert!(times[kind]["draws"].as_u64().unwrap_or(0) >= 1, "{kind}: {times}");
    }

    // The fragmentation panel: the settings, and its curves.
    client.find(Locator::Css("#tab-fragmentation")).await.expect("tab").click().await.expect("open the tab");
    let settings = until(&client, 30, "the allocator settings", || text_of(&client, "#alloc-settings")).await;
    assert!(settings.contains("PYTORCH_CUDA_ALLOC_CONF") && settings.contains("not set"), "{settings}");
    assert!(settings.contains("expandable_segments") && settings.contains("off"), "{settings}");
    until(&client, 30, "the fragmentation curves", || async {
        let (_, c) = colours(&client, "fragmentation", &[SEG_ALLOCATED]).await?;
        (c[0] > 50).then_some(())
    })
    .await;
    scroll_to(&client, "fragmentation-panel").await;
    screenshot(&client, "views-6-fragmentation").await;

    // The permalink: the URL now holds the window, the cursor, the
    // selection, the tab and the search; a fresh tab opens the same view.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let link = client.current_url().await.expect("url").to_string();
    for part in ["device=0", "axis=event", "start=", "end=", "row=", "sel=0x", "tab=fragmentation", "q=0x"] {
        assert!(link.contains(part), "{part} in {link}");
    }
    let status = text_of(&client, "#timeline-status").await.expect("status");
    let heading = text_of(&client, "#state-heading").await;
    let count = text_of(&client, "#search-count").await.expect("count");
    let settings_before = settings.clone();
    let original = client.window().await.expect("this tab");
    let fresh = client.new_window(true).await.expect("a new tab");
    client.switch_to_window(fresh.handle).await.expect("switch");
    client.goto(&link).await.expect("open the link");
    let restored = until(&client, 60, "the linked window", || async {
        if client.find(Locator::Css("#timeline-loading")).await.is_ok() {
            return None;
        }
        let s = text_of(&client, "#timeline-status").await?;
        (rows_shown(&s) == rows_shown(&status)).then_some(s)
    })
    .await;
    assert_eq!(rows_shown(&restored), Some(dragged), "{restored}");
    let settings_after = until(&client, 30, "the linked tab", || text_of(&client, "#alloc-settings")).await;
    assert_eq!(settings_after, settings_before);
    until(&client, 30, "the linked search", || async {
        (text_of(&client, "#search-count").await? == count).then_some(())
    })
    .await;
    // Clicked again while the heading is missing: once in a CI run (2 cores,
    // busy) the linked page took the first click while it was still
    // settling, and the tab never opened. Choosing the tab is idempotent.
    let heading_after = until(&client, 30, "the linked cursor", || async {
        if let Some(heading) = text_of(&client, "#state-heading").await {
            return Some(heading);
        }
        if let Ok(tab) = client.find(Locator::Css("#tab-state")).await {
            let _ = tab.click().await;
        }
        None
    })
    .await;
    if let Some(h) = heading {
        assert_eq!(heading_row(&heading_after), heading_row(&h), "{heading_after} vs {h}");
    }
    assert!(heading_row(&heading_after).is_some(), "{heading_after}");
    screenshot(&client, "views-7-permalink-opened").await;
    client.close_window().await.expect("close the tab");
    client.switch_to_window(original).await.expect("back");

    // The annotations track: gpt_varlen records a range per training step.
    let varlen = upload(url, &crate::common::large_corpus().join("gpt_varlen.pickle")).await;
    client.goto(&format!("{url}/snapshots/{varlen}")).await.expect("open gpt_varlen");
    let hint = until(&client, 120, "the annotations", || async {
        let t = text_of(&client, "#track-hover").await?;
        t.contains("annotated ranges").then_some(t)
    })
    .await;
    let expected =
        api(url, &format!("/api/v1/snapshots/{varlen}/annotations?axis=event")).await["total"].as_u64().expect("total");
    assert!(hint.starts_with(&format!("{expected} annotated ranges")), "{hint} vs {expected}");
    let (_, lanes) = until(&client, 30, "the annotation ranges drawn", || async {
        let (p, c) = colours(&client, "track", &[ANNOTATION]).await?;
        (c[0] > 200).then_some((p, c))
    })
    .await;
    eprintln!("annotation pixels: {lanes:?}");
    screenshot(&client, "views-8-annotations").await;
}

async fn hidpi(client: &Client, url: &str) {
    let client = client.clone();
    let id = upload(url, &crate::common::fixture_corpus().join("streams.pickle")).await;
    client.goto(&format!("{url}/snapshots/{id}")).await.expect("open");
    let ratio = client.execute("return window.devicePixelRatio", vec![]).await.expect("dpr");
    assert_eq!(ratio.as_f64(), Some(2.0));
    for canvas in ["timeline", "segments", "minimap", "track"] {
        let sizes = until(&client, 60, &format!("the {canvas} canvas drawn"), || async {
            let v = client
                .execute(
                    "const c = document.getElementById(arguments[0]); if (!c) return null; return [c.width, c.clientWidth, c.height, c.clientHeight];",
                    vec![json!(canvas)],
                )
                .await
                .ok()?;
            let v: Vec<u64> = v.as_array()?.iter().filter_map(Value::as_u64).collect();
            (v.len() == 4 && v[1] > 300 && v[0] == 2 * v[1]).then_some(v)
        })
        .await;
        assert_eq!(sizes[2], 2 * sizes[3], "{canvas}: {sizes:?}");
    }
    // The timeline's curves are drawn at full resolution, labels included.
    until(&client, 30, "the timeline's pixels", || async {
        let p = canvas_pixels(&client).await?;
        (p.allocated > 800).then_some(())
    })
    .await;
    screenshot(&client, "views-9-hidpi").await;
}

#[test]
fn reads_headings_and_counts() {
    assert_eq!(heading_row("Allocator state after row 4,211 (18:27:55.123 UTC) of 6,680"), Some(4211));
    assert_eq!(heading_row("Allocator state before the trace's first event of 6,680"), None);
    assert_eq!(leading_count("1,204 matches · allocations with that text in a frame"), Some(1204));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_breakdown_panel_follows_the_cursor_in_chromium() {
    let (_server, url) = start_server(&scratch("views-breakdown"), &[]);
    assert_dashboard_built(&url).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "profile-views-breakdown").await;
    closing(&client, breakdown(&client, &url)).await;
}

/// Parameters' dark blue in the stacked chart (palette::CATEGORIES[0]).
const PARAMETERS: [u8; 3] = [5, 80, 174];
/// Activations' orange (palette::CATEGORIES[3]).
const ACTIVATIONS: [u8; 3] = [219, 109, 40];

async fn breakdown(client: &Client, url: &str) {
    let file = crate::common::fixture_corpus().join("breakdown_python_after_step.pickle");
    let id = upload(url, &file).await;
    client.goto(&format!("{url}/snapshots/{id}?tab=breakdown")).await.expect("open the snapshot");
    let figures = until(client, 30, "the breakdown at the end", || async {
        let t = text_of(client, "#breakdown-figures").await?;
        t.contains("105 MiB").then_some(t)
    })
    .await;
    for word in ["parameters", "gradients", "optimizer state", "activations", "other", "from stacks"] {
        assert!(figures.to_lowercase().contains(word), "{word} in {figures}");
    }
    let stages = text_of(client, "#breakdown-stages").await.expect("stages");
    assert!(stages.contains("Optimizer.step#AdamW.step") && stages.contains("forward"), "{stages}");
    until(client, 30, "the stacked chart", || async {
        let (_, c) = colours(client, "breakdown-chart", &[PARAMETERS, ACTIVATIONS]).await?;
        (c[0] > 200 && c[1] > 50).then_some(())
    })
    .await;
    scroll_to(client, "breakdown-panel").await;
    screenshot(client, "views-7-breakdown").await;

    // A click on the chart a third of the way in moves the cursor there;
    // the figures follow it (the optimizer has made no state yet).
    let before = text_of(client, "#breakdown-at").await.expect("at");
    let (left, top, width, height) = box_of(client, "breakdown-chart").await;
    let actions = MouseActions::new("mouse".to_owned())
        .then(PointerAction::MoveTo {
            duration: None,
            x: (left + width * 0.1).round(),
            y: (top + height / 2.0).round(),
        })
        .then(PointerAction::Down { button: 0 })
        .then(PointerAction::Up { button: 0 });
    client.perform_actions(actions).await.expect("click the chart");
    let after = until(client, 30, "the figures at the new cursor", || async {
        let t = text_of(client, "#breakdown-at").await?;
        (t != before).then_some(t)
    })
    .await;
    assert!(after.contains("right after row"), "{after}");
    let figures = text_of(client, "#breakdown-figures").await.expect("figures");
    assert!(figures.contains("105 MiB"), "parameters exist from the start: {figures}");
    let link = client.current_url().await.expect("url").to_string();
    assert!(link.contains("tab=breakdown") && link.contains("row="), "{link}");
    screenshot(client, "views-8-breakdown-cursor").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_host_memory_has_its_own_section_in_chromium() {
    let (_server, url) = start_server(&scratch("views-host"), &[]);
    assert_dashboard_built(&url).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "profile-views-host").await;
    closing(&client, host_memory(&client, &url)).await;
}

/// The reserved grey and the allocated blue of the palette.
const RESERVED: [u8; 3] = [87, 96, 106];
const ALLOCATED: [u8; 3] = [9, 105, 218];

async fn host_memory(client: &Client, url: &str) {
    let file = crate::common::synthetic_dir().join("host_pinned.p4.pickle");
    let id = upload(url, &file).await;
    client.goto(&format!("{url}/snapshots/{id}")).await.expect("open the snapshot");
    let cards = until(client, 30, "the pinned host memory cards", || async {
        text_of(client, "#host-summary").await.filter(|t| t.contains("72.5 MiB"))
    })
    .await;
    assert!(cards.contains("74.5 MiB") && cards.contains("243"), "pinned peak and host events: {cards}");
    until(client, 30, "the host chart", || async {
        let (_, c) = colours(client, "host-chart", &[RESERVED, ALLOCATED]).await?;
        (c[0] > 100 && c[1] > 100).then_some(())
    })
    .await;
    let (status, body) = (
        reqwest::get(format!("{url}/api/v1/snapshots/{id}/host?px=10")).await.expect("GET").status(),
        api(url, &format!("/api/v1/snapshots/{id}/host?px=10")).await,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["rows"].as_array().map(Vec::len), Some(10), "{body}");
    scroll_to(client, "host-memory").await;
    screenshot(client, "views-9-host-memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cuda_graph_pools_have_bands_of_their_own_in_chromium() {
    let (_server, url) = start_server(&scratch("views-pools"), &[]);
    assert_dashboard_built(&url).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "profile-views-pools").await;
    closing(&client, pools(&client, &url)).await;
}

async fn pools(client: &Client, url: &str) {
    let file = crate::common::fixture_corpus().join("graph_shared_pool.pickle");
    let id = upload(url, &file).await;
    let answer = api(url, &format!("/api/v1/snapshots/{id}/pools")).await;
    let bands = answer["bands"].as_array().expect("bands").len();
    assert!(bands >= 2, "the default pool and the graphs' shared pool: {answer}");
    client.goto(&format!("{url}/snapshots/{id}?tab=pools")).await.expect("open the snapshot");
    let table = until(client, 30, "the pools table", || async {
        text_of(client, "#pools-table").await.filter(|t| t.contains("private pool"))
    })
    .await;
    assert!(table.contains("default pool"), "{table}");
    assert_eq!(table.lines().filter(|l| l.contains(" pool")).count(), bands, "one row per band: {table}");
    until(client, 30, "the bands", || async {
        let (_, c) = colours(client, "pools-chart", &[RESERVED, ALLOCATED]).await?;
        (c[0] > 100 && c[1] > 100).then_some(())
    })
    .await;
    scroll_to(client, "pools-panel").await;
    screenshot(client, "views-10-pools").await;
}

/// The "Allocator state" tab was an empty box until the timeline was
/// clicked. Opened without a cursor, it now shows the state the snapshot
/// recorded (its last row), drawn, and says how to see another instant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_the_state_tab_shows_the_end_before_any_click() {
    let (_server, url) = start_server(&scratch("views-state-end"), &[]);
    assert_dashboard_built(&url).await;
    let id = upload(&url, &crate::common::fixture_corpus().join("oom_leak.pickle")).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "profile-views-state-end").await;
    closing(&client, async {
        client.goto(&format!("{url}/snapshots/{id}")).await.expect("open the snapshot");
        let (row, figures) = state_row(&client, None, "the state at the end, unclicked").await;
        assert_eq!(row, 6679, "the last of oom_leak's 6,680 rows");
        assert!(figures.to_lowercase().contains("reserved"), "{figures}");
        let heading = text_of(&client, "#state-heading").await.expect("heading");
        assert!(heading.contains("of 6,680"), "{heading}");
        let hint = text_of(&client, "#state-hint").await.expect("hint");
        assert!(hint.contains("Click a timeline"), "{hint}");
        until(&client, 30, "the state drawn", || async {
            let (_, c) = colours(&client, "state-canvas", &[SEG_ALLOCATED]).await?;
            (c[0] > 100).then_some(())
        })
        .await;
        scroll_to(&client, "state-panel").await;
        screenshot(&client, "views-state-end").await;
    })
    .await;
}

/// Pixels of canvas `id` that are not background, in the band `x0..x1` ×
/// `y0..y1` given as fractions of its size (negative: from the far edge,
/// in CSS pixels); `None` while it is missing or blank.
async fn ink(client: &Client, id: &str, x: (f64, f64), y: (f64, f64)) -> Option<u64> {
    let script = r#"
        const c = document.getElementById(arguments[0]);
        if (!c || c.width === 0) return null;
        const at = (v, size) => Math.round(v < 0 ? size + v : v <= 1 ? v * size : v);
        const [x0, x1, y0, y1] = [at(arguments[1], c.width), at(arguments[2], c.width), at(arguments[3], c.height), at(arguments[4], c.height)];
        const d = c.getContext("2d").getImageData(x0, y0, Math.max(1, x1 - x0), Math.max(1, y1 - y0)).data;
        let n = 0;
        for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && (d[i] < 235 || d[i + 1] < 235 || d[i + 2] < 235)) n++;
        return n;
    "#;
    client.execute(script, vec![json!(id), json!(x.0), json!(x.1), json!(y.0), json!(y.1)]).await.ok()?.as_u64()
}

/// The charts said nothing of their axes: the segment timeline had no x
/// axis, the breakdown chart and the pools' bands no axes at all, the
/// compare charts no legend, and a thin light-blue line across
/// gpt_varlen's timeline (a 32 MiB allocation never freed) had no word.
/// Each now has its axes' labels drawn and its legend on the page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_every_chart_says_what_its_axes_and_colours_are() {
    let (_server, url) = start_server(&scratch("views-axes"), &[]);
    assert_dashboard_built(&url).await;
    let id = upload(&url, &crate::common::fixture_corpus().join("oom_leak.pickle")).await;
    let other = upload(&url, &crate::common::fixture_corpus().join("mlp_train_all.pickle")).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "profile-views-axes").await;
    closing(&client, async {
        client.goto(&format!("{url}/snapshots/{id}")).await.expect("open the snapshot");
        let legend = until(&client, 60, "the timeline's legend", || text_of(&client, ".timeline-panel .legend")).await;
        assert!(legend.contains("before the trace or never freed"), "{legend}");

        // The segment timeline's x axis: labels in the band under its plot.
        let labels = until(&client, 60, "the segment timeline's x labels", || async {
            ink(&client, "segments", (0.0, 1.0), (-16.0, -1.0)).await.filter(|&n| n > 100)
        })
        .await;
        eprintln!("segments x labels: {labels} pixels");
        let caption = text_of(&client, ".segments-panel .axis-caption").await.expect("the segments' caption");
        assert!(caption.contains("y: segments"), "{caption}");
        scroll_to(&client, "segments").await;
        screenshot(&client, "views-axes-1-segments").await;

        // The breakdown: byte labels left of the plot, rows under it.
        client.find(Locator::Css("#tab-breakdown")).await.expect("tab").click().await.expect("click");
        let (left, bottom) = until(&client, 60, "the breakdown's axes", || async {
            let left = ink(&client, "breakdown-chart", (0.0, 55.0), (0.0, -20.0)).await?;
            let bottom = ink(&client, "breakdown-chart", (62.0, -10.0), (-16.0, -1.0)).await?;
            (left > 100 && bottom > 100).then_some((left, bottom))
        })
        .await;
        eprintln!("breakdown axes: left {left}, bottom {bottom}");
        scroll_to(&client, "breakdown-panel").await;
        screenshot(&client, "views-axes-2-breakdown").await;

        // The pools: each band's byte scale on its left, rows under all.
        client.find(Locator::Css("#tab-pools")).await.expect("tab").click().await.expect("click");
        let (left, bottom) = until(&client, 60, "the pools' axes", || async {
            let left = ink(&client, "pools-chart", (0.0, 55.0), (0.0, -20.0)).await?;
            let bottom = ink(&client, "pools-chart", (62.0, -10.0), (-16.0, -1.0)).await?;
            (left > 50 && bottom > 100).then_some((left, bottom))
        })
        .await;
        eprintln!("pools axes: left {left}, bottom {bottom}");
        scroll_to(&client, "pools-panel").await;
        screenshot(&client, "views-axes-3-pools").await;

        // The comparison's legend.
        client.goto(&format!("{url}/compare/{id}/{other}")).await.expect("open the comparison");
        let legend = until(&client, 60, "the comparison's legend", || text_of(&client, "#compare-legend")).await;
        for word in ["reserved", "allocated", "y: bytes", "x: each trace's events"] {
            assert!(legend.contains(word), "{word:?} in {legend}");
        }
        until(&client, 60, "the comparison drawn", || async {
            ink(&client, "compare-a", (0.0, 1.0), (0.0, 1.0)).await.filter(|&n| n > 1000)
        })
        .await;
        screenshot(&client, "views-axes-4-compare").await;
    })
    .await;
}

/// The timeline's legend named the "OOM" and "trace start" markers on every
/// snapshot, even one with neither; it names only those the window drawn
/// has, as the report's chart does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_the_timeline_legend_names_only_the_markers_drawn() {
    let (_server, url) = start_server(&scratch("views-legend"), &[]);
    assert_dashboard_built(&url).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "profile-views-legend").await;
    closing(&client, legend_markers(&client, &url)).await;
}

/// The legend's text once the timeline has drawn `file` (a corpus file).
async fn legend_once_drawn(client: &Client, url: &str, file: &str) -> String {
    let id = upload(url, &crate::common::fixture_corpus().join(file)).await;
    client.goto(&format!("{url}/snapshots/{id}")).await.expect("open the snapshot");
    until(client, 30, "the timeline drawn", || async {
        let (_, c) = colours(client, "timeline", &[ALLOCATED]).await?;
        (c[0] > 100).then_some(())
    })
    .await;
    scroll_to(client, "timeline").await;
    text_of(client, ".legend").await.expect("the legend")
}

async fn legend_markers(client: &Client, url: &str) {
    // streams: no OOM, and the trace starts from an empty allocator.
    let legend = legend_once_drawn(client, url, "streams.pickle").await;
    screenshot(client, "views-10-legend-no-markers").await;
    assert!(legend.contains("allocated"), "{legend}");
    assert!(!legend.contains("OOM") && !legend.contains("trace start"), "no markers drawn: {legend}");
    // oom_leak: one OOM, no wrap: the OOM's key alone.
    let legend = legend_once_drawn(client, url, "oom_leak.pickle").await;
    assert!(legend.contains("OOM") && !legend.contains("trace start"), "the OOM alone: {legend}");
    screenshot(client, "views-11-legend-oom").await;
}

/// A snapshot page sent a dozen requests at once as it opened (the OOM
/// post-mortem and the leak ranking, which replay the trace, the library
/// for the compare picker, the comments twice, the record twice, the state
/// at the end, the annotations, the time-axis probe), and the timeline the
/// user waits for shared the server and the page's main thread with them.
/// Now only the record and the statistics go before the first timeline,
/// and every other request starts once that timeline's answer is in; the
/// record is asked for once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_the_first_timeline_is_asked_for_before_the_rest_of_the_page() {
    let (_server, url) = start_server(&scratch("views-first-timeline"), &[]);
    assert_dashboard_built(&url).await;
    let id = upload(&url, &crate::common::fixture_corpus().join("oom_leak.pickle")).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "profile-views-first-timeline").await;
    closing(&client, async {
        client.goto(&format!("{url}/snapshots/{id}")).await.expect("open the snapshot");
        // Everything the page asks for on its own has come back.
        until(&client, 60, "the post-mortem", || text_of(&client, "#oom-panel")).await;
        until(&client, 30, "the review thread", || text_of(&client, "#no-comments")).await;
        until(&client, 60, "the leak ranking", || async {
            text_of(&client, "#leaks-panel").await.filter(|t| !t.contains("Loading"))
        })
        .await;
        let script = "return performance.getEntriesByType('resource')\
            .filter(e => new URL(e.name).pathname.startsWith('/api/'))\
            .map(e => [new URL(e.name).pathname + new URL(e.name).search, e.startTime, e.responseEnd])";
        let entries = client.execute(script, vec![]).await.expect("resource timings");
        let requests: Vec<(String, f64, f64)> = serde_json::from_value(entries).expect("[url, start, end] rows");
        let record = format!("/api/v1/snapshots/{id}");
        // Asked with `?wait=` (held by the server while it parses).
        let stats = |u: &str| u == format!("{record}/stats") || u.starts_with(&format!("{record}/stats?"));
        let timeline = |u: &str| u.starts_with(&format!("{record}/timeline?")) && !u.contains("max_allocations=0");
        let first =
            requests.iter().find(|(u, ..)| timeline(u)).unwrap_or_else(|| panic!("no timeline in {requests:?}"));
        let after: Vec<&(String, f64, f64)> =
            requests.iter().filter(|r| r.0 != record && !stats(&r.0) && !std::ptr::eq(*r, first)).collect();
        for (u, start, _) in &after {
            assert!(*start >= first.2, "{u} started at {start:.1} ms, before the first timeline's answer ({first:?})");
        }
        let asked = |part: &str| after.iter().any(|(u, ..)| u.contains(part));
        for part in ["/comments", "/explain?", "/leaks?", "/api/v1/snapshots?", "/annotations?", "/state?"] {
            assert!(asked(part), "no request for {part} after the first timeline: {requests:?}");
        }
        let records = requests.iter().filter(|(u, ..)| *u == record).count();
        assert_eq!(records, 1, "the record once: {requests:?}");
    })
    .await;
}

/// A page opened while the server parses its snapshot asked for the
/// statistics every 400 ms (1.5 s before stop 39) and drew up to that much
/// after the parse ended. It now asks once, and the server holds the
/// answer until the parse ends (`stats?wait=`); the page then draws.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_page_opened_while_the_server_parses_asks_for_the_statistics_once() {
    let env = [("VRAMSCOPE_INLINE_PARSE_MAX_BYTES", "0")];
    let (_server, url) = start_server(&scratch("views-parsing"), &env);
    assert_dashboard_built(&url).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "profile-views-parsing").await;
    // Parsed in the background: 22 MB, well under a second in release and
    // longer in the tests' debug build.
    let id = upload(&url, &crate::common::large_corpus().join("gpt_long.pickle")).await;
    closing(&client, async {
        client.goto(&format!("{url}/snapshots/{id}")).await.expect("open the snapshot");
        until(&client, 60, "the timeline drawn", || async {
            let (_, c) = colours(&client, "timeline", &[ALLOCATED]).await?;
            (c[0] > 500).then_some(())
        })
        .await;
        let script = "return performance.getEntriesByType('resource')\
            .map(e => new URL(e.name)).filter(u => u.pathname.endsWith('/stats')).map(u => u.pathname + u.search)";
        let asked: Vec<String> =
            serde_json::from_value(client.execute(script, vec![]).await.expect("resource timings")).expect("urls");
        assert_eq!(asked, vec![format!("/api/v1/snapshots/{id}/stats?wait=10")], "the statistics, asked once");
    })
    .await;
}

/// A page opened while the server parses its snapshot said "Loading the
/// statistics…" until the parse ended (stop 40 made the statistics'
/// request wait on the server for it), instead of saying that the server
/// is parsing. It now says so as soon as the snapshot's record comes.
/// One parse at a time, so that the upload is not parsed while it streams
/// in and the whole parse (over two seconds of a million rows in the
/// debug build) comes after the page opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_page_opened_while_the_server_parses_says_so_before_the_parse_ends() {
    let env = [("VRAMSCOPE_INLINE_PARSE_MAX_BYTES", "0"), ("VRAMSCOPE_PARSE_CONCURRENCY", "1")];
    let (_server, url) = start_server(&scratch("views-parsing-notice"), &env);
    assert_dashboard_built(&url).await;
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "profile-views-parsing-notice").await;
    let id = upload(&url, &crate::common::million_row_snapshot()).await;
    closing(&client, async {
        client.goto(&format!("{url}/snapshots/{id}")).await.expect("open the snapshot");
        let script = "return [document.body.innerText.includes('The server is still parsing this snapshot'), \
                      typeof window.__vramscope_first_draw === 'number']";
        let mut said = false;
        for _ in 0..1200 {
            let seen: (bool, bool) =
                serde_json::from_value(client.execute(script, vec![]).await.expect("read the page")).expect("pair");
            said |= seen.0;
            if seen.1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(said, "the page drew (or gave up) without saying the server was parsing");
        until(&client, 60, "the timeline drawn", || async {
            let (_, c) = colours(&client, "timeline", &[ALLOCATED]).await?;
            (c[0] > 500).then_some(())
        })
        .await;
    })
    .await;
}
