//! The set-up and build scripts as a new user meets them: every long
//! phase says what starts and about how long it takes before it starts,
//! and shows its progress (issue 44: a first build took 46 minutes on a
//! loaded two-core machine, eleven of them printing nothing while
//! `cargo install --quiet` compiled wasm-bindgen-cli).

use std::path::Path;

/// The lines of `scripts/<name>`.
fn script(name: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("scripts").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.lines().map(str::to_owned).collect()
}

/// Whether a line announces a phase with a duration: `echo "== …"` or
/// `phase "…"` naming minutes or seconds.
fn announces(line: &str) -> bool {
    let line = line.trim();
    (line.starts_with("echo \"== ") || line.starts_with("phase \""))
        && ["minute", "second", "seconds", "a few minutes"].iter().any(|w| line.contains(w))
}

/// Issue 44: the long phases of `scripts/setup` and
/// `scripts/build-frontend` ran silently (`--quiet`, `-qq`, `--silent`,
/// `pip -q`). Each now runs with its progress shown, after a line saying
/// what starts and about how long it takes; wasm-bindgen-cli is compiled
/// with its one binary the build uses and without the TLS stack it does
/// not need.
#[test]
fn regression_build_scripts_show_progress_in_each_long_phase() {
    for name in ["setup", "build-frontend"] {
        let lines = script(name);
        let code: Vec<(usize, &String)> =
            lines.iter().enumerate().filter(|(_, l)| !l.trim_start().starts_with('#')).collect();
        for (k, line) in &code {
            for silent in ["--quiet", " -qq", "--silent", "pip install -q"] {
                assert!(!line.contains(silent), "scripts/{name}:{}: {silent} hides a long phase: {line}", k + 1);
            }
            let long = [
                "cargo install ",
                "rustup target add",
                "apt-get install",
                "npm install ",
                "pip install ",
                "cargo build ",
                "\"$WASM_OPT\" -Oz",
            ];
            let said = ["echo ", "phase "].iter().any(|s| line.trim_start().starts_with(s));
            if !said && long.iter().any(|c| line.contains(c)) {
                let before = &lines[k.saturating_sub(12)..*k];
                assert!(
                    before.iter().any(|l| announces(l)),
                    "scripts/{name}:{}: no line before it says what starts and how long it takes: {line}",
                    k + 1
                );
            }
        }
    }
    let build = script("build-frontend").join("\n");
    assert!(build.contains("--no-default-features --bin wasm-bindgen"), "wasm-bindgen-cli compiled whole");
}
