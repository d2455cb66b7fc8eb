//! Memory pools: one band per (pool, stream) over the whole trace, so that
//! CUDA graphs' private pools, what they reserve and what of it is used
//! show beside the default pool; and their figures at the cursor. A click
//! on a band moves the cursor.

use leptos::prelude::*;
use vramscope_shared::views::pools::PoolsParams;
use vramscope_shared::views::view::Pools;
use web_sys::MouseEvent;

use crate::core::format;
use crate::core::model::{BandPoint, Instant, PoolsAnswer};
use crate::core::palette;
use crate::core::panel::MIN_WIDTH;
use crate::explorer::context::DeviceContext;
use crate::explorer::panel::PanelCanvas;
use crate::infra::api;
use crate::infra::canvas;

/// Picks one figure of a band's point.
type Pick = fn(&BandPoint) -> u64;

/// Height of one band.
const BAND: f64 = 46.0;
/// Space above each band for its label.
const LABEL: f64 = 14.0;
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
            let height = s.bands.len() as f64 * (BAND + LABEL) + 4.0 + canvas::ROW_AXIS_HEIGHT;
            if let Some(c) = canvas::context(&canvas, width, height) {
                draw_bands(&c, s, width, cursor);
            }
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

/// One band per (pool, stream), reserved behind allocated, each scaled to
/// its own reserved peak.
/// The bands' left edge and width on a canvas `width` wide (their byte
/// labels are left of it).
fn plot_x(width: f64) -> (f64, f64) {
    (canvas::BYTE_AXIS_WIDTH, (width - canvas::BYTE_AXIS_WIDTH - 10.0).max(1.0))
}

fn draw_bands(c: &web_sys::CanvasRenderingContext2d, a: &PoolsAnswer, width: f64, cursor: Option<u32>) {
    let last = f64::from(a.rows.saturating_sub(1).max(1));
    let (left, width) = plot_x(width);
    for (k, band) in a.bands.iter().enumerate() {
        let top = k as f64 * (BAND + LABEL);
        let base = top + LABEL + BAND;
        canvas::text(
            c,
            palette::LABEL.css(),
            &format!(
                "{} · stream {} · peak {}",
                format::pool(band.pool),
                format::hex(band.stream),
                format::bytes(band.reserved_peak)
            ),
            left,
            top + 11.0,
        );
        canvas::fill(c, palette::MINIMAP_BACKGROUND.css(), left, top + LABEL, width, BAND);
        // Each band on its own scale, 0 to its peak: the labels say so.
        c.set_text_align("right");
        canvas::text(c, palette::LABEL.css(), &format::bytes(band.reserved_peak), left - 4.0, top + LABEL + 10.0);
        canvas::text(c, palette::LABEL.css(), "0", left - 4.0, base);
        c.set_text_align("start");
        canvas::vline(c, palette::AXIS.css(), left - 1.0, top + LABEL, base, 1.0);
        let scale = band.reserved_peak.max(1) as f64;
        let y = |b: u64| base - b as f64 / scale * (BAND - 2.0);
        let picks: [(Pick, palette::Colour); 2] =
            [(|p| p.reserved, palette::RESERVED), (|p| p.allocated, palette::ALLOCATED)];
        for (value, colour) in picks {
            if band.series.is_empty() {
                continue;
            }
            c.begin_path();
            c.move_to(left, base);
            let mut x_prev = left;
            for p in &band.series {
                let x = left + f64::from(p.row) / last * width;
                c.line_to(x_prev, y(value(p)));
                c.line_to(x, y(value(p)));
                x_prev = x;
            }
            c.line_to(x_prev, base);
            c.close_path();
            c.set_fill_style_str(colour.css());
            c.fill();
        }
    }
    let h = a.bands.len() as f64 * (BAND + LABEL) + 2.0;
    let rows = crate::core::viewport::Window::new(0, i64::from(a.rows.saturating_sub(1).max(1)));
    let axis = canvas::XAxis {
        axis: vramscope_shared::timeline::Axis::Event,
        view: rows,
        origin: 0,
        left,
        width,
        y: h,
        title: "row",
    };
    canvas::x_axis(c, &axis);
    if let Some(r) = cursor {
        canvas::vline(c, palette::CURSOR.css(), left + f64::from(r) / last * width, 0.0, h, 1.0);
    }
}
