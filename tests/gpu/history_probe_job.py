"""Why `context="all"` kills gradient checkpointing, and whether the capture
module's `auto` context stays safe (run through the device tool):

    python3 tests/gpu/history_probe_job.py --out "$OUT"

1. facts: Python, torch, CUDA, the GPU.
2. table: issue 42's reproduction (a dropout inside `torch.utils.checkpoint`,
   backward) under each history context, reentrant and not, each in a fresh
   process: which ones end in "SystemError ... returned NULL without setting
   an exception".
3. probe: `free_stacks_are_safe` in a fresh process, and how long it takes.
4. at CUDA initialisation: the module installed as the agent installs it,
   then the same checkpointed step, with the job's first CUDA use made in
   awkward places (plain, default device cuda, inference mode, no_grad, a
   thread that is not the main one): the step passes, the snapshot says
   which context was recorded, the allocator looks fresh to the job (no
   reserved bytes, no counted allocations, no peak), and the probe's
   entries are not in the trace.

Verdicts go to OUT/history_probe.json and stdout; exit code 1 when one
failed. Needs only torch (the capture module is read from assets/).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CAPTURE = os.path.join(ROOT, "assets", "capture")

# The reproduction, with the context and reentrancy as arguments.
REPRO = r"""
import sys, torch
context, reentrant = sys.argv[1], sys.argv[2] == "1"
if context != "off":
    torch.cuda.memory._record_memory_history(context=context, stacks="python")
lin = torch.nn.Linear(256, 256).cuda()
block = lambda x: torch.nn.functional.dropout(lin(x).relu(), 0.1, training=True)
x = torch.randn(64, 256, device="cuda", requires_grad=True)
try:
    torch.utils.checkpoint.checkpoint(block, x, use_reentrant=reentrant).sum().backward()
    print("ok")
except SystemError as e:
    print("SystemError: %s" % e)
"""

PROBE = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import torch, vramscope_capture as vc
torch.cuda.init()
t = time.perf_counter()
safe, why = vc.free_stacks_are_safe(torch)
first = time.perf_counter() - t
t = time.perf_counter()
vc.free_stacks_are_safe(torch)
again = time.perf_counter() - t
print(json.dumps({"safe": safe, "why": why, "first_s": first, "cached_s": again}))
"""

# The module installed as the agent's sitecustomize installs it; the job's
# first CUDA use is made where argv[2] says.
AT_INIT = r"""
import json, os, sys, threading, time
sys.path.insert(0, sys.argv[1])
where = sys.argv[2]
import vramscope_capture as vc
if where != "uninstalled":
    vc.install(socket=None, spool_dir=sys.argv[3], threshold=0.99, interval_s=60)
import torch
t = time.perf_counter()
if where in ("plain", "uninstalled"):
    torch.cuda.init()
elif where == "default_device":
    torch.set_default_device("cuda")
    torch.zeros(1)
elif where == "inference_mode":
    with torch.inference_mode():
        torch.zeros(1, device="cuda")
elif where == "no_grad":
    with torch.no_grad():
        torch.zeros(1, device="cuda")
elif where == "thread":
    th = threading.Thread(target=lambda: torch.zeros(1, device="cuda"))
    th.start(); th.join()
init_s = time.perf_counter() - t
stats = torch.cuda.memory_stats()
trace = torch.cuda.memory._snapshot()["device_traces"][0]
fresh = {
    "reserved": stats.get("reserved_bytes.all.current", 0) if where == "plain" else None,
    "allocation_count": stats.get("allocation.all.allocated", 0) if where == "plain" else None,
    "reserved_peak": stats.get("reserved_bytes.all.peak", 0) if where == "plain" else None,
    "trace_entries_before_the_job": len(trace) if where == "plain" else None,
}
torch.set_default_device(None)
lin = torch.nn.Linear(256, 256).cuda()
block = lambda x: torch.nn.functional.dropout(lin(x).relu(), 0.1, training=True)
x = torch.randn(64, 256, device="cuda", requires_grad=True)
torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False).sum().backward()
if where == "uninstalled":
    print(json.dumps({"step": "ok", "init_s": init_s}))
    sys.exit(0)
manifest = vc.capture_now("history_probe_job")
with open(os.path.join(sys.argv[3], manifest)) as f:
    data = json.load(f)["file"]
import pickle
with open(os.path.join(sys.argv[3], data), "rb") as f:
    snap = pickle.load(f)
history = snap.get("vramscope_capture", {}).get("history")
frees_with_frames = sum(1 for e in snap["device_traces"][0] if e["action"] == "free_completed" and e.get("frames"))
print(json.dumps({"step": "ok", "init_s": init_s, "fresh": fresh, "history": history,
                  "frees_with_frames": frees_with_frames}))
"""


def run(code, *args, timeout=120):
    started = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code] + [str(a) for a in args], capture_output=True, text=True,
                       timeout=timeout)
    return p, time.monotonic() - started


def last_json(p):
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    out = parser.parse_args().out
    os.makedirs(out, exist_ok=True)
    import torch

    result = {
        "facts": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(0),
        },
        "table": {},
        "checks": {},
    }
    for context in ("off", "all", "alloc", "state"):
        for reentrant in (0, 1):
            p, _ = run(REPRO, context, reentrant)
            result["table"]["%s reentrant=%s" % (context, bool(reentrant))] = (
                p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "exit %d: %s" % (p.returncode, p.stderr[-300:])
            )
    expected_failing = {"all reentrant=False"}
    failing = {k for k, v in result["table"].items() if v.startswith("SystemError")}
    result["checks"]["the issue's table reproduces"] = failing == expected_failing

    p, _ = run(PROBE, CAPTURE)
    probe = last_json(p)
    result["probe"] = probe or {"stderr": p.stderr[-2000:]}
    # Python < 3.13 with this torch: the probe must say unsafe.
    result["checks"]["the probe says unsafe where the table fails"] = bool(probe) and probe["safe"] is (not failing)

    result["at_init"] = {}
    for where in ("uninstalled", "plain", "default_device", "inference_mode", "no_grad", "thread"):
        spool = tempfile.mkdtemp(prefix="probe-spool-")
        try:
            p, wall = run(AT_INIT, CAPTURE, where, spool, timeout=90)
            cell = last_json(p) or {"step": "failed", "exit": p.returncode, "stderr": p.stderr[-1500:]}
            cell["stderr_lines"] = [l for l in p.stderr.splitlines() if "vramscope" in l][:5]
        except subprocess.TimeoutExpired:
            cell = {"step": "timed out (90 s)"}
        result["at_init"][where] = cell
        if where == "uninstalled":
            continue
        ok = cell.get("step") == "ok" and (cell.get("history") or {}).get("context") == ("all" if not failing else "alloc")
        if where == "plain" and ok:
            fresh = cell["fresh"]
            ok = (fresh["reserved"] == 0 and fresh["allocation_count"] == 0 and fresh["reserved_peak"] == 0
                  and fresh["trace_entries_before_the_job"] == 0)
        result["checks"]["first CUDA use: %s" % where] = ok

    with open(os.path.join(out, "history_probe.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))
    sys.exit(0 if all(result["checks"].values()) else 1)


if __name__ == "__main__":
    main()
