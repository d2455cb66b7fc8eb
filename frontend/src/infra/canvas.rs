//! The page's canvases: the one setup of a small canvas (HiDPI backing
//! store, scaled context, cleared: [`context`]) and the only way to draw on
//! one, [`paint`], through the browser's [`Painter`] over its 2D context
//! ([`Canvas2d`], which the panels' drawing in `core` goes through); the
//! one setup of the plotters charts' canvases ([`plot_on`]); and the last
//! real draw kept off screen ([`Kept`], [`Drawn`]), shown shifted and
//! stretched while the window moves.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use wasm_bindgen::JsCast;
use web_sys::{CanvasRenderingContext2d, Element, HtmlCanvasElement};

use plotters::coord::Shift;
use plotters::prelude::{DrawingArea, IntoDrawingArea};
use plotters_canvas::CanvasBackend;

use crate::core::blocks::Raster;
use crate::core::chart::{self, Area, Chart};
use crate::core::hidpi::Scaled;
use crate::core::paint::{Font, Ink, Painter, Point, Rect};
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

/// Set `canvas` up as [`context`] does and draw on it with `draw`,
/// through its [`Painter`]; nothing when the browser gives no 2D context.
pub(crate) fn paint(
    canvas: &HtmlCanvasElement,
    css_w: f64,
    css_h: f64,
    draw: impl FnOnce(&mut Canvas2d<'_>),
) -> Option<()> {
    let ctx = context(canvas, css_w, css_h)?;
    draw(&mut Canvas2d(&ctx));
    Some(())
}

/// The width of a canvas's container in CSS pixels, at least
/// [`panel::MIN_WIDTH`].
pub(crate) fn css_width(wrap: &Element) -> f64 {
    panel::css_width(wrap.client_width(), panel::MIN_WIDTH)
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
    /// `plot`) when the data changed or the page no longer fits the image;
    /// then `overlay` over it, given the window the image shows.
    pub(crate) fn paint(
        &self,
        canvas: &HtmlCanvasElement,
        (view, plot): (Window, (f64, f64)),
        (css_w, height): (f64, f64),
        draw: impl FnOnce(&mut Canvas2d<'_>),
        overlay: impl FnOnce(&mut Canvas2d<'_>, Window),
    ) -> Option<()> {
        let mut image = self.drawn.borrow_mut();
        if self.fresh.replace(false) || !image.as_ref().is_some_and(|i| i.fits(plot, css_w)) {
            let (next, ctx) = Drawn::start(image.take(), view, plot, css_w, height)?;
            draw(&mut Canvas2d(&ctx));
            *image = Some(next);
        }
        let ctx = context(canvas, css_w, height)?;
        let shown = image.as_ref()?;
        shown.show(&ctx, view);
        overlay(&mut Canvas2d(&ctx), shown.view);
        Some(())
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

/// The drawing area of a plotters chart: the canvas's backend, seen at
/// its CSS size through [`Scaled`].
pub(crate) type PlotArea = DrawingArea<Scaled<CanvasBackend>, Shift>;

/// Size `canvas` to `css_w` × `css_h` CSS pixels with a backing store of
/// `devicePixelRatio` times that, and draw on it with plotters (`draw`),
/// in CSS pixels: the one setup of every plotters canvas (the timeline,
/// the analysis charts, "Will it fit?", the live page's), so each is sharp
/// on a high-density screen and its geometry and the mouse agree.
pub(crate) fn plot_on<T>(
    canvas: &HtmlCanvasElement,
    (css_w, css_h): (u32, u32),
    draw: impl FnOnce(&PlotArea) -> Result<T, String>,
) -> Result<T, String> {
    let dpr = ratio();
    canvas.set_width((f64::from(css_w) * dpr).round() as u32);
    canvas.set_height((f64::from(css_h) * dpr).round() as u32);
    let _ = canvas.set_attribute("style", &format!("width:{css_w}px;height:{css_h}px"));
    let backend = CanvasBackend::with_canvas_object(canvas.clone())
        .ok_or_else(|| "this browser gives no 2D drawing context for the canvas".to_owned())?;
    draw(&Scaled::new(backend, dpr).into_drawing_area())
}

/// Draw an analysis chart on `canvas`, sized to `width` × `height` pixels.
pub(crate) fn paint_chart(
    canvas: &HtmlCanvasElement,
    width: u32,
    height: u32,
    chart: &Chart,
    x_label: &dyn Fn(f64) -> String,
) -> Result<Area, String> {
    plot_on(canvas, (width.max(200), height), |root| chart::draw(root, chart, x_label))
}

/// Draw the "Will it fit?" chart on `canvas`, `width` × `height` pixels.
pub(crate) fn paint_predict(
    canvas: &HtmlCanvasElement,
    width: u32,
    height: u32,
    outcome: &Outcome,
) -> Result<(), String> {
    plot_on(canvas, (width.max(200), height), |root| predict_chart::draw(root, outcome))
}

/// The width available to a chart inside `wrap`, at least 320 pixels.
pub(crate) fn chart_width(wrap: Option<web_sys::HtmlDivElement>) -> u32 {
    wrap.map_or(1000, |w| u32::try_from(w.client_width()).unwrap_or(0)).max(320)
}

/// The browser's [`Painter`]: a canvas's 2D context, scaled to CSS pixels
/// (as [`context`] gives it).
pub(crate) struct Canvas2d<'a>(&'a CanvasRenderingContext2d);

impl Canvas2d<'_> {
    /// A new path through `points`.
    fn path(&self, points: &[Point]) {
        self.0.begin_path();
        for (i, &(x, y)) in points.iter().enumerate() {
            if i == 0 {
                self.0.move_to(x, y);
            } else {
                self.0.line_to(x, y);
            }
        }
    }

    fn stroke_style(&self, ink: Ink, width: f64) {
        self.0.set_stroke_style_str(&ink.css());
        self.0.set_line_width(width);
    }
}

impl Painter for Canvas2d<'_> {
    fn ratio(&self) -> f64 {
        ratio()
    }
    fn fill_rect(&mut self, ink: impl Into<Ink>, (x, y, w, h): Rect) {
        self.0.set_fill_style_str(&ink.into().css());
        self.0.fill_rect(x, y, w, h);
    }
    fn stroke_rect(&mut self, ink: impl Into<Ink>, width: f64, (x, y, w, h): Rect) {
        self.stroke_style(ink.into(), width);
        self.0.stroke_rect(x, y, w, h);
    }
    fn stroke_rects(&mut self, ink: impl Into<Ink>, width: f64, rects: &[Rect]) {
        self.stroke_style(ink.into(), width);
        self.0.begin_path();
        for &(x, y, w, h) in rects {
            self.0.rect(x, y, w, h);
        }
        self.0.stroke();
    }
    fn stroke_path(&mut self, ink: impl Into<Ink>, width: f64, points: &[Point]) {
        self.stroke_style(ink.into(), width);
        self.path(points);
        self.0.stroke();
    }
    fn fill_path(&mut self, ink: impl Into<Ink>, points: &[Point]) {
        self.0.set_fill_style_str(&ink.into().css());
        self.path(points);
        self.0.close_path();
        self.0.fill();
    }
    fn text(&mut self, font: Font, text: &str, x: f64, y: f64) {
        self.0.set_font(&font.css());
        self.0.set_text_align(font.align.css());
        self.0.set_text_baseline(font.baseline.css());
        self.0.set_fill_style_str(font.colour.css());
        let _ = self.0.fill_text(text, x, y);
    }
    fn clip(&mut self, (x, y, w, h): Rect) {
        self.0.save();
        self.0.begin_path();
        self.0.rect(x, y, w, h);
        self.0.clip();
    }
    fn unclip(&mut self) {
        self.0.restore();
    }
    fn image(&mut self, raster: &Raster, x: f64, y: f64) {
        // An empty image is no image (and `ImageData` refuses it).
        if let Ok(image) = web_sys::ImageData::new_with_u8_clamped_array_and_sh(
            wasm_bindgen::Clamped(&raster.rgba),
            raster.width as u32,
            raster.height as u32,
        ) {
            // In device pixels: putImageData ignores the context's scaling.
            let _ = self.0.put_image_data(&image, x, y);
        }
    }
}
