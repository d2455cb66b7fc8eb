"""Issue 44, item 32: a real large capture to benchmark the dashboard on.

Trains the corpus's `gpt_long` workload (a TransformerEncoder, d 768, 6
layers, batches of 4-16 × 32-1024 tokens, AdamW, one `record_function`
per step) with the history recording (`all`, Python stacks) for `--steps` steps,
enough for the ring to hold `--entries` entries (1.5M by default, as the
issue's 87 MB capture), then dumps the snapshot and `memory_stats()` beside it, and
writes the pickle gzip-compressed in parts of at most 15 MB (the device
tool brings back files of 16 MB at most):

    python3 tests/gpu/record_large_job.py --out "$OUT"
    cat OUT/gpt_1p5m.pickle.gz.part-* | gunzip > bench-data/gpt_1p5m.pickle   # here

Prints one JSON line: entries, steps, pickle bytes, seconds.
"""

import argparse
import gzip
import json
import os
import pickle
import random
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--entries", type=int, default=1_500_000)
    p.add_argument("--steps", type=int, default=1100,
                   help="steps to train (gpt_long records about 1,600 entries a step; the ring keeps the last --entries)")
    p.add_argument("--name", default="gpt_1p5m")
    a = p.parse_args()
    import torch

    random.seed(0)
    torch.manual_seed(0)
    torch.cuda.memory._record_memory_history(context="all", stacks="python", max_entries=a.entries)
    nn = torch.nn
    d = 768
    layer = nn.TransformerEncoderLayer(d, 8, 4 * d, batch_first=True)
    model = nn.Sequential(nn.Embedding(5000, d), nn.TransformerEncoder(layer, 6), nn.Linear(d, 5000)).cuda()
    opt = torch.optim.AdamW(model.parameters())
    started = time.time()
    step = 0
    while True:
        b, t = random.choice([4, 8, 16]), random.randint(32, 1024)
        x = torch.randint(0, 5000, (b, t), device="cuda")
        with torch.autograd.profiler.record_function("step%d" % step):
            loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), x.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        step += 1
        if step >= a.steps:
            break
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    stats = dict(torch.cuda.memory_stats())
    os.makedirs(a.out, exist_ok=True)
    data = pickle.dumps(snap)
    packed = gzip.compress(data, 6)
    part = 15 * 1024 * 1024
    for i in range(0, len(packed), part):
        with open(os.path.join(a.out, "%s.pickle.gz.part-%02d" % (a.name, i // part)), "wb") as f:
            f.write(packed[i:i + part])
    entries = sum(len(t) for t in snap["device_traces"])
    meta = {"memory_stats": stats, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
            "n_trace": entries, "steps": step, "bytes": len(data), "gzip_bytes": len(packed)}
    with open(os.path.join(a.out, "%s.stats.json" % a.name), "w") as f:
        json.dump(meta, f, indent=1, default=str)
    print(json.dumps({"entries": entries, "steps": step, "bytes": len(data), "gzip_bytes": len(packed),
                      "seconds": round(time.time() - started, 1)}))


if __name__ == "__main__":
    main()
