"""The Python package from its wheel on a real GPU, with real torch,
transformers and Lightning (run through the device tool; the machine has no
network, so the wheel is carried):

    python3 tests/gpu/python_package_job.py --wheel target/wheels/vramscope-*.whl --out "$OUT"

It installs the wheel without the network into OUT/site (`pip install
--target`: the machine's torch, transformers, lightning and pytest live in
a venv of their own), puts it first on PYTHONPATH and its binary first on
PATH, and re-runs itself there. Then:

1. install: `python -m vramscope --version` names the package's version
   and the wheel's binary.
2. marker: a pytest project with `@pytest.mark.cuda_memory`: the training
   step passes its budget and, with --vramscope-update-baselines, writes
   its baseline; the same step keeping its outputs (LEAK=1) fails growth
   against it, the message naming the rule and the leaking stack; a budget
   of 1 MiB fails naming --max-reserved-peak.
3. transformers: `VramscopeCallback` on a small GPT-2 (built from a config,
   no download) trained for 6 steps, `at_steps=[2, 5]` and a threshold set
   under what the model already holds: snapshots at steps 2 and 5 and one
   threshold snapshot at step 1, each with `vramscope_capture`, and the
   `record_function` ranges step1.. in `external_annotations`; `vramscope
   stats` reads each.
4. lightning: `VramscopeCallback` on a small MLP for 6 steps with
   `at_steps=[3]`, uploading to a `vramscope serve` started here on
   loopback: the step-3 snapshot stored with job, rank and tag step=3.
5. oom: a Lightning step that asks for more than the GPU has at step 4:
   an OOM snapshot labelled step 4 is written before the exception, and
   `vramscope stats` counts the OOM in it.

Verdicts go to OUT/summary.json (and stdout); exit code 1 when one failed.
"""

import argparse
import json
import os
import pathlib
import pickle
import subprocess
import sys
import time
import urllib.request

GiB = 1 << 30


def installed(wheel, out):
    """Installs the wheel into OUT/site (pip --target: the machine's torch
    lives in a venv of its own, which a new venv would not see), puts its
    package and its binary first on PYTHONPATH and PATH, and re-runs this
    file there."""
    site = out / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--force-reinstall", "--quiet",
         "--target", str(site), str(wheel)],
        check=True,
    )
    env = dict(
        os.environ,
        PATH="%s:%s" % (site / "bin", os.environ.get("PATH", "")),
        PYTHONPATH=os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p),
    )
    env.pop("VRAMSCOPE_BIN", None)
    return subprocess.run([sys.executable, __file__, "--inner", "--out", str(out)], env=env).returncode


def annotation_names(path):
    with open(path, "rb") as f:
        taken = pickle.load(f)
    return taken, [(a.get("name"), a.get("stage")) for a in taken.get("external_annotations", [])]


def stats(path):
    import vramscope

    return vramscope.stats(path)["devices"]


# -- 2. the pytest marker -----------------------------------------------------

TEST_FILE = '''
import os
import pytest
import torch

KEPT = []


def train_step():
    model = torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048)).cuda()
    opt = torch.optim.Adam(model.parameters())
    for _ in range(4):
        out = model(torch.randn(1024, 2048, device="cuda"))
        out.square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if os.environ.get("LEAK"):
            KEPT.append(out)  # keeps every step's output and its graph


@pytest.mark.cuda_memory(max_reserved_peak="{total}", baseline="train_step", max_growth=10)
def test_train_step():
    train_step()


@pytest.mark.cuda_memory(max_reserved_peak="1MiB")
def test_tiny_budget():
    train_step()
'''


def marker(out, total):
    project = out / "pytest-project"
    project.mkdir(exist_ok=True)
    (project / "test_memory.py").write_text(TEST_FILE.replace("{total}", str(total)))

    def pytest(*args, leak=False):
        env = dict(os.environ)
        if leak:
            env["LEAK"] = "1"
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(project), str(project), *args],
            cwd=project, env=env, capture_output=True, text=True,
        )
        return run.returncode, run.stdout + run.stderr

    code_base, log_base = pytest("-k", "train_step", "--vramscope-update-baselines", "--vramscope-dir", "snaps")
    code_same, log_same = pytest("-k", "train_step", "--vramscope-dir", "snaps")
    code_leak, log_leak = pytest("-k", "train_step", "--vramscope-dir", "snaps-leak", leak=True)
    code_tiny, log_tiny = pytest("-k", "tiny_budget", "--vramscope-dir", "snaps")
    (out / "pytest.log").write_text("\n\n".join([log_base, log_same, log_leak, log_tiny]))
    return {
        "marker_baseline_written": code_base == 0 and (project / "memory-baselines" / "train_step.pickle").is_file(),
        "marker_same_run_passes": code_same == 0,
        "marker_leak_fails_on_growth": code_leak == 1
        and "FAIL  --max-growth (requested peak)" in log_leak
        and "stacks that grew most against the baseline" in log_leak
        and "test_memory.py" in log_leak.split("stacks that grew most against the baseline", 1)[1],
        "marker_tiny_budget_fails": code_tiny == 1 and "FAIL  --max-reserved-peak" in log_tiny,
        "marker_snapshot_kept": (project / "snaps" / "test_train_step.pickle").is_file(),
    }


# -- 3. transformers ----------------------------------------------------------


def transformers_run(out):
    import torch
    import transformers
    from vramscope.integrations.transformers import VramscopeCallback

    config = transformers.GPT2Config(vocab_size=8000, n_positions=128, n_embd=256, n_layer=4, n_head=4)
    model = transformers.GPT2LMHeadModel(config)
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 8000, (96, 128))]
    args = transformers.TrainingArguments(
        output_dir=str(out / "hf-output"), max_steps=6, per_device_train_batch_size=8,
        report_to="none", save_strategy="no", logging_strategy="no", disable_tqdm=True,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
    # Under what the model already holds on the GPU: the first step's end crosses it.
    held = torch.cuda.memory_reserved(0)
    total = torch.cuda.mem_get_info(0)[1]
    threshold = max(held / total / 2, 1e-6)
    server, url = start_server(out, port=18932, name="hf-server")
    try:
        callback = VramscopeCallback(
            snapshot_dir=out / "hf", at_steps=[2, 5], threshold=threshold, job="hf-tiny", server=url
        )
        trainer.add_callback(callback)
        trainer.train()
        callback.flush_uploads(120)  # uploads run on a thread of their own
        stored = []
        if url is not None:
            with urllib.request.urlopen(url + "/api/v1/snapshots") as listing:
                stored = json.load(listing)["items"]
    finally:
        server.terminate()
        server.wait()
    written = [(s["trigger"], s["step"], s["rank"], s["job"]) for s in callback.snapshots]
    checks = {
        "hf_snapshots": written == [("threshold", 1, 0, "hf-tiny"), ("step", 2, 0, "hf-tiny"), ("step", 5, 0, "hf-tiny")],
        # Uploaded as written, each labelled with its job, rank and step.
        "hf_uploaded": sorted((s["job"], s["rank"], tuple(s["tags"])) for s in stored)
        == [("hf-tiny", 0, ("step=1",)), ("hf-tiny", 0, ("step=2",)), ("hf-tiny", 0, ("step=5",))],
    }
    step5 = out / "hf" / "hf-tiny-rank0-step5-step.pickle"
    if step5.is_file():
        taken, names = annotation_names(step5)
        checks["hf_capture_key"] = taken.get("vramscope_capture", {}).get("torch_version") == torch.__version__
        checks["hf_step_ranges"] = all((("step%d" % n, stage) in names) for n in (1, 2, 3, 4) for stage in ("START", "END"))
        checks["hf_stats_read"] = all(stats(pathlib.Path(s["path"]))[0]["trace_entries"] > 0 for s in callback.snapshots)
        # `vramscope stats` on each snapshot equals memory_stats() read at the
        # same moment (the callback keeps it beside its record).
        checks["hf_stats_equal_memory_stats"] = all(same_counters(s) for s in callback.snapshots)
    return checks, {"hf_snapshots": callback.snapshots, "hf_threshold": threshold}


# -- 4, 5. lightning --------------------------------------------------------------


def lightning_module(oom_at_step=None, oom_bytes=None):
    import lightning.pytorch as pl
    import torch

    class Mlp(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024))

        def training_step(self, batch, batch_idx):
            if oom_at_step is not None and self.trainer.global_step + 1 == oom_at_step:
                total = torch.cuda.get_device_properties(0).total_memory
                # More than the GPU has, or than the cap allows.
                torch.empty(oom_bytes or 2 * total, dtype=torch.uint8, device="cuda")
            (x,) = batch
            return self.net(x).square().mean()

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters())

    return Mlp()


def lightning_trainer(callback):
    import lightning.pytorch as pl
    import torch

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(512, 1024)), batch_size=64)
    trainer = pl.Trainer(
        accelerator="gpu", devices=1, max_steps=6, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, callbacks=[callback],
    )
    return trainer, data


def start_server(out, port=18931, name="server"):
    import vramscope

    server = subprocess.Popen(
        [vramscope.find_binary(), "serve", "--bind", "127.0.0.1:%d" % port, "--data-dir", str(out / (name + "-data"))],
        stdout=open(out / (name + ".log"), "w"), stderr=subprocess.STDOUT,
    )
    url = "http://127.0.0.1:%d" % port
    for _ in range(200):
        try:
            with urllib.request.urlopen(url + "/healthz"):
                return server, url
        except OSError:
            time.sleep(0.1)
    return server, None


def lightning_run(out):
    from vramscope.integrations.lightning import VramscopeCallback

    server, url = start_server(out)
    try:
        callback = VramscopeCallback(snapshot_dir=out / "lightning", at_steps=[3], threshold=None, server=url, job="mlp")
        trainer, data = lightning_trainer(callback)
        trainer.fit(lightning_module(), data)
        callback.flush_uploads(120)  # uploads run on a thread of their own
        written = [(s["trigger"], s["step"], s["rank"], s["job"]) for s in callback.snapshots]
        checks = {"lightning_snapshots": written == [("step", 3, 0, "mlp")], "lightning_server_up": url is not None}
        if url is not None:
            with urllib.request.urlopen(url + "/api/v1/snapshots") as listing:
                stored = json.load(listing)["items"]
            checks["lightning_uploaded"] = [(s["job"], s["rank"], s["tags"]) for s in stored] == [("mlp", 0, ["step=3"])]
        path = out / "lightning" / "mlp-rank0-step3-step.pickle"
        if path.is_file():
            _, names = annotation_names(path)
            checks["lightning_step_ranges"] = all((("step%d" % n, "END") in names) for n in (1, 2, 3))
        return checks, {"lightning_snapshots": callback.snapshots}
    finally:
        server.terminate()
        server.wait()


def same_counters(record):
    """`vramscope stats --json` of a callback's snapshot against the
    memory_stats() its callback read at the same moment."""
    device = stats(pathlib.Path(record["path"]))[0]
    want = record.get("memory_stats") or {}
    pairs = [("reserved_bytes", "reserved_bytes"), ("allocated_bytes", "allocated_bytes"),
             ("active_bytes", "active_bytes"), ("requested_bytes", "requested_bytes")]
    record["stats_vs_memory_stats"] = {k: (device.get(d), want.get(k)) for k, d in pairs}
    return bool(want) and all(device.get(d) == want.get(k) for k, d in pairs)


def capped_oom_run(out):
    """An OOM forced by a cap (set_per_process_memory_fraction): the
    callback's snapshot, read by `vramscope explain --json`, names it."""
    import torch
    from vramscope.integrations.lightning import VramscopeCallback

    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction((1 << 30) / total, 0)  # 1 GiB
    callback = VramscopeCallback(snapshot_dir=out / "capped", threshold=None, job="capped")
    trainer, data = lightning_trainer(callback)
    raised = None
    try:
        trainer.fit(lightning_module(oom_at_step=3, oom_bytes=2 << 30), data)
    except torch.cuda.OutOfMemoryError as e:
        raised = str(e).splitlines()[0]
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, 0)
    checks = {"capped_oom_raised": raised is not None}
    path = out / "capped" / "capped-rank0-step3-oom.pickle"
    explained = None
    if path.is_file():
        import vramscope

        run = subprocess.run([vramscope.find_binary(), "explain", "--json", str(path)], capture_output=True, text=True)
        explained = json.loads(run.stdout) if run.returncode == 0 else {"error": run.stderr}
        ooms = explained.get("ooms", [])
        checks["capped_oom_explained"] = len(ooms) >= 1 and ooms[0].get("limit") == "process_cap"
    return checks, {"capped_oom_error": raised, "capped_explain": explained}


def oom_run(out):
    import torch
    from vramscope.integrations.lightning import VramscopeCallback

    callback = VramscopeCallback(snapshot_dir=out / "oom", threshold=None, job="oom")
    trainer, data = lightning_trainer(callback)
    raised = None
    try:
        trainer.fit(lightning_module(oom_at_step=4), data)
    except torch.cuda.OutOfMemoryError as e:
        raised = str(e).splitlines()[0]
    written = [(s["trigger"], s["step"]) for s in callback.snapshots]
    checks = {"oom_raised": raised is not None, "oom_snapshot": written == [("oom", 4)]}
    path = out / "oom" / "oom-rank0-step4-oom.pickle"
    if path.is_file():
        checks["oom_in_trace"] = stats(path)[0]["ooms"] >= 1
    return checks, {"oom_snapshots": callback.snapshots, "oom_error": raised}


def inner(out):
    import torch
    import vramscope

    summary = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "checks": {}}
    checks = summary["checks"]
    version = subprocess.run([sys.executable, "-m", "vramscope", "--version"], capture_output=True, text=True)
    summary["version"] = version.stdout
    checks["version"] = version.returncode == 0 and "vramscope (Python package) %s" % vramscope.__version__ in version.stdout
    # The wheel installed into OUT/site (see `installed`): its binary is OUT/site/bin/vramscope.
    checks["binary_from_wheel"] = vramscope.find_binary() == str(out / "site" / "bin" / "vramscope")
    try:
        import transformers
        import lightning

        summary["transformers"] = transformers.__version__
        summary["lightning"] = lightning.__version__
    except ImportError as e:
        summary["missing"] = str(e)

    total = torch.cuda.get_device_properties(0).total_memory
    for name, part in [
        ("marker", lambda: (marker(out, total), {})),
        ("transformers", lambda: transformers_run(out)),
        ("lightning", lambda: lightning_run(out)),
        ("oom", lambda: oom_run(out)),
        ("capped_oom", lambda: capped_oom_run(out)),
    ]:
        try:
            part_checks, details = part()
            checks.update(part_checks)
            summary.update(details)
        except Exception as e:  # one part failing must not hide the others' verdicts
            import traceback

            checks[name + "_ran"] = False
            summary[name + "_error"] = traceback.format_exc()
            print("%s failed: %s" % (name, e), file=sys.stderr)
        torch.cuda.empty_cache()

    summary["passed"] = all(checks.values())
    text = json.dumps(summary, indent=1, default=str)
    (out / "summary.json").write_text(text)
    print(text)
    return 0 if summary["passed"] else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--wheel", help="the vramscope wheel to install (target/wheels/vramscope-*.whl)")
    p.add_argument("--out", required=True)
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.inner:
        return inner(out)
    if not a.wheel:
        p.error("--wheel is needed (or --inner inside a venv with the wheel installed)")
    return installed(pathlib.Path(a.wheel), out)


if __name__ == "__main__":
    sys.exit(main())
