"""Recording the CUDA allocator from Python: `recorded_memory` around a
block, `snapshot` of the allocator now. torch is imported when these are
called, never when the package is imported."""

import contextlib
import os
import pickle
from pathlib import Path

__all__ = ["recorded_memory", "snapshot", "snapshot_name", "DEFAULT_MAX_ENTRIES"]

#: Trace entries kept by `recorded_memory` (a ring: older ones are dropped).
DEFAULT_MAX_ENTRIES = 1_000_000


def _torch():
    try:
        import torch
    except ImportError as e:
        raise ImportError("vramscope needs torch to record CUDA memory (pip install torch): %s" % e) from e
    return torch


def clear_cublas_workspaces(torch):
    """Frees cuBLAS's workspaces (tens of MiB an earlier matmul keeps alive)
    when this torch has the call, so that a trace starts from an empty
    allocator."""
    clear = getattr(getattr(torch, "_C", None), "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()


@contextlib.contextmanager
def recorded_memory(path, max_entries=DEFAULT_MAX_ENTRIES):
    """Records the CUDA allocator's history around the block and writes its
    snapshot to `path` (a pickle `vramscope` reads), also when the block
    raises: an OOM is what a snapshot explains. Yields `path` as a Path.

        with vramscope.recorded_memory("memory-snapshots/step.pickle"):
            train_step()
        vramscope.check("memory-snapshots/step.pickle", max_reserved_peak="12GiB")

    Before recording it synchronizes, clears cuBLAS's workspaces and empties
    the cache, so the trace starts from an empty allocator; memory allocated
    before the block (a model built earlier) stays outside the trace.
    """
    torch = _torch()
    path = Path(path)
    torch.cuda.synchronize()
    clear_cublas_workspaces(torch)
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
    parametrized by a size one file per size, `test_step.batch-4.pickle`:
    the runs `vramscope predict test_step.batch-4.pickle=4 ...` reads."""
    suffix = "".join(".%s-%s" % (key, value) for key, value in sorted((params or {}).items()))
    return "%s%s.pickle" % (test_name, suffix)


def take_snapshot(torch=None):
    """The allocator's snapshot now, as the `vramscope agent` takes it:
    `torch.cuda.memory._snapshot()` plus the `vramscope_capture` key (NVML's
    view of this process on each device it uses, torch version, allocator
    backend and settings). Returns the dict."""
    from . import _capture

    torch = torch or _torch()
    return _capture.torch_snapshotter(torch)()


def write_snapshot(taken, path):
    """Pickles a snapshot to `path`, through a temporary name so a reader
    never sees half a file. Returns `path` as a Path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as f:
        pickle.dump(taken, f, protocol=4)
    os.replace(temporary, path)
    return path


def snapshot(path):
    """Writes the allocator's snapshot now to `path`, with what the agent
    adds (`vramscope_capture`: NVML figures, torch version, backend,
    allocator settings). Holds a trace only when history is being recorded
    (`recorded_memory`, a callback, or `torch.cuda.memory._record_memory_history`);
    without one it still has the segments and their blocks. Returns the Path."""
    return write_snapshot(take_snapshot(), path)
