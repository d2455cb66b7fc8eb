//! The track under the timeline: `record_function` ranges
//! (`external_annotations`), nested ranges one lane lower; comment markers;
//! search matches; and the cursor. Lined up with the timeline's plot area.
//! A click on a range zooms the timeline to it.

use leptos::prelude::*;
use leptos::task::spawn_local;
use web_sys::MouseEvent;

use crate::core::format;
use crate::core::model::{AnnotationsAnswer, Axis, CommentMark};
use crate::core::palette;
use crate::core::viewport::Window;
use crate::explorer::DeviceContext;
use crate::infra::api;
use crate::infra::canvas;
use crate::infra::draws;

/// Height of a lane.
const LANE: f64 = 16.0;

/// The track of the device of `ctx`.
#[component]
pub(crate) fn Track(ctx: DeviceContext) -> impl IntoView {
    let canvas_ref = NodeRef::<leptos::html::Canvas>::new();
    let wrap_ref = NodeRef::<leptos::html::Div>::new();
    let ranges = RwSignal::new(None::<AnnotationsAnswer>);
    let comments = RwSignal::new(Vec::<CommentMark>::new());
    let hover = RwSignal::new(None::<String>);

    // The whole trace's ranges, once per axis: they are few (one per
    // `record_function` call), so panning needs no new request.
    Effect::new(move |_| {
        let Some(axis) = ctx.axis.get() else { return };
        if ctx.extent.get().is_none() {
            return;
        }
        let query = api::window_query(ctx.device, axis, None);
        spawn_local(async move {
            if let Ok(a) = api::annotations(&ctx.id.get_value(), &query).await
                && ctx.axis.try_get_untracked().flatten() == Some(axis)
            {
                ranges.set(Some(a));
            }
        });
    });
    spawn_local(async move {
        let marks = api::comment_marks(&ctx.id.get_value()).await;
        comments.try_set(marks);
    });

    let height = move || {
        let levels = ranges.with(|r| r.as_ref().map_or(0, |r| r.levels.min(6)));
        LANE * (1.0 + f64::from(levels))
    };
    let comment_x = move |c: &CommentMark, axis: Axis| match axis {
        Axis::Event => c.row.map(i64::from),
        Axis::Time => c.time_us,
    };

    Effect::new(move |_| {
        let (Some(canvas), Some(wrap), Some(v), Some(axis)) =
            (canvas_ref.get(), wrap_ref.get(), ctx.view.get(), ctx.axis.get())
        else {
            return;
        };
        let (left, width) = ctx.plot.get();
        if width <= 0.0 {
            return;
        }
        let started = draws::now();
        let css_w = canvas::css_width(&wrap);
        let h = height();
        let Some(canvas_ctx) = canvas::context(&canvas, css_w, h) else { return };
        canvas::clip_plot(&canvas_ctx, left, width, h);
        let x_of = |x: i64| canvas::x_px(v, left, width, x as f64);
        ranges.with(|r| {
            for range in r.iter().flat_map(|r| &r.ranges) {
                if range.end <= v.start || range.start >= v.end || range.depth >= 6 {
                    continue;
                }
                let (x0, x1) = (x_of(range.start).max(left - 1.0), x_of(range.end).min(left + width + 1.0));
                let y = LANE * (1.0 + f64::from(range.depth));
                canvas::fill(
                    &canvas_ctx,
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
                    canvas::text(&canvas_ctx, palette::TEXT.css(), &range.name, x0.max(left) + 3.0, y + 12.0);
                    canvas_ctx.restore();
                }
            }
        });
        ctx.matches.with(|m| {
            for x in m.iter().flat_map(|m| &m.matches).filter_map(|m| match axis {
                Axis::Event => m.alloc_row.map(i64::from),
                Axis::Time => m.alloc_time_us,
            }) {
                if x >= v.start && x < v.end {
                    canvas::fill(&canvas_ctx, palette::MATCH.css(), x_of(x) - 1.0, 2.0, 2.0, LANE - 4.0);
                }
            }
        });
        comments.with(|cs| {
            for x in cs.iter().filter_map(|c| comment_x(c, axis)) {
                if x >= v.start && x < v.end {
                    let px = x_of(x);
                    canvas_ctx.set_fill_style_str(palette::COMMENT.css());
                    canvas_ctx.begin_path();
                    canvas_ctx.move_to(px - 5.0, 1.0);
                    canvas_ctx.line_to(px + 5.0, 1.0);
                    canvas_ctx.line_to(px, LANE - 3.0);
                    canvas_ctx.close_path();
                    canvas_ctx.fill();
                }
            }
        });
        if let Some(x) = ctx.cursor_x().filter(|&x| x >= v.start && x < v.end) {
            canvas::vline(&canvas_ctx, palette::CURSOR.css(), x_of(x), 0.0, h, 1.0);
        }
        canvas_ctx.restore();
        canvas::text(&canvas_ctx, palette::LABEL.css(), "marks", 4.0, 12.0);
        if ranges.with(|r| r.as_ref().is_some_and(|r| r.levels > 0)) {
            canvas::text(&canvas_ctx, palette::LABEL.css(), "annotations", 4.0, LANE + 12.0);
        }
        draws::record("track", started);
    });

    // The range or comment under the mouse, and a click to zoom to a range.
    let at = move |e: &MouseEvent| -> Option<(Option<Window>, String)> {
        let (v, axis) = (ctx.view.get_untracked()?, ctx.axis.get_untracked()?);
        let (left, width) = ctx.plot.get_untracked();
        let (px, py) = (f64::from(e.offset_x()), f64::from(e.offset_y()));
        let x = canvas::x_at(v, left, width, px);
        let slack = (v.width() as f64 * 4.0 / width.max(1.0)) as i64;
        if py < LANE {
            return comments.with_untracked(|cs| {
                cs.iter()
                    .find(|c| comment_x(c, axis).is_some_and(|cx| (cx - x).abs() <= slack))
                    .map(|c| (None, format!("comment by {}: {}", c.author, c.body)))
            });
        }
        let depth = ((py / LANE).floor() as u32).saturating_sub(1);
        ranges.with_untracked(|r| {
            r.as_ref()?.ranges.iter().find(|r| r.depth == depth && r.start <= x && x < r.end).map(|r| {
                let lasted = r.end_us.map_or("never closed".to_owned(), |e| format::duration_us(e - r.start_us));
                (Some(Window::new(r.start, r.end)), format!("{} · {lasted}", r.name))
            })
        })
    };
    view! {
        <div class="track-wrap" node_ref=wrap_ref>
            <canvas
                id="track"
                node_ref=canvas_ref
                on:mousemove=move |e| hover.set(at(&e).map(|(_, t)| t))
                on:mouseleave=move |_| hover.set(None)
                on:click=move |e| {
                    if let (Some((Some(w), _)), Some(extent)) = (at(&e), ctx.extent.get_untracked()) {
                        ctx.view.set(Some(w.clamp_into(extent)));
                    }
                }
            ></canvas>
            <p class="hint track-hover" id="track-hover">
                {move || {
                    hover
                        .get()
                        .or_else(|| {
                            ranges
                                .with(|r| r.as_ref().map(|r| r.total))
                                .filter(|&n| n > 0)
                                .map(|n| format!("{n} annotated ranges (record_function); click one to zoom to it"))
                        })
                        .unwrap_or_default()
                }}
            </p>
        </div>
    }
}
