//! The what-if panel: the trace replayed through the allocator model with
//! other settings (`expandable_segments:True`, `max_split_size_mb:512`, …)
//! under a capacity, the simulated reserved and allocated curves drawn over
//! the recorded ones, the peaks side by side and where the replay would run
//! out of memory; and the ranking of candidate settings, a click on a row
//! replaying it.

use vramscope_shared::timeline::{Bucket, MarkerKind, Range3};
use vramscope_shared::views::findings::{SimulatedBucket, TuneCandidate, WhatIfAnswer};

use super::change;
use crate::core::chart::{Chart, Column, Curve, Marker, y_top};
use crate::core::format;
use crate::core::palette;

/// Settings offered in the input's suggestions.
pub(crate) const SUGGESTED: [&str; 6] = [
    "expandable_segments:True",
    "max_split_size_mb:512",
    "max_split_size_mb:128",
    "roundup_power2_divisions:4",
    "garbage_collection_threshold:0.8",
    "",
];

/// The chart of an answer: recorded reserved (band) and allocated, then the
/// simulated reserved and allocated over them, the recorded OOMs and the
/// simulated one as markers. x in trace rows.
pub(crate) fn whatif_chart(w: &WhatIfAnswer) -> Chart {
    let recorded = |pick: fn(&Bucket) -> Range3| -> Vec<Column> {
        w.recorded.buckets.iter().map(|b| Column { x0: b.x0 as f64, x1: b.x1 as f64, range: pick(b) }).collect()
    };
    // Buckets the replay never reached are left out: nothing is known there.
    let simulated = |pick: fn(&SimulatedBucket) -> Range3| -> Vec<Column> {
        w.recorded
            .buckets
            .iter()
            .zip(&w.simulated)
            .filter(|(_, s)| s.replayed)
            .map(|(b, s)| Column { x0: b.x0 as f64, x1: b.x1 as f64, range: pick(s) })
            .collect()
    };
    let curves = vec![
        Curve {
            columns: recorded(|b| b.reserved),
            colour: palette::RESERVED.rgb(),
            band: true,
            width: 2,
            label: String::new(),
            dashed: false,
        },
        Curve {
            columns: recorded(|b| b.allocated),
            colour: palette::ALLOCATED.rgb(),
            band: false,
            width: 2,
            label: String::new(),
            dashed: false,
        },
        Curve {
            columns: simulated(|s| s.reserved),
            colour: palette::SIM_RESERVED.rgb(),
            band: true,
            width: 2,
            label: String::new(),
            dashed: false,
        },
        Curve {
            columns: simulated(|s| s.allocated),
            colour: palette::SIM_ALLOCATED.rgb(),
            band: false,
            width: 2,
            label: String::new(),
            dashed: false,
        },
    ];
    let top = curves.iter().flat_map(|c| c.columns.iter().map(|k| k.range.max)).max().unwrap_or(0);
    let mut markers: Vec<Marker> = w
        .recorded
        .markers
        .iter()
        .filter(|m| m.kind == MarkerKind::Oom)
        .map(|m| Marker { x: m.x as f64, colour: palette::OOM.rgb(), label: "recorded OOM".to_owned() })
        .collect();
    if let Some(o) = &w.oom {
        let label = if o.recorded { "simulated OOM (recorded too)" } else { "simulated OOM" };
        markers.push(Marker { x: o.x as f64, colour: palette::SIM_OOM.rgb(), label: label.to_owned() });
    }
    Chart { x_range: (w.recorded.start as f64, w.recorded.end as f64), y_max: y_top(top), curves, markers }
}

/// The answer's figures as (label, simulated, recorded or note) rows.
pub(crate) fn figures(w: &WhatIfAnswer) -> Vec<(&'static str, String, String)> {
    let f = &w.figures.peaks;
    let recorded_peak = w.recorded_reserved_peak_bytes.unwrap_or(0);
    let oom = match &w.oom {
        None => ("no".to_owned(), "fits".to_owned()),
        Some(o) => (
            format!("at event {}", format::grouped(u64::from(o.row))),
            format!(
                "a {} request, {} segment, with {} reserved",
                format::bytes(o.requested_bytes),
                format::bytes(o.allocation_bytes),
                format::bytes(o.reserved_bytes)
            ),
        ),
    };
    vec![
        (
            "reserved peak",
            format::bytes(f.reserved_peak_bytes),
            format!("recorded {} ({})", format::bytes(recorded_peak), change(f.reserved_peak_bytes, recorded_peak)),
        ),
        (
            "allocated peak",
            format::bytes(f.allocated_peak_bytes),
            format!("requested peak {}", format::bytes(f.requested_peak_bytes)),
        ),
        ("inactive split peak", format::bytes(f.inactive_split_peak_bytes), String::new()),
        (
            "device calls",
            format::grouped(f.device_allocs + f.device_frees),
            format::count(f.alloc_retries, "retry", "retries"),
        ),
        ("out of memory", oom.0, oom.1),
    ]
}

/// A tune row's settings for people.
pub(crate) fn settings_label(conf: &str) -> String {
    if conf.is_empty() { "(PyTorch defaults)".to_owned() } else { conf.to_owned() }
}

/// A tune row's cells: rank, settings, reserved peak, vs recorded,
/// allocated peak, device calls, OOM. A replay that ran out is "cut short":
/// its peaks stop at that row and are compared with nothing.
pub(crate) fn tune_cells(candidate: &TuneCandidate, recorded_peak: u64) -> [String; 7] {
    let row = &candidate.outcome;
    let (versus, oom) = match row.oom {
        Some(o) => ("cut short".to_owned(), format!("at row {}", o.row)),
        None => (change(row.peaks.reserved_peak_bytes, recorded_peak), "no".to_owned()),
    };
    [
        candidate.rank.to_string(),
        settings_label(&row.alloc_conf) + if row.recorded { " (recorded)" } else { "" },
        format::bytes(row.peaks.reserved_peak_bytes),
        versus,
        format::bytes(row.peaks.allocated_peak_bytes),
        format::grouped(row.peaks.device_allocs + row.peaks.device_frees),
        oom,
    ]
}

/// The sentence under the what-if's chart: the settings replayed and the
/// capacity, with where it came from.
pub(crate) fn replayed(w: &WhatIfAnswer) -> String {
    let capacity = match (w.capacity_bytes, w.capacity_inferred) {
        (Some(c), _) if w.capacity_source.as_deref() == Some("recorded") => format!(
            ", capacity {}: the cap the process ran under (its memory fraction, recorded by the capture; type a capacity for another)",
            format::bytes(c),
        ),
        (Some(c), true) => format!(
            ", capacity {}: the least the process had when it ran out (inferred from the recorded OOM; type a capacity for another)",
            format::bytes(c),
        ),
        (Some(c), false) => format!(", capacity {}", format::bytes(c)),
        (None, _) => String::new(),
    };
    format!("Replayed with {} ({} settings){capacity}.", settings_label(&w.alloc_conf), w.settings)
}

#[cfg(target_arch = "wasm32")]
pub(crate) use ui::WhatIfPanel;

#[cfg(target_arch = "wasm32")]
mod ui {
    use leptos::prelude::*;
    use leptos::task::spawn_local;
    use vramscope_shared::timeline::Axis;
    use vramscope_shared::views::findings::{TuneAnswer, TuneParams, WhatIfAnswer, WhatIfParams};
    use vramscope_shared::views::view::{self as views, Tune};

    use super::{SUGGESTED, figures, replayed, tune_cells, whatif_chart};
    use crate::core::format;
    use crate::infra::api;
    use crate::infra::canvas::{chart_width, paint_chart};

    const HEIGHT: u32 = 300;
    /// Canvas pixels outside the plot area (y labels, margins).
    const MARGIN_PX: u32 = 96;

    /// What-if replays and the ranking of settings for one device.
    #[component]
    pub(crate) fn WhatIfPanel(id: String, device: u32) -> impl IntoView {
        let panel = WhatIf {
            id: StoredValue::new(id),
            device,
            conf: RwSignal::new("expandable_segments:True".to_owned()),
            capacity: RwSignal::new(String::new()),
            answer: RwSignal::new(None),
            error: RwSignal::new(None),
            loading: RwSignal::new(false),
            ranking: RwSignal::new(None),
            ranking_loading: RwSignal::new(false),
            canvas_ref: NodeRef::new(),
            wrap_ref: NodeRef::new(),
        };
        Effect::new(move |_| panel.paint());
        let WhatIf { conf, capacity, answer, error, loading, ranking, ranking_loading, .. } = panel;

        view! {
            <div class="panel whatif" id="whatif">
                <h2>"What if: other allocator settings"</h2>
                <p class="hint">
                    "Replays this trace through a model of PyTorch's caching allocator with the settings below (PYTORCH_CUDA_ALLOC_CONF) and draws the simulated curves over the recorded ones. Leave the capacity empty for unlimited memory (for a snapshot that ran out: the least the process had then)."
                </p>
                <div class="toolbar">
                    <label class="field">
                        "alloc_conf "
                        <input
                            id="whatif-conf"
                            list="whatif-suggestions"
                            size="40"
                            prop:value=conf
                            on:input=move |ev| conf.set(event_target_value(&ev))
                            on:keydown=move |ev| {
                                if ev.key() == "Enter" {
                                    panel.run();
                                }
                            }
                        />
                        <datalist id="whatif-suggestions">
                            {SUGGESTED.iter().map(|s| view! { <option value=*s></option> }).collect_view()}
                        </datalist>
                    </label>
                    <label class="field">
                        "capacity "
                        <input
                            id="whatif-capacity"
                            placeholder="e.g. 40GiB"
                            size="10"
                            prop:value=capacity
                            on:input=move |ev| capacity.set(event_target_value(&ev))
                        />
                    </label>
                    <button id="whatif-run" class="active" on:click=move |_| panel.run() disabled=move || loading.get()>
                        {move || if loading.get() { "Replaying…" } else { "Simulate" }}
                    </button>
                    <button id="tune-run" on:click=move |_| panel.rank() disabled=move || ranking_loading.get()>
                        {move || if ranking_loading.get() { "Ranking…" } else { "Rank settings" }}
                    </button>
                </div>
                {move || error.get().map(|e| view! { <p class="notice error">{e}</p> })}
                <div class="canvas-wrap" node_ref=panel.wrap_ref class:hidden=move || answer.with(Option::is_none)>
                    <canvas id="whatif-canvas" node_ref=panel.canvas_ref></canvas>
                </div>
                {move || answer.get().map(|w| answer_view(&w))}
                {move || {
                    ranking
                        .get()
                        .map(|r| match r {
                            Err(e) => view! { <p class="notice error">{e}</p> }.into_any(),
                            Ok(t) => ranking_view(t, panel).into_any(),
                        })
                }}
            </div>
        }
    }

    /// The panel's state: the settings typed, the replay and ranking asked
    /// for and their answers, the chart's canvas.
    #[derive(Clone, Copy)]
    struct WhatIf {
        id: StoredValue<String>,
        device: u32,
        conf: RwSignal<String>,
        capacity: RwSignal<String>,
        answer: RwSignal<Option<WhatIfAnswer>>,
        error: RwSignal<Option<String>>,
        loading: RwSignal<bool>,
        ranking: RwSignal<Option<Result<TuneAnswer, String>>>,
        ranking_loading: RwSignal<bool>,
        canvas_ref: NodeRef<leptos::html::Canvas>,
        wrap_ref: NodeRef<leptos::html::Div>,
    }

    impl WhatIf {
        /// The capacity typed, if any.
        fn capacity(self) -> Option<String> {
            let cap = self.capacity.get_untracked().trim().to_owned();
            (!cap.is_empty()).then_some(cap)
        }

        /// Replay with the settings typed.
        fn run(self) {
            let WhatIf { id, device, answer, error, loading, .. } = self;
            let px = chart_width(self.wrap_ref.get_untracked()).saturating_sub(MARGIN_PX);
            let c = self.conf.get_untracked();
            let cap = self.capacity();
            loading.set(true);
            error.set(None);
            spawn_local(async move {
                let p = WhatIfParams {
                    device: Some(device),
                    alloc_conf: Some(c),
                    capacity: cap,
                    axis: Some(Axis::Event),
                    px: Some(px.max(1)),
                    ..Default::default()
                };
                let result = api::view::<views::WhatIf>("replaying the trace", &id.get_value(), &p).await;
                loading.try_set(false);
                match result {
                    Ok(w) => {
                        answer.try_set(Some(w));
                    }
                    Err(e) => {
                        error.try_set(Some(e.to_string()));
                    }
                }
            });
        }

        /// Rank the settings grid under the capacity typed.
        fn rank(self) {
            let WhatIf { id, ranking, ranking_loading, .. } = self;
            let cap = self.capacity();
            ranking_loading.set(true);
            spawn_local(async move {
                let p = TuneParams { capacity: cap };
                let result = api::view::<Tune>("ranking allocator settings", &id.get_value(), &p).await;
                ranking_loading.try_set(false);
                ranking.try_set(Some(result.map_err(|e| e.to_string())));
            });
        }

        /// Draw the replay's chart (reading, so tracking, the answer).
        fn paint(self) {
            let Some(canvas) = self.canvas_ref.get() else { return };
            self.answer.with(|w| {
                let Some(w) = w else { return };
                let width = chart_width(self.wrap_ref.get_untracked());
                let label = |x: f64| format::compact(x.round() as i64);
                if let Err(e) = paint_chart(&canvas, width, HEIGHT, &whatif_chart(w), &label) {
                    self.error.set(Some(e));
                }
            });
        }
    }

    /// The replay's legend, settings and figures.
    fn answer_view(w: &WhatIfAnswer) -> impl IntoView + use<> {
        let rows = figures(w);
        view! {
            <div class="legend">
                <span class="key"><span class="swatch reserved"></span>"recorded reserved"</span>
                <span class="key"><span class="swatch allocated"></span>"recorded allocated (requested bytes)"</span>
                <span class="key"><span class="swatch sim-reserved"></span>"simulated reserved"</span>
                <span class="key"><span class="swatch sim-allocated"></span>"simulated allocated (block bytes)"</span>
            </div>
            <p class="hint" id="whatif-settings">{replayed(w)}</p>
            <table class="figures" id="whatif-figures">
                <tbody>
                    {rows
                        .into_iter()
                        .map(|(label, value, note)| {
                            view! {
                                <tr>
                                    <th>{label}</th>
                                    <td class="num">{value}</td>
                                    <td class="hint">{note}</td>
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
        }
    }

    /// The ranking's table, each row with a "try" replaying its settings.
    fn ranking_view(t: TuneAnswer, panel: WhatIf) -> impl IntoView {
        let base = t.recorded_reserved_peak_bytes;
        view! {
            <table class="ranking" id="tune-table">
                <thead>
                    <tr>
                        <th>"#"</th>
                        <th>"settings"</th>
                        <th class="num">"reserved peak"</th>
                        <th class="num">"vs recorded"</th>
                        <th class="num">"allocated peak"</th>
                        <th class="num">"device calls"</th>
                        <th>"OOM"</th>
                        <th></th>
                    </tr>
                </thead>
                <tbody>
                    {t
                        .rows
                        .into_iter()
                        .map(|row| {
                            let cells = tune_cells(&row, base);
                            let try_conf = row.outcome.alloc_conf.clone();
                            let tip = row.outcome.trade_offs.join("\n");
                            let recorded = row.outcome.recorded;
                            let oom = row.outcome.oom.is_some();
                            view! {
                                <tr class:recorded=recorded class:oom=oom title=tip>
                                    <td>{cells[0].clone()}</td>
                                    <td><code>{cells[1].clone()}</code></td>
                                    <td class="num">{cells[2].clone()}</td>
                                    <td class="num">{cells[3].clone()}</td>
                                    <td class="num">{cells[4].clone()}</td>
                                    <td class="num">{cells[5].clone()}</td>
                                    <td>{cells[6].clone()}</td>
                                    <td>
                                        <button
                                            class="link try"
                                            on:click=move |_| {
                                                panel.conf.set(try_conf.clone());
                                                panel.run();
                                            }
                                        >
                                            "try"
                                        </button>
                                    </td>
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
        }
    }
}

#[cfg(test)]
mod tests {
    use vramscope_shared::indexed::IndexedSnapshot;
    use vramscope_shared::timeline::Axis;
    use vramscope_shared::views::findings::{WhatIfParams, whatif};

    use vramscope_shared::simulate::tune::TuneRow;

    use super::*;

    fn oom_leak() -> IndexedSnapshot {
        vramscope_shared::testing::corpus("oom_leak")
    }

    #[test]
    fn the_chart_draws_both_runs_and_marks_the_simulated_oom() {
        let a = oom_leak();
        let p = WhatIfParams {
            alloc_conf: Some("expandable_segments:True".into()),
            capacity: Some("1GiB".into()),
            axis: Some(Axis::Event),
            px: Some(300),
            ..Default::default()
        };
        let w = whatif(&a, &p).expect("what-if");
        let chart = whatif_chart(&w);
        assert_eq!(chart.curves.len(), 4);
        assert_eq!(chart.curves[0].columns.len(), w.recorded.buckets.len());
        assert!(chart.curves[0].columns.len() <= 300, "bounded by the pixels");
        let oom = w.oom.expect("1 GiB is too little for oom_leak");
        assert!(chart.curves[2].columns.iter().all(|c| c.x0 <= oom.x as f64), "nothing drawn past the replay's end");
        assert!(chart.markers.iter().any(|m| m.colour == palette::SIM_OOM.rgb() && m.x == oom.x as f64));
        assert!(chart.markers.iter().any(|m| m.colour == palette::OOM.rgb()), "the recorded OOM");
        assert!(chart.y_max >= w.recorded.buckets.iter().map(|b| b.reserved.max).max().unwrap_or(0));
        let rows = figures(&w);
        assert_eq!(rows[0].0, "reserved peak");
        assert_eq!(
            replayed(&w),
            format!("Replayed with expandable_segments:True ({} settings), capacity 1.00 GiB.", w.settings)
        );
        assert!(rows[4].1.starts_with("at event"), "{:?}", rows[4]);
    }

    /// Issue 44, item 30: the figures said "1 retries" for `oom_leak`'s
    /// replay under its inferred capacity (one retry before the OOM).
    #[test]
    fn regression_one_retry_is_said_in_the_singular() {
        let p = WhatIfParams { axis: Some(Axis::Event), px: Some(100), ..Default::default() };
        let w = whatif(&oom_leak(), &p).expect("what-if");
        assert_eq!(w.figures.peaks.alloc_retries, 1);
        let rows = figures(&w);
        assert_eq!(rows[3].0, "device calls");
        assert_eq!(rows[3].2, "1 retry");
    }

    /// Issue 44: the what-if chart drew "simulated OOM" over "recorded
    /// OOM" where the replay runs out where the recording did (`oom_leak`
    /// replayed with its own settings under the capacity inferred from its
    /// OOM: both markers at one x, both labels left of it at one height).
    /// Each label now takes the first row above the plot where it overlaps
    /// none; checked for replays that run out there and elsewhere.
    #[test]
    fn regression_whatif_oom_labels_do_not_overlap() {
        use plotters::prelude::IntoDrawingArea;
        use vramscope_plot::recorder::Recorder;

        let mut stacked = 0;
        for (conf, capacity) in
            [("", None), ("expandable_segments:True", None), ("expandable_segments:True", Some("1GiB"))]
        {
            let p = WhatIfParams {
                alloc_conf: Some(conf.into()),
                capacity: capacity.map(Into::into),
                axis: Some(Axis::Event),
                px: Some(900),
                ..Default::default()
            };
            let w = whatif(&oom_leak(), &p).expect("what-if");
            let chart = whatif_chart(&w);
            let labels: Vec<&str> = chart.markers.iter().map(|m| m.label.as_str()).collect();
            assert!(labels.contains(&"recorded OOM"), "{conf} {capacity:?}: {labels:?}");
            assert!(labels.iter().any(|l| l.starts_with("simulated OOM")), "{conf} {capacity:?}: {labels:?}");
            for width in [500, 980, 1600] {
                let (backend, log) = Recorder::new((width, 260));
                let area =
                    crate::core::chart::draw(&backend.into_drawing_area(), &chart, &|x| format!("{x}")).expect("drawn");
                let log = log.borrow();
                // Each label's box: its measured extent, one 14 px row high.
                let boxes: Vec<(i32, i32, i32)> = chart
                    .markers
                    .iter()
                    .map(|m| {
                        let (_, (_, y), _) = log.texts.iter().find(|(t, _, _)| *t == m.label).expect("label drawn");
                        let x = area.x_px(chart.x_range, m.x);
                        let (a, b) = crate::core::chart::label_span(x, &m.label, area.left, area.width);
                        (a, b, *y)
                    })
                    .collect();
                for (i, p) in boxes.iter().enumerate() {
                    assert!(p.2 >= 0 && p.2 < area.top as i32, "above the plot, inside the canvas: {p:?} {area:?}");
                    for q in &boxes[i + 1..] {
                        let side_by_side = p.1 <= q.0 || q.1 <= p.0;
                        stacked += usize::from(!side_by_side);
                        assert!(
                            side_by_side || (p.2 - q.2).abs() >= 14,
                            "labels overlap at width {width} ({conf} {capacity:?}): {p:?} {q:?} {labels:?}"
                        );
                    }
                }
            }
        }
        assert!(stacked > 0, "a replay running out where the recording did puts its labels in two rows");
    }

    #[test]
    fn tune_cells_read_like_the_cli() {
        let row = TuneCandidate {
            rank: 2,
            outcome: TuneRow {
                alloc_conf: String::new(),
                recorded: true,
                peaks: vramscope_shared::simulate::ReplayPeaks {
                    reserved_peak_bytes: 3 << 30,
                    allocated_peak_bytes: 2 << 30,
                    requested_peak_bytes: 2 << 30,
                    inactive_split_peak_bytes: 0,
                    device_allocs: 1200,
                    device_frees: 34,
                    alloc_retries: 0,
                },
                oom: None,
                trade_offs: Vec::new(),
            },
        };
        let cells = tune_cells(&row, 4 << 30);
        assert_eq!(cells[1], "(PyTorch defaults) (recorded)");
        assert_eq!(cells[2], "3.00 GiB");
        assert_eq!(cells[3], "-25.0%");
        assert_eq!(cells[5], "1,234");
        assert_eq!(cells[6], "no");
    }
}
