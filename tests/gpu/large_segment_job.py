"""Requests of 1 to 9 MiB under a given PYTORCH_CUDA_ALLOC_CONF, recorded:
the snapshot and `torch.cuda.memory_stats()` beside it, to check that
`vramscope simulate` replays a setting such as `large_segment_size_mb` to
the recorded peaks.

    PYTORCH_CUDA_ALLOC_CONF=large_segment_size_mb:64 python3 tests/gpu/large_segment_job.py OUT_STEM
"""

import json
import os
import random
import sys

import torch


def main():
    stem = sys.argv[1]
    torch.cuda.init()
    torch.cuda.memory._record_memory_history(context="alloc", stacks="python", max_entries=100000)
    rng = random.Random(7)
    live = []
    for step in range(1500):
        size = rng.randint(1 << 20, 9 << 20)
        live.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
        if len(live) > 40 or rng.random() < 0.4:
            live.pop(rng.randrange(len(live)))
    del live
    torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(stem + ".pickle")
    stats = torch.cuda.memory_stats()
    with open(stem + ".stats.json", "w") as f:
        json.dump({"alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "memory_stats": stats}, f)
    print(stem, stats["reserved_bytes.all.peak"], stats["allocated_bytes.all.peak"], flush=True)


if __name__ == "__main__":
    main()
