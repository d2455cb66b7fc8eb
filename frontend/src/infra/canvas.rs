//! Plain 2D-canvas drawing for the page's small canvases (segment timeline,
//! allocator state, fragmentation, minimap, track) and the analysis charts: HiDPI backing stores,
//! the x mapping they share with the main timeline's plot area, and the
//! last real draw kept off screen ([`Drawn`]), shown shifted and stretched
//! while the window moves.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use wasm_bindgen::JsCast;
use web_sys::{CanvasRenderingContext2d, Element, HtmlCanvasElement};

use plotters::prelude::IntoDrawingArea;
use plotters_canvas::CanvasBackend;

use crate::core::chart::{self, Area, Chart};
use crate::core::panel;
use crate::core::predict::Outcome;
use crate::core::predict_chart;
use crate::core::viewport::Window;

/// `window.devicePixelRatio`, at least 1.
pub(crate) fn ratio() -> f64 {
    web_sys::window().map_or(1.0, |w| w.device_pixel_ratio()).max(1.0)
}

/// Size `canvas` to `css_w` × `css_h` CSS pixels with a backing store of
/// `devicePixelRatio` times that, and return its context scaled so that
/// drawing happens in CSS pixels. Clears it.
pub(crate) fn context(canvas: &HtmlCanvasElement, css_w: f64, css_h: f64) -> Option<CanvasRenderingContext2d> {
    let dpr = ratio();
    let (w, h) = ((css_w * dpr).round().max(1.0) as u32, (css_h * dpr).round().max(1.0) as u32);
    if canvas.width() != w {
        canvas.set_width(w);
    }
    if canvas.height() != h {
        canvas.set_height(h);
    }
    let _ = canvas.set_attribute("style", &format!("width:{css_w}px;height:{css_h}px"));
    let ctx = canvas.get_context("2d").ok()??.dyn_into::<CanvasRenderingContext2d>().ok()?;
    let _ = ctx.set_transform(dpr, 0.0, 0.0, dpr, 0.0, 0.0);
    ctx.clear_rect(0.0, 0.0, css_w, css_h);
    Some(ctx)
}

/// The width of a canvas's container in CSS pixels, at least
/// [`panel::MIN_WIDTH`].
pub(crate) fn css_width(wrap: &Element) -> f64 {
    panel::css_width(wrap.client_width(), panel::MIN_WIDTH)
}

/// Save the context and clip it to the plot area `left`..`left + width`
/// (restore it when done).
pub(crate) fn clip_plot(ctx: &CanvasRenderingContext2d, left: f64, width: f64, height: f64) {
    ctx.save();
    ctx.begin_path();
    ctx.rect(left, 0.0, width, height);
    ctx.clip();
}

/// A view's plot area as last drawn from real data, kept in an off-screen
/// canvas with the window it showed. While the window moves, the view shows
/// this image shifted and stretched (one `drawImage`), and draws for real
/// only when fresh data arrives: the real draw costs tens of milliseconds on
/// large snapshots, the image a fraction of one.
pub(crate) struct Drawn {
    image: HtmlCanvasElement,
    /// The window the image shows.
    pub(crate) view: Window,
    left: f64,
    width: f64,
    css_w: f64,
    height: f64,
    dpr: f64,
}

/// The kept image of a view and whether its data changed since the image
/// was drawn: the drawing state the segment and fragmentation views share.
pub(crate) struct Kept {
    drawn: RefCell<Option<Drawn>>,
    fresh: Cell<bool>,
}

impl Kept {
    /// Nothing kept yet: the first paint draws for real.
    pub(crate) fn new() -> Rc<Self> {
        Rc::new(Kept { drawn: RefCell::new(None), fresh: Cell::new(true) })
    }

    /// The data changed: the next paint draws for real.
    pub(crate) fn invalidate(&self) {
        self.fresh.set(true);
    }

    /// Paints `canvas` for `view`: the kept image, shifted and stretched,
    /// first drawn anew with `draw` (into the off-screen canvas, plot area
    /// `plot`) when the data changed or the page no longer fits the image.
    /// The canvas's context, for overlays, and the window the image shows.
    pub(crate) fn paint(
        &self,
        canvas: &HtmlCanvasElement,
        view: Window,
        plot: (f64, f64),
        css_w: f64,
        height: f64,
        draw: impl FnOnce(&CanvasRenderingContext2d),
    ) -> Option<(CanvasRenderingContext2d, Window)> {
        let mut image = self.drawn.borrow_mut();
        if self.fresh.replace(false) || !image.as_ref().is_some_and(|i| i.fits(plot, css_w)) {
            let (next, ctx) = Drawn::start(image.take(), view, plot, css_w, height)?;
            draw(&ctx);
            *image = Some(next);
        }
        let ctx = context(canvas, css_w, height)?;
        let shown = image.as_ref()?;
        shown.show(&ctx, view);
        Some((ctx, shown.view))
    }
}

impl Drawn {
    /// An off-screen canvas of `css_w` × `height` CSS pixels, cleared,
    /// reusing `old`'s; draw the plot area for `view` into the context.
    pub(crate) fn start(
        old: Option<Drawn>,
        view: Window,
        (left, width): (f64, f64),
        css_w: f64,
        height: f64,
    ) -> Option<(Drawn, CanvasRenderingContext2d)> {
        let image = match old {
            Some(d) => d.image,
            None => leptos::prelude::document().create_element("canvas").ok()?.dyn_into::<HtmlCanvasElement>().ok()?,
        };
        let ctx = context(&image, css_w, height)?;
        Some((Drawn { image, view, left, width, css_w, height, dpr: ratio() }, ctx))
    }

    /// Whether the image still fits the page: same plot area, size and ratio.
    pub(crate) fn fits(&self, (left, width): (f64, f64), css_w: f64) -> bool {
        self.left == left && self.width == width && self.css_w == css_w && self.dpr == ratio()
    }

    /// Draw the image into `ctx` (sized like it) as it falls in `view`: the
    /// part of its window still visible, shifted and stretched in place.
    pub(crate) fn show(&self, ctx: &CanvasRenderingContext2d, view: Window) {
        let (left, width) = (self.left, self.width);
        // The visible window's ends on the image, clamped to what it holds.
        let src0 = self.px_then(view, left).clamp(left, left + width);
        let src1 = self.px_then(view, left + width).clamp(left, left + width);
        if src1 - src0 < 1e-3 {
            return;
        }
        let dst0 = self.px_now(view, src0);
        let dst1 = self.px_now(view, src1);
        let _ = ctx.draw_image_with_html_canvas_element_and_sw_and_sh_and_dx_and_dy_and_dw_and_dh(
            &self.image,
            src0 * self.dpr,
            0.0,
            (src1 - src0) * self.dpr,
            self.height * self.dpr,
            dst0,
            0.0,
            dst1 - dst0,
            self.height,
        );
    }

    /// Where a pixel of the plot showing `view` was on the image.
    pub(crate) fn px_then(&self, view: Window, px: f64) -> f64 {
        let x = view.start as f64 + (px - self.left) / self.width.max(1.0) * view.width() as f64;
        self.left + (x - self.view.start as f64) / (self.view.width().max(1) as f64) * self.width
    }

    /// Where a pixel of the image lands on the plot showing `view`.
    fn px_now(&self, view: Window, px: f64) -> f64 {
        let x = self.view.start as f64 + (px - self.left) / self.width.max(1.0) * self.view.width() as f64;
        self.left + (x - view.start as f64) / (view.width().max(1) as f64) * self.width
    }
}

/// Fill a rectangle.
pub(crate) fn fill(ctx: &CanvasRenderingContext2d, colour: &str, x: f64, y: f64, w: f64, h: f64) {
    ctx.set_fill_style_str(colour);
    ctx.fill_rect(x, y, w, h);
}

/// A vertical line from `top` to `bottom`.
pub(crate) fn vline(ctx: &CanvasRenderingContext2d, colour: &str, x: f64, top: f64, bottom: f64, width: f64) {
    ctx.set_stroke_style_str(colour);
    ctx.set_line_width(width);
    ctx.begin_path();
    ctx.move_to(x.round() + 0.5, top);
    ctx.line_to(x.round() + 0.5, bottom);
    ctx.stroke();
}

/// Text at a point, 11 px.
pub(crate) fn text(ctx: &CanvasRenderingContext2d, colour: &str, s: &str, x: f64, y: f64) {
    ctx.set_font("11px sans-serif");
    ctx.set_fill_style_str(colour);
    let _ = ctx.fill_text(s, x, y);
}

/// Where x lands in a plot area `left`..`left + width` showing `view`.
pub(crate) fn x_px(view: Window, left: f64, width: f64, x: f64) -> f64 {
    left + view.fraction_of(x) * width
}

/// The x under a pixel of that plot area.
pub(crate) fn x_at(view: Window, left: f64, width: f64, px: f64) -> i64 {
    (view.start as f64 + (px - left) / width.max(1.0) * view.width() as f64).floor() as i64
}

/// Draw an analysis chart on `canvas`, sized to `width` × `height` pixels.
pub(crate) fn paint_chart(
    canvas: &HtmlCanvasElement,
    width: u32,
    height: u32,
    chart: &Chart,
    x_label: &dyn Fn(f64) -> String,
) -> Result<Area, String> {
    canvas.set_width(width.max(200));
    canvas.set_height(height);
    let backend = CanvasBackend::with_canvas_object(canvas.clone())
        .ok_or_else(|| "this browser gives no 2D drawing context for the canvas".to_owned())?;
    chart::draw(&backend.into_drawing_area(), chart, x_label)
}

/// Draw the "Will it fit?" chart on `canvas`, `width` × `height` pixels.
pub(crate) fn paint_predict(
    canvas: &HtmlCanvasElement,
    width: u32,
    height: u32,
    outcome: &Outcome,
) -> Result<(), String> {
    canvas.set_width(width.max(200));
    canvas.set_height(height);
    let backend = CanvasBackend::with_canvas_object(canvas.clone())
        .ok_or_else(|| "this browser gives no 2D drawing context for the canvas".to_owned())?;
    predict_chart::draw(&backend.into_drawing_area(), outcome)
}

/// The width available to a chart inside `wrap`, at least 320 pixels.
pub(crate) fn chart_width(wrap: Option<web_sys::HtmlDivElement>) -> u32 {
    wrap.map_or(1000, |w| u32::try_from(w.client_width()).unwrap_or(0)).max(320)
}

/// Width of the byte labels left of a small chart's plot ([`byte_axis`]).
pub(crate) const BYTE_AXIS_WIDTH: f64 = 62.0;
/// Height of the x labels under a small chart's plot ([`x_axis`]).
pub(crate) const ROW_AXIS_HEIGHT: f64 = 18.0;

/// A y axis of bytes from 0 to `top`, its plot from `plot_top` down to
/// `plot_bottom`, at `left` (its labels right-aligned left of it): the
/// line, a tick and label per round size, and faint grid lines across
/// `width`.
pub(crate) fn byte_axis(
    ctx: &CanvasRenderingContext2d,
    top: u64,
    left: f64,
    width: f64,
    plot_top: f64,
    plot_bottom: f64,
    ticks: u32,
) {
    use crate::core::{format, palette};
    let y = |b: u64| plot_bottom - b as f64 / top.max(1) as f64 * (plot_bottom - plot_top);
    ctx.set_font("10px sans-serif");
    ctx.set_text_align("right");
    ctx.set_text_baseline("middle");
    for b in format::byte_ticks(top, ticks) {
        let at = y(b).round() + 0.5;
        ctx.set_fill_style_str(palette::GRID.css());
        ctx.fill_rect(left, at, width, 1.0);
        ctx.set_fill_style_str(palette::LABEL.css());
        let _ = ctx.fill_text(&format::bytes(b), left - 4.0, at.clamp(plot_top + 4.0, plot_bottom - 4.0));
    }
    ctx.set_text_align("start");
    ctx.set_text_baseline("alphabetic");
    vline(ctx, palette::AXIS.css(), left - 1.0, plot_top, plot_bottom, 1.0);
}

/// An x axis under a plot: where it goes and what it shows.
pub(crate) struct XAxis<'a> {
    /// The axis.
    pub(crate) axis: vramscope_shared::timeline::Axis,
    /// The window the plot shows.
    pub(crate) view: Window,
    /// The trace's start (x labels count from it).
    pub(crate) origin: i64,
    /// The plot's left, in CSS pixels.
    pub(crate) left: f64,
    /// The plot's width.
    pub(crate) width: f64,
    /// Where the axis' line goes; its labels are below.
    pub(crate) y: f64,
    /// Said left of the plot (short: the y labels' column is its room).
    pub(crate) title: &'a str,
}

/// An x axis under a plot, `left`..`left + width` showing `view` on
/// `axis` (x = `origin` is the trace's start), its line at `y` and its
/// labels below: ticks at round numbers, and `title` left of the plot.
pub(crate) fn x_axis(ctx: &CanvasRenderingContext2d, a: &XAxis<'_>) {
    let XAxis { axis, view, origin, left, width, y, title } = *a;
    use crate::core::{format, palette};
    ctx.set_fill_style_str(palette::AXIS.css());
    ctx.fill_rect(left, y.round(), width, 1.0);
    let (ticks, step) = format::x_ticks(view.start, view.end, origin, (width / 110.0).clamp(2.0, 10.0) as u32);
    ctx.set_font("10px sans-serif");
    ctx.set_text_baseline("top");
    ctx.set_text_align("center");
    for t in ticks {
        let x = x_px(view, left, width, t as f64);
        vline(ctx, palette::AXIS.css(), x, y, y + 3.0, 1.0);
        ctx.set_fill_style_str(palette::LABEL.css());
        let label = format::x_label(axis, t, origin, step);
        let _ = ctx.fill_text(&label, x.clamp(left + 14.0, left + width - 14.0), y + 4.0);
    }
    ctx.set_text_align("left");
    ctx.set_fill_style_str(palette::LABEL.css());
    let _ = ctx.fill_text(title, 2.0, y + 4.0);
    ctx.set_text_align("start");
    ctx.set_text_baseline("alphabetic");
}
