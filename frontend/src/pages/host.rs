//! Pinned host memory (`host_segments`/`host_traces`, PyTorch 2.14 with
//! `record_host=True`): its figures and its own timeline of pinned against
//! requested bytes over the host trace. PyTorch's viewer does not show it.

use leptos::prelude::*;
use vramscope_shared::views::host::{HostAnswer, HostParams};
use vramscope_shared::views::view::Host;

use crate::components::card::Card;
use crate::core::format;
use crate::core::host_chart::{self, HEIGHT};
use crate::core::panel::MIN_WIDTH;
use crate::explorer::panel::PanelCanvas;
use crate::infra::api;
use crate::infra::canvas;
use crate::infra::first_view::after_first_view;

/// Points of the timeline asked for.
const POINTS: u32 = 800;

/// The pinned host memory of snapshot `id`.
#[component]
pub(crate) fn HostMemory(id: String) -> impl IntoView {
    let answer = RwSignal::new(None::<Result<HostAnswer, String>>);
    let panel = PanelCanvas::new();
    after_first_view(move || {
        leptos::task::spawn_local(async move {
            let p = HostParams { px: Some(POINTS) };
            let a = api::view::<Host>("loading the pinned host memory", &id, &p).await.map_err(|e| e.to_string());
            answer.try_set(Some(a));
        })
    });
    Effect::new(move |_| {
        let Some((canvas, width)) = panel.sized(MIN_WIDTH) else { return };
        answer.with(|a| {
            let Some(Ok(a)) = a else { return };
            canvas::paint(&canvas, width, HEIGHT, |p| host_chart::draw(p, a, width));
        });
    });
    view! {
        <section class="host-memory" id="host-memory">
            <h2>"Pinned host memory"</h2>
            {move || match answer.get() {
                None => view! { <p class="hint">"Loading…"</p> }.into_any(),
                Some(Err(e)) => view! { <p class="notice error">{e}</p> }.into_any(),
                Some(Ok(a)) => {
                    let s = a.stats;
                    let peak = |p: Option<u64>| p.map(|p| format!("peak {}", format::bytes(p))).unwrap_or_default();
                    let cards = [
                        ("pinned", format::bytes(s.reserved_bytes), peak(s.reserved_peak_bytes)),
                        ("allocated", format::bytes(s.allocated_bytes), String::new()),
                        ("requested", format::bytes(s.requested_bytes), peak(s.requested_peak_bytes)),
                        ("cached, not in use", format::bytes(s.reserved_unallocated_bytes), String::new()),
                        ("host events", format::grouped(s.trace_entries as u64), format::count(s.segments as u64, "segment", "segments")),
                    ];
                    view! {
                        <div class="summary" id="host-summary">
                            {cards
                                .into_iter()
                                .map(|(label, value, note)| view! { <Card label=label.to_owned() value=value note=note/> })
                                .collect_view()}
                        </div>
                    }
                        .into_any()
                }
            }}
            <span class="legend">
                <span class="key"><span class="swatch reserved"></span>"pinned (cudaHostAlloc)"</span>
                <span class="key"><span class="swatch allocated"></span>"requested"</span>
            </span>
            <div class="canvas-wrap" node_ref=panel.wrap>
                <canvas id="host-chart" node_ref=panel.canvas></canvas>
            </div>
            <p class="hint">
                "Over the host trace, by event. Read after PyTorch's source: not yet checked against a real capture."
            </p>
        </section>
    }
}
