//! The import graph of a crate's modules, for layer tests.
//!
//! Every Rust file under a crate's `src/` is parsed with `syn`, and every
//! path it names through `crate::`, `super::` or `self::` (in `use` trees,
//! groups and renames included, and in expressions, types and patterns) is
//! resolved to the module path it reaches from the crate root, with the
//! file and line it is written on. `use crate as x;`, `extern crate self
//! as x;` and `use super::{self as x};` make `x::` another spelling of the
//! module they name, inline `mod` blocks move `super::` along, and a
//! path that starts with a child module the file declares (`mod x;` then
//! `x::f()`) is read from there. A `pub use` is a re-export, followed to
//! the module that declares the item ([`Graph::module_of_path`]), so
//! `crate::Snapshot` counts as an arrow to `snapshot`, not to the root.
//! Code under `#[cfg(test)]` is marked: it is no part of a crate's graph.
//!
//! What a reader of paths cannot follow is reported instead of missed: a
//! glob (`use super::*`, `pub use x::*`) names no item, so it hides which
//! module a file reaches, and [`Graph::globs`] lists every one outside test
//! code for the layer tests to refuse. An item declared in the crate root
//! (`lib.rs`, `main.rs`) is an arrow to the pseudo-module [`ROOT`]; a macro
//! the crate defines (`macro_rules!`, exported or not) is an arrow to the
//! module that defines it wherever it is invoked, by path or by name.
//!
//! A text scan missed `use crate::{a, b}` groups, `super::super::…` and
//! aliases; this reads what the compiler reads.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
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
    /// Written in test code: under `#[cfg(test)]`, or in a module declared
    /// so. Tests are no part of the crate's graph; a layer test may skip them.
    pub test: bool,
}

/// Every reference in the crate whose sources are under `src`.
pub fn references(src: &Path) -> Result<Vec<Reference>, String> {
    Ok(graph(src)?.references)
}

/// A crate's modules and the references between them.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    /// Every module, from the crate root: one per file, one per inline
    /// `mod` block (the root itself, `[]`, included).
    pub modules: BTreeSet<Vec<String>>,
    /// Every path that starts at the crate root, `super` or `self`.
    pub references: Vec<Reference>,
    /// Names a module re-exports (`pub use`, any `pub`): the name's path
    /// (`["ingest", "load"]`) and what it names (`["ingest",
    /// "background", "load"]`).
    pub reexports: BTreeMap<Vec<String>, Vec<String>>,
    /// Globs of the crate's own modules outside test code, as
    /// `file:line: use path::*`: each hides the items it brings in.
    pub globs: Vec<String>,
    /// Items the crate root declares itself (functions, types, constants,
    /// statics, traits; not modules): naming one is an arrow to [`ROOT`].
    pub root_items: BTreeSet<String>,
    /// Macros the crate defines (`macro_rules!`), by name, with the module
    /// that defines each.
    pub macros: BTreeMap<String, Vec<String>>,
}

/// The pseudo-module an arrow to an item of the crate root names.
pub const ROOT: &str = "(crate root)";

/// The modules and references of the crate whose sources are under `src`.
pub fn graph(src: &Path) -> Result<Graph, String> {
    let mut files = Vec::new();
    rust_files(src, &mut files)?;
    let mut sources = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        sources.push((module_of(src, &file), file, text));
    }
    graph_of(&sources)
}

/// The graph of sources given as (module, file, text).
fn graph_of(sources: &[(Vec<String>, PathBuf, String)]) -> Result<Graph, String> {
    let mut graph = Graph::default();
    let mut test_modules = BTreeSet::new();
    let mut macro_calls = Vec::new();
    let mut globs = Vec::new();
    let parsed = sources
        .iter()
        .map(|(_, file, text)| syn::parse_file(text).map_err(|e| format!("{}: {e}", file.display())))
        .collect::<Result<Vec<_>, String>>()?;
    // `extern crate self as x;` in the root names the crate `x` in every file.
    let mut crate_aliases = HashMap::new();
    for ((module, _, _), parsed) in sources.iter().zip(&parsed) {
        if module.is_empty() {
            graph.root_items.extend(root_items(&parsed.items));
            for item in &parsed.items {
                if let syn::Item::ExternCrate(e) = item
                    && e.ident == "self"
                    && let Some((_, rename)) = &e.rename
                {
                    crate_aliases.insert(rename.to_string(), Vec::new());
                }
            }
        }
    }
    for ((module, file, _), parsed) in sources.iter().zip(&parsed) {
        let mut visitor = Paths {
            module: module.clone(),
            aliases: crate_aliases.clone(),
            globs: &mut globs,
            macro_calls: &mut macro_calls,
            macros: &mut graph.macros,
            file,
            out: &mut graph.references,
            modules: &mut graph.modules,
            reexports: &mut graph.reexports,
            public_use: false,
            declared: HashSet::new(),
            test_modules: &mut test_modules,
            test_depth: 0,
        };
        visitor.modules.insert(visitor.module.clone());
        visitor.read(parsed);
    }
    // A macro call names the module that defines the macro: known only
    // once every file is read (a macro may be defined after its caller).
    for call in macro_calls {
        if let Some(defined) = graph.macros.get(&call.name) {
            let mut to = defined.clone();
            to.push(call.name.clone());
            graph.references.push(Reference { to, ..call.reference });
        }
    }
    // A file whose `mod` line is under `#[cfg(test)]` is test code whole.
    for r in &mut graph.references {
        r.test |= test_modules.iter().any(|m| r.from.starts_with(m));
    }
    graph.globs = globs
        .into_iter()
        .filter(|(module, _)| !test_modules.iter().any(|m| module.starts_with(m)))
        .map(|(_, at)| at)
        .collect();
    Ok(graph)
}

impl Graph {
    /// What a path names once re-exports are followed: `crate::Snapshot`
    /// (a `pub use` of `lib.rs`) is `snapshot::model::Snapshot`.
    pub fn canonical(&self, path: &[String]) -> Vec<String> {
        let mut path = path.to_vec();
        // A bound, not a loop: re-exports of re-exports are a few deep.
        for _ in 0..16 {
            let found = (1..=path.len()).rev().find_map(|n| self.reexports.get(&path[..n]).map(|to| (n, to)));
            match found {
                Some((n, to)) if to[..] != path[..n] => path = to.iter().chain(&path[n..]).cloned().collect(),
                _ => break,
            }
        }
        path
    }

    /// The module a reference's path lands in, re-exports followed: its
    /// longest prefix that is a module (`store::Db` is in `store`).
    pub fn module_of_path(&self, path: &[String]) -> Vec<String> {
        let path = self.canonical(path);
        (0..=path.len()).rev().map(|n| &path[..n]).find(|p| self.modules.contains(*p)).unwrap_or(&[]).to_vec()
    }

    /// Loops between sibling files or folders: for every folder (module),
    /// its children are nodes and a reference from anywhere inside one
    /// child to anywhere inside another is an arrow; each strongly
    /// connected set of two or more children is a loop, returned as its
    /// members (full module paths joined by `::`, sorted) with one
    /// reference of each arrow inside it. A child naming its own parent
    /// folder's items (`super::Thing` from a file to its `mod.rs`) is no
    /// arrow between siblings; test code is no part of the graph.
    pub fn loops(&self) -> Vec<Loop> {
        // Arrows between siblings, keyed by their common parent.
        let mut arrows: BTreeMap<Vec<String>, BTreeMap<(String, String), String>> = BTreeMap::new();
        for r in self.references.iter().filter(|r| !r.test) {
            let to = self.module_of_path(&r.to);
            let common = r.from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            let (Some(a), Some(b)) = (r.from.get(common), to.get(common)) else { continue };
            let at = format!("{}:{}", r.file.display(), r.line);
            arrows.entry(r.from[..common].to_vec()).or_default().entry((a.clone(), b.clone())).or_insert(at);
        }
        let mut out = Vec::new();
        for (parent, edges) in arrows {
            for component in strongly_connected(&edges) {
                let join = |child: &str| {
                    let mut p = parent.clone();
                    p.push(child.to_owned());
                    p.join("::")
                };
                let arrows = edges
                    .iter()
                    .filter(|((a, b), _)| component.contains(a) && component.contains(b))
                    .map(|((a, b), at)| format!("{} -> {} ({at})", join(a), join(b)))
                    .collect();
                out.push(Loop { members: component.iter().map(|c| join(c)).collect(), arrows });
            }
        }
        out
    }
}

/// One reference from a top-level module to another, outside test code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arrow {
    /// The top-level module it is written in.
    pub from: String,
    /// The top-level module it names (re-exports followed).
    pub to: String,
    /// `file:line`, the file from `src`.
    pub at: String,
}

impl Graph {
    /// Every reference between two top-level modules, outside test code
    /// (the crate root's own items and references are not arrows).
    pub fn arrows(&self, src: &Path) -> Vec<Arrow> {
        self.references
            .iter()
            .filter(|r| !r.test)
            .filter_map(|r| {
                let from = r.from.first()?;
                let to = match self.module_of_path(&r.to).first() {
                    Some(to) => to.clone(),
                    None if self.names_root_item(&r.to) => ROOT.to_owned(),
                    None => return None,
                };
                let at = format!("{}:{}", r.file.strip_prefix(src).unwrap_or(&r.file).display(), r.line);
                (*from != to).then(|| Arrow { from: from.clone(), to, at })
            })
            .collect()
    }

    /// Whether `path` (from the root, re-exports followed) lands on an item
    /// the crate root declares itself.
    fn names_root_item(&self, path: &[String]) -> bool {
        let path = self.canonical(path);
        !path.is_empty() && self.root_items.contains(&path[0]) && !self.macros.contains_key(&path[0])
    }

    /// The arrows against an order of layers (bottom first): each module
    /// may name only those before it; a module missing from `layers` is
    /// itself a fault. Sorted, one line each.
    pub fn against_order(&self, src: &Path, layers: &[&str]) -> Vec<String> {
        let level = |m: &str| layers.iter().position(|l| *l == m);
        let mut wrong: Vec<String> = self
            .arrows(src)
            .into_iter()
            .filter_map(|a| match (level(&a.from), level(&a.to)) {
                (Some(f), Some(t)) if t < f => None,
                (Some(_), Some(_)) => Some(format!("{}: {} names {}, a layer above it", a.at, a.from, a.to)),
                (None, _) => Some(format!("{}: module {} is not in the table of layers", a.at, a.from)),
                (_, None) => Some(format!("{}: module {} is not in the table of layers", a.at, a.to)),
            })
            .collect();
        wrong.sort();
        wrong.dedup();
        wrong
    }
}

/// Sibling modules that name each other, directly or through others.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loop {
    /// The modules in the loop.
    pub members: Vec<String>,
    /// Each arrow between them, with where one reference of it is written.
    pub arrows: Vec<String>,
}

impl std::fmt::Display for Loop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.members.join(", "), self.arrows.join("; "))
    }
}

/// The strongly connected sets of two or more nodes, from each node's
/// reach (a folder has a few dozen children at most).
fn strongly_connected(edges: &BTreeMap<(String, String), String>) -> Vec<BTreeSet<String>> {
    let nodes: BTreeSet<&String> = edges.keys().flat_map(|(a, b)| [a, b]).collect();
    let reaches = |from: &String| {
        let mut seen: BTreeSet<&String> = BTreeSet::new();
        let mut todo = vec![from];
        while let Some(n) = todo.pop() {
            for (a, b) in edges.keys() {
                if a == n && seen.insert(b) {
                    todo.push(b);
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&String, BTreeSet<&String>> = nodes.iter().map(|n| (*n, reaches(n))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for n in &nodes {
        if out.iter().any(|c| c.contains(*n)) {
            continue;
        }
        let component: BTreeSet<String> =
            nodes.iter().filter(|m| reach[*n].contains(*m) && reach[*m].contains(*n)).map(|m| (*m).clone()).collect();
        if component.len() > 1 {
            out.push(component);
        }
    }
    out
}

/// A call of a macro by a name the crate may define.
struct MacroCall {
    name: String,
    /// Where it is written (`to` filled once the macro is found).
    reference: Reference,
}

/// The names of the items a crate root declares itself, modules and
/// `use`s aside, test code aside.
fn root_items(items: &[syn::Item]) -> Vec<String> {
    items
        .iter()
        .filter(|item| !is_test(attrs_of(item)))
        .filter_map(|item| match item {
            syn::Item::Const(i) => Some(i.ident.to_string()),
            syn::Item::Enum(i) => Some(i.ident.to_string()),
            syn::Item::Fn(i) => Some(i.sig.ident.to_string()),
            syn::Item::Static(i) => Some(i.ident.to_string()),
            syn::Item::Struct(i) => Some(i.ident.to_string()),
            syn::Item::Trait(i) => Some(i.ident.to_string()),
            syn::Item::Type(i) => Some(i.ident.to_string()),
            syn::Item::Union(i) => Some(i.ident.to_string()),
            _ => None,
        })
        .collect()
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
    /// Names that stand for a module of the crate: `use crate as x;` and
    /// `extern crate self as x;` (the root, `[]`), `use super::{self as
    /// x};`, `use crate::a as x;`.
    aliases: HashMap<String, Vec<String>>,
    /// Globs of the crate's own modules, with the module each is written
    /// in (see [`Graph::globs`]).
    globs: &'a mut Vec<(Vec<String>, String)>,
    /// Macro invocations by a bare name or a crate path, resolved once
    /// every file is read.
    macro_calls: &'a mut Vec<MacroCall>,
    /// Macros defined (see [`Graph::macros`]).
    macros: &'a mut BTreeMap<String, Vec<String>>,
    file: &'a Path,
    out: &'a mut Vec<Reference>,
    /// Every module seen (inline `mod` blocks added as they are read).
    modules: &'a mut BTreeSet<Vec<String>>,
    /// Modules the file declares (`mod x;`, inline ones too), from the root.
    declared: HashSet<Vec<String>>,
    /// Names re-exported by `pub use` (see [`Graph::reexports`]).
    reexports: &'a mut BTreeMap<Vec<String>, Vec<String>>,
    /// Whether the `use` being read is `pub` (any visibility but private).
    public_use: bool,
    /// Modules declared under `#[cfg(test)]` (their files are test code).
    test_modules: &'a mut BTreeSet<Vec<String>>,
    /// How many `#[cfg(test)]` items the visitor is inside.
    test_depth: usize,
}

/// Whether attributes put an item under `#[cfg(test)]` (or `all(test, …)`).
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.meta.require_list().is_ok_and(|l| {
                let tokens = l.tokens.to_string();
                tokens == "test" || tokens.starts_with("all (test") || tokens.starts_with("all(test")
            })
    })
}

/// An item's attributes.
fn attrs_of(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

impl Paths<'_> {
    /// Resolve `segments` (as written) to a path from the crate root, if it
    /// starts at the crate root, `super` or `self`.
    fn resolve(&self, segments: &[String]) -> Option<Vec<String>> {
        let first = segments.first()?;
        let (mut base, rest) = if first == "crate" {
            (Vec::new(), &segments[1..])
        } else if let Some(module) = self.aliases.get(first) {
            (module.clone(), &segments[1..])
        } else if first == "self" {
            (self.module.clone(), &segments[1..])
        } else if first == "super" {
            let ups = segments.iter().take_while(|s| *s == "super").count();
            let mut base = self.module.clone();
            for _ in 0..ups {
                base.pop()?;
            }
            (base, &segments[ups..])
        } else if self.declared.contains(&[self.module.as_slice(), &segments[..1]].concat()) {
            // `mod x;` here, then `x::…`: a path into a child module.
            (self.module.clone(), segments)
        } else {
            return None;
        };
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// Read a file: its `mod` declarations first (a path may name a child
    /// module declared below it), then every path.
    fn read(&mut self, file: &syn::File) {
        fn declared(module: &[String], items: &[syn::Item], out: &mut HashSet<Vec<String>>) {
            for item in items {
                if let syn::Item::Mod(m) = item {
                    let path = [module, &[m.ident.to_string()]].concat();
                    if let Some((_, inner)) = &m.content {
                        declared(&path, inner, out);
                    }
                    out.insert(path);
                }
            }
        }
        declared(&self.module.clone(), &file.items, &mut self.declared);
        self.visit_file(file);
    }

    fn record(&mut self, segments: &[String], line: usize) {
        if let Some(to) = self.resolve(segments)
            && !to.is_empty()
        {
            let test = self.test_depth > 0;
            self.out.push(Reference { from: self.module.clone(), to, file: self.file.to_owned(), line, test });
        }
    }

    /// Under a `pub use`, `name` in this module stands for `path`.
    fn reexport(&mut self, path: &[String], name: Option<String>) {
        if !self.public_use {
            return;
        }
        if let (Some(to), Some(name)) = (self.resolve(path), name) {
            let mut from = self.module.clone();
            from.push(name);
            self.reexports.insert(from, to);
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
                self.reexport(&full, full.last().cloned());
                self.record(&full, n.ident.span().start().line);
            }
            syn::UseTree::Rename(r) => {
                let mut full = prefix.clone();
                if r.ident != "self" {
                    full.push(r.ident.to_string());
                }
                let line = r.ident.span().start().line;
                if full == ["crate"] {
                    self.aliases.insert(r.rename.to_string(), Vec::new());
                } else {
                    // `use super::{self as x}` or `use crate::a as x`: `x::`
                    // spells that path from here on (an item's alias too:
                    // what it resolves to is an arrow either way).
                    if let Some(to) = self.resolve(&full) {
                        self.aliases.insert(r.rename.to_string(), to);
                    }
                    self.reexport(&full, Some(r.rename.to_string()));
                    self.record(&full, line);
                }
            }
            syn::UseTree::Glob(g) => {
                let line = g.star_token.spans[0].start().line;
                if self.test_depth == 0 && self.resolve(prefix).is_some() {
                    let at = format!("{}:{line}: use {}::*", self.file.display(), prefix.join("::"));
                    self.globs.push((self.module.clone(), at));
                }
                self.record(&prefix.clone(), line);
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Paths<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let test = is_test(attrs_of(item));
        self.test_depth += usize::from(test);
        syn::visit::visit_item(self, item);
        self.test_depth -= usize::from(test);
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.public_use = !matches!(item.vis, syn::Visibility::Inherited);
        self.use_tree(&mut Vec::new(), &item.tree);
        self.public_use = false;
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if let Some(first) = path.segments.first() {
            self.record(&segments, first.ident.span().start().line);
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        let mut path = self.module.clone();
        path.push(item.ident.to_string());
        if item.content.is_none() && is_test(&item.attrs) {
            self.test_modules.insert(path);
        } else if item.content.is_some() {
            self.module.push(item.ident.to_string());
            self.modules.insert(self.module.clone());
            let aliases = self.aliases.clone();
            syn::visit::visit_item_mod(self, item);
            self.aliases = aliases;
            self.module.pop();
        }
    }

    fn visit_item_macro(&mut self, item: &'ast syn::ItemMacro) {
        if item.mac.path.is_ident("macro_rules")
            && let Some(name) = &item.ident
        {
            self.macros.insert(name.to_string(), self.module.clone());
        } else {
            syn::visit::visit_item_macro(self, item);
        }
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        // A call of one of the crate's own macros names the module that
        // defines it: `m!()` (textual scope) or `crate::m!()` (exported).
        let segments: Vec<String> = mac.path.segments.iter().map(|s| s.ident.to_string()).collect();
        let rooted = segments.len() == 2
            && (segments[0] == "crate" || self.aliases.get(&segments[0]).is_some_and(Vec::is_empty));
        if let (Some(name), true) = (segments.last(), segments.len() == 1 || rooted) {
            let line = mac.path.segments[0].ident.span().start().line;
            let reference = Reference {
                from: self.module.clone(),
                to: Vec::new(),
                file: self.file.to_owned(),
                line,
                test: self.test_depth > 0,
            };
            self.macro_calls.push(MacroCall { name: name.clone(), reference });
        }
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
                TokenTree::Ident(id)
                    if id == "crate" || id == "super" || self.aliases.contains_key(&id.to_string()) =>
                {
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

    /// The graph of one file, the module `module`.
    fn read(module: &[&str], text: &str) -> Graph {
        let module = module.iter().map(|s| (*s).to_owned()).collect();
        graph_of(&[(module, PathBuf::from("x.rs"), text.to_owned())]).expect("parses")
    }

    fn refs(module: &[&str], text: &str) -> Vec<Vec<String>> {
        read(module, text).references.into_iter().map(|r| r.to).collect()
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
    fn test_code_is_marked() {
        let text = r#"
            use crate::a::X;
            #[cfg(test)]
            mod tests { use crate::b::Y; }
            #[cfg(test)]
            fn helper() { crate::c::z(); }
        "#;
        let out = read(&[], text).references;
        let tests: Vec<(String, bool)> = out.iter().map(|r| (r.to.join("::"), r.test)).collect();
        assert_eq!(tests, [("a::X".into(), false), ("b::Y".into(), true), ("c::z".into(), true)]);
    }

    fn reference(from: &str, to: &str) -> Reference {
        Reference { from: p(from), to: p(to), file: PathBuf::from("x.rs"), line: 1, test: false }
    }

    #[test]
    fn loops_between_siblings_are_found_at_every_level() {
        let modules = ["", "a", "b", "c", "a::x", "a::y", "a::z"];
        let mut graph = Graph {
            modules: modules.iter().map(|m| if m.is_empty() { Vec::new() } else { p(m) }).collect(),
            references: vec![
                reference("a::x", "a::y::Thing"),
                reference("a::y", "a::z::f"),
                reference("a::z", "a::x::g"),
                reference("a::x", "a::helper"),
                reference("b", "c::C"),
            ],
            ..Graph::default()
        };
        let loops = graph.loops();
        assert_eq!(loops.len(), 1, "{loops:?}");
        assert_eq!(loops[0].members, ["a::x", "a::y", "a::z"]);
        // A file naming a sibling folder's file is an arrow between the folders.
        graph.references.push(reference("c", "a::x::Deep"));
        graph.references.push(reference("a::z", "b::B"));
        let loops = graph.loops();
        let members: Vec<Vec<String>> = loops.iter().map(|l| l.members.clone()).collect();
        assert_eq!(members, [vec!["a", "b", "c"], vec!["a::x", "a::y", "a::z"]]);
        // Test code is no arrow.
        let mut only_tests = graph.clone();
        only_tests.references.iter_mut().for_each(|r| r.test = true);
        assert!(only_tests.loops().is_empty());
    }

    #[test]
    fn re_exports_are_followed_to_the_module_that_declares_the_item() {
        let text = r#"
            mod model { pub struct Snapshot; }
            pub use model::Snapshot;
            pub(crate) use self::model::Snapshot as Snap;
            use model::Snapshot as Private;
        "#;
        let mut graph = read(&[], text);
        graph.modules.insert(Vec::new());
        assert_eq!(graph.module_of_path(&p("Snapshot")), p("model"));
        assert_eq!(graph.module_of_path(&p("Snap::new")), p("model"));
        assert_eq!(graph.module_of_path(&p("Private")), Vec::<String>::new(), "a private use is no re-export");
    }

    #[test]
    fn an_order_of_layers_lets_arrows_point_down_only() {
        let graph = Graph {
            modules: [vec![], p("a"), p("b"), p("c")].into_iter().collect(),
            references: vec![reference("b", "a::X"), reference("a", "b::Y"), reference("c", "b::Z")],
            ..Graph::default()
        };
        let wrong = graph.against_order(Path::new(""), &["a", "b"]);
        assert_eq!(wrong, ["x.rs:1: a names b, a layer above it", "x.rs:1: module c is not in the table of layers"]);
    }

    #[test]
    fn a_file_is_the_module_its_path_names() {
        let src = Path::new("/s/src");
        assert_eq!(module_of(src, Path::new("/s/src/main.rs")), Vec::<String>::new());
        assert_eq!(module_of(src, Path::new("/s/src/http/mod.rs")), p("http"));
        assert_eq!(module_of(src, Path::new("/s/src/http/v1/mcp.rs")), p("http::v1::mcp"));
    }
}
