//! A figure card of the summary grids (`.summary .card`): a label, a value
//! and a note under it, red when it is an alarm.

use leptos::prelude::*;

/// One card.
#[component]
pub(crate) fn Card(
    /// What the figure is (upper case by CSS).
    label: String,
    /// The figure.
    value: String,
    /// A line under it; empty for none.
    #[prop(optional)]
    note: String,
    /// Drawn as an alarm (red).
    #[prop(optional)]
    alarm: bool,
) -> impl IntoView {
    view! {
        <div class="card" class:alarm=alarm>
            <div class="label">{label}</div>
            <div class="value">{value}</div>
            <div class="note">{note}</div>
        </div>
    }
}
