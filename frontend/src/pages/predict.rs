//! "Will it fit?" under a job's ranks (`/jobs/{job}`): the job's snapshots
//! with a size each, a capacity and a step, and the answer of
//! `GET /api/v1/predict` as a chart and a table. The state and what it
//! asks are `core::predict`'s, the drawing `core::predict_chart`'s; this
//! only binds them to the page.

use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::core::format;
use crate::core::model::SnapshotMeta;
use crate::core::predict::{Outcome, PredictForm, curve_query};
use crate::core::predict_chart::x_title;
use crate::infra::api::{self, ListQuery};
use crate::infra::canvas::{chart_width, paint_predict};

/// The chart's height, pixels.
const HEIGHT: u32 = 360;

/// The section: loads the job's snapshots, then the form.
#[component]
pub(crate) fn WillItFit(job: String) -> impl IntoView {
    let snapshots = RwSignal::new(None::<Result<Vec<SnapshotMeta>, String>>);
    spawn_local(async move {
        let query = ListQuery { job, ..ListQuery::default() };
        let page = api::list(&query, None).await.map(|p| p.items).map_err(|e| e.to_string());
        snapshots.try_set(Some(page));
    });
    view! {
        <section class="panel predict" id="predict">
            <h2>"Will it fit?"</h2>
            <p class="hint">
                "Memory at sizes never run, from snapshots of this job recorded at a few sizes of one knob (batch size, sequence length…): give each snapshot its size, the memory the process may use, and press Predict. The largest size that fits is found by replaying candidates through the allocator model."
            </p>
            {move || match snapshots.get() {
                None => view! { <p class="hint">"Loading…"</p> }.into_any(),
                Some(Err(e)) => view! { <p class="notice error">{e}</p> }.into_any(),
                Some(Ok(list)) => view! { <PredictPanel snapshots=list/> }.into_any(),
            }}
        </section>
    }
}

/// The form and, once asked, the answer.
#[component]
fn PredictPanel(snapshots: Vec<SnapshotMeta>) -> impl IntoView {
    let form = RwSignal::new(PredictForm::new(&snapshots));
    let outcome = RwSignal::new(None::<Result<Outcome, String>>);
    let busy = RwSignal::new(false);
    let run = move |_| {
        let f = form.get_untracked();
        let search = match f.search_query() {
            Ok(q) => q,
            Err(e) => return outcome.set(Some(Err(e))),
        };
        busy.set(true);
        spawn_local(async move {
            let result = async {
                let report = api::predict(&search).await.map_err(|e| e.to_string())?;
                let curve = match curve_query(&search, &report) {
                    Some(q) => Some(api::predict(&q).await.map_err(|e| e.to_string())?),
                    None => None,
                };
                Ok(Outcome::new(report, curve, &f.key))
            }
            .await;
            outcome.try_set(Some(result));
            busy.try_set(false);
        });
    };
    view! {
        <KnobSelect form=form/>
        <RunTable form=form/>
        <p class="predict-settings">
            <label>"Capacity "
                <input id="predict-capacity" type="text" placeholder="e.g. 80GiB"
                    prop:value=move || form.with(|f| f.capacity.clone())
                    on:input=move |ev| form.update(|f| f.capacity = event_target_value(&ev))/>
            </label>
            " "
            <label>"Step "
                <input id="predict-step" type="text" placeholder="default: 1 (every size)" size="22"
                    prop:value=move || form.with(|f| f.step.clone())
                    on:input=move |ev| form.update(|f| f.step = event_target_value(&ev))/>
            </label>
            " "
            <button id="predict-run" on:click=run disabled=move || busy.get()>
                {move || if busy.get() { "Predicting…" } else { "Predict" }}
            </button>
        </p>
        {move || outcome.get().map(|o| match o {
            Err(e) => view! { <p class="notice error" id="predict-error">{e}</p> }.into_any(),
            Ok(o) => view! { <PredictAnswer outcome=o/> }.into_any(),
        })}
    }
}

/// The knob's select, when the tags name more than one.
#[component]
fn KnobSelect(form: RwSignal<PredictForm>) -> impl IntoView {
    let keys = form.with_untracked(|f| f.keys.clone());
    (keys.len() > 1).then(|| {
        view! {
            <p>
                <label>"Size from the tag "
                    <select id="predict-key" on:change=move |ev| form.update(|f| f.choose_key(&event_target_value(&ev)))>
                        {keys.into_iter().map(|k| view! { <option value=k.clone()>{k.clone()}</option> }).collect_view()}
                    </select>
                </label>
            </p>
        }
    })
}

/// The job's snapshots, each with its size box.
#[component]
fn RunTable(form: RwSignal<PredictForm>) -> impl IntoView {
    let rows = form.with_untracked(|f| f.rows.clone());
    view! {
        <table class="snapshots predict-runs">
            <thead>
                <tr>
                    <th>"Snapshot"</th>
                    <th>"Tags"</th>
                    <th>{move || form.with(|f| format!("Size ({})", f.key))}</th>
                </tr>
            </thead>
            <tbody>
                {rows.into_iter().enumerate().map(|(k, r)| {
                    let id = r.id.clone();
                    let tags: Vec<String> = r.sizes.iter().map(|(key, n)| format!("{key}={n}")).collect();
                    view! {
                        <tr>
                            <td class="name"><a href=format!("/snapshots/{}", api::encode(&r.id))>{r.name.clone()}</a></td>
                            <td>{tags.join(", ")}</td>
                            <td>
                                <input class="predict-size" type="text" size="8" placeholder="not used"
                                    prop:value=move || form.with(|f| f.rows.get(k).map(|r| r.size.clone()).unwrap_or_default())
                                    on:input=move |ev| form.update(|f| f.set_size(&id, &event_target_value(&ev)))/>
                            </td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
}

/// The chart, the verdict, the predictions and the notes.
#[component]
fn PredictAnswer(outcome: Outcome) -> impl IntoView {
    let canvas_ref = NodeRef::<leptos::html::Canvas>::new();
    let wrap_ref = NodeRef::<leptos::html::Div>::new();
    let error = RwSignal::new(None::<String>);
    let drawn = outcome.clone();
    Effect::new(move |_| {
        let Some(canvas) = canvas_ref.get() else { return };
        if let Err(e) = paint_predict(&canvas, chart_width(wrap_ref.get_untracked()), HEIGHT, &drawn) {
            error.set(Some(e));
        }
    });
    let r = &outcome.report;
    let facts = format!(
        "{} runs, {:.1}% of allocations matched, fit {}, confidence {}; settings {}.",
        r.runs.len(),
        r.matched_fraction * 100.0,
        r.fit,
        r.confidence,
        if r.alloc_conf.is_empty() { "PyTorch's defaults" } else { &r.alloc_conf }
    );
    let largest = r.largest_fitting_size;
    view! {
        <p id="predict-verdict" class="notice">{outcome.verdict()}</p>
        <p class="hint">{facts}</p>
        {move || error.get().map(|e| view! { <p class="notice error">{e}</p> })}
        <div class="canvas-wrap" node_ref=wrap_ref>
            <canvas id="predict-canvas" node_ref=canvas_ref></canvas>
        </div>
        <table class="snapshots" id="predict-table">
            <thead>
                <tr>
                    <th class="num">{x_title(&outcome.key)}</th>
                    <th class="num">"Reserved peak"</th>
                    <th class="num">"Allocated peak"</th>
                    <th>"Fits"</th>
                </tr>
            </thead>
            <tbody>
                {outcome.points.iter().map(|p| {
                    let peak = |n: u64| if p.oom { format!("≥ {}", format::bytes(n)) } else { format::bytes(n) };
                    let verdict = match (p.oom, largest == Some(p.size)) {
                        (false, true) => "yes: the largest that fits".to_owned(),
                        (false, false) => "yes".to_owned(),
                        (true, _) => format!("no: runs out ({} requested)", format::bytes(p.oom_requested_bytes.unwrap_or(0))),
                    };
                    view! {
                        <tr class:oom=p.oom class:largest=largest == Some(p.size)>
                            <td class="num">{p.size}</td>
                            <td class="num">{peak(p.reserved_peak_bytes)}</td>
                            <td class="num">{peak(p.allocated_peak_bytes)}</td>
                            <td>{verdict}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
        <ul class="notes" id="predict-notes">
            {r.notes.iter().map(|n| view! { <li>{n.clone()}</li> }).collect_view()}
        </ul>
    }
}
