//! The live page in headless Chromium: a real server, the real agent running
//! `fixtures/fake_job.py` (the real capture module, made-up allocator
//! figures: no GPU here), the dashboard's `/live` list, one source's charts
//! drawn on their canvases, and "Capture now" bringing a snapshot link.

use crate::common::browser::*;

use std::process::{Command, Stdio};
use std::time::Duration;

use fantoccini::Locator;

/// Pixels of `canvas.<class>` in the colour `rgb`.
async fn pixels(client: &fantoccini::Client, class: &str, rgb: [u8; 3]) -> Option<u64> {
    let script = r#"
        const c = document.querySelector("canvas." + arguments[0]);
        if (!c || c.width === 0) return null;
        const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
        const w = arguments[1];
        let n = 0;
        for (let i = 0; i < d.length; i += 4) if (d[i] === w[0] && d[i + 1] === w[1] && d[i + 2] === w[2]) n++;
        return n;
    "#;
    let answer = client.execute(script, vec![serde_json::json!(class), serde_json::json!(rgb)]).await.ok()?;
    answer.as_u64()
}

#[tokio::test(flavor = "multi_thread")]
async fn live_page_streams_charts_and_captures_now() {
    let dir = scratch("live-data");
    let (_server, url) = start_server(&dir.join("data"), &[]);
    assert_dashboard_built(&url).await;
    let _agent = start_agent(&url, "livejob", &dir.join("spool"), &[]);
    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "live-profile").await;
    client.goto(&format!("{url}/live")).await.expect("open /live");
    let row = until(&client, 30, "a live source", || async {
        let text = text_of(&client, "tr.live-source").await?;
        text.contains("livejob").then_some(text)
    })
    .await;
    assert!(row.contains("connected"), "{row}");
    client.find(Locator::Css("tr.live-source a")).await.expect("link").click().await.expect("click");
    // The memory chart's allocated line (blue) and the fragmentation line (orange) get drawn.
    let blue = until(&client, 30, "the memory chart", || async {
        pixels(&client, "live-memory", [9, 105, 218]).await.filter(|n| *n > 50)
    })
    .await;
    let orange = until(&client, 30, "the fragmentation chart", || async {
        pixels(&client, "live-fragmentation", [219, 109, 40]).await.filter(|n| *n > 50)
    })
    .await;
    let cards = text_of(&client, ".live-cards").await.unwrap_or_default();
    assert!(cards.contains("25.0%"), "fragmentation card (the fake job allocates 3/4 of reserved): {cards}");
    client.find(Locator::Css("button.capture-now")).await.expect("button").click().await.expect("click");
    let link = until(&client, 30, "the captured snapshot's link", || async {
        text_of(&client, "ul.live-snapshots a").await.filter(|t| t.contains("manual"))
    })
    .await;
    screenshot(&client, "live-source").await;
    eprintln!("memory chart {blue} blue px, fragmentation {orange} orange px, snapshot {link}");

    // A process on cudaMallocAsync: telemetry, and the page says why no
    // snapshot can be taken.
    let _async_agent = start_agent(&url, "asyncjob", &dir.join("spool-async"), &["--backend", "cudaMallocAsync"]);
    client.goto(&format!("{url}/live")).await.expect("open /live");
    let href = until(&client, 30, "the cudaMallocAsync source", || async {
        let links = client.find_all(Locator::Css("tr.live-source a")).await.ok()?;
        for link in links {
            let href = link.attr("href").await.ok()??;
            if href.contains("asyncjob") {
                return Some(href);
            }
        }
        None
    })
    .await;
    client.goto(&format!("{url}{href}")).await.expect("open the source");
    let note = until(&client, 30, "the no-history note", || async { text_of(&client, "#no-history").await }).await;
    assert!(note.contains("No allocator history under this backend (cudaMallocAsync)"), "{note}");
    until(&client, 30, "its memory chart", || async {
        pixels(&client, "live-memory", [9, 105, 218]).await.filter(|n| *n > 50)
    })
    .await;
    screenshot(&client, "live-no-history").await;

    // A snapshot the agent captured carries NVML's figures: the snapshot
    // page shows the memory outside the caching allocator.
    let captured = crate::common::synthetic_dir().join("captured.p4.pickle");
    let id = upload(&url, &captured).await;
    client.goto(&format!("{url}/snapshots/{id}")).await.expect("open the snapshot");
    let cards = until(&client, 30, "the summary cards", || async {
        // The labels are upper case by CSS, and the driver reads rendered text.
        text_of(&client, "#stats-summary").await.filter(|t| t.to_lowercase().contains("outside the caching allocator"))
    })
    .await;
    assert!(cards.contains("537 MiB"), "537 MiB outside on device 0: {cards}");
    // And the job's settings as the capture module recorded them.
    let page = text_of(&client, "section").await.unwrap_or_default();
    assert!(
        page.contains("Captured by vramscope agent: torch 2.11.0+cu128, allocator backend native, PYTORCH_ALLOC_CONF=expandable_segments:True"),
        "{page}"
    );
    screenshot(&client, "snapshot-outside-allocator").await;
    client.close().await.expect("close");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// `vramscope agent` sending to `url` as job `job`, spooling in `spool`,
/// around the fake job (a minute at 40% of its memory, `extra` arguments,
/// `state_only.pickle` as its snapshot); stopped when dropped.
fn start_agent(url: &str, job: &str, spool: &std::path::Path, extra: &[&str]) -> Process {
    let script = crate::common::workspace_root().join("tests/fixtures/fake_job.py");
    let snapshot = crate::common::fixture_corpus().join("state_only.pickle");
    Process(
        Command::new(env!("CARGO_BIN_EXE_vramscope"))
            .args(["agent", "--server", url, "--job", job, "--interval", "200ms", "--spool-dir"])
            .arg(spool)
            .args(["--", "python3"])
            .arg(&script)
            .args(["--seconds", "60", "--peak", "0.4"])
            .args(extra)
            .arg("--snapshot")
            .arg(&snapshot)
            .env_remove("PYTHONPATH")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("agent"),
    )
}
