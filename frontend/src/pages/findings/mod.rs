//! The analysis panels under a snapshot's timeline: the OOM post-mortem
//! ([`oom`]), the what-if replay with other allocator settings and the
//! ranking of settings ([`whatif`]), the leak ranking ([`leaks`]), and the
//! picker of a snapshot to compare with ([`super::compare`], also the
//! `/compare/:a/:b` page).
//!
//! Every figure comes from `vramscope_shared::views::findings`, asked of
//! the server (or of the local-file worker) through `infra::api`. Each module
//! keeps its pure part (what to draw, what to say) natively testable; the
//! components exist on wasm32 only. Charts are drawn by [`crate::core::chart`].

// Natively only the pure parts are built, for their tests.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

pub(crate) mod leaks;
pub(crate) mod oom;
pub(crate) mod whatif;

#[cfg(target_arch = "wasm32")]
pub(crate) use ui::AnalysisPanels;

/// `now` against `before` in percent, signed (`-12.3%`); `-` without a base.
pub(crate) fn change(now: u64, before: u64) -> String {
    if before == 0 {
        return "-".to_owned();
    }
    format!("{:+.1}%", (now as f64 - before as f64) * 100.0 / before as f64)
}

#[cfg(target_arch = "wasm32")]
mod ui {
    use leptos::prelude::*;

    use super::leaks::LeaksPanel;
    use super::oom::OomPanel;
    use super::whatif::WhatIfPanel;
    use crate::pages::compare::ComparePicker;

    /// The analysis panels of one device of a snapshot.
    #[component]
    pub(crate) fn AnalysisPanels(id: String, device: u32) -> impl IntoView {
        view! {
            <section class="analysis" id="analysis">
                // First: a control of fixed height. The panels below fill
                // in as their answers come, after the page's first
                // timeline, and would move it under the user's pointer.
                // Nothing to compare with in an offline report.
                {(!crate::infra::local::in_report()).then(|| view! { <ComparePicker id=id.clone()/> })}
                <OomPanel id=id.clone() device=device/>
                <WhatIfPanel id=id.clone() device=device/>
                <LeaksPanel id=id device=device/>
            </section>
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_signed_percentages() {
        assert_eq!(change(90, 100), "-10.0%");
        assert_eq!(change(1, 0), "-");
    }
}
