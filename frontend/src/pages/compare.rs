//! Comparing two snapshots (`/compare/:a/:b`): live memory by stack that
//! grew, shrank, appeared or vanished from A to B, the devices' figures side
//! by side, and the two timelines side by side on one y scale, aligned by
//! event order or by step. For two ranks of one job, or before and after a
//! change. The snapshot page offers the second snapshot from the library.

use vramscope_shared::analysis::diff::Change;
use vramscope_shared::views::analysis::{AlignedTimeline, AlignedTimelines};

use crate::core::chart::{Chart, Column, Curve, Marker, y_top};
use crate::core::palette;

/// The path of the comparison page.
pub(crate) fn compare_path(a: &str, b: &str) -> String {
    format!("/compare/{a}/{b}")
}

/// A change in a word.
pub(crate) fn change_label(c: Change) -> &'static str {
    match c {
        Change::Grew => "grew",
        Change::Shrank => "shrank",
        Change::Appeared => "appeared",
        Change::Vanished => "vanished",
    }
}

/// One side's chart, on the x range and y scale both sides share; step
/// boundaries marked when aligned by step.
pub(crate) fn side_chart(t: &AlignedTimelines, side: &AlignedTimeline) -> Chart {
    let curve = |pick: fn(&vramscope_shared::views::analysis::AlignedBucket) -> vramscope_shared::timeline::Range3,
                 colour,
                 band| Curve {
        columns: side.buckets.iter().map(|b| Column { x0: b.x0, x1: b.x1, range: pick(b) }).collect(),
        colour,
        band,
        width: 2,
    };
    let markers = match t.align {
        vramscope_shared::views::analysis::Align::Step if side.steps.len() <= 40 => (1..side.steps.len())
            .map(|k| Marker { x: k as f64, colour: palette::WINDOW_START.rgb(), label: String::new() })
            .collect(),
        _ => Vec::new(),
    };
    Chart {
        x_range: (0.0, t.x_end),
        y_max: y_top(t.y_max),
        curves: vec![
            curve(|b| b.reserved, palette::RESERVED.rgb(), true),
            curve(|b| b.allocated, palette::ALLOCATED.rgb(), false),
        ],
        markers,
    }
}

#[cfg(target_arch = "wasm32")]
pub(crate) use ui::{ComparePage, ComparePicker};

#[cfg(target_arch = "wasm32")]
mod ui {
    use leptos::prelude::*;
    use leptos::task::spawn_local;
    use leptos_router::hooks::use_params_map;
    use vramscope_shared::views::analysis::{Align, DiffAnswer};

    use super::{change_label, compare_path, side_chart};
    use crate::components::stack::StackDetails;
    use crate::core::format;
    use crate::core::model::SnapshotMeta;
    use crate::infra::canvas::{chart_width, paint_chart};
    use crate::infra::{api, local};

    /// Pick another snapshot from the library to compare this one with.
    #[component]
    pub(crate) fn ComparePicker(id: String) -> impl IntoView {
        // (id, label): the files opened in this tab without uploading, then
        // the library. A local file compares with either, in this tab.
        let locals: Vec<(String, String)> = local::opened_files()
            .into_iter()
            .filter(|(other, _)| *other != id)
            .map(|(other, name)| (other, format!("{name} (local file, not uploaded)")))
            .collect();
        let others = RwSignal::new(locals.clone());
        let chosen = RwSignal::new(locals.first().map(|(o, _)| o.clone()).unwrap_or_default());
        let this = id.clone();
        spawn_local(async move {
            if let Ok(page) = api::list(&api::ListQuery::default(), None).await {
                let listed = page.items.into_iter().filter(|m| m.id != this).map(|m: SnapshotMeta| {
                    let label = match (&m.job, m.rank) {
                        (Some(j), Some(r)) => format!("{} ({j}, rank {r})", m.name),
                        _ => m.name.clone(),
                    };
                    (m.id, label)
                });
                let list: Vec<(String, String)> = locals.into_iter().chain(listed).collect();
                chosen.try_set(list.first().map(|(o, _)| o.clone()).unwrap_or_default());
                others.try_set(list);
            }
        });
        let id = StoredValue::new(id);
        view! {
            <div class="panel compare-picker" id="compare-picker">
                <h2>"Compare with another snapshot"</h2>
                {move || {
                    if others.with(Vec::is_empty) {
                        view! { <p class="hint">"No other snapshot in the library yet."</p> }.into_any()
                    } else {
                        view! {
                            <div class="toolbar">
                                <select id="compare-with" on:change=move |ev| chosen.set(event_target_value(&ev))>
                                    {others
                                        .get()
                                        .into_iter()
                                        .map(|(other, label)| view! { <option value=other>{label}</option> })
                                        .collect_view()}
                                </select>
                                <a
                                    id="compare-link"
                                    class="button"
                                    href=move || compare_path(&id.get_value(), &chosen.get())
                                >
                                    "Compare"
                                </a>
                            </div>
                        }
                            .into_any()
                    }
                }}
            </div>
        }
    }

    /// `/compare/:a/:b`.
    #[component]
    pub(crate) fn ComparePage() -> impl IntoView {
        let params = use_params_map();
        let ids = Memo::new(move |_| {
            let p = params.read();
            (p.get("a").unwrap_or_default(), p.get("b").unwrap_or_default())
        });
        move || {
            let (a, b) = ids.get();
            view! { <CompareView a=a b=b/> }
        }
    }

    #[component]
    fn CompareView(a: String, b: String) -> impl IntoView {
        let align = RwSignal::new(Align::Event);
        let answer = RwSignal::new(None::<Result<DiffAnswer, String>>);
        let names = RwSignal::new((a.clone(), b.clone()));
        let wrap_ref = NodeRef::<leptos::html::Div>::new();
        let canvas_a = NodeRef::<leptos::html::Canvas>::new();
        let canvas_b = NodeRef::<leptos::html::Canvas>::new();
        let error = RwSignal::new(None::<String>);
        let ids = StoredValue::new((a.clone(), b.clone()));
        {
            let (a, b) = (a.clone(), b.clone());
            spawn_local(async move {
                let na = api::snapshot(&a).await.map(|m| m.name).unwrap_or(a);
                let nb = api::snapshot(&b).await.map(|m| m.name).unwrap_or(b);
                names.try_set((na, nb));
            });
        }
        let fetch = move || {
            let (a, b) = ids.get_value();
            let mode = match align.get_untracked() {
                Align::Event => "event",
                Align::Step => "step",
            };
            // Each timeline takes half the width.
            let px = (chart_width(wrap_ref.get_untracked()) / 2).saturating_sub(96).max(100);
            spawn_local(async move {
                let result = api::compare(&a, &b, mode, px).await.map_err(|e| e.to_string());
                answer.try_set(Some(result));
            });
        };
        Effect::new(move |started: Option<bool>| {
            if started == Some(true) || wrap_ref.get().is_none() {
                return started.unwrap_or(false);
            }
            fetch();
            true
        });
        Effect::new(move |_| {
            let (Some(ca), Some(cb)) = (canvas_a.get(), canvas_b.get()) else { return };
            answer.with(|ans| {
                let Some(Ok(d)) = ans else { return };
                let Some(t) = &d.timelines else { return };
                let width = (chart_width(wrap_ref.get_untracked()) / 2).saturating_sub(8).max(200);
                let step = t.align == Align::Step;
                let label = move |x: f64| {
                    if step { format!("step {}", x.round() as i64) } else { format::compact(x.round() as i64) }
                };
                for (canvas, side) in [(&ca, &t.a), (&cb, &t.b)] {
                    if let Err(e) = paint_chart(canvas, width, 260, &side_chart(t, side), &label) {
                        error.set(Some(e));
                    }
                }
            });
        });
        let (a2, b2) = (a.clone(), b.clone());
        view! {
            <section class="compare" id="compare">
                <p class="crumbs">
                    <a href="/">"Library"</a>
                    " / compare"
                </p>
                <h1>
                    "A: "
                    <a href=format!("/snapshots/{a2}")>{move || names.get().0}</a>
                    "  vs  B: "
                    <a href=format!("/snapshots/{b2}")>{move || names.get().1}</a>
                </h1>
                <div class="toolbar">
                    "Align the timelines by "
                    <span class="group">
                        <button
                            id="align-event"
                            class:active=move || align.get() == Align::Event
                            on:click=move |_| {
                                align.set(Align::Event);
                                fetch();
                            }
                        >
                            "event order"
                        </button>
                        <button
                            id="align-step"
                            class:active=move || align.get() == Align::Step
                            on:click=move |_| {
                                align.set(Align::Step);
                                fetch();
                            }
                        >
                            "step"
                        </button>
                    </span>
                    <span class="hint">"Both drawn on one y scale."</span>
                </div>
                {move || error.get().map(|e| view! { <p class="notice error">{e}</p> })}
                <div class="compare-timelines" node_ref=wrap_ref>
                    <div>
                        <h3>"A"</h3>
                        <div class="canvas-wrap"><canvas id="compare-a" node_ref=canvas_a></canvas></div>
                    </div>
                    <div>
                        <h3>"B"</h3>
                        <div class="canvas-wrap"><canvas id="compare-b" node_ref=canvas_b></canvas></div>
                    </div>
                </div>
                <div class="legend" id="compare-legend">
                    <span class="key" title="Bytes reserved from CUDA (segments)">
                        <span class="swatch reserved"></span>
                        "reserved"
                    </span>
                    <span class="key" title="Requested bytes of allocated blocks">
                        <span class="swatch allocated"></span>
                        "allocated"
                    </span>
                    {move || (align.get() == Align::Step).then(|| view! {
                        <span class="key" title="Where a step begins (a step is found by the optimizer's step call)">
                            <span class="swatch window-start"></span>
                            "step boundary"
                        </span>
                    })}
                    <span class="axis-caption">
                        {move || match align.get() {
                            Align::Event => "y: bytes, one scale for A and B; x: each trace's events in order, on one range",
                            Align::Step => "y: bytes, one scale for A and B; x: steps, step k of A beside step k of B",
                        }}
                    </span>
                    <span class="hint">"Bands: the range in each pixel column; lines: the value at its end."</span>
                </div>
                {move || {
                    answer.get().map(|r| match r {
                        Err(e) => view! { <p class="notice error">{e}</p> }.into_any(),
                        Ok(d) => view! { <DiffTables d=d/> }.into_any(),
                    })
                }}
            </section>
        }
    }

    #[component]
    fn DiffTables(d: DiffAnswer) -> impl IntoView {
        let t = d.timelines.as_ref().map(|t| {
            format!(
                "Timelines: A device {} ({} events, {} steps), B device {} ({} events, {} steps).",
                t.a.device,
                format::grouped(u64::from(t.a.rows)),
                t.a.steps.len(),
                t.b.device,
                format::grouped(u64::from(t.b.rows)),
                t.b.steps.len()
            )
        });
        view! {
            <p class="hint">
                {t}
                {if d.identical { " The two snapshots hold the same memory by stack." } else { "" }}
            </p>
            {d.devices
                .into_iter()
                .map(|dev| {
                    let name = |x: Option<u32>| x.map_or("(none)".to_owned(), |n| format!("device {n}"));
                    let title = format!("A {} vs B {}", name(dev.device_a), name(dev.device_b));
                    let (sa, sb) = (dev.stats_a.clone(), dev.stats_b.clone());
                    let figures: Vec<(&str, Option<u64>, Option<u64>)> = vec![
                        ("reserved", sa.as_ref().map(|s| s.reserved_bytes), sb.as_ref().map(|s| s.reserved_bytes)),
                        ("reserved peak", sa.as_ref().and_then(|s| s.reserved_peak_bytes), sb.as_ref().and_then(|s| s.reserved_peak_bytes)),
                        ("allocated", sa.as_ref().map(|s| s.allocated_bytes), sb.as_ref().map(|s| s.allocated_bytes)),
                        ("requested peak", sa.as_ref().and_then(|s| s.requested_peak_bytes), sb.as_ref().and_then(|s| s.requested_peak_bytes)),
                        ("cached, not in use", sa.as_ref().map(|s| s.reserved_unallocated_bytes), sb.as_ref().map(|s| s.reserved_unallocated_bytes)),
                        ("largest free block", sa.as_ref().map(|s| s.largest_free_block_bytes), sb.as_ref().map(|s| s.largest_free_block_bytes)),
                    ];
                    let counts = format!(
                        "{} grew, {} shrank, {} appeared, {} vanished, {} unchanged; net {}",
                        dev.grew,
                        dev.shrank,
                        dev.appeared,
                        dev.vanished,
                        dev.unchanged_stacks,
                        format::signed_bytes(dev.total_delta)
                    );
                    view! {
                        <div class="panel compare-device">
                            <h2>{title}</h2>
                            <table class="figures compare-figures">
                                <thead>
                                    <tr><th></th><th class="num">"A"</th><th class="num">"B"</th><th class="num">"B - A"</th></tr>
                                </thead>
                                <tbody>
                                    {figures
                                        .into_iter()
                                        .map(|(label, x, y)| {
                                            let cell = |v: Option<u64>| v.map_or("-".to_owned(), format::bytes);
                                            let delta = match (x, y) {
                                                (Some(x), Some(y)) => format::signed_bytes(y as i64 - x as i64),
                                                _ => String::new(),
                                            };
                                            view! {
                                                <tr>
                                                    <th>{label}</th>
                                                    <td class="num">{cell(x)}</td>
                                                    <td class="num">{cell(y)}</td>
                                                    <td class="num">{delta}</td>
                                                </tr>
                                            }
                                        })
                                        .collect_view()}
                                </tbody>
                            </table>
                            <h3>"Live memory by stack: " {counts}</h3>
                            <table class="stacks" id="compare-stacks">
                                <thead>
                                    <tr>
                                        <th class="num">"B - A"</th>
                                        <th class="num">"A"</th>
                                        <th class="num">"B"</th>
                                        <th>"change"</th>
                                        <th>"stack"</th>
                                    </tr>
                                </thead>
                                <tbody>
                                    {dev.stacks
                                        .into_iter()
                                        .map(|s| {
                                            let word = change_label(s.change);
                                            view! {
                                                <tr>
                                                    <td class="num">{format::signed_bytes(s.delta)}</td>
                                                    <td class="num">{format::bytes(s.bytes_a)}</td>
                                                    <td class="num">{format::bytes(s.bytes_b)}</td>
                                                    <td><span class=format!("change {word}")>{word}</span></td>
                                                    <td><StackDetails frames=s.frames/></td>
                                                </tr>
                                            }
                                        })
                                        .collect_view()}
                                </tbody>
                            </table>
                        </div>
                    }
                })
                .collect_view()}
        }
    }
}

#[cfg(test)]
mod tests {

    use vramscope_shared::views::analysis::{Align, DiffParams, diff};

    use super::*;

    use vramscope_shared::testing::corpus as fixture;

    #[test]
    fn both_sides_share_the_x_range_and_y_scale() {
        let (a, b) = (fixture("oom_leak"), fixture("mlp_train_all"));
        let d =
            diff(&a, &b, &DiffParams { align: Some(Align::Step), px: Some(300), ..Default::default() }).expect("diff");
        let t = d.timelines.expect("timelines");
        let (ca, cb) = (side_chart(&t, &t.a), side_chart(&t, &t.b));
        assert_eq!((ca.x_range, ca.y_max), (cb.x_range, cb.y_max));
        assert_eq!(ca.markers.len(), t.a.steps.len() - 1, "a line between steps");
        assert!(ca.curves[0].columns.iter().all(|c| c.range.max < ca.y_max));
        assert_eq!(compare_path("x", "y"), "/compare/x/y");
        assert_eq!(change_label(Change::Appeared), "appeared");
    }
}
