//! The views of one device, sharing ONE time cursor and ONE selection: the
//! active memory timeline with its minimap and track (annotations, comment
//! markers, search matches), the segment timeline, and below them the
//! allocator state at the cursor or the fragmentation panel, with search.
//! The state they share lives in [`Shared`]; the URL mirrors it
//! ([`crate::core::permalink`]) so a link opens the same view.

use leptos::prelude::*;

use std::rc::Rc;

use crate::core::model::{AllocatorState, Axis, Instant, SearchAnswer};
use crate::core::permalink::{self, PageState, Selected, Tab};
use crate::core::viewport::{ByteRange, Window};
use crate::infra::api;
use crate::infra::canvas::Kept;
use crate::infra::latest::latest;
use crate::infra::redraw::Redraw;

/// What the views of a device share.
#[derive(Clone, Copy)]
pub(crate) struct Shared {
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

impl Shared {
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

/// The views of device `device`, restored from `initial` (the link's state).
#[component]
pub(crate) fn DeviceViews(id: String, device: u32, initial: PageState) -> impl IntoView {
    let shared = Shared {
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
    Effect::new(move |_| {
        let Some(at) = shared.instant.get() else { return };
        let id = shared.id.get_value();
        states.run(async move { api::state(&id, device, at).await }, move |answer| match answer {
            Ok(s) => shared.state.set(Some(s)),
            Err(e) => leptos::logging::warn!("{e}"),
        });
    });

    // The URL mirrors the view (replaceState: no history entry per frame).
    Effect::new(move |_| {
        let page = PageState {
            device: Some(device),
            axis: shared.axis.get(),
            window: shared.view.get().filter(|v| shared.extent.get() != Some(*v)),
            memory: shared.memory.get(),
            cursor: shared.state.with(|s| s.as_ref().and_then(|s| s.row)),
            selected: shared.selected.get(),
            tab: shared.tab.get(),
            search: Some(shared.query.get()),
        };
        // Before the timeline has loaded, keep the link's own state.
        if shared.extent.get_untracked().is_none() {
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
        <crate::timeline::Timeline shared=shared/>
        <crate::segments::SegmentTimeline shared=shared/>
        <crate::search::SearchBox shared=shared/>
        <div class="tabs" role="tablist">
            <button
                id="tab-state"
                class:active=move || shared.tab.get() == Tab::State
                on:click=move |_| shared.tab.set(Tab::State)
            >
                "Allocator state"
            </button>
            <button
                id="tab-fragmentation"
                class:active=move || shared.tab.get() == Tab::Fragmentation
                on:click=move |_| shared.tab.set(Tab::Fragmentation)
            >
                "Fragmentation"
            </button>
        </div>
        {move || match shared.tab.get() {
            Tab::State => view! { <crate::state::StatePanel shared=shared/> }.into_any(),
            Tab::Fragmentation => view! { <crate::fragmentation::FragmentationPanel shared=shared/> }.into_any(),
        }}
    }
}

/// The two triggers of a view that keeps its last real draw as an image
/// (`canvas::Kept`): a real draw whenever a signal
/// that `track_fresh` reads changes (new data, plot area or canvas); the
/// kept image moved whenever the shared window or cursor moves.
pub(crate) fn on_fresh_or_moved(shared: Shared, redraw: &Redraw, kept: Rc<Kept>, track_fresh: impl Fn() + 'static) {
    Effect::new({
        let redraw = redraw.clone();
        move |_| {
            track_fresh();
            kept.invalidate();
            redraw.request();
        }
    });
    let redraw = redraw.clone();
    Effect::new(move |_| {
        shared.view.track();
        shared.cursor_x();
        redraw.request();
    });
}
