//! `vramscope mcp`: snapshots for coding assistants, as a Model Context
//! Protocol server over stdio.
//!
//! The protocol (JSON-RPC framing, `initialize`, `tools/list`,
//! `tools/call`) is the official Rust SDK's, `rmcp`, without its macros:
//! the tools are one table ([`tools::TOOLS`]), each entry naming its
//! arguments and the function that answers, so adding a tool is one entry.
//! Each tool answers with the JSON the matching `vramscope … --json` prints
//! (`vramscope_shared::answers`), cut to a size an assistant can read
//! ([`cut`]), with a pointer to the rest (the dashboard's permalink for a
//! stored snapshot, the command line for a file).
//!
//! Read-only by default: the tools that write (upload, comment) are listed
//! only with `--allow-write`, which needs a server and a token (the server
//! checks that the token is an uploader's).

pub(crate) mod cut;
pub(crate) mod tools;

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value};
use vramscope_shared::ReadOptions;

/// What every tool call may use.
#[derive(Debug, Clone)]
pub(crate) struct Context {
    /// The vramscope server, for stored snapshots and the library.
    pub(crate) server: Option<String>,
    /// Its API token.
    pub(crate) token: Option<String>,
    /// The tools that write are listed and run.
    pub(crate) allow_write: bool,
    /// The folder `list_snapshots` lists when none is given.
    pub(crate) folder: PathBuf,
    /// The reader's options (memory budget).
    pub(crate) read: ReadOptions,
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
        tools::TOOLS.iter().filter(|t| t.read_only || self.context.allow_write)
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
    tool
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
            return Err(ErrorData::invalid_params(
                format!("no tool {:?}; the tools are {}", request.name, known.join(", ")),
                None,
            ));
        };
        let args = request.arguments.unwrap_or_default();
        if let Some(unknown) = args.keys().find(|k| !spec.params.iter().any(|p| p.name == k.as_str())) {
            return Ok(error_result(format!("{}: no argument {unknown:?}", spec.name)).into());
        }
        let call = tools::Call { context: self.context.clone(), args };
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

/// Serve MCP over this process's stdin and stdout until the client leaves.
pub(crate) async fn serve_stdio(context: Context) -> anyhow::Result<()> {
    let service = Assistant::new(context)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| anyhow::anyhow!("the MCP session did not start: {e}"))?;
    service.waiting().await.map_err(|e| anyhow::anyhow!("the MCP session stopped: {e}"))?;
    Ok(())
}
