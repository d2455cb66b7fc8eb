"""CUDA graph private pools, recorded: each workload runs in its own process
with history recording from the start, then dumps NAME.pickle and, beside
it, NAME.stats.json (`torch.cuda.memory_stats()` and the other figures of the
corpus's capture_corpus.py `dump`), so that `vramscope simulate` can be
checked against PyTorch's own peaks.

Workloads:
- graph_manual: a training step captured by hand (warm-up on a side stream,
  `torch.cuda.graph`, 20 replays) with ordinary allocations in between;
- graph_compiled: `torch.compile(mode="reduce-overhead")` (CUDA graph trees)
  training a small MLP for a few steps;
- graph_shared_pool: three graphs captured into one pool from
  `torch.cuda.graph_pool_handle()`, chained, replayed;
- graph_release: a graph captured, replayed, destroyed and its pool
  released by `empty_cache()`, then a second graph.

    python3 tests/gpu/graph_pools_job.py OUTDIR            (all, one process each)
    python3 tests/gpu/graph_pools_job.py OUTDIR NAME --one (one, in this process)
    python3 tests/gpu/graph_pools_job.py OUTDIR facts      (what this torch records)
"""

import json
import os
import pickle
import random
import subprocess
import sys
import time

OUT = sys.argv[1]
NAMES = ["graph_manual", "graph_compiled", "graph_shared_pool", "graph_release"]


def dump(torch, name, extra=None):
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    stats = dict(torch.cuda.memory_stats())
    free, total = torch.cuda.mem_get_info()
    path = os.path.join(OUT, name + ".pickle")
    with open(path, "wb") as f:
        pickle.dump(snap, f, protocol=4)
    trace = [e for t in snap.get("device_traces", []) for e in t]
    keys = sorted({k for e in trace for k in e})
    pools = sorted({tuple(s["segment_pool_id"]) for s in snap["segments"]})
    meta = {"memory_stats": stats, "mem_get_info": [free, total],
            "max_memory_allocated": torch.cuda.max_memory_allocated(),
            "max_memory_reserved": torch.cuda.max_memory_reserved(),
            "torch": torch.__version__,
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
            "n_trace": len(trace),
            "n_segments": len(snap.get("segments", [])),
            "bytes": os.path.getsize(path),
            "trace_keys": keys,
            "segment_pool_ids": [list(p) for p in pools]}
    if extra:
        meta.update(extra)
    with open(os.path.join(OUT, name + ".stats.json"), "w") as f:
        json.dump(meta, f, indent=1, default=str)
    print(name, {k: meta[k] for k in ("n_trace", "n_segments", "bytes", "trace_keys", "segment_pool_ids")},
          stats["reserved_bytes.all.peak"], stats["allocated_bytes.all.peak"], flush=True)


def mlp(torch, d, h):
    nn = torch.nn
    return nn.Sequential(nn.Linear(d, h), nn.ReLU(), nn.LayerNorm(h), nn.Linear(h, d)).cuda()


def ordinary(torch, rng, live, n=3):
    """Eager allocations between replays: small and large, some kept."""
    for _ in range(n):
        size = rng.choice([rng.randint(1, 1 << 18), rng.randint(1 << 18, 6 << 20), rng.randint(6 << 20, 40 << 20)])
        live.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
        if len(live) > 12 or rng.random() < 0.5:
            live.pop(rng.randrange(len(live)))


def graph_manual(torch, rng):
    model = mlp(torch, 1024, 4096)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.MSELoss()
    static_in = torch.randn(256, 1024, device="cuda")
    static_tgt = torch.randn(256, 1024, device="cuda")
    live = []
    ordinary(torch, rng, live, 6)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(static_in), static_tgt)
            loss.backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_out = model(static_in)
        static_loss = loss_fn(static_out, static_tgt)
        static_loss.backward()
        opt.step()
    for _ in range(20):
        static_in.copy_(torch.randn(256, 1024, device="cuda"))
        g.replay()
        ordinary(torch, rng, live)
    return {"pool": list(g.pool())}


def graph_compiled(torch, rng):
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).cuda()
    cm = torch.compile(model, mode="reduce-overhead")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    live = []
    for _ in range(6):
        torch.compiler.cudagraph_mark_step_begin()
        x = torch.randn(64, 512, device="cuda")
        loss = cm(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        ordinary(torch, rng, live, 2)
    return {}


def graph_shared_pool(torch, rng):
    pool = torch.cuda.graph_pool_handle()
    mods = [mlp(torch, 512, w) for w in (2048, 1024, 3072)]
    static_x = torch.randn(128, 512, device="cuda")
    live = []
    ordinary(torch, rng, live, 4)
    graphs, outs = [], []
    with torch.no_grad():
        x = static_x
        for m in mods:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(2):
                    m(x)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                y = m(x)
            graphs.append(g)
            outs.append(y)
            x = y
            ordinary(torch, rng, live, 2)
        for _ in range(10):
            static_x.copy_(torch.randn(128, 512, device="cuda"))
            for g in graphs:
                g.replay()
            ordinary(torch, rng, live)
    return {"pool": list(pool)}


def graph_release(torch, rng):
    live = []
    pools = []
    for round_ in range(2):
        m = mlp(torch, 512, 2048 * (round_ + 1))
        x = torch.randn(64, 512, device="cuda")
        with torch.no_grad():
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                m(x)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                y = m(x)
            pools.append(list(g.pool()))
            for _ in range(5):
                g.replay()
                ordinary(torch, rng, live)
        if round_ == 0:
            del g, y, m
            torch.cuda.empty_cache()
            ordinary(torch, rng, live, 6)
    return {"pools": pools}


def facts():
    import glob
    import inspect
    import torch
    lines = [f"torch {torch.__version__} cuda {torch.version.cuda}"]
    inc = os.path.join(os.path.dirname(torch.__file__), "include")
    for h in ["c10/cuda/CUDACachingAllocator.h", "c10/core/CachingDeviceAllocator.h", "c10/cuda/CUDAGraphsC10Utils.h"]:
        p = os.path.join(inc, h)
        if os.path.exists(p):
            for i, line in enumerate(open(p), 1):
                if any(w in line for w in ("pool", "Pool", "TraceEntry(", "Action")):
                    lines.append(f"{h}:{i}: {line.rstrip()}")
    try:
        src = inspect.getsource(torch.cuda.graphs.graph.__enter__)
        lines.append("--- torch.cuda.graph.__enter__\n" + src)
        lines.append("--- graph_pool_handle\n" + inspect.getsource(torch.cuda.graphs.graph_pool_handle))
    except Exception as e:  # noqa: BLE001
        lines.append(f"inspect failed: {e}")
    for f in glob.glob(os.path.join(os.path.dirname(torch.__file__), "_inductor/cudagraph_trees.py")):
        for i, line in enumerate(open(f), 1):
            if any(w in line for w in ("_cuda_beginAllocate", "_cuda_endAllocate", "releasePool", "_cuda_releasePool",
                                       "setCheckpointPoolState", "_cuda_setCheckpointPoolState", "empty_cache")):
                lines.append(f"cudagraph_trees.py:{i}: {line.rstrip()}")
    with open(os.path.join(OUT, "facts.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[:80]))


def run(name):
    import torch
    torch.cuda.memory._record_memory_history(context="all", stacks="python", max_entries=200_000)
    torch.manual_seed(0)
    rng = random.Random(0)
    extra = globals()[name](torch, rng)
    dump(torch, name, extra)


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    if len(sys.argv) > 3 and sys.argv[3] == "--one":
        run(sys.argv[2])
        sys.exit(0)
    if len(sys.argv) > 2 and sys.argv[2] == "facts":
        facts()
        sys.exit(0)
    for name in (sys.argv[2].split(",") if len(sys.argv) > 2 else NAMES):
        t0 = time.time()
        r = subprocess.run([sys.executable, __file__, OUT, name, "--one"])
        print(f"# {name} rc={r.returncode} {time.time() - t0:.1f}s", flush=True)
