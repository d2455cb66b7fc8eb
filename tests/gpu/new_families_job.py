"""Issue 43, item 6, on a GPU: `predict`'s truth for two more families,
`lstm` (cuDNN) and `kvcache` (inference from a static KV cache), from
predict_job.py's runs:

1. records at the family's three sizes (in parallel, each a process);
2. real runs at 4x and 8x the largest record (one at a time);
3. `vramscope predict --largest --capacity CAP --json` on the records, then
   real capped runs at the predicted largest size and one above it.

Files land in OUT/FAMILY/ as predict_job.py writes them (records'
.pickle/.stats.json, runs' .json), with OUT/new_families.json summing up.

    python3 tests/gpu/new_families_job.py --out "$OUT/pj" [--cap-gib 2]
    python3 tests/gpu/predict_job.py assemble OUT/pj --fixtures tests/fixtures/predict   # here, afterwards

Needs torch with CUDA and the `vramscope` binary on PATH (the wheel).
"""

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "predict_job.py")
sys.path.insert(0, HERE)
from predict_job import FAMILIES, REAL_MULTIPLES  # noqa: E402

GiB = 1 << 30


def one(family, size, mode, stem, cap=None):
    command = [sys.executable, JOB, "one", family, str(size), mode, stem]
    if cap:
        command += ["--cap-bytes", str(cap)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=400)
    path = stem + (".stats.json" if mode == "record" else ".json")
    if not os.path.exists(path):
        return {"family": family, "size": size, "mode": mode, "error": done.stderr[-1500:]}
    with open(path) as f:
        out = json.load(f)
    return {k: out.get(k) for k in ("family", "size", "mode", "ok", "max_memory_reserved", "max_memory_allocated",
                                    "num_alloc_retries", "capacity")}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--families", default="lstm,kvcache")
    p.add_argument("--cap-gib", type=float, default=2.0)
    a = p.parse_args()
    families = a.families.split(",")
    summary = {"families": {}}
    records = [(fam, s) for fam in families for s in FAMILIES[fam]["record"]]
    for fam in families:
        os.makedirs(os.path.join(a.out, fam), exist_ok=True)
    with ThreadPoolExecutor(len(records)) as pool:
        recorded = list(pool.map(lambda t: one(t[0], t[1], "record", os.path.join(a.out, t[0], "%s_%d" % t)),
                                 records))
    cap = int(a.cap_gib * GiB)
    for fam in families:
        row = {"records": [r for r in recorded if r["family"] == fam], "real": []}
        top = max(FAMILIES[fam]["record"])
        for m in REAL_MULTIPLES:
            row["real"].append(one(fam, m * top, "real", os.path.join(a.out, fam, "%s_%d" % (fam, m * top))))
        files = ["%s=%d" % (os.path.join(a.out, fam, "%s_%d.pickle" % (fam, s)), s) for s in FAMILIES[fam]["record"]]
        predicted = subprocess.run(["vramscope", "predict"] + files + ["--at", "%d,%d" % (4 * top, 8 * top),
                                                                      "--largest", "--capacity", str(cap), "--json"],
                                   capture_output=True, text=True)
        if predicted.returncode != 0:
            row["predict_error"] = predicted.stderr[-1500:]
        else:
            answer = json.loads(predicted.stdout)
            row["predictions"] = answer.get("predictions")
            n = answer.get("largest_fitting_size")
            row["predicted_largest"] = n
            if n:
                sub = os.path.join(a.out, fam, "capped")
                os.makedirs(sub, exist_ok=True)
                with ThreadPoolExecutor(2) as pool:
                    row["capped"] = list(pool.map(
                        lambda s: one(fam, s, "capped", os.path.join(sub, "%s_%d" % (fam, s)), cap), (n, n + 1)))
        summary["families"][fam] = row
        print(json.dumps({fam: row}), flush=True)
    summary["cap_bytes"] = cap
    with open(os.path.join(a.out, "new_families.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
