//! The leaks panel: allocations alive at the end grouped by stack, ranked
//! by how steadily they grew over the trace's steps (bytes per step where
//! the trace has step annotations), with a chart of the top stacks'
//! retained memory step by step.

use vramscope_shared::analysis::leaks::{DeviceLeaks, Pattern};
use vramscope_shared::timeline::Range3;

use crate::core::chart::{Chart, Column, Curve, y_top};
use crate::core::palette::{self, Colour};

/// Stacks drawn in the growth chart.
pub(crate) const CHARTED: usize = 5;

/// Line colours of the charted stacks, in rank order.
pub(crate) const COLOURS: [Colour; CHARTED] = palette::SERIES;

/// Running sums: the memory a stack retains after each step.
pub(crate) fn cumulative(by_step: &[u64]) -> Vec<u64> {
    let mut total = 0u64;
    by_step
        .iter()
        .map(|&b| {
            total = total.saturating_add(b);
            total
        })
        .collect()
}

/// A pattern for people.
pub(crate) fn pattern_label(p: Pattern) -> &'static str {
    match p {
        Pattern::Growing => "growing",
        Pattern::Sporadic => "sporadic",
        Pattern::Setup => "setup",
        Pattern::LastStep => "last step",
    }
}

/// The growth chart: for each of the top stacks, the bytes it retains
/// after each step (x in steps: step `k` spans `[k, k + 1)`), with a
/// legend naming each line by its rank in the table. Two stacks may retain
/// the same bytes step after step (gpt_varlen's top five hold three
/// distinct lines): the later one is dashed, so the earlier shows through,
/// and its legend entry says which it follows.
pub(crate) fn growth_chart(d: &DeviceLeaks) -> Chart {
    let steps = d.steps.steps.len().max(1);
    let mut curves: Vec<Curve> = Vec::new();
    let mut ranks: Vec<u32> = Vec::new();
    for (c, colour) in d.candidates.iter().take(CHARTED).zip(COLOURS) {
        let columns: Vec<Column> = cumulative(&c.retained_by_step)
            .into_iter()
            .enumerate()
            .map(|(k, v)| Column { x0: k as f64, x1: k as f64 + 1.0, range: Range3 { min: v, max: v, last: v } })
            .collect();
        let same = curves.iter().zip(&ranks).find(|(earlier, _)| earlier.columns == columns).map(|(_, r)| *r);
        let label = match same {
            Some(r) => format!("#{} (same as #{r})", c.rank),
            None => format!("#{}", c.rank),
        };
        curves.push(Curve { columns, colour: colour.rgb(), band: false, width: 2, label, dashed: same.is_some() });
        ranks.push(c.rank);
    }
    let top = curves.iter().flat_map(|c| c.columns.iter().map(|k| k.range.max)).max().unwrap_or(0);
    Chart { x_range: (0.0, steps as f64), y_max: y_top(top), curves, markers: Vec::new() }
}

#[cfg(target_arch = "wasm32")]
pub(crate) use ui::LeaksPanel;

#[cfg(target_arch = "wasm32")]
mod ui {
    use leptos::prelude::*;
    use leptos::task::spawn_local;
    use vramscope_shared::views::findings::{DeviceLeaksAnswer, LeaksAnswer, LeaksParams};
    use vramscope_shared::views::view::Leaks;

    use super::{CHARTED, COLOURS, growth_chart, pattern_label};
    use crate::components::stack::StackDetails;
    use crate::core::format;
    use crate::infra::api;
    use crate::infra::canvas::{chart_width, paint_chart};
    use crate::infra::first_view::after_first_view;

    /// Stacks asked for.
    const TOP: usize = 15;

    /// The leak ranking of a device.
    #[component]
    pub(crate) fn LeaksPanel(id: String, device: u32) -> impl IntoView {
        let answer = RwSignal::new(None::<Result<LeaksAnswer, String>>);
        after_first_view(move || {
            spawn_local(async move {
                let p = LeaksParams { device: Some(device), top: Some(TOP) };
                let result = api::view::<Leaks>("ranking the leaks", &id, &p).await.map_err(|e| e.to_string());
                answer.try_set(Some(result));
            })
        });
        view! {
            <div class="panel leaks" id="leaks-panel">
                <h2>"Leaks: memory alive at the end, by stack"</h2>
                {move || {
                    answer.get().map(|a| match a {
                        Err(e) => view! { <p class="notice error">{e}</p> }.into_any(),
                        Ok(a) => a
                            .devices
                            .into_iter()
                            .map(|d| view! { <DeviceLeaksView d=d/> })
                            .collect_view()
                            .into_any(),
                    })
                }}
            </div>
        }
    }

    #[component]
    fn DeviceLeaksView(d: DeviceLeaksAnswer) -> impl IntoView {
        let canvas_ref = NodeRef::<leptos::html::Canvas>::new();
        let wrap_ref = NodeRef::<leptos::html::Div>::new();
        let error = RwSignal::new(None::<String>);
        let l = d.leaks;
        let chart = growth_chart(&l);
        let step_names: Vec<String> = l.steps.steps.iter().map(|s| s.name.clone()).collect();
        Effect::new(move |_| {
            let Some(canvas) = canvas_ref.get() else { return };
            let names = step_names.clone();
            let label = move |x: f64| names.get(x.max(0.0) as usize).cloned().unwrap_or_default();
            if let Err(e) = paint_chart(&canvas, chart_width(wrap_ref.get_untracked()), 220, &chart, &label) {
                error.set(Some(e));
            }
        });
        let summary = if l.no_trace {
            "No trace: nothing is known about when these were allocated.".to_owned()
        } else {
            format!(
                "{} alive at the end ({}) from {}. {} ({}); the {} in between retained {} per step. {}",
                format::count(l.live_count, "allocation", "allocations"),
                format::bytes(l.live_bytes),
                format::count(u64::from(l.stacks), "stack", "stacks"),
                format::count(l.steps.steps.len() as u64, "step", "steps"),
                d.step_source,
                format::count(u64::from(l.completed_steps), "completed step", "completed steps"),
                format::bytes(l.growth_bytes_per_step),
                match l.growing_stacks {
                    0 => "No stack keeps memory step after step.".to_owned(),
                    1 => "1 stack keeps memory step after step: a likely leak.".to_owned(),
                    n => format!("{n} stacks keep memory step after step: likely leaks."),
                }
            )
        };
        let completed = l.completed_steps;
        view! {
            <p class="hint">{summary}</p>
            {move || error.get().map(|e| view! { <p class="notice error">{e}</p> })}
            <div class="canvas-wrap" node_ref=wrap_ref>
                <canvas id="leaks-canvas" node_ref=canvas_ref></canvas>
            </div>
            <p class="hint">{format!("Bytes each of the top {CHARTED} stacks retains, step after step (its allocations still alive at the end, by the step that made them); the legend names each line by its # in the table, and a dashed line retains the same bytes as the one it names.")}</p>
            <table class="stacks" id="leaks-table">
                <thead>
                    <tr>
                        <th>"#"</th>
                        <th class="num">"growth / step"</th>
                        <th class="num">"steps"</th>
                        <th class="num">"live"</th>
                        <th class="num">"allocations"</th>
                        <th>"pattern"</th>
                        <th>"stack"</th>
                    </tr>
                </thead>
                <tbody>
                    {l.candidates
                        .into_iter()
                        .enumerate()
                        .map(|(k, c)| {
                            let swatch = COLOURS.get(k).map(|c| {
                                let [r, g, b] = c.bytes();
                                format!("background: rgb({r} {g} {b})")
                            });
                            view! {
                                <tr class:growing=c.pattern == vramscope_shared::analysis::leaks::Pattern::Growing>
                                    <td>
                                        {swatch.map(|s| view! { <span class="dot" style=s></span> })}
                                        {c.rank}
                                    </td>
                                    <td class="num">{format::bytes(c.growth_bytes_per_step)}</td>
                                    <td class="num">{format!("{}/{}", c.steps_with_growth, completed)}</td>
                                    <td class="num">{format::bytes(c.live_bytes)}</td>
                                    <td class="num">{format::grouped(c.live_count)}</td>
                                    <td>{pattern_label(c.pattern)}</td>
                                    <td><StackDetails frames=c.frames open=k == 0/></td>
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

    use vramscope_shared::views::findings::{LeaksParams, leaks};

    use super::*;

    #[test]
    fn growth_is_charted_cumulatively_per_step_for_the_top_stacks() {
        assert_eq!(cumulative(&[1, 0, 2, 3]), vec![1, 1, 3, 6]);
        let a = vramscope_shared::testing::corpus("oom_leak");
        let l = leaks(&a, &LeaksParams { top: Some(8), ..Default::default() }).expect("leaks");
        let d = &l.devices[0].leaks;
        let chart = growth_chart(d);
        assert_eq!(chart.curves.len(), CHARTED);
        assert_eq!(chart.x_range, (0.0, 12.0), "12 steps");
        let kept = &chart.curves[0].columns;
        assert_eq!(kept.len(), 12);
        assert!(kept.windows(2).all(|w| w[0].range.last < w[1].range.last), "the kept outputs grow every step");
        assert_eq!(kept[11].range.last, d.candidates[0].live_bytes);
        assert_eq!(pattern_label(d.candidates[0].pattern), "growing");
    }

    /// Issue 44: the leaks chart of `gpt_varlen` drew 3 lines for its 5
    /// stacks (two pairs retain the same bytes step after step, so the
    /// later line hid the earlier one) and had no legend. Each line is now
    /// named in a legend drawn beside the plot by its rank, a line equal to
    /// an earlier one says so and is dashed (the earlier shows through).
    #[test]
    fn regression_leaks_chart_has_a_legend_and_overlaps_are_told() {
        use plotters::prelude::IntoDrawingArea;
        use vramscope_plot::recorder::Recorder;

        let a = vramscope_shared::testing::corpus("gpt_varlen");
        let l = leaks(&a, &LeaksParams { top: Some(15), ..Default::default() }).expect("leaks");
        let chart = growth_chart(&l.devices[0].leaks);
        let labels: Vec<&str> = chart.curves.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(labels.len(), CHARTED, "{labels:?}");
        let distinct: Vec<&Curve> = chart.curves.iter().filter(|c| !c.dashed).collect();
        assert_eq!(distinct.len(), 3, "three distinct lines for five stacks: {labels:?}");
        for (k, c) in chart.curves.iter().enumerate() {
            assert!(c.label.starts_with(&format!("#{}", k + 1)), "{labels:?}");
            if c.dashed {
                let said =
                    c.label.split("same as #").nth(1).and_then(|r| r.trim_end_matches(')').parse::<usize>().ok());
                let earlier = said.expect("a dashed line names the one it follows");
                assert!(earlier <= k, "{labels:?}");
                assert_eq!(chart.curves[earlier - 1].columns, c.columns, "{labels:?}");
            }
        }
        let (backend, log) = Recorder::new((900, 220));
        let area = crate::core::chart::draw(&backend.into_drawing_area(), &chart, &|x| format!("{x}")).expect("drawn");
        let log = log.borrow();
        for label in &labels {
            let (_, (x, _), _) =
                log.texts.iter().find(|(t, _, _)| t == label).unwrap_or_else(|| panic!("{label} not in the legend"));
            assert!(f64::from(*x) > area.left + area.width, "the legend is right of the plot: {x} {area:?}");
        }
        // Every stack's colour is drawn: a solid line in one path, a dashed
        // one in many dashes, whose gaps show the earlier line.
        for c in &chart.curves {
            let pieces = log.paths.iter().filter(|(colour, _, _)| *colour == c.colour).count();
            assert!(if c.dashed { pieces > 10 } else { pieces >= 2 }, "{}: {pieces} paths", c.label);
        }
    }
}
