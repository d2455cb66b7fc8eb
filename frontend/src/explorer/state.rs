//! The allocator's state at the cursor: every segment as a bar of its
//! blocks (requested bytes, rounding waste, pending frees, free blocks, the
//! largest free block marked), the instant's fragmentation figures, and the
//! block under the mouse with its stack. The cursor moves with a click on
//! a timeline and steps with ←/→.

use leptos::prelude::*;
use leptos::task::spawn_local;
use web_sys::MouseEvent;

use crate::components::card::Card;
use crate::core::blocks::{self, Rect};
use crate::core::model::{AllocatorState, Axis, Frame, Instant};
use crate::core::state_chart;
use crate::explorer::context::DeviceContext;
use crate::explorer::panel::PanelCanvas;
use crate::infra::api;
use crate::infra::canvas;
use crate::infra::draws;

/// What the mouse (or a click) points at: a segment and a block.
type Pointed = (usize, usize);

/// The narrowest the bars are drawn, in CSS pixels.
const MIN_WIDTH: f64 = 480.0;

/// The x of "the end of the trace" on the event axis (the server clamps it
/// to the last row).
const AT_THE_END: i64 = i64::MAX - 1;

/// The allocator-state panel of the device of `ctx`.
#[component]
pub(crate) fn StatePanel(ctx: DeviceContext) -> impl IntoView {
    let panel = Panel {
        ctx,
        canvas: PanelCanvas::new(),
        rects: StoredValue::new(Vec::new()),
        pointed: RwSignal::new(None),
        clicked: RwSignal::new(None),
        frames: RwSignal::new(None),
    };
    // Without a cursor yet, the panel shows the state the snapshot recorded
    // (its end) rather than an empty box until the timeline is clicked.
    if ctx.instant.get_untracked().is_none() {
        ctx.instant.set(Some(Instant::X(Axis::Event, AT_THE_END)));
    }
    Effect::new(move |_| panel.paint());
    panel.follow_clicks();
    let Panel { pointed, clicked, frames, .. } = panel;

    view! {
        <section class="state-panel" id="state-panel">
            <div class="toolbar">
                <h2 id="state-heading">
                    {move || ctx.state.with(|s| s.as_ref().map(blocks::state_heading)).unwrap_or_else(|| "Allocator state".to_owned())}
                </h2>
                <button id="state-prev" title="One event back (←)" on:click=move |_| { ctx.step(-1); }>"◀"</button>
                <button id="state-next" title="One event on (→)" on:click=move |_| { ctx.step(1); }>"▶"</button>
                <button
                    id="state-end"
                    title="The state the snapshot recorded"
                    on:click=move |_| ctx.instant.set(Some(Instant::X(Axis::Event, AT_THE_END)))
                >
                    "At the end"
                </button>
            </div>
            <p class="hint" id="state-hint">
                {move || {
                    if ctx.state.with(Option::is_none) {
                        "Loading the allocator's state at the snapshot's end…"
                    } else {
                        "Every segment and block at this instant. Click a timeline to see another instant; ← and → step event by event; “At the end” comes back here."
                    }
                }}
            </p>
            {move || ctx.state.with(|s| s.as_ref().map(figures_view))}
            <div class="canvas-wrap state-wrap" node_ref=panel.canvas.wrap>
                <canvas
                    id="state-canvas"
                    node_ref=panel.canvas.canvas
                    on:mousemove=move |e| pointed.set(panel.hit(&e))
                    on:mouseleave=move |_| pointed.set(None)
                    on:click=move |e| clicked.set(panel.hit(&e))
                ></canvas>
            </div>
            <p class="hint" id="state-hover">
                {move || {
                    pointed
                        .get()
                        .or(clicked.get())
                        .and_then(|at| ctx.state.with(|s| blocks::block_text(s.as_ref()?, at)))
                        .unwrap_or_default()
                }}
            </p>
            {move || {
                clicked.get()?;
                Some(match frames.get() {
                    None => view! { <p class="hint">"Loading the stack…"</p> }.into_any(),
                    Some(Err(e)) => view! { <p class="notice error">{e}</p> }.into_any(),
                    Some(Ok(f)) if f.is_empty() => view! { <p class="hint">"No frames recorded for this block."</p> }.into_any(),
                    Some(Ok(f)) => crate::components::stack::stack_list(f, "state-stack").into_any(),
                })
            }}
        </section>
    }
}

/// The panel's state: its canvas, the bars placed, the block pointed at
/// and the one clicked, with its stack.
#[derive(Clone, Copy)]
struct Panel {
    ctx: DeviceContext,
    canvas: PanelCanvas,
    rects: StoredValue<Vec<Rect>>,
    pointed: RwSignal<Option<Pointed>>,
    clicked: RwSignal<Option<Pointed>>,
    frames: RwSignal<Option<Result<Vec<Frame>, String>>>,
}

impl Panel {
    /// Draw the bars (reading, so tracking, the state and the blocks
    /// pointed at), the segments' labels and the shown block's outline.
    fn paint(self) {
        let Some((canvas, css_w)) = self.canvas.sized(MIN_WIDTH) else { return };
        let shown = self.pointed.get().or(self.clicked.get());
        self.ctx.state.with(|s| {
            let Some(s) = s else { return };
            draws::timed("state", || {
                let (placed, height) = blocks::state_rects(s, css_w);
                canvas::paint(&canvas, css_w, height, |p| state_chart::draw(p, s, &placed, shown))?;
                self.rects.set_value(placed);
                Some(())
            });
        });
    }

    /// The clicked block's stack, asked for; a new instant forgets the
    /// blocks pointed at (they mean other blocks now).
    fn follow_clicks(self) {
        let Panel { ctx, clicked, pointed, frames, .. } = self;
        Effect::new(move |_| {
            let Some((si, bi)) = clicked.get() else { return };
            let Some(stack) =
                ctx.state.with_untracked(|s| s.as_ref()?.segments.get(si)?.blocks.get(bi).map(|b| b.stack))
            else {
                return;
            };
            frames.set(None);
            spawn_local(async move {
                let answer = api::stack(&ctx.id.get_value(), stack).await.map_err(|e| e.to_string());
                frames.try_set(Some(answer));
            });
        });
        Effect::new(move |_| {
            ctx.state.track();
            pointed.set(None);
            clicked.set(None);
            frames.set(None);
        });
    }

    /// The block under the mouse.
    fn hit(self, e: &MouseEvent) -> Option<Pointed> {
        self.rects.with_value(|r| blocks::state_hit(r, f64::from(e.offset_x()), f64::from(e.offset_y())))
    }
}

/// The instant's figures as cards.
fn figures_view(s: &AllocatorState) -> impl IntoView + use<> {
    view! {
        <div class="summary state-figures" id="state-figures">
            {blocks::state_cards(&s.figures)
                .into_iter()
                .map(|(label, value, note)| view! { <Card label=label.to_owned() value=value note=note/> })
                .collect_view()}
        </div>
    }
}
