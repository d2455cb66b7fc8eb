"""A run under `per_process_memory_fraction` that ends in an OOM, recorded
with the capture context vramscope's agent adds (`vramscope_capture`, which
holds the device's total memory), so that `vramscope simulate` can turn the
fraction into a capacity. The snapshot and `memory_stats()` beside it.

    PYTHONPATH=assets/capture PYTORCH_ALLOC_CONF=per_process_memory_fraction:0.02 \
        python3 tests/gpu/fraction_job.py OUT_STEM
"""

import json
import os
import pickle
import random
import sys

import torch
import vramscope_capture


def main():
    stem = sys.argv[1]
    torch.cuda.init()
    torch.cuda.memory._record_memory_history(context="alloc", stacks="python", max_entries=100000)
    rng = random.Random(11)
    live, message = [], ""
    try:
        for _ in range(100000):
            live.append(torch.empty(rng.randint(16 << 20, 96 << 20), dtype=torch.uint8, device="cuda"))
            if rng.random() < 0.3:
                live.pop(rng.randrange(len(live)))
    except torch.cuda.OutOfMemoryError as e:
        message = str(e).splitlines()[0]
    snapshot = torch.cuda.memory._snapshot()
    snapshot["vramscope_capture"] = vramscope_capture.capture_context(torch)
    with open(stem + ".pickle", "wb") as f:
        pickle.dump(snapshot, f, protocol=4)
    stats = torch.cuda.memory_stats()
    with open(stem + ".stats.json", "w") as f:
        json.dump({"alloc_conf": os.environ.get("PYTORCH_ALLOC_CONF", ""), "oom": message,
                   "total_memory": torch.cuda.get_device_properties(0).total_memory, "memory_stats": stats}, f)
    print(stem, stats["reserved_bytes.all.peak"], stats["allocated_bytes.all.peak"], message, flush=True)


if __name__ == "__main__":
    main()
