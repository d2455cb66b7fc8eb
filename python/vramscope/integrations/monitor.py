"""`MemoryMonitor`: the logic of the training callbacks, free of any
framework. A callback calls `start` at train start, `step_begin`/`step_end`
around each optimizer step and `stop` at the end; the monitor

* records the allocator's history from `start` (the agent's options:
  stacks of Python frames, annotations from every thread where this torch
  has the option);
* marks each step in the trace as a `record_function` range `step{N}`, the
  ranges vramscope cuts the trace into steps by (`external_annotations`);
* writes a snapshot (the agent's capture, with `vramscope_capture`) on an
  OOM (from the allocator's OOM observer, before the exception unwinds),
  when reserved memory crosses `threshold` of capacity (checked at each
  step's end; re-armed once it falls 5 points below), and at the steps in
  `at_steps`; uploads each to `server` when one is given;
* labels each snapshot with its step, global rank and job: in the file
  name (`{job}-rank{R}-step{N}-{trigger}.pickle`), and as the upload's
  `--job`, `--rank`, `--trigger` and tag `step=N`.

Nothing here fails the training: a snapshot or upload that fails is a
warning.
"""

import os
import re
import warnings
from pathlib import Path

from .. import _capture
from ..recording import take_snapshot, write_snapshot

__all__ = ["MemoryMonitor", "DEFAULT_THRESHOLD"]

#: Fraction of capacity past which a threshold snapshot is written.
DEFAULT_THRESHOLD = 0.9
#: Trace entries kept while training (the agent's default).
DEFAULT_MAX_ENTRIES = 100_000


def _safe(text):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(text)).strip("_") or "job"


class MemoryMonitor:
    """Records CUDA memory through training and writes snapshots at OOM,
    past `threshold` of capacity and at `at_steps` (see the module's doc).

    snapshot_dir: folder for the snapshots (created when needed).
    server, token: a vramscope server to upload each snapshot to (token
        defaults to $VRAMSCOPE_TOKEN); None writes files only.
    threshold: fraction of capacity (0..1) of reserved memory; None turns
        threshold snapshots off.
    at_steps: optimizer steps (counted from 1, as the frameworks' global
        step after the step) at whose end a snapshot is written.
    on_oom: write a snapshot when an allocation fails.
    job: the job's name in labels (default $VRAMSCOPE_JOB, else the name the
        framework gives, else "train").
    max_entries: trace entries kept (a ring).
    """

    def __init__(
        self,
        snapshot_dir="memory-snapshots",
        server=None,
        token=None,
        threshold=DEFAULT_THRESHOLD,
        at_steps=(),
        on_oom=True,
        job=None,
        max_entries=DEFAULT_MAX_ENTRIES,
    ):
        if threshold is not None and not 0 < float(threshold) <= 1:
            raise ValueError("threshold is a fraction of capacity, above 0 and at most 1; got %r" % (threshold,))
        self.snapshot_dir = Path(snapshot_dir)
        self.server = server
        self.token = token
        self.threshold = None if threshold is None else float(threshold)
        self.at_steps = frozenset(int(s) for s in (at_steps or ()))
        self.on_oom = bool(on_oom)
        self.job = job or os.environ.get(_capture.ENV_JOB) or None
        self.max_entries = int(max_entries)
        self.rank = 0
        self.step = 0
        #: One dict per snapshot written: path, trigger, step, rank, job, reason, upload (the server's answer).
        self.snapshots = []
        self.active = False
        self._torch = None
        self._range = None
        self._triggers = {}
        # reserved_bytes.all.peak per device at the previous check.
        self._peaks = {}
        self._oom_limit = _capture.RateLimit(_capture.MAX_OOM_DUMPS_PER_HOUR)
        self._observer_attached = False

    # -- the callbacks' calls ---------------------------------------------

    def start(self, rank=None, job=None, torch=None):
        """At train start: records the allocator's history and attaches the
        OOM observer. Does nothing (with a warning) without CUDA."""
        if self.active:
            return
        if rank is not None:
            self.rank = int(rank)
        elif os.environ.get("RANK", "").strip().isdigit():
            self.rank = int(os.environ["RANK"])
        self.job = self.job or job or "train"
        if torch is None:
            import torch
        if not torch.cuda.is_available():
            warnings.warn("vramscope: CUDA is not available; no memory is recorded", RuntimeWarning, stacklevel=2)
            return
        self._torch = torch
        options = _capture._history_options(torch, "all")
        torch.cuda.memory._record_memory_history(max_entries=self.max_entries, **options)
        if self.on_oom and not self._observer_attached:
            attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
            if attach is None:
                warnings.warn("vramscope: this torch has no OOM observer; no OOM snapshots", RuntimeWarning)
            else:
                # An observer cannot be detached: it checks `active` instead.
                attach(self._on_oom)
                self._observer_attached = True
        self.active = True

    def step_begin(self, step):
        """Before optimizer step `step` (counted from 1): opens its range."""
        if not self.active:
            return
        if self._range is not None and int(step) == self.step:
            return  # another micro-batch of the same step (gradient accumulation)
        self._close_range()
        self.step = int(step)
        self._range = self._torch.autograd.profiler.record_function("step%d" % self.step)
        self._range.__enter__()

    def step_end(self, step):
        """After optimizer step `step`: closes its range, then writes the
        snapshots due (a named step; reserved memory past the threshold)."""
        if not self.active or (self._range is not None and int(step) < self.step):
            return  # a micro-batch that did not finish the step (gradient accumulation)
        self.step = int(step)
        self._close_range()
        if self.step in self.at_steps:
            self.write("step", "step %d is in at_steps" % self.step)
        if self.threshold is not None:
            self._check_threshold()

    def stop(self):
        """At train end: closes the open range and stops recording."""
        if not self.active:
            return
        self._close_range()
        self.active = False
        self._torch.cuda.memory._record_memory_history(enabled=None)

    # -- snapshots ----------------------------------------------------------

    def snapshot_path(self, trigger):
        """`{snapshot_dir}/{job}-rank{rank}-step{step}-{trigger}.pickle`, with
        a counter when that name is taken."""
        stem = "%s-rank%d-step%d-%s" % (_safe(self.job or "train"), self.rank, self.step, trigger)
        path = self.snapshot_dir / (stem + ".pickle")
        n = 1
        while path.exists():
            n += 1
            path = self.snapshot_dir / ("%s-%d.pickle" % (stem, n))
        return path

    def write(self, trigger, reason=""):
        """Writes a snapshot now (and uploads it when a server is set).
        Returns its record (see `snapshots`), or None when it failed."""
        record = {"trigger": trigger, "step": self.step, "rank": self.rank, "job": self.job, "reason": reason}
        try:
            taken = take_snapshot(self._torch)
            # The allocator's own counters at the same moment, beside the
            # record: what `vramscope stats` recomputes from the file.
            record["memory_stats"] = _current_counters(self._torch)
            path = write_snapshot(taken, self.snapshot_path(trigger))
        except Exception as e:
            warnings.warn("vramscope: could not write a %s snapshot at step %d: %s" % (trigger, self.step, e), RuntimeWarning)
            return None
        record["path"] = str(path)
        record["upload"] = self._upload(path, trigger) if self.server else None
        self.snapshots.append(record)
        return record

    def _upload(self, path, trigger):
        from ..cli import upload
        from ..errors import VramscopeError

        try:
            return upload(
                path,
                server=self.server,
                token=self.token,
                job=self.job,
                rank=self.rank,
                tags=["step=%d" % self.step],
                trigger=trigger if trigger in ("manual", "threshold", "oom") else "manual",
            )
        except VramscopeError as e:
            warnings.warn("vramscope: %s kept at %s, not uploaded: %s" % (trigger, path, e), RuntimeWarning)
            return None

    def _check_threshold(self):
        try:
            samples = _capture.torch_sampler(self._torch)()
        except Exception as e:
            warnings.warn("vramscope: cannot read the allocator's figures: %s" % e, RuntimeWarning)
            return
        for sample in samples:
            capacity = sample.get("capacity") or sample.get("total") or 0
            if capacity <= 0:
                continue
            fraction = sample["reserved"] / float(capacity)
            # A spike inside one step, freed before its end, shows only in
            # PyTorch's peak (read, never reset): a peak that moved since the
            # last check was reached in between.
            peak, before = sample.get("reserved_peak"), self._peaks.get(sample["device"])
            self._peaks[sample["device"]] = peak
            peak_fraction = peak / float(capacity) if peak is not None and peak != before else None
            trigger = self._triggers.setdefault(sample["device"], _capture.ThresholdTrigger(self.threshold))
            if trigger.update(fraction, peak_fraction):
                reached = max(sample["reserved"], peak or 0) if peak_fraction is not None else sample["reserved"]
                self.write(
                    "threshold",
                    "device %d reserved %d of %d bytes (%.1f%% >= %.1f%%)"
                    % (sample["device"], reached, capacity, 100 * reached / float(capacity), 100 * self.threshold),
                )

    def _on_oom(self, device, requested, allowed, free):
        """PyTorch's OOM observer: runs at the failed allocation, before the
        exception unwinds the step, so the snapshot holds what was live."""
        if not (self.active and self.on_oom) or not self._oom_limit.allow():
            return
        self.write("oom", "device %d: requested %d bytes; allocated %d, free %d" % (device, requested, allowed, free))

    def _close_range(self):
        if self._range is not None:
            opened, self._range = self._range, None
            opened.__exit__(None, None, None)


def _current_counters(torch):
    """`torch.cuda.memory_stats()`'s current reserved, allocated, active and
    requested bytes (all pools), or {} where there are none."""
    stats = getattr(torch.cuda, "memory_stats", None)
    if stats is None:
        return {}
    try:
        s = stats()
    except Exception:  # noqa: BLE001 - a counter read never fails a training step
        return {}
    keys = ("reserved_bytes", "allocated_bytes", "active_bytes", "requested_bytes")
    return {k: s.get("%s.all.current" % k) for k in keys if "%s.all.current" % k in s}


class Monitored:
    """What both framework callbacks share: their options, the
    `MemoryMonitor` they drive, and its snapshots. Cooperative: it calls the
    next `__init__` of the callback's bases."""

    def __init__(self, *args, **options):
        # The options and their defaults are MemoryMonitor's, declared once.
        super().__init__()
        self.monitor = MemoryMonitor(*args, **options)

    @property
    def snapshots(self):
        """The snapshots written so far (path, trigger, step, rank, job, reason, upload)."""
        return self.monitor.snapshots
