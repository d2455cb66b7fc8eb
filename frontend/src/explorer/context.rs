//! What the views of one device share: the snapshot and device, the axis
//! and window, the cursor and its allocator state, the selection, the
//! panel shown and the search ([`DeviceContext`]).

use leptos::prelude::*;

use crate::core::model::{AllocatorState, Axis, Instant, SearchAnswer};
use crate::core::permalink::{Selected, Tab};
use crate::core::viewport::{ByteRange, Window};

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
