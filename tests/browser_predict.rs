//! "Will it fit?" on a job's page in a real browser (headless Chromium
//! over WebDriver, against a real `vramscope serve`): two real snapshots
//! of one job tagged `batch=4` and `batch=6`, their sizes filled from the
//! tags, a capacity typed, Predict pressed; the chart draws the capacity
//! line and the predictions in their colours, and the table names the
//! largest batch that fits, the one the API answers.
//!
//! Needs Chromium, chromedriver and the dashboard built into the binary,
//! like `tests/browser.rs`; the screenshot is `target/browser-artifacts/predict-job.png`.

use crate::common::browser::*;

use fantoccini::{Client, Locator};
use serde_json::{Value, json};

/// The chart's colours (plot/src/palette.rs) as the canvas holds them.
const CAPACITY: [u8; 3] = [219, 109, 40];
const PREDICTED: [u8; 3] = [130, 80, 223];
const RUNS_OUT: [u8; 3] = [207, 34, 46];
const RECORDED: [u8; 3] = [5, 80, 174];
const LARGEST: [u8; 3] = [26, 127, 55];

async fn upload_tagged(url: &str, name: &str, query: &str) -> String {
    let bytes = std::fs::read(crate::predict::predict_fixture(name)).expect("fixture");
    upload_with_query(url, bytes, &format!("name={name}&{query}")).await
}

/// Pixels of `#predict-canvas` of each colour.
async fn chart_pixels(client: &Client, colours: &[[u8; 3]]) -> Option<Vec<u64>> {
    let script = r#"
        const c = document.getElementById("predict-canvas");
        if (!c || c.width === 0) return null;
        const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
        const want = arguments[0];
        const counts = new Array(want.length).fill(0);
        for (let i = 0; i < d.length; i += 4) {
            for (let k = 0; k < want.length; k++) {
                if (d[i] === want[k][0] && d[i + 1] === want[k][1] && d[i + 2] === want[k][2]) counts[k]++;
            }
        }
        return counts;
    "#;
    let answer = client.execute(script, vec![json!(colours)]).await.ok()?;
    Some(answer.as_array()?.iter().filter_map(Value::as_u64).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn will_it_fit_on_a_jobs_page_in_chromium() {
    let (_server, url) = start_server(&scratch("predict-data"), &[]);
    assert_dashboard_built(&url).await;
    let small = upload_tagged(&url, "transformer_4.pickle", "job=tiny-gpt&tags=batch%3D4,gpu%3Dh200").await;
    let large = upload_tagged(&url, "transformer_6.pickle", "job=tiny-gpt&tags=batch%3D6").await;
    // What the API answers for the query the page sends.
    let runs = format!("{large}:6,{small}:4");
    let answer: Value = reqwest::Client::new()
        .get(format!("{url}/api/v1/predict"))
        .query(&[("runs", runs.as_str()), ("largest", "true"), ("capacity", "2GiB")])
        .send()
        .await
        .expect("predict")
        .json()
        .await
        .expect("json");
    let largest = answer["largest_fitting_size"].as_u64().unwrap_or_else(|| panic!("no largest size: {answer}"));

    let (_driver, driver_url) = start_chromedriver();
    let client = connect(&driver_url, "profile-predict").await;
    closing(&client, async {
        client.goto(&format!("{url}/jobs/tiny-gpt")).await.expect("open the job");
        until(&client, 30, "the sizes filled from the tags", || async {
            let sizes = client
                .execute("return [...document.querySelectorAll('.predict-size')].map(e => e.value).sort()", vec![])
                .await
                .ok()?;
            (sizes == json!(["4", "6"])).then_some(())
        })
        .await;
        let capacity = client.find(Locator::Css("#predict-capacity")).await.expect("capacity box");
        capacity.click().await.expect("focus");
        capacity.send_keys("2GiB").await.expect("type");
        client.find(Locator::Css("#predict-run")).await.expect("button").click().await.expect("press");
        let table = until(&client, 120, "the predictions table", || text_of(&client, "#predict-table")).await;
        let verdict = text_of(&client, "#predict-verdict").await.unwrap_or_default();
        assert_eq!(verdict, format!("Largest batch that fits in 2.00 GiB: {largest}."));
        let row = table.lines().find(|l| l.contains("the largest that fits")).unwrap_or_else(|| panic!("{table}"));
        assert_eq!(row.split_whitespace().next(), Some(largest.to_string().as_str()), "{row}");
        let want = [CAPACITY, PREDICTED, RUNS_OUT, RECORDED, LARGEST];
        let counts = until(&client, 30, "the chart drawn", || async {
            chart_pixels(&client, &want).await.filter(|c| c.iter().take(3).all(|&n| n > 0))
        })
        .await;
        assert!(counts[0] > 200, "the capacity line across the plot: {counts:?}");
        assert!(counts[3] > 0 && counts[4] > 0, "recorded runs and the largest size: {counts:?}");
        client.execute("document.getElementById('predict').scrollIntoView()", vec![]).await.expect("scroll");
        screenshot(&client, "predict-job").await;
    })
    .await;
}
