//! The minimap: the whole trace's reserved and allocated curves drawn
//! small, with the visible window as a brush. Drag the brush to pan; click
//! elsewhere to centre the window there.

use leptos::ev;
use leptos::prelude::*;
use leptos::task::spawn_local;
use web_sys::MouseEvent;

use crate::core::brush;
use crate::core::minimap_chart::{self, HEIGHT};
use crate::core::model::TimelineWindow;
use crate::core::viewport::Window;
use crate::explorer::context::DeviceContext;
use crate::explorer::panel::PanelCanvas;
use crate::infra::api::{self, TimelineQuery};
use crate::infra::canvas;
use crate::infra::draws;

/// A brush drag in progress.
#[derive(Clone, Copy)]
struct Drag {
    client_x: f64,
    view: Window,
}

/// The minimap of the device of `ctx`.
#[component]
pub(crate) fn Minimap(ctx: DeviceContext) -> impl IntoView {
    let map = MinimapView { ctx, canvas: PanelCanvas::new(), whole: RwSignal::new(None), drag: StoredValue::new(None) };
    map.fetch();
    Effect::new(move |_| map.paint());
    map.follow_drags();

    view! {
        <div class="minimap-wrap" node_ref=map.canvas.wrap title="The whole trace: drag the box to pan, click to centre">
            <canvas id="minimap" node_ref=map.canvas.canvas on:mousedown=move |e| map.press(&e)></canvas>
        </div>
    }
}

/// The minimap's state: its canvas, the whole trace's curves and the drag
/// in progress.
#[derive(Clone, Copy)]
struct MinimapView {
    ctx: DeviceContext,
    canvas: PanelCanvas,
    whole: RwSignal<Option<TimelineWindow>>,
    drag: StoredValue<Option<Drag>>,
}

impl MinimapView {
    /// Ask for the whole trace at one bucket per pixel, once per axis and
    /// width.
    fn fetch(self) {
        let (ctx, whole) = (self.ctx, self.whole);
        Effect::new(move |_| {
            let (Some(axis), Some(_), (_, width)) = (ctx.axis.get(), ctx.extent.get(), ctx.plot.get()) else {
                return;
            };
            if width <= 0.0 {
                return;
            }
            let query = TimelineQuery {
                device: ctx.device,
                axis: Some(axis),
                window: None,
                px: (width as u32).max(50),
                max_allocations: 0,
                y_span: None,
            };
            spawn_local(async move {
                if let Ok(w) = api::timeline(&ctx.id.get_value(), query).await
                    && ctx.axis.try_get_untracked().flatten() == Some(w.axis)
                {
                    whole.set(Some(w));
                }
            });
        });
    }

    /// Draw the minimap (reading, so tracking, what it shows): the curves,
    /// the brush and the cursor.
    fn paint(self) {
        let ctx = self.ctx;
        let Some((canvas, at)) = self.canvas.aligned(ctx) else { return };
        let Some(extent) = ctx.extent.get() else { return };
        draws::timed("minimap", || {
            let cursor = ctx.cursor_x();
            self.whole.with(|w| {
                let whole = w.as_ref().map(|w| w.buckets.as_slice());
                canvas::paint(&canvas, at.css_w, HEIGHT, |p| minimap_chart::draw(p, &at, extent, whole, cursor))
            })
        });
    }

    /// A press: on the brush, a drag starts; elsewhere the window is
    /// centred there first.
    fn press(self, e: &MouseEvent) {
        let ctx = self.ctx;
        let (Some(v), Some(extent)) = (ctx.view.get_untracked(), ctx.extent.get_untracked()) else { return };
        let (left, width) = ctx.plot.get_untracked();
        let x = f64::from(e.offset_x()) - left;
        e.prevent_default();
        let v = if brush::on_brush(v, extent, width, x) {
            v
        } else {
            let centred = brush::centred_at(v, extent, width, x);
            ctx.view.set(Some(centred));
            centred
        };
        self.drag.set_value(Some(Drag { client_x: f64::from(e.client_x()), view: v }));
    }

    /// Follow a drag anywhere on the page until the button is released.
    fn follow_drags(self) {
        let (ctx, drag) = (self.ctx, self.drag);
        let moving = window_event_listener(ev::mousemove, move |e: MouseEvent| {
            let (Some(d), Some(extent)) = (drag.get_value(), ctx.extent.get_untracked()) else { return };
            let (_, width) = ctx.plot.get_untracked();
            let next = brush::dragged(d.view, extent, width, f64::from(e.client_x()) - d.client_x);
            if ctx.view.get_untracked() != Some(next) {
                ctx.view.set(Some(next));
            }
        });
        let released = window_event_listener(ev::mouseup, move |_| drag.set_value(None));
        on_cleanup(move || {
            moving.remove();
            released.remove();
        });
    }
}
