//! Plain 2D-canvas drawing for the page's small canvases (segment timeline,
//! allocator state, fragmentation, minimap, track): HiDPI backing stores,
//! and the x mapping they share with the main timeline's plot area.

use wasm_bindgen::JsCast;
use web_sys::{CanvasRenderingContext2d, HtmlCanvasElement};

use crate::viewport::Window;

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

/// Colours shared by the canvases and the CSS legend.
pub(crate) mod colour {
    /// Requested bytes of allocated blocks.
    pub(crate) const ALLOCATED: &str = "#0969da";
    /// Rounding waste.
    pub(crate) const WASTE: &str = "#cf222e";
    /// Pending frees.
    pub(crate) const PENDING: &str = "#db6d28";
    /// Free blocks.
    pub(crate) const INACTIVE: &str = "#d0d7de";
    /// The largest free block.
    pub(crate) const LARGEST_FREE: &str = "#1a7f37";
    /// Reserved bytes.
    pub(crate) const RESERVED: &str = "#57606a";
    /// The cursor.
    pub(crate) const CURSOR: &str = "#1f2328";
    /// Search matches.
    pub(crate) const MATCH: &str = "#bf8700";
    /// Comment markers.
    pub(crate) const COMMENT: &str = "#8250df";
    /// Text.
    pub(crate) const LABEL: &str = "#57606a";
}
