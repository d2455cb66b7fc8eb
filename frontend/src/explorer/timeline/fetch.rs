//! The timeline's windows: what is asked of the server and when. A change
//! of the view (zoom, pan, a move by another view) is shown at once from
//! the data already here, and the window for it is fetched once the
//! changes pause ([`REFETCH_DEBOUNCE`]); answers to superseded requests are
//! dropped. Also the canvas's size, which sets the number of buckets, and
//! whether the trace has a time axis at all.

use std::sync::Arc;
use std::time::Duration;

use leptos::ev;
use leptos::prelude::*;
use leptos::task::spawn_local;

use super::early::EarlyWindow;
use super::{HEIGHT, MAX_ALLOCATIONS, Prepared, TimelineState, canvas_width, plot_px};
use crate::core::layout;
use crate::core::model::{Axis, Instant};
use crate::core::plot;
use crate::core::viewport::{ByteRange, Window};
use crate::infra::api::{self, TimelineQuery};
use crate::infra::draws;
use crate::infra::first_view::after_first_view;

/// The server's cap, asked for when zoomed on memory or down to single
/// events: there the window's allocations are bounded by the bytes shown
/// over the threshold, and the bars outside the byte band are not drawn,
/// so drawing stays cheap.
const SERVER_MAX_ALLOCATIONS: u32 = 5000;
/// How long zooming and panning must pause before a new window is fetched.
const REFETCH_DEBOUNCE: Duration = Duration::from_millis(150);

impl TimelineState {
    /// Ask for a window: `None` for the whole trace on the current axis,
    /// which also sets the extent and resets the view.
    pub(super) fn fetch(self, window: Option<Window>) {
        let TimelineState { ctx, width, geometry, data, loading, error, windows, schedule_fetch, first_view, .. } =
            self;
        let (axis, extent, view, y_zoom) = (ctx.axis, ctx.extent, ctx.view, ctx.memory);
        let px =
            geometry.get_value().map_or_else(|| plot_px(width.get_untracked()), |g| (g.width.round() as u32).max(50));
        // Before the first draw (a link's memory zoom) the plot's height
        // comes from its layout.
        let py = geometry.get_value().map_or(plot::plot_height(HEIGHT), |g| g.height.round() as u32);
        let y_span = y_zoom.get_untracked().map(|y| (y.span(), py));
        let narrow = window.is_some_and(|w| w.width() <= i64::from(px));
        let max_allocations = if y_span.is_some() || narrow { SERVER_MAX_ALLOCATIONS } else { MAX_ALLOCATIONS };
        let query =
            TimelineQuery { device: ctx.device, axis: axis.get_untracked(), window, px, max_allocations, y_span };
        loading.set(true);
        let snapshot = ctx.id.get_value();
        // The page's first window may be on its way already (`early`).
        let early = window.is_none().then(|| EarlyWindow::take(&query)).flatten();
        let ask = async move {
            if let Some(answer) = early
                && let Ok(answer) = answer.await
                && answer.as_ref().is_ok_and(|w| w.device == query.device)
            {
                return answer;
            }
            api::timeline(&snapshot, query).await
        };
        windows.run(ask, move |answer| {
            loading.set(false);
            match answer {
                Ok(w) => {
                    if window.is_none() {
                        axis.set(Some(w.axis));
                        let whole = Window::new(w.start, w.end);
                        extent.set(Some(whole));
                        // A link's window, once: shown from the whole
                        // trace's data until its own arrives.
                        match ctx.initial_window.try_update_value(Option::take).flatten() {
                            Some(linked) => {
                                let v = linked.clamp_into(whole);
                                view.set(Some(v));
                                schedule_fetch.set(Some(v));
                            }
                            None => view.set(Some(whole)),
                        }
                    }
                    let started = draws::now();
                    let bars = layout::stack(&w.allocations);
                    draws::record_detail("stack", &format!("{} allocations", w.allocations.len()), started);
                    data.set(Some(Arc::new(Prepared { window: w, bars })));
                    error.set(None);
                }
                Err(e) => {
                    error.set(Some(e.to_string()));
                    first_view.open();
                }
            }
        });
    }

    /// Fetch the view's window once the changes pause.
    pub(super) fn schedule(self) {
        if let Some(handle) = self.timer.get_value() {
            handle.clear();
        }
        let view = self.ctx.view;
        let handle = set_timeout_with_handle(
            move || {
                if let Some(v) = view.get_untracked() {
                    self.fetch(Some(v));
                }
            },
            REFETCH_DEBOUNCE,
        );
        self.timer.set_value(handle.ok());
    }

    /// Show window `w` (and fetch it once the changes pause).
    pub(super) fn set_view(self, w: Window) {
        if self.ctx.view.get_untracked() != Some(w) {
            self.ctx.view.set(Some(w));
            self.schedule();
        }
    }

    /// Zoom the time axis by `factor` around `anchor` (0 left, 1 right).
    pub(super) fn zoom(self, factor: f64, anchor: f64) {
        if let (Some(v), Some(e)) = (self.ctx.view.get_untracked(), self.ctx.extent.get_untracked()) {
            self.set_view(v.zoom(factor, anchor, e));
        }
    }

    /// Pan by a share of the window.
    pub(super) fn pan(self, fraction: f64) {
        if let (Some(v), Some(e)) = (self.ctx.view.get_untracked(), self.ctx.extent.get_untracked()) {
            self.set_view(v.pan(fraction, e));
        }
    }

    /// Zoom the byte axis by `factor` around `anchor` (0 bottom, 1 top).
    pub(super) fn zoom_y(self, factor: f64, anchor: f64) {
        let y_zoom = self.ctx.memory;
        let top = self.y_full.get_value();
        let now = y_zoom.get_untracked().unwrap_or(ByteRange { lo: 0, hi: top });
        let next = now.zoom(factor, anchor, top);
        if next != y_zoom.get_untracked() {
            y_zoom.set(next);
            self.schedule();
        }
    }

    /// The whole byte axis.
    pub(super) fn reset_y(self) {
        if self.ctx.memory.get_untracked().is_some() {
            self.ctx.memory.set(None);
            self.schedule();
        }
    }

    /// The whole trace, the whole byte axis.
    pub(super) fn reset(self) {
        self.reset_y();
        if let Some(e) = self.ctx.extent.get_untracked() {
            self.set_view(e);
        }
    }

    /// Show the trace on the other x axis.
    pub(super) fn switch_axis(self, to: Axis) {
        let ctx = self.ctx;
        if ctx.axis.get_untracked() == Some(to) {
            return;
        }
        // Rows and microseconds do not convert: start over on the new axis.
        ctx.axis.set(Some(to));
        ctx.extent.set(None);
        ctx.view.set(None);
        self.hovered.set(None);
        self.pinned.set(false);
        ctx.state.set(None);
        ctx.memory.set(None);
        self.fetch(None);
        // The cursor stays on its row, drawn at that row's place on the new axis.
        if let Some(row) = ctx.state.with_untracked(|s| s.as_ref().and_then(|s| s.row)) {
            ctx.instant.set(Some(Instant::Row(row)));
        }
    }

    /// Size the canvas to its container; whether its width changed.
    fn measure(self) -> bool {
        let Some(wrap) = self.wrap_ref.get_untracked() else { return false };
        let w = canvas_width(wrap.client_width());
        if w == self.width.get_untracked() {
            return false;
        }
        self.width.set(w);
        true
    }

    /// The fetching's triggers: the whole trace once the canvas is there,
    /// the view moved by another view, a link's window, a resize; and the
    /// probe for a time axis.
    pub(super) fn start_fetching(self) {
        let TimelineState { ctx, data, geometry, schedule_fetch, wrap_ref, time_available, timer, .. } = self;
        let view = ctx.view;
        // The window moved by another view (the minimap's brush, a range of
        // the track, a search match): fetch it as well.
        Effect::new(move |_| {
            let Some(v) = view.get() else { return };
            let fetched = data.with_untracked(|d| d.as_ref().map(|d| Window::new(d.window.start, d.window.end)));
            if ctx.extent.get_untracked().is_some() && fetched.is_some() && fetched != Some(v) {
                self.schedule();
            }
        });
        Effect::new(move |_| {
            if let Some(w) = schedule_fetch.get() {
                schedule_fetch.set(None);
                self.fetch(Some(w));
            }
        });
        // Size the canvas to its container, now and when the window resizes.
        Effect::new(move |started: Option<bool>| {
            if started == Some(true) || wrap_ref.get().is_none() {
                return started.unwrap_or(false);
            }
            self.measure();
            self.fetch(None);
            true
        });
        // Whether the trace records times (PyTorch 2.2+): a one-bucket window
        // on the time axis answers, or says there is none.
        after_first_view(move || {
            spawn_local(async move {
                let probe = TimelineQuery {
                    device: ctx.device,
                    axis: Some(Axis::Time),
                    window: None,
                    px: 1,
                    max_allocations: 0,
                    y_span: None,
                };
                let has_time = api::timeline(&ctx.id.get_value(), probe).await.is_ok();
                time_available.try_set(has_time);
            })
        });
        let resize = window_event_listener(ev::resize, move |_| {
            if self.measure() && view.get_untracked().is_some() {
                // The plot's width in pixels is the number of buckets.
                geometry.set_value(None);
                self.schedule();
            }
        });
        on_cleanup(move || {
            resize.remove();
            if let Some(handle) = timer.try_get_value().flatten() {
                handle.clear();
            }
        });
    }
}
