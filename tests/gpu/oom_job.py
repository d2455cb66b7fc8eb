"""GPU job: a training-like loop that keeps activations until it runs out of
memory under a per-process memory fraction. Under `vramscope agent
--threshold 0.8` it must yield a pre-OOM (threshold) snapshot first, then an
OOM snapshot whose trace ends with the `oom` entry. Exits with the
OutOfMemoryError (code 1), as the real job would."""

import argparse
import time

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fraction", type=float, default=0.02)
    parser.add_argument("--chunk-mib", type=int, default=64)
    parser.add_argument("--step-s", type=float, default=0.1)
    args = parser.parse_args()
    torch.cuda.set_per_process_memory_fraction(args.fraction, 0)
    model = torch.nn.Linear(1024, 1024, device="cuda")
    kept = []
    step = 0
    while True:
        x = torch.randn(256, 1024, device="cuda")
        y = model(x).relu()
        # The leak: every step keeps a chunk of "activations" alive.
        kept.append(torch.empty(args.chunk_mib << 20, dtype=torch.uint8, device="cuda"))
        kept.append(y)
        step += 1
        print("step %d reserved %.0f MiB" % (step, torch.cuda.memory_reserved() / 2**20), flush=True)
        time.sleep(args.step_s)


if __name__ == "__main__":
    main()
