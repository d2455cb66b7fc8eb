//! Time in the browser: waiting in its event loop, and a moment's date in
//! the viewer's time zone, written by [`crate::core::dates`].

use std::time::Duration;

use wasm_bindgen::JsValue;

use crate::core::dates::{self, LocalTime};

/// Wait `duration` in the browser's event loop.
pub(crate) async fn sleep(duration: Duration) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        let _ = leptos::prelude::window().set_timeout_with_callback_and_timeout_and_arguments_0(
            &resolve,
            i32::try_from(duration.as_millis()).unwrap_or(i32::MAX),
        );
    });
    let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
}

/// The calendar fields of a moment (ms since the Unix epoch) in the
/// viewer's time zone.
fn local(ms: i64) -> LocalTime {
    let d = js_sys::Date::new(&JsValue::from_f64(ms as f64));
    LocalTime {
        year: d.get_full_year() as i32,
        month: d.get_month() + 1,
        day: d.get_date(),
        hour: d.get_hours(),
        minute: d.get_minutes(),
        second: d.get_seconds(),
    }
}

/// A date and time (ms since the Unix epoch), as every page writes one
/// ([`dates::date_time`]: `2026-12-07 20:45`, the viewer's time zone).
pub(crate) fn date_time(ms: i64) -> String {
    dates::date_time(&local(ms))
}

/// The time of day of a moment (ms since the Unix epoch), `hh:mm:ss`.
pub(crate) fn time_of_day(ms: i64) -> String {
    dates::time_of_day(&local(ms))
}
