// The worker's side of opening a local file, without a browser: Node's V8
// (Chromium's engine) runs the dashboard's WebAssembly as `worker.js` does
// and times `local_open` and the answers the page asks first (the record,
// the statistics, the first timeline window), then what the worker builds
// after them (`local_finish_indexes`, where the build has it), and checks
// that the window is the same after. Run two builds of `frontend/dist`
// alternately to compare them on a busy machine (docs/benchmarks.md):
//
//   node server/benches/local_open.mjs frontend/dist FILE
//
// One line of JSON: ms from the open's start to the open's end and to the
// first timeline answer, ms of the later build, the window's length and hash.
import fs from "fs";
import path from "path";
import { pathToFileURL } from "url";

const [dist, file] = process.argv.slice(2);
if (!dist || !file) {
  console.error("usage: node local_open.mjs DIST FILE");
  process.exit(2);
}
const glue = await import(pathToFileURL(path.resolve(dist, "vramscope_frontend.js")).href);
await glue.default({ module_or_path: fs.readFileSync(path.resolve(dist, "vramscope_frontend_bg.wasm")) });
const bytes = fs.readFileSync(file);
// The worker reads slices with FileReaderSync; here they view the buffer.
const slice = (offset, length) =>
  new Uint8Array(bytes.buffer, bytes.byteOffset + offset, Math.min(length, bytes.length - offset));
const start = performance.now();
glue.local_open(slice, bytes.length, "local-1", path.basename(file), 0, () => {});
const opened = performance.now();
glue.local_answer("", "");
glue.local_answer("stats", "");
// The page's first window at 1400 px wide.
const query = "device=0&px=1245&axis=event&max_allocations=2000";
const window = glue.local_answer("timeline", query);
const answered = performance.now();
if (glue.local_finish_indexes) glue.local_finish_indexes();
const finished = performance.now();
if (glue.local_answer("timeline", query) !== window) {
  console.error("the first window changed once the worker finished its indexes");
  process.exit(1);
}
let hash = 0;
for (let i = 0; i < window.length; i++) hash = (hash * 31 + window.charCodeAt(i)) | 0;
const round = (ms) => Math.round(ms * 10) / 10;
console.log(JSON.stringify({
  open_ms: round(opened - start),
  first_timeline_ms: round(answered - start),
  finish_ms: round(finished - answered),
  window_bytes: window.length,
  window_hash: hash,
}));
