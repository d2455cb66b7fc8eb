"""Record PyTorch's CUDA allocator history around a block of code and write
its memory snapshot, for `vramscope check` (docs/ci-memory-gate.md)."""

import contextlib
import pathlib

import torch


@contextlib.contextmanager
def recorded_memory(path, max_entries=1_000_000):
    """Write the snapshot of everything allocated inside the block to `path`,
    also when the block raises (an OOM is what the snapshot explains)."""
    path = pathlib.Path(path)
    torch.cuda.synchronize()
    # Cached but unused segments from earlier work would make the trace
    # start mid-run (peaks then cover only the recorded window).
    torch.cuda.empty_cache()
    torch.cuda.memory._record_memory_history(max_entries=max_entries)
    try:
        yield path
    finally:
        torch.cuda.synchronize()
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.cuda.memory._dump_snapshot(str(path))
        torch.cuda.memory._record_memory_history(enabled=None)
