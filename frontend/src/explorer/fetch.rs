//! How the panels ask the server: once for the whole trace and again at
//! each cursor row ([`series_and_cursor`]: breakdown, pools), or for the
//! visible window once it has settled ([`fetch_settled`]: segments,
//! fragmentation); the latest request wins.

use std::time::Duration;

use leptos::prelude::*;

use super::context::DeviceContext;
use crate::infra::api;
use crate::infra::latest::latest;

/// The requests of a panel that answers "at the cursor" and "over the whole
/// trace" (breakdown, pools): `fetch(id, device, row, px)` is asked once
/// with `px` for the series (row `None`: the end), then at every cursor row
/// without it, the latest answer winning. `on_series` gets the first
/// answer, `on_row` the others; failures go to `error`.
pub(crate) fn series_and_cursor<T, F, Fut>(
    ctx: DeviceContext,
    px: u32,
    fetch: F,
    on_series: impl Fn(T) + Copy + 'static,
    on_row: impl Fn(T) + Copy + 'static,
    error: RwSignal<Option<String>>,
) where
    T: 'static,
    F: Fn(String, u32, Option<u32>, Option<u32>) -> Fut + Copy + 'static,
    Fut: std::future::Future<Output = Result<T, api::ApiError>> + 'static,
{
    Effect::new(move |_| {
        let request = fetch(ctx.id.get_value(), ctx.device, None, Some(px));
        leptos::task::spawn_local(async move {
            match request.await {
                Ok(a) => on_series(a),
                Err(e) => error.set(Some(e.to_string())),
            }
        });
    });
    let answers = latest();
    Effect::new(move |_| {
        let Some(row) = ctx.state.with(|s| s.as_ref().map(|s| s.row)) else { return };
        answers.run(fetch(ctx.id.get_value(), ctx.device, row, None), move |answer| match answer {
            Ok(a) => {
                on_row(a);
                error.set(None);
            }
            Err(e) => error.set(Some(e.to_string())),
        });
    });
}

/// How long the window must settle before a windowed panel asks again.
const SETTLE: Duration = Duration::from_millis(200);

/// What a panel over the visible window holds (segments, fragmentation):
/// its latest answer, the last failure, and whether a request is out.
#[derive(Clone, Copy)]
pub(crate) struct Settled<T: 'static> {
    /// The latest answer.
    pub(crate) data: RwSignal<Option<T>>,
    /// The last request's failure, cleared by an answer.
    pub(crate) error: RwSignal<Option<String>>,
    /// Whether a request is out.
    pub(crate) loading: RwSignal<bool>,
}

/// Ask `fetch(id, window query, columns)` for each window once it has
/// settled for [`SETTLE`], the latest request winning; `columns` says how
/// many columns the plot's width is worth (`None`: ask nothing yet).
pub(crate) fn fetch_settled<T, F, Fut>(
    ctx: DeviceContext,
    columns: impl Fn(f64) -> Option<u32> + 'static,
    fetch: F,
) -> Settled<T>
where
    T: Send + Sync + 'static,
    F: Fn(String, api::WindowQuery, u32) -> Fut + Copy + 'static,
    Fut: std::future::Future<Output = Result<T, api::ApiError>> + 'static,
{
    let settled = Settled { data: RwSignal::new(None), error: RwSignal::new(None), loading: RwSignal::new(false) };
    let answers = latest();
    let timer = StoredValue::new(None::<TimeoutHandle>);
    Effect::new(move |_| {
        let (Some(v), Some(axis), (_, width)) = (ctx.view.get(), ctx.axis.get(), ctx.plot.get()) else {
            return;
        };
        let Some(columns) = columns(width) else { return };
        if let Some(t) = timer.get_value() {
            t.clear();
        }
        let query = api::WindowQuery { device: ctx.device, axis, window: Some(v) };
        let handle = set_timeout_with_handle(
            move || {
                let id = ctx.id.get_value();
                settled.loading.set(true);
                answers.run(fetch(id, query, columns), move |answer| {
                    settled.loading.set(false);
                    match answer {
                        Ok(a) => {
                            settled.data.set(Some(a));
                            settled.error.set(None);
                        }
                        Err(e) => settled.error.set(Some(e.to_string())),
                    }
                });
            },
            SETTLE,
        );
        timer.set_value(handle.ok());
    });
    settled
}
