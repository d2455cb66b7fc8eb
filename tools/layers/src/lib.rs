//! The import graph of a crate's modules, for layer tests.
//!
//! Every Rust file under a crate's `src/` is parsed with `syn`, and every
//! path it names through `crate::`, `super::` or `self::` (in `use` trees,
//! groups and renames included, and in expressions, types and patterns) is
//! resolved to the module path it reaches from the crate root, with the
//! file and line it is written on. `use crate as x;` makes `x::` another
//! spelling of `crate::`, and inline `mod` blocks move `super::` along.
//!
//! A text scan missed `use crate::{a, b}` groups, `super::super::…` and
//! aliases; this reads what the compiler reads.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// One module path named from another module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// The module the path is written in, from the crate root (`["http",
    /// "v1", "mcp"]`; empty for `main.rs` or `lib.rs`).
    pub from: Vec<String>,
    /// What it names, from the crate root (`["store", "Db"]`).
    pub to: Vec<String>,
    /// The file.
    pub file: PathBuf,
    /// The line.
    pub line: usize,
}

/// Every reference in the crate whose sources are under `src`.
pub fn references(src: &Path) -> Result<Vec<Reference>, String> {
    let mut files = Vec::new();
    rust_files(src, &mut files)?;
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let parsed = syn::parse_file(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        let module = module_of(src, &file);
        let mut visitor = Paths { module, aliases: HashSet::new(), file: &file, out: &mut out };
        visitor.visit_file(&parsed);
    }
    Ok(out)
}

/// The module a file is, from the crate root.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap_or(file);
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if !matches!(stem, "mod" | "lib" | "main") {
            parts.push(stem.to_owned());
        }
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    Ok(())
}

struct Paths<'a> {
    /// The module being read (inline `mod` blocks push onto it).
    module: Vec<String>,
    /// Names `use crate as x;` gave the crate root.
    aliases: HashSet<String>,
    file: &'a Path,
    out: &'a mut Vec<Reference>,
}

impl Paths<'_> {
    /// Resolve `segments` (as written) to a path from the crate root, if it
    /// starts at the crate root, `super` or `self`.
    fn resolve(&self, segments: &[String]) -> Option<Vec<String>> {
        let first = segments.first()?;
        let (mut base, rest) = if first == "crate" || self.aliases.contains(first) {
            (Vec::new(), &segments[1..])
        } else if first == "self" {
            (self.module.clone(), &segments[1..])
        } else if first == "super" {
            let ups = segments.iter().take_while(|s| *s == "super").count();
            let mut base = self.module.clone();
            for _ in 0..ups {
                base.pop()?;
            }
            (base, &segments[ups..])
        } else {
            return None;
        };
        base.extend(rest.iter().cloned());
        Some(base)
    }

    fn record(&mut self, segments: &[String], line: usize) {
        if let Some(to) = self.resolve(segments)
            && !to.is_empty()
        {
            self.out.push(Reference { from: self.module.clone(), to, file: self.file.to_owned(), line });
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut full = prefix.clone();
                if n.ident != "self" {
                    full.push(n.ident.to_string());
                }
                self.record(&full, n.ident.span().start().line);
            }
            syn::UseTree::Rename(r) => {
                let mut full = prefix.clone();
                full.push(r.ident.to_string());
                if full == ["crate"] {
                    self.aliases.insert(r.rename.to_string());
                } else {
                    self.record(&full, r.ident.span().start().line);
                }
            }
            syn::UseTree::Glob(g) => self.record(&prefix.clone(), g.star_token.spans[0].start().line),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Paths<'_> {
    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &item.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if let Some(first) = path.segments.first() {
            self.record(&segments, first.ident.span().start().line);
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if item.content.is_some() {
            self.module.push(item.ident.to_string());
            let aliases = self.aliases.clone();
            syn::visit::visit_item_mod(self, item);
            self.aliases = aliases;
            self.module.pop();
        }
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        // Paths inside macro calls (`format!`, `view!`, `assert!`) are
        // tokens, not syntax: read those that spell `crate::a::b`.
        let tokens: Vec<proc_macro2::TokenTree> = mac.tokens.clone().into_iter().collect();
        self.macro_tokens(&tokens);
        syn::visit::visit_macro(self, mac);
    }
}

impl Paths<'_> {
    fn macro_tokens(&mut self, tokens: &[proc_macro2::TokenTree]) {
        use proc_macro2::TokenTree;
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(g) => {
                    let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                    self.macro_tokens(&inner);
                    i += 1;
                }
                TokenTree::Ident(id) if id == "crate" || id == "super" || self.aliases.contains(&id.to_string()) => {
                    // ident (:: ident)*
                    let line = id.span().start().line;
                    let mut segments = vec![id.to_string()];
                    let mut j = i + 1;
                    while j + 2 < tokens.len() + 1 {
                        let colons = matches!((tokens.get(j), tokens.get(j + 1)),
                            (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b))) if a.as_char() == ':' && b.as_char() == ':');
                        match (colons, tokens.get(j + 2)) {
                            (true, Some(TokenTree::Ident(next))) => {
                                segments.push(next.to_string());
                                j += 3;
                            }
                            _ => break,
                        }
                    }
                    if segments.len() > 1 {
                        self.record(&segments, line);
                    }
                    i = j;
                }
                _ => i += 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(module: &[&str], text: &str) -> Vec<Vec<String>> {
        let parsed = syn::parse_file(text).expect("parses");
        let mut out = Vec::new();
        let file = PathBuf::from("x.rs");
        let mut v = Paths {
            module: module.iter().map(|s| (*s).to_owned()).collect(),
            aliases: HashSet::new(),
            file: &file,
            out: &mut out,
        };
        v.visit_file(&parsed);
        out.into_iter().map(|r| r.to).collect()
    }

    fn p(s: &str) -> Vec<String> {
        s.split("::").map(str::to_owned).collect()
    }

    #[test]
    fn groups_supers_aliases_and_macros_resolve_to_the_modules_they_name() {
        let text = r#"
            use crate::{store::Db, auth::{Role, Identity}};
            use super::super::cli;
            use crate as root;
            use self::inner::Thing;
            fn f() { root::http::serve(); let _ = crate::metrics::Metrics::new(); format!("{}", crate::now_ms()); }
            mod tests { use super::*; use super::super::sibling; }
        "#;
        let got = refs(&["http", "v1", "mcp"], text);
        for want in [
            "store::Db",
            "auth::Role",
            "auth::Identity",
            "http::cli",
            "http::serve",
            "metrics::Metrics::new",
            "now_ms",
            "http::v1::mcp::inner::Thing",
            "http::v1::mcp",
            "http::v1::sibling",
        ] {
            assert!(got.contains(&p(want)), "{want} not in {got:?}");
        }
        // A path that does not start at the crate is not a reference.
        assert!(refs(&["a"], "use std::fs; fn f() { serde_json::json!({}); }").is_empty());
    }

    #[test]
    fn a_file_is_the_module_its_path_names() {
        let src = Path::new("/s/src");
        assert_eq!(module_of(src, Path::new("/s/src/main.rs")), Vec::<String>::new());
        assert_eq!(module_of(src, Path::new("/s/src/http/mod.rs")), p("http"));
        assert_eq!(module_of(src, Path::new("/s/src/http/v1/mcp.rs")), p("http::v1::mcp"));
    }
}
