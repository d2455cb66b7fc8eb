//! Local mode: a snapshot opened in the browser without uploading it.
//!
//! The file never leaves the machine. A module Web Worker (`worker.js`)
//! loads this same WebAssembly module, reads the file there with the
//! `shared` reader, builds the indexes and keeps them; the page stays
//! responsive meanwhile. The snapshot then opens as the ordinary snapshot
//! page at `/snapshots/local-<n>`: `infra::api`'s one request helper hands
//! every request for a `local-` id to [`respond`], which asks the worker,
//! and the worker answers with `shared::views::route::answer`, the code
//! behind the server's own URLs. Nothing else in the page knows.
//!
//! Two sides live here: the worker's exports ([`local_open`],
//! [`local_answer`]) and the page's [`open`] and [`respond`]. A page
//! reloaded at a `local-` address has lost its worker, and says so.

// Natively only the pure parts are built, for their tests.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use std::io::Read;

use serde_json::json;
use vramscope_shared::analyzed::Analyzed;
use vramscope_shared::error::ViewError;
use vramscope_shared::views::route;
use vramscope_shared::{ReadOptions, Snapshot, read_snapshot, read_snapshot_bytes, read_snapshot_bytes_with};

/// Memory budget for files read in the browser: a tab has a few GB at most.
pub(crate) const BROWSER_MEMORY_BUDGET: u64 = 2 << 30;

/// Ids of local snapshots start with this; the server's are UUIDs.
pub(crate) const LOCAL_PREFIX: &str = "local-";

/// Whether a snapshot id names a file opened in this tab (answered by its
/// worker), not one the server holds.
pub(crate) fn is_local(id: &str) -> bool {
    id.starts_with(LOCAL_PREFIX)
}

/// A request for a local snapshot: its id, the route after the id (empty
/// for the record itself) and the query string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LocalRequest {
    /// `local-<n>`.
    pub(crate) id: String,
    /// `timeline`, `stacks/3`, `stats`, or empty for the record.
    pub(crate) route: String,
    /// Without the `?`.
    pub(crate) query: String,
}

/// The local request behind a URL (absolute or not), if it names a local
/// snapshot; `None` for everything the server answers.
pub(crate) fn local_request(url: &str) -> Option<LocalRequest> {
    // Where the API's snapshot routes begin in a request's URL.
    let (_, rest) = url.split_once(vramscope_shared::api::paths::SNAPSHOT.prefix())?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let path = path.split('#').next().unwrap_or_default();
    let (id, route) = path.split_once('/').unwrap_or((path, ""));
    id.starts_with(LOCAL_PREFIX).then(|| LocalRequest {
        id: id.to_owned(),
        route: route.trim_end_matches('/').to_owned(),
        query: query.split('#').next().unwrap_or_default().to_owned(),
    })
}

/// What the page says at a `local-` address whose file is not open (the
/// page was reloaded, or opened in another tab).
pub(crate) fn not_open_message(id: &str) -> String {
    format!(
        "{id} was a file opened in a browser tab without uploading it. Its contents stay in the tab that opened \
         it and are gone after a reload: open the file again from the library."
    )
}

/// A snapshot read in the worker, with what its record shows.
#[derive(Debug)]
pub(crate) struct Opened {
    /// The snapshot and its indexes.
    pub(crate) analyzed: Analyzed,
    /// The record, shaped like the server's `GET /api/v1/snapshots/{id}`.
    pub(crate) meta: serde_json::Value,
}

/// Read a file's bytes into an [`Opened`] snapshot, in place, calling
/// `progress` with the bytes read so far now and then. Errors are the
/// reader's (the caller names the file).
pub(crate) fn open_bytes(
    bytes: &[u8],
    id: &str,
    name: &str,
    modified_ms: f64,
    progress: impl FnMut(u64),
) -> Result<Opened, String> {
    let len = bytes.len() as u64;
    let mut steps = Steps { next_report: PROGRESS_STEP, progress };
    let options = ReadOptions::with_budget(BROWSER_MEMORY_BUDGET);
    let snapshot = read_snapshot_bytes_with(bytes, &options, |at| steps.reached(at)).map_err(|e| e.to_string())?;
    // All read: what follows is building the indexes.
    (steps.progress)(len);
    Ok(opened(snapshot, len, id, name, modified_ms))
}

/// [`open_bytes`] over a `Read` of `len` bytes: the worker reads the file
/// a slice at a time, so its bytes are never all in memory at once.
pub(crate) fn open_reader(
    input: impl Read,
    len: u64,
    id: &str,
    name: &str,
    modified_ms: f64,
    progress: impl FnMut(u64),
) -> Result<Opened, String> {
    let mut counted = Counted { rest: input, read: 0, steps: Steps { next_report: PROGRESS_STEP, progress } };
    let options = ReadOptions::with_budget(BROWSER_MEMORY_BUDGET);
    let snapshot = read_snapshot(&mut counted, &options).map_err(|e| e.to_string())?;
    // All read: what follows is building the indexes.
    (counted.steps.progress)(len);
    Ok(opened(snapshot, len, id, name, modified_ms))
}

/// The snapshot with its indexes, and its record shaped like the server's.
fn opened(snapshot: Snapshot, len: u64, id: &str, name: &str, modified_ms: f64) -> Opened {
    let meta = json!({
        "id": id,
        "sha256": "",
        "name": name,
        "job": null,
        "host": null,
        "rank": null,
        "tags": [],
        "trigger": trigger_of(&snapshot),
        "size_bytes": len,
        "uploaded_at_ms": modified_ms as i64,
        "status": "ready",
        "error": null,
        "local": true,
    });
    Opened { analyzed: Analyzed::build(snapshot), meta }
}

/// `oom` when a trace recorded an out-of-memory event, else `manual`: what
/// an upload would have been tagged with had it said.
fn trigger_of(snapshot: &Snapshot) -> &'static str {
    if snapshot.records_oom() { "oom" } else { "manual" }
}

impl Opened {
    /// The JSON the server would answer for `route?query` of this snapshot.
    pub(crate) fn answer(&self, route: &str, query: &str) -> Result<String, ViewError> {
        let name = self.meta["name"].as_str().unwrap_or_default();
        match route {
            "" => Ok(self.meta.to_string()),
            "stats" => Ok(serde_json::to_string(&self.analyzed.snapshot.stats().report(name))
                .map_err(|e| ViewError::BadRequest(e.to_string()))?),
            "file" => Err(ViewError::NotFound(format!("server copy of {name}: it was opened locally, not uploaded"))),
            _ => route::answer(&self.analyzed, route, query),
        }
    }
}

impl Opened {
    /// The comparison of this snapshot with `other` (this one is A when
    /// `self_is_a`, else B) for the query of `GET /api/v1/compare`: the
    /// server's answer, computed here (see `route::compare`).
    pub(crate) fn compare(&self, other: &Analyzed, self_is_a: bool, query: &str) -> Result<String, ViewError> {
        let (a, b) = if self_is_a { (&self.analyzed, other) } else { (other, &self.analyzed) };
        serde_json::to_string(&route::compare(a, b, query)?).map_err(|e| ViewError::BadRequest(e.to_string()))
    }
}

/// Read the other snapshot of a comparison (an uploaded snapshot's file,
/// or another local file), naming it in the error.
pub(crate) fn read_other(bytes: &[u8], other_id: &str) -> Result<Analyzed, ViewError> {
    let options = ReadOptions::with_budget(BROWSER_MEMORY_BUDGET);
    let snapshot = read_snapshot_bytes(bytes, &options)
        .map_err(|e| ViewError::BadRequest(format!("reading snapshot {other_id} to compare: {e}")))?;
    Ok(Analyzed::build(snapshot))
}

/// Bytes between two progress reports.
const PROGRESS_STEP: u64 = 4 << 20;

/// Progress reports, one per [`PROGRESS_STEP`] bytes at most.
struct Steps<F: FnMut(u64)> {
    next_report: u64,
    progress: F,
}

impl<F: FnMut(u64)> Steps<F> {
    fn reached(&mut self, read: u64) {
        if read >= self.next_report {
            (self.progress)(read);
            self.next_report = read + PROGRESS_STEP;
        }
    }
}

/// A `Read` over the file's bytes that reports how far the reader got.
struct Counted<R: Read, F: FnMut(u64)> {
    rest: R,
    read: u64,
    steps: Steps<F>,
}

impl<R: Read, F: FnMut(u64)> Read for Counted<R, F> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.rest.read(buf)?;
        self.read += n as u64;
        self.steps.reached(self.read);
        Ok(n)
    }
}

/// HTTP status the server would answer for a view error.
fn status_of(e: &ViewError) -> u16 {
    match e {
        ViewError::NotFound(_) => 404,
        ViewError::BadRequest(_) => 400,
    }
}

/// The worker's side: called by `worker.js` (exported by wasm-bindgen,
/// whatever Rust's visibility says).
#[cfg(target_arch = "wasm32")]
#[allow(unreachable_pub)]
mod worker {
    use std::cell::RefCell;

    use wasm_bindgen::JsCast;
    use wasm_bindgen::prelude::*;

    use super::*;

    thread_local! {
        /// The worker's snapshot (one file per worker).
        static OPENED: RefCell<Option<Opened>> = const { RefCell::new(None) };
        /// The snapshot it was last compared with, by id.
        static OTHER: RefCell<Option<(String, Analyzed)>> = const { RefCell::new(None) };
    }

    fn error_object(e: &ViewError) -> JsValue {
        let error = js_sys::Object::new();
        let _ = js_sys::Reflect::set(&error, &"status".into(), &JsValue::from(status_of(e)));
        let _ = js_sys::Reflect::set(&error, &"error".into(), &JsValue::from_str(&e.to_string()));
        error.into()
    }

    /// The comparison of the open snapshot with snapshot `other_id`, whose
    /// bytes come with the first request for it (`None` after: the worker
    /// keeps the last one it read); answered as `GET /api/v1/compare`
    /// would, or an error object `{status, error}`.
    #[wasm_bindgen]
    pub fn local_compare(
        other_bytes: Option<Vec<u8>>,
        other_id: &str,
        self_is_a: bool,
        query: &str,
    ) -> Result<String, JsValue> {
        let answer = (|| {
            if let Some(bytes) = other_bytes {
                OTHER.with(|o| o.borrow_mut().take());
                let other = read_other(&bytes, other_id)?;
                OTHER.with(|o| *o.borrow_mut() = Some((other_id.to_owned(), other)));
            }
            OPENED.with(|o| {
                let opened = o.borrow();
                let opened =
                    opened.as_ref().ok_or_else(|| ViewError::NotFound("open file in this worker".to_owned()))?;
                OTHER.with(|other| match other.borrow().as_ref() {
                    Some((id, other)) if id == other_id => opened.compare(other, self_is_a, query),
                    _ => Err(ViewError::NotFound(format!("snapshot {other_id} in this worker: send its bytes"))),
                })
            })
        })();
        answer.map_err(|e| error_object(&e))
    }

    /// A `Read` over a file of `len` bytes that the worker hands out a
    /// slice at a time: `slice(offset, length)` answers a `Uint8Array`
    /// (read with `FileReaderSync`), copied into the reader's buffer. Only
    /// one slice is ever held outside the WebAssembly memory, so a 1 GB
    /// file costs no second copy of itself.
    struct Slices<'a> {
        slice: &'a js_sys::Function,
        offset: u64,
        len: u64,
    }

    impl Read for Slices<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let want = (self.len - self.offset).min(buf.len() as u64);
            if want == 0 {
                return Ok(0);
            }
            let chunk = self
                .slice
                .call2(&JsValue::NULL, &JsValue::from_f64(self.offset as f64), &JsValue::from_f64(want as f64))
                .map_err(|e| std::io::Error::other(format!("reading the file at byte {}: {e:?}", self.offset)))?;
            let chunk: js_sys::Uint8Array = chunk.unchecked_into();
            let n = (chunk.length() as usize).min(buf.len());
            if n == 0 {
                return Err(std::io::Error::other(format!("the file ended at byte {} of {}", self.offset, self.len)));
            }
            chunk.subarray(0, n as u32).copy_to(&mut buf[..n]);
            self.offset += n as u64;
            Ok(n)
        }
    }

    /// Bytes asked of the file at a time: the reader's own buffer is
    /// smaller, so this one is read through a `BufReader` of this size.
    const SLICE_BYTES: usize = 8 << 20;

    /// Read a snapshot file of `len` bytes in the worker and keep it for
    /// [`local_answer`]; `slice(offset, length)` answers its bytes there as
    /// a `Uint8Array`. `progress(bytes_read)` is called now and then.
    /// Answers the record (JSON); a file that is no snapshot is an error
    /// saying why.
    #[wasm_bindgen]
    pub fn local_open(
        slice: &js_sys::Function,
        len: f64,
        id: &str,
        name: &str,
        modified_ms: f64,
        progress: &js_sys::Function,
    ) -> Result<String, JsError> {
        // A second file replaces the first; free it before reading.
        OPENED.with(|o| o.borrow_mut().take());
        let len = len.max(0.0) as u64;
        let input = std::io::BufReader::with_capacity(SLICE_BYTES, Slices { slice, offset: 0, len });
        let opened = open_reader(input, len, id, name, modified_ms, |read| {
            let _ = progress.call1(&JsValue::NULL, &JsValue::from_f64(read as f64));
        })
        .map_err(|e| JsError::new(&e))?;
        let meta = opened.meta.to_string();
        OPENED.with(|o| *o.borrow_mut() = Some(opened));
        Ok(meta)
    }

    /// The JSON answer of `route?query` for the open snapshot, or an error
    /// object `{status, error}` (404 or 400, as the server would answer).
    #[wasm_bindgen]
    pub fn local_answer(route: &str, query: &str) -> Result<String, JsValue> {
        let answer = OPENED.with(|o| match o.borrow().as_ref() {
            Some(opened) => opened.answer(route, query),
            None => Err(ViewError::NotFound("open file in this worker".to_owned())),
        });
        answer.map_err(|e| error_object(&e))
    }
}

#[cfg(target_arch = "wasm32")]
pub(crate) use page::{
    OpenProgress, OtherBytes, compare, file_url, holds_other, in_report, open, opened_files, respond,
};

/// The page's side: one worker per opened file, and requests to it.
#[cfg(target_arch = "wasm32")]
mod page {
    use std::cell::{Cell, RefCell};
    use std::collections::HashMap;
    use std::rc::Rc;

    use js_sys::{Function, Promise, Reflect};
    use wasm_bindgen::JsCast;
    use wasm_bindgen::prelude::*;
    use wasm_bindgen_futures::JsFuture;
    use web_sys::{File, MessageEvent, Worker, WorkerOptions, WorkerType};

    use super::*;

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
        static IN_PAGE_OTHER: RefCell<Option<(String, Rc<Analyzed>)>> = const { RefCell::new(None) };
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
        let create =
            Reflect::get(&url_class, &JsValue::from_str("createObjectURL")).ok()?.dyn_into::<Function>().ok()?;
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_ids_are_answered_here() {
        let r =
            local_request("http://127.0.0.1:8080/api/v1/snapshots/local-3/timeline?device=0&px=900").expect("local");
        assert_eq!(r, LocalRequest { id: "local-3".into(), route: "timeline".into(), query: "device=0&px=900".into() });
        assert!(is_local("local-3") && !is_local("01a23d5b-9791-7525-b19d-5fb2571ac7ea"));
        let meta = local_request("/api/v1/snapshots/local-12").expect("local");
        assert_eq!((meta.id.as_str(), meta.route.as_str(), meta.query.as_str()), ("local-12", "", ""));
        assert_eq!(local_request("/api/v1/snapshots/local-1/stacks/7").expect("local").route, "stacks/7");
        assert_eq!(local_request("/api/v1/snapshots/0190f1e2-aaaa/timeline?px=3"), None);
        assert_eq!(local_request("/api/v1/snapshots?limit=100"), None);
    }

    #[test]
    fn a_local_file_answers_like_the_server() {
        let bytes = vramscope_shared::testing::corpus_bytes("oom_leak.pickle");
        let mut reports = Vec::new();
        let opened =
            open_bytes(&bytes, "local-1", "oom_leak.pickle", 1.7e12, |read| reports.push(read)).expect("reads");
        assert_eq!(reports, [bytes.len() as u64], "one report, at the end: the file is under 4 MiB");
        let meta: serde_json::Value = serde_json::from_str(&opened.answer("", "").expect("meta")).expect("json");
        assert_eq!(meta["trigger"], "oom");
        assert_eq!(meta["size_bytes"], bytes.len());
        assert_eq!(meta["status"], "ready");
        let stats: serde_json::Value = serde_json::from_str(&opened.answer("stats", "").expect("stats")).expect("json");
        assert_eq!(stats["file"], "oom_leak.pickle");
        let window = opened.answer("timeline", "px=300&axis=event").expect("timeline");
        assert!(window.contains("\"buckets\""), "{}", &window[..window.len().min(200)]);
        assert!(matches!(opened.answer("file", ""), Err(ViewError::NotFound(_))));
        assert_eq!(status_of(&opened.answer("timeline", "px=x").expect_err("bad query")), 400);
        // Compared with another file, either way round, as the server would.
        let other_bytes = vramscope_shared::testing::corpus_bytes("streams.pickle");
        let other = read_other(&other_bytes, "0190-uploaded").expect("the other snapshot");
        let q = "a=local-1&b=0190-uploaded&px=40";
        let server = route::compare(&opened.analyzed, &other, q).expect("diff");
        assert_eq!(opened.compare(&other, true, q).expect("compared"), serde_json::to_string(&server).expect("json"));
        let reversed = route::compare(&other, &opened.analyzed, q).expect("diff");
        assert_eq!(
            opened.compare(&other, false, q).expect("compared"),
            serde_json::to_string(&reversed).expect("json")
        );
        let bad = read_other(b"\x80\x04K*.", "0190-x").expect_err("no snapshot");
        assert!(bad.to_string().contains("0190-x"), "{bad}");
        let err = open_bytes(b"\x80\x04K*.", "local-2", "int.pickle", 0.0, |_| {}).expect_err("no snapshot");
        assert!(err.contains("not a PyTorch memory snapshot"), "{err}");
    }
}
