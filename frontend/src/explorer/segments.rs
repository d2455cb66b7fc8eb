//! The segment timeline ("segment split") under the active memory
//! timeline, on the same x axis: per column, the segments alive then,
//! stacked by address and each as tall as its bytes, split into requested
//! bytes of allocated blocks, rounding waste, pending frees and free
//! blocks; expandable segments outlined as mapped ranges. Hover names the
//! segment; a click moves the cursor there.

use leptos::prelude::*;
use web_sys::{CanvasRenderingContext2d, MouseEvent};

use crate::core::blocks;
use crate::core::format;
use crate::core::model::{Instant, SegmentsAnswer};
use crate::core::palette;
use crate::core::panel::Aligned;
use crate::core::viewport::{self, Window};
use crate::explorer::context::DeviceContext;
use crate::explorer::fetch::Settled;
use crate::explorer::panel::PanelCanvas;
use crate::infra::api;
use crate::infra::canvas;

/// Height of the canvas.
const HEIGHT: f64 = 188.0;
/// Top of the x axis' band, under the plot.
const AXIS_TOP: f64 = HEIGHT - canvas::ROW_AXIS_HEIGHT;
/// Top of the plot: the labels' band is above it.
const PLOT_TOP: f64 = 14.0;
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
            let draw = |c: &CanvasRenderingContext2d, at: &Aligned| draw_columns(c, d, at.view, at.plot());
            self.canvas.paint_kept(ctx, kept, (HEIGHT, "segments"), draw, |canvas_ctx, at, image_view| {
                self.drawn_view.set_value(Some(image_view));
                overlay(canvas_ctx, ctx, d, at);
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
            let (x, w, h) = placement(d, self.drawn_view.get_value()?, plot);
            let (column, cell) = blocks::segment_hit(d, x, w, h, px, py - PLOT_TOP)?;
            blocks::segment_hover(d, column, &cell)
        })
    }
}

/// Over the image: the cursor, the x axis (the main timeline's, drawn
/// fresh over its band: a moved image stretches the old labels with it)
/// and the labels.
fn overlay(canvas_ctx: &CanvasRenderingContext2d, ctx: DeviceContext, d: &SegmentsAnswer, at: &Aligned) {
    let Aligned { view: v, left, width, css_w } = *at;
    if let Some(x) = at.visible(ctx.cursor_x()) {
        canvas::vline(canvas_ctx, palette::CURSOR.css(), canvas::x_px(v, left, width, x as f64), 0.0, AXIS_TOP, 1.0);
    }
    canvas::fill(canvas_ctx, palette::BACKGROUND.css(), 0.0, AXIS_TOP, css_w, HEIGHT - AXIS_TOP);
    let origin = ctx.extent.get_untracked().map_or(v.start, |e| e.start);
    let title = match d.axis {
        vramscope_shared::timeline::Axis::Event => "row",
        vramscope_shared::timeline::Axis::Time => "time",
    };
    canvas::x_axis(canvas_ctx, &canvas::XAxis { axis: d.axis, view: v, origin, left, width, y: AXIS_TOP, title });
    canvas::text(canvas_ctx, palette::LABEL.css(), &format!("{} peak", format::bytes(d.max_reserved)), 4.0, 24.0);
    canvas::text(canvas_ctx, palette::LABEL.css(), &format!("{} segments", d.segments.len()), 4.0, 38.0);
}

/// Where the columns of `d` go when placed at `view` in the plot area
/// `(left, width)`: the plot's left, width and height for
/// [`blocks::segment_shapes`], under the labels' band.
fn placement(d: &SegmentsAnswer, view: Window, (left, width): (f64, f64)) -> (f64, f64, f64) {
    let x0 = canvas::x_px(view, left, width, d.start as f64);
    let x1 = canvas::x_px(view, left, width, d.end as f64);
    (x0, x1 - x0, AXIS_TOP - PLOT_TOP - 4.0)
}

/// Draw the columns of `d` placed at `view` into the plot area `(left,
/// width)` of `ctx`: as pixels ([`blocks::segment_raster`]), then the
/// outlines of expandable segments' mapped ranges.
fn draw_columns(ctx: &CanvasRenderingContext2d, d: &SegmentsAnswer, view: Window, (left, width): (f64, f64)) {
    let placed = placement(d, view, (left, width));
    let dpr = canvas::ratio();
    let raster = blocks::segment_raster(d, placed, (left, width), dpr, |fill| fill.colour().bytes());
    if let Ok(image) = web_sys::ImageData::new_with_u8_clamped_array_and_sh(
        wasm_bindgen::Clamped(&raster.rgba),
        raster.width as u32,
        raster.height as u32,
    ) {
        // In device pixels: putImageData ignores the context's scaling.
        let _ = ctx.put_image_data(&image, (left * dpr).round(), (PLOT_TOP * dpr).round());
    }
    if !d.segments.iter().any(|s| s.expandable) {
        return;
    }
    let (x, w, h) = placed;
    let shapes = blocks::segment_shapes(d, x, w, h);
    canvas::clip_plot(ctx, left, width, AXIS_TOP);
    ctx.set_stroke_style_str(palette::COMMENT.css());
    ctx.set_line_width(1.0);
    ctx.begin_path();
    for r in shapes.iter().filter(|r| d.segments.get(r.segment).is_some_and(|s| s.expandable)) {
        ctx.rect(r.x + 0.5, r.y + PLOT_TOP + 0.5, r.w, r.h);
    }
    ctx.stroke();
    ctx.restore();
}
