"""The agent-overhead bench: the same workload (`workload.py`) without
recording, with PyTorch's recording alone, and under `vramscope agent`,
interleaved (`--rounds` rounds of the three, so drift hits all alike), in
one run on one GPU. Prints the figures side by side with PyTorch's own
recording cost measured on the H200 (`capture_overhead.json`) and writes
them as JSON.

    python3 server/benches/agent_overhead/run.py --vramscope target/release/vramscope \
        --server http://127.0.0.1:PORT --out DIR
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
#: PyTorch's recording cost per empty+free pair on the H200 (µs), from
#: the corpus's capture_overhead.json (VRAMSCOPE_CORPUS): off 3.0-3.7, recording 4.7-6.0.
REFERENCE = {"off": (3.0, 3.7), "record": (4.7, 6.0)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--vramscope", required=True)
    parser.add_argument("--server", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    workload = [sys.executable, os.path.join(HERE, "workload.py"), "--steps", str(args.steps)]
    runs = {"off": [], "record": [], "agent": []}
    for r in range(args.rounds):
        for mode in ("off", "record", "agent"):
            out = os.path.join(args.out, "%s-%d.json" % (mode, r))
            command = workload + ["--out", out] + (["--record"] if mode == "record" else [])
            if mode == "agent":
                command = [args.vramscope, "agent", "--server", args.server, "--job", "bench-overhead",
                           "--interval", "1s", "--"] + command
            env = dict(os.environ)
            env.pop("PYTHONPATH", None)
            subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
            with open(out) as f:
                runs[mode].append(json.load(f))
    summary = {}
    for mode, results in runs.items():
        summary[mode] = {
            "pair_us": statistics.median(r["pair_us"] for r in results),
            "pair_us_min": min(r["pair_us_min"] for r in results),
            "step_ms": statistics.median(r["step_ms"] for r in results),
            "pair_us_all": [round(r["pair_us"], 3) for r in results],
            "step_ms_all": [round(r["step_ms"], 3) for r in results],
        }
    assert all(r["agent"] for r in runs["agent"]), "the capture module was not active under the agent"
    rec, agent, off = summary["record"], summary["agent"], summary["off"]
    summary["agent_vs_record_pair_pct"] = 100 * (agent["pair_us"] / rec["pair_us"] - 1)
    summary["agent_vs_record_pair_min_pct"] = 100 * (agent["pair_us_min"] / rec["pair_us_min"] - 1)
    summary["agent_vs_record_step_pct"] = 100 * (agent["step_ms"] / rec["step_ms"] - 1)
    summary["agent_vs_off_step_pct"] = 100 * (agent["step_ms"] / off["step_ms"] - 1)
    summary["reference_h200_us"] = REFERENCE
    print("agent overhead (median of %d interleaved rounds)" % args.rounds)
    print("%-28s %12s %12s %12s %14s" % ("", "pair µs", "pair µs min", "step ms", "H200 ref µs"))
    rows = [("no recording", off, "3.0-3.7"), ("torch recording alone", rec, "4.7-6.0"), ("under vramscope agent", agent, "")]
    for name, row, ref in rows:
        print("%-28s %12.3f %12.3f %12.3f %14s" % (name, row["pair_us"], row["pair_us_min"], row["step_ms"], ref))
    print("agent vs recording alone: pair %+.2f%% (median) %+.2f%% (fastest block), step %+.2f%%; "
          "agent vs no recording: step %+.2f%%" % (
              summary["agent_vs_record_pair_pct"], summary["agent_vs_record_pair_min_pct"],
              summary["agent_vs_record_step_pct"], summary["agent_vs_off_step_pct"]))
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
