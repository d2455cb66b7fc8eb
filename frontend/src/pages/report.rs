//! A report file's page (`vramscope report`): the app runs from a `file:`
//! URL that no route matches, with the snapshot inlined in the page as
//! `window.__vramscope_report_file`; it opens in local mode. Any other
//! unknown path says there is no such page.

use leptos::prelude::*;
use leptos::task::spawn_local;
use wasm_bindgen::JsCast;

use crate::infra::local::open;
use crate::pages::snapshot::SnapshotView;

/// Where no route matches: the report's snapshot if the page holds one,
/// else "no such page".
#[component]
pub fn NotFound() -> impl IntoView {
    let file = web_sys::window()
        .and_then(|w| js_sys::Reflect::get(&w, &"__vramscope_report_file".into()).ok())
        .and_then(|v| v.dyn_into::<web_sys::File>().ok());
    let Some(file) = file else {
        return view! { <p class="error">"There is no such page. " <a href="/">"Back to the library"</a></p> }
            .into_any();
    };
    let opened = RwSignal::new(None::<Result<String, String>>);
    spawn_local(async move {
        let answer = open(&file, |_| {}).await;
        opened.try_set(Some(answer));
    });
    view! {
        {move || match opened.get() {
            None => view! { <p class="hint" id="report-opening">"Reading the snapshot…"</p> }.into_any(),
            Some(Ok(id)) => view! { <SnapshotView id=id/> }.into_any(),
            Some(Err(e)) => view! { <p class="notice error">{e}</p> }.into_any(),
        }}
    }
    .into_any()
}
