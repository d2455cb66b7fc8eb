//! The page's side: one worker per opened file, and requests to it.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use js_sys::{Function, Promise, Reflect};
use serde_json::json;
use vramscope_shared::indexed::IndexedSnapshot;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use web_sys::{File, MessageEvent, Worker, WorkerOptions, WorkerType};

use super::{LOCAL_PREFIX, LocalRequest, Opened, not_open_message, open_bytes, read_other, status_of};

/// Where the worker script is, unless the page says otherwise in
/// `window.__vramscope_worker_url` (a report file sets a `blob:` URL).
const WORKER_URL: &str = "/static/worker.js";

/// How far opening a file got.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum OpenProgress {
    /// The worker is loading the file's bytes.
    Reading,
    /// The reader is this many bytes in.
    Parsing(f64),
    /// Building the indexes.
    Indexing,
}

/// Promise callbacks of requests in flight, by sequence number.
type Pending = HashMap<u32, (Function, Function)>;

/// An open local file: its worker and the requests waiting on it.
struct Session {
    worker: Worker,
    pending: Rc<RefCell<Pending>>,
    next: Cell<u32>,
    /// The id of the snapshot its worker last read to compare with.
    other: RefCell<Option<String>>,
    // Kept alive as long as the worker: it routes the worker's answers.
    _on_message: Closure<dyn FnMut(MessageEvent)>,
    _on_error: Closure<dyn FnMut(web_sys::Event)>,
}

thread_local! {
    static SESSIONS: RefCell<HashMap<String, Rc<Session>>> = RefCell::new(HashMap::new());
    /// Files read on the page itself (a report's page, see [`in_page`]).
    static IN_PAGE: RefCell<HashMap<String, Rc<Opened>>> = RefCell::new(HashMap::new());
    static OPENED_COUNT: Cell<u32> = const { Cell::new(0) };
    /// The file behind each local id, for its page's download link.
    static FILES: RefCell<HashMap<String, File>> = RefCell::new(HashMap::new());
    /// Object URLs made for those files, one per id.
    static FILE_URLS: RefCell<HashMap<String, String>> = RefCell::new(HashMap::new());
    /// A report page's other snapshot of a comparison, by id.
    static IN_PAGE_OTHER: RefCell<Option<(String, Rc<IndexedSnapshot>)>> = const { RefCell::new(None) };
}

/// The files opened in this tab, as (id, file name), oldest first: what
/// a local file can be compared with besides the library.
pub(crate) fn opened_files() -> Vec<(String, String)> {
    let mut files: Vec<(u32, String, String)> = FILES.with(|f| {
        f.borrow()
            .iter()
            .map(|(id, file)| {
                let n = id.trim_start_matches(LOCAL_PREFIX).parse().unwrap_or(u32::MAX);
                (n, id.clone(), file.name())
            })
            .collect()
    });
    files.sort();
    files.into_iter().map(|(_, id, name)| (id, name)).collect()
}

/// An object URL of the file opened as local snapshot `id` (the server
/// has no copy to download), or `None` once the page has lost it.
pub(crate) fn file_url(id: &str) -> Option<String> {
    if let Some(url) = FILE_URLS.with(|u| u.borrow().get(id).cloned()) {
        return Some(url);
    }
    let file = FILES.with(|f| f.borrow().get(id).cloned())?;
    // `URL.createObjectURL` through js_sys: web-sys's `Url` feature is off.
    let global = js_sys::global();
    let url_class = Reflect::get(&global, &JsValue::from_str("URL")).ok()?;
    let create = Reflect::get(&url_class, &JsValue::from_str("createObjectURL")).ok()?.dyn_into::<Function>().ok()?;
    let url = create.call1(&url_class, &file).ok()?.as_string()?;
    FILE_URLS.with(|u| u.borrow_mut().insert(id.to_owned(), url.clone()));
    Some(url)
}

fn field(value: &JsValue, name: &str) -> JsValue {
    Reflect::get(value, &JsValue::from_str(name)).unwrap_or(JsValue::UNDEFINED)
}

fn js_text(e: &JsValue) -> String {
    if let Some(s) = e.as_string() {
        return s;
    }
    if let Some(err) = e.dyn_ref::<js_sys::Error>() {
        return String::from(err.message());
    }
    field(e, "message").as_string().unwrap_or_else(|| format!("{e:?}"))
}

/// Keep `value` (when defined) in `window[name]`, an array, for the
/// dashboard bench: the worker's own timings and memory.
fn record_for_bench(name: &str, value: &JsValue) {
    let Some(window) = web_sys::window() else { return };
    if value.is_undefined() {
        return;
    }
    let key = JsValue::from_str(name);
    let list = match Reflect::get(&window, &key) {
        Ok(list) if list.is_object() => list,
        _ => {
            let list: JsValue = js_sys::Array::new().into();
            let _ = Reflect::set(&window, &key, &list);
            list
        }
    };
    if let Some(list) = list.dyn_ref::<js_sys::Array>() {
        list.push(value);
    }
}

fn worker_url() -> String {
    web_sys::window()
        .and_then(|w| Reflect::get(&w, &JsValue::from_str("__vramscope_worker_url")).ok())
        .and_then(|v| v.as_string())
        .unwrap_or_else(|| WORKER_URL.to_owned())
}

/// Whether files are read on the page rather than in a worker: a report
/// file (`vramscope report`) sets `window.__vramscope_local_in_page`, as
/// a page opened from `file:` may not start a worker from a blob: URL.
fn in_page() -> bool {
    web_sys::window()
        .and_then(|w| Reflect::get(&w, &JsValue::from_str("__vramscope_local_in_page")).ok())
        .and_then(|v| v.as_bool())
        .unwrap_or(false)
}

/// Whether this page is an offline report (`vramscope report`, opened
/// from disk): no server behind it, so no library, jobs, token,
/// comments or comparison, and no request may leave the page.
pub(crate) fn in_report() -> bool {
    in_page()
}

/// Read `file` on the page itself (blocking it while parsing).
async fn open_in_page(file: &File, id: String, progress: impl Fn(OpenProgress)) -> Result<String, String> {
    progress(OpenProgress::Reading);
    let buffer = JsFuture::from(file.array_buffer()).await.map_err(|e| js_text(&e))?;
    let bytes = js_sys::Uint8Array::new(&buffer).to_vec();
    let opened = open_bytes(&bytes, &id, &file.name(), file.last_modified(), |_| {})?;
    IN_PAGE.with(|p| p.borrow_mut().insert(id.clone(), Rc::new(opened)));
    Ok(id)
}

/// Open `file` in a new worker; answers the id of its snapshot page.
/// `progress` hears how far it got; errors say what was wrong with the
/// file (the reader's words) or that the worker could not start.
pub(crate) async fn open(file: &File, progress: impl Fn(OpenProgress) + 'static) -> Result<String, String> {
    let name = file.name();
    let n = OPENED_COUNT.with(|c| {
        c.set(c.get() + 1);
        c.get()
    });
    let id = format!("{LOCAL_PREFIX}{n}");
    FILES.with(|f| f.borrow_mut().insert(id.clone(), file.clone()));
    if in_page() {
        return open_in_page(file, id, progress).await;
    }
    let options = WorkerOptions::new();
    options.set_type(WorkerType::Module);
    let worker = Worker::new_with_options(&worker_url(), &options)
        .map_err(|e| format!("the page could not start its worker ({})", js_text(&e)))?;

    // The open's promise settles on `opened` or `failed`; answers go to
    // their request's promise.
    let opening: Rc<RefCell<Option<(Function, Function)>>> = Rc::new(RefCell::new(None));
    let settled = Promise::new(&mut |resolve, reject| *opening.borrow_mut() = Some((resolve, reject)));
    let pending: Rc<RefCell<Pending>> = Rc::default();
    let on_message = {
        let (opening, pending) = (opening.clone(), pending.clone());
        Closure::<dyn FnMut(MessageEvent)>::new(move |event: MessageEvent| {
            let data = event.data();
            match field(&data, "type").as_string().as_deref() {
                Some("progress") => match field(&data, "phase").as_string().as_deref() {
                    Some("reading") => progress(OpenProgress::Reading),
                    Some("indexing") => progress(OpenProgress::Indexing),
                    _ => progress(OpenProgress::Parsing(field(&data, "read").as_f64().unwrap_or(0.0))),
                },
                Some("opened") | Some("failed") => {
                    // Where the open's time went, for the dashboard bench.
                    record_for_bench("__vramscope_local_open", &field(&data, "timing"));
                    if let Some((resolve, reject)) = opening.borrow_mut().take() {
                        let ok = field(&data, "type").as_string().as_deref() == Some("opened");
                        let _ = if ok {
                            resolve.call0(&JsValue::NULL)
                        } else {
                            reject.call1(&JsValue::NULL, &field(&data, "error"))
                        };
                    }
                }
                Some("answer") => {
                    if !field(&data, "ms").is_undefined() {
                        let timing = js_sys::Array::of2(&field(&data, "route"), &field(&data, "ms"));
                        record_for_bench("__vramscope_local_answers", &timing);
                    }
                    let seq = field(&data, "seq").as_f64().unwrap_or(-1.0) as u32;
                    if let Some((resolve, _)) = pending.borrow_mut().remove(&seq) {
                        let _ = resolve.call1(&JsValue::NULL, &data);
                    }
                }
                _ => {}
            }
        })
    };
    // A worker that dies (its script failed to load, or it ran out of
    // memory) fails the open and every request waiting on it.
    let on_error = {
        let (opening, pending) = (opening.clone(), pending.clone());
        // A script that fails to load fires a plain `Event`, not an `ErrorEvent`.
        Closure::<dyn FnMut(web_sys::Event)>::new(move |event: web_sys::Event| {
            event.prevent_default();
            let message = field(&event, "message").as_string();
            let why = JsValue::from_str(&format!(
                "the worker failed: {}",
                message.as_deref().unwrap_or("its script did not load")
            ));
            if let Some((_, reject)) = opening.borrow_mut().take() {
                let _ = reject.call1(&JsValue::NULL, &why);
            }
            for (_, (_, reject)) in pending.borrow_mut().drain() {
                let _ = reject.call1(&JsValue::NULL, &why);
            }
        })
    };
    worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));

    let message = js_sys::Object::new();
    for (key, value) in [
        ("type", JsValue::from_str("open")),
        ("file", file.clone().into()),
        ("id", JsValue::from_str(&id)),
        ("name", JsValue::from_str(&name)),
        ("modified", JsValue::from_f64(file.last_modified())),
    ] {
        let _ = Reflect::set(&message, &JsValue::from_str(key), &value);
    }
    // The File crosses as a handle: the worker reads the bytes itself.
    worker.post_message(&message).map_err(|e| js_text(&e))?;
    if let Err(e) = JsFuture::from(settled).await {
        worker.terminate();
        return Err(js_text(&e));
    }
    let session = Session {
        worker,
        pending,
        next: Cell::new(0),
        other: RefCell::new(None),
        _on_message: on_message,
        _on_error: on_error,
    };
    SESSIONS.with(|s| s.borrow_mut().insert(id.clone(), Rc::new(session)));
    Ok(id)
}

/// Where the other snapshot of a comparison comes from.
pub(crate) enum OtherBytes {
    /// Bytes the page fetched (an uploaded snapshot's file).
    Fetched(Vec<u8>),
    /// Nothing fetched: another local file of this tab, or the one the
    /// worker already holds.
    None,
}

/// Whether local snapshot `mine`'s worker already holds `other_id`, the
/// other side of its last comparison (no need to fetch its bytes again).
pub(crate) fn holds_other(mine: &str, other_id: &str) -> bool {
    if IN_PAGE.with(|p| p.borrow().contains_key(mine)) {
        return IN_PAGE_OTHER.with(|o| o.borrow().as_ref().is_some_and(|(id, _)| id == other_id));
    }
    SESSIONS.with(|s| s.borrow().get(mine).is_some_and(|s| s.other.borrow().as_deref() == Some(other_id)))
}

/// The comparison of local snapshot `mine` with snapshot `other_id` (A
/// is `mine` when `mine_is_a`), answered in this tab as `GET
/// /api/v1/compare?{query}` would be: by `mine`'s worker, which reads
/// the other snapshot from `bytes` (an uploaded one's file) or from the
/// other local file itself. An HTTP status and JSON body, as [`respond`].
pub(crate) async fn compare(
    mine: &str,
    other_id: &str,
    mine_is_a: bool,
    bytes: OtherBytes,
    query: &str,
) -> (u16, String) {
    let error = |status: u16, text: String| (status, json!({ "error": text }).to_string());
    // The other side's bytes, unless the worker holds them already.
    let other: Option<JsValue> = match bytes {
        OtherBytes::Fetched(b) => Some(js_sys::Uint8Array::from(&b[..]).into()),
        OtherBytes::None if holds_other(mine, other_id) => None,
        OtherBytes::None => match FILES.with(|f| f.borrow().get(other_id).cloned()) {
            Some(file) => Some(file.into()),
            None => return error(404, not_open_message(other_id)),
        },
    };
    if let Some(opened) = IN_PAGE.with(|p| p.borrow().get(mine).cloned()) {
        if let Some(value) = other {
            let bytes = match value.dyn_ref::<web_sys::Blob>() {
                Some(blob) => match JsFuture::from(blob.array_buffer()).await {
                    Ok(buffer) => js_sys::Uint8Array::new(&buffer).to_vec(),
                    Err(e) => return error(500, js_text(&e)),
                },
                None => js_sys::Uint8Array::new(&value).to_vec(),
            };
            match read_other(&bytes, other_id) {
                Ok(a) => IN_PAGE_OTHER.with(|o| *o.borrow_mut() = Some((other_id.to_owned(), Rc::new(a)))),
                Err(e) => return error(status_of(&e), e.to_string()),
            }
        }
        let Some(other) = IN_PAGE_OTHER.with(|o| o.borrow().as_ref().map(|(_, a)| a.clone())) else {
            return error(404, format!("snapshot {other_id} to compare with"));
        };
        return match opened.compare(&other, mine_is_a, query) {
            Ok(body) => (200, body),
            Err(e) => error(status_of(&e), e.to_string()),
        };
    }
    let Some(session) = SESSIONS.with(|s| s.borrow().get(mine).cloned()) else {
        return error(404, not_open_message(mine));
    };
    let sent = other.is_some();
    let answer = ask(
        &session,
        &[
            ("type", JsValue::from_str("compare")),
            ("other", other.unwrap_or(JsValue::NULL)),
            ("other_id", JsValue::from_str(other_id)),
            ("self_is_a", JsValue::from_bool(mine_is_a)),
            ("query", JsValue::from_str(query)),
        ],
    )
    .await;
    if sent {
        *session.other.borrow_mut() = (answer.0 == 200).then(|| other_id.to_owned());
    }
    answer
}

/// Send `fields` to the session's worker with a fresh sequence number
/// and wait for its answer, as an HTTP status and JSON body.
async fn ask(session: &Session, fields: &[(&str, JsValue)]) -> (u16, String) {
    let error = |status: u16, text: String| (status, json!({ "error": text }).to_string());
    let seq = session.next.get();
    session.next.set(seq.wrapping_add(1));
    let answered = Promise::new(&mut |resolve, reject| {
        session.pending.borrow_mut().insert(seq, (resolve, reject));
    });
    let message = js_sys::Object::new();
    let _ = Reflect::set(&message, &JsValue::from_str("seq"), &JsValue::from(seq));
    for (key, value) in fields {
        let _ = Reflect::set(&message, &JsValue::from_str(key), value);
    }
    if let Err(e) = session.worker.post_message(&message) {
        session.pending.borrow_mut().remove(&seq);
        return error(500, format!("asking the worker: {}", js_text(&e)));
    }
    match JsFuture::from(answered).await {
        Ok(data) => match field(&data, "json").as_string() {
            Some(body) => (200, body),
            None => {
                let status = field(&data, "status").as_f64().map_or(500, |s| s as u16);
                error(status, field(&data, "error").as_string().unwrap_or_else(|| "no answer".to_owned()))
            }
        },
        Err(e) => error(500, js_text(&e)),
    }
}

/// The answer to a request for a local snapshot, as an HTTP status and
/// a JSON body (`{"error": …}` for failures, like the server's).
pub(crate) async fn respond(request: &LocalRequest, method: &str) -> (u16, String) {
    let error = |status: u16, text: String| (status, json!({ "error": text }).to_string());
    if method != "GET" {
        return error(405, format!("{} was opened locally: it cannot be changed here", request.id));
    }
    if let Some(opened) = IN_PAGE.with(|p| p.borrow().get(&request.id).cloned()) {
        return match opened.answer(&request.route, &request.query) {
            Ok(body) => (200, body),
            Err(e) => error(status_of(&e), e.to_string()),
        };
    }
    let Some(session) = SESSIONS.with(|s| s.borrow().get(&request.id).cloned()) else {
        return error(404, not_open_message(&request.id));
    };
    ask(
        &session,
        &[
            ("type", JsValue::from_str("ask")),
            ("route", JsValue::from_str(&request.route)),
            ("query", JsValue::from_str(&request.query)),
        ],
    )
    .await
}
