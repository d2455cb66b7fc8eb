//! Comparing two snapshots (`/compare/:a/:b`): live memory by stack that
//! grew, shrank, appeared or vanished from A to B, the devices' figures side
//! by side, and the two timelines side by side on one y scale, aligned by
//! event order or by step. For two ranks of one job, or before and after a
//! change. The snapshot page offers the second snapshot from the library.

use vramscope_shared::analysis::diff::Change;
use vramscope_shared::stats::DeviceStats;
use vramscope_shared::views::findings::{AlignedTimeline, AlignedTimelines};

use crate::core::chart::{Chart, Column, Curve, Marker, y_top};
use crate::core::format;
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
    let curve = |pick: fn(&vramscope_shared::views::findings::AlignedBucket) -> vramscope_shared::timeline::Range3,
                 colour,
                 band| Curve {
        columns: side.buckets.iter().map(|b| Column { x0: b.x0, x1: b.x1, range: pick(b) }).collect(),
        colour,
        band,
        width: 2,
        label: String::new(),
        dashed: false,
    };
    let markers = match t.align {
        vramscope_shared::views::findings::Align::Step if side.steps.len() <= 40 => (1..side.steps.len())
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

/// Picks one figure of a device's statistics.
type Pick = fn(&DeviceStats) -> Option<u64>;

/// The figures of one device's table, A's and B's: a label and each side's
/// bytes (`None`: that side has no such device or figure).
pub(crate) fn figure_rows(
    a: Option<&DeviceStats>,
    b: Option<&DeviceStats>,
) -> Vec<(&'static str, Option<u64>, Option<u64>)> {
    let both = |pick: Pick| (a.and_then(pick), b.and_then(pick));
    let rows: [(&'static str, Pick); 6] = [
        // The figures of the snapshot's end, said so like the largest free
        // block's (the peaks are over the whole trace).
        ("reserved at the end", |s| Some(s.reserved_bytes)),
        ("reserved peak", |s| s.reserved_peak_bytes),
        ("allocated at the end", |s| Some(s.allocated_bytes)),
        ("requested peak", |s| s.requested_peak_bytes),
        ("cached, not in use at the end", |s| Some(s.reserved_unallocated_bytes)),
        // Like the snapshot page's card: the figure is the snapshot's end's.
        ("largest free block at the end", |s| Some(s.largest_free_block_bytes)),
    ];
    rows.into_iter()
        .map(|(label, pick)| {
            let (x, y) = both(pick);
            (label, x, y)
        })
        .collect()
}

/// A figure's cells: A's, B's and B − A (blank unless both have it).
pub(crate) fn figure_cells(x: Option<u64>, y: Option<u64>) -> [String; 3] {
    let cell = |v: Option<u64>| v.map_or("-".to_owned(), format::bytes);
    let delta = match (x, y) {
        (Some(x), Some(y)) => format::signed_bytes(y as i64 - x as i64),
        _ => String::new(),
    };
    [cell(x), cell(y), delta]
}

#[cfg(target_arch = "wasm32")]
pub(crate) use ui::{ComparePage, ComparePicker};

#[cfg(target_arch = "wasm32")]
mod ui {
    use leptos::prelude::*;
    use leptos::task::spawn_local;
    use leptos_router::hooks::use_params_map;
    use vramscope_shared::views::findings::{Align, DiffAnswer};

    use super::{change_label, compare_path, figure_cells, figure_rows, side_chart};
    use crate::components::badge::LocalBadge;
    use crate::components::stack::StackDetails;
    use crate::core::format;
    use crate::core::model::SnapshotMeta;
    use crate::infra::canvas::{chart_width, paint_chart};
    use crate::infra::first_view::after_first_view;
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
        // Whether the library has answered (it is asked for once the
        // page's first timeline is drawn).
        let listed = RwSignal::new(false);
        after_first_view(move || {
            spawn_local(async move {
                let answer = api::list(&api::ListQuery::default(), None).await;
                listed.try_set(true);
                if let Ok(page) = answer {
                    let library = page.items.into_iter().filter(|m| m.id != this).map(|m: SnapshotMeta| {
                        let label = match (&m.job, m.rank) {
                            (Some(j), Some(r)) => format!("{} ({j}, rank {r})", m.name),
                            _ => m.name.clone(),
                        };
                        (m.id, label)
                    });
                    let list: Vec<(String, String)> = locals.into_iter().chain(library).collect();
                    // The list may come after the user picked a local file:
                    // keep their pick, and take the first only if there was none.
                    let first = list.first().map(|(o, _)| o.clone()).unwrap_or_default();
                    chosen.try_update(|c| {
                        if c.is_empty() {
                            *c = first;
                        }
                    });
                    others.try_set(list);
                }
            })
        });
        let id = StoredValue::new(id);
        view! {
            <div class="panel compare-picker" id="compare-picker">
                <h2>"Compare with another snapshot"</h2>
                {move || {
                    (listed.get() && others.with(Vec::is_empty))
                        .then(|| view! { <p class="hint">"No other snapshot in the library yet."</p> })
                }}
                // Built once: the library's list may come while the user
                // picks (it waits for the page's first timeline), and only
                // the options follow it, so the select and the link under
                // the mouse stay the same elements.
                <div class="toolbar" class:hidden=move || others.with(Vec::is_empty)>
                    <select id="compare-with" on:change=move |ev| chosen.set(event_target_value(&ev))>
                        {move || {
                            others
                                .get()
                                .into_iter()
                                .map(|(other, label)| {
                                    // Redrawn when the library's list comes: show the pick.
                                    let picked = chosen.get_untracked() == other;
                                    view! { <option value=other selected=picked>{label}</option> }
                                })
                                .collect_view()
                        }}
                    </select>
                    <a id="compare-link" class="button" href=move || compare_path(&id.get_value(), &chosen.get())>
                        "Compare"
                    </a>
                </div>
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
        let cmp = Comparison {
            ids: StoredValue::new((a.clone(), b.clone())),
            align: RwSignal::new(Align::Event),
            answer: RwSignal::new(None),
            names: RwSignal::new((a.clone(), b.clone())),
            wrap_ref: NodeRef::new(),
            canvas_a: NodeRef::new(),
            canvas_b: NodeRef::new(),
            error: RwSignal::new(None),
        };
        cmp.load_names();
        Effect::new(move |started: Option<bool>| {
            if started == Some(true) || cmp.wrap_ref.get().is_none() {
                return started.unwrap_or(false);
            }
            cmp.fetch();
            true
        });
        Effect::new(move |_| cmp.paint());
        let Comparison { align, answer, names, error, .. } = cmp;
        view! {
            <section class="compare" id="compare">
                <p class="crumbs">
                    <a href="/">"Library"</a>
                    " / compare"
                </p>
                <h1>
                    "A: "
                    <a href=format!("/snapshots/{a}")>{move || names.get().0}</a>
                    {local::is_local(&a).then(|| view! { " " <LocalBadge/> })}
                    "  vs  B: "
                    <a href=format!("/snapshots/{b}")>{move || names.get().1}</a>
                    {local::is_local(&b).then(|| view! { " " <LocalBadge/> })}
                </h1>
                <div class="toolbar">
                    "Align the timelines by "
                    <span class="group">
                        <button
                            id="align-event"
                            class:active=move || align.get() == Align::Event
                            on:click=move |_| cmp.realign(Align::Event)
                        >
                            "event order"
                        </button>
                        <button
                            id="align-step"
                            class:active=move || align.get() == Align::Step
                            on:click=move |_| cmp.realign(Align::Step)
                        >
                            "step"
                        </button>
                    </span>
                    <span class="hint">"Both drawn on one y scale."</span>
                </div>
                {move || error.get().map(|e| view! { <p class="notice error">{e}</p> })}
                <div class="compare-timelines" node_ref=cmp.wrap_ref>
                    <div>
                        <h3>"A"</h3>
                        <div class="canvas-wrap"><canvas id="compare-a" node_ref=cmp.canvas_a></canvas></div>
                    </div>
                    <div>
                        <h3>"B"</h3>
                        <div class="canvas-wrap"><canvas id="compare-b" node_ref=cmp.canvas_b></canvas></div>
                    </div>
                </div>
                {legend(align)}
                {move || {
                    answer.get().map(|r| match r {
                        Err(e) => view! { <p class="notice error">{e}</p> }.into_any(),
                        Ok(d) => view! { <DiffTables d=d/> }.into_any(),
                    })
                }}
            </section>
        }
    }

    /// The comparison's state: the two ids and their names, the alignment,
    /// the answer, the two canvases.
    #[derive(Clone, Copy)]
    struct Comparison {
        ids: StoredValue<(String, String)>,
        align: RwSignal<Align>,
        answer: RwSignal<Option<Result<DiffAnswer, String>>>,
        names: RwSignal<(String, String)>,
        wrap_ref: NodeRef<leptos::html::Div>,
        canvas_a: NodeRef<leptos::html::Canvas>,
        canvas_b: NodeRef<leptos::html::Canvas>,
        error: RwSignal<Option<String>>,
    }

    impl Comparison {
        /// The snapshots' names, in place of their ids once known.
        fn load_names(self) {
            let (a, b) = self.ids.get_value();
            let names = self.names;
            spawn_local(async move {
                let na = api::snapshot(&a).await.map(|m| m.name).unwrap_or(a);
                let nb = api::snapshot(&b).await.map(|m| m.name).unwrap_or(b);
                names.try_set((na, nb));
            });
        }

        /// Ask for the comparison, aligned as chosen.
        fn fetch(self) {
            let (a, b) = self.ids.get_value();
            let mode = self.align.get_untracked();
            // Each timeline takes half the width.
            let px = (chart_width(self.wrap_ref.get_untracked()) / 2).saturating_sub(96).max(100);
            let answer = self.answer;
            spawn_local(async move {
                let result = api::compare(&a, &b, mode, px).await.map_err(|e| e.to_string());
                answer.try_set(Some(result));
            });
        }

        fn realign(self, align: Align) {
            self.align.set(align);
            self.fetch();
        }

        /// Draw both timelines (reading, so tracking, the answer).
        fn paint(self) {
            let (Some(ca), Some(cb)) = (self.canvas_a.get(), self.canvas_b.get()) else { return };
            self.answer.with(|ans| {
                let Some(Ok(d)) = ans else { return };
                let Some(t) = &d.timelines else { return };
                let width = (chart_width(self.wrap_ref.get_untracked()) / 2).saturating_sub(8).max(200);
                let step = t.align == Align::Step;
                let label = move |x: f64| {
                    if step { format!("step {}", x.round() as i64) } else { format::compact(x.round() as i64) }
                };
                for (canvas, side) in [(&ca, &t.a), (&cb, &t.b)] {
                    if let Err(e) = paint_chart(canvas, width, 260, &side_chart(t, side), &label) {
                        self.error.set(Some(e));
                    }
                }
            });
        }
    }

    /// The timelines' legend, step boundaries when aligned by step.
    fn legend(align: RwSignal<Align>) -> impl IntoView {
        view! {
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
        }
    }

    #[component]
    fn DiffTables(d: DiffAnswer) -> impl IntoView {
        let t = d.timelines.as_ref().map(|t| {
            format!(
                "Timelines: A device {} ({}, {}), B device {} ({}, {}).",
                t.a.device,
                format::count(u64::from(t.a.rows), "event", "events"),
                format::count(t.a.steps.len() as u64, "step", "steps"),
                t.b.device,
                format::count(u64::from(t.b.rows), "event", "events"),
                format::count(t.b.steps.len() as u64, "step", "steps")
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
                    let figures = figure_rows(dev.stats_a.as_ref(), dev.stats_b.as_ref());
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
                                            let [x, y, delta] = figure_cells(x, y);
                                            view! {
                                                <tr>
                                                    <th>{label}</th>
                                                    <td class="num">{x}</td>
                                                    <td class="num">{y}</td>
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

    use vramscope_shared::views::findings::{Align, DiffParams, diff};

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

    #[test]
    fn figure_rows_pair_both_sides_and_their_difference() {
        let a = fixture("oom_leak");
        let stats = a.snapshot.stats();
        let d = &stats.devices[0];
        let rows = figure_rows(Some(d), None);
        assert_eq!(rows.len(), 6);
        assert_eq!(rows[0], ("reserved at the end", Some(d.reserved_bytes), None));
        assert_eq!(rows[5], ("largest free block at the end", Some(d.largest_free_block_bytes), None));
        assert_eq!(figure_cells(Some(1024), None), ["1.00 KiB".to_owned(), "-".to_owned(), String::new()]);
        assert_eq!(figure_cells(Some(2048), Some(1024))[2], format::signed_bytes(-1024));
    }

    /// "reserved", "allocated" and "cached, not in use" are the snapshot's
    /// end's figures, beside peaks over the whole trace, and did not say so.
    #[test]
    fn regression_the_end_of_snapshot_figures_say_when_they_are() {
        let a = fixture("oom_leak");
        let stats = a.snapshot.stats();
        let labels: Vec<&str> = figure_rows(Some(&stats.devices[0]), None).iter().map(|r| r.0).collect();
        assert_eq!(
            labels,
            [
                "reserved at the end",
                "reserved peak",
                "allocated at the end",
                "requested peak",
                "cached, not in use at the end",
                "largest free block at the end",
            ]
        );
    }
}
