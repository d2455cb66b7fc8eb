"""The largest batch that fits, in one call and without trial and error:
`largest_batch(step_fn)` records `step_fn(size)` at a few small sizes in
this process, then `vramscope predict --largest` replays the job through
the caching allocator's model at every larger size and returns the largest
that fits. No size is ever run out of memory to find out.

    import vramscope

    def step(batch_size):
        model = Net().cuda()
        optimizer = torch.optim.AdamW(model.parameters())
        for _ in range(3):  # steps enough to create the optimizer's state
            loss = model(torch.randn(batch_size, 512, device="cuda")).sum()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    found = vramscope.largest_batch(step, sizes=(2, 4, 8))
    print(found.size, found.predicted_peak_bytes, found.notes)

Each size must start as a fresh process would: nothing of the job's on the
GPU. `step_fn` builds (or moves to the GPU) what it needs and lets it all
go when it returns; between two sizes this module collects garbage,
synchronizes, empties the allocator's cache and resets its peaks, then
checks that reserved and allocated memory are back to what they were
before the first size (the result's notes say when they are not). The
prediction matches whole programs from an empty allocator: memory left
allocated before a size is refused by `vramscope predict` with its reason.
"""

import gc
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .cli import predict
from .errors import VramscopeError
from .recording import DEFAULT_MAX_ENTRIES, _torch, clear_cublas_workspaces, recording

__all__ = ["LargestBatch", "largest_batch"]


@dataclass
class LargestBatch:
    """What `largest_batch` found.

    size: the largest size that fits under the capacity (None when even the
        smallest size tried runs out).
    predicted_peak_bytes: the reserved peak predicted at that size
        (`max_memory_reserved()`), None with no size.
    notes: what to know about the answer: the prediction's notes, the
        capacity's source, and any size that did not start from a clean
        allocator.
    capacity_bytes: the capacity predicted under.
    capacity_source: "given", or "measured" (the device's total less what
        the CUDA context and libraries take outside the allocator, now).
    snapshots: the recorded runs, {size: path} (deleted with their
        temporary folder unless `snapshot_dir` was given).
    report: `vramscope predict --json`'s whole answer.
    """

    size: object
    predicted_peak_bytes: object
    notes: list = field(default_factory=list)
    capacity_bytes: int = 0
    capacity_source: str = "given"
    snapshots: dict = field(default_factory=dict)
    report: dict = field(default_factory=dict, repr=False)


def _sizes(sizes):
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
        raise TypeError("sizes must be a sequence of positive integers such as (2, 4, 8), not %r" % (sizes,))
    out = []
    for s in sizes:
        if isinstance(s, bool) or not isinstance(s, int) or s <= 0:
            raise ValueError("sizes must be positive integers, got %r in %r" % (s, sizes))
        if s in out:
            raise ValueError("size %d is given twice in %r: each size is recorded once" % (s, sizes))
        out.append(s)
    if not out:
        raise ValueError("sizes is empty: give two or three small sizes, such as (2, 4, 8)")
    return sorted(out)


def _counters(torch, device):
    """(reserved, allocated) bytes now on `device`."""
    stats = torch.cuda.memory_stats(device)
    return stats.get("reserved_bytes.all.current", 0), stats.get("allocated_bytes.all.current", 0)


def _as_fresh_process(torch, device):
    """What a new process's allocator would show: nothing of the last size
    alive (the garbage collector run, so that cycles holding tensors go),
    the GPU idle, cuBLAS's workspaces let go, the cache returned to CUDA,
    the peaks reset."""
    gc.collect()
    torch.cuda.synchronize()
    # cuBLAS keeps a workspace per handle and stream in the caching
    # allocator from its first matmul on (65 MiB seen on an H100): a fresh
    # process has none, so without this every size after the first starts
    # with it allocated (and the notes blame the job for it).
    clear_cublas_workspaces(torch)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)


def measured_capacity(torch, device):
    """(capacity, note): what the allocator could reserve on `device` now:
    CUDA's free memory plus what the allocator holds, that is the device's
    total less what the CUDA context, the libraries loaded so far and other
    processes take; within `per_process_memory_fraction` when one is set."""
    free, total = torch.cuda.mem_get_info(device)
    reserved, _ = _counters(torch, device)
    outside = max(0, total - free - reserved)
    capacity = total - outside
    note = (
        "capacity: measured now, the device's %d bytes less %d bytes that the CUDA context, the libraries loaded "
        "so far and other processes take outside the allocator" % (total, outside)
    )
    fraction = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    if fraction is not None:
        f = float(fraction(device))
        if 0 < f < 1 and int(f * total) < capacity:
            capacity = int(f * total)
            note += "; held to the per-process memory fraction %g of the total" % f
    return capacity, note


def largest_batch(step_fn, sizes=(2, 4, 8), capacity=None, step=None, snapshot_dir=None, context="auto",
                  max_entries=DEFAULT_MAX_ENTRIES, device=None):
    """Records `step_fn(size)` at each of `sizes` in this process, predicts
    with `vramscope predict --largest --json`, and returns a `LargestBatch`:
    the largest size that fits under `capacity`, its predicted reserved
    peak, and the notes.

    step_fn: called with each size; it must allocate what it needs on the
        GPU itself (the model moved there inside it) and run enough steps
        for the optimizer's state to exist, then let everything go.
    sizes: two or three small sizes (three see memory that grows with the
        square of the size).
    capacity: bytes or text ("40GiB"); None: the device's total less what
        the CUDA context and libraries take outside the allocator, measured
        after the last size ran (so the libraries the job loads count).
    step: the knob's granularity (e.g. 8 for multiples of 8).
    snapshot_dir: keep the recorded snapshots there (default: a temporary
        folder, deleted).
    context: what the history records (see `recorded_memory`); the default
        "auto" records the stacks of frees only where this torch does so
        safely.
    """
    if not callable(step_fn):
        raise TypeError("step_fn must be callable as step_fn(size), not %r" % (step_fn,))
    sizes = _sizes(sizes)
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, (int, str))):
        raise TypeError("capacity must be a number of bytes or a size such as '40GiB', not %r" % (capacity,))
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step <= 0):
        raise ValueError("step must be a positive integer, not %r" % (step,))
    torch = _torch()
    if not torch.cuda.is_available():
        raise VramscopeError("largest_batch needs a CUDA device: torch.cuda.is_available() is False")
    device = torch.cuda.current_device() if device is None else device
    keep = snapshot_dir is not None
    folder = Path(snapshot_dir) if keep else Path(tempfile.mkdtemp(prefix="vramscope-batch-"))
    notes = []
    snapshots = {}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _as_fresh_process(torch, device)
        baseline = _counters(torch, device)
        for size in sizes:
            now = _counters(torch, device)
            if now != baseline:
                notes.append(
                    "before size %d: %d bytes reserved and %d allocated, where the first size started from %d and "
                    "%d: the last size left memory alive (a tensor kept in a global, a returned value, an "
                    "exception's traceback), so this size did not start as a fresh process would"
                    % (size, now[0], now[1], baseline[0], baseline[1])
                )
            path = folder / ("size-%d.pickle" % size)
            try:
                with recording(path, max_entries=max_entries, context=context) as outcome:
                    step_fn(size)
            except BaseException:
                # The job's own exception (an OOM at a small size) stands;
                # what the size left is let go first, if that can be done.
                try:
                    _as_fresh_process(torch, device)
                except Exception:  # noqa: BLE001 - never in place of the job's exception
                    pass
                raise
            if outcome.lost is not None or not outcome.written:
                raise VramscopeError("size %d: %s" % (size, outcome.lost or "no snapshot was written"))
            snapshots[size] = str(path)
            _as_fresh_process(torch, device)
        if capacity is None:
            capacity, note = measured_capacity(torch, device)
            source = "measured"
            notes.append(note)
        else:
            source = "given"
        try:
            runs = {path: size for size, path in snapshots.items()}
            report = predict(runs, largest=True, capacity=capacity, step=step, device=device)
        except VramscopeError as e:
            raise VramscopeError(
                "vramscope predict refused the recorded runs of sizes %s: %s%s"
                % (", ".join(str(s) for s in sizes), e, "".join("\n" + n for n in notes)),
                command=e.command, returncode=e.returncode, stderr=e.stderr,
            ) from e
        return result_of(report, notes, source, snapshots if keep else {})
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


def result_of(report, notes=(), capacity_source="given", snapshots=None):
    """The `LargestBatch` of `vramscope predict --largest --json`'s answer,
    with `notes` of its own first."""
    size = report.get("largest_fitting_size")
    peak = None
    for p in report.get("predictions", []):
        if size is not None and p.get("size") == size and not p.get("oom"):
            peak = p.get("reserved_peak_bytes")
    all_notes = list(notes) + list(report.get("notes", []))
    if size is None:
        all_notes.insert(0, "no size fits: even the smallest runs out of memory under the capacity")
    return LargestBatch(
        size=size,
        predicted_peak_bytes=peak,
        notes=all_notes,
        capacity_bytes=report.get("capacity_bytes") or 0,
        capacity_source=capacity_source,
        snapshots=dict(snapshots or {}),
        report=report,
    )
