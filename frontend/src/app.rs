//! The dashboard's shell, above every layer: the top bar (with the API
//! token) and the routes, each to its page in [`crate::pages`]. The server
//! answers every route's path with the same page, so links and reloads land
//! on the right view.

use leptos::prelude::*;
use leptos_router::components::{Route, Router, Routes};
use leptos_router::path;

use crate::infra::api;
use crate::pages::library::Library;
use crate::pages::snapshot::SnapshotPage;

/// The whole app.
#[component]
pub(crate) fn App() -> impl IntoView {
    // An offline report (a file opened from disk) has no server: no
    // library to go back to, no jobs, no token to enter.
    let report = crate::infra::local::in_report();
    view! {
        <Router>
            <header class="topbar">
                {if report {
                    view! { <span class="brand">"vramscope report"</span> }.into_any()
                } else {
                    view! { <a class="brand" href="/">"vramscope"</a> }.into_any()
                }}
                <span class="tagline">"GPU memory observatory for PyTorch"</span>
                {(!report).then(|| view! {
                    <a class="nav" href="/jobs">"Jobs"</a>
                    <TokenControl/>
                })}
            </header>
            <main>
                // Unknown paths, and the page of a report file (a `file:` URL).
                <Routes fallback=crate::pages::report::NotFound>
                    <Route path=path!("/") view=Library/>
                    <Route path=path!("/snapshots/:id") view=SnapshotPage/>
                    <Route path=path!("/live") view=crate::pages::live::LiveListPage/>
                    <Route path=path!("/live/:source") view=crate::pages::live::LiveSourcePage/>
                    <Route path=path!("/compare/:a/:b") view=crate::pages::compare::ComparePage/>
                    <Route path=path!("/jobs") view=crate::pages::jobs::JobsPage/>
                    <Route path=path!("/jobs/:job") view=crate::pages::jobs::JobPage/>
                </Routes>
            </main>
        </Router>
    }
}

/// Where to paste an API token, for servers that require one (any server
/// not bound to loopback). Kept in the browser's local storage.
#[component]
fn TokenControl() -> impl IntoView {
    let draft = RwSignal::new(api::token().unwrap_or_default());
    let saved = RwSignal::new(api::token().is_some());
    let save = move || {
        api::set_token(&draft.get_untracked());
        saved.set(api::token().is_some());
        // Every view asks again with the new token.
        if let Err(e) = window().location().reload() {
            leptos::logging::warn!("reload failed: {e:?}");
        }
    };
    view! {
        <details class="token">
            <summary>{move || if saved.get() { "API token ✓" } else { "API token" }}</summary>
            <div class="token-form">
                <input
                    type="password"
                    placeholder="vs_…"
                    autocomplete="off"
                    prop:value=draft
                    on:input=move |ev| draft.set(event_target_value(&ev))
                    on:keydown=move |ev| {
                        if ev.key() == "Enter" {
                            save();
                        }
                    }
                />
                <button on:click=move |_| save()>"Save"</button>
                <p class="hint">"Needed when the server is not on loopback. Leave empty to send none."</p>
            </div>
        </details>
    }
}
