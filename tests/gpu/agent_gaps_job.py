"""The capture agent's three gaps of issue 27, on a real GPU (run through the
device tool; this machine has none):

    python3 tests/gpu/agent_gaps_job.py --vramscope target/release/vramscope --out "$OUT"

Starts `vramscope serve` on loopback over a fresh data folder, then runs this
file's own jobs under `vramscope agent` (each a process of its own):

a. spike: under a 0.02 memory fraction, reserved memory goes from 0 to 97 %
   of the cap and back (freed, `empty_cache()`) within 0.3 s, far inside one
   `--interval` (5 s); the job then idles 8 s. The sample after the spike
   sees `reserved_bytes.all.peak` move: one threshold snapshot.
b. quick: a job that allocates 64 MiB and ends after 0.5 s, with a 30 s
   interval (no periodic sample ever runs): its last sample at exit still
   registers its live source.
c. fraction: a job under `set_per_process_memory_fraction(0.02)` takes a
   manual snapshot; its `vramscope_capture` records `memory_fraction` 0.02
   and `capacity_bytes` (0.02 x total memory), and `vramscope simulate` and
   `vramscope tune` of it, without --capacity, replay under that cap
   (`capacity_source: recorded`).

Prints one line per check (PASS/FAIL name detail) and, last, one JSON
summary; everything the server answered is saved under --out.
"""

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

FRACTION = 0.02


# -- the jobs (run under the agent) -------------------------------------------


def job(kind):
    import torch

    torch.cuda.set_per_process_memory_fraction(FRACTION, 0)
    total = torch.cuda.get_device_properties(0).total_memory
    cap = int(total * FRACTION)
    if kind == "spike":
        torch.empty(1, device="cuda")  # CUDA starts: so does the capture
        time.sleep(0.5)
        chunk = 32 << 20
        kept = [torch.empty(chunk, dtype=torch.uint8, device="cuda") for _ in range(int(cap * 0.97) // chunk)]
        torch.cuda.synchronize()
        print("spike reserved %d of %d" % (torch.cuda.memory_reserved(), cap), flush=True)
        kept.clear()
        torch.cuda.empty_cache()
        time.sleep(8.0)
    elif kind == "quick":
        x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        time.sleep(0.5)
        del x
    elif kind == "fraction":
        x = torch.empty(cap // 2, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        import vramscope_capture

        print("getter %s" % hasattr(torch.cuda, "get_per_process_memory_fraction"), flush=True)
        print("manifest %s" % vramscope_capture.capture_now("agent_gaps_job fraction"), flush=True)
        del x
    return 0


# -- the driver -----------------------------------------------------------------


class Run:
    def __init__(self, args):
        from driver import Server, free_port

        self.args = args
        os.makedirs(args.out, exist_ok=True)
        self.work = tempfile.mkdtemp(prefix="vramscope-agent-gaps-")
        self.server = Server(args.vramscope, os.path.join(self.work, "data"), free_port())
        self.summary = {"checks": {}}

    def check(self, name, ok, detail=None):
        self.summary["checks"][name] = {"ok": bool(ok), "detail": detail}
        print("%s %s %s" % ("PASS" if ok else "FAIL", name, "" if detail is None else json.dumps(detail)[:400]), flush=True)

    def save(self, name, value):
        with open(os.path.join(self.args.out, name), "w") as f:
            json.dump(value, f, indent=1)

    def agent(self, name, interval, kind):
        argv = [self.args.vramscope, "agent", "--server", self.server.url, "--job", name, "--interval", interval,
                "--threshold", "0.9", "--spool-dir", os.path.join(self.work, "spool-" + name), "--",
                sys.executable, os.path.abspath(__file__), "--job", kind]
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        with open(os.path.join(self.args.out, name + ".log"), "w") as log:
            return subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=300).returncode

    def sources(self, job_name):
        return [s for s in self.server.get("/api/v1/live")["sources"] if s.get("job") == job_name]

    def spike(self):
        code = self.agent("gaps-spike", "5s", "spike")
        snaps = self.server.snapshots("gaps-spike")
        self.save("spike_snapshots.json", snaps)
        triggers = [s["trigger"] for s in snaps]
        self.check("a.spike_between_samples_takes_one_threshold_snapshot", code == 0 and triggers == ["threshold"],
                   {"exit_code": code, "triggers": triggers})

    def quick(self):
        code = self.agent("gaps-quick", "30s", "quick")
        sources = self.sources("gaps-quick")
        samples = self.server.get("/api/v1/live/%s" % sources[0]["source"])["samples"] if sources else []
        self.save("quick_sources.json", sources)
        self.check("b.job_shorter_than_one_interval_registers_its_source", code == 0 and len(sources) == 1 and samples,
                   {"exit_code": code, "sources": len(sources), "samples": len(samples)})

    def fraction(self):
        code = self.agent("gaps-fraction", "1s", "fraction")
        snaps = self.server.snapshots("gaps-fraction")
        self.save("fraction_snapshots.json", snaps)
        if not snaps:
            self.check("c.fraction_recorded", False, {"exit_code": code, "snapshots": 0})
            return
        path = self.server.download(snaps[0]["id"], os.path.join(self.args.out, "fraction.pickle"))
        with open(path, "rb") as f:
            capture = pickle.load(f).get("vramscope_capture") or {}
        device = (capture.get("devices") or [{}])[0]
        total = device.get("cuda_total_bytes") or 0
        want = int(total * FRACTION)
        self.check("c.fraction_and_cap_recorded",
                   abs((device.get("memory_fraction") or 0) - FRACTION) < 1e-9 and device.get("capacity_bytes") == want,
                   {"memory_fraction": device.get("memory_fraction"), "capacity_bytes": device.get("capacity_bytes"),
                    "want": want})
        for command in ("simulate", "tune"):
            out = subprocess.run([self.args.vramscope, command, "--json", path], capture_output=True, text=True)
            answer = json.loads(out.stdout) if out.returncode == 0 else {"stderr": out.stderr[-300:]}
            self.save("fraction_%s.json" % command, answer)
            self.check("c.%s_replays_under_the_recorded_cap" % command,
                       answer.get("capacity_source") == "recorded" and answer.get("capacity_bytes") == want,
                       {"capacity_source": answer.get("capacity_source"), "capacity_bytes": answer.get("capacity_bytes")})

    def all(self):
        for step in (self.spike, self.quick, self.fraction):
            try:
                step()
            except Exception as e:
                self.check(step.__name__ + ".ran", False, repr(e))
        self.summary["passed"] = sum(c["ok"] for c in self.summary["checks"].values())
        self.summary["total"] = len(self.summary["checks"])
        self.save("agent_gaps_summary.json", self.summary)
        self.server.kill()
        print(json.dumps(self.summary), flush=True)
        return 0 if self.summary["passed"] == self.summary["total"] else 1


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", choices=["spike", "quick", "fraction"])
    parser.add_argument("--vramscope", default=os.path.join(ROOT, "target/release/vramscope"))
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "vramscope-agent-gaps-out"))
    args = parser.parse_args()
    if args.job:
        return job(args.job)
    return Run(args).all()


if __name__ == "__main__":
    sys.exit(main())
