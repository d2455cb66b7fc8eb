//! `vramscope mcp [--server URL] [--folder DIR] [--allow-write]`: the Model
//! Context Protocol server over stdio, for coding assistants (see `mcp/`).

use std::path::PathBuf;

use anyhow::anyhow;
use clap::Args;

use super::Failure;
use super::input::MemoryBudget;
use crate::mcp::{Context, serve_stdio, token_role};

/// Arguments of `vramscope mcp`.
#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    /// A vramscope server whose stored snapshots the tools may read (by id),
    /// and whose library `list_snapshots` lists.
    #[arg(long, env = "VRAMSCOPE_SERVER", hide_env_values = true)]
    server: Option<String>,
    /// API token for the server. With --allow-write, the tools its role
    /// may run are offered: comment for any token, upload for an
    /// uploader's or an admin's.
    #[arg(long, env = "VRAMSCOPE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Folder `list_snapshots` lists when no server is given (default: the working folder).
    #[arg(long)]
    folder: Option<PathBuf>,
    /// Offer the tools that write to the server that the token's role may
    /// run (comment: any token; upload: an uploader's or an admin's). Needs
    /// --server and --token; read-only otherwise.
    #[arg(long, requires_all = ["server", "token"])]
    allow_write: bool,
    #[command(flatten)]
    budget: MemoryBudget,
}

/// Run the subcommand until the client closes stdin.
pub(crate) fn run(args: &McpArgs) -> Result<(), Failure> {
    let folder = match &args.folder {
        Some(f) if !f.is_dir() => {
            return Err(Failure::BadInput(anyhow!("--folder: not a folder: {}", f.display())));
        }
        Some(f) => f.clone(),
        None => PathBuf::from("."),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Other(anyhow!("cannot start the async runtime: {e}")))?;
    let role = match (&args.server, &args.token) {
        (Some(server), Some(token)) if args.allow_write => {
            runtime.block_on(token_role(server, token)).map_err(|e| Failure::BadInput(e.context("--allow-write")))?
        }
        _ => None,
    };
    let context = Context {
        server: args.server.clone(),
        token: args.token.clone(),
        allow_write: args.allow_write,
        role,
        folder,
        read: args.budget.options(),
        store: None,
    };
    runtime.block_on(serve_stdio(context)).map_err(Failure::Other)
}

/// `vramscope mcp`'s one-line description, with every tool of the table.
pub(crate) fn about() -> String {
    format!(
        "Serve snapshots to coding assistants: a Model Context Protocol server over stdio. Tools: {}",
        crate::mcp::tools::tool_list()
    )
}

/// `vramscope mcp --help`'s description.
pub(crate) fn long_about() -> String {
    format!(
        "{}.\n\nRead-only unless --allow-write, which needs --server and --token and offers the writing tools \
         the token's role may run, as the server names it.",
        about()
    )
}
