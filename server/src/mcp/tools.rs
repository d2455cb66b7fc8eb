//! The MCP tools, one entry each in [`TOOLS`]: name, description, arguments
//! and the function that answers. Every answer is the JSON of the matching
//! `vramscope … --json` (`vramscope_shared::cli_json`), computed on a
//! blocking thread.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Map, Value, json};
use vramscope_shared::analysis::check::CheckBudget;
use vramscope_shared::api::paths;
use vramscope_shared::api::review::PostComment;
use vramscope_shared::api::snapshots::ListParams;
use vramscope_shared::api::{Page, SnapshotMeta};
use vramscope_shared::cli_json;
use vramscope_shared::indexed::IndexedSnapshot;
use vramscope_shared::simulate::{SimulateOptions, parse_size};
use vramscope_shared::views::findings;
use vramscope_shared::views::state::{StateParams, state};
use vramscope_shared::{Snapshot, read_snapshot, read_snapshot_bytes};

use super::Context;

/// The JSON type of an argument.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    /// A string.
    Str,
    /// A whole number, 0 or more.
    Int,
    /// A number.
    Num,
    /// `true` or `false`.
    Bool,
}

impl Kind {
    /// The JSON Schema type.
    pub(crate) fn json_type(self) -> &'static str {
        match self {
            Kind::Str => "string",
            Kind::Int => "integer",
            Kind::Num => "number",
            Kind::Bool => "boolean",
        }
    }
}

/// One argument of a tool.
#[derive(Debug)]
pub(crate) struct Param {
    /// Its name.
    pub(crate) name: &'static str,
    /// Its type.
    pub(crate) kind: Kind,
    /// Whether a call must give it.
    pub(crate) required: bool,
    /// What it is, for the assistant.
    pub(crate) description: &'static str,
}

const fn param(name: &'static str, kind: Kind, required: bool, description: &'static str) -> Param {
    Param { name, kind, required, description }
}

const SNAPSHOT: Param = param(
    "snapshot",
    Kind::Str,
    true,
    "A snapshot file's path (pickle from torch.cuda.memory._dump_snapshot, plain, gzip or zstd), or a stored \
     snapshot's id when the server is configured",
);
const DEVICE: Param = param("device", Kind::Int, false, "CUDA device (default: the first)");
const CAPACITY: Param =
    param("capacity", Kind::Str, false, "Memory each GPU may reserve, e.g. 80GiB (default: unlimited)");

/// One top-level field of a tool's answer.
#[derive(Debug)]
pub(crate) struct Field {
    /// Its name.
    pub(crate) name: &'static str,
    /// Its JSON types (`"null"` when it may be null).
    pub(crate) types: &'static [&'static str],
    /// Every answer has it.
    pub(crate) required: bool,
}

const fn field(name: &'static str, types: &'static [&'static str], required: bool) -> Field {
    Field { name, types, required }
}

/// A tool's answer: the JSON, and where the whole of it is when it is cut.
#[derive(Debug)]
pub(crate) struct Answer {
    /// The JSON `vramscope … --json` prints.
    pub(crate) json: Value,
    /// The dashboard's permalink or the command line that gives it all.
    pub(crate) more: Option<String>,
}

/// The function answering a tool.
pub(crate) type Run = fn(Call) -> BoxFuture<'static, Result<Answer, String>>;

/// One tool.
#[derive(Debug)]
pub(crate) struct ToolSpec {
    /// Its name.
    pub(crate) name: &'static str,
    /// What it answers, for the assistant.
    pub(crate) description: &'static str,
    /// Its arguments.
    pub(crate) params: &'static [Param],
    /// The top-level fields of its answer (its output schema): what a
    /// client may rely on. Answers may carry more, and a cut one carries
    /// `truncated`.
    pub(crate) output: &'static [Field],
    /// It changes nothing (the others need `--allow-write`).
    pub(crate) read_only: bool,
    /// The least role whose token may run it: a tool that writes is listed
    /// with `--allow-write` only when the server says the token has it.
    pub(crate) role: Role,
    /// The answer.
    pub(crate) run: Run,
}

/// A token's role on the server, as the tool table needs it (the server's
/// own `auth::Role` lies above this module).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Role {
    /// Reads, and comments.
    Viewer,
    /// Also uploads.
    Uploader,
    /// Also deletes.
    Admin,
}

impl Role {
    /// The role `GET /api/v1/token` names.
    pub(crate) fn parse(name: &str) -> Option<Role> {
        match name {
            "viewer" => Some(Role::Viewer),
            "uploader" => Some(Role::Uploader),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }

    /// Its name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Uploader => "uploader",
            Role::Admin => "admin",
        }
    }
}

/// The tools' names, reading ones first, then the writing ones with the
/// role each needs: the text of `vramscope --help` and `vramscope mcp
/// --help`, made from the table so that neither can leave one out.
pub(crate) fn tool_list() -> String {
    let reading: Vec<&str> = TOOLS.iter().filter(|t| t.read_only).map(|t| t.name).collect();
    let writing: Vec<String> =
        TOOLS.iter().filter(|t| !t.read_only).map(|t| format!("{} (a {} token)", t.name, t.role.as_str())).collect();
    format!("{}; with --allow-write: {}", reading.join(", "), writing.join(", "))
}

/// Every tool. Adding one is adding an entry.
pub(crate) const TOOLS: &[ToolSpec] = &[
    ToolSpec {
        name: "list_snapshots",
        description: "List snapshots: the files of a folder, or with a server configured (and no folder given) the \
                      library's newest stored snapshots with their ids and dashboard links",
        params: &[
            param("folder", Kind::Str, false, "Folder to list (default: the working folder, or the library)"),
            param("job", Kind::Str, false, "Library only: the snapshots of this job"),
        ],
        output: &[
            field("snapshots", &["array"], true),
            field("folder", &["string"], false),
            field("server", &["string"], false),
            field("more", &["boolean"], false),
        ],
        read_only: true,
        role: Role::Viewer,
        run: |c| Box::pin(list_snapshots(c)),
    },
    ToolSpec {
        name: "stats",
        description: "Per device: reserved, allocated, active, requested bytes and their peaks, cached memory not in \
                      use, largest free block, OOM count (vramscope stats --json)",
        params: &[SNAPSHOT],
        output: &[
            field("file", &["string"], true),
            field("format_version", &["string"], true),
            field("devices", &["array"], true),
            field("capture", &["object", "null"], false),
            field("host", &["object", "null"], false),
        ],
        read_only: true,
        role: Role::Viewer,
        run: |c| Box::pin(stats(c)),
    },
    ToolSpec {
        name: "explain",
        description: "Why each out-of-memory error happened: the request, free memory, fragmentation or exhaustion, \
                      the largest live allocations by stack, and allocator settings that would have avoided it \
                      (vramscope explain --json)",
        params: &[SNAPSHOT],
        output: &[
            field("file", &["string"], true),
            field("has_trace", &["boolean"], true),
            field("ooms", &["array"], true),
        ],
        read_only: true,
        role: Role::Viewer,
        run: |c| Box::pin(explain(c)),
    },
    ToolSpec {
        name: "leaks",
        description: "Allocations alive at the end grouped by stack, ranked by how steadily they grew: likely leaks \
                      first (vramscope leaks --json)",
        params: &[SNAPSHOT, param("top", Kind::Int, false, "Stacks per device (default 10)")],
        output: &[field("file", &["string"], true), field("devices", &["array"], true)],
        read_only: true,
        role: Role::Viewer,
        run: |c| Box::pin(leaks(c)),
    },
    ToolSpec {
        name: "diff",
        description: "Compare two snapshots: live memory by stack that grew, shrank, appeared or vanished, and the \
                      figures side by side (vramscope diff --json)",
        params: &[
            param("a", Kind::Str, true, "The first snapshot (before, or one rank): a path or a stored id"),
            param("b", Kind::Str, true, "The second snapshot (after, or another rank): a path or a stored id"),
            param("top", Kind::Int, false, "Stacks per device (default 20)"),
        ],
        output: &[
            field("file_a", &["string"], true),
            field("file_b", &["string"], true),
            field("identical", &["boolean"], true),
            field("devices", &["array"], true),
        ],
        read_only: true,
        role: Role::Viewer,
        run: |c| Box::pin(diff(c)),
    },
    ToolSpec {
        name: "simulate",
        description: "Replay the trace through a model of PyTorch's caching allocator with the recorded or other \
                      settings, optionally under a capacity: peaks, fragmentation, where it would run out \
                      (vramscope simulate --json)",
        params: &[
            SNAPSHOT,
            param(
                "alloc_conf",
                Kind::Str,
                false,
                "PYTORCH_CUDA_ALLOC_CONF to replay with, e.g. expandable_segments:True",
            ),
            CAPACITY,
            param("grant_recorded_ooms", Kind::Bool, false, "Serve the requests that ran out of memory in the run"),
        ],
        output: &[
            field("alloc_conf", &["string"], true),
            field("settings", &["string"], true),
            field("devices", &["array"], true),
            field("capacity_bytes", &["integer", "null"], true),
            field("capacity_source", &["string"], false),
            field("not_modelled_settings", &["array"], true),
        ],
        read_only: true,
        role: Role::Viewer,
        run: |c| Box::pin(simulate(c)),
    },
    ToolSpec {
        name: "tune",
        description: "Replay the trace under a grid of allocator settings and rank them by reserved peak \
                      (vramscope tune --json)",
        params: &[SNAPSHOT, CAPACITY],
        output: &[
            field("file", &["string"], true),
            field("capacity_bytes", &["integer", "null"], true),
            field("capacity_inferred", &["boolean"], false),
            field("capacity_source", &["string"], false),
            field("rows", &["array"], true),
        ],
        read_only: true,
        role: Role::Viewer,
        run: |c| Box::pin(tune(c)),
    },
    ToolSpec {
        name: "breakdown",
        description: "Where the memory went: live memory split into parameters, gradients, optimizer state, \
                      activations and other at a trace row (default: the end), each with how sure it is, and by \
                      the record_function range that allocated it (vramscope breakdown --json)",
        params: &[SNAPSHOT, param("row", Kind::Int, false, "Trace row (default: the end of the trace)"), DEVICE],
        output: &[field("file", &["string"], true), field("devices", &["array"], true)],
        read_only: true,
        role: Role::Viewer,
        run: |c| Box::pin(breakdown(c)),
    },
    ToolSpec {
        name: "state_at_row",
        description: "The allocator's state right after one trace row: every segment with its blocks (allocated, \
                      pending free, free) and the instant's fragmentation figures",
        params: &[SNAPSHOT, param("row", Kind::Int, false, "Trace row (default: the end of the trace)"), DEVICE],
        output: &[
            field("device", &["integer"], true),
            field("row", &["integer", "null"], true),
            field("time_us", &["integer", "null"], false),
            field("rows", &["integer"], true),
            field("segments", &["array"], true),
            field("figures", &["object"], true),
            field("exact", &["boolean"], true),
        ],
        read_only: true,
        role: Role::Viewer,
        run: |c| Box::pin(state_at_row(c)),
    },
    ToolSpec {
        name: "check",
        description: "Check a memory budget: reserved and allocated peaks, fragmentation, growth against a baseline, \
                      each rule with its figures, and the stacks that grew (vramscope check --json)",
        params: &[
            SNAPSHOT,
            param("baseline", Kind::Str, false, "Snapshot to compare against: a path or a stored id"),
            param("max_reserved_peak", Kind::Str, false, "Most bytes reserved at the peak, e.g. 12GiB"),
            param("max_allocated_peak", Kind::Str, false, "Most bytes allocated at the peak, e.g. 10GiB"),
            param("max_fragmentation", Kind::Num, false, "Most memory cached but not in use at the end, % of reserved"),
            param("max_growth", Kind::Num, false, "Most growth of the peaks against the baseline, in %"),
            param("top", Kind::Int, false, "Stacks that grew to name per device (default 5)"),
        ],
        output: &[
            field("file", &["string"], true),
            field("baseline", &["string", "null"], true),
            field("passed", &["boolean"], true),
            field("failures", &["integer"], true),
            field("rules", &["array"], true),
            field("grown", &["array"], true),
            field("budget", &["object"], true),
        ],
        read_only: true,
        role: Role::Viewer,
        run: |c| Box::pin(check(c)),
    },
    ToolSpec {
        name: "predict",
        description: "Will it fit? Memory at sizes never run (batch size, sequence length), from a few small runs \
                      of the same job recorded at different sizes: each allocation's size fitted as a polynomial \
                      of the size, the program replayed through the caching allocator's model; peaks, where it \
                      runs out, and the largest size that fits under a capacity (vramscope predict --json)",
        params: &[
            param(
                "runs",
                Kind::Str,
                true,
                "The recorded runs, each a path or stored id with its size after '=', comma-separated: \
                 run_b8.pickle=8,run_b16.pickle=16",
            ),
            param("at", Kind::Str, false, "Sizes to predict, comma-separated, e.g. 64,128"),
            param("largest", Kind::Bool, false, "Find the largest size that fits under the capacity"),
            param(
                "capacity",
                Kind::Str,
                false,
                "Memory the process may reserve, e.g. 80GiB (default: the recorded memory fraction)",
            ),
            param("step", Kind::Int, false, "Step of the largest-size search (default: the sizes' common divisor)"),
            param("alloc_conf", Kind::Str, false, "PYTORCH_CUDA_ALLOC_CONF to predict with"),
            DEVICE,
        ],
        output: &[
            field("predictions", &["array"], true),
            field("largest_fitting_size", &["integer", "null"], true),
            field("matched_fraction", &["number"], true),
            field("fit", &["string"], true),
            field("notes", &["array"], true),
            field("device", &["integer"], true),
            field("capacity_bytes", &["integer", "null"], true),
            field("confidence", &["string"], true),
            field("runs", &["array"], true),
            field("unmatched", &["array"], true),
            field("searched", &["array"], true),
            field("non_monotonic", &["array"], true),
        ],
        read_only: true,
        role: Role::Viewer,
        run: |c| Box::pin(predict(c)),
    },
    ToolSpec {
        name: "upload",
        description: "Upload a snapshot file to the server's library (needs --allow-write and an uploader's or admin's \
                      token)",
        params: &[
            param("file", Kind::Str, true, "The snapshot file"),
            param("job", Kind::Str, false, "Job it belongs to"),
            param("name", Kind::Str, false, "Name in the library (default: the file name)"),
        ],
        output: &[field("id", &["string"], true), field("dashboard", &["string"], false)],
        read_only: false,
        role: Role::Uploader,
        run: |c| Box::pin(upload(c)),
    },
    ToolSpec {
        name: "comment",
        description: "Comment on a stored snapshot, optionally about one trace row (needs --allow-write and any \
                      token, a viewer's too)",
        params: &[
            param("snapshot", Kind::Str, true, "The stored snapshot's id (as every tool names a snapshot)"),
            param("text", Kind::Str, true, "The comment"),
            param("row", Kind::Int, false, "The trace row it is about"),
        ],
        output: &[field("id", &["string", "integer"], true)],
        read_only: false,
        role: Role::Viewer,
        run: |c| Box::pin(comment(c)),
    },
];

/// One call: the server's context and the arguments given.
#[derive(Debug)]
pub(crate) struct Call {
    /// What every call may use.
    pub(crate) context: Arc<Context>,
    /// The tool called.
    pub(crate) tool: &'static str,
    /// The arguments.
    pub(crate) args: Map<String, Value>,
}

/// A snapshot read for a call.
struct Loaded {
    /// How the answer names it: the path, or the stored snapshot's name.
    label: String,
    held: Held,
    /// A stored snapshot's id.
    id: Option<String>,
}

/// A snapshot read for this call, or the server's analysis of a stored one.
enum Held {
    Read(Box<Snapshot>),
    Stored(Arc<IndexedSnapshot>),
}

impl Loaded {
    fn snapshot(&self) -> &Snapshot {
        match &self.held {
            Held::Read(s) => s,
            Held::Stored(a) => &a.snapshot,
        }
    }
}

impl Call {
    fn opt_str(&self, name: &str) -> Result<Option<String>, String> {
        match self.args.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(format!("{name}: expected a string, got {other}")),
        }
    }

    fn str(&self, name: &str) -> Result<String, String> {
        self.opt_str(name)?.ok_or_else(|| format!("{name}: missing"))
    }

    fn opt_u64(&self, name: &str) -> Result<Option<u64>, String> {
        match self.args.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| format!("{name}: expected a whole number, got {v}")),
        }
    }

    fn opt_u32(&self, name: &str) -> Result<Option<u32>, String> {
        self.opt_u64(name)?.map(|v| u32::try_from(v).map_err(|_| format!("{name}: {v} is too large"))).transpose()
    }

    fn opt_f64(&self, name: &str) -> Result<Option<f64>, String> {
        match self.args.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_f64() {
                Some(f) if f.is_finite() && f >= 0.0 => Ok(Some(f)),
                _ => Err(format!("{name}: expected a number, 0 or more, got {v}")),
            },
        }
    }

    fn opt_bool(&self, name: &str) -> Result<bool, String> {
        match self.args.get(name) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(format!("{name}: expected true or false, got {other}")),
        }
    }

    fn opt_size(&self, name: &str) -> Result<Option<u64>, String> {
        self.opt_str(name)?.map(|t| parse_size(&t).map_err(|e| format!("{name}: {e}"))).transpose()
    }

    /// `capacity`, as a replay takes it: the HTTP API's check (whole MiB,
    /// 64 MiB to 16 TiB), so that a tool refuses what the route refuses.
    fn capacity(&self) -> Result<Option<u64>, String> {
        findings::replay_capacity(self.opt_str("capacity")?.as_deref()).map_err(|e| e.to_string())
    }

    /// `alloc_conf`, checked and in one spelling, as the HTTP API takes it.
    fn alloc_conf(&self) -> Result<Option<String>, String> {
        findings::replay_alloc_conf(self.opt_str("alloc_conf")?.as_deref()).map_err(|e| e.to_string())
    }

    fn server(&self) -> Result<&str, String> {
        self.context.server.as_deref().map(|s| s.trim_end_matches('/')).ok_or_else(|| {
            "no server configured: start vramscope mcp with --server URL (or VRAMSCOPE_SERVER)".to_owned()
        })
    }

    fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let request = http_client().request(method, url);
        match &self.context.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// GET `url`'s body, or the server's reason.
    async fn fetch(&self, url: &str) -> Result<bytes::Bytes, String> {
        let response = self.request(reqwest::Method::GET, url).send().await.map_err(|e| format!("{url}: {e}"))?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| format!("{url}: {e}"))?;
        if status.is_success() { Ok(body) } else { Err(refusal(url, status, &body)) }
    }

    /// Run CPU work off the protocol's task: in the server's analysis pool
    /// inside `vramscope serve`, else on a blocking thread.
    async fn blocking<T: Send + 'static>(
        &self,
        snapshot: &str,
        work: impl FnOnce() -> Result<T, String> + Send + 'static,
    ) -> Result<T, String> {
        let Some(store) = &self.context.store else { return blocking(work).await };
        let (tx, rx) = tokio::sync::oneshot::channel();
        store
            .run(
                snapshot.to_owned(),
                Box::new(move || {
                    let _ = tx.send(work());
                }),
            )
            .await?;
        rx.await.map_err(|_| "the analysis stopped".to_owned())?
    }

    /// The answer `work` computes, off the protocol's task (see
    /// [`Call::blocking`]). Inside the server it is kept, by the tool and
    /// its arguments, and a repeated call is answered from there: stored
    /// snapshots never change under their id, and every snapshot named was
    /// loaded (so it still exists) before this is called.
    async fn answer(
        &self,
        snapshot: &str,
        work: impl FnOnce() -> Result<Value, String> + Send + 'static,
    ) -> Result<Value, String> {
        let Some(store) = self.context.store.clone() else { return self.blocking(snapshot, work).await };
        let key = self.cache_key();
        if let Some(answer) = store.cached(&key) {
            return Ok(answer);
        }
        let answer = self.blocking(snapshot, work).await?;
        store.remember(key, answer.clone());
        Ok(answer)
    }

    /// The tool and its arguments, in one spelling whatever their order.
    fn cache_key(&self) -> String {
        let sorted: std::collections::BTreeMap<&String, &Value> = self.args.iter().collect();
        format!("{}\u{1f}{}", self.tool, serde_json::to_string(&sorted).unwrap_or_default())
    }

    /// The base of the dashboard's links: the server's URL, or nothing
    /// inside the server itself (links relative to it).
    fn dashboard(&self) -> Option<String> {
        match (&self.context.store, &self.context.server) {
            (Some(_), _) => Some(String::new()),
            (None, Some(server)) => Some(server.trim_end_matches('/').to_owned()),
            (None, None) => None,
        }
    }

    /// The snapshot named by argument `name`: a file, or a stored id.
    async fn snapshot(&self, name: &str) -> Result<Loaded, String> {
        self.load(name, self.str(name)?).await
    }

    /// Read the snapshot `text` names (a path, or a stored id), for the
    /// argument `name`.
    async fn load(&self, name: &str, text: String) -> Result<Loaded, String> {
        if let Some(store) = &self.context.store {
            // Inside the server: stored snapshots by id, never a path of its disk.
            let (meta, analyzed) = store.load(text).await.map_err(|e| format!("{name}: {e}"))?;
            return Ok(Loaded { label: meta.name, held: Held::Stored(analyzed), id: Some(meta.id) });
        }
        let path = PathBuf::from(&text);
        let options = self.context.read.clone();
        match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() => return Err(format!("{name}: {text} is a folder, not a snapshot file")),
            Ok(m) if !m.is_file() => {
                return Err(format!("{name}: {text} is not a regular file (a device or a pipe), not a snapshot file"));
            }
            _ => {}
        }
        if path.is_file() {
            let label = text.clone();
            return blocking(move || {
                let file = File::open(&path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
                let snapshot = read_snapshot(BufReader::with_capacity(1 << 20, file), &options)
                    .map_err(|e| format!("{e} (file: {})", path.display()))?;
                Ok(Loaded { label, held: Held::Read(Box::new(snapshot)), id: None })
            })
            .await;
        }
        if self.context.server.is_none() {
            return Err(format!("{name}: no file {text} (a stored snapshot's id needs --server)"));
        }
        let server = self.server()?;
        let meta: SnapshotMeta =
            serde_json::from_slice(&self.fetch(&format!("{server}{}", paths::SNAPSHOT.path([&text]))).await?)
                .map_err(|e| format!("{name}: the server's answer about snapshot {text}: {e}"))?;
        let bytes = self.fetch(&format!("{server}{}", paths::FILE.path([&text]))).await?;
        blocking(move || {
            let snapshot =
                read_snapshot_bytes(&bytes, &options).map_err(|e| format!("{e} (stored snapshot {})", meta.id))?;
            Ok(Loaded { label: meta.name, held: Held::Read(Box::new(snapshot)), id: Some(meta.id) })
        })
        .await
    }

    /// Where the whole answer is: the dashboard for a stored snapshot, else the command line.
    fn more(&self, loaded: &Loaded, command: &str, query: &str) -> String {
        match (&loaded.id, self.dashboard()) {
            (Some(id), Some(base)) => format!("the dashboard: {base}/snapshots/{id}{query}"),
            _ => format!("vramscope {command} {} --json", shell_word(&loaded.label)),
        }
    }
}

/// A word as a POSIX shell reads it back.
fn shell_word(text: &str) -> String {
    if text.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+:".contains(c)) {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// How long connecting to the server may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// How long the server may send nothing, once asked (a download of a large
/// snapshot goes on as long as bytes arrive).
pub(crate) const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The one HTTP client of the tools: a server that stops answering gives
/// the assistant an error, not a session that hangs.
pub(crate) fn http_client() -> reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .read_timeout(READ_TIMEOUT)
                .build()
                .unwrap_or_default()
        })
        .clone()
}

/// The server's refusal as one line.
pub(crate) fn refusal(url: &str, status: reqwest::StatusCode, body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let message = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_owned))
        .unwrap_or_else(|| text.chars().take(300).collect());
    format!("{url}: {status}: {message}")
}

/// Run CPU work off the protocol's task.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> Result<T, String> + Send + 'static) -> Result<T, String> {
    tokio::task::spawn_blocking(work).await.map_err(|e| format!("the analysis stopped: {e}"))?
}

fn to_json(value: &impl serde::Serialize) -> Result<Value, String> {
    serde_json::to_value(value).map_err(|e| format!("the answer as JSON: {e}"))
}

async fn list_snapshots(c: Call) -> Result<Answer, String> {
    let folder = c.opt_str("folder")?;
    if let Some(store) = &c.context.store {
        if folder.is_some() {
            return Err("folder: the server lists its library, not folders".to_owned());
        }
        let items: Vec<Value> = store.list(c.opt_str("job")?).await?.iter().map(|m| library_item(m, "")).collect();
        return Ok(Answer { json: json!({ "snapshots": items }), more: Some("the dashboard's library: /".to_owned()) });
    }
    if folder.is_none() && c.context.server.is_some() {
        let server = c.server()?;
        let params = ListParams::<String> { job: c.opt_str("job")?, limit: Some(100), ..Default::default() };
        let query = paths::SNAPSHOTS.path_with([], &params).map_err(|e| format!("the library's query: {e}"))?;
        let url = format!("{server}{query}");
        let page: Page<SnapshotMeta> = serde_json::from_slice(&c.fetch(&url).await?)
            .map_err(|e| format!("the server's list of snapshots: {e}"))?;
        let items: Vec<Value> = page.items.iter().map(|m| library_item(m, server)).collect();
        return Ok(Answer {
            json: json!({ "server": server, "snapshots": items, "more": page.next_cursor.is_some() }),
            more: Some(format!("the dashboard's library: {server}/")),
        });
    }
    if c.opt_str("job")?.is_some() {
        return Err(
            "job: a folder's files have no job; filtering by job needs the library (start with --server)".to_owned()
        );
    }
    let dir = folder.map_or_else(|| c.context.folder.clone(), PathBuf::from);
    let json = blocking(move || list_folder(&dir)).await?;
    Ok(Answer { json, more: None })
}

/// One stored snapshot as `list_snapshots` lists it, with its dashboard link.
fn library_item(m: &SnapshotMeta, base: &str) -> Value {
    json!({
        "id": m.id, "name": m.name, "job": m.job, "host": m.host, "rank": m.rank, "tags": m.tags,
        "trigger": m.trigger, "size_bytes": m.size_bytes, "uploaded_at_ms": m.uploaded_at_ms,
        "status": m.status, "pinned": m.pinned, "dashboard": format!("{base}/snapshots/{}", m.id),
    })
}

/// The snapshot-looking files of a folder (by extension), largest first.
fn list_folder(dir: &Path) -> Result<Value, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    let mut files = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let snapshot_like = [".pickle", ".pkl", ".pickle.gz", ".pkl.gz", ".pickle.zst", ".pkl.zst"]
            .iter()
            .any(|ext| name.ends_with(ext));
        let Ok(meta) = entry.metadata() else { continue };
        if snapshot_like && meta.is_file() {
            files.push((meta.len(), path.display().to_string()));
        }
    }
    files.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let files: Vec<Value> = files.into_iter().map(|(size, path)| json!({ "path": path, "size_bytes": size })).collect();
    Ok(json!({ "folder": dir.display().to_string(), "snapshots": files }))
}

async fn stats(c: Call) -> Result<Answer, String> {
    let l = c.snapshot("snapshot").await?;
    let key = l.id.clone().unwrap_or_default();
    let more = c.more(&l, "stats", "");
    // Off the protocol's task and kept, as every other tool's answer: a
    // 2M-entry snapshot's statistics took 57 ms of an async worker per
    // call, and looping clients held up /healthz (issue 44).
    let json = c.answer(&key, move || to_json(&cli_json::stats_json(&l.label, l.snapshot()))).await?;
    Ok(Answer { json, more: Some(more) })
}

async fn explain(c: Call) -> Result<Answer, String> {
    let l = c.snapshot("snapshot").await?;
    let key = l.id.clone().unwrap_or_default();
    let more = c.more(&l, "explain", "");
    let json = c.answer(&key, move || to_json(&cli_json::explain_json(&l.label, l.snapshot()))).await?;
    Ok(Answer { json, more: Some(more) })
}

async fn leaks(c: Call) -> Result<Answer, String> {
    let top = c.opt_u64("top")?.unwrap_or(10) as usize;
    let l = c.snapshot("snapshot").await?;
    let key = l.id.clone().unwrap_or_default();
    // The caller's `top`, in what gives the whole answer.
    let more = match (&l.id, c.dashboard()) {
        (Some(id), Some(base)) => format!("the dashboard: {base}/snapshots/{id}"),
        _ => format!("vramscope leaks {} --top {top} --json", shell_word(&l.label)),
    };
    let json = c.answer(&key, move || to_json(&cli_json::leaks_json(&l.label, l.snapshot(), top))).await?;
    Ok(Answer { json, more: Some(more) })
}

async fn diff(c: Call) -> Result<Answer, String> {
    let top = c.opt_u64("top")?.unwrap_or(20) as usize;
    let a = c.snapshot("a").await?;
    let b = c.snapshot("b").await?;
    let key = a.id.clone().unwrap_or_default();
    let more = match (&a.id, &b.id, c.dashboard()) {
        (Some(ia), Some(ib), Some(base)) => format!("the dashboard: {base}/compare/{ia}/{ib}"),
        _ => format!("vramscope diff {} {} --top {top} --json", shell_word(&a.label), shell_word(&b.label)),
    };
    let json = c
        .answer(&key, move || to_json(&cli_json::diff_json(&a.label, a.snapshot(), &b.label, b.snapshot(), top)))
        .await?;
    Ok(Answer { json, more: Some(more) })
}

async fn simulate(c: Call) -> Result<Answer, String> {
    let options = SimulateOptions {
        alloc_conf: c.alloc_conf()?,
        capacity: c.capacity()?,
        record_series: false,
        grant_recorded_ooms: c.opt_bool("grant_recorded_ooms")?,
    };
    let l = c.snapshot("snapshot").await?;
    let key = l.id.clone().unwrap_or_default();
    let more = c.more(&l, "simulate", "");
    let json = c
        .answer(&key, move || {
            let report = cli_json::simulate_json(l.snapshot(), &options).map_err(|e| format!("{e} ({})", l.label))?;
            to_json(&report)
        })
        .await?;
    Ok(Answer { json, more: Some(more) })
}

async fn predict(c: Call) -> Result<Answer, String> {
    use vramscope_shared::api::predict::{RunForm, parse_runs, parse_sizes};
    use vramscope_shared::predict::{PredictOptions, Run, replay_sequentially};
    // The HTTP query's checks, with the tool's `FILE=SIZE` (a path may hold a `:`).
    let form =
        RunForm { separator: '=', form: "FILE=SIZE", what: "a path or stored id", example: "a.pickle=8,b.pickle=16" };
    let named = parse_runs(&c.str("runs")?, form)?;
    let at = parse_sizes(&c.opt_str("at")?.unwrap_or_default())?;
    let options = PredictOptions {
        at,
        largest: c.opt_bool("largest")?,
        capacity: c.capacity()?,
        alloc_conf: c.alloc_conf()?,
        device: c.opt_u32("device")?,
        step: c.opt_u64("step")?.filter(|s| *s > 0),
    };
    let mut loaded = Vec::new();
    for (what, size) in named {
        loaded.push((c.load("runs", what).await?, size));
    }
    let key = loaded.first().and_then(|(l, _)| l.id.clone()).unwrap_or_default();
    let more = format!(
        "vramscope predict {} --json",
        loaded.iter().map(|(l, s)| format!("{}={s}", shell_word(&l.label))).collect::<Vec<_>>().join(" ")
    );
    let json = c
        .answer(&key, move || {
            let runs: Vec<Run<'_>> =
                loaded.iter().map(|(l, size)| Run { name: &l.label, size: *size, snapshot: l.snapshot() }).collect();
            // One thread: the analysis pool bounds what a client may take.
            let report =
                vramscope_shared::predict::predict(&runs, &options, &replay_sequentially).map_err(|e| e.to_string())?;
            to_json(&report)
        })
        .await?;
    Ok(Answer { json, more: Some(more) })
}

async fn tune(c: Call) -> Result<Answer, String> {
    let capacity = c.capacity()?;
    let l = c.snapshot("snapshot").await?;
    let key = l.id.clone().unwrap_or_default();
    let more = c.more(&l, "tune", "");
    let json = c
        .answer(&key, move || {
            let report =
                cli_json::tune_json(&l.label, l.snapshot(), capacity).map_err(|e| format!("{e} ({})", l.label))?;
            to_json(&report)
        })
        .await?;
    Ok(Answer { json, more: Some(more) })
}

async fn breakdown(c: Call) -> Result<Answer, String> {
    let (device, row) = (c.opt_u32("device")?, c.opt_u32("row")?);
    let l = c.snapshot("snapshot").await?;
    let key = l.id.clone().unwrap_or_default();
    let more = c.more(&l, "breakdown", "");
    let json = c
        .answer(&key, move || {
            let label = l.label.clone();
            let analyzed = match l.held {
                Held::Read(snapshot) => Arc::new(IndexedSnapshot::build(*snapshot)),
                Held::Stored(analyzed) => analyzed,
            };
            let answer =
                cli_json::breakdown_json(&label, &analyzed, device, row).map_err(|e| format!("{e} ({label})"))?;
            to_json(&answer)
        })
        .await?;
    Ok(Answer { json, more: Some(more) })
}

async fn state_at_row(c: Call) -> Result<Answer, String> {
    let params = StateParams { device: c.opt_u32("device")?, at: c.opt_u32("row")?, x: None, axis: None };
    let l = c.snapshot("snapshot").await?;
    let key = l.id.clone().unwrap_or_default();
    let (id, label) = (l.id, l.label);
    let answer = c
        .blocking(&key, move || {
            let analyzed = match l.held {
                Held::Read(snapshot) => Arc::new(IndexedSnapshot::build(*snapshot)),
                Held::Stored(analyzed) => analyzed,
            };
            let s = state(&analyzed, &params).map_err(|e| format!("{e} ({label})"))?;
            Ok((s.device, s.row, to_json(&s)?))
        })
        .await?;
    let (device, row, json) = answer;
    let query = format!("?device={device}{}", row.map_or_else(String::new, |r| format!("&row={r}")));
    let more = match (id, c.dashboard()) {
        (Some(id), Some(base)) => format!("the dashboard: {base}/snapshots/{id}{query}"),
        _ => "the dashboard's allocator-state panel at that row (vramscope serve, then upload the file)".to_owned(),
    };
    Ok(Answer { json, more: Some(more) })
}

async fn check(c: Call) -> Result<Answer, String> {
    let budget = CheckBudget {
        max_reserved_peak_bytes: c.opt_size("max_reserved_peak")?,
        max_allocated_peak_bytes: c.opt_size("max_allocated_peak")?,
        max_fragmentation_pct: c.opt_f64("max_fragmentation")?,
        max_growth_pct: c.opt_f64("max_growth")?,
    };
    if budget.is_empty() {
        return Err(
            "no rule to check: give max_reserved_peak, max_allocated_peak, max_fragmentation or max_growth".to_owned()
        );
    }
    if budget.max_growth_pct.is_some() && c.opt_str("baseline")?.is_none() {
        return Err("max_growth: give a baseline (a path or a stored id) to compare against".to_owned());
    }
    let top = c.opt_u64("top")?.unwrap_or(5) as usize;
    let l = c.snapshot("snapshot").await?;
    let key = l.id.clone().unwrap_or_default();
    let base = match c.opt_str("baseline")? {
        Some(_) => Some(c.snapshot("baseline").await?),
        None => None,
    };
    let more = c.more(&l, "check", "");
    let json = c
        .answer(&key, move || {
            let baseline = base.as_ref().map(|b| (b.label.as_str(), b.snapshot()));
            let report = cli_json::check_json(&l.label, l.snapshot(), baseline, &budget, top)
                .map_err(|e| format!("{e} ({})", l.label))?;
            to_json(&report)
        })
        .await?;
    Ok(Answer { json, more: Some(more) })
}

async fn upload(c: Call) -> Result<Answer, String> {
    let server = c.server()?.to_owned();
    let file = c.str("file")?;
    let path = PathBuf::from(&file);
    let name = c.opt_str("name")?.or_else(|| path.file_name().map(|n| n.to_string_lossy().into_owned()));
    let body = tokio::fs::read(&path).await.map_err(|e| format!("cannot read {file}: {e}"))?;
    let mut query: Vec<(&str, String)> = vec![("trigger", "manual".to_owned())];
    if let Some(n) = name {
        query.push(("name", n));
    }
    if let Some(job) = c.opt_str("job")? {
        query.push(("job", job));
    }
    let url = format!("{server}{}", paths::SNAPSHOTS.path([]));
    let response = c
        .request(reqwest::Method::POST, &url)
        .query(&query)
        .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
        .body(body)
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let status = response.status();
    let text = response.bytes().await.map_err(|e| format!("{url}: {e}"))?;
    if !status.is_success() {
        return Err(refusal(&url, status, &text));
    }
    let mut json: Value = serde_json::from_slice(&text).map_err(|e| format!("the server's answer: {e}"))?;
    let id = json["id"].as_str().map(str::to_owned);
    if let (Some(id), Value::Object(fields)) = (id, &mut json) {
        fields.insert("dashboard".to_owned(), Value::from(format!("{server}/snapshots/{id}")));
    }
    Ok(Answer { json, more: None })
}

async fn comment(c: Call) -> Result<Answer, String> {
    let server = c.server()?.to_owned();
    let id = c.str("snapshot")?;
    let body = PostComment { body: c.str("text")?, row: c.opt_u32("row")?, time_us: None, addr: None };
    let url = format!("{server}{}", paths::COMMENTS.path([&id]));
    let response =
        c.request(reqwest::Method::POST, &url).json(&body).send().await.map_err(|e| format!("{url}: {e}"))?;
    let status = response.status();
    let text = response.bytes().await.map_err(|e| format!("{url}: {e}"))?;
    if !status.is_success() {
        return Err(refusal(&url, status, &text));
    }
    let json: Value = serde_json::from_slice(&text).map_err(|e| format!("the server's answer: {e}"))?;
    Ok(Answer { json, more: None })
}
