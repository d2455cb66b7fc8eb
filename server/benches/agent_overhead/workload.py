"""One measurement of the agent-overhead bench (run by `run.py`, on a GPU):

* `pair_us`: mean time of a `torch.empty(1 MiB)` + free pair on the caching
  allocator (cache hits, the allocation path the agent must not touch), in
  blocks of 20000 pairs, median of the blocks;
* `step_ms`: median time of a training step of a small transformer-ish MLP
  (forward, backward, SGD), synchronised, over `--steps` steps after warm-up.

`--record` turns on PyTorch's own history recording the way the capture
module does (stacks=python, max_entries=100000), without the agent: the
difference between that and a run under the agent is the agent's own cost.
Prints one JSON line and writes it to `--out`.
"""

import argparse
import json
import statistics
import sys
import time

import torch


def pairs(blocks, per_block):
    times = []
    for _ in range(blocks):
        start = time.perf_counter()
        for _ in range(per_block):
            t = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
            del t
        times.append((time.perf_counter() - start) / per_block * 1e6)
    return statistics.median(times), min(times)


def steps(count):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(2048, 8192), torch.nn.GELU(), torch.nn.Linear(8192, 2048),
        torch.nn.Linear(2048, 8192), torch.nn.GELU(), torch.nn.Linear(8192, 2048),
    ).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(4096, 2048, device="cuda")
    times = []
    for i in range(count + 10):
        torch.cuda.synchronize()
        start = time.perf_counter()
        loss = model(x).square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()
        if i >= 10:
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--blocks", type=int, default=30)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.cuda.init()
    if args.record:
        torch.cuda.memory._record_memory_history(context="all", stacks="python", max_entries=100000)
    pairs(2, 5000)  # warm-up: the block is cached
    pair_median, pair_min = pairs(args.blocks, 20000)
    result = {
        "agent": "vramscope_capture" in sys.modules and sys.modules["vramscope_capture"]._installed is not None,
        "record": args.record,
        "pair_us": pair_median,
        "pair_us_min": pair_min,
        "step_ms": steps(args.steps),
    }
    line = json.dumps(result)
    print(line, flush=True)
    with open(args.out, "w") as f:
        f.write(line + "\n")


if __name__ == "__main__":
    main()
