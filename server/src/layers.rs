//! The server's layers, as a test: which top-level module may name which.
//! ARCHITECTURE.md states the rule; this keeps it.
//!
//! `main → cli → {http, agent} → http's parts → store → shared`: nothing
//! names `cli`, nothing below `http` names `http`, and the capture agent
//! uses nothing of the server but the leaf `clock` (its protocol is
//! `vramscope_shared::api`). Test code (`#[cfg(test)]`) is no part of the
//! graph; within a folder, no two files name each other.

/// Each module and the modules it may name through `crate::` (the leaves
/// in `LEAVES`, such as `clock`, are open to all).
const ALLOWED: &[(&str, &[&str])] = &[
    ("cli", &["agent", "auth", "http", "mcp", "report", "retention", "settings", "store"]),
    ("http", &["assets", "auth", "ingest", "mcp", "metrics", "report", "settings", "store"]),
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
    ("clock", &[]),
    ("prefault", &[]),
];

/// Leaf modules any module may use: they name nothing of the server.
const LEAVES: &[&str] = &["clock", "prefault"];

/// Every reference from one top-level module to another, outside test
/// code: (from, to, where).
fn arrows() -> Vec<(String, String, String)> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = vramscope_layers::graph(&src).expect("the sources parse");
    let arrows = graph.arrows(&src);
    assert!(arrows.len() > 100, "only {} references between modules read", arrows.len());
    arrows.into_iter().map(|a| (a.from, a.to, a.at)).collect()
}

/// Within every folder, no two files or sub-folders name each other.
#[test]
fn no_files_or_folders_loop() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = vramscope_layers::graph(&src).expect("the sources parse");
    let loops: Vec<String> = graph.loops().iter().map(ToString::to_string).collect();
    assert!(loops.is_empty(), "files or folders that import each other:\n{}", loops.join("\n"));
    let globs = &graph.globs;
    assert!(globs.is_empty(), "globs hide what a file names; name the items:\n{}", globs.join("\n"));
}

#[test]
fn imports_point_down_the_layers() {
    let mut wrong = Vec::new();
    for (from, to, at) in arrows() {
        if from == "layers" || LEAVES.contains(&to.as_str()) {
            continue;
        }
        match ALLOWED.iter().find(|(m, _)| *m == from) {
            None => wrong.push(format!("{at}: module {from} is not in the table of layers")),
            Some((_, allowed)) if !allowed.contains(&to.as_str()) => {
                wrong.push(format!("{at}: {from} names crate::{to}"))
            }
            Some(_) => {}
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(wrong.is_empty(), "imports against the layers (see ARCHITECTURE.md):\n{}", wrong.join("\n"));
}

/// The table allows only arrows the code has: an arrow nobody uses would
/// let the next import through unseen.
#[test]
fn every_allowed_arrow_is_used() {
    let used: std::collections::HashSet<(String, String)> = arrows().into_iter().map(|(f, t, _)| (f, t)).collect();
    let unused: Vec<String> = ALLOWED
        .iter()
        .flat_map(|(from, to)| to.iter().map(move |t| (*from, *t)))
        .filter(|(f, t)| !used.contains(&((*f).to_owned(), (*t).to_owned())))
        .map(|(f, t)| format!("{f} -> {t}"))
        .collect();
    assert!(unused.is_empty(), "arrows in the table the code does not use: {unused:?}");
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

/// No fixture carries the paths of the machine that recorded it (issue
/// 45: two captures held the GPU machine's checkout, virtualenv and
/// scratch folders; they now read `/srv/jobs/…` and `/srv/venv/…`, as the
/// corpus's own files do). Plain and gzip pickles are read; a path is a
/// home, scratch, checkout or `/opt` folder written into the file.
#[test]
fn regression_fixtures_carry_no_recording_machines_paths() {
    use std::io::Read;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let listed = std::process::Command::new("git")
        .args(["ls-files", "tests/fixtures"])
        .current_dir(&root)
        .output()
        .expect("git ls-files");
    let files = String::from_utf8_lossy(&listed.stdout).into_owned();
    let machine = ["/home/", "/root/", "/tmp/", "/work/", "/opt/", "/Users/", "/mnt/"];
    let mut found = Vec::new();
    for file in files.lines().filter(|f| f.ends_with(".pickle") || f.ends_with(".pickle.gz")) {
        let Ok(raw) = std::fs::read(root.join(file)) else { continue };
        let mut bytes = Vec::new();
        if raw.starts_with(&[0x1f, 0x8b]) {
            if flate2::read::GzDecoder::new(&raw[..]).read_to_end(&mut bytes).is_err() {
                continue;
            }
        } else {
            bytes = raw;
        }
        for prefix in machine {
            if bytes.windows(prefix.len()).any(|w| w == prefix.as_bytes()) {
                found.push(format!("{file}: {prefix}"));
            }
        }
    }
    assert!(found.is_empty(), "fixtures with a machine's paths: {found:?}");
}
