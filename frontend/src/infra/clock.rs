//! Time in the browser: waiting in its event loop, and dates in its locale.

use std::time::Duration;

use wasm_bindgen::JsValue;

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

/// A date and time (ms since the Unix epoch) in `locale` (`"default"`: the
/// browser's own).
pub(crate) fn date_time(ms: i64, locale: &str) -> String {
    let date = js_sys::Date::new(&JsValue::from_f64(ms as f64));
    String::from(date.to_locale_string(locale, &JsValue::UNDEFINED))
}

/// The time of day of a moment (ms since the Unix epoch), `hh:mm:ss`.
pub(crate) fn time_of_day(ms: i64) -> String {
    let date = js_sys::Date::new(&JsValue::from_f64(ms as f64));
    String::from(date.to_locale_time_string("en-GB"))
}
