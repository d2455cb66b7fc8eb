"""A job for the dump-stall bench (`dump_stall.py`): a training-like loop of
many small allocations, timing its own steps.

Each step runs `--events` allocator events (tensor ops whose outputs are
allocated and freed: alloc, free_requested and free_completed each count),
synchronised at both ends. At `--spike` it allocates a tensor that lifts
reserved memory past the agent's threshold, so the agent takes a threshold
snapshot in the steps after it. `--torch-dump FILE` instead records the
history itself and calls PyTorch's own `_dump_snapshot(FILE)` in that step,
on the main thread, as a user would (the reference). `--outside BYTES`
allocates that much with the CUDA driver directly (`cuMemAlloc`, outside
PyTorch's allocator) and asks the capture module for a snapshot before and
after (under the agent). Writes the step times as JSON to `--out`.
"""

import argparse
import ctypes
import json
import time

import torch


def outside_allocation(size):
    """`size` bytes from the CUDA driver in torch's current context, which
    PyTorch's allocator never sees. Returns the device pointer."""
    cuda = ctypes.CDLL("libcuda.so.1")
    pointer = ctypes.c_uint64()
    result = cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(size))
    if result != 0:
        raise RuntimeError("cuMemAlloc_v2 failed with CUDA error %d" % result)
    return pointer.value


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--events", type=int, default=4000)
    parser.add_argument("--spike", type=int, default=-1)
    parser.add_argument("--fraction", type=float, default=0.05)
    parser.add_argument("--torch-dump")
    parser.add_argument("--max-entries", type=int, default=100000)
    parser.add_argument("--outside", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.cuda.init()
    torch.cuda.set_per_process_memory_fraction(args.fraction)
    capacity = int(torch.cuda.get_device_properties(0).total_memory * args.fraction)
    if args.torch_dump:
        torch.cuda.memory._record_memory_history(context="all", stacks="python", max_entries=args.max_entries)
    x = torch.randn(64, 64, device="cuda")
    held = []
    times = []
    dump_s = None
    pairs = max(1, args.events // 3)
    for step in range(args.steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(pairs):
            y = x + 1
            del y
        if step == args.spike:
            # Past the agent's threshold (0.5 of capacity) in one block.
            held.append(torch.empty(int(capacity * 0.6), dtype=torch.uint8, device="cuda"))
            if args.torch_dump:
                began = time.perf_counter()
                torch.cuda.memory._dump_snapshot(args.torch_dump)
                dump_s = time.perf_counter() - began
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    outside = None
    if args.outside:
        import vramscope_capture  # loaded by the agent's sitecustomize

        held.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
        vramscope_capture.capture_now("before the outside allocation")
        outside_allocation(args.outside)
        vramscope_capture.capture_now("after the outside allocation")
        outside = args.outside
    with open(args.out, "w") as f:
        json.dump({"step_ms": times, "spike": args.spike, "torch_dump_s": dump_s, "outside_bytes": outside,
                   "backend": torch.cuda.get_allocator_backend()}, f)


if __name__ == "__main__":
    main()
