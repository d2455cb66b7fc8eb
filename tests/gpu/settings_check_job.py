"""Issue 43, item 3, on a GPU: does `predict --largest --settings` name
sizes that really fit, and is the next size really out?

Records predict_job.py's `attention` family (knob: sequence length) at
128, 256 and 384 on this GPU, runs `vramscope predict --largest
--capacity CAP --settings --json` on the three records, then, for the
defaults and the top `--top` settings of its `by_setting` ranking, a real
capped run (`set_per_process_memory_fraction`, PYTORCH_CUDA_ALLOC_CONF
set) at the predicted largest size and one above it. Each run is a
process of its own; several at a time (each is capped). One JSON object
on stdout and in OUT/settings_check.json.

    python3 tests/gpu/settings_check_job.py --out "$OUT" [--cap-gib 6] [--top 3]

Needs torch with CUDA and the `vramscope` binary on PATH (the wheel).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "predict_job.py")
GiB = 1 << 30


def run(args, env_conf=None):
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if env_conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = env_conf
    return subprocess.run([sys.executable, JOB, "one"] + args, env=env, capture_output=True, text=True, timeout=300)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--cap-gib", type=float, default=6.0)
    p.add_argument("--top", type=int, default=3)
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="settings-check-")
    sizes = (128, 256, 384)
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(lambda s: run(["attention", str(s), "record", os.path.join(work, "attention_%d" % s)]), sizes))
    cap = int(a.cap_gib * GiB)
    files = ["%s=%d" % (os.path.join(work, "attention_%d.pickle" % s), s) for s in sizes]
    predicted = subprocess.run(["vramscope", "predict"] + files + ["--largest", "--capacity", str(cap), "--settings",
                                                                   "--json"], capture_output=True, text=True)
    if predicted.returncode != 0:
        raise SystemExit("vramscope predict failed: %s" % predicted.stderr)
    answer = json.loads(predicted.stdout)
    ranked = answer["by_setting"]
    default = next(r for r in ranked if r.get("baseline"))
    chosen = [default] + [r for r in ranked if not r.get("baseline")][:a.top]
    tasks = []
    for r in chosen:
        n = r["largest_fitting_size"]
        for size in (n, n + 1):
            tasks.append((r["alloc_conf"], size))

    def capped(task):
        conf, size = task
        stem = os.path.join(work, "capped_%s_%d" % ((conf or "default").replace(":", "-").replace(",", "_"), size))
        done = run(["attention", str(size), "capped", stem, "--cap-bytes", str(cap)], env_conf=conf)
        try:
            with open(stem + ".json") as f:
                real = json.load(f)
        except OSError:
            return {"alloc_conf": conf, "size": size, "error": done.stderr[-1500:]}
        return {"alloc_conf": conf, "size": size, "ok": real["ok"], "max_memory_reserved": real["max_memory_reserved"],
                "num_alloc_retries": real["num_alloc_retries"], "capacity": real.get("capacity")}

    with ThreadPoolExecutor(4) as pool:
        runs = list(pool.map(capped, tasks))
    rows = []
    for r in chosen:
        n = r["largest_fitting_size"]
        at = next(x for x in runs if x["alloc_conf"] == r["alloc_conf"] and x["size"] == n)
        above = next(x for x in runs if x["alloc_conf"] == r["alloc_conf"] and x["size"] == n + 1)
        rows.append({"alloc_conf": r["alloc_conf"], "predicted_largest": n,
                     "predicted_reserved_peak_bytes": r.get("reserved_peak_bytes"),
                     "real_at_predicted": at, "real_one_above": above,
                     "exact": at.get("ok") is True and above.get("ok") is False})
    import torch

    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cap_bytes": cap,
              "predicted_largest_default": answer.get("largest_fitting_size"),
              "checked": rows}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "settings_check.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
