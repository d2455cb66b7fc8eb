"""Issue 42's compatibility matrix: every capture path of vramscope against
the training set-ups people use, on a real GPU (run through the device tool;
the machine has no network, so the wheel is carried):

    python3 tests/gpu/compat_job.py --wheel target/wheels/vramscope-*.whl --out "$OUT" [--only NAME,...]

For each set-up (`SETUPS`) it runs the training job once without capture
(the baseline) and once under each capture mode that applies to it
(`MODES`), every run a fresh process with the same seed and deterministic
algorithms (`torch.use_deterministic_algorithms(True)`, with
CUBLAS_WORKSPACE_CONFIG set), one after another on the same GPU. A cell
passes when:

* the job finishes (exit code 0, as the baseline);
* its per-step losses are bit-identical to the baseline's (`float.hex`);
* the snapshot it wrote reads with `vramscope stats --json`, whose current
  counters (reserved, allocated, active, requested, inactive split,
  segments, OOMs; the reserved peak where the trace covers the whole run)
  equal `torch.cuda.memory_stats()` read at the same moment by the job;
  or, where the set-up keeps no history (cudaMallocAsync), no snapshot is
  written and the job was told why.

Each cell also carries the median step time with and without capture
(steps after the first `WARMUP`, each ended by `torch.cuda.synchronize()`)
and their ratio, and the lines vramscope said on stderr.

Results go to OUT/compat.json (committed under tests/gpu/results/, from
which `tests/gpu/compat_table.py` writes the README's table) and the tail
of every run's output to OUT/compat-logs.txt. `--device cpu` runs the same
jobs on the CPU (gloo instead of NCCL; nothing is recorded there), to try
this script without a GPU.

`--jobs N` runs N set-ups at a time (each set-up's own runs stay one after
another, so a baseline and its captures see alike neighbours).

    python3 tests/gpu/compat_job.py overhead --wheel ... --out "$OUT" [--only NAME,...]

is the overhead sweep: the median step time of a set-up unrecorded and
under each of PyTorch's own recording options (`HISTORY_VARIANTS`), one
run at a time, into OUT/overhead.json.

A run of the job itself: `compat_job.py cell --setup NAME --mode MODE
--result FILE`; under pytest (`MODES["pytest"]`), `test_cell` is the test.
"""

import argparse
import datetime
import json
import os
import pickle
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

#: Steps each job trains; the first WARMUP are left out of the median step
#: time (CUDA graphs and compilation happen there).
STEPS = int(os.environ.get("COMPAT_STEPS", "30"))
WARMUP = min(8, STEPS // 3)
#: Model widths are multiplied by this (smaller for a try on the CPU).
SCALE = float(os.environ.get("COMPAT_SCALE", "1"))

#: Capture modes, and the set-up families each applies to.
MODES = {
    "none": "no capture (the baseline)",
    "agent": "`vramscope agent -- python job.py`",
    "recorded_memory": "`with vramscope.recorded_memory(path):` around the training loop",
    "pytest": "`@pytest.mark.cuda_memory(...)` on a test that trains",
    "hf_callback": "`vramscope.integrations.transformers.VramscopeCallback`",
    "lightning_callback": "`vramscope.integrations.lightning.VramscopeCallback`",
}
FAMILY_MODES = {
    "loop": ["agent", "recorded_memory", "pytest"],
    "hf": ["agent", "hf_callback"],
    "lightning": ["agent", "lightning_callback"],
}

#: name -> (family, what it is, extra environment, options for the job), in
#: the order they run: the set-ups that broke, or that a capture could most
#: plausibly break, first (a run cut short keeps what it finished).
SETUPS = {
    "hf_checkpointing_nonreentrant": ("hf", "transformers Trainer, GPT-2, gradient checkpointing (use_reentrant=False)",
                                      {}, {"checkpointing": "nonreentrant"}),
    "checkpoint_loop": ("loop", "`torch.utils.checkpoint` (non-reentrant) in a plain loop", {},
                        {"checkpoint": True}),
    "hf_checkpointing_reentrant": ("hf", "transformers Trainer, GPT-2, gradient checkpointing (use_reentrant=True)",
                                   {}, {"checkpointing": "reentrant"}),
    "compile_cudagraphs": ("loop", "`torch.compile(model, mode=\"reduce-overhead\")` (CUDA graphs)", {},
                           {"compile": "reduce-overhead"}),
    "fsdp2": ("loop", "FSDP2 (`fully_shard`), world size 1, NCCL", {}, {"distributed": "fsdp2"}),
    "ddp": ("loop", "DistributedDataParallel, world size 1, NCCL", {}, {"distributed": "ddp"}),
    "hf_bf16": ("hf", "transformers Trainer, GPT-2, bf16 mixed precision", {}, {"bf16": True}),
    "hf_grad_accum": ("hf", "transformers Trainer, GPT-2, gradient accumulation over 4 micro-batches", {},
                      {"accumulate": 4}),
    "lightning_bf16": ("lightning", "Lightning Trainer, precision=\"bf16-mixed\"", {}, {}),
    "compile": ("loop", "`torch.compile(model)`", {}, {"compile": "default"}),
    "expandable_segments": ("loop", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                            {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, {}),
    "cudamallocasync": ("loop", "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync",
                        {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}, {"no_history": True}),
    "fused_adamw": ("loop", "AdamW(fused=True)", {}, {"optimizer": "fused"}),
    "foreach_adamw": ("loop", "AdamW(foreach=True)", {}, {"optimizer": "foreach"}),
    "activation_offload": ("loop", "activation offloading (`torch.autograd.graph.save_on_cpu(pin_memory=True)`)", {},
                           {"offload": True}),
    "dataloader_workers": ("loop", "DataLoader(num_workers=2, pin_memory=True)", {}, {"loader": True}),
}


# -- the job ----------------------------------------------------------------


def deterministic(torch, device):
    random.seed(0)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    if device == "cuda":
        torch.backends.cudnn.benchmark = False


class Recorder:
    """Per-step losses (kept on the GPU until the end) and step end times."""

    def __init__(self, torch, device):
        self.torch, self.device = torch, device
        self.losses, self.ends = [], []

    def step(self, loss):
        # A copy: under CUDA graphs the loss is an output the next replay overwrites.
        self.losses.append(loss.detach().float().clone())
        if self.device == "cuda":
            self.torch.cuda.synchronize()
        self.ends.append(time.perf_counter())

    def result(self):
        return {
            "losses": [float(l.item()).hex() for l in self.losses],
            "step_s": [b - a for a, b in zip(self.ends, self.ends[1:])],
        }


def counters(torch):
    """`memory_stats()` now, the figures `vramscope stats` recomputes."""
    if not torch.cuda.is_available():
        return {}
    s = torch.cuda.memory_stats()
    keys = {
        "reserved_bytes": "reserved_bytes.all.current",
        "allocated_bytes": "allocated_bytes.all.current",
        "active_bytes": "active_bytes.all.current",
        "requested_bytes": "requested_bytes.all.current",
        "inactive_split_bytes": "inactive_split_bytes.all.current",
        "segments": "segment.all.current",
        "ooms": "num_ooms",
        "reserved_peak_bytes": "reserved_bytes.all.peak",
    }
    return {ours: s.get(theirs) for ours, theirs in keys.items()}


KEPT = []  # what a pytest cell keeps alive until the plugin's snapshot


def loop_job(torch, device, options, record):
    """A small transformer-like MLP stack with dropout, trained by hand."""
    import contextlib

    nn = torch.nn
    width, depth, batch = int(1024 * SCALE), 6, 64
    distributed = options.get("distributed")
    if distributed:
        import torch.distributed as dist

        port = int(os.environ.get("COMPAT_PORT", "29511"))
        dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method="tcp://127.0.0.1:%d" % port,
                                rank=0, world_size=1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.up = nn.Linear(width, 4 * width)
            self.down = nn.Linear(4 * width, width)

        def forward(self, x):
            y = self.down(torch.nn.functional.dropout(torch.relu(self.up(self.norm(x))), 0.1, self.training))
            return x + y

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(Block() for _ in range(depth))
            self.head = nn.Linear(width, 10)

        def forward(self, x):
            for block in self.blocks:
                if options.get("checkpoint"):
                    x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
                else:
                    x = block(x)
            return self.head(x)

    model = Net().to(device)
    if distributed == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, device_ids=[0] if device == "cuda" else None)
    elif distributed == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
    if options.get("compile"):
        model = torch.compile(model, mode=None if options["compile"] == "default" else options["compile"])
    optimizer_kind = options.get("optimizer")
    kwargs = {"fused": True} if optimizer_kind == "fused" else {"foreach": True} if optimizer_kind == "foreach" else {}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, **kwargs)

    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(STEPS * batch, width, generator=generator)
    targets = torch.randint(0, 10, (STEPS * batch,), generator=generator)
    if options.get("loader"):
        data = torch.utils.data.TensorDataset(inputs, targets)
        batches = torch.utils.data.DataLoader(data, batch_size=batch, shuffle=True, num_workers=2, pin_memory=True,
                                              generator=torch.Generator().manual_seed(2))
    else:
        batches = [(inputs[i * batch:(i + 1) * batch], targets[i * batch:(i + 1) * batch]) for i in range(STEPS)]
    offload = (torch.autograd.graph.save_on_cpu(pin_memory=device == "cuda") if options.get("offload")
               else contextlib.nullcontext())
    for x, y in batches:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        if options.get("compile") == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()
        with offload:
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        record.step(loss)
    KEPT.extend([model, optimizer])
    if distributed:
        import torch.distributed as dist

        dist.destroy_process_group()


def hf_job(torch, device, options, record, callbacks):
    import transformers

    config = transformers.GPT2Config(vocab_size=4096, n_positions=256, n_embd=int(512 * SCALE), n_layer=6, n_head=8,
                                     bos_token_id=0, eos_token_id=0)
    config._attn_implementation = "eager"  # deterministic backward (SDPA's is not)
    model = transformers.GPT2LMHeadModel(config)
    accumulate = options.get("accumulate", 1)
    batch = 8
    generator = torch.Generator().manual_seed(1)
    seq = int(256 * SCALE)
    ids = torch.randint(0, 4096, (STEPS * accumulate * batch, seq), generator=generator)
    data = [{"input_ids": row, "labels": row} for row in ids]

    class Trainer(transformers.Trainer):
        def training_step(self, *args, **kwargs):
            loss = super().training_step(*args, **kwargs)
            self._vramscope_micro.append(loss.detach())
            return loss

    class StepEnd(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            micro = trainer._vramscope_micro
            record.step(torch.stack(micro).sum() if len(micro) > 1 else micro[0])
            micro.clear()

    checkpointing = options.get("checkpointing")
    args = transformers.TrainingArguments(
        output_dir=os.path.join(os.environ.get("COMPAT_TMP", tempfile.gettempdir()), "hf-out"),
        max_steps=STEPS,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=accumulate,
        bf16=bool(options.get("bf16")),
        gradient_checkpointing=checkpointing is not None,
        gradient_checkpointing_kwargs={"use_reentrant": checkpointing == "reentrant"} if checkpointing else None,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        seed=0,
        use_cpu=device == "cpu",
        dataloader_num_workers=0,
    )
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[StepEnd()] + callbacks)
    trainer._vramscope_micro = []
    trainer.train()
    KEPT.append(trainer)


def lightning_job(torch, device, options, record, callbacks):
    import lightning.pytorch as pl

    pl.seed_everything(0, verbose=False)
    width = int(1024 * SCALE)

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Dropout(0.1),
                torch.nn.Linear(4 * width, width), torch.nn.GELU(), torch.nn.Linear(width, 10),
            )

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    class StepEnd(pl.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            record.step(outputs["loss"])

    generator = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(STEPS * 64, width, generator=generator),
                                          torch.randint(0, 10, (STEPS * 64,), generator=generator))
    trainer = pl.Trainer(
        accelerator="gpu" if device == "cuda" else "cpu", devices=1, precision="bf16-mixed", max_steps=STEPS,
        deterministic=True, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[StepEnd()] + callbacks,
        default_root_dir=os.path.join(os.environ.get("COMPAT_TMP", tempfile.gettempdir()), "lightning"),
    )
    module = Module()
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=64))
    KEPT.append(module)


def run_cell(setup, mode, result_path, device, history=None):
    """One run of the job: trains, then takes (or lets the capture take) the
    snapshot and reads `memory_stats()` at the same moment. `history`
    (the overhead sweep, mode `none`): PyTorch's own recording started
    before training with these options, no vramscope code in the process."""
    import torch

    family, _, _, options = SETUPS[setup]
    deterministic(torch, device)
    record = Recorder(torch, device)
    out = {"setup": setup, "mode": mode}
    snapshot_dir = os.environ.get("COMPAT_SNAPSHOTS", tempfile.gettempdir())
    callbacks = []
    if mode == "hf_callback":
        from vramscope.integrations.transformers import VramscopeCallback

        callbacks = [VramscopeCallback(snapshot_dir=snapshot_dir, at_steps=[STEPS], threshold=None, job=setup)]
    elif mode == "lightning_callback":
        from vramscope.integrations.lightning import VramscopeCallback

        callbacks = [VramscopeCallback(snapshot_dir=snapshot_dir, at_steps=[STEPS], threshold=None, job=setup)]

    def train():
        if family == "loop":
            loop_job(torch, device, options, record)
        elif family == "hf":
            hf_job(torch, device, options, record, callbacks)
        else:
            lightning_job(torch, device, options, record, callbacks)

    if history is not None and device == "cuda":
        torch.cuda.init()
        torch.cuda.memory._record_memory_history(max_entries=100000, **history)
    if mode == "recorded_memory":
        import vramscope

        path = os.path.join(snapshot_dir, "%s.pickle" % setup)
        with vramscope.recorded_memory(path):
            train()
        out["memory_stats"] = counters(torch)
        out["snapshot"] = path if os.path.exists(path) else None
    else:
        train()
    if mode == "agent":
        import vramscope_capture

        if device == "cuda":
            torch.cuda.synchronize()
        out["manifest"] = vramscope_capture.capture_now("compat %s" % setup)
        out["memory_stats"] = counters(torch)
    elif mode in ("hf_callback", "lightning_callback"):
        written = callbacks[0].snapshots
        out["snapshot"] = written[-1]["path"] if written else None
        out["memory_stats"] = written[-1]["memory_stats"] if written else None
    elif mode == "pytest":
        # Read here, at the test's end; the plugin's snapshot follows with
        # nothing allocated or freed between: KEPT holds the model and the
        # losses (on the H100, the 20 losses freed as this returned made
        # the snapshot 10 KiB short of these counters).
        KEPT.append(record)
        out["memory_stats"] = counters(torch)
    out.update(record.result())
    with open(result_path, "w") as f:
        json.dump(out, f)


def test_cell():
    """The pytest mode's test: trains the set-up COMPAT_SETUP under the
    marker (a budget that always holds: the cell checks the recording)."""
    run_cell(os.environ["COMPAT_SETUP"], "pytest", os.environ["COMPAT_RESULT"], os.environ.get("COMPAT_DEVICE", "cuda"))


if "pytest" in sys.modules:  # collected by pytest: the marker the plugin records around
    test_cell = sys.modules["pytest"].mark.cuda_memory(max_reserved_peak="1TiB")(test_cell)


# -- the driver -------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`vramscope serve` on loopback over a fresh data folder (the agent's)."""

    def __init__(self, out):
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["vramscope", "serve", "--bind", "127.0.0.1:%d" % self.port, "--data-dir", os.path.join(out, "server")],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )
        line = self.proc.stdout.readline().decode().strip()
        assert line.startswith("vramscope listening on "), line
        self.url = line[len("vramscope listening on "):]

    def snapshot_file(self, job, dest):
        """The newest snapshot of `job`, downloaded to `dest`, or None."""
        with urllib.request.urlopen(self.url + "/api/v1/snapshots?job=%s&limit=10" % job, timeout=60) as r:
            items = json.load(r)["items"]
        if not items:
            return None
        with urllib.request.urlopen(self.url + "/api/v1/snapshots/%s/file" % items[0]["id"], timeout=120) as r:
            with open(dest, "wb") as f:
                f.write(r.read())
        return dest

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def launch(setup, mode, work, device, server, timeout_s, history=None, tag=None):
    """Runs one cell's process; returns (exit code, its result or None, its
    output). `history`: a name in HISTORY_VARIANTS (mode `none` only);
    `tag` names the run's files where mode and history do not."""
    _, _, extra_env, _ = SETUPS[setup]
    run = "%s-%s" % (setup, tag or history or mode)
    result_path = os.path.join(work, "%s.json" % run)
    snapshots = os.path.join(work, "%s-snapshots" % run)
    os.makedirs(snapshots, exist_ok=True)
    scratch = os.path.join(work, "%s-tmp" % run)  # the Trainers' output folders, one a run
    os.makedirs(scratch, exist_ok=True)
    env = dict(os.environ, CUBLAS_WORKSPACE_CONFIG=":4096:8", COMPAT_SNAPSHOTS=snapshots, COMPAT_TMP=scratch,
               COMPAT_PORT=str(free_port()), COMPAT_SETUP=setup, COMPAT_RESULT=result_path, COMPAT_DEVICE=device,
               PYTHONUNBUFFERED="1", **extra_env)
    job = [sys.executable, os.path.abspath(__file__), "cell", "--setup", setup, "--mode", mode, "--result",
           result_path, "--device", device] + (["--history", history] if history else [])
    if mode == "agent":
        command = ["vramscope", "agent", "--server", server.url, "--job", "compat-%s" % setup,
                   "--spool-dir", os.path.join(work, "spool"), "--drain-timeout", "60s", "--"] + job
    elif mode == "pytest":
        import importlib.metadata

        # The installed wheel's entry point loads the plugin; from a checkout, -p does.
        plugin = [] if any(ep.name == "vramscope" for ep in importlib.metadata.entry_points(group="pytest11")) else [
            "-p", "vramscope.pytest_plugin"]
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"] + plugin + [
            "--vramscope-dir", snapshots, "%s::test_cell" % os.path.abspath(__file__)]
    else:
        command = job
    started = time.monotonic()
    try:
        p = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s, cwd=work)
        code, output = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        code, output = "timeout", "timed out after %d s\n%s" % (timeout_s, (e.stdout or b"")[-2000:])
    result = None
    if os.path.exists(result_path):
        with open(result_path) as f:
            result = json.load(f)
        result["wall_s"] = round(time.monotonic() - started, 1)
        if mode == "agent" and result.get("manifest"):
            result["snapshot"] = server.snapshot_file("compat-%s" % setup, os.path.join(snapshots, "agent.pickle"))
        elif mode == "pytest" and os.path.exists(os.path.join(snapshots, "test_cell.pickle")):
            result["snapshot"] = os.path.join(snapshots, "test_cell.pickle")
    return code, result, output


def snapshot_check(result):
    """`vramscope stats --json` of the cell's snapshot against the job's
    `memory_stats()` at the same moment: (ok, what differed or why none)."""
    path = result.get("snapshot")
    if not path or not os.path.exists(path):
        return False, "no snapshot"
    p = subprocess.run(["vramscope", "stats", "--json", path], capture_output=True, text=True)
    if p.returncode != 0:
        return False, "vramscope stats failed: %s" % p.stderr.strip()[-300:]
    device = json.loads(p.stdout)["devices"][0]
    expected = result.get("memory_stats") or {}
    differ = []
    for key, value in expected.items():
        if value is None:
            continue
        if key == "reserved_peak_bytes" and (device.get("peak_is_window_only") or device.get("trace_wrapped")):
            continue  # the trace does not cover the whole run: its peak is the window's
        got = device.get(key)
        if key == "segments":  # PyTorch counts no expandable segment (they map pages, not cudaMalloc)
            got = got - device.get("expandable_segments", 0)
        if got != value:
            differ.append("%s: stats %s, memory_stats %s" % (key, got, value))
    return not differ, "; ".join(differ) or "equal (%s)" % ", ".join(sorted(k for k, v in expected.items() if v is not None))


def median_ms(result):
    times = (result or {}).get("step_s", [])[WARMUP:]
    return round(1000 * statistics.median(times), 3) if times else None


def evaluate(setup, mode, code, result, output, baseline):
    """The cell's verdict and figures."""
    said = [l for l in output.splitlines() if l.startswith(("vramscope", "vramscope_capture"))][:8]
    cell = {"mode": mode, "exit_code": code, "said": said, "wall_s": (result or {}).get("wall_s")}
    cell["finished"] = code == 0 and result is not None
    if baseline is not None and result is not None:
        cell["losses_identical"] = result["losses"] == baseline["losses"] and len(result["losses"]) > 0
        cell["steps"] = len(result["losses"])
        cell["median_step_ms"] = median_ms(result)
        base = median_ms(baseline)
        cell["baseline_median_step_ms"] = base
        cell["step_time_ratio"] = round(cell["median_step_ms"] / base, 3) if base and cell["median_step_ms"] else None
    if mode != "none" and result is not None:
        if SETUPS[setup][3].get("no_history"):
            cell["snapshot"] = "none, as expected: cudaMallocAsync keeps no allocator history"
            cell["snapshot_ok"] = not result.get("snapshot") and any("cudaMallocAsync" in l for l in said)
        else:
            cell["snapshot_ok"], cell["snapshot"] = snapshot_check(result)
    checks = [cell["finished"]]
    if mode != "none":
        checks += [cell.get("losses_identical", False), cell.get("snapshot_ok", False)]
    cell["pass"] = all(checks)
    return cell


def machine_facts():
    import torch

    facts = {
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "date": datetime.date.today().isoformat(),
        "steps": STEPS,
        "scale": SCALE,
        "warmup_steps": WARMUP,
    }
    for module in ("transformers", "lightning"):
        try:
            facts[module] = __import__(module).__version__
        except ImportError:
            facts[module] = None
    return facts


def work_folder(out):
    """Where the runs write (snapshots, Trainer output): beside OUT, not in
    it, so that OUT holds only what comes back from the GPU machine."""
    work = os.path.join(tempfile.gettempdir(), "compat-work-%s" % os.path.basename(os.path.abspath(out)))
    os.makedirs(work, exist_ok=True)
    return work


def run_setup(setup, work, args, server):
    """The baseline, then every mode of the set-up's family, one after
    another: (row of cells, [(run name, output)])."""
    family = SETUPS[setup][0]
    row, logs = {}, []
    code, baseline, output = launch(setup, "none", work, args.device, server, args.timeout)
    row["none"] = evaluate(setup, "none", code, baseline, output, None)
    logs.append(("%s none" % setup, output))
    for mode in FAMILY_MODES[family]:
        code, result, output = launch(setup, mode, work, args.device, server, args.timeout)
        row[mode] = evaluate(setup, mode, code, result, output, baseline)
        logs.append(("%s %s" % (setup, mode), output))
        print("%-32s %-20s %s" % (setup, mode, json.dumps({k: row[mode].get(k) for k in (
            "pass", "finished", "losses_identical", "step_time_ratio", "snapshot")})), flush=True)
    return row, logs


def driver(args):
    import concurrent.futures
    import threading

    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    work = work_folder(out)
    names = args.only.split(",") if args.only else list(SETUPS)
    facts = machine_facts()
    facts["setups_at_a_time"] = args.jobs
    server = Server(work)
    cells, logs = {}, {}
    lock = threading.Lock()

    def one(setup):
        row, lines = run_setup(setup, work, args, server)
        with lock:
            cells[setup] = {"family": SETUPS[setup][0], "what": SETUPS[setup][1], "modes": row}
            logs[setup] = lines
            # Written after every set-up, in SETUPS order: a run cut short keeps what it finished.
            ordered = {name: cells[name] for name in names if name in cells}
            with open(os.path.join(out, "compat.json"), "w") as f:
                json.dump({"facts": facts, "modes": MODES, "cells": ordered}, f, indent=1)
            with open(os.path.join(out, "compat-logs.txt"), "w") as f:
                for name in names:
                    for run, output in logs.get(name, []):
                        f.write("==== %s\n%s\n" % (run, output[-4000:]))

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for future in [pool.submit(one, setup) for setup in names]:
                future.result()
    finally:
        server.stop()
    failed = [(s, m) for s, c in cells.items() for m, cell in c["modes"].items() if not cell["pass"]]
    print("compat: %d cells, %d failed: %s" % (sum(len(c["modes"]) for c in cells.values()), len(failed), failed))
    return 1 if failed else 0


#: The overhead sweep's recording options, PyTorch's own
#: `_record_memory_history` started before training (no vramscope code):
#: what each choice of ours costs in step time.
HISTORY_VARIANTS = {
    "alloc-python-every-thread": {"context": "alloc", "stacks": "python", "global_record_annotations": True},
    "alloc-python": {"context": "alloc", "stacks": "python"},
    "all-python": {"context": "all", "stacks": "python"},
    "state-python": {"context": "state", "stacks": "python"},
    "no-stacks": {"context": None},
}


def overhead(args):
    """Median step time of each set-up unrecorded and under each of
    HISTORY_VARIANTS (one process a run, one run at a time, the baseline
    again last to see the drift): OUT/overhead.json."""
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    work = work_folder(out)
    names = args.only.split(",") if args.only else ["hf_checkpointing_reentrant", "checkpoint_loop"]
    results = {"facts": machine_facts(), "variants": HISTORY_VARIANTS, "setups": {}}
    for setup in names:
        row = {}
        for variant in ["none"] + list(HISTORY_VARIANTS) + ["none-again"]:
            history = None if variant.startswith("none") else variant
            code, result, output = launch(setup, "none", work, args.device, None, args.timeout, history=history,
                                          tag=variant)
            row[variant] = {"exit_code": code, "median_step_ms": median_ms(result),
                            "said": output.strip().splitlines()[-3:] if code else []}
            base = row["none"]["median_step_ms"]
            if base and row[variant]["median_step_ms"]:
                row[variant]["ratio"] = round(row[variant]["median_step_ms"] / base, 3)
            print("%-30s %-28s %s" % (setup, variant, json.dumps(row[variant])), flush=True)
        results["setups"][setup] = row
        with open(os.path.join(out, "overhead.json"), "w") as f:
            json.dump(results, f, indent=1)
    return 0


def installed(wheel, out, argv):
    """Installs the wheel into a site folder beside OUT (pip --target: the
    machine's torch lives in an environment of its own), puts its package
    and binary first on PYTHONPATH and PATH, and runs the driver there."""
    site = os.path.join(work_folder(out), "site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--force-reinstall",
                    "--quiet", "--target", site, wheel], check=True)
    env = dict(os.environ, PATH="%s:%s" % (os.path.join(site, "bin"), os.environ.get("PATH", "")),
               PYTHONPATH=os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH", "")) if p))
    env.pop("VRAMSCOPE_BIN", None)
    return subprocess.run([sys.executable, os.path.abspath(__file__)] + argv, env=env).returncode


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "cell":
        parser = argparse.ArgumentParser()
        parser.add_argument("cell")
        parser.add_argument("--setup", required=True, choices=sorted(SETUPS))
        parser.add_argument("--mode", required=True, choices=sorted(MODES))
        parser.add_argument("--result", required=True)
        parser.add_argument("--device", default="cuda")
        parser.add_argument("--history", choices=sorted(HISTORY_VARIANTS))
        a = parser.parse_args()
        run_cell(a.setup, a.mode, a.result, a.device, HISTORY_VARIANTS.get(a.history))
        return 0
    sweep = len(sys.argv) > 1 and sys.argv[1] == "overhead"
    if sweep:
        del sys.argv[1]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--wheel", help="install this wheel first (the GPU machine has no network)")
    parser.add_argument("--only", help="comma-separated set-ups (default: all)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--timeout", type=int, default=300, help="seconds one run may take")
    parser.add_argument("--jobs", type=int, default=1,
                        help="set-ups run at a time (each set-up's runs stay one after another)")
    args = parser.parse_args()
    if args.wheel:
        argv = (["overhead"] if sweep else []) + [a for a in sys.argv[1:]]
        i = argv.index("--wheel")
        del argv[i:i + 2]
        return installed(args.wheel, args.out, argv)
    unknown = [n for n in (args.only.split(",") if args.only else []) if n not in SETUPS]
    if unknown:
        parser.error("unknown set-up(s) %s; known: %s" % (", ".join(unknown), ", ".join(SETUPS)))
    return overhead(args) if sweep else driver(args)


if __name__ == "__main__":
    sys.exit(main())
