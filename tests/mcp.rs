//! `vramscope mcp` as an assistant's client drives it: one session over
//! stdio (newline-delimited JSON-RPC), `initialize`, `tools/list`, then
//! `tools/call` of every tool on corpus files, each answer compared with
//! what the matching `vramscope … --json` prints; stored snapshots by id
//! from a real server, with dashboard links; read-only unless asked.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{Value, json};

use crate::common::server::{TestServer, client, create_token, unique_dir};

fn vramscope() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vramscope"))
}

fn corpus(name: &str) -> PathBuf {
    crate::common::fixture_corpus().join(name)
}

fn path(p: &Path) -> String {
    p.to_str().expect("utf-8 path").to_owned()
}

/// What `vramscope ARGS --json` prints.
fn cli_json(args: &[&str]) -> Value {
    let out = vramscope().args(args).arg("--json").output().expect("run vramscope");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

/// The read-only tools, in the order `tools/list` gives them.
const TOOL_NAMES: [&str; 11] = [
    "list_snapshots",
    "stats",
    "explain",
    "leaks",
    "diff",
    "simulate",
    "tune",
    "breakdown",
    "state_at_row",
    "check",
    "predict",
];

/// An MCP client session with a `vramscope mcp` child.
struct Session {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
    /// Each listed tool's output schema: every answer is checked against it.
    schemas: std::collections::HashMap<String, Value>,
}

/// Whether `answer` has the top-level fields `schema` declares, each of a
/// declared type (the schemas declare the top level only).
fn conforms(schema: &Value, answer: &Value) -> Result<(), String> {
    let fields = answer.as_object().ok_or("not an object")?;
    for name in schema["required"].as_array().ok_or("no required list")? {
        let name = name.as_str().ok_or("a required name")?;
        if !fields.contains_key(name) {
            return Err(format!("no {name:?}"));
        }
    }
    let type_of = |v: &Value| match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_u64() || n.is_i64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    for (name, property) in schema["properties"].as_object().ok_or("no properties")? {
        let Some(value) = fields.get(name) else { continue };
        let allowed: Vec<&str> = match &property["type"] {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            other => return Err(format!("{name}: type {other}")),
        };
        let t = type_of(value);
        if !(allowed.contains(&t) || t == "integer" && allowed.contains(&"number")) {
            return Err(format!("{name}: {t}, declared {allowed:?}"));
        }
    }
    Ok(())
}

impl Session {
    fn start(args: &[&str]) -> Session {
        let mut child = vramscope()
            .arg("mcp")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn vramscope mcp");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut s = Session { child, stdin, stdout, next_id: 1, schemas: Default::default() };
        let init = s.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": { "name": "vramscope-tests", "version": "1" },
            }),
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "vramscope", "{init}");
        assert!(init["result"]["capabilities"]["tools"].is_object(), "{init}");
        s.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
        s
    }

    fn send(&mut self, message: &Value) {
        writeln!(self.stdin, "{message}").expect("write to the server");
        self.stdin.flush().expect("flush");
    }

    /// The next message the server writes.
    fn read_message(&mut self) -> Value {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).expect("read from the server");
        assert!(n > 0, "the server closed stdout");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Send a request and read until its response (skipping notifications).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).expect("read from the server");
            assert!(n > 0, "the server closed stdout before answering {method}");
            let message: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            if message["id"] == json!(id) {
                return message;
            }
        }
    }

    /// `tools/call`: the result object.
    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let response = self.request("tools/call", json!({ "name": tool, "arguments": arguments }));
        assert!(response["error"].is_null(), "{tool}: {response}");
        response["result"].clone()
    }

    /// A successful call's JSON, checked to be the text content too.
    fn answer(&mut self, tool: &str, arguments: Value) -> Value {
        let result = self.call(tool, arguments);
        assert_ne!(result["isError"], true, "{tool}: {result}");
        let text = result["content"][0]["text"].as_str().expect("text content");
        let from_text: Value = serde_json::from_str(text).expect("JSON text");
        assert_eq!(from_text, result["structuredContent"], "{tool}");
        if let Some(schema) = self.schemas.get(tool) {
            conforms(schema, &from_text).unwrap_or_else(|e| panic!("{tool}'s answer against its output schema: {e}"));
        }
        from_text
    }

    fn tool_names(&mut self) -> Vec<String> {
        let list = self.request("tools/list", json!({}));
        let tools = list["result"]["tools"].as_array().expect("tools");
        for t in tools {
            assert_eq!(t["inputSchema"]["type"], "object", "{t}");
            assert!(t["description"].as_str().is_some_and(|d| d.len() > 20), "{t}");
            // Every tool declares the shape of its answer.
            assert_eq!(t["outputSchema"]["type"], "object", "{t}");
            assert!(t["outputSchema"]["required"].as_array().is_some_and(|r| !r.is_empty()), "{t}");
            self.schemas.insert(t["name"].as_str().expect("name").to_owned(), t["outputSchema"].clone());
        }
        tools.iter().map(|t| t["name"].as_str().expect("name").to_owned()).collect()
    }

    /// Close stdin, as a client leaving does: the server exits 0.
    fn close(mut self) {
        drop(self.stdin);
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "vramscope mcp exited with {status}");
    }
}

#[test]
fn a_session_lists_the_tools_and_each_answers_as_the_cli_does() {
    let oom = path(&corpus("oom_leak.pickle"));
    let mlp = path(&corpus("mlp_train_all.pickle"));
    let mut s = Session::start(&["--folder", &path(&crate::common::fixture_corpus())]);
    let names = s.tool_names();
    assert_eq!(names, TOOL_NAMES, "read-only by default: no upload or comment");

    let listed = s.answer("list_snapshots", json!({}));
    let files: Vec<&str> =
        listed["snapshots"].as_array().expect("files").iter().map(|f| f["path"].as_str().expect("path")).collect();
    assert!(files.iter().any(|f| f.ends_with("oom_leak.pickle")), "{listed}");
    assert!(!files.iter().any(|f| f.ends_with(".json")), "{listed}");

    assert_eq!(s.answer("stats", json!({ "snapshot": oom })), cli_json(&["stats", &oom]));
    let explained = s.answer("explain", json!({ "snapshot": oom }));
    assert_eq!(explained, cli_json(&["explain", &oom]));
    assert_eq!(explained["ooms"].as_array().expect("ooms").len(), 1);
    assert_eq!(s.answer("leaks", json!({ "snapshot": oom, "top": 3 })), cli_json(&["leaks", &oom, "--top", "3"]));
    assert_eq!(
        s.answer("diff", json!({ "a": mlp, "b": oom, "top": 5 })),
        cli_json(&["diff", &mlp, &oom, "--top", "5"])
    );
    assert_eq!(
        s.answer("simulate", json!({ "snapshot": mlp, "alloc_conf": "expandable_segments:True" })),
        cli_json(&["simulate", &mlp, "--alloc-conf", "expandable_segments:True"])
    );
    assert_eq!(s.answer("tune", json!({ "snapshot": mlp })), cli_json(&["tune", &mlp]));

    assert_eq!(
        s.answer("breakdown", json!({ "snapshot": oom, "row": 3000 })),
        cli_json(&["breakdown", &oom, "--at", "3000"])
    );

    let state = s.answer("state_at_row", json!({ "snapshot": mlp, "row": 100 }));
    assert_eq!(state["row"], 100);
    assert_eq!(state["device"], 0);
    assert!(state["figures"]["reserved"].as_u64().expect("reserved") > 0, "{state}");
    assert!(!state["segments"].as_array().expect("segments").is_empty());

    let checked =
        s.answer("check", json!({ "snapshot": oom, "baseline": mlp, "max_growth": 10, "max_reserved_peak": "4GiB" }));
    let out = vramscope()
        .args(["check", &oom, "--baseline", &mlp, "--max-growth", "10", "--max-reserved-peak", "4GiB", "--json"])
        .output()
        .expect("check");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(checked, serde_json::from_slice::<Value>(&out.stdout).expect("JSON"));
    assert_eq!(checked["passed"], false);

    let small = path(&crate::common::fixture_predict().join("transformer_4.pickle"));
    let large = path(&crate::common::fixture_predict().join("transformer_6.pickle"));
    assert_eq!(
        s.answer("predict", json!({ "runs": format!("{small}=4,{large}=6"), "at": "24,48", "capacity": "8GiB" })),
        cli_json(&["predict", &format!("{small}=4"), &format!("{large}=6"), "--at", "24,48", "--capacity", "8GiB"])
    );

    // Regressions: what the tools said of bad arguments.
    let said = |s: &mut Session, tool: &str, args: Value| {
        let failed = s.call(tool, args);
        assert_eq!(failed["isError"], true, "{failed}");
        failed["content"][0]["text"].as_str().expect("text").to_owned()
    };
    let folder = path(&crate::common::fixture_corpus());
    assert!(said(&mut s, "stats", json!({ "snapshot": folder })).contains("is a folder, not a snapshot file"));
    assert!(said(&mut s, "stats", json!({ "snapshot": "/dev/zero" })).contains("not a regular file"));
    let growth = said(&mut s, "check", json!({ "snapshot": oom, "max_growth": 5 }));
    assert!(growth.contains("max_growth: give a baseline"), "{growth}");
    assert!(!growth.contains("--max-growth"), "the tool's argument, not the CLI's flag: {growth}");
    let job = said(&mut s, "list_snapshots", json!({ "job": "ci" }));
    assert!(job.contains("filtering by job needs the library"), "{job}");

    // A failing tool is a result the assistant reads, not a protocol error.
    let failed = s.call("stats", json!({ "snapshot": "/nonexistent/x.pickle" }));
    assert_eq!(failed["isError"], true, "{failed}");
    assert!(failed["content"][0]["text"].as_str().expect("text").contains("no file /nonexistent/x.pickle"));
    let failed = s.call("check", json!({ "snapshot": oom }));
    assert!(failed["content"][0]["text"].as_str().expect("text").contains("no rule to check"), "{failed}");
    let failed = s.call("stats", json!({ "snapshot": oom, "bogus": 1 }));
    assert!(failed["content"][0]["text"].as_str().expect("text").contains("no argument \"bogus\""), "{failed}");
    let unknown = s.request("tools/call", json!({ "name": "upload", "arguments": { "file": oom } }));
    let message = unknown["error"]["message"].as_str().expect("error");
    assert!(message.contains("upload writes to the server") && message.contains("--allow-write"), "{unknown}");
    s.close();
}

/// Found with a hand-written JSON-RPC client: a line that is not JSON got
/// no reply, error replies lacked `"id": null`, `tools/call` without params
/// was answered -32601, and a line over the limit was dropped silently (the
/// client hung). Every line now gets its answer, and the session goes on.
#[test]
fn regression_every_line_on_stdio_gets_a_json_rpc_answer() {
    let mut s = Session::start(&[]);
    let error_of = |m: &Value| (m["id"].clone(), m["error"]["code"].clone());

    writeln!(s.stdin, "this is not JSON").expect("write");
    let m = s.read_message();
    assert_eq!(error_of(&m), (Value::Null, json!(-32700)), "{m}");
    assert!(m.as_object().expect("object").contains_key("id"), "\"id\": null is written: {m}");

    s.send(&json!({ "jsonrpc": "2.0", "id": 41, "method": "tools/call" }));
    let m = s.read_message();
    assert_eq!(error_of(&m), (json!(41), json!(-32602)), "{m}");

    s.send(&json!({ "jsonrpc": "2.0", "id": 42, "params": {} }));
    let m = s.read_message();
    assert_eq!(error_of(&m), (json!(42), json!(-32600)), "{m}");

    // 6 MB: over the limit, answered rather than dropped.
    let huge = json!({ "jsonrpc": "2.0", "id": 43, "method": "tools/call",
        "params": { "name": "stats", "arguments": { "snapshot": "x".repeat(6 << 20) } } });
    s.send(&huge);
    let m = s.read_message();
    assert_eq!(error_of(&m), (Value::Null, json!(-32600)), "{}", &m.to_string()[..200.min(m.to_string().len())]);
    assert!(m["error"]["message"].as_str().expect("message").contains("over 262144 bytes"), "{m}");
    assert!(m.to_string().len() < 1000, "the line is not echoed");

    // The session goes on.
    let stats = s.answer("stats", json!({ "snapshot": path(&corpus("oom_leak.pickle")) }));
    assert!(stats["devices"].is_array(), "{stats}");
    s.close();
}

/// Issue 44, item 14: a line that is not JSON followed by the end of the
/// input sometimes got no -32700 (on a loaded machine): the session never
/// started (no `initialize`), the process returned at once, and the reply
/// waiting for the writer was lost when the writer had not run yet. Every
/// answer made is written before the process leaves, every time.
#[test]
fn regression_a_line_that_is_not_json_then_the_end_of_input_is_always_answered() {
    for round in 0..20 {
        let mut child = vramscope()
            .arg("mcp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn vramscope mcp");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"this is not JSON\n").expect("write");
        drop(stdin);
        let out = child.wait_with_output().expect("wait");
        let text = String::from_utf8_lossy(&out.stdout);
        let replies: Vec<Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        assert_eq!(replies.len(), 1, "round {round}: {text:?}");
        assert_eq!(replies[0]["error"]["code"], json!(-32700), "round {round}: {text:?}");
        assert_eq!(replies[0]["id"], Value::Null, "round {round}");
    }
}

#[test]
fn a_large_answer_is_cut_with_a_pointer_to_the_rest() {
    let (mlp, oom) = (path(&corpus("mlp_train_all.pickle")), path(&corpus("oom_leak.pickle")));
    let whole = cli_json(&["diff", &mlp, &oom, "--top", "1000"]);
    let whole_stacks = whole["devices"][0]["stacks"].as_array().expect("stacks").len();
    assert!(serde_json::to_string(&whole).expect("json").len() > 50_000, "the CLI's answer is large");
    let mut s = Session::start(&[]);
    let cut = s.answer("diff", json!({ "a": mlp, "b": oom, "top": 1000 }));
    let size = serde_json::to_string(&cut).expect("json").len();
    assert!(size <= 26_000, "{size} characters");
    let kept = cut["devices"][0]["stacks"].as_array().expect("stacks");
    assert!(!kept.is_empty() && kept.len() < whole_stacks, "{} of {whole_stacks}", kept.len());
    // What is kept is the head of the whole answer: the largest changes.
    assert_eq!(kept[..], whole["devices"][0]["stacks"].as_array().expect("stacks")[..kept.len()]);
    let note = &cut["truncated"];
    let arrays = note["arrays"].as_array().expect("arrays");
    assert!(arrays.iter().any(|a| a["path"] == "/devices/0/stacks" && a["of"] == whole_stacks), "{note}");
    // Regression: the pointer keeps the caller's top (it dropped it).
    assert_eq!(note["full_answer"], format!("vramscope diff {mlp} {oom} --top 1000 --json"));
    s.close();
}

#[tokio::test]
async fn stored_snapshots_are_read_by_id_with_dashboard_links_and_writing_needs_the_flag_and_an_uploader() {
    let dir = unique_dir("mcp");
    let token = |role: &str| create_token(&dir, role);
    let (viewer, uploader) = (token("viewer"), token("uploader"));
    let server = TestServer::start_in(&dir, &[("VRAMSCOPE_REQUIRE_TOKENS", "true")]);
    let bytes = std::fs::read(corpus("oom_leak.pickle")).expect("read");
    let response = client()
        .post(server.api("/snapshots?job=train&name=oom_leak.pickle"))
        .bearer_auth(&uploader)
        .header("content-type", "application/octet-stream")
        .body(bytes)
        .send()
        .await
        .expect("upload");
    assert!(response.status().is_success());
    let up: Value = response.json().await.expect("JSON");
    let id = up["id"].as_str().expect("id").to_owned();
    let url = server.url.clone();
    let oom = path(&corpus("oom_leak.pickle"));
    let mlp = path(&corpus("mlp_train_all.pickle"));
    tokio::task::spawn_blocking(move || {
        let mut s = Session::start(&["--server", &url, "--token", &viewer]);
        let listed = s.answer("list_snapshots", json!({ "job": "train" }));
        assert_eq!(listed["snapshots"][0]["id"], id, "{listed}");
        assert_eq!(listed["snapshots"][0]["dashboard"], format!("{url}/snapshots/{id}"));
        // By id: the same figures as from the file, under the stored name.
        let mut by_id = s.answer("explain", json!({ "snapshot": id }));
        let mut by_file = cli_json(&["explain", &oom]);
        assert_eq!(by_id["file"], "oom_leak.pickle");
        by_id["file"] = Value::Null;
        by_file["file"] = Value::Null;
        assert_eq!(by_id, by_file);
        let state = s.answer("state_at_row", json!({ "snapshot": id, "row": 10 }));
        assert_eq!(state["row"], 10);
        s.close();

        // Writing needs --allow-write, which needs a token.
        let out = vramscope()
            .args(["mcp", "--server", &url, "--allow-write"])
            .env_remove("VRAMSCOPE_TOKEN")
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
        // A viewer's token offers comment, not upload (regression test below).

        let mut s = Session::start(&["--server", &url, "--allow-write", "--token", &uploader]);
        let names = s.tool_names();
        assert!(names.iter().any(|n| n == "upload") && names.iter().any(|n| n == "comment"), "{names:?}");
        let uploaded = s.answer("upload", json!({ "file": mlp, "job": "train" }));
        let new_id = uploaded["id"].as_str().expect("id").to_owned();
        assert_eq!(uploaded["dashboard"], format!("{url}/snapshots/{new_id}"));
        let comment =
            s.answer("comment", json!({ "snapshot": new_id, "text": "peak from the optimizer step", "row": 5 }));
        assert_eq!(comment["body"], "peak from the optimizer step", "{comment}");
        assert_eq!(comment["row"], 5);
        s.close();
    })
    .await
    .expect("the session");
}

/// `vramscope serve`'s `/api/v1/mcp`: the same tools over streamable HTTP,
/// behind the tokens (a viewer's is enough), on stored snapshots only.
#[tokio::test]
async fn the_server_answers_the_tools_over_http_behind_its_tokens() {
    let dir = unique_dir("mcp-http");
    let token = |role: &str| create_token(&dir, role);
    let (viewer, uploader) = (token("viewer"), token("uploader"));
    let server = TestServer::start_in(&dir, &[("VRAMSCOPE_REQUIRE_TOKENS", "true")]);
    let response = client()
        .post(server.api("/snapshots?job=train&name=oom_leak.pickle"))
        .bearer_auth(&uploader)
        .header("content-type", "application/octet-stream")
        .body(std::fs::read(corpus("oom_leak.pickle")).expect("read"))
        .send()
        .await
        .expect("upload");
    let id = response.json::<Value>().await.expect("JSON")["id"].as_str().expect("id").to_owned();

    let rpc = |token: Option<&str>, id: u64, method: &str, params: Value| {
        let mut request = client()
            .post(server.api("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        async move {
            let response = request.send().await.expect("post");
            let status = response.status();
            (status, response.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let init =
        json!({ "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "t", "version": "1" } });
    let (status, _) = rpc(None, 1, "initialize", init.clone()).await;
    assert_eq!(status, reqwest::StatusCode::UNAUTHORIZED);
    let (status, answer) = rpc(Some(&viewer), 1, "initialize", init).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{answer}");
    assert_eq!(answer["result"]["serverInfo"]["name"], "vramscope");

    let (_, list) = rpc(Some(&viewer), 2, "tools/list", json!({})).await;
    let names: Vec<&str> =
        list["result"]["tools"].as_array().expect("tools").iter().map(|t| t["name"].as_str().expect("name")).collect();
    assert_eq!(names, TOOL_NAMES);

    let call = |name: &str, arguments: Value| {
        rpc(Some(&viewer), 3, "tools/call", json!({ "name": name, "arguments": arguments }))
    };
    let (_, listed) = call("list_snapshots", json!({ "job": "train" })).await;
    let listed = &listed["result"]["structuredContent"];
    assert_eq!(listed["snapshots"][0]["id"], id, "{listed}");
    assert_eq!(listed["snapshots"][0]["dashboard"], format!("/snapshots/{id}"));

    let (_, explained) = call("explain", json!({ "snapshot": id })).await;
    let mut by_http = explained["result"]["structuredContent"].clone();
    let mut by_file = cli_json(&["explain", &path(&corpus("oom_leak.pickle"))]);
    assert_eq!(by_http["file"], "oom_leak.pickle");
    by_http["file"] = Value::Null;
    by_file["file"] = Value::Null;
    assert_eq!(by_http, by_file);

    let (_, checked) = call("check", json!({ "snapshot": id, "baseline": id, "max_growth": 0 })).await;
    assert_eq!(checked["result"]["structuredContent"]["passed"], true, "{checked}");

    // No path of the server's disk is read.
    let (_, refused) = call("stats", json!({ "snapshot": path(&corpus("oom_leak.pickle")) })).await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert!(refused["result"]["content"][0]["text"].as_str().expect("text").contains("not found"), "{refused}");
    let (_, refused) = call("list_snapshots", json!({ "folder": "/" })).await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
}

/// A tokenless server with `oom_leak.pickle` stored, and its id.
async fn server_with_oom_leak(tag: &str) -> (TestServer, String) {
    let server = TestServer::start(tag, &[]);
    let response = client()
        .post(server.api("/snapshots?job=train&name=oom_leak.pickle"))
        .header("content-type", "application/octet-stream")
        .body(std::fs::read(corpus("oom_leak.pickle")).expect("read"))
        .send()
        .await
        .expect("upload");
    let id = response.json::<Value>().await.expect("JSON")["id"].as_str().expect("id").to_owned();
    (server, id)
}

/// POST a JSON-RPC body to `/api/v1/mcp`: the status and the raw answer.
async fn post_mcp(server: &TestServer, body: String) -> (reqwest::StatusCode, String) {
    let response = client()
        .post(server.api("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("post");
    (response.status(), response.text().await.unwrap_or_default())
}

async fn mcp_tool(server: &TestServer, name: &str, arguments: Value) -> Value {
    let body = json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": { "name": name, "arguments": arguments } });
    let (status, text) = post_mcp(server, body.to_string()).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{text}");
    serde_json::from_str::<Value>(&text).expect("JSON")["result"].clone()
}

/// Found: a 1 MB JSON-RPC id and a 3 MB argument were accepted and echoed
/// back, past the 256 KiB body limit of every other API request (rmcp reads
/// the body itself, and axum's limit binds only its extractors).
#[tokio::test]
async fn regression_the_mcp_route_refuses_a_body_over_the_api_limit() {
    let (server, id) = server_with_oom_leak("mcp-limit").await;
    let huge_id = "7".repeat(1 << 20);
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":"{huge_id}","method":"tools/call","params":{{"name":"stats","arguments":{{"snapshot":"{id}"}}}}}}"#
    );
    let (status, text) = post_mcp(&server, body).await;
    assert_eq!(status, reqwest::StatusCode::PAYLOAD_TOO_LARGE, "{}", &text[..text.len().min(200)]);
    assert!(!text.contains(&huge_id[..1000]), "the id is not echoed");
    let big_argument = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": { "name": "stats", "arguments": { "snapshot": "x".repeat(3 << 20) } } });
    let (status, text) = post_mcp(&server, big_argument.to_string()).await;
    assert_eq!(status, reqwest::StatusCode::PAYLOAD_TOO_LARGE, "{}", &text[..text.len().min(200)]);
    assert!(text.len() < 4096, "a short refusal, not the argument: {} bytes", text.len());
    // A request within the limit is still answered.
    let stats = mcp_tool(&server, "stats", json!({ "snapshot": id })).await;
    assert_ne!(stats["isError"], true, "{stats}");
}

/// Issue 44: the same body sent chunked (no Content-Length) was answered
/// 500 in plain text by rmcp; it is this API's JSON 413.
#[tokio::test]
async fn regression_a_chunked_mcp_body_over_the_limit_is_a_json_413() {
    let (server, _id) = server_with_oom_leak("mcp-chunked").await;
    // Just over the 256 KiB limit: the server reads nearly all of it before
    // it answers, so the client is not still writing when the connection
    // closes (a 3 MB body made the client's write fail first under load).
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": { "name": "stats", "arguments": { "snapshot": "x".repeat(257 << 10) } } })
    .to_string()
    .into_bytes();
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = body.chunks(64 << 10).map(|c| Ok(c.to_vec())).collect();
    let response = client()
        .post(server.api("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .send()
        .await
        .expect("post");
    assert_eq!(response.status(), reqwest::StatusCode::PAYLOAD_TOO_LARGE);
    assert!(response.headers()["content-type"].to_str().is_ok_and(|t| t.starts_with("application/json")));
    let refusal: Value = response.json().await.expect("a JSON error");
    assert_eq!(refusal["kind"], "too_large", "{refusal}");
}

/// Found: `tune` over MCP took `capacity` "1B" and "0", which the HTTP
/// route refuses with 400. Both now check it with one function.
#[tokio::test]
async fn regression_mcp_tools_refuse_the_capacities_the_http_routes_refuse() {
    let (server, id) = server_with_oom_leak("mcp-capacity").await;
    for capacity in ["1B", "0", "100MB", "17TiB"] {
        let http =
            client().get(server.api(&format!("/snapshots/{id}/tune?capacity={capacity}"))).send().await.expect("get");
        assert_eq!(http.status(), reqwest::StatusCode::BAD_REQUEST, "{capacity}");
        let http_reason = http.json::<Value>().await.expect("JSON")["error"].as_str().expect("error").to_owned();
        for tool in ["tune", "simulate"] {
            let result = mcp_tool(&server, tool, json!({ "snapshot": id, "capacity": capacity })).await;
            assert_eq!(result["isError"], true, "{tool} {capacity}: {result}");
            let text = result["content"][0]["text"].as_str().expect("text");
            assert!(text.contains("capacity") && http_reason.contains("capacity"), "{text} / {http_reason}");
            assert!(text.contains("whole number of MiB from 64MiB to 16TiB") || capacity == "0", "{text}");
        }
    }
    let result = mcp_tool(&server, "predict", json!({ "runs": format!("{id}=8"), "at": "16", "capacity": "1B" })).await;
    assert_eq!(result["isError"], true, "{result}");
    let result = mcp_tool(&server, "tune", json!({ "snapshot": id, "capacity": "3GiB" })).await;
    assert_ne!(result["isError"], true, "{result}");
}

/// Found: `/api/v1/mcp` replayed on every call (0.64–0.71 s for `tune` on
/// gpt_long) where the HTTP route answers a repeat from its cache. The
/// server counts the answers it computes.
#[tokio::test]
async fn regression_a_repeated_mcp_call_is_answered_from_the_cache() {
    let (server, id) = server_with_oom_leak("mcp-cache").await;
    let computed = || async {
        let text =
            client().get(format!("{}/metrics", server.url)).send().await.expect("metrics").text().await.expect("text");
        text.lines()
            .find_map(|l| l.strip_prefix("vramscope_mcp_answers_computed_total "))
            .map(|v| v.trim().parse::<u64>().expect("a count"))
            .expect("the counter")
    };
    assert_eq!(computed().await, 0);
    let first = mcp_tool(&server, "tune", json!({ "snapshot": id, "capacity": "3GiB" })).await;
    assert_eq!(computed().await, 1);
    // The same arguments in another order: the same call.
    let again = mcp_tool(&server, "tune", json!({ "capacity": "3GiB", "snapshot": id })).await;
    assert_eq!(computed().await, 1, "answered from the cache");
    assert_eq!(first["structuredContent"], again["structuredContent"]);
    assert_ne!(first["isError"], true, "{first}");
    mcp_tool(&server, "tune", json!({ "snapshot": id, "capacity": "4GiB" })).await;
    assert_eq!(computed().await, 2, "other arguments are another answer");
    // A refused call is not kept.
    mcp_tool(&server, "tune", json!({ "snapshot": "no-such-id" })).await;
    assert_eq!(computed().await, 2);
    // `stats` too (issue 44: it ran on the async workers at every call).
    let stats = mcp_tool(&server, "stats", json!({ "snapshot": id })).await;
    assert_eq!(computed().await, 3);
    let stats_again = mcp_tool(&server, "stats", json!({ "snapshot": id })).await;
    assert_eq!(computed().await, 3, "stats answered from the cache");
    assert_eq!(stats["structuredContent"], stats_again["structuredContent"]);
}

#[tokio::test]
async fn regression_writing_tools_are_offered_by_the_tokens_role_and_help_lists_every_tool() {
    // A viewer's token with --allow-write used to list upload, which the
    // server then refused with 403; and the help texts left tools out.
    let dir = unique_dir("mcp-roles");
    let (viewer, uploader) = (create_token(&dir, "viewer"), create_token(&dir, "uploader"));
    let server = TestServer::start_in(&dir, &[("VRAMSCOPE_REQUIRE_TOKENS", "true")]);
    let who: Value =
        client().get(server.api("/token")).bearer_auth(&viewer).send().await.expect("get").json().await.expect("JSON");
    assert_eq!(who["role"], "viewer", "{who}");
    let url = server.url.clone();
    let mlp = path(&corpus("mlp_train_all.pickle"));
    tokio::task::spawn_blocking(move || {
        let mut s = Session::start(&["--server", &url, "--allow-write", "--token", &viewer]);
        let names = s.tool_names();
        assert!(names.iter().any(|n| n == "comment"), "a viewer comments: {names:?}");
        assert!(!names.iter().any(|n| n == "upload"), "a viewer cannot upload: {names:?}");
        let refused = s.request("tools/call", json!({ "name": "upload", "arguments": { "file": mlp } }));
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        let message = refused["error"]["message"].as_str().expect("message");
        assert!(message.contains("uploader") && message.contains("viewer"), "{message}");
        s.close();

        let mut s = Session::start(&["--server", &url, "--allow-write", "--token", &uploader]);
        let all = s.tool_names();
        assert!(all.iter().any(|n| n == "upload") && all.iter().any(|n| n == "comment"), "{all:?}");
        s.close();
        // Without --allow-write: reading tools only.
        let mut s = Session::start(&["--server", &url, "--token", &uploader]);
        let reading = s.tool_names();
        assert!(reading.iter().all(|n| n != "upload" && n != "comment") && reading.len() + 2 == all.len());
        s.close();

        // Both help texts name every tool (made from the one table).
        for args in [&["--help"][..], &["mcp", "--help"][..]] {
            let out = vramscope().args(args).output().expect("run");
            assert!(out.status.success());
            let help = String::from_utf8_lossy(&out.stdout);
            for name in &all {
                assert!(help.contains(name.as_str()), "{args:?} leaves out {name}:\n{help}");
            }
        }

        // A token the server refuses stops --allow-write at the start, with
        // the server's reason.
        let out = vramscope()
            .args(["mcp", "--server", &url, "--allow-write", "--token", "vs_0000000000_wrong"])
            .stdin(Stdio::null())
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stderr).contains("401"), "{}", String::from_utf8_lossy(&out.stderr));
    })
    .await
    .expect("the session");
}

#[test]
fn regression_a_server_that_never_answers_does_not_hang_vramscope_mcp() {
    // A server that accepts the connection and says nothing: the MCP
    // tools' requests had no timeout, so `--allow-write`'s start (and every
    // call by id) waited for ever.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    // Detached: it holds the connection past the client's timeout.
    let _holder = std::thread::spawn(move || {
        let (socket, _) = listener.accept().expect("accept");
        std::thread::sleep(std::time::Duration::from_secs(45));
        drop(socket);
    });
    let out = vramscope()
        .args(["mcp", "--server", &url, "--allow-write", "--token", "vs_0000000000_secret"])
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no answer in 30 s"), "{stderr}");
}
