//! "Latest request wins": a view that asks again before an answer came
//! (the window moved, the filter changed, the cursor stepped) drops the
//! answers to its older requests, which may arrive after the newer one.
//! Every view that asks this way shares this one counter.

use std::future::Future;

use leptos::prelude::*;
use leptos::task::spawn_local;

/// A view's request counter: each request started supersedes those before.
#[derive(Clone, Copy)]
pub(crate) struct Latest(StoredValue<u64>);

/// A new counter, owned by the current reactive owner (the view): once it
/// is disposed, no answer is handed on.
pub(crate) fn latest() -> Latest {
    Latest(StoredValue::new(0))
}

/// One request of a [`Latest`]: current until another one starts.
#[derive(Clone, Copy)]
pub(crate) struct Ticket {
    counter: StoredValue<u64>,
    number: Option<u64>,
}

impl Latest {
    /// Start a request: every ticket handed out before is stale from now on.
    pub(crate) fn supersede(self) -> Ticket {
        let number = self.0.try_update_value(|n| {
            *n += 1;
            *n
        });
        Ticket { counter: self.0, number }
    }

    /// The ticket of the latest request, without superseding it: stale as
    /// soon as another one starts.
    pub(crate) fn current(self) -> Ticket {
        Ticket { counter: self.0, number: self.0.try_get_value() }
    }

    /// Run `request` and hand its answer to `then`, unless another request
    /// started meanwhile (or the view is gone).
    pub(crate) fn run<T: 'static>(self, request: impl Future<Output = T> + 'static, then: impl FnOnce(T) + 'static) {
        let ticket = self.supersede();
        spawn_local(async move {
            let answer = request.await;
            if ticket.is_current() {
                then(answer);
            }
        });
    }
}

impl Ticket {
    /// Whether no request started since this one (and the view is alive).
    pub(crate) fn is_current(self) -> bool {
        self.number.is_some() && self.counter.try_get_value() == self.number
    }
}
