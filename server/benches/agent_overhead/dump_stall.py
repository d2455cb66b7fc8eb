"""The dump-stall bench (on a GPU): what a snapshot costs a running job, in
the job's own step times, with and without `vramscope agent`, in one run.

    python3 server/benches/agent_overhead/dump_stall.py --vramscope target/release/vramscope --out DIR

Starts `vramscope serve` on loopback, then runs `stall_job.py`:

1. stall, at 100k and 1M history entries: the job alone; under the agent,
   whose threshold snapshot falls in the steps after the spike; and alone
   with PyTorch's own `_dump_snapshot` called in the spike step (the
   reference). Prints each run's median step, its worst step from the spike
   on, and the difference.
2. steady: the job under the agent with each `--context` (all, alloc,
   state) and no snapshot, against the job alone: the recording's cost per
   step.
3. async: the job under the agent with `backend:cudaMallocAsync`: telemetry
   streams, the source says it has no history, no snapshot is taken, and
   the job's exit code is its own.
4. outside: 1 GiB from `cuMemAlloc` (outside PyTorch's allocator) between
   two captures: the snapshots' `outside_allocator_bytes` grow by it.

Writes DIR/dump_stall.json and prints a table.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
from driver import Server, free_port  # noqa: E402  (the GPU driver's server)

EVENTS = 4000
WARMUP = 10
GIB = 1 << 30


def summary(result):
    steps = result["step_ms"][WARMUP:]
    spike = result["spike"]
    after = result["step_ms"][spike:] if spike >= 0 else steps
    median = statistics.median(steps)
    worst = max(after)
    return {"median_ms": round(median, 2), "worst_ms": round(worst, 1), "worst_minus_median_ms": round(worst - median, 1),
            "steps": len(result["step_ms"]), "torch_dump_s": result.get("torch_dump_s")}


class Bench:
    def __init__(self, args):
        self.args = args
        self.work = os.path.join(tempfile.gettempdir(), "vramscope-stall-%d" % os.getpid())
        os.makedirs(self.work, exist_ok=True)
        self.server = Server(args.vramscope, os.path.join(self.work, "data"), free_port())
        self.results = {}

    def job(self, name, job_args, agent_args=None, env=None):
        out = os.path.join(self.work, name + ".json")
        command = [sys.executable, os.path.join(HERE, "stall_job.py"), "--out", out] + job_args
        if agent_args is not None:
            command = [self.args.vramscope, "agent", "--server", self.server.url, "--job", name, "--interval", "200ms",
                       "--spool-dir", os.path.join(self.work, "spool")] + agent_args + ["--"] + command
        environment = dict(os.environ)
        environment.pop("PYTHONPATH", None)
        environment.update(env or {})
        with open(os.path.join(self.args.out, name + ".log"), "w") as log:
            code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=environment, cwd=ROOT).returncode
        with open(out) as f:
            result = json.load(f)
        result["exit_code"] = code
        return result

    def snapshots(self, job):
        return self.server.snapshots(job)

    def settled_stats(self, snapshot_id):
        for _ in range(240):
            record = self.server.get("/api/v1/snapshots/%s" % snapshot_id)
            if record["status"] != "parsing":
                break
            time.sleep(0.5)
        return self.server.get("/api/v1/snapshots/%s/stats" % snapshot_id)

    def stall(self, entries):
        spike = entries // EVENTS + 10
        steps = spike + 150
        base = ["--steps", str(steps), "--spike", str(spike), "--events", str(EVENTS)]
        rows = {}
        rows["job alone"] = summary(self.job("alone-%d" % entries, base))
        name = "agent-%d" % entries
        result = self.job(name, base, ["--threshold", "0.5", "--max-entries", str(entries)])
        rows["under the agent"] = summary(result)
        snaps = self.snapshots(name)
        triggers = [s["trigger"] for s in snaps]
        entries_seen = None
        if snaps:
            stats = self.settled_stats(snaps[0]["id"])
            entries_seen = stats["devices"][0]["trace_entries"] if stats.get("devices") else None
        rows["under the agent"].update({"snapshots": triggers, "trace_entries": entries_seen,
                                        "exit_code": result["exit_code"]})
        dump = os.path.join(self.work, "torch-%d.pickle" % entries)
        rows["PyTorch's _dump_snapshot in the step"] = summary(
            self.job("torch-%d" % entries, base + ["--torch-dump", dump, "--max-entries", str(entries)]))
        self.results["stall_%d" % entries] = rows

    def steady(self):
        rows = {"job alone": summary(self.job("steady-alone", ["--steps", "150"]))}
        for context in ("all", "alloc", "state"):
            rows["agent --context " + context] = summary(
                self.job("steady-" + context, ["--steps", "150"], ["--context", context, "--threshold", "0.99"]))
        self.results["steady"] = rows

    def cuda_malloc_async(self):
        name = "async"
        result = self.job(name, ["--steps", "120", "--spike", "60"], ["--threshold", "0.5"],
                          env={"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"})
        live = self.server.get("/api/v1/live")
        sources = [s for s in live["sources"] if s["job"] == name]
        samples = 0
        if sources:
            samples = len(self.server.get("/api/v1/live/%s" % sources[0]["source"])["samples"])
        self.results["cudaMallocAsync"] = {
            "exit_code": result["exit_code"], "backend_in_job": result.get("backend"),
            "source": sources[0] if sources else None, "samples": samples,
            "snapshots": [s["trigger"] for s in self.snapshots(name)],
        }

    def outside(self):
        name = "outside"
        result = self.job(name, ["--steps", "20", "--outside", str(GIB)], ["--threshold", "0.99"])
        snaps = self.snapshots(name)
        figures = []
        for s in snaps:
            d = self.settled_stats(s["id"])["devices"][0]
            figures.append({"reserved": d["reserved_bytes"], "process_used": d.get("process_used_bytes"),
                            "outside": d.get("outside_allocator_bytes")})
        growth = None
        if len(figures) == 2 and all(f["outside"] is not None for f in figures):
            growth = figures[1]["outside"] - figures[0]["outside"]
        self.results["outside"] = {"exit_code": result["exit_code"], "snapshots": figures,
                                   "outside_growth_bytes": growth, "allocated_outside_bytes": GIB,
                                   "growth_minus_allocated_mib": None if growth is None else (growth - GIB) / 2**20}

    def run(self):
        for step in self.args.only.split(","):
            started = time.time()
            try:
                {"stall100k": lambda: self.stall(100_000), "stall1m": lambda: self.stall(1_000_000),
                 "steady": self.steady, "async": self.cuda_malloc_async, "outside": self.outside}[step]()
            except Exception as e:
                self.results[step + "_error"] = repr(e)
            self.results.setdefault("seconds", {})[step] = round(time.time() - started, 1)
            with open(os.path.join(self.args.out, "dump_stall.json"), "w") as f:
                json.dump(self.results, f, indent=1)
            print(json.dumps({step: self.results.get(step, self.results.get(step + "_error"))}, indent=1), flush=True)
        self.server.kill()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--vramscope", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", default="stall100k,stall1m,steady,async,outside")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    Bench(args).run()
    print(json.dumps(json.load(open(os.path.join(args.out, "dump_stall.json"))), indent=1))


if __name__ == "__main__":
    main()
