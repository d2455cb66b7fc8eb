//! The analysis panels under a snapshot's timeline: the OOM post-mortem
//! ([`oom`]), the what-if replay with other allocator settings and the
//! ranking of settings ([`whatif`]), the leak ranking ([`leaks`]), and the
//! comparison of two snapshots ([`compare`], also the `/compare/:a/:b` page).
//!
//! Every figure comes from `vramscope_shared::views::analysis`, asked of
//! the server (or of the local-file worker) through [`crate::infra::api`]. Each module
//! keeps its pure part (what to draw, what to say) natively testable; the
//! components exist on wasm32 only. Charts are drawn by [`crate::core::chart`].

// Natively only the pure parts are built, for their tests.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

pub(crate) mod compare;
pub(crate) mod leaks;
pub(crate) mod oom;
pub(crate) mod whatif;

#[cfg(target_arch = "wasm32")]
pub(crate) use compare::ComparePage;
#[cfg(target_arch = "wasm32")]
pub(crate) use ui::AnalysisPanels;

use crate::core::format;

/// `now` against `before` in percent, signed (`-12.3%`); `-` without a base.
pub(crate) fn change(now: u64, before: u64) -> String {
    if before == 0 {
        return "-".to_owned();
    }
    format!("{:+.1}%", (now as f64 - before as f64) * 100.0 / before as f64)
}

/// Signed bytes for people: `+1.5 MiB`, `-20 KiB`, `0 B`.
pub(crate) fn signed_bytes(delta: i64) -> String {
    match delta {
        0 => "0 B".to_owned(),
        d if d > 0 => format!("+{}", format::bytes(d.unsigned_abs())),
        d => format!("-{}", format::bytes(d.unsigned_abs())),
    }
}

#[cfg(target_arch = "wasm32")]
mod ui {
    use leptos::prelude::*;

    use super::compare::ComparePicker;
    use super::leaks::LeaksPanel;
    use super::oom::OomPanel;
    use super::whatif::WhatIfPanel;

    /// The analysis panels of one device of a snapshot.
    #[component]
    pub(crate) fn AnalysisPanels(id: String, device: u32) -> impl IntoView {
        view! {
            <section class="analysis" id="analysis">
                <OomPanel id=id.clone() device=device/>
                <WhatIfPanel id=id.clone() device=device/>
                <LeaksPanel id=id.clone() device=device/>
                <ComparePicker id=id/>
            </section>
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_and_signed_bytes() {
        assert_eq!(change(90, 100), "-10.0%");
        assert_eq!(change(1, 0), "-");
        assert_eq!(signed_bytes(2048), "+2.00 KiB");
        assert_eq!(signed_bytes(-1), "-1 B");
    }
}
