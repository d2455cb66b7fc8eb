//! A panel's canvas: the canvas and the box whose width it takes, what
//! every canvas panel of a device holds, and the paint guard of those lined
//! up with the timeline's plot area (segments, fragmentation, minimap,
//! track): nothing is drawn before the canvas, the window and the plot
//! area are there ([`Aligned`], tested natively in `core::panel`). A panel
//! that keeps its last real draw as an image (segments, fragmentation)
//! paints through [`keep_drawn`] and [`PanelCanvas::paint_kept`].

use std::rc::Rc;

use leptos::html::{Canvas, Div};
use leptos::prelude::*;
use web_sys::HtmlCanvasElement;

use crate::core::panel::{self, Aligned};
use crate::core::viewport::Window;
use crate::explorer::context::DeviceContext;
use crate::infra::canvas::{self, Canvas2d, Kept};
use crate::infra::draws;
use crate::infra::redraw::Redraw;

/// A panel's canvas and the box around it, whose width the canvas takes.
#[derive(Clone, Copy)]
pub(crate) struct PanelCanvas {
    /// The canvas (`node_ref` of the `<canvas>`).
    pub(crate) canvas: NodeRef<Canvas>,
    /// Its container (`node_ref` of the `<div>` around it).
    pub(crate) wrap: NodeRef<Div>,
}

impl PanelCanvas {
    /// Neither mounted yet.
    pub(crate) fn new() -> Self {
        PanelCanvas { canvas: NodeRef::new(), wrap: NodeRef::new() }
    }

    /// The canvas and its container's width (at least `min` CSS pixels),
    /// once both are mounted; read tracked, so an effect runs again when
    /// they are.
    pub(crate) fn sized(&self, min: f64) -> Option<(HtmlCanvasElement, f64)> {
        let (Some(canvas), Some(wrap)) = (self.canvas.get(), self.wrap.get()) else { return None };
        Some((canvas, panel::css_width(wrap.client_width(), min)))
    }

    /// The container's width (at least [`panel::MIN_WIDTH`]), for the
    /// pointer's handlers: read untracked.
    pub(crate) fn width_untracked(&self) -> Option<f64> {
        self.wrap.get_untracked().map(|w| canvas::css_width(&w))
    }

    /// The canvas and where it draws, lined up with the timeline's plot
    /// area: `None` until the canvas, the window and a plot area of some
    /// width are there. Read tracked (for a panel drawn in an effect).
    pub(crate) fn aligned(&self, ctx: DeviceContext) -> Option<(HtmlCanvasElement, Aligned)> {
        let (Some(canvas), Some(wrap), Some(view)) = (self.canvas.get(), self.wrap.get(), ctx.view.get()) else {
            return None;
        };
        Some((canvas, Aligned::new(Some(view), ctx.plot.get(), wrap.client_width())?))
    }

    /// [`PanelCanvas::aligned`], untracked (for a panel drawn in an
    /// animation frame).
    pub(crate) fn aligned_untracked(&self, ctx: DeviceContext) -> Option<(HtmlCanvasElement, Aligned)> {
        let (Some(canvas), Some(wrap), Some(view)) =
            (self.canvas.get_untracked(), self.wrap.get_untracked(), ctx.view.get_untracked())
        else {
            return None;
        };
        Some((canvas, Aligned::new(Some(view), ctx.plot.get_untracked(), wrap.client_width())?))
    }

    /// Paint a panel that keeps its last real draw (`kept`) `height` CSS
    /// pixels tall, timed as `kind`: once it is [`aligned`](Self::aligned),
    /// the kept image (drawn anew by `draw` when stale), then `overlay`
    /// over it, given the window the image was drawn for.
    pub(crate) fn paint_kept(
        &self,
        ctx: DeviceContext,
        kept: &Kept,
        (height, kind): (f64, &str),
        draw: impl FnOnce(&mut Canvas2d<'_>, &Aligned),
        overlay: impl FnOnce(&mut Canvas2d<'_>, &Aligned, Window),
    ) {
        let Some((canvas, at)) = self.aligned_untracked(ctx) else { return };
        draws::timed(kind, || {
            let place = (at.view, at.plot());
            kept.paint(
                &canvas,
                place,
                (at.css_w, height),
                |p| draw(p, &at),
                |p, image_view| overlay(p, &at, image_view),
            )
        });
    }
}

/// Draw a panel that keeps its last real draw as an image (`Kept`), once
/// per animation frame at most, with `paint`: fresh data (a change of
/// `data`), a new plot area or canvas draw for real into the off-screen
/// image; a moved window or cursor shows that image shifted and stretched
/// until the data for it arrive.
pub(crate) fn keep_drawn<T: Send + Sync + 'static>(
    ctx: DeviceContext,
    canvas: PanelCanvas,
    data: RwSignal<Option<T>>,
    paint: impl Fn(&Kept) + 'static,
) {
    let kept = Kept::new();
    let redraw = Redraw::new({
        let kept = Rc::clone(&kept);
        move || paint(&kept)
    });
    // Fresh data, a new plot area or canvas: a real draw.
    Effect::new({
        let redraw = redraw.clone();
        move |_| {
            data.track();
            ctx.plot.track();
            canvas.canvas.track();
            kept.invalidate();
            redraw.request();
        }
    });
    // A moved window or cursor: the image, moved.
    Effect::new(move |_| {
        ctx.view.track();
        ctx.cursor_x();
        redraw.request();
    });
}
