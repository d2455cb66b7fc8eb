//! `vramscope upload FILE --server URL`: send a snapshot to a server.

use std::path::PathBuf;

use anyhow::{Context, anyhow};
use futures::TryStreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use tokio_util::io::ReaderStream;

use super::Failure;

/// Arguments of `vramscope upload`.
#[derive(Debug, clap::Args)]
pub(crate) struct UploadArgs {
    /// Snapshot file (plain, gzip or zstd pickle).
    file: PathBuf,
    /// Server URL, e.g. http://127.0.0.1:8080.
    // The value is not shown in --help: an empty one printed a stray `=`.
    #[arg(long, env = "VRAMSCOPE_SERVER", hide_env_values = true)]
    server: String,
    /// API token (needed unless the server runs loopback-only).
    #[arg(long, env = "VRAMSCOPE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Name shown in the library (default: the file name).
    #[arg(long)]
    name: Option<String>,
    /// Job the snapshot belongs to.
    #[arg(long)]
    job: Option<String>,
    /// Host it was taken on.
    #[arg(long)]
    host: Option<String>,
    /// Rank of the process.
    #[arg(long)]
    rank: Option<i64>,
    /// Comma-separated tags.
    #[arg(long)]
    tags: Option<String>,
    /// manual, threshold or oom (default: the server gives the file's, oom
    /// when its trace records an out-of-memory event, else manual).
    #[arg(long)]
    trigger: Option<String>,
    /// How long the server may send nothing once the file is sent (it
    /// answers after reading the file, which takes a while for a large
    /// one) before the upload gives up (e.g. 30s, 20m); a CI job never
    /// waits for ever.
    #[arg(long, default_value = "600s", value_parser = crate::agent::parse_duration)]
    timeout: std::time::Duration,
}

/// Run the subcommand; prints the server's JSON answer.
pub(crate) async fn run(args: &UploadArgs) -> Result<(), Failure> {
    let file = tokio::fs::File::open(&args.file)
        .await
        .with_context(|| format!("cannot open {}", args.file.display()))
        .map_err(Failure::BadInput)?;
    let size = file.metadata().await.map(|m| m.len()).unwrap_or(0);
    let name = args.name.clone().or_else(|| args.file.file_name().map(|n| n.to_string_lossy().into_owned()));
    // Without --trigger the server gives the file's (`oom` when its trace
    // records one): the same file gets the same trigger from the page.
    let mut query: Vec<(&str, String)> = args.trigger.iter().map(|t| ("trigger", t.clone())).collect();
    for (key, value) in [("name", &name), ("job", &args.job), ("host", &args.host), ("tags", &args.tags)] {
        if let Some(v) = value {
            query.push((key, v.clone()));
        }
    }
    if let Some(rank) = args.rank {
        query.push(("rank", rank.to_string()));
    }
    let bar = ProgressBar::new(size);
    if let Ok(style) = ProgressStyle::with_template("upload [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    let counter = bar.clone();
    let stream = ReaderStream::with_capacity(file, 1 << 20).inspect_ok(move |chunk| counter.inc(chunk.len() as u64));
    let url = format!("{}{}", args.server.trim_end_matches('/'), vramscope_shared::api::paths::SNAPSHOTS.route());
    let client = reqwest::Client::builder()
        .connect_timeout(args.timeout.min(std::time::Duration::from_secs(30)))
        .read_timeout(args.timeout)
        .build()
        .context("the HTTP client")
        .map_err(Failure::Other)?;
    let mut request = client
        .post(&url)
        .query(&query)
        .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
        .header(reqwest::header::CONTENT_LENGTH, size)
        .body(reqwest::Body::wrap_stream(stream));
    if let Some(token) = &args.token {
        request = request.bearer_auth(token);
    }
    let response = request
        .send()
        .await
        .map_err(|e| {
            if e.is_timeout() {
                anyhow!("{url} sent nothing for {} s (--timeout)", args.timeout.as_secs_f64())
            } else {
                anyhow::Error::from(e).context(format!("cannot reach {url}"))
            }
        })
        .map_err(Failure::Other)?;
    bar.finish_and_clear();
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    if status.is_success() {
        // The JSON for scripts on stdout; the page for people on stderr.
        println!("{body}");
        let answer = serde_json::from_str::<serde_json::Value>(&body).unwrap_or_default();
        if let Some(id) = answer["id"].as_str() {
            if answer["deduplicated"] == true && status == reqwest::StatusCode::CREATED {
                eprintln!(
                    "the server had this file already: a new snapshot {id} of it with these labels shares its bytes"
                );
            } else if answer["deduplicated"] == true {
                eprintln!(
                    "already stored: the server has this file with these labels as snapshot {id}; not stored again"
                );
            }
            eprintln!("snapshot page: {}/snapshots/{id}", args.server.trim_end_matches('/'));
        }
        return Ok(());
    }
    let message = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_owned))
        .unwrap_or(body);
    let error = anyhow!("the server refused the upload ({status}): {message} (file: {})", args.file.display());
    // The request's fault (a token, a label, the file) is 2, as `check --server` says it.
    Err(if status.is_client_error() { Failure::BadInput(error) } else { Failure::Other(error) })
}
