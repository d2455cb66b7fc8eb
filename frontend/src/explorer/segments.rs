//! The segment timeline ("segment split") under the active memory
//! timeline, on the same x axis: per column, the segments alive then,
//! stacked by address and each as tall as its bytes, split into requested
//! bytes of allocated blocks, rounding waste, pending frees and free
//! blocks; expandable segments outlined as mapped ranges. Hover names the
//! segment; a click moves the cursor there.

use leptos::prelude::*;
use web_sys::MouseEvent;

use crate::core::blocks;
use crate::core::model::{Instant, SegmentsAnswer};
use crate::core::panel::Aligned;
use crate::core::segments_chart::{self, HEIGHT, PLOT_TOP};
use crate::core::viewport::{self, Window};
use crate::explorer::context::DeviceContext;
use crate::explorer::fetch::Settled;
use crate::explorer::panel::PanelCanvas;
use crate::infra::api;
use crate::infra::canvas::{self, Canvas2d};

/// Columns per pixel asked for: one column every few pixels.
const PX_PER_COLUMN: f64 = 3.0;

/// The segment timeline of the device of `ctx`.
#[component]
pub(crate) fn SegmentTimeline(ctx: DeviceContext) -> impl IntoView {
    // New columns for each settled window.
    let Settled { data, error, loading } = super::fetch::fetch_settled(
        ctx,
        |width| (width > 0.0).then(|| viewport::columns(width, PX_PER_COLUMN, 600)),
        |id, query, columns| async move { api::segments(&id, query, columns).await },
    );
    let view = Segments { ctx, canvas: PanelCanvas::new(), data, drawn_view: StoredValue::new(None) };
    let hover = RwSignal::new(None::<String>);
    super::panel::keep_drawn(ctx, view.canvas, data, move |kept| view.paint(kept));

    view! {
        <section class="segments-panel">
            <div class="toolbar">
                <h2>"Segment timeline"</h2>
                <span class="legend">
                    <span class="key"><span class="swatch seg-allocated"></span>"allocated (requested)"</span>
                    <span class="key"><span class="swatch seg-waste"></span>"rounding waste"</span>
                    <span class="key"><span class="swatch seg-pending"></span>"pending free"</span>
                    <span class="key"><span class="swatch seg-inactive"></span>"free (inactive)"</span>
                    <span class="key"><span class="swatch seg-expandable"></span>"expandable: mapped"</span>
                    <span class="axis-caption">"y: segments stacked by address, each as tall as its bytes; x: the timeline's"</span>
                </span>
                <Show when=move || loading.get()>
                    <span class="loading" id="segments-loading">"loading…"</span>
                </Show>
            </div>
            {move || error.get().map(|e| view! { <p class="notice error">{e}</p> })}
            <div class="canvas-wrap" node_ref=view.canvas.wrap>
                <canvas
                    id="segments"
                    node_ref=view.canvas.canvas
                    aria-label="Segment timeline: each segment's bytes split into allocated, waste, pending free and free; click to move the cursor"
                    on:mousemove=move |e| hover.set(view.describe(&e).map(|(t, _)| t))
                    on:mouseleave=move |_| hover.set(None)
                    on:click=move |e| {
                        if let Some((_, at)) = view.describe(&e) {
                            ctx.instant.set(Some(at));
                        }
                    }
                ></canvas>
            </div>
            <p class="hint" id="segments-hover">
                {move || hover.get().unwrap_or_else(|| "Point at a segment for its figures; click to see the allocator's state there.".to_owned())}
            </p>
        </section>
    }
}

/// The segment timeline's state: its canvas, the columns shown and the
/// window their image was drawn for.
#[derive(Clone, Copy)]
struct Segments {
    ctx: DeviceContext,
    canvas: PanelCanvas,
    data: RwSignal<Option<SegmentsAnswer>>,
    /// The window the shown image was drawn for (the rectangles' window).
    drawn_view: StoredValue<Option<Window>>,
}

impl Segments {
    /// Paint the canvas: the kept image (drawn anew when stale), the
    /// cursor, the x axis and the labels.
    fn paint(&self, kept: &canvas::Kept) {
        let ctx = self.ctx;
        self.data.with_untracked(|d| {
            let Some(d) = d else { return };
            if Some(d.axis) != ctx.axis.get_untracked() {
                return;
            }
            let draw = |p: &mut Canvas2d<'_>, at: &Aligned| {
                segments_chart::draw_columns(p, d, at.view, at.plot());
            };
            self.canvas.paint_kept(ctx, kept, (HEIGHT, "segments"), draw, |p, at, image_view| {
                self.drawn_view.set_value(Some(image_view));
                let origin = ctx.extent.get_untracked().map_or(at.view.start, |e| e.start);
                segments_chart::draw_overlay(p, d, at, ctx.cursor_x(), origin);
            });
        });
    }

    /// The segment under the mouse: what to say of it, and the instant a
    /// click moves the cursor to.
    fn describe(&self, e: &MouseEvent) -> Option<(String, Instant)> {
        let (px, py) = (f64::from(e.offset_x()), f64::from(e.offset_y()));
        let plot = self.ctx.plot.get_untracked();
        let px = blocks::px_on_image(self.drawn_view.get_value(), self.ctx.view.get_untracked(), plot, px);
        self.data.with_untracked(|d| {
            let d = d.as_ref()?;
            let (x, w, h) = segments_chart::placement(d, self.drawn_view.get_value()?, plot);
            let (column, cell) = blocks::segment_hit(d, x, w, h, px, py - PLOT_TOP)?;
            blocks::segment_hover(d, column, &cell)
        })
    }
}
