//! The length of every production function of vramscope's crates.
//!
//! Each crate is read from its root (`lib.rs`, `main.rs`) along its `mod`
//! declarations with `syn`, so that what `#[cfg(test)]` leaves out of a
//! build (test modules, whether inline or files of their own) is left out
//! here too, and so are `#[test]` functions. Every other function, free,
//! in an `impl` or with a body in a `trait`, counts from its signature's
//! first line to its closing brace (doc comments and attributes excluded);
//! a function nested in another counts again on its own.
//!
//! The test of this crate holds the workspace to [`MAX_LINES`] (issue 28:
//! a component mixing signals, effects, drawing and markup in one function
//! is read in one piece or not at all).

use std::path::{Path, PathBuf};

use syn::spanned::Spanned;
use syn::visit::Visit;

/// The longest a production function may be, in lines.
pub const MAX_LINES: usize = 120;

/// One function and its length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// The file it is written in.
    pub file: PathBuf,
    /// Its name (`Type::method` for one in an `impl` or `trait`).
    pub name: String,
    /// The line its signature starts on.
    pub line: usize,
    /// Lines from its signature to its closing brace.
    pub lines: usize,
}

/// Every production function of the crate whose root file is `root`
/// (`src/lib.rs`, `src/main.rs`, `build.rs`), following its `mod`
/// declarations; files under any of `skip` (and their modules) are not read.
pub fn functions(root: &Path, skip: &[PathBuf]) -> Result<Vec<Function>, String> {
    let mut out = Vec::new();
    let dir = root.parent().map(Path::to_path_buf).unwrap_or_default();
    read_module(root, &dir, skip, &mut out)?;
    Ok(out)
}

/// Reads the module in `file`, whose child modules' files are in `dir`.
fn read_module(file: &Path, dir: &Path, skip: &[PathBuf], out: &mut Vec<Function>) -> Result<(), String> {
    if skip.iter().any(|s| file.starts_with(s)) {
        return Ok(());
    }
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let parsed = syn::parse_file(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut visitor = Lengths { file, dir: dir.to_path_buf(), owner: None, skip, out, error: None };
    visitor.visit_file(&parsed);
    match visitor.error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Whether the attributes leave the item out of a production build.
fn test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        let path = a.path();
        if path.is_ident("test") {
            return true;
        }
        if !path.is_ident("cfg") {
            return false;
        }
        // `cfg(test)` alone; `cfg(any(test, …))` is built outside tests too.
        a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
    })
}

struct Lengths<'a> {
    file: &'a Path,
    /// Where the files of this module's children are.
    dir: PathBuf,
    /// The `impl`'s or `trait`'s type being read.
    owner: Option<String>,
    skip: &'a [PathBuf],
    out: &'a mut Vec<Function>,
    error: Option<String>,
}

impl Lengths<'_> {
    fn record(&mut self, name: &syn::Ident, sig: &syn::Signature, block: &syn::Block) {
        let start = sig.span().start().line;
        let end = block.span().end().line;
        let name = match &self.owner {
            Some(owner) => format!("{owner}::{name}"),
            None => name.to_string(),
        };
        self.out.push(Function { file: self.file.to_path_buf(), name, line: start, lines: end + 1 - start });
    }
}

impl<'ast> Visit<'ast> for Lengths<'_> {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if test_only(&f.attrs) {
            return;
        }
        self.record(&f.sig.ident, &f.sig, &f.block);
        syn::visit::visit_item_fn(self, f);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if test_only(&f.attrs) {
            return;
        }
        self.record(&f.sig.ident, &f.sig, &f.block);
        syn::visit::visit_impl_item_fn(self, f);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if test_only(&f.attrs) {
            return;
        }
        if let Some(block) = &f.default {
            self.record(&f.sig.ident, &f.sig, block);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if test_only(&i.attrs) {
            return;
        }
        let ty = &i.self_ty;
        let previous = self.owner.replace(quote_type(ty));
        syn::visit::visit_item_impl(self, i);
        self.owner = previous;
    }

    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        if test_only(&t.attrs) {
            return;
        }
        let previous = self.owner.replace(t.ident.to_string());
        syn::visit::visit_item_trait(self, t);
        self.owner = previous;
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if test_only(&m.attrs) || self.error.is_some() {
            return;
        }
        let name = m.ident.to_string();
        let child_dir = self.dir.join(&name);
        match &m.content {
            Some((_, items)) => {
                let previous = std::mem::replace(&mut self.dir, child_dir);
                for item in items {
                    self.visit_item(item);
                }
                self.dir = previous;
            }
            None => {
                let flat = self.dir.join(format!("{name}.rs"));
                let nested = child_dir.join("mod.rs");
                let file = if flat.exists() { flat } else { nested };
                if let Err(e) = read_module(&file, &child_dir, self.skip, self.out) {
                    self.error = Some(e);
                }
            }
        }
    }
}

/// The type an `impl` is for, as written (`Track`, `Vec<u8>`).
fn quote_type(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default(),
        _ => "_".to_owned(),
    }
}

/// The module-tree roots of the workspace below `workspace` (its crates'
/// `src/lib.rs`, `src/main.rs` and `build.rs`; tests, benches, examples and
/// fuzz targets are not production code).
pub fn workspace_roots(workspace: &Path) -> Vec<PathBuf> {
    let mut crates = ["shared", "plot", "server", "frontend"].map(|c| workspace.join(c)).to_vec();
    if let Ok(entries) = std::fs::read_dir(workspace.join("tools")) {
        let mut tools: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        tools.sort();
        crates.extend(tools);
    }
    let mut roots = Vec::new();
    for krate in crates {
        for root in ["src/lib.rs", "src/main.rs", "build.rs"] {
            let path = krate.join(root);
            if path.exists() {
                roots.push(path);
            }
        }
    }
    roots
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    #[test]
    fn no_production_function_is_longer_than_the_limit() {
        let workspace = workspace();
        let mut all = Vec::new();
        for root in workspace_roots(&workspace) {
            all.extend(functions(&root, &[]).expect("the sources parse"));
        }
        assert!(all.len() > 1000, "only {} functions read", all.len());
        let mut long: Vec<&Function> = all.iter().filter(|f| f.lines > MAX_LINES).collect();
        long.sort_by_key(|f| std::cmp::Reverse(f.lines));
        let listed: Vec<String> = long
            .iter()
            .map(|f| {
                let file = f.file.strip_prefix(&workspace).unwrap_or(&f.file);
                format!("{} lines: {} ({}:{})", f.lines, f.name, file.display(), f.line)
            })
            .collect();
        assert!(listed.is_empty(), "functions over {MAX_LINES} lines:\n{}", listed.join("\n"));
    }

    #[test]
    fn test_code_and_nested_functions_are_told_apart() {
        let dir = std::env::temp_dir().join(format!("vramscope-fnlen-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("a")).expect("a temporary folder");
        let lib = "mod a;\n#[cfg(test)]\nmod tests;\nfn one() {\n    fn inner() {\n    }\n}\n";
        std::fs::write(dir.join("lib.rs"), lib).expect("written");
        std::fs::write(dir.join("a.rs"), "struct S;\nimpl S {\n    fn m(&self) {}\n}\n#[test]\nfn t() {}\n")
            .expect("written");
        let found = functions(&dir.join("lib.rs"), &[]).expect("parsed");
        let names: Vec<(&str, usize)> = found.iter().map(|f| (f.name.as_str(), f.lines)).collect();
        assert_eq!(names, [("S::m", 1), ("one", 4), ("inner", 2)]);
        std::fs::remove_dir_all(&dir).ok();
    }
}
