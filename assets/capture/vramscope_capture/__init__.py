"""vramscope_capture: records PyTorch's CUDA allocator history inside a job
and hands snapshots and telemetry to the `vramscope agent` beside it.

`vramscope agent -- python train.py` loads this module through a
`sitecustomize` it puts on PYTHONPATH, so nothing is installed; a job
started elsewhere can call `vramscope_capture.install(...)` itself.

What it does, and what it never does:

* It never imports torch itself. It waits for the job to import torch, then
  queues its start with `torch.cuda._lazy_call`, so it runs when the job
  initialises CUDA and a process that never touches the GPU (torchrun's
  launcher, a data loader) gets no CUDA context and records nothing.
* Once started: `_record_memory_history(max_entries=..., context=...)` (a
  bounded ring; none under cudaMallocAsync, which keeps no history),
  an OOM observer that dumps a snapshot at the failed allocation, and a
  watcher thread that samples the allocator once per interval and dumps a
  pre-OOM snapshot when reserved memory crosses the threshold of capacity
  (re-armed only after it falls back below by a margin, and at most
  `max_dumps_per_hour` times). Each sample checks the threshold against the
  highest reserved memory since the previous one too (PyTorch's
  `reserved_bytes.all.peak`, read, never reset: the job's own
  `max_memory_reserved()` stays its own), so a spike between two samples is
  not missed; and the process takes a last sample as it exits, so a job
  shorter than one interval still reports itself (and its spike).
* Snapshots go to files in the spool folder (pickle first, then a small
  JSON manifest entry, each written to a temporary name and renamed), so a
  snapshot is on disk before anyone is told about it. The local socket only
  carries small JSON lines: a hello, samples, "snapshot written", "threshold
  crossed"; and from the agent, "capture now".
* Nothing here blocks or fails the job: messages go through a bounded queue
  (oldest dropped when full), the socket lives in daemon threads that
  reconnect quietly, and every error in this module is swallowed after one
  line on stderr.
"""

import atexit
import json
import os
import pickle
import queue
import signal
import socket
import sys
import threading
import time

__all__ = ["install", "install_from_env", "capture_now", "Capture"]

#: Environment variables the agent sets for the job (and its children).
ENV_SOCKET = "VRAMSCOPE_AGENT_SOCKET"
ENV_SPOOL = "VRAMSCOPE_SPOOL_DIR"
ENV_THRESHOLD = "VRAMSCOPE_THRESHOLD"
ENV_MAX_ENTRIES = "VRAMSCOPE_MAX_ENTRIES"
ENV_INTERVAL = "VRAMSCOPE_INTERVAL_S"
ENV_MAX_DUMPS = "VRAMSCOPE_MAX_DUMPS_PER_HOUR"
ENV_JOB = "VRAMSCOPE_JOB"
#: What the history records of each event: `auto` (the default: `all` where
#: this torch and Python can record the stacks of frees safely, else `alloc`;
#: see `history_context`), `all` (stacks of allocations and frees), `alloc`
#: (allocations only) or `state` (stacks of live blocks only).
ENV_CONTEXT = "VRAMSCOPE_CONTEXT"
CONTEXTS = ("auto", "all", "alloc", "state")
#: Set to 1 for a line on stderr at each decision (start, threshold, dump).
ENV_DEBUG = "VRAMSCOPE_DEBUG"

#: How far below the threshold reserved memory must fall before the
#: threshold trigger fires again.
REARM_MARGIN = 0.05
#: Messages held while the agent is unreachable; older ones are dropped.
QUEUE_LIMIT = 4096
#: OOM snapshots per hour (a job that catches OOMs in a loop must not dump forever).
MAX_OOM_DUMPS_PER_HOUR = 4
# Snapshots asked for by the agent (capture now, another rank's threshold).
MAX_COMMANDED_DUMPS_PER_HOUR = 30
MIN_COMMANDED_GAP_S = 5

_installed = None
_lock = threading.Lock()


def _warn(message, prefix="vramscope_capture"):
    try:
        sys.stderr.write("%s: %s\n" % (prefix, message))
    except Exception:
        pass


_told = set()
_told_lock = threading.Lock()


def tell_once(message, key=None, prefix="vramscope_capture"):
    """One line on stderr, once per process for each `key` (the message
    itself by default): what a failure of ours cost the job's capture, said
    once however often it repeats. Never a `warnings.warn`: a job run with
    `-W error` would turn our warning into its own exception."""
    key = message if key is None else key
    with _told_lock:
        if key in _told:
            return
        _told.add(key)
    _warn(message, prefix)


def _debug(message):
    if os.environ.get(ENV_DEBUG):
        _warn("[%.3f %d] %s" % (time.time(), os.getpid(), message))


def _env_float(name, default):
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        _warn("%s=%r is not a number; using %s" % (name, os.environ.get(name), default))
        return float(default)


def _env_int(name, default):
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        _warn("%s=%r is not an integer; using %s" % (name, os.environ.get(name), default))
        return int(default)


def _env_rank(name):
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    try:
        return int(value)
    except ValueError:
        return None


def labels():
    """This process's labels: host, pid and torchrun's RANK/LOCAL_RANK/WORLD_SIZE."""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "rank": _env_rank("RANK"),
        "local_rank": _env_rank("LOCAL_RANK"),
        "world_size": _env_rank("WORLD_SIZE"),
        "job": os.environ.get(ENV_JOB) or None,
    }


def _now_ms():
    return int(time.time() * 1000)


class RateLimit:
    """At most `limit` events in any sliding hour, and (with `min_gap_s`)
    no two closer than that."""

    def __init__(self, limit, window_s=3600.0, min_gap_s=0.0):
        self.limit = limit
        self.window_s = window_s
        self.min_gap_s = min_gap_s
        self.times = []

    def allow(self, now=None):
        now = time.monotonic() if now is None else now
        self.times = [t for t in self.times if now - t < self.window_s]
        if len(self.times) >= self.limit:
            return False
        if self.times and now - self.times[-1] < self.min_gap_s:
            return False
        self.times.append(now)
        return True


class ThresholdTrigger:
    """Fires once when `fraction` reaches `threshold`, re-arms only after it
    has fallen below `threshold - margin` (hysteresis)."""

    def __init__(self, threshold, margin=REARM_MARGIN):
        self.threshold = threshold
        self.margin = margin
        self.armed = True

    def update(self, fraction, peak=None):
        """`fraction` now; `peak`, when known, the highest fraction since the
        previous update (a crossing between two samples fires too)."""
        highest = fraction if peak is None else max(fraction, peak)
        if self.armed and highest >= self.threshold:
            self.armed = False
            return True
        if not self.armed and fraction < self.threshold - self.margin:
            self.armed = True
        return False


class Link:
    """JSON lines to and from the agent over a Unix socket, in daemon threads.

    `send` never blocks: it puts the message on a bounded queue (dropping the
    oldest when full). The writer thread connects, says hello, and drains the
    queue; when the socket breaks it reconnects every couple of seconds. A
    reader thread per connection hands commands to `on_command`.
    """

    def __init__(self, path, hello, on_command):
        self.path = path
        self.hello = hello
        self.on_command = on_command
        self.queue = queue.Queue(maxsize=QUEUE_LIMIT)
        self.sock = None
        self.dropped = 0
        # Messages put on the queue, and those written (or given up on): at
        # exit, `flush` waits for the second to reach the first.
        self.queued = 0
        self.done = 0
        self.failed_connects = 0
        self.counts = threading.Lock()
        self.closed = False
        self.thread = threading.Thread(target=self._write_loop, name="vramscope-link", daemon=True)
        self.thread.start()

    def send(self, message):
        with self.counts:
            self.queued += 1
        while True:
            try:
                self.queue.put_nowait(message)
                return
            except queue.Full:
                try:
                    self.queue.get_nowait()
                    self.dropped += 1
                    with self.counts:
                        self.done += 1
                except queue.Empty:
                    pass

    def flush(self, timeout_s):
        """Waits up to `timeout_s` for every message to be written (used at
        exit), the one being written included; also while the first
        connection is being made (a job shorter than that still reports
        itself), but not once connecting has failed (no agent: no wait)."""
        deadline = time.monotonic() + timeout_s
        while self.done < self.queued and time.monotonic() < deadline:
            if self.sock is None and self.failed_connects > 0:
                return
            time.sleep(0.01)

    def _connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(5.0)
        sock.connect(self.path)
        sock.sendall((json.dumps(dict(self.hello, type="hello")) + "\n").encode())
        reader = threading.Thread(target=self._read_loop, args=(sock,), name="vramscope-link-read", daemon=True)
        reader.start()
        return sock

    def _write_loop(self):
        message = None
        while not self.closed:
            if self.sock is None:
                try:
                    self.sock = self._connect()
                except OSError:
                    self.sock = None
                    self.failed_connects += 1
                    time.sleep(2.0)
                    continue
            if message is None:
                message = self.queue.get()
            try:
                self.sock.sendall((json.dumps(message) + "\n").encode())
                message = None
                with self.counts:
                    self.done += 1
            except (OSError, TypeError, ValueError) as e:
                if isinstance(e, (TypeError, ValueError)):
                    message = None  # not JSON: drop it, keep the link
                    with self.counts:
                        self.done += 1
                    continue
                try:
                    self.sock.close()
                except OSError:
                    pass
                self.sock = None

    def _read_loop(self, sock):
        buffer = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                try:
                    command = json.loads(line)
                except ValueError:
                    continue
                try:
                    self.on_command(command)
                except Exception as e:  # a bad command must not kill the reader
                    _warn("command %r failed: %s" % (command, e))


class Capture:
    """One process's capture: spool writer, dumper thread, watcher thread.

    `sampler()` returns a list of per-device sample dicts (`device`,
    `allocated`, `reserved`, `total`, `free`, `capacity`, ...); `snapshotter()`
    returns the snapshot object to pickle. With torch they read the CUDA
    allocator; tests on machines without a GPU pass their own.
    """

    def __init__(self, socket_path, spool_dir, threshold, interval_s, max_dumps_per_hour, sampler, snapshotter,
                 backend=None, history=True):
        self.labels = labels()
        # Said in the hello: a backend without history streams telemetry only.
        self.hello = dict(self.labels, backend=backend, history=bool(history))
        self.history = bool(history)
        self.spool_dir = spool_dir
        self.threshold = threshold
        self.interval_s = interval_s
        self.sampler = sampler
        self.snapshotter = snapshotter
        self.limit = RateLimit(max_dumps_per_hour)
        self.oom_limit = RateLimit(MAX_OOM_DUMPS_PER_HOUR)
        # Snapshots asked for from outside ("capture now", another rank's
        # threshold): the server spaces them too, but a job must not dump
        # continuously whatever its agent relays.
        self.command_limit = RateLimit(MAX_COMMANDED_DUMPS_PER_HOUR, min_gap_s=MIN_COMMANDED_GAP_S)
        self.triggers = {}
        # reserved_bytes.all.peak per device at the previous sample.
        self.peaks = {}
        self.counter = 0
        self.dump_lock = threading.Lock()
        self.requests = queue.Queue(maxsize=16)
        self.stopped = threading.Event()
        os.makedirs(spool_dir, exist_ok=True)
        self.link = Link(socket_path, self.hello, self._on_command) if socket_path else None
        threading.Thread(target=self._dump_loop, name="vramscope-dumper", daemon=True).start()
        self.watcher = threading.Thread(target=self._watch_loop, name="vramscope-watcher", daemon=True)
        self.watcher.start()
        # At exit our threads must be out of torch before its C++ state is
        # torn down: a daemon thread inside memory_stats() or _snapshot()
        # then crashes the process (exit code 139 instead of the job's).
        atexit.register(self.close)

    # -- snapshots -----------------------------------------------------

    def _send(self, message):
        if self.link is not None:
            self.link.send(message)

    def dump(self, trigger, reason="", device=None, tags=()):
        """Takes a snapshot now, on this thread, and spools it. Returns the
        manifest file's name, or None when it failed."""
        _debug("dump %s requested: %s" % (trigger, reason))
        if not self.history:
            _debug("no allocator history under this backend: no snapshot")
            return None
        with self.dump_lock:
            try:
                started = time.monotonic()
                snapshot = self.snapshotter()
                _debug("dump %s: snapshot taken in %.3f s" % (trigger, time.monotonic() - started))
                with _lock:
                    self.counter += 1
                    counter = self.counter
                stem = "%013d-%s-%d-%04d" % (_now_ms(), _safe(self.labels["host"]), os.getpid(), counter)
                data_name = stem + ".pickle"
                data_path = os.path.join(self.spool_dir, data_name)
                with open(data_path + ".tmp", "wb") as f:
                    pickle.dump(snapshot, f, protocol=4)
                    size = f.tell()
                del snapshot
                os.replace(data_path + ".tmp", data_path)
                meta = dict(self.labels)
                meta.update(
                    {
                        "file": data_name,
                        "trigger": trigger,
                        "reason": reason,
                        "device": device,
                        "tags": list(tags),
                        "captured_at_ms": _now_ms(),
                        "size_bytes": size,
                        "dump_s": round(time.monotonic() - started, 3),
                    }
                )
                meta_name = stem + ".json"
                meta_path = os.path.join(self.spool_dir, meta_name)
                with open(meta_path + ".tmp", "w") as f:
                    json.dump(meta, f)
                os.replace(meta_path + ".tmp", meta_path)
            except Exception as e:
                _warn("could not write a %s snapshot: %s" % (trigger, e))
                return None
        _debug("dump %s written: %s (%d bytes)" % (trigger, meta_name, size))
        self._send({"type": "snapshot", "manifest": meta_name, "trigger": trigger})
        return meta_name

    def request(self, trigger, reason="", tags=()):
        """Asks the dumper thread for a snapshot (never blocks)."""
        try:
            self.requests.put_nowait((trigger, reason, tuple(tags)))
        except queue.Full:
            pass

    def _dump_loop(self):
        while True:
            trigger, reason, tags = self.requests.get()
            if self.stopped.is_set():
                continue  # the process is exiting: torch may be half torn down
            self.dump(trigger, reason, tags=tags)

    def on_oom(self, device, requested, allowed, free):
        """Called by PyTorch when an allocation fails: dump on this thread,
        since the job may not survive the exception. Never raises: an
        exception here would replace the job's OutOfMemoryError (which its
        own code may catch) with ours."""
        try:
            if not self.oom_limit.allow():
                return
            reason = "requested %d bytes; device allocated %d, free %d" % (requested, allowed, free)
            self._send({"type": "oom", "device": device, "requested": requested})
            self.dump("oom", reason, device=device)
            if self.link is not None:
                self.link.flush(2.0)
        except Exception as e:
            tell_once("no OOM snapshot (%s: %s)" % (type(e).__name__, e), key="oom-observer")

    def _on_command(self, command):
        if command.get("type") == "capture":
            trigger = command.get("trigger") or "manual"
            if trigger not in ("manual", "threshold", "oom"):
                trigger = "manual"
            if not self.command_limit.allow():
                _warn("a snapshot was asked for again too soon; skipped (at most %d an hour, %d s apart)"
                      % (MAX_COMMANDED_DUMPS_PER_HOUR, MIN_COMMANDED_GAP_S))
                return
            self.request(trigger, command.get("reason") or "asked by the agent", command.get("tags") or ())

    # -- telemetry -----------------------------------------------------

    def _peak_since_last(self, s):
        """The highest reserved bytes since the previous sample of this
        device, when the sample says (`reserved_peak`: PyTorch's
        `reserved_bytes.all.peak`, which only grows until someone resets
        it): a peak that moved was reached since then; one that did not
        tells nothing new."""
        peak = s.get("reserved_peak")
        if peak is None:
            return None
        before = self.peaks.get(s.get("device"))
        self.peaks[s.get("device")] = peak
        return peak if peak != before else None

    def sample_once(self, final=False):
        """Samples every device once, sends the samples, checks the threshold
        (against the peak since the previous sample too). `final`: the
        process is exiting, so a threshold snapshot is taken on this thread
        (the dumper thread is stopping)."""
        try:
            samples = self.sampler()
        except Exception as e:
            _warn("sampling failed: %s" % e)
            return []
        for s in samples:
            s["type"] = "sample"
            s.setdefault("t_ms", _now_ms())
            s["pid"] = os.getpid()
            self._send(s)
            capacity = s.get("capacity") or s.get("total") or 0
            if capacity <= 0:
                continue
            fraction = s.get("reserved", 0) / float(capacity)
            peak_bytes = self._peak_since_last(s)
            peak = None if peak_bytes is None else peak_bytes / float(capacity)
            trigger = self.triggers.setdefault(s.get("device"), ThresholdTrigger(self.threshold))
            fired = trigger.update(fraction, peak)
            _debug("sample device %s reserved %d peak since %s capacity %d (%.3f) armed %s fired %s"
                   % (s.get("device"), s.get("reserved", 0), peak_bytes, capacity, fraction, trigger.armed, fired))
            if fired:
                if peak is not None and peak > fraction:
                    reason = "reserved reached %d of %d bytes since the previous sample (%.1f%% >= %.1f%%)" % (
                        peak_bytes,
                        capacity,
                        100 * peak,
                        100 * self.threshold,
                    )
                else:
                    reason = "reserved %d of %d bytes (%.1f%% >= %.1f%%)" % (
                        s.get("reserved", 0),
                        capacity,
                        100 * fraction,
                        100 * self.threshold,
                    )
                if self.limit.allow():
                    # The agent asks the other ranks for theirs as well.
                    self._send({"type": "threshold", "device": s.get("device"), "reason": reason})
                    if final:
                        self.dump("threshold", reason, device=s.get("device"))
                    else:
                        self.request("threshold", reason)
                else:
                    _warn("threshold crossed but the hourly dump limit is reached: " + reason)
        return samples

    def _watch_loop(self):
        while not self.stopped.wait(self.interval_s):
            self.sample_once()

    def close(self, dump_timeout_s=30.0):
        """Stops sampling, takes a last sample (a job shorter than one
        interval still registers its source, and a spike since the previous
        sample still gets its snapshot), lets a dump in progress finish,
        flushes the link."""
        first = not self.stopped.is_set()
        self.stopped.set()
        if self.watcher is not threading.current_thread():
            self.watcher.join(5.0)
        if first:
            try:
                self.sample_once(final=True)
            except Exception as e:
                _warn("the last sample failed: %s" % e)
        if self.dump_lock.acquire(timeout=dump_timeout_s):
            self.dump_lock.release()
        if self.link is not None:
            self.link.flush(3.0)


def _safe(text):
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(text))[:64] or "host"


# -- torch ----------------------------------------------------------------

_fraction = {}


def _memory_fraction(torch, device):
    """The process's memory fraction of `device`: PyTorch's getter where it
    has one (`get_per_process_memory_fraction`, 2.11), else what the job
    set through `set_per_process_memory_fraction` (seen by `_patch_fraction`),
    else None (never set: the whole device)."""
    getter = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    if getter is not None:
        try:
            return min(max(float(getter(device)), 0.0), 1.0)
        except Exception:
            pass
    if device in _fraction:
        return min(max(_fraction[device], 0.0), 1.0)
    return None


def _torch_capacity(torch, device, total):
    fraction = _memory_fraction(torch, device)
    return int(total * (1.0 if fraction is None else fraction))


def torch_sampler(torch):
    """Samples each device where this process's allocator holds memory.

    It runs on the watcher thread while the job works, so it makes no CUDA
    runtime call: the allocator's counters are its own bookkeeping, the
    device's total comes from its properties (read once), and its free
    memory from NVML where there is one. A runtime call from another thread
    could fail the job's CUDA-graph capture (the default capture mode,
    "global", forbids unsafe calls in every thread) and creates a context on
    a device the job never used."""
    totals = {}
    handles = {}

    def device_free(device):
        nvml = _nvml_instance()
        if nvml is None:
            return None
        if device not in handles:
            handles[device] = nvml.handle(_bus_id(torch, device))
        return nvml.free(handles[device]) if handles[device] is not None else None

    def sample():
        out = []
        for device in range(torch.cuda.device_count()):
            stats = torch.cuda.memory_stats(device)
            reserved = stats.get("reserved_bytes.all.current", 0)
            peak = stats.get("reserved_bytes.all.peak", 0)
            if reserved <= 0 and peak <= 0:
                continue
            if device not in totals:
                totals[device] = int(torch.cuda.get_device_properties(device).total_memory)
            total = totals[device]
            out.append(
                {
                    "device": device,
                    "allocated": stats.get("allocated_bytes.all.current", 0),
                    "reserved": reserved,
                    "reserved_peak": peak,
                    "active": stats.get("active_bytes.all.current", 0),
                    "inactive_split": stats.get("inactive_split_bytes.all.current", 0),
                    "alloc_retries": stats.get("num_alloc_retries", 0),
                    "ooms": stats.get("num_ooms", 0),
                    "free": device_free(device),
                    "total": total,
                    "capacity": _torch_capacity(torch, device, total),
                }
            )
        return out

    return sample


# -- memory outside the allocator ------------------------------------------


class _Nvml:
    """NVML through ctypes, loaded once, for the figures a snapshot carries:
    this process's memory on each device (the allocator's reserved memory
    plus the CUDA context, NCCL, cuBLAS and other libraries), the device's
    used and total memory, and the other processes. No pynvml needed: the
    driver installs libnvidia-ml.so.1 wherever there is a GPU. Any failure
    leaves the figures out; a snapshot never depends on them."""

    def __init__(self):
        import ctypes

        self.ctypes = ctypes
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise OSError("nvmlInit failed")

        class Memory(ctypes.Structure):
            _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

        class Process(ctypes.Structure):
            # nvmlProcessInfo_t (v2 and v3 share this layout).
            _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                        ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]

        self.Memory = Memory
        self.Process = Process
        self.running = None
        for name in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"):
            if hasattr(self.lib, name):
                self.running = getattr(self.lib, name)
                break

    def handle(self, bus_id):
        handle = self.ctypes.c_void_p()
        if self.lib.nvmlDeviceGetHandleByPciBusId_v2(bus_id.encode(), self.ctypes.byref(handle)) != 0:
            return None
        return handle

    def free(self, handle):
        """The device's free memory, or None."""
        memory = self.Memory()
        if self.lib.nvmlDeviceGetMemoryInfo(handle, self.ctypes.byref(memory)) != 0:
            return None
        return int(memory.free)

    def device(self, handle):
        memory = self.Memory()
        out = {}
        if self.lib.nvmlDeviceGetMemoryInfo(handle, self.ctypes.byref(memory)) == 0:
            out["device_used_bytes"] = int(memory.used)
            out["device_total_bytes"] = int(memory.total)
        processes = []
        if self.running is not None:
            count = self.ctypes.c_uint(64)
            infos = (self.Process * 64)()
            if self.running(handle, self.ctypes.byref(count), infos) == 0:
                for i in range(min(count.value, 64)):
                    used = int(infos[i].usedGpuMemory)
                    # NVML_VALUE_NOT_AVAILABLE is all ones.
                    processes.append({"pid": int(infos[i].pid), "used_bytes": None if used >= 2**63 else used})
        me = os.getpid()
        mine = [p for p in processes if p["pid"] == me]
        out["process_used_bytes"] = mine[0]["used_bytes"] if mine else None
        out["other_processes"] = [p for p in processes if p["pid"] != me]
        return out


_nvml = None
_nvml_failed = False


def _nvml_instance():
    global _nvml, _nvml_failed
    if _nvml is None and not _nvml_failed:
        try:
            _nvml = _Nvml()
        except Exception as e:
            _nvml_failed = True
            _debug("no NVML: %s" % e)
    return _nvml


def _bus_id(torch, device):
    props = torch.cuda.get_device_properties(device)
    domain = getattr(props, "pci_domain_id", 0) or 0
    return "%08x:%02x:%02x.0" % (domain, props.pci_bus_id, props.pci_device_id)


def alloc_conf():
    """(variable, value) of the allocator settings the job runs with:
    PYTORCH_ALLOC_CONF, the current name, before PYTORCH_CUDA_ALLOC_CONF."""
    for name in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"):
        value = os.environ.get(name)
        if value is not None:
            return name, value
    return None, None


def allocator_backend(torch):
    getter = getattr(torch.cuda, "get_allocator_backend", None)
    try:
        return getter() if getter is not None else "native"
    except Exception:
        return None


def capture_context(torch):
    """What a snapshot carries beside PyTorch's own keys (`vramscope_capture`):
    NVML's view of this process on each device it uses, and the job's
    settings. Read by vramscope's reader; PyTorch's viewer ignores it."""
    var, conf = alloc_conf()
    context = {
        "torch_version": str(getattr(torch, "__version__", "")),
        "backend": allocator_backend(torch),
        "alloc_conf": conf,
        "alloc_conf_var": var,
        "pid": os.getpid(),
        "devices": [],
    }
    if _history:
        # What the trace records (`start_history`): its context, what was
        # asked for, and why `auto` chose `alloc` where it did.
        context["history"] = dict(_history)
    nvml = _nvml_instance()
    for device in range(torch.cuda.device_count()):
        try:
            if torch.cuda.memory_reserved(device) <= 0:
                continue
            # The total PyTorch applies per_process_memory_fraction to
            # (cudaMemGetInfo's, a little under NVML's).
            cuda_total = int(torch.cuda.get_device_properties(device).total_memory)
            entry = {"device": device, "cuda_total_bytes": cuda_total}
            # The cap the job runs under: vramscope's replays take it as
            # their capacity when none is given (`capacity_source: recorded`).
            fraction = _memory_fraction(torch, device)
            if fraction is not None and fraction > 0.0:
                entry["memory_fraction"] = fraction
                if fraction < 1.0:
                    entry["capacity_bytes"] = int(cuda_total * fraction)
            handle = nvml.handle(_bus_id(torch, device)) if nvml is not None else None
            if handle is not None:
                entry.update(nvml.device(handle))
            context["devices"].append(entry)
        except Exception as e:
            _debug("no NVML figures for device %d: %s" % (device, e))
    return context


def _snapshot_without_inductor_import(torch):
    """`torch.cuda.memory._snapshot()` without its first call's import of
    `torch._inductor`.

    To symbolize Python frames, PyTorch asks `hasattr(torch, "_inductor")`
    (for frames of code inductor generated), and torch's lazy `__getattr__`
    imports the package: some 900 modules, 4 to 7 s on an H200 host, all
    under the GIL, so the job's own threads stall too (measured by
    `server/benches/agent_overhead/first_snapshot.py`). Code that inductor
    generated exists only if the job imported it; otherwise a placeholder
    answers the `hasattr` for the length of the call and the frames come
    out the same."""
    if "torch._inductor" in sys.modules:
        return torch.cuda.memory._snapshot()
    placeholder = object()
    torch._inductor = placeholder
    try:
        return torch.cuda.memory._snapshot()
    finally:
        if torch.__dict__.get("_inductor") is placeholder:
            del torch._inductor


def torch_snapshotter(torch):
    """`_snapshot()` with the capture context added under `vramscope_capture`."""

    def snapshot():
        taken = _snapshot_without_inductor_import(torch)
        if isinstance(taken, dict):
            try:
                taken["vramscope_capture"] = capture_context(torch)
            except Exception as e:
                _debug("no capture context: %s" % e)
        return taken

    return snapshot


def _patch_fraction(torch):
    """Remembers set_per_process_memory_fraction for torch versions without
    a getter (before 2.11). A torch that has the getter is left as it is."""
    if getattr(torch.cuda, "get_per_process_memory_fraction", None) is not None:
        return
    original = getattr(torch.cuda, "set_per_process_memory_fraction", None)
    if original is None or getattr(original, "_vramscope", False):
        return

    def set_per_process_memory_fraction(fraction, device=None):
        result = original(fraction, device)
        try:
            index = torch.cuda.current_device() if device is None else torch.device("cuda", device).index
            _fraction[index if index is not None else 0] = float(fraction)
        except Exception:
            pass
        return result

    set_per_process_memory_fraction._vramscope = True
    torch.cuda.set_per_process_memory_fraction = set_per_process_memory_fraction
    torch.cuda.memory.set_per_process_memory_fraction = set_per_process_memory_fraction


# -- the history --------------------------------------------------------------
#
# Why the default context is `auto`, not PyTorch's `all`.
#
# With context="all" every free records the Python stack it happens under
# (`CapturedTraceback::gather`, torch/csrc/profiler/combined_traceback.cpp).
# Since PyTorch added forward tracebacks to recorded stacks, that gather also
# asks the autograd node running in backward for its anomaly metadata
# (`PythonTraceback::gatherForwardTraceback`, in
# torch/csrc/profiler/python/combined_traceback.cpp): a dict lookup through
# pythoncapi-compat's `PyDict_GetItemRef`, which on Python < 3.13 reads a
# pending exception as a failed lookup and clears it. So a free recorded
# while an exception is on its way out of C++ inside backward destroys that
# exception, and the op returns NULL with none set: "SystemError: <built-in
# method dropout ...> returned NULL without setting an exception".
# Non-reentrant `torch.utils.checkpoint` raises exactly such an exception at
# every backward (`_StopRecomputationError`, from a saved-tensor hook, to stop
# recomputing early; transformers 5 checkpoints this way by default): the
# tensor the op had just made is freed as the exception unwinds, so a job
# with gradient checkpointing died at its first step. Reentrant
# checkpointing raises nothing; `alloc` and `state` record no stack at a
# free. Later PyTorch saves and restores the exception around the lookup.
#
# Versions are not guessed: `auto` reproduces the condition once per process
# (`_probe_free_stacks`) and records `all` where the exception survives,
# `alloc` where it does not. `alloc` keeps every allocation's stack, so the
# leak ranking and the OOM post-mortem read the same; only "where was it
# freed" is gone (docs/capture.md says what each analysis reads).

#: Said once per process when `auto` records `alloc`.
_AUTO_FELL_BACK = (
    "frees are recorded without their stacks (context 'alloc'): %s. Allocation stacks, the leak ranking and the "
    "OOM post-mortem are unaffected."
)

# The probe's verdict in this process: None until probed, then (keeps, why).
_probed = None
# What this process records, for the snapshots' `vramscope_capture.history`.
_history = {}


class NoHistory(RuntimeError):
    """This allocator keeps no history (cudaMallocAsync)."""


def _probe_free_stacks(torch):
    """Whether an exception raised in C++ inside backward survives a free
    recorded with its stack (context `all`) as it unwinds: "kept", "lost",
    or why it could not be told. Needs the history recording with `all`.

    A one-element backward on the CPU, which the calling thread runs with
    the autograd node current; inside it `max(dim=0)` of a CUDA tensor
    saves one of its two outputs (`indices`) through a saved-tensor hook
    that raises, and the other (`values`) is freed as the exception unwinds:
    what non-reentrant checkpointing does to dropout (its hook keeps the
    mask and raises; the output is freed). An op of one output would not
    do: the hook's frame, held by the exception's traceback, keeps the
    tensor it was given alive, so nothing is freed while the exception is
    pending (a GPU run showed `exp` answering "kept" where dropout lost
    it). No random numbers are drawn, and nothing inside the backward can
    start CUDA (the tensor exists before), so a probe run while CUDA
    initialises cannot wait on that initialisation."""

    class _Raised(Exception):
        pass

    def pack(_tensor):
        raise _Raised()

    outcome = []
    with torch.inference_mode(False), torch.enable_grad():
        leaf = torch.ones(2, device=torch.device("cuda", torch.cuda.current_device())).requires_grad_()

        class Probe(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.clone()

            @staticmethod
            def backward(ctx, grad):
                with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda packed: packed):
                    try:
                        leaf.max(dim=0)
                        outcome.append("the saved-tensor hook was not called")
                    except _Raised:
                        outcome.append("kept")
                    except SystemError:
                        outcome.append("lost")
                return grad

        Probe.apply(torch.zeros(1, device="cpu", requires_grad=True)).sum().backward()
        del leaf
    return outcome[0] if outcome else "the probe's backward did not run"


def _lost_because(torch):
    return (
        "with torch %s on Python %d.%d, recording them turns an exception raised inside backward (as non-reentrant "
        "gradient checkpointing raises at every step) into a SystemError"
        % (getattr(torch, "__version__", "?"), sys.version_info[0], sys.version_info[1])
    )


#: torch releases seen losing the exception on Python < 3.13 (issue 42: the
#: Trainer with non-reentrant checkpointing died on an H100 with torch
#: 2.11.0+cu130 and Python 3.12.3 while an earlier probe said "kept"):
#: `alloc` there whatever the probe says. Elsewhere the probe decides.
_SEEN_LOSING = ("2.11.",)


def _seen_losing(torch):
    version = str(getattr(torch, "__version__", ""))
    return sys.version_info < (3, 13) and version.startswith(_SEEN_LOSING)


def free_stacks_are_safe(torch):
    """(safe, why): whether recording the stacks of frees (`all`) is safe in
    this process, probed once per process with the history recording for
    the length of the probe (then stopped, which empties its ring). Unsafe
    when the probe could not tell."""
    global _probed
    if _probed is None:
        try:
            torch.cuda.memory._record_memory_history(max_entries=64, **_history_options(torch, "all"))
            try:
                outcome = _probe_free_stacks(torch)
            finally:
                torch.cuda.memory._record_memory_history(enabled=None)
        except Exception as e:  # whatever the probe met, the safe answer is `alloc`
            outcome = "the probe failed (%s: %s)" % (type(e).__name__, e)
        if outcome == "kept" and _seen_losing(torch):
            _probed = (False, _lost_because(torch) + " (seen on a GPU with this torch; the probe could not show it)")
        elif outcome == "kept":
            _probed = (True, "")
        elif outcome == "lost":
            _probed = (False, _lost_because(torch))
        else:
            _probed = (False, "whether recording them is safe with this torch could not be told: %s" % outcome)
        _debug("free stacks probe: %s" % outcome)
    return _probed


def history_context(torch, requested):
    """(context, note): what `requested` records here. `auto` is `all` where
    `free_stacks_are_safe`, else `alloc` with the note saying why; any
    other context is itself. Raises `NoHistory` under cudaMallocAsync."""
    if allocator_backend(torch) == "cudaMallocAsync":
        raise NoHistory("the cudaMallocAsync backend keeps no allocator history")
    if requested != "auto":
        return requested, ""
    safe, why = free_stacks_are_safe(torch)
    return ("all", "") if safe else ("alloc", why)


def _history_options(torch, context, stacks="python", every_thread=True):
    """The keyword arguments of `_record_memory_history` for `context`, with
    the newer options this torch has: `record_function` annotations from
    every thread in the trace (`every_thread`; otherwise PyTorch records the
    recording thread's) and pinned host memory (PyTorch 2.14). Detected from
    the signature; an older torch gets none of them."""
    options = {"context": context, "stacks": stacks}
    try:
        import inspect

        accepted = inspect.signature(torch.cuda.memory._record_memory_history).parameters
    except (TypeError, ValueError):
        accepted = {}
    wanted = ("global_record_annotations",) if every_thread else ()
    for name in wanted + ("record_pinned_host_memory",):
        if name in accepted:
            options[name] = True
    return options


def start_history(torch, max_entries, context="auto", stacks="python", every_thread=True, fresh=False):
    """Starts recording the allocator's history, the one way every capture
    path does: `context` as `history_context` resolves it (a note on
    stderr, once, when `auto` records `alloc`). Returns the context recorded.
    Raises `NoHistory` under cudaMallocAsync, and what torch raises.

    `fresh`: nothing of the job's is allocated yet (the agent starts at CUDA
    initialisation), so what the probe left (its cached block, counters and
    peaks) is cleared and the job sees the allocator a fresh process has."""
    probing = context == "auto" and _probed is None
    chosen, note = history_context(torch, context)
    if probing and fresh:
        empty = getattr(torch._C, "_cuda_emptyCache", None)  # torch.cuda.empty_cache() waits for the end of initialisation
        if empty is not None:
            empty()
        device = torch.cuda.current_device()
        torch.cuda.reset_peak_memory_stats(device)
        torch.cuda.reset_accumulated_memory_stats(device)
    options = _history_options(torch, chosen, stacks, every_thread)
    torch.cuda.memory._record_memory_history(max_entries=max_entries, **options)
    _history.clear()
    _history.update({"context": chosen, "requested": context, "stacks": stacks, "note": note or None})
    if note:
        tell_once(_AUTO_FELL_BACK % note, key="auto-context")
    _debug("recording (max_entries %d, %s)" % (max_entries, options))
    return chosen


def _start_torch(torch, options):
    """The agent's start, at the job's CUDA initialisation. Whatever fails
    here is said once and leaves the job as it would run without us."""
    global _installed
    with _lock:
        if _installed is not None:
            return _installed
        backend = allocator_backend(torch)
        history = False
        try:
            start_history(torch, options["max_entries"], options["context"], fresh=True)
            history = True
        except NoHistory as e:
            # Telemetry (memory_stats, NVML) still streams, and the live
            # page says why there are no snapshots.
            tell_once("no snapshots: %s; telemetry only" % e)
        except Exception as e:
            tell_once("no snapshots: cannot record the allocator history (%s: %s); telemetry only"
                      % (type(e).__name__, e))
        try:
            capture = Capture(
                options["socket"],
                options["spool_dir"],
                options["threshold"],
                options["interval_s"],
                options["max_dumps_per_hour"],
                torch_sampler(torch),
                torch_snapshotter(torch),
                backend=backend,
                history=history,
            )
        except Exception as e:
            if history:
                _stop_history(torch)
            tell_once("not capturing (%s: %s); the job runs without vramscope" % (type(e).__name__, e))
            return None
        attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if history and attach is not None:
            try:
                attach(capture.on_oom)
            except Exception as e:
                tell_once("no OOM snapshots: the OOM observer could not be attached (%s)" % e)
        elif history:
            tell_once("no OOM snapshots: this torch has no OOM observer")
        if threading.current_thread() is threading.main_thread():
            _install_signal(capture)
        _installed = capture
        return capture


def _stop_history(torch):
    try:
        torch.cuda.memory._record_memory_history(enabled=None)
    except Exception as e:
        _debug("could not stop the history: %s" % e)


def _install_signal(capture):
    try:
        if signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGUSR1, lambda signum, frame: capture.request("manual", "SIGUSR1"))
    except (ValueError, OSError, AttributeError):
        pass


def _when_torch_imported(callback):
    """Runs `callback(torch)` as soon as the job has imported torch (now, if
    it already has), without importing it here."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "cuda"):
        callback(torch)
        return
    import importlib.abc
    import importlib.util

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "torch":
                return None
            try:
                sys.meta_path.remove(self)
            except ValueError:
                pass
            try:
                spec = importlib.util.find_spec("torch")
            except Exception:
                return None  # the import system finds it (or fails) as it would without us
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            exec_module = spec.loader.exec_module

            def exec_and_hook(module):
                exec_module(module)
                try:
                    callback(module)
                except Exception as e:
                    tell_once("not capturing: could not start (%s: %s)" % (type(e).__name__, e))

            spec.loader.exec_module = exec_and_hook
            return spec

    sys.meta_path.insert(0, Finder())


def _options(**overrides):
    options = {
        "socket": os.environ.get(ENV_SOCKET) or None,
        "spool_dir": os.environ.get(ENV_SPOOL)
        or os.path.join(os.path.expanduser("~"), ".cache", "vramscope", "spool"),
        "threshold": _env_float(ENV_THRESHOLD, 0.9),
        "max_entries": _env_int(ENV_MAX_ENTRIES, 100000),
        "interval_s": _env_float(ENV_INTERVAL, 1.0),
        "max_dumps_per_hour": _env_int(ENV_MAX_DUMPS, 4),
        "context": os.environ.get(ENV_CONTEXT) if os.environ.get(ENV_CONTEXT) in CONTEXTS else "auto",
    }
    for key, value in overrides.items():
        if value is not None:
            options[key] = value
    return options


def install(socket=None, spool_dir=None, threshold=None, max_entries=None, interval_s=None, max_dumps_per_hour=None,
            context=None):
    """Starts capturing in this process: when torch is (or gets) imported,
    history recording, the OOM observer and the watcher start at the job's
    first CUDA use. Arguments default to the VRAMSCOPE_* environment."""
    options = _options(
        socket=socket,
        spool_dir=spool_dir,
        threshold=threshold,
        max_entries=max_entries,
        interval_s=interval_s,
        max_dumps_per_hour=max_dumps_per_hour,
        context=context,
    )

    def on_torch(torch):
        try:
            _patch_fraction(torch)
        except Exception as e:
            _debug("set_per_process_memory_fraction not watched: %s" % e)

        def start():
            # An exception here would fail the job's CUDA initialisation.
            try:
                _start_torch(torch, options)
            except Exception as e:
                tell_once("not capturing: could not start (%s: %s)" % (type(e).__name__, e))

        try:
            torch.cuda._lazy_call(start)
        except Exception as e:
            tell_once("not capturing: cannot wait for CUDA initialisation (%s)" % e)

    _when_torch_imported(on_torch)


def install_from_env():
    """What the agent's sitecustomize calls."""
    if os.environ.get(ENV_SOCKET) or os.environ.get(ENV_SPOOL):
        install()


def install_custom(sampler, snapshotter, backend=None, history=True, **overrides):
    """Starts a capture with a caller's sampler and snapshotter (no torch):
    for tests and for allocators other than PyTorch's. `history=False` says
    the allocator keeps no history: telemetry only, no snapshots."""
    global _installed
    options = _options(**overrides)
    with _lock:
        if _installed is None:
            _installed = Capture(
                options["socket"],
                options["spool_dir"],
                options["threshold"],
                options["interval_s"],
                options["max_dumps_per_hour"],
                sampler,
                snapshotter,
                backend=backend,
                history=history,
            )
        return _installed


def capture_now(reason="capture_now() called"):
    """Dumps a manual snapshot now, on the calling thread. None when not installed."""
    capture = _installed
    if capture is None:
        return None
    return capture.dump("manual", reason)
