//! `vramscope breakdown`'s table as text: one device's live memory by
//! category (parameters, gradients, optimizer state, activations, other),
//! with how each was told, and by the `record_function` range that
//! allocated it.

use std::io::Write;

use vramscope_shared::analysis::breakdown::{CATEGORIES, DeviceBreakdown};

use super::bytes;

/// One device's breakdown of `file`: each category with its share and how
/// it was told, `other` in detail, the total, the first `stages`
/// record_function ranges by bytes, and the notes.
pub(crate) fn write_device(
    out: &mut impl Write,
    file: &std::path::Path,
    b: &DeviceBreakdown,
    stages: usize,
) -> std::io::Result<()> {
    let at = b.at_row.map_or_else(|| "no trace: the final state".to_owned(), |r| format!("right after row {r}"));
    writeln!(out, "{}, device {} ({at})", file.display(), b.device)?;
    let total = b.categories.total();
    for c in CATEGORIES {
        let n = b.categories.get(c);
        let pct = if total > 0 { n as f64 * 100.0 / total as f64 } else { 0.0 };
        let how = b.confidence.get(c).source();
        let line = format!("  {:<16} {:>11} {:>5.1}%  {how}", c.label(), bytes(n), pct);
        writeln!(out, "{}", line.trim_end())?;
    }
    let o = &b.other_detail;
    writeln!(
        out,
        "    other: temporaries {}, cuBLAS workspaces {}, kept across steps {}, no stack {}",
        bytes(o.temporaries),
        bytes(o.workspaces),
        bytes(o.kept_across_steps),
        bytes(o.unknown)
    )?;
    writeln!(out, "  {:<16} {:>11}  (requested bytes alive)", "total", bytes(total))?;
    if b.stages.len() > 1 || b.stages.first().is_some_and(|s| s.name != "(no range)") {
        writeln!(out, "  by the record_function range that allocated it:")?;
        for s in b.stages.iter().take(stages) {
            writeln!(out, "    {:>11}  {}", bytes(s.bytes), s.name)?;
        }
        if b.stages.len() > stages {
            writeln!(out, "    … {} more ranges (--stages N)", b.stages.len() - stages)?;
        }
    }
    for note in &b.notes {
        writeln!(out, "  note: {note}")?;
    }
    writeln!(out, "  Categories are inferred from stacks and lifetimes; see `vramscope breakdown --help`.")?;
    writeln!(out)
}
