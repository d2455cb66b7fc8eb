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
import init, { local_open, local_answer, local_compare } from "./vramscope_frontend.js";

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
      const exports = await started;
      const file = message.file;
      // Read a slice at a time (FileReaderSync, dedicated workers only): the
      // file is never all in memory at once, neither here nor in WebAssembly.
      const reader = new FileReaderSync();
      let read_ms = 0;
      const slice = (offset, length) => {
        const t = performance.now();
        const bytes = new Uint8Array(reader.readAsArrayBuffer(file.slice(offset, offset + length)));
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
      // For the dashboard bench: where the time went, and the WebAssembly
      // memory (it never shrinks: its size is the peak).
      // The *_at_ms are on the worker's clock (from its creation).
      const timing = {
        parse_ms: (parsed ?? end) - start,
        index_ms: end - (parsed ?? end),
        read_ms,
        wasm_bytes: exports.memory.buffer.byteLength,
        received_at_ms: received_ms,
        ready_at_ms: ready_ms,
        opened_at_ms: end,
      };
      self.postMessage({ type: "opened", meta, timing });
    } catch (e) {
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
  } catch (e) {
    const status = e && typeof e.status === "number" ? e.status : 500;
    const error = e && e.error ? e.error : String(e && e.message ? e.message : e);
    self.postMessage({ type: "answer", seq: message.seq, status, error });
  }
};
