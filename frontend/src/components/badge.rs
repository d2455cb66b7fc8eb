//! The badge that marks a file opened in this browser tab without
//! uploading it, on its snapshot page and in a comparison's title: its
//! figures are the same, but the server never saw it (no comments, no
//! report, gone on reload).

use leptos::prelude::*;

/// "local file, not uploaded".
#[component]
pub(crate) fn LocalBadge() -> impl IntoView {
    view! {
        <span
            class="badge local"
            title="Read in this browser tab: the server never received it, and a reload closes it"
        >
            "local file, not uploaded"
        </span>
    }
}
