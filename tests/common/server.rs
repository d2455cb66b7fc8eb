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

/// A new API token of `role` in the server data folder `data_dir`, made by
/// `vramscope token create` as an operator would; its secret.
pub fn create_token(data_dir: &Path, role: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["token", "create", "--role", role, "--name", role, "--data-dir"])
        .arg(data_dir)
        .output()
        .expect("token create");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf8").trim().to_owned()
}

/// A client with a generous timeout (debug builds parse and replay slowly).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(300)).build().expect("client")
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
        TestServer::start_on(data_dir, "127.0.0.1:0", args, env)
    }

    /// Start on `bind` (`127.0.0.1:0` for a free port, or a port a test
    /// restarts a server on) over `data_dir`, with extra arguments and
    /// environment. Its URL is read from the server's first line
    /// (`vramscope listening on http://ADDR`).
    pub fn start_on(data_dir: &Path, bind: &str, args: &[&str], env: &[(&str, &str)]) -> TestServer {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_vramscope"))
            .args(["serve", "--bind", bind, "--data-dir"])
            .arg(data_dir)
            .args(args)
            .envs(env.iter().copied())
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("spawn vramscope serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        std::io::BufReader::new(stdout).read_line(&mut line).expect("read the listening line");
        let url = line
            .trim()
            .strip_prefix("vramscope listening on ")
            .unwrap_or_else(|| panic!("unexpected first line from the server: {line:?}"))
            .to_owned();
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

    /// Wait, at most `limit`, for the process to exit on its own (after a
    /// signal), keeping its data folder; panics if it does not.
    pub fn wait_for_exit(mut self, limit: Duration) -> PathBuf {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return self.data_dir.clone();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the server did not exit within {limit:?}");
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

    /// Upload the file at `path` under its file name; its id.
    pub async fn upload_file(&self, path: &Path) -> String {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("snapshot.pickle");
        let query = url::form_urlencoded::Serializer::new(String::new()).append_pair("name", name).finish();
        let (status, answer) = self.upload(bytes, &query).await;
        assert!(status.is_success(), "upload of {name}: {status} {answer}");
        answer["id"].as_str().expect("id").to_owned()
    }

    /// GET with query pairs; the status and the JSON answer.
    pub async fn get_query(&self, path: &str, query: &[(&str, &str)]) -> (StatusCode, Value) {
        let response = client().get(self.api(path)).query(query).send().await.expect("get");
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
