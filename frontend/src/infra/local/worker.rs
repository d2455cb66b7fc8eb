//! The worker's side: called by `worker.js` (exported by wasm-bindgen,
//! whatever Rust's visibility says).

use std::cell::RefCell;
use std::io::Read;

use vramscope_shared::error::ViewError;
use vramscope_shared::indexed::IndexedSnapshot;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

use super::{Opened, open_reader, read_other, status_of};

thread_local! {
    /// The worker's snapshot (one file per worker).
    static OPENED: RefCell<Option<Opened>> = const { RefCell::new(None) };
    /// The snapshot it was last compared with, by id.
    static OTHER: RefCell<Option<(String, IndexedSnapshot)>> = const { RefCell::new(None) };
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
            let opened = opened.as_ref().ok_or_else(|| ViewError::NotFound("open file in this worker".to_owned()))?;
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

/// Build the indexes [`local_open`] left for later (the timeline's
/// allocation indexes: nearly half of the build, which the first answers
/// do without); answers whether there was anything to build. `worker.js`
/// calls it once the first answers are sent and no request waits.
#[wasm_bindgen]
pub fn local_finish_indexes() -> bool {
    OPENED.with(|o| o.borrow().as_ref().is_some_and(Opened::finish_indexes))
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
