//! Figures of a crate's import graph, to compare a tree before and after a
//! restructuring: `cargo run -p vramscope-layers --example metrics -- SRC
//! [MODULE…]` prints the modules (files and inline blocks), the distinct
//! arrows between modules outside test code, the globs, and each named
//! module's fan-in (how many other modules name it, children of its own
//! folder included).

use std::collections::BTreeSet;
use std::path::PathBuf;

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let src = PathBuf::from(args.next().ok_or("usage: metrics SRC [MODULE…]")?);
    let hubs: Vec<String> = args.collect();
    let graph = vramscope_layers::graph(&src)?;
    // (from, to) between different modules; `parent` marks a child naming
    // its own folder's module, no arrow between siblings but a hub's load.
    let mut named = BTreeSet::new();
    for r in graph.references.iter().filter(|r| !r.test) {
        let to = graph.module_of_path(&r.to);
        if to != r.from {
            named.insert((r.from.join("::"), to.join("::"), r.from.starts_with(&to)));
        }
    }
    let arrows: BTreeSet<_> = named.iter().filter(|(_, _, parent)| !parent).collect();
    println!(
        "{}: {} modules, {} arrows between modules, {} globs",
        src.display(),
        graph.modules.len(),
        arrows.len(),
        graph.globs.len()
    );
    for hub in hubs {
        let fan_in = named.iter().filter(|(_, to, _)| *to == hub).count();
        println!("  fan-in of {hub}: {fan_in}");
    }
    Ok(())
}
