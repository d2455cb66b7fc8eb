//! The server's layers, as a test: which top-level module may name which.
//! ARCHITECTURE.md states the rule; this keeps it.
//!
//! `main → cli → {http, agent} → http's parts → store → shared`: nothing
//! names `cli`, nothing below `http` names `http`, and the capture agent
//! uses nothing of the server (its protocol is `vramscope_shared::api`).

/// Each module and the modules it may name through `crate::` (the crate
/// root's own items, such as `now_ms`, are open to all).
const ALLOWED: &[(&str, &[&str])] = &[
    (
        "cli",
        &[
            "agent",
            "assets",
            "auth",
            "http",
            "ingest",
            "machine",
            "mcp",
            "metrics",
            "report",
            "retention",
            "settings",
            "store",
        ],
    ),
    ("http", &["assets", "auth", "ingest", "machine", "mcp", "metrics", "report", "retention", "settings", "store"]),
    // The assistants' tools: vramscope_shared and the server's HTTP API only.
    ("mcp", &[]),
    ("agent", &[]),
    ("retention", &["ingest", "settings", "store"]),
    ("auth", &["store"]),
    ("report", &["assets"]),
    ("ingest", &["metrics", "store"]),
    ("settings", &["machine", "store"]),
    ("store", &[]),
    ("metrics", &[]),
    ("assets", &[]),
    ("machine", &[]),
];

/// Items of the crate root any module may use.
const ROOT_ITEMS: &[&str] = &["now_ms"];

/// Every `crate::<name>` a source text names.
fn named_modules(text: &str) -> Vec<&str> {
    text.match_indices("crate::")
        .filter(|(at, _)| !text[..*at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$'))
        .filter_map(|(at, prefix)| {
            let rest = &text[at + prefix.len()..];
            let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
            (end > 0).then(|| &rest[..end])
        })
        .collect()
}

fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn imports_point_down_the_layers() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).expect("under src");
        let Some(first) = relative.components().next() else { continue };
        let module = first.as_os_str().to_string_lossy().trim_end_matches(".rs").to_owned();
        if module == "main" || module == "layers" {
            continue;
        }
        let Some((_, allowed)) = ALLOWED.iter().find(|(m, _)| *m == module) else {
            wrong.push(format!("{}: module {module} is not in the table of layers", relative.display()));
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read");
        for named in named_modules(&text) {
            if named != module && !allowed.contains(&named) && !ROOT_ITEMS.contains(&named) {
                wrong.push(format!("{}: {module} names crate::{named}", relative.display()));
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(wrong.is_empty(), "imports against the layers (see ARCHITECTURE.md):\n{}", wrong.join("\n"));
}

#[test]
fn the_scan_finds_paths_and_ignores_lookalikes() {
    assert_eq!(named_modules("use crate::store::Db; crate::now_ms(); my_crate::x; $crate::y"), ["store", "now_ms"]);
}

/// The repository keeps no Python bytecode (`__pycache__` is ignored), and
/// its Python tools put scratch files in the system's temporary folder
/// (`tempfile.gettempdir()`), not a hard-coded `/tmp`.
#[test]
fn no_bytecode_is_tracked_and_python_tools_take_the_systems_temporary_folder() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let listed = std::process::Command::new("git").arg("ls-files").current_dir(&root).output().expect("git ls-files");
    assert!(listed.status.success(), "git ls-files: {}", String::from_utf8_lossy(&listed.stderr));
    let files = String::from_utf8_lossy(&listed.stdout).into_owned();
    let bytecode: Vec<&str> = files.lines().filter(|f| f.ends_with(".pyc") || f.contains("__pycache__/")).collect();
    assert!(bytecode.is_empty(), "tracked bytecode: {bytecode:?}");
    let mut hard_coded = Vec::new();
    for file in files.lines().filter(|f| f.ends_with(".py")) {
        let Ok(text) = std::fs::read_to_string(root.join(file)) else { continue };
        for (n, line) in text.lines().enumerate() {
            // Code, not docs: a path joined or assigned in a string literal
            // (a recorded frame's `"filename"` is data: Inductor's own path).
            let code = line.split('#').next().unwrap_or("");
            if code.contains("\"/tmp\"") || (code.contains("\"/tmp/") && !code.contains("\"filename\"")) {
                hard_coded.push(format!("{file}:{}", n + 1));
            }
        }
    }
    assert!(hard_coded.is_empty(), "/tmp written in: {hard_coded:?}");
}
