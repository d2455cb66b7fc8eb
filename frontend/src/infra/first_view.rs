//! The page's first view goes first. A snapshot page asks for a dozen
//! things as it opens: the timeline, and also the state at the end, the
//! annotations, the comments, the OOM post-mortem and the leak ranking
//! (both replay the trace on the server), the library for the compare
//! picker, the time-axis probe. Sent together they share the server's
//! cores, the connection and the page's main thread with the one answer
//! the user waits for: on a 2-core machine the timeline's answer waited
//! 30 ms more for its first byte and 30 ms more for the main thread.
//!
//! So a page provides a [`FirstView`] gate, the timeline opens it once its
//! first window is drawn (or has failed), and the other views send their
//! requests through [`after_first_view`] or check [`FirstView::passed`] in
//! their effects. A view on a page without a gate asks at once.

use std::time::Duration;

use leptos::prelude::*;

/// How long the other views wait at most: a first window that takes
/// longer (a huge file opened in this tab) must not hold the rest back.
const MOST_WAIT: Duration = Duration::from_secs(3);

/// The gate: closed while the page's first view is on its way.
#[derive(Clone, Copy)]
pub(crate) struct FirstView(RwSignal<bool>);

impl FirstView {
    /// A closed gate for the page being built, given to the views below it
    /// as context; it opens by itself after [`MOST_WAIT`].
    pub(crate) fn provide() -> Self {
        let gate = FirstView(RwSignal::new(false));
        provide_context(gate);
        set_timeout(move || gate.open(), MOST_WAIT);
        gate
    }

    /// The gate of the page being built; an open one where the page has
    /// none.
    pub(crate) fn current() -> Self {
        use_context::<FirstView>().unwrap_or_else(|| FirstView(RwSignal::new(true)))
    }

    /// Let the other views ask (again and again: opening twice is opening).
    pub(crate) fn open(self) {
        if self.0.try_get_untracked() == Some(false) {
            self.0.try_set(true);
        }
    }

    /// Whether the page's first view is done, read as a tracked signal: an
    /// effect that returns while it is false runs again when it opens.
    pub(crate) fn passed(self) -> bool {
        self.0.try_get().unwrap_or(true)
    }
}

/// Run `task` once the page's first view is done: now if the page has no
/// gate or it is open. The task runs untracked, under the owner that
/// called this, so what it creates lives as long as that view.
pub(crate) fn after_first_view(task: impl FnOnce() + 'static) {
    let gate = FirstView::current();
    if gate.0.try_get_untracked().unwrap_or(true) {
        task();
        return;
    }
    let owner = Owner::current();
    let mut task = Some(task);
    Effect::new(move |_| {
        if gate.passed()
            && let Some(task) = task.take()
        {
            match &owner {
                Some(owner) => owner.with(|| untrack(task)),
                None => untrack(task),
            }
        }
    });
}
