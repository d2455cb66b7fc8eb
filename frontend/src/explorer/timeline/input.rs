//! The timeline's input: pointing at an allocation (hover, click to pin),
//! clicking an instant (the cursor moves there), dragging to pan, the
//! wheel to zoom (with Shift, on memory), and the keyboard: arrows step
//! the cursor or pan, `+`/`−` and `]`/`[` zoom, `0` resets.

use leptos::ev;
use leptos::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{KeyboardEvent, MouseEvent, WheelEvent};

use super::{TimelineState, same};
use crate::core::axes;
use crate::core::layout;
use crate::core::model::{Instant, VisibleAllocation};
use crate::core::permalink::Selected;
use crate::core::viewport::Window;

/// Zoom step of the keyboard and the buttons.
pub(super) const ZOOM_STEP: f64 = 1.5;
/// Pan step of the arrow keys, as a share of the window.
const PAN_STEP: f64 = 0.1;

/// A drag in progress.
#[derive(Clone, Copy, Debug)]
struct Drag {
    client_x: f64,
    view: Window,
    moved: bool,
}

/// The canvas's mouse handlers, and the drag they share with the window's.
#[derive(Clone, Copy)]
pub(super) struct Input {
    t: TimelineState,
    drag: StoredValue<Option<Drag>>,
    /// Whether the last drag moved the view: its mouseup is then no click.
    last_drag_moved: StoredValue<bool>,
}

/// Listen to the window (drags leaving the canvas, keys) while the timeline
/// lives; the canvas's own handlers are [`Input`]'s methods.
pub(super) fn listen(t: TimelineState) -> Input {
    let input = Input { t, drag: StoredValue::new(None), last_drag_moved: StoredValue::new(false) };
    let Input { drag, last_drag_moved, .. } = input;
    let drag_move = window_event_listener(ev::mousemove, move |e: MouseEvent| {
        let (Some(mut d), Some(g), Some(ext)) =
            (drag.get_value(), t.geometry.get_value(), t.ctx.extent.get_untracked())
        else {
            return;
        };
        let dx = f64::from(e.client_x()) - d.client_x;
        if dx.abs() < 3.0 && !d.moved {
            return;
        }
        d.moved = true;
        drag.set_value(Some(d));
        let shift = (-dx / g.width * d.view.width() as f64).round() as i64;
        t.set_view(d.view.shifted(shift, ext));
    });
    let drag_end = window_event_listener(ev::mouseup, move |_| {
        last_drag_moved.set_value(drag.get_value().is_some_and(|d| d.moved));
        drag.set_value(None);
    });
    let keys = window_event_listener(ev::keydown, move |e: KeyboardEvent| {
        if e.ctrl_key() || e.meta_key() || e.alt_key() || typing_in_a_field(&e) {
            return;
        }
        // Arrows step the cursor row by row once there is one; with Shift,
        // or without a cursor, they pan.
        match e.key().as_str() {
            "ArrowLeft" if e.shift_key() || !t.ctx.step(-1) => t.pan(-PAN_STEP),
            "ArrowRight" if e.shift_key() || !t.ctx.step(1) => t.pan(PAN_STEP),
            "ArrowLeft" | "ArrowRight" => {}
            "+" | "=" => t.zoom(1.0 / ZOOM_STEP, 0.5),
            "-" | "_" => t.zoom(ZOOM_STEP, 0.5),
            "]" => t.zoom_y(1.0 / ZOOM_STEP, 0.5),
            "[" => t.zoom_y(ZOOM_STEP, 0.5),
            "0" => t.reset(),
            _ => return,
        }
        e.prevent_default();
    });
    on_cleanup(move || {
        drag_move.remove();
        drag_end.remove();
        keys.remove();
    });
    input
}

impl Input {
    /// The allocation at a point of the canvas.
    fn allocation_at(self, x: f64, y: f64) -> Option<VisibleAllocation> {
        let g = self.t.geometry.get_value()?;
        self.t.data.with_untracked(|d| {
            let d = d.as_ref()?;
            let i = layout::hit(&d.bars, &g, x, y)?;
            d.window.allocations.get(d.bars.get(i)?.index).copied()
        })
    }

    /// Hover: the allocation under the mouse shows, unless one is pinned.
    pub(super) fn mouse_move(self, e: MouseEvent) {
        let hovered = self.t.hovered;
        if self.drag.get_value().is_some() || self.t.pinned.get_untracked() {
            return;
        }
        if let Some(found) = self.allocation_at(f64::from(e.offset_x()), f64::from(e.offset_y()))
            && hovered.get_untracked().is_none_or(|h| !same(&h, &found))
        {
            hovered.set(Some(found));
        }
    }

    /// A click: the cursor moves to the instant clicked, and the allocation
    /// there is pinned (or unpinned, clicked again).
    pub(super) fn click(self, e: MouseEvent) {
        let TimelineState { ctx, geometry, hovered, pinned, .. } = self.t;
        if self.last_drag_moved.get_value() {
            return;
        }
        let (x, y) = (f64::from(e.offset_x()), f64::from(e.offset_y()));
        // The cursor moves to the instant clicked.
        if let (Some(g), Some(v), Some(ax)) = (geometry.get_value(), ctx.view.get_untracked(), ctx.axis.get_untracked())
            && x >= g.left
            && x <= g.left + g.width
        {
            ctx.instant.set(Some(Instant::X(ax, axes::x_at(v, g.left, g.width, x))));
        }
        match self.allocation_at(x, y) {
            Some(found) => {
                let again = pinned.get_untracked() && hovered.get_untracked().is_some_and(|h| same(&h, &found));
                hovered.set(Some(found));
                pinned.set(!again);
                ctx.selected.set((!again).then_some(Selected { addr: found.addr, alloc_row: found.alloc_row }));
            }
            None => {
                pinned.set(false);
                ctx.selected.set(None);
            }
        }
    }

    /// The start of a drag (left button).
    pub(super) fn mouse_down(self, e: MouseEvent) {
        if e.button() != 0 {
            return;
        }
        if let Some(v) = self.t.ctx.view.get_untracked() {
            self.drag.set_value(Some(Drag { client_x: f64::from(e.client_x()), view: v, moved: false }));
        }
    }

    /// The wheel zooms on time around the mouse; with Shift, on memory.
    pub(super) fn wheel(self, e: WheelEvent) {
        let Some(g) = self.t.geometry.get_value() else { return };
        e.prevent_default();
        // Lines (Firefox) or pixels: about 100 pixels per notch.
        let delta = if e.delta_mode() == 1 { e.delta_y() * 33.0 } else { e.delta_y() };
        let factor = (delta * 0.002).exp().clamp(0.5, 2.0);
        if e.shift_key() {
            // Some systems turn Shift+wheel into a horizontal scroll.
            let delta = if delta == 0.0 { e.delta_x() } else { delta };
            self.t.zoom_y((delta * 0.002).exp().clamp(0.5, 2.0), g.y_fraction(f64::from(e.offset_y())));
            return;
        }
        self.t.zoom(factor, (f64::from(e.offset_x()) - g.left) / g.width);
    }
}

/// Whether a key went to a text field, where it must not move the plot.
fn typing_in_a_field(e: &KeyboardEvent) -> bool {
    e.target()
        .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
        .is_some_and(|el| matches!(el.tag_name().to_ascii_lowercase().as_str(), "input" | "textarea" | "select"))
}
