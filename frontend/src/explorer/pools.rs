//! Memory pools: one band per (pool, stream) over the whole trace, so that
//! CUDA graphs' private pools, what they reserve and what of it is used
//! show beside the default pool; and their figures at the cursor. A click
//! on a band moves the cursor.

use leptos::prelude::*;
use vramscope_shared::views::pools::PoolsParams;
use vramscope_shared::views::view::Pools;
use web_sys::MouseEvent;

use crate::core::format;
use crate::core::model::{Instant, PoolsAnswer};
use crate::core::panel::MIN_WIDTH;
use crate::core::pools_chart::{self, plot_x};
use crate::explorer::context::DeviceContext;
use crate::explorer::panel::PanelCanvas;
use crate::infra::api;
use crate::infra::canvas;

/// Points of each band's series.
const SERIES_PX: u32 = 500;
/// What the table's figures count, beside the snapshot's cards: the trace
/// records requested sizes, so the pools' "allocated" is requested bytes
/// and what is left of reserved includes rounding waste, where the cards'
/// "cached, not in use" is reserved less whole (rounded) blocks.
pub(crate) const COUNTS: &str = "Allocated here is requested bytes, as the trace records them: \
    \u{201c}reserved, not requested\u{201d} includes the rounding waste of each block, \
    so it is more than the cards' \u{201c}cached, not in use\u{201d} (reserved less whole blocks).";

/// The pools panel of the device of `ctx`.
#[component]
pub(crate) fn PoolsPanel(ctx: DeviceContext) -> impl IntoView {
    let panel = PanelCanvas::new();
    let series = RwSignal::new(None::<PoolsAnswer>);
    let at = RwSignal::new(None::<PoolsAnswer>);
    let error = RwSignal::new(None::<String>);

    super::fetch::series_and_cursor(
        ctx,
        SERIES_PX,
        |id, device, row, px| async move {
            let p = PoolsParams { device: Some(device), at: row, px, ..Default::default() };
            api::view::<Pools>("loading the memory pools", &id, &p).await
        },
        move |a: PoolsAnswer| {
            if at.get_untracked().is_none() {
                at.set(Some(a.clone()));
            }
            series.set(Some(a));
        },
        move |a| at.set(Some(a)),
        error,
    );

    Effect::new(move |_| {
        let Some((canvas, width)) = panel.sized(MIN_WIDTH) else { return };
        let cursor = at.with(|a| a.as_ref().and_then(|a| a.row));
        series.with(|s| {
            let Some(s) = s else { return };
            canvas::paint(&canvas, width, pools_chart::height(s), |p| pools_chart::draw_bands(p, s, width, cursor));
        });
    });

    let on_click = move |ev: MouseEvent| {
        let Some(width) = panel.width_untracked() else { return };
        let rows = series.with_untracked(|s| s.as_ref().map(|s| s.rows)).unwrap_or(0);
        let (left, plot_w) = plot_x(width);
        if rows > 0 {
            let r = (((f64::from(ev.offset_x()) - left) / plot_w).clamp(0.0, 1.0) * f64::from(rows - 1)).round() as u32;
            ctx.instant.set(Some(Instant::Row(r)));
        }
    };

    view! {
        <section class="pools-panel" id="pools-panel">
            <div class="toolbar">
                <h2>"Memory pools"</h2>
                <span class="legend">
                    <span class="key"><span class="swatch reserved"></span>"reserved"</span>
                    <span class="key"><span class="swatch allocated"></span>"allocated (requested)"</span>
                </span>
            </div>
            {move || error.get().map(|e| view! { <p class="notice error">{e}</p> })}
            {move || at.get().map(|a| table(&a))}
            <div class="canvas-wrap" node_ref=panel.wrap>
                <canvas id="pools-chart" node_ref=panel.canvas on:click=on_click></canvas>
            </div>
            <p class="hint">
                "One band per pool and stream: bytes (y, each band from 0 to its own peak, labelled left) over the trace's rows (x): a CUDA graph's private pool keeps what it reserved for its replays, and the grey above the blue is reserved memory it does not use. Click to move the cursor."
            </p>
        </section>
    }
}

/// The bands' figures at the cursor.
fn table(a: &PoolsAnswer) -> impl IntoView + use<> {
    let at = a.row.map_or_else(|| "before the first row".to_owned(), |r| format!("right after row {r}"));
    let rows = a
        .bands
        .iter()
        .map(|b| {
            view! {
                <tr class:private=b.private>
                    <td>{format::pool(b.pool)}</td>
                    <td><code>{format::hex(b.stream)}</code></td>
                    <td class="num">{format::bytes(b.reserved)}</td>
                    <td class="num">{format::bytes(b.allocated)}</td>
                    <td class="num">{format::bytes(b.fragmentation)}</td>
                    <td class="num">{format::bytes(b.reserved_peak)}</td>
                </tr>
            }
        })
        .collect_view();
    let inferred = (a.inferred_segments > 0).then(|| {
        format!(
            "{} segments freed before the snapshot had their pool inferred from the allocations beside them.",
            a.inferred_segments
        )
    });
    view! {
        <p class="hint" id="pools-at">{format!("{} {}, {at}.", a.bands.len(), if a.bands.len() == 1 { "pool and stream" } else { "pools and streams" })}</p>
        <table class="pools-table" id="pools-table">
            <thead>
                <tr>
                    <th>"pool"</th>
                    <th>"stream"</th>
                    <th class="num">"reserved"</th>
                    <th class="num" title="Bytes the program asked for, before the allocator rounded each block up">"allocated (requested)"</th>
                    <th class="num" title="Reserved less requested: cached memory and rounding waste">"reserved, not requested"</th>
                    <th class="num">"reserved peak"</th>
                </tr>
            </thead>
            <tbody>{rows}</tbody>
        </table>
        <p class="hint" id="pools-counts">{COUNTS}</p>
        {inferred.map(|t| view! { <p class="hint">{t}</p> })}
    }
}
