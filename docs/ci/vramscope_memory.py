"""Record PyTorch's CUDA allocator history around a block of code and write
its memory snapshot, for `vramscope check` and `vramscope predict`
(docs/ci-memory-gate.md)."""

import contextlib
import pathlib

import torch


@contextlib.contextmanager
def recorded_memory(path, max_entries=1_000_000):
    """Write the snapshot of everything allocated inside the block to `path`,
    also when the block raises (an OOM is what the snapshot explains)."""
    path = pathlib.Path(path)
    torch.cuda.synchronize()
    # cuBLAS keeps its workspaces (tens of MiB) alive from an earlier test's
    # first matmul; cleared, this block's trace starts from an empty
    # allocator.
    clear_workspaces = getattr(getattr(torch, "_C", None), "_cuda_clearCublasWorkspaces", None)
    if clear_workspaces is not None:
        clear_workspaces()
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


def snapshot_name(test_name, params=None):
    """The file name of a test's snapshot: `test_step.pickle`, or for a test
    parametrized by a size (`@pytest.mark.parametrize("batch", [4, 8])`)
    one file per size, `test_step.batch-4.pickle`, the runs
    `vramscope predict test_step.batch-4.pickle=4 test_step.batch-8.pickle=8 --at 64`
    reads."""
    suffix = "".join(f".{key}-{value}" for key, value in sorted((params or {}).items()))
    return f"{test_name}{suffix}.pickle"
