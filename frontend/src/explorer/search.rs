//! Search by address (`0x7f…`), size (`2 MiB`) or frame text: the count of
//! matches, the first ones listed (a click selects one and moves the
//! cursor to its allocation), and every listed match highlighted on the
//! timeline and ticked on the track.

use std::time::Duration;

use leptos::prelude::*;
use vramscope_shared::views::search::SearchParams;
use vramscope_shared::views::view::Search;
use web_sys::KeyboardEvent;

use crate::core::format;
use crate::core::model::{Axis, Instant, SearchKind, SearchMatch};
use crate::core::permalink::Selected;
use crate::core::viewport::Window;
use crate::explorer::context::DeviceContext;
use crate::infra::api;
use crate::infra::latest::latest;

/// Matches listed under the box.
const LISTED: usize = 12;
/// Typing must pause this long before a search is sent.
const DEBOUNCE: Duration = Duration::from_millis(350);

/// The search box of the device of `ctx`.
#[component]
pub(crate) fn SearchBox(ctx: DeviceContext) -> impl IntoView {
    let error = RwSignal::new(None::<String>);
    let searches = latest();
    let timer = StoredValue::new(None::<TimeoutHandle>);

    let run = move || {
        let q = ctx.query.get_untracked();
        if q.trim().is_empty() {
            // An answer still coming for an older text is not shown.
            searches.supersede();
            ctx.matches.set(None);
            error.set(None);
            return;
        }
        let id = ctx.id.get_value();
        let p = SearchParams { device: Some(ctx.device), q: Some(q.trim().to_owned()), limit: Some(500) };
        searches.run(async move { api::view::<Search>("searching", &id, &p).await }, move |answer| match answer {
            Ok(a) => {
                ctx.matches.set(Some(a));
                error.set(None);
            }
            Err(e) => {
                ctx.matches.set(None);
                error.set(Some(e.to_string()));
            }
        });
    };
    // A search from a link runs at once.
    if !ctx.query.get_untracked().trim().is_empty() {
        run();
    }
    let typed = move |value: String| {
        ctx.query.set(value);
        if let Some(t) = timer.get_value() {
            t.clear();
        }
        timer.set_value(set_timeout_with_handle(run, DEBOUNCE).ok());
    };
    let go_to = move |m: SearchMatch| {
        ctx.selected.set(Some(Selected { addr: m.addr, alloc_row: m.alloc_row }));
        let Some(row) = m.alloc_row else { return };
        ctx.instant.set(Some(Instant::Row(row)));
        // Bring its allocation into view, keeping the zoom.
        let x = match ctx.axis.get_untracked() {
            Some(Axis::Event) => Some(i64::from(row)),
            Some(Axis::Time) => m.alloc_time_us,
            None => None,
        };
        if let (Some(x), Some(v), Some(extent)) = (x, ctx.view.get_untracked(), ctx.extent.get_untracked())
            && (x < v.start || x >= v.end)
        {
            let half = v.width() / 2;
            ctx.view.set(Some(Window::new(x - half, x - half + v.width()).clamp_into(extent)));
        }
    };

    let count = move || {
        ctx.matches.with(|m| {
            m.as_ref().map(|m| {
                let how = match m.kind {
                    SearchKind::Address => "allocations holding that address",
                    SearchKind::Size => "allocations of that size",
                    SearchKind::Frame => "allocations with that text in a frame",
                };
                let n = m.total;
                format!("{} match{} · {how}", format::grouped(n as u64), if n == 1 { "" } else { "es" })
            })
        })
    };
    view! {
        <section class="search-panel">
            <label class="search">
                "Search "
                <input
                    id="search"
                    type="search"
                    placeholder="address 0x7f…, size 2 MiB, or frame text"
                    prop:value=move || ctx.query.get()
                    on:input=move |e| typed(event_target_value(&e))
                    on:keydown=move |e: KeyboardEvent| {
                        if e.key() == "Enter" {
                            run();
                        }
                    }
                />
            </label>
            <span class="count" id="search-count">
                {count}
            </span>
            {move || error.get().map(|e| view! { <span class="notice error">{e}</span> })}
            <ol class="matches" id="search-results">
                {move || {
                    ctx
                        .matches
                        .with(|m| m.as_ref().map(|m| m.matches.iter().take(LISTED).copied().collect::<Vec<_>>()))
                        .unwrap_or_default()
                        .into_iter()
                        .map(|m| {
                            let row = m.alloc_row.map_or("before the trace".to_owned(), |r| format!("row {}", format::grouped(u64::from(r))));
                            let selected = move || {
                                ctx.selected.get().is_some_and(|s| s.addr == m.addr && s.alloc_row == m.alloc_row)
                            };
                            view! {
                                <li>
                                    <button class:selected=selected on:click=move |_| go_to(m)>
                                        <mark>{format::hex(m.addr)}</mark>
                                        {format!(" · {} · {row}", format::bytes(m.size))}
                                    </button>
                                </li>
                            }
                        })
                        .collect_view()
                }}
            </ol>
        </section>
    }
}
