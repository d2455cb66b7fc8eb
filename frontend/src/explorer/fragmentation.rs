//! The fragmentation panel: over the visible window, reserved against
//! allocated bytes, free bytes stuck in split segments (inactive split)
//! and rounding waste; the instant where the most bytes were stuck; and the
//! allocator settings the snapshot recorded (`PYTORCH_CUDA_ALLOC_CONF`).

use leptos::prelude::*;

use crate::core::fragmentation::{self, HEIGHT, Settings};
use crate::core::model::{FragmentationAnswer, Instant, SettingsView};
use crate::core::panel::Aligned;
use crate::core::viewport;
use crate::explorer::context::DeviceContext;
use crate::explorer::fetch::Settled;
use crate::explorer::panel::PanelCanvas;
use crate::infra::api;
use crate::infra::canvas::{self, Canvas2d};

/// The fragmentation panel of the device of `ctx`.
#[component]
pub(crate) fn FragmentationPanel(ctx: DeviceContext) -> impl IntoView {
    let Settled { data, error, .. } = super::fetch::fetch_settled(
        ctx,
        |width| Some(viewport::columns(width, 4.0, 400)),
        |id, query, columns| async move { api::fragmentation(&id, query, columns).await },
    );
    let panel = Panel { ctx, canvas: PanelCanvas::new(), data };
    super::panel::keep_drawn(ctx, panel.canvas, data, move |kept| panel.paint(kept));

    view! {
        <section class="fragmentation-panel" id="fragmentation-panel">
            <div class="toolbar">
                <h2>"Fragmentation over the window"</h2>
                <span class="legend">
                    <span class="key"><span class="swatch reserved"></span>"reserved"</span>
                    <span class="key"><span class="swatch allocated"></span>"allocated (rounded)"</span>
                    <span class="key"><span class="swatch seg-pending"></span>"inactive split (free bytes in split segments)"</span>
                    <span class="key"><span class="swatch seg-waste"></span>"rounding waste"</span>
                </span>
            </div>
            {move || error.get().map(|e| view! { <p class="notice error">{e}</p> })}
            <div class="canvas-wrap" node_ref=panel.canvas.wrap>
                <canvas id="fragmentation" node_ref=panel.canvas.canvas></canvas>
            </div>
            <p class="hint" id="fragmentation-worst">
                {move || {
                    data.with(|d| d.as_ref().and_then(fragmentation::worst))
                        .map(|(text, row)| {
                            view! {
                                {text}
                                <button on:click=move |_| {
                                    if let Some(r) = row {
                                        ctx.instant.set(Some(Instant::Row(r)));
                                    }
                                }>"Show that instant"</button>
                            }
                        })
                }}
            </p>
            {move || data.with(|d| d.as_ref().map(|d| settings_view(&d.settings)))}
        </section>
    }
}

/// The panel's state: its canvas and the figures shown.
#[derive(Clone, Copy)]
struct Panel {
    ctx: DeviceContext,
    canvas: PanelCanvas,
    data: RwSignal<Option<FragmentationAnswer>>,
}

impl Panel {
    /// Paint the canvas: the kept image (drawn anew when stale), the
    /// cursor and the scale.
    fn paint(&self, kept: &canvas::Kept) {
        let ctx = self.ctx;
        self.data.with_untracked(|d| {
            let Some(d) = d else { return };
            let top = fragmentation::top(d);
            let draw = |p: &mut Canvas2d<'_>, at: &Aligned| {
                fragmentation::draw_curves(p, d, at.view, at.plot(), top);
            };
            self.canvas.paint_kept(ctx, kept, (HEIGHT, "fragmentation"), draw, |p, at, _| {
                fragmentation::draw_overlay(p, at, ctx.cursor_x(), top);
            });
        });
    }
}

/// The allocator settings, as recorded.
fn settings_view(s: &SettingsView) -> impl IntoView + use<> {
    let Some(said) = Settings::of(s) else {
        return view! {
            <p class="hint" id="alloc-settings">
                "This snapshot does not record its allocator settings (PyTorch before 2.1): PyTorch's defaults are assumed."
            </p>
        }
        .into_any();
    };
    let raw = s.raw.clone();
    view! {
        <div class="settings">
            <h3>"Allocator settings"</h3>
            <dl id="alloc-settings">
                <dt>"PYTORCH_CUDA_ALLOC_CONF"</dt>
                <dd><code>{said.conf}</code></dd>
                <dt>"expandable_segments"</dt>
                <dd>{said.expandable}</dd>
                <dt>"max_split_size"</dt>
                <dd>{said.split}</dd>
                <dt>"garbage_collection_threshold"</dt>
                <dd>{said.gc}</dd>
            </dl>
            <details>
                <summary>{format!("All {} recorded keys", raw.len())}</summary>
                <dl class="raw-settings">
                    {raw.into_iter().map(|(k, v)| view! { <dt>{k}</dt><dd><code>{v}</code></dd> }).collect_view()}
                </dl>
            </details>
        </div>
    }
    .into_any()
}
