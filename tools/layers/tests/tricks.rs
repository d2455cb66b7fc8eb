//! The graph of `tests/tricks/`, a crate that reaches other modules in
//! every way a reader of paths could miss: each is found, or reported.

use std::path::Path;

use vramscope_layers::{ROOT, graph};

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tricks/src")
}

/// The top-level arrows from `low`, with the file each is written in.
fn arrows_from_low() -> Vec<(String, String)> {
    let graph = graph(&src()).expect("the tricks parse");
    let mut arrows: Vec<(String, String)> = graph
        .arrows(&src())
        .into_iter()
        .filter(|a| a.from == "low")
        .map(|a| (a.to, a.at.split(':').next().unwrap_or("").to_owned()))
        .collect();
    arrows.sort();
    arrows.dedup();
    arrows
}

#[test]
fn extern_crate_self_and_a_self_alias_are_spellings_of_the_modules_they_name() {
    let arrows = arrows_from_low();
    for file in ["low/by_extern_self.rs", "low/by_self_alias.rs"] {
        assert!(arrows.contains(&("high".to_owned(), file.to_owned())), "{file}: {arrows:?}");
    }
}

#[test]
fn an_item_of_the_crate_root_is_an_arrow_to_the_root() {
    let arrows = arrows_from_low();
    assert!(arrows.contains(&(ROOT.to_owned(), "low/by_root_item.rs".to_owned())), "{arrows:?}");
    let wrong = graph(&src()).expect("parses").against_order(&src(), &["macros", "high", "low", "views"]);
    assert!(wrong.iter().any(|w| w.contains("low/by_root_item.rs") && w.contains(ROOT)), "{wrong:?}");
}

#[test]
fn a_macro_of_the_crate_is_an_arrow_to_the_module_that_defines_it() {
    let graph = graph(&src()).expect("parses");
    let lines: Vec<String> = graph
        .arrows(&src())
        .into_iter()
        .filter(|a| a.at.starts_with("low/by_macro.rs"))
        .map(|a| format!("{} -> {} at {}", a.from, a.to, a.at))
        .collect();
    assert_eq!(lines, ["low -> macros at low/by_macro.rs:2", "low -> macros at low/by_macro.rs:3"]);
}

#[test]
fn globs_outside_test_code_are_reported_for_they_hide_what_a_file_names() {
    let globs = graph(&src()).expect("parses").globs;
    let globs: Vec<String> =
        globs.iter().map(|g| g.strip_prefix(&format!("{}/", src().display())).unwrap_or(g).to_owned()).collect();
    assert_eq!(globs, ["views/b.rs:1: use super::*", "views/mod.rs:7: use a::*", "views/mod.rs:8: use b::*"]);
}
