"""Shared set-up of the package's tests: the fake torch first on sys.path,
its log and snapshot per test, the corpus snapshots, and the pytest plugin
for pytester runs when the package is not installed (run from the source
tree, the entry point does not exist).

The `vramscope` binary is the installed wheel's, else $VRAMSCOPE_BIN, else
one on PATH (see vramscope.find_binary)."""

import importlib.metadata
import json
import socket
import subprocess
import sys
import time
import types
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
FAKE_TORCH = HERE / "fake_torch"
sys.path.insert(0, str(FAKE_TORCH))
#: Real snapshots of the repository's corpus (the tests run from a checkout).
CORPUS = HERE.parent.parent / "tests" / "fixtures" / "corpus"
PREDICT_RUNS = HERE.parent.parent / "tests" / "fixtures" / "predict"

pytest_plugins = ["pytester"]


def plugin_installed():
    """True when the installed package's pytest11 entry point loads the plugin."""
    return any(ep.name == "vramscope" for ep in importlib.metadata.entry_points(group="pytest11"))


#: Arguments every pytester run needs: the plugin, when no entry point loads it.
PLUGIN_ARGS = [] if plugin_installed() else ["-p", "vramscope.pytest_plugin"]


@pytest.fixture
def torch_log(tmp_path, monkeypatch):
    """The fake torch's call log for this test (a file, read with .read_text())."""
    log = tmp_path / "torch.log"
    monkeypatch.setenv("FAKE_TORCH_LOG", str(log))
    monkeypatch.setenv("FAKE_TORCH_SNAPSHOT", str(CORPUS / "mlp_train_all.pickle"))
    monkeypatch.setenv("FAKE_TORCH_CUDA", "1")
    return log


def logged(log):
    """The fake torch's calls so far, one string each."""
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture(autouse=True)
def fresh_capture_state(monkeypatch):
    """Each test starts as a new process would: the capture module's probe
    not yet run, nothing said yet, no history recorded."""
    from vramscope import _capture

    monkeypatch.setattr(_capture, "_probed", None)
    monkeypatch.setattr(_capture, "_told", set())
    monkeypatch.setattr(_capture, "_history", {})


#: What the capture module's probe logs the first time a process records
#: with context "auto" (the history on for its length, its backward, off).
PROBE_LINES = ["record enabled=all max_entries=64 context=all annotations=global", "backward", "record stop"]


@pytest.fixture
def fake_cuda(torch_log):
    """torch.cuda's figures, reset for the test: set .reserved, .peak, .total, .fraction."""
    import torch

    torch.cuda._fake.reserved = 0
    torch.cuda._fake.peak = 0
    torch.cuda._fake.allocated = 0
    torch.cuda._fake.total = 80 << 30
    torch.cuda._fake.fraction = 1.0
    torch._C.observers.clear()
    torch.cuda.memory._recording = False
    yield torch.cuda._fake
    torch._C.observers.clear()


@pytest.fixture
def server(tmp_path):
    """A real `vramscope serve` on a free loopback port, with its own data folder."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = "http://127.0.0.1:%d" % port
    process = subprocess.Popen(
        [__import__("vramscope").find_binary(), "serve", "--bind", "127.0.0.1:%d" % port, "--data-dir", str(tmp_path / "data")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(300):  # until it answers (a readiness wait, not a timing)
            try:
                with urllib.request.urlopen(url + "/healthz") as answer:
                    if json.load(answer).get("status") == "ok":
                        break
            except OSError:
                time.sleep(0.05)
        else:
            pytest.fail("vramscope serve did not answer at %s" % url)
        yield url
    finally:
        process.terminate()
        process.wait()



def stored_snapshots(server):
    """The server's library: one dict per stored snapshot (id, job, rank, tags, trigger, ...)."""
    with urllib.request.urlopen(server + "/api/v1/snapshots") as listing:
        return json.load(listing)["items"]


@pytest.fixture
def stand_in_frameworks(monkeypatch):
    """Minimal `transformers` and `lightning.pytorch` modules: just the base
    classes the integrations subclass (test_callbacks, test_batch_integrations)."""
    transformers = types.ModuleType("transformers")
    transformers.TrainerCallback = type("TrainerCallback", (), {})
    lightning = types.ModuleType("lightning")
    lightning_pytorch = types.ModuleType("lightning.pytorch")
    lightning_pytorch.Callback = type("Callback", (), {})
    lightning.pytorch = lightning_pytorch
    for name, module in [("transformers", transformers), ("lightning", lightning), ("lightning.pytorch", lightning_pytorch)]:
        monkeypatch.setitem(sys.modules, name, module)
    for name in ("vramscope.integrations.transformers", "vramscope.integrations.lightning"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return transformers, lightning_pytorch
