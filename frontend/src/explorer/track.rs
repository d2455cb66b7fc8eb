//! The track under the timeline: `record_function` ranges
//! (`external_annotations`), nested ranges one lane lower; comment markers;
//! search matches; and the cursor. Lined up with the timeline's plot area.
//! A click on a range zooms the timeline to it.

use leptos::prelude::*;
use leptos::task::spawn_local;
use web_sys::{CanvasRenderingContext2d, MouseEvent};

use crate::core::model::review::Comment;
use crate::core::model::{AnnotationRange, AnnotationsAnswer};
use crate::core::palette;
use crate::core::panel::Aligned;
use crate::core::track::{self, LANE, LEVELS};
use crate::core::viewport::Window;
use crate::explorer::context::DeviceContext;
use crate::explorer::panel::PanelCanvas;
use crate::infra::api;
use crate::infra::canvas;
use crate::infra::draws;
use crate::infra::first_view::FirstView;

/// The review comments of the page's snapshot, shared by the track (their
/// markers) and the review thread (their text), which loads them and loads
/// them again after a post or a delete: one request for both, and a
/// comment's marker shows as soon as it is posted. `None` until loaded; a
/// page without a review thread (a local file, a report) has none.
#[derive(Clone, Copy)]
pub(crate) struct PageComments(pub(crate) RwSignal<Option<Result<Vec<Comment>, String>>>);

impl PageComments {
    /// The page's comments, not loaded yet, given to the views below it.
    pub(crate) fn provide() -> Self {
        let comments = PageComments(RwSignal::new(None));
        provide_context(comments);
        comments
    }
}

/// The track of the device of `ctx`.
#[component]
pub(crate) fn Track(ctx: DeviceContext) -> impl IntoView {
    let view = TrackView { ctx, canvas: PanelCanvas::new(), ranges: RwSignal::new(None), comments: use_context() };
    let hover = RwSignal::new(None::<String>);
    view.fetch();
    Effect::new(move |_| view.paint());

    view! {
        <div class="track-wrap" node_ref=view.canvas.wrap>
            <canvas
                id="track"
                node_ref=view.canvas.canvas
                on:mousemove=move |e| hover.set(view.at(&e).map(|(_, t)| t))
                on:mouseleave=move |_| hover.set(None)
                on:click=move |e| {
                    if let (Some((Some(w), _)), Some(extent)) = (view.at(&e), ctx.extent.get_untracked()) {
                        ctx.view.set(Some(w.clamp_into(extent)));
                    }
                }
            ></canvas>
            <p class="hint track-hover" id="track-hover">
                {move || {
                    hover.get().or_else(|| view.ranges.with(|r| track::idle_hint(r.as_ref()))).unwrap_or_default()
                }}
            </p>
        </div>
    }
}

/// The track's state: its canvas, the ranges and the comments.
#[derive(Clone, Copy)]
struct TrackView {
    ctx: DeviceContext,
    canvas: PanelCanvas,
    ranges: RwSignal<Option<AnnotationsAnswer>>,
    /// The page's comments, where it has them.
    comments: Option<PageComments>,
}

impl TrackView {
    /// Ask for the whole trace's ranges, once per axis (they are few, one
    /// per `record_function` call, so panning needs no new request).
    fn fetch(self) {
        let (ctx, ranges) = (self.ctx, self.ranges);
        let first_view = FirstView::current();
        Effect::new(move |_| {
            let Some(axis) = ctx.axis.get() else { return };
            if ctx.extent.get().is_none() || !first_view.passed() {
                return;
            }
            let query = api::WindowQuery { device: ctx.device, axis, window: None };
            spawn_local(async move {
                if let Ok(a) = api::annotations(&ctx.id.get_value(), query).await
                    && ctx.axis.try_get_untracked().flatten() == Some(axis)
                {
                    ranges.set(Some(a));
                }
            });
        });
    }

    /// Draw the track (reading, so tracking, what it shows): the ranges,
    /// the search matches, the comments and the cursor.
    fn paint(self) {
        let ctx = self.ctx;
        let Some((canvas, at)) = self.canvas.aligned(ctx) else { return };
        let Some(axis) = ctx.axis.get() else { return };
        draws::timed("track", || {
            let Aligned { view: v, left, width, css_w } = at;
            let h = self.ranges.with(|r| track::height(r.as_ref()));
            let canvas_ctx = canvas::context(&canvas, css_w, h)?;
            canvas::clip_plot(&canvas_ctx, left, width, h);
            let x_of = |x: i64| canvas::x_px(v, left, width, x as f64);
            self.ranges.with(|r| {
                for range in r.iter().flat_map(|r| &r.ranges) {
                    if range.end <= v.start || range.start >= v.end || range.depth >= LEVELS {
                        continue;
                    }
                    let (x0, x1) = (x_of(range.start).max(left - 1.0), x_of(range.end).min(left + width + 1.0));
                    draw_range(&canvas_ctx, range, (x0, x1), left);
                }
            });
            ctx.matches.with(|m| {
                for x in m.iter().flat_map(|m| &m.matches).filter_map(|m| track::match_x(m, axis)) {
                    if at.shows(x) {
                        canvas::fill(&canvas_ctx, palette::MATCH.css(), x_of(x) - 1.0, 2.0, 2.0, LANE - 4.0);
                    }
                }
            });
            self.with_comments(|cs| {
                for x in cs.iter().filter_map(|c| track::comment_x(c, axis)) {
                    if at.shows(x) {
                        draw_comment(&canvas_ctx, x_of(x));
                    }
                }
            });
            if let Some(x) = at.visible(ctx.cursor_x()) {
                canvas::vline(&canvas_ctx, palette::CURSOR.css(), x_of(x), 0.0, h, 1.0);
            }
            canvas_ctx.restore();
            canvas::text(&canvas_ctx, palette::LABEL.css(), "marks", 4.0, 12.0);
            if self.ranges.with(|r| r.as_ref().is_some_and(|r| r.levels > 0)) {
                canvas::text(&canvas_ctx, palette::LABEL.css(), "annotations", 4.0, LANE + 12.0);
            }
            Some(())
        });
    }

    /// The range or comment under the mouse, and the window a click on a
    /// range zooms to.
    fn at(self, e: &MouseEvent) -> Option<(Option<Window>, String)> {
        let ctx = self.ctx;
        let (v, axis) = (ctx.view.get_untracked()?, ctx.axis.get_untracked()?);
        let plot = ctx.plot.get_untracked();
        let pointer = (f64::from(e.offset_x()), f64::from(e.offset_y()));
        self.ranges.with_untracked(|r| {
            untrack(|| self.with_comments(|cs| track::hit(r.as_ref(), cs, (v, axis), plot, pointer)))
        })
    }

    /// `f` of the page's comments as loaded so far (tracked): none before
    /// they come, or where they failed to load (the thread says why).
    fn with_comments<T>(self, f: impl Fn(&[Comment]) -> T) -> T {
        let loaded = |c: &Option<Result<Vec<Comment>, String>>| {
            f(c.as_ref().and_then(|c| c.as_ref().ok()).map_or(&[][..], Vec::as_slice))
        };
        self.comments.and_then(|c| c.0.try_with(loaded)).unwrap_or_else(|| f(&[]))
    }
}

/// A range drawn from `x0` to `x1` in its level's lane, named when wide
/// enough (the name starting at the plot's `left` at the earliest).
fn draw_range(canvas_ctx: &CanvasRenderingContext2d, range: &AnnotationRange, (x0, x1): (f64, f64), left: f64) {
    let y = LANE * (1.0 + f64::from(range.depth));
    canvas::fill(
        canvas_ctx,
        palette::LEVELS[range.depth as usize % palette::LEVELS.len()].css(),
        x0,
        y + 1.0,
        (x1 - x0).max(1.0),
        LANE - 2.0,
    );
    canvas_ctx.set_stroke_style_str(palette::AXIS.css());
    canvas_ctx.set_line_width(1.0);
    canvas_ctx.stroke_rect(x0 + 0.5, y + 1.5, (x1 - x0 - 1.0).max(0.0), LANE - 3.0);
    if x1 - x0 > 40.0 {
        canvas_ctx.save();
        canvas_ctx.begin_path();
        canvas_ctx.rect(x0, y, x1 - x0 - 2.0, LANE);
        canvas_ctx.clip();
        canvas::text(canvas_ctx, palette::TEXT.css(), &range.name, x0.max(left) + 3.0, y + 12.0);
        canvas_ctx.restore();
    }
}

/// A comment's marker: a triangle pointing down at `px`.
fn draw_comment(canvas_ctx: &CanvasRenderingContext2d, px: f64) {
    canvas_ctx.set_fill_style_str(palette::COMMENT.css());
    canvas_ctx.begin_path();
    canvas_ctx.move_to(px - 5.0, 1.0);
    canvas_ctx.line_to(px + 5.0, 1.0);
    canvas_ctx.line_to(px, LANE - 3.0);
    canvas_ctx.close_path();
    canvas_ctx.fill();
}
