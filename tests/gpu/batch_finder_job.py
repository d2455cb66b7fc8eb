"""Issue 43, item 5, on a GPU: batch-size finders side by side on one model.

Finders, each in a process of its own (so each starts from a fresh CUDA
context and allocator), on the same GPT-style model (vocab 32768, d 1024,
12 layers, 16 heads, seq 512, AdamW, bf16 autocast; `--layers`, `--d`,
`--seq` to change it):

- `vramscope`: `vramscope.largest_batch(step_fn, sizes=(2, 4, 8))`, the
  model built inside step_fn, 3 steps a size.
- `accelerate`: `accelerate.utils.find_executable_batch_size` from
  `--start` (default 1024), the same 3 steps per try, shrinking after each
  OOM as accelerate does.
- `lightning`: Lightning's `BatchSizeFinder(mode="binsearch",
  steps_per_trial=3, init_val=2)` on a LightningModule of the same model.
- `vramscope_lightning`: `vramscope.integrations.lightning.LargestBatchFinder`
  on the same LightningModule.
- `hf_auto`, `vramscope_hf`: a transformers Trainer on the same model (a
  `PreTrainedModel` wrapper), with `auto_find_batch_size=True` or with
  `vramscope.integrations.transformers.largest_batch_size(trainer)`
  (skipped where transformers is not installed).

For each: the size found, the finder's wall time (synchronized), the OOMs
it suffered (`memory_stats()["num_ooms"]` at its end, plus exceptions it
saw), and whether that size then trains `--check-steps` (100) steps
without OOM, in a fresh process again. One JSON object on stdout (and in
`--out`).

    python3 tests/gpu/batch_finder_job.py all --out /tmp/batch_finders.json
    python3 tests/gpu/batch_finder_job.py find vramscope      # one finder
    python3 tests/gpu/batch_finder_job.py train --size 48     # the 100-step check

Needs torch with CUDA, the vramscope wheel (or $VRAMSCOPE_BIN and this
checkout's python/ on PYTHONPATH), and for their rows lightning,
accelerate and transformers.
"""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

FINDERS = ("vramscope", "accelerate", "lightning", "vramscope_lightning", "hf_auto", "vramscope_hf")
STEPS_PER_TRIAL = 3


def model_args(a):
    return {"vocab": a.vocab, "d": a.d, "layers": a.layers, "heads": a.heads, "seq": a.seq}


def build_model(torch, vocab, d, layers, heads, seq):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

        def forward(self, ids):
            x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x))

    return GPT()


def batch_of(torch, size, vocab, seq, device="cuda"):
    g = torch.Generator(device="cpu").manual_seed(size)
    ids = torch.randint(0, vocab, (size, seq + 1), generator=g)
    return ids[:, :-1].to(device), ids[:, 1:].to(device)


def train_steps(torch, size, steps, m, model=None, optimizer=None):
    """`steps` steps at `size`, the model and optimizer built here unless given."""
    model = model or build_model(torch, **m).cuda()
    optimizer = optimizer or torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(steps):
        x, y = batch_of(torch, size, m["vocab"], m["seq"])
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()


def is_oom(e):
    return "out of memory" in str(e).lower()


def lightning_parts(torch, m):
    try:
        import lightning.pytorch as pl
    except ImportError:
        import pytorch_lightning as pl

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 1 << 16

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            ids = torch.randint(0, m["vocab"], (m["seq"] + 1,), generator=g)
            return ids[:-1], ids[1:]

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.batch_size = 2
            self.net = build_model(torch, **m)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(Data(), batch_size=self.batch_size)

        def training_step(self, batch, index):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x).flatten(0, 1).float(), y.flatten())

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    return pl, Module


def hf_parts(torch, m):
    import transformers

    class Config(transformers.PretrainedConfig):
        model_type = "vramscope-gpt"

    class Model(transformers.PreTrainedModel):
        config_class = Config

        def __init__(self, config):
            super().__init__(config)
            self.net = build_model(torch, **m)

        def forward(self, input_ids, labels=None):
            logits = self.net(input_ids)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
            return {"loss": loss, "logits": logits}

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 1 << 16

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            ids = torch.randint(0, m["vocab"], (m["seq"] + 1,), generator=g)
            return {"input_ids": ids[:-1], "labels": ids[1:]}

    return transformers, Model(Config()), Data()


def find(a):
    """One finder, in this process: {size, wall_s, ooms, ...}."""
    import torch

    m = model_args(a)
    seen = {"exceptions": 0}
    out = {"finder": a.finder}
    torch.cuda.init()
    start = time.perf_counter()
    if a.finder == "vramscope":
        import vramscope

        found = vramscope.largest_batch(lambda size: train_steps(torch, size, STEPS_PER_TRIAL, m), sizes=(2, 4, 8))
        out.update(size=found.size, predicted_peak_bytes=found.predicted_peak_bytes, capacity_bytes=found.capacity_bytes,
                   notes=found.notes)
    elif a.finder == "accelerate":
        from accelerate.utils import find_executable_batch_size

        @find_executable_batch_size(starting_batch_size=a.start)
        def inner(batch_size):
            try:
                train_steps(torch, batch_size, STEPS_PER_TRIAL, m)
            except RuntimeError as e:
                seen["exceptions"] += is_oom(e)
                raise
            return batch_size

        out["size"] = inner()
    elif a.finder in ("lightning", "vramscope_lightning"):
        pl, Module = lightning_parts(torch, m)
        timed = {}
        if a.finder == "lightning":
            base = pl.callbacks.BatchSizeFinder
            kwargs = {"mode": "binsearch", "steps_per_trial": STEPS_PER_TRIAL, "init_val": 2}
        else:
            from vramscope.integrations.lightning import LargestBatchFinder as base

            kwargs = {"sizes": (2, 4, 8), "steps_per_trial": STEPS_PER_TRIAL}

        class Timed(base):
            def on_fit_start(self, trainer, pl_module):
                t = time.perf_counter()
                super().on_fit_start(trainer, pl_module)
                torch.cuda.synchronize()
                timed["wall_s"] = time.perf_counter() - t

        finder = Timed(**kwargs)
        trainer = pl.Trainer(accelerator="gpu", devices=1, precision="bf16-mixed", max_steps=1, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, callbacks=[finder])
        trainer.fit(Module())
        out["size"] = finder.optimal_batch_size
        out["finder_wall_s"] = timed.get("wall_s")
    elif a.finder in ("hf_auto", "vramscope_hf"):
        transformers, model, data = hf_parts(torch, m)
        args = transformers.TrainingArguments(
            output_dir=a.tmp, per_device_train_batch_size=a.start if a.finder == "hf_auto" else 2, max_steps=1,
            bf16=True, report_to=[], save_strategy="no", auto_find_batch_size=a.finder == "hf_auto",
        )
        trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
        if a.finder == "hf_auto":
            trainer.train()
            out["size"] = trainer._train_batch_size
        else:
            from vramscope.integrations.transformers import largest_batch_size

            found = largest_batch_size(trainer, sizes=(2, 4, 8), steps=STEPS_PER_TRIAL)
            out.update(size=trainer.args.per_device_train_batch_size, predicted_peak_bytes=found.predicted_peak_bytes,
                       notes=found.notes)
    else:
        raise SystemExit("unknown finder %r; one of %s" % (a.finder, ", ".join(FINDERS)))
    torch.cuda.synchronize()
    out["wall_s"] = time.perf_counter() - start
    out["ooms"] = int(torch.cuda.memory_stats().get("num_ooms", 0))
    out["oom_exceptions_seen"] = seen["exceptions"]
    return out


def train(a):
    """`--check-steps` steps at `--size` in this fresh process."""
    import torch

    m = model_args(a)
    t0 = time.perf_counter()
    try:
        train_steps(torch, a.size, a.check_steps, m)
        ok, error = True, None
    except RuntimeError as e:
        ok, error = False, str(e).splitlines()[0][:300]
    torch.cuda.synchronize()
    return {"size": a.size, "steps": a.check_steps, "ok": ok, "error": error,
            "wall_s": time.perf_counter() - t0,
            "max_memory_reserved": torch.cuda.max_memory_reserved(), "num_ooms": torch.cuda.memory_stats().get("num_ooms", 0)}


def child(a, *args):
    command = [sys.executable, os.path.abspath(__file__)] + list(args) + [
        "--vocab", str(a.vocab), "--d", str(a.d), "--layers", str(a.layers), "--heads", str(a.heads),
        "--seq", str(a.seq), "--start", str(a.start), "--check-steps", str(a.check_steps), "--tmp", a.tmp,
    ]
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=a.timeout)
    try:
        return json.loads(done.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": "exit %d: %s" % (done.returncode, done.stderr.decode(errors="replace")[-2000:])}


def everything(a):
    import torch

    facts = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "model": model_args(a),
             "steps_per_trial": STEPS_PER_TRIAL, "check_steps": a.check_steps, "date": time.strftime("%Y-%m-%d")}
    for name in ("lightning", "accelerate", "transformers"):
        with contextlib.suppress(Exception):
            facts[name] = __import__(name).__version__
    rows, checked = [], {}
    for finder in a.finders.split(","):
        row = child(a, "find", finder)
        row.setdefault("finder", finder)
        size = row.get("size")
        if isinstance(size, int):
            # A size another finder picked was trained already, in a fresh
            # process of the same model: the same run, so it is not repeated.
            if size not in checked:
                checked[size] = (finder, child(a, "train", "--size", str(size)))
            first, check = checked[size]
            row["train_check"] = dict(check, **({"same_run_as": first} if first != finder else {}))
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
        if a.out:  # after every finder: a run cut short keeps what it finished
            with open(a.out, "w") as f:
                f.write(json.dumps({"facts": facts, "finders": rows}) + "\n")
    return {"facts": facts, "finders": rows}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("all", "find", "train"))
    p.add_argument("finder", nargs="?", default=None)
    p.add_argument("--finders", default=",".join(FINDERS))
    p.add_argument("--size", type=int)
    p.add_argument("--vocab", type=int, default=32768)
    p.add_argument("--d", type=int, default=1024)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--start", type=int, default=1024, help="accelerate's and transformers' starting size")
    p.add_argument("--check-steps", type=int, default=100)
    p.add_argument("--timeout", type=int, default=1200)
    p.add_argument("--tmp", default=os.path.join(tempfile.gettempdir(), "batch-finder-job"))
    p.add_argument("--out")
    a = p.parse_args()
    if a.what == "find":
        a.finder = a.finder or "vramscope"
        result = find(a)
    elif a.what == "train":
        result = train(a)
    else:
        result = everything(a)
    text = json.dumps(result)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
