//! Draw timings for the benchmark: after each canvas draw, and after other
//! main-thread work worth timing (an answer decoded, bars stacked), the
//! page pushes `{ms, at, kind, what?}` to the global array
//! `window.__vramscope_draws` and marks `vramscope-<kind>` in the
//! performance timeline; the first time real data is drawn it sets
//! `window.__vramscope_first_draw`. A
//! benchmark reads these from the page; nothing in the page reads them.

use wasm_bindgen::{JsCast, JsValue};

/// `performance.now()`, or 0 where the browser has no performance clock.
pub(crate) fn now() -> f64 {
    web_sys::window().and_then(|w| w.performance()).map_or(0.0, |p| p.now())
}

/// Record a draw of `kind` (`timeline`, `segments`, ...) that began at
/// `started` (from [`now`]). Failures are ignored: timings are a side show.
pub(crate) fn record(kind: &str, started: f64) {
    record_detail(kind, "", started);
}

/// Run `draw`, timed: recorded as `kind` when it drew (answered `Some`),
/// not when it found nothing to draw.
pub(crate) fn timed<T>(kind: &str, draw: impl FnOnce() -> Option<T>) -> Option<T> {
    let started = now();
    let drawn = draw()?;
    record(kind, started);
    Some(drawn)
}

/// [`record`] with a note on what was done: main-thread work that is not a
/// draw (`decode` of an answer, `stack` of a window's bars) is recorded
/// this way too, so that a benchmark can tell what filled a slow frame.
pub(crate) fn record_detail(kind: &str, what: &str, started: f64) {
    let Some(window) = web_sys::window() else { return };
    let end = now();
    let global = JsValue::from(window.clone());
    let key = JsValue::from_str("__vramscope_draws");
    let list = match js_sys::Reflect::get(&global, &key) {
        // `Array::from` would be JavaScript's `Array.from`, a copy: cast instead.
        Ok(v) if js_sys::Array::is_array(&v) => v.unchecked_into::<js_sys::Array>(),
        _ => {
            let fresh = js_sys::Array::new();
            let _ = js_sys::Reflect::set(&global, &key, &fresh);
            fresh
        }
    };
    let entry = js_sys::Object::new();
    let _ = js_sys::Reflect::set(&entry, &"ms".into(), &JsValue::from_f64(end - started));
    let _ = js_sys::Reflect::set(&entry, &"at".into(), &JsValue::from_f64(end));
    let _ = js_sys::Reflect::set(&entry, &"kind".into(), &JsValue::from_str(kind));
    if !what.is_empty() {
        let _ = js_sys::Reflect::set(&entry, &"what".into(), &JsValue::from_str(what));
    }
    list.push(&entry);
    if let Some(p) = window.performance() {
        let _ = p.mark(&format!("vramscope-{kind}"));
    }
    let first = JsValue::from_str("__vramscope_first_draw");
    if kind == "timeline" && js_sys::Reflect::get(&global, &first).is_ok_and(|v| v.is_undefined()) {
        let _ = js_sys::Reflect::set(&global, &first, &JsValue::from_f64(end));
    }
}
