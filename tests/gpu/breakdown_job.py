"""The truth for `vramscope breakdown`: a small transformer trained with
AdamW, recorded from before the model exists, with two snapshots taken
in its fifth step:

- `OUT/STACKS-forward.pickle`: inside the forward pass (a forward hook on
  the middle block), where activations are alive and gradients are not;
- `OUT/STACKS-after_step.pickle`: right after `optimizer.step()`, before
  `zero_grad()`, where parameters, gradients and optimizer state are all
  alive.

Beside each, `*.truth.json`: the true bytes of the parameters, the
gradients and the optimizer state, from the tensors themselves
(`untyped_storage().nbytes()`, each storage once), and
`torch.cuda.memory_allocated()` and the requested bytes at that instant,
and the bytes of cuBLAS's workspaces (measured by clearing them after the
snapshot); and `*.stats.json`, the
allocator's `memory_stats()`.

    python3 tests/gpu/breakdown_job.py OUT python|all forward|after_step

Each snapshot comes from a run of its own, which stops right after it:
measuring the workspaces frees them, and the next matmul would make them
again inside the step.
"""

import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab=8192, d=512, layers=6, heads=8, ctx=256):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def storage_bytes(tensors):
    """Each CUDA storage once."""
    seen = {}
    for t in tensors:
        if t is not None and t.is_cuda:
            s = t.untyped_storage()
            seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def truth(model, opt):
    state = [v for per in opt.state.values() for v in per.values() if torch.is_tensor(v)]
    return {
        "parameters": storage_bytes(model.parameters()),
        "gradients": storage_bytes(p.grad for p in model.parameters()),
        "optimizer_state": storage_bytes(state),
        "memory_allocated": torch.cuda.memory_allocated(),
    }


def dump(stem, model, opt):
    torch.cuda.synchronize()
    t = truth(model, opt)
    torch.cuda.memory._dump_snapshot(stem + ".pickle")
    stats = torch.cuda.memory_stats()
    with open(stem + ".stats.json", "w") as f:
        json.dump({"alloc_conf": os.environ.get("PYTORCH_ALLOC_CONF", ""), "memory_stats": stats}, f)
    # cuBLAS keeps its workspaces in the caching allocator: neither model
    # nor optimizer state, and not activations. Clearing them says how many
    # bytes they held; the run stops right after.
    t["memory_requested"] = stats["requested_bytes.all.current"]
    held = torch.cuda.memory_allocated()
    torch._C._cuda_clearCublasWorkspaces()
    t["cublas_workspaces"] = held - torch.cuda.memory_allocated()
    with open(stem + ".truth.json", "w") as f:
        json.dump(t, f, indent=1)
    print(os.path.basename(stem), json.dumps(t), flush=True)


class Done(Exception):
    """The snapshot is taken: the run stops."""


def main():
    out, stacks, when = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    torch.cuda.init()
    torch.cuda.memory._record_memory_history(context="all", stacks=stacks, max_entries=1_000_000)
    model = Gpt().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    state = {"step": 0}

    def inside_forward(module, args, output):
        if state["step"] == 4 and when == "forward":
            dump(os.path.join(out, f"{stacks}-forward"), model, opt)
            raise Done()

    model.blocks[3].register_forward_hook(inside_forward)
    try:
        train(model, opt, state, out, stacks, when)
    except Done:
        pass


def train(model, opt, state, out, stacks, when):
    for step in range(5):
        state["step"] = step
        idx = torch.randint(0, 8192, (16, 256), device="cuda")
        with torch.autograd.profiler.record_function("forward"):
            logits = model(idx)
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), idx.view(-1))
        with torch.autograd.profiler.record_function("backward"):
            loss.backward()
        with torch.autograd.profiler.record_function("optimizer"):
            opt.step()
        if step == 4 and when == "after_step":
            dump(os.path.join(out, f"{stacks}-after_step"), model, opt)
            return
        opt.zero_grad()


if __name__ == "__main__":
    main()
