"""Two-rank data-parallel job (torchrun --nproc-per-node 2) where rank 1
leaks: it keeps each step's activations. On one GPU both ranks use cuda:0
with the gloo backend (NCCL refuses two ranks on one device). Each rank may
use `--fraction` of the device; the job stops once the leaking rank nears
its limit (`--stop-at`), before it would run out."""

import argparse
import os
import time

import torch
import torch.distributed as dist


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(1024, 4096)
        self.down = torch.nn.Linear(4096, 1024)

    def forward(self, x):
        return self.down(self.up(x).relu())


def keep_activations(store, model, x):
    """The bug: a copy of each step's hidden activations (16 MiB) appended to
    a list that lives for the whole run."""
    with torch.no_grad():
        store.append(model.module.up(x).relu().clone())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fraction", type=float, default=0.02)
    parser.add_argument("--stop-at", type=float, default=0.9)
    parser.add_argument("--max-steps", type=int, default=400)
    parser.add_argument("--step-s", type=float, default=0.05)
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo")
    torch.cuda.set_device(0)
    torch.cuda.set_per_process_memory_fraction(args.fraction, 0)
    capacity = torch.cuda.get_device_properties(0).total_memory * args.fraction
    model = torch.nn.parallel.DistributedDataParallel(Net().cuda())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    leaked = []
    for step in range(args.max_steps):
        x = torch.randn(1024, 1024, device="cuda")
        hidden = model(x)
        loss = hidden.square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 1:
            keep_activations(leaked, model, x)
        near = torch.tensor([float(torch.cuda.memory_reserved() > args.stop_at * capacity)], device="cuda")
        dist.all_reduce(near)
        if near.item() > 0:
            break
        time.sleep(args.step_s)
    print("rank %d stopped after %d steps, reserved %.0f MiB" % (rank, step + 1, torch.cuda.memory_reserved() / 2**20), flush=True)
    # Let the agent's capture of every rank finish before the ranks exit.
    time.sleep(3)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
