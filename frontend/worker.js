// vramscope's Web Worker for files opened without uploading (see
// frontend/src/infra/local.rs). It loads the same WebAssembly module as the page,
// reads the file with the same reader the server uses, keeps the snapshot
// and its indexes, and answers the page's view requests with the JSON the
// server would send. The file's bytes never leave this worker.
//
// Page -> worker: {type: "open", file, id, name, modified}
//                 {type: "ask", seq, route, query}
//                 {type: "compare", seq, other, other_id, self_is_a, query}
// Worker -> page: {type: "progress", phase: "reading" | "parsing" | "indexing", read}
//                 {type: "opened", meta, timing} | {type: "failed", error}
//                 {type: "answer", seq, json, ms} | {type: "answer", seq, status, error}
import init, { local_open, local_answer, local_compare, local_finish_indexes } from "./vramscope_frontend.js";

const started = init();
// For the dashboard bench: when the module was ready, on this worker's
// clock (which starts when the page creates the worker).
let ready_ms = null;
started.then(() => { ready_ms = performance.now(); });

self.onmessage = async (event) => {
  const message = event.data;
  if (message.type === "open") {
    const received_ms = performance.now();
    try {
      self.postMessage({ type: "progress", phase: "reading", read: 0 });
      const file = message.file;
      // Read a slice at a time: the file is never all in memory at once,
      // neither here nor in WebAssembly. Where the page is cross-origin
      // isolated, a second worker reads ahead while this one parses; it
      // starts while the module does.
      const ahead = readAhead(file);
      const exports = await started;
      const slices = (await ahead) ?? readInPlace(file);
      let read_ms = 0;
      const slice = (offset, length) => {
        const t = performance.now();
        const bytes = slices(offset, length);
        read_ms += performance.now() - t;
        return bytes;
      };
      const start = performance.now();
      let parsed = null;
      const meta = local_open(slice, file.size, message.id, message.name, message.modified || Date.now(), (read) => {
        if (read >= file.size && parsed === null) parsed = performance.now();
        self.postMessage({ type: "progress", phase: read >= file.size ? "indexing" : "parsing", read });
      });
      const end = performance.now();
      stopReading();
      // For the dashboard bench: where the time went, and the WebAssembly
      // memory (it never shrinks: its size is the peak).
      // The *_at_ms are on the worker's clock (from its creation).
      const timing = {
        parse_ms: (parsed ?? end) - start,
        index_ms: end - (parsed ?? end),
        read_ms,
        read_ahead: read_ahead_used,
        wasm_bytes: exports.memory.buffer.byteLength,
        received_at_ms: received_ms,
        ready_at_ms: ready_ms,
        opened_at_ms: end,
      };
      self.postMessage({ type: "opened", meta, timing });
      unfinished = true;
    } catch (e) {
      stopReading();
      self.postMessage({ type: "failed", error: String(e && e.message ? e.message : e) });
    }
  } else if (message.type === "compare") {
    // The other snapshot of a comparison: a local File, bytes the page
    // fetched from the server, or null when this worker holds it already.
    try {
      await started;
      let other = message.other;
      if (other instanceof Blob) other = new Uint8Array(await other.arrayBuffer());
      self.postMessage({
        type: "answer",
        seq: message.seq,
        json: local_compare(other || undefined, message.other_id, message.self_is_a, message.query),
      });
    } catch (e) {
      const status = e && typeof e.status === "number" ? e.status : 500;
      const error = e && e.error ? e.error : String(e && e.message ? e.message : e);
      self.postMessage({ type: "answer", seq: message.seq, status, error });
    }
  } else if (message.type === "ask") {
    queue.push(message);
    setTimeout(answerNext, 0);
  }
};

// Reading the file. FileReaderSync blocks, and so does the parse, which
// asks for the next bytes only when it needs them: on one thread the
// file's reading (a third of the parse of a 90 MB file in Chromium) and the
// parse add up. A reader worker overlaps them: it reads slices ahead into a
// ring of slots in a SharedArrayBuffer, and the parse waits on an
// Atomics counter only when it has caught up. SharedArrayBuffer needs a
// cross-origin isolated page (the server's COOP/COEP headers); a report
// opened from a file is not one, and reads in place.

/// A slice at a time, on this thread: `slice(offset, length)` answers the
/// bytes at `offset`, at most `length` of them.
const readInPlace = (file) => {
  const reader = new FileReaderSync();
  return (offset, length) => new Uint8Array(reader.readAsArrayBuffer(file.slice(offset, offset + length)));
};

// The ring: SLOTS slots of SLOT_BYTES, and a control block of Int32s: slices
// filled, slices taken, a failure flag, a stop flag (the parse ended early),
// then each slot's length.
const SLOTS = 4;
const SLOT_BYTES = 4 << 20;
const FILLED = 0, TAKEN = 1, FAILED = 2, STOP = 3, HEADER = 4;
// A reader that has not started by then never will (its script was
// refused). A worker's nested worker starts only while its parent's
// thread is free, so the parse waits for it before it blocks.
const START_WAIT_MS = 2000;
// A reader that has filled nothing for this long is taken for dead (a
// worker killed for memory says nothing to a thread that waits): the
// parse reads on in place, which is always right, if slower.
const STALL_MS = 60000;

// The reader worker's whole script (a blob: URL, so that a report's page
// needs no second file), with the ring's layout written in from the
// constants above. It fills slot i % SLOTS with slice i once the parse has
// taken slice i - SLOTS.
const READER_SCRIPT = `
self.onmessage = ({ data: { file, ring, control } }) => {
  const bytes = new Uint8Array(ring);
  const c = new Int32Array(control);
  const lengths = new Int32Array(control, 4 * ${HEADER});
  const reader = new FileReaderSync();
  self.postMessage("started");
  try {
    for (let i = 0, offset = 0; offset < file.size; i++) {
      for (;;) {
        if (Atomics.load(c, ${STOP})) return;
        const taken = Atomics.load(c, ${TAKEN});
        if (i - taken < ${SLOTS}) break;
        Atomics.wait(c, ${TAKEN}, taken);
      }
      const end = Math.min(file.size, offset + ${SLOT_BYTES});
      const slice = new Uint8Array(reader.readAsArrayBuffer(file.slice(offset, end)));
      bytes.set(slice, (i % ${SLOTS}) * ${SLOT_BYTES});
      lengths[i % ${SLOTS}] = slice.length;
      Atomics.store(c, ${FILLED}, i + 1);
      Atomics.notify(c, ${FILLED});
      if (slice.length === 0) return;
      offset += slice.length;
    }
  } catch (e) {
    Atomics.store(c, ${FAILED}, 1);
    Atomics.notify(c, ${FILLED});
  }
};
`;

let reading = null; // the reader worker, while one runs
let read_ahead_used = false;

const stopReading = () => {
  if (reading === null) return;
  Atomics.store(reading.control, STOP, 1);
  Atomics.notify(reading.control, TAKEN);
  reading.worker.terminate();
  reading = null;
};

/// A promise of `slice(offset, length)` over a reader worker's ring, or of
/// null where this page cannot share memory or the reader did not start
/// (then the caller reads in place). A failure in the reader, or a read
/// out of order, falls back to reading in place from where the parse is,
/// so the error a user sees is FileReaderSync's own.
const readAhead = async (file) => {
  stopReading();
  read_ahead_used = false;
  if (!self.crossOriginIsolated || typeof SharedArrayBuffer !== "function" || file.size <= SLOT_BYTES) return null;
  let worker;
  const url = URL.createObjectURL(new Blob([READER_SCRIPT], { type: "text/javascript" }));
  try {
    worker = new Worker(url);
  } catch (e) {
    return null;
  } finally {
    URL.revokeObjectURL(url);
  }
  const ring = new SharedArrayBuffer(SLOTS * SLOT_BYTES);
  const shared = new SharedArrayBuffer(4 * (HEADER + SLOTS));
  const control = new Int32Array(shared);
  const lengths = new Int32Array(shared, 4 * HEADER);
  const bytes = new Uint8Array(ring);
  reading = { worker, control };
  const began = new Promise((resolve) => {
    worker.onmessage = () => resolve(true);
    worker.onerror = () => resolve(false);
    setTimeout(() => resolve(false), START_WAIT_MS);
  });
  worker.postMessage({ file, ring, control: shared });
  if (!(await began) || reading === null || reading.worker !== worker) {
    if (reading !== null && reading.worker === worker) stopReading();
    return null;
  }
  read_ahead_used = true;
  const inPlace = readInPlace(file);
  let fallback = false;
  // The slice being handed out: its index, the file offset it starts at,
  // and how far into it the parse has read.
  let index = 0, start = 0, at = 0;
  return (offset, length) => {
    if (!fallback && offset !== start + at) fallback = true;
    if (!fallback) {
      let len = index < Atomics.load(control, FILLED) ? lengths[index % SLOTS] : -1;
      if (len > 0 && at === len) {
        // This slot is used up: hand it back to the reader.
        index += 1; start += len; at = 0;
        Atomics.store(control, TAKEN, index);
        Atomics.notify(control, TAKEN);
        len = -1;
      }
      const since = performance.now();
      while (len < 0) {
        const filled = Atomics.load(control, FILLED);
        if (Atomics.load(control, FAILED) || performance.now() - since > STALL_MS) break;
        if (index < filled) len = lengths[index % SLOTS];
        else Atomics.wait(control, FILLED, filled, 1000);
      }
      if (len < 0) {
        fallback = true;
      } else {
        const n = Math.min(length, len - at);
        const from = (index % SLOTS) * SLOT_BYTES + at;
        at += n;
        return bytes.subarray(from, from + n);
      }
    }
    if (reading !== null) stopReading();
    return inPlace(offset, length);
  };
};

// Requests wait here while the worker is busy (opening the file, or one
// long answer) and are answered one per task, the quick ones that draw the
// page first: a view that builds an analysis on its first call (breakdown,
// pools: seconds on a 1 GB file) must not hold back the first timeline.
const queue = [];
const FIRST = ["", "timeline", "stats", "annotations", "host"];
const rank = (route) => {
  const i = FIRST.indexOf(route);
  return i < 0 ? FIRST.length : i;
};

// After a quick answer, a view that may take seconds waits this long: the
// page asks its main timeline only once the first answers are in, and that
// request should find the worker free.
const SETTLE_MS = 150;
let lastQuick = 0;

const answerNext = async () => {
  if (queue.length === 0) return;
  let best = 0;
  for (let i = 1; i < queue.length; i++) if (rank(queue[i].route) < rank(queue[best].route)) best = i;
  const quick = rank(queue[best].route) < FIRST.length;
  const wait = lastQuick + SETTLE_MS - performance.now();
  if (!quick && wait > 0) {
    setTimeout(answerNext, wait);
    return;
  }
  if (quick) lastQuick = performance.now();
  const [message] = queue.splice(best, 1);
  try {
    await started;
    const start = performance.now();
    const json = local_answer(message.route, message.query);
    self.postMessage({ type: "answer", seq: message.seq, json, ms: performance.now() - start, route: message.route });
    finishSoon();
  } catch (e) {
    const status = e && typeof e.status === "number" ? e.status : 500;
    const error = e && e.error ? e.error : String(e && e.message ? e.message : e);
    self.postMessage({ type: "answer", seq: message.seq, status, error });
  }
};

// local_open leaves the timeline's allocation indexes (nearly half of the
// build) for later: the first answers find a window's largest allocations
// by a scan instead, the same answers. They are built once the first
// answers are out and no request has waited for SETTLE_MS, while the page
// draws on its own thread.
let unfinished = false;
let finishTimer = null;
const finishSoon = () => {
  if (!unfinished) return;
  if (finishTimer !== null) clearTimeout(finishTimer);
  finishTimer = setTimeout(() => {
    finishTimer = null;
    if (queue.length > 0) {
      finishSoon();
      return;
    }
    unfinished = false;
    local_finish_indexes();
  }, SETTLE_MS);
};
