//! The details panel under the timeline: the allocation under the mouse
//! (or pinned by a click) with its lifetime, its alloc entry's fields and
//! its stack, each fetched once and kept.

use std::collections::HashMap;

use leptos::prelude::*;
use leptos::task::spawn_local;
use vramscope_shared::views::entry::EntryParams;
use vramscope_shared::views::view::Entry;

use crate::components::stack::stack_list;
use crate::core::format;
use crate::core::model::{Axis, EntryAnswer, Frame, VisibleAllocation};
use crate::explorer::context::DeviceContext;
use crate::infra::api;

/// A stack being fetched, or its answer.
#[derive(Clone, Debug, PartialEq)]
enum StackState {
    Loading,
    Loaded(Vec<Frame>),
    Failed(String),
}

/// The allocation under the mouse (or pinned by a click) and its stack.
#[component]
pub(super) fn Details(
    ctx: DeviceContext,
    hovered: RwSignal<Option<VisibleAllocation>>,
    pinned: RwSignal<bool>,
) -> impl IntoView {
    let (axis, extent) = (ctx.axis, ctx.extent);
    let stacks = RwSignal::new(HashMap::<u32, StackState>::new());
    let entries = RwSignal::new(HashMap::<u32, Result<EntryAnswer, String>>::new());
    let (id, device) = (ctx.id, ctx.device);

    // Fetch the alloc entry of the allocation shown (stream, time, compile
    // context, user metadata), once per row.
    Effect::new(move |_| {
        let Some(row) = hovered.get().and_then(|a| a.alloc_row) else { return };
        if entries.with_untracked(|m| m.contains_key(&row)) {
            return;
        }
        spawn_local(async move {
            let p = EntryParams { device: Some(device), row: Some(row) };
            let answer = api::view::<Entry>("loading the trace entry", &id.get_value(), &p).await;
            let answer = answer.map_err(|e| e.to_string());
            entries.try_update(|m| m.insert(row, answer));
        });
    });

    // Fetch the stack of the allocation shown, once per stack.
    Effect::new(move |_| {
        let Some(a) = hovered.get() else { return };
        if stacks.with_untracked(|m| m.contains_key(&a.stack)) {
            return;
        }
        stacks.update(|m| {
            m.insert(a.stack, StackState::Loading);
        });
        spawn_local(async move {
            let state = match api::stack(&id.get_value(), a.stack).await {
                Ok(frames) => StackState::Loaded(frames),
                Err(e) => StackState::Failed(e.to_string()),
            };
            stacks.try_update(|m| m.insert(a.stack, state));
        });
    });

    move || {
        let Some(a) = hovered.get() else {
            return view! {
                <div class="details" id="details">
                    <p class="hint">"Point at an allocation to see its size, address and stack; click to pin it."</p>
                </div>
            }
            .into_any();
        };
        let ax = axis.get().unwrap_or(Axis::Event);
        let origin = extent.get().map_or(a.start, |e| e.start);
        let row = |r: Option<u32>| r.map(|r| format::grouped(u64::from(r)));
        // On the time axis, rows and times; on the event axis x is the row.
        let at = |r: u32, x: i64| match ax {
            Axis::Time => format!("row {} ({})", format::grouped(u64::from(r)), format::x_point(ax, x, origin)),
            Axis::Event => format!("row {}", format::grouped(u64::from(r))),
        };
        let born = match a.alloc_row {
            Some(r) => at(r, a.start),
            None => "before the trace began (its allocation is not in the trace: recording started later, or the ring buffer wrapped)".to_owned(),
        };
        let freed = match (a.free_requested_row, a.free_row) {
            (_, Some(f)) => {
                let requested = row(a.free_requested_row).filter(|_| a.free_requested_row != Some(f));
                let pending = requested.map(|q| format!(", requested at row {q}")).unwrap_or_default();
                format!("{}{pending}", at(f, a.end))
            }
            (Some(q), None) => format!("requested at row {}, still pending at the end", format::grouped(u64::from(q))),
            (None, None) => "never freed: still allocated when the snapshot was taken".to_owned(),
        };
        let lifetime = match ax {
            Axis::Time => format::duration_us(a.end - a.start),
            Axis::Event => format!("{} events", format::grouped((a.end - a.start).max(0) as u64)),
        };
        view! {
            <div class="details" id="details">
                <h3>
                    {format!("{} at {}", format::bytes(a.size), format::hex(a.addr))}
                    {move || pinned.get().then_some(view! { <span class="pin">"pinned — click it again to unpin"</span> })}
                </h3>
                <dl>
                    <dt>"size"</dt>
                    <dd>{format!("{} bytes", format::grouped(a.size))}</dd>
                    <dt>"address"</dt>
                    <dd><code>{format::hex(a.addr)}</code></dd>
                    <dt>"allocated"</dt>
                    <dd>{born}</dd>
                    <dt>"freed"</dt>
                    <dd>{freed}</dd>
                    <dt>"alive for"</dt>
                    <dd>{lifetime}</dd>
                    {move || {
                        let e = a.alloc_row.and_then(|r| entries.with(|m| m.get(&r).cloned()))?;
                        Some(match e {
                            Ok(e) => entry_facts(&e).into_any(),
                            Err(e) => view! { <dt>"entry"</dt><dd class="error">{e}</dd> }.into_any(),
                        })
                    }}
                </dl>
                <Stack stack=a.stack stacks=stacks/>
            </div>
        }
            .into_any()
    }
}

/// The alloc entry's own fields, for the details list.
fn entry_facts(e: &EntryAnswer) -> impl IntoView + use<> {
    let time = e.time_us.map(format::clock_us);
    let facts: Vec<(&'static str, String)> = [
        Some(("stream", format::hex(e.stream))),
        Some(("memory pool", format::pool(e.pool))),
        time.map(|t| ("wall time", t)),
        e.compile_context.clone().map(|c| ("compile context", c)),
        e.user_metadata.clone().map(|m| ("user metadata", m)),
    ]
    .into_iter()
    .flatten()
    .collect();
    facts.into_iter().map(|(k, v)| view! { <dt>{k}</dt><dd class="entry-fact">{v}</dd> }).collect_view()
}

#[component]
fn Stack(stack: u32, stacks: RwSignal<HashMap<u32, StackState>>) -> impl IntoView {
    move || {
        match stacks.with(|m| m.get(&stack).cloned()) {
        None | Some(StackState::Loading) => view! { <p class="hint">"Loading the stack…"</p> }.into_any(),
        Some(StackState::Failed(e)) => view! { <p class="notice error">{e}</p> }.into_any(),
        Some(StackState::Loaded(frames)) if frames.is_empty() => view! {
            <p class="hint" id="no-frames">
                "No frames were recorded for this allocation (history was recorded without stacks, or it came from C++ without Python on the stack)."
            </p>
        }
        .into_any(),
        Some(StackState::Loaded(frames)) => stack_list(frames, "stack").into_any(),
    }
    }
}
