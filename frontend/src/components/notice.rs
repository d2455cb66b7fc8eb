//! A message at the top of a view ([`Notice`]) and the bar that shows it.

use leptos::prelude::*;

/// A message at the top of a view: what just happened, or what went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Notice {
    /// Whether it reports a failure.
    pub(crate) error: bool,
    /// The sentence.
    pub(crate) text: String,
}

impl Notice {
    /// Good news.
    pub(crate) fn info(text: impl Into<String>) -> Notice {
        Notice { error: false, text: text.into() }
    }

    /// A failure.
    pub(crate) fn error(text: impl ToString) -> Notice {
        Notice { error: true, text: text.to_string() }
    }
}

/// Shows a notice, if any, with a button to dismiss it.
#[component]
pub(crate) fn NoticeBar(notice: RwSignal<Option<Notice>>) -> impl IntoView {
    move || {
        notice.get().map(|n| {
            view! {
                <div class="notice" class:error=n.error role="status">
                    <span>{n.text}</span>
                    <button class="link" on:click=move |_| notice.set(None) aria-label="dismiss">"×"</button>
                </div>
            }
        })
    }
}
