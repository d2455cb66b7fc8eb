//! `/api/v1/mcp`: the assistants' tools of `vramscope mcp` over streamable
//! HTTP, behind this server's tokens (a viewer's is enough: the tools only
//! read). They read stored snapshots by id through the analysis cache and
//! run in the analysis pool, like the dashboard's analyses.

use std::sync::Arc;

use futures::future::BoxFuture;
use vramscope_shared::ReadOptions;
use vramscope_shared::api::SnapshotMeta;
use vramscope_shared::api::SnapshotStatus;
use vramscope_shared::indexed::IndexedSnapshot;

use super::extract::{analyzed, record};
use super::lru::Lru;
use crate::http::AppState;
use crate::http::error::AppError;
use crate::mcp::{Store, Work, http_service};
use crate::store::ListFilter;

/// The path of the MCP endpoint.
pub(crate) const PATH: &str = vramscope_shared::api::paths::MCP.route();

/// Tool answers kept: a repeated call (an assistant asks again as it
/// reasons) is answered without a replay, as the HTTP routes answer theirs.
const ANSWERS_KEPT: usize = 32;

static ANSWERS: Lru<String, serde_json::Value> = Lru::new(ANSWERS_KEPT);

/// This server's stored snapshots, for the tools.
struct ServerStore(AppState);

fn message(e: &AppError) -> String {
    e.message()
}

impl Store for ServerStore {
    fn load(&self, id: String) -> BoxFuture<'static, Result<(SnapshotMeta, Arc<IndexedSnapshot>), String>> {
        let state = self.0.clone();
        Box::pin(async move {
            let rec = record(&state, &id).await.map_err(|e| message(&e))?;
            let a = analyzed(&state, &id).await.map_err(|e| message(&e))?;
            Ok((rec.meta, a))
        })
    }

    fn list(&self, job: Option<String>) -> BoxFuture<'static, Result<Vec<SnapshotMeta>, String>> {
        let state = self.0.clone();
        Box::pin(async move {
            let filter = ListFilter { job, limit: Some(100), ..ListFilter::default() };
            let page = state.db.list(&filter).await.map_err(|e| format!("the library: {e:#}"))?;
            Ok(page.items.into_iter().map(|r| r.meta).filter(|m| m.status != SnapshotStatus::Failed).collect())
        })
    }

    fn run(&self, snapshot: String, work: Work) -> BoxFuture<'static, Result<(), String>> {
        let state = self.0.clone();
        Box::pin(async move {
            state
                .analyses
                .run(&snapshot, move || {
                    work();
                    Ok(())
                })
                .await
                .map_err(|e| message(&e))
        })
    }

    fn cached(&self, key: &str) -> Option<serde_json::Value> {
        ANSWERS.get(&key.to_owned()).map(|answer| serde_json::Value::clone(&answer))
    }

    fn remember(&self, key: String, answer: serde_json::Value) {
        self.0.metrics.mcp_answers_computed.inc();
        ANSWERS.put(key, Arc::new(answer));
    }
}

/// The MCP service mounted at [`PATH`].
pub(crate) fn service(
    state: AppState,
    read: ReadOptions,
) -> rmcp::transport::streamable_http_server::StreamableHttpService<
    crate::mcp::Assistant,
    rmcp::transport::streamable_http_server::session::never::NeverSessionManager,
> {
    http_service(Arc::new(ServerStore(state)), read)
}
