//! The analysis panels under a snapshot's timeline: the OOM post-mortem
//! ([`oom`]), the what-if replay with other allocator settings and the
//! ranking of settings ([`whatif`]), the leak ranking ([`leaks`]), and the
//! comparison of two snapshots ([`compare`], also the `/compare/:a/:b` page).
//!
//! Every figure comes from `vramscope_shared::views::analysis`, asked of
//! the server (or of the local-file worker) through [`api`]. Each module
//! keeps its pure part (what to draw, what to say) natively testable; the
//! components exist on wasm32 only. Charts are drawn by [`crate::core::chart`].

// Natively only the pure parts are built, for their tests.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

#[cfg(target_arch = "wasm32")]
mod api;
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
    use plotters::prelude::IntoDrawingArea;
    use plotters_canvas::CanvasBackend;

    use super::compare::ComparePicker;
    use super::leaks::LeaksPanel;
    use super::oom::OomPanel;
    use super::whatif::WhatIfPanel;
    use crate::core::chart::{Area, Chart, draw};

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

    /// Draw `chart` on a canvas sized to `width` × `height`.
    pub(crate) fn paint(
        canvas: &web_sys::HtmlCanvasElement,
        width: u32,
        height: u32,
        chart: &Chart,
        x_label: &dyn Fn(f64) -> String,
    ) -> Result<Area, String> {
        canvas.set_width(width.max(200));
        canvas.set_height(height);
        let backend = CanvasBackend::with_canvas_object(canvas.clone())
            .ok_or_else(|| "this browser gives no 2D drawing context for the canvas".to_owned())?;
        draw(&backend.into_drawing_area(), chart, x_label)
    }

    /// The width available to a canvas inside `wrap`, at least 320 pixels.
    pub(crate) fn width_of(wrap: Option<web_sys::HtmlDivElement>) -> u32 {
        wrap.map_or(1000, |w| u32::try_from(w.client_width()).unwrap_or(0)).max(320)
    }
}

#[cfg(target_arch = "wasm32")]
pub(crate) use ui::{paint, width_of};

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
