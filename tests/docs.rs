//! The docs cannot drift from the code.
//!
//! - Every `console` block of the Markdown files at the repository's root
//!   and in `docs/` is run by `trycmd` with the real `vramscope` binary, from
//!   the repository's root, and its output compared: `$ vramscope …` lines
//!   are commands, `? N` an exit code, then the expected stdout and stderr
//!   together; `...` alone on a line stands for any lines, `[..]` for the
//!   rest of a line. Other blocks must name their language (`sh`, `text`,
//!   `python`): trycmd reads an unlabelled fence as a test too.
//! - Every path ARCHITECTURE.md names exists, and every source folder is on
//!   its map.
//! - Every relative link of the README and the docs leads to a file.
//! - The MCP transcript in `docs/` is what this build answers, and the
//!   README's compatibility table is the one the GPU results give.
//!
//! When a command's output changes on purpose, paste the new output into
//! the doc (the failure shows it); examples use the small files of
//! `tests/fixtures/`, so they need neither the corpus nor a server.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The repository's root.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().expect("the workspace's root")
}

/// The Markdown files users read: the root's and `docs/`'s, relative to
/// the root.
fn user_docs(root: &Path) -> Vec<PathBuf> {
    let mut docs = Vec::new();
    for dir in [root.to_path_buf(), root.join("docs")] {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.extension().is_some_and(|e| e == "md") {
                docs.push(path.strip_prefix(root).expect("under the root").to_path_buf());
            }
        }
    }
    docs.sort();
    docs
}

/// The fenced blocks of a Markdown text: (the fence's info string, the
/// first line's number, the lines inside).
fn fenced_blocks(text: &str) -> Vec<(String, usize, Vec<&str>)> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, usize, Vec<&str>)> = None;
    for (n, line) in text.lines().enumerate() {
        match open.take() {
            None => {
                if let Some(info) = line.strip_prefix("```") {
                    open = Some((info.trim().to_owned(), n + 1, Vec::new()));
                }
            }
            Some((info, start, mut lines)) => {
                if line.starts_with("```") {
                    blocks.push((info, start, lines));
                } else {
                    lines.push(line);
                    open = Some((info, start, lines));
                }
            }
        }
    }
    blocks
}

#[test]
fn command_line_examples_in_the_docs_print_what_they_say() {
    let root = workspace();
    let scratch = std::env::temp_dir().join(format!("vramscope-docs-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("a scratch folder");
    let mut run = Vec::new();
    let mut untested = Vec::new();
    for doc in user_docs(&root) {
        let text = std::fs::read_to_string(root.join(&doc)).expect("the doc reads");
        let blocks = fenced_blocks(&text);
        for (info, line, lines) in &blocks {
            let tested = info == "console" || info == "trycmd";
            if info.is_empty() {
                untested.push(format!("{}:{line}: a fence without a language (sh, text, console, ...)", doc.display()));
            } else if !tested && lines.iter().any(|l| l.starts_with("$ vramscope ")) {
                untested.push(format!(
                    "{}:{line}: a `$ vramscope` example in a `{info}` block: make it `console`",
                    doc.display()
                ));
            }
        }
        if !blocks.iter().any(|(info, _, _)| info == "console" || info == "trycmd") {
            continue;
        }
        // trycmd runs a case from `NAME.in/` when it exists: here, the
        // repository's root, so the examples' paths are the reader's. The
        // doc is copied whole, so trycmd's line numbers are the doc's.
        let name = doc.to_string_lossy().replace('/', "__");
        let copy = scratch.join(&name);
        std::fs::write(&copy, &text).expect("the doc copied");
        let link = copy.with_extension("in");
        std::fs::remove_file(&link).ok();
        std::os::unix::fs::symlink(&root, &link).expect("a link to the root");
        println!("{} is run as {}", doc.display(), copy.display());
        run.push(copy);
    }
    assert!(untested.is_empty(), "examples that would not be run as written:\n{}", untested.join("\n"));
    assert!(run.iter().any(|p| p.ends_with("README.md")), "the README has no console example");
    let cases = trycmd::TestCases::new();
    cases.register_bin("vramscope", Path::new(env!("CARGO_BIN_EXE_vramscope")));
    // The examples never reach a server or the corpus, whatever the
    // environment says.
    for var in ["VRAMSCOPE_SERVER", "VRAMSCOPE_TOKEN", "VRAMSCOPE_BIN", "RUST_LOG"] {
        cases.env(var, "");
    }
    for copy in &run {
        cases.case(copy);
    }
    cases.run();
    std::fs::remove_dir_all(&scratch).ok();
}

/// Top-level entries of the repository a path in ARCHITECTURE.md may start with.
const TOP: &[&str] =
    &["shared", "server", "frontend", "plot", "tools", "tests", "scripts", "docs", "assets", "python", "fuzz"];

/// File name endings that make a backticked word a path.
const EXTENSIONS: &[&str] =
    &[".rs", ".py", ".md", ".toml", ".sql", ".js", ".json", ".css", ".html", ".sh", ".txt", ".dict"];

/// Whether a backticked word looks like a repository path: `a/b`, `b.rs`,
/// not `/api/v1/…`, `crate::x` or `<id>`.
fn looks_like_a_path(word: &str) -> bool {
    let plain = word.chars().all(|c| c.is_ascii_alphanumeric() || "_.-/".contains(c));
    plain
        && !word.starts_with('/')
        && !word.contains("..")
        && (word.contains('/') || EXTENSIONS.iter().any(|e| word.ends_with(e)))
}

/// Whether a path is written from the repository's root.
fn from_the_root(word: &str, root: &Path) -> bool {
    let first = word.split('/').next().unwrap_or("");
    TOP.contains(&first) || (!word.contains('/') && root.join(word).is_file())
}

/// The items of a Markdown text outside fenced blocks: paragraphs, bullets,
/// headings and table rows, each joined into one line.
fn items(text: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            items.push(current.join(" "));
            current.clear();
            continue;
        }
        if fenced {
            continue;
        }
        let starts = line.trim().is_empty() || ["- ", "#", "**", "|"].iter().any(|p| line.starts_with(p));
        if starts && !current.is_empty() {
            items.push(current.join(" "));
            current.clear();
        }
        if !line.trim().is_empty() {
            current.push(line);
        }
    }
    items.push(current.join(" "));
    items.retain(|i| !i.is_empty());
    items
}

/// The backticked words of one item.
fn backticked(item: &str) -> Vec<&str> {
    item.split('`').skip(1).step_by(2).collect()
}

/// What ARCHITECTURE.md names: (the paths found, relative to the root;
/// the words that lead nowhere, with their item's folder). A word written
/// from the root must exist there; any other (`heap.rs`, `read/words.rs`)
/// is read in the folder its item starts with (a bullet of the code map
/// opens with its folder, `shared/src/pickle/`) or in one above it.
fn named_paths(root: &Path, text: &str) -> (BTreeSet<PathBuf>, Vec<String>) {
    let mut found = BTreeSet::new();
    let mut missing = Vec::new();
    for item in items(text) {
        let words: Vec<&str> = backticked(&item).into_iter().filter(|w| looks_like_a_path(w)).collect();
        let folder = words
            .iter()
            .find(|w| w.ends_with('/') && from_the_root(w, root))
            .map(|w| PathBuf::from(w.trim_end_matches('/')))
            .unwrap_or_default();
        for word in words {
            let relative = word.trim_end_matches('/');
            let candidates: Vec<PathBuf> = if from_the_root(word, root) {
                vec![PathBuf::from(relative)]
            } else {
                folder.ancestors().map(|dir| dir.join(relative)).collect()
            };
            match candidates.into_iter().find(|c| root.join(c).exists()) {
                Some(path) => {
                    found.insert(path);
                }
                None => missing.push(format!("`{word}` (read in `{}/`)", folder.display())),
            }
        }
    }
    (found, missing)
}

/// The folders of tracked files that the map must show: every folder of
/// the crates' sources and tools, and the first level of the other code.
fn source_folders(root: &Path) -> BTreeSet<PathBuf> {
    let listed = std::process::Command::new("git").arg("ls-files").current_dir(root).output().expect("git ls-files");
    assert!(listed.status.success(), "git ls-files: {}", String::from_utf8_lossy(&listed.stderr));
    let recursive = ["shared/src", "server/src", "frontend/src", "plot/src", "tools"];
    let one_level = ["tests", "shared/tests", "server/benches", "python/vramscope", "assets", "fuzz"];
    let mut folders = BTreeSet::new();
    for file in String::from_utf8_lossy(&listed.stdout).lines() {
        for dir in Path::new(file).ancestors().skip(1) {
            let wanted = recursive.iter().any(|r| dir.starts_with(r))
                || one_level.iter().any(|r| dir.parent() == Some(Path::new(r)));
            if wanted && root.join(dir).is_dir() {
                folders.insert(dir.to_path_buf());
            }
        }
    }
    folders
}

#[test]
fn architecture_names_only_paths_that_exist_and_every_source_folder() {
    let root = workspace();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md reads");
    let (found, missing) = named_paths(&root, &text);
    assert!(found.len() > 200, "only {} paths read in ARCHITECTURE.md", found.len());
    // A folder is on the map when it, or anything in it, is named.
    let shown: BTreeSet<PathBuf> = found.iter().flat_map(|p| p.ancestors().map(Path::to_path_buf)).collect();
    let unnamed: Vec<String> =
        source_folders(&root).into_iter().filter(|d| !shown.contains(d)).map(|d| format!("{}/", d.display())).collect();
    let listed = |list: &[String]| if list.is_empty() { "(none)".to_owned() } else { list.join("\n  ") };
    assert!(
        missing.is_empty() && unnamed.is_empty(),
        "ARCHITECTURE.md drifted from the code.\npaths it names that do not exist:\n  {}\nsource folders it does not name:\n  {}",
        listed(&missing),
        listed(&unnamed)
    );
}

#[test]
fn links_of_the_readme_and_the_docs_lead_to_files() {
    let root = workspace();
    let mut broken = Vec::new();
    for doc in user_docs(&root) {
        let text = std::fs::read_to_string(root.join(&doc)).expect("the doc reads");
        let dir = doc.parent().unwrap_or(Path::new(""));
        for (n, line) in text.lines().enumerate() {
            for target in line.split("](").skip(1).filter_map(|rest| rest.split(')').next()) {
                let path = target.split('#').next().unwrap_or("");
                if path.is_empty() || path.contains("://") || path.starts_with("mailto:") {
                    continue;
                }
                if !root.join(dir).join(path).exists() {
                    broken.push(format!("{}:{}: {target}", doc.display(), n + 1));
                }
            }
        }
    }
    assert!(broken.is_empty(), "links to nothing:\n{}", broken.join("\n"));
}

#[test]
fn the_path_reader_reads_a_code_map() {
    let root = workspace();
    let map = "- `shared/src/pickle/`: `heap.rs`, `machine.rs`, `snapshot/read.rs` and `server/src/http/`\n\
               - `frontend/src/core/`: `model/jobs.rs`, `no_such_file.rs`, `crate::x`, `/api/v1/mcp`\n";
    let (found, missing) = named_paths(&root, map);
    let found: Vec<String> = found.iter().map(|p| p.display().to_string()).collect();
    assert_eq!(
        found,
        [
            "frontend/src/core",
            "frontend/src/core/model/jobs.rs",
            "server/src/http",
            "shared/src/pickle",
            "shared/src/pickle/heap.rs",
            "shared/src/pickle/machine.rs",
            "shared/src/snapshot/read.rs"
        ]
    );
    assert_eq!(missing, ["`no_such_file.rs` (read in `frontend/src/core/`)"]);
}

/// `docs/mcp-conversation.out.txt` is what `docs/mcp-conversation.py`
/// prints with this build: the conversation the docs show is the one an
/// assistant would have.
#[test]
fn the_mcp_conversation_in_the_docs_is_what_vramscope_answers() {
    let root = workspace();
    let out = std::process::Command::new("python3")
        .current_dir(&root)
        .args(["docs/mcp-conversation.py", "--vramscope", env!("CARGO_BIN_EXE_vramscope")])
        .arg("tests/fixtures/corpus/oom_leak.pickle")
        .output()
        .expect("python3 runs docs/mcp-conversation.py");
    assert!(out.status.success(), "docs/mcp-conversation.py failed: {}", String::from_utf8_lossy(&out.stderr));
    let kept = std::fs::read_to_string(root.join("docs/mcp-conversation.out.txt")).expect("the transcript reads");
    assert!(
        String::from_utf8_lossy(&out.stdout) == kept,
        "docs/mcp-conversation.out.txt is not what vramscope answers now; write it anew with\n  python3 \
         docs/mcp-conversation.py --vramscope target/debug/vramscope tests/fixtures/corpus/oom_leak.pickle > \
         docs/mcp-conversation.out.txt"
    );
}

/// docs/python.md's table of batch-size finders is the one the GPU run's
/// results give (`tests/gpu/batch_finder_table.py --check`).
#[test]
fn the_batch_finders_table_in_the_python_docs_is_the_one_the_gpu_results_give() {
    assert_the_table_is_the_results("tests/gpu/batch_finder_table.py", "docs/python.md", "batch-finders-");
}

/// `script --check doc` passes on the GPU results files whose names start
/// with `prefix`: the table `doc` keeps is the one they give.
fn assert_the_table_is_the_results(script: &str, doc: &str, prefix: &str) {
    let root = workspace();
    let out = std::process::Command::new("python3")
        .current_dir(&root)
        .args([script, "--check", doc])
        .args(gpu_results(&root, prefix))
        .output()
        .unwrap_or_else(|e| panic!("python3 runs {script}: {e}"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The GPU results files under tests/gpu/results/ whose names start with
/// `prefix`, in name order, as paths from the workspace root.
fn gpu_results(root: &std::path::Path, prefix: &str) -> Vec<String> {
    let mut results: Vec<String> = std::fs::read_dir(root.join("tests/gpu/results"))
        .expect("tests/gpu/results lists")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with(prefix) && name.ends_with(".json"))
        .map(|name| format!("tests/gpu/results/{name}"))
        .collect();
    results.sort();
    assert!(!results.is_empty(), "no tests/gpu/results/{prefix}*.json");
    results
}

/// The README's compatibility table is the one the GPU matrix's results
/// give (`tests/gpu/compat_table.py --check`).
#[test]
fn the_readme_compatibility_table_is_the_one_the_gpu_results_give() {
    assert_the_table_is_the_results("tests/gpu/compat_table.py", "README.md", "compat-");
}
