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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use leptos::ev;
use leptos::prelude::*;
use leptos::task::spawn_local;
use plotters::prelude::IntoDrawingArea;
use plotters_canvas::CanvasBackend;
use wasm_bindgen::JsCast;
use web_sys::{KeyboardEvent, MouseEvent, WheelEvent};

use crate::core::format;
use crate::core::frames::{self, FrameRun};
use crate::core::hidpi::Scaled;
use crate::core::layout::{self, Bar, Geometry};
use crate::core::model::{Axis, EntryAnswer, Frame, Instant, TimelineWindow, VisibleAllocation};
use crate::core::permalink::Selected;
use crate::core::plot::{self, Scene};
use crate::core::viewport::{ByteRange, Window};
use crate::explorer::Shared;
use crate::infra::api::{self, TimelineQuery};
use crate::infra::canvas;
use crate::infra::draws;
use crate::infra::latest::latest;
use crate::infra::redraw;
use crate::minimap::Minimap;
use crate::track::Track;

/// Canvas height in pixels.
const HEIGHT: u32 = 440;
/// Most allocations asked for per window at an ordinary zoom.
const MAX_ALLOCATIONS: u32 = 2000;
/// The server's cap, asked for when zoomed on memory or down to single
/// events: there the window's allocations are bounded by the bytes shown
/// over the threshold, and the bars outside the byte band are not drawn,
/// so drawing stays cheap.
const SERVER_MAX_ALLOCATIONS: u32 = 5000;
/// How long zooming and panning must pause before a new window is fetched.
const REFETCH_DEBOUNCE: Duration = Duration::from_millis(150);
/// Width of the plot area outside the canvas's plot: the y labels and margins.
const PLOT_MARGIN_PX: u32 = 96;
/// Zoom step of the keyboard and the buttons.
const ZOOM_STEP: f64 = 1.5;
/// Pan step of the arrow keys, as a share of the window.
const PAN_STEP: f64 = 0.1;

/// A window from the API with its allocations stacked.
#[derive(Debug)]
struct Prepared {
    window: TimelineWindow,
    bars: Vec<Bar>,
}

/// A stack being fetched, or its answer.
#[derive(Clone, Debug, PartialEq)]
enum StackState {
    Loading,
    Loaded(Vec<Frame>),
    Failed(String),
}

/// A drag in progress.
#[derive(Clone, Copy, Debug)]
struct Drag {
    client_x: f64,
    view: Window,
    moved: bool,
}

/// The same allocation in two windows: one address and one alloc row.
fn same(a: &VisibleAllocation, b: &VisibleAllocation) -> bool {
    a.addr == b.addr && a.alloc_row == b.alloc_row && a.size == b.size
}

/// The timeline of the device of `shared`.
#[component]
pub(crate) fn Timeline(shared: Shared) -> impl IntoView {
    let id = shared.id;
    let device = shared.device;
    let canvas_ref = NodeRef::<leptos::html::Canvas>::new();
    let wrap_ref = NodeRef::<leptos::html::Div>::new();
    let width = RwSignal::new(0u32);
    // Event order first (unless a link says otherwise), as PyTorch's
    // viewer: activity is often bunched in a small part of the wall time.
    let axis = shared.axis;
    let time_available = RwSignal::new(false);
    let extent = shared.extent;
    let view = shared.view;
    let data = RwSignal::new(None::<Arc<Prepared>>);
    let geometry = StoredValue::new(None::<Geometry>);
    let hovered = RwSignal::new(None::<VisibleAllocation>);
    let pinned = RwSignal::new(false);
    let loading = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    let windows = latest();
    let timer = StoredValue::new(None::<TimeoutHandle>);
    let drag = StoredValue::new(None::<Drag>);
    let last_drag_moved = StoredValue::new(false);
    let stacks = RwSignal::new(HashMap::<u32, StackState>::new());
    let entries = RwSignal::new(HashMap::<u32, Result<EntryAnswer, String>>::new());
    let schedule_fetch = RwSignal::new(None::<Window>);
    // The byte band when zoomed on memory (`None`: 0 to the data's top),
    // and that top at the last draw, which a memory zoom stays inside.
    let y_zoom = shared.memory;
    let y_full = StoredValue::new(0u64);

    // Ask for a window: `None` for the whole trace on the current axis,
    // which also sets the extent and resets the view.
    let fetch = move |window: Option<Window>| {
        let px = geometry
            .get_value()
            .map_or_else(|| width.get_untracked().saturating_sub(PLOT_MARGIN_PX), |g| g.width.round() as u32)
            .max(50);
        // Before the first draw (a link's memory zoom) the plot's height
        // comes from its layout.
        let py = geometry.get_value().map_or(plot::plot_height(HEIGHT), |g| g.height.round() as u32);
        let y_span = y_zoom.get_untracked().map(|y| (y.span(), py));
        let narrow = window.is_some_and(|w| w.width() <= i64::from(px));
        let max_allocations = if y_span.is_some() || narrow { SERVER_MAX_ALLOCATIONS } else { MAX_ALLOCATIONS };
        let query = TimelineQuery { device, axis: axis.get_untracked(), window, px, max_allocations, y_span };
        loading.set(true);
        let snapshot = id.get_value();
        windows.run(async move { api::timeline(&snapshot, query).await }, move |answer| {
            loading.set(false);
            match answer {
                Ok(w) => {
                    if window.is_none() {
                        axis.set(Some(w.axis));
                        let whole = Window::new(w.start, w.end);
                        extent.set(Some(whole));
                        // A link's window, once: shown from the whole
                        // trace's data until its own arrives.
                        match shared.initial_window.try_update_value(Option::take).flatten() {
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
                Err(e) => error.set(Some(e.to_string())),
            }
        });
    };
    let schedule = move || {
        if let Some(handle) = timer.get_value() {
            handle.clear();
        }
        let handle = set_timeout_with_handle(
            move || {
                if let Some(v) = view.get_untracked() {
                    fetch(Some(v));
                }
            },
            REFETCH_DEBOUNCE,
        );
        timer.set_value(handle.ok());
    };
    let set_view = move |w: Window| {
        if view.get_untracked() != Some(w) {
            view.set(Some(w));
            schedule();
        }
    };
    // The window moved by another view (the minimap's brush, a range of
    // the track, a search match): fetch it as well.
    Effect::new(move |_| {
        let Some(v) = view.get() else { return };
        let fetched = data.with_untracked(|d| d.as_ref().map(|d| Window::new(d.window.start, d.window.end)));
        if extent.get_untracked().is_some() && fetched.is_some() && fetched != Some(v) {
            schedule();
        }
    });
    let zoom = move |factor: f64, anchor: f64| {
        if let (Some(v), Some(e)) = (view.get_untracked(), extent.get_untracked()) {
            set_view(v.zoom(factor, anchor, e));
        }
    };
    let pan = move |fraction: f64| {
        if let (Some(v), Some(e)) = (view.get_untracked(), extent.get_untracked()) {
            set_view(v.pan(fraction, e));
        }
    };
    // Zoom the byte axis by `factor` around `anchor` (0 bottom, 1 top).
    let zoom_y = move |factor: f64, anchor: f64| {
        let top = y_full.get_value();
        let now = y_zoom.get_untracked().unwrap_or(ByteRange { lo: 0, hi: top });
        let next = now.zoom(factor, anchor, top);
        if next != y_zoom.get_untracked() {
            y_zoom.set(next);
            schedule();
        }
    };
    let reset_y = move || {
        if y_zoom.get_untracked().is_some() {
            y_zoom.set(None);
            schedule();
        }
    };
    let reset = move || {
        reset_y();
        if let Some(e) = extent.get_untracked() {
            set_view(e);
        }
    };
    Effect::new(move |_| {
        if let Some(w) = schedule_fetch.get() {
            schedule_fetch.set(None);
            fetch(Some(w));
        }
    });
    let switch_axis = move |to: Axis| {
        if axis.get_untracked() == Some(to) {
            return;
        }
        // Rows and microseconds do not convert: start over on the new axis.
        axis.set(Some(to));
        extent.set(None);
        view.set(None);
        hovered.set(None);
        pinned.set(false);
        shared.state.set(None);
        y_zoom.set(None);
        fetch(None);
        // The cursor stays on its row, drawn at that row's place on the new axis.
        if let Some(row) = shared.state.with_untracked(|s| s.as_ref().and_then(|s| s.row)) {
            shared.instant.set(Some(Instant::Row(row)));
        }
    };

    // Size the canvas to its container, now and when the window resizes.
    let measure = move || {
        let Some(wrap) = wrap_ref.get_untracked() else { return false };
        let w = u32::try_from(wrap.client_width()).unwrap_or(0).max(320);
        if w == width.get_untracked() {
            return false;
        }
        width.set(w);
        true
    };
    Effect::new(move |started: Option<bool>| {
        if started == Some(true) || wrap_ref.get().is_none() {
            return started.unwrap_or(false);
        }
        measure();
        fetch(None);
        true
    });
    // Whether the trace records times (PyTorch 2.2+): a one-bucket window
    // on the time axis answers, or says there is none.
    spawn_local(async move {
        let probe =
            TimelineQuery { device, axis: Some(Axis::Time), window: None, px: 1, max_allocations: 0, y_span: None };
        let has_time = api::timeline(&id.get_value(), probe).await.is_ok();
        time_available.try_set(has_time);
    });
    let resize = window_event_listener(ev::resize, move |_| {
        if measure() && view.get_untracked().is_some() {
            // The plot's width in pixels is the number of buckets.
            geometry.set_value(None);
            schedule();
        }
    });

    // Draw whenever the data, the view, the size or the highlight change,
    // once per animation frame however many changes come before it.
    let redraw = redraw::Redraw::new(move || {
        let (Some(canvas), Some(v)) = (canvas_ref.get(), view.get()) else { return };
        let w = width.get();
        let hover = hovered.get();
        let origin = extent.get().map_or(v.start, |e| e.start);
        let cursor = shared.cursor_x();
        let y_range = y_zoom.get();
        data.with(|d| {
            let Some(d) = d else { return };
            let started = draws::now();
            // HiDPI: a backing store of devicePixelRatio × the CSS size;
            // plotters draws in CSS pixels through `Scaled`.
            let dpr = canvas::ratio();
            canvas.set_width((f64::from(w) * dpr).round() as u32);
            canvas.set_height((f64::from(HEIGHT) * dpr).round() as u32);
            let _ = canvas.set_attribute("style", &format!("width:{w}px;height:{HEIGHT}px"));
            let highlight = hover.and_then(|a| {
                d.bars.iter().position(|b| d.window.allocations.get(b.index).is_some_and(|x| same(x, &a)))
            });
            let marked: Vec<usize> = shared.matches.with(|m| {
                let Some(m) = m else { return Vec::new() };
                let keys: std::collections::HashSet<(u64, Option<u32>)> =
                    m.matches.iter().map(|x| (x.addr, x.alloc_row)).collect();
                (0..d.bars.len())
                    .filter(|&i| {
                        d.window.allocations.get(d.bars[i].index).is_some_and(|a| keys.contains(&(a.addr, a.alloc_row)))
                    })
                    .collect()
            });
            let scene =
                Scene { data: &d.window, bars: &d.bars, view: v, origin, highlight, marked: &marked, cursor, y_range };
            y_full.set_value(scene.y_max());
            let Some(backend) = CanvasBackend::with_canvas_object(canvas.clone()) else {
                error.set(Some("this browser gives no 2D drawing context for the canvas".to_owned()));
                return;
            };
            match plot::draw(&Scaled::new(backend, dpr).into_drawing_area(), &scene) {
                Ok(g) => {
                    geometry.set_value(Some(g));
                    if shared.plot.get_untracked() != (g.left, g.width) {
                        shared.plot.set((g.left, g.width));
                    }
                    draws::record("timeline", started);
                }
                Err(e) => error.set(Some(e)),
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
        shared.matches.track();
        y_zoom.track();
        shared.cursor_x();
        redraw.request();
    });

    // A selection from a link (or the state panel) pins its allocation once
    // a window lists it.
    Effect::new(move |_| {
        let Some(sel) = shared.selected.get() else { return };
        data.with(|d| {
            let Some(d) = d else { return };
            if hovered.get_untracked().is_some_and(|h| h.addr == sel.addr && h.alloc_row == sel.alloc_row) {
                return;
            }
            if let Some(a) = d.window.allocations.iter().find(|a| a.addr == sel.addr && a.alloc_row == sel.alloc_row) {
                hovered.set(Some(*a));
                pinned.set(true);
            }
        });
    });

    // The allocation at a point of the canvas.
    let allocation_at = move |x: f64, y: f64| -> Option<VisibleAllocation> {
        let g = geometry.get_value()?;
        data.with_untracked(|d| {
            let d = d.as_ref()?;
            let i = layout::hit(&d.bars, &g, x, y)?;
            d.window.allocations.get(d.bars.get(i)?.index).copied()
        })
    };
    let on_mousemove = move |e: MouseEvent| {
        if drag.get_value().is_some() || pinned.get_untracked() {
            return;
        }
        if let Some(found) = allocation_at(f64::from(e.offset_x()), f64::from(e.offset_y()))
            && hovered.get_untracked().is_none_or(|h| !same(&h, &found))
        {
            hovered.set(Some(found));
        }
    };
    let on_click = move |e: MouseEvent| {
        if last_drag_moved.get_value() {
            return;
        }
        let (x, y) = (f64::from(e.offset_x()), f64::from(e.offset_y()));
        // The cursor moves to the instant clicked.
        if let (Some(g), Some(v), Some(ax)) = (geometry.get_value(), view.get_untracked(), axis.get_untracked())
            && x >= g.left
            && x <= g.left + g.width
        {
            shared.instant.set(Some(Instant::X(ax, canvas::x_at(v, g.left, g.width, x))));
        }
        match allocation_at(x, y) {
            Some(found) => {
                let again = pinned.get_untracked() && hovered.get_untracked().is_some_and(|h| same(&h, &found));
                hovered.set(Some(found));
                pinned.set(!again);
                shared.selected.set((!again).then_some(Selected { addr: found.addr, alloc_row: found.alloc_row }));
            }
            None => {
                pinned.set(false);
                shared.selected.set(None);
            }
        }
    };
    let on_mousedown = move |e: MouseEvent| {
        if e.button() != 0 {
            return;
        }
        if let Some(v) = view.get_untracked() {
            drag.set_value(Some(Drag { client_x: f64::from(e.client_x()), view: v, moved: false }));
        }
    };
    let drag_move = window_event_listener(ev::mousemove, move |e: MouseEvent| {
        let (Some(mut d), Some(g), Some(ext)) = (drag.get_value(), geometry.get_value(), extent.get_untracked()) else {
            return;
        };
        let dx = f64::from(e.client_x()) - d.client_x;
        if dx.abs() < 3.0 && !d.moved {
            return;
        }
        d.moved = true;
        drag.set_value(Some(d));
        let shift = (-dx / g.width * d.view.width() as f64).round() as i64;
        set_view(d.view.shifted(shift, ext));
    });
    let drag_end = window_event_listener(ev::mouseup, move |_| {
        last_drag_moved.set_value(drag.get_value().is_some_and(|d| d.moved));
        drag.set_value(None);
    });
    let on_wheel = move |e: WheelEvent| {
        let Some(g) = geometry.get_value() else { return };
        e.prevent_default();
        // Lines (Firefox) or pixels: about 100 pixels per notch.
        let delta = if e.delta_mode() == 1 { e.delta_y() * 33.0 } else { e.delta_y() };
        let factor = (delta * 0.002).exp().clamp(0.5, 2.0);
        if e.shift_key() {
            // Some systems turn Shift+wheel into a horizontal scroll.
            let delta = if delta == 0.0 { e.delta_x() } else { delta };
            zoom_y((delta * 0.002).exp().clamp(0.5, 2.0), g.y_fraction(f64::from(e.offset_y())));
            return;
        }
        zoom(factor, (f64::from(e.offset_x()) - g.left) / g.width);
    };
    let keys = window_event_listener(ev::keydown, move |e: KeyboardEvent| {
        if e.ctrl_key() || e.meta_key() || e.alt_key() || typing_in_a_field(&e) {
            return;
        }
        // Arrows step the cursor row by row once there is one; with Shift,
        // or without a cursor, they pan.
        match e.key().as_str() {
            "ArrowLeft" if e.shift_key() || !shared.step(-1) => pan(-PAN_STEP),
            "ArrowRight" if e.shift_key() || !shared.step(1) => pan(PAN_STEP),
            "ArrowLeft" | "ArrowRight" => {}
            "+" | "=" => zoom(1.0 / ZOOM_STEP, 0.5),
            "-" | "_" => zoom(ZOOM_STEP, 0.5),
            "]" => zoom_y(1.0 / ZOOM_STEP, 0.5),
            "[" => zoom_y(ZOOM_STEP, 0.5),
            "0" => reset(),
            _ => return,
        }
        e.prevent_default();
    });
    on_cleanup(move || {
        resize.remove();
        drag_move.remove();
        drag_end.remove();
        keys.remove();
        if let Some(handle) = timer.try_get_value().flatten() {
            handle.clear();
        }
    });

    // Fetch the alloc entry of the allocation shown (stream, time, compile
    // context, user metadata), once per row.
    Effect::new(move |_| {
        let Some(row) = hovered.get().and_then(|a| a.alloc_row) else { return };
        if entries.with_untracked(|m| m.contains_key(&row)) {
            return;
        }
        spawn_local(async move {
            let answer = api::entry(&id.get_value(), device, row).await.map_err(|e| e.to_string());
            entries.try_update(|m| m.insert(row, answer));
        });
    });

    // Fetch the stack of the allocation shown, once per stack.
    Effect::new(move |_| {
        let Some(a) = hovered.get() else { return };
        if stacks.with_untracked(|m| m.contains_key(&a.stack)) {
            return;
        }
        stacks.update(|m| {
            m.insert(a.stack, StackState::Loading);
        });
        spawn_local(async move {
            let state = match api::stack(&id.get_value(), a.stack).await {
                Ok(frames) => StackState::Loaded(frames),
                Err(e) => StackState::Failed(e.to_string()),
            };
            stacks.try_update(|m| m.insert(a.stack, state));
        });
    });

    let status = move || {
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
    };

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
                        on:click=move |_| switch_axis(Axis::Time)
                    >
                        "Time"
                    </button>
                    <button
                        id="axis-event"
                        class:active=move || axis.get() == Some(Axis::Event)
                        on:click=move |_| switch_axis(Axis::Event)
                    >
                        "Event order"
                    </button>
                </div>
                <div class="group" role="group" aria-label="zoom">
                    <button title="Zoom in (+)" on:click=move |_| zoom(1.0 / ZOOM_STEP, 0.5)>
                        "+"
                    </button>
                    <button title="Zoom out (−)" on:click=move |_| zoom(ZOOM_STEP, 0.5)>
                        "−"
                    </button>
                    <button title="Whole trace (0)" on:click=move |_| reset()>
                        "Reset"
                    </button>
                </div>
                <div class="group" role="group" aria-label="memory zoom">
                    <button id="y-zoom-in" title="Zoom in on memory (] or Shift+wheel)" on:click=move |_| zoom_y(1.0 / ZOOM_STEP, 0.5)>
                        "Memory +"
                    </button>
                    <button id="y-reset" title="Whole memory axis" disabled=move || y_zoom.get().is_none() on:click=move |_| reset_y()>
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
                    on:mousemove=on_mousemove
                    on:mousedown=on_mousedown
                    on:click=on_click
                    on:wheel=on_wheel
                ></canvas>
            </div>
            <Track shared=shared/>
            <Minimap shared=shared/>
            <Legend axis=axis/>
            <Details hovered=hovered pinned=pinned axis=axis extent=extent stacks=stacks entries=entries/>
        </section>
    }
}

/// Whether a key went to a text field, where it must not move the plot.
fn typing_in_a_field(e: &KeyboardEvent) -> bool {
    e.target()
        .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
        .is_some_and(|el| matches!(el.tag_name().to_ascii_lowercase().as_str(), "input" | "textarea" | "select"))
}

#[component]
fn Legend(axis: RwSignal<Option<Axis>>) -> impl IntoView {
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
            {swatch("bars", "allocations", "The largest allocations of the window, stacked first-fit in allocation order")}
            {swatch("oom", "OOM", "An allocation failed")}
            {swatch("window-start", "trace start", "The ring buffer wrapped: history before this is lost")}
            <span class="axis-caption">{move || axis.get().map(plot::x_axis_caption)}</span>
            <span class="hint">"Bands: the range in each pixel column; lines: the value at its end. Scroll to zoom, Shift+scroll or ]/[ to zoom on memory (smaller allocations appear), drag or ←/→ to pan, 0 to reset."</span>
        </div>
    }
}

/// The allocation under the mouse (or pinned by a click) and its stack.
#[component]
fn Details(
    hovered: RwSignal<Option<VisibleAllocation>>,
    pinned: RwSignal<bool>,
    axis: RwSignal<Option<Axis>>,
    extent: RwSignal<Option<Window>>,
    stacks: RwSignal<HashMap<u32, StackState>>,
    entries: RwSignal<HashMap<u32, Result<EntryAnswer, String>>>,
) -> impl IntoView {
    move || {
        let Some(a) = hovered.get() else {
            return view! {
                <div class="details" id="details">
                    <p class="hint">"Point at an allocation to see its size, address and stack; click to pin it."</p>
                </div>
            }
            .into_any();
        };
        let ax = axis.get().unwrap_or(Axis::Event);
        let origin = extent.get().map_or(a.start, |e| e.start);
        let row = |r: Option<u32>| r.map(|r| format::grouped(u64::from(r)));
        // On the time axis, rows and times; on the event axis x is the row.
        let at = |r: u32, x: i64| match ax {
            Axis::Time => format!("row {} ({})", format::grouped(u64::from(r)), format::x_point(ax, x, origin)),
            Axis::Event => format!("row {}", format::grouped(u64::from(r))),
        };
        let born = match a.alloc_row {
            Some(r) => at(r, a.start),
            None => "before the trace began (a ghost: its alloc was lost when the ring buffer wrapped)".to_owned(),
        };
        let freed = match (a.free_requested_row, a.free_row) {
            (_, Some(f)) => {
                let requested = row(a.free_requested_row).filter(|_| a.free_requested_row != Some(f));
                let pending = requested.map(|q| format!(", requested at row {q}")).unwrap_or_default();
                format!("{}{pending}", at(f, a.end))
            }
            (Some(q), None) => format!("requested at row {}, still pending at the end", format::grouped(u64::from(q))),
            (None, None) => "still allocated when the snapshot was taken".to_owned(),
        };
        let lifetime = match ax {
            Axis::Time => format::duration_us(a.end - a.start),
            Axis::Event => format!("{} events", format::grouped((a.end - a.start).max(0) as u64)),
        };
        view! {
            <div class="details" id="details">
                <h3>
                    {format!("{} at {}", format::bytes(a.size), format::hex(a.addr))}
                    {move || pinned.get().then_some(view! { <span class="pin">"pinned — click it again to unpin"</span> })}
                </h3>
                <dl>
                    <dt>"size"</dt>
                    <dd>{format!("{} bytes", format::grouped(a.size))}</dd>
                    <dt>"address"</dt>
                    <dd><code>{format::hex(a.addr)}</code></dd>
                    <dt>"allocated"</dt>
                    <dd>{born}</dd>
                    <dt>"freed"</dt>
                    <dd>{freed}</dd>
                    <dt>"alive for"</dt>
                    <dd>{lifetime}</dd>
                    {move || {
                        let e = a.alloc_row.and_then(|r| entries.with(|m| m.get(&r).cloned()))?;
                        Some(match e {
                            Ok(e) => entry_facts(&e).into_any(),
                            Err(e) => view! { <dt>"entry"</dt><dd class="error">{e}</dd> }.into_any(),
                        })
                    }}
                </dl>
                <Stack stack=a.stack stacks=stacks/>
            </div>
        }
            .into_any()
    }
}

/// The alloc entry's own fields, for the details list.
fn entry_facts(e: &EntryAnswer) -> impl IntoView + use<> {
    let time = e.time_us.map(format::clock_us);
    let facts: Vec<(&'static str, String)> = [
        Some(("stream", format::hex(e.stream))),
        time.map(|t| ("wall time", t)),
        e.compile_context.clone().map(|c| ("compile context", c)),
        e.user_metadata.clone().map(|m| ("user metadata", m)),
    ]
    .into_iter()
    .flatten()
    .collect();
    facts.into_iter().map(|(k, v)| view! { <dt>{k}</dt><dd class="entry-fact">{v}</dd> }).collect_view()
}

#[component]
fn Stack(stack: u32, stacks: RwSignal<HashMap<u32, StackState>>) -> impl IntoView {
    move || {
        match stacks.with(|m| m.get(&stack).cloned()) {
        None | Some(StackState::Loading) => view! { <p class="hint">"Loading the stack…"</p> }.into_any(),
        Some(StackState::Failed(e)) => view! { <p class="notice error">{e}</p> }.into_any(),
        Some(StackState::Loaded(frames)) if frames.is_empty() => view! {
            <p class="hint" id="no-frames">
                "No frames were recorded for this allocation (history was recorded without stacks, or it came from C++ without Python on the stack)."
            </p>
        }
        .into_any(),
        Some(StackState::Loaded(frames)) => stack_list(frames, "stack").into_any(),
    }
    }
}

/// A stack's frames, innermost first, PyTorch's own frames folded.
pub(crate) fn stack_list(frames: Vec<Frame>, id: &'static str) -> impl IntoView + use<> {
    // Frames keep their numbers across runs, folded or not.
    let mut first = 1;
    let runs: Vec<AnyView> = frames::group(&frames)
        .into_iter()
        .map(|run| {
            let start = first;
            first += run.frames.len();
            run_view(run, start)
        })
        .collect();
    view! {
        <div class="stack" id=id>
            <h4>"Stack, innermost first"</h4>
            {runs}
        </div>
    }
}

fn frame_view(f: Frame) -> impl IntoView {
    view! {
        <li>
            <code class="fn">{f.name}</code>
            " "
            <span class="file">{format!("{}:{}", f.filename, f.line)}</span>
        </li>
    }
}

fn run_view(run: FrameRun, start: usize) -> AnyView {
    let n = run.frames.len();
    let items = run.frames.into_iter().map(frame_view).collect_view();
    let start = start.to_string();
    if run.torch {
        view! {
            <details class="torch-frames">
                <summary>{format!("{n} PyTorch frame{}", if n == 1 { "" } else { "s" })}</summary>
                <ol start=start>{items}</ol>
            </details>
        }
        .into_any()
    } else {
        view! { <ol class="user-frames" start=start>{items}</ol> }.into_any()
    }
}
