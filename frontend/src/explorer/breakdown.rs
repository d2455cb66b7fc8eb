//! Where the memory went: live memory at the cursor split into parameters,
//! gradients, optimizer state, activations and other (how sure each figure
//! is, and what "other" holds), the same memory by the `record_function`
//! range that allocated it, and the categories stacked over the whole
//! trace. The figures follow the cursor; a click on the chart moves it.

use leptos::prelude::*;
use vramscope_shared::views::findings::BreakdownParams;
use vramscope_shared::views::view::Breakdown;
use web_sys::MouseEvent;

use crate::core::breakdown_chart::{self, HEIGHT, plot_x};
use crate::core::format;
use crate::core::model::{BreakdownSeries, CATEGORIES, DeviceBreakdown, Instant};
use crate::core::palette;
use crate::core::panel::MIN_WIDTH;
use crate::explorer::context::DeviceContext;
use crate::explorer::panel::PanelCanvas;
use crate::infra::api;
use crate::infra::canvas;
use crate::infra::draws;

/// Rows the stacked chart samples over the trace.
const SERIES_PX: u32 = 600;
/// Stages listed.
const STAGES: usize = 8;

/// The breakdown panel of the device of `ctx`.
#[component]
pub(crate) fn BreakdownPanel(ctx: DeviceContext) -> impl IntoView {
    let panel = PanelCanvas::new();
    let series = RwSignal::new(None::<BreakdownSeries>);
    let at = RwSignal::new(None::<DeviceBreakdown>);
    let error = RwSignal::new(None::<String>);

    // The series once per device; the figures whenever the cursor moves.
    super::fetch::series_and_cursor(
        ctx,
        SERIES_PX,
        |id, device, row, px| async move {
            let p = BreakdownParams { device: Some(device), at: row, px };
            api::view::<Breakdown>("loading the memory breakdown", &id, &p).await
        },
        move |mut a| {
            if let Some(d) = a.devices.pop() {
                series.set(d.series);
                if at.get_untracked().is_none() {
                    at.set(Some(d.breakdown));
                }
            }
        },
        move |mut a| {
            if let Some(d) = a.devices.pop() {
                at.set(Some(d.breakdown));
            }
        },
        error,
    );

    Effect::new(move |_| {
        let Some((canvas, width)) = panel.sized(MIN_WIDTH) else { return };
        let cursor = at.with(|b| b.as_ref().and_then(|b| b.at_row));
        series.with(|s| {
            let Some(s) = s else { return };
            let started = draws::now();
            canvas::paint(&canvas, width, HEIGHT, |p| breakdown_chart::draw_stack(p, s, width, cursor));
            draws::record("breakdown", started);
        });
    });

    let on_click = move |ev: MouseEvent| {
        let Some(width) = panel.width_untracked() else { return };
        let (left, plot_w) = plot_x(width);
        let row = series.with_untracked(|s| {
            let s = s.as_ref()?;
            let last = *s.rows.last()?;
            Some((((f64::from(ev.offset_x()) - left) / plot_w).clamp(0.0, 1.0) * f64::from(last)).round() as u32)
        });
        if let Some(r) = row {
            ctx.instant.set(Some(Instant::Row(r)));
        }
    };

    view! {
        <section class="breakdown-panel" id="breakdown-panel">
            <div class="toolbar">
                <h2>"Where the memory went"</h2>
                <span class="legend">
                    {CATEGORIES
                        .iter()
                        .enumerate()
                        .map(|(i, c)| {
                            let style = format!("background:{}", palette::CATEGORIES[i].css());
                            view! { <span class="key"><span class="swatch" style=style></span>{c.label()}</span> }
                        })
                        .collect_view()}
                </span>
            </div>
            {move || error.get().map(|e| view! { <p class="notice error">{e}</p> })}
            {move || at.get().map(|b| figures(&b))}
            <div class="canvas-wrap" node_ref=panel.wrap>
                <canvas id="breakdown-chart" node_ref=panel.canvas on:click=on_click></canvas>
            </div>
            <p class="hint">
                "Live requested bytes (y) over the whole trace, by row (x). Categories are inferred from each allocation's stack (module set-up, the optimizer, autograd's backward thread, forward) and from its lifetime; click to move the cursor."
            </p>
        </section>
    }
}

/// The figures at the cursor: a stacked bar, a table, the stages.
fn figures(b: &DeviceBreakdown) -> impl IntoView + use<> {
    let total = b.categories.total().max(1);
    let at = b.at_row.map_or_else(|| "the final state".to_owned(), |r| format!("right after row {r}"));
    let bar = CATEGORIES
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let pct = b.categories.get(c) as f64 * 100.0 / total as f64;
            let style = format!("width:{pct:.3}%;background:{}", palette::CATEGORIES[i].css());
            view! { <span class="segment" style=style title=c.label()></span> }
        })
        .collect_view();
    let rows = CATEGORIES
        .iter()
        .map(|&c| {
            let n = b.categories.get(c);
            let how = b.confidence.get(c).source();
            view! {
                <tr data-category=c.key()>
                    <td>{c.label()}</td>
                    <td class="num">{format::bytes(n)}</td>
                    <td class="num">{format!("{:.1}%", n as f64 * 100.0 / total as f64)}</td>
                    <td class="hint">{how}</td>
                </tr>
            }
        })
        .collect_view();
    let o = b.other_detail;
    let other = format!(
        "Other: temporaries {}, cuBLAS workspaces {}, kept across steps {}, no stack {}.",
        format::bytes(o.temporaries),
        format::bytes(o.workspaces),
        format::bytes(o.kept_across_steps),
        format::bytes(o.unknown)
    );
    let stages = b
        .stages
        .iter()
        .take(STAGES)
        .map(|s| view! { <tr><td class="num">{format::bytes(s.bytes)}</td><td><code>{s.name.clone()}</code></td></tr> })
        .collect_view();
    let notes = b.notes.iter().map(|n| view! { <p class="hint">{n.clone()}</p> }).collect_view();
    view! {
        <p class="hint" id="breakdown-at">{format!("Live memory {at}: {} requested.", format::bytes(b.categories.total()))}</p>
        <div class="breakdown-bar" id="breakdown-bar">{bar}</div>
        <div class="breakdown-tables">
            <table class="breakdown-figures" id="breakdown-figures"><tbody>{rows}</tbody></table>
            <table class="breakdown-stages" id="breakdown-stages">
                <thead><tr><th colspan="2">"By the record_function range that allocated it"</th></tr></thead>
                <tbody>{stages}</tbody>
            </table>
        </div>
        <p class="hint" id="breakdown-other">{other}</p>
        {notes}
    }
}
