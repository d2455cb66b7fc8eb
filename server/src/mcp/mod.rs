//! `vramscope mcp`: snapshots for coding assistants, as a Model Context
//! Protocol server over stdio.
//!
//! The protocol (JSON-RPC framing, `initialize`, `tools/list`,
//! `tools/call`) is the official Rust SDK's, `rmcp`, without its macros:
//! the tools are one table ([`tools::TOOLS`]), each entry naming its
//! arguments and the function that answers, so adding a tool is one entry.
//! Each tool answers with the JSON the matching `vramscope … --json` prints
//! (`vramscope_shared::cli_json`), cut to a size an assistant can read
//! ([`cut`]), with a pointer to the rest (the dashboard's permalink for a
//! stored snapshot, the command line for a file).
//!
//! Read-only by default: the tools that write are listed only with
//! `--allow-write`, which needs a server and a token, and then only those
//! the token's role may run, as the server names it (`GET /api/v1/token`):
//! `comment` for any token, `upload` for an uploader's or an admin's.
//!
//! The same tools are served by `vramscope serve` at `/api/v1/mcp`
//! (streamable HTTP, stateless, JSON answers), behind its tokens (a
//! viewer's is enough): there they read stored snapshots by id through a
//! [`Store`] the server gives, run in its analysis pool, never read a path
//! of the server's disk, and never write.

pub(crate) mod cut;
mod stdio;
pub(crate) mod tools;

use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value};
use vramscope_shared::ReadOptions;
use vramscope_shared::api::SnapshotMeta;
use vramscope_shared::api::paths;
use vramscope_shared::indexed::IndexedSnapshot;

/// CPU work handed to a [`Store`]'s pool.
pub(crate) type Work = Box<dyn FnOnce() + Send>;

/// The stored snapshots of the server the tools run in (`/api/v1/mcp`).
pub(crate) trait Store: Send + Sync {
    /// A stored snapshot by id: its record and its analysis (the server's cache).
    fn load(&self, id: String) -> BoxFuture<'static, Result<(SnapshotMeta, Arc<IndexedSnapshot>), String>>;
    /// The newest stored snapshots, of `job` when given.
    fn list(&self, job: Option<String>) -> BoxFuture<'static, Result<Vec<SnapshotMeta>, String>>;
    /// Run `work` in the server's analysis pool, in `snapshot`'s queue.
    fn run(&self, snapshot: String, work: Work) -> BoxFuture<'static, Result<(), String>>;
    /// The answer kept for `key` (a tool and its arguments), as the HTTP
    /// routes answer a repeated query from their cache.
    fn cached(&self, key: &str) -> Option<Value>;
    /// Keep a computed answer for [`Store::cached`].
    fn remember(&self, key: String, answer: Value);
}

/// What every tool call may use.
#[derive(Clone)]
pub(crate) struct Context {
    /// The vramscope server, for stored snapshots and the library.
    pub(crate) server: Option<String>,
    /// Its API token.
    pub(crate) token: Option<String>,
    /// The tools that write are listed and run.
    pub(crate) allow_write: bool,
    /// The token's role, as the server named it: with `allow_write`, only
    /// the writing tools it may run are listed (`None`: the server did not
    /// say, and the server refuses what the role may not do).
    pub(crate) role: Option<tools::Role>,
    /// The folder `list_snapshots` lists when none is given.
    pub(crate) folder: PathBuf,
    /// The reader's options (memory budget).
    pub(crate) read: ReadOptions,
    /// Inside `vramscope serve`: its stored snapshots (then no path is read).
    pub(crate) store: Option<Arc<dyn Store>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("server", &self.server)
            .field("allow_write", &self.allow_write)
            .field("folder", &self.folder)
            .field("store", &self.store.is_some())
            .finish_non_exhaustive()
    }
}

/// The MCP server: the context and the tool table.
#[derive(Debug, Clone)]
pub(crate) struct Assistant {
    context: Arc<Context>,
}

impl Assistant {
    /// A server over `context`.
    pub(crate) fn new(context: Context) -> Assistant {
        Assistant { context: Arc::new(context) }
    }

    fn tools(&self) -> impl Iterator<Item = &'static tools::ToolSpec> + '_ {
        let may = |t: &tools::ToolSpec| self.context.role.is_none_or(|role| role >= t.role);
        tools::TOOLS.iter().filter(move |t| t.read_only || (self.context.allow_write && may(t)))
    }
}

/// A tool's description for `tools/list`.
fn describe(spec: &tools::ToolSpec) -> Tool {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for p in spec.params {
        properties
            .insert(p.name.to_owned(), serde_json::json!({ "type": p.kind.json_type(), "description": p.description }));
        if p.required {
            required.push(Value::from(p.name));
        }
    }
    let mut schema = Map::new();
    schema.insert("type".to_owned(), Value::from("object"));
    schema.insert("properties".to_owned(), Value::Object(properties));
    schema.insert("required".to_owned(), Value::Array(required));
    schema.insert("additionalProperties".to_owned(), Value::Bool(false));
    let mut tool = Tool::new(spec.name, spec.description, schema);
    tool.annotations = Some(ToolAnnotations::new().read_only(spec.read_only));
    tool.output_schema = Some(Arc::new(output_schema(spec)));
    tool
}

/// The JSON Schema of a tool's answer: its top-level fields and their
/// types (a cut answer adds `truncated`).
fn output_schema(spec: &tools::ToolSpec) -> Map<String, Value> {
    let mut properties = Map::new();
    for f in spec.output {
        let types: Vec<Value> = f.types.iter().map(|&t| Value::from(t)).collect();
        let kind = if types.len() == 1 { types[0].clone() } else { Value::Array(types) };
        properties.insert(f.name.to_owned(), serde_json::json!({ "type": kind }));
    }
    properties.insert(
        "truncated".to_owned(),
        serde_json::json!({ "type": "object", "description": "What was cut to keep the answer short, and where the whole is" }),
    );
    let required: Vec<Value> = spec.output.iter().filter(|f| f.required).map(|f| Value::from(f.name)).collect();
    let mut schema = Map::new();
    schema.insert("type".to_owned(), Value::from("object"));
    schema.insert("properties".to_owned(), Value::Object(properties));
    schema.insert("required".to_owned(), Value::Array(required));
    schema
}

impl ServerHandler for Assistant {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("vramscope", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "PyTorch CUDA memory snapshots (torch.cuda.memory._dump_snapshot pickles): list them, read their \
                 figures (stats), explain an out-of-memory error (explain), rank likely leaks (leaks), compare two \
                 (diff), replay them under other allocator settings (simulate, tune), show the allocator's state at \
                 a trace row (state_at_row), and check a memory budget (check). A snapshot is a file path, or a \
                 stored snapshot's id when a server is configured.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools().map(describe).collect()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(spec) = self.tools().find(|t| t.name == request.name) else {
            let known: Vec<&str> = self.tools().map(|t| t.name).collect();
            let why = match tools::TOOLS.iter().find(|t| t.name == request.name) {
                Some(t) if self.context.allow_write => format!(
                    "{} needs a token with the {} role; this one is a {}'s",
                    t.name,
                    t.role.as_str(),
                    self.context.role.map_or("?", tools::Role::as_str)
                ),
                Some(t) => format!("{} writes to the server: start vramscope mcp with --allow-write", t.name),
                None => format!("no tool {:?}", request.name.chars().take(64).collect::<String>()),
            };
            return Err(ErrorData::invalid_params(format!("{why}; the tools are {}", known.join(", ")), None));
        };
        let args = request.arguments.unwrap_or_default();
        if let Some(unknown) = args.keys().find(|k| !spec.params.iter().any(|p| p.name == k.as_str())) {
            return Ok(error_result(format!("{}: no argument {unknown:?}", spec.name)).into());
        }
        let call = tools::Call { context: self.context.clone(), tool: spec.name, args };
        Ok(match (spec.run)(call).await {
            Ok(answer) => {
                let value = cut::cut(answer.json, cut::MAX_ANSWER_CHARS, answer.more.as_deref());
                let text = serde_json::to_string(&value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
                let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
                result.structured_content = Some(value);
                result
            }
            Err(e) => error_result(format!("{}: {e}", spec.name)),
        }
        .into())
    }
}

/// A tool's failure, as the assistant reads it (a result, not a protocol error).
fn error_result(message: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

/// The MCP service of `vramscope serve`'s `/api/v1/mcp`: stateless
/// streamable HTTP answering JSON, read-only tools over `store`. The
/// server's own guards (Host, Origin, tokens) stand in front of it, so
/// rmcp's Host allow-list (loopback names only) is off.
pub(crate) fn http_service(
    store: Arc<dyn Store>,
    read: ReadOptions,
) -> rmcp::transport::streamable_http_server::StreamableHttpService<
    Assistant,
    rmcp::transport::streamable_http_server::session::never::NeverSessionManager,
> {
    use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
    let context = Context {
        server: None,
        token: None,
        allow_write: false,
        role: None,
        folder: PathBuf::new(),
        read,
        store: Some(store),
    };
    let mut config = StreamableHttpServerConfig::default().disable_allowed_hosts();
    config.legacy_session_mode = false;
    config.json_response = true;
    StreamableHttpService::new(move || Ok(Assistant::new(context.clone())), Arc::default(), config)
}

/// The role of `token` on `server`, as `GET /api/v1/token` names it: `None`
/// from a server without that route (an older one; it still refuses what
/// the role may not do). A token the server refuses is an error.
pub(crate) async fn token_role(server: &str, token: &str) -> anyhow::Result<Option<tools::Role>> {
    let url = format!("{}{}", server.trim_end_matches('/'), paths::TOKEN.path([]));
    let response = tools::http_client().get(&url).bearer_auth(token).send().await.map_err(|e| {
        let why =
            if e.is_timeout() { format!("no answer in {} s", tools::READ_TIMEOUT.as_secs()) } else { e.to_string() };
        anyhow::anyhow!("cannot ask {url} what the token may do: {why}")
    })?;
    let status = response.status();
    if status == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    let body = response.bytes().await.map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
    anyhow::ensure!(status.is_success(), "{}", tools::refusal(&url, status, &body));
    let holder: vramscope_shared::api::review::TokenHolder =
        serde_json::from_slice(&body).map_err(|e| anyhow::anyhow!("{url}: not a token's holder: {e}"))?;
    Ok(tools::Role::parse(&holder.role))
}

/// Serve MCP over this process's stdin and stdout until the client leaves:
/// the client's lines pass [`stdio::screen_requests`] on their way to
/// rmcp, and every answer leaves through one writer.
pub(crate) async fn serve_stdio(context: Context) -> anyhow::Result<()> {
    let (rmcp_input, to_rmcp) = tokio::io::duplex(1 << 20);
    let (from_rmcp, rmcp_output) = tokio::io::duplex(1 << 20);
    let (replies, messages) = tokio::sync::mpsc::channel(64);
    let writer = tokio::spawn(stdio::write_lines(tokio::io::stdout(), messages));
    let relay = tokio::spawn(stdio::relay_answers(from_rmcp, replies.clone()));
    let screen = tokio::spawn(stdio::screen_requests(tokio::io::stdin(), to_rmcp, replies));
    let session = match Assistant::new(context).serve((rmcp_input, rmcp_output)).await {
        Ok(service) => service.waiting().await.map(drop).map_err(|e| anyhow::anyhow!("the MCP session stopped: {e}")),
        Err(e) => Err(anyhow::anyhow!("the MCP session did not start: {e}")),
    };
    let joined = |r: Result<std::io::Result<()>, tokio::task::JoinError>, what: &str| {
        r.map_err(|e| anyhow::anyhow!("{what}: {e}"))?.map_err(|e| anyhow::anyhow!("{what}: {e}"))
    };
    // rmcp has ended, whether or not its session started: every answer
    // already made is written before the process leaves. A session that
    // never started (the input ended before `initialize`) used to return
    // at once, and the screen's -32700 for a line before the end was lost
    // whenever the process left before the writer had run. The screen ends
    // at the end of the input (having handed over its last reply); one
    // still reading a client that keeps stdin open is stopped after a grace.
    let mut screen = screen;
    if tokio::time::timeout(SCREEN_GRACE, &mut screen).await.is_err() {
        screen.abort();
    }
    joined(relay.await, "relaying the answers")?;
    joined(writer.await, "writing to stdout")?;
    session
}

/// How long the end of an rmcp session waits for the screen to hand over
/// its last reply.
const SCREEN_GRACE: std::time::Duration = std::time::Duration::from_secs(1);
