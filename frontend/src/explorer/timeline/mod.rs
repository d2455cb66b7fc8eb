//! The active memory timeline of one device: a `<canvas>` drawn with
//! plotters from `GET /timeline`, with zoom (wheel, `+`/`−`), pan (drag,
//! `←`/`→`), a choice of x axis (wall time or event order) and a details
//! panel for the allocation under the mouse.
//!
//! The byte axis zooms too (Shift+wheel, `]`/`[`): zooming on time alone
//! never reveals an allocation under one pixel row of the window's peak, so
//! the query then carries the byte span shown and the server lists
//! allocations down to half a row of *it*. With both zooms every allocation
//! is reachable: at a few rows and the narrowest span (512 bytes, a 1-byte
//! threshold) the window lists everything alive, up to the server's cap.
//!
//! Each change of the window is drawn at once from the data already here
//! (stretched or shifted, clipped), and a fresh window for the new range is
//! asked for once the changes pause: the last image stays up while it
//! loads, and answers to superseded requests are dropped.
//!
//! The parts: [`fetch`] (which windows are asked for, and when), [`early`]
//! (the page's first window, asked for before the timeline is built), [`input`]
//! (mouse, wheel and keys), [`details`] (the allocation shown and its
//! stack); this module holds their shared state ([`TimelineState`]), the
//! drawing and the panel's layout.

mod details;
pub(crate) mod early;
mod fetch;
mod input;

use std::sync::Arc;

use leptos::prelude::*;

use self::details::Details;
use self::input::ZOOM_STEP;
use super::minimap::Minimap;
use super::track::Track;
use crate::core::format;
use crate::core::layout::{Bar, Geometry};
use crate::core::model::{Axis, MarkerKind, TimelineWindow, VisibleAllocation};
use crate::core::plot::{self, Scene};
use crate::core::viewport::Window;
use crate::explorer::context::DeviceContext;
use crate::infra::canvas;
use crate::infra::draws;
use crate::infra::first_view::FirstView;
use crate::infra::latest::{Latest, latest};
use crate::infra::redraw;

/// Canvas height in pixels.
const HEIGHT: u32 = 440;

/// Most allocations asked for per window at an ordinary zoom.
const MAX_ALLOCATIONS: u32 = 2000;

/// Width of the plot area outside the canvas's plot: the y labels and margins.
const PLOT_MARGIN_PX: u32 = 96;

/// The canvas's width for a container of client width `client_px`.
fn canvas_width(client_px: i32) -> u32 {
    u32::try_from(client_px).unwrap_or(0).max(320)
}

/// Buckets asked for a canvas `width` pixels wide, before its first draw
/// has measured the plot (`fetch`, and the page's early first window).
fn plot_px(width: u32) -> u32 {
    width.saturating_sub(PLOT_MARGIN_PX).max(50)
}

/// A window from the API with its allocations stacked.
#[derive(Debug)]
struct Prepared {
    window: TimelineWindow,
    bars: Vec<Bar>,
}

/// The same allocation in two windows: one address and one alloc row.
fn same(a: &VisibleAllocation, b: &VisibleAllocation) -> bool {
    a.addr == b.addr && a.alloc_row == b.alloc_row && a.size == b.size
}

/// The timeline's own state beside the device's ([`DeviceContext`]): what
/// its parts (fetching, input, drawing, details) share. Signals only, so
/// it is `Copy` into every closure.
#[derive(Clone, Copy)]
struct TimelineState {
    ctx: DeviceContext,
    canvas_ref: NodeRef<leptos::html::Canvas>,
    wrap_ref: NodeRef<leptos::html::Div>,
    /// The canvas's width in CSS pixels.
    width: RwSignal<u32>,
    /// Whether the trace records times.
    time_available: RwSignal<bool>,
    /// The last window fetched.
    data: RwSignal<Option<Arc<Prepared>>>,
    /// The plot area of the last draw, which the mouse is mapped through.
    geometry: StoredValue<Option<Geometry>>,
    /// The allocation shown in the details.
    hovered: RwSignal<Option<VisibleAllocation>>,
    /// Whether it was pinned by a click (hovering then changes nothing).
    pinned: RwSignal<bool>,
    loading: RwSignal<bool>,
    error: RwSignal<Option<String>>,
    /// The window requests: the latest wins.
    windows: Latest,
    /// The pending debounced fetch.
    timer: StoredValue<Option<TimeoutHandle>>,
    /// A window to fetch at once (a link's, once the whole trace is known).
    schedule_fetch: RwSignal<Option<Window>>,
    /// The data's top at the last draw, which a memory zoom stays inside.
    y_full: StoredValue<u64>,
    /// The page's gate, opened by the first window drawn (or failed).
    first_view: FirstView,
}

impl TimelineState {
    fn new(ctx: DeviceContext) -> Self {
        TimelineState {
            ctx,
            canvas_ref: NodeRef::new(),
            wrap_ref: NodeRef::new(),
            width: RwSignal::new(0),
            time_available: RwSignal::new(false),
            data: RwSignal::new(None),
            geometry: StoredValue::new(None),
            hovered: RwSignal::new(None),
            pinned: RwSignal::new(false),
            loading: RwSignal::new(false),
            error: RwSignal::new(None),
            windows: latest(),
            timer: StoredValue::new(None),
            schedule_fetch: RwSignal::new(None),
            y_full: StoredValue::new(0),
            first_view: FirstView::current(),
        }
    }

    /// Draw whenever the data, the view, the size or the highlight change,
    /// once per animation frame however many changes come before it.
    fn draw_on_change(self) {
        let TimelineState { ctx, canvas_ref, width, data, geometry, hovered, error, y_full, first_view, .. } = self;
        let (view, extent, y_zoom) = (ctx.view, ctx.extent, ctx.memory);
        let redraw = redraw::Redraw::new(move || {
            let (Some(canvas), Some(v)) = (canvas_ref.get(), view.get()) else { return };
            let w = width.get();
            let hover = hovered.get();
            let origin = extent.get().map_or(v.start, |e| e.start);
            let cursor = ctx.cursor_x();
            let y_range = y_zoom.get();
            data.with(|d| {
                let Some(d) = d else { return };
                let started = draws::now();
                let highlight = hover.and_then(|a| {
                    d.bars.iter().position(|b| d.window.allocations.get(b.index).is_some_and(|x| same(x, &a)))
                });
                let marked: Vec<usize> = ctx.matches.with(|m| {
                    let Some(m) = m else { return Vec::new() };
                    let keys: std::collections::HashSet<(u64, Option<u32>)> =
                        m.matches.iter().map(|x| (x.addr, x.alloc_row)).collect();
                    (0..d.bars.len())
                        .filter(|&i| {
                            d.window
                                .allocations
                                .get(d.bars[i].index)
                                .is_some_and(|a| keys.contains(&(a.addr, a.alloc_row)))
                        })
                        .collect()
                });
                let scene = Scene {
                    data: &d.window,
                    bars: &d.bars,
                    view: v,
                    origin,
                    highlight,
                    marked: &marked,
                    cursor,
                    y_range,
                };
                y_full.set_value(scene.y_max());
                match canvas::plot_on(&canvas, (w, HEIGHT), |root| plot::draw(root, &scene)) {
                    Ok(g) => {
                        geometry.set_value(Some(g));
                        if ctx.plot.get_untracked() != (g.left, g.width) {
                            ctx.plot.set((g.left, g.width));
                        }
                        draws::record("timeline", started);
                        first_view.open();
                    }
                    Err(e) => {
                        error.set(Some(e));
                        first_view.open();
                    }
                }
            });
        });
        Effect::new(move |_| {
            canvas_ref.track();
            view.track();
            width.track();
            hovered.track();
            extent.track();
            data.track();
            ctx.matches.track();
            y_zoom.track();
            ctx.cursor_x();
            redraw.request();
        });
    }

    /// A selection from a link (or the state panel) pins its allocation
    /// once a window lists it.
    fn follow_selection(self) {
        let TimelineState { ctx, data, hovered, pinned, .. } = self;
        Effect::new(move |_| {
            let Some(sel) = ctx.selected.get() else { return };
            data.with(|d| {
                let Some(d) = d else { return };
                if hovered.get_untracked().is_some_and(|h| h.addr == sel.addr && h.alloc_row == sel.alloc_row) {
                    return;
                }
                if let Some(a) =
                    d.window.allocations.iter().find(|a| a.addr == sel.addr && a.alloc_row == sel.alloc_row)
                {
                    hovered.set(Some(*a));
                    pinned.set(true);
                }
            });
        });
    }

    /// What the status line says: the window, the memory zoom, and how
    /// many allocations the bars are.
    fn status(self) -> String {
        let ctx = self.ctx;
        let (view, axis, extent, y_zoom, data) = (ctx.view, ctx.axis, ctx.extent, ctx.memory, self.data);
        let (Some(v), Some(ax)) = (view.get(), axis.get()) else { return String::new() };
        let origin = extent.get().map_or(v.start, |e| e.start);
        let range = match ax {
            Axis::Event => {
                format!("rows {} to {}", format::grouped(v.start.max(0) as u64), format::grouped(v.end.max(0) as u64))
            }
            Axis::Time => format!("{} to {}", format::x_point(ax, v.start, origin), format::x_point(ax, v.end, origin)),
        };
        // Says honestly whether the bars are all the allocations of the
        // window down to the threshold, or only the largest of them.
        let shown = data.with(|d| {
            d.as_ref().map(|d| {
                let n = d.window.allocations.len();
                let at_least = format::bytes(d.window.min_visible_size);
                if d.window.more_allocations {
                    let smallest = d.window.allocations.iter().map(|a| a.size).min().unwrap_or(0);
                    format!(
                        "largest {n} allocations shown (down to {}; more of at least {at_least}): zoom in time or \
                         memory for smaller ones",
                        format::bytes(smallest)
                    )
                } else {
                    format!("all {n} allocations ≥ {at_least} shown")
                }
            })
        });
        // Exact bytes once rounded ones would read alike (the plot's labels
        // then count from the bottom).
        let memory = y_zoom
            .get()
            .map(|y| {
                let exact = |b: u64| format!("{} B", format::grouped(b));
                let (lo, hi) = if y.span().saturating_mul(100) < y.hi {
                    (exact(y.lo), exact(y.hi))
                } else {
                    (format::bytes(y.lo), format::bytes(y.hi))
                };
                format!(" · memory {lo} to {hi}")
            })
            .unwrap_or_default();
        format!("{range}{memory} · {}", shown.unwrap_or_default())
    }
}

/// The timeline of the device of `ctx`.
#[component]
pub(crate) fn Timeline(ctx: DeviceContext) -> impl IntoView {
    let t = TimelineState::new(ctx);
    let TimelineState { canvas_ref, wrap_ref, time_available, hovered, pinned, loading, error, .. } = t;
    // Event order first (unless a link says otherwise), as PyTorch's
    // viewer: activity is often bunched in a small part of the wall time.
    let (axis, y_zoom) = (ctx.axis, ctx.memory);
    t.start_fetching();
    t.draw_on_change();
    t.follow_selection();
    let input = input::listen(t);
    let status = move || t.status();

    view! {
        <section class="timeline-panel">
            <div class="toolbar">
                <h2>"Active memory timeline"</h2>
                <div class="group" role="group" aria-label="x axis">
                    <button
                        id="axis-time"
                        class:active=move || axis.get() == Some(Axis::Time)
                        disabled=move || !time_available.get()
                        title=move || {
                            if time_available.get() { "Wall time" } else { "This trace records no times (PyTorch before 2.2)" }
                        }
                        on:click=move |_| t.switch_axis(Axis::Time)
                    >
                        "Time"
                    </button>
                    <button
                        id="axis-event"
                        class:active=move || axis.get() == Some(Axis::Event)
                        on:click=move |_| t.switch_axis(Axis::Event)
                    >
                        "Event order"
                    </button>
                </div>
                <div class="group" role="group" aria-label="zoom">
                    <button title="Zoom in (+)" on:click=move |_| t.zoom(1.0 / ZOOM_STEP, 0.5)>
                        "+"
                    </button>
                    <button title="Zoom out (−)" on:click=move |_| t.zoom(ZOOM_STEP, 0.5)>
                        "−"
                    </button>
                    <button title="Whole trace (0)" on:click=move |_| t.reset()>
                        "Reset"
                    </button>
                </div>
                <div class="group" role="group" aria-label="memory zoom">
                    <button id="y-zoom-in" title="Zoom in on memory (] or Shift+wheel)" on:click=move |_| t.zoom_y(1.0 / ZOOM_STEP, 0.5)>
                        "Memory +"
                    </button>
                    <button id="y-reset" title="Whole memory axis" disabled=move || y_zoom.get().is_none() on:click=move |_| t.reset_y()>
                        "Memory: all"
                    </button>
                </div>
                <span class="status" id="timeline-status">
                    {status}
                </span>
                <Show when=move || loading.get()>
                    <span class="loading" id="timeline-loading">
                        "loading…"
                    </span>
                </Show>
            </div>
            {move || error.get().map(|e| view! { <p class="notice error">{e}</p> })}
            <div class="canvas-wrap" node_ref=wrap_ref>
                <canvas
                    id="timeline"
                    node_ref=canvas_ref
                    width="960"
                    height=HEIGHT.to_string()
                    tabindex="0"
                    aria-label="Active memory timeline: scroll to zoom, drag or use the arrow keys to pan"
                    on:mousemove=move |e| input.mouse_move(e)
                    on:mousedown=move |e| input.mouse_down(e)
                    on:click=move |e| input.click(e)
                    on:wheel=move |e| input.wheel(e)
                ></canvas>
            </div>
            <Track ctx=ctx/>
            <Minimap ctx=ctx/>
            <Legend axis=axis data=t.data/>
            <Details ctx=ctx hovered=hovered pinned=pinned/>
        </section>
    }
}

#[component]
fn Legend(axis: RwSignal<Option<Axis>>, data: RwSignal<Option<Arc<Prepared>>>) -> impl IntoView {
    // A marker's key only when the window drawn has one of its kind, as in
    // the report's chart (`plot::has_marker`).
    let has = move |kind| data.with(|d| d.as_ref().is_some_and(|d| plot::has_marker(&d.window.markers, kind)));
    let swatch = |class: &'static str, label: &'static str, title: &'static str| {
        view! {
            <span class="key" title=title>
                <span class=format!("swatch {class}")></span>
                {label}
            </span>
        }
    };
    view! {
        <div class="legend">
            {swatch("reserved", "reserved", "Bytes reserved from CUDA (segments)")}
            {swatch("active", "active", "Requested bytes of allocated and pending-free blocks")}
            {swatch("allocated", "allocated", "Requested bytes of allocated blocks")}
            {swatch("bars", "allocations", "The largest allocations of the window, stacked first-fit in allocation order, coloured by stack. A thin bar across the whole trace is one allocated before the trace or never freed; point at it for its size and stack")}
            <Show when=move || has(MarkerKind::Oom)>{swatch("oom", "OOM", "An allocation failed")}</Show>
            <Show when=move || has(MarkerKind::WindowStart)>
                {swatch("window-start", "trace start", "The ring buffer wrapped: history before this is lost")}
            </Show>
            <span class="axis-caption">{move || axis.get().map(plot::x_axis_caption)}</span>
            <span class="hint">"Bands: the range in each pixel column; lines: the value at its end. A bar running across the whole chart is an allocation made before the trace or never freed. Scroll to zoom, Shift+scroll or ]/[ to zoom on memory (smaller allocations appear), drag or ←/→ to pan, 0 to reset."</span>
        </div>
    }
}
