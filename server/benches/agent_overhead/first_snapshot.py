"""What the FIRST `torch.cuda.memory._snapshot()` of a process pays for, and
whether a warm-up takes it off the critical moment (on a GPU).

Each case runs in a fresh subprocess, so its first call is really the
process's first. A case records the allocator history with the options it
names (`_record_memory_history`, keyword arguments feature-detected), runs a
small workload (`torch.empty` on cuda, most freed) and times the first and
second `_snapshot()`, then a direct `torch._C._cuda_memorySnapshot` call.
Some cases also:

* profile the first call with cProfile and watch it from a sampler process
  (children such as addr2line, files opened, resident memory, the main
  thread's CPU time and system calls), since the call holds the GIL;
* warm up first (a `_snapshot()` before recording, with a tiny recording,
  or with a tiny recording that is then replaced), to see whether the cost
  is paid once per process;
* warm up in a background thread while the main thread allocates in a loop,
  to see whether the main thread stalls (GIL or allocator lock);
* set `TORCH_SYMBOLIZE_MODE` / `TORCH_DISABLE_ADDR2LINE`.

The parent also greps torch's shared libraries for symbolization knobs.

    python3 server/benches/agent_overhead/first_snapshot.py --out DIR

Prints a table and writes DIR/first_snapshot.json (rewritten after each case).
"""

import argparse
import glob
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.abspath(__file__)
K = 1000
SMALL, LARGE = (1000, 450), (100000, 40000)  # (max_entries, alloc pairs)


def case(name, enabled="all", context="all", stacks="all", size=LARGE, env=None, warm="none",
         profile=False, sampler=False, bg=False, record=True):
    return {"name": name, "enabled": enabled, "context": context, "stacks": stacks,
            "max_entries": size[0], "pairs": size[1], "env": env or {}, "warm": warm,
            "profile": profile, "sampler": sampler, "bg": bg, "record": record}


# Bytecode written to and read from a cache of our own, as in an ordinary install.
PYC = {"PYTHONPYCACHEPREFIX": os.path.join(tempfile.gettempdir(), "first_snapshot_pyc"), "PYTHONDONTWRITEBYTECODE": None}

# Most important first: the parent skips what its time budget leaves no room for.
CASES = [
    case("py-100k", stacks="python", profile=True, sampler=True),
    case("all-100k", profile=True, sampler=True),
    case("py-1k", stacks="python", size=SMALL),
    case("all-1k", size=SMALL),
    case("no-recording", record=False, size=SMALL),
    case("py-100k-warm-before-record", stacks="python", warm="before_record"),
    case("py-100k-warm-tiny", stacks="python", warm="tiny"),
    case("py-100k-warm-tiny-rerecord", stacks="python", warm="tiny_rerecord"),
    case("py-100k-bg-warm", stacks="python", bg=True),
    case("ctx-None-100k", context=None, stacks="python"),
    case("ctx-state-100k", context="state", stacks="python"),
    case("ctx-alloc-100k", context="alloc", stacks="python"),
    case("enabled-state", enabled="state", context="state", stacks="python"),
    case("all-1k-sym-addr2line", size=SMALL, env={"TORCH_SYMBOLIZE_MODE": "addr2line"}, sampler=True),
    case("all-1k-sym-dladdr", size=SMALL, env={"TORCH_SYMBOLIZE_MODE": "dladdr"}),
    case("all-1k-sym-fast", size=SMALL, env={"TORCH_SYMBOLIZE_MODE": "fast"}, sampler=True),
    case("all-1k-disable-addr2line", size=SMALL, env={"TORCH_DISABLE_ADDR2LINE": "1"}),
    case("py-1k-sym-dladdr", stacks="python", size=SMALL, env={"TORCH_SYMBOLIZE_MODE": "dladdr"}),
    case("all-100k-warm-tiny", warm="tiny"),
    case("all-100k-bg-warm", bg=True),
    # The first call's Python-frame symbolizer does `hasattr(torch, "_inductor")`
    # (torch/csrc/profiler/python/combined_traceback.cpp), which imports torch._inductor.
    case("py-1k-import-inductor", stacks="python", size=SMALL, warm="import_inductor"),
    case("py-1k-placeholder", stacks="python", size=SMALL, warm="placeholder"),
    case("all-1k-placeholder", size=SMALL, warm="placeholder"),
    case("py-1k-pyc-fill", stacks="python", size=SMALL, env=PYC),
    case("py-1k-pyc-warm", stacks="python", size=SMALL, env=PYC),
]

# ---------------------------------------------------------------- sampler
# A separate process: the first call holds the GIL, so a thread could not look.
SAMPLER = r"""
import json, os, sys, time
pid, out, stop = sys.argv[1], sys.argv[2], sys.argv[3]
def read(p):
    try:
        with open(p) as f: return f.read()
    except OSError: return None
def cpu(tid):
    s = read("/proc/%s/task/%s/stat" % (pid, tid))
    if not s: return None
    f = s[s.rfind(")") + 2:].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
def children():
    kids = set()
    for t in os.listdir("/proc/%s/task" % pid):
        c = read("/proc/%s/task/%s/children" % (pid, t))
        if c: kids.update(c.split())
    kids.discard(str(os.getpid()))
    return kids
def mapped():
    return {l.split(None, 5)[5].strip() for l in (read("/proc/%s/maps" % pid) or "").splitlines()
            if len(l.split(None, 5)) == 6}
own = (read("/proc/%s/cmdline" % pid) or "").replace("\0", " ")[:300]
cpu0 = {t: cpu(t) for t in os.listdir("/proc/%s/task" % pid)}
maps0, maps_new = mapped(), set()
seen_kids, files, syscalls, rss_max, samples = {}, set(), {}, 0, 0
open(stop + ".ready", "w").close()
t0 = time.time()
while not os.path.exists(stop) and time.time() - t0 < 120:
    samples += 1
    try:
        for k in children():
            line = (read("/proc/%s/cmdline" % k) or "").replace("\0", " ")[:300]
            if line and (line != own or k not in seen_kids):
                seen_kids[k] = "(forked, not yet exec'd)" if line == own else line
    except OSError: pass
    try:
        for fd in os.listdir("/proc/%s/fd" % pid):
            try: files.add(os.readlink("/proc/%s/fd/%s" % (pid, fd)))
            except OSError: pass
    except OSError: pass
    st = read("/proc/%s/status" % pid) or ""
    for line in st.splitlines():
        if line.startswith("VmRSS:"): rss_max = max(rss_max, int(line.split()[1]))
    if samples % 5 == 1:
        maps_new |= mapped() - maps0
    sc = (read("/proc/%s/syscall" % pid) or "?").split()
    key = sc[0] if sc else "?"
    syscalls[key] = syscalls.get(key, 0) + 1
    time.sleep(0.01)
cpu1 = {t: cpu(t) for t in os.listdir("/proc/%s/task" % pid)}
threads = {}
for t, c in cpu1.items():
    if c is None: continue
    comm = (read("/proc/%s/task/%s/comm" % (pid, t)) or "?").strip()
    d = c - (cpu0.get(t) or 0.0)
    if d > 0.02: threads["%s(%s)" % (comm, t)] = round(d, 3)
json.dump({"samples": samples, "children": seen_kids, "new_mappings": sorted(maps_new)[:40], "rss_max_mib": rss_max // 1024,
           "files": sorted(f for f in files if f.startswith("/") and not f.startswith("/dev")),
           "main_syscall_histogram": syscalls, "thread_cpu_s": threads}, open(out, "w"))
"""


class Sampler:
    def __init__(self, tmp):
        self.out, self.stop = os.path.join(tmp, "sampler.json"), os.path.join(tmp, "sampler.stop")
        self.proc = subprocess.Popen([sys.executable, "-c", SAMPLER, str(os.getpid()), self.out, self.stop])
        deadline = time.time() + 10
        while not os.path.exists(self.stop + ".ready") and time.time() < deadline:
            time.sleep(0.01)

    def finish(self):
        open(self.stop, "w").close()
        self.proc.wait(timeout=30)
        with open(self.out) as f:
            return json.load(f)


# ---------------------------------------------------------------- child
def record(torch, spec, **extra):
    import inspect
    fn = torch.cuda.memory._record_memory_history
    params = inspect.signature(fn).parameters
    kwargs = {k: v for k, v in (("context", spec["context"]), ("stacks", spec["stacks"]),
                                ("max_entries", spec["max_entries"])) if k in params}
    kwargs.update({k: v for k, v in extra.items() if k in params})
    spec["signature"] = str(inspect.signature(fn))
    fn(spec["enabled"], **kwargs)
    return kwargs


def alloc(torch, size):
    return torch.empty(size, dtype=torch.uint8, device="cuda")


def layer3(torch, size):
    return alloc(torch, size)


def layer2(torch, size):
    return layer3(torch, size)


def workload(torch, pairs):
    """`pairs` allocations of varied sizes through a few Python frames; all but
    the last 64 freed."""
    live = []
    for i in range(pairs):
        live.append(layer2(torch, 512 << (i % 14)))
        if len(live) > 64:
            del live[(i * 7919) % len(live)]
    torch.cuda.synchronize()
    return live


def snapshot_without_inductor_import(torch):
    """The capture module's own `_snapshot()` wrapper (the placeholder at
    `torch._inductor`), so this bench measures the code the agent runs."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    sys.path.insert(0, os.path.join(root, "assets", "capture"))
    from vramscope_capture import _snapshot_without_inductor_import

    return _snapshot_without_inductor_import(torch)


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def trace_stats(snap):
    traces = snap.get("device_traces", []) if isinstance(snap, dict) else []
    entries = sum(len(t) for t in traces)
    sample = [e for t in traces for e in t[:2000]]
    frames = [f for e in sample for f in (e.get("frames") or [])]
    cpp = [f for f in frames if not str(f.get("filename", "")).endswith(".py")]
    return {"entries": entries, "segments": len(snap.get("segments", [])) if isinstance(snap, dict) else None,
            "frames_per_entry": round(len(frames) / len(sample), 1) if sample else 0,
            "cpp_frames_per_entry": round(len(cpp) / len(sample), 1) if sample else 0}


def bg_warm(torch, result):
    """Main thread: torch.empty+del loop, synchronised every 50 iterations;
    a background thread takes the warm-up `_snapshot()` meanwhile."""
    box = {}

    def warm():
        box["start"] = time.perf_counter()
        try:
            torch.cuda.memory._snapshot()
        finally:
            box["end"] = time.perf_counter()

    stamps, thread, i = [], None, 0
    begin = time.perf_counter()
    while True:
        x = torch.empty(4096, dtype=torch.uint8, device="cuda")
        del x
        if i % 50 == 0:
            torch.cuda.synchronize()
        i += 1
        now = time.perf_counter()
        stamps.append(now)
        if thread is None and now - begin > 1.0:
            thread = threading.Thread(target=warm, daemon=True)
            thread.start()
        if thread is not None and not thread.is_alive() and now - box.get("end", now) > 0.5:
            break
        if now - begin > 40:
            break
    thread.join()
    gaps = [(b - a, b) for a, b in zip(stamps, stamps[1:])]
    before = [g for g, t in gaps if t < box["start"]]
    during = [g for g, t in gaps if box["start"] <= t <= box["end"] + 0.01]
    result["bg"] = {
        "warm_s": box["end"] - box["start"],
        "main_median_us": statistics.median(before) * 1e6,
        "main_max_before_ms": max(before) * 1e3,
        "main_max_during_ms": max(during) * 1e3 if during else None,
        "main_iters_during": len(during),
        "main_stalled_s_during": sum(g for g in during if g > 0.005),
    }


def child(spec, out):
    result = {"spec": spec}
    t0 = time.perf_counter()
    import torch
    result["import_s"] = time.perf_counter() - t0
    torch.cuda.init()
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    result["torch"] = torch.__version__
    tdir = os.path.dirname(torch.__file__)
    result["bytecode"] = {"dont_write_bytecode": sys.flags.dont_write_bytecode,
                          "pycache_prefix": sys.pycache_prefix,
                          "torch_dir_writable": os.access(tdir, os.W_OK),
                          "inductor_pycache_exists": os.path.isdir(os.path.join(tdir, "_inductor", "__pycache__"))}
    tmp = tempfile.mkdtemp()
    try:
        if spec["warm"] == "import_inductor":
            t0 = time.perf_counter()
            import torch._inductor  # noqa: F401  what the first call would import
            result["warm_s"] = time.perf_counter() - t0
        snap_fn = torch.cuda.memory._snapshot
        if spec["warm"] == "placeholder":
            snap_fn = lambda: snapshot_without_inductor_import(torch)  # noqa: E731
        if spec["warm"] == "before_record":
            result["warm_s"], _ = timed(torch.cuda.memory._snapshot)
        if spec["record"]:
            if spec["warm"] in ("tiny", "tiny_rerecord"):
                record(torch, spec)
                keep = workload(torch, 20)
                result["warm_s"], snap = timed(torch.cuda.memory._snapshot)
                result["warm_stats"] = trace_stats(snap)
                del snap, keep
                if spec["warm"] == "tiny_rerecord":
                    torch.cuda.memory._record_memory_history(None)
            try:
                result["record_kwargs"] = record(torch, spec, clear_history=spec["warm"] != "tiny")
            except Exception as e:  # an option this torch refuses
                result["rejected"] = "%s: %s" % (type(e).__name__, e)
                return result
        if spec["bg"]:
            workload(torch, 20)
            bg_warm(torch, result)
        t0 = time.perf_counter()
        live = workload(torch, spec["pairs"])
        result["workload_s"] = time.perf_counter() - t0
        sampler = Sampler(tmp) if spec["sampler"] else None
        modules_before = set(sys.modules)
        if spec["profile"]:
            import cProfile
            import io
            import pstats
            prof = cProfile.Profile()
            prof.enable()
            result["first_s"], snap = timed(snap_fn)
            prof.disable()
            text = io.StringIO()
            pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(8)
            result["profile"] = [l for l in text.getvalue().splitlines() if l.strip()][-9:]
        else:
            result["first_s"], snap = timed(snap_fn)
        new = sorted(set(sys.modules) - modules_before)
        result["new_modules"] = {"count": len(new), "first": new[:5],
                                 "top_level": sorted({m.split(".")[0] for m in new}),
                                 "torch_inductor": "torch._inductor" in new}
        if sampler:
            result["sampler"] = sampler.finish()
        result["stats"] = trace_stats(snap)
        del snap
        result["second_s"], snap = timed(snap_fn)
        del snap
        try:
            result["direct_c_s"], snap = timed(lambda: torch._C._cuda_memorySnapshot(None))
        except TypeError:
            result["direct_c_s"], snap = timed(torch._C._cuda_memorySnapshot)
        del snap, live
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


# ---------------------------------------------------------------- parent
def knobs():
    """Symbolization knobs in torch's libraries, found by their strings."""
    spec = importlib.util.find_spec("torch")
    lib = os.path.join(os.path.dirname(spec.origin), "lib")
    found = {"addr2line_binary": shutil.which("addr2line"), "strings": {}}
    needles = [b"SYMBOLIZE", b"ADDR2LINE", b"addr2line", b"SHOW_CPP_STACKTRACES"]
    for path in sorted(glob.glob(os.path.join(lib, "libtorch*.so")) + glob.glob(os.path.join(lib, "libc10*.so"))):
        with open(path, "rb") as f:
            data = f.read()
        hits = set()
        for needle in needles:
            at = data.find(needle)
            while at >= 0 and len(hits) < 40:
                lo, hi = at, at + len(needle)
                while lo > 0 and 32 <= data[lo - 1] < 127 and at - lo < 120:
                    lo -= 1
                while hi < len(data) and 32 <= data[hi] < 127 and hi - at < 160:
                    hi += 1
                hits.add(data[lo:hi].decode("ascii", "replace"))
                at = data.find(needle, hi)
        if hits:
            found["strings"][os.path.basename(path)] = sorted(hits)
        del data
    return found


def fmt(value, scale=1.0, digits=3):
    return "-" if value is None else ("%.*f" % (digits, value * scale))


def table(results):
    lines = ["%-30s %8s %8s %8s %8s %8s %7s %6s" % (
        "case", "first_s", "second_s", "direct_s", "warm_s", "entries", "fr/ent", "c++/e")]
    for r in results:
        if "first_s" not in r:
            lines.append("%-30s %s" % (r["spec"]["name"], r.get("rejected") or r.get("error", "?")[-90:]))
            continue
        st = r.get("stats", {})
        lines.append("%-30s %8s %8s %8s %8s %8s %7s %6s" % (
            r["spec"]["name"], fmt(r["first_s"]), fmt(r["second_s"]), fmt(r.get("direct_c_s")),
            fmt(r.get("warm_s")), st.get("entries"), st.get("frames_per_entry"), st.get("cpp_frames_per_entry")))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", help="folder for first_snapshot.json")
    parser.add_argument("--budget-s", type=float, default=300, help="skip cases started after this")
    parser.add_argument("--only", help="comma-separated case names")
    parser.add_argument("--no-knobs", action="store_true", help="skip the library string scan")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--case-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        spec = json.loads(args.case)
        with open(args.case_out, "w") as f:
            json.dump(child(spec, args.case_out), f)
        return
    if not args.out:
        parser.error("--out is required")
    os.makedirs(args.out, exist_ok=True)
    report = {"knobs": None, "cases": []}
    path = os.path.join(args.out, "first_snapshot.json")

    def save():
        with open(path, "w") as f:
            json.dump(report, f, indent=1)

    start = time.time()
    by_name = {c["name"]: c for c in CASES}
    cases = [by_name[n] for n in args.only.split(",")] if args.only else CASES
    for spec in cases:
        if time.time() - start > args.budget_s:
            report["cases"].append({"spec": spec, "error": "skipped: time budget"})
            continue
        env = dict(os.environ)
        for key, value in spec["env"].items():  # None: unset
            env.pop(key, None) if value is None else env.__setitem__(key, value)
        case_out = os.path.join(tempfile.gettempdir(), "first_snapshot_case.json")
        if os.path.exists(case_out):
            os.remove(case_out)
        t0 = time.time()
        try:
            proc = subprocess.run([sys.executable, HERE, "--case", json.dumps(spec), "--case-out", case_out],
                                  env=env, capture_output=True, text=True, timeout=90)
            if proc.returncode == 0:
                with open(case_out) as f:
                    r = json.load(f)
            else:
                r = {"spec": spec, "error": "rc %d: %s" % (proc.returncode, proc.stderr.strip()[-600:])}
        except subprocess.TimeoutExpired:
            r = {"spec": spec, "error": "timed out (90 s)"}
        r["wall_s"] = time.time() - t0
        report["cases"].append(r)
        print("[%5.1fs] %s: first %s s, second %s s%s" % (
            time.time() - start, spec["name"], fmt(r.get("first_s")), fmt(r.get("second_s")),
            "" if "first_s" in r else " (%s)" % (r.get("rejected") or r.get("error", ""))[-200:]), flush=True)
        save()
    report["knobs"] = None if args.no_knobs else knobs()
    save()

    print("\n" + table(report["cases"]))
    for r in report["cases"]:
        if "bg" in r:
            b = r["bg"]
            print("\n%s: background warm-up %.2f s; main thread median %.1f us/iter, max before %.1f ms, "
                  "max during %s ms, %d iterations during, %.2f s stalled (gaps > 5 ms)" % (
                      r["spec"]["name"], b["warm_s"], b["main_median_us"], b["main_max_before_ms"],
                      fmt(b["main_max_during_ms"], 1, 1), b["main_iters_during"], b["main_stalled_s_during"]))
    for r in report["cases"]:
        if "profile" in r:
            print("\ncProfile of the first call, %s:\n  " % r["spec"]["name"] + "\n  ".join(r["profile"]))
        if "sampler" in r:
            s = dict(r["sampler"])
            s["files"] = [f for f in s["files"] if not f.endswith((".py", ".pyc"))][:20]
            print("\nsampler during the first call, %s:\n  %s" % (r["spec"]["name"], json.dumps(s)))
    for r in report["cases"]:
        if "new_modules" in r:
            print("%s: %s" % (r["spec"]["name"], json.dumps({"new_modules": r["new_modules"], "bytecode": r["bytecode"]})))
    print("\nknobs: " + json.dumps(report["knobs"], indent=1))
    print("\nwrote " + path)


if __name__ == "__main__":
    main()
