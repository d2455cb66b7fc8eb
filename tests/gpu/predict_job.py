"""The GPU truth for `vramscope predict`: three small training jobs, each a
function of one integer knob, recorded at three small sizes and measured
for real at bigger sizes and under memory caps.

Families (each run is a process of its own, so every run starts from an
empty caching allocator; same seed, same K optimizer steps, same control
flow at every size, only the tensor shapes change):

- `transformer`: a GPT (vocab 8192, d 512, 4 layers, 8 heads, seq 256,
  `F.scaled_dot_product_attention`), AdamW. Knob: batch size.
- `convnet`: a ResNet-ish conv net (conv+BN+ReLU stages with a residual
  block each, 64/128/256/512 channels, 3x64x64 inputs, 10 classes), SGD
  with momentum. Knob: batch size.
- `attention`: a transformer with explicit softmax attention
  (q@k^T/sqrt(d), causal mask, softmax, @v: memory quadratic in the
  sequence length; vocab 8192, d 256, 4 layers, 8 heads), batch 4, AdamW.
  Knob: sequence length.
- `lstm`: cuDNN's LSTM (2 layers, hidden 512, embedding 256, vocab 1000),
  batch 32, AdamW. Knob: sequence length.
- `kvcache`: inference, no backward: the `transformer`'s GPT shape (d 512,
  4 layers) serving batch 8 from a static KV cache: each step allocates
  the cache, prefills 64 tokens and decodes 32 over the whole cache under
  a mask. Knob: the cache's context length.

Modes of one run (`one`):

- `record`: `_record_memory_history(max_entries=1_000_000, stacks="python")`
  first, K steps, then `STEM.pickle` (`torch.cuda.memory._snapshot()`,
  pickle protocol 4) and `STEM.stats.json` (`memory_stats()` and the
  peaks, knob, family, K, torch version, total memory, step times).
- `real`: K steps, no recording; `STEM.json` with the peaks, retries, OOMs
  and per-step times (synchronize + perf_counter).
- `record` with `--cap-bytes`: recorded under the cap (the trace of a run
  that runs out, to set beside the model's replay of it).
- `capped`: `set_per_process_memory_fraction(CAP / total_memory)` first,
  then K steps; an OOM is caught and recorded. `STEM.json` as `real`, with
  the fraction, the total memory and the exact capacity
  int(fraction * total).

Phases (`plan`), which start the runs as subprocesses of this script
(`sys.executable`), several at a time on the one GPU, each writing its
JSON as soon as it ends, so a timeout keeps what was done:

- `a`: the records (3 sizes a family), the real runs at 4x and 8x the
  largest recorded size (one at a time, for clean step times), and a few
  capped probes (one fit and one OOM a family).
- `b`: the capped grids (see GRIDS), each grid extended past its ends
  until it spans fit -> OOM; then attention grids at step 64 under 5, 6,
  7 and 8 GiB (the non-monotonic search).
- `c`: more of the non-monotonic search: attention under each of --caps,
  a window of 8 step-64 points around the first failing size expected
  from --ref-fail at --ref-cap (memory about quadratic in the sequence
  length), extended until it spans fit -> OOM; any grid where a size
  fails below a fitting one is run again to check that it repeats.

As run on the H200 (two device calls; the second folder is /tmp/pj2):

    PYTHONUNBUFFERED=1 python3 tests/gpu/predict_job.py plan a /tmp/pj --jobs 6 --deadline 200 \
      && PYTHONUNBUFFERED=1 python3 tests/gpu/predict_job.py plan b /tmp/pj --jobs 6 --deadline 470
    PYTHONUNBUFFERED=1 python3 tests/gpu/predict_job.py plan c /tmp/pj2 --jobs 10 --deadline 330 \
        --caps 5.5,6.5,4.5,7.5,5.25,5.75,6.25,6.75,4,4.25,4.75,3.5,3.75,3,7.25,7.75,8.5,9,9.5,10,8.25,8.75,3.25,9.25,9.75
    python3 tests/gpu/predict_job.py one attention 384 record /tmp/x/attention_384 --steps 3
    python3 tests/gpu/predict_job.py assemble /tmp/pj /tmp/pj2 --fixtures tests/fixtures/predict

`assemble` (standard library only, no GPU) copies the recorded pickles and
stats into the fixture folder as FAMILY_SIZE.pickle/.stats.json and writes
`truth.json` from every run's JSON found under the given folders.
"""

import argparse
import glob
import json
import math
import os
import pickle
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

GiB = 1 << 30
STEPS = 3

FAMILIES = {
    # knob name, recorded sizes, real-run multiples of the largest recorded size
    "transformer": {"knob": "batch_size", "record": [2, 4, 6], "fixed": {"seq_len": 256}},
    "convnet": {"knob": "batch_size", "record": [8, 16, 24], "fixed": {"image": [3, 64, 64]}},
    "attention": {"knob": "seq_len", "record": [128, 256, 384], "fixed": {"batch_size": 4}},
    "lstm": {"knob": "seq_len", "record": [64, 128, 192], "fixed": {"batch_size": 32, "hidden": 512, "layers": 2}},
    "kvcache": {"knob": "context", "record": [256, 512, 768],
                "fixed": {"batch_size": 8, "prefill": 64, "decode": 32, "inference": True}},
}
REAL_MULTIPLES = [4, 8]

# Phase a: capped probes, (family, cap GiB, size).
PROBES = [
    ("convnet", 4, 64), ("convnet", 4, 2048),
    ("transformer", 6, 8), ("transformer", 6, 1024),
    ("attention", 6, 1024), ("attention", 6, 4096),
]

# Phase b: capped grids, (name, family, cap GiB, first, last, step).
GRIDS = [
    ("convnet_4g", "convnet", 4, 64, 320, 16),
    ("transformer_6g", "transformer", 6, 64, 192, 8),
    ("attention_6g", "attention", 6, 1024, 3072, 128),
]
# Then, for the non-monotonic search: attention grids at step 64 under these
# caps, centred on the 6 GiB grid's first failing size scaled by sqrt(cap/6)
# (memory is about quadratic in the sequence length).
NONMONO_CAPS = [5, 6, 7, 8]
NONMONO_REF = "attention_6g"
MAX_EXTEND = 12  # grid points added past an end that does not yet span fit -> OOM


# ---------------------------------------------------------------- models

def build(family, size):
    """The model, the optimizer and a batch maker for one family at one size."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, d, heads, explicit):
            super().__init__()
            self.heads, self.explicit = heads, explicit
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.fc1 = nn.Linear(d, 4 * d)
            self.fc2 = nn.Linear(4 * d, d)

        def forward(self, x, mask):
            b, t, d = x.shape
            hd = d // self.heads
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, self.heads, hd).transpose(1, 2) for z in (q, k, v))
            if self.explicit:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
                att = att.masked_fill(mask, float("-inf"))
                att = F.softmax(att, dim=-1)
                y = att @ v
            else:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class Gpt(nn.Module):
        def __init__(self, vocab, d, layers, heads, ctx, explicit):
            super().__init__()
            self.explicit = explicit
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(ctx, d)
            self.blocks = nn.ModuleList(Block(d, heads, explicit) for _ in range(layers))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            t = idx.shape[1]
            x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
            mask = None
            if self.explicit:
                mask = torch.ones(t, t, dtype=torch.bool, device=idx.device).triu(1)
            for block in self.blocks:
                x = block(x, mask)
            return self.head(self.ln(x))

    def conv_bn(cin, cout, stride):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    class Residual(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.a = conv_bn(c, c, 1)
            self.b = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c))

        def forward(self, x):
            return F.relu(x + self.b(self.a(x)))

    class ConvNet(nn.Module):
        def __init__(self, widths=(64, 128, 256, 512), classes=10):
            super().__init__()
            stages, c = [], 3
            for i, w in enumerate(widths):
                stages += [conv_bn(c, w, 1 if i == 0 else 2), Residual(w)]
                c = w
            self.features = nn.Sequential(*stages)
            self.head = nn.Linear(c, classes)

        def forward(self, x):
            return self.head(self.features(x).mean(dim=(2, 3)))

    def token_batches(vocab, shape):
        """Inputs and targets of `shape`, token ids below `vocab`, drawn in that order."""

        def batch(g):
            x = torch.randint(0, vocab, shape, device="cuda", generator=g)
            y = torch.randint(0, vocab, shape, device="cuda", generator=g)
            return x, y

        return batch

    if family == "transformer":
        model = Gpt(vocab=8192, d=512, layers=4, heads=8, ctx=256, explicit=False).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        batch = token_batches(8192, (size, 256))
    elif family == "attention":
        model = Gpt(vocab=8192, d=256, layers=4, heads=8, ctx=8192, explicit=True).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        batch = token_batches(8192, (4, size))
    elif family == "convnet":
        model = ConvNet().cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def batch(g):
            x = torch.randn(size, 3, 64, 64, device="cuda", generator=g)
            y = torch.randint(0, 10, (size,), device="cuda", generator=g)
            return x, y
    elif family == "lstm":
        # cuDNN's LSTM (2 layers, hidden 512) over embedded tokens; the knob
        # is the sequence length (cuDNN's workspace and reserve space grow with it).
        class Lstm(nn.Module):
            def __init__(self):
                super().__init__()
                self.tok = nn.Embedding(1000, 256)
                self.rnn = nn.LSTM(256, 512, num_layers=2, batch_first=True)
                self.head = nn.Linear(512, 1000)

            def forward(self, idx):
                return self.head(self.rnn(self.tok(idx))[0])

        model = Lstm().cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        batch = token_batches(1000, (32, size))
    elif family == "kvcache":
        # Inference with a static KV cache of `size` positions (batch 8):
        # each step allocates the cache, prefills 64 tokens, then decodes 32
        # one at a time, attending over the whole cache under a mask (as a
        # static cache does). Memory grows with the cache, not with
        # activations kept for a backward.
        d, heads, layers = 512, 8, 4
        hd = d // heads
        gpt = Gpt(vocab=8192, d=d, layers=layers, heads=heads, ctx=1 << 14, explicit=False).cuda().eval()

        class Server(nn.Module):
            def __init__(self):
                super().__init__()
                self.gpt = gpt

            def attend(self, block, x, cache_k, cache_v, start, valid):
                b, t, _ = x.shape
                q, k, v = block.qkv(block.ln1(x)).split(d, dim=2)
                q, k, v = (z.view(b, t, heads, hd).transpose(1, 2) for z in (q, k, v))
                cache_k[:, :, start:start + t] = k
                cache_v[:, :, start:start + t] = v
                y = F.scaled_dot_product_attention(q, cache_k, cache_v, attn_mask=valid)
                x = x + block.proj(y.transpose(1, 2).reshape(b, t, d))
                return x + block.fc2(F.gelu(block.fc1(block.ln2(x))))

            def serve(self, g):
                b = 8
                caches = [(torch.zeros(b, heads, size, hd, device="cuda"), torch.zeros(b, heads, size, hd, device="cuda"))
                          for _ in range(layers)]
                positions = torch.arange(size, device="cuda")
                tokens = torch.randint(0, 8192, (b, 64), device="cuda", generator=g)
                start = 0
                for _ in range(1 + 32):
                    t = tokens.shape[1]
                    x = gpt.tok(tokens) + gpt.pos(torch.arange(start, start + t, device="cuda"))
                    query_pos = torch.arange(start, start + t, device="cuda").unsqueeze(1)
                    valid = positions.unsqueeze(0) <= query_pos
                    for block, (ck, cv) in zip(gpt.blocks, caches):
                        x = self.attend(block, x, ck, cv, start, valid)
                    logits = gpt.head(gpt.ln(x[:, -1:]))
                    start += t
                    tokens = logits.argmax(-1)
                return logits

        model = Server()
        opt = None

        def batch(g):
            return g, None
    else:
        raise SystemExit("unknown family %r" % family)
    return model, opt, batch


# ---------------------------------------------------------------- one run

def one(args):
    import torch
    import torch.nn.functional as F

    family, size, mode, stem = args.family, args.size, args.mode, args.stem
    os.makedirs(os.path.dirname(os.path.abspath(stem)), exist_ok=True)
    out = {"family": family, "knob": FAMILIES[family]["knob"], "size": size, "mode": mode,
           "steps": args.steps, "torch": torch.__version__}
    wall0 = time.perf_counter()
    if mode == "capped" or (mode == "record" and args.cap_bytes):
        total = torch.cuda.get_device_properties(0).total_memory
        fraction = args.cap_bytes / total
        torch.cuda.set_per_process_memory_fraction(fraction, 0)
        free, total_mgi = torch.cuda.mem_get_info(0)
        out.update(cap_bytes_asked=args.cap_bytes, fraction=fraction, total_memory=total,
                   mem_get_info_total=total_mgi, capacity=int(fraction * total),
                   capacity_mem_get_info=int(fraction * total_mgi))
        getter = getattr(torch.cuda, "get_per_process_memory_fraction", None)
        if getter is not None:
            try:
                out["fraction_read_back"] = getter(0)
            except Exception as e:  # noqa: BLE001
                out["fraction_read_back"] = "error: %s" % e
    if mode == "record":
        torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
    elif mode not in ("real", "capped"):
        raise SystemExit("unknown mode %r" % mode)

    torch.backends.cudnn.benchmark = False
    torch.manual_seed(0)
    step_times, failed_step, error = [], None, None
    try:
        model, opt, batch = build(family, size)
        g = torch.Generator(device="cuda")
        g.manual_seed(1234)
        for step in range(args.steps):
            failed_step = step
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            if opt is None:  # inference (kvcache)
                with torch.no_grad():
                    del_me = model.serve(g)
                del del_me
            else:
                x, y = batch(g)
                logits = model(x)
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                del x, y, logits, loss
            torch.cuda.synchronize()
            step_times.append(time.perf_counter() - t0)
        failed_step = None
    except torch.cuda.OutOfMemoryError as e:
        error = {"type": "OutOfMemoryError", "message": str(e).splitlines()[0] if str(e) else ""}
    except RuntimeError as e:
        msg = str(e)
        error = {"type": type(e).__name__, "message": msg.splitlines()[0] if msg else ""}
    if error is not None:
        out["oom"] = "out of memory" in error["message"].lower() or error["type"] == "OutOfMemoryError" \
            or "alloc" in error["message"].lower()
        out["ok"] = False
        out["error"] = error
        out["failed_step"] = failed_step
    else:
        out["ok"], out["oom"] = True, False
        torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    out.update(
        max_memory_reserved=torch.cuda.max_memory_reserved(),
        max_memory_allocated=torch.cuda.max_memory_allocated(),
        num_alloc_retries=stats.get("num_alloc_retries", 0),
        num_ooms=stats.get("num_ooms", 0),
        step_times_s=step_times,
        total_memory=torch.cuda.get_device_properties(0).total_memory,
        device_name=torch.cuda.get_device_name(0),
        cudnn_version=torch.backends.cudnn.version(),
        wall_s=time.perf_counter() - wall0,
    )
    if mode == "record":
        snap = torch.cuda.memory._snapshot()
        with open(stem + ".pickle", "wb") as f:
            pickle.dump(snap, f, protocol=4)
        out["pickle_bytes"] = os.path.getsize(stem + ".pickle")
        out["memory_stats"] = stats
        with open(stem + ".stats.json", "w") as f:
            json.dump(out, f, indent=1)
    else:
        out["memory_stats"] = stats
        with open(stem + ".json", "w") as f:
            json.dump(out, f, indent=1)
    brief = {k: out.get(k) for k in ("family", "mode", "size", "ok", "max_memory_reserved",
                                      "num_alloc_retries", "num_ooms", "capacity")}
    brief["step_ms"] = [round(t * 1000, 1) for t in step_times]
    print("RESULT", json.dumps(brief), flush=True)


# ---------------------------------------------------------------- phases

class Runner:
    def __init__(self, workdir, jobs, deadline, steps):
        self.workdir, self.jobs, self.steps = workdir, jobs, steps
        self.t_end = time.time() + deadline
        self.log = open(os.path.join(workdir, "runs.jsonl"), "a")

    def run_one(self, family, size, mode, sub, name, cap_gib=None):
        stem = os.path.join(self.workdir, sub, name)
        os.makedirs(os.path.dirname(stem), exist_ok=True)
        result_path = stem + (".stats.json" if mode == "record" else ".json")
        if os.path.exists(result_path):
            with open(result_path) as f:
                return json.load(f)
        if time.time() > self.t_end:
            return {"family": family, "size": size, "mode": mode, "skipped": "deadline"}
        cmd = [sys.executable, os.path.abspath(__file__), "one", family, str(size), mode, stem,
               "--steps", str(self.steps)]
        if cap_gib is not None:
            cmd += ["--cap-bytes", str(int(cap_gib * GiB))]
        t0 = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
            rc, so, se = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            rc, so, se = "timeout", str(e.stdout or ""), str(e.stderr or "")
        entry = {"name": name, "sub": sub, "family": family, "size": size, "mode": mode, "cap_gib": cap_gib,
                 "rc": rc, "process_s": round(time.time() - t0, 2)}
        if os.path.exists(result_path):
            with open(result_path) as f:
                res = json.load(f)
        else:
            res = {"family": family, "size": size, "mode": mode, "crashed": True,
                   "stderr_tail": se[-3000:], "stdout_tail": so[-1000:]}
            with open(stem + ".crash.json", "w") as f:
                json.dump(dict(res, rc=rc), f, indent=1)
        entry.update({k: res.get(k) for k in ("ok", "oom", "max_memory_reserved", "num_alloc_retries", "num_ooms")})
        self.log.write(json.dumps(entry) + "\n")
        self.log.flush()
        print("%-12s %-6s %-9s %5d cap=%-4s ok=%-5s res=%-11s retries=%s ooms=%s rc=%s %.1fs" % (
            sub, mode, family, size, cap_gib, res.get("ok"), res.get("max_memory_reserved"),
            res.get("num_alloc_retries"), res.get("num_ooms"), rc, time.time() - t0), flush=True)
        if res.get("crashed"):
            print("  stderr:", se[-1500:], flush=True)
        return res

    def many(self, tasks, jobs=None):
        with ThreadPoolExecutor(max_workers=jobs or self.jobs) as ex:
            return list(ex.map(lambda t: self.run_one(*t), tasks))


def grid_sizes(first, last, step):
    return list(range(first, last + 1, step))


def run_grid(runner, name, family, cap_gib, first, last, step):
    sub = "grid_" + name
    results = {}

    def go(sizes):
        sizes = [s for s in sizes if s > 0 and s not in results]
        tasks = [(family, s, "capped", sub, "%s_%d" % (family, s), cap_gib) for s in sizes]
        for s, r in zip(sizes, runner.many(tasks)):
            results[s] = r

    go(grid_sizes(first, last, step))
    lo, hi = first, last
    for _ in range(MAX_EXTEND // 4):
        fits = [s for s, r in results.items() if r.get("ok")]
        fails = [s for s, r in results.items() if r.get("ok") is False]
        more = []
        if not fails:
            more += [hi + step * i for i in range(1, 5)]
            hi += 4 * step
        if not fits:
            more += [lo - step * i for i in range(1, 5)]
            lo -= 4 * step
        if not more or time.time() > runner.t_end:
            break
        go(more)
    return results


def plan(args):
    os.makedirs(args.workdir, exist_ok=True)
    runner = Runner(args.workdir, args.jobs, args.deadline, args.steps)
    t0 = time.time()
    if args.phase == "a":
        tasks = [(fam, s, "record", "record", "%s_%d" % (fam, s)) for fam, spec in FAMILIES.items()
                 for s in spec["record"]]
        runner.many(tasks)
        print("records done %.1fs" % (time.time() - t0), flush=True)
        tasks = [(fam, m * max(spec["record"]), "real", "real", "%s_%d" % (fam, m * max(spec["record"])))
                 for fam, spec in FAMILIES.items() for m in REAL_MULTIPLES]
        runner.many(tasks, jobs=1)
        print("real done %.1fs" % (time.time() - t0), flush=True)
        tasks = [(fam, s, "capped", "probe", "%s_%dg_%d" % (fam, cap, s), cap) for fam, cap, s in PROBES]
        runner.many(tasks)
        print("probes done %.1fs" % (time.time() - t0), flush=True)
        crashed = glob.glob(os.path.join(args.workdir, "*", "*.crash.json"))
        if crashed:
            print("crashed runs, stopping:", crashed, flush=True)
            sys.exit(1)
    elif args.phase == "b":
        grids = GRIDS
        if args.grid:
            grids = []
            for g in args.grid:
                name, fam, cap, first, last, step = g.split(":")
                grids.append((name, fam, float(cap), int(first), int(last), int(step)))
        done = {}
        for g in grids:
            done[g[0]] = run_grid(runner, *g)
            print("grid %s done %.1fs" % (g[0], time.time() - t0), flush=True)
        ref = done.get(NONMONO_REF)
        if ref and not args.grid:
            fails = [s for s, r in ref.items() if r.get("ok") is False]
            fits = [s for s, r in ref.items() if r.get("ok")]
            s6 = min(fails) if fails else (max(fits) + 128 if fits else 2048)
            for cap in NONMONO_CAPS:
                c = int(round(s6 * math.sqrt(cap / 6.0) / 64.0)) * 64
                name = "attention_%dg_s64" % cap
                run_grid(runner, name, "attention", cap, c - 512, c + 384, 64)
                print("grid %s done %.1fs" % (name, time.time() - t0), flush=True)
    elif args.phase == "c":
        # Many caps at once: a window of step-64 points around each cap's
        # expected first failing size, all in one pool; then windows that do
        # not span fit -> OOM are extended, and grids that show a failure
        # below a fit are run again (sub "..._repeat") to check they repeat.
        caps = [float(c) for c in args.caps.split(",")]
        grids = {}
        for cap in caps:
            c = int(round(args.ref_fail * math.sqrt(cap / args.ref_cap) / 64.0)) * 64
            grids["attention_%sg_s64" % ("%g" % cap).replace(".", "p")] = (cap, c - 256, c + 192)
        tasks = [("attention", s, "capped", "grid_" + name, "attention_%d" % s, cap)
                 for name, (cap, lo, hi) in grids.items() for s in range(lo, hi + 1, 64)]
        runner.many(tasks)
        print("windows done %.1fs" % (time.time() - t0), flush=True)
        found = []
        for name, (cap, lo, hi) in grids.items():
            res = run_grid(runner, name, "attention", cap, lo, hi, 64)
            fits = [s for s, r in res.items() if r.get("ok")]
            fails = [s for s, r in res.items() if r.get("ok") is False]
            if any(f > s for s in fails for f in fits):
                found.append((name, cap, min(res), max(res)))
                print("NON-MONOTONIC", name, [(s, res[s].get("ok")) for s in sorted(res)],
                      flush=True)
        tasks = [("attention", s, "capped", "grid_%s_repeat" % name, "attention_%d" % s, cap)
                 for name, cap, lo, hi in found for s in range(lo, hi + 1, 64)]
        runner.many(tasks)
    else:
        raise SystemExit("unknown phase %r" % args.phase)
    print("phase %s done in %.1fs" % (args.phase, time.time() - t0), flush=True)


# ---------------------------------------------------------------- assemble

def load_runs(workdirs):
    runs = []
    for w in workdirs:
        for path in sorted(glob.glob(os.path.join(w, "**", "*.json"), recursive=True)):
            if path.endswith("runs.jsonl"):
                continue
            with open(path) as f:
                r = json.load(f)
            r["_path"] = os.path.relpath(path, w)
            r["_sub"] = os.path.basename(os.path.dirname(path))
            runs.append(r)
    return runs


def trace_summary(pickle_path):
    """Counts of the trace's actions and the sizes of its allocations, for checking."""
    with open(pickle_path, "rb") as f:
        snap = pickle.load(f)
    actions = {}
    alloc_sizes = []
    for trace in snap.get("device_traces", []):
        for e in trace:
            actions[e["action"]] = actions.get(e["action"], 0) + 1
            if e["action"] == "alloc":
                alloc_sizes.append(e["size"])
    return {"actions": actions, "allocs": len(alloc_sizes), "segments_at_end": len(snap.get("segments", []))}


# Source paths of the machine that ran the job, renamed in fixtures (as the
# corpus's are): the repository holds no machine's paths.
NEUTRAL_PATHS = [(os.path.dirname(os.path.abspath(__file__)) + "/", "/srv/jobs/")]


def copy_with_neutral_paths(src, dst):
    """Copy a snapshot, renaming frames' file paths: this folder to
    /srv/jobs/, site-packages to /usr/lib/python3.12/site-packages/."""
    import pickle

    with open(src, "rb") as f:
        snap = pickle.load(f)

    def fix(frame):
        name = frame.get("filename", "")
        for old, new in NEUTRAL_PATHS:
            if name.startswith(old):
                name = new + name[len(old):]
        if "/site-packages/" in name:
            name = "/usr/lib/python3.12/site-packages/" + name.split("/site-packages/", 1)[1]
        frame["filename"] = name

    for trace in snap.get("device_traces", []):
        for entry in trace:
            for frame in entry.get("frames", []):
                fix(frame)
    for segment in snap.get("segments", []):
        for frame in segment.get("frames", []):
            fix(frame)
        for block in segment.get("blocks", []):
            for frame in block.get("frames", []):
                fix(frame)
    with open(dst, "wb") as f:
        pickle.dump(snap, f, protocol=4)


def assemble(args):
    everything = load_runs(args.workdirs)
    runs = [r for r in everything if not r.get("crashed")]
    fx = args.fixtures
    os.makedirs(fx, exist_ok=True)
    truth = {"steps": STEPS, "families": {}}
    meta = {}
    for fam, spec in FAMILIES.items():
        ft = {"knob": spec["knob"], "fixed": spec["fixed"], "steps": STEPS, "recorded": [], "real": [],
              "grids": {}}
        for r in sorted((r for r in runs if r.get("mode") == "record" and r["family"] == fam), key=lambda r: r["size"]):
            src = None
            stem = "%s_%d" % (fam, r["size"])
            for w in args.workdirs:
                p = os.path.join(w, os.path.dirname(r["_path"]), stem + ".pickle")
                if os.path.exists(p):
                    src = p
                    break
            copy_with_neutral_paths(src, os.path.join(fx, stem + ".pickle"))
            stats = {k: v for k, v in r.items() if not k.startswith("_")}
            with open(os.path.join(fx, stem + ".stats.json"), "w") as f:
                json.dump(stats, f, indent=1)
            ft["recorded"].append({"size": r["size"], "pickle": stem + ".pickle",
                                   "max_memory_reserved": r["max_memory_reserved"],
                                   "max_memory_allocated": r["max_memory_allocated"],
                                   "num_alloc_retries": r["num_alloc_retries"],
                                   "step_times_s": r["step_times_s"],
                                   "trace": trace_summary(src)})
            meta.setdefault("torch", r["torch"])
            meta.setdefault("device_name", r.get("device_name"))
            meta.setdefault("total_memory", r.get("total_memory"))
            meta.setdefault("cudnn_version", r.get("cudnn_version"))
        ft["recorded_sizes"] = [x["size"] for x in ft["recorded"]]
        for r in sorted((r for r in runs if r.get("mode") == "real" and r["family"] == fam), key=lambda r: r["size"]):
            ft["real"].append({k: r.get(k) for k in ("size", "ok", "oom", "max_memory_reserved",
                                                     "max_memory_allocated", "num_alloc_retries", "num_ooms",
                                                     "step_times_s", "error")})
        subs = sorted({r["_sub"] for r in runs if r.get("mode") == "capped" and r["family"] == fam})
        for sub in subs:
            pts = sorted((r for r in runs if r.get("mode") == "capped" and r["family"] == fam and r["_sub"] == sub),
                         key=lambda r: r["size"])
            caps = sorted({r["cap_bytes_asked"] for r in pts})
            for cap in caps:
                cp = [r for r in pts if r["cap_bytes_asked"] == cap]
                name = sub[len("grid_"):] if sub.startswith("grid_") else "%s_%s" % (sub, cap // GiB)
                fits = [r["size"] for r in cp if r.get("ok")]
                fails = [r["size"] for r in cp if not r.get("ok")]
                largest = max(fits) if fits else None
                first_fail = min(fails) if fails else None
                nonmono = [s for s in fails if any(f > s for f in fits)]
                steps_between = sorted({b["size"] - a["size"] for a, b in zip(cp, cp[1:])})
                ft["grids"][name] = {
                    "kind": "grid" if sub.startswith("grid_") else "probe",
                    "cap_bytes_asked": cap, "cap_gib": cap / GiB,
                    "fraction": cp[0]["fraction"], "total_memory": cp[0]["total_memory"],
                    "mem_get_info_total": cp[0]["mem_get_info_total"],
                    "capacity": cp[0]["capacity"], "capacity_mem_get_info": cp[0]["capacity_mem_get_info"],
                    "fraction_read_back": cp[0].get("fraction_read_back"),
                    "size_steps": steps_between,
                    "largest_fitting": largest, "smallest_failing": first_fail,
                    "non_monotonic": bool(nonmono), "fails_below_a_fit": nonmono,
                    "points": [{k: r.get(k) for k in ("size", "ok", "oom", "max_memory_reserved",
                                                      "max_memory_allocated", "num_alloc_retries",
                                                      "num_ooms", "failed_step", "step_times_s", "error")}
                               for r in cp],
                }
        truth["families"][fam] = ft
    nm = [(fam, g) for fam, ft in truth["families"].items() for g, v in ft["grids"].items() if v["non_monotonic"]]
    truth["non_monotonic_grids"] = [{"family": fam, "grid": g} for fam, g in nm]
    searched = [v for v in truth["families"]["attention"]["grids"].values() if v["kind"] == "grid"]
    truth["non_monotonic_search"] = {
        "family": "attention",
        "grids": len(searched),
        "runs": sum(len(v["points"]) for v in searched),
        "caps_gib": sorted({v["cap_gib"] for v in searched}),
        "size_steps": sorted({st for v in searched for st in v["size_steps"]}),
        "seq_range": [min(p["size"] for v in searched for p in v["points"]),
                      max(p["size"] for v in searched for p in v["points"])] if searched else None,
        "found": [g for fam, g in nm if fam == "attention"],
    }
    truth.update(meta)
    crashed = [r["_path"] for r in everything if r.get("crashed")]
    truth["crashed_runs"] = crashed
    with open(os.path.join(fx, "truth.json"), "w") as f:
        json.dump(truth, f, indent=1)
    print("wrote", os.path.join(fx, "truth.json"), "non-monotonic:", nm, "crashed:", crashed)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sp = ap.add_subparsers(dest="cmd", required=True)
    p = sp.add_parser("one", help="one run in this process")
    p.add_argument("family", choices=sorted(FAMILIES))
    p.add_argument("size", type=int)
    p.add_argument("mode", choices=["record", "real", "capped"])
    p.add_argument("stem", help="output path without extension")
    p.add_argument("--cap-bytes", type=int, default=None)
    p.add_argument("--steps", type=int, default=STEPS)
    p = sp.add_parser("plan", help="a phase of runs, each a subprocess")
    p.add_argument("phase", choices=["a", "b", "c"])
    p.add_argument("workdir")
    p.add_argument("--jobs", type=int, default=6)
    p.add_argument("--deadline", type=float, default=480, help="seconds after which no run is started")
    p.add_argument("--steps", type=int, default=STEPS)
    p.add_argument("--grid", action="append", help="NAME:FAMILY:CAP_GIB:FIRST:LAST:STEP (phase b; repeatable)")
    p.add_argument("--caps", default="5.5,6.5,4.5,7.5", help="phase c: caps in GiB")
    p.add_argument("--ref-fail", type=int, default=2368, help="phase c: first failing seq at --ref-cap")
    p.add_argument("--ref-cap", type=float, default=6.0)
    p = sp.add_parser("assemble", help="fixtures and truth.json from run folders (no GPU)")
    p.add_argument("workdirs", nargs="+")
    p.add_argument("--fixtures", required=True)
    args = ap.parse_args()
    if args.cmd == "one":
        if args.mode == "capped" and not args.cap_bytes:
            ap.error("capped needs --cap-bytes")
        one(args)
    elif args.cmd == "plan":
        plan(args)
    else:
        assemble(args)


if __name__ == "__main__":
    main()
