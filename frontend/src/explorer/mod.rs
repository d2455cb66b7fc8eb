//! The views of one device, sharing ONE time cursor and ONE selection: the
//! active memory timeline with its minimap and track (annotations, comment
//! markers, search matches), the segment timeline, and below them the
//! allocator state at the cursor, the fragmentation panel or the memory by
//! category, with search.
//! The state they share lives in [`DeviceContext`]; the URL mirrors it
//! ([`crate::core::permalink`]) so a link opens the same view.

use std::time::Duration;

use leptos::prelude::*;

use crate::core::model::{AllocatorState, Axis, Instant, SearchAnswer};
use crate::core::permalink::{self, PageState, Selected, Tab};
use crate::core::viewport::{ByteRange, Window};
use crate::infra::api;
use crate::infra::first_view::FirstView;
use crate::infra::latest::latest;

mod breakdown;
mod fragmentation;
mod minimap;
pub(crate) mod panel;
mod pools;
mod search;
mod segments;
mod state;
mod timeline;
pub(crate) mod track;

/// What the views of a device share: the snapshot and device, the axis and
/// window, the cursor and its allocator state, the selection, the panel
/// shown and the search. Every view of the device takes it as `ctx`.
#[derive(Clone, Copy)]
pub(crate) struct DeviceContext {
    /// Snapshot id.
    pub(crate) id: StoredValue<String>,
    /// CUDA device.
    pub(crate) device: u32,
    /// x axis (set once the timeline knows it).
    pub(crate) axis: RwSignal<Option<Axis>>,
    /// The whole trace on that axis.
    pub(crate) extent: RwSignal<Option<Window>>,
    /// The visible window.
    pub(crate) view: RwSignal<Option<Window>>,
    /// The timeline's memory zoom: the byte band its y axis shows (`None`:
    /// 0 to the data's top).
    pub(crate) memory: RwSignal<Option<ByteRange>>,
    /// The timeline's plot area: left and width in CSS pixels, which the
    /// other canvases line up with.
    pub(crate) plot: RwSignal<(f64, f64)>,
    /// The instant asked for (a click, an arrow key, a link).
    pub(crate) instant: RwSignal<Option<Instant>>,
    /// The allocator's state at that instant, once loaded.
    pub(crate) state: RwSignal<Option<AllocatorState>>,
    /// The selected (pinned) allocation.
    pub(crate) selected: RwSignal<Option<Selected>>,
    /// The panel below the timelines.
    pub(crate) tab: RwSignal<Tab>,
    /// The search's text, and its answer.
    pub(crate) query: RwSignal<String>,
    /// The search's answer.
    pub(crate) matches: RwSignal<Option<SearchAnswer>>,
    /// A window from the link, for the timeline's first load.
    pub(crate) initial_window: StoredValue<Option<Window>>,
}

impl DeviceContext {
    /// x of the cursor on the current axis, once its state is loaded.
    pub(crate) fn cursor_x(&self) -> Option<i64> {
        let axis = self.axis.get()?;
        self.state.with(|s| {
            let s = s.as_ref()?;
            match axis {
                Axis::Event => Some(s.row.map_or(-1, i64::from)),
                Axis::Time => s.time_us.or_else(|| self.extent.get().map(|e| e.start - 1)),
            }
        })
    }

    /// Move the cursor one row back (`-1`) or on (`1`); false when there is
    /// no cursor to move.
    pub(crate) fn step(&self, by: i64) -> bool {
        let Some((row, rows)) = self.state.with_untracked(|s| s.as_ref().map(|s| (s.row, s.rows))) else {
            return false;
        };
        let next = row.map_or(-1, i64::from) + by;
        if next >= 0 && next < i64::from(rows) {
            self.instant.set(Some(Instant::Row(next as u32)));
        }
        true
    }
}

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
    let ctx = DeviceContext {
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

/// The requests of a panel that answers "at the cursor" and "over the whole
/// trace" (breakdown, pools): `fetch(id, device, row, px)` is asked once
/// with `px` for the series (row `None`: the end), then at every cursor row
/// without it, the latest answer winning. `on_series` gets the first
/// answer, `on_row` the others; failures go to `error`.
pub(crate) fn series_and_cursor<T, F, Fut>(
    ctx: DeviceContext,
    px: u32,
    fetch: F,
    on_series: impl Fn(T) + Copy + 'static,
    on_row: impl Fn(T) + Copy + 'static,
    error: RwSignal<Option<String>>,
) where
    T: 'static,
    F: Fn(String, u32, Option<u32>, Option<u32>) -> Fut + Copy + 'static,
    Fut: std::future::Future<Output = Result<T, api::ApiError>> + 'static,
{
    Effect::new(move |_| {
        let request = fetch(ctx.id.get_value(), ctx.device, None, Some(px));
        leptos::task::spawn_local(async move {
            match request.await {
                Ok(a) => on_series(a),
                Err(e) => error.set(Some(e.to_string())),
            }
        });
    });
    let answers = latest();
    Effect::new(move |_| {
        let Some(row) = ctx.state.with(|s| s.as_ref().map(|s| s.row)) else { return };
        answers.run(fetch(ctx.id.get_value(), ctx.device, row, None), move |answer| match answer {
            Ok(a) => {
                on_row(a);
                error.set(None);
            }
            Err(e) => error.set(Some(e.to_string())),
        });
    });
}

/// How long the window must settle before a windowed panel asks again.
const SETTLE: Duration = Duration::from_millis(200);

/// What a panel over the visible window holds (segments, fragmentation):
/// its latest answer, the last failure, and whether a request is out.
#[derive(Clone, Copy)]
pub(crate) struct Settled<T: 'static> {
    /// The latest answer.
    pub(crate) data: RwSignal<Option<T>>,
    /// The last request's failure, cleared by an answer.
    pub(crate) error: RwSignal<Option<String>>,
    /// Whether a request is out.
    pub(crate) loading: RwSignal<bool>,
}

/// Ask `fetch(id, window query, columns)` for each window once it has
/// settled for [`SETTLE`], the latest request winning; `columns` says how
/// many columns the plot's width is worth (`None`: ask nothing yet).
pub(crate) fn fetch_settled<T, F, Fut>(
    ctx: DeviceContext,
    columns: impl Fn(f64) -> Option<u32> + 'static,
    fetch: F,
) -> Settled<T>
where
    T: Send + Sync + 'static,
    F: Fn(String, api::WindowQuery, u32) -> Fut + Copy + 'static,
    Fut: std::future::Future<Output = Result<T, api::ApiError>> + 'static,
{
    let settled = Settled { data: RwSignal::new(None), error: RwSignal::new(None), loading: RwSignal::new(false) };
    let answers = latest();
    let timer = StoredValue::new(None::<TimeoutHandle>);
    Effect::new(move |_| {
        let (Some(v), Some(axis), (_, width)) = (ctx.view.get(), ctx.axis.get(), ctx.plot.get()) else {
            return;
        };
        let Some(columns) = columns(width) else { return };
        if let Some(t) = timer.get_value() {
            t.clear();
        }
        let query = api::WindowQuery { device: ctx.device, axis, window: Some(v) };
        let handle = set_timeout_with_handle(
            move || {
                let id = ctx.id.get_value();
                settled.loading.set(true);
                answers.run(fetch(id, query, columns), move |answer| {
                    settled.loading.set(false);
                    match answer {
                        Ok(a) => {
                            settled.data.set(Some(a));
                            settled.error.set(None);
                        }
                        Err(e) => settled.error.set(Some(e.to_string())),
                    }
                });
            },
            SETTLE,
        );
        timer.set_value(handle.ok());
    });
    settled
}
