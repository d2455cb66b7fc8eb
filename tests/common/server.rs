//! One `vramscope serve` process for a test: started on a free loopback
//! port over a fresh data folder, stopped when dropped.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

/// A running server.
pub struct TestServer {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Its data folder (database and blobs).
    pub data_dir: PathBuf,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh folder under this test binary's scratch space.
pub fn unique_dir(tag: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "server-{tag}-{}-{}",
        std::process::id(),
        uuid::Uuid::now_v7()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A client with a generous timeout (debug builds parse slowly).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(120)).build().expect("client")
}

impl TestServer {
    /// Start with settings given as `VRAMSCOPE_…` environment variables.
    pub fn start(tag: &str, env: &[(&str, &str)]) -> TestServer {
        TestServer::start_in(&unique_dir(tag), env)
    }

    /// Start over an existing data folder.
    pub fn start_in(data_dir: &Path, env: &[(&str, &str)]) -> TestServer {
        TestServer::start_with(data_dir, &[], env)
    }

    /// Start over a data folder with extra `vramscope serve` arguments.
    pub fn start_with(data_dir: &Path, args: &[&str], env: &[(&str, &str)]) -> TestServer {
        let (child, url) = super::spawn_server(data_dir, args, env);
        TestServer { child, url, data_dir: data_dir.to_path_buf() }
    }

    /// The process id (to read its memory from `/proc`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stop it (SIGKILL), keeping its data folder.
    pub fn kill(mut self) -> PathBuf {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.data_dir.clone()
    }

    /// The URL of an API path (`/snapshots` → `…/api/v1/snapshots`).
    pub fn api(&self, path: &str) -> String {
        format!("{}/api/v1{path}", self.url)
    }

    /// Upload bytes as `application/octet-stream`; the status and JSON answer.
    pub async fn upload(&self, bytes: Vec<u8>, query: &str) -> (StatusCode, Value) {
        let response = client()
            .post(self.api(&format!("/snapshots?{query}")))
            .header("content-type", "application/octet-stream")
            .body(bytes)
            .send()
            .await
            .expect("upload");
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// GET a JSON answer.
    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        let response = client().get(self.api(path)).send().await.expect("get");
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Wait until a snapshot leaves `parsing`; its final record.
    pub async fn settled(&self, id: &str) -> Value {
        for _ in 0..600 {
            let (_, rec) = self.get(&format!("/snapshots/{id}")).await;
            if rec["status"] != "parsing" {
                return rec;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("snapshot {id} still parsing after a minute");
    }

    /// A counter or gauge of `/metrics` (the line whose name ends with
    /// `name`), read with `token` where tokens are required.
    pub async fn metric(&self, name: &str, token: Option<&str>) -> u64 {
        let request = client().get(format!("{}/metrics", self.url));
        let request = match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        let response = request.send().await.expect("metrics");
        assert_eq!(response.status(), StatusCode::OK, "metrics");
        let text = response.text().await.expect("text");
        text.lines()
            .find(|l| !l.starts_with('#') && l.split_whitespace().next().is_some_and(|n| n.ends_with(name)))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in the metrics:\n{text}"))
    }

    /// Peak resident memory of the server so far (`VmHWM`), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("server status");
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
        line.split_whitespace().nth(1).and_then(|k| k.parse::<u64>().ok()).expect("kB") * 1024
    }
}
