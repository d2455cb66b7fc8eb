"""Recording the CUDA allocator from Python: `recorded_memory` around a
block, `snapshot` of the allocator now. torch is imported when these are
called, never when the package is imported."""

import contextlib
import os
import pickle
from pathlib import Path

__all__ = ["recorded_memory", "recording", "Recording", "snapshot", "snapshot_name", "DEFAULT_MAX_ENTRIES"]

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


class Recording:
    """What a `recording` block recorded: `path`, whether the snapshot was
    `written`, the `context` recorded (`auto` resolved), and `lost`: why
    nothing was recorded or written (None when all went well)."""

    def __init__(self, path):
        self.path = Path(path)
        self.written = False
        self.context = None
        self.lost = None


def _tell(message):
    from . import _capture

    _capture.tell_once(message, prefix="vramscope")


@contextlib.contextmanager
def recording(path, max_entries=DEFAULT_MAX_ENTRIES, context="auto", stacks="all"):
    """`recorded_memory`'s work, yielding its `Recording`: for callers that
    need to know whether the snapshot was written (the pytest plugin).

    Nothing it does fails or changes the block: a recording that cannot
    start leaves the block to run unrecorded, a snapshot that cannot be
    written never replaces the block's own exception; each is said once on
    stderr and in `lost`."""
    from . import _capture

    outcome = Recording(path)
    torch = None
    try:
        torch = _torch()
        torch.cuda.synchronize()
        # Before emptying the cache: the probe's tensor goes with it.
        _capture.history_context(torch, context)
        clear_cublas_workspaces(torch)
        # Cached but unused segments from earlier work would make the trace
        # start mid-run (peaks then cover only the recorded window).
        torch.cuda.empty_cache()
        outcome.context = _capture.start_history(torch, max_entries, context, stacks=stacks, every_thread=False)
    except Exception as e:  # noqa: BLE001 - the block runs, unrecorded
        outcome.lost = "the memory was not recorded (%s: %s)" % (type(e).__name__, e)
        _tell("%s; the block runs unrecorded and %s is not written" % (outcome.lost, outcome.path))
    if outcome.lost is not None:
        # Outside the except clause: the block's own exception, if it
        # raises, must not carry ours as its context.
        yield outcome
        return
    try:
        yield outcome
    finally:
        try:
            torch.cuda.synchronize()
            outcome.path.parent.mkdir(parents=True, exist_ok=True)
            torch.cuda.memory._dump_snapshot(str(outcome.path))
            outcome.written = True
        except Exception as e:  # noqa: BLE001 - never in place of the block's own exception
            outcome.lost = "the snapshot could not be written (%s: %s)" % (type(e).__name__, e)
            _tell("%s to %s" % (outcome.lost, outcome.path))
        finally:
            try:
                torch.cuda.memory._record_memory_history(enabled=None)
            except Exception as e:  # noqa: BLE001
                _tell("the memory recording could not be stopped (%s)" % e)


@contextlib.contextmanager
def recorded_memory(path, max_entries=DEFAULT_MAX_ENTRIES, context="auto"):
    """Records the CUDA allocator's history around the block and writes its
    snapshot to `path` (a pickle `vramscope` reads), also when the block
    raises: an OOM is what a snapshot explains. Yields `path` as a Path.

        with vramscope.recorded_memory("memory-snapshots/step.pickle"):
            train_step()
        vramscope.check("memory-snapshots/step.pickle", max_reserved_peak="12GiB")

    Before recording it synchronizes, clears cuBLAS's workspaces and empties
    the cache, so the trace starts from an empty allocator; memory allocated
    before the block (a model built earlier) stays outside the trace.

    `context`: what the history records of each event (PyTorch's
    `context`): "auto" (default) records the stacks of allocations and of
    frees where this torch records the latter safely, else of allocations
    only (see `vramscope_capture`); or "all", "alloc", "state".

    It never fails the block: where recording cannot start (no CUDA, the
    cudaMallocAsync backend) or the snapshot cannot be written, it says so
    once on stderr and the block runs as it would without it.
    """
    with recording(path, max_entries, context) as outcome:
        yield outcome.path


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
