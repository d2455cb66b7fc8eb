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

Nothing here fails, stalls or changes the training: every call the
frameworks make into the monitor is contained (`_contained`); what fails is
said once on stderr with what it cost, and the training goes on as it would
without the callback.
"""

import atexit
import functools
import os
import queue
import re
import threading
import time
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


def _tell(message, key=None):
    """Once per process for each key (the message by default), on stderr
    (never `warnings.warn`: a job run with `-W error` would turn it into
    the training's own exception)."""
    _capture.tell_once(message, key=key, prefix="vramscope")


class _Uploads:
    """Uploads one after another on a daemon thread, so that a training
    step never waits on the network; at exit, up to `EXIT_WAIT_S` for what
    is left (each snapshot is on disk first: one not uploaded stays there)."""

    EXIT_WAIT_S = 30.0

    def __init__(self):
        self.queue = queue.Queue()
        self.pending = 0
        self.settled = threading.Condition()
        self.thread = None

    def submit(self, work):
        with self.settled:
            self.pending += 1
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, name="vramscope-uploads", daemon=True)
                self.thread.start()
                atexit.register(self._at_exit)
        self.queue.put(work)

    def wait(self, timeout_s):
        """True once nothing is pending; False when `timeout_s` ran out first."""
        deadline = time.monotonic() + timeout_s
        with self.settled:
            while self.pending and time.monotonic() < deadline:
                self.settled.wait(max(0.0, deadline - time.monotonic()))
            return self.pending == 0

    def _loop(self):
        while True:
            work = self.queue.get()
            try:
                work()
            except Exception as e:  # noqa: BLE001 - an upload never fails the training
                _tell("an upload failed (%s: %s); the snapshot stays on disk" % (type(e).__name__, e), key="upload")
            with self.settled:
                self.pending -= 1
                self.settled.notify_all()

    def _at_exit(self):
        if not self.wait(self.EXIT_WAIT_S):
            _tell("%d snapshot upload(s) not finished after %.0f s at exit; the files stay on disk"
                  % (self.pending, self.EXIT_WAIT_S))


def _contained(what, lost):
    """A monitor method the framework calls: whatever it raises is said
    once ("vramscope: {what} failed ...; {lost}") and swallowed, and the
    training goes on; a failed `start` leaves the monitor inactive."""

    def wrap(method):
        @functools.wraps(method)
        def contained(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except Exception as e:  # noqa: BLE001 - the training must not see our failure
                _tell("%s failed (%s: %s); %s; the training goes on" % (what, type(e).__name__, e, lost))
                return None

        return contained

    return wrap


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
    context: what the history records of each event: "auto" (default: the
        stacks of allocations and frees where this torch records the latter
        safely, else of allocations only; see `vramscope_capture`), "all",
        "alloc" or "state".
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
        context="auto",
    ):
        if context not in _capture.CONTEXTS:
            raise ValueError("context is one of %s; got %r" % (", ".join(_capture.CONTEXTS), context))
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
        self.context = context
        #: The context the history records (after `start`; `auto` resolved).
        self.recorded_context = None
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
        self._uploads = _Uploads()
        self._sampler = None
        self._observer_attached = False

    # -- the callbacks' calls ---------------------------------------------

    @_contained("starting the memory recording", "nothing is recorded")
    def start(self, rank=None, job=None, torch=None):
        """At train start: records the allocator's history and attaches the
        OOM observer. Does nothing (said once) without CUDA."""
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
            _tell("CUDA is not available; no memory is recorded")
            return
        self._torch = torch
        self.recorded_context = _capture.start_history(torch, self.max_entries, self.context)
        self.active = True
        if self.on_oom and not self._observer_attached:
            attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
            if attach is None:
                _tell("this torch has no OOM observer; no OOM snapshots")
            else:
                # An observer cannot be detached: it checks `active` instead.
                attach(self._on_oom)
                self._observer_attached = True

    @_contained("marking a step in the trace", "steps may be missing from the trace")
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

    @_contained("a step's snapshot check", "a snapshot due at this step may be missing")
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

    @_contained("stopping the memory recording", "the history may still be recorded")
    def stop(self):
        """At train end: closes the open range and stops recording."""
        if not self.active:
            return
        self.active = False
        try:
            self._close_range()
        finally:
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
        except Exception as e:  # noqa: BLE001 - a snapshot never fails a training step
            _tell("could not write a %s snapshot at step %d (%s: %s); the training goes on"
                  % (trigger, self.step, type(e).__name__, e))
            return None
        record["path"] = str(path)
        # Filled in by the upload's thread: the server's answer, or None.
        record["upload"] = None
        self.snapshots.append(record)
        if self.server:
            self._uploads.submit(functools.partial(self._upload, record, path, trigger, self.step))
        return record

    def flush_uploads(self, timeout_s=60.0):
        """Waits up to `timeout_s` for the snapshots' uploads (each runs on a
        thread of its own, so no step waits on the network); True when none
        is left."""
        return self._uploads.wait(timeout_s)

    def _upload(self, record, path, trigger, step):
        from ..cli import upload
        from ..errors import VramscopeError

        try:
            record["upload"] = upload(
                path,
                server=self.server,
                token=self.token,
                job=self.job,
                rank=self.rank,
                tags=["step=%d" % step],
                trigger=trigger if trigger in ("manual", "threshold", "oom") else "manual",
            )
        except VramscopeError as e:
            _tell("%s kept at %s, not uploaded: %s" % (trigger, path, e), key="upload")

    def _check_threshold(self):
        try:
            if self._sampler is None:
                self._sampler = _capture.torch_sampler(self._torch)
            samples = self._sampler()
        except Exception as e:  # noqa: BLE001
            _tell("cannot read the allocator's figures (%s); no threshold snapshots" % e)
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

    @_contained("the OOM snapshot", "no snapshot of this OOM")
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

    def flush_uploads(self, timeout_s=60.0):
        """Waits up to `timeout_s` for the snapshots' uploads, which run on a
        thread of their own (no step waits on the network); True when none
        is left. At exit the process waits for them up to 30 s by itself."""
        return self.monitor.flush_uploads(timeout_s)
