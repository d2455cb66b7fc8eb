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
//                 {type: "opened", meta} | {type: "failed", error}
//                 {type: "answer", seq, json} | {type: "answer", seq, status, error}
import init, { local_open, local_answer, local_compare } from "./vramscope_frontend.js";

const started = init();

self.onmessage = async (event) => {
  const message = event.data;
  if (message.type === "open") {
    try {
      self.postMessage({ type: "progress", phase: "reading", read: 0 });
      const [buffer] = await Promise.all([message.file.arrayBuffer(), started]);
      const bytes = new Uint8Array(buffer);
      const meta = local_open(bytes, message.id, message.name, message.modified || Date.now(), (read) => {
        self.postMessage({ type: "progress", phase: read >= bytes.length ? "indexing" : "parsing", read });
      });
      self.postMessage({ type: "opened", meta });
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
    try {
      await started;
      self.postMessage({ type: "answer", seq: message.seq, json: local_answer(message.route, message.query) });
    } catch (e) {
      const status = e && typeof e.status === "number" ? e.status : 500;
      const error = e && e.error ? e.error : String(e && e.message ? e.message : e);
      self.postMessage({ type: "answer", seq: message.seq, status, error });
    }
  }
};
