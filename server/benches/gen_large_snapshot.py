#!/usr/bin/env python3
"""Generate a large, realistic PyTorch 2.11 CUDA memory snapshot pickle for benchmarks.

Usage: gen_large_snapshot.py OUT [--entries 1500000] [--seed 0]

The output has the shape `torch.cuda.memory._dump_snapshot()` writes (see
ring_overflow.pickle and gpt_long.pickle in the corpus, VRAMSCOPE_CORPUS): a dict with
`segments`, `device_traces`, `allocator_settings` and `external_annotations`,
written with `pickle.dump(obj, f, protocol=4)`.  The object graph mimics the one
PyTorch builds, so that pickle's memo produces the same opcode mix:

* frame dicts are few (a few hundred) and shared between entries (BINGET);
* filename and function-name strings are shared between frame dicts;
* every `alloc` entry gets its own new frames list; `free_requested` and its
  `free_completed` share one list (as in the real files), and a
  `segment_alloc` shares the list of the `alloc` that caused it;
* blocks in `segments` share the frames list of their `alloc` entry, inactive
  blocks and segments share one empty list;
* `compile_context` is a new 'N/A' str object per entry, `user_metadata` is the
  (singleton) empty string.

The trace is produced by a small model of the caching allocator (512-byte
rounding, small pool <= 1 MiB with 2 MiB segments, large pool with 20 MiB
segments below 10 MiB and 2 MiB-rounded segments above, best-fit with
splitting and coalescing, occasional empty_cache) driven by a transformer-like
training loop with varying sequence lengths, so the working set grows and
shrinks.  The final `segments` are exactly the allocator state the trace
leaves: every allocation alive at the end is an `active_allocated` block, and
the sum of segment `total_size` equals the net of segment_alloc/segment_free.

Python 3.11 standard library only; deterministic for a given --seed.
"""

from __future__ import annotations

import argparse
import bisect
import os
import pickle
import random
import sys
import time

KIB = 1024
MIB = 1024 * 1024

# CUDACachingAllocator constants (c10/cuda/CUDACachingAllocator.cpp)
K_MIN_BLOCK_SIZE = 512
K_SMALL_SIZE = 1 * MIB
K_SMALL_BUFFER = 2 * MIB
K_LARGE_BUFFER = 20 * MIB
K_MIN_LARGE_ALLOC = 10 * MIB
K_ROUND_LARGE = 2 * MIB

TIME_US_START = 1796216288159390
ADDR_TOP = 0x7F7A_0000_0000  # cudaMalloc hands out addresses downward from here

# Built at runtime so every entry gets a *new* 'N/A' object, as PyTorch does.
_NA_HEAD = "N/"
_NA_TAIL = "A"

# The recorded allocator settings of PyTorch 2.11's defaults, as the reader's
# fixtures write them (one list, in tests/fixtures/synthetic.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures"))
from synthetic import ALLOCATOR_SETTINGS  # noqa: E402


class Block:
    __slots__ = ("addr", "size", "req", "allocated", "prev", "next", "seg", "frames")

    def __init__(self, addr, size, seg, prev=None, nxt=None, req=0):
        self.addr = addr
        self.size = size
        self.req = req
        self.allocated = False
        self.prev = prev
        self.next = nxt
        self.seg = seg
        self.frames = None


class Segment:
    __slots__ = ("addr", "size", "small", "head")

    def __init__(self, addr, size, small):
        self.addr = addr
        self.size = size
        self.small = small
        self.head = None


def round_size(size: int) -> int:
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    return (size + K_MIN_BLOCK_SIZE - 1) // K_MIN_BLOCK_SIZE * K_MIN_BLOCK_SIZE


def allocation_size(size: int) -> int:
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return (size + K_ROUND_LARGE - 1) // K_ROUND_LARGE * K_ROUND_LARGE


class Allocator:
    """Caching-allocator model that records a PyTorch-shaped trace."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.trace: list[dict] = []
        self.free_lists = {True: [], False: []}  # small pool? -> sorted [(size, addr)]
        self.blocks: dict[int, Block] = {}
        self.segments: dict[int, Segment] = {}
        self.released: list[tuple[int, int]] = []  # (size, addr) ranges given back by cudaFree
        self.next_addr = ADDR_TOP
        self.time_us = TIME_US_START
        self.reserved = 0
        self.net_segment_bytes = 0
        self.live = 0

    # -- trace -----------------------------------------------------------
    def emit(self, action, addr, size, frames):
        self.time_us += self.rng.getrandbits(3)
        self.trace.append(
            {
                "action": action,
                "addr": addr,
                "size": size,
                "stream": 0,
                "time_us": self.time_us,
                "compile_context": _NA_HEAD + _NA_TAIL,
                "user_metadata": "",
                "frames": frames,
            }
        )

    def idle(self, us: int):
        self.time_us += us

    # -- device memory ---------------------------------------------------
    def cuda_malloc(self, size: int) -> int:
        # Reuse an address range released by an earlier cudaFree when one fits exactly.
        for i, (rsize, raddr) in enumerate(self.released):
            if rsize == size:
                del self.released[i]
                return raddr
        gap = K_SMALL_BUFFER * self.rng.choice((0, 0, 0, 1, 3, 10))
        self.next_addr -= size + gap
        return self.next_addr

    # -- allocator -------------------------------------------------------
    def malloc(self, req: int, frames: list) -> Block:
        size = round_size(req)
        small = size <= K_SMALL_SIZE
        fl = self.free_lists[small]
        i = bisect.bisect_left(fl, (size, 0))
        if i < len(fl):
            _, baddr = fl.pop(i)
            block = self.blocks[baddr]
        else:
            seg_size = allocation_size(size)
            addr = self.cuda_malloc(seg_size)
            seg = Segment(addr, seg_size, small)
            block = Block(addr, seg_size, seg)
            seg.head = block
            self.segments[addr] = seg
            self.blocks[addr] = block
            self.reserved += seg_size
            self.net_segment_bytes += seg_size
            self.emit("segment_alloc", addr, seg_size, frames)
        remaining = block.size - size
        if (small and remaining >= K_MIN_BLOCK_SIZE) or (not small and remaining > K_SMALL_SIZE):
            rest = Block(block.addr + size, remaining, block.seg, block, block.next, block.req)
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self.blocks[rest.addr] = rest
            bisect.insort(fl, (remaining, rest.addr))
        block.allocated = True
        block.req = req
        block.frames = frames
        self.live += 1
        self.emit("alloc", block.addr, req, frames)
        return block

    def _unlist(self, block: Block):
        fl = self.free_lists[block.seg.small]
        i = bisect.bisect_left(fl, (block.size, block.addr))
        assert fl[i] == (block.size, block.addr)
        del fl[i]

    def free(self, block: Block, frames: list):
        assert block.allocated
        self.emit("free_requested", block.addr, block.req, frames)
        self.emit("free_completed", block.addr, block.req, frames)
        block.allocated = False
        block.frames = None
        self.live -= 1
        prev = block.prev
        if prev is not None and not prev.allocated:
            self._unlist(prev)
            prev.size += block.size
            prev.next = block.next
            if block.next is not None:
                block.next.prev = prev
            del self.blocks[block.addr]
            block = prev
        nxt = block.next
        if nxt is not None and not nxt.allocated:
            self._unlist(nxt)
            block.size += nxt.size
            block.next = nxt.next
            if nxt.next is not None:
                nxt.next.prev = block
            del self.blocks[nxt.addr]
        bisect.insort(self.free_lists[block.seg.small], (block.size, block.addr))

    def empty_cache(self, frames: list):
        for addr in sorted(self.segments):
            seg = self.segments[addr]
            head = seg.head
            if head.allocated or head.next is not None:
                continue
            self._unlist(head)
            del self.blocks[addr]
            del self.segments[addr]
            self.reserved -= seg.size
            self.net_segment_bytes -= seg.size
            self.released.append((seg.size, addr))
            self.emit("segment_free", addr, seg.size, list(frames))
    
    # -- snapshot --------------------------------------------------------
    def segment_dicts(self, empty_frames: list) -> list[dict]:
        out = []
        for addr in sorted(self.segments):
            seg = self.segments[addr]
            blocks = []
            allocated = requested = 0
            b = seg.head
            while b is not None:
                if b.allocated:
                    allocated += b.size
                    requested += b.req
                    blocks.append(
                        {
                            "address": b.addr,
                            "size": b.size,
                            "requested_size": b.req,
                            "state": "active_allocated",
                            "frames": b.frames,
                        }
                    )
                else:
                    blocks.append(
                        {
                            "address": b.addr,
                            "size": b.size,
                            "requested_size": b.req,
                            "state": "inactive",
                            "frames": empty_frames,
                        }
                    )
                b = b.next
            out.append(
                {
                    "device": 0,
                    "address": addr,
                    "total_size": seg.size,
                    "allocated_size": allocated,
                    "active_size": allocated,
                    "requested_size": requested,
                    "stream": 0,
                    "segment_type": "small" if seg.small else "large",
                    "segment_pool_id": (0, 0),
                    "is_expandable": False,
                    "frames": empty_frames,
                    "blocks": blocks,
                }
            )
        return out


# ---------------------------------------------------------------------------
# Python call stacks: a few hundred shared frame dicts, stacks of 2-4 frames.


class Frames:
    TRAIN = "/srv/jobs/train.py"
    MODEL = "/srv/jobs/model.py"
    TORCH = "/usr/lib/python3.12/site-packages/torch/"

    LIB_FUNCS = [
        ("nn/modules/module.py", ["_call_impl", "_wrapped_call_impl", "_apply", "<lambda>", "cuda"]),
        ("nn/modules/linear.py", ["forward"]),
        ("nn/modules/normalization.py", ["forward"]),
        ("nn/modules/sparse.py", ["forward"]),
        ("nn/modules/dropout.py", ["forward"]),
        ("nn/modules/activation.py", ["forward"]),
        ("nn/modules/container.py", ["forward"]),
        ("nn/modules/transformer.py", ["forward", "_sa_block", "_ff_block"]),
        ("nn/functional.py", [
            "layer_norm", "dropout", "embedding", "relu", "gelu", "cross_entropy", "softmax",
            "multi_head_attention_forward", "_in_projection_packed", "scaled_dot_product_attention",
        ]),
        ("_tensor.py", ["backward", "__rsub__", "to"]),
        ("autograd/__init__.py", ["backward", "_make_grads"]),
        ("optim/adamw.py", ["step", "_init_group", "_multi_tensor_adamw", "adamw"]),
        ("optim/optimizer.py", ["wrapper", "_use_grad", "maybe_fallback", "zero_grad"]),
        ("nn/utils/clip_grad.py", ["clip_grad_norm_", "_clip_grads_with_norm_", "_get_total_norm"]),
        ("cuda/memory.py", ["empty_cache"]),
    ]
    MODEL_FUNCS = ["forward", "attn", "mlp", "embed", "head", "loss_fn", "__init__", "build", "init_weights"]

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.strings: dict[str, str] = {}
        self.dicts: list[dict] = []
        self.roots = [self.frame(self.TRAIN, "<module>", line) for line in (218, 221, 226)]
        self.run = [self.frame(self.TRAIN, "run", line) for line in sorted(rng.sample(range(120, 215), 30))]
        self.model = []
        for name in self.MODEL_FUNCS:
            for line in sorted(rng.sample(range(20, 400), 9)):
                self.model.append(self.frame(self.MODEL, name, line))
        self.lib: dict[str, list[dict]] = {}
        for rel, funcs in self.LIB_FUNCS:
            path = self.TORCH + rel
            for name in funcs:
                n = 4 if rel.startswith(("nn/functional", "optim/adamw", "nn/modules/module")) else 3
                base = rng.randrange(40, 6000)
                self.lib[name + "@" + rel] = [
                    self.frame(path, name, base + off) for off in sorted(rng.sample(range(0, 60), n))
                ]
        self.lib_all = [f for fs in self.lib.values() for f in fs]
        self.stack_cache: dict[tuple, tuple] = {}

    def _s(self, s: str) -> str:
        # one str object per distinct text, so frame dicts share their strings
        return self.strings.setdefault(s, s)

    def frame(self, filename: str, name: str, line: int) -> dict:
        d = {"name": self._s(name), "filename": self._s(filename), "line": line}
        self.dicts.append(d)
        return d

    def lib_frames(self, *keys: str) -> list[dict]:
        out = []
        for full, fs in self.lib.items():
            name, rel = full.split("@")
            if any(k == name or rel.endswith(k) for k in keys):
                out.extend(fs)
        return out or self.lib_all

    def stack(self, leaf_pool: list[dict], depth: int | None = None) -> tuple:
        """A stack of 2-4 frame dicts, leaf first, ending in train.py <module>."""
        rng = self.rng
        depth = depth or rng.choice((2, 3, 3, 4, 4, 4))
        root = rng.choice(self.roots)
        run = rng.choice(self.run)
        if depth == 2:
            return (run, root)
        leaf = rng.choice(leaf_pool)
        if depth == 3:
            return (leaf, run, root)
        return (leaf, rng.choice(self.model), run, root)


# ---------------------------------------------------------------------------
# Workload: a GPT-like training loop with varying sequence lengths.
#
# Parameters, gradients and AdamW state live in one flat buffer per layer (as
# FSDP / DeepSpeed do), so the set of tensors alive at the end is small and the
# `segments` part of the pickle stays small, like ring_overflow.pickle: the trace
# dict keys then get one-byte BINGETs and the file has ~60 bytes per entry.


def aligned(n: float, elem: int = 4) -> int:
    n = max(int(n), 1)
    return (n + elem - 1) // elem * elem


def build_workload(rng: random.Random, fr: Frames):
    layers = 6
    d = 1024
    tokens_max = 8 * 1024  # batch 8 x seq 1024
    # flat parameter buffers: embeddings, one per block, final norm + head bias
    flat = [50304 * d * 4 + 1024 * d * 4] + [(12 * d * d + 13 * d) * 4] * layers + [2 * d * 4]
    init_pool = fr.lib_frames("<lambda>", "_apply", "cuda")
    param_sites = [fr.stack(init_pool, 4) for _ in flat]

    fwd_pool = fr.lib_frames(
        "linear.py", "normalization.py", "dropout.py", "activation.py", "layer_norm", "dropout",
        "gelu", "softmax", "multi_head_attention_forward", "_in_projection_packed",
        "scaled_dot_product_attention", "_call_impl", "_wrapped_call_impl", "_sa_block", "_ff_block",
    )
    # Ops of one transformer block: (bytes at tokens_max or fixed, scales with tokens, saved for backward)
    ops = [
        (tokens_max * d * 4, True, True),       # ln1 out
        (tokens_max * 4, True, True),           # ln1 mean
        (tokens_max * 4, True, True),           # ln1 rstd
        (tokens_max * 3 * d * 4, True, True),   # qkv
        (tokens_max * d * 4, True, False),      # q contiguous (temp)
        (tokens_max * d * 4, True, False),      # k contiguous (temp)
        (8 * 16 * 1024 * 4, True, True),        # sdpa logsumexp
        (16, False, True),                      # philox seed/offset
        (tokens_max * d * 4, True, True),       # attn out
        (tokens_max * d * 4, True, True),       # proj out
        (tokens_max * d, True, True),           # dropout mask (bool)
        (tokens_max * d * 4, True, True),       # residual
        (tokens_max * d * 4, True, True),       # ln2 out
        (tokens_max * 4, True, True),           # ln2 mean
        (tokens_max * 4, True, True),           # ln2 rstd
        (tokens_max * 4 * d * 4, True, True),   # fc out
        (tokens_max * 4 * d * 4, True, True),   # gelu out
        (tokens_max * d * 4, True, True),       # mlp proj out
        (tokens_max * d, True, True),           # dropout mask
        (4, False, False),                      # scalar temp
        (d * 4, False, False),                  # small temp (bias-sized)
        (rng.randrange(64, 4096) * 4, False, False),
        (rng.randrange(4096, 60000) * 4, False, False),
        (rng.randrange(16, 256) * 4, True, False),
        (8 * 16 * 4, False, False),             # per-head scales
        (rng.randrange(256, 2048) * 4, True, False),
    ]
    # Every (layer, op) site has its own call stack; allocation and free stacks differ.
    fwd_sites = [[fr.stack(fwd_pool) for _ in ops] for _ in range(layers)]
    free_sites = [[fr.stack(fwd_pool, rng.choice((2, 3))) for _ in ops] for _ in range(layers)]
    loss_sites = [fr.stack(fr.lib_frames("cross_entropy", "head", "loss_fn")) for _ in range(8)]
    bwd_entry = [fr.stack(fr.lib_frames("backward", "_make_grads"), 3) for _ in range(4)]
    opt_sites = [fr.stack(fr.lib_frames("step", "_init_group", "_multi_tensor_adamw", "adamw", "wrapper", "_use_grad"))
                 for _ in range(40)]
    clip_sites = [fr.stack(fr.lib_frames("clip_grad_norm_", "_clip_grads_with_norm_", "_get_total_norm"))
                  for _ in range(12)]
    zero_site = fr.stack(fr.lib_frames("zero_grad"), 3)
    empty_site = fr.stack(fr.lib_frames("empty_cache"), 3)
    data_sites = [fr.stack(fr.lib_frames("to", "embedding", "sparse.py")) for _ in range(6)]
    misc_sites = [fr.stack(fr.lib_all) for _ in range(200)]
    return {
        "layers": layers, "d": d, "tokens_max": tokens_max, "flat": flat, "param_sites": param_sites,
        "ops": ops, "fwd_sites": fwd_sites, "free_sites": free_sites, "loss_sites": loss_sites,
        "bwd_entry": bwd_entry, "opt_sites": opt_sites, "clip_sites": clip_sites,
        "zero_site": zero_site, "empty_site": empty_site, "data_sites": data_sites,
        "misc_sites": misc_sites,
    }


def simulate(target: int, seed: int, batch: int | None = None, steps: int | None = None):
    """The run; with `batch`, the same program at any batch size (the
    allocator draws from a generator of its own, so its decisions, which
    depend on sizes, leave the program's draws alone), `steps` steps long
    when given."""
    rng = random.Random(seed)
    fr = Frames(rng)
    w = build_workload(rng, fr)
    a = Allocator(rng if batch is None else random.Random(seed ^ 0x5EED))
    batch = batch or 8
    annotations: list[dict] = []
    layers, d, tokens_max = w["layers"], w["d"], w["tokens_max"]
    ops, flat = w["ops"], w["flat"]
    pick = rng.choice

    def fr_(stack) -> list:
        return list(stack)  # a new frames list object per entry

    def nofr() -> list:
        return []  # autograd engine thread: no Python stack

    def annotate(stage, name):
        annotations.append({"stage": stage, "name": name, "device": 0, "time_us": a.time_us})

    # model.cuda(): flat parameters, alive for the whole run.
    params = [a.malloc(n, fr_(st)) for n, st in zip(flat, w["param_sites"])]
    opt_state: list[Block] = []
    grads: list[Block | None] = [None] * len(params)
    kept: list[Block] = []  # losses kept for logging, cleared every 20 steps
    step = 0
    n_steps_hint = max(target // 850, 20)
    while (len(a.trace) < target) if steps is None else (step < steps):
        # Curriculum: maximum sequence length grows over the first 40% of the run.
        ramp = min(1.0, 0.25 + 0.75 * step / (0.4 * n_steps_hint))
        seq = max(64, int(rng.randint(2, 16) * 64 * ramp) // 64 * 64)
        f = batch * seq / tokens_max
        eval_step = step % 50 == 49
        name = f"step{step}"
        annotate("START", name)
        a.idle(rng.randrange(200, 5000))

        inputs = [a.malloc(batch * seq * 8, fr_(pick(w["data_sites"]))) for _ in range(2)]
        saved: list[tuple[Block, int, int]] = []
        pending: list[tuple[Block, int, int]] = []
        emb = a.malloc(aligned(tokens_max * d * 4 * f), fr_(pick(w["data_sites"])))
        saved.append((emb, 0, -1))
        for layer in range(layers):
            for k, (base, scales, keep) in enumerate(ops):
                size = aligned(base * f) if scales else base
                if rng.random() < 0.03:  # the odd extra temporary
                    t = a.malloc(aligned(rng.randrange(1, 1 << rng.randrange(4, 18))), fr_(pick(w["misc_sites"])))
                    pending.append((t, layer, k))
                b = a.malloc(size, fr_(w["fwd_sites"][layer][k]))
                (pending if eval_step or not keep else saved).append((b, layer, k))
                # temporaries die a few ops later
                while len(pending) > rng.randrange(1, 4):
                    pb, pl, pk = pending.pop(0)
                    a.free(pb, fr_(w["free_sites"][pl][pk]))
        for pb, pl, pk in pending:
            a.free(pb, fr_(w["free_sites"][pl][pk]))
        pending.clear()

        # Loss.
        logits = a.malloc(aligned(batch * seq * 50304 * 2), fr_(w["loss_sites"][0]))
        loss_tmp = [a.malloc(aligned(batch * seq * 4), fr_(pick(w["loss_sites"]))) for _ in range(3)]
        loss = a.malloc(4, fr_(pick(w["loss_sites"])))
        for t in loss_tmp:
            a.free(t, fr_(pick(w["loss_sites"])))
        kept.append(loss)

        if eval_step:
            a.free(logits, fr_(pick(w["loss_sites"])))
            for b, _, _ in saved:
                a.free(b, fr_(pick(w["loss_sites"])))
        else:
            # Backward on the autograd engine thread: no Python frames.
            g = a.malloc(4, fr_(pick(w["bwd_entry"])))
            gl = a.malloc(logits.req, nofr())
            a.free(logits, nofr())
            if grads[-1] is None:
                grads[-1] = a.malloc(flat[-1], nofr())
            while saved:
                b, layer, k = saved.pop()
                if rng.random() < 0.5:
                    t = a.malloc(b.req, nofr())
                    a.free(b, nofr())
                    a.free(t, nofr())
                else:
                    a.free(b, nofr())
                if k == 0 and grads[1 + layer] is None:
                    grads[1 + layer] = a.malloc(flat[1 + layer], nofr())
            if grads[0] is None:
                grads[0] = a.malloc(flat[0], nofr())
            a.free(gl, nofr())
            a.free(g, nofr())

            # Gradient clipping: per-tensor norms, then the total.
            norms = [a.malloc(4, fr_(pick(w["clip_sites"]))) for _ in range(rng.randrange(6, 16))]
            total = a.malloc(4, fr_(pick(w["clip_sites"])))
            for t in norms:
                a.free(t, fr_(pick(w["clip_sites"])))
            a.free(total, fr_(pick(w["clip_sites"])))

            # Optimizer step (AdamW, foreach): state on the first step, then temporaries.
            annotate("START", "Optimizer.step#AdamW.step")
            if not opt_state:
                for n in flat:
                    opt_state.append(a.malloc(n, fr_(pick(w["opt_sites"]))))
                    opt_state.append(a.malloc(n, fr_(pick(w["opt_sites"]))))
                opt_state.append(a.malloc(4, fr_(pick(w["opt_sites"]))))  # step count
            for i in range(0, len(flat), 2):
                t = a.malloc(flat[i], fr_(pick(w["opt_sites"])))
                a.free(t, fr_(pick(w["opt_sites"])))
            annotate("END", "Optimizer.step#AdamW.step")

            # zero_grad(set_to_none=True) frees the gradients.
            annotate("START", "Optimizer.zero_grad#AdamW.zero_grad")
            for i, gb in enumerate(grads):
                if gb is not None:
                    a.free(gb, fr_(w["zero_site"]))
                    grads[i] = None
            annotate("END", "Optimizer.zero_grad#AdamW.zero_grad")

        for b in inputs:
            a.free(b, fr_(pick(w["data_sites"])))
        if len(kept) >= 20:
            for b in kept:
                a.free(b, fr_(pick(w["loss_sites"])))
            kept.clear()
        annotate("END", name)
        step += 1
        if step % 97 == 0:
            a.empty_cache(fr_(w["empty_site"]))

    # End of training: the script logs and drops the kept losses, then calls
    # torch.cuda.empty_cache() before dumping the snapshot.
    for b in kept:
        a.free(b, fr_(pick(w["loss_sites"])))
    kept.clear()
    a.empty_cache(fr_(w["empty_site"]))

    empty: list = []
    segments = a.segment_dicts(empty)
    total = sum(s["total_size"] for s in segments)
    assert total == a.net_segment_bytes == a.reserved, (total, a.net_segment_bytes)
    n_active = sum(1 for s in segments for b in s["blocks"] if b["state"] == "active_allocated")
    assert n_active == a.live, (n_active, a.live)
    snapshot = {
        "segments": segments,
        "device_traces": [a.trace],
        "allocator_settings": ALLOCATOR_SETTINGS,
        "external_annotations": annotations,
    }
    info = {"frame_dicts": len(fr.dicts), "steps": step, "segments": len(segments), "reserved": total}
    return snapshot, info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="output .pickle path")
    ap.add_argument("--entries", type=int, default=1_500_000, help="minimum trace entries (default 1500000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=None,
                    help="the batch size (default 8); given, the program is the same at every batch")
    ap.add_argument("--steps", type=int, default=None, help="run exactly this many steps (default: until --entries)")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    snapshot, info = simulate(args.entries, args.seed, args.batch, args.steps)
    t1 = time.perf_counter()
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "wb") as f:
        pickle.dump(snapshot, f, protocol=4)
    os.replace(tmp, args.out)
    t2 = time.perf_counter()
    n = len(snapshot["device_traces"][0])
    size = os.path.getsize(args.out)
    print(
        f"wrote {args.out}: {size} bytes ({size / 1e6:.1f} MB), {n} trace entries "
        f"({size / n:.1f} B/entry), {info['segments']} segments, "
        f"{info['reserved'] / 2**30:.2f} GiB reserved, {info['steps']} steps, "
        f"{info['frame_dicts']} frame dicts; simulate {t1 - t0:.1f}s, pickle {t2 - t1:.1f}s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
