"""Which allocator keys the running PyTorch accepts, and what the snapshot
records of each: one child process per key, with the key alone in
PYTORCH_ALLOC_CONF. Also whether `per_process_memory_fraction` caps what
the allocator reserves at the fraction of the device's total memory.

    python3 tests/gpu/alloc_keys_probe.py OUT.json
"""

import json
import os
import subprocess
import sys

CANDIDATES = [
    "max_split_size_mb:64",
    "max_non_split_rounding_mb:64",
    "roundup_power2_divisions:4",
    "garbage_collection_threshold:0.6",
    "expandable_segments:True",
    "release_lock_on_cudamalloc:True",
    "release_lock_on_device_malloc:True",
    "pinned_use_cuda_host_register:True",
    "pinned_use_host_register:True",
    "pinned_num_register_threads:2",
    "pinned_use_background_threads:True",
    "pinned_reserve_segment_size_mb:64",
    "graph_capture_record_stream_reuse:True",
    "per_process_memory_fraction:0.05",
    "large_segment_size_mb:64",
    "expandable_segments_handle_type:1",
    "backend:native",
]

CHILD = r"""
import json, torch
torch.empty(1, device="cuda")
snap = torch.cuda.memory._snapshot()
print("SETTINGS", json.dumps(snap.get("allocator_settings"), default=str))
"""

FRACTION = r"""
import json, torch
total = torch.cuda.get_device_properties(0).total_memory
kept, err = [], ""
try:
    while True:
        kept.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
except torch.cuda.OutOfMemoryError as e:
    err = str(e).splitlines()[0]
print("FRACTION", json.dumps({"total": total, "reserved_at_oom": torch.cuda.memory_reserved(),
                             "allocated_at_oom": torch.cuda.memory_allocated(), "tensors": len(kept),
                             "message": err}))
"""


def child(code, conf):
    env = dict(os.environ, PYTORCH_ALLOC_CONF=conf)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr.strip().splitlines()[-1:] if p.stderr.strip() else []


def main():
    import torch

    results = {"torch": torch.__version__, "keys": {}}
    for conf in CANDIDATES:
        rc, out, err = child(CHILD, conf)
        settings = next((json.loads(l.split(" ", 1)[1]) for l in out.splitlines() if l.startswith("SETTINGS ")), None)
        results["keys"][conf] = {"accepted": rc == 0, "error": err, "allocator_settings": settings}
        print(conf, "accepted" if rc == 0 else f"refused: {err}", flush=True)
    rc, out, err = child(FRACTION, "per_process_memory_fraction:0.05")
    results["fraction"] = next((json.loads(l.split(" ", 1)[1]) for l in out.splitlines() if l.startswith("FRACTION ")), {"rc": rc, "error": err})
    print("fraction", results["fraction"], flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
