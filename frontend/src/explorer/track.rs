//! The track under the timeline: `record_function` ranges
//! (`external_annotations`), nested ranges one lane lower; comment markers;
//! search matches; and the cursor. Lined up with the timeline's plot area.
//! A click on a range zooms the timeline to it.

use leptos::prelude::*;
use leptos::task::spawn_local;
use web_sys::MouseEvent;

use crate::core::model::AnnotationsAnswer;
use crate::core::model::review::Comment;
use crate::core::track::{self, Marks};
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
        let marks = Marks {
            matches: ctx
                .matches
                .with(|m| m.iter().flat_map(|m| &m.matches).filter_map(|m| track::match_x(m, axis)).collect()),
            comments: self.with_comments(|cs| cs.iter().filter_map(|c| track::comment_x(c, axis)).collect()),
            cursor: ctx.cursor_x(),
        };
        draws::timed("track", || {
            self.ranges.with(|r| {
                let height = track::height(r.as_ref());
                canvas::paint(&canvas, at.css_w, height, |p| track::draw(p, &at, r.as_ref(), &marks))
            })
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
