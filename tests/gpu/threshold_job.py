"""GPU job: grows reserved memory step by step to `--peak` of the memory the
process may use (a per-process fraction), holds it, frees it and ends
cleanly. Under the agent's threshold it yields exactly one pre-OOM snapshot
(hysteresis), however long it stays above."""

import argparse
import time

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fraction", type=float, default=0.02)
    parser.add_argument("--peak", type=float, default=0.9)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--hold-s", type=float, default=2.0)
    args = parser.parse_args()
    torch.cuda.set_per_process_memory_fraction(args.fraction, 0)
    total = torch.cuda.get_device_properties(0).total_memory
    capacity = total * args.fraction
    chunk = 32 << 20
    steps = int(capacity * args.peak / chunk)
    kept = []
    for _ in range(steps):
        kept.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
        time.sleep(args.seconds / steps)
    print("peak reserved %.0f MiB of %.0f MiB" % (torch.cuda.memory_reserved() / 2**20, capacity / 2**20), flush=True)
    time.sleep(args.hold_s)
    kept.clear()
    torch.cuda.synchronize()
    print("done", flush=True)


if __name__ == "__main__":
    main()
