//! The views of one device, sharing ONE time cursor and ONE selection: the
//! active memory timeline with its minimap and track (annotations, comment
//! markers, search matches), the segment timeline, and below them the
//! allocator state at the cursor, the fragmentation panel or the memory by
//! category, with search.
//! The state they share lives in [`context::DeviceContext`]; the URL
//! mirrors it ([`crate::core::permalink`]) so a link opens the same view.
//! Here: the layout of the views and the effects that keep the cursor's
//! state and the URL; how panels ask the server is in `fetch.rs`.

use leptos::prelude::*;

use crate::core::model::{Axis, Instant};
use crate::core::permalink::{self, PageState, Tab};
use crate::infra::api;
use crate::infra::first_view::FirstView;
use crate::infra::latest::latest;

mod breakdown;
pub(crate) mod context;
mod fetch;
mod fragmentation;
mod minimap;
pub(crate) mod panel;
mod pools;
mod search;
mod segments;
mod state;
mod timeline;
pub(crate) mod track;

pub(crate) use timeline::early::EarlyWindow;

/// The panels below the timelines: the tab, its button's id and label.
const TABS: [(Tab, &str, &str); 4] = [
    (Tab::State, "tab-state", "Allocator state"),
    (Tab::Fragmentation, "tab-fragmentation", "Fragmentation"),
    (Tab::Breakdown, "tab-breakdown", "Where the memory went"),
    (Tab::Pools, "tab-pools", "Memory pools"),
];

/// The views of device `device`, restored from `initial` (the link's state).
#[component]
pub(crate) fn DeviceViews(id: String, device: u32, initial: PageState) -> impl IntoView {
    let ctx = context::DeviceContext {
        id: StoredValue::new(id),
        device,
        axis: RwSignal::new(Some(initial.axis.unwrap_or(Axis::Event))),
        extent: RwSignal::new(None),
        view: RwSignal::new(None),
        memory: RwSignal::new(initial.memory),
        plot: RwSignal::new((0.0, 0.0)),
        instant: RwSignal::new(initial.cursor.map(Instant::Row)),
        state: RwSignal::new(None),
        selected: RwSignal::new(initial.selected),
        tab: RwSignal::new(initial.tab),
        query: RwSignal::new(initial.search.clone().unwrap_or_default()),
        matches: RwSignal::new(None),
        initial_window: StoredValue::new(initial.window),
    };

    // The allocator state follows the instant; answers to superseded
    // instants are dropped.
    let states = latest();
    let first_view = FirstView::current();
    Effect::new(move |_| {
        let Some(at) = ctx.instant.get() else { return };
        if !first_view.passed() {
            return;
        }
        let id = ctx.id.get_value();
        states.run(async move { api::state(&id, device, at).await }, move |answer| match answer {
            Ok(s) => ctx.state.set(Some(s)),
            Err(e) => leptos::logging::warn!("{e}"),
        });
    });

    // The URL mirrors the view (replaceState: no history entry per frame).
    Effect::new(move |_| {
        let page = PageState {
            device: Some(device),
            axis: ctx.axis.get(),
            window: ctx.view.get().filter(|v| ctx.extent.get() != Some(*v)),
            memory: ctx.memory.get(),
            cursor: ctx.state.with(|s| s.as_ref().and_then(|s| s.row)),
            selected: ctx.selected.get(),
            tab: ctx.tab.get(),
            search: Some(ctx.query.get()),
        };
        // Before the timeline has loaded, keep the link's own state.
        if ctx.extent.get_untracked().is_none() {
            return;
        }
        let Some(w) = web_sys::window() else { return };
        let path = w.location().pathname().unwrap_or_default();
        let url = format!("{path}{}", permalink::query(&page));
        if let Ok(history) = w.history() {
            let _ = history.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&url));
        }
    });

    view! {
        <timeline::Timeline ctx=ctx/>
        <segments::SegmentTimeline ctx=ctx/>
        <search::SearchBox ctx=ctx/>
        <div class="tabs" role="tablist">
            {TABS
                .iter()
                .map(|&(tab, id, label)| {
                    view! {
                        <button id=id class:active=move || ctx.tab.get() == tab on:click=move |_| ctx.tab.set(tab)>
                            {label}
                        </button>
                    }
                })
                .collect_view()}
        </div>
        {move || match ctx.tab.get() {
            Tab::State => view! { <state::StatePanel ctx=ctx/> }.into_any(),
            Tab::Fragmentation => view! { <fragmentation::FragmentationPanel ctx=ctx/> }.into_any(),
            Tab::Breakdown => view! { <breakdown::BreakdownPanel ctx=ctx/> }.into_any(),
            Tab::Pools => view! { <pools::PoolsPanel ctx=ctx/> }.into_any(),
        }}
    }
}
