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
use crate::core::format;
use crate::core::model::{AllocatorState, Axis, BlockKind, Frame, Instant};
use crate::core::palette;
use crate::explorer::DeviceContext;
use crate::infra::api;
use crate::infra::canvas;
use crate::infra::draws;

/// What the mouse (or a click) points at: a segment and a block.
type Pointed = (usize, usize);

/// The x of "the end of the trace" on the event axis (the server clamps it
/// to the last row).
const AT_THE_END: i64 = i64::MAX - 1;

/// The allocator-state panel of the device of `ctx`.
#[component]
pub(crate) fn StatePanel(ctx: DeviceContext) -> impl IntoView {
    let canvas_ref = NodeRef::<leptos::html::Canvas>::new();
    let wrap_ref = NodeRef::<leptos::html::Div>::new();
    let rects = StoredValue::new(Vec::<Rect>::new());
    let pointed = RwSignal::new(None::<Pointed>);
    let clicked = RwSignal::new(None::<Pointed>);
    let frames = RwSignal::new(None::<Result<Vec<Frame>, String>>);
    // Without a cursor yet, the panel shows the state the snapshot recorded
    // (its end) rather than an empty box until the timeline is clicked.
    if ctx.instant.get_untracked().is_none() {
        ctx.instant.set(Some(Instant::X(Axis::Event, AT_THE_END)));
    }

    Effect::new(move |_| {
        let (Some(canvas), Some(wrap)) = (canvas_ref.get(), wrap_ref.get()) else { return };
        let shown = pointed.get().or(clicked.get());
        ctx.state.with(|s| {
            let Some(s) = s else { return };
            let started = draws::now();
            let css_w = f64::from(wrap.client_width()).max(480.0);
            let (placed, height) = blocks::state_rects(s, css_w);
            let Some(canvas_ctx) = canvas::context(&canvas, css_w, height) else { return };
            for r in &placed {
                canvas::fill(&canvas_ctx, palette::fill(r.fill).css(), r.x, r.y, r.w.max(0.5), r.h);
            }
            for (i, seg) in s.segments.iter().enumerate() {
                let y = i as f64 * (blocks::ROW_HEIGHT + blocks::ROW_GAP) + 11.0;
                let label = format!(
                    "{} {}{}",
                    format::hex(seg.addr),
                    format::bytes(seg.size),
                    if seg.expandable { " exp" } else { "" }
                );
                canvas::text(&canvas_ctx, palette::LABEL.css(), &label, 2.0, y);
            }
            if let Some((si, bi)) = shown
                && let Some(r) = placed.iter().find(|r| r.segment == si && r.item == bi)
            {
                canvas_ctx.set_stroke_style_str(palette::CURSOR.css());
                canvas_ctx.set_line_width(2.0);
                canvas_ctx.stroke_rect(r.x - 1.0, r.y - 1.0, r.w.max(1.0) + 2.0, r.h + 2.0);
            }
            rects.set_value(placed);
            draws::record("state", started);
        });
    });

    // The stack of the clicked block.
    Effect::new(move |_| {
        let Some((si, bi)) = clicked.get() else { return };
        let Some(stack) = ctx.state.with_untracked(|s| s.as_ref()?.segments.get(si)?.blocks.get(bi).map(|b| b.stack))
        else {
            return;
        };
        frames.set(None);
        spawn_local(async move {
            let answer = api::stack(&ctx.id.get_value(), stack).await.map_err(|e| e.to_string());
            frames.try_set(Some(answer));
        });
    });
    // A new instant: the old pointers mean other blocks.
    Effect::new(move |_| {
        ctx.state.track();
        pointed.set(None);
        clicked.set(None);
        frames.set(None);
    });

    let hit = move |e: &MouseEvent| {
        rects.with_value(|r| blocks::state_hit(r, f64::from(e.offset_x()), f64::from(e.offset_y())))
    };
    let block_text = move |(si, bi): Pointed| {
        ctx.state.with(|s| {
            let s = s.as_ref()?;
            let seg = s.segments.get(si)?;
            let b = seg.blocks.get(bi)?;
            let kind = match b.kind {
                BlockKind::Allocated => "allocated",
                BlockKind::PendingFree => "pending free (waiting for another stream)",
                BlockKind::Inactive if Some(b.addr) == s.figures.largest_free_addr => "free: the largest free block",
                BlockKind::Inactive => "free (inactive)",
            };
            let sizes = match b.kind {
                BlockKind::Inactive => format::bytes(b.size),
                _ => format!(
                    "{} rounded, {} requested ({} rounding waste)",
                    format::bytes(b.size),
                    format::bytes(b.requested),
                    format::bytes(b.size.saturating_sub(b.requested))
                ),
            };
            Some(format!(
                "block {} · {sizes} · {kind} · in segment {} ({}, {}, stream {})",
                format::hex(b.addr),
                format::hex(seg.addr),
                format::pool(seg.pool),
                if seg.small { "small blocks" } else { "large blocks" },
                format::hex(seg.stream)
            ))
        })
    };

    let heading = move || {
        ctx.state.with(|s| {
            s.as_ref().map(|s| {
                let at = match (s.row, s.time_us) {
                    (None, _) => "before the trace's first event".to_owned(),
                    (Some(r), Some(t)) => {
                        format!("after row {} ({})", format::grouped(u64::from(r)), format::clock_us(t))
                    }
                    (Some(r), None) => format!("after row {}", format::grouped(u64::from(r))),
                };
                let estimate = if s.exact {
                    ""
                } else {
                    " · some block sizes are estimates (the trace does not reach back to its start)"
                };
                format!("Allocator state {at} of {}{estimate}", format::grouped(u64::from(s.rows)))
            })
        })
    };
    view! {
        <section class="state-panel" id="state-panel">
            <div class="toolbar">
                <h2 id="state-heading">{move || heading().unwrap_or_else(|| "Allocator state".to_owned())}</h2>
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
            <div class="canvas-wrap state-wrap" node_ref=wrap_ref>
                <canvas
                    id="state-canvas"
                    node_ref=canvas_ref
                    on:mousemove=move |e| pointed.set(hit(&e))
                    on:mouseleave=move |_| pointed.set(None)
                    on:click=move |e| clicked.set(hit(&e))
                ></canvas>
            </div>
            <p class="hint" id="state-hover">
                {move || pointed.get().or(clicked.get()).and_then(block_text).unwrap_or_default()}
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

/// The instant's figures as cards.
fn figures_view(s: &AllocatorState) -> impl IntoView + use<> {
    let f = s.figures;
    let largest = match f.largest_free_addr {
        Some(a) => format!("at {}", format::hex(a)),
        None => "no free block".to_owned(),
    };
    let cards: Vec<(&str, String, String)> = vec![
        ("reserved", format::bytes(f.reserved), format!("{} segments", f.segments)),
        ("allocated", format::bytes(f.allocated), format!("{} requested", format::bytes(f.requested))),
        ("rounding waste", format::bytes(f.waste), "rounded minus requested".to_owned()),
        ("pending free", format::bytes(f.pending_free), String::new()),
        ("free (inactive)", format::bytes(f.inactive), format!("{} blocks", format::grouped(f.free_blocks))),
        ("inactive split", format::bytes(f.inactive_split), "free bytes in split segments".to_owned()),
        ("largest free block", format::bytes(f.largest_free), largest),
        ("fragmentation", format::percent(f.fragmentation), "1 − largest free / free".to_owned()),
    ];
    view! {
        <div class="summary state-figures" id="state-figures">
            {cards
                .into_iter()
                .map(|(label, value, note)| view! { <Card label=label.to_owned() value=value note=note/> })
                .collect_view()}
        </div>
    }
}
