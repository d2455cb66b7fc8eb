"""The GPU runs of the capture agent, in one go (run through the device tool):

    python3 tests/gpu/driver.py --vramscope target/release/vramscope --out "$OUT"

Starts `vramscope serve` on loopback over a fresh data folder, then:

1. oom: `oom_job.py` under the agent (threshold 0.8, fraction 0.02): a
   threshold snapshot first, then an OOM snapshot whose trace ends with `oom`.
2. killed: `threshold_job.py` while the server is killed (SIGKILL) and started
   again on the same port: the threshold snapshot and every sample arrive.
3. ddp: `torchrun --nproc-per-node 2 ddp_leak.py` (gloo, both ranks on
   cuda:0): both ranks stream, labelled; rank 1 crosses the threshold and
   both ranks are captured; `vramscope diff` puts the leaking stack first;
   NVML lists both processes.
4. bench: `server/benches/agent_overhead/run.py`.

Everything the server answered is saved under --out as evidence, with
`summary.json` holding one verdict per check. `--dry` replaces the torch
jobs with `tests/fixtures/fake_job.py`, to test this script without a GPU.
"""

import argparse
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


class Server:
    def __init__(self, vramscope, data_dir, port):
        self.vramscope, self.data_dir, self.port = vramscope, data_dir, port
        self.start()

    def start(self):
        log = open(os.path.join(self.data_dir + ".log"), "a")
        self.proc = subprocess.Popen(
            [self.vramscope, "serve", "--bind", "127.0.0.1:%d" % self.port, "--data-dir", self.data_dir],
            stdout=subprocess.PIPE,
            stderr=log,
            env=dict(os.environ, RUST_LOG="warn"),
        )
        line = self.proc.stdout.readline().decode().strip()
        assert line.startswith("vramscope listening on "), line
        self.url = line[len("vramscope listening on "):]

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=60) as r:
            return json.load(r)

    def download(self, snapshot_id, path):
        with urllib.request.urlopen(self.url + "/api/v1/snapshots/%s/file" % snapshot_id, timeout=120) as r:
            with open(path, "wb") as f:
                f.write(r.read())
        return path

    def snapshots(self, job):
        items = self.get("/api/v1/snapshots?job=%s&limit=500" % job)["items"]
        return list(reversed(items))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Driver:
    def __init__(self, args):
        self.args = args
        self.out = args.out
        self.logs = os.path.join(self.out, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.summary = {"checks": {}, "figures": {}}
        work = args.work or os.path.join(tempfile.gettempdir(), "vramscope-gpu-%d" % os.getpid())
        os.makedirs(work, exist_ok=True)
        self.work = work
        self.server = Server(args.vramscope, os.path.join(work, "data"), free_port())
        self.spool = os.path.join(work, "spool")

    def check(self, name, ok, detail=None):
        self.summary["checks"][name] = {"ok": bool(ok), "detail": detail}
        print("%s %s %s" % ("PASS" if ok else "FAIL", name, "" if detail is None else json.dumps(detail)[:400]), flush=True)

    def save(self, name, value):
        with open(os.path.join(self.out, name), "w") as f:
            json.dump(value, f, indent=1)

    def agent(self, job, agent_args, command, name, background=False, extra_env=None):
        argv = [self.args.vramscope, "agent", "--server", self.server.url, "--job", job, "--interval", "200ms",
                "--spool-dir", self.spool] + agent_args + ["--"] + command
        out = open(os.path.join(self.logs, name + ".out"), "w")
        err = open(os.path.join(self.logs, name + ".err"), "w")
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        env.update(extra_env or {})
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=ROOT)
        if background:
            return proc
        return proc.wait(timeout=300)

    def job(self, script, *args):
        if self.args.dry:
            fake = [sys.executable, os.path.join(ROOT, "tests/fixtures/fake_job.py"),
                    "--snapshot", os.path.join(ROOT, "tests/fixtures/corpus/oom_leak.pickle")]
            return fake + {"oom_job.py": ["--seconds", "3", "--peak", "0.95", "--exit-code", "1"],
                           "threshold_job.py": ["--seconds", "12", "--peak", "0.9"],
                           "ddp_leak.py": ["--ranks", "2", "--leak-rank", "1", "--seconds", "5", "--peak", "0.95"]}[script]
        return [sys.executable, os.path.join(HERE, script)] + list(args)

    # -- 1 ------------------------------------------------------------------
    def oom(self):
        code = self.agent("gpu-oom", ["--threshold", "0.8"], self.job("oom_job.py"), "oom")
        self.check("oom.exit_code_is_the_jobs", code == 1, {"exit_code": code})
        snaps = self.server.snapshots("gpu-oom")
        self.save("oom_snapshots.json", snaps)
        triggers = [s["trigger"] for s in snaps]
        self.check("oom.threshold_then_oom", triggers == ["threshold", "oom"], triggers)
        oom = [s for s in snaps if s["trigger"] == "oom"]
        if oom:
            path = self.server.download(oom[0]["id"], os.path.join(self.work, "oom.pickle"))
            with open(path, "rb") as f:
                snapshot = pickle.load(f)
            traces = [t for t in snapshot.get("device_traces", []) if t]
            last = traces[0][-1] if traces else {}
            detail = {"last_action": last.get("action"), "entries": len(traces[0]) if traces else 0,
                      "size": last.get("size"), "device_free": last.get("device_free")}
            self.check("oom.trace_ends_with_oom", last.get("action") == "oom", detail)
            stats = self.server.get("/api/v1/snapshots/%s/stats" % oom[0]["id"])
            self.save("oom_stats.json", stats)
        live = self.server.get("/api/v1/live")
        self.save("oom_live.json", live)

    # -- 1b -----------------------------------------------------------------
    def threshold(self):
        code = self.agent("gpu-threshold", ["--threshold", "0.8"], self.job("threshold_job.py", "--seconds", "5"),
                          "threshold", extra_env={"VRAMSCOPE_DEBUG": "1", "PYTHONFAULTHANDLER": "1"})
        self.check("threshold.exit_code", code == 0, {"exit_code": code})
        snaps = self.server.snapshots("gpu-threshold")
        self.save("threshold_snapshots.json", snaps)
        self.check("threshold.one_snapshot_despite_staying_above", [s["trigger"] for s in snaps] == ["threshold"],
                   [s["trigger"] for s in snaps])

    # -- 2 ------------------------------------------------------------------
    def killed(self):
        proc = self.agent("gpu-killed", ["--threshold", "0.8", "--drain-timeout", "120s"],
                          self.job("threshold_job.py", "--seconds", "10", "--hold-s", "2"), "killed", background=True,
                          extra_env={"VRAMSCOPE_DEBUG": "1", "PYTHONFAULTHANDLER": "1"})
        time.sleep(2.0)
        self.server.kill()
        down_at = time.time()
        time.sleep(8.5)
        self.server.start()
        up_at = time.time()
        code = proc.wait(timeout=300)
        self.check("killed.exit_code", code == 0, {"exit_code": code})
        snaps = self.server.snapshots("gpu-killed")
        self.save("killed_snapshots.json", snaps)
        self.check("killed.threshold_snapshot_arrived", [s["trigger"] for s in snaps] == ["threshold"],
                   [(s["trigger"], s["uploaded_at_ms"]) for s in snaps])
        sources = [s for s in self.server.get("/api/v1/live")["sources"] if s["job"] == "gpu-killed"]
        if sources:
            samples = self.server.get("/api/v1/live/%s" % sources[0]["source"])["samples"]
            self.save("killed_samples.json", samples)
            times = [s["t_ms"] for s in samples]
            gaps = [b - a for a, b in zip(times, times[1:]) if b - a > 1000]
            during = [t for t in times if down_at * 1000 < t < up_at * 1000]
            self.check("killed.no_telemetry_lost", not gaps and len(during) > 20,
                       {"samples": len(times), "during_outage": len(during), "gaps_over_1s": gaps})
        leftover = [n for n in os.listdir(self.spool) if os.path.isfile(os.path.join(self.spool, n))]
        self.check("killed.spool_empty", not leftover, leftover)

    # -- 3 ------------------------------------------------------------------
    def ddp(self):
        if self.args.dry:
            command = self.job("ddp_leak.py")
        else:
            command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                       os.path.join(HERE, "ddp_leak.py")]
        proc = self.agent("gpu-ddp", ["--threshold", "0.8"], command, "ddp", background=True)
        views = []
        while proc.poll() is None:
            time.sleep(1.0)
            try:
                views.append({"t": time.time(), "live": self.server.get("/api/v1/live")})
            except OSError as e:
                views.append({"t": time.time(), "error": str(e)})
        code = proc.returncode
        self.save("ddp_live_during_run.json", views)
        self.check("ddp.exit_code", code == 0, {"exit_code": code})
        streaming = []
        for view in views:
            srcs = [s for s in view.get("live", {}).get("sources", []) if s["job"] == "gpu-ddp" and s["connected"]]
            streaming.append(sorted(s["rank"] for s in srcs if s["rank"] is not None))
        self.check("ddp.both_ranks_streamed_live_labelled", [0, 1] in streaming,
                   {"connected_ranks_per_poll": streaming[-10:]})
        pids = set()
        for view in views:
            for host in view.get("live", {}).get("hosts", []):
                for device in host["devices"]:
                    for p in device["processes"]:
                        pids.add((device["index"], p["pid"], p["used"]))
        by_pid = {}
        for device, pid, used in pids:
            by_pid[pid] = max(by_pid.get(pid) or 0, used or 0)
        self.check("ddp.nvml_lists_both_processes", len(by_pid) >= 2 or self.args.dry,
                   {"nvml_pid_max_used": by_pid})
        sources = [s for s in self.server.get("/api/v1/live")["sources"] if s["job"] == "gpu-ddp"]
        nvml_figures = {}
        for s in sources:
            samples = self.server.get("/api/v1/live/%s" % s["source"])["samples"]
            last = samples[-1] if samples else {}
            nvml_figures[s["source"]] = {"samples": len(samples), "pid": s["pid"],
                                         "last_reserved": last.get("reserved"),
                                         "last_nvml_process_used": last.get("nvml_process_used"),
                                         "last_nvml_used": last.get("nvml_used")}
        self.summary["figures"]["ddp_sources"] = nvml_figures
        snaps = self.server.snapshots("gpu-ddp")
        self.save("ddp_snapshots.json", snaps)
        seen = sorted((s["rank"], s["trigger"], "peer-capture" in s["tags"]) for s in snaps)
        self.check("ddp.threshold_captures_both_ranks", seen == [(0, "threshold", True), (1, "threshold", False)],
                   seen)
        by_rank = {s["rank"]: s for s in snaps}
        if 0 in by_rank and 1 in by_rank:
            a = self.server.download(by_rank[0]["id"], os.path.join(self.work, "rank0.pickle"))
            b = self.server.download(by_rank[1]["id"], os.path.join(self.work, "rank1.pickle"))
            text = subprocess.run([self.args.vramscope, "diff", a, b, "--top", "5"], capture_output=True, text=True)
            with open(os.path.join(self.out, "ddp_diff.txt"), "w") as f:
                f.write(text.stdout + text.stderr)
            result = subprocess.run([self.args.vramscope, "diff", a, b, "--json", "--top", "5"],
                                    capture_output=True, text=True)
            diff = json.loads(result.stdout)
            self.save("ddp_diff.json", diff)
            top = diff["devices"][0]["stacks"][0] if diff["devices"] and diff["devices"][0]["stacks"] else {}
            names = [fr.get("name") for fr in top.get("frames", [])]
            want = "keep_activations" if not self.args.dry else None
            self.check("ddp.diff_puts_the_leaking_stack_first", want is None or want in names,
                       {"top_stack_frames": names[:6]})

    # -- 4 ------------------------------------------------------------------
    def bench(self):
        if self.args.dry:
            return
        out = os.path.join(self.out, "bench")
        result = subprocess.run([sys.executable, os.path.join(ROOT, "server/benches/agent_overhead/run.py"),
                                 "--vramscope", self.args.vramscope, "--server", self.server.url, "--out", out,
                                 "--rounds", str(self.args.rounds)], capture_output=True, text=True, timeout=420)
        with open(os.path.join(self.out, "bench.txt"), "w") as f:
            f.write(result.stdout + result.stderr)
        print(result.stdout, flush=True)
        with open(os.path.join(out, "summary.json")) as f:
            self.summary["figures"]["overhead"] = json.load(f)

    def run(self, scenarios):
        for name in scenarios:
            started = time.time()
            try:
                getattr(self, name)()
            except Exception:
                self.check(name + ".ran", False, traceback.format_exc()[-1500:])
            self.summary["figures"]["%s_seconds" % name] = round(time.time() - started, 1)
            self.save("summary.json", self.summary)
        self.server.kill()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--vramscope", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--work")
    parser.add_argument("--dry", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("scenarios", nargs="*", default=["oom", "threshold", "killed", "ddp", "bench"])
    args = parser.parse_args()
    args.vramscope = os.path.abspath(args.vramscope)
    driver = Driver(args)
    driver.run(args.scenarios)
    failed = [k for k, v in driver.summary["checks"].items() if not v["ok"]]
    print("checks: %d passed, %d failed %s" % (len(driver.summary["checks"]) - len(failed), len(failed), failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
